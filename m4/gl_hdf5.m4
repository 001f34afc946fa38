# GL_HDF5: parallel HDF5 built against the same MPI as $CC.
#
# --with-hdf5=DIR looks in DIR; otherwise pkg-config hdf5-FLAVOUR (Debian
# names one per MPI), hdf5-mpi, hdf5, and last h5pcc -show.  The library
# must be parallel (H5Pset_fapl_mpio must link).
AC_DEFUN([GL_HDF5], [
  AC_REQUIRE([GL_MPI_CHECK])
  AC_ARG_WITH([hdf5],
    [AS_HELP_STRING([--with-hdf5=DIR], [parallel HDF5 installation prefix])],
    [], [with_hdf5=check])
  AS_IF([test "x$with_hdf5" = xno],
    [AC_MSG_ERROR([HDF5 is required for checkpoints; --without-hdf5 is not supported])])
  AS_IF([test "x$with_hdf5" != xcheck && test "x$with_hdf5" != xyes], [
    HDF5_CFLAGS="-I$with_hdf5/include"; HDF5_LIBS="-L$with_hdf5/lib -Wl,-rpath,$with_hdf5/lib -lhdf5"
  ], [
    PKG_CHECK_MODULES([HDF5], [hdf5-$gl_mpi_flavor], [], [
      PKG_CHECK_MODULES([HDF5], [hdf5-mpi], [], [
        PKG_CHECK_MODULES([HDF5], [hdf5], [], [
          AC_PATH_PROGS([H5PCC], [h5pcc.$gl_mpi_flavor h5pcc])
          AS_IF([test -n "$H5PCC"], [
            HDF5_CFLAGS=`$H5PCC -showconfig 2>/dev/null | $SED -n 's/^ *AM_CPPFLAGS: *//p'`
            HDF5_LIBS="`$H5PCC -showconfig 2>/dev/null | $SED -n 's/^ *AM_LDFLAGS: *//p'` -lhdf5"])
        ])])])
  ])
  gl_save_CPPFLAGS=$CPPFLAGS; gl_save_LIBS=$LIBS
  CPPFLAGS="$CPPFLAGS $HDF5_CFLAGS"; LIBS="$HDF5_LIBS $LIBS"
  AC_MSG_CHECKING([for parallel HDF5 (H5Pset_fapl_mpio)])
  AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <hdf5.h>
#ifndef H5_HAVE_PARALLEL
#error serial HDF5
#endif]], [[H5Pset_fapl_mpio(H5Pcreate(H5P_FILE_ACCESS), MPI_COMM_WORLD, MPI_INFO_NULL);]])],
    [gl_hdf5_ok=yes], [gl_hdf5_ok=no])
  AC_MSG_RESULT([$gl_hdf5_ok])
  CPPFLAGS=$gl_save_CPPFLAGS; LIBS=$gl_save_LIBS
  AS_IF([test $gl_hdf5_ok = no],
    [AC_MSG_ERROR([no parallel HDF5 for $gl_mpi_flavor found: install libhdf5-openmpi-dev or libhdf5-mpich-dev (Debian/Ubuntu), hdf5-openmpi-devel or hdf5-mpich-devel (RHEL), or give --with-hdf5=DIR])])
  AC_SUBST([HDF5_CFLAGS]) AC_SUBST([HDF5_LIBS])
  gl_hdf5_summary="yes ($HDF5_LIBS)"
])
