#!/bin/sh
# t/bench-harness.t: the sweep harness (benchmarks/sweep.sh) on inputs
# whose answers are known by hand.
#
#  1. Summary stage: synthetic --log-json logs (t/bench-fixture-*.jsonl)
#     of the runs in t/bench-fixture.sweep become a CSV whose every value
#     is checked exactly: warm-up records dropped, mean and standard
#     deviation of iteration time, harmonic means of the rates, peak
#     memory, last loss, efficiency against the series' smallest run,
#     null values, runs that failed, wrote nothing or kept nothing.
#  2. The markdown table and the plot data of that CSV; the PNGs when
#     gnuplot is installed.
#  3. Run stage with a stand-in trainer (t/bench-fake-train.sh) and a
#     launcher that is just env(1): {n} and {nodes} substitution, the
#     order of defaults, --flags and the run's flags, a failing run
#     (exit 1, the others still summarised), --dry-run, usage errors.

. "$(dirname "$0")/tap.sh"
src=${top_srcdir:-..}
sweep=$src/benchmarks/sweep.sh
tmp=${TMPDIR:-/tmp}/bench-harness.$$
trap 'rm -rf "$tmp"' EXIT INT TERM
mkdir -p "$tmp"

# check DESCRIPTION GOT EXPECTED: one result, both texts shown when they differ
check() { if [ "$2" = "$3" ]; then pass "$1"; else fail "$1"; echo "# got:"; echo "$2" | sed 's/^/#   /'; echo "# expected:"; echo "$3" | sed 's/^/#   /'; fi; }

plan 22

# ---- 1. summary stage ------------------------------------------------------
out=$tmp/fixture
mkdir -p "$out/logs"
cp "$src/t/bench-fixture-a1.jsonl" "$out/logs/001-a_1gpu.jsonl"
cp "$src/t/bench-fixture-a2.jsonl" "$out/logs/002-a_2gpu.jsonl"
cp "$src/t/bench-fixture-a4.jsonl" "$out/logs/003-a_4gpu.jsonl"
cp "$src/t/bench-fixture-b2.jsonl" "$out/logs/004-b_2gpu.jsonl"
echo 0 >"$out/logs/004-b_2gpu.status"
# c/1gpu (005) has no log at all; d/1gpu (006) wrote records but failed.
cp "$src/t/bench-fixture-a1.jsonl" "$out/logs/006-d_1gpu.jsonl"
echo 1 >"$out/logs/006-d_1gpu.status"

"$sweep" --summarize-only --warmup 2 --out "$out" "$src/t/bench-fixture.sweep" \
    >"$tmp/sum.out" 2>"$tmp/sum.err"
check "summary of a sweep with a failed run exits 1" "$?" 1

# a/1gpu keeps iterations 3-6: elapsed 100 100 200 100 -> mean 125, sample
# std 50; tokens/s/GPU 1000 1000 500 1000 -> harmonic mean 4/(3/1000 +
# 1/500) = 800 (the warm-up's 200 and 333.5 and its 9 GiB are gone).
# a/2gpu: 720 constant -> efficiency 720/800 = 0.9; mfu null throughout.
# a/4gpu: 150 170 -> std sqrt(200) = 14.14213562; 600/800 = 0.75.
expected='name,series,gpus,status,records,iter_ms,iter_ms_std,tokens_per_sec_per_gpu,tokens_per_sec,tflops_per_gpu,mfu,mem_gib,loss,scaling_efficiency,flags
a/1gpu,a,1,ok,4,125,50,800,800,8,0.4,2.25,7.125,1,--device cpu --mock-data --micro-batch-size 2
a/2gpu,a,2,ok,3,140,0,720,1440,7.2,,3.5,7,0.9,"--device cpu --mock-data --data-path x,y"
a/4gpu,a,4,ok,2,160,14.14213562,600,2400,6,0.3,4.5,6.5,0.75,--device cpu --mock-data
b/2gpu,b,2,no-data,0,,,,,,,,,,--device cpu --mock-data --tensor-model-parallel-size 2
c/1gpu,c,1,missing,0,,,,,,,,,,--device cpu --mock-data
d/1gpu,d,1,failed,0,,,,,,,,,,--device cpu --mock-data --micro-batch-size 4'
check "results.csv: every value as computed by hand" "$(cat "$out/results.csv")" "$expected"

# The warm-up boundary: with --warmup 4, a/1gpu keeps iterations 5 and 6
# only: elapsed 200 100 -> mean 150, tokens/s/GPU 2/(1/500 + 1/1000).
"$sweep" --summarize-only --warmup 4 --no-plots --out "$out" "$src/t/bench-fixture.sweep" \
    >/dev/null 2>&1
check "--warmup 4 keeps iterations 5 and 6" \
    "$(awk -F, '$1 == "a/1gpu" { print $5, $6, $8 }' "$out/results.csv")" "2 150 666.6666667"
check "--warmup 4 leaves a/4gpu (iterations 1-4) no record" \
    "$(awk -F, '$1 == "a/4gpu" { print $4, $5 }' "$out/results.csv")" "no-data 0"
"$sweep" --summarize-only --warmup 0 --no-plots --out "$out" "$src/t/bench-fixture.sweep" \
    >/dev/null 2>&1
check "--warmup 0 keeps all 6 records and the warm-up's 9 GiB peak" \
    "$(awk -F, '$1 == "a/1gpu" { print $5, $12 }' "$out/results.csv")" "6 9"

