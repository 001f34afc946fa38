#!/bin/sh
# prep-input.t: every caller of the corpus reader (gridlm-prep's
# tokenizing and --train-tokenizer) refuses compressed input that breaks
# off or is damaged, naming the file and the byte offset, and writes
# nothing; intact multi-member gzip and multi-frame zstd input (with and
# without checksums), and compressed standard input, give the same bytes
# as the plain corpus.  Needs the gzip and zstd tools (each part is
# skipped without its tool).
P=./src/tools/gridlm-prep
d=t/prep-input.dir
rm -rf "$d"
mkdir -p "$d"
. "$(dirname "$0")/tap.sh"
# nok DESCRIPTION: a failed result, $d/out (the last command's output) as
# comments
nok() { fail "$1"; diag <"$d/out"; }
# check DESCRIPTION COMMAND...: one result from the command's status
check() {
    what=$1; shift
    if "$@" >"$d/out" 2>&1; then pass "$what"; else nok "$what"; fi
}
# refused WHAT FILE PATTERN...: tokenizing FILE fails, the message names
# the file and holds each PATTERN, and no output has a final name.
refused() {
    what=$1 f=$2; shift 2
    rm -f "$d"/x_*
    if $P --input "$f" --output-prefix "$d/x" --tokenizer-model "$d/tok" --quiet >"$d/out" 2>&1; then
        nok "$what"; return
    fi
    for p in "$f" "nothing was written" "$@"; do
        grep -q -F -- "$p" "$d/out" || { nok "$what (no \"$p\")"; return; }
    done
    if ls "$d"/x_* >/dev/null 2>&1; then nok "$what (output left behind)"; return; fi
    pass "$what"
}
same() {
    rm -f "$d"/y_*
    $P --input "$1" --output-prefix "$d/y" --tokenizer-model "$d/tok" --quiet &&
        cmp "$d/y_text_document.bin" "$d/plain_text_document.bin" &&
        cmp "$d/y_text_document.idx" "$d/plain_text_document.idx"
}
size() { wc -c <"$1" | tr -d ' '; }

plan 14
$P --synthetic-corpus 600 --output "$d/c.jsonl" || exit 1
head -300 "$d/c.jsonl" >"$d/a.jsonl"
tail -300 "$d/c.jsonl" >"$d/b.jsonl"
$P --train-tokenizer --input "$d/c.jsonl" --vocab-size 400 --output "$d/tok/tokenizer.json" --quiet || exit 1
$P --input "$d/c.jsonl" --output-prefix "$d/plain" --tokenizer-model "$d/tok" --quiet || exit 1

if command -v gzip >/dev/null 2>&1; then
    gzip -c "$d/a.jsonl" >"$d/two.gz"
    m1=$(size "$d/two.gz")
    gzip -c "$d/b.jsonl" >>"$d/two.gz"
    all=$(size "$d/two.gz")
    check "two gzip members are read whole" same "$d/two.gz"
    head -c $((m1 + (all - m1) / 2)) "$d/two.gz" >"$d/cut.gz"
    refused "gzip: a second member cut short is refused" "$d/cut.gz" "truncated gzip input" \
        "member that starts at byte $m1 " "at byte $((m1 + (all - m1) / 2)),"
    head -c $((all - 8)) "$d/two.gz" >"$d/notrailer.gz"
    refused "gzip: a member without its 8-byte trailer is refused" "$d/notrailer.gz" \
        "truncated gzip input" "at byte $((all - 8)),"
    cat "$d/two.gz" "$d/a.jsonl" >"$d/tail.gz"
    refused "gzip: bytes after the last member are refused" "$d/tail.gz" \
        "2 complete gzip members" "from byte $all on"
    check "gzip on standard input is recognised" sh -c "$P --input - --output-prefix '$d/s' \
        --tokenizer-model '$d/tok' --quiet <'$d/two.gz' && cmp '$d/s_text_document.bin' \
        '$d/plain_text_document.bin'"
    if $P --train-tokenizer --input "$d/cut.gz" --vocab-size 300 --output "$d/tok2/tokenizer.json" \
        --quiet >"$d/out" 2>&1; then
        nok "--train-tokenizer refuses a cut gzip input"
    elif grep -q "truncated gzip input" "$d/out" && ! test -e "$d/tok2/tokenizer.json"; then
        pass "--train-tokenizer refuses a cut gzip input and writes no tokenizer"
    else
        nok "--train-tokenizer refuses a cut gzip input and writes no tokenizer"
    fi
else
    for i in 1 2 3 4 5 6; do skip "" "gzip not found"; done
fi

if command -v zstd >/dev/null 2>&1; then
    zstd -q -c "$d/a.jsonl" >"$d/two.zst"
    f1=$(size "$d/two.zst")
    zstd -q -c "$d/b.jsonl" >>"$d/two.zst"
    all=$(size "$d/two.zst")
    check "two zstd frames are read whole" same "$d/two.zst"
    head -c $((f1 + (all - f1) / 2)) "$d/two.zst" >"$d/cut.zst"
    refused "zstd: a second frame cut short is refused" "$d/cut.zst" "truncated zstd input" \
        "frame that starts at byte $f1 " "at byte $((f1 + (all - f1) / 2)),"
    head -c $((all - 4)) "$d/two.zst" >"$d/nosum.zst"
    refused "zstd: a frame without its checksum bytes is refused" "$d/nosum.zst" \
        "truncated zstd input" "at byte $((all - 4)),"
    zstd -q --no-check -c "$d/a.jsonl" >"$d/nock.zst"
    zstd -q --no-check -c "$d/b.jsonl" >>"$d/nock.zst"
    check "zstd frames without checksums are read whole" same "$d/nock.zst"
    head -c $(($(size "$d/nock.zst") - 1)) "$d/nock.zst" >"$d/nockcut.zst"
    refused "zstd: a frame without checksum, one byte short, is refused" "$d/nockcut.zst" \
        "truncated zstd input"
    cp "$d/two.zst" "$d/flip.zst"
    printf '\377' | dd of="$d/flip.zst" bs=1 seek=$((all - 2)) conv=notrunc 2>/dev/null
    refused "zstd: a wrong checksum is refused" "$d/flip.zst" "corrupt zstd input" "checksum"
    check "zstd on standard input is recognised" sh -c "$P --input - --output-prefix '$d/t' \
        --tokenizer-model '$d/tok' --quiet <'$d/two.zst' && cmp '$d/t_text_document.bin' \
        '$d/plain_text_document.bin'"
else
    for i in 1 2 3 4 5 6 7; do skip "" "zstd not found"; done
fi
check "plain input still reads whole" same "$d/c.jsonl"
rm -rf "$d"
done_testing
