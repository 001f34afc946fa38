#!/bin/sh
# train-norm: Megatron's two loss normalisations and the batch-size
# ramp-up, on CPU ranks.
#
# 1. Loss normalisation.  By default each micro-batch's loss is the mean
#    over its unmasked tokens, averaged over micro-batches and DP;
#    --calculate-per-token-loss takes the mean over every unmasked token of
#    the global batch (src/train/batch.h).  On mock data every target
#    counts and every micro-batch holds the same number of tokens: both
#    give the same losses and gradient norms.  On a real dataset with
#    --eod-mask-loss, micro-batches hold different numbers of unmasked
#    tokens: the two differ.  Under the default normalisation DP 2, PP 2,
#    TP 2 and (2,2,2) with the distributed optimizer agree with one rank
#    (the micro-batches are the same samples whatever the layout); so does
#    DP 2 under --calculate-per-token-loss.
# 2. --rampup-batch-size 4 4 48 to global 16 over --train-samples 160
#    (micro-batch 2): 3 increments of 16 samples, so the batches go
#    4 4 4 4 8 8 12 12 and then 16 x 6: 14 iterations, 152 samples.  The
#    progress lines show each batch, DP 2 and interleaved PP 2 (4 layers)
#    agree with one rank, and a run
#    resumed from the checkpoint of iteration 6 (32 samples in, in the
#    middle of the ramp) repeats iterations 7-14 of the uninterrupted run.
# 3. The schedule on --load: resuming that checkpoint with another --lr
#    stops (exit 2) naming both flags; --use-checkpoint-opt_param-scheduler
#    takes the checkpoint's rate (the uninterrupted run's numbers again);
#    --override-opt_param-scheduler takes the command line's (they differ).
# 4. --decoupled-lr: equal to --lr (and --decoupled-min-lr to --min-lr) it
#    changes nothing; another rate changes the run, and DP 2 with the
#    distributed optimizer and PP 2 (the tied embedding's two copies) agree
#    with one rank.
#
# Environment (t/env.sh): MPIEXEC, MPIEXEC_FLAGS, GL_MPI_FLAVOR, top_builddir.

. "$(dirname "$0")/train-lib.sh"

. "$(dirname "$0")/model-flags.sh"
model="$llama_form --device cpu --seed 1234 --num-layers 2 --hidden-size 64
 --num-attention-heads 8 --num-query-groups 4 --ffn-hidden-size 176 --seq-length 64
 --micro-batch-size 2 --lr 3e-3 --log-interval 1 --eval-interval 4 --eval-iters 1"

plan 20

# --- 1. normalisation ---
base="$model --mock-data --vocab-size 512 --global-batch-size 16 --train-iters 8
 --lr-warmup-iters 2"
if run mock 1 && run mock-tok 1 --calculate-per-token-loss; then
    w=$(worst "$tmp/mock.jsonl" "$tmp/mock-tok.jsonl")
    if [ "$w" != mismatch ] && awk -v w="$w" 'BEGIN { exit !(w < 1e-6) }'; then
        pass "no masked targets: both normalisations give the same numbers ($w)"
    else
        fail "no masked targets: the normalisations differ by $w"
    fi
else
    fail "mock data runs failed"
fi

