# mpi-fold.sh: fold the TAP of several MPI runs into one stream (sourced
# by t/comm.t and t/boot.t).
#
#   mpi_fold LABEL COMMAND...   run COMMAND; copy its results renumbered
#                               and labelled "LABEL: ", its other output as
#                               comments, then one result for its exit
#                               status (a run that dies fails)
#   mpi_fold_done               print the plan and exit
mpi_fold_n=0
mpi_fold() {
    mpi_fold_label=$1; shift
    mpi_fold_out=$(mktemp "${TMPDIR:-/tmp}/gridlm-fold.XXXXXX")
    "$@" >"$mpi_fold_out" 2>&1
    mpi_fold_rc=$?
    ${AWK:-awk} -v label="$mpi_fold_label" -v n="$mpi_fold_n" -v count="$mpi_fold_out.n" '
        /^(not )?ok( |$)/ {
            n++
            st = ($0 ~ /^not ok/) ? "not ok" : "ok"
            rest = $0
            sub(/^(not )?ok *[0-9]* */, "", rest)
            if (rest ~ /^#/) print st " " n " " label " " rest
            else { sub(/^- */, "", rest); print st " " n " " label ": " rest }
            next
        }
        /^1\.\./ { next }
        /^#/ { print; next }
        { print "# " $0 }
        END { print n > count }' "$mpi_fold_out"
    mpi_fold_n=$(cat "$mpi_fold_out.n")
    rm -f "$mpi_fold_out" "$mpi_fold_out.n"
    mpi_fold_n=$((mpi_fold_n + 1))
    if test "$mpi_fold_rc" -eq 0; then
        echo "ok $mpi_fold_n $mpi_fold_label: exit status 0"
    else
        echo "not ok $mpi_fold_n $mpi_fold_label: exit status $mpi_fold_rc"
    fi
}
mpi_fold_done() {
    echo "1..$mpi_fold_n"
    exit 0
}
