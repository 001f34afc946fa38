#!/bin/sh
# Issue 19 on two linked H200s (nvidia-h200-x2), session 14, 2026-11-29 (call 1;
# run2.sh is call 2, on the same machine):
# runs 2 and 3 of the issue at small shapes, in the few minutes of device
# time the session had left.  Context parallelism: CP=2 against CP=1 in
# bf16 (20 iterations, each comm type); expert parallelism: EP=2 against
# EP=1 on the same two GPUs (DP 2 both); losses compared by their largest
# relative difference, with the same run twice as the noise floor (cuDNN's
# attention backward does not repeat its bits; --deterministic-mode does).
#   run.sh OUT   (from the staging folder: src/tools/gridlm-train;
#                 gpu-lib.sh; .gpukit)
set -u
cd "$(dirname "$0")"
OUTD=$1
out=$OUTD/logs; mkdir -p "$out"
. .gpukit/env.sh
. ./gpu-lib.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
nvidia-smi topo -m | head -3
bin=src/tools/gridlm-train
# one run on N GPUs: NAME N FLAGS...
mrun() {
    name=$1 n=$2; shift 2
    timeout 60 mpiexec -n $n $bin --device cuda --bf16 "$@" $opt --train-iters 20 \
        --log-json "$out/$name.jsonl" > "$out/$name.log" 2>&1
    echo "$name: exit $? $(rate "$out/$name.jsonl") $(el)"
    grep -iE 'error|refus' "$out/$name.log" | head -3
}
# the largest relative difference of two runs' losses: NAME1 NAME2
rel() {
    lg "$out/$1.jsonl" | awk '{print $1}' > "$out/$1.l"
    lg "$out/$2.jsonl" | awk '{print $1}' > "$out/$2.l"
    paste "$out/$1.l" "$out/$2.l" | awk -v a=$1 -v b=$2 '{d = $1 - $2; if (d < 0) d = -d;
        r = d / ($2 < 0 ? -$2 : $2); if (r > m) m = r; n++}
        END {printf "%s vs %s: %d losses, largest relative difference %.2e\n", a, b, n, m}'
}
cp="$llama --num-layers 4 --hidden-size 2048 --num-attention-heads 32 --num-query-groups 8 --ffn-hidden-size 8192 --vocab-size 32000 --seq-length 8192 --rotary-base 500000 --micro-batch-size 1 --global-batch-size 1"
mrun cp1 1 $cp --deterministic-mode
mrun cp2-p2p 2 $cp --context-parallel-size 2 --cp-comm-type p2p --deterministic-mode
rel cp1 cp2-p2p
mrun ep1 2 $moeA --num-layers 2 --vocab-size 32000 --micro-batch-size 1 --global-batch-size 2 --deterministic-mode
mrun ep2 2 $moeA --num-layers 2 --vocab-size 32000 --micro-batch-size 1 --global-batch-size 2 --expert-model-parallel-size 2 --deterministic-mode
rel ep1 ep2
mrun cp2-a2a 2 $cp --context-parallel-size 2 --cp-comm-type a2a --deterministic-mode
rel cp1 cp2-a2a
mrun cp2-ag 2 $cp --context-parallel-size 2 --cp-comm-type all_gather --deterministic-mode
rel cp1 cp2-ag
mrun cp1b 1 $cp --deterministic-mode
same cp1 cp1b
cd "$out" && tar czf "$OUTD/logs.tgz" *
