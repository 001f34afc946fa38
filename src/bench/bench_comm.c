/*
 * bench_comm.c: collective bandwidth on the groups of the process grid,
 * through comm.h (NCCL on GPUs, MPI on the CPU).
 *
 * Sizes follow nccl-tests: S is the size in bytes of the whole array --
 * the all-reduce buffer, the reduce-scatter input, the all-gather output
 * -- so each member holds or receives S/n of it in the latter two.  With
 * t the time of one call,
 *
 *     algbw = S / t
 *     busbw = algbw * 2(n-1)/n     all-reduce
 *     busbw = algbw * (n-1)/n      reduce-scatter, all-gather
 *
 * busbw is the rate each rank's link must sustain, comparable with the
 * hardware's (NVLink, InfiniBand) whatever n is.  Every group of an axis
 * runs at once (all TP groups of the job together, say), as in training.
 * t is the mean over all ranks of the job, as nccl-tests reports it.
 *
 * With --check 1 (the default) every size's result is compared with the
 * exact answer after its timed calls: member r sends 1 + r % 8 + i % 5 at
 * element i, whose sums are exact in fp32 (and in bf16 up to 21 ranks).
 * The check runs outside the timed calls.
 */
#include <config.h>
#include "bench/bench.h"
#include "base/log.h"

#include <jansson.h>
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { OP_AR = 0, OP_RS, OP_AG, OP_COUNT };
static const char *const op_names[] = {"all-reduce", "reduce-scatter", "all-gather", NULL};
static const char *const group_names[] = {"world", "tp", "cp", "dp", "pp", "dp_cp", "mp",
                                          "ep", "edp", NULL};

/* One timed collective, for gl_bench_time()'s loop. */
typedef struct {
    gl_dev *d;
    gl_comm *c;
    int op;
    void *send, *recv;
    size_t count;          /* AR: elements; RS: recv_count; AG: send_count */
    gl_dtype t;
} comm_call;

static void run_op(void *arg)
{
    comm_call *x = arg;
    switch (x->op) {
    case OP_AR: gl_all_reduce(x->c, x->send, x->recv, x->count, x->t, GL_OP_SUM, x->d->stream); break;
    case OP_RS: gl_reduce_scatter(x->c, x->send, x->recv, x->count, x->t, GL_OP_SUM, x->d->stream); break;
    default:    gl_all_gather(x->c, x->send, x->recv, x->count, x->t, x->d->stream); break;
    }
}

/* The group called name, or NULL when this layout has none. */
static gl_comm *group_of(gl_groups *g, const char *name)
{
    if (!strcmp(name, "world")) return g->world;
    if (!strcmp(name, "tp")) return g->tp;
    if (!strcmp(name, "cp")) return g->cp;
    if (!strcmp(name, "dp")) return g->dp;
    if (!strcmp(name, "pp")) return g->pp;
    if (!strcmp(name, "dp_cp")) return g->dp_cp;
    if (!strcmp(name, "mp")) return g->mp;
    if (!strcmp(name, "ep")) return g->ep;
    if (!strcmp(name, "edp")) return g->edp;
    return NULL;
}

/* The value member r sends at element i (see the top of the file). */
static float pattern(int r, size_t i)
{
    return (float)(1 + r % 8 + (int)(i % 5));
}

/* Host fp32 <-> the wire dtype (fp32 or bf16 bits), so the comm dtype
 * need not be the device's act dtype. */
static void to_wire(void *dst, const float *src, size_t n, gl_dtype t)
{
    if (t == GL_DT_F32) {
        memcpy(dst, src, n * sizeof(float));
        return;
    }
    uint16_t *h = dst;
    for (size_t i = 0; i < n; i++) {
        float r = gl_bench_round_bf16(src[i]);
        uint32_t u;
        memcpy(&u, &r, sizeof u);
        h[i] = (uint16_t)(u >> 16);
    }
}

