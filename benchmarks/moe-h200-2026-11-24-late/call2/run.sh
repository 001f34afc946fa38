#!/bin/sh
# Device call 2 of 2026-11-24 late evening: MoE's host time per iteration
# (a diagnostic build of main 7e2caa7 with GRIDLM_HOST_TIMES), and the MoE
# peer in the same call.  GRIDLM_HOST_TIMES was a throw-away patch, not in
# the tree: train.c printed, per iteration, the host's wall time in each
# part of the step (HT lines: batch load, the pipeline's issue, finishing
# the gradients, the wait for the statistics' download, the optimizer's
# issue, the MoE step's download), moe.c the time of each moe_route call
# (HR lines: layer, ms, its host wait included).
set -u
cd "$(dirname "$0")"
OUTD=$1
out=/tmp/o; mkdir -p $out
. .gpukit/env.sh
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s]"; }
llama="--swiglu --normalization RMSNorm --position-embedding-type rope --disable-bias-linear --attention-dropout 0 --hidden-dropout 0"
moeA="$llama --num-layers 8 --hidden-size 2048 --num-attention-heads 32 --num-query-groups 8 --ffn-hidden-size 5632 --vocab-size 128256 --seq-length 4096 --rotary-base 500000 --untie-embeddings-and-output-weights --num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 5632"
moeB="$llama --num-layers 4 --hidden-size 2048 --num-attention-heads 32 --num-query-groups 4 --ffn-hidden-size 768 --vocab-size 128256 --seq-length 4096 --rotary-base 500000 --untie-embeddings-and-output-weights --num-experts 128 --moe-router-topk 8 --moe-ffn-hidden-size 768"
opt="--lr 3e-4 --weight-decay 0.1 --adam-beta2 0.95 --clip-grad 1.0 --mock-data --seed 1234 --eval-iters 0"
rate() {
    awk -F'[,:}]' '{for (i = 1; i < NF; i++) { if ($i ~ /"tokens_per_sec_per_gpu"/) t[NR] = $(i+1);
            if ($i ~ /"elapsed_ms"/) e[NR] = $(i+1);
            if ($i ~ /"mfu"/) m[NR] = $(i+1); if ($i ~ /"mem_gib"/) g[NR] = $(i+1); if ($i ~ /"loss"/) l[NR] = $(i+1) }}
        END {c = 0; ms = ""; for (k = 5; k <= NR; k++) if (k in t) {s += 1 / t[k]; u += m[k]; c++; ms = ms sprintf(" %.0f", e[k])}
             if (c) printf "tokens/s=%.0f MFU=%.1f%% (%d timed) ms:%s\n",
                c / s, 100 * u / c, c, ms; else print "no timed iterations"}' "$1"
}
run() {  # name iters mbs gbs logint flags...
    name=$1 it=$2 mbs=$3 gbs=$4 li=$5; shift 5
    timeout 150 mpiexec -n 1 src/tools/gridlm-train --device cuda --bf16 "$@" $opt --log-interval $li \
        --micro-batch-size $mbs --global-batch-size $gbs --train-iters $it --log-json "$out/$name.jsonl" > "$out/$name.log" 2>&1
    echo "$name: exit $? $(rate "$out/$name.jsonl") $(el)"
    grep -iE 'error|refus' "$out/$name.log" | head -3
}
GRIDLM_HOST_TIMES=1 run moeA-ht 30 1 1 1 $moeA
grep '^HT' $out/moeA-ht.log | tail -12
awk '$1 == "HR" && NR > 100 { s[$2] += $3; n[$2]++ } END { for (k in s) printf "route layer %s: %.3f ms mean\n", k, s[k] / n[k] }' $out/moeA-ht.log | sort
GRIDLM_HOST_TIMES=1 GRIDLM_MOE_GEMM=grouped run moeB-ht 30 1 1 1 $moeB
grep '^HT' $out/moeB-ht.log | tail -6
run moeA-li10 30 1 1 10 $moeA
run moeA-gbs8 8 1 8 1 $moeA
for s in A B; do
  case $s in A) pa="--layers 8 --heads 32 --kv-heads 8 --ffn 5632 --mbs 1 --experts 8 --topk 2 --moe-ffn 5632";;
             B) pa="--layers 4 --heads 32 --kv-heads 4 --ffn 768 --mbs 1 --experts 128 --topk 8 --moe-ffn 768";; esac
  r=$(env -u LD_LIBRARY_PATH timeout 200 python3 .gpukit/torch_peer.py $pa 2>&1 | grep -E '^torch|Error' | tail -2)
  echo "peer moe$s: $r $(el)"
done
cd $out && tar czf "$OUTD/logs.tgz" *.jsonl *.log 2>/dev/null
