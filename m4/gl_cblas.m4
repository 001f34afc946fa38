# GL_CBLAS: a CBLAS for the CPU back end, OpenBLAS preferred.
#
# --with-cblas=DIR looks in DIR/include and DIR/lib; otherwise pkg-config
# (openblas, then cblas, then blas) and then plain -lopenblas / -lcblas.
AC_DEFUN([GL_CBLAS], [
  AC_ARG_WITH([cblas],
    [AS_HELP_STRING([--with-cblas=DIR], [CBLAS (OpenBLAS) installation prefix])],
    [], [with_cblas=check])
  gl_cblas_ok=no
  gl_save_CPPFLAGS=$CPPFLAGS; gl_save_LIBS=$LIBS
  AS_IF([test "x$with_cblas" != xcheck && test "x$with_cblas" != xyes], [
    CBLAS_CFLAGS="-I$with_cblas/include"; CBLAS_LIBS="-L$with_cblas/lib -lopenblas"
  ], [
    PKG_CHECK_MODULES([CBLAS], [openblas], [], [
      PKG_CHECK_MODULES([CBLAS], [cblas], [], [CBLAS_CFLAGS=""; CBLAS_LIBS=""])])
  ])
  for gl_lib in "$CBLAS_LIBS" "-lopenblas" "-lcblas" "-lblas"; do
    CPPFLAGS="$gl_save_CPPFLAGS $CBLAS_CFLAGS"; LIBS="$gl_lib $gl_save_LIBS"
    AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <cblas.h>]],
      [[float a = 1, b = 1, c = 0; cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 1, 1, 1, 1.0f, &a, 1, &b, 1, 0.0f, &c, 1);]])],
      [gl_cblas_ok=yes; CBLAS_LIBS="$gl_lib"; break])
  done
  CPPFLAGS=$gl_save_CPPFLAGS; LIBS=$gl_save_LIBS
  AS_IF([test $gl_cblas_ok = no],
    [AC_MSG_ERROR([no CBLAS found: install libopenblas-dev (Debian/Ubuntu) or openblas-devel (RHEL), or give --with-cblas=DIR])])
  AC_SUBST([CBLAS_CFLAGS]) AC_SUBST([CBLAS_LIBS])
  gl_cblas_summary="yes ($CBLAS_LIBS)"
])
