#!/bin/sh
# Session 15, issue 19 on two H200s, call 3: TP=2+SP at the 8B width under
# GRIDLM_PROFILE (how much of the step TP's collectives take), and issue
# 13's 8-expert shape at EP=2 against EP=1 (DP=2 both), profiled for the
# all-to-all's time per step.
set -u
cd "$(dirname "$0")" && . ./gpu-lib.sh && begin "$1"
export GRIDLM_PROFILE=1
mrun s8b-tp2-prof 2 6 $s8b --micro-batch-size 1 --global-batch-size 1 \
    --tensor-model-parallel-size 2 --sequence-parallel
grep -iE "gather|scatter|reduce|all_|a2a|comm|wait|gemm|total" "$out/s8b-tp2-prof.log" | head -14
mrun moeA-ep2-prof 2 8 $moeA --micro-batch-size 1 --global-batch-size 2 --expert-model-parallel-size 2
grep -iE "gather|scatter|reduce|all_|a2a|alltoall|comm|wait|moe|total" "$out/moeA-ep2-prof.log" | head -14
unset GRIDLM_PROFILE
mrun moeA-ep2 2 16 $moeA --micro-batch-size 1 --global-batch-size 2 --expert-model-parallel-size 2
mrun moeA-ep1 2 16 $moeA --micro-batch-size 1 --global-batch-size 2
cd "$out" && tar czf "$OUTD/logs.tgz" *
