#!/bin/sh
# Call B on 2 linked H200s (issue 19, runs 1, 4, 5): FP8 at 1 and 2 GPUs,
# the 8B shape with TP 2 + SP and with DP 2 beside the peer (FSDP2), and
# the watchdog naming a stopped rank over NCCL.
set -u
cd "$(dirname "$0")"
out=$1
. .gpukit/env.sh
. ./common.sh
fp8="--fp8-format hybrid --fp8-recipe delayed --fp8-amax-history-len 1024 --fp8-amax-compute-algo max"
run 1 fp8-1 $shape15 $opt $fp8 --micro-batch-size 2 --global-batch-size 2 --train-iters 14 --log-interval 1
run 2 fp8-2op $shape15 $opt $fp8 --micro-batch-size 2 --global-batch-size 4 --use-distributed-optimizer \
    --overlap-grad-reduce --overlap-param-gather --train-iters 14 --log-interval 1
run 2 8b-tp2sp $shape8b $opt --micro-batch-size 1 --global-batch-size 8 --tensor-model-parallel-size 2 \
    --sequence-parallel --train-iters 8 --log-interval 1
run 2 8b-dp2 $shape8b $opt --micro-batch-size 1 --global-batch-size 2 --use-distributed-optimizer \
    --overlap-grad-reduce --overlap-param-gather --train-iters 8 --log-interval 1
peer 2 --fsdp --dim 4096 --layers 32 --heads 32 --kv-heads 8 --ffn 14336 --mbs 1 --steps 6 --warmup 3
# Watchdog: a small model on 2 GPUs, rank 1 stopped (SIGSTOP) after
# iteration 5 is logged; --distributed-timeout-minutes 0.25 (15 s).
small="$llama --num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 512 --vocab-size 4096"
( timeout 120 mpiexec -n 2 src/tools/gridlm-train --device cuda --bf16 $small $opt \
    --micro-batch-size 2 --global-batch-size 4 --train-iters 100000 --log-interval 1 \
    --distributed-timeout-minutes 0.25 > "$out/watchdog.log" 2> "$out/watchdog.err"; echo "watchdog run: exit $?" > "$out/watchdog.rc" ) &
t0=$(date +%s)
while ! cat "$out/watchdog.log" "$out/watchdog.err" 2>/dev/null | grep -q "iteration *5/"; do sleep 0.5; [ $(( $(date +%s) - t0 )) -gt 90 ] && break; done
for p in $(pgrep -f "src/tools/gridlm-train"); do
    if tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx 'PMI_RANK=1'; then
        echo "stopping rank 1 (pid $p) at $(date +%T.%N)"; kill -STOP $p; stopped=$p
    fi
done
ts=$(date +%s.%N)
wait
echo "job ended $(awk -v a="$ts" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b - a}') s after the stop; $(cat "$out/watchdog.rc")"
grep -v "^ *$" "$out/watchdog.err" | tail -8
[ -n "${stopped:-}" ] && kill -KILL $stopped 2>/dev/null
grep -c iteration "$out/watchdog.log"
