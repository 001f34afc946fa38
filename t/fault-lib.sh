# fault-lib.sh: helpers for the t/fault-*.t scripts (sourced after
# t/env.sh).  Results are numbered through t/tap.sh's counter, in
# t/mpi-fold.sh's style ("ok N LABEL", no dash); done_testing ends.
#
#   fault_run LABEL CMD...   run CMD (a program: bounded by timeout 120; a
#                            shell function bounds itself), keep its
#                            stdout in $fault_out, stderr in $fault_err,
#                            exit status in $fault_rc, seconds in
#                            $fault_secs; fold its TAP (a run that does not
#                            exit 0 fails)
#   fault_show               copy the last run's output as TAP comments
#   fault_ok DESC CMD...     one result: ok when CMD succeeds
. "$(dirname "$0")/mpi-fold.sh"
fault_dir=$(mktemp -d "${TMPDIR:-/tmp}/gridlm-fault.XXXXXX")
trap 'rm -rf "$fault_dir"' EXIT
fault_out=$fault_dir/out
fault_err=$fault_dir/err

fault_exec() {
    fault_t0=$(date +%s.%N)
    case $(type "$1" 2>/dev/null) in
    *function*) "$@" >"$fault_out" 2>"$fault_err" ;;
    *)          timeout 120 "$@" >"$fault_out" 2>"$fault_err" ;;
    esac
    fault_rc=$?
    fault_secs=$(awk -v a="$fault_t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
}
fault_replay() {
    cat "$fault_out" "$fault_err"
    return $fault_rc
}
fault_run() {
    fault_label=$1; shift
    fault_exec "$@"
    mpi_fold "$fault_label" fault_replay
}
fault_show() {
    cat "$fault_out" "$fault_err" | diag
}
fault_ok() {
    fault_desc=$1; shift
    "$@"
    tap_result $? "$fault_desc"
}
# Ranks to use: MPICH busy-polls, so at most 2 on this machine.
case $GL_MPI_FLAVOR in
openmpi) fault_n=4 ;;
*)       fault_n=2 ;;
esac
