#!/bin/sh
# Device call 1 of session 14 (2026-11-29): benchmarks/membound-probe.cu
# (the first version: AdamW variants without the minimum-blocks ones)
# built with  nvcc -O3 -arch=sm_90a -o membound-probe benchmarks/membound-probe.cu -lcublas
cd "$(dirname "$0")"
nvidia-smi --query-gpu=name,driver_version,clocks.max.mem --format=csv,noheader
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
timeout 200 ./membound-probe 2.8e9 2>&1 | tee "$1/probe.txt"
