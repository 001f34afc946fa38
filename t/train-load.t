#!/bin/sh
# t/train-load.t: what gridlm-train checks before anything is built, as a
# Megatron-LM user expects (src/train/preflight.h), one process, CPU:
#
# 1. --dry-run refuses what the real run would refuse before its first
#    iteration: a --data-path prefix with no .idx, a truncated .idx, no
#    .bin; a tokenizer that does not parse; an unsupported setting
#    (--cp-comm-type a2a+p2p); a --load checkpoint of another model,
#    or without optimizer state when the run would resume; a --save that
#    holds another run's later checkpoint, or is a file (a missing one
#    is not created).  Each is one line, exit 2, with --world-size (no
#    launcher) and, for the data, without (a one-rank job).
# 2. --load of a Megatron-LM checkpoint (iter_N/ with .distcp files, or
#    legacy mp_rank_* directories) is refused, by the dry and the real
#    run, naming Megatron-Bridge and gridlm-ckpt import-hf.
# 3. --use-checkpoint-args takes the shape and vocabulary from the
#    checkpoint (written by a one-iteration CPU run here): the plan shows
#    them, a fine-tuning run needs no shape flag, and a shape flag that
#    disagrees is refused naming both values; with --model, without
#    --load, or with an empty --load it is refused.  These refusals are
#    reported with the command line's other usage errors, but for a
#    checkpoint that cannot be read, which stops at once.  A Hugging Face
#    import (gridlm-ckpt export-hf, then import-hf) fine-tunes the same
#    way once --seq-length is given, which it asks for.
# 4. The vocabulary comes from the tokenizer: the plan says so, the
#    start-up summary too; --vocab-size that disagrees is refused naming
#    both sizes, one that agrees is accepted; a --model preset's
#    vocabulary gives way to the tokenizer's.
# 5. --attention-backend: each of Megatron's values in the plan as
#    gridlm's implementation (fused: cudnn; flash, unfused, local:
#    native; auto), over GRIDLM_ATTENTION with a warning when they
#    disagree; GRIDLM_ATTENTION alone as before; a bad value refused.  The
#    start-up summary names the attention that runs (on the CPU here;
#    the GPU's wording: t/options-config.c).
: "${top_builddir:=.}"
. "$(dirname "$0")/train-lib.sh"     # $tmp, refused, collected, corpus
prog="$top_builddir/src/tools/gridlm-train"
prep="$top_builddir/src/tools/gridlm-prep"
[ -x "$prog" ] || skip_all "$prog not built"
trap 'umount "$tmp/ro" 2>/dev/null; rm -rf "$tmp"' EXIT INT TERM
unset GRIDLM_ATTENTION

. "$(dirname "$0")/model-flags.sh"
shape="$llama_form --num-layers 2 --hidden-size 32 --num-attention-heads 4
 --ffn-hidden-size 64 --seq-length 32"
run="--device cpu --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --train-iters 2
 --log-interval 1 --eval-iters 0"
plan1="--dry-run --world-size 1"

# planned "description" KEY=VALUE... -- args...: a --dry-run --world-size
# plan (exit 0) holding every KEY=VALUE line.
planned() {
    what=$1; shift
    want=
    while [ "$1" != "--" ]; do
        want="$want $1"
        shift
    done
    shift
    "$prog" "$@" >"$tmp"/out 2>"$tmp"/err
    code=$?
    good=yes
    [ $code -eq 0 ] || good=no
    for kv in $want; do
        grep -qxF -e "$kv" "$tmp"/out || good=no
    done
    if [ $good = yes ]; then pass "$what"; else echo "# exit $code"; fail_run "$what"; fi
}

# A tokenizer of 400 entries and a dataset (gridlm-prep), and a gridlm
# checkpoint of the small model (one iteration on the CPU).
if ! corpus 200 400; then
    sed 's/^/# /' "$tmp/prep.log"
    bail_out "gridlm-prep could not make the tokenizer and the dataset"
