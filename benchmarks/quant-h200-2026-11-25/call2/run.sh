#!/bin/sh
# Device call 2 of session 11 (2026-11-25), main 2b67329: the FP8 state's
# new gathered-weight tables (src/model/fp8.c) on CUDA.  ops-cuda quick,
# then dense and MoE training in FP8 (delayed, tensorwise) on one H200,
# the MoE shapes in bf16, and t/train-cuda.t.
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
new=src/tools/gridlm-train
run $new d15-D 16 2 $s15 $D
run $new d15-T 16 2 $s15 $T
run $new moeA-D 16 1 $moeA $D
run $new moeA-T 16 1 $moeA $T
run $new moeA 24 1 $moeA
run $new moeB 24 1 $moeB
timeout 400 t/train-cuda.t > "$out/train-cuda.txt" 2>&1
echo "train-cuda: exit $?, $(grep -c '^ok' "$out/train-cuda.txt") ok, $(grep -c '^not ok' "$out/train-cuda.txt") not ok $(el)"
grep -A3 '^not ok' "$out/train-cuda.txt" | head -20
cd $out && tar czf "$OUTD/logs.tgz" * && rm -rf "$out"
