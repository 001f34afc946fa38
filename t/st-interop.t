#!/bin/sh
# st-interop.t: gridlm's safetensors against the Hugging Face library.
# Python writes files (one with BF16, F16, F32 and I64 tensors; a sharded
# model directory with its index) and gridlm must read every value; gridlm
# writes a file and a sharded directory and the library must read every
# value, each checked against numpy's own conversions
# (t/st-interop.py).  Skipped without python3, safetensors and numpy
# (the skip line says how to install them).
: "${PYTHON3:=python3}"
. "$(dirname "$0")/tap.sh"
"$PYTHON3" -c 'import safetensors, numpy' >/dev/null 2>&1 ||
    skip_all "python3 with safetensors and numpy not found ($GL_PIP_INSTALL safetensors numpy, $GL_PIP_VENV)"
plan 6
py="$top_srcdir/t/st-interop.py"
d=t/st-interop.dir
rm -rf "$d"
mkdir -p "$d"
# run DESCRIPTION COMMAND...: one result; the command's output as comments
run() {
    what=$1; shift
    "$@" >"$d/out" 2>&1
    rc=$?
    diag <"$d/out"
    ok $rc "$what"
}
same() { ./t/st-tool dump "$1" >"$d/got" && diff "$2" "$d/got"; }
run "the library writes py.safetensors and py-sharded/" "$PYTHON3" "$py" write-py "$d"
run "gridlm reads every value, dtype, shape and the metadata of the library's file" \
    same "$d/py.safetensors" "$d/expected.txt"
run "gridlm reads a sharded directory through its index" \
    same "$d/py-sharded" "$d/expected-sharded.txt"
run "gridlm writes F32, BF16 and F16" ./t/st-tool write "$d/c.safetensors"
run "the library reads them exactly as numpy rounds" "$PYTHON3" "$py" check "$d/c.safetensors"
both() { ./t/st-tool write-dir "$d/c-dir" 5000 && "$PYTHON3" "$py" check "$d/c-dir"; }
run "the library reads gridlm's sharded directory through its index" both
test $tap_n -eq 6 && rm -rf "$d"
done_testing