fi
ds="$tmp/ds_text_document"
data="--data-path $ds --tokenizer-model $tmp/tok.json"
# shellcheck disable=SC2086
if ! timeout 120 "$prog" $shape $run --mock-data --vocab-size 256 --train-iters 1 \
        --save "$tmp/ck" >"$tmp/save.log" 2>&1; then
    sed 's/^/# /' "$tmp/save.log"
    bail_out "the one-iteration run that writes the checkpoint failed"
fi


# --- 1. --dry-run refuses what the run would refuse ---
refused "dry run: a --data-path prefix with no .idx" \
    "--data-path $tmp/nope" "$tmp/nope.idx" "give the prefix of a .bin/.idx pair" -- \
    $shape $run --data-path "$tmp/nope" --tokenizer-model "$tmp/tok.json" $plan1
head -c 100 "$ds.idx" >"$tmp/cut.idx"
cp "$ds.bin" "$tmp/cut.bin"
refused "dry run: a truncated .idx" "--data-path $tmp/cut" "truncated" -- \
    $shape $run --data-path "$tmp/cut" --tokenizer-model "$tmp/tok.json" $plan1
cp "$ds.idx" "$tmp/nobin.idx"
refused "dry run: an .idx without its .bin" "--data-path $tmp/nobin" "$tmp/nobin.bin" -- \
    $shape $run --data-path "$tmp/nobin" --tokenizer-model "$tmp/tok.json" $plan1
refused "dry run: the second prefix of a blend is checked too" "--data-path $tmp/nope" -- \
    $shape $run --data-path 0.5 "$ds" 0.5 "$tmp/nope" --tokenizer-model "$tmp/tok.json" $plan1
echo '{ "model": ' >"$tmp/bad.json"
refused "dry run: a tokenizer that does not parse" "--tokenizer-model" "$tmp/bad.json" -- \
    $shape $run --data-path "$ds" --tokenizer-model "$tmp/bad.json" $plan1
refused "dry run: an unsupported setting (--cp-comm-type a2a+p2p)" \
    "--cp-comm-type a2a+p2p" "no hierarchical" -- \
    $shape $run --mock-data --vocab-size 256 --context-parallel-size 2 --cp-comm-type a2a+p2p \
    --dry-run --world-size 2
refused "dry run: --load of a checkpoint of another model, as the load compares it" \
    "--load $tmp/ck/iter_0000001.h5" "--hidden-size 32 there, 64 here" -- \
    $llama_form --num-layers 2 --hidden-size 64 --num-attention-heads 4 \
    --ffn-hidden-size 64 --seq-length 32 $run --mock-data --vocab-size 256 --load "$tmp/ck" \
    $plan1
planned "dry run: --load of a checkpoint of this model passes" vocab_size=256 -- \
    $shape $run --mock-data --vocab-size 256 --load "$tmp/ck" $plan1
refused "dry run: --save holding another run's later checkpoint" \
    "--save $tmp/ck holds $tmp/ck/iter_0000001.h5, beyond iteration 0" -- \
    $shape $run --mock-data --vocab-size 256 --save "$tmp/ck" $plan1
planned "dry run: --save of the checkpoint the run resumes from passes" vocab_size=256 -- \
    $shape $run --mock-data --vocab-size 256 --save "$tmp/ck" --load "$tmp/ck" $plan1
refused "dry run: --save under a file" "--save $tmp/corpus.jsonl/ck: $tmp/corpus.jsonl is a file, not a directory" -- \
    $shape $run --mock-data --vocab-size 256 --save "$tmp/corpus.jsonl/ck" $plan1
planned "dry run: a missing --save passes, and is not created" vocab_size=256 -- \
    $shape $run --mock-data --vocab-size 256 --save "$tmp/new/sub" $plan1
