#!/bin/sh
# prep-numpy.t: the .bin/.idx format seen from Megatron-LM's side.  numpy
# writes a dataset the way Megatron's _IndexWriter does and gridlm must
# read every document; gridlm-prep writes a dataset that numpy, reading
# it as Megatron's _IndexReader does, finds to hold exactly Hugging Face's
# tokens (t/prep-numpy.py).  Skipped without numpy and tokenizers.
: "${PYTHON3:=python3}"
. "$(dirname "$0")/tap.sh"
"$PYTHON3" -c 'import numpy, tokenizers' >/dev/null 2>&1 ||
    skip_all "python3 with numpy and tokenizers not found ($GL_PIP_INSTALL numpy tokenizers, $GL_PIP_VENV)"
P=./src/tools/gridlm-prep
py="$top_srcdir/t/prep-numpy.py"
d=t/prep-numpy.dir
rm -rf "$d"
mkdir -p "$d"
"$PYTHON3" "$py" write-megatron "$d" || exit 1
$P --inspect "$d/meg" --docs 0-29 >"$d/inspect" || {
    plan 1; fail "gridlm-prep --inspect reads meg"; done_testing; }
$P --synthetic-corpus 200 --output "$d/c.jsonl" &&
$P --train-tokenizer --input "$d/c.jsonl" --vocab-size 600 --output "$d/tok/tokenizer.json" --quiet &&
$P --input "$d/c.jsonl" --output-prefix "$d/g" --tokenizer-model "$d/tok" --append-eod --quiet || {
    plan 1; fail "gridlm-prep runs"; done_testing; }
"$PYTHON3" "$py" check "$d/meg.expected" "$d/inspect" "$d/g_text_document" "$d/c.jsonl" "$d/tok"
rc=$?
test $rc -eq 0 && rm -rf "$d"
exit $rc
