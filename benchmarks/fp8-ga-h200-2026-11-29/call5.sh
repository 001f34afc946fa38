#!/bin/sh
# Session 16, call 5 (one H200): t/attn-cudnn.t quick after det_too_big
# became a plain report (det_tile decides) and the limit is read under
# --deterministic-mode only.
set -u
cd "$(dirname "$0")" && . ./gpu-lib.sh && begin "$1"
GL_ATTN_CUDNN_QUICK=1 timeout 150 t/attn-cudnn.t > "$out/attn-cudnn.log" 2>&1
echo "attn-cudnn (quick): exit $? $(grep -c '^ok' "$out/attn-cudnn.log") ok, $(grep -c '^not ok' "$out/attn-cudnn.log") not ok $(el)"
grep -E '^not ok|smallest tile' "$out/attn-cudnn.log" | head
