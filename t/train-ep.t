#!/bin/sh
# train-ep: expert parallelism gives the numbers of one expert group.
#
# The models of t/train-moe-lib.sh, 20 iterations on the CPU device, with
# --moe-token-dispatcher-type alltoall:
#   mixtral:  softmax top 2 of 4 experts on every layer, aux_loss;
#   qwen8:    the Qwen3-like model (a shared expert, pre-softmax routing,
#             seq_aux_loss and z-loss, the first layer dense) with 8
#             experts, so that EP 4 splits them, and EP 8 (eight
#             ranks, one expert each, micro-batches of 1 so that DP 8
#             divides the batch: seq_aux_loss and the z-loss do not
#             depend on how sequences are grouped) runs as well.
# Each under EP 2 (two ranks, EDP 1), EP 4 (four ranks), EP 2 on four
# ranks (EDP 2: the expert gradients summed over two ranks), EP 2 with
# PP 2, EP 2 with the distributed optimizer, and EP 2 on four ranks with
# the distributed optimizer (the experts sharded over EDP 2) and the
# overlapped reduction and gathering in small buckets, EP 2 with TP 2 on
# four ranks (ETP = TP: each EP group joins the ranks of one TP index),
# without and with sequence parallelism (and for mixtral once more with
# the distributed optimizer), and unsplit experts (ETP 1) under TP 2:
# EP 2 on two ranks (the EP group is the TP group) and EP 4 with SP on
# four (the EP group joins two TP groups), must give the single-rank
# run's loss, grad norm, validation losses and MoE losses within 1e-5
# relative.  A checkpoint saved by mixtral at EP 4 (one
# expert a rank) with the distributed optimizer resumes at EP 1 and at
# EP 2 x EDP 2 with the distributed optimizer with the uninterrupted
# run's losses, and at EP 2 x TP 2 and EP 2 x TP 2 x SP with ETP 1
# (the experts' matrices split over ETP by their global offsets) too.
# Dropping (--moe-expert-capacity-factor, with and
# without padding) is decided on each rank's own micro-batch before the
# dispatch: EP 2, EP 4 with the distributed optimizer, and EP 2 x TP 2
# with SP and ETP 1 (each TP rank dispatching its own tokens' rows, the
# padding rows among them) drop as the single rank does.  The allgather
# dispatcher (Megatron's default: every token to every EP rank, the
# outputs reduce-scattered back) gives the same numbers at EP 2 and EP 4
# for both models, and with dropping at EP 2.
# --moe-shared-expert-overlap (the shared expert computed while the
# tokens and their gradients travel, alltoall only) gives qwen8's EP 2,
# EP 2 x EDP 2 (distributed optimizer, overlapped reduction) and EP 2 x
# TP 2 with ETP 1 runs' numbers exactly; with allgather it is refused,
# as in Megatron.  What is not built with EP > 1 is refused by name: the
# allgather dispatcher with TP, CP, or an ETP other than TP (or 1 with
# EP).
#
# Runs beyond two ranks are skipped under MPICH (check, train-lib.sh).
#
# Environment (t/env.sh): MPIEXEC, MPIEXEC_FLAGS, GL_MPI_FLAVOR, top_builddir.

. "$(dirname "$0")/train-lib.sh"
. "$(dirname "$0")/model-flags.sh"
. "$(dirname "$0")/train-moe-lib.sh"

plan 80
a2a="--moe-token-dispatcher-type alltoall"
qwen8=$(echo "$qwen" | sed 's/--num-experts 6/--num-experts 8/')

# allgather MODEL: EP 2 and EP 4 with the allgather dispatcher (without
# $a2a in $base) against MODEL's single-rank run (two results each)
allgather() {
    model=$1
    ref=$model-ref
    for n in 2 4; do
        name=$model-allgather-ep$n
        if [ "$n" -gt 2 ] && [ "$GL_MPI_FLAVOR" = mpich ]; then
            skip "$name" "$n ranks under MPICH"
            skip "$name: MoE losses" "$n ranks under MPICH"
            continue
        fi
        check "$name" "$n" --expert-model-parallel-size "$n" \
            --moe-token-dispatcher-type allgather
        if same_moe "$tmp/$ref.jsonl" "$tmp/$name.jsonl"; then
            pass "$name: MoE losses within $tol"
        else
            fail "$name: MoE losses differ from $ref"
        fi
    done
}

