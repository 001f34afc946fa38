# mpi-fold.sh: fold the TAP of several MPI runs into one stream (sourced
# by t/comm.t, t/boot.t and others; the stream's own results and its plan
# come from t/tap.sh, sourced here).
#
#   mpi_fold LABEL COMMAND...   run COMMAND; copy its results renumbered
#                               and labelled "LABEL: ", its other output as
#                               comments, then one result for its exit
#                               status (a run that dies fails)
. "$(dirname "$0")/tap.sh"
mpi_fold() {
    mpi_fold_label=$1; shift
    mpi_fold_out=$(mktemp "${TMPDIR:-/tmp}/gridlm-fold.XXXXXX")
    "$@" >"$mpi_fold_out" 2>&1
    mpi_fold_rc=$?
    # The awk leaves "RESULTS FAILED" (the count so far, and 1 when a
    # folded result failed) in $mpi_fold_out.n.
    ${AWK:-awk} -v label="$mpi_fold_label" -v n="$tap_n" -v count="$mpi_fold_out.n" '
        /^(not )?ok( |$)/ {
            n++
            st = ($0 ~ /^not ok/) ? "not ok" : "ok"
            if (st == "not ok") failed = 1
            rest = $0
            sub(/^(not )?ok *[0-9]* */, "", rest)
            if (rest ~ /^#/) print st " " n " " label " " rest
            else { sub(/^- */, "", rest); print st " " n " " label ": " rest }
            next
        }
        /^1\.\./ { next }
        /^#/ { print; next }
        { print "# " $0 }
        END { print n, failed + 0 > count }' "$mpi_fold_out"
    read -r tap_n mpi_fold_failed <"$mpi_fold_out.n"
    test "$mpi_fold_failed" -eq 0 || tap_failed=1
    rm -f "$mpi_fold_out" "$mpi_fold_out.n"
    if test "$mpi_fold_rc" -eq 0; then
        tap_result 0 "$mpi_fold_label: exit status 0"
    else
        tap_result 1 "$mpi_fold_label: exit status $mpi_fold_rc"
    fi
}
