#!/bin/sh
# ci-test.sh: gridlm's whole test matrix, exactly as CI runs it
# (.ci/run calls this script after installing the packages).
#
#   1. $GL_BUILD (build/): Open MPI (mpicc), CUDA when nvcc is found;
#      make check.  Under Slurm the tests take the PMIx bootstrap path.
#   2. $GL_BUILD_MPICH (build-mpich/): MPICH (mpicc.mpich), no CUDA;
#      make check.  Under Slurm the tests take the MPI fallback path.
#      Skipped, and counted as skipped, where MPICH is not installed
#      (./quickstart.sh installs it: the "test" tier of debian-packages.txt).
#   3. make distcheck from build 1, CPU only: the release tarball
#      builds, passes its tests, installs and uninstalls cleanly.  Its
#      make check leaves out the long multi-rank training tests (heavy
#      below), which steps 1 and 2 run on the same sources: the tarball's
#      build compiles every test program all the same
#      (GL_DISTCHECK_ALL=1: every test).
#
# A build directory that is already configured is reused as it is.
# Each step runs even when an earlier one failed; at the end the test
# summaries are printed, then the logs of failed tests (once each), and
# the exit status is non-zero if anything failed.  The closing line
# "ci-test: N passed, N failed, N skipped" counts the tests of every step,
# distcheck's included, and counts a step that could not run its tests (a
# configure or make that failed) as one failure, a step skipped as one skip.
#
# Environment: GL_BUILD, GL_BUILD_MPICH (directories, relative to the
# source tree or absolute), GL_JOBS (make -j, default: the CPU count),
# GL_SKIP_MPICH=1, GL_SKIP_DISTCHECK=1, GL_DISTCHECK_ALL=1.

set -u
cd "$(dirname "$0")" || exit 1
src=$(pwd)
GL_BUILD=${GL_BUILD:-build}
GL_BUILD_MPICH=${GL_BUILD_MPICH:-build-mpich}
GL_JOBS=${GL_JOBS:-$(nproc 2>/dev/null || echo 2)}
failed=""
step_failed=0 step_skipped=0
t0=$(date +%s)
# Only this run's outputs are counted.
rm -f "$GL_BUILD/ci-check.out" "$GL_BUILD_MPICH/ci-check.out" "$GL_BUILD/ci-distcheck.out"

say() { printf '\n=== %s [%ds]\n' "$*" $(($(date +%s) - t0)); }
fail() { failed="$failed $1"; echo "ci-test: FAILED: $1"; }
# broken NAME: a step failed before any test of it ran: it counts as one.
broken() { fail "$1"; step_failed=$((step_failed + 1)); }
# check_failed OUT NAME: a make check (or distcheck) failed; where no test
# failed in it (a test program that did not build, say), the step counts.
check_failed() {
    fail "$2"
    [ "$(total_in "$1" FAIL ERROR XPASS)" -gt 0 ] || step_failed=$((step_failed + 1))
}

if [ ! -x configure ]; then
    say "./autogen.sh"
    ./autogen.sh || { echo "ci-test: ./autogen.sh failed"; exit 1; }
fi

# build DIR NAME CONFIGURE-ARGS...: configure (unless done), make, make
# check; the check's output is kept in DIR/ci-check.out for the counts.
build() {
    dir=$1 name=$2; shift 2
    mkdir -p "$dir" || { broken "$name: mkdir $dir"; return; }
    if [ ! -f "$dir/config.status" ]; then
        say "$name: configure $*"
        (cd "$dir" && "$src/configure" "$@") || {
            broken "$name: configure"; tail -n 40 "$dir/config.log"; return; }
    else
        say "$name: reusing $dir ($(sed -n 's/^ *\$ \(.*configure.*\)$/\1/p' "$dir/config.log" | head -n 1))"
    fi
    say "$name: make"
    make -C "$dir" -j"$GL_JOBS" || { broken "$name: make"; return; }
    say "$name: make check"
    checked "$dir/ci-check.out" make -C "$dir" -j"$GL_JOBS" check ||
        check_failed "$dir/ci-check.out" "$name: make check"
}

# checked FILE COMMAND...: run COMMAND, its output both shown and kept in
# FILE; the status is COMMAND's.
checked() {
    out=$1; shift
    rm -f "$out.status"
    { "$@" 2>&1; echo $? >"$out.status"; } | tee "$out"
    return "$(cat "$out.status")"
}

# summary FILE NAME: the totals of the test-suite summaries in FILE (the
# kept output of a make check or distcheck).
summary() {
    if [ -f "$1" ] && grep -q '^# TOTAL:' "$1"; then
        printf '%-28s' "$2:"
        counts "$1" | tr '\n' ' '
        echo
    else
        printf '%-28s%s\n' "$2:" "no test results"
    fi
}

