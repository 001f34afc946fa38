#!/bin/sh
# Device call 2 of session 9 (2026-11-25): the GPU tests after AdamW's
# 16-byte path: ops-cuda quick (AdamW against the CPU, aligned and not)
# and train-cuda in full (call 1 ran out of time at its 17th check).
set -u
cd "$(dirname "$0")"
OUTD=$1
out=/tmp/o; mkdir -p $out
. .gpukit/env.sh
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s]"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
GL_OPS_CUDA_QUICK=1 timeout 200 t/ops-cuda.t > "$out/ops.txt" 2>&1
echo "ops-cuda (quick): exit $?, $(grep -c '^ok' "$out/ops.txt") ok, $(grep -c '^not ok' "$out/ops.txt") not ok $(el)"
grep -A3 '^not ok' "$out/ops.txt" | head -20
grep -E 'adamw' "$out/ops.txt" | head -16
timeout 500 t/train-cuda.t > "$out/tc.txt" 2>&1
echo "train-cuda: exit $?, $(grep -c '^ok' "$out/tc.txt") ok, $(grep -c '^not ok' "$out/tc.txt") not ok $(el)"
grep -E '^not ok|^ok 1[67]' "$out/tc.txt" | head -8
cd $out && tar czf "$OUTD/logs.tgz" *.txt 2>/dev/null
