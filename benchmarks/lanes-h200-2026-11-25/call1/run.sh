#!/bin/sh
# Device call 1 of session 10 (2026-11-25): the experts' products on
# several streams (GRIDLM_MOE_LANES, cuda/moe.cu).  ops-cuda quick (the
# lanes test) and its MoE timings, then MoE A and B training with 1, 2
# and 4 lanes beside the PyTorch peer.
set -u
cd "$(dirname "$0")"
OUTD=$1
out=/tmp/o; mkdir -p $out
. .gpukit/env.sh
. ./gpu-lib.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
GL_OPS_CUDA_QUICK=1 timeout 240 t/ops-cuda.t > "$out/ops.txt" 2>&1
echo "ops-cuda (quick): exit $?, $(grep -c '^ok' "$out/ops.txt") ok, $(grep -c '^not ok' "$out/ops.txt") not ok $(el)"
grep -A3 '^not ok' "$out/ops.txt" | head -20
grep -E 'streams' "$out/ops.txt" | head -8
GL_OPS_CUDA_QUICK=1 GL_OPS_CUDA_BENCH=1 timeout 200 t/ops-cuda.t > "$out/bench.txt" 2>&1
echo "ops-cuda bench: exit $? $(el)"
grep -A2 -E 'bench moe|bench adamw' "$out/bench.txt" | grep -v '^ok' | head -60
new=src/tools/gridlm-train
for l in 1 4 2; do
    GRIDLM_MOE_LANES=$l run $new moeA-l$l 24 1 $moeA
done
for l in 1 4; do
    GRIDLM_MOE_LANES=$l run $new moeB-l$l 24 1 $moeB
done
peer peerA --layers 8 --heads 32 --kv-heads 8 --ffn 5632 --mbs 1 --experts 8 --topk 2 --moe-ffn 5632
peer peerB --layers 4 --heads 32 --kv-heads 4 --ffn 768 --mbs 1 --experts 128 --topk 8 --moe-ffn 768
cd $out && tar czf "$OUTD/logs.tgz" *.txt *.jsonl *.log 2>/dev/null
