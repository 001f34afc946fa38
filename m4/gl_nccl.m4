# GL_NCCL: NCCL, required by the CUDA back end.
#
# --with-nccl=DIR looks in DIR; otherwise pkg-config nccl, then the CUDA
# toolkit, /usr/local and /usr.
AC_DEFUN([GL_NCCL], [
  AC_REQUIRE([GL_CUDA])
  AC_ARG_WITH([nccl],
    [AS_HELP_STRING([--with-nccl=DIR], [NCCL installation prefix])],
    [], [with_nccl=check])
  gl_nccl_ok=no
  AS_IF([test $gl_cuda_ok = yes], [
    AS_IF([test "x$with_nccl" != xcheck && test "x$with_nccl" != xyes], [gl_nccl_dirs="$with_nccl"], [
      PKG_CHECK_MODULES([NCCL], [nccl], [gl_nccl_dirs=pkgconfig], [gl_nccl_dirs="$CUDA_HOME_DIR /usr/local /usr"])])
    gl_save_CPPFLAGS=$CPPFLAGS; gl_save_LIBS=$LIBS
    for gl_d in $gl_nccl_dirs; do
      AS_IF([test "$gl_d" != pkgconfig], [
        gl_l="$gl_d/lib64"; AS_IF([test -d "$gl_l"], [], [gl_l="$gl_d/lib"])
        NCCL_CFLAGS="-isystem $gl_d/include"; NCCL_LIBS="-L$gl_l -Wl,-rpath,$gl_l -lnccl"])
      CPPFLAGS="$gl_save_CPPFLAGS $CUDA_CFLAGS $NCCL_CFLAGS"; LIBS="$NCCL_LIBS $CUDA_LIBS $gl_save_LIBS"
      AC_MSG_CHECKING([for NCCL with ncclCommSplit in $gl_d])
      AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <nccl.h>]],
        [[ncclComm_t c = 0, s; ncclCommSplit(c, 0, 0, &s, NULL);]])], [gl_nccl_ok=yes])
      AC_MSG_RESULT([$gl_nccl_ok])
      AS_IF([test $gl_nccl_ok = yes], [break])
    done
    CPPFLAGS=$gl_save_CPPFLAGS; LIBS=$gl_save_LIBS
    AS_IF([test $gl_nccl_ok = no],
      [AC_MSG_ERROR([NCCL 2.18 or newer not found: install libnccl-dev (NVIDIA's repository) or give --with-nccl=DIR, or build CPU-only with --disable-cuda])])
    AC_DEFINE([GL_HAVE_NCCL], [1], [Define to 1 when NCCL is available.])
    gl_nccl_summary="yes ($NCCL_LIBS)"
  ], [NCCL_CFLAGS=""; NCCL_LIBS=""; gl_nccl_summary="no"])
  AC_SUBST([NCCL_CFLAGS]) AC_SUBST([NCCL_LIBS])
])
