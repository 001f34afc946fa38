#!/bin/sh
# Device call 6 of session 10 (2026-11-25): an experiment, not kept in
# gridlm: cuDNN's attention plans other than the heuristics' first
# (GRIDLM_CUDNN_CFG=i skips the first i configurations of mode A,
# GRIDLM_CUDNN_HEUR=b asks mode B), timed by gpu-trace on the 1.5B shape
# in bf16 (head size 64).
set -u
cd "$(dirname "$0")"
OUTD=$1
out=$OUTD
. .gpukit/env.sh
. ./gpu-lib.sh
export LD_LIBRARY_PATH=$PWD/lib:${LD_LIBRARY_PATH:-}
new=src/tools/gridlm-train
for v in cfg0 cfg1 cfg2 cfg3 heurb; do
    case $v in heurb) export GRIDLM_CUDNN_HEUR=b GRIDLM_CUDNN_CFG=0;; *) export GRIDLM_CUDNN_CFG=${v#cfg};; esac
    trace d15-$v 600 12 2 $s15
    grep -m4 'cudnn-exp' "$out/d15-$v.log"
    grep -E 'gpu-trace: .*(sdpa|flash)' "$out/d15-$v.log" | head -3
done