# same_numbers A B: the JSON logs $tmp/A.jsonl and $tmp/B.jsonl are the
# same but for the timings
same_numbers() {
    for f in "$1" "$2"; do
        sed 's/"elapsed_ms": [^,]*, "tokens_per_sec_per_gpu": [^,]*, "tflops_per_gpu": [^,]*, //' \
            "$tmp/$f.jsonl" >"$tmp/$f.numbers"
    done
    [ -s "$tmp/$1.numbers" ] && cmp -s "$tmp/$1.numbers" "$tmp/$2.numbers"
}

# ep_layouts MODEL [MORE...]: EP 2, EP 4, EP 2 x EDP 2, EP 2 x PP 2, EP 2
# with the distributed optimizer, EP 2 x EDP 2 with it and the overlaps,
# EP 2 x TP 2 without and with SP, ETP 1 under TP 2 with EP 2, and with
# EP 4 and SP, and the MORE variants, against
# MODEL's single-rank run (two results each)
ep_layouts() {
    model=$1
    shift
    ref=$model-ref
    for v in ep2 ep4 ep2-edp2 ep2-pp2 ep2-distopt ep2-edp2-distopt ep2-tp2 ep2-tp2-sp \
             ep2-tp2-etp1 ep4-tp2-sp-etp1 "$@"; do
        case $v in
        ep2) n=2 f="--expert-model-parallel-size 2" ;;
        ep4) n=4 f="--expert-model-parallel-size 4" ;;
        ep8) n=8 f="--expert-model-parallel-size 8 --micro-batch-size 1" ;;
        ep2-edp2) n=4 f="--expert-model-parallel-size 2" ;;
        ep2-pp2) n=4 f="--expert-model-parallel-size 2 --pipeline-model-parallel-size 2" ;;
        ep2-distopt) n=2 f="--expert-model-parallel-size 2 --use-distributed-optimizer" ;;
        ep2-tp2) n=4 f="--expert-model-parallel-size 2 --tensor-model-parallel-size 2" ;;
        ep2-tp2-sp) n=4 f="--expert-model-parallel-size 2 --tensor-model-parallel-size 2
                           --sequence-parallel" ;;
        ep2-tp2-etp1) n=2 f="--expert-model-parallel-size 2 --tensor-model-parallel-size 2
                             --expert-tensor-parallel-size 1" ;;
        ep4-tp2-sp-etp1) n=4 f="--expert-model-parallel-size 4 --tensor-model-parallel-size 2
                                --sequence-parallel --expert-tensor-parallel-size 1" ;;
        ep2-tp2-sp-distopt) n=4 f="--expert-model-parallel-size 2 --tensor-model-parallel-size 2
                                   --sequence-parallel --use-distributed-optimizer" ;;
        *) n=4 f="--expert-model-parallel-size 2 --use-distributed-optimizer
                  --overlap-grad-reduce --overlap-param-gather --ddp-bucket-size 2000" ;;
        esac
        if [ "$n" -gt 2 ] && [ "$GL_MPI_FLAVOR" = mpich ]; then
            skip "$model-$v" "$n ranks under MPICH"
            skip "$model-$v: MoE losses" "$n ranks under MPICH"
            continue
        fi
        # shellcheck disable=SC2086
        check "$model-$v" "$n" $f
        if same_moe "$tmp/$ref.jsonl" "$tmp/$model-$v.jsonl"; then
            pass "$model-$v: MoE losses within $tol"
        else
            fail "$model-$v: MoE losses differ from $ref"
        fi
    done
}

