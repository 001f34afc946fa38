#!/bin/sh
# Device call 6 of session 14 (2026-11-29): the final test build (t:
# free_bufs, rand_qkv): t/ops-cuda.t quick and t/attn-cudnn.t in full;
# --deterministic-mode at issue 13's 8-expert shape once more, twice.
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
timeout 200 t/attn-cudnn.t > "$out/attn.txt" 2>&1
echo "attn-cudnn: exit $?, $(grep -c '^ok' "$out/attn.txt") ok, $(grep -c '^not ok' "$out/attn.txt") not ok $(el)"
grep '^not ok' "$out/attn.txt" | head -5
grep -iE 'determin' "$out/attn.txt"
new=src/tools/gridlm-train
run $new det1 8 1 $moeA --deterministic-mode
run $new det2 8 1 $moeA --deterministic-mode
same det1 det2
cd "$out" && tar czf "$OUTD/logs.tgz" *
