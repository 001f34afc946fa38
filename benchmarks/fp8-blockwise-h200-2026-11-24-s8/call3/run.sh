#!/bin/sh
# Device call 3 of session 8 (2026-11-24): the 2000-iteration convergence
# runs of FP8 delayed and tensorwise on the H200 (blockwise and bf16 were
# call 1), and where the MoE step with FP8 experts spends its time.
set -u
cd "$(dirname "$0")"
OUTD=$1
out=/tmp/o; mkdir -p $out/conv
. .gpukit/env.sh
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s]"; }
llama="--swiglu --normalization RMSNorm --position-embedding-type rope --disable-bias-linear --attention-dropout 0 --hidden-dropout 0"
moeA="$llama --num-layers 8 --hidden-size 2048 --num-attention-heads 32 --num-query-groups 8 --ffn-hidden-size 5632 --vocab-size 128256 --seq-length 4096 --rotary-base 500000 --untie-embeddings-and-output-weights --num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 5632"
opt="--lr 3e-4 --weight-decay 0.1 --adam-beta2 0.95 --clip-grad 1.0 --mock-data --seed 1234 --eval-iters 0 --log-interval 1"
D="--fp8-format hybrid --fp8-recipe delayed --fp8-amax-history-len 1024 --fp8-amax-compute-algo max"
for f in "" "$D"; do
    n=bf16; [ -n "$f" ] && n=delayed
    GRIDLM_PROFILE=1 timeout 150 mpiexec -n 1 src/tools/gridlm-train --device cuda --bf16 $moeA $opt $f \
        --micro-batch-size 1 --global-batch-size 1 --train-iters 30 --log-json "$out/prof-moeA-$n.jsonl" > "$out/prof-moeA-$n.log" 2>&1
    echo "prof-moeA-$n: exit $? $(el)"
    grep -A24 "op profile" $out/prof-moeA-$n.log | head -24
done
timeout $(( 560 - ($(date +%s) - t0) )) sh conv.sh $out/conv fp8-delayed fp8-tensorwise
echo "conv done $(el)"
cd $out && tar czf "$OUTD/logs.tgz" *.jsonl *.log conv 2>/dev/null
