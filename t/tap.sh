# t/tap.sh: the Test Anything Protocol for the shell tests, as automake's
# tap-driver.sh reads it (sourced; POSIX sh).  The C tests have the same
# helpers in t/tap.h.
#
#   plan N              the plan "1..N", before the first result; or give
#                       none and let done_testing print it after the last
#   ok STATUS DESC      one result: "ok N - DESC" when STATUS is 0 (a
#                       command's exit status: `grep -q x f; ok $? "..."`),
#                       else "not ok N - DESC"
#   pass DESC           "ok N - DESC"
#   fail DESC           "not ok N - DESC"
#   skip DESC REASON    a skipped result: "ok N - DESC # SKIP REASON", or
#                       "ok N # SKIP REASON" when DESC is empty
#   skip_all REASON     "1..0 # SKIP REASON" and exit 0: nothing to test
#                       here (before any result)
#   diag                standard input as TAP comments: "# " before each
#                       line
#   bail_out REASON     "Bail out! REASON" and exit 1: the rest cannot run
#   done_testing        the plan, unless plan gave it, and exit: 0 when no
#                       result failed, 1 otherwise
#   tap_result STATUS TEXT
#                       the next result with TEXT as it is after its number
#                       ("ok N TEXT"): for results that carry a label of
#                       their own, as t/mpi-fold.sh's folded ones do
#
# $tap_n is the number of results so far and $tap_failed 1 once one
# failed.  Sourcing this file again (a t/*-lib.sh that sources it too)
# keeps the count.
: "${tap_n:=0}" "${tap_failed:=0}" "${tap_planned:=0}"

plan() {
    echo "1..$1"
    tap_planned=1
}

tap_result() {
    tap_n=$((tap_n + 1))
    if [ "$1" -eq 0 ]; then
        echo "ok $tap_n $2"
    else
        echo "not ok $tap_n $2"
        tap_failed=1
    fi
}

ok() { tap_result "$1" "- $2"; }
pass() { tap_result 0 "- $1"; }
fail() { tap_result 1 "- $1"; }

skip() {
    if [ -n "$1" ]; then
        tap_result 0 "- $1 # SKIP $2"
    else
        tap_result 0 "# SKIP $2"
    fi
}

skip_all() {
    echo "1..0 # SKIP $1"
    exit 0
}

diag() { sed 's/^/# /'; }

bail_out() {
    echo "Bail out! $1"
    exit 1
}

done_testing() {
    [ "$tap_planned" = 1 ] || echo "1..$tap_n"
    exit "$tap_failed"
}
