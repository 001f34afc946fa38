#!/bin/sh
# eval-hf.t: an imported Hugging Face Llama computes what transformers
# computes.
#
# t/eval-hf.py writes small random LlamaForCausalLM directories with the
# safetensors library and a Megatron dataset, and computes, in float64
# with numpy, the mean next-token loss over the dataset's documents the
# way transformers' modeling_llama does (RMSNorm, rotate-half RoPE with
# llama3 frequency scaling, GQA by repeat_kv, causal softmax, SwiGLU,
# tied or untied head), each document its own sequence of at most
# --seq-length + 1 tokens as gridlm-eval defines it.  For each variant:
#
#   a  fp32, untied, one file, llama3 scaling (factor 32), head_dim 32
#      != hidden / heads, GQA 4:2, vocabulary 1100 (padded to 1152 on
#      import, to 1280 under TP 2);
#   b  bf16, tied, three shards with an index, no scaling, head_dim
#      implied, GQA 8:2, vocabulary 1000, 3 layers;
#
# gridlm-ckpt import-hf, then gridlm-eval --load --json on the CPU back
# end under 1 rank and 2 ranks (TP 2, PP 2, DP 2) must give the oracle's
# loss within 5e-6 relative and its token and document counts exactly;
# export-hf gives back every tensor bit for bit (fp32 and bf16: both are
# exact in the fp32 checkpoint) and config.json.
#
# The tolerance: gridlm computes in fp32 (unit roundoff 6e-8), the oracle
# in float64.  Each logit is a chain of a few dot products of at most 160
# terms and the loss is a mean of log-softmaxes over 1000 logits of
# magnitude ~10; a few hundred roundings of relative size 6e-8 bound the
# error near 1e-5, and in practice it is 1e-8 to 2e-7 (the runs print
# the observed error).  5e-6 sits well above that and well below what a
# wrong conversion does: the test first checks that each deliberately
# wrong oracle (no RoPE scaling, Llama 3.1's factor 8 instead of the
# model's 32, interleaved RoPE pairs, key/value heads grouped i % Hkv
# instead of i / (Hq/Hkv), gate and up swapped) moves the loss by more
# than 10x the tolerance, so the comparison can fail.  (Variant a weights
# the slowly turning RoPE channels more in q and k, as llama3 scaling
# changes only those and they hardly turn over 128 positions.)
#
#   c  llama3 scaling with low_freq_factor 2, high_freq_factor 8,
#      original_max_position_embeddings 256 (not Llama 3.1's 1, 4 and
#      8192), factor 4, head_dim 16: import-hf carries all four into the
#      checkpoint (--rope-scaling-*), the loss must match the oracle like
#      the others, and the oracle that hard-codes Llama 3.1's 1, 4 and 8192
#      must not; export-hf writes them back into config.json.
#   d  c (with rope_theta 500000) as transformers v5 writes config.json:
#      one rope_parameters object holding rope_theta and the scaling, no
#      rope_scaling or rope_theta; a reader of only the v4 names would
#      compute the model with theta 10000 and no scaling.
#   q  Qwen2ForCausalLM: the Llama form with biases on q, k and v
#      (fp32, tied, theta 1e6); the oracle without the biases must miss.
#   w  Qwen3ForCausalLM: the Llama form with an RMSNorm over each head of
#      q and k before RoPE (q_norm, k_norm), head_dim 32 != hidden / heads,
#      fp32, untied, theta 1e6; the oracles without the QK norm, with it
#      after RoPE, or with q's and k's weights swapped must miss.
#   g  GPT2LMHeadModel: LayerNorm with biases, GeLU (tanh), learned
#      positions, Conv1D weights ([in, out]) with q, k, v packed in
#      attn.c_attn, tied, bf16 in two shards, with the attn.bias mask
#      buffers old checkpoints carry; the oracles with exact GeLU, q and k
#      swapped, or no positions must miss; "gelu" (exact) is refused.
#   m  MixtralForCausalLM: every layer a sparse MoE block of 4 experts,
#      top 2, the router's softmax over all experts renormalised over the
#      two (gridlm's --moe-router-topk 2 with Megatron's default softmax),
#      per-expert w1/w3/w2 tensors stacked on import and split again on
#      export; fp32, untied, two shards.  The oracles without the
#      renormalisation, with the two lowest experts, or with w1 and w3
#      swapped must miss.  A tiny MoE model trained one step exports as a
#      Mixtral and round-trips; one with shared experts is refused.
#      Also under EP 2, and with a capacity factor: 2 drops nothing (the
#      oracle's loss), 0.5 drops tokens in evaluation as training does
#      (Megatron's router drops whatever the mode), the same at EP 1 and
#      EP 2.
#   n  Qwen3MoeForCausalLM: Qwen3's attention (q_norm, k_norm, head_dim
#      32) with a sparse MoE block of 4 experts of moe_intermediate_size
#      32, top 2, norm_topk_prob true, in layers 0, 2 and 3 and a dense
#      MLP in layer 1 (mlp_only_layers); fp32, untied, two shards.  The
#      oracles with norm_topk_prob flipped, without the QK norm, with it
#      after RoPE, or with the two lowest experts must miss.  o is n with norm_topk_prob false (gridlm's
#      --moe-router-pre-softmax).  A tiny MoE model with QK norm trained
#      one step exports as a Qwen3-MoE and round-trips; one with a sigmoid
#      router is refused.  n also under EP 2.
#
# Skipped without python3 with numpy and safetensors, or without MPI.
: "${PYTHON3:=python3}"
: "${top_builddir:=.}"
. "$(dirname "$0")/tap.sh"
"$PYTHON3" -c 'import safetensors, numpy' >/dev/null 2>&1 ||
    skip_all "python3 with numpy and safetensors not found ($GL_PIP_INSTALL numpy safetensors, $GL_PIP_VENV)"
