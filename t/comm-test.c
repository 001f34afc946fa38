/*
 * comm-test: every call of comm.h on the world and on the TP, CP, DP, PP,
 * DP x CP, MP and embedding groups of a few grid layouts, run by t/comm.t
 * on 1, 2, 4 and 8 ranks.
 *
 * Each member contributes values that are small integers, exact in every
 * dtype (bf16 included: at most 8 significant bits), so every result is
 * known exactly and compared bit for bit with the sum/max/min or the
 * concatenation computed here from the member list.  A 2-member group also
 * checks bf16 round-to-nearest-even on ties.  Results are agreed over the
 * world (every rank must pass) and rank 0 prints TAP.
 *
 * The suite runs twice: on the MPI back end with host buffers, and on the
 * NCCL back end with device buffers when every rank has a GPU of its own
 * (otherwise that part reports # SKIP).
 */
#include <config.h>
#include "boot/boot.h"
#include "boot/groups.h"
#include "comm/comm.h"
#include "grid/grid.h"
#include "base/log.h"
#include "tap.h"

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef GL_HAVE_CUDA
#include <cuda_runtime.h>
#endif

/* ---- memory of one back end ---------------------------------------- */

typedef struct {
    const char *name;
    void *stream;
    void *(*alloc)(size_t bytes);
    void (*put)(void *dst, const void *src, size_t bytes);
    void (*get)(void *dst, const void *src, size_t bytes);
    void (*release)(void *p);
} mem;

static void *host_alloc(size_t n) { return gl_calloc(n ? n : 1, 1); }
static void host_copy(void *d, const void *s, size_t n) { memcpy(d, s, n); }
static const mem host_mem = { "mpi", NULL, host_alloc, host_copy, host_copy, free };

#ifdef GL_HAVE_CUDA
static void cuda_ck(cudaError_t rc, const char *what)
{
    if (rc != cudaSuccess)
        gl_die("%s: %s", what, cudaGetErrorString(rc));
}
static void *cuda_alloc(size_t n)
{
    void *p;
    cuda_ck(cudaMalloc(&p, n ? n : 1), "cudaMalloc");
    cuda_ck(cudaMemset(p, 0, n ? n : 1), "cudaMemset");
    return p;
}
static void cuda_put(void *d, const void *s, size_t n) { cuda_ck(cudaMemcpy(d, s, n, cudaMemcpyHostToDevice), "cudaMemcpy H2D"); }
static void cuda_get(void *d, const void *s, size_t n) { cuda_ck(cudaMemcpy(d, s, n, cudaMemcpyDeviceToHost), "cudaMemcpy D2H"); }
static void cuda_release(void *p) { cudaFree(p); }
#endif

/* ---- values --------------------------------------------------------- */

static const gl_dtype dtypes[] = { GL_DT_F32, GL_DT_BF16, GL_DT_F64, GL_DT_I32, GL_DT_I64 };
#define NDT ((int)(sizeof dtypes / sizeof dtypes[0]))
static const char *const opname[] = { "sum", "max", "min" };

/* Member m's element j: for sums non-negative integers < 16 (a sum over 8
 * members stays < 128, exact in bf16 at every step); for max/min signed. */
static double value(int m, size_t j, int signed_vals)
{
    int v = (int)((m * 5 + j * 3 + (j / 7)) % 16);
    return signed_vals ? v - 7 : v;
}

/* bf16 from a float exact in bf16: the top half of its bits. */
static uint16_t to_bf16(double x)
{
    float f = (float)x;
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);
}

static double from_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void store(void *buf, gl_dtype t, size_t i, double x)
{
    switch (t) {
    case GL_DT_F32: ((float *)buf)[i] = (float)x; break;
    case GL_DT_BF16: ((uint16_t *)buf)[i] = to_bf16(x); break;
    case GL_DT_F64: ((double *)buf)[i] = x; break;
    case GL_DT_I32: ((int32_t *)buf)[i] = (int32_t)x; break;
    case GL_DT_I64: ((int64_t *)buf)[i] = (int64_t)x; break;
    default: ((uint8_t *)buf)[i] = (uint8_t)x; break;
    }
}

