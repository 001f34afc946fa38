#!/bin/sh
# t/bench-project.t: the iteration model of benchmarks/project.sh on cases
# computed by hand (benchmarks/projection.md has the formulas).  The
# shapes, layouts and counts come from the gridlm-train of this build
# (project.sh finds ./src/tools/gridlm-train; make check runs here).
#
# Most cases use a tiny shape whose numbers are easy: 1 layer, h = 64,
# 4 heads (head dim 16, no GQA), FFN 128, vocabulary 128 (already a
# multiple of 128), sequence 32, micro-batch 1, bf16, untied.
#   FLOPs per token = 6 (64 x 192 + 64 x 64 + 3 x 64 x 128)   = 245760
#                   + 6 x 32 x 64 (attention)                 =  12288
#                   + 6 x 64 x 128 (LM head)                  =  49152
#                                                             = 307200
#   parameters      = 40960 (matrices) + 128 (2 norms) + 2 x 128 x 64
#                     (embedding, head) + 64 (final norm)     =  57536
# At --achieved-tflops 0.0098304 one micro-batch (32 tokens, 9830400
# FLOPs) computes in exactly 1 ms.  Bandwidths are chosen so that the
# communication times are short decimals: NVLink 100 GB/s, no latency.

. "$(dirname "$0")/tap.sh"
. "$(dirname "$0")/model-flags.sh"
src=${top_srcdir:-..}
P=$src/benchmarks/project.sh
fixture=$src/t/bench-project-fixture.csv
tmp=${TMPDIR:-/tmp}/bench-project.$$
trap 'rm -rf "$tmp"' EXIT INT TERM
mkdir -p "$tmp"

# check NAME GOT WANT: one result, GOT = WANT as text
check() { if [ "$2" = "$3" ]; then pass "$1"; else fail "$1"; echo "# got:      $2"; echo "# expected: $3"; fi; }
# approx NAME GOT WANT: |GOT - WANT| <= 1e-9 |WANT| (or 1e-15 absolute
# when WANT is 0): the model's sums in double precision against decimals.
approx() {
    if awk -v g="$2" -v w="$3" 'BEGIN { d = g - w; if (d < 0) d = -d; a = w < 0 ? -w : w
                                        exit !(g != "" && d <= (a > 0 ? 1e-9 * a : 1e-15)) }'; then
        pass "$1"
    else
        fail "$1"; echo "# got $2, expected $3"
    fi
}
# col CSV-TEXT RUN COLUMN: one field of the projection CSV
col() {
    printf '%s\n' "$1" | awk -F, -v r="$2" -v c="$3" '
        NR == 1 { for (i = 1; i <= NF; i++) k[$i] = i; next }
        $1 == r { print $(k[c]) }'
}
fails() {   # fails NAME EXPECTED-TEXT ARGS...: exit 2 and one error line
    name=$1 want=$2; shift 2
    "$P" "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ $rc = 2 ] && grep -q -- "$want" "$tmp/err" && [ "$(wc -l <"$tmp/err")" -eq 1 ]; then
        pass "$name"
    else
        fail "$name"; echo "# exit $rc:"; sed 's/^/#   /' "$tmp/err"
    fi
}

plan 42

tiny="$llama_form --num-layers 1 --hidden-size 64 --num-attention-heads 4 --ffn-hidden-size 128
      --vocab-size 128 --seq-length 32 --untie-embeddings-and-output-weights --bf16"
tiny=$(echo $tiny)
R=0.0098304
net="--nvlink-gbps 100 --nvlink-latency-us 0 --ib-latency-us 0"
run() {     # run SWEEP-TEXT OPTIONS...: the projection as CSV
    printf '%s\n' "$1" >"$tmp/s.sweep"
    shift
    "$P" --csv "$@" "$tmp/s.sweep"
}

# ---- FLOPs (reference/flops.md) ---------------------------------------------
# The 1.5B shape at seq 4096: flops.md's example, 8.22 GFLOP per token:
#   6 x 2048 x 3 x 8192 x 16 = 4831838208    MLP
#   6 x 16 x (2048 x 3072 + 2048^2) = 1006632960   projections
#   6 x 2048 x 128256 = 1576009728           LM head
#   6 x 4096 x 16 x 2048 = 805306368         attention
out=$(run "x 1 $llama_form --num-layers 16 --hidden-size 2048 --num-attention-heads 32 --num-query-groups 8 --ffn-hidden-size 8192 --vocab-size 128256 --seq-length 4096 --bf16" -r 400)
check "1.5B shape: 8219787264 FLOPs per token (flops.md's 8.22 GFLOP)" \
    "$(col "$out" x flops_per_token)" 8219787264
