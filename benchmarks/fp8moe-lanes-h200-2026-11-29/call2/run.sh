#!/bin/sh
# Device call 2 of session 13 (2026-11-29): tensorwise FP8 experts on the
# lanes too (fp8_amax_scale's ticket per lane).  Call 1 showed that the
# 8-expert shape's runs are not repeatable on the GPU (the old binary's
# two runs differ from iteration 1's gradient norm on), so the bit checks
# run on t/train-cuda.c's tiny model (4 experts, 8 micro-batches a step),
# which is: each recipe with the old binary (main 4b476e7), the new one
# on 4 lanes twice and on 1 lane; all must agree bit for bit.  Then
# ops-cuda quick, and the 8-expert shape under tensorwise scaling, old
# and new.
set -u
cd "$(dirname "$0")"
OUTD=$1
out=$OUTD/logs; mkdir -p "$out"
. .gpukit/env.sh
. ./gpu-lib.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
GL_OPS_CUDA_QUICK=1 timeout 120 t/ops-cuda.t > "$out/ops.txt" 2>&1
echo "ops-cuda (quick): exit $?, $(grep -c '^ok' "$out/ops.txt") ok, $(grep -c '^not ok' "$out/ops.txt") not ok $(el)"
grep '^not ok' "$out/ops.txt" | head -5
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
# loss, grad norm and validation loss of each line of a log
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
    tinyrun $new $r-4b $f
    GRIDLM_MOE_LANES=1 tinyrun $new $r-1 $f
    same $r-4 $r-4b
    same $r-old $r-4
    same $r-4 $r-1
done
run $old moeA-T-old 16 1 $moeA $T
run $new moeA-T 16 1 $moeA $T
cd "$out" && tar czf "$OUTD/logs.tgz" *
