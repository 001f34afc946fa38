#!/bin/sh
# t/bench-fake-train.sh: a stand-in for gridlm-train in t/bench-harness.t.
# It reads --log-json FILE and --fake-exit CODE, ignores every other flag
# (each of which takes a value), and writes four records whose
# tokens/s/GPU is 1200 - 100 x $FAKE_RANKS after the first, so the test
# knows what the harness must compute.  With --fake-exit it writes the
# records and then exits with CODE, as a run that fails late would.
log= code=0
while [ $# -gt 0 ]; do
    case $1 in
    --log-json) log=$2; shift 2 ;;
    --fake-exit) code=$2; shift 2 ;;
    --*) shift 2 ;;
    *) echo "bench-fake-train: unexpected argument '$1'" >&2; exit 2 ;;
    esac
done
[ -n "$log" ] || { echo "bench-fake-train: no --log-json" >&2; exit 2; }
tpg=$((1200 - 100 * ${FAKE_RANKS:?the launcher must set FAKE_RANKS}))
: >"$log"
for it in 1 2 3 4; do
    rate=$tpg
    [ $it -gt 1 ] || rate=10
    echo "{\"iteration\": $it, \"elapsed_ms\": 100, \"tokens_per_sec_per_gpu\": $rate, \"tflops_per_gpu\": 1, \"mfu\": null, \"mem_gib\": 1, \"loss\": 5}" >>"$log"
done
exit "$code"
