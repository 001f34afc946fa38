#!/bin/sh
# Session 16, call 2 (one H200): why a micro-batch of the dense shapes
# costs more with 8 a step than alone (call 1: 8 layers of the 8B shape,
# 97 ms a micro-batch against 92 ms a step that includes AdamW's 21):
# CUPTI kernel tables (benchmarks/gpu-trace.c) over the last steps of
# each, bf16 and FP8 delayed.
set -u
cd "$(dirname "$0")" && . ./gpu-lib.sh && begin "$1"
export LD_LIBRARY_PATH=$PWD/lib:${LD_LIBRARY_PATH:-}
new=src/tools/gridlm-train
trace s8b 460 12 1 $s8b
GA=8 trace s8b-ga8 1560 8 1 $s8b
trace s8b-D 350 12 1 $s8b $D
GA=8 trace s8b-ga8-D 1140 8 1 $s8b $D
cd "$out" && tar czf "$OUTD/logs.tgz" *
