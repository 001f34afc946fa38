#!/bin/sh
# t/train-args.t: gridlm-train's answers to its command line, run as a
# single process with no launcher.  Bad flags and values exit 2 with one
# line naming the flag, the value and a fix; --help and --version exit 0.

. "$(dirname "$0")/train-lib.sh"     # $tmp, refused, refused_n
prog=./src/tools/gridlm-train
[ -x "$prog" ] || skip_all "$prog not built"
base="--model tiny --mock-data --train-iters 10 --lr 1e-3"

refused "an integer flag given letters" \
    "--hidden-size abc is not an integer" "give a whole number" -- $base --hidden-size abc
refused "a typo in a flag's name is named, with the closest flag" \
    "unknown option --hiden-size" "did you mean --hidden-size?" -- $base --hiden-size 64
refused "Python-style underscores" \
    "unknown option --micro_batch_size" "did you mean --micro-batch-size?" -- \
    $base --micro_batch_size 2
refused "TP that does not divide the heads" \
    "--tensor-model-parallel-size 3 does not divide --num-attention-heads 8" \
    "choose a TP size that divides 8 (1, 2, 4 or 8)" -- $base --tensor-model-parallel-size 3
refused "PP that does not divide the layers" \
    "--pipeline-model-parallel-size 3 does not divide --num-layers 4" "(1, 2 or 4)" -- \
    $base --pipeline-model-parallel-size 3
refused "query groups that do not divide the heads" \
    "--num-query-groups 3 does not divide --num-attention-heads 8" -- \
    $base --num-query-groups 3
refused "an enum value, with the values listed" \
    "--lr-decay-style exp is not supported" \
    "use one of constant, linear, cosine or inverse-square-root" -- \
    $base --lr-decay-style exp
refused "attention dropout of 1 (nothing kept)" \
    "--attention-dropout 1 is out of range" "[0, 1)" -- $base --attention-dropout 1
refused "hidden dropout of 1 (nothing kept): a usage error, not a failing op" \
    "--hidden-dropout 1 is out of range" "[0, 1)" -- $base --hidden-dropout 1
refused "a negative hidden dropout" \
    "--hidden-dropout -0.1 is out of range" "[0, 1)" -- $base --hidden-dropout -0.1
refused "a float out of range" \
    "--adam-beta1 1.5 is out of range" "[0, 1)" -- $base --adam-beta1 1.5
refused "zero where a positive number is needed" \
    "--seq-length 0 must be a positive integer" -- $base --seq-length 0
refused "not a number" \
    "--lr fast is not a finite number" -- --model tiny --mock-data --train-iters 1 --lr fast
refused "a weighted blend missing its last prefix" \
    "--data-path 0.7 has no dataset after it" -- \
    --model tiny --train-iters 1 --lr 1 --data-path 0.3 A 0.7
refused "--fp16 is refused with the alternative" \
    "--fp16 is not supported" "--bf16" -- $base --fp16
# Megatron's GeLU is the tanh approximation gridlm computes when fused
# with its bias (the default) or with --openai-gelu, and the exact erf
# form with --no-bias-gelu-fusion alone.
gpt="--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --vocab-size 128
  --attention-dropout 0 --mock-data --train-iters 10 --lr 1e-3"
refused "--no-bias-gelu-fusion alone, with the GeLU MLP: exact GeLU is refused" \
    "--no-bias-gelu-fusion makes Megatron's GeLU the exact erf form" "--openai-gelu" -- \
    $gpt --no-bias-gelu-fusion
"$prog" $gpt --no-bias-gelu-fusion --openai-gelu --dry-run --world-size 1 >"$tmp"/out 2>"$tmp"/err
ok $? "--no-bias-gelu-fusion with --openai-gelu: the tanh GeLU, accepted"
"$prog" $gpt --no-bias-gelu-fusion --swiglu --dry-run --world-size 1 >"$tmp"/out 2>"$tmp"/err
ok $? "--no-bias-gelu-fusion with --swiglu: no GeLU, accepted"
refused "full recomputation without a method" \
    "--recompute-granularity full needs --recompute-method" -- \
    $base --recompute-granularity full
