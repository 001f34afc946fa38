# GL_CUDNN: cuDNN 9 for fused flash attention, used when found.
#
# --with-cudnn=DIR looks in DIR; --without-cudnn keeps the attention
# kernels written here.  Defines GL_HAVE_CUDNN.
AC_DEFUN([GL_CUDNN], [
  AC_REQUIRE([GL_CUDA])
  AC_ARG_WITH([cudnn],
    [AS_HELP_STRING([--with-cudnn@<:@=DIR@:>@], [use cuDNN fused attention (default: when found)])],
    [], [with_cudnn=check])
  gl_cudnn_ok=no
  AS_IF([test $gl_cuda_ok = yes && test "x$with_cudnn" != xno], [
    AS_IF([test "x$with_cudnn" != xcheck && test "x$with_cudnn" != xyes], [gl_cudnn_dirs="$with_cudnn"],
          [gl_cudnn_dirs="$CUDA_HOME_DIR /usr/local /usr"])
    gl_save_CPPFLAGS=$CPPFLAGS; gl_save_LIBS=$LIBS
    for gl_d in $gl_cudnn_dirs; do
      gl_l="$gl_d/lib64"; AS_IF([test -d "$gl_l"], [], [gl_l="$gl_d/lib"])
      CUDNN_CFLAGS="-isystem $gl_d/include"; CUDNN_LIBS="-L$gl_l -Wl,-rpath,$gl_l -lcudnn"
      CPPFLAGS="$gl_save_CPPFLAGS $CUDA_CFLAGS $CUDNN_CFLAGS"; LIBS="$CUDNN_LIBS $CUDA_LIBS $gl_save_LIBS"
      AC_MSG_CHECKING([for cuDNN 9 in $gl_d])
      AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <cudnn.h>
#if CUDNN_MAJOR < 9
#error old cuDNN
#endif]], [[cudnnBackendDescriptor_t d; cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &d);]])],
        [gl_cudnn_ok=yes])
      AC_MSG_RESULT([$gl_cudnn_ok])
      AS_IF([test $gl_cudnn_ok = yes], [break])
    done
    CPPFLAGS=$gl_save_CPPFLAGS; LIBS=$gl_save_LIBS
    AS_IF([test $gl_cudnn_ok = no && test "x$with_cudnn" != xcheck],
      [AC_MSG_ERROR([cuDNN 9 was asked for but not found: install libcudnn9-dev-cuda-13 (NVIDIA's repository), give --with-cudnn=DIR, or --without-cudnn])])
  ])
  AS_IF([test $gl_cudnn_ok = yes], [
    AC_DEFINE([GL_HAVE_CUDNN], [1], [Define to 1 when cuDNN fused attention is available.])
    gl_cudnn_summary="yes ($CUDNN_LIBS)"
  ], [CUDNN_CFLAGS=""; CUDNN_LIBS=""; gl_cudnn_summary="no (attention kernels written here)"])
  AC_SUBST([CUDNN_CFLAGS]) AC_SUBST([CUDNN_LIBS])
  AM_CONDITIONAL([HAVE_CUDNN], [test $gl_cudnn_ok = yes])
])
