# GL_CUDA: the CUDA toolkit (nvcc, runtime, cuBLAS, cuBLASLt).
#
# --with-cuda=DIR names the toolkit; otherwise $CUDA_HOME, /usr/local/cuda
# and the nvcc on PATH are tried.  --disable-cuda (or --without-cuda)
# builds the CPU-only programs; when no toolkit is found and none was
# asked for, the build is CPU-only too, and the summary says so.
# --with-cuda-arch="90a 80" chooses the GPU architectures (default: Hopper
# with its wgmma/TMA extensions, and Ampere).
AC_DEFUN([GL_CUDA], [
  AC_ARG_ENABLE([cuda],
    [AS_HELP_STRING([--disable-cuda], [build the CPU-only programs])],
    [], [enable_cuda=check])
  AC_ARG_WITH([cuda],
    [AS_HELP_STRING([--with-cuda@<:@=DIR@:>@], [CUDA toolkit prefix (default: $CUDA_HOME, /usr/local/cuda)])],
    [], [with_cuda=check])
  AC_ARG_WITH([cuda-arch],
    [AS_HELP_STRING([--with-cuda-arch=LIST], [GPU architectures to build for (default: "90a 80")])],
    [], [with_cuda_arch="90a 80"])
  AC_ARG_VAR([NVCC], [CUDA compiler])
  AC_ARG_VAR([NVCCFLAGS], [flags for the CUDA compiler])
  AS_IF([test "x$with_cuda" = xno], [enable_cuda=no])
  gl_cuda_ok=no
  AS_IF([test "x$enable_cuda" != xno], [
    gl_cuda_dirs=""
    AS_IF([test "x$with_cuda" != xcheck && test "x$with_cuda" != xyes], [gl_cuda_dirs="$with_cuda"],
          [gl_cuda_dirs="$CUDA_HOME /usr/local/cuda"])
    AS_IF([test -z "$NVCC"], [
      for gl_d in $gl_cuda_dirs; do
        AS_IF([test -x "$gl_d/bin/nvcc"], [NVCC="$gl_d/bin/nvcc"; CUDA_HOME_DIR="$gl_d"; break])
      done])
    AS_IF([test -z "$NVCC" && test "x$with_cuda" = xcheck], [AC_PATH_PROG([NVCC], [nvcc])])
    AS_IF([test -n "$NVCC" && test -z "$CUDA_HOME_DIR"], [
      CUDA_HOME_DIR=`AS_DIRNAME(["$NVCC"])`; CUDA_HOME_DIR=`AS_DIRNAME(["$CUDA_HOME_DIR"])`])
    AS_IF([test -n "$NVCC"], [
      gl_cuda_libdir="$CUDA_HOME_DIR/lib64"
      AS_IF([test -d "$gl_cuda_libdir"], [], [gl_cuda_libdir="$CUDA_HOME_DIR/lib"])
      CUDA_CFLAGS="-isystem $CUDA_HOME_DIR/include"
      CUDA_LIBS="-L$gl_cuda_libdir -Wl,-rpath,$gl_cuda_libdir -lcublasLt -lcublas -lcudart"
      gl_save_CPPFLAGS=$CPPFLAGS; gl_save_LIBS=$LIBS
      CPPFLAGS="$CPPFLAGS $CUDA_CFLAGS"; LIBS="$CUDA_LIBS $LIBS"
      AC_MSG_CHECKING([whether the CUDA runtime, cuBLAS and cuBLASLt link])
      AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <cuda_runtime.h>
#include <cublasLt.h>]], [[int n; cudaGetDeviceCount(&n); cublasLtHandle_t h; cublasLtCreate(&h);]])],
        [gl_cuda_ok=yes], [gl_cuda_ok=no])
      AC_MSG_RESULT([$gl_cuda_ok])
      CPPFLAGS=$gl_save_CPPFLAGS; LIBS=$gl_save_LIBS
    ])
    AS_IF([test $gl_cuda_ok = no && test "x$enable_cuda$with_cuda" != xcheckcheck],
      [AC_MSG_ERROR([CUDA was asked for but nvcc, the runtime or cuBLAS(Lt) was not found: install the CUDA toolkit (NVIDIA's cuda-toolkit packages, or nvidia-cuda-toolkit on Debian/Ubuntu), give --with-cuda=DIR, or build CPU-only with --disable-cuda])])
  ])
  gl_cuda_gencode=""
  for gl_a in $with_cuda_arch; do
    gl_cuda_gencode="$gl_cuda_gencode -gencode arch=compute_$gl_a,code=sm_$gl_a"
  done
  AS_IF([test $gl_cuda_ok = yes], [
    AC_DEFINE([GL_HAVE_CUDA], [1], [Define to 1 when the CUDA back end is built.])
    AS_IF([test -z "$NVCCFLAGS"], [NVCCFLAGS="-O3 -std=c++17 --use_fast_math"])
    AS_IF([test "$enable_debug" = yes], [NVCCFLAGS="-O0 -g -std=c++17"])
    gl_cuda_summary="yes ($NVCC, sm: $with_cuda_arch)"
    gl_cublas_summary="yes"
  ], [
    CUDA_CFLAGS=""; CUDA_LIBS=""
    gl_cuda_summary="no (CPU-only build)"; gl_cublas_summary="no"
  ])
  AC_SUBST([CUDA_CFLAGS]) AC_SUBST([CUDA_LIBS]) AC_SUBST([CUDA_HOME_DIR])
  AC_SUBST([NVCC_GENCODE], [$gl_cuda_gencode])
  AM_CONDITIONAL([HAVE_CUDA], [test $gl_cuda_ok = yes])
])