static double load(const void *buf, gl_dtype t, size_t i)
{
    switch (t) {
    case GL_DT_F32: return ((const float *)buf)[i];
    case GL_DT_BF16: return from_bf16(((const uint16_t *)buf)[i]);
    case GL_DT_F64: return ((const double *)buf)[i];
    case GL_DT_I32: return ((const int32_t *)buf)[i];
    case GL_DT_I64: return (double)((const int64_t *)buf)[i];
    default: return ((const uint8_t *)buf)[i];
    }
}

static double reduce_expect(int size, size_t j, gl_redop op)
{
    double r = value(0, j, op != GL_OP_SUM);
    for (int m = 1; m < size; m++) {
        double v = value(m, j, op != GL_OP_SUM);
        r = op == GL_OP_SUM ? r + v : op == GL_OP_MAX ? (v > r ? v : r) : (v < r ? v : r);
    }
    return r;
}

/* ---- one check -------------------------------------------------------- */

/* Results of a group of checks: the first failure is kept for diag. */
typedef struct {
    int bad;
    char why[256];
} verdict;

static void fail(verdict *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(verdict *v, const char *fmt, ...)
{
    if (v->bad++)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->why, sizeof v->why, fmt, ap);
    va_end(ap);
}

/* ok() on rank 0 for the world's verdict: every rank must have passed;
 * the reason printed is the lowest failing rank's. */
