#!/bin/sh
# Issue 19 on N linked H200s (N = 4 wanted; 2 works), session 16, call C:
# throughput beside the PyTorch peer in the same call.  The 1.5B shape:
# DP=N with the distributed optimizer and both overlaps (1 and 8
# micro-batches a step), bf16 and FP8 delayed, against the peer's DDP and
# FSDP2 (bf16, and torchao's tensorwise FP8 under FSDP2).  Llama-3-8B
# (32 layers, seq 8192): DP=N and TP=2 x DP=N/2, bf16 and FP8 delayed,
# against the peer's FSDP2.
#   callC.sh OUT   (from a staging folder holding src/tools/gridlm-train,
#                   gpu-lib.sh, .gpukit and .whl/torchao-*.whl)
set -u
cd "$(dirname "$0")" && . ./gpu-lib.sh && begin "$1"
N=$(nvidia-smi -L | wc -l)
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader | head -1
echo "$N GPUs"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
bin=src/tools/gridlm-train
dist="--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather"
l8b="$llama --num-layers 32 --hidden-size 4096 --num-attention-heads 32 --num-query-groups 8 --ffn-hidden-size 14336 --vocab-size 128256 --seq-length 8192 --max-position-embeddings 8192 --rotary-base 500000 --untie-embeddings-and-output-weights"
p15="--mbs 2"
p8b="--dim 4096 --layers 32 --heads 32 --kv-heads 8 --ffn 14336 --vocab 128256 --seq 8192 --mbs 1"

# 1. the 1.5B shape
MRUN_TIMEOUT=45 mrun s15-dp1 1 12 $s15 --micro-batch-size 2 --global-batch-size 2
MRUN_TIMEOUT=45 mrun s15-dp$N $N 12 $s15 --micro-batch-size 2 --global-batch-size $((2 * N)) $dist
MRUN_TIMEOUT=45 mrun s15-dp$N-D $N 12 $s15 $D --micro-batch-size 2 --global-batch-size $((2 * N)) $dist --fp8-param-gather
MRUN_TIMEOUT=45 mrun s15-dp$N-ga8 $N 6 $s15 --micro-batch-size 2 --global-batch-size $((16 * N)) $dist
tpeer peer15-ddp$N $N $p15
tpeer peer15-fsdp$N $N $p15 --fsdp
tpeer peer15-fsdp$N-fp8 $N $p15 --fsdp --fp8 tensorwise

# 2. Llama-3-8B, seq 8192
MRUN_TIMEOUT=90 mrun l8b-dp$N $N 8 $l8b --micro-batch-size 1 --global-batch-size $N $dist
MRUN_TIMEOUT=90 mrun l8b-tp2 $N 8 $l8b --micro-batch-size 1 --global-batch-size $((N / 2)) $dist \
    --tensor-model-parallel-size 2 --sequence-parallel
MRUN_TIMEOUT=90 mrun l8b-dp$N-D $N 8 $l8b $D --micro-batch-size 1 --global-batch-size $N $dist --fp8-param-gather
MRUN_TIMEOUT=90 mrun l8b-tp2-D $N 8 $l8b $D --micro-batch-size 1 --global-batch-size $((N / 2)) $dist \
    --fp8-param-gather --tensor-model-parallel-size 2 --sequence-parallel
for r in l8b-dp$N l8b-tp2 l8b-dp$N-D l8b-tp2-D; do
    echo "$r: $(grep -o "memory (GiB): [0-9.]*" "$out/$r.log" | tail -1)"
done
PEER_TIMEOUT=240 tpeer peer8b-fsdp$N $N $p8b --fsdp
PEER_TIMEOUT=240 tpeer peer8b-fsdp$N-fp8 $N $p8b --fsdp --fp8 tensorwise
cd "$out" && tar czf "$OUTD/logs.tgz" *
