#!/bin/sh
# boot.t: the bootstrap, the grid's communicators, their health check and
# the dry-run report (t/boot-test), under the build's launcher:
#   - Open MPI's mpiexec runs a PMIx server: the PMIx path must be taken
#     (when this build has PMIx); GRIDLM_BOOTSTRAP=mpi forces the fallback;
#   - MPICH's hydra has none: the MPI fallback must be taken.
# Then the failure paths: a bad layout stops the whole job with one line,
# and an MPI that does not speak PMIx under a PMIx launcher (the MPICH
# build started by Open MPI's mpiexec) stops with the --mpi= advice.
. "$(dirname "$0")/tap.sh"
test -n "$MPIEXEC" || skip_all "no MPI launcher (MPIEXEC)"
. "$(dirname "$0")/mpi-fold.sh"
have_pmix=no
grep -q '^#define GL_HAVE_PMIX 1' "$top_builddir/config.h" && have_pmix=yes

case $GL_MPI_FLAVOR in
openmpi)
    sizes="2 4"
    boot=mpi; test $have_pmix = yes && boot=pmix
    ;;
*)
    sizes="1 2"
    boot=mpi
    ;;
esac
for n in $sizes; do
    mpi_fold "$n ranks ($boot)" env GL_EXPECT_BOOT=$boot $MPIEXEC $MPIEXEC_FLAGS -n $n ./t/boot-test
done
if test "$boot" = pmix; then
    mpi_fold "2 ranks (GRIDLM_BOOTSTRAP=mpi)" env GL_EXPECT_BOOT=mpi GRIDLM_BOOTSTRAP=mpi \
        $MPIEXEC $MPIEXEC_FLAGS -n 2 ./t/boot-test
fi

# GRIDLM_BOOT_DEBUG: one "bootstrap: PATH:" line per rank.
n=2
lines=$(GRIDLM_BOOT_DEBUG=1 GL_EXPECT_BOOT=$boot $MPIEXEC $MPIEXEC_FLAGS -n $n ./t/boot-test 2>&1 |
        grep -c "^bootstrap: $boot: rank ")
if test "$lines" -eq $n; then
    tap_result 0 "GRIDLM_BOOT_DEBUG prints 'bootstrap: $boot' on each of $n ranks"
else
    tap_result 1 "GRIDLM_BOOT_DEBUG prints 'bootstrap: $boot' on each of $n ranks (got $lines lines)"
fi

# A bad layout: the job stops (non-zero status), one error line from
# rank 0 that names the flag, no hang.
n=2; test "$GL_MPI_FLAVOR" = openmpi && n=4
out=$($MPIEXEC $MPIEXEC_FLAGS -n $n ./t/boot-test --bad-layout 2>&1)
rc=$?
errs=$(printf '%s\n' "$out" | grep -c "error: rank .* --tensor-model-parallel-size 3")
if test $rc -ne 0 && test "$errs" -eq 1; then
    tap_result 0 "TP=3 on $n ranks stops the job (status $rc) with one error line"
else
    tap_result 1 "TP=3 on $n ranks stops the job with one error line (status $rc, $errs lines)"
    printf '%s\n' "$out" | diag
fi

# An MPI without PMIx under a PMIx launcher: each process sees a world of
# one.  The MPICH build under Open MPI's mpiexec is such a job.
ompi_exec=$(command -v mpiexec.openmpi 2>/dev/null)
if test "$GL_MPI_FLAVOR" = mpich && test $have_pmix = yes && test -n "$ompi_exec"; then
    out=$(env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
          OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl=self,vader \
          timeout 60 "$ompi_exec" -n 2 ./t/boot-test 2>&1)
    rc=$?
    errs=$(printf '%s\n' "$out" | grep -c "launch with .srun --mpi=pmi2.")
    if test $rc -ne 0 && test $rc -ne 124 && test "$errs" -eq 1; then
        tap_result 0 "MPICH under a PMIx launcher stops with the --mpi=pmi2 advice (status $rc)"
    else
        tap_result 1 "MPICH under a PMIx launcher stops with the --mpi=pmi2 advice (status $rc, $errs lines)"
        printf '%s\n' "$out" | diag
    fi
else
    skip "" "PMIx size mismatch: needs the MPICH build, PMIx and mpiexec.openmpi"
fi
done_testing