refused "interleaving without a pipeline" \
    "--num-layers-per-virtual-pipeline-stage 1 needs a pipeline" -- \
    $base --num-layers-per-virtual-pipeline-stage 1
refused_n 3 "--overlap-param-gather alone: both flags it needs, in one message" \
    "--overlap-param-gather needs --use-distributed-optimizer" \
    "--overlap-param-gather needs --overlap-grad-reduce" "2 usage errors above" -- \
    $base --overlap-param-gather
refused "--overlap-param-gather without --overlap-grad-reduce" \
    "--overlap-param-gather needs --overlap-grad-reduce" -- \
    $base --use-distributed-optimizer --overlap-param-gather
refused "a value given to a flag" "--bf16 takes no value" -- $base --bf16=1
refused "a missing value" "--micro-batch-size needs a value" -- $base --micro-batch-size
refused "a positional argument" "unexpected argument 'train.yaml'" -- $base train.yaml
refused "no learning rate" "--lr is required" -- --model tiny --mock-data --train-iters 1
refused_n 6 "no model shape: each option it needs, and the vocabulary" \
    "--num-layers is required" "--model" "--hidden-size is required" \
    "--num-attention-heads is required" "--seq-length is required" \
    "the vocabulary size is unknown" "5 usage errors above" -- \
    --mock-data --train-iters 1 --lr 1
refused_n 4 "bad values, an unknown option and a check across options, together" \
    "--micro-batch-size 0 must be a positive integer" "unknown option --hiden-size" \
    "--async-save needs --save" "3 usage errors above" -- \
    $base --micro-batch-size 0 --hiden-size 64 --async-save
refused "an unknown preset" "--model gpt5 is not a known model" \
    "llama3-8b, llama3-70b, llama3.2-1b, qwen2.5-1.5b, qwen3-8b, gpt2, gpt2-medium, gpt2-xl, mixtral-8x7b, qwen3-30b-a3b or tiny" -- $base --model gpt5

refused "--exit-signal-handler without --save (it saves before exiting)" \
    "--exit-signal-handler needs --save DIR" "add --save DIR, or drop --exit-signal-handler" -- \
    $base --exit-signal-handler

# Presets and overrides, seen through the numbers the checks quote.
refused "llama3-8b has 32 heads" "does not divide --num-attention-heads 32" -- \
    --model llama3-8b --mock-data --train-iters 1 --lr 1 --tensor-model-parallel-size 3
refused "llama3-70b has 80 layers" "does not divide --num-layers 80" -- \
    --model llama3-70b --mock-data --train-iters 1 --lr 1 --pipeline-model-parallel-size 3
refused "an explicit flag after --model overrides the preset" \
    "does not divide --num-attention-heads 16" -- \
    $base --num-attention-heads 16 --tensor-model-parallel-size 3
refused "an explicit flag before --model overrides it too" \
    "does not divide --num-attention-heads 16" -- \
    --num-attention-heads 16 --tensor-model-parallel-size 3 $base

# --dry-run --world-size N: this one process stands for N ranks and prints
# the plan as key=value lines (src/train/run_plan.h).  The tiny model:
# 4 layers, h 64, FFN 176, 8 heads of 8 in 4 groups, vocabulary 512,
# sequence 64, untied.  A layer holds 64 x 128 + 64 x 64 + 3 x 176 x 64
# = 46080 matrix weights and 128 norm weights; at TP 2 a rank holds half
# of the matrices and of the 512 x 64 embedding or head.
refused "--world-size outside a dry run" "--world-size 4 needs --dry-run" \
    "add --dry-run, or drop --world-size" -- $base --world-size 4