# ---- 2. table and plots ----------------------------------------------------
"$sweep" --summarize-only --warmup 2 --out "$out" "$src/t/bench-fixture.sweep" >/dev/null 2>&1
check "table: header" "$(sed -n 1p "$out/results.md")" \
    "| Run | GPUs | Tokens/s/GPU | TFLOP/s/GPU | MFU | Memory/GPU (GiB) | Scaling eff. | Iteration (ms) | Records | Status |"
check "table: a/4gpu row" "$(grep '^| a/4gpu ' "$out/results.md")" \
    "| a/4gpu | 4 | 600 | 6 | 30.0% | 4.5 | 75.0% | 160.0 ± 14.1 | 2 | ok |"
check "table: null MFU shows as -" "$(grep '^| a/2gpu ' "$out/results.md")" \
    "| a/2gpu | 2 | 720 | 7.2 | - | 3.5 | 90.0% | 140.0 ± 0.0 | 3 | ok |"
check "table: a run without records" "$(grep '^| b/2gpu ' "$out/results.md")" \
    "| b/2gpu | 2 | - | - | - | - | - | - | 0 | no-data |"
check "table: one row per run" "$(grep -c '^| [a-d]/' "$out/results.md")" 6
check "plot data: series a sorted by GPUs, only successful runs" "$(cat "$out/plot.dat")" \
'# series a
1 800 800 1 8
2 720 1440 0.9 7.2
4 600 2400 0.75 6'
check "plot titles" "$(cat "$out/plot.titles")" "a"
if command -v gnuplot >/dev/null 2>&1; then
    png() { [ "$(od -An -c -N4 "$1" 2>/dev/null | tr -d ' ')" = '211PNG' ]; }
    if png "$out/throughput.png" && png "$out/efficiency.png"; then
        pass "gnuplot wrote throughput.png and efficiency.png"
    else
        fail "gnuplot wrote throughput.png and efficiency.png"; diag <"$out/plot.log"
    fi
else
    skip "" "gnuplot not installed"
fi

# ---- 3. run stage ------------------------------------------------------------
cat >"$tmp/run.sweep" <<'EOF'
defaults - --model tiny
s/1 1 --micro-batch-size 1
s/2 2
s/4 4 --global-batch-size 8
boom/1 1 --fake-exit 3
EOF
fake=$src/t/bench-fake-train.sh
out=$tmp/run
"$sweep" --launcher 'env FAKE_RANKS={n} FAKE_NODES={nodes}' --gpus-per-node 2 \
    --train "$fake" --flags '--device cpu' --warmup 1 --out "$out" "$tmp/run.sweep" \
    >"$tmp/run.out" 2>"$tmp/run.err"
check "a sweep with a failing run exits 1" "$?" 1
check "the command line of a run: launcher, defaults, --flags, own flags, --log-json" \
    "$(cat "$out/logs/003-s_4.cmd")" \
    "env FAKE_RANKS=4 FAKE_NODES=2 $fake --model tiny --device cpu --global-batch-size 8 --log-json $out/logs/003-s_4.jsonl"
# The stand-in reports 1200 - 100 x ranks tokens/s/GPU after warm-up.
check "run stage: throughput and efficiency of each run" \
    "$(awk -F, 'NR > 1 { print $1, $3, $4, $5, $8, $14 }' "$out/results.csv")" \
"s/1 1 ok 3 1100 1
s/2 2 ok 3 1000 0.9090909091
s/4 4 ok 3 800 0.7272727273
boom/1 1 failed 0  "
check "the failing run is named on stderr with its exit status" \
    "$(grep -c 'boom/1 failed (exit 3)' "$tmp/run.err")" 1

"$sweep" --dry-run --launcher 'mpiexec -n {n}' --train /bin/false --out "$tmp/dry" \
    "$tmp/run.sweep" >"$tmp/dry.out" 2>&1
check "--dry-run prints one command per run and runs nothing" \
    "$(wc -l <"$tmp/dry.out" | tr -d ' '):$(ls "$tmp/dry/logs" | wc -l | tr -d ' ')" "4:0"

# usage errors: exit 2 and one line naming the problem
usage() {
    what=$1; needle=$2; shift 2
    "$sweep" "$@" >"$tmp/u.out" 2>"$tmp/u.err"
    code=$?
    if [ $code -eq 2 ] && [ "$(wc -l <"$tmp/u.err")" -eq 1 ] && grep -q -- "$needle" "$tmp/u.err"; then
        pass "$what"
    else
        fail "$what (exit $code)"; diag <"$tmp/u.err"
    fi
}
printf 'x/1 two --lr 1\n' >"$tmp/bad1.sweep"
usage "a GPU count that is not a number names file, line and value" \
    "bad1.sweep:1: GPU count 'two' of 'x/1'" --train "$fake" --out "$tmp/u1" "$tmp/bad1.sweep"
printf 'x/1 1\nx/1 2\n' >"$tmp/bad2.sweep"
usage "a run name used twice" "'x/1' is used twice" --train "$fake" --out "$tmp/u2" "$tmp/bad2.sweep"
usage "a launcher without {n}" "has no {n}" --launcher srun --train "$fake" --out "$tmp/u3" \
    "$tmp/run.sweep"
usage "--summarize-only without --out" "needs --out" --summarize-only "$tmp/run.sweep"

done_testing
