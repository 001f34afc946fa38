# GL_MPI: use the MPI compiler wrapper as the C compiler.
#
# The wrapper is taken from $MPICC, else the first of mpicc, mpicc.openmpi,
# mpicc.mpich on PATH.  It must run before AC_PROG_CC.  GL_MPI_CHECK (after
# AC_PROG_CC) checks that <mpi.h> links, names the flavour (Open MPI or
# MPICH) and finds the matching launcher, $MPIEXEC, for the tests.
AC_DEFUN([GL_MPI], [
  AC_ARG_VAR([MPICC], [MPI C compiler wrapper (default: mpicc)])
  AC_ARG_VAR([MPIEXEC], [MPI launcher used by the tests (default: the one matching MPICC)])
  AS_IF([test -z "$MPICC"], [AC_CHECK_PROGS([MPICC], [mpicc mpicc.openmpi mpicc.mpich])])
  AS_IF([test -z "$MPICC"],
    [AC_MSG_ERROR([no MPI compiler wrapper found: install libopenmpi-dev or libmpich-dev (Debian/Ubuntu), openmpi-devel or mpich-devel (RHEL), or set MPICC=/path/to/mpicc])])
  # A wrapper named by the user must exist: otherwise AC_PROG_CC fails with
  # "C compiler cannot create executables", which names no package.
  AS_IF([command -v "$MPICC" >/dev/null 2>&1], [],
    [AS_CASE([$MPICC],
      [*mpich*],   [gl_mpi_pkg="libmpich-dev mpich (Debian/Ubuntu) or mpich-devel (RHEL)"],
      [*openmpi*], [gl_mpi_pkg="libopenmpi-dev openmpi-bin (Debian/Ubuntu) or openmpi-devel (RHEL)"],
                   [gl_mpi_pkg="libopenmpi-dev or libmpich-dev (Debian/Ubuntu), openmpi-devel or mpich-devel (RHEL)"])
     AC_MSG_ERROR([MPICC=$MPICC: no such program on PATH: install $gl_mpi_pkg, or set MPICC=/path/to/mpicc])])
  CC="$MPICC"
])

AC_DEFUN([GL_MPI_CHECK], [
  AC_MSG_CHECKING([whether $CC compiles and links MPI programs])
  AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <mpi.h>]], [[MPI_Init(0, 0); MPI_Finalize();]])],
    [AC_MSG_RESULT([yes])],
    [AC_MSG_RESULT([no])
     AC_MSG_ERROR([$CC cannot build MPI programs: install libopenmpi-dev or libmpich-dev (Debian/Ubuntu), openmpi-devel or mpich-devel (RHEL)])])
  AC_MSG_CHECKING([which MPI $CC wraps])
  gl_mpi_flavor=unknown
  AC_COMPILE_IFELSE([AC_LANG_PROGRAM([[#include <mpi.h>
#ifndef OPEN_MPI
#error not Open MPI
#endif]], [])], [gl_mpi_flavor=openmpi])
  AS_IF([test "$gl_mpi_flavor" = unknown], [
    AC_COMPILE_IFELSE([AC_LANG_PROGRAM([[#include <mpi.h>
#ifndef MPICH
#error not MPICH
#endif]], [])], [gl_mpi_flavor=mpich])])
  AC_MSG_RESULT([$gl_mpi_flavor])
  AC_SUBST([GL_MPI_FLAVOR], [$gl_mpi_flavor])
  AS_IF([test -z "$MPIEXEC"], [
    gl_mpi_bindir=`AS_DIRNAME(["$(command -v $MPICC)"])`
    AS_CASE([$gl_mpi_flavor],
      [openmpi], [gl_mpiexec_try="mpiexec.openmpi mpirun.openmpi mpiexec"],
      [mpich],   [gl_mpiexec_try="mpiexec.mpich mpiexec.hydra mpiexec"],
                 [gl_mpiexec_try="mpiexec mpirun"])
    AC_PATH_PROGS([MPIEXEC], [$gl_mpiexec_try], [], [$gl_mpi_bindir$PATH_SEPARATOR$PATH])])
  AS_IF([test -z "$MPIEXEC"],
    [AC_MSG_WARN([no MPI launcher found: multi-rank tests will be skipped])])
])
