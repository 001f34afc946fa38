#!/bin/sh
# Session 15, call 1 (one H200): context parallelism's blocks cut into
# parts that cuDNN runs (gl_attn_block_split), checked against the CPU
# in t/attn-cudnn.t, and the ring's blocks timed against the kernels of
# attn_block.cu (GL_ATTN_CUDNN_BENCH=1); the 1.5B shape's bf16 step as a
# sanity check of the whole-sequence path.
set -u
cd "$(dirname "$0")"
OUTD=$1
out=$OUTD/logs; mkdir -p "$out"
. .gpukit/env.sh
. ./gpu-lib.sh
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader
GL_ATTN_CUDNN_BENCH=1 timeout 400 t/attn-cudnn.t > "$out/attn-cudnn.log" 2>&1
echo "attn-cudnn: exit $? $(grep -c '^ok' "$out/attn-cudnn.log") ok, $(grep -c '^not ok' "$out/attn-cudnn.log") not ok $(el)"
grep -E '^not ok|bench|plans built|Bail|warn|cuDNN [0-9]+ takes' "$out/attn-cudnn.log" | head -40
run src/tools/gridlm-train s15 14 2 $s15
