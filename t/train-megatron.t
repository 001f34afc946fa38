#!/bin/sh
# t/train-megatron.t: Megatron-LM's options under gridlm-train.
#
# doc/megatron-flags.md sorts every option of Megatron-LM's
# megatron/training/arguments.py into honoured, accepted (without effect:
# gridlm always does it, or it does not apply) and refused (with what to
# use instead).  gridlm-train --list-megatron-flags prints the option
# table the same way; the two must agree, name by name, so neither can
# drift.  Then three of Megatron's example scripts, their argument lists
# kept in t/megatron-*.args, run through a dry run: each either plans, or
# stops with one message that lists every refused option and every
# refused value at once.

. "$(dirname "$0")/tap.sh"
prog=./src/tools/gridlm-train
[ -x "$prog" ] || skip_all "$prog not built"
src=${top_srcdir:-..}
doc=$src/doc/megatron-flags.md
tmp=${TMPDIR:-/tmp}/train-megatron.$$
mkdir -p "$tmp" || bail_out "cannot make $tmp"
trap 'rm -rf "$tmp"' EXIT INT TERM

# --- the published table against the program's ---

"$prog" --list-megatron-flags >"$tmp/list" 2>"$tmp/err"
ok $? "--list-megatron-flags exits 0"
cut -f1,2 "$tmp/list" | sort >"$tmp/prog"
# The doc's rows: | `--name` | status | why |
sed -n 's/^| `--\([^`]*\)` | \([a-z]*\) |.*/\1	\2/p' "$doc" | sort >"$tmp/doc"
[ -s "$tmp/doc" ] && [ -s "$tmp/prog" ]
ok $? "the doc and the program both list options ($(wc -l <"$tmp/doc") and $(wc -l <"$tmp/prog"))"

dups=$(cut -f1 "$tmp/doc" | uniq -d)
[ -z "$dups" ]
ok $? "every option appears once in the doc${dups:+ (twice: $dups)}"
dups=$(cut -f1 "$tmp/prog" | uniq -d)
[ -z "$dups" ]
ok $? "every option appears once in the program's table${dups:+ (twice: $dups)}"

# Every row of the doc: the program has the option, with the same status.
good=yes
while IFS='	' read -r name status; do
    got=$(awk -F'\t' -v n="$name" '$1 == n { print $2 }' "$tmp/prog")
    if [ "$got" != "$status" ]; then
        echo "# --$name: the doc says '$status', the program '${got:-unknown}'"
        good=no
    fi
done <"$tmp/doc"
[ $good = yes ]
ok $? "each option of the doc is in the program's table, with the doc's status"

# Every row of the program: the doc has it (so a new row needs a doc line).
missing=$(cut -f1 "$tmp/prog" | while read -r name; do
    grep -q "^$name	" "$tmp/doc" || printf ' --%s' "$name"; done)
[ -z "$missing" ]
ok $? "each option of the program is in the doc${missing:+ (missing:$missing)}"

# The reasons too, for the options accepted or refused.
sed -n 's/^| `--\([^`]*\)` | \(accepted\|refused\) | \(.*\) |$/\1	\2	\3/p' "$doc" |
    sort >"$tmp/doc-why"
awk -F'\t' '$2 != "honoured"' "$tmp/list" | sort >"$tmp/prog-why"
differ=$(diff "$tmp/doc-why" "$tmp/prog-why" | sed -n 's/^[<>] \([^	]*\).*/ --\1/p' | sort -u |
    tr -d '\n')
[ -z "$differ" ]
ok $? "each accepted or refused option has the program's reason in the doc${differ:+ (differ:$differ)}"

# Honoured options are documented in --help (but Megatron's alias
# --persistent-save-interval, which is --save-interval).
"$prog" --help >"$tmp/help"
undocumented=$(awk -F'\t' '$2 == "honoured" { print $1 }' "$tmp/list" | while read -r name; do
    [ "$name" = persistent-save-interval ] || grep -q -- "^  --$name\( \|$\)" "$tmp/help" ||
        printf ' --%s' "$name"; done)
