#!/bin/sh
# Device calls 4 and 5 of session 11 (2026-11-25) ran this file, twice
# edited; both commands are below as they ran.  Call 4: is a kernel
# profiler on the device machine (yes: /usr/local/cuda/bin/ncu), and the
# first two quantization launches' sections (ncu.txt).  Call 5: the first
# four launches, full set, clocks not locked (call5/ncu-full.txt.gz).
set -u
cd "$(dirname "$0")"
OUTD=$1
. .gpukit/env.sh
# call 4
/usr/local/cuda/bin/ncu --target-processes all --kernel-name regex:quantize_tile --launch-count 2 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
    mpiexec -n 1 ./gridlm-bench fp8 --device cuda --shapes 8192 --iters 1 --warmup 0 --check 0 \
    > "$OUTD/ncu.txt" 2>&1
# call 5
/usr/local/cuda/bin/ncu --target-processes all --kernel-name regex:quantize_tile \
    --launch-count 4 --clock-control none --set full \
    mpiexec -n 1 ./gridlm-bench fp8 --device cuda --shapes 8192 --iters 1 --warmup 0 --check 0 \
    > "$OUTD/ncu-full.txt" 2>&1
