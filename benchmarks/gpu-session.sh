#!/bin/sh
# gpu-session.sh: the checks and timings of one GPU-machine session, in
# one command, so that every figure in RESULTS.md comes with the command
# and the peer measured beside it.
#
#   benchmarks/gpu-session.sh BUILD_DIR OUT_DIR [STEPS...]
#
# BUILD_DIR holds an MPICH + CUDA build (src/tools/gridlm-train, t/...);
# run it from the project's root after `. .gpukit/env.sh` on the GPU
# machine (see ../shared/gpu/README.md).  STEPS (default: all) choose among
#   check   NCCL comm/boot tests and the dry-run placement on every GPU
#   gputest the GPU test programs (t/ops-cuda.t, t/attn-cudnn.t,
#           t/train-cuda.t: every op, cuDNN attention, training steps and
#           recomputation against the CPU back end) and the cuBLASLt
#           products of the 1.5B shape, heuristic against tuned
#   equiv   bf16 training equivalence across layouts on the GPUs; FP8
#           delayed at DP 2 with and without --fp8-param-gather (the
#           same losses, bit for bit), bucket by bucket too
#   curve   a 300-iteration run of a small model (compare with the CPU)
#   perf    the 1.5B Llama shape on 1 GPU and on all GPUs (DP, distributed
#           optimizer; plain, --overlap-grad-reduce, and with
#           --overlap-param-gather too) beside the PyTorch peer
#           (PERF2=1: also on 2 GPUs)
#   perf8b  the Llama-3-8B shape on all GPUs (DP with the distributed
#           optimizer and --overlap-grad-reduce) beside the peer with
#           FSDP2 (PERF8BTP=1: also TP over all GPUs, sequence parallel)
# Each step writes OUT_DIR/STEP.log; a summary goes to stdout.
set -u
build=$1 out=$2
mkdir -p "$out" || exit 1
shift 2
steps=${*:-check gputest equiv curve perf perf8b}
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
train=$build/src/tools/gridlm-train
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
echo "gpu-session: $(date -u +%F) commit $commit, $ngpu x $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"

# The Llama form of the model (gridlm's default is Megatron's GPT since
# issue 16).
llama="--swiglu --normalization RMSNorm --position-embedding-type rope --disable-bias-linear --attention-dropout 0 --hidden-dropout 0"
# The 1.5B shape of the issue, with the peer's optimizer settings.
shape15="$llama --num-layers 16 --hidden-size 2048 --num-attention-heads 32 --num-query-groups 8
  --ffn-hidden-size 8192 --vocab-size 128256 --seq-length 4096 --rotary-base 500000
  --untie-embeddings-and-output-weights"
shape8b="$llama --num-layers 32 --hidden-size 4096 --num-attention-heads 32 --num-query-groups 8
  --ffn-hidden-size 14336 --vocab-size 128256 --seq-length 4096 --rotary-base 500000
  --untie-embeddings-and-output-weights"
opt="--lr 3e-4 --weight-decay 0.1 --adam-beta2 0.95 --clip-grad 1.0 --mock-data --seed 1234 --eval-iters 0"

peer() {   # peer NPROC ARGS...: the PyTorch peer outside the kit's libraries
    n=$1; shift
    env -u LD_LIBRARY_PATH timeout 300 torchrun --standalone --nproc_per_node "$n" \
        .gpukit/torch_peer.py "$@" 2>&1 | grep -E '^torch|Error|error' | tail -3
}

