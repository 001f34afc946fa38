# train-lib.sh: helpers for the t/train-*.t scripts that compare training
# runs of gridlm-train (sourced after t/env.sh; results are TAP lines, with
# t/tap.sh's helpers, sourced here).
#
#   $tmp                      a scratch directory, removed on exit
#   $base                     the flags every run gets (set by the script)
#   run NAME RANKS FLAGS...   train on RANKS ranks with $base FLAGS, the
#                             JSON log in $tmp/NAME.jsonl and the output
#                             in $tmp/NAME.log; 1 (and a note) on failure
#   worst REF GOT             the largest relative difference of loss and
#                             grad_norm over the iterations and of the
#                             validation losses of two JSON logs, or
#                             "mismatch" when the records do not pair up
#                             (fewer than 6 iterations or 2 validations
#                             count as a mismatch)
#   same A B DESC             one result: runs A and B log the same
#                             losses, gradient norms and validation
#                             losses, digit for digit (9 significant
#                             digits: a float's every bit), skipped
#                             iterations' nulls included
#   check NAME RANKS FLAGS... run, then one result: the worst difference
#                             from the run named $ref under $tol (1e-4
#                             unless set); skipped beyond 2 ranks under
#                             MPICH (busy polling)
#   differs NAME FLAGS WHAT   run NAME on one rank with $base FLAGS (one
#                             word, split on spaces), then one result: it
#                             must differ from the run named $ref by more
#                             than 1e-3 (the comparisons can fail)
#   resumed_within REF GOT FIRST N TOL [KEY...]
#                             a resumed run (JSON log GOT) against the
#                             uninterrupted one (REF): prints the largest
#                             relative difference of KEY (loss unless
#                             given; several: each of them) between each
#                             training record of GOT and REF's record of
#                             the same iteration, or "mismatch" unless GOT
#                             holds exactly N training records, of distinct
#                             iterations FIRST or later, each found in REF
#                             with non-zero values; status 0 when it is a
#                             difference under TOL
#   corpus DOCS VOCAB         a synthetic corpus of DOCS documents
#                             ($tmp/corpus.jsonl), a tokenizer of VOCAB
#                             entries trained on it ($tmp/tok.json) and
#                             the Megatron dataset of its tokens with
#                             end-of-document tokens
#                             ($tmp/ds_text_document.bin/.idx), made by
#                             gridlm-prep; its output in $tmp/prep.log;
#                             non-zero when a step fails
#
# Usage errors: gridlm-train run once, in this process, its stdout in
# $tmp/out and its stderr in $tmp/err, then one result:
#
#   refused_n LINES WHAT NEEDLE... -- ARGS...
#                             exit 2, nothing on stdout and LINES lines on
#                             stderr (several errors: one line each, then
#                             their count), every one starting
#                             "gridlm-train: error: ", holding every
#                             NEEDLE between them
#   refused WHAT NEEDLE... -- ARGS...
#                             refused_n with one line
#   collected WHAT N NEEDLE... -- ARGS...
#                             exit 2, nothing on stdout, N usage errors
#                             reported together: N lines
#                             "gridlm-train: error: ...", each NEEDLE on
#                             exactly one of them, then the count, "N
#                             usage errors above"
#   fail_run WHAT             a failed result, the last run's stdout and
#                             stderr as comments
#
# Environment (t/env.sh): MPIEXEC, MPIEXEC_FLAGS, GL_MPI_FLAVOR, top_builddir.

: "${top_builddir:=.}"
: "${tol:=1e-4}"
train="$top_builddir/src/tools/gridlm-train"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/train-lib.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/tap.sh"

run() {
    name=$1 ranks=$2
    shift 2
    # shellcheck disable=SC2086
    $MPIEXEC $MPIEXEC_FLAGS -n "$ranks" "$train" $base "$@" \
        --log-json "$tmp/$name.jsonl" >"$tmp/$name.log" 2>&1 || {
        echo "# $name: gridlm-train failed:"
        tail -5 "$tmp/$name.log" | sed 's/^/#   /'
        return 1
    }
}

same() {
    for r in "$1" "$2"; do
        grep -o '"\(iteration\|loss\|grad_norm\|valid_loss\)": [^,}]*' "$tmp/$r.jsonl" \
            >"$tmp/$r.same"
    done
    if [ -s "$tmp/$1.same" ] && cmp -s "$tmp/$1.same" "$tmp/$2.same"; then
        pass "$3"
    else
        fail "$3: the logs differ"
        diff "$tmp/$1.same" "$tmp/$2.same" | head -4 | sed 's/^/#   /'
    fi
}

worst() {
    awk '
    function val(line, key,   s) {
        if (!match(line, "\"" key "\": [^,}]*")) return "null"
        s = substr(line, RSTART, RLENGTH); sub(/^[^:]*: /, "", s); return s
    }
    function rel(a, b,   d) {
        if (a == "null" || b == "null" || b + 0 == 0) { bad = 1; return 0 }
        d = (a - b) / b; return d < 0 ? -d : d
    }
    FNR == NR && /"valid_loss"/ { rv[++nrv] = val($0, "valid_loss"); ri[nrv] = val($0, "iteration"); next }
    FNR == NR { rl[++nr] = val($0, "loss"); rg[nr] = val($0, "grad_norm"); next }
    /"valid_loss"/ {
        ngv++
        if (val($0, "iteration") != ri[ngv]) bad = 1
        d = rel(val($0, "valid_loss"), rv[ngv]); if (d > w) w = d
        next
    }
    {
        ng++
        if (val($0, "iteration") != ng) bad = 1
        d = rel(val($0, "loss"), rl[ng]); if (d > w) w = d
        d = rel(val($0, "grad_norm"), rg[ng]); if (d > w) w = d
    }
    END { if (bad || ng != nr || nr < 6 || ngv != nrv || nrv < 2) print "mismatch"
          else printf "%.3g\n", w }
    ' "$1" "$2"
}

