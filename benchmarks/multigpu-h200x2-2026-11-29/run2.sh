#!/bin/sh
# run2.sh: call 2 of the same session, CP=2 p2p and all_gather without
# --deterministic-mode, and a GRIDLM_PROFILE run of p2p with it.
set -u
cd "$(dirname "$0")"
OUTD=$1
out=$OUTD/logs; mkdir -p "$out"
. .gpukit/env.sh
. ./gpu-lib.sh
bin=src/tools/gridlm-train
cp="$llama --num-layers 4 --hidden-size 2048 --num-attention-heads 32 --num-query-groups 8 --ffn-hidden-size 8192 --vocab-size 32000 --seq-length 8192 --rotary-base 500000 --micro-batch-size 1 --global-batch-size 1"
for t in p2p all_gather; do
    timeout 60 mpiexec -n 2 $bin --device cuda --bf16 $cp $opt --train-iters 12 --context-parallel-size 2 --cp-comm-type $t \
        --log-json "$out/cp2-$t-nd.jsonl" > "$out/cp2-$t-nd.log" 2>&1
    echo "cp2-$t (not deterministic): exit $? $(rate "$out/cp2-$t-nd.jsonl") $(el)"
done
GRIDLM_PROFILE=1 timeout 60 mpiexec -n 2 $bin --device cuda --bf16 $cp $opt --train-iters 4 --context-parallel-size 2 --cp-comm-type p2p --deterministic-mode \
    --log-json "$out/cp2-prof.jsonl" > "$out/cp2-prof.log" 2>&1
echo "profiled: exit $?"; grep -iE "attn|total" "$out/cp2-prof.log" | head -12
cd "$out" && tar czf "$OUTD/logs.tgz" *
