#!/bin/sh
# Device call 6 of session 8 (2026-11-24), after the review's mends
# (pack4 in fp8.cu, fp8_args_check in gemm.cu): ops-cuda quick and the
# FP8 bench's checked products.
set -u
cd "$(dirname "$0")"
OUTD=$1
. .gpukit/env.sh
GL_OPS_CUDA_QUICK=1 timeout 200 t/ops-cuda.t > $OUTD/ops.txt 2>&1
echo "ops-cuda quick: exit $? $(grep -c '^ok' $OUTD/ops.txt) ok, $(grep -c '^not ok' $OUTD/ops.txt) not ok"
grep '^not ok' $OUTD/ops.txt | head
timeout 120 src/tools/gridlm-bench fp8 --device cuda --shapes 8192x3072x2048,1024x256x384 2>&1 | tee $OUTD/bench.txt
