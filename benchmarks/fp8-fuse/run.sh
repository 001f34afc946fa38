#!/bin/sh
# One device call: the fused FP8 producers' GPU tests and the 1.5B timings,
# old (main's binary) against new, bf16 in the same call.  Run from a
# folder that holds .gpukit/ (shared/gpu/pack-runtime.sh), the new build's
# build-cuda/src/tools/gridlm-train, build-cuda/t/ops-cuda.t and fp8.t, and
# main's gridlm-train before the fusion as build-cuda/old-train:
#     sh run.sh OUTDIR [notest]
set -u
out=/tmp/o; mkdir -p $out; final=$1
cd "$(dirname "$0")"
. .gpukit/env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
[ "${2:-}" = notest ] || timeout 300 build-cuda/t/ops-cuda.t > "$out/ops-cuda.log" 2>&1
echo "ops-cuda: exit $? $(grep -c '^ok' "$out/ops-cuda.log") ok $(grep -c '^not ok' "$out/ops-cuda.log") not ok"
grep "^not ok" "$out/ops-cuda.log" | head -20
grep -E "fp8_fused|_fp8 " "$out/ops-cuda.log" | grep -c "^ok" | sed 's/^/fused-op checks ok: /'
timeout 60 build-cuda/t/fp8.t > "$out/fp8.log" 2>&1; echo "t/fp8.t: exit $?"
shape15="--swiglu --normalization RMSNorm --position-embedding-type rope --disable-bias-linear --attention-dropout 0 --hidden-dropout 0 --num-layers 16 --hidden-size 2048 --num-attention-heads 32 --num-query-groups 8
  --ffn-hidden-size 8192 --vocab-size 128256 --seq-length 4096 --rotary-base 500000
  --untie-embeddings-and-output-weights"
opt="--lr 3e-4 --weight-decay 0.1 --adam-beta2 0.95 --clip-grad 1.0 --mock-data --seed 1234 --eval-iters 0"
mean() { awk -F'[,:}]' '{for (i = 1; i < NF; i++) { if ($i ~ /"tokens_per_sec_per_gpu"/) t[NR] = $(i+1); if ($i ~ /"loss"/) l[NR] = $(i+1) }}
  END {n = 0; for (k = 5; k <= NR; k++) if (k in t) {s += 1 / t[k]; n++}
       if (n) printf "tokens/s/GPU=%.0f over %d iterations; loss at 1, 10, %d: %s %s %s\n", n / s, n, NR, l[1], l[10], l[NR]}' "$1"; }
D="--fp8-format hybrid --fp8-recipe delayed --fp8-amax-history-len 1024 --fp8-amax-compute-algo max"
for cfg in "bf16:new:" "delayed-old:old:$D" "delayed-new:new:$D" "tensorwise-new:new:--fp8-format hybrid --fp8-recipe tensorwise" "delayed-old2:old:$D" "delayed-new2:new:$D"; do
    name=${cfg%%:*} rest=${cfg#*:} which=${rest%%:*} flags=${rest#*:}
    bin=build-cuda/src/tools/gridlm-train
    [ "$which" = old ] && bin=build-cuda/old-train
    timeout 240 mpiexec -n 1 $bin --device cuda --bf16 $shape15 $opt \
        --micro-batch-size 2 --global-batch-size 2 --train-iters 24 --log-interval 1 $flags \
        --log-json "$out/$name.jsonl" > "$out/$name.log" 2>&1
    echo "$name: exit $? $(mean "$out/$name.jsonl")"
    grep -E "error|Error" "$out/$name.log" | head -3
done
GRIDLM_PROFILE=1 timeout 240 mpiexec -n 1 build-cuda/src/tools/gridlm-train --device cuda --bf16 $shape15 $opt \
    --micro-batch-size 2 --global-batch-size 2 --train-iters 6 --log-interval 1 $D > "$out/profile-new.log" 2>&1
grep -A40 "op profile" "$out/profile-new.log" | head -30
cp $out/ops-cuda.log $out/profile-new.log $out/delayed-old.jsonl $out/delayed-new.jsonl $out/bf16.jsonl $out/tensorwise-new.jsonl "$final/" 2>/dev/null