test -n "$MPIEXEC" || skip_all "no MPI launcher (MPIEXEC)"
py="$top_srcdir/t/eval-hf.py"
ckpt="$top_builddir/src/tools/gridlm-ckpt"
eval_="$top_builddir/src/tools/gridlm-eval"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/eval-hf.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
S=128
TOL=5e-6

# run DESCRIPTION COMMAND...: one result; the output as comments on failure
run() {
    what=$1; shift
    "$@" >"$tmp/out" 2>&1
    rc=$?
    test $rc -eq 0 || sed 's/^/#   /' "$tmp/out"
    ok $rc "$what"
}

# sensitive V MUTANTS...: each wrong oracle moves the loss by > 10 x TOL
sensitive() {
    v=$1; shift
    st=0 msg=""
    for m in "$@"; do
        set -- $("$PYTHON3" "$py" loss "$tmp/$v" "$tmp/$v.docs" $S "$m" 2>&1)
        d=$(awk -v a="$1" -v b="$want_loss" 'BEGIN { d = (a - b) / b; if (d < 0) d = -d; printf "%.2g", d }')
        msg="$msg $m $d,"
        awk -v d="$d" -v t=$TOL 'BEGIN { exit !(d > 10 * t) }' || st=1
    done
    echo "# $v: relative loss change of the wrong oracles:$msg"
    ok $st "$v: each wrong oracle moves the loss by more than 10 x $TOL"
}

# check V NAME RANKS FLAGS...: gridlm-eval --json against the oracle
check() {
    v=$1 name=$2 ranks=$3
    shift 3
    # shellcheck disable=SC2086
    if ! $MPIEXEC $MPIEXEC_FLAGS -n "$ranks" "$eval_" --device cpu --load "$tmp/$v.h5" \
            --data-path "$tmp/$v.docs" --seq-length $S --json "$@" \
            >"$tmp/eval.out" 2>"$tmp/eval.err"; then
        tail -5 "$tmp/eval.err" | sed 's/^/#   /'
        fail "$v, $name: gridlm-eval failed"
        return
    fi
    got=$(sed -n 's/^{"loss": \([^,]*\), "perplexity": [^,]*, "tokens": \([0-9]*\), "documents": \([0-9]*\)}$/\1 \2 \3/p' "$tmp/eval.out")
    echo "$got $want" | awk -v t=$TOL -v what="$v, $name" '{
        d = ($1 - $4) / $4; if (d < 0) d = -d
        printf "# %s: loss %s, oracle %s (relative error %.2g), %s/%s tokens, %s/%s documents\n",
            what, $1, $4, d, $2, $5, $3, $6
        exit !(NF == 6 && d < t && $2 == $5 && $3 == $6) }'
    rc=$?
    test $rc -eq 0 || sed 's/^/#   /' "$tmp/eval.out"
    ok $rc "$v, $name: loss within $TOL of transformers' forward, counts exact"
}