refused "--world-size that TP x PP does not divide" \
    "3 ranks are not divisible by TP x CP x PP = 2 x 1 x 2 = 4" -- \
    $base --dry-run --world-size 3 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2
"$prog" $base --dry-run --world-size 8 --tensor-model-parallel-size 2 \
    --pipeline-model-parallel-size 2 --global-batch-size 8 --use-distributed-optimizer \
    >"$tmp"/out 2>"$tmp"/err
code=$?
key() { sed -n "s/^$1=//p" "$tmp"/out; }
plan_ok() {     # plan_ok NAME KEY=VALUE...: each key printed once, with that value
    what=$1; shift
    good=yes
    for kv in "$@"; do
        [ "$(grep -c "^${kv%%=*}=" "$tmp"/out)" = 1 ] && [ "$(key "${kv%%=*}")" = "${kv#*=}" ] ||
            { echo "# ${kv%%=*}: '$(key "${kv%%=*}")', expected '${kv#*=}'"; good=no; }
    done
    if [ $good = yes ]; then pass "$what"; else fail "$what"; fi
}
if [ $code -eq 0 ] && [ ! -s "$tmp"/err ] && [ -s "$tmp"/out ] &&
    [ "$(grep -cv '^[a-z0-9_]*=' "$tmp"/out)" -eq 0 ]; then
    pass "--dry-run --world-size 8: exit 0, key=value lines only, nothing on stderr"
else
    echo "# exit $code"; fail "--dry-run --world-size 8: exit 0, key=value lines only"
fi
plan_ok "the shape, resolved" model=tiny num_layers=4 hidden_size=64 ffn_hidden_size=176 \
    num_attention_heads=8 num_query_groups=4 kv_channels=8 vocab_size=512 \
    padded_vocab_size=512 seq_length=64 untie_embeddings_and_output_weights=1
plan_ok "the layout of 8 ranks: DP 2, 4 micro-batches, distributed optimizer" world_size=8 \
    tensor_model_parallel_size=2 pipeline_model_parallel_size=2 virtual_pipeline_size=1 \
    context_parallel_size=1 data_parallel_size=2 sequence_parallel=0 micro_batch_size=1 \
    global_batch_size=8 num_micro_batches=4 use_distributed_optimizer=1 \
    distributed_optimizer=1 overlap_grad_reduce=0 overlap_param_gather=0 bf16=0
plan_ok "FLOPs per token: the model, a layer, the LM head" flops_per_token=1400832 \
    layer_flops_per_token=301056 head_flops_per_token=196608
# 4 x 46208 + 2 x 32768 + 64; a stage: 2 x (23040 + 128) + 16384 (+ 64)
plan_ok "parameters: the model's, and a rank's of each stage" num_params=250432 \
    "stage_rank_params=62720 62784" max_rank_params=62784
flags=$(key model_flags)
"$prog" --dry-run --world-size 1 $flags >"$tmp"/out 2>"$tmp"/err
plan_ok "model_flags give the same model on one rank" model= num_layers=4 \
    ffn_hidden_size=176 num_query_groups=4 flops_per_token=1400832 num_params=250432 \
    max_rank_params=250432 data_parallel_size=1 distributed_optimizer=0
"$prog" $base --dry-run --world-size 1 --use-distributed-optimizer >"$tmp"/out 2>"$tmp"/err
plan_ok "one rank: the distributed optimizer asked for, the plain one runs" \
    use_distributed_optimizer=1 distributed_optimizer=0
plan_ok "a dense model: the expert grid is the attention grid's, no experts" \
    expert_model_parallel_size=1 expert_tensor_parallel_size=1 expert_data_parallel_size=1 \
    experts_per_rank=0 expert_placement= stage_rank_expert_params=0