[ -z "$undocumented" ]
ok $? "every honoured option is in --help${undocumented:+ (not:$undocumented)}"

# Refused options say why and what to use; accepted ones say why.
empty=$(awk -F'\t' '$2 != "honoured" && $3 == "" { printf " --%s", $1 }' "$tmp/list")
[ -z "$empty" ]
ok $? "every refused or accepted option has its reason${empty:+ (none:$empty)}"

# --- what the parser says ---

base="--model tiny --mock-data --train-iters 10 --lr 1e-3"
# run ARGS...: the program's exit status in $code, its stderr in $tmp/err
run() { "$prog" "$@" >"$tmp/out" 2>"$tmp/err"; code=$?; }

run $base --no-save-rng --no-load-rng --dry-run --world-size 1
[ $code -eq 0 ]
ok $? "--no-save-rng and --no-load-rng are both accepted"

run $base --virtual-pipeline-model-parallel-size 2
[ $code -eq 2 ] && ! grep -q "did you mean" "$tmp/err" &&
    grep -q "^gridlm-train: error: --virtual-pipeline-model-parallel-size is not supported: .*--num-layers-per-virtual-pipeline-stage = layers / PP / this number" "$tmp/err"
ok $? "--virtual-pipeline-model-parallel-size: refused, naming the chunk size to give"
run $base --shared-tensor-model-parallel-size 2
[ $code -eq 2 ] && ! grep -q "did you mean" "$tmp/err" &&
    grep -q "unknown option --shared-tensor-model-parallel-size: see --help" "$tmp/err"
ok $? "a name a word longer than a known one is not called its typo"
run $base --tensor-model-paralel-size 2
[ $code -eq 2 ] && grep -q "did you mean --tensor-model-parallel-size?" "$tmp/err"
ok $? "a misspelt word is a typo"
run $base --moe-router-num-group 2
[ $code -eq 2 ] &&
    grep -q "did you mean --moe-router-num-groups? (which is not supported: group-limited" \
    "$tmp/err"
ok $? "a typo of a refused option says it is refused"

run $base --fp16 --moe-router-num-groups 8 --moe-router-group-topk 2 --hiden-size 64 \
    --hidden-size abc
lines=$(grep -c '^gridlm-train: error: ' "$tmp/err")
[ $code -eq 2 ] && [ "$lines" -eq 6 ] &&
    grep -q "^gridlm-train: error: --fp16 is not supported: .*use --bf16" "$tmp/err" &&
    grep -q "^gridlm-train: error: --moe-router-num-groups is not supported: group" \
        "$tmp/err" &&
    grep -q "^gridlm-train: error: unknown option --hiden-size: did you mean --hidden-size?" \
        "$tmp/err" &&
    sed -n 5p "$tmp/err" | grep -q "^gridlm-train: error: --hidden-size abc is not an integer" &&
    sed -n 6p "$tmp/err" | grep -q "^gridlm-train: error: 5 usage errors above"
status=$?
ok $status "refused and unknown options are all reported, one line each, then the bad values"
[ $status -eq 0 ] || sed 's/^/# /' "$tmp/err"

# --- three of Megatron-LM's example scripts ---

# args FIXTURE: the fixture's arguments, its paths replaced by test files
args() {
    grep -v '^#' "$src/t/$1" | sed -e "s|@CKPT@|$tmp/ckpt|" -e "s|@TB@|$tmp/tb|" \
        -e "s|@CACHE@|$tmp/cache|" -e "s|@DATA@|$tmp/data|" -e "s|@VOCAB@|$tmp/vocab.json|" \
        -e "s|@MERGE@|$tmp/merges.txt|" -e "s|@TOKENIZER@|$tmp/tokenizer.model|"
}

