#!/bin/sh
# Device call 3 of 2026-11-24 (session 7): FP8 training on the GPU against
# the CPU's emulation (t/train-cuda.t: delayed, tensorwise, blockwise,
# MoE with FP8 experts), with blockwise and the FP8 experts no longer
# refused on CUDA (call 2 with the FP8 tests' fall measured from
# single iterations and the MoE run's flags cut short).
set -u
cd "$(dirname "$0")"
OUTD=$1
out=/tmp/o; mkdir -p $out
. .gpukit/env.sh
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s]"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 540 t/train-cuda.t > "$out/tc.txt" 2>&1
echo "train-cuda: exit $?, $(grep -c '^ok' "$out/tc.txt") ok, $(grep -c '^not ok' "$out/tc.txt") not ok $(el)"
grep -E '^not ok|FP8' "$out/tc.txt" | head -12
llama="--swiglu --normalization RMSNorm --position-embedding-type rope --disable-bias-linear --attention-dropout 0 --hidden-dropout 0"
moeA="$llama --num-layers 8 --hidden-size 2048 --num-attention-heads 32 --num-query-groups 8 --ffn-hidden-size 5632 --vocab-size 128256 --seq-length 4096 --rotary-base 500000 --untie-embeddings-and-output-weights --num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 5632"
moeB="$llama --num-layers 4 --hidden-size 2048 --num-attention-heads 32 --num-query-groups 4 --ffn-hidden-size 768 --vocab-size 128256 --seq-length 4096 --rotary-base 500000 --untie-embeddings-and-output-weights --num-experts 128 --moe-router-topk 8 --moe-ffn-hidden-size 768"
s15="$llama --num-layers 16 --hidden-size 2048 --num-attention-heads 32 --num-query-groups 8 --ffn-hidden-size 8192 --vocab-size 128256 --seq-length 4096 --rotary-base 500000 --untie-embeddings-and-output-weights"
opt="--lr 3e-4 --weight-decay 0.1 --adam-beta2 0.95 --clip-grad 1.0 --mock-data --seed 1234 --eval-iters 0 --log-interval 1"
rate() {
    awk -F'[,:}]' '{for (i = 1; i < NF; i++) { if ($i ~ /"tokens_per_sec_per_gpu"/) t[NR] = $(i+1);
            if ($i ~ /"elapsed_ms"/) e[NR] = $(i+1);
            if ($i ~ /"mfu"/) m[NR] = $(i+1); if ($i ~ /"loss"/) l[NR] = $(i+1) }}
        END {c = 0; ms = ""; for (k = 5; k <= NR; k++) if (k in t) {s += 1 / t[k]; u += m[k]; c++; ms = ms sprintf(" %.0f", e[k])}
             if (c) printf "tokens/s=%.0f MFU=%.1f%% (%d timed) loss %s..%s ms:%s\n",
                c / s, 100 * u / c, c, l[1], l[NR], ms; else print "no timed iterations"}' "$1"
}
run() {  # name iters mbs flags...
    name=$1 it=$2 mbs=$3; shift 3
    timeout 150 mpiexec -n 1 src/tools/gridlm-train --device cuda --bf16 "$@" $opt \
        --micro-batch-size $mbs --global-batch-size $mbs --train-iters $it --log-json "$out/$name.jsonl" > "$out/$name.log" 2>&1
    echo "$name: exit $? $(rate "$out/$name.jsonl") $(el)"
    grep -iE 'error|refus' "$out/$name.log" | head -3
}
cd $out && tar czf "$OUTD/logs.tgz" *.txt 2>/dev/null
