#!/bin/sh
# ckpt-hf-files.t: what gridlm-ckpt export-hf and import-hf leave on disk.
#
# 1. An export into a directory that holds an earlier export (sharded)
#    leaves exactly the new one (single file): no stale shards, no stale
#    index, the user's other files kept, a killed export's leftovers
#    removed, each said in one line; import-hf of the directory then
#    gives the new checkpoint's weights (fp32 round trip: checksums equal).
# 2. Links planted at the names an export writes (model.safetensors,
#    config.json) are replaced, their targets untouched.
# 3. import-hf refuses a directory that holds checkpoints and an existing
#    file, leaving both as they were.
# 4. tie_word_embeddings with an lm_head.weight: a copy of the embedding
#    imports with a warning; a different matrix is refused with the fix.
#
# Checkpoints come from gridlm-train (tiny model, CPU, one process), the
# lm_head from t/st-tool add-head: no Python needed.
: "${top_builddir:=.}"
train="$top_builddir/src/tools/gridlm-train"
ck="$top_builddir/src/tools/gridlm-ckpt"
st="$top_builddir/t/st-tool"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ckpt-hf-files.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/tap.sh"
. "$(dirname "$0")/model-flags.sh"

# check DESCRIPTION COMMAND...: one result from the command's status
check() {
    what=$1; shift
    "$@"
    ok $? "$what"
}
show() { sed 's/^/#   /' "$1"; }

tiny="$llama_form --device cpu --mock-data --seed 7 --num-layers 2 --hidden-size 32
 --num-attention-heads 4 --ffn-hidden-size 64 --seq-length 32 --vocab-size 256
 --micro-batch-size 2 --global-batch-size 4 --lr 1e-2 --log-interval 1 --eval-iters 0"

plan 14
# shellcheck disable=SC2086
if ! "$train" $tiny --train-iters 2 --save-interval 1 --save "$tmp/ck" >"$tmp/train.log" 2>&1; then
    show "$tmp/train.log"
    bail_out "the training run that makes the checkpoints failed"
fi

# --- 1. a new export replaces an earlier one ---
e="$tmp/export"
"$ck" export-hf --dtype fp32 --max-shard-size 20KB "$tmp/ck/iter_0000001.h5" "$e" >"$tmp/e1.log" 2>&1
nshards=$(ls "$e" | grep -c '^model-.*-of-.*\.safetensors$')
check "the first export is sharded ($nshards shards and an index)" \
    test "$nshards" -gt 1 -a -f "$e/model.safetensors.index.json"
echo '{"user": "file"}' >"$e/tokenizer.json"
echo old >"$e/model.safetensors.tmp.Ab12Cd"
echo old >"$e/config.json.tmp-4242"
"$ck" export-hf --dtype fp32 "$tmp/ck/iter_0000002.h5" "$e" >"$tmp/e2.log" 2>&1
rc=$?
show "$tmp/e2.log"
check "the second export (one file) succeeds" test $rc -eq 0
left=$(ls "$e" | tr '\n' ' ')
check "the directory holds exactly config.json, model.safetensors and the user's tokenizer.json ($left)" \
    test "$left" = "config.json model.safetensors tokenizer.json "
check "one line names the earlier export's weight files it removed" \
    test "$(grep -c "removed $((nshards + 1)) weight files of an earlier export" "$tmp/e2.log")" -eq 1
check "one line names the killed export's leftovers it removed" \
    test "$(grep -c 'removed 2 leftover temporary files of an interrupted earlier export' "$tmp/e2.log")" -eq 1
"$ck" import-hf --quiet "$e" "$tmp/back.h5" >"$tmp/imp.log" 2>&1
sums() { "$ck" info "$1" | awk '$1 ~ /^model\// { print $1, $4 }' | sort; }
sums "$tmp/ck/iter_0000002.h5" >"$tmp/want.sums"
sums "$tmp/back.h5" >"$tmp/got.sums"
sums "$tmp/ck/iter_0000001.h5" >"$tmp/old.sums"
check "import-hf of the directory gives the new checkpoint's weights, not the old ones" \
    sh -c "test -s '$tmp/want.sums' && cmp -s '$tmp/want.sums' '$tmp/got.sums' &&
           ! cmp -s '$tmp/old.sums' '$tmp/got.sums'"