# refusals FIXTURE RANKS EXPECTED NAME... [-- LINE...]: the dry run of
# FIXTURE stops (exit 2) with one message: a line per refused option, the
# options NAME... exactly (EXPECTED of them), each saying what to use;
# then the lines that begin with each LINE (refused values and checks
# across options), and the count.  Options other branches add may show as
# unknown until they are merged, and nothing else may.  The fixtures
# give their own vocabulary (a tokenizer, or --vocab-size for the
# NullTokenizer): a --world-size plan reads it as a run does.
refusals() {
    fixture=$1 ranks=$2 expected=$3
    shift 3
    names= others=
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do names="$names $1"; shift; done
    [ $# -gt 0 ] && shift
    run $(args "$fixture") --dry-run --device cpu --world-size "$ranks"
    grep '^gridlm-train: error: ' "$tmp/err" | sed 's/^gridlm-train: error: //' >"$tmp/lines"
    total=$(wc -l <"$tmp/lines")
    good=yes
    [ $code -eq 2 ] || { echo "# exit $code"; good=no; }
    n=0
    for prefix in "$@"; do
        found=no
        while read -r line; do
            case $line in "$prefix"*) found=yes ;; esac
        done <"$tmp/lines"
        [ $found = yes ] || { echo "# no line: $prefix"; good=no; }
    done
    while read -r line; do
        expected_line=no
        for prefix in "$@"; do
            case $line in "$prefix"*) expected_line=yes ;; esac
        done
        [ $expected_line = yes ] && continue
        case $line in
        "--"*" is not supported: "?*)
            name=${line%% is not supported*}
            name=${name#--}
            n=$((n + 1))
            case "$names " in *" $name "*) ;; *) echo "# not expected: --$name"; good=no ;; esac
            ;;
        "unknown option --"*)
            name=${line#unknown option --}
            name=${name%%:*}
            echo "# unknown: --$name"; good=no
            ;;
        *" usage errors above: change each as its line says, then run again")
            [ "${line%% *}" -eq $((total - 1)) ] || { echo "# count: $line"; good=no; }
            ;;
        *) echo "# other: $line"; good=no ;;
        esac
    done <"$tmp/lines"
    [ $n -eq "$expected" ] || { echo "# $n refused, expected $expected"; good=no; }
    for name in $names; do
        grep -q -- "^--$name is not supported" "$tmp/lines" || { echo "# --$name"; good=no; }
    done
    tail -n1 "$tmp/lines" | grep -q " usage errors above: " || { echo "# no count last"; good=no; }
    [ $good = yes ] || sed 's/^/# stderr: /' "$tmp/err"
    [ $good = yes ]
}

refusals megatron-llama3-8b-fp8.args 8 3 profile profile-step-start profile-step-end
ok $? "Llama 3 8B FP8: one message, the 3 profiler options refused, nothing else"
grep -q "run the job under nsys profile" "$tmp/lines"
ok $? "Llama 3 8B FP8: the profiler's refusal says what to use"

# Megatron's own validate_args refuses the script's --rampup-batch-size
# beside --train-iters too ("expected no batch-size rampup for
# iteration-based training").  The script gives no model-form flag, so
# it is Megatron's GPT (LayerNorm, GeLU, learned positions, biases,
# hidden and attention dropout 0.1), which gridlm builds: the attention
# dropout the script takes by default is not refused.
refusals megatron-gpt3-175b.args 128 1 fp16 -- \
    "--rampup-batch-size with --train-iters: " \
    "--vocab-file is for --tokenizer-type GPT2BPETokenizer: "
ok $? "GPT-3 175B: one message, --fp16 refused, the ramp-up with --train-iters and --vocab-file without its tokenizer type"
! grep -q "attention-dropout" "$tmp/lines"
ok $? "GPT-3 175B: the default attention dropout 0.1 is accepted"
grep -q "^--fp16 is not supported: .*use --bf16" "$tmp/lines"
ok $? "GPT-3 175B: --fp16's refusal names --bf16"