# Llama-3-8B (--model preset) at its seq 8192:
#   6 x 4096 x 43008 x 32 = 33822867456; 192 x (4096 x 6144 + 4096^2) =
#   8053063680; 6 x 4096 x 128256 = 3152019456; 6 x 8192 x 32 x 4096 =
#   6442450944; sum 51470401536
out=$(run "x 1 --model llama3-8b --bf16" -r 400)
check "--model llama3-8b: 51470401536 FLOPs per token" "$(col "$out" x flops_per_token)" 51470401536
# TP 8 pads the vocabulary to a multiple of 1024: 129024, +6 x 4096 x 768
out=$(run "x 8 --model llama3-8b --bf16 --tensor-model-parallel-size 8" -r 400)
check "TP 8 pads the vocabulary (129024): 51489275904 FLOPs per token" \
    "$(col "$out" x flops_per_token)" 51489275904

# ---- one GPU ----------------------------------------------------------------
# 1 GPU: compute 1 ms; optimizer (34 + 4) x 57536 bytes at 2.186368 GB/s =
# 1 ms; nothing else.  Efficiency against itself: 1.
out=$(run "one 1 $tiny" -r $R --hbm-gbps 2.186368)
check "tiny shape: 307200 FLOPs per token, 57536 parameters" \
    "$(col "$out" one flops_per_token) $(col "$out" one params_per_gpu)" "307200 57536"
approx "1 GPU: compute 1 ms" "$(col "$out" one compute_s)" 0.001
approx "1 GPU: optimizer 38 bytes/parameter at 2.186368 GB/s = 1 ms" "$(col "$out" one optim_s)" 0.001
check "1 GPU: no TP, PP, bubble, DP or imbalance time" \
    "$(for c in tp_s pp_s bubble_s dp_s imbalance_s; do col "$out" one $c; done | tr '\n' ' ')" \
    "0 0 0 0 0 "
approx "1 GPU: step 2 ms, 32 tokens -> 16000 tokens/s" "$(col "$out" one tokens_per_sec_per_gpu)" 16000
check "1 GPU: scaling efficiency exactly 1" "$(col "$out" one scaling_efficiency)" 1
approx "1 GPU: TFLOP/s = 307200 x 16000 / 1e12" "$(col "$out" one tflops_per_gpu)" 0.0049152
approx "1 GPU: MFU = TFLOP/s / --peak-tflops 0.0098304" \
    "$(run "one 1 $tiny" -r $R --hbm-gbps 2.186368 --peak-tflops 0.0098304 | sed -n 2p |
       awk -F, '{ print $18 }')" 0.5
# states: bf16 weights 2 + fp32 grads 4 + master and moments 12 = 18 B/param
approx "1 GPU: 18 bytes of state per parameter" "$(col "$out" one mem_states_gib)" \
    "$(awk 'BEGIN { printf "%.12g", 18 * 57536 / 1073741824 }')"

# ---- data parallelism -------------------------------------------------------
# DP 2 on one node, plain optimizer: all-reduce of the fp32 gradients,
# 2 (2-1)/2 x 4 x 57536 bytes / 100 GB/s = 2.30144 us.
out=$(run "dp 2 $tiny --global-batch-size 2" -r $R $net)
approx "DP 2 all-reduce: 2(n-1)/n x 230144 B / 100 GB/s = 2.30144 us" "$(col "$out" dp dp_s)" 2.30144e-6
out=$(run "dp 2 $tiny --global-batch-size 2" -r $R --nvlink-gbps 100 --nvlink-latency-us 10)
approx "... plus 10 us of latency" "$(col "$out" dp dp_s)" 1.230144e-5
# Distributed optimizer with --overlap-grad-reduce: the buckets are
# all-reduced (2.30144 us), hidden behind the last backward (2/3 ms); the
# bf16 all-gather, 1/2 x 115072 B / 100 GB/s = 0.57536 us, is not.
out=$(run "do 2 $tiny --global-batch-size 2 --use-distributed-optimizer --overlap-grad-reduce" -r $R $net)
approx "overlapped: all 2.87680 us of DP traffic counted" "$(col "$out" do dp_total_s)" 2.8768e-6
approx "overlapped: only the all-gather (0.57536 us) exposed" "$(col "$out" do dp_s)" 5.7536e-7
out=$(run "do 2 $tiny --global-batch-size 2 --use-distributed-optimizer --overlap-grad-reduce" \
      -r $R $net --dp-overlap 0)
approx "--dp-overlap 0: all of it exposed" "$(col "$out" do dp_s)" 2.8768e-6
# Across nodes, 2 GPUs a node, DP 4, distributed optimizer: hierarchical,
# k = 2 members a node, 2 nodes, InfiniBand 10 GB/s per GPU:
#   reduce-scatter of 230144 B: 1/2 x 230144 / 100e9 + 1/2 x 115072 / 10e9
#                              = 1.15072 us + 5.7536 us
#   all-gather of 115072 B:     1/2 x 115072 / 100e9 + 1/2 x 57536 / 10e9
#                              = 0.57536 us + 2.8768 us         total 10.35648 us
out=$(run "h 4 $tiny --global-batch-size 4 --use-distributed-optimizer" -r $R $net \
      --gpus-per-node 2 --ib-gbps 10)
