#!/bin/sh
# ckpt-hf.t: gridlm-ckpt import-hf and export-hf against Hugging Face
# directories made by the safetensors library (t/ckpt-hf.py): for BF16,
# FP16 and FP32, tied and untied, single-file and sharded, the import
# holds every weight exactly under gridlm's name (t/ckpt-hf-check, with
# its own name table) with the vocabulary padded by zero rows, and the
# export gives back every tensor bit for bit and every config.json field;
# the same round trip for Qwen2ForCausalLM (q, k, v biases) and
# Qwen3ForCausalLM (q_norm, k_norm).
# Where transformers and torch are installed, transformers loads the
# export.  Bad directories are refused with a message.  Skipped without
# python3, safetensors and numpy.
: "${PYTHON3:=python3}"
. "$(dirname "$0")/tap.sh"
"$PYTHON3" -c 'import safetensors, numpy' >/dev/null 2>&1 ||
    skip_all "python3 with safetensors and numpy not found ($GL_PIP_INSTALL safetensors numpy, $GL_PIP_VENV)"
. "$(dirname "$0")/mpi-fold.sh"
py="$top_srcdir/t/ckpt-hf.py"
tool=./src/tools/gridlm-ckpt
d=t/ckpt-hf.dir
rm -rf "$d"
mkdir -p "$d"
# run DESCRIPTION COMMAND...: one result; output as comments on failure
run() {
    what=$1; shift
    "$@" >"$d/out" 2>&1
    rc=$?
    test $rc -eq 0 || diag <"$d/out"
    ok $rc "$what"
}
# refuse DESCRIPTION TEXT COMMAND...: the command fails naming TEXT
refuse() {
    what=$1; text=$2; shift 2
    "$@" >"$d/out" 2>&1
    rc=$?
    diag <"$d/out"
    test $rc -ne 0 && grep -q -- "$text" "$d/out"
    ok $? "$what"
}

for case in "bfloat16 untied single" "float16 tied sharded" "float32 untied sharded" "bfloat16 tied single"; do
    set -- $case
    dt=$1 tie=$2 shard=$3
    name="$dt-$tie-$shard"
    hf="$d/$name"
    exp=bf16
    test $dt = float16 && exp=fp16
    test $dt = float32 && exp=fp32
    run "$name: the library writes a Llama directory" "$PYTHON3" "$py" make "$hf" $dt $tie $shard
    run "$name: import-hf" $tool import-hf --quiet "$hf" "$d/$name.h5"
    mpi_fold "$name: import" ./t/ckpt-hf-check "$d/$name.h5" $tie
    run "$name: export-hf --dtype $exp" $tool export-hf --dtype $exp --max-shard-size 1500 \
        "$d/$name.h5" "$d/$name.out"
    run "$name: the export equals the original, tensors and config.json" \
        "$PYTHON3" "$py" compare "$hf" "$d/$name.out" $exp
done

# Qwen2ForCausalLM (the Llama form with q, k and v biases): the round
# trip gives back every tensor, the biases too, and Qwen2's config.json.
for case in "bfloat16 tied single" "float32 untied sharded"; do
    set -- $case
    dt=$1 tie=$2 shard=$3
    name="qwen2-$dt-$tie-$shard"
    exp=bf16
    test $dt = float32 && exp=fp32
    run "$name: the library writes a Qwen2 directory" \
        "$PYTHON3" "$py" make "$d/$name" $dt $tie $shard qwen2
    run "$name: import-hf" $tool import-hf --quiet "$d/$name" "$d/$name.h5"
    run "$name: export-hf --dtype $exp" $tool export-hf --dtype $exp --max-shard-size 1500 \
        "$d/$name.h5" "$d/$name.out"
    run "$name: the export equals the original, tensors and config.json" \
        "$PYTHON3" "$py" compare "$d/$name" "$d/$name.out" $exp
done

# Qwen3ForCausalLM (the Llama form with q_norm and k_norm): the same.
for case in "bfloat16 untied sharded" "float32 tied single"; do
    set -- $case
    dt=$1 tie=$2 shard=$3
    name="qwen3-$dt-$tie-$shard"
    exp=bf16
    test $dt = float32 && exp=fp32
    run "$name: the library writes a Qwen3 directory" \
        "$PYTHON3" "$py" make "$d/$name" $dt $tie $shard qwen3
    run "$name: import-hf" $tool import-hf --quiet "$d/$name" "$d/$name.h5"
    run "$name: export-hf --dtype $exp" $tool export-hf --dtype $exp --max-shard-size 1500 \
        "$d/$name.h5" "$d/$name.out"
    run "$name: the export equals the original, tensors and config.json" \
        "$PYTHON3" "$py" compare "$d/$name" "$d/$name.out" $exp
done

# A directory of its own: OUT/iter_0000000.h5 and the tracker.
mkdir -p "$d/asdir"
run "import-hf into a directory" $tool import-hf --quiet "$d/bfloat16-untied-single" "$d/asdir"
run "the tracker names iteration 0" grep -qx 0 "$d/asdir/latest_checkpointed_iteration.txt"
run "export-hf from that directory" $tool export-hf --dtype fp32 "$d/asdir" "$d/asdir.out"
run "and it round-trips" "$PYTHON3" "$py" compare "$d/bfloat16-untied-single" "$d/asdir.out" fp32