# A mixture-of-experts model under TP 2 x PP 2: every layer's MoE block
# holds the router (4 x 64, whole on each TP rank), the 4 experts' three
# SwiGLU matrices of width 32 and the shared expert's of width 16, both
# split over TP.  A layer: 6144 (attention) + 256 + 3 x 4 x 32 x 64 / 2
# + 3 x 16 x 64 / 2 + 128 (norms) = 20352; a stage 2 x 20352 + 16384
# (embedding or head, + 64 the final norm); the model 4 x 40320 + 2 x
# 32768 + 64.
"$prog" $base --dry-run --world-size 8 --tensor-model-parallel-size 2 \
    --pipeline-model-parallel-size 2 --global-batch-size 8 --num-experts 4 \
    --moe-router-topk 2 --moe-ffn-hidden-size 32 --moe-shared-expert-intermediate-size 16 \
    >"$tmp"/out 2>"$tmp"/err
plan_ok "MoE parameters: router, experts and shared expert, per stage and TP rank" \
    num_params=226880 "stage_rank_params=57088 57152" max_rank_params=57152

# The expert grid (issue 14): a dry run plans any EP and ETP that fit,
# training refuses what expert parallelism does not build yet.  The model: 2
# MoE layers of 8 SwiGLU experts of FFN 96 over h 64, so 3 x 8 x 96 x 64 =
# 147456 expert weights a layer, 294912 in all; the rest (the tied 128 x
# 64 embedding, 32 learned positions, per layer two LayerNorms, QKV, the
# output projection and the router, the final norm) 44672.
moe="--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --vocab-size 128
  --swiglu --disable-bias-linear --num-experts 8 --moe-router-topk 2 --ffn-hidden-size 96
  --mock-data --train-iters 2 --lr 1e-3 --device cpu"
"$prog" $moe --dry-run --world-size 8 --expert-model-parallel-size 4 \
    --use-distributed-optimizer >"$tmp"/out 2>"$tmp"/err
code=$?
[ $code -eq 0 ] && [ ! -s "$tmp"/err ]
ok $? "8 ranks, EP 4 with the allgather dispatcher: planned without a warning (it trains)"
# A rank holds 2 of the 8 experts: 294912 / 4 = 73728 expert weights.
# Its bytes (fp32 on the CPU device): 8 a weight (weight, gradient) and,
# sharded by the distributed optimizer, 16 an owned one (moments, master,
# gradient shard): 44672 x 8 + 44672 / 8 (DP) x 16 + 73728 x 8 + 73728 /
# 2 (EDP) x 16 = 446720 + 1179648.
plan_ok "EP 4: the expert grid, 2 experts a rank, the memory of its own only" \
    expert_model_parallel_size=4 expert_tensor_parallel_size=1 expert_data_parallel_size=2 \
    experts_per_rank=2 "expert_placement=0:[0,2) 1:[2,4) 2:[4,6) 3:[6,8)" \
    stage_rank_params=118400 max_rank_params=118400 stage_rank_expert_params=73728 \
    stage_rank_state_bytes=1626368 max_rank_state_bytes=1626368
"$prog" $moe --dry-run --world-size 8 --tensor-model-parallel-size 2 \
    --expert-model-parallel-size 2 --expert-tensor-parallel-size 1 >"$tmp"/out 2>"$tmp"/err
plan_ok "TP 2, EP 2, ETP 1: EDP 4, 4 whole experts a rank (294912 / 2)" \
    tensor_model_parallel_size=2 data_parallel_size=4 expert_model_parallel_size=2 \
    expert_tensor_parallel_size=1 expert_data_parallel_size=4 experts_per_rank=4 \
    stage_rank_expert_params=147456
[ "$(wc -l <"$tmp"/err)" -eq 1 ] &&
    grep -q "warning: .*planned by this dry run, but training needs .*with TP > 1, --moe-token-dispatcher-type alltoall" "$tmp"/err
