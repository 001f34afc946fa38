#!/bin/sh
# train-cp: context parallelism trains the same model as one rank.
#
# The tiny model for 20 iterations at --context-parallel-size 2 and 4 with
# each --cp-comm-type (p2p: the ring; all_gather; a2a: Ulysses), alone
# and with TP 2 + sequence parallelism, PP 2, DP 2 (with full
# recomputation: the ring runs again in the backward) and the distributed
# optimizer: the loss and gradient norm of every iteration, and the
# validation losses, within 1e-5 of the single rank's.  Sequence lengths
# at the edges of divisibility (chunks of one token; 2 x CP dividing the
# length exactly, and not: refused with the fix).  Qwen3's
# --qk-layernorm at CP 2 (p2p and a2a).  Attention and hidden dropout
# (0.1) at CP 2 with each comm type, with TP 2 + SP and TP 4 + SP, under
# full recomputation, and in Megatron's GPT form: the masks are the
# single rank's.  Real data with --eod-mask-loss, so documents end
# inside a chunk and targets are masked.  A checkpoint saved at CP 2
# resumes at CP 1, one saved at CP 1 at CP 2 and at CP 4, one saved at
# CP 4 at CP 1, and one saved at CP 2 at CP 2 with TP 2.  The ring
# waiting for each pass before its block gives the overlapped ring's
# bits.  a2a with heads that CP does not divide and a2a+p2p are refused.
# Ranks beyond two are skipped under MPICH (busy polling).
#
# Environment (t/env.sh): MPIEXEC, MPIEXEC_FLAGS, GL_MPI_FLAVOR, top_builddir.

. "$(dirname "$0")/train-lib.sh"
. "$(dirname "$0")/model-flags.sh"

tol=1e-5
shape="--device cpu --seed 1234 --num-layers 2 --hidden-size 64
 --num-attention-heads 8 --num-query-groups 4 --ffn-hidden-size 176
 --micro-batch-size 2 --global-batch-size 8 --train-iters 20 --lr 1e-3
 --lr-warmup-iters 2 --log-interval 1 --eval-interval 10 --eval-iters 2"
tiny="$llama_form $shape"
base="$tiny --mock-data --vocab-size 512 --seq-length 32"

plan 39
if ! run ref 1; then
    bail_out "the single-rank reference run failed"
fi
ref=ref
CP2="--context-parallel-size 2"
CP4="--context-parallel-size 4"
AG="--cp-comm-type all_gather"
A2A="--cp-comm-type a2a"
# shellcheck disable=SC2086
{
check cp2 2 $CP2
check cp2-all-gather 2 $CP2 $AG
check cp2-a2a 2 $CP2 $A2A
check cp4 4 $CP4
check cp4-all-gather 4 $CP4 $AG
check cp4-a2a 4 $CP4 $A2A
check cp2-tp2-sp 4 $CP2 --tensor-model-parallel-size 2 --sequence-parallel
check cp2-tp2-sp-all-gather 4 $CP2 $AG --tensor-model-parallel-size 2 --sequence-parallel
check cp2-tp2-sp-a2a 4 $CP2 $A2A --tensor-model-parallel-size 2 --sequence-parallel
check cp2-pp2 4 $CP2 --pipeline-model-parallel-size 2
check cp2-dp2-full-recompute 4 $CP2 --recompute-granularity full --recompute-method uniform \
    --recompute-num-layers 1
check cp2-dp2-distopt 4 $CP2 --use-distributed-optimizer
}

# The ring's exchanges overlap the blocks' computation (cp.c); waiting
# for each pass before its block (GRIDLM_CP_RING_OVERLAP=0) computes the
# same sums in the same order: CP 4's losses, gradient norms and
# validation losses to the last digit printed (%.9g).
if [ "$GL_MPI_FLAVOR" = mpich ]; then
    skip "cp4-serial" "4 ranks under MPICH"
else
    GRIDLM_CP_RING_OVERLAP=0
    export GRIDLM_CP_RING_OVERLAP
    # shellcheck disable=SC2086
    if run cp4-serial 4 $CP4 && grep -q "each pass waited for before the block" \
           "$tmp/cp4-serial.log"; then
        w=$(worst "$tmp/cp4.jsonl" "$tmp/cp4-serial.jsonl")
        if [ "$w" = 0 ]; then
            pass "cp4-serial: the ring waiting for each pass gives the overlapped ring's bits"
        else
            fail "cp4-serial: worst relative difference $w from the overlapped ring"
        fi
    else
        fail "cp4-serial: the run failed or did not wait for each pass"
    fi
    unset GRIDLM_CP_RING_OVERLAP
fi

