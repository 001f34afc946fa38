# GL_PMIX: PMIx, used when found for locality and the NCCL id exchange.
#
# --with-pmix=DIR looks in DIR; --without-pmix skips it (the bootstrap then
# uses MPI alone).  Defines GL_HAVE_PMIX and substitutes PMIX_CFLAGS/LIBS.
AC_DEFUN([GL_PMIX], [
  AC_ARG_WITH([pmix],
    [AS_HELP_STRING([--with-pmix@<:@=DIR@:>@], [use PMIx for bootstrap (default: when found)])],
    [], [with_pmix=check])
  gl_pmix_ok=no
  AS_IF([test "x$with_pmix" != xno], [
    AS_IF([test "x$with_pmix" != xcheck && test "x$with_pmix" != xyes], [
      PMIX_CFLAGS="-I$with_pmix/include"; PMIX_LIBS="-L$with_pmix/lib -Wl,-rpath,$with_pmix/lib -lpmix"
    ], [
      PKG_CHECK_MODULES([PMIX], [pmix], [], [PMIX_CFLAGS=""; PMIX_LIBS="-lpmix"])
    ])
    gl_save_CPPFLAGS=$CPPFLAGS; gl_save_LIBS=$LIBS
    CPPFLAGS="$CPPFLAGS $PMIX_CFLAGS"; LIBS="$PMIX_LIBS $LIBS"
    AC_MSG_CHECKING([for PMIx_Init in $PMIX_LIBS])
    AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <pmix.h>]],
      [[pmix_proc_t me; PMIx_Init(&me, NULL, 0);]])], [gl_pmix_ok=yes])
    AC_MSG_RESULT([$gl_pmix_ok])
    CPPFLAGS=$gl_save_CPPFLAGS; LIBS=$gl_save_LIBS
    AS_IF([test $gl_pmix_ok = no && test "x$with_pmix" != xcheck],
      [AC_MSG_ERROR([PMIx was asked for but not found: install libpmix-dev (Debian/Ubuntu) or pmix-devel (RHEL), or give --without-pmix])])
  ])
  AS_IF([test $gl_pmix_ok = yes], [
    AC_DEFINE([GL_HAVE_PMIX], [1], [Define to 1 when PMIx is available.])
    gl_pmix_summary="yes ($PMIX_LIBS)"
  ], [PMIX_CFLAGS=""; PMIX_LIBS=""; gl_pmix_summary="no (MPI-only bootstrap)"])
  AC_SUBST([PMIX_CFLAGS]) AC_SUBST([PMIX_LIBS])
  AM_CONDITIONAL([HAVE_PMIX], [test $gl_pmix_ok = yes])
])
