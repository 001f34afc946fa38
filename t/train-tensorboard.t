#!/bin/sh
# train-tensorboard: --tensorboard-dir and Megatron-LM's --log-*-to-tensorboard
# flags, read back by the tensorboard Python package's own readers
# (t/train-tensorboard.py: its CRC-checking record reader and its
# EventAccumulator) and compared with the run's --log-json records:
#
# 1. one rank, every optional scalar asked for: the file's name, its
#    records and CRCs, Megatron's tags (each with its " vs samples" twin),
#    each iteration's loss, grad norm, learning rate, batch size, loss
#    scale, world size and memory, the timers at each log, the validation
#    loss and perplexity -- all equal to --log-json's;
# 2. two ranks, pipeline parallel: the last rank writes (as Megatron's
#    writer), --tensorboard-log-interval 2 and a queue of 1;
# 3. a second run into the same directory adds a file and leaves the
#    first as it was; --no-log-learnig-rate-to-tensorboard and
#    --no-log-loss-scale-to-tensorboard leave those tags out;
# 4. --wandb-* refused with `wandb sync --sync-tensorboard` named (an
#    empty value, Megatron's "no wandb", accepted); a --tensorboard-dir
#    that cannot be made stops the run with a message naming the flag.
#
# Skips when python3 cannot import tensorboard.
#
# Environment (t/env.sh): MPIEXEC, MPIEXEC_FLAGS, PYTHON3, top_builddir,
# top_srcdir.

: "${top_builddir:=.}" "${top_srcdir:=.}" "${PYTHON3:=python3}"
. "$(dirname "$0")/tap.sh"
train="$top_builddir/src/tools/gridlm-train"
py="$top_srcdir/t/train-tensorboard.py"
[ -x "$train" ] || skip_all "$train not built"
"$PYTHON3" -c 'import tensorboard' >/dev/null 2>&1 ||
    skip_all "python3 with the tensorboard package not found ($GL_PIP_INSTALL tensorboard, $GL_PIP_VENV)"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/train-tensorboard.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

base="--model tiny --device cpu --mock-data --train-iters 6 --lr 1e-3 --lr-warmup-iters 2
 --log-interval 1 --eval-interval 3 --eval-iters 1"

# run NAME RANKS FLAGS...: train, the JSON log in $tmp/NAME.jsonl
run() {
    name=$1 ranks=$2
    shift 2
    # shellcheck disable=SC2086
    $MPIEXEC $MPIEXEC_FLAGS -n "$ranks" "$train" $base --log-json "$tmp/$name.jsonl" "$@" \
        >"$tmp/$name.log" 2>&1 || {
        echo "# $name: gridlm-train failed:"
        tail -5 "$tmp/$name.log" | sed 's/^/#   /'
        return 1
    }
}

# check NAME FILE WORLD INTERVAL FLAGS: the reader's verdicts as results
check() {
    what=$1
    shift
    "$PYTHON3" "$py" "$@" >"$tmp/check.out" 2>&1
    code=$?
    while read -r verdict text; do
        case $verdict in
        PASS) pass "$what: $text" ;;
        FAIL) fail "$what: $text" ;;
        *) echo "# $verdict $text" ;;
        esac
    done <"$tmp/check.out"
    [ $code -eq 0 ] || fail "$what: the reader stopped (exit $code)"
}

# the one event file in DIR, or the newest
newest() { ls -t "$1"/events.out.tfevents.* 2>/dev/null | head -1; }

# --- 1. one rank, every optional scalar ---
if run one 1 --tensorboard-dir "$tmp/tb" --log-timers-to-tensorboard \
    --log-memory-to-tensorboard --log-validation-ppl-to-tensorboard \
    --log-world-size-to-tensorboard; then
    f=$(newest "$tmp/tb")
    grep -q "TensorBoard: rank 0 writes $f" "$tmp/one.log"
    ok $? "one rank: rank 0 says which file it writes"
    check "one rank" "$f" "$tmp/one.jsonl" 1 1 timers,memory,ppl,world
else
    fail "one rank: the run"
fi

# --- 2. two ranks, the last stage's rank writes ---
if run two 2 --pipeline-model-parallel-size 2 --tensorboard-dir "$tmp/tb2" \
    --tensorboard-log-interval 2 --tensorboard-queue-size 1; then
    n=$(ls "$tmp/tb2" | wc -l)
    [ "$n" -eq 1 ] && grep -q "TensorBoard: rank 1 writes" "$tmp/two.log"
    ok $? "two ranks: one file, written by the last rank ($n files)"
    check "two ranks, every 2nd iteration" "$(newest "$tmp/tb2")" "$tmp/two.jsonl" 2 2 -
else
    fail "two ranks: the run"
fi

# --- 3. a second run beside the first ---
first=$(newest "$tmp/tb")
if [ -n "$first" ] && cp "$first" "$tmp/first.copy" && sleep 1 &&
    run again 1 --tensorboard-dir "$tmp/tb" --no-log-learnig-rate-to-tensorboard \
        --no-log-loss-scale-to-tensorboard; then
    n=$(ls "$tmp/tb" | wc -l)
    [ "$n" -eq 2 ] && cmp -s "$first" "$tmp/first.copy"
    ok $? "a second run adds a file and leaves the first as it was ($n files)"
    check "without learning-rate and loss-scale" "$(newest "$tmp/tb")" "$tmp/again.jsonl" 1 1 \
        nolr,noscale
else
    fail "a second run into the same directory"
fi

# --- 4. refusals ---
for w in wandb-project wandb-entity wandb-exp-name wandb-save-dir; do
    "$train" $base --$w mine >"$tmp/w.out" 2>"$tmp/w.err"
    code=$?
    [ $code -eq 2 ] && [ "$(wc -l <"$tmp/w.err")" -eq 1 ] &&
        grep -q "^gridlm-train: error: --$w mine is not supported" "$tmp/w.err" &&
        grep -qF 'wandb sync --sync-tensorboard DIR' "$tmp/w.err" &&
        grep -qF -- '--tensorboard-dir DIR' "$tmp/w.err"
    ok $? "--$w refused, naming --tensorboard-dir and wandb sync --sync-tensorboard (exit $code)"
    [ $code -eq 2 ] || sed 's/^/# /' "$tmp/w.err"
done
"$train" $base --wandb-project "" --dry-run --world-size 1 >"$tmp/w.out" 2>"$tmp/w.err"
ok $? "an empty --wandb-project (Megatron's default: no wandb) is accepted"

: >"$tmp/afile"
"$train" $base --tensorboard-dir "$tmp/afile/tb" >"$tmp/bad.out" 2>"$tmp/bad.err"
code=$?
[ $code -ne 0 ] && grep -q -- "--tensorboard-dir $tmp/afile/tb: .*afile is a file" "$tmp/bad.err"
ok $? "a --tensorboard-dir that cannot be made stops the run, naming it (exit $code)"
[ $code -ne 0 ] || sed 's/^/# /' "$tmp/bad.err"

"$train" --help >"$tmp/help.out" 2>&1
for flag in tensorboard-dir tensorboard-log-interval tensorboard-queue-size \
    log-timers-to-tensorboard no-log-learnig-rate-to-tensorboard \
    log-batch-size-to-tensorboard no-log-loss-scale-to-tensorboard \
    log-validation-ppl-to-tensorboard log-memory-to-tensorboard \
    log-world-size-to-tensorboard wandb-project; do
    grep -q -- "--$flag" "$tmp/help.out" || missing="$missing --$flag"
done
[ -z "$missing" ]
ok $? "--help lists the TensorBoard flags${missing:+ (missing:$missing)}"

done_testing