# Sequence lengths at the edges: chunks of one token (8 = 2 x CP 4), and
# 36, which 2 x CP 2 divides and 2 x CP 4 does not.
# shellcheck disable=SC2086
{
base="$tiny --mock-data --vocab-size 512 --seq-length 8"
if run ref8 1; then
    ref=ref8
    check seq8-cp4 4 $CP4
    check seq8-cp4-a2a 4 $CP4 $A2A
else
    fail "seq 8: the single-rank run failed"
fi
base="$tiny --mock-data --vocab-size 512 --seq-length 36"
if run ref36 1; then
    ref=ref36
    check seq36-cp2 2 $CP2
else
    fail "seq 36: the single-rank run failed"
fi
}
out=$("$train" $base $CP4 --dry-run --world-size 4 2>&1)
case $out in
*"not divisible by 2 x --context-parallel-size = 8"*"multiple of 8"*)
    pass "seq 36 at CP 4 is refused with the fix" ;;
*) fail "seq 36 at CP 4: $out" ;;
esac

# Qwen3's form: --qk-layernorm (RMSNorm over each head of q and k, heads
# of --kv-channels 16, not hidden / heads, as in t/train-qknorm.t).  The
# norm is per token and head, so each rank normalises its own rows; the
# ring passes (and Ulysses trades) the normalised, rotated keys.
# shellcheck disable=SC2086
{
base="$tiny --mock-data --vocab-size 512 --seq-length 32 --qk-layernorm --kv-channels 16"
if run refqk 1; then
    ref=refqk
    check qknorm-cp2 2 $CP2
    check qknorm-cp2-a2a 2 $CP2 $A2A
else
    fail "qk-layernorm: the single-rank run failed"
    fail "qk-layernorm: CP 2 a2a not compared"
fi
}

# Dropout, attention and hidden at 0.1: the masks are keyed by positions
# in the full sequence (hidden: each token's global row; attention: each
# score's global query and key, and under Ulysses the global head), so
# CP draws the single rank's masks: with each comm type, with TP 2 + SP,
# TP 4 + SP on micro-batches of one sample (a rank's own rows then start
# in the middle of a chunk), and under full
# recomputation (the masks drawn again).  The run without dropout must
# differ.  Then Megatron's GPT form (its defaults: LayerNorm, GeLU,
# learned positions, biases, dropout 0.1), where the hidden dropout is
# the bias-dropout-add fused with the next LayerNorm.
# shellcheck disable=SC2086
{
drop="--attention-dropout 0.1 --hidden-dropout 0.1"
base="$tiny --mock-data --vocab-size 512 --seq-length 32 $drop"
if run refdrop 1; then
    ref=refdrop
    check dropout-cp2 2 $CP2
    check dropout-cp2-all-gather 2 $CP2 $AG
    check dropout-cp2-a2a 2 $CP2 $A2A
    check dropout-cp2-tp2-sp 4 $CP2 --tensor-model-parallel-size 2 --sequence-parallel
    check dropout-cp2-tp2-sp-a2a 4 $CP2 $A2A --tensor-model-parallel-size 2 \
        --sequence-parallel
    check dropout-cp2-tp4-sp-mbs1 8 $CP2 --tensor-model-parallel-size 4 --sequence-parallel \
        --micro-batch-size 1
    check dropout-cp2-full-recompute 2 $CP2 --recompute-granularity full \
        --recompute-method uniform --recompute-num-layers 1
    differs dropout-off "--attention-dropout 0 --hidden-dropout 0" "the run without dropout"
else
    fail "dropout: the single-rank run failed"
    for x in 1 2 3 4 5 6 7; do fail "dropout: CP run $x not compared"; done
fi
base="$shape --mock-data --vocab-size 512 --seq-length 32"
if run refgpt 1; then
    ref=refgpt
    check gpt-cp2 2 $CP2
    check gpt-cp2-tp2-sp-all-gather 4 $CP2 $AG --tensor-model-parallel-size 2 \
        --sequence-parallel
else
    fail "GPT form: the single-rank run failed"
    fail "GPT form: CP 2 TP 2 SP not compared"
fi
}

# Refusals: Ulysses (a2a) needs CP to divide the local query and K/V
# heads (TP 2 leaves 2 K/V heads for CP 4); a2a+p2p is not built.
base="$tiny --mock-data --vocab-size 512 --seq-length 32"
out=$("$train" $base $CP4 $A2A --tensor-model-parallel-size 2 --dry-run --world-size 8 2>&1)
case $out in
*"--cp-comm-type a2a"*"--context-parallel-size 4"*"4 query heads"*"2 key/value heads"*"use --cp-comm-type p2p or all_gather"*)
    pass "a2a with K/V heads that CP does not divide is refused with the numbers" ;;
