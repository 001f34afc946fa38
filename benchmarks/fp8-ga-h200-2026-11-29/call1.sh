#!/bin/sh
# Session 16, call 1 (one H200): t/attn-cudnn.t after the deterministic
# backward's scratch went without the unused fp32 dq accumulator; issue
# 12's ratios with one micro-batch a step and with 8 (the optimizer's
# share divided by 8, as at scale), bf16 against FP8 delayed and
# tensorwise, at the 1.5B shape and 8 layers of the 8B shape; issue 13's
# 8-expert shape with 8 micro-batches a step (its MFU).
set -u
cd "$(dirname "$0")" && . ./gpu-lib.sh && begin "$1"
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader
timeout 240 t/attn-cudnn.t > "$out/attn-cudnn.log" 2>&1
echo "attn-cudnn: exit $? $(grep -c '^ok' "$out/attn-cudnn.log") ok, $(grep -c '^not ok' "$out/attn-cudnn.log") not ok $(el)"
grep -E '^not ok' "$out/attn-cudnn.log" | head -10
b=src/tools/gridlm-train
run $b s15 14 2 $s15
run $b s15-D 14 2 $s15 $D
GA=8 run $b s15-ga8 9 2 $s15
GA=8 run $b s15-ga8-D 9 2 $s15 $D
GA=8 run $b s15-ga8-T 9 2 $s15 $T
run $b s8b 12 1 $s8b
run $b s8b-D 12 1 $s8b $D
GA=8 run $b s8b-ga8 10 1 $s8b
GA=8 run $b s8b-ga8-D 10 1 $s8b $D
GA=8 run $b s8b-ga8-T 10 1 $s8b $T
GA=8 run $b moeA-ga8 9 1 $moeA
cd "$out" && tar czf "$OUTD/logs.tgz" *
