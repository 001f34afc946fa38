#!/bin/sh
# Device call 2 of session 14 (2026-11-29; call 1 ran membound-probe
# alone).  AdamW with one group of four elements a thread in flight (was
# two) against main d4c4361 ("old"), on issue 13's 8-expert shape
# (tokens/s, and the AdamW kernel's time from a CUPTI trace) and on 8
# layers of the 8B shape in FP8 delayed; whether the 8-expert shape's runs
# repeat their bits with cuDNN's attention, with --deterministic-mode and
# with gridlm's own attention kernels; the probe again with more AdamW
# variants.
#   run.sh OUT   (from the staging folder: src/tools/gridlm-train, the new
#                 build; old/gridlm-train; gpu-lib.sh; membound-probe;
#                 gpu-trace.so and lib/libcupti.so.13; .gpukit)
set -u
cd "$(dirname "$0")"
OUTD=$1
out=$OUTD/logs; mkdir -p "$out"
. .gpukit/env.sh
. ./gpu-lib.sh
export LD_LIBRARY_PATH=$PWD/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 60 ./membound-probe 2.8e9 > "$out/probe.txt" 2>&1; echo "probe: exit $? $(el)"
grep adamw "$out/probe.txt"
old=old/gridlm-train new=src/tools/gridlm-train
run $old moeA-old 16 1 $moeA
run $new moeA-new 16 1 $moeA
run $old moeA-old2 16 1 $moeA
run $new moeA-new2 16 1 $moeA
trace moeA-trace-new 700 24 1 $moeA
grep -E 'adamw|sumsq' "$out/moeA-trace-new.log"
new=$old trace moeA-trace-old 700 24 1 $moeA
grep -E 'adamw|sumsq' "$out/moeA-trace-old.log"
new=src/tools/gridlm-train
for r in 1 2; do
    run $new det-cudnn$r 8 1 $moeA
    run $new det-mode$r 8 1 $moeA --deterministic-mode
    GRIDLM_ATTENTION=native run $new det-native$r 8 1 $moeA
done
same det-cudnn1 det-cudnn2
same det-mode1 det-mode2
same det-native1 det-native2
grep -h -iE 'cudnn|determin|NCCL_ALGO' "$out"/det-mode1.log | head -5
run $new s8b 16 1 $s8b
run $old s8b-D-old 16 1 $s8b $D
run $new s8b-D 16 1 $s8b $D
cd "$out" && tar czf "$OUTD/logs.tgz" *
