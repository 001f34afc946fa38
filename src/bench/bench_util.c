/* bench_util.c: parsing, data, timing and rank statistics shared by the
 * microbenchmarks (see bench.h). */
#include <config.h>
#include "bench/bench.h"
#include "base/log.h"
#include "base/rng.h"

#include <jansson.h>
#include <mpi.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

long gl_bench_parse_size(const char *opt, const char *s)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || errno || v <= 0)
        gl_die_code(2, "--%s '%s' is not a size: give a positive number of bytes, "
                    "optionally with K, M or G (binary), e.g. 64K", opt, s);
    long mul = 1;
    switch (toupper((unsigned char)*end)) {
    case '\0': break;
    case 'K': mul = 1L << 10; end++; break;
    case 'M': mul = 1L << 20; end++; break;
    case 'G': mul = 1L << 30; end++; break;
    default: end = (char *)"?"; break;
    }
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end || v > LONG_MAX / mul)
        gl_die_code(2, "--%s '%s' is not a size: give a positive number of bytes, "
                    "optionally with K, M or G (binary), e.g. 64K", opt, s);
    return v * mul;
}

int gl_bench_parse_sizes(const char *opt, const char *list, long **out)
{
    char *copy = gl_strdup(list), *save = NULL;
    int n = 0, cap = 8;
    long *v = gl_malloc(cap * sizeof *v);
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (n == cap)
            v = gl_realloc(v, (cap *= 2) * sizeof *v);
        v[n++] = gl_bench_parse_size(opt, tok);
    }
    free(copy);
    if (!n)
        gl_die_code(2, "--%s '%s' lists nothing: give comma-separated sizes", opt, list);
    *out = v;
    return n;
}

int gl_bench_list_has(const char *list, const char *item)
{
    size_t n = strlen(item);
    for (const char *p = list; p && *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !strncmp(p, item, n))
            return 1;
        p = e ? e + 1 : NULL;
    }
    return 0;
}

void gl_bench_list_check(const char *opt, const char *list, const char *const *allowed)
{
    char *copy = gl_strdup(list), *save = NULL;
    int n = 0;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int found = 0;
        for (const char *const *a = allowed; *a; a++)
            found |= !strcmp(*a, tok);
        if (!found) {
            char all[512] = "";
            for (const char *const *a = allowed; *a; a++)
                snprintf(all + strlen(all), sizeof all - strlen(all), "%s%s",
                         a == allowed ? "" : ", ", *a);
            gl_die_code(2, "--%s '%s': unknown item '%s': choose from %s", opt, list, tok,
                        all);
        }
        n++;
    }
    free(copy);
    if (!n)
        gl_die_code(2, "--%s '%s' lists nothing: give comma-separated items", opt, list);
}

float gl_bench_value(long seed, int stream, size_t i)
{
    uint64_t key = gl_rng_key("gridlm-bench") + (uint64_t)stream;
    return (float)(2.0 * gl_rng_uniform((uint64_t)seed, key, i) - 1.0);
}

float gl_bench_round_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return x;
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* Through an fp32 device buffer and the back end's own conversion. */
void gl_bench_upload_act(gl_dev *d, void *act, const float *host, size_t count)
{
    float *tmp = d->ops->alloc(d, count * sizeof(float));
    d->ops->upload(d, tmp, host, count * sizeof(float));
    d->ops->to_act(d, act, tmp, count);
    d->ops->sync(d);
    d->ops->free(d, tmp);
}

void gl_bench_download_act(gl_dev *d, float *host, const void *act, size_t count)
{
    float *tmp = d->ops->alloc(d, count * sizeof(float));
    d->ops->to_f32(d, tmp, act, count);
    d->ops->download(d, host, tmp, count * sizeof(float));
    d->ops->sync(d);
    d->ops->free(d, tmp);
}

/* In pieces, so that filling an 8192 x 28672 operand needs no host copy
 * of it. */
void gl_bench_fill(gl_dev *d, void *act, size_t count, long seed, int stream, float scale)
{
    const size_t piece = (size_t)1 << 22;
    float *h = gl_malloc((count < piece ? count : piece) * sizeof *h);
    for (size_t at = 0; at < count; at += piece) {
        size_t n = count - at < piece ? count - at : piece;
        for (size_t i = 0; i < n; i++)
            h[i] = scale * gl_bench_value(seed, stream, at + i);
        gl_bench_upload_act(d, (char *)act + at * d->act_bytes, h, n);
    }
    free(h);
}

