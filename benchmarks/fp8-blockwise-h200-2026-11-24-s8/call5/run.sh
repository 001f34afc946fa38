#!/bin/sh
# Device call 5 of session 8 (2026-11-24): are FP8 runs repeatable bit for
# bit once attention runs gridlm's own deterministic kernels
# (GRIDLM_ATTENTION=native)?  Each recipe twice, and the MoE shape with
# FP8 experts twice; the logged losses and gradient norms compared.
set -u
cd "$(dirname "$0")"
OUTD=$1
out=/tmp/o; mkdir -p $out
. .gpukit/env.sh
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s]"; }
llama="--swiglu --normalization RMSNorm --position-embedding-type rope --disable-bias-linear --attention-dropout 0 --hidden-dropout 0"
s15="$llama --num-layers 16 --hidden-size 2048 --num-attention-heads 32 --num-query-groups 8 --ffn-hidden-size 8192 --vocab-size 128256 --seq-length 4096 --rotary-base 500000 --untie-embeddings-and-output-weights"
moeA="$llama --num-layers 8 --hidden-size 2048 --num-attention-heads 32 --num-query-groups 8 --ffn-hidden-size 5632 --vocab-size 128256 --seq-length 4096 --rotary-base 500000 --untie-embeddings-and-output-weights --num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 5632"
opt="--lr 3e-4 --weight-decay 0.1 --adam-beta2 0.95 --clip-grad 1.0 --mock-data --seed 1234 --eval-iters 0 --log-interval 1"
D="--fp8-format hybrid --fp8-recipe delayed --fp8-amax-history-len 1024 --fp8-amax-compute-algo max"
T="--fp8-format hybrid --fp8-recipe tensorwise"
B="--fp8-format hybrid --fp8-recipe blockwise"
pair() {  # name mbs flags...
    name=$1 mbs=$2; shift 2
    for k in 1 2; do
        GRIDLM_ATTENTION=native timeout 120 mpiexec -n 1 src/tools/gridlm-train --device cuda --bf16 "$@" $opt \
            --micro-batch-size $mbs --global-batch-size $mbs --train-iters 8 --log-json "$out/$name-$k.jsonl" > "$out/$name-$k.log" 2>&1
        echo "$name run $k: exit $? $(el)"
    done
    grep -o '"loss":[^,]*,"grad_norm":[^,]*' "$out/$name-1.jsonl" > /tmp/a
    grep -o '"loss":[^,]*,"grad_norm":[^,]*' "$out/$name-2.jsonl" > /tmp/b
    if [ -s /tmp/a ] && cmp -s /tmp/a /tmp/b; then echo "$name: identical ($(wc -l < /tmp/a) iterations)"; else echo "$name: DIFFER"; diff /tmp/a /tmp/b | head -4; fi
}
pair d15-bf16 2 $s15
pair d15-delayed 2 $s15 $D
pair d15-tensorwise 2 $s15 $T
pair d15-blockwise 2 $s15 $B
pair moeA-delayed 1 $moeA $D
cd $out && tar czf "$OUTD/logs.tgz" *.jsonl 2>/dev/null