test ! -e "$tmp/new"; ok $? "the dry run created nothing"
# A read-only file system (a small tmpfs; root only): the real run's words.
mkdir -p "$tmp/ro"
if mount -t tmpfs -o size=64k,ro tmpfs "$tmp/ro" 2>/dev/null; then
    refused "dry run: --save on a read-only file system" \
        "--save $tmp/ro/ck: cannot create directory $tmp/ro/ck: Read-only file system" -- \
        $shape $run --mock-data --vocab-size 256 --save "$tmp/ro/ck" $plan1
    umount "$tmp/ro"
else
    skip "" "cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN)"
fi
# A one-rank job (MPI up, no --world-size): rank 0 reads the files.
timeout 120 "$prog" $shape $run --data-path "$tmp/nope" --tokenizer-model "$tmp/tok.json" \
    --dry-run >"$tmp"/out 2>"$tmp"/err
code=$?
if [ $code -eq 2 ] && grep -q "error: .*--data-path $tmp/nope: cannot open" "$tmp"/err; then
    pass "dry run of a one-rank job: a missing dataset, exit 2"
else
    echo "# exit $code"; fail_run "dry run of a one-rank job: a missing dataset, exit 2"
fi

# --- 2. Megatron-LM checkpoints ---
mkdir -p "$tmp/meg/iter_0000100" "$tmp/legacy/iter_0000007/mp_rank_00"
echo 100 >"$tmp/meg/latest_checkpointed_iteration.txt"
: >"$tmp/meg/iter_0000100/__0_0.distcp"
: >"$tmp/meg/iter_0000100/common.pt"
echo 7 >"$tmp/legacy/latest_checkpointed_iteration.txt"
: >"$tmp/legacy/iter_0000007/mp_rank_00/model_optim_rng.pt"
refused "dry run: a torch_dist Megatron-LM checkpoint is refused with the way through" \
    "--load $tmp/meg" "Megatron-LM checkpoint (iter_0000100/ holds .distcp files)" \
    "Megatron-Bridge" "gridlm-ckpt import-hf HF_DIR OUT" -- \
    $shape $run --mock-data --vocab-size 256 --load "$tmp/meg" $plan1
refused "dry run: a legacy (mp_rank_*) Megatron-LM checkpoint too" \
    "--load $tmp/legacy" "iter_0000007/ holds mp_rank_* files" "gridlm-ckpt import-hf" -- \
    $shape $run --mock-data --vocab-size 256 --load "$tmp/legacy" $plan1
timeout 120 "$prog" $shape $run --mock-data --vocab-size 256 --load "$tmp/meg" \
    >"$tmp"/out 2>"$tmp"/err
code=$?
if [ $code -eq 2 ] && grep -q "Megatron-Bridge" "$tmp"/err && ! grep -q "iteration " "$tmp"/out; then
    pass "the real run refuses it before training (exit 2)"
else
    echo "# exit $code"; fail_run "the real run refuses it before training (exit 2)"
fi

# --- 3. --use-checkpoint-args ---
planned "--use-checkpoint-args: the plan has the checkpoint's shape and vocabulary" \
    num_layers=2 hidden_size=32 ffn_hidden_size=64 num_attention_heads=4 seq_length=32 \
    vocab_size=256 vocab_source=checkpoint -- \
    $run --mock-data --load "$tmp/ck" --finetune --use-checkpoint-args $plan1
planned "--use-checkpoint-args: flags that agree with it are accepted" num_layers=2 -- \
    $run --mock-data --load "$tmp/ck" --finetune --use-checkpoint-args --num-layers 2 \
    --vocab-size 256 $plan1
refused "--use-checkpoint-args: flags that disagree are refused naming both values" \
    "2 flags disagree with the checkpoint $tmp/ck/iter_0000001.h5" \
    "--num-layers 2 there, 3 here" "--hidden-size 32 there, 64 here" "drop them" -- \
    $run --mock-data --load "$tmp/ck" --use-checkpoint-args --num-layers 3 --hidden-size 64 \
    $plan1
