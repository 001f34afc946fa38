/* error.c: returned errors (see error.h). */
#include <config.h>
#include "base/error.h"

#include <stdio.h>

int gl_verrprintf(gl_error *err, const char *fmt, va_list ap)
{
    if (err) {
        /* Format into a copy first: callers may pass err->text as an
         * argument to wrap an inner error in context. */
        char text[sizeof err->text];
        vsnprintf(text, sizeof text, fmt, ap);
        snprintf(err->text, sizeof err->text, "%s", text);
    }
    return -1;
}

int gl_errprintf(gl_error *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    gl_verrprintf(err, fmt, ap);
    va_end(ap);
    return -1;
}

void gl_error_clear(gl_error *err)
{
    if (err)
        err->text[0] = '\0';
}