# info
$tool info "$d/float32-untied-sharded.h5" >"$d/info" 2>&1
rc=$?
diag <"$d/info" | head -40
test $rc -eq 0 && grep -q '^iteration:  0$' "$d/info" &&
    grep -q 'model/layers.1.attention.wo.weight  *\[8, 8\]  *fp32 .* ok$' "$d/info" &&
    grep -q 'all 21 checksums verified' "$d/info"
ok $? "info lists the iteration, the tensors and their verified checksums"

# transformers, where installed
"$PYTHON3" "$py" transformers "$d/float32-untied-sharded.out" "$d/float32-untied-sharded" >"$d/out" 2>&1
rc=$?
if test $rc -eq 77; then
    skip "" "transformers or torch not installed"
else
    diag <"$d/out"
    ok $rc "transformers loads the export with the original weights"
fi

# Refusals
bad="$d/bad"
cp -r "$d/float32-untied-sharded" "$bad"
sed 's/"llama"/"mistral"/; s/LlamaForCausalLM/MistralForCausalLM/' \
    "$d/float32-untied-sharded/config.json" >"$bad/config.json"
refuse "a Mistral config is refused, naming what is imported" \
    "LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, MixtralForCausalLM, Qwen3MoeForCausalLM or GPT2LMHeadModel" \
    $tool import-hf "$bad" "$d/x.h5"
sed 's/"num_hidden_layers": 2/"num_hidden_layers": 3/' \
    "$d/float32-untied-sharded/config.json" >"$bad/config.json"
refuse "a missing layer is named" "has no tensor model.layers.2" $tool import-hf "$bad" "$d/x.h5"
sed 's/"num_hidden_layers": 2/"num_hidden_layers": 1/' \
    "$d/float32-untied-sharded/config.json" >"$bad/config.json"
refuse "an extra layer is named" "model.layers.1" $tool import-hf "$bad" "$d/x.h5"
sed 's/"intermediate_size": 12/"intermediate_size": 16/' \
    "$d/float32-untied-sharded/config.json" >"$bad/config.json"
refuse "a shape that config.json contradicts is named" "implies" $tool import-hf "$bad" "$d/x.h5"
# A Qwen2 config over Llama weights lacks the biases; a Llama config over
# Qwen2 weights would drop them; a sliding window is not computed.
sed 's/"llama"/"qwen2"/; s/LlamaForCausalLM/Qwen2ForCausalLM/' \
    "$d/float32-untied-sharded/config.json" >"$bad/config.json"
refuse "Qwen2 without biases: the missing bias is named" \
    "has no tensor model.layers.0.self_attn.q_proj.bias" $tool import-hf "$bad" "$d/x.h5"
qb="$d/qbad"
cp -r "$d/qwen2-float32-untied-sharded" "$qb"
sed 's/"qwen2"/"llama"/; s/Qwen2ForCausalLM/LlamaForCausalLM/' \
    "$d/qwen2-float32-untied-sharded/config.json" >"$qb/config.json"
refuse "a Llama config over Qwen2 weights: the bias is named, not dropped" \
    "_proj.bias, which is not a weight" $tool import-hf "$qb" "$d/x.h5"
sed 's/"use_sliding_window": false/"use_sliding_window": true/' \
    "$d/qwen2-float32-untied-sharded/config.json" >"$qb/config.json"
refuse "Qwen2 with use_sliding_window true" "use_sliding_window" \
    $tool import-hf "$qb" "$d/x.h5"
# A Llama config over Qwen3 weights would drop the QK norm; a Qwen3 with
# sliding-window layers is not computed.
q3="$d/q3bad"
cp -r "$d/qwen3-float32-tied-single" "$q3"
sed 's/"qwen3"/"llama"/; s/Qwen3ForCausalLM/LlamaForCausalLM/' \
    "$d/qwen3-float32-tied-single/config.json" >"$q3/config.json"
refuse "a Llama config over Qwen3 weights: q_norm is named, not dropped" \
    "self_attn.[qk]_norm.weight, which is not a weight" $tool import-hf "$q3" "$d/x.h5"
sed 's/"full_attention"/"sliding_attention"/' \
    "$d/qwen3-float32-tied-single/config.json" >"$q3/config.json"
refuse "Qwen3 with a sliding_attention layer" "layer_types" $tool import-hf "$q3" "$d/x.h5"
refuse "a directory without config.json" "config.json" $tool import-hf "$d/nowhere" "$d/x.h5"
rm -f "$bad/config.json" && mkdir "$bad/config.json"
refuse "a config.json that is a directory" "config.json is a directory" \
    $tool import-hf "$bad" "$d/x.h5"
test ! -e "$d/x.h5" && ! ls "$d" | grep -q 'x.h5.tmp'
ok $? "refused imports leave no file behind"
refuse "export of a missing checkpoint" "does not exist" $tool export-hf "$d/none.h5" "$d/y"
refuse "a bad --dtype" "give bf16, fp16 or fp32" $tool export-hf --dtype int8 "$d/a.h5" "$d/y"

rm -rf "$d"
done_testing
