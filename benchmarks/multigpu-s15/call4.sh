#!/bin/sh
# Session 15, issue 19 on four H200s (nvidia-h200-x4), call 4, in the few
# minutes of device time left, most wanted first: the 1.5B shape at seq
# 131072 with CP=4 (p2p); DP=4 at the 1.5B shape (1 micro-batch a step,
# then 8); CP=4 against CP=1 (p2p, 4 layers, seq 8192); TP=4+SP at the 8B
# width; EP=4 at the 8-expert shape.
set -u
cd "$(dirname "$0")" && . ./gpu-lib.sh && begin "$1"
nvidia-smi topo -m | head -5
cp="$llama --num-layers 4 --hidden-size 2048 --num-attention-heads 32 --num-query-groups 8 --ffn-hidden-size 8192 --vocab-size 32000 --rotary-base 500000 --micro-batch-size 1 --global-batch-size 1"
MRUN_TIMEOUT=90 mrun s15-cp4-p2p-131072 4 6 $s15 --seq-length 131072 --max-position-embeddings 131072 \
    --micro-batch-size 1 --global-batch-size 1 --context-parallel-size 4 --cp-comm-type p2p
echo "s15-cp4-p2p-131072: $(grep -o "memory (GiB): [0-9.]*" "$out/s15-cp4-p2p-131072.log" | tail -1)"
MRUN_TIMEOUT=40 mrun s15-dp4 4 12 $s15 --micro-batch-size 2 --global-batch-size 8 \
    --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather
MRUN_TIMEOUT=40 mrun s15-dp4-ga8 4 6 $s15 --micro-batch-size 2 --global-batch-size 64 \
    --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather
MRUN_TIMEOUT=30 mrun cp1 1 20 $cp --seq-length 8192
MRUN_TIMEOUT=30 mrun cp4-p2p 4 20 $cp --seq-length 8192 --context-parallel-size 4 --cp-comm-type p2p
rel cp1 cp4-p2p
MRUN_TIMEOUT=40 mrun s8b-tp4 4 10 $s8b --micro-batch-size 1 --global-batch-size 1 \
    --tensor-model-parallel-size 4 --sequence-parallel
MRUN_TIMEOUT=40 mrun moeA-ep4 4 12 $moeA --micro-batch-size 1 --global-batch-size 4 --expert-model-parallel-size 4
cd "$out" && tar czf "$OUTD/logs.tgz" *