ok $? "TP 2, EP 2 with the allgather dispatcher: planned, with one warning that training needs alltoall"
refused "training at EP 2 x TP 2 with the allgather dispatcher" \
    "--expert-model-parallel-size 2 with --tensor-model-parallel-size 2 and --moe-token-dispatcher-type allgather (the default): the allgather dispatcher is built with TP 1 only" \
    "add --moe-token-dispatcher-type alltoall" -- \
    $moe --expert-model-parallel-size 2 --tensor-model-parallel-size 2
"$prog" $moe --dry-run --world-size 8 --tensor-model-parallel-size 2 >"$tmp"/out 2>"$tmp"/err
plan_ok "ETP left out is TP (Megatron's default): each expert split in 2" \
    expert_tensor_parallel_size=2 expert_data_parallel_size=4 experts_per_rank=8 \
    stage_rank_expert_params=147456
refused "experts not divisible by EP" \
    "--num-experts 8 is not divisible by --expert-model-parallel-size 3" \
    "choose an EP of 1, 2, 4 or 8" -- $moe --dry-run --world-size 6 --expert-model-parallel-size 3
refused "an ETP that does not divide the experts' FFN width" \
    "--expert-tensor-parallel-size 5 must divide the experts' FFN width 96" -- \
    $moe --dry-run --world-size 10 --expert-tensor-parallel-size 5
refused "EP x ETP larger than a pipeline stage" \
    "--expert-model-parallel-size 8 x --expert-tensor-parallel-size 1 = 8 does not divide the 4 ranks of a pipeline stage" \
    "start a multiple of 16 ranks" -- \
    $moe --dry-run --world-size 8 --pipeline-model-parallel-size 2 --expert-model-parallel-size 8
refused "ETP for a dense model" \
    "--expert-tensor-parallel-size 2 needs a mixture-of-experts model" -- \
    $base --expert-tensor-parallel-size 2
refused "the shared experts' overlap with the allgather dispatcher" \
    "--moe-shared-expert-overlap with --moe-token-dispatcher-type allgather (the default)" \
    "add --moe-token-dispatcher-type alltoall" -- \
    $moe --expert-model-parallel-size 2 --moe-shared-expert-intermediate-size 96 \
    --moe-shared-expert-overlap
refused "training at ETP != TP" \
    "--expert-tensor-parallel-size 2 differs from --tensor-model-parallel-size 1" \
    "drop it, or set it to 1" -- $moe --expert-tensor-parallel-size 2

# --help: exit 0, every group, defaults shown.
"$prog" --help >"$tmp"/out 2>"$tmp"/err
code=$?
good=yes
[ $code -eq 0 ] && [ ! -s "$tmp"/err ] || good=no
for group in "Model:" "Parallelism:" "Batch and schedule:" "Optimizer:" "Learning rate:" \
    "Precision, device and memory:" "Data:" "Checkpoints:" "Logging:" "Faults:" "Program:"; do
    grep -q "^$group\$" "$tmp"/out || { echo "# no group $group"; good=no; }
done
# (help text wraps: compare with the lines joined)
flat=$(tr '\n' ' ' <"$tmp"/out | tr -s ' ')
for want in "--seed N seed of the weights and the data order [default: 1234]" \
    "--lr-decay-style STYLE constant, linear, cosine or inverse-square-root (WSD is refused) [default: linear]" \
    "--tensor-model-parallel-size N TP: ranks that split each layer's matrices [default: 1]" \
    "--split A,B,C train,valid,test weights of the documents [default: 969,30,1]"; do
    case $flat in
    *"$want"*) ;;
    *) echo "# help lacks: $want"; good=no ;;
    esac
done
[ "$(awk 'length > 79' "$tmp"/out | wc -l)" -eq 0 ] || { echo "# lines over 79"; good=no; }
if [ $good = yes ]; then pass "--help lists every group with defaults"; else fail_run "--help"; fi

