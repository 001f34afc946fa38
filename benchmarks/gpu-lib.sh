# benchmarks/gpu-lib.sh: what the device calls' scripts share.  A call's
# script, staged beside this file, src/tools/gridlm-train and .gpukit,
# starts
#     set -u
#     cd "$(dirname "$0")" && . ./gpu-lib.sh && begin "$1"
# (or sources it from the repository root after setting $out itself).
#
#   begin OUTD                  logs to OUTD/logs ($out), the kit's
#                               environment (.gpukit/env.sh)
#   el                          seconds since the library was sourced
#   rate FILE.jsonl             harmonic-mean tokens/s, mean MFU and the
#                               per-iteration ms of iterations 5 and on
#   run BIN NAME ITERS MBS FLAGS...
#                               one gridlm-train run on one GPU (the
#                               shared optimizer flags, mock data), its
#                               rate line, and any error it printed;
#                               $GA micro-batches a step (default 1)
#   mrun NAME N ITERS FLAGS...  one gridlm-train run ($bin, default
#                               src/tools/gridlm-train) on N GPUs, timeout
#                               $MRUN_TIMEOUT s (default 100), its rate line
#   rel NAME1 NAME2             the largest relative difference of two
#                               runs' losses
#   peer NAME FLAGS...          one run of the PyTorch peer
#                               (.gpukit/torch_peer.py), its last lines
#   tpeer NAME N FLAGS...       the peer on N GPUs under torchrun (DDP;
#                               --fsdp for FSDP2), timeout $PEER_TIMEOUT s
#                               (default 200), its last result line
#   lg FILE.jsonl               one line per logged iteration or
#                               validation: loss, grad norm, valid loss
#   same NAME1 NAME2            whether two runs' lg lines agree bit for
#                               bit ("same bits:" or "DIFFERENT:")
#   trace NAME WINDOW_MS ITERS MBS FLAGS...
#                               $new (a gridlm-train) run, with benchmarks/gpu-trace.c's CUPTI
#                               trace over the last WINDOW_MS (gpu-trace.so
#                               in the current folder, libcupti on
#                               LD_LIBRARY_PATH); the kernel table is in
#                               $out/NAME.log; $GA as for run
#
# The shapes: moeA and moeB are issue 13's two MoE shapes, s15 the 1.5B
# dense shape, s8b 8 layers of the 8B shape; D, T and B the delayed,
# tensorwise and blockwise FP8 flag sets.

t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s]"; }

begin() {
    OUTD=$1
    out=$OUTD/logs
    mkdir -p "$out"
    . .gpukit/env.sh
}

llama="--swiglu --normalization RMSNorm --position-embedding-type rope --disable-bias-linear --attention-dropout 0 --hidden-dropout 0"
moeA="$llama --num-layers 8 --hidden-size 2048 --num-attention-heads 32 --num-query-groups 8 --ffn-hidden-size 5632 --vocab-size 128256 --seq-length 4096 --rotary-base 500000 --untie-embeddings-and-output-weights --num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 5632"
moeB="$llama --num-layers 4 --hidden-size 2048 --num-attention-heads 32 --num-query-groups 4 --ffn-hidden-size 768 --vocab-size 128256 --seq-length 4096 --rotary-base 500000 --untie-embeddings-and-output-weights --num-experts 128 --moe-router-topk 8 --moe-ffn-hidden-size 768"
s15="$llama --num-layers 16 --hidden-size 2048 --num-attention-heads 32 --num-query-groups 8 --ffn-hidden-size 8192 --vocab-size 128256 --seq-length 4096 --rotary-base 500000 --untie-embeddings-and-output-weights"
s8b="$llama --num-layers 8 --hidden-size 4096 --num-attention-heads 32 --num-query-groups 8 --ffn-hidden-size 14336 --vocab-size 128256 --seq-length 4096 --rotary-base 500000 --untie-embeddings-and-output-weights"
D="--fp8-format hybrid --fp8-recipe delayed --fp8-amax-history-len 1024 --fp8-amax-compute-algo max"
T="--fp8-format hybrid --fp8-recipe tensorwise"
B="--fp8-format hybrid --fp8-recipe blockwise"
opt="--lr 3e-4 --weight-decay 0.1 --adam-beta2 0.95 --clip-grad 1.0 --mock-data --seed 1234 --eval-iters 0 --log-interval 1"