approx "DP 4 over 2 nodes: hierarchical reduce-scatter + all-gather = 10.35648 us" \
    "$(col "$out" h dp_s)" 1.035648e-5
# state: 2 + 4 bytes, and master, moments and the gradient shard (16) / 4
approx "distributed optimizer: 6 + 16/DP bytes of state per parameter" \
    "$(col "$out" h mem_states_gib)" "$(awk 'BEGIN { printf "%.12g", 10 * 57536 / 1073741824 }')"
# optimizer step on a quarter: (34/4 + 4) x 57536 B at 2.186368 GB/s
out=$(run "h 4 $tiny --global-batch-size 4 --use-distributed-optimizer" -r $R --hbm-gbps 2.186368)
approx "distributed optimizer: step on 1/DP of the parameters (12.5/38 ms)" \
    "$(col "$out" h optim_s)" "$(awk 'BEGIN { printf "%.15g", 12.5 / 38 * 1e-3 }')"

# ---- tensor parallelism -----------------------------------------------------
# TP 2, one micro-batch: S = 32 x 64 x 2 = 4096 bytes.  With SP, per block
# and direction an all-gather and a reduce-scatter, 2 x 1/2 x 4096 / 100e9
# = 40.96 ns; 4 per layer + embedding + head = 6 -> 245.76 ns; the
# cross-entropy's all-reduces of 128 and 256 bytes: 3.84 ns; the norm
# weights' all-reduce, 4 x 3 x 64 bytes: 7.68 ns.  Total 257.28 ns.
out=$(run "sp 2 $tiny --tensor-model-parallel-size 2 --sequence-parallel" -r $R $net)
approx "TP 2 + SP: 6 gather/scatter pairs + cross-entropy + norm grads = 257.28 ns" \
    "$(col "$out" sp tp_s)" 2.5728e-7
out=$(run "tp 2 $tiny --tensor-model-parallel-size 2" -r $R $net)
approx "TP 2 without SP: 6 all-reduces of 4096 B + cross-entropy = 249.6 ns" \
    "$(col "$out" tp tp_s)" 2.496e-7
# compute splits in two, the vocabulary padded to 256: 32 x 356352 / 2 FLOPs
approx "TP 2: half the FLOPs of a micro-batch per GPU (0.58 ms)" "$(col "$out" tp compute_s)" 0.00058