int gl_bench_rank0(void)
{
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    return rank == 0;
}

void gl_bench_emit(json_t *obj)
{
    if (gl_bench_rank0()) {
        char *s = json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
        printf("%s\n", s);
        fflush(stdout);
        free(s);
    }
    json_decref(obj);
}

double gl_bench_time(gl_dev *d, int warmup, int iters, void (*fn)(void *arg), void *arg)
{
    for (int i = 0; i < warmup; i++)
        fn(arg);
    d->ops->sync(d);
    double t0 = gl_now();
    for (int i = 0; i < iters; i++)
        fn(arg);
    d->ops->sync(d);
    return (gl_now() - t0) / iters;
}

void gl_bench_rank_stats(double x, double *mean, double *min, double *max)
{
    int size;
    double sum;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Allreduce(&x, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&x, min, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&x, max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    *mean = sum / size;
}

gl_bench_flops gl_bench_measure_flops(gl_dev *d, const gl_bench_opts *o, double flops,
                                      void (*fn)(void *arg), void *arg)
{
    gl_bench_flops r;
    double ms_min, ms_max;
    MPI_Barrier(MPI_COMM_WORLD);
    double sec = gl_bench_time(d, o->warmup, o->iters, fn, arg);
    gl_bench_rank_stats(flops / sec / 1e12, &r.tflops, &r.tflops_min, &r.tflops_max);
    gl_bench_rank_stats(sec * 1e3, &r.ms, &ms_min, &ms_max);
    return r;
}

json_t *gl_bench_flops_record(const char *bench, const gl_dev *d)
{
    char dn[32];
    json_t *j = json_object();
    json_object_set_new(j, "bench", json_string(bench));
    json_object_set_new(j, "device", json_string(gl_bench_dev_name(d, dn, sizeof dn)));
    json_object_set_new(j, "dtype", json_string(gl_dtype_name(d->act)));
    return j;
}

void gl_bench_emit_flops(json_t *j, const gl_bench_flops *r, int checked)
{
    json_object_set_new(j, "ms", json_real(r->ms));
    json_object_set_new(j, "tflops", json_real(r->tflops));
    json_object_set_new(j, "tflops_min", json_real(r->tflops_min));
    json_object_set_new(j, "tflops_max", json_real(r->tflops_max));
    json_object_set_new(j, "checked", json_boolean(checked));
    gl_bench_emit(j);
}

void gl_bench_print_flops(const gl_dev *d, const gl_bench_flops *r)
{
    if (!gl_bench_rank0())
        return;
    double u = d->index < 0 ? 1e3 : 1.0;      /* GFLOP/s on the CPU */
    printf(" %10.4f %10.2f %10.2f %10.2f\n", r->ms, r->tflops * u, r->tflops_min * u,
           r->tflops_max * u);
    fflush(stdout);
}

const char *gl_bench_dev_name(const gl_dev *d, char *buf, size_t n)
{
    if (d->index < 0)
        snprintf(buf, n, "cpu");
    else
        snprintf(buf, n, "cuda:%d", d->index);
    return buf;
}

int gl_bench_parse_shapes(const char *list, long multiple, long limit, const char *kind,
                          gl_bench_shape **out)
{
    char *copy = gl_strdup(list), *save = NULL;
    int n = 0, cap = 8;
    gl_bench_shape *v = gl_malloc(cap * sizeof *v);
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        long a, b, c;
        char tail;
        int got = sscanf(tok, "%ldx%ldx%ld%c", &a, &b, &c, &tail);
        if (got == 1 && !strchr(tok, 'x'))
            b = c = a, got = 3;
        if (got != 3 || a <= 0 || b <= 0 || c <= 0 || a % multiple || b % multiple ||
            c % multiple || a > limit || b > limit || c > limit) {
            char rule[96] = "";
            if (multiple > 1)
                snprintf(rule, sizeof rule, ", multiples of %ld up to %ld", multiple, limit);
            gl_die_code(2, "--shapes '%s': '%s' is not a shape%s: give MxNxK (e.g. "
                        "8192x3072x2048) or N for a square%s, comma-separated", list, tok,
                        kind, rule);
        }
        if (n == cap)
            v = gl_realloc(v, (cap *= 2) * sizeof *v);
        v[n++] = (gl_bench_shape){a, b, c};
    }
    free(copy);
    if (!n)
        gl_die_code(2, "--shapes '%s' lists nothing: give MxNxK or N, comma-separated", list);
    *out = v;
    return n;
}
