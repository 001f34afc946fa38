#!/bin/sh
# prep-throughput.sh: gridlm-prep's tokenizing throughput, MB/s of JSONL
# input per worker, and its scaling with --workers.
#
#   benchmarks/prep-throughput.sh [BUILD_DIR]
#
# Environment:
#   CORPUS      a JSONL corpus (default: 200 MB of gridlm's synthetic
#               corpus, written once under $WORK)
#   TOKENIZER   a tokenizer.json or its directory (default: a GPT-2 style
#               byte-level BPE trained on the corpus by gridlm-prep)
#   WORKERS     the worker counts to try (default: 1 2 4 ... up to nproc)
#   WORK        scratch directory (default: /tmp/gridlm-prep-bench)
#
# Prints one line per worker count: MB/s, MB/s per worker, and the
# speed-up over one worker.  The goal is at least 10 MB/s per worker with
# a GPT-2-style tokenizer.  A benchmark measures; it asserts nothing.
set -e
B=${1:-build}
P="$B/src/tools/gridlm-prep"
test -x "$P" || { echo "prep-throughput: $P not found; build first (make)" >&2; exit 1; }
WORK=${WORK:-/tmp/gridlm-prep-bench}
mkdir -p "$WORK"
if [ -z "$CORPUS" ]; then
    CORPUS="$WORK/synthetic.jsonl"
    [ -s "$CORPUS" ] || "$P" --synthetic-corpus 270000 --output "$CORPUS"
fi
if [ -z "$TOKENIZER" ]; then
    TOKENIZER="$WORK/tok"
    [ -s "$TOKENIZER/tokenizer.json" ] ||
        "$P" --train-tokenizer --input "$CORPUS" --vocab-size 50257 \
             --output "$TOKENIZER/tokenizer.json" --quiet
fi
n=$(nproc 2>/dev/null || echo 1)
if [ -z "$WORKERS" ]; then
    WORKERS=1
    w=2
    while [ $w -le "$n" ]; do WORKERS="$WORKERS $w"; w=$((w * 2)); done
fi
mb=$(du -m "$CORPUS" | cut -f1)
echo "# gridlm-prep throughput: $CORPUS ($mb MB), tokenizer $TOKENIZER, $n CPUs, $(hostname)"
echo "# workers  MB/s  MB/s/worker  speedup"
base=
for w in $WORKERS; do
    out=$("$P" --input "$CORPUS" --output-prefix "$WORK/out" --tokenizer-model "$TOKENIZER" \
          --append-eod --workers "$w" --log-interval 100000000 2>&1 | grep 'MB/s with')
    rate=$(echo "$out" | sed 's/.* s: \([0-9.]*\) MB\/s with.*/\1/')
    [ -n "$base" ] || base=$rate
    awk -v w="$w" -v r="$rate" -v b="$base" \
        'BEGIN { printf "%9d %6.1f %12.1f %8.2f\n", w, r, r / w, r / b }'
done
rm -f "$WORK"/out_text_document.*