# --- 2. links at the names an export writes ---
l="$tmp/linked"
mkdir -p "$l"
echo precious >"$tmp/victim1"
echo precious >"$tmp/victim2"
echo precious >"$tmp/victim3"
echo precious >"$tmp/victim4"
ln -s "$tmp/victim1" "$l/model.safetensors"
ln -s "$tmp/victim2" "$l/config.json"
# the names older versions wrote through, predictably
ln -s "$tmp/victim3" "$l/model.safetensors.tmp"
ln -s "$tmp/victim4" "$l/config.json.tmp"
"$ck" export-hf --dtype fp32 "$tmp/ck/iter_0000002.h5" "$l" >"$tmp/l.log" 2>&1
check "links at model.safetensors, config.json and their old temporary names: no target written" \
    sh -c "test -f '$l/model.safetensors' && ! test -L '$l/model.safetensors' &&
           ! test -L '$l/config.json' &&
           test \"\$(cat '$tmp'/victim[1-4] | tr '\n' ' ')\" = 'precious precious precious precious '"

# --- 3. import-hf never writes over a checkpoint ---
before=$(ls -l --time-style=+%s.%N "$tmp/ck" | md5sum)
"$ck" import-hf --quiet "$e" "$tmp/ck" >"$tmp/i1.log" 2>&1
rc=$?
show "$tmp/i1.log"
check "import-hf into a checkpoint directory is refused, naming it" \
    sh -c "test $rc -ne 0 && grep -q 'already holds checkpoints' '$tmp/i1.log'"
check "and the directory is as it was (tracker at 2, the same files)" \
    sh -c "test \"\$(cat '$tmp/ck/latest_checkpointed_iteration.txt')\" = 2 &&
           test \"\$(ls -l --time-style=+%s.%N '$tmp/ck' | md5sum)\" = '$before'"
cp "$tmp/back.h5" "$tmp/back.copy"
"$ck" import-hf --quiet "$e" "$tmp/back.h5" >"$tmp/i2.log" 2>&1
rc=$?
check "import-hf onto an existing file is refused and leaves it alone" \
    sh -c "test $rc -ne 0 && grep -q 'already exists' '$tmp/i2.log' &&
           cmp -s '$tmp/back.h5' '$tmp/back.copy'"

# --- 4. a tied model with an lm_head.weight ---
t="$tmp/tied"
"$ck" export-hf --dtype fp32 "$tmp/ck/iter_0000002.h5" "$t" >/dev/null 2>&1
check "the tiny model exports as tied, without lm_head.weight" \
    sh -c "grep -q '\"tie_word_embeddings\": true' '$t/config.json' &&
           ! '$st' dump '$t' | grep -q '^lm_head.weight '"
"$st" add-head "$t/model.safetensors" same
"$ck" import-hf --quiet "$t" "$tmp/tied-same.h5" >"$tmp/t1.log" 2>&1
rc=$?
show "$tmp/t1.log"
check "an lm_head.weight equal to the embedding imports, with a warning saying it is dropped" \
    sh -c "test $rc -eq 0 && grep -q 'warning: .*lm_head.weight is a copy of model.embed_tokens.weight' '$tmp/t1.log'"
check "and the import holds no lm_head" sh -c "! '$ck' info '$tmp/tied-same.h5' | grep -q 'model/lm_head'"
"$st" add-head "$t/model.safetensors" other
"$ck" import-hf --quiet "$t" "$tmp/tied-other.h5" >"$tmp/t2.log" 2>&1
rc=$?
show "$tmp/t2.log"
check "an lm_head.weight that differs is refused, naming tie_word_embeddings and both fixes" \
    sh -c "test $rc -ne 0 && grep -q 'lm_head.weight differs from model.embed_tokens.weight' '$tmp/t2.log' &&
           grep -q 'tie_word_embeddings\": false' '$tmp/t2.log' && grep -q 'remove lm_head.weight' '$tmp/t2.log' &&
           ! test -e '$tmp/tied-other.h5'"
done_testing
