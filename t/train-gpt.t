#!/bin/sh
# train-gpt: Megatron's GPT form (issue 16) trained under every layout.
#
# A small GPT (LayerNorm with --apply-layernorm-1p, GeLU MLP of 4h,
# biases on every linear, learned absolute positions, tied embeddings)
# with --hidden-dropout 0.1 trains 20 iterations on one rank and under TP 2
# with sequence parallelism, interleaved PP 2, DP 2 with the distributed
# optimizer, (2,2,2) with both, 8 x 1 micro-batches against 1 x 8, and
# selective and full recomputation: the dropout masks are keyed by (seed,
# iteration, layer, site, element of the global batch's tensor), so every
# layout draws the same masks and the losses and gradient norms of every
# iteration must agree within 1e-5 of the single-rank run (validation
# losses, which drop nothing, too).  Under --rampup-batch-size (global
# batches of 4, 8, 12, 16) DP 2 and TP 2 + SP train as one rank too.
# Dropout must change the run (against
# --hidden-dropout 0), and another seed must change the masks.  A
# checkpoint saved at iteration 5 on one rank resumes under TP 2 with
# sequence parallelism and gives iterations 6-10 of the uninterrupted run.
# Qwen2's form (--add-qkv-bias on the Llama form) trains on TP 2 as on
# one rank.  With --attention-dropout 0.1 as well (masks keyed by global
# sample, global head, query and key), TP 2 + SP, PP 2, DP 2 with the
# distributed optimizer, (2,2,2) and full recomputation agree with one
# rank, and attention dropout changes the run.
#
# Environment (t/env.sh): MPIEXEC, MPIEXEC_FLAGS, GL_MPI_FLAVOR, top_builddir.

. "$(dirname "$0")/train-lib.sh"

tol=1e-5
gpt="--device cpu --mock-data --seed 1234 --num-layers 4 --hidden-size 64
 --num-attention-heads 8 --seq-length 32 --max-position-embeddings 48 --vocab-size 512
 --micro-batch-size 2 --global-batch-size 16 --train-iters 20 --lr 1e-3
 --lr-warmup-iters 2 --log-interval 1 --eval-interval 10 --eval-iters 2
 --normalization LayerNorm --apply-layernorm-1p --position-embedding-type learned_absolute
 --add-bias-linear --attention-dropout 0"
base="$gpt --hidden-dropout 0.1"

plan 21
if ! run ref 1; then
    bail_out "the single-rank GPT run failed"
fi
if grep -q 'model: GPT-style' "$tmp/ref.log" &&
   grep -q 'LayerNorm 1p, GeLU, learned absolute positions, linear biases' "$tmp/ref.log" &&
   grep -q 'hidden dropout 0.1' "$tmp/ref.log"; then
    pass "the start-up summary names the GPT form"
else
    fail "the start-up summary does not name the GPT form"
    grep 'model:' "$tmp/ref.log" | sed 's/^/#   /'
fi
ref=ref
L222="--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2"
# shellcheck disable=SC2086
{
check tp2-sp 2 --tensor-model-parallel-size 2 --sequence-parallel
check tp2 2 --tensor-model-parallel-size 2
check pp2-interleaved 2 --pipeline-model-parallel-size 2 \
    --num-layers-per-virtual-pipeline-stage 1
check dp2-distopt 2 --use-distributed-optimizer
check 222-sp-distopt 8 $L222 --sequence-parallel --use-distributed-optimizer
check recompute-selective 1 --recompute-granularity selective
check recompute-full 1 --recompute-granularity full --recompute-method uniform \
    --recompute-num-layers 2
}

# 8 x 1 against 1 x 8 micro-batches: a token's row does not move.
if run mbs8 1 --micro-batch-size 8 --global-batch-size 8; then
    ref=mbs8
    check mbs1x8-dp2 2 --micro-batch-size 1 --global-batch-size 8
    ref=ref
else
    fail "mbs 8 x 1 micro-batch run failed"
fi

# Dropout and its seed change the run (the comparison can fail).
# --rampup-batch-size: the global batch grows 4, 8, 12, 16; a token's
# dropout row stays its place in its iteration's batch, so DP 2 and TP 2
# with sequence parallelism draw the masks one rank draws.
saved=$base
base=$(echo "$base" | sed -e 's/--train-iters 20/--train-samples 160 --rampup-batch-size 4 4 48/' \
    -e 's/--lr-warmup-iters 2/--lr-warmup-samples 16/')
if run ramp 1; then
    ref=ramp
    check ramp-dp2 2
    check ramp-tp2-sp 2 --tensor-model-parallel-size 2 --sequence-parallel
    ref=ref
else
    fail "ramp-up: the single-rank run failed"
    fail "ramp-up: the single-rank run failed"
fi
base=$saved

base=$gpt
differs nodrop "--hidden-dropout 0" "no dropout"
base="$gpt --hidden-dropout 0.1"
differs seed99 "--seed 99" "another seed"

# A GPT checkpoint: saved on one rank, resumed under TP 2 + SP.
base="$base --train-iters 10"
if run full 1 --save "$tmp/ck" --save-interval 5 &&
   run resumed 2 --load "$tmp/ck/iter_0000005.h5" --tensor-model-parallel-size 2 \
       --sequence-parallel; then
    if w=$(resumed_within "$tmp/full.jsonl" "$tmp/resumed.jsonl" 6 5 1e-5); then
        pass "a GPT checkpoint resumes under TP 2 + SP: iterations 6-10 within $w"
    else
        fail "the resumed GPT run differs: $w"
    fi
else
    fail "GPT checkpoint: save or resume failed"
fi

# Attention dropout on: the same masks under every layout.
base="$gpt --hidden-dropout 0.1 --attention-dropout 0.1"
if run adrop 1; then
    ref=adrop
    # shellcheck disable=SC2086
    {
    check adrop-tp2-sp 2 --tensor-model-parallel-size 2 --sequence-parallel
    check adrop-pp2 2 --pipeline-model-parallel-size 2
    check adrop-dp2-distopt 2 --use-distributed-optimizer
    check adrop-222-sp-distopt 8 $L222 --sequence-parallel --use-distributed-optimizer
    check adrop-recompute-full 1 --recompute-granularity full --recompute-method uniform \
        --recompute-num-layers 2
    }
    ref=ref
    w=$(worst "$tmp/ref.jsonl" "$tmp/adrop.jsonl")
    if [ "$w" != mismatch ] && awk -v w="$w" 'BEGIN { exit !(w > 1e-3) }'; then
        pass "attention dropout differs by $w"
    else
        fail "attention dropout gives the same losses ($w)"
    fi
else
    fail "the single-rank run with attention dropout failed"
    n=0
    while [ $n -lt 5 ]; do
        fail "attention dropout: no single-rank reference to compare with"
        n=$((n + 1))
    done
fi

# Qwen2's form: the Llama form with QKV biases.
base="--device cpu --mock-data --seed 1234 --num-layers 2 --hidden-size 64
 --num-attention-heads 8 --num-query-groups 4 --seq-length 32 --vocab-size 512
 --micro-batch-size 2 --global-batch-size 8 --train-iters 10 --lr 1e-3
 --log-interval 1 --eval-interval 5 --eval-iters 1 --swiglu --normalization RMSNorm
 --position-embedding-type rope --disable-bias-linear --add-qkv-bias
 --attention-dropout 0 --hidden-dropout 0.1"
if run qwen 1; then
    ref=qwen
    check qwen-tp2-sp 2 --tensor-model-parallel-size 2 --sequence-parallel
else
    fail "Qwen2 form: single-rank run failed"
fi
done_testing