if corpus 400 600; then
    base="$model --data-path $tmp/ds_text_document --tokenizer-model $tmp/tok.json
 --split 98,2,0 --eod-mask-loss --global-batch-size 16 --train-iters 8 --lr-warmup-iters 2"
    if run data 1 && run data-tok 1 --calculate-per-token-loss; then
        w=$(worst "$tmp/data.jsonl" "$tmp/data-tok.jsonl")
        l1=$(head -1 "$tmp/data.jsonl" | sed 's/.*"loss": \([^,]*\),.*/\1/')
        t1=$(head -1 "$tmp/data-tok.jsonl" | sed 's/.*"loss": \([^,]*\),.*/\1/')
        # a few end-of-document targets per micro-batch are masked: the
        # difference is small but far above the layouts' rounding (~1e-7)
        if [ "$w" != mismatch ] && awk -v w="$w" 'BEGIN { exit !(w > 1e-5) }'; then
            pass "--eod-mask-loss: the normalisations differ (by $w)"
        else
            fail "--eod-mask-loss: the normalisations agree ($w): are targets masked?"
        fi
        # Megatron reports the per-token mean either way: the first
        # iteration, before any step, reports the same loss
        if [ "$l1" = "$t1" ]; then
            pass "the first loss reported is the same per-token mean ($l1)"
        else
            fail "first losses $l1 and $t1 differ"
        fi
        ref=data
        # shellcheck disable=SC2086
        {
        check data-dp2 2
        check data-pp2 2 --pipeline-model-parallel-size 2
        check data-tp2-sp 2 --tensor-model-parallel-size 2 --sequence-parallel
        check data-222-distopt 8 --tensor-model-parallel-size 2 \
            --pipeline-model-parallel-size 2 --use-distributed-optimizer
        ref=data-tok
        check data-tok-dp2-distopt 2 --calculate-per-token-loss --use-distributed-optimizer
        }
    else
        for k in 1 2 3 4 5 6 7; do fail "real data: runs failed"; done
    fi
else
    sed 's/^/#   /' "$tmp/prep.log" | tail -5
    for k in 1 2 3 4 5 6 7; do fail "real data: gridlm-prep could not build the dataset"; done
fi

# --- 2. batch-size ramp-up ---
base="$model --mock-data --vocab-size 512 --global-batch-size 16 --train-samples 160
 --rampup-batch-size 4 4 48 --lr-warmup-samples 16"

# from ITER NAME: NAME's training records from iteration ITER on, as
# "iteration loss grad_norm global_batch_size consumed_samples" lines.
from() {
    grep -v valid_loss "$tmp/$2.jsonl" | awk -v from="$1" '
    function val(line, key,   s) {
        if (!match(line, "\"" key "\": [^,}]*")) return "null"
        s = substr(line, RSTART, RLENGTH); sub(/^[^:]*: /, "", s); return s
    }
    val($0, "iteration") + 0 >= from {
        print val($0, "iteration"), val($0, "loss"), val($0, "grad_norm"),
              val($0, "global_batch_size"), val($0, "consumed_samples")
    }'
}

