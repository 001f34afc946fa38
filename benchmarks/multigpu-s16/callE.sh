#!/bin/sh
# Issue 19 on two linked H200s (nvidia-h200-x2, the kind lent at the
# time), session 16, call E, most wanted first: t/attn-cudnn.t quick
# (the deterministic backward's tiles, the test's corrected limit); issue
# 13's MoE shapes at EP=2 beside the PyTorch peer (DDP) with the same
# experts per GPU; Llama-3-8B (32 layers, seq 8192) at TP=2 + SP in bf16
# and FP8 delayed beside the peer's FSDP2.
set -u
cd "$(dirname "$0")" && . ./gpu-lib.sh && begin "$1"
N=$(nvidia-smi -L | wc -l)
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader | head -1
echo "$N GPUs"
GL_ATTN_CUDNN_QUICK=1 timeout 150 t/attn-cudnn.t > "$out/attn-cudnn.log" 2>&1
echo "attn-cudnn (quick): exit $? $(grep -c '^ok' "$out/attn-cudnn.log") ok, $(grep -c '^not ok' "$out/attn-cudnn.log") not ok $(el)"
grep -E '^not ok' "$out/attn-cudnn.log" | head
bin=src/tools/gridlm-train
pA="--dim 2048 --layers 8 --heads 32 --kv-heads 8 --ffn 5632 --vocab 128256 --seq 4096 --mbs 1 --topk 2 --moe-ffn 5632"
pB="--dim 2048 --layers 4 --heads 32 --kv-heads 4 --ffn 768 --vocab 128256 --seq 4096 --mbs 1 --topk 8 --moe-ffn 768"
MRUN_TIMEOUT=45 mrun moeA-ep$N $N 14 $moeA --micro-batch-size 1 --global-batch-size $N --expert-model-parallel-size $N
PEER_TIMEOUT=120 tpeer peerA-ddp$N-e$((8 / N)) $N $pA --experts $((8 / N))
MRUN_TIMEOUT=45 mrun moeB-ep$N $N 14 $moeB --micro-batch-size 1 --global-batch-size $N --expert-model-parallel-size $N
PEER_TIMEOUT=120 tpeer peerB-ddp$N-e$((128 / N)) $N $pB --experts $((128 / N))
dist="--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather"
l8b="$llama --num-layers 32 --hidden-size 4096 --num-attention-heads 32 --num-query-groups 8 --ffn-hidden-size 14336 --vocab-size 128256 --seq-length 8192 --max-position-embeddings 8192 --rotary-base 500000 --untie-embeddings-and-output-weights"
MRUN_TIMEOUT=80 mrun l8b-tp2 $N 7 $l8b --micro-batch-size 1 --global-batch-size $((N / 2)) $dist \
    --tensor-model-parallel-size 2 --sequence-parallel
MRUN_TIMEOUT=80 mrun l8b-tp2-D $N 7 $l8b $D --micro-batch-size 1 --global-batch-size $((N / 2)) $dist \
    --fp8-param-gather --tensor-model-parallel-size 2 --sequence-parallel
for r in l8b-tp2 l8b-tp2-D; do
    echo "$r: $(grep -o "memory (GiB): [0-9.]*" "$out/$r.log" | tail -1)"
done
PEER_TIMEOUT=150 tpeer peer8b-fsdp$N $N --dim 4096 --layers 32 --heads 32 --kv-heads 8 --ffn 14336 \
    --vocab 128256 --seq 8192 --mbs 1 --fsdp
cd "$out" && tar czf "$OUTD/logs.tgz" *