# prepare V VOCAB: the directory, its dataset, the import and the oracle
prepare() {
    v=$1
    run "$v: eval-hf.py writes the model and the dataset" \
        sh -c "'$PYTHON3' '$py' make '$tmp/$v' $v && '$PYTHON3' '$py' data '$tmp/$v.docs' $2"
    set -- $("$PYTHON3" "$py" loss "$tmp/$v" "$tmp/$v.docs" $S 2>"$tmp/oracle.err")
    want_loss=$1
    want="$1 $2 $3"
    test -n "$3" || sed 's/^/#   /' "$tmp/oracle.err"
    test -n "$3"
    ok $? "$v: the oracle's loss $1 over $2 tokens of $3 documents"
}

# --- a: fp32, untied, llama3 scaling -----------------------------------
prepare a 1100
run "a: import-hf" "$ckpt" import-hf --quiet "$tmp/a" "$tmp/a.h5"
sensitive a no-rope-scaling factor-8 interleaved-rope kv-heads-cycled gate-up-swapped
check a "1 rank" 1
check a "TP 2" 2 --tensor-model-parallel-size 2
check a "TP 2, sequence parallel" 2 --tensor-model-parallel-size 2 --sequence-parallel
check a "PP 2" 2 --pipeline-model-parallel-size 2
check a "DP 2" 2
run "a: export-hf --dtype fp32" "$ckpt" export-hf --dtype fp32 "$tmp/a.h5" "$tmp/a.out"
run "a: the export equals the original bit for bit, config.json too" \
    "$PYTHON3" "$py" same "$tmp/a" "$tmp/a.out"

# --- b: bf16, tied, sharded ---------------------------------------------
prepare b 1000
run "b: import-hf (sharded)" "$ckpt" import-hf --quiet "$tmp/b" "$tmp/b.h5"
sensitive b interleaved-rope kv-heads-cycled gate-up-swapped
check b "1 rank" 1
check b "TP 2" 2 --tensor-model-parallel-size 2
check b "DP 2, micro-batch 2" 2 --micro-batch-size 2
run "b: export-hf --dtype bf16" "$ckpt" export-hf --dtype bf16 \
    --max-shard-size 100000 "$tmp/b.h5" "$tmp/b.out"
run "b: the export equals the original bit for bit, config.json too" \
    "$PYTHON3" "$py" same "$tmp/b" "$tmp/b.out"

# --- c: llama3 parameters other than Llama 3.1's ------------------------
prepare c 1000
sensitive c llama31-scaling-constants
run "c: import-hf (low_freq_factor 2, high_freq_factor 8, original 256)" \
    "$ckpt" import-hf --quiet "$tmp/c" "$tmp/c.h5"
check c "1 rank" 1
check c "TP 2" 2 --tensor-model-parallel-size 2
run "c: export-hf --dtype fp32" "$ckpt" export-hf --dtype fp32 "$tmp/c.h5" "$tmp/c.out"
run "c: the export equals the original bit for bit, config.json (rope_scaling) too" \
    "$PYTHON3" "$py" same "$tmp/c" "$tmp/c.out"

# --- d: c in transformers v5's rope_parameters -------------------------
prepare d 1000
sensitive d v4-reader llama31-scaling-constants
run "d: import-hf (rope_parameters)" "$ckpt" import-hf --quiet "$tmp/d" "$tmp/d.h5"
check d "1 rank" 1
run "d: export-hf --dtype fp32" "$ckpt" export-hf --dtype fp32 "$tmp/d.h5" "$tmp/d.out"
run "d: the export equals the original bit for bit, config.json (rope_parameters) too" \
    "$PYTHON3" "$py" same "$tmp/d" "$tmp/d.out"

# --- q: Qwen2, QKV biases ----------------------------------------------
prepare q 1000
sensitive q no-qkv-bias interleaved-rope kv-heads-cycled
run "q: import-hf (Qwen2ForCausalLM)" "$ckpt" import-hf --quiet "$tmp/q" "$tmp/q.h5"
check q "1 rank" 1
check q "TP 2" 2 --tensor-model-parallel-size 2
check q "PP 2" 2 --pipeline-model-parallel-size 2
run "q: export-hf --dtype fp32" "$ckpt" export-hf --dtype fp32 "$tmp/q.h5" "$tmp/q.out"
run "q: the export equals the original bit for bit, config.json too" \
    "$PYTHON3" "$py" same "$tmp/q" "$tmp/q.out"

