#!/bin/sh
# Device call 2 of session 10 (2026-11-25), main 6eb528a: the GPU training
# steps against the CPU (t/train-cuda.t) with the experts' products on
# four streams and the parameter table indexed directly, then the
# 128-expert shape on 1 and 4 streams over 40 iterations (call 1's 24
# left the choice within the run-to-run spread).
set -u
cd "$(dirname "$0")"
OUTD=$1
out=/tmp/o; mkdir -p $out
. .gpukit/env.sh
. ./gpu-lib.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 400 t/train-cuda.t > "$out/tc.txt" 2>&1
echo "train-cuda: exit $?, $(grep -c '^ok' "$out/tc.txt") ok, $(grep -c '^not ok' "$out/tc.txt") not ok $(el)"
grep -E '^not ok' "$out/tc.txt" | head -8
grep -iE 'moe' "$out/tc.txt" | head -12
new=src/tools/gridlm-train
for l in 4 1 4 1; do
    GRIDLM_MOE_LANES=$l run $new moeB-l$l-$(el | tr -dc 0-9) 40 1 $moeB
done
cd $out && tar czf "$OUTD/logs.tgz" *.txt *.jsonl *.log 2>/dev/null
