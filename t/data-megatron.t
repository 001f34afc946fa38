#!/bin/sh
# data-megatron.t: the document, sample and shuffle indices gridlm caches
# equal those Megatron-LM's GPTDataset builds, redone in numpy with
# numpy's own RandomState (t/data-megatron.py).  Skipped without numpy.
: "${PYTHON3:=python3}"
. "$(dirname "$0")/tap.sh"
"$PYTHON3" -c 'import numpy' >/dev/null 2>&1 ||
    skip_all "python3 with numpy not found ($GL_PIP_INSTALL numpy, $GL_PIP_VENV)"
d=t/data-megatron.dir
rm -rf "$d"
mkdir -p "$d"
P=./src/tools/gridlm-prep
$P --synthetic-corpus 400 --output "$d/c.jsonl" &&
$P --train-tokenizer --input "$d/c.jsonl" --vocab-size 500 --output "$d/tok/tokenizer.json" --quiet &&
$P --input "$d/c.jsonl" --output-prefix "$d/ds" --tokenizer-model "$d/tok" --append-eod --quiet || {
    plan 1; fail "gridlm-prep makes the dataset"; done_testing; }
"$PYTHON3" "$top_srcdir/t/data-megatron.py" . "$d/ds_text_document" "$d"
rc=$?
test $rc -eq 0 && rm -rf "$d"
exit $rc
