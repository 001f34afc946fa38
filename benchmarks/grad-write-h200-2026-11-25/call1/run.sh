#!/bin/sh
# Device call 1 of session 9 (2026-11-25): gradients written by each
# weight's first product (7c63b17).  The GPU tests (ops-cuda quick,
# train-cuda), then the same shapes with the binary before the change
# (old/, main d038894's behaviour) and after, one after the other.
set -u
cd "$(dirname "$0")"
OUTD=$1
out=/tmp/o; mkdir -p $out
. .gpukit/env.sh
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s]"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
GL_OPS_CUDA_QUICK=1 timeout 240 t/ops-cuda.t > "$out/ops.txt" 2>&1
echo "ops-cuda (quick): exit $?, $(grep -c '^ok' "$out/ops.txt") ok, $(grep -c '^not ok' "$out/ops.txt") not ok $(el)"
grep -A3 '^not ok' "$out/ops.txt" | head -20
grep -E 'moe_gemm_wgrad' "$out/ops.txt" | head -12
timeout 200 t/train-cuda.t > "$out/tc.txt" 2>&1
echo "train-cuda: exit $?, $(grep -c '^ok' "$out/tc.txt") ok, $(grep -c '^not ok' "$out/tc.txt") not ok $(el)"
grep -E '^not ok' "$out/tc.txt" | head -8
llama="--swiglu --normalization RMSNorm --position-embedding-type rope --disable-bias-linear --attention-dropout 0 --hidden-dropout 0"
moeA="$llama --num-layers 8 --hidden-size 2048 --num-attention-heads 32 --num-query-groups 8 --ffn-hidden-size 5632 --vocab-size 128256 --seq-length 4096 --rotary-base 500000 --untie-embeddings-and-output-weights --num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 5632"
moeB="$llama --num-layers 4 --hidden-size 2048 --num-attention-heads 32 --num-query-groups 4 --ffn-hidden-size 768 --vocab-size 128256 --seq-length 4096 --rotary-base 500000 --untie-embeddings-and-output-weights --num-experts 128 --moe-router-topk 8 --moe-ffn-hidden-size 768"
s15="$llama --num-layers 16 --hidden-size 2048 --num-attention-heads 32 --num-query-groups 8 --ffn-hidden-size 8192 --vocab-size 128256 --seq-length 4096 --rotary-base 500000 --untie-embeddings-and-output-weights"
s8b="$llama --num-layers 8 --hidden-size 4096 --num-attention-heads 32 --num-query-groups 8 --ffn-hidden-size 14336 --vocab-size 128256 --seq-length 4096 --rotary-base 500000 --untie-embeddings-and-output-weights"
D="--fp8-format hybrid --fp8-recipe delayed --fp8-amax-history-len 1024 --fp8-amax-compute-algo max"
opt="--lr 3e-4 --weight-decay 0.1 --adam-beta2 0.95 --clip-grad 1.0 --mock-data --seed 1234 --eval-iters 0 --log-interval 1"
rate() {
    awk -F'[,:}]' '{for (i = 1; i < NF; i++) { if ($i ~ /"tokens_per_sec_per_gpu"/) t[NR] = $(i+1);
            if ($i ~ /"elapsed_ms"/) e[NR] = $(i+1);
            if ($i ~ /"mfu"/) m[NR] = $(i+1); if ($i ~ /"loss"/) l[NR] = $(i+1) }}
        END {c = 0; ms = ""; for (k = 5; k <= NR; k++) if (k in t) {s += 1 / t[k]; u += m[k]; c++; ms = ms sprintf(" %.0f", e[k])}
             if (c) printf "tokens/s=%.0f MFU=%.1f%% (%d timed) loss %s..%s ms:%s\n",
                c / s, 100 * u / c, c, l[1], l[NR], ms; else print "no timed iterations"}' "$1"
}
run() {  # bin name iters mbs flags...
    bin=$1 name=$2 it=$3 mbs=$4; shift 4
    timeout 120 mpiexec -n 1 $bin --device cuda --bf16 "$@" $opt \
        --micro-batch-size $mbs --global-batch-size $mbs --train-iters $it --log-json "$out/$name.jsonl" > "$out/$name.log" 2>&1
    echo "$name: exit $? $(rate "$out/$name.jsonl") $(el)"
    grep -iE 'error|refus' "$out/$name.log" | head -3
}
for v in old new; do
    bin=src/tools/gridlm-train
    [ $v = old ] && bin=old/gridlm-train
    run $bin moeA-$v 20 1 $moeA
    run $bin d15-delayed-$v 18 2 $s15 $D
done
for v in old new; do
    bin=src/tools/gridlm-train
    [ $v = old ] && bin=old/gridlm-train
    run $bin moeB-$v 20 1 $moeB
    run $bin 8b-delayed-$v 14 1 $s8b $D
done
cd $out && tar czf "$OUTD/logs.tgz" *.txt *.jsonl *.log 2>/dev/null
