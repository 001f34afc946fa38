#!/bin/sh
# Device call 1 of 2026-11-24 (session 7): AdamW beside the next forward
# (the optimizer stream, train/optim.h).  The GPU tests (ops-cuda quick,
# train-cuda), then MoE A and B and the dense 1.5B shape with the step
# beside the forward (default) and all at once (GRIDLM_OPTIM_OVERLAP=0),
# the MoE peers in the same call.
set -u
cd "$(dirname "$0")"
OUTD=$1
out=/tmp/o; mkdir -p $out
. .gpukit/env.sh
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s]"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
GL_OPS_CUDA_QUICK=1 timeout 300 t/ops-cuda.t > "$out/ops.txt" 2>&1
echo "ops-cuda (quick): exit $?, $(grep -c '^ok' "$out/ops.txt") ok, $(grep -c '^not ok' "$out/ops.txt") not ok $(el)"
grep -A3 '^not ok' "$out/ops.txt" | head -20
grep -E 'adamw' "$out/ops.txt" | head -12
timeout 240 t/train-cuda.t > "$out/tc.txt" 2>&1
echo "train-cuda: exit $?, $(grep -c '^ok' "$out/tc.txt") ok, $(grep -c '^not ok' "$out/tc.txt") not ok $(el)"
grep -E '^not ok|beside' "$out/tc.txt" | head -8
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
run moeA 24 1 $moeA
GRIDLM_OPTIM_OVERLAP=0 run moeA-atonce 24 1 $moeA
run moeB 24 1 $moeB
GRIDLM_OPTIM_OVERLAP=0 run moeB-atonce 24 1 $moeB
run d15 20 2 $s15
GRIDLM_OPTIM_OVERLAP=0 run d15-atonce 20 2 $s15
GRIDLM_PROFILE=1 run moeA-p28 28 1 $moeA
GRIDLM_PROFILE=1 run moeA-p8 8 1 $moeA
for s in A B; do
  case $s in A) pa="--layers 8 --heads 32 --kv-heads 8 --ffn 5632 --mbs 1 --experts 8 --topk 2 --moe-ffn 5632";;
             B) pa="--layers 4 --heads 32 --kv-heads 4 --ffn 768 --mbs 1 --experts 128 --topk 8 --moe-ffn 768";; esac
  r=$(env -u LD_LIBRARY_PATH timeout 200 python3 .gpukit/torch_peer.py $pa 2>&1 | grep -E '^torch|Error' | tail -2)
  echo "peer moe$s: $r $(el)"
done
cd $out && tar czf "$OUTD/logs.tgz" *.txt *.jsonl *.log 2>/dev/null
