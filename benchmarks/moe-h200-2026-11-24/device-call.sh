#!/bin/sh
# Device call 3 of 2026-11-24 evening (merged main): GPU tests, MoE speed,
# GPT-2 124M proof run with the faster attention dropout, its peer, the
# CPU's first iterations of the same run, the small GPT's GPU curve.
set -u
cd "$(dirname "$0")"
OUTD=$1
out=/tmp/o; mkdir -p $out
. .gpukit/env.sh
export TOK=.gpt2tok DATA=data
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s]"; }
GL_OPS_CUDA_QUICK=1 timeout 120 t/ops-cuda.t > "$out/ops.txt" 2>&1
echo "ops-cuda (quick): exit $?, $(grep -c '^ok' "$out/ops.txt") ok, $(grep -c '^not ok' "$out/ops.txt") not ok $(el)"
grep -A2 '^not ok' "$out/ops.txt" | head -30
grep -E 'mask.*misses|bda_layernorm|2\^31|large stride' "$out/ops.txt" | head -12
timeout 120 t/train-cuda.t > "$out/tc.txt" 2>&1
echo "train-cuda: exit $?, $(grep -c '^ok' "$out/tc.txt") ok, $(grep -c '^not ok' "$out/tc.txt") not ok $(el)"
grep -E '^not ok|MoE|^# ' "$out/tc.txt" | head -14
llama="--swiglu --normalization RMSNorm --position-embedding-type rope --disable-bias-linear --attention-dropout 0 --hidden-dropout 0"
moeA="$llama --num-layers 8 --hidden-size 2048 --num-attention-heads 32 --num-query-groups 8 --ffn-hidden-size 5632 --vocab-size 128256 --seq-length 4096 --rotary-base 500000 --untie-embeddings-and-output-weights --num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 5632"
moeB="$llama --num-layers 4 --hidden-size 2048 --num-attention-heads 32 --num-query-groups 4 --ffn-hidden-size 768 --vocab-size 128256 --seq-length 4096 --rotary-base 500000 --untie-embeddings-and-output-weights --num-experts 128 --moe-router-topk 8 --moe-ffn-hidden-size 768"
opt="--micro-batch-size 1 --global-batch-size 1 --train-iters 14 --log-interval 1 --lr 3e-4 --mock-data --seed 1234 --eval-iters 0"
rate() {
    awk -F'[,:}]' '{for (i = 1; i < NF; i++) { if ($i ~ /"tokens_per_sec_per_gpu"/) t[NR] = $(i+1);
            if ($i ~ /"mfu"/) m[NR] = $(i+1); if ($i ~ /"mem_gib"/) g[NR] = $(i+1); if ($i ~ /"loss"/) l[NR] = $(i+1) }}
        END {c = 0; for (k = 5; k <= NR; k++) if (k in t) {s += 1 / t[k]; u += m[k]; c++}
             if (c) printf "tokens/s=%.0f MFU=%.1f%% mem=%.1fGiB (%d timed) loss %s..%s\n",
                c / s, 100 * u / c, g[NR], c, l[1], l[NR]; else print "no timed iterations"}' "$1"
}
for s in A B; do
    eval "shape=\$moe$s"
    timeout 100 mpiexec -n 1 src/tools/gridlm-train --device cuda --bf16 $shape $opt \
        --log-json "$out/moe$s.jsonl" > "$out/moe$s.log" 2>&1
    echo "gridlm moe$s: exit $? $(rate "$out/moe$s.jsonl") $(el)"
    grep -iE 'error|refus' "$out/moe$s.log" | head -3
done
GRIDLM_PROFILE=1 timeout 100 mpiexec -n 1 src/tools/gridlm-train --device cuda --bf16 $moeA $opt > "$out/moeA-prof.log" 2>&1
grep -A14 'op profile' "$out/moeA-prof.log"
sh benchmarks/gpt2-124m/run.sh . "$out" gpu 2>&1 | tail -9
el
for d in 0 0.1; do
  r=$(env -u LD_LIBRARY_PATH timeout 120 python3 benchmarks/torch_peer_gpt.py --mbs 16 \
        --attention-dropout $d --hidden-dropout $d 2>&1 | grep -E '^torch|Error|error' | tail -3)
  echo "peer gpt2 (dropout $d): $r $(el)"
done
sh benchmarks/gpt2-124m/run.sh . "$out" small-gpu 2>&1 | tail -2
el
CPU_SECONDS=200 sh benchmarks/gpt2-124m/run.sh . "$out" cpu 2>&1 | tail -11
el
cp $out/gpu.jsonl $out/gpu-nodrop.jsonl $out/small-gpu.jsonl $out/cpu.jsonl $out/moeA.jsonl $out/moeB.jsonl $out/summary.txt "$OUTD"/ 2>/dev/null
