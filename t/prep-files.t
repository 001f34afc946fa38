#!/bin/sh
# prep-files.t: what gridlm-prep reads and writes.
#
# - Outputs (.bin/.idx, the synthetic corpus, tokenizer.json) are written
#   through temporaries: a link planted at an output's name is replaced
#   by the new file and its target never written.
# - A run removes the temporaries a killed run left beside its own
#   prefix, in one line, and leaves another prefix's alone.
# - A run that fails leaves no temporary behind.
# - A FIFO where a file is expected (--input, tokenizer.json, a dataset's
#   .idx) is refused at once, never waited on (each run has a time limit
#   of a minute: a wait would fail the test, not hang it).
P=./src/tools/gridlm-prep
d=$(mktemp -d "${TMPDIR:-/tmp}/prep-files.XXXXXX") || exit 1
trap 'rm -rf "$d"' EXIT
. "$(dirname "$0")/tap.sh"
# check DESCRIPTION COMMAND...: one result from the command's status
check() {
    what=$1; shift
    "$@"
    ok $? "$what"
}
# prep LOG ARGS...: gridlm-prep with a time limit; sets $rc
prep() {
    log=$1; shift
    timeout 60 $P "$@" >"$log" 2>&1
    rc=$?
}
victims() { cat "$d"/victim.* | tr '\n' ' '; }

plan 11
for i in 1 2 3 4; do echo precious >"$d/victim.$i"; done

ln -s "$d/victim.1" "$d/c.jsonl"
prep "$d/s.log" --synthetic-corpus 200 --output "$d/c.jsonl"
check "--synthetic-corpus onto a link: a file of its own, the target untouched" \
    sh -c "test $rc -eq 0 && test -f '$d/c.jsonl' && ! test -L '$d/c.jsonl' &&
           test \"\$(cat '$d/victim.1')\" = precious"

mkdir -p "$d/tok"
ln -s "$d/victim.2" "$d/tok/tokenizer.json"
prep "$d/t.log" --train-tokenizer --input "$d/c.jsonl" --vocab-size 400 \
    --output "$d/tok/tokenizer.json" --quiet
check "--train-tokenizer onto a link: a file of its own, the target untouched" \
    sh -c "test $rc -eq 0 && ! test -L '$d/tok/tokenizer.json' && test \"\$(cat '$d/victim.2')\" = precious"
tk="--tokenizer-model $d/tok"

o="$d/out_text_document"
ln -s "$d/victim.3" "$o.bin"
ln -s "$d/victim.4" "$o.idx"
echo old >"$o.bin.tmp.Ab12Cd"
echo old >"$o.idx-lengths.tmp-4242"
echo other >"$d/other_text_document.bin.tmp.Zz9"
prep "$d/p.log" --input "$d/c.jsonl" --output-prefix "$d/out" $tk --quiet
diag <"$d/p.log"
check "tokenizing onto links at .bin and .idx succeeds" \
    sh -c "test $rc -eq 0 && test -f '$o.bin' && ! test -L '$o.bin' && ! test -L '$o.idx'"
check "and no link's target was written" test "$(victims)" = "precious precious precious precious "
check "the killed run's leftovers beside the prefix are gone, said in one line" \
    sh -c "! test -e '$o.bin.tmp.Ab12Cd' && ! test -e '$o.idx-lengths.tmp-4242' &&
           test \$(grep -c 'removed 2 leftover temporary files of an interrupted earlier run' '$d/p.log') -eq 1"
check "another prefix's temporary stays" test -f "$d/other_text_document.bin.tmp.Zz9"
check "the dataset reads back" sh -c "$P --inspect '$o' | grep -q '^documents:  200$'"

{ head -3 "$d/c.jsonl"; echo '{"text": "broken'; } >"$d/bad.jsonl"
prep "$d/b.log" --input "$d/bad.jsonl" --output-prefix "$d/bad" $tk --quiet
check "a failing run (a malformed line) leaves no temporary and no output" \
    sh -c "test $rc -ne 0 && ! ls '$d' | grep -q '^bad_text_document'"

if mkfifo "$d/fifo.jsonl" 2>/dev/null; then
    prep "$d/f1.log" --input "$d/fifo.jsonl" --output-prefix "$d/f" $tk --quiet
    check "--input a FIFO: refused at once, naming it" \
        sh -c "test $rc -ne 0 && test $rc -ne 124 && grep -q 'fifo.jsonl is a FIFO (named pipe), not a regular file' '$d/f1.log'"
    mkdir -p "$d/ftok"
    mkfifo "$d/ftok/tokenizer.json"
    prep "$d/f2.log" --input "$d/c.jsonl" --output-prefix "$d/f" --tokenizer-model "$d/ftok" --quiet
    check "tokenizer.json a FIFO: refused at once" \
        sh -c "test $rc -ne 0 && test $rc -ne 124 && grep -q 'tokenizer.json is a FIFO' '$d/f2.log'"
    cp "$o.bin" "$d/ff_text_document.bin"
    mkfifo "$d/ff_text_document.idx"
    prep "$d/f3.log" --inspect "$d/ff_text_document"
    check "a dataset whose .idx is a FIFO: refused at once" \
        sh -c "test $rc -ne 0 && test $rc -ne 124 && grep -q 'ff_text_document.idx is a FIFO' '$d/f3.log'"
else
    skip "" "mkfifo failed"
    skip "" "mkfifo failed"
    skip "" "mkfifo failed"
fi
done_testing
