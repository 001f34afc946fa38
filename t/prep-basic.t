#!/bin/sh
# prep-basic.t: gridlm-prep end to end on the built-in synthetic corpus:
# --synthetic-corpus is deterministic; --train-tokenizer; tokenizing is
# byte-identical for plain, .gz and .zst input and for 1 or 3 workers;
# --inspect prints the summary and decodes documents back to their text;
# a malformed JSON line stops the run naming the line (nothing written)
# or, with --skip-bad-lines, is skipped; --merge concatenates.
P=./src/tools/gridlm-prep
d=t/prep-basic.dir
rm -rf "$d"
mkdir -p "$d"
. "$(dirname "$0")/tap.sh"
# check DESCRIPTION COMMAND...: one result from the command's status; its
# output as comments when it fails
check() {
    what=$1; shift
    if "$@" >"$d/out" 2>&1; then pass "$what"; else
        fail "$what"; diag <"$d/out"; fi
}
fails() {
    # fails PATTERN COMMAND...: the command must fail with PATTERN in its output
    pat=$1; shift
    if "$@" >"$d/fout" 2>&1; then return 1; fi
    grep -q -- "$pat" "$d/fout" || { cat "$d/fout"; return 1; }
}
plan 16
check "synthetic corpus: 300 documents" $P --synthetic-corpus 300 --output "$d/c.jsonl"
$P --synthetic-corpus 300 --output "$d/c2.jsonl" --seed 1234
check "synthetic corpus is deterministic" cmp "$d/c.jsonl" "$d/c2.jsonl"
$P --synthetic-corpus 300 --output "$d/c3.jsonl" --seed 99
check "another seed gives another corpus" sh -c "! cmp -s '$d/c.jsonl' '$d/c3.jsonl'"
check "train a 700-token tokenizer" $P --train-tokenizer --input "$d/c.jsonl" --vocab-size 700 \
    --output "$d/tok/tokenizer.json" --quiet
tk="--tokenizer-model $d/tok"
check "tokenize with --append-eod" $P --input "$d/c.jsonl" --output-prefix "$d/a" $tk --append-eod --quiet
gzip -c "$d/c.jsonl" >"$d/c.jsonl.gz"
$P --input "$d/c.jsonl.gz" --output-prefix "$d/gz" $tk --append-eod --quiet
same() { cmp "$1_text_document.bin" "$2_text_document.bin" && cmp "$1_text_document.idx" "$2_text_document.idx"; }
check ".gz input gives the same bytes" same "$d/a" "$d/gz"
if command -v zstd >/dev/null 2>&1; then
    zstd -q -c "$d/c.jsonl" >"$d/c.jsonl.zst"
    $P --input "$d/c.jsonl.zst" --output-prefix "$d/zst" $tk --append-eod --workers 3 --quiet
    check ".zst input with 3 workers gives the same bytes" same "$d/a" "$d/zst"
else
    skip ".zst input" "zstd(1) not installed"
fi
insp() {
    $P --inspect "$d/a_text_document" --docs 0,2 $tk >"$d/insp" || return 1
    grep -q "^documents:  300$" "$d/insp" && grep -q "^dtype:      uint16" "$d/insp" || return 1
    # the decoded text of document 2 is the corpus's third line (+ eod)
    want=$(sed -n 3p "$d/c.jsonl" | sed 's/^{"text": "//; s/\\n.*//')
    grep -F -q "$want" "$d/insp"
}
check "--inspect prints the summary and decodes documents" insp
{ head -5 "$d/c.jsonl"; echo '{"text": "broken'; echo; sed -n '6,10p' "$d/c.jsonl"; echo '["not an object"]'; } >"$d/bad.jsonl"
check "a malformed line stops the run, naming the line" \
    fails "bad.jsonl:6: malformed JSON" $P --input "$d/bad.jsonl" --output-prefix "$d/bad" $tk --quiet
check "... and nothing is left under the final names" \
    sh -c "! ls '$d'/bad_text_document.* 2>/dev/null | grep -q ."
check "--skip-bad-lines reports both lines and goes on" sh -c \
    "$P --input '$d/bad.jsonl' --output-prefix '$d/skip' $tk --skip-bad-lines 2>&1 | grep -q 'bad.jsonl:13: not a JSON object; line skipped'"
check "... keeping the 10 good documents" sh -c "$P --inspect '$d/skip_text_document' | grep -q '^documents:  10$'"
check "--merge concatenates" $P --merge "$d/a_text_document" "$d/skip_text_document" --output-prefix "$d/m"
check "... 310 documents" sh -c "$P --inspect '$d/m' | grep -q '^documents:  310$'"
check "an unknown flag is refused" fails "unknown option --frobnicate" $P --frobnicate
check "a missing tokenizer is refused, naming the path" \
    fails "no/such/dir" $P --input "$d/c.jsonl" --output-prefix "$d/x" --tokenizer-model no/such/dir
rm -rf "$d"
done_testing
