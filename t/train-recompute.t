#!/bin/sh
# train-recompute: activation recomputation (--recompute-granularity,
# src/model/model.h) changes memory, never numbers.
#
# On the CPU back end (fp32, deterministic kernels) a recomputed forward
# writes the very bits the first forward wrote, so every iteration's loss
# and gradient norm and every validation loss must equal the run without
# recomputation in the same layout (tolerance 1e-7 relative; in practice
# 0).  For each layout -- (1,1,1), TP 2 with --sequence-parallel (the
# recomputed forward all-gathers and reduce-scatters again), PP 2 1F1B,
# interleaved PP 2 (one layer per model chunk), DP 2 with the distributed
# optimizer -- four settings: full uniform with groups of 1 and of 2
# layers, full block with 1 layer, and selective.  On one rank also
# uniform 3 (groups of 3 + 1 layers) and block 3.  The shared buffers are
# overwritten by every later forward, so a backward that did not really
# recompute would read another layer's or micro-batch's activations and
# differ.
#
# Then memory: at a shape where activations dominate (2048 tokens per
# micro-batch), the peak memory of the JSON log (mem_gib; the CPU back end
# counts its allocations) must fall with selective and fall by more than
# a third with full uniform 1, and the startup line must say so.  The
# old "not implemented" warning must be gone.
#
# Environment (t/env.sh): MPIEXEC, MPIEXEC_FLAGS, GL_MPI_FLAVOR, top_builddir.

tol=1e-7
. "$(dirname "$0")/train-lib.sh"
. "$(dirname "$0")/model-flags.sh"

base="$llama_form --device cpu --mock-data --seed 1234 --num-layers 4 --hidden-size 64
 --num-attention-heads 8 --num-query-groups 4 --ffn-hidden-size 176
 --seq-length 64 --vocab-size 512 --micro-batch-size 2 --global-batch-size 16
 --train-iters 6 --lr 1e-3 --lr-warmup-iters 2 --log-interval 1
 --eval-interval 3 --eval-iters 1"

U1="--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
U2="--recompute-granularity full --recompute-method uniform --recompute-num-layers 2"
B1="--recompute-granularity full --recompute-method block --recompute-num-layers 1"
SEL="--recompute-granularity selective"

plan 25

# layout NAME RANKS FLAGS...: the reference run and the four settings.
layout() {
    lname=$1 lranks=$2
    shift 2
    if [ "$lranks" -gt 2 ] && [ "$GL_MPI_FLAVOR" = mpich ]; then
        for v in uniform1 uniform2 block1 selective; do
            skip "$lname-$v" "$lranks ranks under MPICH"
        done
        return
    fi
    if ! run "$lname" "$lranks" "$@"; then
        for v in uniform1 uniform2 block1 selective; do
            fail "$lname-$v: the reference run without recomputation failed"
        done
        return
    fi
    ref=$lname
    # shellcheck disable=SC2086
    {
    check "$lname-uniform1" "$lranks" "$@" $U1
    check "$lname-uniform2" "$lranks" "$@" $U2
    check "$lname-block1" "$lranks" "$@" $B1
    check "$lname-selective" "$lranks" "$@" $SEL
    }
}

layout one 1
# shellcheck disable=SC2086
{
check one-uniform3 1 --recompute-granularity full --recompute-method uniform \
    --recompute-num-layers 3
check one-block3 1 --recompute-granularity full --recompute-method block \
    --recompute-num-layers 3
}
layout tp2-sp 2 --tensor-model-parallel-size 2 --sequence-parallel
layout pp2 2 --pipeline-model-parallel-size 2
layout pp2-interleaved 2 --pipeline-model-parallel-size 2 \
    --num-layers-per-virtual-pipeline-stage 1
layout dp2-distopt 2 --use-distributed-optimizer

# The line at startup names the mode; no "not implemented" warning.
if grep -q 'activations (rank 0): .*full recomputation, uniform 1' "$tmp/one-uniform1.log" &&
   grep -q 'activations (rank 0): .*selective recomputation' "$tmp/one-selective.log" &&
   ! grep -qi 'not implemented' "$tmp/one-uniform1.log" "$tmp/one-selective.log"; then
    pass "the startup line names the recomputation, no 'not implemented' warning"
else
    fail "startup line or warning wrong:"
    grep -i 'activations\|recompute\|not implemented' "$tmp/one-uniform1.log" | sed 's/^/#   /'
fi

# Memory where activations dominate: 8 x 256 tokens per micro-batch.
base="$llama_form --device cpu --mock-data --seed 1234 --num-layers 4 --hidden-size 64
 --num-attention-heads 8 --num-query-groups 4 --ffn-hidden-size 176
 --seq-length 256 --vocab-size 512 --micro-batch-size 8 --global-batch-size 8
 --train-iters 2 --lr 1e-3 --log-interval 1"
mem() { sed -n 's/.*"mem_gib": \([^,]*\),.*/\1/p' "$tmp/$1.jsonl" | tail -1; }
# shellcheck disable=SC2086
if run mem-none 1 && run mem-full 1 $U1 && run mem-sel 1 $SEL; then
    a=$(mem mem-none) b=$(mem mem-full) c=$(mem mem-sel)
    if awk -v a="$a" -v b="$b" 'BEGIN { exit !(a > 0 && b < a * 2 / 3) }'; then
        pass "full uniform 1: peak memory $b GiB, down from $a GiB"
    else
        fail "full uniform 1: peak memory $b GiB, $a GiB without recomputation"
    fi
    if awk -v a="$a" -v c="$c" 'BEGIN { exit !(a > 0 && c < a * 0.9) }'; then
        pass "selective: peak memory $c GiB, down from $a GiB"
    else
        fail "selective: peak memory $c GiB, $a GiB without recomputation"
    fi
else
    fail "memory runs failed"
    fail "memory runs failed"
fi
done_testing
