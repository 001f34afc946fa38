# train-moe-lib.sh: the models and helpers of t/train-moe.t and
# t/train-moe-qwen.t (sourced after t/train-lib.sh and t/model-flags.sh).
#
#   $tiny, $mixtral, $qwen, $sigmoid, $capacity   the flags of the runs
#   same_moe REF GOT    the MoE losses and dropped fractions of two JSON
#                       logs agree within $tol
#   layouts MODEL FLAGS...  TP 2, TP 2 + SP, PP 2, DP 2, DP 2 with the
#                       distributed optimizer against $tmp/MODEL-ref.jsonl
#                       (two results each)

# (--moe-layer-freq [0,1,1,1] travels unquoted in $base: no globbing)
set -f
tol=1e-5
tiny="$llama_form --device cpu --mock-data --seed 1234 --num-layers 4 --hidden-size 32
 --num-attention-heads 4 --num-query-groups 2 --ffn-hidden-size 64
 --seq-length 32 --vocab-size 256 --micro-batch-size 2 --global-batch-size 8
 --train-iters 20 --lr 1e-3 --lr-warmup-iters 2 --log-interval 1
 --eval-interval 10 --eval-iters 2"
mixtral="--num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 32
 --moe-aux-loss-coeff 0.01"
qwen="--num-experts 6 --moe-router-topk 2 --moe-ffn-hidden-size 16
 --moe-router-pre-softmax --moe-layer-freq [0,1,1,1]
 --moe-shared-expert-intermediate-size 32
 --moe-router-load-balancing-type seq_aux_loss --moe-aux-loss-coeff 0.01
 --moe-z-loss-coeff 0.001"
sigmoid="--num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 32
 --moe-router-score-function sigmoid --moe-router-enable-expert-bias
 --moe-router-bias-update-rate 0.01 --moe-router-topk-scaling-factor 2
 --moe-aux-loss-coeff 0.01"
capacity="--moe-expert-capacity-factor 0.75"

# same_moe REF GOT: the MoE losses of two JSON logs agree within $tol
# (both absent counts as agreeing)
same_moe() {
    for key in moe_aux_loss moe_z_loss moe_dropped; do
        awk -v key="$key" -v t="$tol" '
        function val(line,   s) {
            if (!match(line, "\"" key "\": [^,}]*")) return "none"
            s = substr(line, RSTART, RLENGTH); sub(/^[^:]*: /, "", s); return s
        }
        /"valid_loss"/ { next }
        FNR == NR { r[FNR] = val($0); next }
        { a = val($0); b = r[FNR]
          if (a == "none" && b == "none") next
          if (a == "none" || b == "none") { bad = 1; next }
          d = b + 0 == 0 ? a - b : (a - b) / b; if (d < 0) d = -d; if (d >= t) bad = 1 }
        END { exit bad }' "$1" "$2" || return 1
    done
}

# layouts MODEL: the five layouts against MODEL's single-rank run
layouts() {
    model=$1
    shift
    ref=$model-ref
    for v in tp2 tp2-sp pp2 dp2 dp2-distopt; do
        case $v in
        tp2) f="--tensor-model-parallel-size 2" ;;
        tp2-sp) f="--tensor-model-parallel-size 2 --sequence-parallel" ;;
        pp2) f="--pipeline-model-parallel-size 2" ;;
        dp2) f="" ;;
        *) f="--use-distributed-optimizer" ;;
        esac
        # shellcheck disable=SC2086
        check "$model-$v" 2 "$@" $f
        if same_moe "$tmp/$ref.jsonl" "$tmp/$model-$v.jsonl"; then
            pass "$model-$v: MoE losses and dropped fraction within $tol"
        else
            fail "$model-$v: MoE losses differ from $ref"
        fi
    done
}

