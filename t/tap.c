/* tap.c: see tap.h. */
#include "tap.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int planned = NO_PLAN, run, failed, quiet;

void tap_quiet(int q) { quiet = q; }

void plan(int n)
{
    planned = n;
    if (!quiet && n != NO_PLAN)
        printf("1..%d\n", n);
    fflush(stdout);
}

static int vok(int cond, const char *fmt, va_list ap)
{
    run++;
    if (!cond)
        failed++;
    if (!quiet) {
        printf("%sok %d - ", cond ? "" : "not ", run);
        vprintf(fmt, ap);
        printf("\n");
        fflush(stdout);
    }
    return cond;
}

int ok(int cond, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = vok(cond, fmt, ap);
    va_end(ap);
    return r;
}

void diag(const char *fmt, ...)
{
    if (quiet)
        return;
    va_list ap;
    va_start(ap, fmt);
    printf("# ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
}

int is_int(long long got, long long want, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = vok(got == want, fmt, ap);
    va_end(ap);
    if (!r)
        diag("got %lld, want %lld", got, want);
    return r;
}

int is_double(double got, double want, double tol, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = vok(fabs(got - want) <= tol, fmt, ap);
    va_end(ap);
    if (!r)
        diag("got %.9g, want %.9g (tolerance %.3g)", got, want, tol);
    return r;
}

int is_string(const char *got, const char *want, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = vok(got && want && strcmp(got, want) == 0, fmt, ap);
    va_end(ap);
    if (!r)
        diag("got \"%s\", want \"%s\"", got ? got : "(null)", want ? want : "(null)");
    return r;
}

void skip(int n, const char *why)
{
    for (int i = 0; i < n; i++) {
        run++;
        if (!quiet)
            printf("ok %d # SKIP %s\n", run, why);
    }
    fflush(stdout);
}

void skip_all(const char *why)
{
    if (!quiet)
        printf("1..0 # SKIP %s\n", why);
    fflush(stdout);
    exit(0);
}

void bail_out(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("Bail out! ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
    exit(1);
}

int tap_failed(void) { return failed; }

int done_testing(void)
{
    if (planned == NO_PLAN) {
        if (!quiet)
            printf("1..%d\n", run);
        planned = run;
    }
    fflush(stdout);
    if (run != planned && !quiet)
        printf("# planned %d tests but ran %d\n", planned, run);
    return failed || run != planned;
}
