#!/bin/sh
# Device call 5 of session 10 (cuDNN's attention against gridlm's own
# kernels, GRIDLM_ATTENTION=native, traced); from call 4:
# Device call 4 of session 10 (2026-11-25), main 6eb528a + gpu-trace.c
# (call 3, not kept, ran these with an older gpu-trace.c whose report held its
# lock, so that a buffer CUPTI delivered after it hung each exit): where the
# steps' GPU time goes, from CUPTI's kernel records over the last
# iterations of each run.
set -u
cd "$(dirname "$0")"
OUTD=$1
out=$OUTD
. .gpukit/env.sh
. ./gpu-lib.sh
export LD_LIBRARY_PATH=$PWD/lib:${LD_LIBRARY_PATH:-}
new=src/tools/gridlm-train
# (its trace() is now gpu-lib.sh's, word for word as it ran here)
for at in native auto; do
    GRIDLM_ATTENTION=$at trace d15-bf16-$at 1230 20 2 $s15
    grep -E 'gpu-trace: .*(sdpa|attn|flash|fmha)' "$out/d15-bf16-$at.log" | head -8
    GRIDLM_ATTENTION=$at trace moeA-$at 700 24 1 $moeA
    grep -E 'gpu-trace: .*(sdpa|attn|flash|fmha)' "$out/moeA-$at.log" | head -8
done
