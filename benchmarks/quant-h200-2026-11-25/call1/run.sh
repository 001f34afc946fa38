#!/bin/sh
# Device call 1 of session 11 (2026-11-25): the FP8 quantization kernels
# with all of a thread's loads in flight before its first store
# (cuda/fp8_tile.cuh).  ops-cuda quick (bit-exact against the CPU's
# emulation), gridlm-bench fp8's quantization rates, then the 1.5B and 8B
# shapes in FP8 delayed with the binaries before (old, ae3fc26) and after
# (new), and bf16, alternating.
set -u
cd "$(dirname "$0")"
OUTD=$1
out=$OUTD
. .gpukit/env.sh
. ./gpu-lib.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
GL_OPS_CUDA_QUICK=1 timeout 200 t/ops-cuda.t > "$out/ops.txt" 2>&1
echo "ops-cuda (quick): exit $?, $(grep -c '^ok' "$out/ops.txt") ok, $(grep -c '^not ok' "$out/ops.txt") not ok $(el)"
grep -A3 '^not ok' "$out/ops.txt" | head -20
for v in old new; do
    timeout 120 mpiexec -n 1 $v/gridlm-bench fp8 --device cuda > "$out/bench-$v.txt" 2>&1
    echo "bench fp8 $v: exit $? $(el)"
    cat "$out/bench-$v.txt" | tail -20
done
run old/gridlm-train d15-old 24 2 $s15 $D
run new/gridlm-train d15-new 24 2 $s15 $D
run new/gridlm-train d15-bf16 24 2 $s15
run old/gridlm-train d15-old2 24 2 $s15 $D
run new/gridlm-train d15-new2 24 2 $s15 $D
run old/gridlm-train 8b-old 24 1 $s8b $D
run new/gridlm-train 8b-new 24 1 $s8b $D
run new/gridlm-train 8b-bf16 24 1 $s8b
run new/gridlm-train d15-newT 24 2 $s15 $T
run new/gridlm-train d15-newB 24 2 $s15 $B
