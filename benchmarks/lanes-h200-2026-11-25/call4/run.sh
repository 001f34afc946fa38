#!/bin/sh
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
trace moeA 700 24 1 $moeA
trace d15-delayed 1000 20 2 $s15 $D
trace moeB 550 24 1 $moeB
trace 8b-delayed 760 16 1 $s8b $D