static float from_wire(const void *src, size_t i, gl_dtype t)
{
    if (t == GL_DT_F32)
        return ((const float *)src)[i];
    uint32_t u = (uint32_t)((const uint16_t *)src)[i] << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The exact answer at element i of member me's output. */
static double expected(int op, int n, int me, size_t i, size_t count)
{
    double s = 0;
    switch (op) {
    case OP_AR:
        for (int r = 0; r < n; r++)
            s += pattern(r, i);
        return s;
    case OP_RS:
        for (int r = 0; r < n; r++)
            s += pattern(r, (size_t)me * count + i);
        return s;
    default:
        return pattern((int)(i / count), i % count);
    }
}

/* Compare this rank's output with the exact answer; dies on the first
 * wrong element, naming it. */
static void check_op(const comm_call *x, const char *gname, void *host, size_t whole)
{
    int n = gl_comm_size(x->c), me = gl_comm_rank(x->c);
    size_t out = x->op == OP_AG ? x->count * n : x->count;
    gl_comm_barrier(x->c);
    x->d->ops->download(x->d, host, x->recv, out * gl_dtype_size(x->t));
    x->d->ops->sync(x->d);
    /* Exact in fp32; in bf16 each of the n - 1 additions may round by
     * half a unit in the 8th bit once sums pass 256. */
    double tol = x->t == GL_DT_BF16 ? n / 512.0 : 0;
    for (size_t i = 0; i < out; i++) {
        double want = expected(x->op, n, me, i, x->count), got = from_wire(host, i, x->t);
        if (!(fabs(got - want) <= tol * want))
            gl_die("comm check failed: %s on group %s (%d ranks), %zu bytes: element %zu "
                   "is %g, expected %g: the %s back end returned a wrong result",
                   op_names[x->op], gname, n, whole, i, got, want,
                   gl_comm_kind_of(x->c) == GL_COMM_NCCL ? "NCCL" : "MPI");
    }
}

/* The groups to measure: --groups, or the world and every axis group
 * with more than one rank and fewer than the world. */
static int pick_groups(const gl_bench_opts *o, gl_groups *g, const char **names, gl_comm **comms)
{
    int k = 0, world = gl_comm_size(g->world);
    for (const char *const *nm = group_names; *nm; nm++) {
        gl_comm *c = group_of(g, *nm);
        if (o->groups) {
            if (!gl_bench_list_has(o->groups, *nm))
                continue;
            if (!c)
                gl_die_code(2, "--groups %s: this layout has no %s group (it needs "
                            "--expert-model-parallel-size > 1 for ep and edp)", o->groups, *nm);
        } else {
            if (!c || (strcmp(*nm, "world") &&
                       (gl_comm_size(c) <= 1 || gl_comm_size(c) >= world)))
                continue;
            if (strcmp(*nm, "tp") && strcmp(*nm, "cp") && strcmp(*nm, "dp") &&
                strcmp(*nm, "pp") && strcmp(*nm, "world"))
                continue;
        }
        names[k] = *nm;
        comms[k++] = c;
    }
    return k;
}

static void print_header(const gl_bench_ctx *ctx, gl_dtype t)
{
    const gl_bench_opts *o = ctx->o;
    const gl_grid_spec *s = &ctx->groups->spec;
    printf("# gridlm-bench comm: %s back end, %d rank(s), grid tp=%d cp=%d pp=%d dp=%d ep=%d, "
           "dtype %s, %d warm-up + %d timed calls, check %s\n",
           ctx->groups->kind == GL_COMM_NCCL ? "nccl" : "mpi", gl_comm_size(ctx->groups->world),
           s->tp, s->cp, s->pp, s->dp, s->ep, gl_dtype_name(t), o->warmup, o->iters,
           o->check ? "on" : "off");
    printf("# size: bytes of the whole array (nccl-tests); time: mean over ranks; "
           "GB/s = 1e9 bytes/s\n");
    printf("%-6s %5s %-14s %12s %11s %10s %9s %9s %5s\n", "group", "ranks", "op", "size(B)",
           "count", "time(us)", "algbw", "busbw", "check");
}

void gl_bench_comm(gl_bench_ctx *ctx)
{
    const gl_bench_opts *o = ctx->o;
    gl_dev *d = ctx->dev;
    gl_dtype t = (gl_dtype)o->dtype;
    size_t es = gl_dtype_size(t);
    int cpu = d->index < 0;
    long lo = gl_bench_parse_size("min-bytes", o->min_bytes ? o->min_bytes : "1K");
    long hi = gl_bench_parse_size("max-bytes",
                                  o->max_bytes ? o->max_bytes : cpu ? "4M" : "1G");
    if (hi < lo)
        gl_die_code(2, "--max-bytes %ld is below --min-bytes %ld: give a range", hi, lo);
    if (o->step_factor < 2)
        gl_die_code(2, "--step-factor %d: give 2 or more", o->step_factor);

    const char *gnames[16];
    gl_comm *comms[16];
    int ng = pick_groups(o, ctx->groups, gnames, comms);

    /* One pair of buffers for every size: send holds the pattern at its
     * largest, recv is overwritten by each call. */
    size_t maxcount = (size_t)hi / es;
    void *send = d->ops->alloc(d, maxcount * es);
    void *recv = d->ops->alloc(d, maxcount * es);
    void *host = gl_malloc(maxcount * es);
    float *pat = gl_malloc(maxcount * sizeof *pat);

    if (gl_bench_rank0() && !o->json)
        print_header(ctx, t);

    for (int gi = 0; gi < ng; gi++) {
        gl_comm *c = comms[gi];
        int n = gl_comm_size(c), me = gl_comm_rank(c);
        for (size_t i = 0; i < maxcount; i++)
            pat[i] = pattern(me, i);
        to_wire(host, pat, maxcount, t);
        d->ops->upload(d, send, host, maxcount * es);
        d->ops->sync(d);

        for (int op = 0; op < OP_COUNT; op++) {
            if (!gl_bench_list_has(o->ops, op_names[op]))
                continue;
            for (long bytes = lo; bytes <= hi; bytes *= o->step_factor) {
                /* Elements per call: the whole array for all-reduce, one
                 * member's block for the others. */
                size_t count = op == OP_AR ? (size_t)bytes / es : (size_t)bytes / (es * n);
                if (!count)
                    continue;
                size_t whole = op == OP_AR ? count * es : count * es * n;
                comm_call x = {.d = d, .c = c, .op = op, .send = send, .recv = recv,
                               .count = count, .t = t};

                MPI_Barrier(MPI_COMM_WORLD);
                for (int w = 0; w < o->warmup; w++)
                    run_op(&x);
                gl_comm_barrier(c);
                d->ops->sync(d);
                MPI_Barrier(MPI_COMM_WORLD);
                double t0 = gl_now();
                for (int it = 0; it < o->iters; it++)
                    run_op(&x);
                gl_comm_barrier(c);
                d->ops->sync(d);
                double sec = (gl_now() - t0) / o->iters, mean, mn, mx;
                gl_bench_rank_stats(sec, &mean, &mn, &mx);
                if (o->check)
                    check_op(&x, gnames[gi], host, whole);

                double algbw = whole / mean / 1e9;
                double factor = op == OP_AR ? 2.0 * (n - 1) / n : (double)(n - 1) / n;
                double busbw = algbw * factor;
                if (o->json) {
                    json_t *j = json_object();
                    json_object_set_new(j, "bench", json_string("comm"));
                    json_object_set_new(j, "backend", json_string(gl_comm_kind_of(c) ==
                                                                  GL_COMM_NCCL ? "nccl" : "mpi"));
                    json_object_set_new(j, "group", json_string(gnames[gi]));
                    json_object_set_new(j, "ranks", json_integer(n));
                    json_object_set_new(j, "op", json_string(op_names[op]));
                    json_object_set_new(j, "dtype", json_string(gl_dtype_name(t)));
                    json_object_set_new(j, "bytes", json_integer((json_int_t)whole));
                    json_object_set_new(j, "count", json_integer((json_int_t)count));
                    json_object_set_new(j, "time_us", json_real(mean * 1e6));
                    json_object_set_new(j, "time_us_max", json_real(mx * 1e6));
                    json_object_set_new(j, "algbw_gbps", json_real(algbw));
                    json_object_set_new(j, "busbw_gbps", json_real(busbw));
                    json_object_set_new(j, "checked", json_boolean(o->check));
                    gl_bench_emit(j);
                } else if (gl_bench_rank0()) {
                    printf("%-6s %5d %-14s %12zu %11zu %10.2f %9.3f %9.3f %5s\n", gnames[gi], n,
                           op_names[op], whole, count, mean * 1e6, algbw, busbw,
                           o->check ? "ok" : "-");
                    fflush(stdout);
                }
            }
        }
    }
    free(pat);
    free(host);
    d->ops->free(d, send);
    d->ops->free(d, recv);
}

const char *const *gl_bench_comm_ops(void) { return op_names; }
const char *const *gl_bench_comm_groups(void) { return group_names; }
