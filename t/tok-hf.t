#!/bin/sh
# tok-hf.t: gridlm's BPE tokenizer against Hugging Face `tokenizers`,
# token for token (GPT-2 style ByteLevel, Llama-3 style Split + ByteLevel
# with the real Llama-3 regex, added tokens with lstrip/rstrip/single_word,
# special tokens, invalid UTF-8, long whitespace runs, numbers, CJK,
# emoji), and a tokenizer.json written by gridlm-prep --train-tokenizer
# loaded by Hugging Face (t/tok-hf.py).  Skipped without python3 and
# tokenizers (the skip line says how to install it).
: "${PYTHON3:=python3}"
. "$(dirname "$0")/tap.sh"
"$PYTHON3" -c 'import tokenizers' >/dev/null 2>&1 ||
    skip_all "python3 with the tokenizers package not found ($GL_PIP_INSTALL tokenizers, $GL_PIP_VENV)"
d=t/tok-hf.dir
rm -rf "$d"
"$PYTHON3" "$top_srcdir/t/tok-hf.py" "$d" ./t/tok-encode ./src/tools/gridlm-prep
rc=$?
test $rc -eq 0 && rm -rf "$d"
exit $rc
