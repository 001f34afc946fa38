#!/bin/sh
# t/bench-sweep-cpu.t: the sweep harness end to end with the real
# gridlm-train: benchmarks/cpu-tiny.sweep on 1, 2 and 4 CPU ranks (at most
# 2 under MPICH, which busy-polls), launched by $MPIEXEC.  Checks that
# every run trained, that the warm-up was dropped (8 iterations, 3 of
# warm-up: 5 records kept), that rates and efficiencies are consistent,
# and that data-parallel and tensor-parallel runs of one model report the
# same loss as the single rank (layout never changes the math).

. "$(dirname "$0")/tap.sh"
src=${top_srcdir:-..}
train=./src/tools/gridlm-train
[ -x "$train" ] || skip_all "$train not built"
tmp=${TMPDIR:-/tmp}/bench-sweep-cpu.$$
trap 'rm -rf "$tmp"' EXIT INT TERM
mkdir -p "$tmp"

sweep=$src/benchmarks/cpu-tiny.sweep
if [ "$GL_MPI_FLAVOR" = mpich ]; then
    awk '$2 == "-" || $2 <= 2 || /^#/' "$sweep" >"$tmp/sweep"
    sweep=$tmp/sweep
fi
runs=$(awk '!/^#/ && NF >= 2 && $1 != "defaults"' "$sweep" | wc -l | tr -d ' ')

plan 6
"$src/benchmarks/sweep.sh" --launcher "$MPIEXEC $MPIEXEC_FLAGS -n {n}" --train "$train" \
    --warmup 3 --time-limit 300 --out "$tmp/out" "$sweep" >"$tmp/log" 2>&1
code=$?
if [ $code -eq 0 ]; then pass "the sweep ran ($runs runs)"; else
    fail "the sweep ran (exit $code)"; diag <"$tmp/log"
    for f in "$tmp"/out/logs/*.out; do [ -f "$f" ] && tail -n 5 "$f" | sed "s|^|# $(basename "$f"): |"; done
fi
csv=$tmp/out/results.csv

# check DESCRIPTION AWK-PROGRAM: one result, the awk program's verdict on the CSV
check() { if awk -F, "$2" "$csv"; then pass "$1"; else fail "$1"; diag <"$csv"; fi; }
check "every run ok with 5 records after 3 warm-up iterations" \
    "NR > 1 { rows++; if (\$4 != \"ok\" || \$5 != 5) bad = 1 } END { exit !(rows == $runs && !bad) }"
check "positive rates; tokens/s = tokens/s/GPU x GPUs" \
    'NR > 1 { if (!($8 > 0) || !($10 > 0) || !($6 > 0)) bad = 1
              r = $9 / ($8 * $3); if (r < 0.999999 || r > 1.000001) bad = 1 } END { exit bad }'
check "efficiency: 1 for the one-rank run of each series, tokens/s/GPU ratio otherwise" \
    'NR > 1 { if ($3 == 1) { base[$2] = $8; if ($14 != 1) bad = 1 }
              else { r = $14 * base[$2] / $8; if (r < 0.999999 || r > 1.000001) bad = 1 } } END { exit bad }'
check "TP=2 trains the same model as one rank: same last loss (1e-4)" \
    'NR > 1 && $2 == "tiny-tp" { l[$3] = $13 } END { d = l[1] - l[2]; exit !(l[1] != "" && d < 1e-4 && d > -1e-4) }'
if [ -s "$tmp/out/results.md" ] && [ "$(grep -c '^| tiny-' "$tmp/out/results.md")" -eq "$runs" ]; then
    pass "results.md has a row per run"
else
    fail "results.md has a row per run"
fi
done_testing