check() {
    name=$1 ranks=$2
    if [ "$ranks" -gt 2 ] && [ "$GL_MPI_FLAVOR" = mpich ]; then
        skip "$name" "$ranks ranks under MPICH"
        return
    fi
    if ! run "$@"; then
        fail "$name: run failed"
        return
    fi
    w=$(worst "$tmp/$ref.jsonl" "$tmp/$name.jsonl")
    if [ "$w" != mismatch ] && awk -v w="$w" -v t="$tol" 'BEGIN { exit !(w < t) }'; then
        pass "$name: loss and grad norm within $w of $ref"
    else
        fail "$name: worst relative difference $w from $ref"
    fi
}

differs() {
    # shellcheck disable=SC2086
    if run "$1" 1 $2; then
        w=$(worst "$tmp/$ref.jsonl" "$tmp/$1.jsonl")
        if [ "$w" != mismatch ] && awk -v w="$w" 'BEGIN { exit !(w > 1e-3) }'; then
            pass "$3 differs by $w"
        else
            fail "$3 gives the same losses ($w)"
        fi
    else
        fail "$1 run failed"
    fi
}

resumed_within() {
    ref_log=$1 got_log=$2 first=$3 nrec=$4 rtol=$5
    shift 5
    w=$(awk -v first="$first" -v n="$nrec" -v keys="${*:-loss}" '
    function val(line, key,   s) {
        if (!match(line, "\"" key "\": [^,}]*")) return "null"
        s = substr(line, RSTART, RLENGTH); sub(/^[^:]*: /, "", s); return s
    }
    BEGIN { nk = split(keys, key, " ") }
    /"valid_loss"/ { next }
    FNR == NR {
        i = val($0, "iteration") + 0; in_ref[i] = 1
        for (k = 1; k <= nk; k++) ref[i, k] = val($0, key[k])
        next
    }
    {
        ng++
        i = val($0, "iteration") + 0
        if (!(i in in_ref) || i < first + 0 || (i in seen)) { bad = 1; next }
        seen[i] = 1
        for (k = 1; k <= nk; k++) {
            a = val($0, key[k]); b = ref[i, k]
            if (a == "null" || b == "null" || b + 0 == 0) { bad = 1; continue }
            d = (a - b) / b; if (d < 0) d = -d; if (d > w) w = d
        }
    }
    END { if (bad || ng != n + 0) print "mismatch"; else printf "%.3g\n", w }
    ' "$ref_log" "$got_log")
    echo "$w"
    [ "$w" != mismatch ] && awk -v w="$w" -v t="$rtol" 'BEGIN { exit !(w < t) }'
}

corpus() {
    prep="$top_builddir/src/tools/gridlm-prep"
    "$prep" --synthetic-corpus "$1" --output "$tmp/corpus.jsonl" >"$tmp/prep.log" 2>&1 &&
        "$prep" --train-tokenizer --input "$tmp/corpus.jsonl" --vocab-size "$2" \
            --output "$tmp/tok.json" --quiet >>"$tmp/prep.log" 2>&1 &&
        "$prep" --input "$tmp/corpus.jsonl" --output-prefix "$tmp/ds" \
            --tokenizer-model "$tmp/tok.json" --append-eod --quiet >>"$tmp/prep.log" 2>&1
}

# usage_run NEEDLE... -- ARGS...: gridlm-train ARGS, its output in $tmp/out
# and $tmp/err and its exit status in $code; the needles in $needles, one
# a line.
usage_run() {
    needles=
    while [ "$1" != "--" ]; do
        needles="$needles
$1"
        shift
    done
    shift
    "$train" "$@" >"$tmp"/out 2>"$tmp"/err
    code=$?
}

# needles_found ONCE: 0 when each of $needles is on a line of $tmp/err
# (ONCE = once: on exactly one line).
needles_found() {
    found=0
    old_ifs=$IFS
    IFS='
'
    for needle in $needles; do
        if [ "$1" = once ]; then
            [ "$(grep -cF -e "$needle" "$tmp"/err)" -eq 1 ] || found=1
        else
            grep -qF -e "$needle" "$tmp"/err || found=1
        fi
    done
    IFS=$old_ifs
    return $found
}

fail_run() {
    fail "$1"
    sed 's/^/# stdout: /' "$tmp"/out; sed 's/^/# stderr: /' "$tmp"/err
}

refused_n() {
    nlines=$1 what=$2; shift 2
    usage_run "$@"
    good=yes
    [ $code -eq 2 ] || good=no
    [ -s "$tmp"/out ] && good=no
    [ "$(wc -l <"$tmp"/err)" -eq "$nlines" ] || good=no
    [ "$(grep -c '^gridlm-train: error: ' "$tmp"/err)" -eq "$nlines" ] || good=no
    needles_found any || good=no
    if [ $good = yes ]; then pass "$what"; else echo "# exit $code"; fail_run "$what"; fi
}

refused() { refused_n 1 "$@"; }

collected() {
    what=$1 n=$2; shift 2
    usage_run "$@"
    good=yes
    [ $code -eq 2 ] || good=no
    [ -s "$tmp"/out ] && good=no
    [ "$(grep -c '^gridlm-train: error: ' "$tmp"/err)" -eq $((n + 1)) ] || good=no
    tail -n1 "$tmp"/err | grep -q ": $n usage errors above: " || good=no
    needles_found once || good=no
    if [ $good = yes ]; then pass "$what"; else echo "# exit $code"; fail_run "$what"; fi
}
