#!/bin/sh
# Device call 3 of 2026-11-24 late evening: the MoE experts' per-expert loop
# through cuBLASLt plans per bucket of rows (gl_cuda_gemm_ragged); the
# GPU tests (quick) and the MoE timings, with a steady-state profile.
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
opt="--lr 3e-4 --weight-decay 0.1 --adam-beta2 0.95 --clip-grad 1.0 --mock-data --seed 1234 --eval-iters 0 --log-interval 1"
D="--fp8-format hybrid --fp8-recipe delayed --fp8-amax-history-len 1024 --fp8-amax-compute-algo max"
T="--fp8-format hybrid --fp8-recipe tensorwise"
rate() {
    awk -F'[,:}]' '{for (i = 1; i < NF; i++) { if ($i ~ /"tokens_per_sec_per_gpu"/) t[NR] = $(i+1);
            if ($i ~ /"elapsed_ms"/) e[NR] = $(i+1);
            if ($i ~ /"mfu"/) m[NR] = $(i+1); if ($i ~ /"mem_gib"/) g[NR] = $(i+1); if ($i ~ /"loss"/) l[NR] = $(i+1) }}
        END {c = 0; ms = ""; for (k = 5; k <= NR; k++) if (k in t) {s += 1 / t[k]; u += m[k]; c++; ms = ms sprintf(" %.0f", e[k])}
             if (c) printf "tokens/s=%.0f MFU=%.1f%% mem=%.1fGiB (%d timed) loss %s..%s ms:%s\n",
                c / s, 100 * u / c, g[NR], c, l[1], l[NR], ms; else print "no timed iterations"}' "$1"
}
run() {  # name iters mbs flags...
    name=$1 it=$2 mbs=$3; shift 3
    timeout 150 mpiexec -n 1 src/tools/gridlm-train --device cuda --bf16 "$@" $opt \
        --micro-batch-size $mbs --global-batch-size $mbs --train-iters $it --log-json "$out/$name.jsonl" > "$out/$name.log" 2>&1
    echo "$name: exit $? $(rate "$out/$name.jsonl") $(el)"
    grep -iE 'error|refus' "$out/$name.log" | head -3
}
prof() {  # name iters mbs flags...
    name=$1 it=$2 mbs=$3; shift 3
    GRIDLM_PROFILE=1 timeout 150 mpiexec -n 1 src/tools/gridlm-train --device cuda --bf16 "$@" $opt \
        --micro-batch-size $mbs --global-batch-size $mbs --train-iters $it > "$out/$name.prof" 2>&1
    echo "$name profile: exit $? $(el)"
}
GL_OPS_CUDA_QUICK=1 timeout 200 t/ops-cuda.t > "$out/ops.txt" 2>&1
echo "ops-cuda (quick): exit $?, $(grep -c '^ok' "$out/ops.txt") ok, $(grep -c '^not ok' "$out/ops.txt") not ok $(el)"
grep -A2 '^not ok' "$out/ops.txt" | head -30
grep -c 'moe_gemm' "$out/ops.txt"
for s in A B; do
    eval "shape=\$moe$s"
    run moe$s 30 1 $shape
    GRIDLM_MOE_GEMM=loop run moe$s-loop 30 1 $shape
done
GRIDLM_MOE_GEMM=grouped run moeA-grouped 30 1 $moeA
prof moeA8 8 1 $moeA
prof moeA28 28 1 $moeA
# steady-state profile: the longer run minus the shorter, per op
diffp() {
    awk -v n=$3 'FNR == 1 { f++ } /^  [a-z_0-9]+ +[0-9]+ +[0-9.]+ / { if (f == 1) a[$1] = $3; else { b[$1] = $3; c[$1] = $2 } }
        END { for (k in b) { d = b[k] - a[k]; tot += d; printf "%-20s %10.2f ms/iter\n", k, d / n } ; printf "%-20s %10.2f ms/iter\n", "TOTAL", tot / n }' "$out/$1.prof" "$out/$2.prof" | sort -k2 -rn | head -24
}
echo "== MoE A, steady state per iteration (28 - 8 iterations)"; diffp moeA8 moeA28 20
grep -E "attention calls" $out/moeA28.prof
cd $out && tar czf "$OUTD/logs.tgz" *.jsonl *.prof *.log ops.txt 2>/dev/null
