#!/bin/sh
# Device call 6 of session 11 (2026-11-25): the quantization kernels'
# transposed output written by pairs of threads, a whole 32-byte sector
# a column (cuda/fp8_tile.cuh, branch wip-qt-pairs), against c044b55 (old).
# ops-cuda quick (bit-exact against the CPU's emulation), gridlm-bench
# fp8's quantization rates, the 1.5B and 8B shapes in FP8 delayed,
# alternating old and new.
set -u
cd "$(dirname "$0")"
OUTD=$1
out=$OUTD/logs; mkdir -p $out
. .gpukit/env.sh
. ./gpu-lib.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
GL_OPS_CUDA_QUICK=1 timeout 200 t/ops-cuda.t > "$out/ops.txt" 2>&1
echo "ops-cuda (quick): exit $?, $(grep -c '^ok' "$out/ops.txt") ok, $(grep -c '^not ok' "$out/ops.txt") not ok $(el)"
grep -A3 '^not ok' "$out/ops.txt" | head -20
for v in old new; do
    timeout 120 mpiexec -n 1 $v/gridlm-bench fp8 --device cuda > "$out/bench-$v.txt" 2>&1
    echo "bench fp8 $v: exit $? $(el)"
    tail -5 "$out/bench-$v.txt"
done
for i in 1 2; do
    run old/gridlm-train d15-old$i 24 2 $s15 $D
    run new/gridlm-train d15-new$i 24 2 $s15 $D
done
run old/gridlm-train 8b-old 24 1 $s8b $D
run new/gridlm-train 8b-new 24 1 $s8b $D
run new/gridlm-train d15-bf16 24 2 $s15
cd $out && tar czf "$OUTD/logs.tgz" * && cd .. && rm -rf "$out"
