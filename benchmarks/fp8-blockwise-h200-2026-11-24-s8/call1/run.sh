#!/bin/sh
# Device call 1 of session 8 (2026-11-24): the fast block-scaling
# quantization kernel against the CPU (ops-cuda quick), profiles of the
# blockwise 1.5B step and the FP8-expert MoE step, speeds, and the
# 2000-iteration blockwise convergence run.
set -u
cd "$(dirname "$0")"
OUTD=$1
out=/tmp/o; mkdir -p $out
. .gpukit/env.sh
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s]"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
GL_OPS_CUDA_QUICK=1 timeout 200 t/ops-cuda.t > "$out/ops.txt" 2>&1
okc=$(grep -c '^ok' "$out/ops.txt"); bad=$(grep -c '^not ok' "$out/ops.txt")
echo "ops-cuda quick: $okc ok, $bad not ok $(el)"
grep -E '^not ok' "$out/ops.txt" | head; grep -E 'quantize_tiles' "$out/ops.txt" | head -4
llama="--swiglu --normalization RMSNorm --position-embedding-type rope --disable-bias-linear --attention-dropout 0 --hidden-dropout 0"
moeA="$llama --num-layers 8 --hidden-size 2048 --num-attention-heads 32 --num-query-groups 8 --ffn-hidden-size 5632 --vocab-size 128256 --seq-length 4096 --rotary-base 500000 --untie-embeddings-and-output-weights --num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 5632"
s15="$llama --num-layers 16 --hidden-size 2048 --num-attention-heads 32 --num-query-groups 8 --ffn-hidden-size 8192 --vocab-size 128256 --seq-length 4096 --rotary-base 500000 --untie-embeddings-and-output-weights"
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
B="--fp8-format hybrid --fp8-recipe blockwise"
D="--fp8-format hybrid --fp8-recipe delayed --fp8-amax-history-len 1024 --fp8-amax-compute-algo max"
run d15-bf16 20 2 $s15
run d15-blockwise 20 2 $s15 $B
GRIDLM_PROFILE=1 run prof-d15-blockwise 6 2 $s15 $B
grep -A40 "op profile" $out/prof-d15-blockwise.log | head -40
GRIDLM_PROFILE=1 run prof-moeA-delayed 6 1 $moeA $D
grep -A40 "op profile" $out/prof-moeA-delayed.log | head -40
if [ "$bad" = 0 ] && [ "$okc" -gt 0 ]; then
    mkdir -p $out/conv
    timeout $(( 560 - ($(date +%s) - t0) )) sh conv.sh $out/conv fp8-blockwise bf16
    echo "conv done $(el)"
fi
cd $out && tar czf "$OUTD/logs.tgz" *.txt *.jsonl *.log conv 2>/dev/null
