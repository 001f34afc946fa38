/*
 * error.h: the one way a gridlm function returns an error to its caller.
 *
 * A function that can fail takes a `gl_error *err` (last argument) and,
 * on failure, fills it with one sentence for people and returns -1 (or
 * NULL where it returns a pointer).  The caller decides what to do with
 * the text: add context, report it with gl_die(), or try another way.
 * `err` may be NULL when the caller does not want the text.
 *
 *     if (gl_file_read_all(path, &buf, &n, &err) < 0)
 *         gl_die("--tokenizer-model %s: %s", path, err.text);
 *
 * The text never ends with a newline and never carries the rank or host
 * prefix: gl_die() adds those.  In the manner of flux-core's errprintf().
 */
#ifndef GL_BASE_ERROR_H
#define GL_BASE_ERROR_H

#include <stdarg.h>
#include "base/log.h"   /* GL_PRINTF */

#ifdef __cplusplus
extern "C" {
#endif

/* 1536 bytes: room for a message that names a few long paths (a
 * checkpoint refusal names the file, the directory and the previous
 * checkpoint); longer text is cut. */
typedef struct gl_error {
    char text[1536];
} gl_error;

/* Fill err (when not NULL) printf-style; always returns -1.  The
 * arguments may refer to err->text itself (to prepend context). */
int gl_errprintf(gl_error *err, const char *fmt, ...) GL_PRINTF(2, 3);
int gl_verrprintf(gl_error *err, const char *fmt, va_list ap);

/* Empty the text (for callers that test err.text[0]). */
void gl_error_clear(gl_error *err);

#ifdef __cplusplus
}
#endif
#endif