# ---- pipeline ---------------------------------------------------------------
# 8 layers, PP 4, M = 8 micro-batches: bubble (p-1)/M = 3/8 of the
# micro-batches' time; interleaved, 1 layer per virtual stage (V = 2):
# (p-1)/(V M) = 3/16.
deep=$(echo "$tiny" | sed 's/--num-layers 1/--num-layers 8/')
out=$(run "pp 4 $deep --pipeline-model-parallel-size 4 --global-batch-size 8
vp 4 $deep --pipeline-model-parallel-size 4 --global-batch-size 8 --num-layers-per-virtual-pipeline-stage 1" -r $R $net)
check "bubble fraction (p-1)/(V M): 3/8 and 3/16" \
    "$(col "$out" pp bubble_fraction) $(col "$out" vp bubble_fraction)" "0.375 0.1875"
for r in pp vp; do
    approx "$r: bubble time = fraction x M micro-batches' time" \
        "$(printf '%s\n' "$out" | awk -F, -v r=$r 'NR == 1 { for (i = 1; i <= NF; i++) k[$i] = i; next }
            $1 == r { printf "%.15g", $(k["bubble_s"]) / ($(k["compute_s"]) + $(k["imbalance_s"]) + $(k["tp_s"]) + $(k["pp_s"])) }')" \
        "$(col "$out" $r bubble_fraction)"
done
# Stage imbalance: the last stage holds 2 of the 8 layers and the head:
# (2 x 258048 + 49152) / ((8 x 258048 + 49152) / 4) - 1 of the compute
approx "PP 4: the last stage's LM head as imbalance" \
    "$(printf '%s\n' "$out" | awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) k[$i] = i; next }
        $1 == "pp" { printf "%.15g", $(k["imbalance_s"]) / $(k["compute_s"]) }')" \
    "$(awk 'BEGIN { printf "%.15g", (2 * 258048 + 49152) / ((8 * 258048 + 49152) / 4) - 1 }')"
# Point-to-point: per micro-batch and chunk two exchanges of 4096 bytes.
# PP 2 in one node: 2 x 4096 / 100e9 x 2 micro-batches; across nodes
# (1 GPU a node) at 10 GB/s.
out=$(run "a 2 $tiny --num-layers 2 --pipeline-model-parallel-size 2 --global-batch-size 2" -r $R $net)
approx "PP 2 in a node: 4 x 4096 B / 100 GB/s" "$(col "$out" a pp_s)" 1.6384e-7
out=$(run "a 2 $tiny --num-layers 2 --pipeline-model-parallel-size 2 --global-batch-size 2" -r $R $net \
      --gpus-per-node 1 --ib-gbps 10)
approx "PP 2 across nodes: 4 x 4096 B / 10 GB/s" "$(col "$out" a pp_s)" 1.6384e-6

# ---- checked against measurement --------------------------------------------
# The fixture: t/1 measured 16000 tokens/s -> 2 ms an iteration, of which
# the optimizer takes 1 ms (--hbm-gbps 2.186368): R = 9830400 FLOPs / 1 ms.
# t/2 (DP 2, distributed optimizer) is then predicted, not fitted:
#   1 ms + 1.72608 us (reduce-scatter + all-gather) + 21/38 ms (optimizer)
# -> 32 / that = 20587.28235 tokens/s/GPU, +8.354% over the measured 19000.
# t/4: 1 ms + 2.58912 us + 12.5/38 ms -> 24032.38685.  t/8 failed: left out.
chk=$("$P" --csv --calibrate "$fixture" --hbm-gbps 2.186368 $net)
check "check: the ok runs, the failed one left out" \
    "$(printf '%s\n' "$chk" | cut -d, -f1,4 | tr '\n' ' ')" \
    "name,calibrated_on t/1,t/1 t/2,t/1 t/4,t/1 "
approx "check: R calibrated on the 1-GPU run alone" "$(col "$chk" t/1 achieved_tflops)" $R
approx "check: the 1-GPU run reproduced (error 0)" "$(col "$chk" t/1 error)" 0
approx "check: 2 GPUs predicted from the 1-GPU point" "$(col "$chk" t/2 model_tokens_per_sec_per_gpu)" \
    "$(awk 'BEGIN { printf "%.15g", 32 / (1e-3 + 1.72608e-6 + 21 / 38 * 1e-3) }')"
approx "check: its error against the measured 19000" "$(col "$chk" t/2 error)" \
    "$(awk 'BEGIN { printf "%.15g", 32 / (1e-3 + 1.72608e-6 + 21 / 38 * 1e-3) / 19000 - 1 }')"
approx "check: 4 GPUs predicted" "$(col "$chk" t/4 model_tokens_per_sec_per_gpu)" \
    "$(awk 'BEGIN { printf "%.15g", 32 / (1e-3 + 2.58912e-6 + 12.5 / 38 * 1e-3) }')"
# --calibrate-run t/2: R solved so that the model meets the 2-GPU point
chk=$("$P" --csv --calibrate "$fixture" --calibrate-run t/2 --hbm-gbps 2.186368 $net)
approx "--calibrate-run t/2: that run reproduced by bisection" "$(col "$chk" t/2 error)" 0
# a projection after the check uses the calibrated R
printf 'p 2 %s --global-batch-size 2\n' "$tiny" >"$tmp/p.sweep"
out=$("$P" --calibrate "$fixture" --hbm-gbps 2.186368 $net "$tmp/p.sweep")
case $out in
*"## Model against measurement"*"## PROJECTION (a model, not a measurement)"*"calibrated on the measured run t/1"*"| p | 2 |"*)
    pass "markdown: the check, then a table labelled PROJECTION with its calibration" ;;
*) fail "markdown: the check, then a table labelled PROJECTION with its calibration"
   printf '%s\n' "$out" | sed 's/^/#   /' ;;
esac

# ---- bad input --------------------------------------------------------------
printf 'x 4 --model llama3-9b\n' >"$tmp/bad1"
# (the shape and layout are gridlm-train's dry run: its refusals, named by run)
fails "an unknown preset is named" "run x: --model llama3-9b is not a known model" -r 400 "$tmp/bad1"
printf 'x 4 %s --pipeline-model-parallel-size 4 --num-layers 6\n' "$tiny" >"$tmp/bad2"
fails "PP not dividing the layers" "run x: --pipeline-model-parallel-size 4 does not divide --num-layers 6" \
    -r 400 "$tmp/bad2"
fails "--train that is not a program" "--train '$tmp/none' is not an executable program" \
    --train "$tmp/none" -r 400 "$tmp/bad2"
printf 'a,b\n1,2\n' >"$tmp/bad.csv"
fails "a CSV that is not sweep.sh's" "has no name, gpus, status" --calibrate "$tmp/bad.csv"
grep -v '^t/1,' "$fixture" >"$tmp/no1.csv"
fails "no 1-GPU run to calibrate on" "no successful 1-GPU run" --calibrate "$tmp/no1.csv"

done_testing
