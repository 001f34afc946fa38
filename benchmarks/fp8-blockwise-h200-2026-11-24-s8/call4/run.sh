#!/bin/sh
# Device call 4 of session 8 (2026-11-24): the FP8 experts' products on
# bucketed plans (gemm_fp8_ragged): the op against the CPU (ops-cuda
# quick), the MoE shapes' speeds in bf16 and with FP8 experts, and the
# FP8 training checks against the CPU (t/train-cuda.t).
set -u
cd "$(dirname "$0")"
OUTD=$1
out=/tmp/o; mkdir -p $out
. .gpukit/env.sh
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s]"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
GL_OPS_CUDA_QUICK=1 timeout 200 t/ops-cuda.t > "$out/ops.txt" 2>&1
echo "ops-cuda quick: $(grep -c '^ok' "$out/ops.txt") ok, $(grep -c '^not ok' "$out/ops.txt") not ok $(el)"
grep -E '^not ok|ragged' "$out/ops.txt" | head -12
llama="--swiglu --normalization RMSNorm --position-embedding-type rope --disable-bias-linear --attention-dropout 0 --hidden-dropout 0"
moeA="$llama --num-layers 8 --hidden-size 2048 --num-attention-heads 32 --num-query-groups 8 --ffn-hidden-size 5632 --vocab-size 128256 --seq-length 4096 --rotary-base 500000 --untie-embeddings-and-output-weights --num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 5632"
moeB="$llama --num-layers 4 --hidden-size 2048 --num-attention-heads 32 --num-query-groups 4 --ffn-hidden-size 768 --vocab-size 128256 --seq-length 4096 --rotary-base 500000 --untie-embeddings-and-output-weights --num-experts 128 --moe-router-topk 8 --moe-ffn-hidden-size 768"
opt="--lr 3e-4 --weight-decay 0.1 --adam-beta2 0.95 --clip-grad 1.0 --mock-data --seed 1234 --eval-iters 0 --log-interval 1"
rate() {
    awk -F'[,:}]' '{for (i = 1; i < NF; i++) { if ($i ~ /"tokens_per_sec_per_gpu"/) t[NR] = $(i+1);
            if ($i ~ /"mfu"/) m[NR] = $(i+1); if ($i ~ /"loss"/) l[NR] = $(i+1) }}
        END {c = 0; for (k = 5; k <= NR; k++) if (k in t) {s += 1 / t[k]; u += m[k]; c++}
             if (c) printf "tokens/s=%.0f MFU=%.1f%% (%d timed) loss %s..%s\n",
                c / s, 100 * u / c, c, l[1], l[NR]; else print "no timed iterations"}' "$1"
}
run() {  # name iters mbs flags...
    name=$1 it=$2 mbs=$3; shift 3
    timeout 150 mpiexec -n 1 src/tools/gridlm-train --device cuda --bf16 "$@" $opt \
        --micro-batch-size $mbs --global-batch-size $mbs --train-iters $it --log-json "$out/$name.jsonl" > "$out/$name.log" 2>&1
    echo "$name: exit $? $(rate "$out/$name.jsonl") $(el)"
    grep -iE 'error|refus' "$out/$name.log" | head -3
}
D="--fp8-format hybrid --fp8-recipe delayed --fp8-amax-history-len 1024 --fp8-amax-compute-algo max"
run moeA-bf16 24 1 $moeA
run moeA-delayed 24 1 $moeA $D
run moeB-bf16 24 1 $moeB
run moeB-delayed 24 1 $moeB $D
GRIDLM_PROFILE=1 run prof-moeA-delayed 30 1 $moeA $D
grep -A14 "op profile" $out/prof-moeA-delayed.log | head -14
timeout $(( 580 - ($(date +%s) - t0) )) t/train-cuda.t > "$out/train-cuda.txt" 2>&1
echo "train-cuda: exit $?, $(grep -c '^ok' "$out/train-cuda.txt") ok, $(grep -c '^not ok' "$out/train-cuda.txt") not ok $(el)"
grep -E '^not ok|FP8|MoE' "$out/train-cuda.txt" | head -12
cd $out && tar czf "$OUTD/logs.tgz" *.txt *.jsonl *.log 2>/dev/null
