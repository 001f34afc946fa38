/*
 * log.h: messages for people, and the one way gridlm stops on an error.
 *
 * Every message carries the program name and, once the process knows it,
 * its rank and host: "gridlm-train: error: rank 3 on node07: ...".
 * gl_die() prints one such line and stops the whole job: it calls the
 * abort hook (the boot code installs MPI_Abort there) and otherwise
 * exit(1).  Nothing in gridlm prints an error and carries on.
 *
 * No MPI and no CUDA here: this is the bottom of the tree.
 */
#ifndef GL_BASE_LOG_H
#define GL_BASE_LOG_H

#include <stddef.h>
#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define GL_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define GL_NORETURN __attribute__((noreturn))
#else
#define GL_PRINTF(a, b)
#define GL_NORETURN
#endif

/* The program name used as the prefix (default "gridlm"). */
void gl_log_set_program(const char *name);
const char *gl_log_program(void);

/* Rank and host for the prefix; rank < 0 means "not known yet". */
void gl_log_set_rank(int rank, const char *host);
int gl_log_rank(void);
const char *gl_log_host(void);

/* Called by gl_die() instead of exit(); it must not return.  A caller
 * that wants a word first installs its own and calls the one it found
 * (gl_log_get_abort) at its end. */
typedef void (*gl_abort_fn)(int code);
void gl_log_set_abort(gl_abort_fn fn);
gl_abort_fn gl_log_get_abort(void);

/* Called by gl_die() after its message and before the abort hook, for
 * work an MPI_Abort would otherwise skip: base/file.c removes the
 * temporary files this process has not published.  One hook (NULL:
 * none); it may run on any thread, and must not call gl_die(). */
void gl_log_set_cleanup(void (*fn)(void));

/* One line on stderr with the prefix, then stop the job (exit code 1). */
GL_NORETURN void gl_die(const char *fmt, ...) GL_PRINTF(1, 2);
GL_NORETURN void gl_vdie(const char *fmt, va_list ap);

/* Same, but exit with the given code (2 for usage errors). */
GL_NORETURN void gl_die_code(int code, const char *fmt, ...) GL_PRINTF(2, 3);

/* gl_die() for signal handlers: writes "PROG: error: rank R on HOST: TEXT"
 * as one line with write(2), then stops the job through the abort hook,
 * else _exit(1).  Everything before the hook is async-signal-safe; the
 * hook (MPI_Abort) is not, so SIGALRM's default action is armed first
 * (30 s) as a backstop: should the hook hang, the process dies anyway
 * and the launcher ends the job. */
GL_NORETURN void gl_die_in_signal(const char *text);
/* For signal handlers: the decimal digits of v in buf (at least 21
 * bytes), NUL-terminated; returns buf. */
char *gl_sig_utoa(char *buf, unsigned long long v);

/* A warning on stderr, on whichever rank calls it. */
void gl_warn(const char *fmt, ...) GL_PRINTF(1, 2);

/* Progress on stdout: gl_info on every caller, gl_info0 on rank 0 (or
 * before ranks are known) only.  Lines are flushed at once. */
void gl_info(const char *fmt, ...) GL_PRINTF(1, 2);
void gl_info0(const char *fmt, ...) GL_PRINTF(1, 2);

/* Allocation that stops the job, naming the size, when memory runs out. */
void *gl_malloc(size_t n);
void *gl_calloc(size_t n, size_t size);
void *gl_realloc(void *p, size_t n);
char *gl_strdup(const char *s);

/* Seconds on a monotonic clock. */
double gl_now(void);

#ifdef __cplusplus
}
#endif
#endif
