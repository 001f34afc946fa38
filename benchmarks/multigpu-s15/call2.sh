#!/bin/sh
# Session 15, issue 19 on two H200s, call 2: the runs of callA.sh and
# callB.sh that call 1 lost to a name clash (gpu-lib.sh's timeout
# variable T was also its tensorwise FP8 flag set): CP=2 against CP=1 at
# seq 8192 for each comm type, the profiled 32k p2p run, DP=2 and TP=2+SP.
set -u
cd "$(dirname "$0")" && . ./gpu-lib.sh && begin "$1"
N=2
bin=src/tools/gridlm-train
cp="$llama --num-layers 4 --hidden-size 2048 --num-attention-heads 32 --num-query-groups 8 --ffn-hidden-size 8192 --vocab-size 32000 --rotary-base 500000 --micro-batch-size 1 --global-batch-size 1"
mrun cp1 1 20 $cp --seq-length 8192
mrun cp1b 1 20 $cp --seq-length 8192
rel cp1 cp1b
for t in p2p all_gather a2a; do
    mrun cp$N-$t $N 20 $cp --seq-length 8192 --context-parallel-size $N --cp-comm-type $t
    rel cp1 cp$N-$t
done
mrun cp$N-p2p-det $N 20 $cp --seq-length 8192 --context-parallel-size $N --cp-comm-type p2p --deterministic-mode
mrun cp1-det 1 20 $cp --seq-length 8192 --deterministic-mode
rel cp1-det cp$N-p2p-det
export GRIDLM_PROFILE=1
mrun s15-cp$N-p2p-prof $N 6 $s15 --seq-length 32768 --max-position-embeddings 32768 \
    --micro-batch-size 1 --global-batch-size 1 --context-parallel-size $N --cp-comm-type p2p
unset GRIDLM_PROFILE
grep -iE "attn|ring|p2p|send|recv|wait|total" "$out/s15-cp$N-p2p-prof.log" | head -16
mrun s15-dp1 1 14 $s15 --micro-batch-size 2 --global-batch-size 2
mrun s15-dp$N $N 14 $s15 --micro-batch-size 2 --global-batch-size $((2 * N)) \
    --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather
mrun s15-dp$N-ga8 $N 6 $s15 --micro-batch-size 2 --global-batch-size $((16 * N)) \
    --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather
mrun s8b-tp1 1 10 $s8b --micro-batch-size 1 --global-batch-size 1
mrun s8b-tp$N $N 10 $s8b --micro-batch-size 1 --global-batch-size 1 \
    --tensor-model-parallel-size $N --sequence-parallel
cd "$out" && tar czf "$OUTD/logs.tgz" *
