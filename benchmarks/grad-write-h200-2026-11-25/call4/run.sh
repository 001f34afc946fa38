#!/bin/sh
# Device call 4 of session 9 (2026-11-25): where the step goes after 7c63b17
# and 363d135: GRIDLM_PROFILE runs of N and 8 iterations, whose
# difference over N - 8 is the steady state (set-up cancels).
set -u
cd "$(dirname "$0")"
OUTD=$1
out=/tmp/o; mkdir -p $out
. .gpukit/env.sh
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s]"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
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
new=src/tools/gridlm-train
for it in 28 8; do
    GRIDLM_PROFILE=1 run $new prof-moeA-$it $it 1 $moeA
    GRIDLM_PROFILE=1 run $new prof-d15-delayed-$it $it 2 $s15 $D
done
for n in moeA d15-delayed; do
    echo "== $n: steady state per iteration (28 - 8 iterations) / 20"
    awk '/op profile/ {on = 1; next} on && NF == 5 && $1 != "op" && $1 != "total" {print FILENAME, $1, $3}' \
        $out/prof-$n-28.log $out/prof-$n-8.log |
    awk '{ if ($1 ~ /-28.log/) a[$2] = $3; else b[$2] = $3 }
         END { for (k in a) { d = (a[k] - b[k]) / 20; if (d > 0.05) printf "  %-20s %8.2f ms\n", k, d; t += d }
               printf "  %-20s %8.2f ms\n", "total", t }' | sort -k2 -n -r
done
cd $out && tar czf "$OUTD/logs.tgz" *.jsonl *.log 2>/dev/null
