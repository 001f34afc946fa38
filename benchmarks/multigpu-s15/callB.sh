#!/bin/sh
# Issue 19 on N linked H200s (N = 2 or 4), session 15, call B: the 1.5B
# shape's data parallelism beside the PyTorch peer (DDP), TP with
# sequence parallelism at the 8B shape's width, and the watchdog naming
# a rank stopped on purpose.  Every run has its own timeout; the logs go
# to OUT/logs.
#   callB.sh OUT   (from a staging folder holding src/tools/gridlm-train,
#                   gpu-lib.sh and .gpukit)
set -u
cd "$(dirname "$0")" && . ./gpu-lib.sh && begin "$1"
N=$(nvidia-smi -L | wc -l)
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader | head -1
echo "$N GPUs"; nvidia-smi topo -m | head -$((N + 1))
bin=src/tools/gridlm-train

# 1. DP=N, 1.5B, distributed optimizer with overlap, beside the peer (DDP)
mrun s15-dp1 1 14 $s15 --micro-batch-size 2 --global-batch-size 2
mrun s15-dp$N $N 14 $s15 --micro-batch-size 2 --global-batch-size $((2 * N)) \
    --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather
mrun s15-dp$N-ga8 $N 6 $s15 --micro-batch-size 2 --global-batch-size $((16 * N)) \
    --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather
env -u LD_LIBRARY_PATH timeout 150 torchrun --standalone --nproc_per_node $N .gpukit/torch_peer.py --mbs 2 \
    > "$out/peer-dp$N.txt" 2>&1; echo "peer DDP x$N: exit $? $(grep -E '^torch' "$out/peer-dp$N.txt" | tail -1) $(el)"

# 2. TP=N with sequence parallelism, 8 layers of the 8B shape
mrun s8b-tp1 1 10 $s8b --micro-batch-size 1 --global-batch-size 1
mrun s8b-tp$N $N 10 $s8b --micro-batch-size 1 --global-batch-size 1 \
    --tensor-model-parallel-size $N --sequence-parallel
export GRIDLM_PROFILE=1
mrun s8b-tp$N-prof $N 6 $s8b --micro-batch-size 1 --global-batch-size 1 \
    --tensor-model-parallel-size $N --sequence-parallel
unset GRIDLM_PROFILE
grep -iE "all_gather|reduce_scatter|all_reduce|comm|total" "$out/s8b-tp$N-prof.log" | head -10

# 3. the watchdog: rank 1 stopped (SIGSTOP) after iteration 4 (4 layers
# of the 1.5B shape, DP=N)
cp="$llama --num-layers 4 --hidden-size 2048 --num-attention-heads 32 --num-query-groups 8 --ffn-hidden-size 8192 --vocab-size 32000 --rotary-base 500000 --micro-batch-size 1"
(timeout 120 mpiexec -n $N $bin --device cuda --bf16 $cp --seq-length 4096 $opt --train-iters 1000 \
    --global-batch-size $N --distributed-timeout-minutes 0.5 > "$out/watchdog.log" 2>&1; echo $? > "$out/watchdog.rc") &
i=0; while [ $i -lt 60 ] && ! grep -q "iteration *4/\|iteration 4 " "$out/watchdog.log" 2>/dev/null; do sleep 1; i=$((i + 1)); done
for p in $(pgrep -f "$bin --device cuda"); do
    if tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qE '^(PMI_RANK|MPI_LOCALRANKID)=1$'; then
        kill -STOP $p; echo "stopped rank 1 (pid $p) at $(date +%T)"; break
    fi
done
wait
echo "watchdog run: exit $(cat "$out/watchdog.rc") $(el)"
grep -iE "error|timeout|watchdog|not arrived|stopped" "$out/watchdog.log" | head -6
pkill -CONT -f "$bin --device cuda" 2>/dev/null; pkill -KILL -f "$bin --device cuda" 2>/dev/null
cd "$out" && tar czf "$OUTD/logs.tgz" *
