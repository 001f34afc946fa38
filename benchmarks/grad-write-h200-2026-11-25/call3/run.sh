#!/bin/sh
# Device call 3 of session 9 (2026-11-25): speeds after 7c63b17
# (gradients written by each weight's first product) and 363d135 (AdamW
# 16 bytes at a time), with the PyTorch MoE peer in the same call.
# grad/ is call 1's binary (7c63b17 alone).
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
T="--fp8-format hybrid --fp8-recipe tensorwise"
B="--fp8-format hybrid --fp8-recipe blockwise"
run() {  # bin name iters mbs flags...
    bin=$1 name=$2 it=$3 mbs=$4; shift 4
    timeout 120 mpiexec -n 1 $bin --device cuda --bf16 "$@" $opt \
        --micro-batch-size $mbs --global-batch-size $mbs --train-iters $it --log-json "$out/$name.jsonl" > "$out/$name.log" 2>&1
    echo "$name: exit $? $(rate "$out/$name.jsonl") $(el)"
    grep -iE 'error|refus' "$out/$name.log" | head -3
}
new=src/tools/gridlm-train
run $new moeA 24 1 $moeA
run grad/gridlm-train moeA-grad 24 1 $moeA
run $new moeB 24 1 $moeB
run grad/gridlm-train moeB-grad 24 1 $moeB
peer() {  # name flags...
    name=$1; shift
    timeout 150 env -u LD_LIBRARY_PATH python3 .gpukit/torch_peer.py "$@" > "$out/$name.txt" 2>&1
    echo "$name: exit $? $(tail -2 "$out/$name.txt" | tr '\n' ' ') $(el)"
}
peer peerA --layers 8 --heads 32 --kv-heads 8 --ffn 5632 --mbs 1 --experts 8 --topk 2 --moe-ffn 5632
peer peerB --layers 4 --heads 32 --kv-heads 4 --ffn 768 --mbs 1 --experts 128 --topk 8 --moe-ffn 768
run $new d15-bf16 20 2 $s15
run $new d15-delayed 20 2 $s15 $D
run $new d15-tensorwise 20 2 $s15 $T
run $new d15-blockwise 20 2 $s15 $B
run $new 8b-bf16 16 1 $s8b
run $new 8b-delayed 16 1 $s8b $D
run $new 8b-blockwise 16 1 $s8b $B
cd $out && tar czf "$OUTD/logs.tgz" *.txt *.jsonl *.log 2>/dev/null