refused "--use-checkpoint-args: a --vocab-size that disagrees too" \
    "--vocab-size 256 there, 300 here" -- \
    $run --mock-data --load "$tmp/ck" --use-checkpoint-args --vocab-size 300 $plan1
refused "--use-checkpoint-args with --model" "--model tiny and --use-checkpoint-args" -- \
    $run --mock-data --load "$tmp/ck" --use-checkpoint-args --model tiny $plan1
refused "--use-checkpoint-args without --load" "--use-checkpoint-args needs --load DIR" -- \
    $run --mock-data --use-checkpoint-args $plan1
refused "--use-checkpoint-args with a --load that holds no checkpoint" \
    "--load $tmp/empty holds no checkpoint yet" -- \
    $run --mock-data --use-checkpoint-args --load "$tmp/empty" $plan1
collected "--use-checkpoint-args: its refusals are reported with the command line's others" 3 \
    "--model tiny and --use-checkpoint-args" "--adam-beta1 abc is not a finite number" \
    "1 flag disagrees with the checkpoint" -- \
    $run --mock-data --load "$tmp/ck" --use-checkpoint-args --model tiny --num-layers 3 \
    --adam-beta1 abc $plan1
collected "--use-checkpoint-args without --load: one line for it, none for the shape" 2 \
    "--use-checkpoint-args needs --load DIR" "--adam-beta1 abc is not a finite number" -- \
    $run --mock-data --use-checkpoint-args --adam-beta1 abc $plan1
collected "a checkpoint it cannot read stops at once, with the errors found before" 2 \
    "--model tiny and --use-checkpoint-args" "--load $tmp/empty holds no checkpoint yet" -- \
    $run --mock-data --use-checkpoint-args --model tiny --load "$tmp/empty" \
    --adam-beta1 abc $plan1
timeout 120 "$prog" $run --mock-data --load "$tmp/ck" --finetune --use-checkpoint-args \
    >"$tmp"/out 2>"$tmp"/err
code=$?
if [ $code -eq 0 ] && grep -q "loaded checkpoint $tmp/ck/iter_0000001.h5" "$tmp"/out "$tmp"/err &&
   grep -q "vocabulary: 256 from the checkpoint (--use-checkpoint-args)" "$tmp"/out "$tmp"/err; then
    pass "--load --finetune --use-checkpoint-args fine-tunes without shape flags"
else
    echo "# exit $code"; fail_run "--load --finetune --use-checkpoint-args fine-tunes without shape flags"
fi

# A Hugging Face import (the checkpoint exported, then imported back):
# every size but the training length, which the run must give.
ckpt="$top_builddir/src/tools/gridlm-ckpt"
mkdir -p "$tmp/imp"
if "$ckpt" export-hf --dtype fp32 "$tmp/ck/iter_0000001.h5" "$tmp/hf" >"$tmp/hf.log" 2>&1 &&
   "$ckpt" import-hf --quiet "$tmp/hf" "$tmp/imp" >>"$tmp/hf.log" 2>&1; then
    refused "--use-checkpoint-args of a Hugging Face import asks for --seq-length"         "--seq-length is required: the checkpoint --load $tmp/imp names does not give it"         "--seq-length 32" -- $run --mock-data --load "$tmp/imp" --finetune \
        --use-checkpoint-args $plan1
    refused "dry run: --load of a checkpoint without optimizer state, to resume" \
        "--load $tmp/imp/iter_0000000.h5: the checkpoint has no optimizer state" \
        "add --no-load-optim" -- $run --mock-data --load "$tmp/imp" --use-checkpoint-args \
        --seq-length 32 $plan1
    timeout 120 "$prog" $run --mock-data --load "$tmp/imp" --finetune --use-checkpoint-args \
        --seq-length 32 >"$tmp"/out 2>"$tmp"/err
    code=$?
    if [ $code -eq 0 ] && grep -q "loaded checkpoint $tmp/imp/iter_0000000.h5" "$tmp"/out "$tmp"/err; then
        pass "a Hugging Face import fine-tunes with --use-checkpoint-args --seq-length"
    else
        echo "# exit $code"; fail_run "a Hugging Face import fine-tunes with --use-checkpoint-args --seq-length"
    fi