# --- w: Qwen3, QK norm ---------------------------------------------------
prepare w 1000
sensitive w no-qk-norm qk-norm-after-rope qk-norm-weights-swapped
run "w: import-hf (Qwen3ForCausalLM)" "$ckpt" import-hf --quiet "$tmp/w" "$tmp/w.h5"
check w "1 rank" 1
check w "TP 2" 2 --tensor-model-parallel-size 2
check w "TP 2, sequence parallel" 2 --tensor-model-parallel-size 2 --sequence-parallel
check w "PP 2" 2 --pipeline-model-parallel-size 2
run "w: export-hf --dtype fp32" "$ckpt" export-hf --dtype fp32 "$tmp/w.h5" "$tmp/w.out"
run "w: the export equals the original bit for bit, config.json too" \
    "$PYTHON3" "$py" same "$tmp/w" "$tmp/w.out"
cp "$tmp/w/config.json" "$tmp/w.orig"
sed 's/"attention_bias": false/"attention_bias": true/' "$tmp/w.orig" >"$tmp/w/config.json"
"$ckpt" import-hf --quiet "$tmp/w" "$tmp/w2.h5" >"$tmp/out" 2>&1
st=$?
sed 's/^/#   /' "$tmp/out"
test $st -ne 0 && grep -q 'attention_bias' "$tmp/out"
ok $? "w: Qwen3 with attention_bias true is refused by name"
grep -v '"head_dim"' "$tmp/w.orig" >"$tmp/w/config.json"
"$ckpt" import-hf --quiet "$tmp/w" "$tmp/w3.h5" >"$tmp/out" 2>&1
st=$?
sed 's/^/#   /' "$tmp/out"
test $st -ne 0 && grep -q 'no "head_dim"' "$tmp/out"
ok $? "w: a Qwen3 config.json without head_dim is refused (Qwen3Config's default is 128)"
cp "$tmp/w.orig" "$tmp/w/config.json"

# --- g: GPT-2 -----------------------------------------------------------
# A tighter tolerance: exact GeLU moves the loss by only ~1.4e-6 relative
# (erf and tanh GeLU differ by < 2e-4 per activation), and this model
# runs at 1e-8 (no RoPE, no long sums), so 1e-7 keeps both margins.
TOL=1e-7
prepare g 1000
sensitive g gelu-exact qk-swapped no-positions
run "g: import-hf (GPT2LMHeadModel, sharded, bf16)" "$ckpt" import-hf --quiet "$tmp/g" "$tmp/g.h5"
check g "1 rank" 1
check g "TP 2" 2 --tensor-model-parallel-size 2
check g "PP 2" 2 --pipeline-model-parallel-size 2
run "g: export-hf --dtype bf16" "$ckpt" export-hf --dtype bf16 "$tmp/g.h5" "$tmp/g.out"
run "g: the export equals the original bit for bit (but the attn.bias buffers), config.json too" \
    "$PYTHON3" "$py" same "$tmp/g" "$tmp/g.out"
run "g: the names without \"transformer.\" (GPT2Model's, the hub's gpt2) import too" \
    sh -c "'$PYTHON3' '$py' unprefix '$tmp/g' '$tmp/g-bare' &&
           '$ckpt' import-hf --quiet '$tmp/g-bare' '$tmp/g-bare.h5' &&
           '$ckpt' export-hf --dtype bf16 '$tmp/g-bare.h5' '$tmp/g-bare.out'"
run "g: and export as the same model (prefixed)" "$PYTHON3" "$py" same "$tmp/g" "$tmp/g-bare.out"
cp "$tmp/g/config.json" "$tmp/g.orig"
sed 's/"scale_attn_weights": true/"scale_attn_by_inverse_layer_idx": true/' "$tmp/g.orig" \
    >"$tmp/g/config.json"
"$ckpt" import-hf --quiet "$tmp/g" "$tmp/g3.h5" >"$tmp/out" 2>&1
st=$?
sed 's/^/#   /' "$tmp/out"
test $st -ne 0 && grep -q 'scale_attn_by_inverse_layer_idx' "$tmp/out"
ok $? "g: scale_attn_by_inverse_layer_idx is refused by name"
sed 's/"gelu_new"/"gelu"/' "$tmp/g.orig" >"$tmp/g/config.json"
"$ckpt" import-hf --quiet "$tmp/g" "$tmp/g2.h5" >"$tmp/out" 2>&1
st=$?
sed 's/^/#   /' "$tmp/out"
test $st -ne 0 && grep -q 'activation_function "gelu"' "$tmp/out"
ok $? "g: activation_function \"gelu\" (exact) is refused by name"