# resumed NAME: iterations 11-20 of $tmp/NAME.jsonl within 1e-5 of the
# reference's (loss and aux loss); prints the worst, or "mismatch"
resumed() {
    grep -v valid "$tmp/mixtral-ref.jsonl" | sed -n '11,20p' >"$tmp/tail.jsonl"
    grep -v valid "$tmp/$1.jsonl" >"$tmp/got.jsonl"
    awk '
    function val(line, key,   s) {
        if (!match(line, "\"" key "\": [^,}]*")) return "null"
        s = substr(line, RSTART, RLENGTH); sub(/^[^:]*: /, "", s); return s
    }
    function rel(a, b,   d) { d = (a - b) / b; return d < 0 ? -d : d }
    FNR == NR { rl[FNR] = val($0, "loss"); ra[FNR] = val($0, "moe_aux_loss"); n = FNR; next }
    { m = FNR; d = rel(val($0, "loss"), rl[FNR]); if (d > w) w = d
      d = rel(val($0, "moe_aux_loss"), ra[FNR]); if (d > w) w = d }
    END { if (m != n || n != 10) print "mismatch"; else printf "%.3g\n", w + 0 }
    ' "$tmp/tail.jsonl" "$tmp/got.jsonl"
}

# shellcheck disable=SC2086
{
base="$tiny $mixtral $a2a"
run mixtral-ref 1 || bail_out "the single-rank mixtral run failed"
ep_layouts mixtral ep2-tp2-sp-distopt
base="$tiny $mixtral"
allgather mixtral
base="$tiny $mixtral $a2a"

# a checkpoint saved at EP 4 resumes at EP 1, EP 2 (EP 2 x EDP 2, the
# moments read into both shards of the distributed optimizer), EP 2 x
# TP 2 (each expert's matrices split in two) and EP 2 x TP 2 x SP with
# ETP 1 (two experts whole on each of two ranks)
resumes="1 2 2-tp2 2-tp2-sp-etp1"
if [ "$GL_MPI_FLAVOR" = mpich ]; then
    for to in $resumes; do
        skip "EP 4 -> EP $to resume" "4 ranks under MPICH"
    done
elif run ck-save 4 --expert-model-parallel-size 4 --use-distributed-optimizer \
        --train-iters 10 --lr-decay-iters 20 --save "$tmp/ck" --save-interval 10; then
    for to in $resumes; do
        case $to in
        1) n=1 f="--expert-model-parallel-size 1" ;;
        2) n=4 f="--expert-model-parallel-size 2 --use-distributed-optimizer" ;;
        2-tp2) n=4 f="--expert-model-parallel-size 2 --tensor-model-parallel-size 2" ;;
        *) n=2 f="--expert-model-parallel-size 2 --tensor-model-parallel-size 2
                  --sequence-parallel --expert-tensor-parallel-size 1" ;;
        esac
        if run "ck-load$to" "$n" $f --load "$tmp/ck" --lr-decay-iters 20; then
            first=$(head -1 "$tmp/ck-load$to.jsonl" | sed 's/.*"iteration": \([0-9]*\).*/\1/')
            w=$(resumed "ck-load$to")
            if [ "$first" = 11 ] && [ "$w" != mismatch ] &&
               awk -v w="$w" 'BEGIN { exit !(w < 1e-5) }'; then
                pass "saved at EP 4, resumed at EP $to: iterations 11-20 within $w"
            else
                fail "EP 4 -> EP $to resume: first iteration '$first', worst $w"
            fi
        else
            fail "EP 4 -> EP $to resume: the run failed"
        fi
    done
else
    for to in $resumes; do
        fail "EP 4 -> EP $to resume: the saving run failed"
    done
fi