else
    sed 's/^/# /' "$tmp/hf.log"
    fail "gridlm-ckpt export-hf, import-hf of the checkpoint"
    fail "(not run: no import)"
    fail "(not run: no import)"
fi

# --- 4. the vocabulary from the tokenizer ---
planned "the tokenizer sets the vocabulary (400 entries, padded to 512)" \
    vocab_size=400 padded_vocab_size=512 vocab_source=tokenizer -- $shape $run $data $plan1
refused "--vocab-size that disagrees with the tokenizer is refused naming both" \
    "--vocab-size 512 disagrees with the tokenizer" "$tmp/tok.json: 400 entries" \
    "drop --vocab-size" -- $shape $run $data --vocab-size 512 $plan1
planned "--vocab-size that agrees with it is accepted" vocab_size=400 -- \
    $shape $run $data --vocab-size 400 $plan1
planned "a --model preset's vocabulary (tiny: 512) gives way to the tokenizer's" \
    vocab_size=400 vocab_source=tokenizer -- --model tiny $run $data $plan1
planned "--mock-data with --vocab-size: the flag sets it" vocab_size=256 \
    vocab_source=vocab-size -- $shape $run --mock-data --vocab-size 256 $plan1
# shellcheck disable=SC2086
timeout 120 "$prog" $shape $run $data --dry-run >"$tmp"/out 2>"$tmp"/err
if grep -q "vocab 400 (padded 512, from the tokenizer)" "$tmp"/out "$tmp"/err; then
    pass "the start-up summary says where the vocabulary came from"
else
    fail_run "the start-up summary says where the vocabulary came from"
fi
if grep -q "attention: the CPU back end's reference attention" "$tmp"/out "$tmp"/err; then
    pass "the start-up summary says which attention runs (--device cpu: the CPU's)"
else
    fail_run "the start-up summary says which attention runs (--device cpu: the CPU's)"
fi

# --- 5. --attention-backend ---
m="$shape $run --mock-data --vocab-size 256 $plan1"
for pair in fused=cudnn flash=native unfused=native local=native auto=auto; do
    b=${pair%=*} i=${pair#*=}
    # shellcheck disable=SC2086
    planned "--attention-backend $b is gridlm's $i attention" \
        attention_backend="$b" attention="$i" -- $m --attention-backend "$b"
done
# shellcheck disable=SC2086
GRIDLM_ATTENTION=native "$prog" $m --attention-backend fused >"$tmp"/out 2>"$tmp"/err
if grep -qx attention=cudnn "$tmp"/out &&
   grep -q "warning: --attention-backend fused (gridlm's cudnn attention) overrides GRIDLM_ATTENTION=native" "$tmp"/err; then
    pass "the flag wins over GRIDLM_ATTENTION, and the conflict is reported"
else
    fail_run "the flag wins over GRIDLM_ATTENTION, and the conflict is reported"
fi
# shellcheck disable=SC2086
GRIDLM_ATTENTION=native "$prog" $m >"$tmp"/out 2>"$tmp"/err
if grep -qx attention=native "$tmp"/out && grep -qx attention_backend= "$tmp"/out &&
   [ ! -s "$tmp"/err ]; then
    pass "without the flag GRIDLM_ATTENTION decides, silently"
else
    fail_run "without the flag GRIDLM_ATTENTION decides, silently"
fi
refused "a bad --attention-backend" "--attention-backend sdpa" \
    "flash, fused, unfused, local or auto" -- $m --attention-backend sdpa

done_testing