# Its MoE options are read and honoured (issues 13, 14): none is refused,
# nor its EP 2 with the alltoall dispatcher and the distributed optimizer;
# SentencePiece's --tokenizer-type is the one refusal, a lone line without
# a count.
run $(args megatron-mixtral-8x7b.args) --dry-run --device cpu --world-size 2
[ $code -eq 2 ] && [ "$(grep -c '^gridlm-train: error: ' "$tmp/err")" -eq 1 ] &&
    ! grep -q "expert" "$tmp/err" &&
    grep -q "^gridlm-train: error: --tokenizer-type Llama2Tokenizer is not supported: use one of HuggingFaceTokenizer, " "$tmp/err"
ok $? "Mixtral 8x7B: one message, SentencePiece's --tokenizer-type refused, EP 2 not"
[ $code -eq 2 ] || sed 's/^/# stderr: /' "$tmp/err"

# With a tokenizer gridlm reads, the dry run plans the expert grid of 2
# ranks: ETP = TP = 1, EDP 1, one of the 2 experts on each rank, and
# warns of nothing: the layout trains.
mixtral() {
    args megatron-mixtral-8x7b.args | sed -e 's/^--tokenizer-type Llama2Tokenizer$/--tokenizer-type NullTokenizer/' \
        -e 's/^--tokenizer-model .*/--vocab-size 32000/'
}
run $(mixtral) --dry-run --device cpu --world-size 2
[ $code -eq 0 ] && grep -q '^expert_model_parallel_size=2$' "$tmp/out" &&
    grep -q '^expert_tensor_parallel_size=1$' "$tmp/out" &&
    grep -q '^expert_data_parallel_size=1$' "$tmp/out" &&
    grep -q '^experts_per_rank=1$' "$tmp/out" &&
    grep -q '^expert_placement=0:\[0,1) 1:\[1,2)$' "$tmp/out" &&
    ! grep -q "warning: --expert-model-parallel-size" "$tmp/err"
ok $? "Mixtral 8x7B with a NullTokenizer: the dry run plans EP 2, one expert per rank, no warning"
[ $code -eq 0 ] || sed 's/^/# stderr: /' "$tmp/err"

# Megatron's default dispatcher, allgather, trains with EP 2 as well: the
# same plan, no refusal and no warning.
run $(mixtral | sed 's/^--moe-token-dispatcher-type alltoall$/--moe-token-dispatcher-type allgather/') \
    --dry-run --device cpu --world-size 2
[ $code -eq 0 ] && grep -q '^expert_model_parallel_size=2$' "$tmp/out" &&
    ! grep -q "warning: --expert-model-parallel-size" "$tmp/err"
ok $? "Mixtral 8x7B with the allgather dispatcher: the dry run plans EP 2, no warning"
[ $code -eq 0 ] || sed 's/^/# stderr: /' "$tmp/err"

# Llama 3 8B FP8 without its refused options plans on 8 ranks:
# everything else in the script is honoured or accepted, --fp8-param-gather
# beside --overlap-param-gather too.
drop=" profile profile-step-start profile-step-end "
args megatron-llama3-8b-fp8.args | tr '\n' ' ' | tr -s ' ' | sed 's/ --/\n--/g' |
    while read -r opt rest; do
        case $drop in *" ${opt#--} "* | *" ${opt#--}
"*) ;; *) echo "$opt $rest" ;; esac
    done >"$tmp/kept"
run $(cat "$tmp/kept") --dry-run --device cpu --world-size 8
[ $code -eq 0 ] && grep -q '^data_parallel_size=8$' "$tmp/out" &&
    grep -q '^num_micro_batches=16$' "$tmp/out" && grep -q '^bf16=1$' "$tmp/out" &&
    grep -q '^hidden_size=4096$' "$tmp/out" && grep -q '^num_query_groups=8$' "$tmp/out" &&
    grep -q '^overlap_param_gather=1$' "$tmp/out" && grep -q '^fp8_param_gather=1$' "$tmp/out" &&
    grep -q '^fp8=delayed (hybrid, margin 0, amax history 1024, max)$' "$tmp/out"
ok $? "Llama 3 8B FP8 without the refused options: the dry run plans DP 8, 16 micro-batches, FP8 weights gathered bucket by bucket"
[ $code -eq 0 ] || sed 's/^/# stderr: /' "$tmp/err"

done_testing
