#!/bin/sh
# Session 15, call 2 (one H200): the GPU tests after the last change to
# attn_cudnn.cu (t/attn-cudnn.t whole, t/ops-cuda.t quick), and issue 13's
# 8-expert shape beside the PyTorch MoE peer in the same call.
set -u
cd "$(dirname "$0")" && . ./gpu-lib.sh && begin "$1"
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader
timeout 300 t/attn-cudnn.t > "$out/attn-cudnn.log" 2>&1
echo "attn-cudnn: exit $? $(grep -c '^ok' "$out/attn-cudnn.log") ok, $(grep -c '^not ok' "$out/attn-cudnn.log") not ok $(el)"
grep -E '^not ok|plans built' "$out/attn-cudnn.log" | head
GL_OPS_CUDA_QUICK=1 timeout 300 t/ops-cuda.t > "$out/ops-cuda.log" 2>&1
echo "ops-cuda quick: exit $? $(grep -c '^ok' "$out/ops-cuda.log") ok, $(grep -c '^not ok' "$out/ops-cuda.log") not ok $(el)"
grep -E '^not ok' "$out/ops-cuda.log" | head
run src/tools/gridlm-train moeA 24 1 $moeA
peer peer-moeA --dim 2048 --layers 8 --heads 32 --kv-heads 8 --ffn 5632 --vocab 128256 --seq 4096 --mbs 1 --experts 8 --topk 2 --moe-ffn 5632