gridlm() { # gridlm NPROC LOG ARGS...
    n=$1 log=$2; shift 2
    timeout 300 mpiexec -n "$n" $train --device cuda --bf16 "$@" --log-json "$log.jsonl" \
        > "$log" 2>&1
    rc=$?
    # Mean of the iterations after the first 4 (warm-up).
    awk -F'[,:}]' '{for (i = 1; i < NF; i++) if ($i ~ /"tokens_per_sec_per_gpu"/) t[NR] = $(i+1);
                   for (i = 1; i < NF; i++) if ($i ~ /"mfu"/) m[NR] = $(i+1);
                   for (i = 1; i < NF; i++) if ($i ~ /"mem_gib"/) g[NR] = $(i+1)}
         END {n = 0; for (k = 3; k < NR; k++) if (k in t) {s += 1 / t[k]; u += m[k]; n++}
              if (n) printf "gridlm world=%d tokens/s/GPU=%.0f MFU=%.1f%% mem=%.1fGiB (%d timed iterations)\n",
                            '"$n"', n / s, 100 * u / n, g[NR], n;
              else print "gridlm: no timed iterations"}' "$log.jsonl" 2>/dev/null
    [ $rc -eq 0 ] || { echo "gridlm exited $rc:"; tail -5 "$log"; }
}

