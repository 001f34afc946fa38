#!/bin/sh
# data-megatron.t: the document, sample and shuffle indices gridlm caches
# equal those Megatron-LM's GPTDataset builds, redone in numpy with
# numpy's own RandomState (t/data-megatron.py).  Skipped without numpy.
: "${PYTHON3:=python3}"
if ! "$PYTHON3" -c 'import numpy' >/dev/null 2>&1; then
    echo "1..0 # SKIP python3 with numpy not found ($GL_PIP_INSTALL numpy, $GL_PIP_VENV)"
    exit 0
fi
d=t/data-megatron.dir
rm -rf "$d"
mkdir -p "$d"
P=./src/tools/gridlm-prep
$P --synthetic-corpus 400 --output "$d/c.jsonl" &&
$P --train-tokenizer --input "$d/c.jsonl" --vocab-size 500 --output "$d/tok/tokenizer.json" --quiet &&
$P --input "$d/c.jsonl" --output-prefix "$d/ds" --tokenizer-model "$d/tok" --append-eod --quiet || {
    echo "1..1"; echo "not ok 1 - gridlm-prep makes the dataset"; exit 1; }
"$PYTHON3" "$top_srcdir/t/data-megatron.py" . "$d/ds_text_document" "$d"
rc=$?
test $rc -eq 0 && rm -rf "$d"
exit $rc
