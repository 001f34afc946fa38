#!/bin/sh
# Issue 19 on N linked H200s (N = 2 or 4), session 15, call A: context
# parallelism with the ring's blocks on cuDNN (gl_attn_block_split):
# CP=N against CP=1 (losses, each comm type) and the 1.5B shape at long
# sequences (callB.sh: data and tensor parallelism, the watchdog).
# Every run has its own timeout; the logs go to OUT/logs.
#   callA.sh OUT   (from a staging folder holding src/tools/gridlm-train,
#                   gpu-lib.sh and .gpukit)
set -u
cd "$(dirname "$0")" && . ./gpu-lib.sh && begin "$1"
N=$(nvidia-smi -L | wc -l)
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader | head -1
echo "$N GPUs"; nvidia-smi topo -m | head -$((N + 1))
bin=src/tools/gridlm-train
mem() { echo "$1: $(grep -o "memory (GiB): [0-9.]*" "$out/$1.log" | tail -1)"; }

# 1. CP: CP=N against CP=1 at seq 8192 (4 layers of the 1.5B shape), each comm type
cp="$llama --num-layers 4 --hidden-size 2048 --num-attention-heads 32 --num-query-groups 8 --ffn-hidden-size 8192 --vocab-size 32000 --rotary-base 500000 --micro-batch-size 1 --global-batch-size 1"
mrun cp1 1 20 $cp --seq-length 8192
mrun cp1b 1 20 $cp --seq-length 8192
rel cp1 cp1b
for t in p2p all_gather a2a; do
    mrun cp$N-$t $N 20 $cp --seq-length 8192 --context-parallel-size $N --cp-comm-type $t
    rel cp1 cp$N-$t
done
# the 1.5B shape at long sequences, CP=N p2p and a2a
lens="32768 65536"; [ $N -ge 4 ] && lens="$lens 131072"
for s in $lens; do
    for t in p2p a2a; do
        MRUN_TIMEOUT=150 mrun s15-cp$N-$t-$s $N 7 $s15 --seq-length $s --max-position-embeddings $s \
            --micro-batch-size 1 --global-batch-size 1 --context-parallel-size $N --cp-comm-type $t
        mem s15-cp$N-$t-$s
    done
done
export GRIDLM_PROFILE=1
mrun s15-cp$N-p2p-prof $N 6 $s15 --seq-length 32768 --max-position-embeddings 32768 \
    --micro-batch-size 1 --global-batch-size 1 --context-parallel-size $N --cp-comm-type p2p
unset GRIDLM_PROFILE
grep -iE "attn|ring|p2p|wait|total" "$out/s15-cp$N-p2p-prof.log" | head -16

cd "$out" && tar czf "$OUTD/logs.tgz" *