# --- m: Mixtral, the sparse MoE block ------------------------------------
TOL=5e-6
prepare m 1000
sensitive m not-renormalised lowest-experts w1-w3-swapped
run "m: import-hf (MixtralForCausalLM, per-expert tensors stacked)" \
    "$ckpt" import-hf --quiet "$tmp/m" "$tmp/m.h5"
check m "1 rank" 1
check m "TP 2" 2 --tensor-model-parallel-size 2
check m "PP 2" 2 --pipeline-model-parallel-size 2
check m "EP 2" 2 --expert-model-parallel-size 2 --moe-token-dispatcher-type alltoall
# Token dropping in evaluation, as in training (Megatron's router applies
# the capacity whatever the mode), on each micro-batch of one document
# here: factor 2 (a capacity of every token: 4 experts, top 2) drops
# nothing and gives the oracle's loss; factor 0.5 drops half the slots,
# moving the loss away from the dropless oracle's by more than 10 x TOL,
# the same loss at EP 1 and EP 2.
check m "capacity factor 2 (nothing dropped)" 1 --moe-expert-capacity-factor 2
# shellcheck disable=SC2086
cap_loss() {
    n=$1; shift
    $MPIEXEC $MPIEXEC_FLAGS -n "$n" "$eval_" --device cpu --load "$tmp/m.h5" \
        --data-path "$tmp/m.docs" --seq-length $S --json --moe-expert-capacity-factor 0.5 \
        "$@" 2>>"$tmp/cap.err" | sed -n 's/^{"loss": \([^,]*\),.*/\1/p'
}
l1=$(cap_loss 1)
l2=$(cap_loss 2 --expert-model-parallel-size 2 --moe-token-dispatcher-type alltoall)
echo "# m, capacity factor 0.5: loss $l1 (EP 1), $l2 (EP 2), dropless $want_loss"
test -n "$l1" && test -n "$l2" &&
    awk -v a="$l1" -v b="$l2" -v w="$want_loss" -v t=$TOL 'BEGIN {
        d = (a - b) / b; if (d < 0) d = -d; e = (a - w) / w; if (e < 0) e = -e
        exit !(d < t && e > 10 * t) }'
st=$?
test $st -eq 0 || tail -5 "$tmp/cap.err" | sed 's/^/#   /'
ok $st "m, capacity factor 0.5: tokens dropped in evaluation, the same loss at EP 1 and EP 2"
run "m: export-hf --dtype fp32" "$ckpt" export-hf --dtype fp32 "$tmp/m.h5" "$tmp/m.out"
run "m: the export equals the original bit for bit (every expert), config.json too" \
    "$PYTHON3" "$py" same "$tmp/m" "$tmp/m.out"
cp "$tmp/m/config.json" "$tmp/m.orig"
sed 's/"num_local_experts": 4/"num_local_experts": 3/' "$tmp/m.orig" >"$tmp/m/config.json"
"$ckpt" import-hf --quiet "$tmp/m" "$tmp/m3.h5" >"$tmp/out" 2>&1
st=$?
sed 's/^/#   /' "$tmp/out"
test $st -ne 0 && grep -q 'experts.3.w[123].weight, which is not a weight' "$tmp/out"
ok $? "m: an expert beyond num_local_experts is named, not dropped"
sed 's/"num_local_experts": 4/"num_local_experts": 5/' "$tmp/m.orig" >"$tmp/m/config.json"
"$ckpt" import-hf --quiet "$tmp/m" "$tmp/m4.h5" >"$tmp/out" 2>&1
st=$?
sed 's/^/#   /' "$tmp/out"
test $st -ne 0 && grep -q 'gate.weight has shape \[4, 64\], config.json implies \[5, 64\]' "$tmp/out"
ok $? "m: a missing expert (or a router of the wrong shape) is named"

# --- n, o: Qwen3-MoE, QK norm and a dense layer among the MoE ones ---------
prepare n 1000
sensitive n norm-topk-flipped no-qk-norm qk-norm-after-rope lowest-experts
run "n: import-hf (Qwen3MoeForCausalLM, mlp_only_layers [1])" \
    "$ckpt" import-hf --quiet "$tmp/n" "$tmp/n.h5"
