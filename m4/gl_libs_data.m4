# GL_LIBS_DATA: the libraries of the data path: PCRE2 (tokenizer regexes
# with Unicode properties), jansson (tokenizer.json, JSONL), zlib and zstd
# (compressed corpora).  All are required.
AC_DEFUN([GL_LIBS_DATA], [
  PKG_CHECK_MODULES([PCRE2], [libpcre2-8], [],
    [AC_MSG_ERROR([PCRE2 not found: install libpcre2-dev (Debian/Ubuntu) or pcre2-devel (RHEL)])])
  PKG_CHECK_MODULES([JANSSON], [jansson], [],
    [AC_MSG_ERROR([jansson not found: install libjansson-dev (Debian/Ubuntu) or jansson-devel (RHEL)])])
  PKG_CHECK_MODULES([ZLIB], [zlib], [],
    [AC_MSG_ERROR([zlib not found: install zlib1g-dev (Debian/Ubuntu) or zlib-devel (RHEL)])])
  PKG_CHECK_MODULES([ZSTD], [libzstd], [],
    [AC_MSG_ERROR([zstd not found: install libzstd-dev (Debian/Ubuntu) or libzstd-devel (RHEL)])])
  gl_data_summary="yes"
])
