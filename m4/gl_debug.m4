# GL_DEBUG: --enable-debug builds with -O0 -g and the address and
# undefined-behaviour sanitizers.
AC_DEFUN([GL_DEBUG], [
  AC_ARG_ENABLE([debug],
    [AS_HELP_STRING([--enable-debug], [build with -O0 -g and the address/undefined sanitizers])],
    [], [enable_debug=no])
  AS_IF([test "$enable_debug" = yes], [
    CFLAGS="-O0 -g -fno-omit-frame-pointer -fsanitize=address,undefined"
    LDFLAGS="$LDFLAGS -fsanitize=address,undefined"
    AC_DEFINE([GL_DEBUG_BUILD], [1], [Define to 1 for a debug build.])])
])

# GL_WARNINGS: the warning flags every C file is compiled with.
AC_DEFUN([GL_WARNINGS], [
  GL_WARN_CFLAGS="-Wall -Wextra -Wno-unused-parameter -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wpointer-arith"
  AC_SUBST([GL_WARN_CFLAGS])
])
