#!/bin/sh
# Issue 19 on N linked H200s (N = 4 wanted; 2 works), session 16, call D:
# CP=N against CP=1 with all_gather and a2a (session 15 ran p2p at 4), and
# issue 13's MoE shapes at EP=N beside the PyTorch peer (DDP) with the
# same experts per GPU (E/N each; the peer has no expert parallelism) and
# with all E; the all-to-all's GPU time per step from CUPTI (rank by rank,
# benchmarks/gpu-trace.c: NCCL's SendRecv kernels, waits included).
#   callD.sh OUT   (staging as callC.sh, plus gpu-trace.so and lib/libcupti)
set -u
cd "$(dirname "$0")" && . ./gpu-lib.sh && begin "$1"
N=$(nvidia-smi -L | wc -l)
echo "$N GPUs"
bin=src/tools/gridlm-train

# 1. CP=N against CP=1, all_gather and a2a
cp="$llama --num-layers 4 --hidden-size 2048 --num-attention-heads 32 --num-query-groups 8 --ffn-hidden-size 8192 --vocab-size 32000 --rotary-base 500000 --micro-batch-size 1 --global-batch-size 1"
MRUN_TIMEOUT=30 mrun cp1 1 20 $cp --seq-length 8192
for t in all_gather a2a; do
    MRUN_TIMEOUT=30 mrun cp$N-$t $N 20 $cp --seq-length 8192 --context-parallel-size $N --cp-comm-type $t
    rel cp1 cp$N-$t
done

# 2. MoE at EP=N (one micro-batch a rank a step) beside the peer
pA="--dim 2048 --layers 8 --heads 32 --kv-heads 8 --ffn 5632 --vocab 128256 --seq 4096 --mbs 1 --topk 2 --moe-ffn 5632"
pB="--dim 2048 --layers 4 --heads 32 --kv-heads 4 --ffn 768 --vocab 128256 --seq 4096 --mbs 1 --topk 8 --moe-ffn 768"
MRUN_TIMEOUT=45 mrun moeA-ep$N $N 12 $moeA --micro-batch-size 1 --global-batch-size $N --expert-model-parallel-size $N
tpeer peerA-ddp$N-e$((8 / N)) $N $pA --experts $((8 / N))
tpeer peerA-ddp$N-e8 $N $pA --experts 8
MRUN_TIMEOUT=45 mrun moeB-ep$N $N 12 $moeB --micro-batch-size 1 --global-batch-size $N --expert-model-parallel-size $N
tpeer peerB-ddp$N-e$((128 / N)) $N $pB --experts $((128 / N))
tpeer peerB-ddp$N-e128 $N $pB --experts 128

# 3. the all-to-all's kernels, rank by rank (last 300 ms of a run)
export LD_LIBRARY_PATH=$PWD/lib:${LD_LIBRARY_PATH:-}
CUDA_INJECTION64_PATH=$PWD/gpu-trace.so GPU_TRACE_LAST_MS=300 GPU_TRACE_TOP=12 MRUN_TIMEOUT=60 \
    mrun moeA-ep$N-trace $N 12 $moeA --micro-batch-size 1 --global-batch-size $N --expert-model-parallel-size $N
grep -E "gpu-trace: window|SendRecv|AllReduce|ReduceScatter|AllGather|Broadcast|Reduce" "$out/moeA-ep$N-trace.log" | head -24
cd "$out" && tar czf "$OUTD/logs.tgz" *
