#!/bin/sh
# Device call 3 of session 14 (2026-11-29): --deterministic-mode as
# built (attention's backward on gridlm's kernels): t/attn-cudnn.t in
# full (its new deterministic case at S = 4096 among them) and
# t/ops-cuda.t quick (AdamW's one-group loop against the CPU); issue 13's
# 8-expert shape with --deterministic-mode twice (the bits must repeat)
# and without it; the 1.5B shape in bf16 and FP8 delayed.
#   run.sh OUT   (from the staging folder: src/tools/gridlm-train;
#                 t/ops-cuda.t, t/attn-cudnn.t; gpu-lib.sh; .gpukit)
set -u
cd "$(dirname "$0")"
OUTD=$1
out=$OUTD/logs; mkdir -p "$out"
. .gpukit/env.sh
. ./gpu-lib.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
GL_OPS_CUDA_QUICK=1 timeout 120 t/ops-cuda.t > "$out/ops.txt" 2>&1
echo "ops-cuda (quick): exit $?, $(grep -c '^ok' "$out/ops.txt") ok, $(grep -c '^not ok' "$out/ops.txt") not ok $(el)"
grep '^not ok' "$out/ops.txt" | head -5
grep -i 'adamw' "$out/ops.txt" | head -4
timeout 200 t/attn-cudnn.t > "$out/attn.txt" 2>&1
echo "attn-cudnn: exit $?, $(grep -c '^ok' "$out/attn.txt") ok, $(grep -c '^not ok' "$out/attn.txt") not ok $(el)"
grep '^not ok' "$out/attn.txt" | head -5
grep -iE 'determin' "$out/attn.txt"
new=src/tools/gridlm-train
run $new det-mode1 12 1 $moeA --deterministic-mode
run $new det-mode2 12 1 $moeA --deterministic-mode
run $new moeA 12 1 $moeA
same det-mode1 det-mode2
grep -h -E '^attention|NCCL' "$out/det-mode1.log" | head -3
run $new s15 16 2 $s15
run $new s15-D 16 2 $s15 $D
run $new s15-det 16 2 $s15 --deterministic-mode
cd "$out" && tar czf "$OUTD/logs.tgz" *