rate() {
    awk -F'[,:}]' '{for (i = 1; i < NF; i++) { if ($i ~ /"tokens_per_sec_per_gpu"/) t[NR] = $(i+1);
            if ($i ~ /"elapsed_ms"/) e[NR] = $(i+1);
            if ($i ~ /"mfu"/) m[NR] = $(i+1); if ($i ~ /"loss"/) l[NR] = $(i+1) }}
        END {c = 0; ms = ""; for (k = 5; k <= NR; k++) if (k in t) {s += 1 / t[k]; u += m[k]; c++; ms = ms sprintf(" %.0f", e[k])}
             if (c) printf "tokens/s=%.0f MFU=%.1f%% (%d timed) loss %s..%s ms:%s\n",
                c / s, 100 * u / c, c, l[1], l[NR], ms; else print "no timed iterations"}' "$1"
}

run() {
    bin=$1 name=$2 it=$3 mbs=$4; shift 4
    timeout 120 mpiexec -n 1 $bin --device cuda --bf16 "$@" $opt \
        --micro-batch-size $mbs --global-batch-size $((mbs * ${GA:-1})) --train-iters $it \
        --log-json "$out/$name.jsonl" > "$out/$name.log" 2>&1
    echo "$name: exit $? $(rate "$out/$name.jsonl") $(el)"
    grep -iE 'error|refus' "$out/$name.log" | head -3
}

mrun() {
    name=$1 n=$2 it=$3; shift 3
    timeout ${MRUN_TIMEOUT:-100} mpiexec -n $n ${bin:-src/tools/gridlm-train} --device cuda --bf16 "$@" $opt \
        --train-iters $it --log-json "$out/$name.jsonl" > "$out/$name.log" 2>&1
    echo "$name: exit $? $(rate "$out/$name.jsonl") $(el)"
    grep -iE 'error|refus' "$out/$name.log" | head -3
}

rel() {
    lg "$out/$1.jsonl" | awk '{print $1}' > "$out/$1.l"
    lg "$out/$2.jsonl" | awk '{print $1}' > "$out/$2.l"
    paste "$out/$1.l" "$out/$2.l" | awk -v a=$1 -v b=$2 '{d = $1 - $2; if (d < 0) d = -d;
        r = d / ($2 < 0 ? -$2 : $2); if (r > m) m = r; n++}
        END {printf "%s vs %s: %d losses, largest relative difference %.2e\n", a, b, n, m}'
}

lg() {
    awk -F'[,:}]' '{l = g = v = ""; for (i = 1; i < NF; i++) { if ($i ~ /"loss"/) l = $(i+1);
        if ($i ~ /"grad_norm"/) g = $(i+1); if ($i ~ /"valid_loss"/) v = $(i+1) }
        if (l v != "") print l, g, v}' "$1"
}

same() {
    lg "$out/$1.jsonl" > "$out/$1.lg"; lg "$out/$2.jsonl" > "$out/$2.lg"
    if [ -s "$out/$1.lg" ] && cmp -s "$out/$1.lg" "$out/$2.lg"; then
        echo "same bits: $1 $2 ($(wc -l < "$out/$1.lg") lines)"
    else
        echo "DIFFERENT: $1 $2"; diff "$out/$1.lg" "$out/$2.lg" | head -4
    fi
}

peer() {
    name=$1; shift
    timeout 150 env -u LD_LIBRARY_PATH python3 .gpukit/torch_peer.py "$@" > "$out/$name.txt" 2>&1
    echo "$name: exit $? $(tail -2 "$out/$name.txt" | tr '\n' ' ') $(el)"
}

tpeer() {
    name=$1 n=$2; shift 2
    timeout ${PEER_TIMEOUT:-200} env -u LD_LIBRARY_PATH torchrun --standalone --nproc_per_node $n \
        .gpukit/torch_peer.py "$@" > "$out/$name.txt" 2>&1
    echo "$name: exit $? $(grep -E '^torch' "$out/$name.txt" | tail -1) $(el)"
}

trace() {
    name=$1 win=$2 it=$3 mbs=$4; shift 4
    CUDA_INJECTION64_PATH=$PWD/gpu-trace.so GPU_TRACE_LAST_MS=$win GPU_TRACE_TOP=45 \
        timeout 80 mpiexec -n 1 $new --device cuda --bf16 "$@" $opt \
        --micro-batch-size $mbs --global-batch-size $((mbs * ${GA:-1})) --train-iters $it \
        --log-json "$out/$name.jsonl" > "$out/$name.log" 2>&1
    echo "$name: exit $? $(rate "$out/$name.jsonl") $(el)"
    grep 'gpu-trace: window' "$out/$name.log"
}
