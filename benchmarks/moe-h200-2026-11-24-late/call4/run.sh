#!/bin/sh
# Device call 4 of 2026-11-24 late evening: the GPU tests of the merged
# tree (EP x TP, the dispatcher at EP 1, the overlapped CP ring's add_f32,
# cuDNN's CP blocks, the vector sumsq) and the MoE timings with one and 8
# micro-batches per step.
set -u
cd "$(dirname "$0")"
OUTD=$1
out=/tmp/o; mkdir -p $out
. .gpukit/env.sh
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s]"; }
GL_OPS_CUDA_QUICK=1 timeout 200 t/ops-cuda.t > "$out/ops.txt" 2>&1
echo "ops-cuda (quick): exit $?, $(grep -c '^ok' "$out/ops.txt") ok, $(grep -c '^not ok' "$out/ops.txt") not ok $(el)"
grep -A3 '^not ok' "$out/ops.txt" | head -30
grep -E 'sumsq|add_f32|cuDNN' "$out/ops.txt" | head -8
timeout 240 t/attn-cudnn.t > "$out/attn.txt" 2>&1
echo "attn-cudnn: exit $?, $(grep -c '^ok' "$out/attn.txt") ok, $(grep -c '^not ok' "$out/attn.txt") not ok $(el)"
grep -A3 '^not ok' "$out/attn.txt" | head -30
grep -iE 'block|delta' "$out/attn.txt" | grep -vE '^ok' | head -10
timeout 200 t/train-cuda.t > "$out/tc.txt" 2>&1
echo "train-cuda: exit $?, $(grep -c '^ok' "$out/tc.txt") ok, $(grep -c '^not ok' "$out/tc.txt") not ok $(el)"
grep -E '^not ok|dispatch' "$out/tc.txt" | head -8
llama="--swiglu --normalization RMSNorm --position-embedding-type rope --disable-bias-linear --attention-dropout 0 --hidden-dropout 0"
moeA="$llama --num-layers 8 --hidden-size 2048 --num-attention-heads 32 --num-query-groups 8 --ffn-hidden-size 5632 --vocab-size 128256 --seq-length 4096 --rotary-base 500000 --untie-embeddings-and-output-weights --num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 5632"
moeB="$llama --num-layers 4 --hidden-size 2048 --num-attention-heads 32 --num-query-groups 4 --ffn-hidden-size 768 --vocab-size 128256 --seq-length 4096 --rotary-base 500000 --untie-embeddings-and-output-weights --num-experts 128 --moe-router-topk 8 --moe-ffn-hidden-size 768"
opt="--lr 3e-4 --weight-decay 0.1 --adam-beta2 0.95 --clip-grad 1.0 --mock-data --seed 1234 --eval-iters 0 --log-interval 1"
rate() {
    awk -v k0=${2:-5} -F'[,:}]' '{for (i = 1; i < NF; i++) { if ($i ~ /"tokens_per_sec_per_gpu"/) t[NR] = $(i+1);
            if ($i ~ /"elapsed_ms"/) e[NR] = $(i+1);
            if ($i ~ /"mfu"/) m[NR] = $(i+1); if ($i ~ /"mem_gib"/) g[NR] = $(i+1); if ($i ~ /"loss"/) l[NR] = $(i+1) }}
        END {c = 0; ms = ""; for (k = k0; k <= NR; k++) if (k in t) {s += 1 / t[k]; u += m[k]; c++; ms = ms sprintf(" %.0f", e[k])}
             if (c) printf "tokens/s=%.0f MFU=%.1f%% mem=%.1fGiB (%d timed) loss %s..%s ms:%s\n",
                c / s, 100 * u / c, g[NR], c, l[1], l[NR], ms; else print "no timed iterations"}' "$1"
}
run() {  # name iters mbs gbs flags...
    name=$1 it=$2 mbs=$3 gbs=$4; shift 4
    timeout 150 mpiexec -n 1 src/tools/gridlm-train --device cuda --bf16 "$@" $opt \
        --micro-batch-size $mbs --global-batch-size $gbs --train-iters $it --log-json "$out/$name.jsonl" > "$out/$name.log" 2>&1
    rc=$?; k0=5; [ $it -le 10 ] && k0=3
    echo "$name: exit $rc $(rate "$out/$name.jsonl" $k0) $(el)"
    grep -iE 'error|refus' "$out/$name.log" | head -3
}
run moeA 30 1 1 $moeA
run moeB 30 1 1 $moeB
run moeA-gbs8 10 1 8 $moeA
run moeB-gbs8 10 1 8 $moeB
cd $out && tar czf "$OUTD/logs.tgz" *.jsonl *.log *.txt 2>/dev/null
