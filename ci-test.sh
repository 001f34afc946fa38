#!/bin/sh
# ci-test.sh: gridlm's whole test matrix, exactly as CI runs it
# (.ci/run calls this script after installing the packages).
#
#   1. $GL_BUILD (build/): Open MPI (mpicc), CUDA when nvcc is found;
#      make check.  Under Slurm the tests take the PMIx bootstrap path.
#   2. $GL_BUILD_MPICH (build-mpich/): MPICH (mpicc.mpich), no CUDA;
#      make check.  Under Slurm the tests take the MPI fallback path.
#   3. make distcheck from build 1, CPU only: the release tarball
#      builds, passes its tests, installs and uninstalls cleanly.
#
# A build directory that is already configured is reused as it is.
# Each step runs even when an earlier one failed; at the end the test
# summaries are printed, then the logs of failed tests, and the exit
# status is non-zero if anything failed.
#
# Environment: GL_BUILD, GL_BUILD_MPICH (directories, relative to the
# source tree or absolute), GL_JOBS (make -j, default: the CPU count),
# GL_SKIP_MPICH=1, GL_SKIP_DISTCHECK=1.

set -u
cd "$(dirname "$0")" || exit 1
src=$(pwd)
GL_BUILD=${GL_BUILD:-build}
GL_BUILD_MPICH=${GL_BUILD_MPICH:-build-mpich}
GL_JOBS=${GL_JOBS:-$(nproc 2>/dev/null || echo 2)}
failed=""
t0=$(date +%s)

say() { printf '\n=== %s [%ds]\n' "$*" $(($(date +%s) - t0)); }
fail() { failed="$failed $1"; echo "ci-test: FAILED: $1"; }

if [ ! -x configure ]; then
    say "./autogen.sh"
    ./autogen.sh || { echo "ci-test: ./autogen.sh failed"; exit 1; }
fi

# build DIR NAME CONFIGURE-ARGS...: configure (unless done), make, make check.
build() {
    dir=$1 name=$2; shift 2
    mkdir -p "$dir" || { fail "$name: mkdir $dir"; return; }
    if [ ! -f "$dir/config.status" ]; then
        say "$name: configure $*"
        (cd "$dir" && "$src/configure" "$@") || {
            fail "$name: configure"; tail -n 40 "$dir/config.log"; return; }
    else
        say "$name: reusing $dir ($(sed -n 's/^ *\$ \(.*configure.*\)$/\1/p' "$dir/config.log" | head -n 1))"
    fi
    say "$name: make"
    make -C "$dir" -j"$GL_JOBS" || { fail "$name: make"; return; }
    say "$name: make check"
    make -C "$dir" -j"$GL_JOBS" check || fail "$name: make check"
}

# summary DIR NAME: the totals of the last make check in DIR.
summary() {
    if [ -f "$1/test-suite.log" ]; then
        printf '%-28s' "$2:"
        sed -n 's/^# \([A-Z]*\): *\([0-9]*\)$/\1 \2/p' "$1/test-suite.log" | tr '\n' ' '
        echo
    else
        printf '%-28s%s\n' "$2:" "no test results"
    fi
}

# failed_logs DIR: print the log of each test that failed under DIR.
failed_logs() {
    [ -d "$1" ] || return 0
    find "$1" -name '*.trs' | sort | while read -r trs; do
        if grep -q '^:global-test-result: \(FAIL\|ERROR\|XPASS\)' "$trs"; then
            log=${trs%.trs}.log
            echo
            echo "=== FAILED TEST LOG: $log"
            cat "$log"
        fi
    done
}

build "$GL_BUILD" "openmpi ($GL_BUILD)"
if [ "${GL_SKIP_MPICH:-0}" != 1 ]; then
    build "$GL_BUILD_MPICH" "mpich ($GL_BUILD_MPICH)" MPICC=mpicc.mpich --disable-cuda
fi
if [ "${GL_SKIP_DISTCHECK:-0}" != 1 ] && [ -f "$GL_BUILD/Makefile" ]; then
    say "make distcheck (CPU only)"
    make -C "$GL_BUILD" -j"$GL_JOBS" distcheck DISTCHECK_CONFIGURE_FLAGS=--disable-cuda ||
        fail "make distcheck"
fi

# total KEY...: the sum of those counts over every build's test-suite.log
total() {
    for key in "$@"; do
        for log in "$GL_BUILD/test-suite.log" "$GL_BUILD_MPICH/test-suite.log"; do
            [ -f "$log" ] && sed -n "s/^# $key: *\([0-9]*\)$/\1/p" "$log"
        done
    done | awk '{ n += $1 } END { print n + 0 }'
}

say "test summaries"
summary "$GL_BUILD" "openmpi ($GL_BUILD)"
[ "${GL_SKIP_MPICH:-0}" = 1 ] || summary "$GL_BUILD_MPICH" "mpich ($GL_BUILD_MPICH)"
# One closing line over both builds, in the form CI systems read.
echo "ci-test: $(total PASS XFAIL) passed, $(total FAIL ERROR XPASS) failed, $(total SKIP) skipped"
if [ -z "$failed" ]; then
    echo "ci-test: all passed in $(($(date +%s) - t0)) s"
    exit 0
fi
failed_logs "$GL_BUILD"
failed_logs "$GL_BUILD_MPICH"
echo
echo "ci-test: failed:$failed (after $(($(date +%s) - t0)) s)"
exit 1
