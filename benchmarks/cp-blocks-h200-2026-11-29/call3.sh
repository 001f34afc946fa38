#!/bin/sh
# Session 15, call 3 (one H200): t/ops-cuda.t quick after its ring
# assertion follows the cuDNN parts (every block through cuDNN).
set -u
cd "$(dirname "$0")" && . ./gpu-lib.sh && begin "$1"
GL_OPS_CUDA_QUICK=1 timeout 300 t/ops-cuda.t > "$out/ops-cuda.log" 2>&1
echo "ops-cuda quick: exit $? $(grep -c '^ok' "$out/ops-cuda.log") ok, $(grep -c '^not ok' "$out/ops-cuda.log") not ok $(el)"
grep -E '^not ok|blocks through cuDNN' "$out/ops-cuda.log" | head
