#!/bin/sh
# Session 16, call 4 (one H200): t/attn-cudnn.t quick after the block
# backward's tiles read o' at the whole block's row stride (call E on two
# H200s found dq and dk of a tiled part wrong: its plan took o' rows of
# the tile's heads only).
set -u
cd "$(dirname "$0")" && . ./gpu-lib.sh && begin "$1"
GL_ATTN_CUDNN_QUICK=1 timeout 150 t/attn-cudnn.t > "$out/attn-cudnn.log" 2>&1
echo "attn-cudnn (quick): exit $? $(grep -c '^ok' "$out/attn-cudnn.log") ok, $(grep -c '^not ok' "$out/attn-cudnn.log") not ok $(el)"
grep -E '^not ok|tiles' "$out/attn-cudnn.log" | head