for s in $steps; do
    case $s in
    check)
        # NCCL back end of comm.h on 1, 2 and all GPUs, the bootstrap and
        # group creation with a GPU per rank, and the dry-run placement.
        { for n in 1 2 $ngpu; do
              echo "# comm-test on $n ranks"; timeout 120 mpiexec -n $n $build/t/comm-test
          done
          echo "# boot-test on $ngpu ranks"
          GL_EXPECT_BOOT=mpi timeout 120 mpiexec -n $ngpu $build/t/boot-test
          echo "# dry run"
          timeout 120 mpiexec -n $ngpu $train --dry-run --tensor-model-parallel-size 2 \
              --pipeline-model-parallel-size $((ngpu / 2)) $shape15
        } > "$out/check.log" 2>&1
        echo "check: $(grep -c '^ok' "$out/check.log") ok, $(grep -c '^not ok' "$out/check.log") not ok," \
             "$(grep -c 'SKIP' "$out/check.log") skip lines"
        grep -E '^not ok|health check|bootstrap:|NVIDIA|GPU' "$out/check.log" | head -20
        ;;
    gputest)
        # TAP programs built by `make check` (they skip without a GPU;
        # train-cuda.t takes about 480 s on an H200).
        for t in ops-cuda attn-cudnn train-cuda; do
            [ -x "$build/t/$t.t" ] || continue
            timeout 600 "$build/t/$t.t" > "$out/$t.log" 2>&1
            echo "$t: exit $?, $(grep -c '^ok' "$out/$t.log") ok, $(grep -c '^not ok' "$out/$t.log") not ok"
            grep -E '^not ok|^# .*(max|worst|diff|within)' "$out/$t.log" | head -12
        done
        [ -x "$build/src/tools/gridlm-bench" ] &&
            GRIDLM_GEMM_TUNE=2 timeout 120 "$build/src/tools/gridlm-bench" gemm --device cuda --llama \
                > "$out/gemm.log" 2>&1 && grep -v '^gemm tune' "$out/gemm.log" | tail -18
        ;;
    equiv)
        small="$llama --num-layers 4 --hidden-size 512 --num-attention-heads 8 --num-query-groups 4
          --ffn-hidden-size 1408 --vocab-size 4096 --seq-length 256 --micro-batch-size 2
          --global-batch-size 16 --train-iters 20 --lr 1e-3 --lr-warmup-iters 2 --log-interval 1
          --mock-data --seed 1234"
        for l in "1:" "2:--tensor-model-parallel-size 2" "2:--tensor-model-parallel-size 2 --sequence-parallel" \
                 "2:--pipeline-model-parallel-size 2" "2:--use-distributed-optimizer" \
                 "4:--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel" \
                 "4:--use-distributed-optimizer" \
                 "4:--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 --tensor-model-parallel-size 2" \
                 "4:--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --ddp-bucket-size 200000" \
                 "4:--pipeline-model-parallel-size 2 --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather" \
                 "4:--pipeline-model-parallel-size 4" \
                 "2:--use-distributed-optimizer --fp8-format hybrid --fp8-recipe delayed" \
                 "2:--use-distributed-optimizer --fp8-format hybrid --fp8-recipe delayed --fp8-param-gather" \
                 "2:--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --fp8-format hybrid --fp8-recipe delayed --fp8-param-gather" \
                 "2:--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"; do
            n=${l%%:*} f=${l#*:}
            [ "$n" -le "$ngpu" ] || continue
            tag=$(echo "$n $f" | tr -c 'a-z0-9' _)
            timeout 120 mpiexec -n $n $train --device cuda --bf16 $small $f --log-json "$out/eq_$tag.jsonl" \
                > "$out/eq_$tag.log" 2>&1 || echo "FAILED: $n ranks $f"
            echo "$n ranks $f: $(grep -o '"loss":[^,]*' "$out/eq_$tag.jsonl" | sed -n '1p;10p;20p' | tr '\n' ' ')"
        done > "$out/equiv.log"
        cat "$out/equiv.log"
        ;;
    curve)
        timeout 200 mpiexec -n 1 $train --device cuda --bf16 $llama --num-layers 4 --hidden-size 256 \
            --num-attention-heads 4 --num-query-groups 2 --ffn-hidden-size 704 --vocab-size 512 \
            --seq-length 128 --micro-batch-size 8 --global-batch-size 8 --train-iters 300 --lr 1e-3 \
            --lr-warmup-iters 10 --log-interval 25 --mock-data --seed 1234 \
            --log-json "$out/curve_gpu.jsonl" > "$out/curve.log" 2>&1
        grep -o '"loss":[^,]*' "$out/curve_gpu.jsonl" | tr '\n' ' '; echo
        ;;
    perf)
        gridlm 1 "$out/perf1" $shape15 $opt --micro-batch-size 2 --global-batch-size 2 \
            --train-iters 14 --log-interval 1
        peer 1 --mbs 2
        [ "$ngpu" -gt 2 ] && [ "${PERF2:-0}" = 1 ] && gridlm 2 "$out/perf2" $shape15 $opt \
            --micro-batch-size 2 --global-batch-size 4 --use-distributed-optimizer \
            --train-iters 14 --log-interval 1
        if [ "$ngpu" -gt 1 ]; then
            gridlm $ngpu "$out/perf$ngpu" $shape15 $opt --micro-batch-size 2 \
                --global-batch-size $((2 * ngpu)) --use-distributed-optimizer --train-iters 14 --log-interval 1
            gridlm $ngpu "$out/perf${ngpu}og" $shape15 $opt --micro-batch-size 2 \
                --global-batch-size $((2 * ngpu)) --use-distributed-optimizer --overlap-grad-reduce \
                --train-iters 14 --log-interval 1
            gridlm $ngpu "$out/perf${ngpu}op" $shape15 $opt --micro-batch-size 2 \
                --global-batch-size $((2 * ngpu)) --use-distributed-optimizer --overlap-grad-reduce \
                --overlap-param-gather --train-iters 14 --log-interval 1
            peer $ngpu --mbs 2
        fi
        ;;
    perf8b)
        [ "$ngpu" -ge 4 ] || continue
        gridlm $ngpu "$out/perf8b" $shape8b $opt --micro-batch-size 1 --global-batch-size $ngpu \
            --use-distributed-optimizer --overlap-grad-reduce --train-iters 10 --log-interval 1
        [ "${PERF8BTP:-0}" = 1 ] && gridlm $ngpu "$out/perf8btp" $shape8b $opt --micro-batch-size 1 \
            --global-batch-size 8 --tensor-model-parallel-size $ngpu --sequence-parallel \
            --train-iters 10 --log-interval 1
        [ "${PEER8B:-1}" = 1 ] && peer $ngpu --fsdp --dim 4096 --layers 32 --heads 32 --kv-heads 8 --ffn 14336 --mbs 1 --steps 6 --warmup 3
        ;;
    esac
done
