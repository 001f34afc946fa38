#!/bin/sh
# Device call 1 of session 13 (2026-11-29): FP8 experts on the lanes,
# quantized with their padding (fp8_quantize_pad).  ops-cuda quick (the
# new fp8_quantize_pad cases among them), then issue 13's 8-expert shape:
# FP8 delayed and blockwise with the old binary (main 4b476e7) and the new
# one on 4 lanes and on 1, and bf16, whose losses must agree bit for bit
# where they should (every change keeps the bits), and a CUPTI trace of
# the new delayed run.
#   run.sh OUT   (from the staging folder: src/tools/gridlm-train, the new
#                 build; old/gridlm-train; t/ops-cuda.t; gpu-lib.sh;
#                 gpu-trace.so and lib/libcupti.so.13; .gpukit)
set -u
cd "$(dirname "$0")"
OUTD=$1
out=$OUTD/logs; mkdir -p "$out"
. .gpukit/env.sh
. ./gpu-lib.sh
export LD_LIBRARY_PATH=$PWD/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
GL_OPS_CUDA_QUICK=1 timeout 120 t/ops-cuda.t > "$out/ops.txt" 2>&1
echo "ops-cuda (quick): exit $?, $(grep -c '^ok' "$out/ops.txt") ok, $(grep -c '^not ok' "$out/ops.txt") not ok $(el)"
grep '^not ok' "$out/ops.txt" | head -5
grep 'fp8_quantize_pad' "$out/ops.txt"
old=old/gridlm-train new=src/tools/gridlm-train
# losses and grad norms of a log, one line per iteration
lg() { awk -F'[,:}]' '{l = g = ""; for (i = 1; i < NF; i++) { if ($i ~ /"loss"/) l = $(i+1);
        if ($i ~ /"grad_norm"/) g = $(i+1) } if (l != "") print l, g}' "$1"; }
same() { if [ -s "$out/$1.jsonl" ] && lg "$out/$1.jsonl" > "$out/$1.lg" && lg "$out/$2.jsonl" > "$out/$2.lg" &&
            cmp -s "$out/$1.lg" "$out/$2.lg"; then
            echo "same bits: $1 $2 ($(wc -l < "$out/$1.lg") iterations)"
         else echo "DIFFERENT: $1 $2"; diff "$out/$1.lg" "$out/$2.lg" | head -4; fi; }
run $old moeA-D-old 16 1 $moeA $D
run $new moeA-D 16 1 $moeA $D
GRIDLM_MOE_LANES=1 run $new moeA-D-1lane 16 1 $moeA $D
run $new moeA 16 1 $moeA
run $old moeA-B-old 16 1 $moeA $B
run $new moeA-B 16 1 $moeA $B
GRIDLM_MOE_LANES=1 run $new moeA-B-1lane 16 1 $moeA $B
same moeA-D-old moeA-D
same moeA-D moeA-D-1lane
same moeA-B-old moeA-B
same moeA-B moeA-B-1lane
run $old moeA-D-old2 16 1 $moeA $D
run $new moeA-D2 16 1 $moeA $D
trace moeA-D-trace 700 24 1 $moeA $D
grep 'gpu-trace:' "$out/moeA-D-trace.log" | head -40
cd "$out" && tar czf "$OUTD/logs.tgz" *