static void agree(verdict *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void agree(verdict *v, const char *fmt, ...)
{
    int rank, size, mine = v->bad ? 1 : 0, first = -1, any = 0;
    char name[256], why[256];
    va_list ap;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    int cand = mine ? rank : size;
    MPI_Allreduce(&cand, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (any) {
        snprintf(why, sizeof why, "%s", v->why);
        MPI_Bcast(why, sizeof why, MPI_CHAR, first, MPI_COMM_WORLD);
    }
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    ok(!any, "%s", name);
    if (any)
        diag("rank %d: %s", first, why);
    v->bad = 0;
    v->why[0] = '\0';
}

/* A buffer on the back end filled from host values. */
static void *upload(const mem *m, const void *host, size_t bytes)
{
    void *d = m->alloc(bytes);
    m->put(d, host, bytes);
    return d;
}

static void check_all_reduce(gl_comm *c, const mem *m, size_t n, verdict *v)
{
    int size = gl_comm_size(c), me = gl_comm_rank(c);
    for (int di = 0; di < NDT; di++) {
        gl_dtype t = dtypes[di];
        size_t es = gl_dtype_size(t);
        void *h = gl_malloc(n * es + 1), *out = gl_malloc(n * es + 1);
        for (int op = GL_OP_SUM; op <= GL_OP_MIN; op++) {
            for (int inplace = 0; inplace < 2; inplace++) {
                for (size_t j = 0; j < n; j++)
                    store(h, t, j, value(me, j, op != GL_OP_SUM));
                void *s = upload(m, h, n * es), *r = inplace ? s : m->alloc(n * es);
                gl_all_reduce(c, s, r, n, t, (gl_redop)op, m->stream);
                gl_comm_barrier(c);
                m->get(out, r, n * es);
                for (size_t j = 0; j < n; j++) {
                    double want = reduce_expect(size, j, (gl_redop)op);
                    if (load(out, t, j) != want) {
                        fail(v, "all_reduce %s %s%s: element %zu is %g, want %g",
                             gl_dtype_name(t), opname[op], inplace ? " in place" : "",
                             j, load(out, t, j), want);
                        break;
                    }
                }
                m->release(s);
                if (!inplace)
                    m->release(r);
            }
        }
        free(h);
        free(out);
    }
}

/* bf16 sums round to nearest, ties to even (2-member groups only, where
 * the order of the additions is fixed):
 *   1 + 2^-8          = halfway between 1 and 1+2^-7  -> 1 (even)
 *   (1+2^-7) + 2^-8   = halfway between 1+2^-7, 1+2^-6 -> 1+2^-6 (even)
 *   1 + 2^-9          = below halfway                  -> 1
 *   1 + 3*2^-9        = above halfway                  -> 1+2^-7 */
static void check_bf16_rounding(gl_comm *c, const mem *m, verdict *v)
{
    static const uint16_t a[4] = { 0x3f80, 0x3f81, 0x3f80, 0x3f80 };
    static const uint16_t b[4] = { 0x3b80, 0x3b80, 0x3b00, 0x3bc0 };
    static const uint16_t want[4] = { 0x3f80, 0x3f82, 0x3f80, 0x3f81 };
    uint16_t out[4];
    void *s = upload(m, gl_comm_rank(c) == 0 ? a : b, sizeof a);
    gl_all_reduce(c, s, s, 4, GL_DT_BF16, GL_OP_SUM, m->stream);
    gl_comm_barrier(c);
    m->get(out, s, sizeof out);
    m->release(s);
    for (int i = 0; i < 4; i++)
        if (out[i] != want[i])
            fail(v, "bf16 sum %04x + %04x = %04x, want %04x (round to nearest even)",
                 a[i], b[i], out[i], want[i]);
}

static void check_reduce_scatter(gl_comm *c, const mem *m, size_t n, verdict *v)
{
    int size = gl_comm_size(c), me = gl_comm_rank(c);
    for (int di = 0; di < NDT; di++) {
        gl_dtype t = dtypes[di];
        size_t es = gl_dtype_size(t), total = n * (size_t)size;
        void *h = gl_malloc(total * es + 1), *out = gl_malloc(n * es + 1);
        for (int op = GL_OP_SUM; op <= GL_OP_MIN; op++) {
            for (size_t j = 0; j < total; j++)
                store(h, t, j, value(me, j, op != GL_OP_SUM));
            void *s = upload(m, h, total * es), *r = m->alloc(n * es);
            gl_reduce_scatter(c, s, r, n, t, (gl_redop)op, m->stream);
            gl_comm_barrier(c);
            m->get(out, r, n * es);
            for (size_t j = 0; j < n; j++) {
                double want = reduce_expect(size, (size_t)me * n + j, (gl_redop)op);
                if (load(out, t, j) != want) {
                    fail(v, "reduce_scatter %s %s: element %zu of block %d is %g, want %g",
                         gl_dtype_name(t), opname[op], j, me, load(out, t, j), want);
                    break;
                }
            }
            m->release(s);
            m->release(r);
        }
        free(h);
        free(out);
    }
}

static void check_all_gather(gl_comm *c, const mem *m, size_t n, verdict *v)
{
    int size = gl_comm_size(c), me = gl_comm_rank(c);
    for (int di = 0; di < NDT; di++) {
        gl_dtype t = dtypes[di];
        size_t es = gl_dtype_size(t), total = n * (size_t)size;
        void *h = gl_malloc(n * es + 1), *out = gl_malloc(total * es + 1);
        for (size_t j = 0; j < n; j++)
            store(h, t, j, value(me, j, 1));
        for (int inplace = 0; inplace < 2; inplace++) {
            void *r = m->alloc(total * es), *s;
            if (inplace) {
                s = (char *)r + (size_t)me * n * es;
                m->put(s, h, n * es);
            } else {
                s = upload(m, h, n * es);
            }
            gl_all_gather(c, s, r, n, t, m->stream);
            gl_comm_barrier(c);
            m->get(out, r, total * es);
            for (size_t j = 0; j < total; j++) {
                double want = value((int)(j / n), j % n, 1);
                if (load(out, t, j) != want) {
                    fail(v, "all_gather %s%s: element %zu is %g, want %g",
                         gl_dtype_name(t), inplace ? " in place" : "", j,
                         load(out, t, j), want);
                    break;
                }
            }
            if (!inplace)
                m->release(s);
            m->release(r);
        }
        free(h);
        free(out);
    }
}

/* The element that member `from` sends as element j of its block for
 * member `to`: distinct per (from, to, j) within the dtypes' exact range. */
static double a2a_value(int from, int to, size_t j)
{
    return (double)((from * 7 + to * 3 + j * 5 + j / 11) % 64) - 31;
}

/* gl_all_to_all with n per block, and gl_all_to_allv where member i sends
 * (i + j + k) % 3 * n / 2 + (j == i) elements to member j (some blocks
 * empty, none the same size as all the others), with a gap of 3 elements
 * between blocks on both sides so that the displacements are honoured;
 * then the same with gl_all_to_allv_start and gl_comm_req_wait, the
 * count arrays freed as soon as the start returns.  Every block lands
 * at its place and the gaps are not written. */
static void check_all_to_all(gl_comm *c, const mem *m, size_t n, verdict *v)
{
    int size = gl_comm_size(c), me = gl_comm_rank(c);
    size_t *sc = gl_malloc(4 * (size_t)size * sizeof *sc);
    size_t *sd = sc + size, *rc = sc + 2 * size, *rd = sc + 3 * size;
    for (int di = 0; di < NDT; di++) {
        gl_dtype t = dtypes[di];
        size_t es = gl_dtype_size(t);
        for (int vary = 0; vary < 3; vary++) {      /* 2: non-blocking */
            const size_t gap = vary ? 3 : 0;
            size_t stot = 0, rtot = 0;
            for (int j = 0; j < size; j++) {
                sc[j] = vary ? (size_t)((me + j + di) % 3) * n / 2 + (j == me) : n;
                rc[j] = vary ? (size_t)((j + me + di) % 3) * n / 2 + (j == me) : n;
                sd[j] = stot;
                rd[j] = rtot;
                stot += sc[j] + gap;
                rtot += rc[j] + gap;
            }
            void *hs = gl_calloc(stot + 1, es), *hr = gl_malloc((rtot + 1) * es);
            for (int j = 0; j < size; j++)
                for (size_t e = 0; e < sc[j]; e++)
                    store(hs, t, sd[j] + e, a2a_value(me, j, e));
            /* the receive buffer starts as 99 everywhere: gaps must keep it */
            for (size_t e = 0; e < rtot; e++)
                store(hr, t, e, 99);
            void *s = upload(m, hs, stot * es), *r = upload(m, hr, rtot * es);
            if (vary == 2) {
                size_t *cc = gl_malloc(4 * (size_t)size * sizeof *cc);
                memcpy(cc, sc, 4 * (size_t)size * sizeof *cc);
                gl_comm_req *q = gl_all_to_allv_start(c, s, cc, cc + size, r, cc + 2 * size,
                                                      cc + 3 * size, t, m->stream);
                free(cc);
                gl_comm_req_wait(q);
            } else if (vary)
                gl_all_to_allv(c, s, sc, sd, r, rc, rd, t, m->stream);
            else
                gl_all_to_all(c, s, r, n, t, m->stream);
            gl_comm_barrier(c);
            m->get(hr, r, rtot * es);
            int bad = 0;
            for (int j = 0; j < size && !bad; j++) {
                for (size_t e = 0; e < rc[j] + gap && !bad; e++) {
                    double want = e < rc[j] ? a2a_value(j, me, e) : 99;
                    double got = load(hr, t, rd[j] + e);
                    if (got != want) {
                        fail(v, "all_to_all%s %s: element %zu from member %d is %g, want %g",
                             vary == 2 ? "v_start" : vary ? "v" : "", gl_dtype_name(t), e, j,
                             got, want);
                        bad = 1;
                    }
                }
            }
            m->release(s);
            m->release(r);
            free(hs);
            free(hr);
        }
    }
    free(sc);
}

/* Reduce to every root in turn, in place and out of place: the root holds
 * the reduction; the others' send buffers are unchanged and an
 * out-of-place receive buffer of theirs is never written. */
static void check_reduce(gl_comm *c, const mem *m, size_t n, verdict *v)
{
    int size = gl_comm_size(c), me = gl_comm_rank(c);
    for (int di = 0; di < NDT; di++) {
        gl_dtype t = dtypes[di];
        size_t es = gl_dtype_size(t);
        void *h = gl_malloc(n * es + 1), *out = gl_malloc(n * es + 1);
        for (int op = GL_OP_SUM; op <= GL_OP_MIN; op++)
            for (int root = 0; root < size; root++)
                for (int inplace = 0; inplace < 2; inplace++) {
                    for (size_t j = 0; j < n; j++)
                        store(h, t, j, value(me, j, op != GL_OP_SUM));
                    void *s = upload(m, h, n * es), *r = s;
                    if (!inplace) {
                        memset(out, 0x5a, n * es);
                        r = upload(m, out, n * es);
                    }
                    gl_reduce(c, s, r, n, t, (gl_redop)op, root, m->stream);
                    gl_comm_barrier(c);
                    m->get(out, me == root ? r : s, n * es);
                    for (size_t j = 0; j < n; j++) {
                        double want = me == root ? reduce_expect(size, j, (gl_redop)op)
                                                 : value(me, j, op != GL_OP_SUM);
                        if (load(out, t, j) != want) {
                            fail(v, "reduce %s %s to root %d%s: member %d element %zu "
                                 "is %g, want %g", gl_dtype_name(t), opname[op], root,
                                 inplace ? " in place" : "", me, j, load(out, t, j), want);
                            break;
                        }
                    }
                    if (!inplace && me != root) {
                        unsigned char *u = out;
                        m->get(out, r, n * es);
                        for (size_t j = 0; j < n * es; j++)
                            if (u[j] != 0x5a) {
                                fail(v, "reduce %s to root %d: member %d's receive "
                                     "buffer was written (byte %zu)", gl_dtype_name(t),
                                     root, me, j);
                                break;
                            }
                    }
                    m->release(s);
                    if (!inplace)
                        m->release(r);
                }
        free(h);
        free(out);
    }
}

static void check_broadcast(gl_comm *c, const mem *m, size_t n, verdict *v)
{
    int size = gl_comm_size(c), me = gl_comm_rank(c);
    for (int di = 0; di < NDT; di++) {
        gl_dtype t = dtypes[di];
        size_t es = gl_dtype_size(t);
        void *h = gl_malloc(n * es + 1);
        for (int root = 0; root < size; root++) {
            /* Everyone fills its own values; only the root's may survive. */
            for (size_t j = 0; j < n; j++)
                store(h, t, j, value(me, j + (size_t)root, 1));
            void *b = upload(m, h, n * es);
            gl_broadcast(c, b, n, t, root, m->stream);
            gl_comm_barrier(c);
            m->get(h, b, n * es);
            m->release(b);
            for (size_t j = 0; j < n; j++)
                if (load(h, t, j) != value(root, j + (size_t)root, 1)) {
                    fail(v, "broadcast %s from root %d: element %zu is %g, want %g",
                         gl_dtype_name(t), root, j, load(h, t, j),
                         value(root, j + (size_t)root, 1));
                    break;
                }
        }
        free(h);
    }
}

/* Rings in both directions at once, inside one group bracket, so every
 * member sends before it receives: the bracket must prevent deadlock. */
static void check_send_recv(gl_comm *c, const mem *m, size_t n, verdict *v)
{
    int size = gl_comm_size(c), me = gl_comm_rank(c);
    int next = (me + 1) % size, prev = (me + size - 1) % size;
    for (int di = 0; di < NDT; di++) {
        gl_dtype t = dtypes[di];
        size_t es = gl_dtype_size(t);
        void *h = gl_malloc(n * es + 1);
        for (size_t j = 0; j < n; j++)
            store(h, t, j, value(me, j, 1));
        void *s = upload(m, h, n * es), *from_prev = m->alloc(n * es),
             *from_next = m->alloc(n * es);
        gl_comm_group_start();
        gl_send(c, s, n, t, next, m->stream);
        gl_send(c, s, n, t, prev, m->stream);
        gl_recv(c, from_prev, n, t, prev, m->stream);
        gl_recv(c, from_next, n, t, next, m->stream);
        gl_comm_group_end();
        gl_comm_barrier(c);
        for (int dir = 0; dir < 2; dir++) {
            int peer = dir ? next : prev;
            m->get(h, dir ? from_next : from_prev, n * es);
            for (size_t j = 0; j < n; j++)
                if (load(h, t, j) != value(peer, j, 1)) {
                    fail(v, "send/recv %s ring: element %zu from member %d is %g, want %g",
                         gl_dtype_name(t), j, peer, load(h, t, j), value(peer, j, 1));
                    break;
                }
        }
        m->release(s);
        m->release(from_prev);
        m->release(from_next);
        free(h);
    }
    /* Two brackets left in flight (gl_comm_group_post), the second posted
     * before the first is waited for, then one gl_comm_wait_posted: a
     * ring each way, as context parallelism's ring posts its passes. */
    {
        size_t es = sizeof(double);
        double *h = gl_malloc(n * es);
        for (size_t j = 0; j < n; j++)
            h[j] = value(me, j, 1);
        void *s = upload(m, h, n * es), *from_prev = m->alloc(n * es),
             *from_next = m->alloc(n * es);
        gl_comm_group_start();
        gl_send(c, s, n, GL_DT_F64, next, m->stream);
        gl_recv(c, from_prev, n, GL_DT_F64, prev, m->stream);
        gl_comm_group_post();
        gl_comm_group_start();
        gl_send(c, s, n, GL_DT_F64, prev, m->stream);
        gl_recv(c, from_next, n, GL_DT_F64, next, m->stream);
        gl_comm_group_post();
        gl_comm_wait_posted();
        gl_comm_barrier(c);
        for (int dir = 0; dir < 2; dir++) {
            int peer = dir ? next : prev;
            m->get(h, dir ? from_next : from_prev, n * es);
            for (size_t j = 0; j < n; j++)
                if (h[j] != value(peer, j, 1)) {
                    fail(v, "posted send/recv ring: element %zu from member %d is %g, "
                         "want %g", j, peer, h[j], value(peer, j, 1));
                    break;
                }
        }
        m->release(s);
        m->release(from_prev);
        m->release(from_next);
        free(h);
    }
    /* Outside a bracket: blocking, so one side sends first. */
    if (size > 1) {
        double x = me, got = -1;
        void *b = upload(m, &x, sizeof x);
        if (me == 0) {
            gl_send(c, b, 1, GL_DT_F64, 1, m->stream);
        } else if (me == 1) {
            gl_recv(c, b, 1, GL_DT_F64, 0, m->stream);
        }
        gl_comm_barrier(c);
        m->get(&got, b, sizeof got);
        m->release(b);
        if (me == 1 && got != 0)
            fail(v, "plain send 0 -> 1: got %g, want 0", got);
    }
}

/* The full suite on one group (c == NULL: this rank is not in such a
 * group; it still takes part in the world's verdicts). */
static void suite(gl_comm *c, const mem *m, const char *label, const int *members,
                  int nmembers)
{
    verdict v = { 0, "" };
    if (c) {
        if (gl_comm_size(c) != nmembers)
            fail(&v, "size %d, grid says %d", gl_comm_size(c), nmembers);
        for (int i = 0; i < nmembers && i < gl_comm_size(c); i++)
            if (gl_comm_world_rank(c, i) != members[i])
                fail(&v, "member %d is world rank %d, grid says %d", i,
                     gl_comm_world_rank(c, i), members[i]);
        int wr;
        MPI_Comm_rank(MPI_COMM_WORLD, &wr);
        if (gl_comm_world_rank(c, gl_comm_rank(c)) != wr)
            fail(&v, "own world rank");
    }
    agree(&v, "%s %s: size, rank and members match the grid", m->name, label);

    /* Sizes: odd, and one large enough to take the pipelined paths. */
    static const size_t counts[] = { 1, 1031, 70001 };
    for (int k = 0; k < 3; k++) {
        size_t n = counts[k];
        if (c) check_all_reduce(c, m, n, &v);
        agree(&v, "%s %s: all_reduce f32/bf16/f64/i32/i64 x sum/max/min, in and out of place, n=%zu",
              m->name, label, n);
        if (c) check_reduce_scatter(c, m, n, &v);
        agree(&v, "%s %s: reduce_scatter, 5 dtypes x 3 ops, n=%zu per member", m->name, label, n);
        if (c) check_all_gather(c, m, n, &v);
        agree(&v, "%s %s: all_gather, 5 dtypes, in and out of place, n=%zu", m->name, label, n);
        if (c) check_all_to_all(c, m, n, &v);
        agree(&v, "%s %s: all_to_all, all_to_allv and its start/wait (uneven, empty and "
              "spaced blocks), 5 dtypes, n=%zu", m->name, label, n);
        if (c) check_reduce(c, m, n, &v);
        agree(&v, "%s %s: reduce to every root, 5 dtypes x 3 ops, in and out of place, n=%zu",
              m->name, label, n);
        if (c) check_broadcast(c, m, n, &v);
        agree(&v, "%s %s: broadcast from every root, 5 dtypes, n=%zu", m->name, label, n);
        if (c) check_send_recv(c, m, n, &v);
        agree(&v, "%s %s: send/recv rings both ways in a group, and in two brackets "
              "left in flight then waited for, n=%zu", m->name, label, n);
    }
    if (c && gl_comm_size(c) == 2)
        check_bf16_rounding(c, m, &v);
    agree(&v, "%s %s: bf16 sums round to nearest even (2-member groups)", m->name, label);
}

/* The suite on every group of one layout. */
static void layout_suite(const gl_boot *b, const mem *m, gl_comm_kind kind, int tp,
                         int cp, int pp)
{
    gl_grid_spec spec = { .tp = tp, .cp = cp, .pp = pp };
    gl_groups *g = gl_groups_create(b, &spec, kind);
    int *members = gl_malloc(sizeof(int) * (size_t)b->size);
    char label[128];
    struct { gl_axis a; gl_comm *c; } ax[] = {
        { GL_AXIS_TP, g->tp }, { GL_AXIS_CP, g->cp }, { GL_AXIS_DP, g->dp },
        { GL_AXIS_PP, g->pp }, { GL_AXIS_DP_CP, g->dp_cp }, { GL_AXIS_MP, g->mp },
    };
    for (size_t i = 0; i < sizeof ax / sizeof ax[0]; i++) {
        int k = gl_grid_group(&g->spec, ax[i].a, b->rank, members);
        if (k == 1 && ax[i].a != GL_AXIS_TP)
            continue;   /* groups of one: covered by the TP=1 cases */
        snprintf(label, sizeof label, "TP=%d CP=%d PP=%d DP=%d %s group",
                 g->spec.tp, g->spec.cp, g->spec.pp, g->spec.dp, gl_axis_name(ax[i].a));
        suite(ax[i].c, m, label, members, k);
    }
    if (g->spec.pp > 1) {
        int k = gl_grid_embd_group(&g->spec, b->rank, members);
        snprintf(label, sizeof label, "TP=%d CP=%d PP=%d DP=%d embd group",
                 g->spec.tp, g->spec.cp, g->spec.pp, g->spec.dp);
        verdict v = { 0, "" };
        if ((k == 0) != (g->embd == NULL))
            fail(&v, "embd membership: grid says %d members, comm %p", k, (void *)g->embd);
        agree(&v, "%s %s: only first and last stages are members", m->name, label);
        suite(g->embd, m, label, members, k);
    }
    gl_groups_free(g);
    free(members);
}

static void run_all(const gl_boot *b, const mem *m, gl_comm_kind kind, gl_comm *world)
{
    int W = b->size, *members = gl_malloc(sizeof(int) * (size_t)W);
    for (int i = 0; i < W; i++)
        members[i] = i;
    suite(world, m, "world", members, W);
    free(members);
    if (W >= 2)
        layout_suite(b, m, kind, 2, 1, W >= 4 ? 2 : 1);
    if (W >= 4)
        layout_suite(b, m, kind, 1, 2, W / 2);
    if (W >= 8)
        layout_suite(b, m, kind, 2, 2, 1);
}

int main(int argc, char **argv)
{
    gl_boot b;
    gl_log_set_program("comm-test");
    gl_boot_init(&argc, &argv, &b);
    tap_quiet(b.rank != 0);
    plan(NO_PLAN);
    diag("%d ranks", b.size);

    ok(gl_dtype_size(GL_DT_F32) == 4 && gl_dtype_size(GL_DT_BF16) == 2 &&
       gl_dtype_size(GL_DT_F64) == 8 && gl_dtype_size(GL_DT_I32) == 4 &&
       gl_dtype_size(GL_DT_I64) == 8 && gl_dtype_size(GL_DT_U8) == 1,
       "gl_dtype_size");
    ok(!strcmp(gl_dtype_name(GL_DT_BF16), "bf16") && !strcmp(gl_dtype_name(GL_DT_I64), "i64"),
       "gl_dtype_name");

    gl_comm *world = gl_comm_mpi(MPI_COMM_WORLD, "world");
    ok(gl_comm_kind_of(world) == GL_COMM_MPI && !strcmp(gl_comm_name(world), "world"),
       "an MPI group knows its back end and name");
    run_all(&b, &host_mem, GL_COMM_MPI, world);
    gl_comm_free(world);

    /* NCCL: only where every rank has a GPU of its own. */
    int have = 0, all = 0;
#ifdef GL_HAVE_NCCL
    int ngpu = 0;
    if (cudaGetDeviceCount(&ngpu) != cudaSuccess)
        ngpu = 0;
    cudaGetLastError();
    have = ngpu >= b.local_size;
#endif
    MPI_Allreduce(&have, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all) {
#ifdef GL_HAVE_NCCL
        skip(1, "NCCL back end: not every rank has a GPU of its own");
#else
        skip(1, "NCCL back end: built without CUDA");
#endif
    } else {
#ifdef GL_HAVE_CUDA
        gl_boot_pick_gpu(&b);
        cudaStream_t st;
        cuda_ck(cudaStreamCreate(&st), "cudaStreamCreate");
        mem dev = { "nccl", st, cuda_alloc, cuda_put, cuda_get, cuda_release };
        gl_groups *g = gl_groups_create(&b, &(gl_grid_spec){ .tp = 1 }, GL_COMM_NCCL);
        ok(gl_comm_kind_of(g->world) == GL_COMM_NCCL, "an NCCL group knows its back end");
        run_all(&b, &dev, GL_COMM_NCCL, g->world);
        gl_groups_free(g);
        cudaStreamDestroy(st);
#endif
    }

    int rc = done_testing();
    gl_boot_finalize(&b);
    return rc;
}
