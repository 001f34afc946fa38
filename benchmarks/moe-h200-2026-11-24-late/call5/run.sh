#!/bin/sh
# Device call 5 of 2026-11-24 late evening (main with h-fp8pg, the cuDNN
# block backward's dq from its bf16 output): the GPU tests.
set -u
cd "$(dirname "$0")"
OUTD=$1
out=/tmp/o; mkdir -p $out
. .gpukit/env.sh
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s]"; }
timeout 300 t/ops-cuda.t > "$out/ops.txt" 2>&1
echo "ops-cuda (full): exit $?, $(grep -c '^ok' "$out/ops.txt") ok, $(grep -c '^not ok' "$out/ops.txt") not ok $(el)"
grep -A3 '^not ok' "$out/ops.txt" | head -30
grep -E 'fp8_transpose|cuDNN diagonals' "$out/ops.txt" | head -10
timeout 240 t/attn-cudnn.t > "$out/attn.txt" 2>&1
echo "attn-cudnn: exit $?, $(grep -c '^ok' "$out/attn.txt") ok, $(grep -c '^not ok' "$out/attn.txt") not ok $(el)"
grep -A3 '^not ok' "$out/attn.txt" | head -30
grep -iE 'block|delta' "$out/attn.txt" | grep -vE '^ok' | head -10
timeout 200 t/train-cuda.t > "$out/tc.txt" 2>&1
echo "train-cuda: exit $?, $(grep -c '^ok' "$out/tc.txt") ok, $(grep -c '^not ok' "$out/tc.txt") not ok $(el)"
grep -E '^not ok' "$out/tc.txt" | head -8
cd $out && tar czf "$OUTD/logs.tgz" *.txt 2>/dev/null
