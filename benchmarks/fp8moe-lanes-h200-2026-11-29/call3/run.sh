#!/bin/sh
# Device call 3 of session 13 (2026-11-29): the experts' FP8 products
# written in place (their zero padding rows spilling onto the next
# expert's rows of the same lane), the lanes in contiguous blocks.  Bits:
# t/train-cuda.c's tiny MoE model under each recipe, the old binary (main
# 4b476e7) against the new one on 4 lanes and on 1.  Speed: issue 13's
# 8-expert shape in bf16 and each FP8 recipe, old and new, delayed twice;
# the 128-expert shape in bf16 and FP8 delayed.
set -u
cd "$(dirname "$0")"
OUTD=$1
out=$OUTD/logs; mkdir -p "$out"
. .gpukit/env.sh
. ./gpu-lib.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
old=old/gridlm-train new=src/tools/gridlm-train
tiny="--mock-data --seed 1234 --num-layers 4 --hidden-size 256 --num-attention-heads 4
  --num-query-groups 2 --ffn-hidden-size 704 --seq-length 64 --vocab-size 512
  --micro-batch-size 2 --global-batch-size 16 --train-iters 20 --lr 1e-3 --lr-warmup-iters 2
  --log-interval 1 --eval-interval 10 --eval-iters 2 $llama --num-experts 4"
tinyrun() {  # tinyrun BIN NAME FLAGS...
    bin=$1 name=$2; shift 2
    timeout 60 mpiexec -n 1 $bin --device cuda --bf16 $tiny "$@" \
        --log-json "$out/$name.jsonl" > "$out/$name.log" 2>&1
    echo "$name: exit $? $(grep -c '"loss"' "$out/$name.jsonl") iterations $(el)"
}
lg() { awk -F'[,:}]' '{l = g = v = ""; for (i = 1; i < NF; i++) { if ($i ~ /"loss"/) l = $(i+1);
        if ($i ~ /"grad_norm"/) g = $(i+1); if ($i ~ /"valid_loss"/) v = $(i+1) }
        if (l v != "") print l, g, v}' "$1"; }
same() { lg "$out/$1.jsonl" > "$out/$1.lg"; lg "$out/$2.jsonl" > "$out/$2.lg"
         if [ -s "$out/$1.lg" ] && cmp -s "$out/$1.lg" "$out/$2.lg"; then
            echo "same bits: $1 $2 ($(wc -l < "$out/$1.lg") lines)"
         else echo "DIFFERENT: $1 $2"; diff "$out/$1.lg" "$out/$2.lg" | head -4; fi; }
for r in delayed tensorwise blockwise; do
    f="--fp8-format hybrid --fp8-recipe $r"
    tinyrun $old $r-old $f
    tinyrun $new $r-4 $f
    GRIDLM_MOE_LANES=1 tinyrun $new $r-1 $f
    same $r-old $r-4
    same $r-4 $r-1
done
run $new moeA 16 1 $moeA
run $old moeA-D-old 16 1 $moeA $D
run $new moeA-D 16 1 $moeA $D
run $old moeA-T-old 16 1 $moeA $T
run $new moeA-T 16 1 $moeA $T
run $old moeA-B-old 16 1 $moeA $B
run $new moeA-B 16 1 $moeA $B
run $old moeA-D-old2 16 1 $moeA $D
run $new moeA-D2 16 1 $moeA $D
run $new moeB 16 1 $moeB
run $new moeB-D 16 1 $moeB $D
cd "$out" && tar czf "$OUTD/logs.tgz" *