if run ramp 1 --save "$tmp/ck" --save-interval 6; then
    batches=$(from 1 ramp | awk '{ printf "%s%s", sep, $4; sep = " " }')
    if [ "$batches" = "4 4 4 4 8 8 12 12 16 16 16 16 16 16" ]; then
        pass "ramp-up: the batches grow as Megatron's calculator ($batches)"
    else
        fail "ramp-up: batches '$batches'"
    fi
    if grep -q "global batch size:     8 |" "$tmp/ramp.log" &&
       [ "$(from 14 ramp | awk '{ print $5 }')" = 152 ]; then
        pass "ramp-up: the progress lines show the batch; 152 samples in 14 iterations"
    else
        fail "ramp-up: no batch on the progress lines, or not 152 samples"
    fi
    ref=ramp
    check ramp-dp2 2
    # interleaved: every batch's micro-batches (2, 4, 6, 8) in groups of PP
    if run ramp4 1 --num-layers 4; then
        ref=ramp4
        check ramp4-pp2-interleaved 2 --num-layers 4 --pipeline-model-parallel-size 2 \
            --num-layers-per-virtual-pipeline-stage 1
    else
        fail "ramp-up: the 4-layer run failed"
    fi
    if run ramp-resume 1 --load "$tmp/ck/iter_0000006.h5"; then
        from 7 ramp >"$tmp/want"
        from 1 ramp-resume >"$tmp/got"
        w=$(paste -d ' ' "$tmp/want" "$tmp/got" | awk '
            function rel(a, b,   d) { d = (a - b) / b; return d < 0 ? -d : d }
            NF != 10 || $1 != $6 || $4 != $9 || $5 != $10 { bad = 1 }
            { if (rel($2, $7) > w) w = rel($2, $7); if (rel($3, $8) > w) w = rel($3, $8); n++ }
            END { if (bad || n != 8) print "mismatch"; else printf "%.3g\n", w }')
        if [ "$w" != mismatch ] && awk -v w="$w" 'BEGIN { exit !(w < 1e-5) }'; then
            pass "ramp-up: resumed at iteration 6, iterations 7-14 within $w"
        else
            fail "ramp-up: the resumed run differs ($w)"
            paste "$tmp/want" "$tmp/got" | sed 's/^/#   /'
        fi
    else
        fail "ramp-up: the resumed run failed"
    fi

    # --- 3. the schedule on --load ---
    if run lr-mismatch 1 --load "$tmp/ck/iter_0000006.h5" --lr 1e-3; then
        fail "--load with another --lr: not refused"
    elif grep -q "learning rate 0.001 here, 0.003 there" "$tmp/lr-mismatch.log" &&
         grep -q -- "--use-checkpoint-opt_param-scheduler" "$tmp/lr-mismatch.log" &&
         grep -q -- "--override-opt_param-scheduler" "$tmp/lr-mismatch.log"; then
        pass "--load with another --lr: refused, naming both flags"
    else
        fail "--load with another --lr: no clear refusal"
        tail -3 "$tmp/lr-mismatch.log" | sed 's/^/#   /'
    fi
    if run lr-ck 1 --load "$tmp/ck/iter_0000006.h5" --lr 1e-3 \
           --use-checkpoint-opt_param-scheduler &&
       [ "$(from 1 lr-ck)" = "$(from 1 ramp-resume)" ]; then
        pass "--use-checkpoint-opt_param-scheduler: the checkpoint's rate, the same run"
    else
        fail "--use-checkpoint-opt_param-scheduler: not the checkpoint's schedule"
    fi
    if run lr-over 1 --load "$tmp/ck/iter_0000006.h5" --lr 1e-3 \
           --override-opt_param-scheduler &&
       [ "$(from 1 lr-over | head -1 | cut -d' ' -f2)" = "$(from 1 ramp-resume | head -1 | cut -d' ' -f2)" ] &&
       [ "$(from 1 lr-over)" != "$(from 1 ramp-resume)" ]; then
        pass "--override-opt_param-scheduler: this command line's rate from the next step"
    else
        fail "--override-opt_param-scheduler: not the command line's schedule"
    fi
else
    for k in 1 2 3 4 5 6 7 8; do fail "ramp-up: the run failed"; done
fi

# --- 4. --decoupled-lr ---
base="$model --mock-data --vocab-size 512 --global-batch-size 16 --train-iters 8
 --lr-warmup-iters 2 --min-lr 1e-4 --lr-decay-style cosine"
if run dec-ref 1 && run dec-same 1 --decoupled-lr 3e-3 --decoupled-min-lr 1e-4 &&
   run dec 1 --decoupled-lr 1e-2 --decoupled-min-lr 0; then
    w=$(worst "$tmp/dec-ref.jsonl" "$tmp/dec-same.jsonl")
    if [ "$w" = 0 ]; then
        pass "--decoupled-lr equal to --lr: the same run"
    else
        fail "--decoupled-lr equal to --lr changes the run ($w)"
    fi
    w=$(worst "$tmp/dec-ref.jsonl" "$tmp/dec.jsonl")
    if [ "$w" != mismatch ] && awk -v w="$w" 'BEGIN { exit !(w > 1e-3) }'; then
        pass "--decoupled-lr 1e-2: another run (by $w)"
    else
        fail "--decoupled-lr 1e-2 changes nothing ($w)"
    fi
    ref=dec
    check dec-dp2-distopt 2 --decoupled-lr 1e-2 --decoupled-min-lr 0 --use-distributed-optimizer
    check dec-pp2 2 --decoupled-lr 1e-2 --decoupled-min-lr 0 --pipeline-model-parallel-size 2
else
    for k in 1 2 3 4; do fail "--decoupled-lr: runs failed"; done
fi
done_testing
