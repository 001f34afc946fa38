/*
 * tap.h: a small Test Anything Protocol producer for the C tests.
 *
 *   plan(3);                      or plan(NO_PLAN) ... done_testing();
 *   ok(x == 1, "x is %d", x);
 *   is_int(got, want, "name");    is_double(got, want, tol, "name");
 *   skip_all("no CUDA device");   prints "1..0 # SKIP no CUDA device"
 *
 * Under MPI only rank 0 should print: call tap_quiet(1) on the others.
 * The exit status of done_testing()/tap_exit() is non-zero when any test
 * failed or the plan was not met.
 */
#ifndef GL_T_TAP_H
#define GL_T_TAP_H

#include <stdarg.h>

#define NO_PLAN (-1)

void plan(int n);
void tap_quiet(int quiet);
int ok(int cond, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int is_int(long long got, long long want, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int is_double(double got, double want, double tol, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
int is_string(const char *got, const char *want, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void skip(int n, const char *why);
void skip_all(const char *why) __attribute__((noreturn));
void bail_out(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
int tap_failed(void);
int done_testing(void);

#endif
