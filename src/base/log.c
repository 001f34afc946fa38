/* log.c: messages, the abort path and checked allocation (see log.h). */
#include <config.h>
#include "base/log.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *program = "gridlm";
static int my_rank = -1;
static char my_host[256];
static gl_abort_fn abort_fn;
static void (*cleanup_fn)(void);

void gl_log_set_program(const char *name)
{
    const char *slash = strrchr(name, '/');
    program = slash ? slash + 1 : name;
}

const char *gl_log_program(void) { return program; }

void gl_log_set_rank(int rank, const char *host)
{
    my_rank = rank;
    snprintf(my_host, sizeof my_host, "%s", host ? host : "");
}

int gl_log_rank(void) { return my_rank; }
const char *gl_log_host(void) { return my_host; }

void gl_log_set_abort(gl_abort_fn fn) { abort_fn = fn; }
gl_abort_fn gl_log_get_abort(void) { return abort_fn; }

void gl_log_set_cleanup(void (*fn)(void)) { cleanup_fn = fn; }

/* The end of every gl_die(): clean up, then stop the job. */
GL_NORETURN static void stop(int code)
{
    fflush(stdout);
    if (cleanup_fn)
        cleanup_fn();
    if (abort_fn)
        abort_fn(code);
    exit(code);
}

/* "prog: KIND: rank R on HOST: message\n", built in one buffer so that
 * lines from many ranks do not interleave mid-line. */
static void emit(FILE *f, const char *kind, const char *fmt, va_list ap)
{
    char line[4096];
    int n = snprintf(line, sizeof line, "%s: %s%s", program, kind, *kind ? ": " : "");
    if (my_rank >= 0 && n < (int)sizeof line)
        n += snprintf(line + n, sizeof line - n, "rank %d on %s: ", my_rank,
                      my_host[0] ? my_host : "?");
    if (n < (int)sizeof line)
        n += vsnprintf(line + n, sizeof line - n, fmt, ap);
    if (n >= (int)sizeof line - 1)
        n = (int)sizeof line - 2;
    line[n++] = '\n';
    line[n] = '\0';
    fputs(line, f);
    fflush(f);
}

void gl_vdie(const char *fmt, va_list ap)
{
    emit(stderr, "error", fmt, ap);
    stop(1);
}

void gl_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    gl_vdie(fmt, ap);
}

void gl_die_code(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    emit(stderr, "error", fmt, ap);
    va_end(ap);
    stop(code);
}

char *gl_sig_utoa(char *buf, unsigned long long v)
{
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (int i = 0; i < n; i++)
        buf[i] = tmp[n - 1 - i];
    buf[n] = '\0';
    return buf;
}

/* Append s to line[*n], leaving room for "\n". */
static void sig_put(char *line, size_t cap, size_t *n, const char *s)
{
    while (*s && *n + 2 < cap)
        line[(*n)++] = *s++;
}

void gl_die_in_signal(const char *text)
{
    char line[4096], num[24];
    size_t n = 0;
    sig_put(line, sizeof line, &n, program);
    sig_put(line, sizeof line, &n, ": error: ");
    if (my_rank >= 0) {
        sig_put(line, sizeof line, &n, "rank ");
        sig_put(line, sizeof line, &n, gl_sig_utoa(num, (unsigned long long)my_rank));
        sig_put(line, sizeof line, &n, " on ");
        sig_put(line, sizeof line, &n, my_host[0] ? my_host : "?");
        sig_put(line, sizeof line, &n, ": ");
    }
    sig_put(line, sizeof line, &n, text);
    line[n++] = '\n';
    for (size_t off = 0; off < n;) {
        ssize_t w = write(2, line + off, n - off);
        if (w > 0)
            off += (size_t)w;
        else if (w == 0 || errno != EINTR)
            break;
    }
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGALRM, &dfl, NULL);
    alarm(30);
    if (abort_fn)
        abort_fn(1);
    _exit(1);
}

void gl_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    emit(stderr, "warning", fmt, ap);
    va_end(ap);
}

void gl_info(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stdout, fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
    fflush(stdout);
}

void gl_info0(const char *fmt, ...)
{
    if (my_rank > 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stdout, fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
    fflush(stdout);
}

void *gl_malloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        gl_die("out of host memory allocating %zu bytes", n);
    return p;
}

void *gl_calloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        gl_die("out of host memory allocating %zu x %zu bytes", n, size);
    return p;
}

void *gl_realloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        gl_die("out of host memory reallocating %zu bytes", n);
    return q;
}

char *gl_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    return memcpy(gl_malloc(n), s, n);
}

double gl_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}
