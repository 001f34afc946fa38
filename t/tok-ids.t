#!/bin/sh
# tok-ids.t: gridlm's checks of token ids against Hugging Face
# `tokenizers` (t/tok-ids.py): it loads a tokenizer.json only where
# Hugging Face gives every token the same id, and then encodes the same.
# Skipped without python3 and tokenizers (the skip line says how to
# install it).
: "${PYTHON3:=python3}"
. "$(dirname "$0")/tap.sh"
"$PYTHON3" -c 'import tokenizers' >/dev/null 2>&1 ||
    skip_all "python3 with the tokenizers package not found (${GL_PIP_INSTALL:-python3 -m pip install} tokenizers${GL_PIP_VENV:+, $GL_PIP_VENV})"
d=t/tok-ids.dir
rm -rf "$d"
"$PYTHON3" "$top_srcdir/t/tok-ids.py" "$d" ./t/tok-encode
rc=$?
test $rc -eq 0 && rm -rf "$d"
exit $rc