base="$tiny $qwen8 $a2a"
run qwen8-ref 1 || bail_out "the single-rank qwen8 run failed"
ep_layouts qwen8 ep8
# the shared expert overlapped with the exchanges: the same numbers
for v in ep2 ep2-edp2-distopt ep2-tp2-etp1; do
    case $v in
    ep2) n=2 f="--expert-model-parallel-size 2" ;;
    ep2-tp2-etp1) n=2 f="--expert-model-parallel-size 2 --tensor-model-parallel-size 2
                         --expert-tensor-parallel-size 1" ;;
    *) n=4 f="--expert-model-parallel-size 2 --use-distributed-optimizer
              --overlap-grad-reduce --overlap-param-gather --ddp-bucket-size 2000" ;;
    esac
    if [ "$n" -gt 2 ] && [ "$GL_MPI_FLAVOR" = mpich ]; then
        skip "qwen8-$v with --moe-shared-expert-overlap" "$n ranks under MPICH"
        continue
    fi
    if run "qwen8-$v-overlap" "$n" $f --moe-shared-expert-overlap &&
       same_numbers "qwen8-$v" "qwen8-$v-overlap"; then
        pass "qwen8-$v with --moe-shared-expert-overlap: the same numbers"
    else
        fail "qwen8-$v with --moe-shared-expert-overlap: the numbers differ, or the run failed"
    fi
done
base="$tiny $qwen8"
allgather qwen8

# dropping: each rank's calls drop what the single rank's do
for pad in "" --moe-pad-expert-input-to-capacity; do
    base="$tiny $mixtral $a2a $capacity $pad"
    ref=cap-ref${pad:+-pad}
    run "$ref" 1 || bail_out "the single-rank capacity run failed"
    for v in ep2 ep4-distopt ep2-tp2-sp-etp1; do
        case $v in
        ep2) n=2 f="--expert-model-parallel-size 2" ;;
        ep2-tp2-sp-etp1) n=2 f="--expert-model-parallel-size 2 --tensor-model-parallel-size 2
                                --sequence-parallel --expert-tensor-parallel-size 1" ;;
        *) n=4 f="--expert-model-parallel-size 4 --use-distributed-optimizer" ;;
        esac
        name=cap-$v${pad:+-pad}
        if [ "$n" -gt 2 ] && [ "$GL_MPI_FLAVOR" = mpich ]; then
            skip "$name" "$n ranks under MPICH"
            skip "$name: MoE losses and dropped fraction" "$n ranks under MPICH"
            continue
        fi
        check "$name" "$n" $f
        if same_moe "$tmp/$ref.jsonl" "$tmp/$name.jsonl"; then
            pass "$name: MoE losses and dropped fraction within $tol"
        else
            fail "$name: MoE losses or dropped fraction differ from $ref"
        fi
    done
    # the allgather dispatcher drops as well (EP 2)
    name=cap-allgather-ep2${pad:+-pad}
    base="$tiny $mixtral $capacity $pad"
    check "$name" 2 --expert-model-parallel-size 2 --moe-token-dispatcher-type allgather
    if same_moe "$tmp/$ref.jsonl" "$tmp/$name.jsonl"; then
        pass "$name: MoE losses and dropped fraction within $tol"
    else
        fail "$name: MoE losses or dropped fraction differ from $ref"
    fi
done
}

# what is not built is refused by name
refused "EP 2 x TP 2 with the allgather dispatcher is refused" \
    "the allgather dispatcher is built with TP 1 only" -- \
    $tiny $mixtral --expert-model-parallel-size 2 --tensor-model-parallel-size 2
refused "ETP 1 under TP 2 without EP is refused" \
    "--expert-tensor-parallel-size 1 differs from --tensor-model-parallel-size 2" -- \
    $tiny $mixtral $a2a --tensor-model-parallel-size 2 --expert-tensor-parallel-size 1
refused "--moe-shared-expert-overlap with the allgather dispatcher is refused" \
    "--moe-shared-expert-overlap with --moe-token-dispatcher-type allgather" -- \
    $tiny $qwen --moe-shared-expert-overlap
refused "EP 2 with CP 2 is refused" \
    "expert parallelism is built with CP = 1 only" -- \
    $tiny $mixtral $a2a --expert-model-parallel-size 2 --context-parallel-size 2
refused "EP 3 of 4 experts is refused" \
    "--num-experts 4 is not divisible by --expert-model-parallel-size 3" -- \
    --world-size 3 $tiny $mixtral $a2a --expert-model-parallel-size 3 \
    --global-batch-size 6 --dry-run
done_testing
