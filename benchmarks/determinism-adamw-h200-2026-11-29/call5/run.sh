#!/bin/sh
# Device call 5 of session 14 (2026-11-29): why AdamW's 1.8 ms a step
# (kernel time, call 2) did not show in the 8-expert shape's step time.
# The GPU's SM clock and power every 100 ms through a bf16 run of issue
# 13's 8-expert shape (do the slow iterations 14-15 line up with a clock
# drop?); then, where Nsight Systems is installed, the same run under
# nsys: how long the host spends launching and how long it waits on the
# GPU (cuda_api_sum), beside the kernels' own time (cuda_gpu_kern_sum).
#   run.sh OUT   (from the staging folder: src/tools/gridlm-train;
#                 gpu-lib.sh; .gpukit)
set -u
cd "$(dirname "$0")"
OUTD=$1
out=$OUTD/logs; mkdir -p "$out"
. .gpukit/env.sh
. ./gpu-lib.sh
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader
new=src/tools/gridlm-train
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu \
    --format=csv,noheader -lms 100 > "$out/clocks.csv" 2>&1 &
smi=$!
run $new moeA 24 1 $moeA
kill $smi
awk -F', ' '{printf "%s %d W\n", $2, int($4 / 50) * 50}' "$out/clocks.csv" | sort | uniq -c | sort -rn | head -12
grep -o '"elapsed_ms": [0-9.]*' "$out/moeA.jsonl" | cut -d' ' -f2 | awk '{printf "%.1f ", $1} END {print ""}'
nsys=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys /usr/local/cuda/nsight-systems*/bin/nsys 2>/dev/null | head -1)
echo "nsys: ${nsys:-none}"
if [ -n "$nsys" ]; then
    timeout 200 mpiexec -n 1 "$nsys" profile -t cuda,osrt --sample=none --cpuctxsw=none -o "$out/moeA-nsys" -f true \
        $new --device cuda --bf16 $moeA $opt --micro-batch-size 1 --global-batch-size 1 --train-iters 16 \
        --log-json "$out/moeA-nsys.jsonl" > "$out/moeA-nsys.log" 2>&1
    echo "nsys run: exit $? $(el)"
    timeout 150 "$nsys" stats --report cuda_api_sum --report osrt_sum --format csv -o "$out/stats" "$out/moeA-nsys.nsys-rep" > /dev/null 2>&1
    echo "nsys stats: exit $? $(el)"
    for f in "$out"/stats*.csv; do echo "== $f"; head -14 "$f" | cut -c1-160; done
    rm -f "$out"/*.sqlite
fi
cd "$out" && rm -f *.nsys-rep && tar czf "$OUTD/logs.tgz" *