check n "1 rank" 1
check n "TP 2" 2 --tensor-model-parallel-size 2
check n "PP 2" 2 --pipeline-model-parallel-size 2
check n "EP 2" 2 --expert-model-parallel-size 2 --moe-token-dispatcher-type alltoall
run "n: export-hf --dtype fp32" "$ckpt" export-hf --dtype fp32 "$tmp/n.h5" "$tmp/n.out"
run "n: the export equals the original bit for bit (every expert), config.json too" \
    "$PYTHON3" "$py" same "$tmp/n" "$tmp/n.out"
prepare o 1000
sensitive o norm-topk-flipped
run "o: import-hf (norm_topk_prob false)" "$ckpt" import-hf --quiet "$tmp/o" "$tmp/o.h5"
check o "1 rank" 1
run "o: export-hf writes norm_topk_prob false back, bit for bit" \
    sh -c "'$ckpt' export-hf --dtype fp32 '$tmp/o.h5' '$tmp/o.out' &&
           '$PYTHON3' '$py' same '$tmp/o' '$tmp/o.out'"

# A trained MoE checkpoint: Mixtral's form exports (and the export
# imports and exports again unchanged); shared experts are refused.
train="$top_builddir/src/tools/gridlm-train"
for v in moe shared; do
    extra=""
    test $v = shared && extra="--moe-shared-expert-intermediate-size 32"
    # shellcheck disable=SC2086
    run "$v: gridlm-train saves a tiny MoE model" "$train" --device cpu --model tiny \
        --num-experts 4 --moe-router-topk 2 $extra --mock-data --train-iters 1 --lr 1e-4 \
        --micro-batch-size 1 --global-batch-size 1 --seq-length 16 \
        --save "$tmp/$v.ck" --save-interval 1
done
run "moe: export-hf writes it as a MixtralForCausalLM" \
    sh -c "'$ckpt' export-hf --dtype fp32 '$tmp/moe.ck' '$tmp/moe.hf' &&
           grep -q MixtralForCausalLM '$tmp/moe.hf/config.json' &&
           '$ckpt' import-hf --quiet '$tmp/moe.hf' '$tmp/moe2.h5' &&
           '$ckpt' export-hf --dtype fp32 '$tmp/moe2.h5' '$tmp/moe2.hf'"
run "moe: and the export imports and exports again bit for bit" \
    "$PYTHON3" "$py" same "$tmp/moe.hf" "$tmp/moe2.hf"
"$ckpt" export-hf "$tmp/shared.ck" "$tmp/shared.hf" >"$tmp/out" 2>&1
st=$?
sed 's/^/#   /' "$tmp/out"
test $st -ne 0 && grep -q 'not a MixtralForCausalLM .*it has shared experts' "$tmp/out"
ok $? "shared experts: export-hf refuses, naming why"

# With QK norm the MoE model is a Qwen3-MoE; a sigmoid router neither
# family has is refused.
for v in qk sigmoid; do
    extra="--qk-layernorm"
    test $v = sigmoid && extra="--qk-layernorm --moe-router-score-function sigmoid"
    # shellcheck disable=SC2086
    run "$v: gridlm-train saves a tiny MoE model with QK norm" "$train" --device cpu \
        --model tiny --num-experts 4 --moe-router-topk 2 --moe-layer-freq '[1,0,1,1]' $extra \
        --mock-data --train-iters 1 --lr 1e-4 --micro-batch-size 1 --global-batch-size 1 \
        --seq-length 16 --save "$tmp/$v.ck" --save-interval 1
done
run "qk: export-hf writes it as a Qwen3MoeForCausalLM (layer 1 dense), round trip bit for bit" \
    sh -c "'$ckpt' export-hf --dtype fp32 '$tmp/qk.ck' '$tmp/qk.hf' &&
           grep -q Qwen3MoeForCausalLM '$tmp/qk.hf/config.json' &&
           grep -q model.layers.1.mlp.gate_proj '$tmp/qk.hf/model.safetensors' &&
           '$ckpt' import-hf --quiet '$tmp/qk.hf' '$tmp/qk2.h5' &&
           '$ckpt' export-hf --dtype fp32 '$tmp/qk2.h5' '$tmp/qk2.hf' &&
           '$PYTHON3' '$py' same '$tmp/qk.hf' '$tmp/qk2.hf'"
"$ckpt" export-hf "$tmp/sigmoid.ck" "$tmp/sigmoid.hf" >"$tmp/out" 2>&1
st=$?
sed 's/^/#   /' "$tmp/out"
test $st -ne 0 && grep -q 'not a Qwen3MoeForCausalLM .*router is not a softmax' "$tmp/out"
ok $? "sigmoid router: export-hf refuses, naming why"

done_testing