*) fail "a2a heads: $out" ;;
esac
out=$("$train" $base $CP2 --cp-comm-type a2a+p2p --dry-run --world-size 2 2>&1)
case $out in
*"--cp-comm-type a2a+p2p"*"use --cp-comm-type p2p, all_gather or a2a"*)
    pass "a2a+p2p is refused with a reason" ;;
*) fail "a2a+p2p: $out" ;;
esac

# Checkpoints across layouts: a run saved after 10 iterations (of a
# 20-iteration schedule) at one layout resumes at another, its last 10
# iterations as the uninterrupted single rank's (ref).
#
# resumed NAME WHAT SAVE_RANKS "SAVE_FLAGS" RESUME_RANKS "RESUME_FLAGS":
# one result, described by WHAT (skipped beyond 2 ranks under MPICH, as
# check); the checkpoint stays in $tmp/ck-NAME.
# resumes CK NAME WHAT RESUME_RANKS "RESUME_FLAGS": the same result for
# another resume of the checkpoint that resumed CK saved (no save run).
resumed() {
    ck=$1 what=$2     # not name: run sets it
    shift 2
    if { [ "$1" -gt 2 ] || [ "$3" -gt 2 ]; } && [ "$GL_MPI_FLAVOR" = mpich ]; then
        skip "$what" "more than 2 ranks under MPICH"
        return
    fi
    # shellcheck disable=SC2086
    if run "save-$ck" "$1" $2 --save "$tmp/ck-$ck" --save-interval 10 \
           --train-iters 10 --lr-decay-iters 20; then
        resumes "$ck" "$ck" "$what" "$3" "$4"
    else
        fail "$what: the save failed"
    fi
}
resumes() {
    ck=$1 rname=$2 what=$3
    if [ "$4" -gt 2 ] && [ "$GL_MPI_FLAVOR" = mpich ]; then
        skip "$what" "more than 2 ranks under MPICH"
        return
    fi
    # shellcheck disable=SC2086
    if [ -d "$tmp/ck-$ck" ] && run "resume-$rname" "$4" $5 --load "$tmp/ck-$ck"; then
        if w=$(resumed_within "$tmp/ref.jsonl" "$tmp/resume-$rname.jsonl" 11 10 1e-5); then
            pass "$what: iterations 11-20 within $w"
        else
            fail "$what: worst relative difference $w"
        fi
    else
        fail "$what: no checkpoint, or the resume failed"
    fi
}
resumed cp2-cp1 "saved at CP 2, resumed at CP 1" 2 "$CP2" 1 ""
resumed cp1-cp2 "saved at CP 1, resumed at CP 2" 1 "" 2 "$CP2"
resumes cp1-cp2 cp1-cp4 "saved at CP 1, resumed at CP 4" 4 "$CP4"
resumed cp4-cp1 "saved at CP 4, resumed at CP 1" 4 "$CP4" 1 ""
resumed cp2-cp2tp2 "saved at CP 2, resumed at CP 2 with TP 2" 2 "$CP2" 4 \
    "$CP2 --tensor-model-parallel-size 2"

# Real data: documents of the synthetic corpus end inside chunks (of 8
# tokens at CP 4), --eod-mask-loss masks their targets.
prep="$top_builddir/src/tools/gridlm-prep"
if "$prep" --synthetic-corpus 200 --output "$tmp/corpus.jsonl" >"$tmp/prep.log" 2>&1 &&
   "$prep" --train-tokenizer --input "$tmp/corpus.jsonl" --vocab-size 600 \
       --output "$tmp/tok.json" --quiet >>"$tmp/prep.log" 2>&1 &&
   "$prep" --input "$tmp/corpus.jsonl" --output-prefix "$tmp/ds" \
       --tokenizer-model "$tmp/tok.json" --append-eod --quiet >>"$tmp/prep.log" 2>&1; then
    base="$tiny --data-path $tmp/ds_text_document --tokenizer-model $tmp/tok.json
 --split 98,2,0 --eod-mask-loss --seq-length 64"
    if run data 1; then
        ref=data
        # shellcheck disable=SC2086
        check data-cp4 4 $CP4
        check data-cp4-all-gather 4 $CP4 $AG
        check data-cp4-a2a 4 $CP4 $A2A
    else
        fail "real data: single-rank run failed"
        fail "real data: CP 4 not compared"
        fail "real data: CP 4 all_gather not compared"
    fail "real data: CP 4 a2a not compared"
    fi
else
    sed 's/^/#   /' "$tmp/prep.log" | tail -5
    fail "real data: gridlm-prep could not build the dataset"
    fail "real data: CP 4 not compared"
    fail "real data: CP 4 all_gather not compared"
    fail "real data: CP 4 a2a not compared"
fi
done_testing
