/*
 * child.h: run a piece of a test in a child process and keep what it
 * wrote on stderr, for tests of code that stops the process (gl_die).
 *
 * run_in_child(fn, arg, err, errlen) forks; the child sends its stdout to
 * /dev/null (so nothing it prints can break the TAP stream), runs
 * fn(arg) and exits 0 if fn returns.  The parent reads the child's
 * stderr into err (NUL-terminated, at most errlen - 1 bytes) and returns
 * the child's exit status, or -1 when it did not exit normally.
 */
#ifndef GL_T_CHILD_H
#define GL_T_CHILD_H

#include <stddef.h>

int run_in_child(void (*fn)(void *), void *arg, char *err, size_t errlen);

/* The same, returning the child's raw wait status (for tests that expect
 * it to die by a signal: WIFSIGNALED, WTERMSIG).  The child dumps no core. */
int run_in_child_status(void (*fn)(void *), void *arg, char *err, size_t errlen);

#endif