# counts FILE: "KEY N" for each key of automake's summaries in FILE,
# summed over the summaries it holds.
counts() {
    sed -n 's/^# \([A-Z]*\): *\([0-9]*\)$/\1 \2/p' "$1" |
        awk '{ n[$1] += $2; if (!($1 in seen)) { seen[$1] = 1; order[++k] = $1 } }
             END { for (i = 1; i <= k; i++) print order[i], n[order[i]] }'
}

# total_in FILE KEY...: the sum of those counts in one kept output
# (defined before the steps run: check_failed uses it).
total_in() {
    f=$1; shift
    { [ -f "$f" ] && counts "$f"; } |
        awk -v keys=" $* " 'index(keys, " " $1 " ") { n += $2 } END { print n + 0 }'
}
# failed_logs LABEL: print the log of each failed test among the .trs
# files named on stdin.
failed_logs() {
    sort | while read -r trs; do
        if grep -q '^:global-test-result: \(FAIL\|ERROR\|XPASS\)' "$trs"; then
            echo
            echo "=== FAILED TEST LOG$1: ${trs%.trs}.log"
            cat "${trs%.trs}.log"
        fi
    done
}

# trs_files DIR: the test results under DIR, leaving out distcheck's tree.
trs_files() {
    [ -d "$1" ] && find "$1" -path "$1/gridlm-*" -prune -o -name '*.trs' -print
}

build "$GL_BUILD" "openmpi ($GL_BUILD)"
if [ "${GL_SKIP_MPICH:-0}" = 1 ]; then
    say "mpich: skipped (GL_SKIP_MPICH=1)"; step_skipped=$((step_skipped + 1))
elif ! command -v mpicc.mpich >/dev/null 2>&1; then
    say "mpich ($GL_BUILD_MPICH): skipped: mpicc.mpich not found (install the \"test\" tier of debian-packages.txt: ./quickstart.sh does)"
    step_skipped=$((step_skipped + 1))
else
    build "$GL_BUILD_MPICH" "mpich ($GL_BUILD_MPICH)" MPICC=mpicc.mpich --disable-cuda
fi
distcheck_out=$GL_BUILD/ci-distcheck.out
if [ "${GL_SKIP_DISTCHECK:-0}" = 1 ]; then
    say "make distcheck: skipped (GL_SKIP_DISTCHECK=1)"; step_skipped=$((step_skipped + 1))
elif [ -f "$GL_BUILD/Makefile" ]; then
    # the long multi-rank training tests, left to steps 1 and 2
    heavy="t/train-equiv.t t/train-gpt.t t/eval-hf.t t/train-ckpt.t t/train-cp.t"
    heavy="$heavy t/train-recompute.t t/train-norm.t t/train-moe.t t/train-ep.t"
    heavy="$heavy t/train-fp8.t t/train-moe-fp8.t t/comm.t"
    dtests=""
    if [ "${GL_DISTCHECK_ALL:-0}" != 1 ]; then
        for t in $(make -s -C "$GL_BUILD" print-tests); do
            case "$t" in t/*.t) ;; *) continue ;; esac     # make's own lines
            case " $heavy " in *" $t "*) ;; *) dtests="$dtests $t" ;; esac
        done
    fi
    say "make distcheck (CPU only${dtests:+; without the long training tests})"
    checked "$distcheck_out" make -C "$GL_BUILD" -j"$GL_JOBS" distcheck \
        DISTCHECK_CONFIGURE_FLAGS=--disable-cuda ${dtests:+"TESTS=$dtests"} ||
        check_failed "$distcheck_out" "make distcheck"
fi

# total KEY...: the same over every step's kept output.
total() {
    n=0
    for out in "$GL_BUILD/ci-check.out" "$GL_BUILD_MPICH/ci-check.out" "$distcheck_out"; do
        n=$((n + $(total_in "$out" "$@")))
    done
    echo $n
}

say "test summaries"
summary "$GL_BUILD/ci-check.out" "openmpi ($GL_BUILD)"
[ -f "$GL_BUILD_MPICH/ci-check.out" ] && summary "$GL_BUILD_MPICH/ci-check.out" "mpich ($GL_BUILD_MPICH)"
[ -f "$distcheck_out" ] && summary "$distcheck_out" "distcheck"
# One closing line over every step, in the form CI systems read.
echo "ci-test: $(total PASS XFAIL) passed, $(($(total FAIL ERROR XPASS) + step_failed)) failed, $(($(total SKIP) + step_skipped)) skipped"
if [ -z "$failed" ]; then
    echo "ci-test: all passed in $(($(date +%s) - t0)) s"
    exit 0
fi
trs_files "$GL_BUILD" | failed_logs ""
trs_files "$GL_BUILD_MPICH" | failed_logs ""
# distcheck's own tree, where it failed and was left behind
[ -d "$GL_BUILD" ] && find "$GL_BUILD" -path "$GL_BUILD/gridlm-*/_build/*" -name '*.trs' |
    failed_logs " (distcheck)"
echo
echo "ci-test: failed:$failed (after $(($(date +%s) - t0)) s)"
exit 1
