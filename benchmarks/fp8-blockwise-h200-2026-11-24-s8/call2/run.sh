#!/bin/sh
# Device call 2 of session 8 (2026-11-24): FP8 product ceilings with the
# block-scaled product (gridlm-bench fp8), where the blockwise step's
# time goes (GRIDLM_PROFILE, 12 iterations), and the speeds of every
# recipe beside bf16 at the 1.5B shape and 8 layers of the 8B shape.
set -u
cd "$(dirname "$0")"
OUTD=$1
out=/tmp/o; mkdir -p $out
. .gpukit/env.sh
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s]"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 120 src/tools/gridlm-bench fp8 --device cuda \
    --shapes 8192,8192x3072x2048,8192x2048x2048,8192x16384x2048,8192x2048x8192,4096x6144x4096,4096x4096x4096,4096x28672x4096,4096x4096x14336 \
    2>&1 | tee $out/bench-fp8.txt
echo "bench $(el)"
llama="--swiglu --normalization RMSNorm --position-embedding-type rope --disable-bias-linear --attention-dropout 0 --hidden-dropout 0"
s15="$llama --num-layers 16 --hidden-size 2048 --num-attention-heads 32 --num-query-groups 8 --ffn-hidden-size 8192 --vocab-size 128256 --seq-length 4096 --rotary-base 500000 --untie-embeddings-and-output-weights"
s8b="$llama --num-layers 8 --hidden-size 4096 --num-attention-heads 32 --num-query-groups 8 --ffn-hidden-size 14336 --vocab-size 128256 --seq-length 4096 --rotary-base 500000 --untie-embeddings-and-output-weights"
opt="--lr 3e-4 --weight-decay 0.1 --adam-beta2 0.95 --clip-grad 1.0 --mock-data --seed 1234 --eval-iters 0 --log-interval 1"
rate() {
    awk -F'[,:}]' '{for (i = 1; i < NF; i++) { if ($i ~ /"tokens_per_sec_per_gpu"/) t[NR] = $(i+1);
            if ($i ~ /"mfu"/) m[NR] = $(i+1); if ($i ~ /"loss"/) l[NR] = $(i+1) }}
        END {c = 0; for (k = 5; k <= NR; k++) if (k in t) {s += 1 / t[k]; u += m[k]; c++}
             if (c) printf "tokens/s=%.0f MFU=%.1f%% (%d timed) loss %s..%s\n",
                c / s, 100 * u / c, c, l[1], l[NR]; else print "no timed iterations"}' "$1"
}
run() {  # name iters mbs flags...
    name=$1 it=$2 mbs=$3; shift 3
    timeout 150 mpiexec -n 1 src/tools/gridlm-train --device cuda --bf16 "$@" $opt \
        --micro-batch-size $mbs --global-batch-size $mbs --train-iters $it --log-json "$out/$name.jsonl" > "$out/$name.log" 2>&1
    echo "$name: exit $? $(rate "$out/$name.jsonl") $(el)"
    grep -iE 'error|refus' "$out/$name.log" | head -3
}
B="--fp8-format hybrid --fp8-recipe blockwise"
T="--fp8-format hybrid --fp8-recipe tensorwise"
D="--fp8-format hybrid --fp8-recipe delayed --fp8-amax-history-len 1024 --fp8-amax-compute-algo max"
GRIDLM_PROFILE=1 run prof-d15-blockwise 12 2 $s15 $B
grep -A32 "op profile" $out/prof-d15-blockwise.log | head -32
GRIDLM_PROFILE=1 run prof-d15-delayed 12 2 $s15 $D
grep -A32 "op profile" $out/prof-d15-delayed.log | head -32
run d15-bf16 20 2 $s15
run d15-delayed 20 2 $s15 $D
run d15-tensorwise 20 2 $s15 $T
run d15-blockwise 20 2 $s15 $B
run d15-bf16-again 20 2 $s15
run 8b-bf16 16 1 $s8b
run 8b-delayed 16 1 $s8b $D
run 8b-blockwise 16 1 $s8b $B
cd $out && tar czf "$OUTD/logs.tgz" *.txt *.jsonl *.log 2>/dev/null