"$prog" $base --help --bogus >"$tmp"/out 2>"$tmp"/err
if [ $? -eq 0 ] && grep -q "^Usage: gridlm-train" "$tmp"/out; then
    pass "--help wins over what follows it"
else
    fail_run "--help wins over what follows it"
fi

# --version: the package's version, from the build's config.h.
version=$(sed -n 's/^#define PACKAGE_VERSION "\(.*\)"$/\1/p' "${top_builddir:-.}/config.h")
"$prog" --version >"$tmp"/out 2>"$tmp"/err
if [ $? -eq 0 ] && [ -n "$version" ] &&
    [ "$(cat "$tmp"/out)" = "gridlm-train (gridlm) $version" ]; then
    pass "--version"
else
    fail_run "--version"
fi

# Under a launcher: each rank reads the command line, only rank 0
# prints, and every rank stops (no hang).  Two ranks, so MPICH copes.
if [ -n "$MPIEXEC" ]; then
    mpirun() { timeout 120 $MPIEXEC $MPIEXEC_FLAGS -n 2 "$prog" "$@" >"$tmp"/out 2>"$tmp"/err; }
    errors() { grep -c '^gridlm-train: error: ' "$tmp"/err; }

    mpirun $base --hidden-size abc
    code=$?
    if [ $code -ne 0 ] && [ $code -ne 124 ] && [ "$(errors)" -eq 1 ] &&
        grep -q -- "--hidden-size abc is not an integer" "$tmp"/err; then
        pass "2 ranks, a bad value: one error line, the job stops (exit $code)"
    else
        echo "# exit $code"; fail_run "2 ranks, a bad value"
    fi

    mpirun $base --tensor-model-parallel-size 4 --device cpu --dry-run
    code=$?
    if [ $code -ne 0 ] && [ $code -ne 124 ] && [ "$(errors)" -eq 1 ] &&
        grep -q "2 ranks are not divisible by TP x CP x PP = 4 x 1 x 1 = 4: launch 4 ranks" \
            "$tmp"/err; then
        pass "2 ranks for TP 4: one error line from rank 0, the job stops (exit $code)"
    else
        echo "# exit $code"; fail_run "2 ranks for TP 4"
    fi

    mpirun $base --tensor-model-parallel-size 2 --device cpu --dry-run --help
    code=$?
    if [ $code -eq 0 ] && [ "$(grep -c '^Usage: ' "$tmp"/out)" -eq 1 ]; then
        pass "2 ranks, --help: printed once"
    else
        echo "# exit $code"; fail_run "2 ranks, --help: printed once"
    fi

    mpirun $base --tensor-model-parallel-size 2 --device cpu --dry-run
    code=$?
    if [ $code -eq 0 ] && grep -q "layout: world 2 = TP 2 x CP 1 x PP 1 x DP 1" "$tmp"/out; then
        pass "2 ranks, --dry-run at TP 2 succeeds"
    else
        echo "# exit $code"; fail_run "2 ranks, --dry-run at TP 2 succeeds"
    fi

    # EP 2: the expert grid, each rank's experts, the ep and edp groups
    # and the memory of each rank, its 4 experts' 147456 weights among them.
    mpirun $moe --expert-model-parallel-size 2 --dry-run
    code=$?
    if [ $code -eq 0 ] && grep -q "^expert grid: ETP=1 EP=2 EDP=1 PP=1" "$tmp"/out &&
        grep -q "^ *1 .* 0 *1 *0  \[4,8)$" "$tmp"/out && grep -q "^  ep .*\[0,1\]" "$tmp"/out &&
        grep -q "memory per rank of stage 0: .*(192128 parameters, 147456 of them in its 4 of 8 experts of each MoE layer" "$tmp"/out; then
        pass "2 ranks, --dry-run at EP 2: expert grid, experts per rank, groups, memory"
    else
        echo "# exit $code"; fail_run "2 ranks, --dry-run at EP 2"
    fi
fi

done_testing
