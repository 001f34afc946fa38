/*
 * ops-cuda.c: every operation of the CUDA back end against the CPU
 * reference back end (src/device/ops_cpu.c), on random inputs.
 *
 * Both devices see the same numbers: inputs are drawn in fp32, rounded to
 * bf16 on the host, and the rounded values are what the CPU gets (as fp32)
 * and what the GPU gets (as bf16).  GPU outputs are poisoned with 0xFF
 * bytes (NaN in bf16 and fp32) before each call, so an element a kernel
 * fails to write shows up as NaN.  Tolerances follow from bf16: a bf16
 * output carries a relative rounding error up to 2^-8; products that
 * round intermediates (attention's probabilities) are compared against
 * the largest reference value.  Shapes include odd sizes and unaligned
 * views (the scalar fallbacks), and the real ones of the 1.5B model
 * (h = 2048, S = 4096, 32 query heads over 8 kv heads, D = 64 and 128).
 *
 * FP8: quantization, amaxes and scale updates must match the CPU's
 * exact emulation bit for bit (specials included: NaN, infinities, -0,
 * subnormals, ties, saturation); FP8 products are compared within a
 * bound that follows from the tensor cores' accumulation (test_gemm_fp8).
 *
 * Mixture of experts (test_moe): the routing's integer arrays must match
 * the CPU's exactly (ties, capacity, padding included), its weights to
 * fp32 rounding; every later op runs on the CPU's map uploaded, so that
 * each failure names its own op.
 *
 * With GL_OPS_CUDA_BENCH=1 in the environment it also times the main
 * kernels at the model's shapes and prints the rates as diagnostics;
 * GL_OPS_CUDA_QUICK=1 leaves out the large shapes (for runs under
 * compute-sanitizer).
 */
#include <config.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "attn_cudnn.h"
#include "base/log.h"
#include "base/philox.h"
#include "device/fp8.h"
#include "device/ops.h"
#include "gpu-util.h"
#include "tap.h"

/* ---- numbers ---- */

/* n fp32 values uniform in [lo, hi) (not rounded to bf16). */
static float *rand_f32(size_t n, float lo, float hi)
{
    float *x = gl_malloc(n * sizeof *x + 1);
    for (size_t i = 0; i < n; i++)
        x[i] = lo + (float)urand() * (hi - lo);
    return x;
}

/* ---- comparison ---- */

/* rows x cols elements at strides ldg (got) and ldw (want): passes when
 * every |got - want| <= atol * max|want| + rtol |want| and nothing is NaN.
 * Where the reference is all zeros (attention's dq, dk for one token,
 * where dP - D cancels exactly) max|want| is replaced by 1, the scale of
 * the test's inputs, since the GPU's fp32 cancellation leaves ~1e-7.
 * Prints the worst element (see cmp2d_env in t/gpu-util.h). */
static int cmp2d(const char *what, const float *got, int ldg, const float *want,
                 int ldw, long rows, long cols, double rtol, double atol)
{
    return cmp2d_env("GL_OPS_CUDA_VERBOSE", what, got, ldg, want, ldw, rows,
                     cols, rtol, atol, 0);
}

static int cmp(const char *what, const float *got, const float *want, long n,
               double rtol, double atol)
{
    return cmp2d(what, got, 0, want, 0, 1, n, rtol, atol);
}

/* Relative tolerances for a bf16 result of fp32 math: two half-ulps. */
#define BF_RTOL (1.0 / 128)

/* ---- the tests ---- */

static void test_memory(void)
{
    size_t in0, pk0, tot;
    G->ops->mem_info(G, &in0, &pk0, &tot);
    float *p = G->ops->alloc(G, 3000 * 4);
    size_t in1, pk1;
    G->ops->mem_info(G, &in1, &pk1, &tot);
    ok(in1 == in0 + 12000 && pk1 >= in1 && tot > in1,
       "mem_info counts an allocation (in use %zu -> %zu, total %zu)", in0,
       in1, tot);
    float h[3000];
    G->ops->download(G, h, p, sizeof h);
    int zero = 1;
    for (int i = 0; i < 3000; i++)
        zero &= h[i] == 0;
    ok(zero, "alloc returns zeroed memory");
    for (int i = 0; i < 3000; i++)
        h[i] = (float)i;
    G->ops->upload(G, p, h, sizeof h);
    G->ops->copy(G, p, p + 1000, 1000 * 4);       /* p[0..1000) = 1000.. */
    G->ops->zero(G, p + 2000, 1000 * 4);
    G->ops->download(G, h, p, sizeof h);
    ok(h[0] == 1000 && h[999] == 1999 && h[1000] == 1000 && h[1999] == 1999 &&
       h[2000] == 0 && h[2999] == 0, "copy and zero");
    G->ops->free(G, p);
    G->ops->mem_info(G, &in1, &pk1, &tot);
    ok(in1 == in0, "free returns the bytes (%zu in use)", in1);
}

static void test_casts(size_t n, size_t off)
{
    float *x = rand_f32(n + off, -3, 3);
    x[off] = 1.00390625f;          /* halfway between two bf16: to even */
    x[off + 1] = 1.01171875f;      /* halfway, rounds up to even */
    float *gx = g_f32(x, n + off);
    uint16_t *gb = G->ops->alloc(G, (n + off) * 2);
    float *gy = g_f32(NULL, n + off);
    g_poison(gb, (n + off) * 2);
    g_poison(gy, (n + off) * 4);
    G->ops->to_act(G, gb + off, gx + off, n);
    G->ops->to_f32(G, gy + off, gb + off, n);
    float *y = dl_f32(gy + off, n);
    long bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += y[i] != round_bf(x[off + i]);
    ok(bad == 0, "to_act/to_f32 round to nearest even, n=%zu offset %zu (%ld wrong)",
       n, off, bad);
    G->ops->free(G, gx);
    G->ops->free(G, gb);
    G->ops->free(G, gy);
    free(x);
    free(y);
}

static void test_add(size_t n, size_t off)
{
    float *x = rand_bf(n + off, -2, 2), *r = rand_bf(n + off, -2, 2);
    void *gx = g_act(x, n + off), *gr = g_act(r, n + off);
    float *cx = c_buf(x, n + off), *cr = c_buf(r, n + off);
    /* in place into x: y aliases x */
    G->ops->add(G, (uint16_t *)gx + off, (uint16_t *)gx + off,
                (uint16_t *)gr + off, n);
    C->ops->add(C, cx + off, cx + off, cr + off, n);
    float *y = dl_act((uint16_t *)gx + off, n);
    char name[96];
    snprintf(name, sizeof name, "add n=%zu offset %zu (in place)", n, off);
    cmp(name, y, cx + off, (long)n, BF_RTOL, 0);
    G->ops->free(G, gx);
    G->ops->free(G, gr);
    C->ops->free(C, cx);
    C->ops->free(C, cr);
    free(x);
    free(r);
    free(y);
}

/* pad > 0 gives the operands odd row strides (unaligned rows). */
static void test_gemm(int ta, int tb, int m, int n, int k, int f32out,
                      float alpha, float beta, int pad)
{
    int lda = (ta ? m : k) + 3 * pad, ldb = (tb ? k : n) + pad, ldc = n + 2 * pad;
    long ar = ta ? k : m, br = tb ? n : k;
    float *a = rand_bf((size_t)ar * lda, -1, 1), *b = rand_bf((size_t)br * ldb, -1, 1);
    float *c0 = f32out ? rand_f32((size_t)m * ldc, -1, 1) : rand_bf((size_t)m * ldc, -1, 1);
    void *ga = g_act(a, (size_t)ar * lda), *gb = g_act(b, (size_t)br * ldb);
    void *gc = f32out ? (void *)g_f32(c0, (size_t)m * ldc) : g_act(c0, (size_t)m * ldc);
    float *ca = c_buf(a, (size_t)ar * lda), *cb = c_buf(b, (size_t)br * ldb);
    float *cc = c_buf(c0, (size_t)m * ldc);
    if (beta == 0)
        g_poison(gc, (size_t)m * ldc * (f32out ? 4 : 2));
    G->ops->gemm(G, ta, tb, m, n, k, alpha, ga, lda, gb, ldb, beta, gc,
                 f32out ? GL_DT_F32 : GL_DT_BF16, ldc);
    C->ops->gemm(C, ta, tb, m, n, k, alpha, ca, lda, cb, ldb, beta, cc,
                 GL_DT_F32, ldc);
    float *got = f32out ? dl_f32(gc, (size_t)m * ldc) : dl_act(gc, (size_t)m * ldc);
    char name[128];
    snprintf(name, sizeof name, "gemm %c%c m=%d n=%d k=%d %s alpha=%g beta=%g%s",
             ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, f32out ? "f32" : "bf16",
             alpha, beta, pad ? " (odd strides)" : "");
    /* fp32 accumulation of k bf16 products: differs from CBLAS by
     * summation order only; a bf16 output adds its rounding. */
    cmp2d(name, got, ldc, cc, ldc, m, n, f32out ? 1e-5 : BF_RTOL, 1e-5 * sqrt(k));
    G->ops->free(G, ga);
    G->ops->free(G, gb);
    G->ops->free(G, gc);
    C->ops->free(C, ca);
    C->ops->free(C, cb);
    C->ops->free(C, cc);
    free(a);
    free(b);
    free(c0);
    free(got);
}

static void test_rmsnorm(int n, int h, int acc)
{
    size_t nh = (size_t)n * h;
    float *x = rand_bf(nh, -2, 2), *w = rand_bf(h, 0.5f, 1.5f);
    float *dy = rand_bf(nh, -1, 1), *dx0 = rand_bf(nh, -1, 1);
    float *dw0 = rand_f32(h, -1, 1);
    void *gx = g_act(x, nh), *gw = g_act(w, h), *gy = g_act(x, nh);
    void *gdy = g_act(dy, nh), *gdx = g_act(dx0, nh);
    float *grs = g_f32(NULL, n), *gdw = g_f32(dw0, h);
    float *cx = c_buf(x, nh), *cw = c_buf(w, h), *cy = c_buf(NULL, nh);
    float *cdy = c_buf(dy, nh), *cdx = c_buf(dx0, nh), *crs = c_buf(NULL, n);
    float *cdw = c_buf(dw0, h);
    g_poison(gy, nh * 2);
    g_poison(grs, n * 4);
    if (!acc)
        g_poison(gdx, nh * 2);
    G->ops->rmsnorm_fwd(G, gy, grs, gx, gw, n, h, 1e-5f);
    C->ops->rmsnorm_fwd(C, cy, crs, cx, cw, n, h, 1e-5f);
    /* backward from the CPU's rstd on both sides */
    G->ops->upload(G, grs, crs, n * 4);
    G->ops->rmsnorm_bwd(G, gdx, gdw, gdy, gx, gw, grs, n, h, acc);
    C->ops->rmsnorm_bwd(C, cdx, cdw, cdy, cx, cw, crs, n, h, acc);
    char name[96];
    float *y = dl_act(gy, nh), *dx = dl_act(gdx, nh), *dw = dl_f32(gdw, h);
    snprintf(name, sizeof name, "rmsnorm_fwd n=%d h=%d", n, h);
    cmp(name, y, cy, (long)nh, BF_RTOL, 1e-3);
    snprintf(name, sizeof name, "rmsnorm_bwd dx n=%d h=%d%s", n, h,
             acc ? " (accumulate)" : "");
    cmp(name, dx, cdx, (long)nh, BF_RTOL, 2e-3);
    snprintf(name, sizeof name, "rmsnorm_bwd dw n=%d h=%d (fp32, +=)", n, h);
    cmp(name, dw, cdw, h, 1e-4, 1e-5);
    /* the same call again on fresh buffers gives the same bits (the dw
     * partial sums are added in a fixed order, not by atomics) */
    void *gdx2 = g_act(dx0, nh);
    float *gdw2 = g_f32(dw0, h);
    if (!acc)
        g_poison(gdx2, nh * 2);
    G->ops->rmsnorm_bwd(G, gdx2, gdw2, gdy, gx, gw, grs, n, h, acc);
    float *dx2 = dl_act(gdx2, nh), *dw2 = dl_f32(gdw2, h);
    ok(!memcmp(dx2, dx, nh * 4) && !memcmp(dw2, dw, (size_t)h * 4),
       "rmsnorm_bwd n=%d h=%d%s: the same bits again", n, h,
       acc ? " (accumulate)" : "");
    G->ops->free(G, gdx2);
    G->ops->free(G, gdw2);
    free(dx2);
    free(dw2);
    /* rstd of the forward itself */
    G->ops->rmsnorm_fwd(G, gy, grs, gx, gw, n, h, 1e-5f);
    float *rs = dl_f32(grs, n);
    snprintf(name, sizeof name, "rmsnorm_fwd rstd n=%d h=%d", n, h);
    cmp(name, rs, crs, n, 1e-5, 0);
    void *gp[] = {gx, gw, gy, gdy, gdx, grs, gdw};
    for (size_t i = 0; i < sizeof gp / sizeof gp[0]; i++)
        G->ops->free(G, gp[i]);
    float *cp[] = {cx, cw, cy, cdy, cdx, crs, cdw};
    for (size_t i = 0; i < sizeof cp / sizeof cp[0]; i++)
        C->ops->free(C, cp[i]);
    float *hp[] = {x, w, dy, dx0, dw0, y, dx, dw, rs};
    for (size_t i = 0; i < sizeof hp / sizeof hp[0]; i++)
        free(hp[i]);
}

static void test_rope(int B, int S, int H, int D, int extra)
{
    int ld = H * D + extra;
    size_t nx = (size_t)B * S * ld;
    float *x = rand_bf(nx, -2, 2);
    float *cs = gl_malloc((size_t)S * D / 2 * 4), *sn = gl_malloc((size_t)S * D / 2 * 4);
    for (int s = 0; s < S; s++)
        for (int i = 0; i < D / 2; i++) {
            double th = s * pow(10000.0, -2.0 * i / D);
            cs[(size_t)s * D / 2 + i] = (float)cos(th);
            sn[(size_t)s * D / 2 + i] = (float)sin(th);
        }
    void *gx = g_act(x, nx);
    float *gc = g_f32(cs, (size_t)S * D / 2), *gs = g_f32(sn, (size_t)S * D / 2);
    float *cx = c_buf(x, nx);
    char name[96];
    G->ops->rope_fwd(G, gx, ld, B, S, H, D, gc, gs);
    C->ops->rope_fwd(C, cx, ld, B, S, H, D, cs, sn);
    float *y = dl_act(gx, nx);
    /* the whole rows, so columns past the heads must be untouched */
    snprintf(name, sizeof name, "rope_fwd B=%d S=%d H=%d D=%d ld=%d", B, S, H, D, ld);
    cmp(name, y, cx, (long)nx, BF_RTOL, 1e-3);
    free(y);
    /* backward on the same (bf16) values on both sides */
    float *xr = dl_act(gx, nx);
    memcpy(cx, xr, nx * 4);
    G->ops->rope_bwd(G, gx, ld, B, S, H, D, gc, gs);
    C->ops->rope_bwd(C, cx, ld, B, S, H, D, cs, sn);
    y = dl_act(gx, nx);
    snprintf(name, sizeof name, "rope_bwd B=%d S=%d H=%d D=%d ld=%d", B, S, H, D, ld);
    cmp(name, y, cx, (long)nx, BF_RTOL, 1e-3);
    G->ops->free(G, gx);
    G->ops->free(G, gc);
    G->ops->free(G, gs);
    C->ops->free(C, cx);
    free(x);
    free(cs);
    free(sn);
    free(y);
    free(xr);
}

static void test_swiglu(int n, int f)
{
    size_t n2 = (size_t)n * 2 * f, n1 = (size_t)n * f;
    float *gu = rand_bf(n2, -4, 4), *dy = rand_bf(n1, -1, 1);
    void *ggu = g_act(gu, n2), *gy = g_act(dy, n1), *gdy = g_act(dy, n1);
    void *gdgu = g_act(gu, n2);
    float *cgu = c_buf(gu, n2), *cy = c_buf(NULL, n1), *cdy = c_buf(dy, n1);
    float *cdgu = c_buf(NULL, n2);
    g_poison(gy, n1 * 2);
    G->ops->swiglu_fwd(G, gy, ggu, n, f);
    C->ops->swiglu_fwd(C, cy, cgu, n, f);
    /* backward in place: dgu aliases (a copy of) gu */
    G->ops->swiglu_bwd(G, gdgu, gdy, gdgu, n, f);
    C->ops->swiglu_bwd(C, cdgu, cdy, cgu, n, f);
    float *y = dl_act(gy, n1), *dg = dl_act(gdgu, n2);
    char name[96];
    snprintf(name, sizeof name, "swiglu_fwd n=%d f=%d", n, f);
    cmp(name, y, cy, (long)n1, BF_RTOL, 1e-3);
    snprintf(name, sizeof name, "swiglu_bwd n=%d f=%d (dgu aliases gu)", n, f);
    cmp(name, dg, cdgu, (long)n2, BF_RTOL, 1e-3);
    G->ops->free(G, ggu);
    G->ops->free(G, gy);
    G->ops->free(G, gdy);
    G->ops->free(G, gdgu);
    C->ops->free(C, cgu);
    C->ops->free(C, cy);
    C->ops->free(C, cdy);
    C->ops->free(C, cdgu);
    free(gu);
    free(dy);
    free(y);
    free(dg);
}

static void test_embed(int n, int h, long vocab_start, int vl, int idmax)
{
    size_t nt = (size_t)vl * h, nh = (size_t)n * h;
    float *tab = rand_bf(nt, -1, 1), *dy = rand_bf(nh, -1, 1);
    float *dt0 = rand_f32(nt, -1, 1);
    int32_t *ids = gl_malloc(n * sizeof *ids);
    for (int i = 0; i < n; i++)     /* many repeats: 1/3 from 5 hot ids */
        ids[i] = i % 3 ? (int32_t)(urand() * idmax)
                       : (int32_t)(vocab_start + (long)(urand() * 5));
    void *gt = g_act(tab, nt), *gy = g_act(dy, nh), *gdy = g_act(dy, nh);
    float *gdt = g_f32(dt0, nt);
    int32_t *gid = G->ops->alloc(G, n * 4);
    G->ops->upload(G, gid, ids, n * 4);
    float *ct = c_buf(tab, nt), *cy = c_buf(NULL, nh), *cdy = c_buf(dy, nh);
    float *cdt = c_buf(dt0, nt);
    g_poison(gy, nh * 2);
    G->ops->embed_fwd(G, gy, gt, gid, n, h, vocab_start, vl);
    C->ops->embed_fwd(C, cy, ct, ids, n, h, vocab_start, vl);
    G->ops->embed_bwd(G, gdt, gdy, gid, n, h, vocab_start, vl);
    C->ops->embed_bwd(C, cdt, cdy, ids, n, h, vocab_start, vl);
    float *y = dl_act(gy, nh), *dt = dl_f32(gdt, nt);
    char name[96];
    snprintf(name, sizeof name, "embed_fwd n=%d h=%d shard [%ld, +%d)", n, h,
             vocab_start, vl);
    cmp(name, y, cy, (long)nh, 0, 0);
    snprintf(name, sizeof name, "embed_bwd n=%d h=%d (fp32, +=)", n, h);
    cmp(name, dt, cdt, (long)nt, 1e-5, 1e-6);
    /* determinism: the same call again from the same start, same bits */
    G->ops->upload(G, gdt, dt0, nt * 4);
    G->ops->embed_bwd(G, gdt, gdy, gid, n, h, vocab_start, vl);
    float *dt2 = dl_f32(gdt, nt);
    ok(memcmp(dt, dt2, nt * 4) == 0, "embed_bwd is deterministic");
    void *gp[] = {gt, gy, gdy, gdt, gid};
    for (size_t i = 0; i < 5; i++)
        G->ops->free(G, gp[i]);
    C->ops->free(C, ct);
    C->ops->free(C, cy);
    C->ops->free(C, cdy);
    C->ops->free(C, cdt);
    free(tab);
    free(dy);
    free(dt0);
    free(ids);
    free(y);
    free(dt);
    free(dt2);
}

static void test_ce(int n, int vl, int valid, int ld, long vocab_start,
                    long vocab_total)
{
    size_t nz = (size_t)n * ld;
    float *z = rand_bf(nz, -8, 8);
    int32_t *tg = gl_malloc(n * sizeof *tg);
    for (int i = 0; i < n; i++)
        tg[i] = i % 2 ? (int32_t)(vocab_start + (long)(urand() * valid))
                      : (int32_t)(urand() * vocab_total);
    float *gsc = rand_f32(n, 0, 1);
    gsc[0] = 0;                     /* a masked token */
    void *gz = g_act(z, nz);
    int32_t *gt = G->ops->alloc(G, n * 4);
    G->ops->upload(G, gt, tg, n * 4);
    float *gmax = g_f32(NULL, n), *gst = g_f32(NULL, 2 * n), *gl = g_f32(NULL, n);
    float *ggs = g_f32(gsc, n);
    float *cz = c_buf(z, nz), *cmax = c_buf(NULL, n), *cst = c_buf(NULL, 2 * n);
    float *cl = c_buf(NULL, n);
    g_poison(gmax, n * 4);
    g_poison(gst, n * 8);
    g_poison(gl, n * 4);
    G->ops->ce_max(G, gmax, gz, ld, n, valid);
    C->ops->ce_max(C, cmax, cz, ld, n, valid);
    G->ops->ce_sum(G, gst, gz, ld, gt, gmax, n, valid, vocab_start);
    C->ops->ce_sum(C, cst, cz, ld, tg, cmax, n, valid, vocab_start);
    G->ops->ce_bwd(G, gl, gz, ld, gt, gmax, gst, ggs, n, vl, valid, vocab_start);
    C->ops->ce_bwd(C, cl, cz, ld, tg, cmax, cst, gsc, n, vl, valid, vocab_start);
    float *mx = dl_f32(gmax, n), *st = dl_f32(gst, 2 * n), *ls = dl_f32(gl, n);
    float *gz2 = dl_act(gz, nz);
    char name[128];
    snprintf(name, sizeof name, "ce_max n=%d vl=%d valid=%d ld=%d", n, vl, valid, ld);
    cmp(name, mx, cmax, n, 0, 0);
    snprintf(name, sizeof name, "ce_sum n=%d vl=%d (sum, target logit)", n, vl);
    cmp(name, st, cst, 2 * n, 1e-4, 0);
    snprintf(name, sizeof name, "ce_bwd loss n=%d vl=%d", n, vl);
    cmp(name, ls, cl, n, 1e-4, 1e-4);
    /* the whole rows: pad columns zeroed, columns past vl untouched */
    snprintf(name, sizeof name, "ce_bwd gradient in place n=%d vl=%d ld=%d", n, vl, ld);
    cmp(name, gz2, cz, (long)nz, BF_RTOL, 1e-4);
    void *gp[] = {gz, gt, gmax, gst, gl, ggs};
    for (size_t i = 0; i < 6; i++)
        G->ops->free(G, gp[i]);
    C->ops->free(C, cz);
    C->ops->free(C, cmax);
    C->ops->free(C, cst);
    C->ops->free(C, cl);
    free(z);
    free(tg);
    free(gsc);
    free(mx);
    free(st);
    free(ls);
    free(gz2);
}

static void test_f32_helpers(size_t n)
{
    float *x = rand_f32(n, -1, 1), *w = rand_f32(n, -1, 1);
    float *gx = g_f32(x, n), *gw = g_f32(w, n), *go = g_f32(NULL, 4);
    float *cx = c_buf(x, n), *cw = c_buf(w, n);
    float init[4] = {0.5f, 0.25f, 0, 0}, out[4];
    G->ops->upload(G, go, init, 16);
    float co[4] = {0.5f, 0.25f, 0, 0};
    G->ops->sumsq_f32(G, go, gx, n);
    C->ops->sumsq_f32(C, co, cx, n);
    G->ops->dot_f32(G, go + 1, gx, gw, n);
    C->ops->dot_f32(C, co + 1, cx, cw, n);
    G->ops->nonfinite_f32(G, go + 2, gx, n);
    G->ops->download(G, out, go, 16);
    is_double(out[0], co[0], 1e-5 * co[0], "sumsq_f32 n=%zu (+=)", n);
    is_double(out[1], co[1], 1e-5 * sqrt((double)n), "dot_f32 n=%zu (+=)", n);
    ok(out[2] == 0, "nonfinite_f32 leaves out alone on finite data");
    float bad[2] = {NAN, INFINITY};
    for (int i = 0; i < 2; i++) {
        size_t at = i ? n / 3 : n - 1;
        G->ops->upload(G, gx + at, &bad[i], 4);
        G->ops->zero(G, go + 2, 4);
        G->ops->nonfinite_f32(G, go + 2, gx, n);
        G->ops->download(G, out, go, 16);
        ok(out[2] == 1, "nonfinite_f32 finds %s at %zu", i ? "Inf" : "NaN", at);
        G->ops->upload(G, gx + at, x + at, 4);
    }
    /* sumsq reads float4s from x's first 16-byte boundary: starts off
     * it, and counts that leave a head and a tail of 1 to 3 elements */
    for (size_t off = 1; off < 4 && off < n; off++) {
        float z[2] = {0, 0};
        G->ops->upload(G, go, z, 8);
        G->ops->sumsq_f32(G, go, gx + off, n - off);
        C->ops->sumsq_f32(C, z + 1, cx + off, n - off);
        G->ops->download(G, out, go, 8);
        is_double(out[0], z[1], 1e-5 * z[1], "sumsq_f32 n=%zu from element %zu", n - off, off);
    }
    G->ops->scale_f32(G, gx, -0.75f, n);
    C->ops->scale_f32(C, cx, -0.75f, n);
    float *y = dl_f32(gx, n);
    cmp("scale_f32", y, cx, (long)n, 0, 0);
    /* add_f32 (the CP ring's dK/dV sums): one rounding per element, the
     * CPU's bits */
    G->ops->add_f32(G, gx, gw, n);
    C->ops->add_f32(C, cx, cw, n);
    float *ya = dl_f32(gx, n);
    cmp("add_f32", ya, cx, (long)n, 0, 0);
    free(ya);
    G->ops->free(G, gx);
    G->ops->free(G, gw);
    G->ops->free(G, go);
    C->ops->free(C, cx);
    C->ops->free(C, cw);
    free(x);
    free(w);
    free(y);
}

static void test_adamw(void)
{
    /* segment 3 lies one element past 16-byte boundaries: the kernel's
     * element-wise path; the others its 16-byte one, with a tail */
    enum { NS = 4 };
    size_t cnt[NS] = {1, 1000003, 777, 40003}, sk[NS] = {0, 0, 0, 1};
    float wd[NS] = {0.1f, 0.0f, 0.05f, 0.02f};
    gl_adamw_seg gs[NS], cs[NS];
    float *hm[NS], *hg[NS], *h1[NS], *h2[NS];
    for (int s = 0; s < NS; s++) {
        size_t n = cnt[s], k = sk[s];
        hm[s] = rand_f32(n + k, -1, 1);
        hg[s] = rand_f32(n + k, -0.1f, 0.1f);
        h1[s] = rand_f32(n + k, -0.01f, 0.01f);
        h2[s] = rand_f32(n + k, 0, 0.001f);
        gs[s] = (gl_adamw_seg){g_f32(hm[s], n + k) + k, g_f32(hg[s], n + k) + k,
                               g_f32(h1[s], n + k) + k, g_f32(h2[s], n + k) + k,
                               s == 1 ? NULL : (uint16_t *)G->ops->alloc(G, (n + k) * 2) + k,
                               n, wd[s]};
        hm[s] += k;
        hg[s] += k;
        h1[s] += k;
        h2[s] += k;
        cs[s] = (gl_adamw_seg){c_buf(hm[s], n), c_buf(hg[s], n), c_buf(h1[s], n),
                               c_buf(h2[s], n), s == 1 ? NULL : c_buf(NULL, n), n,
                               wd[s]};
        if (gs[s].act_out)
            g_poison(gs[s].act_out, n * 2);
    }
    gl_adamw_hyper hp = {3e-3f, 0.9f, 0.95f, 1e-8f, 0.5f, 3};
    G->ops->adamw(G, gs, NS, &hp);
    C->ops->adamw(C, cs, NS, &hp);
    /* --decoupled-lr's steps (src/train/optim.c): two lists in turn, each
     * with its rest rate, the second round reusing the tables the first
     * uploaded (adamw.cu keeps the last two) */
    for (long step = 4; step <= 5; step++) {
        gl_adamw_hyper first = hp, rest = hp;
        first.step = rest.step = step;
        rest.lr = 1e-3f;
        G->ops->adamw(G, gs, 1, &first);
        C->ops->adamw(C, cs, 1, &first);
        G->ops->adamw(G, gs + 1, NS - 1, &rest);
        C->ops->adamw(C, cs + 1, NS - 1, &rest);
    }
    for (int s = 0; s < NS; s++) {
        size_t n = cnt[s];
        char name[96];
        float *w = dl_f32(gs[s].master, n), *m = dl_f32(gs[s].m, n);
        float *v = dl_f32(gs[s].v, n);
        snprintf(name, sizeof name, "adamw segment %d (n=%zu) master", s, n);
        cmp(name, w, cs[s].master, (long)n, 1e-6, 1e-7);
        /* m may cancel (b1 m against (1 - b1) g): an absolute floor */
        snprintf(name, sizeof name, "adamw segment %d m", s);
        cmp(name, m, cs[s].m, (long)n, 1e-6, 1e-6);
        snprintf(name, sizeof name, "adamw segment %d v", s);
        cmp(name, v, cs[s].v, (long)n, 1e-6, 0);
        if (gs[s].act_out) {
            float *a = dl_act(gs[s].act_out, n);
            long bad = 0;
            for (size_t i = 0; i < n; i++)
                bad += fabsf(a[i] - round_bf(cs[s].master[i])) >
                       fabsf(cs[s].master[i]) / 128;
            ok(bad == 0, "adamw segment %d bf16 copy of the weights", s);
            free(a);
        }
        free(w);
        free(m);
        free(v);
        size_t k = sk[s];
        G->ops->free(G, gs[s].master - k);
        G->ops->free(G, (float *)gs[s].grad - k);
        G->ops->free(G, gs[s].m - k);
        G->ops->free(G, gs[s].v - k);
        G->ops->free(G, gs[s].act_out ? (uint16_t *)gs[s].act_out - k : NULL);
        C->ops->free(C, cs[s].master);
        C->ops->free(C, (void *)cs[s].grad);
        C->ops->free(C, cs[s].m);
        C->ops->free(C, cs[s].v);
        C->ops->free(C, cs[s].act_out);
        free(hm[s] - k);
        free(hg[s] - k);
        free(h1[s] - k);
        free(h2[s] - k);
    }
}

/*
 * Attention on a fused QKV buffer [B, S, (Hq + 2 Hkv) D] (the layout of
 * the model's QKV projection), so q, k, v are strided views.  The CPU
 * computes heads [0, cq) of the queries and [0, ckv) of the kv heads
 * (cq / ckv = Hq / Hkv), all of them for small shapes, the first group
 * only for the long ones, where its O(S^2 D) loops would take minutes.
 * Forward: the GPU runs all heads; outputs of the computed heads are
 * compared.  Backward: the GPU runs the same heads as the CPU (dk, dv of a
 * kv head sum its query heads', so both must see the same set).
 */
static void test_attn_dp(int B, int S, int Hq, int Hkv, int D, int cq,
                        const gl_attn_dropout *dp)
{
    int ckv = cq / (Hq / Hkv);
    int W = (Hq + 2 * Hkv) * D;
    size_t nqkv = (size_t)B * S * W, no = (size_t)B * S * Hq * D;
    float scale = 1.0f / sqrtf((float)D);
    float *qkv = rand_bf(nqkv, -1, 1), *dout = rand_bf(no, -1, 1);
    for (size_t r = 0; r < (size_t)B * S; r++)       /* sharper softmax */
        for (int i = 0; i < Hq * D; i++)
            qkv[r * W + i] = round_bf(qkv[r * W + i] * 4);
    void *gqkv = g_act(qkv, nqkv), *gdo = g_act(dout, no);
    void *go = G->ops->alloc(G, no * 2), *gd = G->ops->alloc(G, nqkv * 2);
    float *glse = g_f32(NULL, (size_t)B * Hq * S);
    uint16_t *gq = gqkv, *gk = gq + Hq * D, *gv = gk + Hkv * D;
    g_poison(go, no * 2);
    g_poison(glse, (size_t)B * Hq * S * 4);
    G->ops->attn_fwd(G, go, Hq * D, glse, gq, W, gk, W, gv, W, B, S, Hq, Hkv, D,
                     scale, dp);

    float *cqkv = c_buf(qkv, nqkv), *co = c_buf(NULL, no);
    float *cdo = c_buf(dout, no), *cd = c_buf(NULL, nqkv);
    float *clse = c_buf(NULL, (size_t)B * cq * S);
    float *cq_ = cqkv, *ck = cq_ + Hq * D, *cv = ck + Hkv * D;
    double t0 = gl_now();
    C->ops->attn_fwd(C, co, Hq * D, clse, cq_, W, ck, W, cv, W, B, S, cq, ckv,
                     D, scale, dp);
    double tc = gl_now() - t0;

    char name[160];
    float *o = dl_act(go, no), *lse = dl_f32(glse, (size_t)B * Hq * S);
    snprintf(name, sizeof name, "attn_fwd o   B=%d S=%d Hq=%d Hkv=%d D=%d (%d heads checked)%s",
             B, S, Hq, Hkv, D, cq, dp ? " dropout" : "");
    cmp2d(name, o, Hq * D, co, Hq * D, (long)B * S, cq * D, 0, 1e-2);
    int lse_ok = 1;
    for (int b = 0; b < B && lse_ok; b++) {
        snprintf(name, sizeof name, "attn_fwd lse B=%d S=%d D=%d batch %d", B, S, D, b);
        lse_ok = cmp(name, lse + (size_t)b * Hq * S, clse + (size_t)b * cq * S,
                     (long)cq * S, 1e-5, 1e-5);
    }
    /* every head written */
    long nan = 0;
    for (size_t i = 0; i < no; i++)
        nan += isnan(o[i]);
    for (size_t i = 0; i < (size_t)B * Hq * S; i++)
        nan += isnan(lse[i]);
    ok(nan == 0, "attn_fwd writes every output element and lse (%ld unwritten)", nan);

    /* backward: both from the CPU's o and lse, over heads [0, cq) */
    float *lsec = gl_malloc((size_t)B * cq * S * 4);
    memcpy(lsec, clse, (size_t)B * cq * S * 4);
    float *glse2 = g_f32(lsec, (size_t)B * cq * S);
    void *go2 = g_act(co, no);
    g_poison(gd, nqkv * 2);
    uint16_t *gdq = gd, *gdk = gdq + Hq * D, *gdv = gdk + Hkv * D;
    G->ops->attn_bwd(G, gdq, gdk, gdv, W, gdo, Hq * D, go2, Hq * D, glse2, gq, W,
                     gk, W, gv, W, B, S, cq, ckv, D, scale, dp);
    /* the CPU's o rounded as the GPU saw it */
    float *co_bf = dl_act(go2, no);
    memcpy(co, co_bf, no * 4);
    t0 = gl_now();
    C->ops->attn_bwd(C, cd, cd + Hq * D, cd + (Hq + Hkv) * D, W, cdo, Hq * D, co,
                     Hq * D, clse, cq_, W, ck, W, cv, W, B, S, cq, ckv, D, scale, dp);
    tc += gl_now() - t0;
    float *dg = dl_act(gd, nqkv);
    snprintf(name, sizeof name, "attn_bwd dq B=%d S=%d Hq=%d Hkv=%d D=%d%s", B, S,
             cq, ckv, D, dp ? " dropout" : "");
    cmp2d(name, dg, W, cd, W, (long)B * S, cq * D, 0, 2e-2);
    snprintf(name, sizeof name, "attn_bwd dk B=%d S=%d Hq=%d Hkv=%d D=%d%s", B, S,
             cq, ckv, D, dp ? " dropout" : "");
    cmp2d(name, dg + Hq * D, W, cd + Hq * D, W, (long)B * S, ckv * D, 0, 2e-2);
    snprintf(name, sizeof name, "attn_bwd dv B=%d S=%d Hq=%d Hkv=%d D=%d%s", B, S,
             cq, ckv, D, dp ? " dropout" : "");
    cmp2d(name, dg + (Hq + Hkv) * D, W, cd + (Hq + Hkv) * D, W, (long)B * S,
          ckv * D, 0, 2e-2);
    diag("  (CPU reference took %.1f s)", tc);

    G->ops->free(G, gqkv);
    G->ops->free(G, gdo);
    G->ops->free(G, go);
    G->ops->free(G, gd);
    G->ops->free(G, glse);
    G->ops->free(G, glse2);
    G->ops->free(G, go2);
    C->ops->free(C, cqkv);
    C->ops->free(C, co);
    C->ops->free(C, cdo);
    C->ops->free(C, cd);
    C->ops->free(C, clse);
    free(qkv);
    free(dout);
    free(o);
    free(lse);
    free(lsec);
    free(co_bf);
    free(dg);
}

static void test_attn(int B, int S, int Hq, int Hkv, int D, int cq)
{
    test_attn_dp(B, S, Hq, Hkv, D, cq, NULL);
}

/* With attention dropout p = 0.1: the kernels draw gl_attn_dropout's mask
 * (keyed by global sample b0 + b and head h0 + h of h0 + Hq + 2 heads),
 * as the CPU does.  Under GRIDLM_ATTENTION=auto this also runs the
 * fallback from cuDNN to the native kernels. */
static void test_attn_dropout(int B, int S, int Hq, int Hkv, int D, int cq,
                              long b0, long h0)
{
    gl_attn_dropout dp = { .seed = 42, .iteration = 5, .layer = 7, .site = 2,
                           .p = 0.1f, .b0 = b0, .h0 = h0, .heads = h0 + Hq + 2 };
    test_attn_dp(B, S, Hq, Hkv, D, cq, &dp);
}

/* The keep bit of probability (b, h, i, j) of dp's mask: the definition
 * of base/philox.h, which the CPU reference draws too. */
static int mask_kept(const gl_attn_dropout *dp, int S, int b, int h, int i, int j)
{
    uint64_t e = ((uint64_t)(dp->b0 + b) * (uint64_t)dp->heads +
                  (uint64_t)(dp->h0 + h)) * (uint64_t)S * (uint64_t)S +
                 (uint64_t)i * (uint64_t)S + (uint64_t)j;
    return gl_dropout_keep(dp->seed, dp->iteration,
                           gl_dropout_stream(dp->layer, dp->site), e,
                           gl_dropout_threshold(dp->p));
}

/* One read-out of the mask: got[n] times factor[n] must be want[n] (1 for
 * a kept visible probability, 0 for a dropped or masked one) within bf16
 * rounding.  Prints the first miss; returns the number of misses. */
static long mask_misses(const char *what, const float *got, const float *factor,
                        const unsigned char *want, size_t n, const long *where)
{
    long miss = 0;
    for (size_t i = 0; i < n; i++) {
        double r = (double)got[i] * factor[i];
        if (fabs(r - want[i]) <= 0.03)
            continue;
        if (miss++ == 0)
            diag("  %s: first miss at (b %ld, head %ld, query %ld, key %ld): "
                 "read %g, want %d", what, where[4 * i], where[4 * i + 1],
                 where[4 * i + 2], where[4 * i + 3], r, want[i]);
    }
    return miss;
}

/*
 * The attention-dropout mask itself, element by element, in each of the
 * three kernels that draw it (forward, dK/dV and dQ backward).  With
 * q = 0 every score is 0 and P_tu = 1 / (t + 1) for u <= t; inputs that
 * are one-hot over a window of D positions w .. w + D - 1 then make each
 * output element one probability times its keep factor K (1 / (1 - p)
 * or 0; 0 too where u > t or a position is past S):
 *   forward, v_u = e_(u - w):                  o_t[d] = K(t, w + d) / (t + 1)
 *   backward with o = 0 (so D_t = 0):
 *     do_t = v_u = e_0, k_u = e_(u - w):      dq_t[d] = scale K(t, w + d) / (t + 1)
 *     do_t = e_(t - w) for the query heads h = r (mod group) only:
 *                                             dv_u[d] = K_h(w + d, u) / (w + d + 1)
 *       (dv of a kv head sums its group's query heads: one r per call).
 * Every window of every (sample, head) is read and compared with
 * mask_kept, bit for bit.  S % 4 == 0 runs the kernels' grouped draws,
 * other S the per-element ones.
 */
static void test_attn_dropout_mask(int B, int S, int Hq, int Hkv, int D,
                                   long b0, long h0, long heads)
{
    gl_attn_dropout dp = { .seed = 0x0123456789abcdefULL, .iteration = 77,
                           .layer = 9, .site = 3, .p = 0.3f, .b0 = b0,
                           .h0 = h0, .heads = heads };
    int group = Hq / Hkv, W = (Hq + 2 * Hkv) * D;
    size_t ntok = (size_t)B * S, nqkv = ntok * W, no = ntok * Hq * D;
    float scale = 1.0f / sqrtf((float)D), kf = 1.0f / (1.0f - dp.p);
    float *qkv = gl_malloc(nqkv * sizeof *qkv), *dout = gl_malloc(no * sizeof *dout);
    float *lse = gl_malloc((size_t)B * Hq * S * sizeof *lse);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < Hq; h++)
            for (int t = 0; t < S; t++)
                lse[((size_t)b * Hq + h) * S + t] = logf((float)(t + 1));
    /* read-outs: one slot per (b, head, token, d) of o / dq / dv */
    size_t nr = ntok * Hq * D;
    float *factor = gl_malloc(nr * sizeof *factor);
    unsigned char *want = gl_malloc(nr);
    long *where = gl_malloc(nr * 4 * sizeof *where);
    float *zeros = c_buf(NULL, no);
    void *go = G->ops->alloc(G, no * 2), *gz = g_act(zeros, no);
    void *gd = G->ops->alloc(G, nqkv * 2);
    float *glse = g_f32(lse, (size_t)B * Hq * S);
    float *glse_out = g_f32(NULL, (size_t)B * Hq * S);
    long miss[3] = {0, 0, 0};
    char name[160];

    for (int w = 0; w < S; w += D) {
        /* forward: q = 0, k = 0, v_u = e_(u - w) */
        memset(qkv, 0, nqkv * sizeof *qkv);
        for (size_t tok = 0; tok < ntok; tok++) {
            int u = (int)(tok % S);
            for (int g = 0; g < Hkv; g++)
                if (u >= w && u < w + D)
                    qkv[tok * W + (Hq + Hkv + g) * D + (u - w)] = 1;
        }
        void *gqkv = g_act(qkv, nqkv);
        uint16_t *gq = gqkv, *gk = gq + Hq * D, *gv = gk + Hkv * D;
        G->ops->attn_fwd(G, go, Hq * D, glse_out, gq, W, gk, W, gv, W, B, S, Hq,
                         Hkv, D, scale, &dp);
        float *o = dl_act(go, no);
        size_t n = 0;
        for (int b = 0; b < B; b++)
            for (int t = 0; t < S; t++)
                for (int h = 0; h < Hq; h++)
                    for (int d = 0; d < D; d++, n++) {
                        int u = w + d;
                        factor[n] = (float)(t + 1) / kf;
                        want[n] = u < S && u <= t && mask_kept(&dp, S, b, h, t, u);
                        where[4 * n] = b, where[4 * n + 1] = h;
                        where[4 * n + 2] = t, where[4 * n + 3] = u;
                    }
        snprintf(name, sizeof name, "attn_fwd window %d", w);
        miss[0] += mask_misses(name, o, factor, want, nr, where);
        free(o);
        G->ops->free(G, gqkv);

        /* dq: q = 0, k_u = e_(u - w), v_u = do_t = e_0, o = 0 */
        memset(qkv, 0, nqkv * sizeof *qkv);
        memset(dout, 0, no * sizeof *dout);
        for (size_t tok = 0; tok < ntok; tok++) {
            int u = (int)(tok % S);
            for (int g = 0; g < Hkv; g++) {
                if (u >= w && u < w + D)
                    qkv[tok * W + (Hq + g) * D + (u - w)] = 1;
                qkv[tok * W + (Hq + Hkv + g) * D] = 1;
            }
            for (int h = 0; h < Hq; h++)
                dout[(tok * Hq + h) * D] = 1;
        }
        gqkv = g_act(qkv, nqkv);
        void *gdo = g_act(dout, no);
        gq = gqkv, gk = gq + Hq * D, gv = gk + Hkv * D;
        uint16_t *gdq = gd, *gdk = gdq + Hq * D, *gdv = gdk + Hkv * D;
        G->ops->attn_bwd(G, gdq, gdk, gdv, W, gdo, Hq * D, gz, Hq * D, glse, gq, W,
                         gk, W, gv, W, B, S, Hq, Hkv, D, scale, &dp);
        float *dg = dl_act(gd, nqkv), *dq = gl_malloc(nr * sizeof *dq);
        n = 0;
        for (size_t tok = 0; tok < ntok; tok++)
            for (int h = 0; h < Hq; h++)
                for (int d = 0; d < D; d++, n++) {
                    dq[n] = dg[tok * W + h * D + d];
                    factor[n] = (float)(tok % S + 1) / (kf * scale);
                }
        snprintf(name, sizeof name, "attn_bwd dq window %d", w);
        miss[1] += mask_misses(name, dq, factor, want, nr, where);
        free(dg);
        G->ops->free(G, gdo);

        /* dv: do_t = e_(t - w) on the heads r (mod group), one call per r */
        for (int r = 0; r < group; r++) {
            memset(dout, 0, no * sizeof *dout);
            for (size_t tok = 0; tok < ntok; tok++) {
                int t = (int)(tok % S);
                for (int h = r; h < Hq; h += group)
                    if (t >= w && t < w + D)
                        dout[(tok * Hq + h) * D + (t - w)] = 1;
            }
            gdo = g_act(dout, no);
            G->ops->attn_bwd(G, gdq, gdk, gdv, W, gdo, Hq * D, gz, Hq * D, glse,
                             gq, W, gk, W, gv, W, B, S, Hq, Hkv, D, scale, &dp);
            dg = dl_act(gd, nqkv);
            n = 0;
            for (int b = 0; b < B; b++)
                for (int u = 0; u < S; u++)
                    for (int g = 0; g < Hkv; g++)
                        for (int d = 0; d < D; d++, n++) {
                            int t = w + d, h = g * group + r;
                            dq[n] = dg[((size_t)b * S + u) * W + (Hq + Hkv + g) * D + d];
                            factor[n] = (float)(t + 1) / kf;
                            want[n] = t < S && u <= t && mask_kept(&dp, S, b, h, t, u);
                            where[4 * n] = b, where[4 * n + 1] = h;
                            where[4 * n + 2] = t, where[4 * n + 3] = u;
                        }
            snprintf(name, sizeof name, "attn_bwd dv window %d heads %d mod %d", w,
                     r, group);
            miss[2] += mask_misses(name, dq, factor, want, n, where);
            free(dg);
            G->ops->free(G, gdo);
        }
        free(dq);
        G->ops->free(G, gqkv);
    }
    const char *kind = S % 4 ? "per element" : "grouped";
    ok(miss[0] == 0, "attn_fwd dropout mask B=%d S=%d Hq=%d Hkv=%d D=%d at "
       "(b0 %ld, h0 %ld of %ld), %s: %ld misses", B, S, Hq, Hkv, D, b0, h0,
       heads, kind, miss[0]);
    ok(miss[1] == 0, "attn_bwd dq dropout mask B=%d S=%d Hq=%d Hkv=%d D=%d at "
       "(b0 %ld, h0 %ld of %ld), %s: %ld misses", B, S, Hq, Hkv, D, b0, h0,
       heads, kind, miss[1]);
    ok(miss[2] == 0, "attn_bwd dv dropout mask B=%d S=%d Hq=%d Hkv=%d D=%d at "
       "(b0 %ld, h0 %ld of %ld), %s: %ld misses", B, S, Hq, Hkv, D, b0, h0,
       heads, kind, miss[2]);

    G->ops->free(G, go);
    G->ops->free(G, gz);
    G->ops->free(G, gd);
    G->ops->free(G, glse);
    G->ops->free(G, glse_out);
    C->ops->free(C, zeros);
    free(qkv);
    free(dout);
    free(lse);
    free(factor);
    free(want);
    free(where);
}

/* ---- FP8 ---- */

/* n bytes of GPU memory -> new host array. */
static uint8_t *dl_bytes(const void *p, size_t n)
{
    uint8_t *h = gl_malloc(n + 1);
    G->ops->download(G, h, p, n);
    return h;
}

/* Two amaxes are the same: equal bits, or both NaN (the payload is
 * whichever NaN won). */
static int same_amax(float a, float b)
{
    return isnan(a) ? isnan(b) : memcmp(&a, &b, sizeof a) == 0;
}

/* n bf16-representable values of magnitude 2^e, e uniform in [lo, hi),
 * random signs: across FP8's whole range (subnormals, normals,
 * saturation) for a scale near 1. */
static float *rand_log_bf(size_t n, double lo, double hi)
{
    float *x = gl_malloc(n * sizeof *x + 1);
    for (size_t i = 0; i < n; i++) {
        double e = lo + urand() * (hi - lo);
        x[i] = round_bf((float)((urand() < 0.5 ? -1 : 1) * exp2(e)));
    }
    return x;
}

/* Inputs with a point: 0 random over FP8's range; 1 the same with the
 * special values sprinkled in (+-infinity, -0, bf16 subnormals, the
 * largest bf16, exact ties); 2 with a NaN too. */
static float *fp8_inputs(size_t n, int kind)
{
    float *x = rand_log_bf(n, -24, 18);
    static const float sp[] = {INFINITY, -INFINITY, -0.0f, 0.0f, 0x1p-133f,
                               -0x1p-133f, 0x1.fcp-127f, 0x1.fep127f, -0x1.fep127f,
                               1.0625f, -1.1875f, 448.0f, 464.0f, -480.0f,
                               57344.0f, 61440.0f, 0x1p-10f, 0x1.8p-10f};
    if (kind >= 1)
        for (size_t i = 0; i < sizeof sp / sizeof sp[0] && 3 * i + 1 < n; i++)
            x[3 * i + 1] = sp[i];
    if (kind >= 2)
        x[n / 2] = NAN;
    return x;
}

/*
 * fp8_quantize on the GPU against the CPU's exact emulation: q, qt and
 * the amax bit for bit.  which: 1 q, 2 qt, 4 amax (the others NULL).
 * The GPU's byte buffers start as 0xFF, a code quantization never
 * produces (NaN is 0x7F), so an unwritten byte shows.
 */
static void test_fp8_quantize(int rows, int cols, gl_fp8_format f, float scale,
                              int kind, int which)
{
    size_t n = (size_t)rows * cols;
    float *x = fp8_inputs(n, kind);
    float a0 = which & 4 && kind == 0 ? 3e4f : 0.0f;    /* amax so far */
    void *gx = g_act(x, n);
    uint8_t *gq = G->ops->alloc(G, n), *gqt = G->ops->alloc(G, n);
    float *gs = g_f32(&scale, 1), *ga = g_f32(&a0, 1);
    g_poison(gq, n);
    g_poison(gqt, n);
    G->ops->fp8_quantize(G, which & 1 ? gq : NULL, which & 2 ? gqt : NULL,
                         which & 4 ? ga : NULL, gx, rows, cols, gs, f);
    uint8_t *cq = gl_malloc(n), *cqt = gl_malloc(n);
    float ca = a0;
    C->ops->fp8_quantize(C, cq, cqt, &ca, x, rows, cols, &scale, f);
    uint8_t *q = dl_bytes(gq, n), *qt = dl_bytes(gqt, n);
    float ga_h;
    G->ops->download(G, &ga_h, ga, 4);
    long bad_q = 0, bad_t = 0;
    for (size_t i = 0; i < n; i++) {
        bad_q += (which & 1) && q[i] != cq[i];
        bad_t += (which & 2) && qt[i] != cqt[i];
    }
    const char *fn = f == GL_FP8_E4M3 ? "E4M3" : "E5M2";
    static const char *const inputs[] = {"", ", specials", ", specials and a NaN"};
    char what[96];
    snprintf(what, sizeof what, "%dx%d %s scale %g%s", rows, cols, fn, scale,
             inputs[kind]);
    if (which & 1)
        ok(bad_q == 0, "fp8_quantize %s: q bit-exact (%ld bytes differ)", what, bad_q);
    if (which & 2)
        ok(bad_t == 0, "fp8_quantize %s: transposed qt bit-exact (%ld bytes differ)",
           what, bad_t);
    if (which & 4)
        ok(same_amax(ga_h, ca), "fp8_quantize %s: amax %g (CPU %g)%s", what, ga_h,
           ca, a0 ? ", folded into 3e4" : "");
    else
        ok(ga_h == 0, "fp8_quantize %s without amax leaves it alone", what);
    for (size_t i = 0; bad_q + bad_t && i < n; i++)
        if (((which & 1) && q[i] != cq[i]) || ((which & 2) && qt[i] != cqt[i])) {
            size_t r = i / cols, c = i % cols;
            diag("  first difference at %zu: x = %a: q 0x%02x (CPU 0x%02x), "
                 "qt at [%zu,%zu] 0x%02x (CPU 0x%02x)", i, x[i], q[i], cq[i], c, r,
                 qt[c * rows + r], cqt[c * rows + r]);
            break;
        }
    free_bufs((void *[]){gx, gq, gqt, gs, ga, NULL}, (void *[]){x, cq, cqt, q, qt, NULL});
}

/* fp8_quantize_pad on the GPU against its definition on the CPU:
 * fp8_quantize of x copied into rows rows, the rest zero.  The GPU's
 * buffer holds NaNs after x's xrows rows: a read past them would show
 * in the bytes and make the amax NaN. */
static void test_fp8_quantize_pad(int xrows, int rows, int cols, gl_fp8_format f, float scale)
{
    size_t n = (size_t)rows * cols, nx = (size_t)xrows * cols;
    float *x = fp8_inputs(n, 0);
    for (size_t i = nx; i < n; i++)
        x[i] = NAN;
    void *gx = g_act(x, n);
    for (size_t i = nx; i < n; i++)
        x[i] = 0.0f;
    uint8_t *gq = G->ops->alloc(G, n), *gqt = G->ops->alloc(G, n);
    float a0 = 0, *gs = g_f32(&scale, 1), *ga = g_f32(&a0, 1);
    g_poison(gq, n);
    g_poison(gqt, n);
    G->ops->fp8_quantize_pad(G, gq, gqt, ga, gx, xrows, rows, cols, gs, f);
    uint8_t *cq = gl_malloc(n), *cqt = gl_malloc(n);
    float ca = 0;
    C->ops->fp8_quantize(C, cq, cqt, &ca, x, rows, cols, &scale, f);
    uint8_t *q = dl_bytes(gq, n), *qt = dl_bytes(gqt, n);
    float ga_h;
    G->ops->download(G, &ga_h, ga, 4);
    long bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += (q[i] != cq[i]) + (qt[i] != cqt[i]);
    ok(bad == 0 && same_amax(ga_h, ca),
       "fp8_quantize_pad %d of %d rows x %d %s: q and qt bit-exact against the zero-padded "
       "copy's (%ld bytes differ), amax %g (CPU %g)", xrows, rows, cols,
       f == GL_FP8_E4M3 ? "E4M3" : "E5M2", bad, ga_h, ca);
    free_bufs((void *[]){gx, gq, gqt, gs, ga, NULL}, (void *[]){x, cq, cqt, q, qt, NULL});
}

/* fp8_transpose (--fp8-param-gather) on the GPU against the CPU's, over
 * every byte value, on shapes with and without whole 32 x 32 tiles. */
static void test_fp8_transpose(int rows, int cols)
{
    size_t n = (size_t)rows * cols;
    uint8_t *q = gl_malloc(n), *cqt = gl_malloc(n);
    for (size_t i = 0; i < n; i++)
        q[i] = (uint8_t)(i * 131 + i / 7);
    uint8_t *gq = G->ops->alloc(G, n), *gqt = G->ops->alloc(G, n);
    G->ops->upload(G, gq, q, n);
    g_poison(gqt, n);
    G->ops->fp8_transpose(G, gqt, gq, rows, cols);
    C->ops->fp8_transpose(C, cqt, q, rows, cols);
    uint8_t *qt = dl_bytes(gqt, n);
    long bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += qt[i] != cqt[i];
    ok(bad == 0, "fp8_transpose %dx%d: the same bytes as the CPU's (%ld differ)", rows, cols,
       bad);
    G->ops->free(G, gq);
    G->ops->free(G, gqt);
    free(q);
    free(cqt);
    free(qt);
}

/* The block factors of a [rows, k] operand that differ between the GPU's
 * g and the CPU's c (only the entries the layout uses; padding is never
 * written). */
static long tile_factors_differ(const float *g, const float *c, int rows, int k, int block2d)
{
    long bad = 0;
    int step = block2d ? GL_FP8_TILE : 1;
    for (int r = 0; r < rows; r += step)
        for (int j = 0; j < k; j += GL_FP8_TILE) {
            size_t at = gl_fp8_tile_at(rows, k, r, j, block2d);
            bad += memcmp(&g[at], &c[at], sizeof(float)) != 0;
        }
    return bad;
}

/*
 * fp8_quantize_tiles (--fp8-recipe blockwise) on the GPU against the
 * CPU's exact emulation: the bytes of q and qt and their block factors,
 * bit for bit.  which: 1 q, 2 qt, 3 both (the other pair NULL).  Sizes
 * that are not multiples of 128 give ragged tiles.
 */
static void test_fp8_quantize_tiles(int rows, int cols, gl_fp8_format f, int block2d, int kind,
                                    int which)
{
    size_t n = (size_t)rows * cols;
    size_t nq = gl_fp8_tile_count(rows, cols, block2d), nt = gl_fp8_tile_count(cols, rows, block2d);
    float *x = fp8_inputs(n, kind);
    void *gx = g_act(x, n);
    uint8_t *gq = G->ops->alloc(G, n), *gqt = G->ops->alloc(G, n);
    float *gqs = G->ops->alloc(G, nq * 4), *gqts = G->ops->alloc(G, nt * 4);
    g_poison(gq, n);
    g_poison(gqt, n);
    g_poison(gqs, nq * 4);
    g_poison(gqts, nt * 4);
    G->ops->fp8_quantize_tiles(G, which & 1 ? gq : NULL, which & 1 ? gqs : NULL,
                               which & 2 ? gqt : NULL, which & 2 ? gqts : NULL, gx, rows, cols,
                               block2d, f);
    uint8_t *cq = gl_malloc(n), *cqt = gl_malloc(n);
    float *cqs = gl_calloc(nq, 4), *cqts = gl_calloc(nt, 4);
    C->ops->fp8_quantize_tiles(C, cq, cqs, cqt, cqts, x, rows, cols, block2d, f);
    uint8_t *q = dl_bytes(gq, n), *qt = dl_bytes(gqt, n);
    float *qs = (float *)dl_bytes(gqs, nq * 4), *qts = (float *)dl_bytes(gqts, nt * 4);
    long bad_q = 0, bad_t = 0;
    for (size_t i = 0; i < n; i++) {
        bad_q += (which & 1) && q[i] != cq[i];
        bad_t += (which & 2) && qt[i] != cqt[i];
    }
    long bad_s = which & 1 ? tile_factors_differ(qs, cqs, rows, cols, block2d) : 0;
    long bad_ts = which & 2 ? tile_factors_differ(qts, cqts, cols, rows, block2d) : 0;
    static const char *const inputs[] = {"", ", specials", ", specials and a NaN"};
    char what[96];
    snprintf(what, sizeof what, "%dx%d %s %s%s", rows, cols, block2d ? "2D" : "1D",
             f == GL_FP8_E4M3 ? "E4M3" : "E5M2", inputs[kind]);
    if (which & 1)
        ok(bad_q == 0 && bad_s == 0,
           "fp8_quantize_tiles %s: q and its factors bit-exact (%ld bytes, %ld factors differ)",
           what, bad_q, bad_s);
    if (which & 2)
        ok(bad_t == 0 && bad_ts == 0,
           "fp8_quantize_tiles %s: qt and its factors bit-exact (%ld bytes, %ld factors "
           "differ)", what, bad_t, bad_ts);
    G->ops->free(G, gx);
    G->ops->free(G, gq);
    G->ops->free(G, gqt);
    G->ops->free(G, gqs);
    G->ops->free(G, gqts);
    free(x), free(cq), free(cqt), free(cqs), free(cqts), free(q), free(qt), free(qs), free(qts);
}

/*
 * fp8_block_amax, fp8_block_sinv and fp8_quantize_block_range
 * (--fp8-param-gather under blockwise scaling) on the GPU: a weight
 * [rows, cols] in three flat pieces cut inside rows and blocks gives,
 * bit for bit, the CPU's fp8_quantize_tiles 2D of the whole weight: q's
 * bytes and both layouts' factors.
 */
static void test_fp8_block_pieces(int rows, int cols, gl_fp8_format f, int kind)
{
    size_t n = (size_t)rows * cols;
    size_t nq = gl_fp8_tile_count(rows, cols, 1), nt = gl_fp8_tile_count(cols, rows, 1);
    size_t cut[4] = {0, n / 3 + 5, n / 2 + 77, n};
    float *x = fp8_inputs(n, kind);
    void *gx = g_act(x, n);
    uint8_t *gq = G->ops->alloc(G, n);
    float *gam = G->ops->alloc(G, nq * 4), *gqs = G->ops->alloc(G, nq * 4);
    float *gqts = G->ops->alloc(G, nt * 4);
    g_poison(gq, n);
    g_poison(gqs, nq * 4);
    g_poison(gqts, nt * 4);
    G->ops->zero(G, gam, nq * 4);
    for (int i = 2; i >= 0; i--)
        G->ops->fp8_block_amax(G, gam, (char *)gx + cut[i] * G->act_bytes, cut[i],
                               cut[i + 1] - cut[i], cols);
    G->ops->fp8_block_sinv(G, gqs, gqts, gam, rows, cols, f);
    for (int i = 0; i < 3; i++)
        G->ops->fp8_quantize_block_range(G, gq + cut[i], (char *)gx + cut[i] * G->act_bytes,
                                         cut[i], cut[i + 1] - cut[i], cols, gam, f);
    uint8_t *cq = gl_malloc(n), *cqt = gl_malloc(n);
    float *cqs = gl_calloc(nq, 4), *cqts = gl_calloc(nt, 4);
    C->ops->fp8_quantize_tiles(C, cq, cqs, cqt, cqts, x, rows, cols, 1, f);
    uint8_t *q = dl_bytes(gq, n);
    float *qs = (float *)dl_bytes(gqs, nq * 4), *qts = (float *)dl_bytes(gqts, nt * 4);
    long bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += q[i] != cq[i];
    long bad_s = tile_factors_differ(qs, cqs, rows, cols, 1) +
                 tile_factors_differ(qts, cqts, cols, rows, 1);
    ok(bad == 0 && bad_s == 0,
       "fp8 block pieces %dx%d %s: three flat pieces give fp8_quantize_tiles 2D's bytes and "
       "factors (%ld bytes, %ld factors differ)", rows, cols,
       f == GL_FP8_E4M3 ? "E4M3" : "E5M2", bad, bad_s);
    G->ops->free(G, gx);
    G->ops->free(G, gq);
    G->ops->free(G, gam);
    G->ops->free(G, gqs);
    G->ops->free(G, gqts);
    free(x), free(cq), free(cqt), free(cqs), free(cqts), free(q), free(qs), free(qts);
}

/*
 * The FP8-producing ops (ops.h: rmsnorm_fwd_fp8, swiglu_fwd_fp8,
 * swiglu_bwd_fp8; op 0, 1, 2) on the GPU, fused, against the CPU's
 * fp8_quantize of what the GPU's plain op writes (rmsnorm_fwd,
 * swiglu_fwd, swiglu_bwd): q, qt and the amax bit for bit, and the op's
 * own bf16 output (with_y) and rmsnorm's rstd equal to the plain op's.
 * rows x cols is the quantized tensor: [n, h], [n, f], [n, 2 f]; alias
 * runs swiglu_bwd_fp8 in place (dgu = gu).
 */
static void test_fp8_fused(int op, int rows, int cols, gl_fp8_format f, float scale,
                           int with_y, int alias)
{
    static const char *const names[] = {"rmsnorm_fwd_fp8", "swiglu_fwd_fp8",
                                        "swiglu_bwd_fp8"};
    int fw = op == 2 ? cols / 2 : cols;           /* swiglu's f */
    size_t n = (size_t)rows * cols;
    size_t nin = op == 0 ? n : (size_t)rows * 2 * fw;
    float *x = rand_bf(nin, -4, 4), *w = rand_bf((size_t)cols, 0.5f, 1.5f);
    float *dy = rand_bf((size_t)rows * fw, -2, 2);
    void *gx = g_act(x, nin), *gw = g_act(w, (size_t)cols), *gdy = g_act(dy, (size_t)rows * fw);
    void *gy = g_act(x, n > nin ? n : nin);                     /* plain output */
    void *gy2 = g_act(x, n > nin ? n : nin);                    /* fused output */
    float *grs = g_f32(NULL, (size_t)rows), *grs2 = g_f32(NULL, (size_t)rows);
    uint8_t *gq = G->ops->alloc(G, n), *gqt = G->ops->alloc(G, n);
    float a0 = 0.0f;
    float *gs = g_f32(&scale, 1), *ga = g_f32(&a0, 1);
    g_poison(gq, n);
    g_poison(gqt, n);
    g_poison(grs2, (size_t)rows * 4);
    gl_fp8_out o = {gq, gqt, ga, gs, f};
    void *gx2 = alias ? g_act(x, nin) : NULL;    /* in place: a copy of gu */
    switch (op) {
    case 0:
        G->ops->rmsnorm_fwd(G, gy, grs, gx, gw, rows, cols, 1e-5f);
        G->ops->rmsnorm_fwd_fp8(G, with_y ? gy2 : NULL, grs2, gx, gw, rows, cols, 1e-5f, &o);
        break;
    case 1:
        G->ops->swiglu_fwd(G, gy, gx, rows, fw);
        G->ops->swiglu_fwd_fp8(G, with_y ? gy2 : NULL, gx, rows, fw, &o);
        break;
    default:
        G->ops->swiglu_bwd(G, gy, gdy, gx, rows, fw);
        if (alias)
            G->ops->swiglu_bwd_fp8(G, gx2, gdy, gx2, rows, fw, &o);
        else
            G->ops->swiglu_bwd_fp8(G, with_y ? gy2 : NULL, gdy, gx, rows, fw, &o);
        break;
    }
    float *y = dl_act(gy, n);
    uint8_t *cq = gl_malloc(n), *cqt = gl_malloc(n);
    float ca = a0;
    C->ops->fp8_quantize(C, cq, cqt, &ca, y, rows, cols, &scale, f);
    uint8_t *q = dl_bytes(gq, n), *qt = dl_bytes(gqt, n);
    float ga_h;
    G->ops->download(G, &ga_h, ga, 4);
    long bad_q = 0, bad_t = 0;
    for (size_t i = 0; i < n; i++) {
        bad_q += q[i] != cq[i];
        bad_t += qt[i] != cqt[i];
    }
    char what[128];
    snprintf(what, sizeof what, "%s %dx%d %s scale %g%s%s", names[op], rows, cols,
             f == GL_FP8_E4M3 ? "E4M3" : "E5M2", scale, with_y || alias ? ", output too" : "",
             alias ? " (in place)" : "");
    ok(bad_q == 0, "%s: q bit-exact (%ld bytes differ)", what, bad_q);
    ok(bad_t == 0, "%s: qt bit-exact (%ld bytes differ)", what, bad_t);
    ok(same_amax(ga_h, ca), "%s: amax %g (CPU %g)", what, ga_h, ca);
    if (with_y || alias) {
        float *y2 = dl_act(alias ? gx2 : gy2, n);
        ok(memcmp(y, y2, n * sizeof *y) == 0, "%s: its output as the plain op's", what);
        free(y2);
    }
    if (op == 0) {
        float *rs = dl_f32(grs, (size_t)rows), *rs2 = dl_f32(grs2, (size_t)rows);
        ok(memcmp(rs, rs2, (size_t)rows * 4) == 0, "%s: rstd as rmsnorm_fwd's", what);
        free(rs);
        free(rs2);
    }
    void *gp[] = {gx, gw, gdy, gy, gy2, grs, grs2, gq, gqt, gs, ga};
    for (size_t i = 0; i < sizeof gp / sizeof gp[0]; i++)
        G->ops->free(G, gp[i]);
    if (gx2)
        G->ops->free(G, gx2);
    free(x);
    free(w);
    free(dy);
    free(y);
    free(cq);
    free(cqt);
    free(q);
    free(qt);
}

/* fp8_amax of n elements at an offset (the scalar path when unaligned). */
static void test_fp8_amax(size_t n, size_t off, int nan)
{
    float *x = fp8_inputs(n + off, 1);
    if (nan)
        x[off + n - 1] = NAN;
    if (off)
        x[0] = round_bf(1e30f);         /* before the view: not counted */
    void *gx = g_act(x, n + off);
    float a0 = 0.5f, ca = a0, ga_h;
    float *ga = g_f32(&a0, 1);
    G->ops->fp8_amax(G, ga, (uint16_t *)gx + off, n);
    C->ops->fp8_amax(C, &ca, x + off, n);
    G->ops->download(G, &ga_h, ga, 4);
    ok(same_amax(ga_h, ca), "fp8_amax n=%zu offset %zu%s: %g (CPU %g)", n, off,
       nan ? " with a NaN" : "", ga_h, ca);
    G->ops->free(G, gx);
    G->ops->free(G, ga);
    free(x);
}

/*
 * fp8_amax_scale of n elements at an offset (the scalar path when
 * unaligned), finite values or (nan) with infinities and a NaN, against
 * the CPU's: the amax (written over a stale 1e30), and the scale and
 * inverse bit for bit (or left alone without them).  Called
 * twice in a row on the GPU, with the second call's results checked: the
 * first must have left the kernel's block counter as it found it.  n up to
 * 2^24 spreads over the kernel's largest grid (1024 blocks).
 */
static void test_fp8_amax_scale(size_t n, size_t off, int nan, gl_fp8_format f,
                                int with_scale)
{
    float *x = fp8_inputs(n + off, nan);    /* finite, or with infinities */
    if (nan && n)
        x[off + n / 2] = NAN;
    if (off)
        x[0] = round_bf(1e30f);         /* before the view: not counted */
    void *gx = g_act(x, n + off);
    float init[3] = {1e30f, -1, -1}, c[3] = {1e30f, -1, -1}, g[3];
    float *gr = g_f32(init, 3);
    for (int k = 0; k < 2; k++)
        G->ops->fp8_amax_scale(G, gr, with_scale ? gr + 1 : NULL, with_scale ? gr + 2 : NULL,
                               (uint16_t *)gx + off, n, f);
    C->ops->fp8_amax_scale(C, c, with_scale ? c + 1 : NULL, with_scale ? c + 2 : NULL,
                           x + off, n, f);
    G->ops->download(G, g, gr, sizeof g);
    ok(same_amax(g[0], c[0]) && memcmp(g + 1, c + 1, 8) == 0,
       "fp8_amax_scale n=%zu offset %zu%s %s%s: amax %g (CPU %g), scale %a (CPU %a), "
       "inverse %a (CPU %a)", n, off, nan ? " with a NaN" : "",
       f == GL_FP8_E4M3 ? "E4M3" : "E5M2", with_scale ? "" : " (amax only)", g[0], c[0],
       g[1], c[1], g[2], c[2]);
    G->ops->free(G, gx);
    G->ops->free(G, gr);
    free(x);
}

/*
 * A scale table for n tensors with the given stride (ops.h): stride 1,
 * two packed arrays, scales then inverses (2 n floats); stride > 1, one
 * record of stride floats per tensor, the inverse first (16-byte aligned
 * when stride is 4, as fp8.c lays them out) and the scale second, the
 * other entries left to hold what they held (n stride floats).
 */
static size_t table_len(int n, int stride)
{
    return stride == 1 ? 2 * (size_t)n : (size_t)n * stride;
}

static float *table_scale(float *tab, int stride)
{
    return stride == 1 ? tab : tab + 1;
}

static float *table_inv(float *tab, int n, int stride)
{
    return stride == 1 ? tab + n : tab;
}

/*
 * fp8_scale_delayed: n tensors, history of len, both devices from the
 * same start; history, scales and inverses bit for bit (with stride > 1
 * the whole table: the entries between records untouched).  The history
 * holds amaxes over a wide range with zeros, NaN, infinity, -0 and
 * subnormals here and there, and whole columns of zeros (keep the scale)
 * and of tiny values (scale FLT_MAX).
 */
static void test_fp8_scale_delayed(int n, int len, gl_fp8_amax_algo algo,
                                   int margin, gl_fp8_format f, int stride)
{
    size_t nh = (size_t)n * len, ns = table_len(n, stride);
    float *h = gl_malloc(nh * sizeof *h), *s = gl_malloc(ns * sizeof *s);
    static const float sp[] = {0.0f, NAN, INFINITY, -0.0f, 0x1p-140f, 1e-38f};
    for (size_t i = 0; i < nh; i++) {
        h[i] = (float)exp2(-30 + 50 * urand());
        if (urand() < 0.05)
            h[i] = sp[(int)(urand() * 6)];
    }
    for (size_t i = 0; i < ns; i++)
        s[i] = (float)(100 + urand());          /* what lies between records */
    float *sc = table_scale(s, stride), *si = table_inv(s, n, stride);
    for (int t = 0; t < n; t++) {
        sc[(size_t)t * stride] = (float)(0.5 + urand());    /* the scale now */
        si[(size_t)t * stride] = 0;
        if (t % 7 == 3)                         /* a column of zeros */
            for (int i = 0; i < len; i++)
                h[(size_t)i * n + t] = 0;
        if (t % 7 == 5)                         /* a column of subnormals */
            for (int i = 0; i < len; i++)
                h[(size_t)i * n + t] = 0x1p-140f;
    }
    float *gh = g_f32(h, nh), *gs = g_f32(s, ns);
    G->ops->fp8_scale_delayed(G, gh, table_scale(gs, stride), table_inv(gs, n, stride),
                              stride, n, len, algo, margin, f);
    C->ops->fp8_scale_delayed(C, h, sc, si, stride, n, len, algo, margin, f);
    float *h2 = dl_f32(gh, nh), *s2 = dl_f32(gs, ns);
    long bad_h = 0, bad_s = 0;
    for (size_t i = 0; i < nh; i++)
        bad_h += !same_amax(h2[i], h[i]);
    for (size_t i = 0; i < ns; i++)
        bad_s += memcmp(&s2[i], &s[i], 4) != 0;
    ok(bad_h == 0 && bad_s == 0,
       "fp8_scale_delayed n=%d len=%d %s margin %d %s stride %d: history, scales and "
       "inverses bit-exact (%ld, %ld differ)", n, len,
       algo == GL_FP8_AMAX_MAX ? "max" : "most_recent", margin,
       f == GL_FP8_E4M3 ? "E4M3" : "E5M2", stride, bad_h, bad_s);
    for (size_t i = 0; bad_s && i < ns; i++)
        if (memcmp(&s2[i], &s[i], 4)) {
            diag("  table entry %zu: %a (CPU %a)", i, s2[i], s[i]);
            break;
        }
    G->ops->free(G, gh);
    G->ops->free(G, gs);
    free(h);
    free(s);
    free(h2);
    free(s2);
}

static void test_fp8_scale_current(int n, gl_fp8_format f, int stride)
{
    size_t ns = table_len(n, stride);
    float *a = gl_malloc(n * sizeof *a), *s = gl_malloc(ns * sizeof *s);
    static const float sp[] = {0.0f, NAN, INFINITY, -0.0f, 0x1p-140f, 1e-38f, 448.0f};
    for (int t = 0; t < n; t++)
        a[t] = t < 7 ? sp[t] : (float)exp2(-40 + 60 * urand());
    for (size_t i = 0; i < ns; i++)
        s[i] = (float)(100 + urand());          /* what lies between records */
    float *ga = g_f32(a, n), *gs = g_f32(s, ns);
    if (stride == 1)
        g_poison(gs, ns * 4);                   /* every entry is written */
    G->ops->fp8_scale_current(G, ga, table_scale(gs, stride), table_inv(gs, n, stride),
                              stride, n, f);
    C->ops->fp8_scale_current(C, a, table_scale(s, stride), table_inv(s, n, stride),
                              stride, n, f);
    float *s2 = dl_f32(gs, ns);
    ok(memcmp(s2, s, ns * 4) == 0, "fp8_scale_current n=%d %s stride %d: bit-exact", n,
       f == GL_FP8_E4M3 ? "E4M3" : "E5M2", stride);
    G->ops->free(G, ga);
    G->ops->free(G, gs);
    free(a);
    free(s);
    free(s2);
}

/* rows x k FP8 bytes quantized on the CPU from values spread over the
 * format's range at a scale that maps their amax to its largest value,
 * as a recipe does; *inv gets the dequantization scale. */
static uint8_t *fp8_operand(int rows, int k, gl_fp8_format f, float *inv)
{
    size_t n = (size_t)rows * k;
    float *x = rand_bf(n, -1, 1), amax = 0, scale, si;
    for (size_t i = 0; i < n; i++)
        amax = gl_fp8_amax_fold(amax, fabsf(x[i]));
    gl_fp8_scale_current(&amax, &scale, &si, 1, f);
    uint8_t *q = gl_malloc(n);
    gl_fp8_quantize(q, x, n, scale, f);
    free(x);
    *inv = si;
    return q;
}

/*
 * gemm_fp8 against the CPU's: the same FP8 bytes and scales on both.
 * The products of FP8 values are exact in fp32 on both; only the sums
 * differ.  The CPU adds in fp32 (CBLAS).  Hopper's FP8 tensor cores add
 * into an accumulator of about 14 significant bits (DeepSeek-V3's report,
 * section 3.3.2), which cuBLASLt promotes to fp32 every few k-blocks
 * unless fast accumulation is on.  So the GPU's sums carry errors of
 * about 2^-14 of the partial sums of a block (or of the whole row with
 * fast accumulation), far above fp32's: the bound allowed is 2e-3 of the
 * largest |C| (1e-2 with fast accumulation), plus bf16's rounding for a
 * bf16 C.  A wrong operand, layout or scale is off by O(1).  ragged 1 or
 * 2 runs the GPU's product as gemm_fp8_ragged with m or k open (the
 * experts' products; its plans are per bucket of that dimension, each
 * call setting the exact sizes, so successive calls of one bucket check
 * that the plan follows them).
 */
static void test_gemm_fp8(int m, int n, int k, gl_fp8_format fa,
                          gl_fp8_format fb, int f32out, float alpha, float beta,
                          int fast, int extra_ld, int ragged)
{
    int ldc = n + extra_ld;
    float ia, ib;
    uint8_t *a = fp8_operand(m, k, fa, &ia), *b = fp8_operand(n, k, fb, &ib);
    float *c0 = f32out ? rand_f32((size_t)m * ldc, -1, 1) : rand_bf((size_t)m * ldc, -1, 1);
    uint8_t *ga = G->ops->alloc(G, (size_t)m * k), *gb = G->ops->alloc(G, (size_t)n * k);
    G->ops->upload(G, ga, a, (size_t)m * k);
    G->ops->upload(G, gb, b, (size_t)n * k);
    float sc[8] = {ia, 0, 0, 0, ib};        /* 16-byte aligned scales: in place */
    float *gsc = g_f32(sc, 8);
    void *gc = f32out ? (void *)g_f32(c0, (size_t)m * ldc) : g_act(c0, (size_t)m * ldc);
    if (beta == 0)
        g_poison(gc, (size_t)m * ldc * (f32out ? 4 : 2));
    float *cc = c_buf(c0, (size_t)m * ldc);
    if (ragged)
        G->ops->gemm_fp8_ragged(G, ragged == 2, m, n, k, alpha, ga, fa, gsc, gb, fb, gsc + 4,
                                beta, gc, f32out ? GL_DT_F32 : GL_DT_BF16, ldc, fast);
    else
        G->ops->gemm_fp8(G, m, n, k, alpha, ga, fa, gsc, gb, fb, gsc + 4, beta, gc,
                         f32out ? GL_DT_F32 : GL_DT_BF16, ldc, fast);
    C->ops->gemm_fp8(C, m, n, k, alpha, a, fa, &sc[0], b, fb, &sc[4], beta, cc,
                     GL_DT_F32, ldc, fast);
    float *got = f32out ? dl_f32(gc, (size_t)m * ldc) : dl_act(gc, (size_t)m * ldc);
    char name[160];
    static const char *const how[] = {"", " (ragged m)", " (ragged k)"};
    snprintf(name, sizeof name, "gemm_fp8 %dx%dx%d %s x %s -> %s alpha=%g beta=%g%s%s%s",
             m, n, k, fa == GL_FP8_E4M3 ? "E4M3" : "E5M2",
             fb == GL_FP8_E4M3 ? "E4M3" : "E5M2", f32out ? "f32" : "bf16", alpha,
             beta, fast ? " fast-accum" : "", extra_ld ? " (ldc > n)" : "", how[ragged]);
    cmp2d_env("GL_OPS_CUDA_VERBOSE", name, got, ldc, cc, ldc, m, n,
              f32out ? 0 : BF_RTOL, fast ? 1e-2 : 2e-3, 0);
    G->ops->free(G, ga);
    G->ops->free(G, gb);
    G->ops->free(G, gsc);
    G->ops->free(G, gc);
    C->ops->free(C, cc);
    free(a);
    free(b);
    free(c0);
    free(got);
}

/* A product whose every partial sum is a small integer: exact on the
 * GPU as on the CPU (the tensor cores' accumulator holds 14 bits).  The
 * second scale is 4 bytes past the first: the staged path of gemm.cu. */
static void test_gemm_fp8_exact(void)
{
    enum { M = 64, N = 32, K = 96 };
    uint8_t a[M * K], b[N * K];
    float *want = gl_malloc(M * N * sizeof *want);
    for (int i = 0; i < M * K; i++)
        a[i] = gl_fp8_encode((float)((int)(urand() * 17) - 8), GL_FP8_E4M3);
    for (int i = 0; i < N * K; i++)
        b[i] = gl_fp8_encode((float)((int)(urand() * 9) - 4), GL_FP8_E5M2);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            long dot = 0;
            for (int l = 0; l < K; l++)
                dot += (long)gl_fp8_decode(a[i * K + l], GL_FP8_E4M3) *
                       (long)gl_fp8_decode(b[j * K + l], GL_FP8_E5M2);
            want[i * N + j] = (float)dot * 0.25f * 0.125f * 4;
        }
    uint8_t *ga = G->ops->alloc(G, sizeof a), *gb = G->ops->alloc(G, sizeof b);
    G->ops->upload(G, ga, a, sizeof a);
    G->ops->upload(G, gb, b, sizeof b);
    float sc[2] = {0.25f, 0.125f};
    float *gsc = g_f32(sc, 2), *gc = g_f32(NULL, M * N);
    g_poison(gc, M * N * 4);
    G->ops->gemm_fp8(G, M, N, K, 4.0f, ga, GL_FP8_E4M3, gsc, gb, GL_FP8_E5M2,
                     gsc + 1, 0, gc, GL_DT_F32, N, 0);
    float *got = dl_f32(gc, M * N);
    cmp2d_env("GL_OPS_CUDA_VERBOSE", "gemm_fp8 of small integers, power-of-two "
              "scales: exact", got, N, want, N, M, N, 0, 0, 0);
    G->ops->free(G, ga);
    G->ops->free(G, gb);
    G->ops->free(G, gsc);
    G->ops->free(G, gc);
    free(want);
    free(got);
}

/*
 * A linear layer's three products under block scaling (--fp8-recipe
 * blockwise), as src/model/fp8.c runs them, on each device from the same
 * bf16 values: X [t, in] in 1x128 tiles (rows for the forward, columns,
 * i.e. along the tokens, for the weight gradient), W [out, in] in 128x128
 * blocks (W and W^T), dY [t, out] in 1x128 tiles of E5M2 (hybrid); then
 *     Y = X W^T (bf16), dX = dY W (bf16), dW += dY^T X (f32, beta 1)
 * through gemm_fp8_tiles.  The quantized bytes and factors must match bit
 * for bit (fp8_quantize_tiles' own tests check each on its own); the
 * products differ by summation order only: cuBLASLt sums each 128-long
 * k-tile in the tensor cores (about 14 bits, DeepSeek-V3's report) and
 * adds the scaled partials in fp32, so test_gemm_fp8's bound holds:
 * 2e-3 of the largest |C|, plus bf16's rounding of a bf16 output.  A
 * wrong scale mode, layout or transpose is off by O(1).  Sizes are
 * multiples of 128 (ragged tiles are checked in fp8_quantize_tiles'
 * tests; whether cuBLASLt takes a k that is not is left untested).
 */
static void test_fp8_linear_tiles(int t, int in, int out)
{
    size_t nx = (size_t)t * in, nw = (size_t)out * in, ny = (size_t)t * out;
    /* spread magnitudes: the tiles get different scales */
    float *x = rand_log_bf(nx, -8, 4), *w = rand_bf(nw, -0.05f, 0.05f);
    float *dy = rand_log_bf(ny, -20, -8), *dw0 = rand_f32(nw, -1e-3f, 1e-3f);
    /* the factor arrays: X, X^T, W, W^T, dY, dY^T */
    size_t ns[6] = {gl_fp8_tile_count(t, in, 0), gl_fp8_tile_count(in, t, 0),
                    gl_fp8_tile_count(out, in, 1), gl_fp8_tile_count(in, out, 1),
                    gl_fp8_tile_count(t, out, 0), gl_fp8_tile_count(out, t, 0)};
    size_t nb[6] = {nx, nx, nw, nw, ny, ny};
    gl_dev *devs[2] = {G, C};
    float *res[2][3];                   /* per device: y, dx, dw */
    uint8_t *qh[2][6];                  /* per device: the quantized bytes */
    float *sh[2][6];                    /* and their factors */
    for (int v = 0; v < 2; v++) {
        gl_dev *d = devs[v];
        int g = d == G;
        void *bx = g ? g_act(x, nx) : c_buf(x, nx), *bw = g ? g_act(w, nw) : c_buf(w, nw);
        void *bdy = g ? g_act(dy, ny) : c_buf(dy, ny);
        uint8_t *q[6];
        float *sc[6];
        for (int i = 0; i < 6; i++) {
            q[i] = d->ops->alloc(d, nb[i]);
            sc[i] = d->ops->alloc(d, ns[i] * sizeof(float));
            if (g)
                g_poison(sc[i], ns[i] * sizeof(float));
            else
                memset(sc[i], 0xFF, ns[i] * sizeof(float));
        }
        d->ops->fp8_quantize_tiles(d, q[0], sc[0], q[1], sc[1], bx, t, in, 0, GL_FP8_E4M3);
        d->ops->fp8_quantize_tiles(d, q[2], sc[2], q[3], sc[3], bw, out, in, 1, GL_FP8_E4M3);
        d->ops->fp8_quantize_tiles(d, q[4], sc[4], q[5], sc[5], bdy, t, out, 0, GL_FP8_E5M2);
        gl_dtype act = d->act;
        void *y = d->ops->alloc(d, ny * d->act_bytes), *dx = d->ops->alloc(d, nx * d->act_bytes);
        float *dw = g ? g_f32(dw0, nw) : c_buf(dw0, nw);
        d->ops->gemm_fp8_tiles(d, t, out, in, 1, q[0], GL_FP8_E4M3, sc[0], q[2], GL_FP8_E4M3,
                               sc[2], 1, 0, y, act, out);
        d->ops->gemm_fp8_tiles(d, t, in, out, 1, q[4], GL_FP8_E5M2, sc[4], q[3], GL_FP8_E4M3,
                               sc[3], 1, 0, dx, act, in);
        d->ops->gemm_fp8_tiles(d, out, in, t, 1, q[5], GL_FP8_E5M2, sc[5], q[1], GL_FP8_E4M3,
                               sc[1], 0, 1, dw, GL_DT_F32, in);
        for (int i = 0; i < 6; i++) {
            qh[v][i] = gl_malloc(nb[i]);
            sh[v][i] = gl_malloc(ns[i] * sizeof(float));
            d->ops->download(d, qh[v][i], q[i], nb[i]);
            d->ops->download(d, sh[v][i], sc[i], ns[i] * sizeof(float));
        }
        res[v][0] = gl_malloc(ny * 4);
        res[v][1] = gl_malloc(nx * 4);
        if (g) {
            free(res[v][0]);
            free(res[v][1]);
            res[v][0] = dl_act(y, ny);
            res[v][1] = dl_act(dx, nx);
            res[v][2] = dl_f32(dw, nw);
        } else {
            memcpy(res[v][0], y, ny * 4);
            memcpy(res[v][1], dx, nx * 4);
            res[v][2] = gl_malloc(nw * 4);
            memcpy(res[v][2], dw, nw * 4);
        }
        void *bufs[] = {bx, bw, bdy, y, dx, dw};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
            d->ops->free(d, bufs[i]);
        for (int i = 0; i < 6; i++) {
            d->ops->free(d, q[i]);
            d->ops->free(d, sc[i]);
        }
    }
    /* operand i as [rows, k]: X [t, in], X^T [in, t], W [out, in] (2D), ... */
    int rows[6] = {t, in, out, in, t, out}, ks[6] = {in, t, in, out, out, t};
    long bad = 0;
    for (int i = 0; i < 6; i++) {
        bad += memcmp(qh[0][i], qh[1][i], nb[i]) != 0;
        bad += tile_factors_differ(sh[0][i], sh[1][i], rows[i], ks[i], i == 2 || i == 3);
    }
    char name[128];
    ok(bad == 0, "fp8 linear, blockwise t=%d in=%d out=%d: the six operands and their block "
       "factors bit-exact (%ld differ)", t, in, out, bad);
    snprintf(name, sizeof name, "fp8 linear, blockwise t=%d in=%d out=%d: forward Y = X W^T",
             t, in, out);
    cmp2d_env("GL_OPS_CUDA_VERBOSE", name, res[0][0], out, res[1][0], out, t, out,
              BF_RTOL, 2e-3, 0);
    snprintf(name, sizeof name, "fp8 linear, blockwise t=%d in=%d out=%d: dgrad dX = dY W",
             t, in, out);
    cmp2d_env("GL_OPS_CUDA_VERBOSE", name, res[0][1], in, res[1][1], in, t, in,
              BF_RTOL, 2e-3, 0);
    snprintf(name, sizeof name,
             "fp8 linear, blockwise t=%d in=%d out=%d: wgrad dW += dY^T X (f32)", t, in, out);
    cmp2d_env("GL_OPS_CUDA_VERBOSE", name, res[0][2], in, res[1][2], in, out, in, 0,
              2e-3, 0);
    for (int v = 0; v < 2; v++) {
        for (int i = 0; i < 3; i++)
            free(res[v][i]);
        for (int i = 0; i < 6; i++) {
            free(qh[v][i]);
            free(sh[v][i]);
        }
    }
    free(x);
    free(w);
    free(dy);
    free(dw0);
}

/*
 * One linear layer's three products the way the model will run them,
 * everything on the device: X [t, in] and W [out, in] quantized to E4M3,
 * dY [t, out] to E5M2 ("hybrid"), each in both orientations in one pass,
 * with current scaling (fp8_amax, fp8_scale_current), then
 *     Y = X W^T, dX = dY (W^T)^T, dW += (dY^T)(X^T)^T  (f32, beta 1).
 * The CPU back end runs the same calls; the quantized bytes match, so the
 * products differ by summation order only (tolerances of test_gemm_fp8).
 */
static void test_fp8_linear(int t, int in, int out)
{
    size_t nx = (size_t)t * in, nw = (size_t)out * in, ny = (size_t)t * out;
    float *x = rand_bf(nx, -2, 2), *w = rand_bf(nw, -0.05f, 0.05f);
    float *dy = rand_bf(ny, -1e-3f, 1e-3f), *dw0 = rand_f32(nw, -1e-3f, 1e-3f);
    gl_dev *devs[2] = {G, C};
    float *res[2][4];                   /* per device: y, dx, dw, scales */
    for (int v = 0; v < 2; v++) {
        gl_dev *d = devs[v];
        int g = d == G;
        void *bx = g ? g_act(x, nx) : c_buf(x, nx), *bw = g ? g_act(w, nw) : c_buf(w, nw);
        void *bdy = g ? g_act(dy, ny) : c_buf(dy, ny);
        size_t big = nx > nw ? (nx > ny ? nx : ny) : (nw > ny ? nw : ny);
        uint8_t *q[6];
        for (int i = 0; i < 6; i++)
            q[i] = d->ops->alloc(d, big);
        float *sc = d->ops->alloc(d, 9 * sizeof(float));   /* amax, scale, inv x 3 */
        d->ops->fp8_amax(d, sc + 0, bx, nx);
        d->ops->fp8_amax(d, sc + 1, bw, nw);
        d->ops->fp8_amax(d, sc + 2, bdy, ny);
        d->ops->fp8_scale_current(d, sc, sc + 3, sc + 6, 1, 2, GL_FP8_E4M3);
        d->ops->fp8_scale_current(d, sc + 2, sc + 5, sc + 8, 1, 1, GL_FP8_E5M2);
        d->ops->fp8_quantize(d, q[0], q[1], NULL, bx, t, in, sc + 3, GL_FP8_E4M3);
        d->ops->fp8_quantize(d, q[2], q[3], NULL, bw, out, in, sc + 4, GL_FP8_E4M3);
        d->ops->fp8_quantize(d, q[4], q[5], NULL, bdy, t, out, sc + 5, GL_FP8_E5M2);
        gl_dtype act = d->act;
        void *y = d->ops->alloc(d, ny * d->act_bytes), *dx = d->ops->alloc(d, nx * d->act_bytes);
        float *dw = g ? g_f32(dw0, nw) : c_buf(dw0, nw);
        d->ops->gemm_fp8(d, t, out, in, 1, q[0], GL_FP8_E4M3, sc + 6, q[2], GL_FP8_E4M3,
                         sc + 7, 0, y, act, out, 1);
        d->ops->gemm_fp8(d, t, in, out, 1, q[4], GL_FP8_E5M2, sc + 8, q[3], GL_FP8_E4M3,
                         sc + 7, 0, dx, act, in, 0);
        d->ops->gemm_fp8(d, out, in, t, 1, q[5], GL_FP8_E5M2, sc + 8, q[1], GL_FP8_E4M3,
                         sc + 6, 1, dw, GL_DT_F32, in, 0);
        if (g) {
            res[v][0] = dl_act(y, ny);
            res[v][1] = dl_act(dx, nx);
            res[v][2] = dl_f32(dw, nw);
            res[v][3] = dl_f32(sc, 9);
        } else {
            res[v][0] = gl_malloc(ny * 4);
            memcpy(res[v][0], y, ny * 4);
            res[v][1] = gl_malloc(nx * 4);
            memcpy(res[v][1], dx, nx * 4);
            res[v][2] = gl_malloc(nw * 4);
            memcpy(res[v][2], dw, nw * 4);
            res[v][3] = gl_malloc(9 * 4);
            memcpy(res[v][3], sc, 9 * 4);
        }
        void *bufs[] = {bx, bw, bdy, q[0], q[1], q[2], q[3], q[4], q[5], sc, y, dx, dw};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
            d->ops->free(d, bufs[i]);
    }
    char name[128];
    ok(memcmp(res[0][3], res[1][3], 9 * 4) == 0,
       "fp8 linear t=%d in=%d out=%d: amaxes and current scales bit-exact", t, in, out);
    snprintf(name, sizeof name, "fp8 linear t=%d in=%d out=%d: forward Y = X W^T (fast)",
             t, in, out);
    cmp2d_env("GL_OPS_CUDA_VERBOSE", name, res[0][0], out, res[1][0], out, t, out,
              BF_RTOL, 1e-2, 0);
    snprintf(name, sizeof name, "fp8 linear t=%d in=%d out=%d: dgrad dX = dY W", t, in,
             out);
    cmp2d_env("GL_OPS_CUDA_VERBOSE", name, res[0][1], in, res[1][1], in, t, in,
              BF_RTOL, 2e-3, 0);
    snprintf(name, sizeof name, "fp8 linear t=%d in=%d out=%d: wgrad dW += dY^T X (f32)",
             t, in, out);
    cmp2d_env("GL_OPS_CUDA_VERBOSE", name, res[0][2], in, res[1][2], in, out, in, 0,
              2e-3, 0);
    for (int v = 0; v < 2; v++)
        for (int i = 0; i < 4; i++)
            free(res[v][i]);
    free(x);
    free(w);
    free(dy);
    free(dw0);
}

/* ---- Megatron's GPT ops: LayerNorm, GeLU, biases, dropout, positions -- */

static void test_layernorm(int n, int h, int acc, int one_plus)
{
    size_t nh = (size_t)n * h;
    float *x = rand_bf(nh, -2, 2), *w = rand_bf(h, 0.5f, 1.5f);
    float *b = rand_bf(h, -0.5f, 0.5f);
    for (size_t i = 0; i < nh; i++)        /* rows off zero mean */
        x[i] = round_bf(x[i] + (float)(i / h % 7) - 3);
    float *dy = rand_bf(nh, -1, 1), *dx0 = rand_bf(nh, -1, 1);
    float *dw0 = rand_f32(h, -1, 1), *db0 = rand_f32(h, -1, 1);
    void *gx = g_act(x, nh), *gw = g_act(w, h), *gb = g_act(b, h);
    void *gy = g_act(x, nh), *gdy = g_act(dy, nh), *gdx = g_act(dx0, nh);
    float *gm = g_f32(NULL, n), *grs = g_f32(NULL, n);
    float *gdw = g_f32(dw0, h), *gdb = g_f32(db0, h);
    float *cx = c_buf(x, nh), *cw = c_buf(w, h), *cb = c_buf(b, h);
    float *cy = c_buf(NULL, nh), *cdy = c_buf(dy, nh), *cdx = c_buf(dx0, nh);
    float *cm = c_buf(NULL, n), *crs = c_buf(NULL, n);
    float *cdw = c_buf(dw0, h), *cdb = c_buf(db0, h);
    g_poison(gy, nh * 2);
    g_poison(gm, n * 4);
    g_poison(grs, n * 4);
    if (!acc)
        g_poison(gdx, nh * 2);
    G->ops->layernorm_fwd(G, gy, gm, grs, gx, gw, gb, n, h, 1e-5f, one_plus);
    C->ops->layernorm_fwd(C, cy, cm, crs, cx, cw, cb, n, h, 1e-5f, one_plus);
    float *y = dl_act(gy, nh), *m = dl_f32(gm, n), *rs = dl_f32(grs, n);
    /* backward from the CPU's mean and rstd on both sides */
    G->ops->upload(G, gm, cm, n * 4);
    G->ops->upload(G, grs, crs, n * 4);
    G->ops->layernorm_bwd(G, gdx, gdw, gdb, gdy, gx, gw, gm, grs, n, h,
                          one_plus, acc);
    C->ops->layernorm_bwd(C, cdx, cdw, cdb, cdy, cx, cw, cm, crs, n, h,
                          one_plus, acc);
    float *dx = dl_act(gdx, nh), *dw = dl_f32(gdw, h), *db = dl_f32(gdb, h);
    const char *v = one_plus ? " 1p" : "";
    char name[128];
    snprintf(name, sizeof name, "layernorm_fwd%s n=%d h=%d", v, n, h);
    cmp(name, y, cy, (long)nh, BF_RTOL, 1e-3);
    snprintf(name, sizeof name, "layernorm_fwd%s mean, rstd n=%d h=%d", v, n, h);
    cmp(name, m, cm, n, 1e-5, 1e-6);
    cmp(name, rs, crs, n, 1e-5, 0);
    snprintf(name, sizeof name, "layernorm_bwd%s dx n=%d h=%d%s", v, n, h,
             acc ? " (accumulate)" : "");
    cmp(name, dx, cdx, (long)nh, BF_RTOL, 2e-3);
    snprintf(name, sizeof name, "layernorm_bwd%s dw n=%d h=%d (fp32, +=)", v, n, h);
    cmp(name, dw, cdw, h, 1e-4, 1e-5);
    snprintf(name, sizeof name, "layernorm_bwd%s db n=%d h=%d (fp32, +=)", v, n, h);
    cmp(name, db, cdb, h, 1e-4, 1e-5);
    /* the same call again on fresh buffers gives the same bits */
    void *gdx2 = g_act(dx0, nh);
    float *gdw2 = g_f32(dw0, h), *gdb2 = g_f32(db0, h);
    G->ops->layernorm_bwd(G, gdx2, gdw2, gdb2, gdy, gx, gw, gm, grs, n, h,
                          one_plus, acc);
    float *dx2 = dl_act(gdx2, nh), *dw2 = dl_f32(gdw2, h), *db2 = dl_f32(gdb2, h);
    ok(!memcmp(dx2, dx, nh * 4) && !memcmp(dw2, dw, (size_t)h * 4) &&
       !memcmp(db2, db, (size_t)h * 4),
       "layernorm_bwd%s n=%d h=%d: the same bits again", v, n, h);
    void *gp[] = {gx, gw, gb, gy, gdy, gdx, gm, grs, gdw, gdb, gdx2, gdw2, gdb2};
    for (size_t i = 0; i < sizeof gp / sizeof gp[0]; i++)
        G->ops->free(G, gp[i]);
    float *cp[] = {cx, cw, cb, cy, cdy, cdx, cm, crs, cdw, cdb};
    for (size_t i = 0; i < sizeof cp / sizeof cp[0]; i++)
        C->ops->free(C, cp[i]);
    float *hp[] = {x, w, b, dy, dx0, dw0, db0, y, m, rs, dx, dw, db, dx2, dw2, db2};
    for (size_t i = 0; i < sizeof hp / sizeof hp[0]; i++)
        free(hp[i]);
}

static void test_gelu(int n, int f, int with_bias)
{
    size_t nf = (size_t)n * f;
    float *x = rand_bf(nf, -5, 5), *dy = rand_bf(nf, -1, 1);
    float *bias = with_bias ? rand_bf(f, -1, 1) : NULL;
    float *db0 = rand_f32(f, -1, 1);
    void *gx = g_act(x, nf), *gy = g_act(x, nf), *gdx = g_act(dy, nf);
    void *gbias = with_bias ? g_act(bias, f) : NULL;
    float *gdb = g_f32(db0, f);
    float *cx = c_buf(x, nf), *cy = c_buf(NULL, nf), *cdx = c_buf(NULL, nf);
    float *cdy = c_buf(dy, nf), *cbias = with_bias ? c_buf(bias, f) : NULL;
    float *cdb = c_buf(db0, f);
    g_poison(gy, nf * 2);
    G->ops->gelu_fwd(G, gy, gx, gbias, n, f);
    C->ops->gelu_fwd(C, cy, cx, cbias, n, f);
    /* backward in place: dx aliases (a copy of) dy */
    G->ops->gelu_bwd(G, gdx, gdb, gdx, gx, gbias, n, f);
    C->ops->gelu_bwd(C, cdx, cdb, cdy, cx, cbias, n, f);
    float *y = dl_act(gy, nf), *dx = dl_act(gdx, nf), *db = dl_f32(gdb, f);
    const char *v = with_bias ? " with bias" : "";
    char name[128];
    snprintf(name, sizeof name, "gelu_fwd%s n=%d f=%d", v, n, f);
    cmp(name, y, cy, (long)nf, BF_RTOL, 1e-3);
    snprintf(name, sizeof name, "gelu_bwd%s n=%d f=%d (dx aliases dy)", v, n, f);
    cmp(name, dx, cdx, (long)nf, BF_RTOL, 1e-3);
    /* dbias is the column sum of dx as stored: the GPU's bf16 dx, which
     * differs from the CPU's fp32 dx by bf16 rounding, so the reference
     * is the CPU's bias_grad of the GPU's dx */
    float *cgdx = c_buf(dx, nf), *cdb2 = c_buf(db0, f);
    C->ops->bias_grad(C, cdb2, cgdx, n, f);
    snprintf(name, sizeof name, "gelu_bwd dbias n=%d f=%d (fp32, +=)", n, f);
    cmp(name, db, cdb2, f, 1e-5, 1e-5);
    C->ops->free(C, cgdx);
    C->ops->free(C, cdb2);
    void *gp[] = {gx, gy, gdx, gbias, gdb};
    for (size_t i = 0; i < sizeof gp / sizeof gp[0]; i++)
        G->ops->free(G, gp[i]);
    float *cp[] = {cx, cy, cdx, cdy, cbias, cdb};
    for (size_t i = 0; i < sizeof cp / sizeof cp[0]; i++)
        C->ops->free(C, cp[i]);
    float *hp[] = {x, dy, bias, db0, y, dx, db};
    for (size_t i = 0; i < sizeof hp / sizeof hp[0]; i++)
        free(hp[i]);
}

static void test_bias(int n, int w)
{
    size_t nw = (size_t)n * w;
    float *y0 = rand_bf(nw, -2, 2), *bias = rand_bf(w, -1, 1);
    float *dy = rand_bf(nw, -1, 1), *db0 = rand_f32(w, -1, 1);
    void *gy = g_act(y0, nw), *gb = g_act(bias, w), *gdy = g_act(dy, nw);
    float *gdb = g_f32(db0, w), *gdb2 = g_f32(db0, w);
    float *cy = c_buf(y0, nw), *cb = c_buf(bias, w), *cdy = c_buf(dy, nw);
    float *cdb = c_buf(db0, w);
    G->ops->bias_add(G, gy, gb, n, w);
    C->ops->bias_add(C, cy, cb, n, w);
    G->ops->bias_grad(G, gdb, gdy, n, w);
    C->ops->bias_grad(C, cdb, cdy, n, w);
    G->ops->bias_grad(G, gdb2, gdy, n, w);
    float *y = dl_act(gy, nw), *db = dl_f32(gdb, w), *db2 = dl_f32(gdb2, w);
    char name[96];
    snprintf(name, sizeof name, "bias_add n=%d w=%d", n, w);
    cmp(name, y, cy, (long)nw, BF_RTOL, 0);
    snprintf(name, sizeof name, "bias_grad n=%d w=%d (fp32, +=)", n, w);
    cmp(name, db, cdb, w, 1e-5, 1e-5);
    ok(!memcmp(db, db2, (size_t)w * 4), "bias_grad n=%d w=%d: the same bits again", n, w);
    void *gp[] = {gy, gb, gdy, gdb, gdb2};
    for (size_t i = 0; i < sizeof gp / sizeof gp[0]; i++)
        G->ops->free(G, gp[i]);
    float *cp[] = {cy, cb, cdy, cdb};
    for (size_t i = 0; i < sizeof cp / sizeof cp[0]; i++)
        C->ops->free(C, cp[i]);
    float *hp[] = {y0, bias, dy, db0, y, db, db2};
    for (size_t i = 0; i < sizeof hp / sizeof hp[0]; i++)
        free(hp[i]);
}

/* Dropout of an [n, w] piece at (row0, col0) of rows of `width`: the
 * GPU's mask must be the CPU's, element for element (x > 0 everywhere, so
 * a zero is a drop); bias-dropout-add in place (out aliases residual). */
static void test_dropout(int n, int w, float p, long row0, long col0,
                         long width)
{
    size_t nw = (size_t)n * w;
    gl_dropout dp = { .seed = 0x5eed, .iteration = 1234, .layer = 11,
                      .site = 2, .p = p, .row0 = row0, .col0 = col0,
                      .width = width };
    float *x = rand_bf(nw, 0.5f, 1.5f), *res = rand_bf(nw, -2, 2);
    float *bias = rand_bf(w, -1, 1);
    void *gx = g_act(x, nw), *gy = g_act(x, nw), *gres = g_act(res, nw);
    void *gb = g_act(bias, w);
    float *cx = c_buf(x, nw), *cy = c_buf(NULL, nw), *cres = c_buf(res, nw);
    float *cb = c_buf(bias, w);
    g_poison(gy, nw * 2);
    G->ops->dropout(G, gy, gx, n, w, &dp);
    C->ops->dropout(C, cy, cx, n, w, &dp);
    G->ops->bias_dropout_add(G, gres, gres, gx, gb, n, w, &dp);
    C->ops->bias_dropout_add(C, cres, cres, cx, cb, n, w, &dp);
    float *y = dl_act(gy, nw), *out = dl_act(gres, nw);
    long differ = 0, kept = 0;
    for (size_t i = 0; i < nw; i++) {
        differ += (y[i] == 0) != (cy[i] == 0);
        kept += cy[i] != 0;
    }
    ok(differ == 0, "dropout n=%d w=%d p=%g at (%ld, %ld) of width %ld: the CPU's mask (%ld of %zu kept, %ld differ)",
       n, w, (double)p, row0, col0, width, kept, nw, differ);
    char name[128];
    snprintf(name, sizeof name, "dropout n=%d w=%d p=%g values", n, w, (double)p);
    cmp(name, y, cy, (long)nw, BF_RTOL, 0);
    snprintf(name, sizeof name, "bias_dropout_add n=%d w=%d p=%g (in place)", n, w, (double)p);
    cmp(name, out, cres, (long)nw, BF_RTOL, 1e-3);
    /* without dropout: residual + y + bias */
    void *gres2 = g_act(res, nw);
    float *cres2 = c_buf(res, nw);
    G->ops->bias_dropout_add(G, gres2, gres2, gx, gb, n, w, NULL);
    C->ops->bias_dropout_add(C, cres2, cres2, cx, cb, n, w, NULL);
    float *out2 = dl_act(gres2, nw);
    snprintf(name, sizeof name, "bias_dropout_add n=%d w=%d without dropout", n, w);
    cmp(name, out2, cres2, (long)nw, BF_RTOL, 1e-3);
    void *gp[] = {gx, gy, gres, gb, gres2};
    for (size_t i = 0; i < sizeof gp / sizeof gp[0]; i++)
        G->ops->free(G, gp[i]);
    float *cp[] = {cx, cy, cres, cb, cres2};
    for (size_t i = 0; i < sizeof cp / sizeof cp[0]; i++)
        C->ops->free(C, cp[i]);
    float *hp[] = {x, res, bias, y, out, out2};
    for (size_t i = 0; i < sizeof hp / sizeof hp[0]; i++)
        free(hp[i]);
}

/* bda_layernorm (bias-dropout-add, then LayerNorm of its result) against
 * the CPU's, and bit for bit against the GPU's two ops one after the
 * other (which recomputation relies on), with out aliasing y (as under
 * sequence parallelism) or apart from residual and y.  The GPU normalises
 * out as stored (bf16), the CPU its fp32 value: out is compared with the
 * CPU's, the norm, mean and rstd with the CPU's LayerNorm of the GPU's
 * stored out (a rounding of out by half a bf16 ulp moves the mean by up
 * to that much, which the norm's tolerances do not allow for). */
static void test_bda_layernorm(int n, int h, float p, int with_bias, int one_plus,
                               int alias_y)
{
    size_t nh = (size_t)n * h;
    gl_dropout dp = { .seed = 0x5eed, .iteration = 77, .layer = 3, .site = 0,
                      .p = p, .row0 = 5 * (long)n, .col0 = 0, .width = h };
    const gl_dropout *dpp = p > 0 ? &dp : NULL;
    float *y = rand_bf(nh, -1, 1), *res = rand_bf(nh, -2, 2);
    for (size_t i = 0; i < nh; i++)        /* rows off zero mean */
        res[i] = round_bf(res[i] + (float)(i / h % 5) - 2);
    float *bias = rand_bf(h, -0.5f, 0.5f), *w = rand_bf(h, 0.5f, 1.5f);
    float *b = rand_bf(h, -0.5f, 0.5f);
    void *gy = g_act(y, nh), *gres = g_act(res, nh), *gbias = g_act(bias, h);
    void *gw = g_act(w, h), *gb = g_act(b, h);
    void *gout = G->ops->alloc(G, nh * 2), *gln = G->ops->alloc(G, nh * 2);
    float *gm = g_f32(NULL, n), *grs = g_f32(NULL, n);
    /* the two ops */
    void *gy2 = g_act(y, nh), *gout2 = G->ops->alloc(G, nh * 2), *gln2 = G->ops->alloc(G, nh * 2);
    float *gm2 = g_f32(NULL, n), *grs2 = g_f32(NULL, n);
    float *cy = c_buf(y, nh), *cres = c_buf(res, nh), *cbias = c_buf(bias, h);
    float *cw = c_buf(w, h), *cb = c_buf(b, h), *cout = c_buf(NULL, nh), *cln = c_buf(NULL, nh);
    float *cm = c_buf(NULL, n), *crs = c_buf(NULL, n);
    void *go = alias_y ? gy : gout, *go2 = alias_y ? gy2 : gout2;
    float *co = alias_y ? cy : cout;
    const void *gbi = with_bias ? gbias : NULL;
    g_poison(gln, nh * 2);
    g_poison(gm, n * 4);
    g_poison(grs, n * 4);
    G->ops->bda_layernorm(G, go, gln, gm, grs, gres, gy, gbi, dpp, gw, gb, n, h, 1e-5f,
                          one_plus);
    C->ops->bda_layernorm(C, co, cln, cm, crs, cres, cy, with_bias ? cbias : NULL, dpp, cw,
                          cb, n, h, 1e-5f, one_plus);
    G->ops->bias_dropout_add(G, go2, gres, gy2, gbi, n, h, dpp);
    G->ops->layernorm_fwd(G, gln2, gm2, grs2, go2, gw, gb, n, h, 1e-5f, one_plus);
    float *out = dl_act(go, nh), *ln = dl_act(gln, nh), *m = dl_f32(gm, n), *rs = dl_f32(grs, n);
    float *out2 = dl_act(go2, nh), *ln2 = dl_act(gln2, nh), *m2 = dl_f32(gm2, n);
    float *rs2 = dl_f32(grs2, n);
    char name[160];
    snprintf(name, sizeof name, "bda_layernorm n=%d h=%d p=%g%s%s%s", n, h, (double)p,
             with_bias ? "" : " no bias", one_plus ? " 1p" : "", alias_y ? " (out = y)" : "");
    cmp(name, out, co, (long)nh, BF_RTOL, 1e-3);
    float *cgo = c_buf(out, nh);
    C->ops->layernorm_fwd(C, cln, cm, crs, cgo, cw, cb, n, h, 1e-5f, one_plus);
    C->ops->free(C, cgo);
    cmp(name, ln, cln, (long)nh, BF_RTOL, 1e-3);
    cmp(name, m, cm, n, 1e-5, 1e-6);
    cmp(name, rs, crs, n, 1e-5, 0);
    ok(!memcmp(out, out2, nh * 4) && !memcmp(ln, ln2, nh * 4) && !memcmp(m, m2, (size_t)n * 4) &&
       !memcmp(rs, rs2, (size_t)n * 4),
       "%s: the bits of bias_dropout_add then layernorm_fwd", name);
    void *gp[] = {gy, gres, gbias, gw, gb, gout, gln, gm, grs, gy2, gout2, gln2, gm2, grs2};
    for (size_t i = 0; i < sizeof gp / sizeof gp[0]; i++)
        G->ops->free(G, gp[i]);
    float *cp[] = {cy, cres, cbias, cw, cb, cout, cln, cm, crs};
    for (size_t i = 0; i < sizeof cp / sizeof cp[0]; i++)
        C->ops->free(C, cp[i]);
    float *hp[] = {y, res, bias, w, b, out, ln, m, rs, out2, ln2, m2, rs2};
    for (size_t i = 0; i < sizeof hp / sizeof hp[0]; i++)
        free(hp[i]);
}

/* linear_gelu_fwd and linear_dgelu_bwd (cuBLASLt's GELU_AUX_BIAS and
 * DGELU_BGRAD epilogues where it has them) against the CPU's products,
 * bias and GeLU: pre = X W^T + bias, s = gelu(pre); dpre = (dY Wd)
 * gelu'(pre), dbias += its column sums.  The GPU's own pre feeds both
 * backwards, and the GPU's dbias is also checked against the column sums
 * of its own dpre. */
static void test_linear_gelu(int n, int f, int k)
{
    size_t nf = (size_t)n * f, nk = (size_t)n * k, fk = (size_t)f * k;
    float sc = (float)(1.5 / sqrt((double)k));
    float *x = rand_bf(nk, -1, 1), *w = rand_bf(fk, -sc, sc), *bias = rand_bf(f, -1, 1);
    float *dy = rand_bf(nk, -1, 1), *wd = rand_bf(fk, -sc, sc), *db0 = rand_f32(f, -1, 1);
    void *gx = g_act(x, nk), *gw = g_act(w, fk), *gbias = g_act(bias, f);
    void *gdy = g_act(dy, nk), *gwd = g_act(wd, fk);
    void *gs = G->ops->alloc(G, nf * 2), *gpre = G->ops->alloc(G, nf * 2);
    void *gdpre = G->ops->alloc(G, nf * 2);
    float *gdb = g_f32(db0, f);
    g_poison(gs, nf * 2);
    g_poison(gpre, nf * 2);
    g_poison(gdpre, nf * 2);
    G->ops->linear_gelu_fwd(G, gs, gpre, gx, gw, gbias, n, f, k);
    float *s1 = dl_act(gs, nf), *pre = dl_act(gpre, nf);
    float *cx = c_buf(x, nk), *cw = c_buf(w, fk), *cbias = c_buf(bias, f);
    float *cdy = c_buf(dy, nk), *cwd = c_buf(wd, fk), *cdb = c_buf(db0, f);
    float *cs = c_buf(NULL, nf), *cpre = c_buf(NULL, nf), *cdpre = c_buf(NULL, nf);
    C->ops->linear_gelu_fwd(C, cs, cpre, cx, cw, cbias, n, f, k);
    char name[128];
    snprintf(name, sizeof name, "linear_gelu_fwd n=%d f=%d k=%d: pre", n, f, k);
    cmp(name, pre, cpre, (long)nf, BF_RTOL, 1e-2);
    snprintf(name, sizeof name, "linear_gelu_fwd n=%d f=%d k=%d: gelu", n, f, k);
    cmp(name, s1, cs, (long)nf, BF_RTOL, 1e-2);
    /* the backward from the GPU's pre on both sides */
    float *cpre2 = c_buf(pre, nf);
    G->ops->linear_dgelu_bwd(G, gdpre, gdb, gdy, gwd, gpre, n, f, k);
    C->ops->linear_dgelu_bwd(C, cdpre, cdb, cdy, cwd, cpre2, n, f, k);
    float *dpre = dl_act(gdpre, nf), *db = dl_f32(gdb, f);
    snprintf(name, sizeof name, "linear_dgelu_bwd n=%d f=%d k=%d: dpre", n, f, k);
    cmp(name, dpre, cdpre, (long)nf, BF_RTOL, 1e-2);
    snprintf(name, sizeof name, "linear_dgelu_bwd n=%d f=%d k=%d: dbias (+=)", n, f, k);
    cmp(name, db, cdb, f, 1e-2, 1e-2);
    float *own = gl_malloc((size_t)f * sizeof *own);
    for (int j = 0; j < f; j++) {
        double t = db0[j];
        for (int i = 0; i < n; i++)
            t += dpre[(size_t)i * f + j];
        own[j] = (float)t;
    }
    snprintf(name, sizeof name, "linear_dgelu_bwd n=%d f=%d k=%d: dbias = sums of dpre", n, f, k);
    cmp(name, db, own, f, 1e-2, 1e-2);
    void *gp[] = {gx, gw, gbias, gdy, gwd, gs, gpre, gdpre, gdb};
    for (size_t i = 0; i < sizeof gp / sizeof gp[0]; i++)
        G->ops->free(G, gp[i]);
    float *cp[] = {cx, cw, cbias, cdy, cwd, cdb, cs, cpre, cdpre, cpre2};
    for (size_t i = 0; i < sizeof cp / sizeof cp[0]; i++)
        C->ops->free(C, cp[i]);
    float *hp[] = {x, w, bias, dy, wd, db0, s1, pre, dpre, db, own};
    for (size_t i = 0; i < sizeof hp / sizeof hp[0]; i++)
        free(hp[i]);
}

static void test_pos_embed(int n, int h, int max_pos)
{
    size_t nh = (size_t)n * h, np = (size_t)max_pos * h;
    float *y0 = rand_bf(nh, -1, 1), *pos = rand_bf(np, -1, 1);
    int32_t *ids = gl_malloc(n * sizeof *ids);
    for (int i = 0; i < n; i++)
        ids[i] = i % max_pos;
    void *gy = g_act(y0, nh), *gp = g_act(pos, np);
    int32_t *gid = G->ops->alloc(G, n * 4);
    G->ops->upload(G, gid, ids, n * 4);
    float *cy = c_buf(y0, nh), *cp = c_buf(pos, np);
    G->ops->pos_embed_fwd(G, gy, gp, gid, n, h, max_pos);
    C->ops->pos_embed_fwd(C, cy, cp, ids, n, h, max_pos);
    float *y = dl_act(gy, nh);
    char name[96];
    snprintf(name, sizeof name, "pos_embed_fwd n=%d h=%d max_pos=%d", n, h, max_pos);
    cmp(name, y, cy, (long)nh, BF_RTOL, 0);
    G->ops->free(G, gy);
    G->ops->free(G, gp);
    G->ops->free(G, gid);
    C->ops->free(C, cy);
    C->ops->free(C, cp);
    free(y0);
    free(pos);
    free(ids);
    free(y);
}

/* ---- Mixture of experts (issue 13) ---- */


static void moe_map_alloc(gl_dev *d, gl_moe_map *m, int n, int k, int E,
                          int rows_max, int with_host)
{
    memset(m, 0, sizeof *m);
    m->n = n;
    m->k = k;
    m->E = E;
    m->rows_max = rows_max;
    size_t nk = (size_t)n * k + 1;
    m->expert = d->ops->alloc(d, nk * 4);
    m->weight = d->ops->alloc(d, nk * 4);
    m->rows = d->ops->alloc(d, nk * 4);
    m->row_tok = d->ops->alloc(d, ((size_t)rows_max + 1) * 4);
    m->offsets = d->ops->alloc(d, ((size_t)E + 1) * 4);
    if (with_host)
        m->offsets_host = d->ops->alloc_host(d, ((size_t)E + 1) * 4);
}

static void moe_map_free(gl_dev *d, gl_moe_map *m)
{
    d->ops->free(d, m->expert);
    d->ops->free(d, m->weight);
    d->ops->free(d, m->rows);
    d->ops->free(d, m->row_tok);
    d->ops->free(d, m->offsets);
    if (m->offsets_host)
        d->ops->free_host(d, m->offsets_host);
}

static int32_t *dl_i32(const void *p, size_t n)
{
    int32_t *h = gl_malloc(n * 4 + 4);
    G->ops->download(G, h, p, n * 4);
    return h;
}

/* ints equal; on failure the first difference */
static int cmp_i32(const char *what, const int32_t *got, const int32_t *want,
                   long n)
{
    long bad = -1;
    for (long i = 0; i < n && bad < 0; i++)
        if (got[i] != want[i])
            bad = i;
    if (bad >= 0)
        return ok(0, "%s: element %ld of %ld is %d, the CPU's %d", what, bad,
                  n, got[bad], want[bad]);
    return ok(1, "%s (%ld equal)", what, n);
}

static const char *score_name(const gl_moe_route_cfg *c)
{
    return c->score == GL_MOE_SIGMOID ? "sigmoid"
           : c->pre_softmax           ? "pre-softmax"
                                      : "softmax";
}

/*
 * One MoE layer on both devices: routing (every map array exact, the
 * weights to fp32 rounding), then every op on the CPU's map uploaded to
 * the GPU, so that a routing difference does not hide the others.
 * ties: every 5th token repeats two logits (equal scores: lower expert
 * first).  cap_factor 0: no capacity.
 */
static void test_moe(int n, int E, int k, int h, int f, gl_moe_score score,
                     int pre, float scaling, double cap_factor,
                     gl_moe_drop drop, int pad, int use_bias, int ties)
{
    gl_moe_route_cfg cfg = {.E = E, .k = k, .score = score,
                            .pre_softmax = pre, .scaling = scaling,
                            .drop = drop, .pad = pad};
    if (cap_factor > 0)
        cfg.capacity = gl_moe_capacity(n, k, E, cap_factor);
    int rows_max = gl_moe_rows_max(n, &cfg);
    char tag[160];
    snprintf(tag, sizeof tag, "n=%d E=%d top-%d %s%s scale %g, %s%s%s%s", n,
             E, k, score_name(&cfg), use_bias ? " with bias" : "",
             (double)scaling, cap_factor > 0 ? "capacity" : "no capacity",
             cap_factor > 0 ? (drop == GL_MOE_DROP_PROBS ? " by probs"
                                                         : " by position")
                            : "",
             cap_factor > 0 && pad ? ", padded" : "", ties ? ", ties" : "");
    char name[256];
    size_t nE = (size_t)n * E, nk = (size_t)n * k;

    /* logits with a few experts favoured, so that some get many tokens
     * and (E = 64) some none */
    float *logits = rand_f32(nE, -3, 3);
    for (int t = 0; t < n; t++) {
        for (int e = 0; e < E; e++)
            if (E > 16 && e % 4 == 3)
                logits[(size_t)t * E + e] -= 8;   /* a quarter rarely chosen */
        if (ties && t % 5 == 0 && E > 3) {
            logits[(size_t)t * E + 3] = logits[(size_t)t * E + 1];
            logits[(size_t)t * E + 2] = 5.0f;
            logits[(size_t)t * E + 0] = 5.0f;
        }
    }
    float *bias = rand_f32(E, -0.2f, 0.2f);
    float *glog = g_f32(logits, nE), *gbias = g_f32(bias, E);
    float *clog = c_buf(logits, nE), *cbias = c_buf(bias, E);
    float *gtpe = g_f32(NULL, E), *ctpe = c_buf(NULL, E);
    float *gdrop = g_f32(NULL, 1), *cdrop = c_buf(NULL, 1);
    gl_moe_map gm, cm;
    moe_map_alloc(G, &gm, n, k, E, rows_max, 1);
    moe_map_alloc(C, &cm, n, k, E, rows_max, 0);
    g_poison(gm.expert, nk * 4);
    g_poison(gm.weight, nk * 4);
    g_poison(gm.rows, nk * 4);
    g_poison(gm.row_tok, (size_t)rows_max * 4);
    G->ops->moe_route(G, &gm, glog, use_bias ? gbias : NULL, &cfg, gtpe, gdrop);
    C->ops->moe_route(C, &cm, clog, use_bias ? cbias : NULL, &cfg, ctpe, cdrop);
    int32_t *ge = dl_i32(gm.expert, nk), *gr = dl_i32(gm.rows, nk);
    int32_t *grt = dl_i32(gm.row_tok, rows_max), *go = dl_i32(gm.offsets, E + 1);
    float *gw = dl_f32(gm.weight, nk), *gt = dl_f32(gtpe, E), *gd = dl_f32(gdrop, 1);
    snprintf(name, sizeof name, "moe_route %s: experts", tag);
    cmp_i32(name, ge, cm.expert, (long)nk);
    snprintf(name, sizeof name, "moe_route %s: offsets", tag);
    cmp_i32(name, go, cm.offsets, E + 1);
    snprintf(name, sizeof name, "moe_route %s: offsets_host", tag);
    cmp_i32(name, gm.offsets_host, cm.offsets, E + 1);
    snprintf(name, sizeof name, "moe_route %s: rows", tag);
    cmp_i32(name, gr, cm.rows, (long)nk);
    snprintf(name, sizeof name, "moe_route %s: row_tok", tag);
    cmp_i32(name, grt, cm.row_tok, rows_max);
    snprintf(name, sizeof name, "moe_route %s: weights (fp32)", tag);
    cmp(name, gw, cm.weight, (long)nk, 1e-5, 1e-6);
    snprintf(name, sizeof name, "moe_route %s: tokens_per_expert", tag);
    cmp(name, gt, ctpe, E, 0, 0);
    int empty = 0;
    for (int e = 0; e < E; e++)
        empty += cm.offsets[e + 1] == cm.offsets[e];
    ok(gd[0] == cdrop[0], "moe_route %s: dropped %g, the CPU's %g (%d of %d "
       "experts without rows, %d rows)", tag, (double)gd[0],
       (double)cdrop[0], empty, E, cm.offsets[E]);

    /* the CPU's map on the GPU for the rest */
    G->ops->upload(G, gm.expert, cm.expert, nk * 4);
    G->ops->upload(G, gm.weight, cm.weight, nk * 4);
    G->ops->upload(G, gm.rows, cm.rows, nk * 4);
    G->ops->upload(G, gm.row_tok, cm.row_tok, (size_t)rows_max * 4);
    G->ops->upload(G, gm.offsets, cm.offsets, ((size_t)E + 1) * 4);
    memcpy(gm.offsets_host, cm.offsets, ((size_t)E + 1) * 4);
    int R = cm.offsets[E];

    /* permute, expert products, SwiGLU left out, combination */
    size_t nh = (size_t)n * h, rh = (size_t)rows_max * h;
    size_t r2f = (size_t)rows_max * 2 * f, rf = (size_t)rows_max * f;
    size_t w1n = (size_t)E * 2 * f * h, w2n = (size_t)E * h * f;
    float *x = rand_bf(nh, -1, 1), *w1 = rand_bf(w1n, -0.1f, 0.1f);
    float *w2 = rand_bf(w2n, -0.1f, 0.1f), *a = rand_bf(rf, -1, 1);
    void *gx = g_act(x, nh), *gw1 = g_act(w1, w1n), *gw2 = g_act(w2, w2n);
    void *ga = g_act(a, rf);
    float *cx = c_buf(x, nh), *cw1 = c_buf(w1, w1n), *cw2 = c_buf(w2, w2n);
    float *ca = c_buf(a, rf);
    void *gxp = G->ops->alloc(G, rh * 2), *ggu = G->ops->alloc(G, r2f * 2);
    void *gyp = G->ops->alloc(G, rh * 2), *gout = G->ops->alloc(G, nh * 2);
    float *cxp = c_buf(NULL, rh), *cgu = c_buf(NULL, r2f), *cyp = c_buf(NULL, rh);
    float *cout = c_buf(NULL, nh);
    g_poison(gxp, rh * 2);
    g_poison(ggu, r2f * 2);
    g_poison(gyp, rh * 2);
    g_poison(gout, nh * 2);
    G->ops->moe_permute(G, gxp, gx, h, &gm);
    C->ops->moe_permute(C, cxp, cx, h, &cm);
    /* the gate and up halves of gu [rows, 2f] from W1's two halves
     * [E, f, h] each (row stride 2f), as the model runs them */
    size_t wh = (size_t)E * f * h;
    G->ops->moe_gemm(G, ggu, 2 * f, gxp, gw1, h, f, &gm);
    G->ops->moe_gemm(G, (uint16_t *)ggu + f, 2 * f, gxp, (uint16_t *)gw1 + wh, h, f, &gm);
    C->ops->moe_gemm(C, cgu, 2 * f, cxp, cw1, h, f, &cm);
    C->ops->moe_gemm(C, cgu + f, 2 * f, cxp, cw1 + wh, h, f, &cm);
    G->ops->moe_gemm(G, gyp, h, ga, gw2, f, h, &gm);
    C->ops->moe_gemm(C, cyp, h, ca, cw2, f, h, &cm);
    G->ops->moe_unpermute(G, gout, gyp, h, &gm);
    C->ops->moe_unpermute(C, cout, cyp, h, &cm);
    float *hxp = dl_act(gxp, rh), *hgu = dl_act(ggu, r2f);
    float *hyp = dl_act(gyp, rh), *hout = dl_act(gout, nh);
    snprintf(name, sizeof name, "moe_permute %s h=%d (%d of %d rows)", tag, h, R, rows_max);
    cmp(name, hxp, cxp, (long)rh, 0, 0);
    snprintf(name, sizeof name, "moe_gemm %s: X [%d, %d] into the halves of gu [%d, %d] by W1's halves [%d, %d, %d]", tag, rows_max, h, rows_max, 2 * f, E, f, h);
    cmp(name, hgu, cgu, (long)r2f, BF_RTOL, 1e-5 * sqrt(h));
    snprintf(name, sizeof name, "moe_gemm %s: A [%d, %d] W2 [%d, %d, %d]", tag, rows_max, f, E, h, f);
    cmp(name, hyp, cyp, (long)rh, BF_RTOL, 1e-5 * sqrt(f));
    snprintf(name, sizeof name, "moe_unpermute %s h=%d", tag, h);
    /* the CPU combines the GPU's rounded yp? no: each its own; compare
     * against the CPU's, whose yp differs in bf16 rounding */
    cmp(name, hout, cout, (long)nh, 2 * BF_RTOL, 1e-2);

    /* backward: unpermute_bwd, dgrad, wgrad, permute_bwd, route_bwd */
    float *dout = rand_bf(nh, -1, 1), *dW2 = rand_f32(w2n, -1, 1);
    float *dxp = rand_bf(rh, -1, 1), *dx0 = rand_bf(nh, -1, 1);
    float *yp = rand_bf(rh, -1, 1);
    void *gdout = g_act(dout, nh), *gyp2 = g_act(yp, rh), *gdxp = g_act(dxp, rh);
    void *gdx = g_act(dx0, nh);
    float *cdout = c_buf(dout, nh), *cyp2 = c_buf(yp, rh), *cdxp = c_buf(dxp, rh);
    float *cdx = c_buf(dx0, nh);
    void *gdyp = G->ops->alloc(G, rh * 2), *gda = G->ops->alloc(G, rf * 2);
    float *gdw = G->ops->alloc(G, nk * 4 + 4), *gdW2 = g_f32(dW2, w2n);
    float *cdyp = c_buf(NULL, rh), *cda = c_buf(NULL, rf), *cdw = c_buf(NULL, nk + 1);
    float *cdW2 = c_buf(dW2, w2n);
    g_poison(gdyp, rh * 2);
    g_poison(gda, rf * 2);
    g_poison(gdw, nk * 4);
    G->ops->moe_unpermute_bwd(G, gdyp, gdw, gdout, gyp2, h, &gm);
    C->ops->moe_unpermute_bwd(C, cdyp, cdw, cdout, cyp2, h, &cm);
    G->ops->moe_gemm_dgrad(G, gda, gdxp, h, gw2, f, h, &gm, 0);
    C->ops->moe_gemm_dgrad(C, cda, cdxp, h, cw2, f, h, &cm, 0);
    G->ops->moe_gemm_wgrad(G, gdW2, gdxp, h, ga, f, h, &gm, 1);
    C->ops->moe_gemm_wgrad(C, cdW2, cdxp, h, ca, f, h, &cm, 1);
    /* the gate and up data gradients into one dX (the second added),
     * and the up weight's gradient from gu's right half (stride 2f) */
    float *dgu = rand_bf(r2f, -1, 1), *dWu = rand_f32(wh, -1, 1);
    void *gdgu = g_act(dgu, r2f), *gdxh = G->ops->alloc(G, rh * 2);
    float *gdWu = g_f32(dWu, wh);
    float *cdgu = c_buf(dgu, r2f), *cdxh = c_buf(NULL, rh), *cdWu = c_buf(dWu, wh);
    g_poison(gdxh, rh * 2);
    g_poison(gdWu, wh * 4);         /* written: not to be read */
    G->ops->moe_gemm_dgrad(G, gdxh, gdgu, 2 * f, gw1, h, f, &gm, 0);
    G->ops->moe_gemm_dgrad(G, gdxh, (uint16_t *)gdgu + f, 2 * f, (uint16_t *)gw1 + wh, h, f, &gm, 1);
    C->ops->moe_gemm_dgrad(C, cdxh, cdgu, 2 * f, cw1, h, f, &cm, 0);
    C->ops->moe_gemm_dgrad(C, cdxh, cdgu + f, 2 * f, cw1 + wh, h, f, &cm, 1);
    G->ops->moe_gemm_wgrad(G, gdWu, (uint16_t *)gdgu + f, 2 * f, gxp, h, f, &gm, 0);
    C->ops->moe_gemm_wgrad(C, cdWu, cdgu + f, 2 * f, cxp, h, f, &cm, 0);
    float *hdxh = dl_act(gdxh, rh), *hdWu = dl_f32(gdWu, wh);
    snprintf(name, sizeof name, "moe_gemm_dgrad %s: dX [%d, %d] = gate's + up's (accumulate_dx, dY stride %d)", tag, rows_max, h, 2 * f);
    /* the rows past offsets[E]: the first call zeroes them, the second
     * leaves them.  dX is bf16 between the two calls (the CPU's stays
     * fp32): the gate's part is rounded once more, up to a bf16 half-ulp
     * of the largest values */
    cmp(name, hdxh, cdxh, (long)rh, BF_RTOL, BF_RTOL);
    snprintf(name, sizeof name, "moe_gemm_wgrad %s: dWu [%d, %d, %d] = gu's right half (written over NaN)", tag, E, f, h);
    cmp(name, hdWu, cdWu, (long)wh, 1e-5, 1e-5 * sqrt(n));
    G->ops->free(G, gdgu);
    G->ops->free(G, gdxh);
    G->ops->free(G, gdWu);
    C->ops->free(C, cdgu);
    C->ops->free(C, cdxh);
    C->ops->free(C, cdWu);
    free(dgu);
    free(dWu);
    free(hdxh);
    free(hdWu);
    G->ops->moe_permute_bwd(G, gdx, gdxp, h, &gm, 1);
    C->ops->moe_permute_bwd(C, cdx, cdxp, h, &cm, 1);
    float *hdyp = dl_act(gdyp, rh), *hda = dl_act(gda, rf);
    float *hdw = dl_f32(gdw, nk), *hdW2 = dl_f32(gdW2, w2n), *hdx = dl_act(gdx, nh);
    snprintf(name, sizeof name, "moe_unpermute_bwd %s: dyp", tag);
    cmp(name, hdyp, cdyp, (long)rh, BF_RTOL, 0);
    snprintf(name, sizeof name, "moe_unpermute_bwd %s: dweight (fp32 dot of %d)", tag, h);
    cmp(name, hdw, cdw, (long)nk, 1e-4, 1e-5);
    snprintf(name, sizeof name, "moe_gemm_dgrad %s: dA [%d, %d]", tag, rows_max, f);
    cmp(name, hda, cda, (long)rf, BF_RTOL, 1e-5 * sqrt(h));
    snprintf(name, sizeof name, "moe_gemm_wgrad %s: dW2 [%d, %d, %d] += (fp32)", tag, E, h, f);
    cmp(name, hdW2, cdW2, (long)w2n, 1e-5, 1e-5 * sqrt(n));
    snprintf(name, sizeof name, "moe_permute_bwd %s: dx += (accumulated)", tag);
    cmp(name, hdx, cdx, (long)nh, BF_RTOL, 1e-3);
    G->ops->moe_permute_bwd(G, gdx, gdxp, h, &gm, 0);
    C->ops->moe_permute_bwd(C, cdx, cdxp, h, &cm, 0);
    free(hdx);
    hdx = dl_act(gdx, nh);
    snprintf(name, sizeof name, "moe_permute_bwd %s: dx = (overwritten)", tag);
    cmp(name, hdx, cdx, (long)nh, BF_RTOL, 1e-3);

    float *dwt = rand_f32(nk, -1, 1);
    float *gdwt = g_f32(dwt, nk), *cdwt = c_buf(dwt, nk);
    float *gdl = G->ops->alloc(G, nE * 4), *cdl = c_buf(NULL, nE);
    g_poison(gdl, nE * 4);
    G->ops->moe_route_bwd(G, gdl, gdwt, glog, &gm, &cfg);
    C->ops->moe_route_bwd(C, cdl, cdwt, clog, &cm, &cfg);
    float *hdl = dl_f32(gdl, nE);
    snprintf(name, sizeof name, "moe_route_bwd %s: dlogits", tag);
    cmp(name, hdl, cdl, (long)nE, 1e-4, 1e-6);

    /* aux counts and loss (global, and per sequence of 16 tokens from
     * global row 48), z-loss, the bias update */
    for (int seq = 0; seq <= 16; seq += 16) {
        long row0 = seq ? 48 : 0;
        int G_ = seq ? (int)((row0 + n - 1) / seq + 1) : 1;
        size_t gE = (size_t)G_ * E;
        float *c0 = rand_f32(gE, 0, 0);
        for (size_t i = 0; i < gE; i++)
            c0[i] = (float)(i % 7);
        float *gc = g_f32(c0, gE), *cc = c_buf(c0, gE);
        G->ops->moe_aux_counts(G, gc, glog, n, row0, seq, &cfg);
        C->ops->moe_aux_counts(C, cc, clog, n, row0, seq, &cfg);
        float *hc = dl_f32(gc, gE);
        snprintf(name, sizeof name, "moe_aux_counts %s seq_len %d: counts [%d, %d] +=", tag, seq, G_, E);
        cmp(name, hc, cc, (long)gE, 0, 0);
        float l0 = 0.25f;
        float *gl = g_f32(&l0, 1), *cl = c_buf(&l0, 1);
        float *dl0 = rand_f32(nE, -1, 1);
        float *gdl2 = g_f32(dl0, nE), *cdl2 = c_buf(dl0, nE);
        G->ops->moe_aux_loss(G, gl, gdl2, glog, gc, n, row0, seq, 0.01f, 0.5f, &cfg);
        C->ops->moe_aux_loss(C, cl, cdl2, clog, cc, n, row0, seq, 0.01f, 0.5f, &cfg);
        float *hl = dl_f32(gl, 1), *hdl2 = dl_f32(gdl2, nE);
        snprintf(name, sizeof name, "moe_aux_loss %s seq_len %d: loss +=", tag, seq);
        cmp(name, hl, cl, 1, 1e-5, 0);
        /* the gradient's c_e - f cancels in fp32 with f of the size of
         * the counts: an absolute error of a few ulps of the largest
         * count, times gscale */
        double maxc = 0, maxr = 1e-30;
        for (size_t i = 0; i < gE; i++)
            maxc = fmax(maxc, fabs(cc[i]));
        for (size_t i = 0; i < nE; i++)
            maxr = fmax(maxr, fabs(cdl2[i]));
        snprintf(name, sizeof name, "moe_aux_loss %s seq_len %d: dlogits += (counts up to %g)", tag, seq, maxc);
        cmp(name, hdl2, cdl2, (long)nE, 1e-5, 1e-6 + 0.5 * maxc * 1e-6 / maxr);
        free(c0);
        free(hc);
        free(hl);
        free(hdl2);
        free(dl0);
        G->ops->free(G, gc);
        G->ops->free(G, gl);
        G->ops->free(G, gdl2);
        C->ops->free(C, cc);
        C->ops->free(C, cl);
        C->ops->free(C, cdl2);
    }
    {
        float l0 = -1;
        float *gl = g_f32(&l0, 1), *cl = c_buf(&l0, 1);
        float *dl0 = rand_f32(nE, -1, 1);
        float *gdl2 = g_f32(dl0, nE), *cdl2 = c_buf(dl0, nE);
        G->ops->moe_z_loss(G, gl, gdl2, glog, n, E, 1e-3f, 2.0f);
        C->ops->moe_z_loss(C, cl, cdl2, clog, n, E, 1e-3f, 2.0f);
        float *hl = dl_f32(gl, 1), *hdl2 = dl_f32(gdl2, nE);
        snprintf(name, sizeof name, "moe_z_loss n=%d E=%d: loss +=", n, E);
        cmp(name, hl, cl, 1, 1e-5, 0);
        snprintf(name, sizeof name, "moe_z_loss n=%d E=%d: dlogits +=", n, E);
        cmp(name, hdl2, cdl2, (long)nE, 1e-5, 1e-6);
        /* the bias update on the routing's counts (ties with the mean
         * included: E = 8 counts of 2 n / 8 each are possible) */
        float *gb2 = g_f32(bias, E), *cb2 = c_buf(bias, E);
        G->ops->moe_bias_update(G, gb2, gtpe, E, 1e-3f);
        C->ops->moe_bias_update(C, cb2, ctpe, E, 1e-3f);
        float *hb = dl_f32(gb2, E);
        snprintf(name, sizeof name, "moe_bias_update E=%d", E);
        cmp(name, hb, cb2, E, 0, 0);
        free(hl);
        free(hdl2);
        free(dl0);
        free(hb);
        G->ops->free(G, gl);
        G->ops->free(G, gdl2);
        G->ops->free(G, gb2);
        C->ops->free(C, cl);
        C->ops->free(C, cdl2);
        C->ops->free(C, cb2);
    }

    void *gp[] = {glog, gbias, gtpe, gdrop, gx, gw1, gw2, ga, gxp, ggu, gyp,
                  gout, gdout, gyp2, gdxp, gdx, gdyp, gda, gdw, gdW2, gdwt,
                  gdl};
    for (size_t i = 0; i < sizeof gp / sizeof gp[0]; i++)
        G->ops->free(G, gp[i]);
    float *cp[] = {clog, cbias, ctpe, cdrop, cx, cw1, cw2, ca, cxp, cgu, cyp,
                   cout, cdout, cyp2, cdxp, cdx, cdyp, cda, cdw, cdW2, cdwt,
                   cdl};
    for (size_t i = 0; i < sizeof cp / sizeof cp[0]; i++)
        C->ops->free(C, cp[i]);
    void *hp[] = {logits, bias, ge, gr, grt, go, gw, gt, gd, x, w1, w2, a,
                  hxp, hgu, hyp, hout, dout, dW2, dxp, dx0, yp, hdyp, hda,
                  hdw, hdW2, hdx, dwt, hdl};
    for (size_t i = 0; i < sizeof hp / sizeof hp[0]; i++)
        free(hp[i]);
    moe_map_free(G, &gm);
    moe_map_free(C, &cm);
}

/* The per-expert loop (GRIDLM_MOE_GEMM=loop) on 1 and on 4 streams
 * (moe.cu's lanes): the three products of an [E, out, in] weight over n
 * tokens top-k, with expert E-1 left without rows and one expert taking
 * most of them, must give the same bits on any number of lanes, and
 * match the CPU; the written weight gradient must zero the idle expert. */
static void test_moe_lanes(int n, int E, int k, int in, int out)
{
    gl_moe_route_cfg cfg = {.E = E, .k = k};
    int R = gl_moe_rows_max(n, &cfg);
    size_t nE = (size_t)n * E, xn = (size_t)R * in, yn = (size_t)R * out;
    size_t wn = (size_t)E * out * in;
    float *lg = rand_f32(nE, -1, 1);
    for (int t = 0; t < n; t++) {
        lg[(size_t)t * E + E - 1] = -10;        /* never chosen */
        if (t % 3)
            lg[(size_t)t * E] = 3;              /* most tokens' first */
    }
    float *glg = g_f32(lg, nE), *clg = c_buf(lg, nE);
    gl_moe_map gm, cm;
    moe_map_alloc(G, &gm, n, k, E, R, 1);
    moe_map_alloc(C, &cm, n, k, E, R, 0);
    G->ops->moe_route(G, &gm, glg, NULL, &cfg, NULL, NULL);
    C->ops->moe_route(C, &cm, clg, NULL, &cfg, NULL, NULL);
    int rows = cm.offsets[E];
    float *x = rand_bf(xn, -1, 1), *w = rand_bf(wn, -0.1f, 0.1f), *dy = rand_bf(yn, -1, 1);
    void *gx = g_act(x, xn), *gw = g_act(w, wn), *gdy = g_act(dy, yn);
    float *cx = c_buf(x, xn), *cw = c_buf(w, wn), *cdy = c_buf(dy, yn);
    void *gy = G->ops->alloc(G, yn * 2), *gdx = G->ops->alloc(G, xn * 2);
    float *gdw = G->ops->alloc(G, wn * 4);
    float *cy = c_buf(NULL, yn), *cdx = c_buf(NULL, xn), *cdw = c_buf(NULL, wn);
    uint8_t *got[2][3];
    setenv("GRIDLM_MOE_GEMM", "loop", 1);
    for (int l = 0; l < 2; l++) {
        setenv("GRIDLM_MOE_LANES", l ? "4" : "1", 1);
        g_poison(gy, yn * 2);
        g_poison(gdx, xn * 2);
        g_poison(gdw, wn * 4);
        G->ops->moe_gemm(G, gy, out, gx, gw, in, out, &gm);
        G->ops->moe_gemm_dgrad(G, gdx, gdy, out, gw, in, out, &gm, 0);
        G->ops->moe_gemm_dgrad(G, gdx, gdy, out, gw, in, out, &gm, 1);
        G->ops->moe_gemm_wgrad(G, gdw, gdy, out, gx, in, out, &gm, 0);
        G->ops->moe_gemm_wgrad(G, gdw, gdy, out, gx, in, out, &gm, 1);
        got[l][0] = dl_bytes(gy, (size_t)rows * out * 2);
        got[l][1] = dl_bytes(gdx, (size_t)rows * in * 2);
        got[l][2] = dl_bytes(gdw, wn * 4);
    }
    unsetenv("GRIDLM_MOE_LANES");
    unsetenv("GRIDLM_MOE_GEMM");
    const char *nm[3] = {"Y", "dX (= then +=)", "dW (written, then +=)"};
    size_t nb[3] = {(size_t)rows * out * 2, (size_t)rows * in * 2, wn * 4};
    for (int i = 0; i < 3; i++)
        ok(!memcmp(got[0][i], got[1][i], nb[i]), "moe products n=%d E=%d top-%d %d -> %d "
           "(%d rows, expert %d idle): %s the same bits on 1 and 4 streams", n, E, k, in,
           out, rows, E - 1, nm[i]);
    C->ops->moe_gemm(C, cy, out, cx, cw, in, out, &cm);
    C->ops->moe_gemm_dgrad(C, cdx, cdy, out, cw, in, out, &cm, 0);
    C->ops->moe_gemm_dgrad(C, cdx, cdy, out, cw, in, out, &cm, 1);
    memset(cdw, 0, wn * 4);
    C->ops->moe_gemm_wgrad(C, cdw, cdy, out, cx, in, out, &cm, 1);
    C->ops->moe_gemm_wgrad(C, cdw, cdy, out, cx, in, out, &cm, 1);
    float *hy = dl_act(gy, (size_t)rows * out), *hdx = dl_act(gdx, (size_t)rows * in);
    float *hdw = dl_f32(gdw, wn);
    cmp("moe products on 4 streams: Y against the CPU", hy, cy, (long)rows * out, BF_RTOL,
        1e-5 * sqrt(in));
    cmp("moe products on 4 streams: dX against the CPU", hdx, cdx, (long)rows * in, BF_RTOL,
        1e-5 * sqrt(out));
    cmp("moe products on 4 streams: dW against the CPU", hdw, cdw, (long)wn, 1e-5,
        1e-5 * sqrt(n));
    void *gp[] = {glg, gx, gw, gdy, gy, gdx, gdw};
    for (size_t i = 0; i < sizeof gp / sizeof gp[0]; i++)
        G->ops->free(G, gp[i]);
    float *cp[] = {clg, cx, cw, cdy, cy, cdx, cdw};
    for (size_t i = 0; i < sizeof cp / sizeof cp[0]; i++)
        C->ops->free(C, cp[i]);
    void *hp[] = {lg, x, w, dy, hy, hdx, hdw, got[0][0], got[0][1], got[0][2], got[1][0],
                  got[1][1], got[1][2]};
    for (size_t i = 0; i < sizeof hp / sizeof hp[0]; i++)
        free(hp[i]);
    moe_map_free(G, &gm);
    moe_map_free(C, &cm);
}

/* head_rmsnorm (--qk-layernorm): H heads of D per token, read from a view
 * of row stride ldx (a fused QKV buffer: gap columns after the heads),
 * written to a view of row stride ldy; the backward in place on a
 * gradient of stride ldx, as the model runs it (the gap columns must come
 * back untouched), dw accumulated. */
static void test_head_rmsnorm(int n, int H, int D, int ldx, int ldy)
{
    size_t nx = (size_t)n * ldx, ny = (size_t)n * ldy, nr = (size_t)n * H;
    float *x = rand_bf(nx, -2, 2), *w = rand_bf(D, 0.2f, 1.8f);
    float *y0 = rand_bf(ny, -1, 1), *dy = rand_bf(nx, -1, 1);
    float *dw0 = rand_f32(D, -1, 1);
    void *gx = g_act(x, nx), *gw = g_act(w, D), *gy = g_act(y0, ny), *gg = g_act(dy, nx);
    float *grs = g_f32(NULL, nr), *gdw = g_f32(dw0, D);
    float *cx = c_buf(x, nx), *cw = c_buf(w, D), *cy = c_buf(y0, ny), *cg = c_buf(dy, nx);
    float *crs = c_buf(NULL, nr), *cdw = c_buf(dw0, D);
    g_poison(grs, nr * 4);
    G->ops->head_rmsnorm_fwd(G, gy, ldy, grs, gx, ldx, gw, n, H, D, 1e-6f);
    C->ops->head_rmsnorm_fwd(C, cy, ldy, crs, cx, ldx, cw, n, H, D, 1e-6f);
    char name[128];
    float *y = dl_act(gy, ny), *rs = dl_f32(grs, nr);
    snprintf(name, sizeof name, "head_rmsnorm_fwd n=%d H=%d D=%d ldx=%d ldy=%d", n, H, D, ldx,
             ldy);
    cmp(name, y, cy, (long)ny, BF_RTOL, 1e-3);
    snprintf(name, sizeof name, "head_rmsnorm_fwd rstd n=%d H=%d D=%d", n, H, D);
    cmp(name, rs, crs, (long)nr, 1e-5, 0);
    /* backward from the CPU's rstd on both sides, in place */
    G->ops->upload(G, grs, crs, nr * 4);
    G->ops->head_rmsnorm_bwd(G, gg, ldx, gdw, gg, gx, ldx, gw, grs, n, H, D);
    C->ops->head_rmsnorm_bwd(C, cg, ldx, cdw, cg, cx, ldx, cw, crs, n, H, D);
    float *dx = dl_act(gg, nx), *dw = dl_f32(gdw, D);
    snprintf(name, sizeof name, "head_rmsnorm_bwd dx in place n=%d H=%d D=%d ldx=%d", n, H, D,
             ldx);
    cmp(name, dx, cg, (long)nx, BF_RTOL, 2e-3);
    snprintf(name, sizeof name, "head_rmsnorm_bwd dw n=%d H=%d D=%d (fp32, +=)", n, H, D);
    cmp(name, dw, cdw, D, 1e-4, 1e-5);
    /* again on fresh buffers: the same bits (dw's sums in a fixed order) */
    void *gg2 = g_act(dy, nx);
    float *gdw2 = g_f32(dw0, D);
    G->ops->head_rmsnorm_bwd(G, gg2, ldx, gdw2, gg2, gx, ldx, gw, grs, n, H, D);
    float *dx2 = dl_act(gg2, nx), *dw2 = dl_f32(gdw2, D);
    ok(!memcmp(dx2, dx, nx * 4) && !memcmp(dw2, dw, (size_t)D * 4),
       "head_rmsnorm_bwd n=%d H=%d D=%d: the same bits again", n, H, D);
    void *gp[] = {gx, gw, gy, gg, grs, gdw, gg2, gdw2};
    for (size_t i = 0; i < sizeof gp / sizeof gp[0]; i++)
        G->ops->free(G, gp[i]);
    float *cp[] = {cx, cw, cy, cg, crs, cdw};
    for (size_t i = 0; i < sizeof cp / sizeof cp[0]; i++)
        C->ops->free(C, cp[i]);
    float *hp[] = {x, w, y0, dy, dw0, y, rs, dx, dw, dx2, dw2};
    for (size_t i = 0; i < sizeof hp / sizeof hp[0]; i++)
        free(hp[i]);
}

/* ---- timings (GL_OPS_CUDA_BENCH=1) ---- */

/* ---- context parallelism's block attention ---- */

/* lse arrays of n rows that may hold -inf (rows without keys): the -inf
 * rows must be the same on both sides, the finite ones within tolerance. */
static void cmp_lse(const char *what, const float *got, const float *want,
                    long n)
{
    float *g = gl_malloc((size_t)n * sizeof *g + 1);
    float *w = gl_malloc((size_t)n * sizeof *w + 1);
    long differ = 0, empty = 0;
    for (long i = 0; i < n; i++) {
        int gi = isinf(got[i]) && got[i] < 0, wi = isinf(want[i]) && want[i] < 0;
        differ += gi != wi;
        empty += wi;
        g[i] = gi ? 0 : got[i];
        w[i] = wi ? 0 : want[i];
    }
    ok(differ == 0, "%s: the same %ld rows without keys (%ld differ)", what,
       empty, differ);
    char name[240];
    snprintf(name, sizeof name, "%.200s: finite values", what);
    cmp(name, g, w, n, 1e-5, 1e-5);
    free(g);
    free(w);
}

/* Random f32 accumulators (the block backward adds to them). */
static float *rand_acc(size_t n)
{
    return rand_f32(n, -0.5f, 0.5f);
}

/*
 * One block: Sq queries (q, dout: [B, Sq, Hq D] with a row gap) against
 * Sk keys of a fused K/V buffer [B, Sk, 2 Hkv D] (strided views), the
 * positions and mask given.  attn_block_fwd, attn_delta (from the CPU's
 * output rounded to act) and attn_block_bwd (from the CPU's lse and delta,
 * into random accumulators) against the CPU.  Both sides see the same
 * bf16 inputs and compute in fp32, so the tolerances are tighter than
 * attn_fwd's (no rounding of probabilities to bf16 here).
 */
static void test_attn_block(const char *what, int B, int Sq, int Sk, int Hq,
                            int Hkv, int D, gl_attn_pos qpos, gl_attn_pos kpos,
                            gl_attn_mask mask, const gl_attn_dropout *dp)
{
    int Wq = Hq * D + 8, Wkv = 2 * Hkv * D;     /* q, dout rows; fused K/V */
    int Wo = Hq * D + 4;                        /* f32 output rows, a gap */
    size_t nq = (size_t)B * Sq * Wq, nkv = (size_t)B * Sk * Wkv;
    size_t no = (size_t)B * Sq * Wo, nl = (size_t)B * Hq * Sq;
    size_t ndk = (size_t)B * Sk * Hkv * D;
    float scale = 1.0f / sqrtf((float)D);
    float *q = rand_bf(nq, -1, 1), *kv = rand_bf(nkv, -1, 1);
    float *dout = rand_bf(nq, -1, 1);
    for (size_t i = 0; i < nq; i++)              /* sharper softmax */
        q[i] = round_bf(q[i] * 4);
    void *gq = g_act(q, nq), *gkv = g_act(kv, nkv), *gdo = g_act(dout, nq);
    uint16_t *gk = gkv, *gv = gk + Hkv * D;
    float *go = g_f32(NULL, no), *glse = g_f32(NULL, nl);
    g_poison(go, no * 4);
    g_poison(glse, nl * 4);
    G->ops->attn_block_fwd(G, go, Wo, glse, gq, Wq, gk, Wkv, gv, Wkv, B, Sq,
                           Sk, Hq, Hkv, D, scale, &qpos, &kpos, mask, dp);

    float *cq = c_buf(q, nq), *ckv = c_buf(kv, nkv), *cdo = c_buf(dout, nq);
    float *ck = ckv, *cv = ckv + Hkv * D;
    float *co = c_buf(NULL, no), *clse = c_buf(NULL, nl);
    C->ops->attn_block_fwd(C, co, Wo, clse, cq, Wq, ck, Wkv, cv, Wkv, B, Sq,
                           Sk, Hq, Hkv, D, scale, &qpos, &kpos, mask, dp);

    char name[200];
    float *o = dl_f32(go, no), *lse = dl_f32(glse, nl);
    snprintf(name, sizeof name, "attn_block_fwd o   %s", what);
    cmp2d(name, o, Wo, co, Wo, (long)B * Sq, Hq * D, 0, 1e-3);
    snprintf(name, sizeof name, "attn_block_fwd lse %s", what);
    cmp_lse(name, lse, clse, (long)nl);

    /* delta from the CPU's output as act (row stride Wo) */
    float *co_bf = gl_malloc(no * sizeof *co_bf);
    for (size_t i = 0; i < no; i++)
        co_bf[i] = round_bf(co[i]);
    void *go_act = g_act(co_bf, no);
    float *gdelta = g_f32(NULL, nl), *cdelta = c_buf(NULL, nl);
    g_poison(gdelta, nl * 4);
    G->ops->attn_delta(G, gdelta, gdo, Wq, go_act, Wo, B, Sq, Hq, D);
    C->ops->attn_delta(C, cdelta, cdo, Wq, co_bf, Wo, B, Sq, Hq, D);
    float *delta = dl_f32(gdelta, nl);
    snprintf(name, sizeof name, "attn_delta %s", what);
    cmp(name, delta, cdelta, (long)nl, 1e-5, 1e-5);

    /* backward into random accumulators, from the CPU's lse and delta */
    float *dq0 = rand_acc(no), *dk0 = rand_acc(ndk), *dv0 = rand_acc(ndk);
    float *gdq = g_f32(dq0, no), *gdk = g_f32(dk0, ndk), *gdv = g_f32(dv0, ndk);
    float *glse2 = g_f32(clse, nl), *gdelta2 = g_f32(cdelta, nl);
    float *cdq = c_buf(dq0, no), *cdk = c_buf(dk0, ndk), *cdv = c_buf(dv0, ndk);
    G->ops->attn_block_bwd(G, gdq, Wo, gdk, gdv, Hkv * D, gdo, Wq, glse2,
                           gdelta2, gq, Wq, gk, Wkv, gv, Wkv, B, Sq, Sk, Hq,
                           Hkv, D, scale, &qpos, &kpos, mask, dp);
    C->ops->attn_block_bwd(C, cdq, Wo, cdk, cdv, Hkv * D, cdo, Wq, clse,
                           cdelta, cq, Wq, ck, Wkv, cv, Wkv, B, Sq, Sk, Hq,
                           Hkv, D, scale, &qpos, &kpos, mask, dp);
    float *dq = dl_f32(gdq, no), *dk = dl_f32(gdk, ndk), *dv = dl_f32(gdv, ndk);
    snprintf(name, sizeof name, "attn_block_bwd dq %s", what);
    cmp2d(name, dq, Wo, cdq, Wo, (long)B * Sq, Hq * D, 0, 1e-3);
    snprintf(name, sizeof name, "attn_block_bwd dk %s", what);
    cmp(name, dk, cdk, (long)ndk, 0, 1e-3);
    snprintf(name, sizeof name, "attn_block_bwd dv %s", what);
    cmp(name, dv, cdv, (long)ndk, 0, 1e-3);

    void *gbufs[] = {gq, gkv, gdo, go, glse, go_act, gdelta, gdq, gdk, gdv,
                     glse2, gdelta2};
    for (size_t i = 0; i < sizeof gbufs / sizeof gbufs[0]; i++)
        G->ops->free(G, gbufs[i]);
    float *cbufs[] = {cq, ckv, cdo, co, clse, cdelta, cdq, cdk, cdv};
    for (size_t i = 0; i < sizeof cbufs / sizeof cbufs[0]; i++)
        C->ops->free(C, cbufs[i]);
    float *hbufs[] = {q, kv, dout, o, lse, co_bf, delta, dq0, dk0, dv0, dq, dk,
                      dv};
    for (size_t i = 0; i < sizeof hbufs / sizeof hbufs[0]; i++)
        free(hbufs[i]);
}

/* Megatron's CP layout: 2 CP chunks of c tokens, rank r holding chunks r
 * and 2 CP - 1 - r (two runs). */
static gl_attn_pos cp_pos(int CP, int r, int c)
{
    gl_attn_pos p = { .split = c,
                      .start = { (long)r * c, (long)(2 * CP - 1 - r) * c } };
    return p;
}

/* The blocks a ring of CP ranks computes, each alone: rank r's queries
 * against the keys of ranks r (the causal diagonal), r - 1 and r + 1
 * (mixed: one chunk seen whole, the other not at all, or rows without
 * keys), also with attention dropout keyed by the rows' positions (the
 * GPU's mask bits must be the CPU's), a one-run query block against
 * one-run keys (full and empty). */
static void test_attn_block_shapes(int B, int c, int Hq, int Hkv, int D)
{
    char what[160];
    int CP = 2;
    gl_attn_dropout dp = { .seed = 99, .iteration = 5, .layer = 2, .site = 2,
                           .p = 0.2f, .b0 = 1, .h0 = Hq, .heads = 3 * Hq,
                           .seq = 2 * CP * c };
    for (int r = 0; r < CP; r++)
        for (int rk = 0; rk < CP; rk++)
            for (int drop = 0; drop < 2; drop++) {
                snprintf(what, sizeof what, "B=%d Hq=%d Hkv=%d D=%d CP chunk %d "
                         "queries of rank %d, keys of rank %d, causal%s", B, Hq,
                         Hkv, D, c, r, rk, drop ? ", dropout 0.2" : "");
                test_attn_block(what, B, 2 * c, 2 * c, Hq, Hkv, D,
                                cp_pos(CP, r, c), cp_pos(CP, rk, c),
                                GL_ATTN_CAUSAL, drop ? &dp : NULL);
            }
    gl_attn_pos q1 = { .split = c + 3, .start = { 0, 0 } };
    gl_attn_pos k1 = { .split = c - 1, .start = { 100, 0 } };
    snprintf(what, sizeof what, "B=%d Hq=%d Hkv=%d D=%d Sq=%d Sk=%d full",
             B, Hq, Hkv, D, c + 3, c - 1);
    test_attn_block(what, B, c + 3, c - 1, Hq, Hkv, D, q1, k1, GL_ATTN_FULL,
                    NULL);
    snprintf(what, sizeof what, "B=%d Hq=%d Hkv=%d D=%d Sq=%d Sk=%d causal, "
             "every key after every query (empty)", B, Hq, Hkv, D, c + 3, c - 1);
    test_attn_block(what, B, c + 3, c - 1, Hq, Hkv, D, q1, k1, GL_ATTN_CAUSAL,
                    NULL);
    gl_attn_pos k0 = { .split = 0, .start = { 0, 0 } };  /* run 1 only */
    k0.start[1] = 2;
    snprintf(what, sizeof what, "B=%d Hq=%d Hkv=%d D=%d Sq=%d Sk=%d causal, "
             "keys from position 2 in run 1", B, Hq, Hkv, D, c + 3, c - 1);
    test_attn_block(what, B, c + 3, c - 1, Hq, Hkv, D, q1, k0, GL_ATTN_CAUSAL,
                    NULL);
}

/*
 * The ring: a sequence of 2 CP c tokens on CP ranks of Megatron's layout;
 * each rank's queries against every rank's K/V in ring order, merged
 * (attn_merge), must give attn_fwd's output and lse on the whole sequence
 * (the CPU's); the f32 output converted to act (convert_2d), attn_delta,
 * and every block's backward from the final lse summed into f32 dq, dk,
 * dv per rank must give attn_bwd's gradients.  Fused QKV rows [B, S,
 * (Hq + 2 Hkv) D] as the model lays them out; the CPU runs on the whole
 * sequence, the GPU on each rank's rows gathered.
 *
 * cudnn 0: under GL_ATTN_NATIVE, every block runs attn_block.cu's fp32
 * kernels, compared tightly (1e-3 of the largest value, 2e-3 for the
 * gradients).  cudnn 1: under GL_ATTN_AUTO, every block runs through
 * cuDNN in a build with cuDNN, cut into parts (gl_attn_block_split;
 * asserted: CP^2 forward and CP^2 backward block calls), whose
 * probabilities meet v and dO as bf16, so attention's tolerances apply
 * (1e-2 and 2e-2).
 */
static void test_attn_ring(int B, int CP, int c, int Hq, int Hkv, int D,
                           int cudnn)
{
    double otol = cudnn ? 1e-2 : 1e-3, gtol = cudnn ? 2e-2 : 2e-3;
    gl_attn_counts n0;
    gl_cuda_attn_counts(G, &n0);
    int S = 2 * CP * c, n = 2 * c;               /* tokens; per rank */
    int W = (Hq + 2 * Hkv) * D, Wo = Hq * D;
    float scale = 1.0f / sqrtf((float)D);
    size_t nqkv = (size_t)B * S * W, nout = (size_t)B * S * Wo;
    float *qkv = rand_bf(nqkv, -1, 1), *dout = rand_bf(nout, -1, 1);
    for (size_t r = 0; r < (size_t)B * S; r++)
        for (int i = 0; i < Hq * D; i++)
            qkv[r * W + i] = round_bf(qkv[r * W + i] * 4);

    /* the CPU on the whole sequence */
    float *cqkv = c_buf(qkv, nqkv), *cdo = c_buf(dout, nout);
    float *co = c_buf(NULL, nout), *clse = c_buf(NULL, (size_t)B * Hq * S);
    float *cd = c_buf(NULL, nqkv);
    C->ops->attn_fwd(C, co, Wo, clse, cqkv, W, cqkv + Hq * D, W,
                     cqkv + (Hq + Hkv) * D, W, B, S, Hq, Hkv, D, scale, NULL);

    /* each rank's rows gathered: local row t of rank r is token tok(r, t) */
    size_t rq = (size_t)B * n * W, ro = (size_t)B * n * Wo;
    size_t rl = (size_t)B * Hq * n, rkv = (size_t)B * n * Hkv * D;
    void **gqkv = gl_malloc(CP * sizeof *gqkv), **gdo = gl_malloc(CP * sizeof *gdo);
    float **go = gl_malloc(CP * sizeof *go), **glse = gl_malloc(CP * sizeof *glse);
    float **gdq = gl_malloc(CP * sizeof *gdq), **gdk = gl_malloc(CP * sizeof *gdk);
    float **gdv = gl_malloc(CP * sizeof *gdv);
    float *hq = gl_malloc(rq * sizeof *hq), *hd = gl_malloc(ro * sizeof *hd);
#define TOK(r, t) ((t) < c ? (r) * c + (t) : (2 * CP - 1 - (r)) * c + (t) - c)
    for (int r = 0; r < CP; r++) {
        for (int b = 0; b < B; b++)
            for (int t = 0; t < n; t++) {
                size_t src = (size_t)b * S + TOK(r, t), dst = (size_t)b * n + t;
                memcpy(hq + dst * W, qkv + src * W, (size_t)W * sizeof *hq);
                memcpy(hd + dst * Wo, dout + src * Wo, (size_t)Wo * sizeof *hd);
            }
        gqkv[r] = g_act(hq, rq);
        gdo[r] = g_act(hd, ro);
        go[r] = g_f32(NULL, ro);
        glse[r] = g_f32(NULL, rl);
        gdq[r] = g_f32(NULL, ro);
        gdk[r] = g_f32(NULL, rkv);
        gdv[r] = g_f32(NULL, rkv);
        g_poison(go[r], ro * 4);
        g_poison(glse[r], rl * 4);
    }
    float *gob = g_f32(NULL, ro), *glb = g_f32(NULL, rl);
    float *gdelta = g_f32(NULL, rl);
    void *goact = G->ops->alloc(G, ro * 2);

    /* forward: rank r meets the K/V of ranks r, r - 1, ... */
    for (int r = 0; r < CP; r++)
        for (int j = 0; j < CP; j++) {
            int rk = (r - j + CP) % CP;
            uint16_t *q = gqkv[r], *kv = gqkv[rk];
            gl_attn_pos qp = cp_pos(CP, r, c), kp = cp_pos(CP, rk, c);
            G->ops->attn_block_fwd(G, gob, Wo, glb, q, W, kv + Hq * D, W,
                                   kv + (Hq + Hkv) * D, W, B, n, n, Hq, Hkv, D,
                                   scale, &qp, &kp, GL_ATTN_CAUSAL, NULL);
            G->ops->attn_merge(G, go[r], glse[r], gob, glb, B, n, Hq, D, j == 0);
        }

    /* backward: delta per rank from its output as act, then every block */
    for (int r = 0; r < CP; r++) {
        G->ops->convert_2d(G, goact, G->act, Wo, go[r], GL_DT_F32, Wo, B * n,
                           Wo);
        G->ops->attn_delta(G, gdelta, gdo[r], Wo, goact, Wo, B, n, Hq, D);
        for (int j = 0; j < CP; j++) {
            int rk = (r - j + CP) % CP;
            uint16_t *q = gqkv[r], *kv = gqkv[rk];
            gl_attn_pos qp = cp_pos(CP, r, c), kp = cp_pos(CP, rk, c);
            G->ops->attn_block_bwd(G, gdq[r], Wo, gdk[rk], gdv[rk], Hkv * D,
                                   gdo[r], Wo, glse[r], gdelta, q, W,
                                   kv + Hq * D, W, kv + (Hq + Hkv) * D, W, B,
                                   n, n, Hq, Hkv, D, scale, &qp, &kp,
                                   GL_ATTN_CAUSAL, NULL);
        }
    }

    if (cudnn) {
        gl_attn_counts n1;
        gl_cuda_attn_counts(G, &n1);
        long f = n1.blk_fwd_cudnn - n0.blk_fwd_cudnn;
        long b = n1.blk_bwd_cudnn - n0.blk_bwd_cudnn;
        if (gl_cuda_cudnn_version() == 0)
            skip(1, "this gridlm was built without cuDNN");
        else
            ok(f == CP * CP && b == CP * CP, "ring of %d, B=%d c=%d D=%d: all "
               "%d blocks through cuDNN (%ld forward, %ld backward block calls)",
               CP, B, c, D, CP * CP, f, b);
    }

    /* the GPU's results scattered back to the whole sequence */
    float *o = gl_malloc(nout * sizeof *o), *dg = gl_malloc(nqkv * sizeof *dg);
    float *lse = gl_malloc((size_t)B * Hq * S * sizeof *lse);
    for (int r = 0; r < CP; r++) {
        float *ro_ = dl_f32(go[r], ro), *rls = dl_f32(glse[r], rl);
        float *rdq = dl_f32(gdq[r], ro), *rdk = dl_f32(gdk[r], rkv);
        float *rdv = dl_f32(gdv[r], rkv);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < n; t++) {
                size_t src = (size_t)b * n + t, dst = (size_t)b * S + TOK(r, t);
                memcpy(o + dst * Wo, ro_ + src * Wo, (size_t)Wo * sizeof *o);
                memcpy(dg + dst * W, rdq + src * Wo, (size_t)Wo * sizeof *dg);
                memcpy(dg + dst * W + Hq * D, rdk + src * Hkv * D,
                       (size_t)Hkv * D * sizeof *dg);
                memcpy(dg + dst * W + (Hq + Hkv) * D, rdv + src * Hkv * D,
                       (size_t)Hkv * D * sizeof *dg);
                for (int h = 0; h < Hq; h++)
                    lse[((size_t)b * Hq + h) * S + TOK(r, t)] =
                        rls[((size_t)b * Hq + h) * n + t];
            }
        free(ro_), free(rls), free(rdq), free(rdk), free(rdv);
    }
#undef TOK

    char name[200];
    snprintf(name, sizeof name, "ring of %d%s (attn_block_fwd + attn_merge) o "
             "= attn_fwd's, B=%d S=%d Hq=%d Hkv=%d D=%d", CP,
             cudnn ? " (cuDNN)" : "", B, S, Hq, Hkv, D);
    cmp2d(name, o, Wo, co, Wo, (long)B * S, Wo, 0, otol);
    snprintf(name, sizeof name, "ring of %d lse = attn_fwd's, B=%d S=%d D=%d",
             CP, B, S, D);
    cmp(name, lse, clse, (long)B * Hq * S, 1e-5, 1e-5);

    /* the CPU's backward from the GPU's output as act (the o the delta
     * was computed from) */
    for (size_t i = 0; i < nout; i++)
        o[i] = round_bf(o[i]);
    C->ops->attn_bwd(C, cd, cd + Hq * D, cd + (Hq + Hkv) * D, W, cdo, Wo, o,
                     Wo, clse, cqkv, W, cqkv + Hq * D, W, cqkv + (Hq + Hkv) * D,
                     W, B, S, Hq, Hkv, D, scale, NULL);
    snprintf(name, sizeof name, "ring of %d%s (attn_delta + attn_block_bwd) dq "
             "= attn_bwd's, B=%d S=%d Hq=%d Hkv=%d D=%d", CP,
             cudnn ? " (cuDNN)" : "", B, S, Hq, Hkv, D);
    cmp2d(name, dg, W, cd, W, (long)B * S, Hq * D, 0, gtol);
    snprintf(name, sizeof name, "ring of %d dk = attn_bwd's, D=%d", CP, D);
    cmp2d(name, dg + Hq * D, W, cd + Hq * D, W, (long)B * S, Hkv * D, 0, gtol);
    snprintf(name, sizeof name, "ring of %d dv = attn_bwd's, D=%d", CP, D);
    cmp2d(name, dg + (Hq + Hkv) * D, W, cd + (Hq + Hkv) * D, W, (long)B * S,
          Hkv * D, 0, gtol);

    for (int r = 0; r < CP; r++) {
        void *gb[] = {gqkv[r], gdo[r], go[r], glse[r], gdq[r], gdk[r], gdv[r]};
        for (size_t i = 0; i < sizeof gb / sizeof gb[0]; i++)
            G->ops->free(G, gb[i]);
    }
    G->ops->free(G, gob);
    G->ops->free(G, glb);
    G->ops->free(G, gdelta);
    G->ops->free(G, goact);
    C->ops->free(C, cqkv);
    C->ops->free(C, cdo);
    C->ops->free(C, co);
    C->ops->free(C, clse);
    C->ops->free(C, cd);
    free(gqkv), free(gdo), free(go), free(glse), free(gdq), free(gdk), free(gdv);
    free(hq), free(hd), free(qkv), free(dout), free(o), free(dg), free(lse);
}

/* convert_2d: act <-> f32 and each to itself, between strided views. */
static void test_convert_2d(int rows, int cols, int ld_src, int ld_dst)
{
    gl_dtype types[2] = { GL_DT_BF16, GL_DT_F32 };
    size_t ns = (size_t)rows * ld_src, nd = (size_t)rows * ld_dst;
    float *x = rand_f32(ns, -3, 3);
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) {
            gl_dtype st = types[a], dt = types[b];
            void *src = st == GL_DT_F32 ? (void *)g_f32(x, ns) : g_act(x, ns);
            void *dst = G->ops->alloc(G, nd * (dt == GL_DT_F32 ? 4 : 2));
            g_poison(dst, nd * (dt == GL_DT_F32 ? 4 : 2));
            G->ops->convert_2d(G, dst, dt, ld_dst, src, st, ld_src, rows, cols);
            float *got = dt == GL_DT_F32 ? dl_f32(dst, nd) : dl_act(dst, nd);
            long bad = 0;
            for (int r = 0; r < rows; r++)
                for (int c = 0; c < cols; c++) {
                    float v = x[(size_t)r * ld_src + c];
                    if (st == GL_DT_BF16 || dt == GL_DT_BF16)
                        v = round_bf(v);       /* once: exact either way */
                    bad += got[(size_t)r * ld_dst + c] != v;
                }
            ok(bad == 0, "convert_2d %s -> %s, %d x %d, strides %d -> %d "
               "(%ld wrong)", st == GL_DT_F32 ? "f32" : "act",
               dt == GL_DT_F32 ? "f32" : "act", rows, cols, ld_src, ld_dst, bad);
            G->ops->free(G, src);
            G->ops->free(G, dst);
            free(got);
        }
    free(x);
}

/* convert_2d with a stride past 2^31 elements (ops.h's limits): two act
 * rows 2^31 + 256 elements apart copied out to a contiguous f32 block,
 * then other values copied back in from one; only the two rows' spans
 * of the 4 GiB view are written or read.  Needs 5 GiB of the device. */
static void test_convert_2d_wide(void)
{
    enum { rows = 2, cols = 300 };
    const long ld = (1L << 31) + 256;
    size_t in_use, peak, total;
    size_t wide_bytes = ((size_t)(rows - 1) * ld + cols) * 2;
    G->ops->mem_info(G, &in_use, &peak, &total);
    if (total < in_use + wide_bytes + ((size_t)1 << 30)) {
        skip(2, "convert_2d past 2^31 elements: less than 5 GiB free on the device");
        return;
    }
    char *wide = G->ops->alloc(G, wide_bytes);
    float *x = rand_f32((size_t)rows * cols, -3, 3);
    uint16_t row[cols];
    for (int r = 0; r < rows; r++) {
        for (int c = 0; c < cols; c++)
            row[c] = f2bf(x[r * cols + c]);
        G->ops->upload(G, wide + (size_t)r * ld * 2, row, sizeof row);
    }
    float *dst = G->ops->alloc(G, (size_t)rows * cols * 4);
    G->ops->convert_2d(G, dst, GL_DT_F32, cols, wide, GL_DT_BF16, ld, rows, cols);
    float *got = dl_f32(dst, (size_t)rows * cols);
    long bad = 0;
    for (int i = 0; i < rows * cols; i++)
        bad += got[i] != round_bf(x[i]);
    ok(bad == 0, "convert_2d act -> f32, %d x %d, source stride %ld (%ld wrong)", rows,
       cols, ld, bad);

    for (int i = 0; i < rows * cols; i++)
        x[i] = -2 * x[i];
    float *src = g_f32(x, (size_t)rows * cols);
    G->ops->convert_2d(G, wide, GL_DT_BF16, ld, src, GL_DT_F32, cols, rows, cols);
    bad = 0;
    for (int r = 0; r < rows; r++) {
        G->ops->download(G, row, wide + (size_t)r * ld * 2, sizeof row);
        for (int c = 0; c < cols; c++)
            bad += bf2f(row[c]) != round_bf(x[r * cols + c]);
    }
    ok(bad == 0, "convert_2d f32 -> act, %d x %d, destination stride %ld (%ld wrong)",
       rows, cols, ld, bad);
    G->ops->free(G, wide);
    G->ops->free(G, dst);
    G->ops->free(G, src);
    free(got);
    free(x);
}

static cudaEvent_t ev0, ev1;

static void tic(void)
{
    cudaEventRecord(ev0, (cudaStream_t)G->stream);
}

static double toc(int reps)          /* ms per call */
{
    float ms = 0;
    cudaEventRecord(ev1, (cudaStream_t)G->stream);
    cudaEventSynchronize(ev1);
    cudaEventElapsedTime(&ms, ev0, ev1);
    return ms / reps;
}

static void bench_attn(int B, int S, int Hq, int Hkv, int D)
{
    int W = (Hq + 2 * Hkv) * D;
    size_t nqkv = (size_t)B * S * W, no = (size_t)B * S * Hq * D;
    float *h = rand_bf(nqkv, -1, 1);
    void *qkv = g_act(h, nqkv), *dqkv = G->ops->alloc(G, nqkv * 2);
    void *o = G->ops->alloc(G, no * 2), *dout = g_act(h, no);
    float *lse = G->ops->alloc(G, (size_t)B * Hq * S * 4);
    uint16_t *q = qkv, *k = q + Hq * D, *v = k + Hkv * D;
    uint16_t *dq = dqkv, *dk = dq + Hq * D, *dv = dk + Hkv * D;
    float sc = 1.0f / sqrtf((float)D);
    double flop = 4.0 * B * Hq * (double)S * S * D / 2;   /* causal */
    int reps = 10;
    G->ops->attn_fwd(G, o, Hq * D, lse, q, W, k, W, v, W, B, S, Hq, Hkv, D, sc, NULL);
    tic();
    for (int i = 0; i < reps; i++)
        G->ops->attn_fwd(G, o, Hq * D, lse, q, W, k, W, v, W, B, S, Hq, Hkv, D, sc, NULL);
    double f = toc(reps);
    G->ops->attn_bwd(G, dq, dk, dv, W, dout, Hq * D, o, Hq * D, lse, q, W, k, W,
                     v, W, B, S, Hq, Hkv, D, sc, NULL);
    tic();
    for (int i = 0; i < reps; i++)
        G->ops->attn_bwd(G, dq, dk, dv, W, dout, Hq * D, o, Hq * D, lse, q, W, k,
                         W, v, W, B, S, Hq, Hkv, D, sc, NULL);
    double bw = toc(reps);
    diag("bench attn B=%d S=%d Hq=%d Hkv=%d D=%d: fwd %.3f ms %.0f TFLOP/s, "
         "bwd %.3f ms %.0f TFLOP/s (2.5x fwd flops), fwd+bwd %.0f TFLOP/s",
         B, S, Hq, Hkv, D, f, flop / f / 1e9, bw, 2.5 * flop / bw / 1e9,
         3.5 * flop / (f + bw) / 1e9);
    G->ops->free(G, qkv);
    G->ops->free(G, dqkv);
    G->ops->free(G, o);
    G->ops->free(G, dout);
    G->ops->free(G, lse);
    free(h);
}

/* One ring of CP 2 on rank 0 at the model's shape (S tokens per rank):
 * the two blocks' forward and merge, delta, the two blocks' backward;
 * the rate counts only the causal pairs (the whole ring does the work of
 * a causal attention of 2 S tokens, split over 2 ranks). */
static void bench_attn_ring(int B, int S, int Hq, int Hkv, int D)
{
    int W = (Hq + 2 * Hkv) * D, Wo = Hq * D, c = S / 2;
    size_t nqkv = (size_t)B * S * W, no = (size_t)B * S * Wo;
    size_t nl = (size_t)B * Hq * S, nkv = (size_t)B * S * Hkv * D;
    float *h = rand_bf(nqkv, -1, 1);
    void *qkv = g_act(h, nqkv), *dout = g_act(h, no), *oact = g_act(h, no);
    float *o = g_f32(NULL, no), *ob = g_f32(NULL, no), *dq = g_f32(NULL, no);
    float *lse = g_f32(NULL, nl), *lb = g_f32(NULL, nl), *delta = g_f32(NULL, nl);
    float *dk = g_f32(NULL, nkv), *dv = g_f32(NULL, nkv);
    uint16_t *q = qkv, *k = q + Hq * D, *v = k + Hkv * D;
    float sc = 1.0f / sqrtf((float)D);
    gl_attn_pos p0 = cp_pos(2, 0, c), p1 = cp_pos(2, 1, c);
    /* rank 0's work of the ring: its own block, then rank 1's keys (the
     * same buffer stands in for them) */
    double flop = 4.0 * B * Hq * (double)(2 * S) * (2 * S) * D / 2 / 2;
    int reps = 5;
    double f = 0, bw = 0;
    for (int it = 0; it <= reps; it++) {     /* the first is a warm-up */
        tic();
        G->ops->attn_block_fwd(G, ob, Wo, lb, q, W, k, W, v, W, B, S, S, Hq,
                               Hkv, D, sc, &p0, &p0, GL_ATTN_CAUSAL, NULL);
        G->ops->attn_merge(G, o, lse, ob, lb, B, S, Hq, D, 1);
        G->ops->attn_block_fwd(G, ob, Wo, lb, q, W, k, W, v, W, B, S, S, Hq,
                               Hkv, D, sc, &p0, &p1, GL_ATTN_CAUSAL, NULL);
        G->ops->attn_merge(G, o, lse, ob, lb, B, S, Hq, D, 0);
        double t = toc(1);
        tic();
        G->ops->attn_delta(G, delta, dout, Wo, oact, Wo, B, S, Hq, D);
        G->ops->attn_block_bwd(G, dq, Wo, dk, dv, Hkv * D, dout, Wo, lse, delta,
                               q, W, k, W, v, W, B, S, S, Hq, Hkv, D, sc, &p0,
                               &p0, GL_ATTN_CAUSAL, NULL);
        G->ops->attn_block_bwd(G, dq, Wo, dk, dv, Hkv * D, dout, Wo, lse, delta,
                               q, W, k, W, v, W, B, S, S, Hq, Hkv, D, sc, &p0,
                               &p1, GL_ATTN_CAUSAL, NULL);
        double tb = toc(1);
        if (it > 0)
            f += t / reps, bw += tb / reps;
    }
    diag("bench CP 2 ring, rank 0, B=%d S=%d per rank Hq=%d Hkv=%d D=%d: fwd "
         "%.3f ms %.1f TFLOP/s, bwd %.3f ms %.1f TFLOP/s", B, S, Hq, Hkv, D, f,
         flop / f / 1e9, bw, 2.5 * flop / bw / 1e9);
    void *bufs[] = {qkv, dout, oact, o, ob, dq, lse, lb, delta, dk, dv};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        G->ops->free(G, bufs[i]);
    free(h);
}

/* One weight's three grouped products (in -> out over the map's rows),
 * each timed over 10 calls after a warm-up. */
static void bench_moe_weight(const char *name, const gl_moe_map *m, int R, int in, int out,
                             void *x, void *y, void *w, float *dw)
{
    double fl = 2.0 * R * in * out, t[3];
    for (int form = 0; form < 3; form++) {
        for (int i = 0; i <= 10; i++) {
            if (i == 1)
                tic();
            if (form == 0)
                G->ops->moe_gemm(G, y, out, x, w, in, out, m);
            else if (form == 1)
                G->ops->moe_gemm_dgrad(G, x, y, out, w, in, out, m, 0);
            else
                G->ops->moe_gemm_wgrad(G, dw, y, out, x, in, out, m, 0);
        }
        t[form] = toc(10);
    }
    diag("  %s (%d -> %d): fwd %.3f ms %.0f TFLOP/s, dgrad %.3f ms %.0f, wgrad (fp32 =) "
         "%.3f ms %.0f", name, in, out, t[0], fl / t[0] / 1e9, t[1], fl / t[1] / 1e9, t[2],
         fl / t[2] / 1e9);
}

/* The grouped products of one expert layer at the issue's shapes: n
 * tokens of width h, E experts top-k, expert FFN f (W1 [E, 2f, h], W2
 * [E, h, f]), routed by moe_route from random logits (balanced), then
 * with expert 0 favoured by every token (skewed, as the training runs'
 * "expert load max/mean" of 4 shows on mock data); by cuBLAS's grouped
 * call and by the loop on 1 and GL_LANES_MAX streams. */
static void bench_moe(int n, int h, int E, int k, int f)
{
    gl_moe_route_cfg cfg = {.E = E, .k = k};
    int R = gl_moe_rows_max(n, &cfg);
    gl_moe_map m;
    moe_map_alloc(G, &m, n, k, E, R, 1);
    float *lg = rand_f32((size_t)n * E, -1, 1);
    float *glg = g_f32(lg, (size_t)n * E);
    void *x = G->ops->alloc(G, (size_t)R * (f > h ? f : h) * 2), *gu = G->ops->alloc(G, (size_t)R * 2 * f * 2);
    void *w1 = G->ops->alloc(G, (size_t)E * 2 * f * h * 2);
    float *dw1 = G->ops->alloc(G, (size_t)E * 2 * f * h * 4);
    tic();
    for (int i = 0; i < 10; i++)
        G->ops->moe_route(G, &m, glg, NULL, &cfg, NULL, NULL);
    double t = toc(10);
    diag("bench moe_route n=%d E=%d top-%d (with its host wait): %.1f us", n, E, k, t * 1e3);
    for (int skew = 0; skew < 2; skew++) {
        if (skew) {
            for (int i = 0; i < n; i++)
                lg[(size_t)i * E] = 2;
            G->ops->free(G, glg);
            glg = g_f32(lg, (size_t)n * E);
        }
        G->ops->moe_route(G, &m, glg, NULL, &cfg, NULL, NULL);
        int big = 0;
        for (int e = 0; e < E; e++)
            if (m.offsets_host[e + 1] - m.offsets_host[e] > big)
                big = m.offsets_host[e + 1] - m.offsets_host[e];
        for (int mode = 0; mode < 3; mode++) {
            setenv("GRIDLM_MOE_GEMM", mode ? "loop" : "grouped", 1);
            setenv("GRIDLM_MOE_LANES", mode == 1 ? "1" : "4", 1);
            diag("bench moe n=%d h=%d E=%d top-%d f=%d, %s routing (max/mean %.2f), %s", n,
                 h, E, k, f, skew ? "skewed" : "balanced", (double)big * E / (n * k),
                 mode == 0 ? "grouped" : mode == 1 ? "loop, 1 stream" : "loop, 4 streams");
            bench_moe_weight("W1", &m, n * k, h, 2 * f, x, gu, w1, dw1);
            bench_moe_weight("W2", &m, n * k, f, h, gu, x, w1, dw1);
        }
    }
    unsetenv("GRIDLM_MOE_LANES");
    unsetenv("GRIDLM_MOE_GEMM");
    tic();
    for (int i = 0; i < 10; i++)
        G->ops->moe_permute(G, x, gu, h, &m);
    t = toc(10);
    diag("bench moe_permute %d rows h=%d: %.1f us, %.0f GB/s", R, h, t * 1e3, 4.0 * R * h / t / 1e6);
    G->ops->free(G, x);
    G->ops->free(G, gu);
    G->ops->free(G, w1);
    G->ops->free(G, dw1);
    G->ops->free(G, glg);
    free(lg);
    moe_map_free(G, &m);
}

static void bench(void)
{
    cudaEventCreate(&ev0);
    cudaEventCreate(&ev1);
    bench_attn(2, 4096, 32, 8, 64);
    bench_attn(2, 4096, 16, 4, 128);
    bench_attn(1, 4096, 32, 8, 128);
    bench_attn_ring(1, 2048, 32, 8, 128);

    int n = 8192, h = 2048, f = 8192, reps = 20;
    void *x = G->ops->alloc(G, (size_t)n * 2 * f * 2);
    void *y = G->ops->alloc(G, (size_t)n * 2 * f * 2);
    void *w = G->ops->alloc(G, (size_t)2 * f * h * 2);
    float *dw = G->ops->alloc(G, (size_t)2 * f * h * 4);
    float *rs = G->ops->alloc(G, (size_t)n * 4);
    /* gemm: the MLP's up projection and its weight gradient */
    tic();
    for (int i = 0; i < reps; i++)
        G->ops->gemm(G, 0, 1, n, 2 * f, h, 1, x, h, w, h, 0, y, GL_DT_BF16, 2 * f);
    double t = toc(reps);
    diag("bench gemm NT %dx%dx%d bf16: %.3f ms, %.0f TFLOP/s", n, 2 * f, h, t,
         2.0 * n * 2 * f * h / t / 1e9);
    tic();
    for (int i = 0; i < reps; i++)
        G->ops->gemm(G, 1, 0, 2 * f, h, n, 1, y, 2 * f, x, h, 1, dw, GL_DT_F32, h);
    t = toc(reps);
    diag("bench gemm TN %dx%dx%d f32 +=: %.3f ms, %.0f TFLOP/s", 2 * f, h, n, t,
         2.0 * n * 2 * f * h / t / 1e9);
    G->ops->to_act(G, w, dw, (size_t)h);
    tic();
    for (int i = 0; i < reps; i++)
        G->ops->rmsnorm_fwd(G, y, rs, x, w, n, h, 1e-5f);
    t = toc(reps);
    diag("bench rmsnorm_fwd n=%d h=%d: %.1f us, %.0f GB/s", n, h, t * 1e3,
         2.0 * n * h * 2 / t / 1e6);
    tic();
    for (int i = 0; i < reps; i++)
        G->ops->rmsnorm_bwd(G, y, dw, x, x, w, rs, n, h, 1);
    t = toc(reps);
    diag("bench rmsnorm_bwd n=%d h=%d: %.1f us, %.0f GB/s", n, h, t * 1e3,
         4.0 * n * h * 2 / t / 1e6);
    tic();
    for (int i = 0; i < reps; i++)
        G->ops->swiglu_fwd(G, y, x, n, f);
    t = toc(reps);
    diag("bench swiglu_fwd n=%d f=%d: %.1f us, %.0f GB/s", n, f, t * 1e3,
         3.0 * n * f * 2 / t / 1e6);
    tic();
    for (int i = 0; i < reps; i++)
        G->ops->swiglu_bwd(G, y, x, x, n, f);
    t = toc(reps);
    diag("bench swiglu_bwd n=%d f=%d: %.1f us, %.0f GB/s", n, f, t * 1e3,
         5.0 * n * f * 2 / t / 1e6);
    /* the GPT ops at the same shapes (GB/s counts each pass's bytes) */
    float *mn = G->ops->alloc(G, (size_t)n * 4);
    gl_dropout dp = { .seed = 1, .iteration = 2, .layer = 3, .site = 1,
                      .p = 0.1f, .row0 = 0, .col0 = 0, .width = h };
    tic();
    for (int i = 0; i < reps; i++)
        G->ops->layernorm_fwd(G, y, mn, rs, x, w, w, n, h, 1e-5f, 0);
    t = toc(reps);
    diag("bench layernorm_fwd n=%d h=%d: %.1f us, %.0f GB/s", n, h, t * 1e3,
         2.0 * n * h * 2 / t / 1e6);
    tic();
    for (int i = 0; i < reps; i++)
        G->ops->layernorm_bwd(G, y, dw, dw + h, x, x, w, mn, rs, n, h, 0, 1);
    t = toc(reps);
    diag("bench layernorm_bwd n=%d h=%d: %.1f us, %.0f GB/s", n, h, t * 1e3,
         4.0 * n * h * 2 / t / 1e6);
    tic();
    for (int i = 0; i < reps; i++)
        G->ops->gelu_fwd(G, y, x, w, n, f);
    t = toc(reps);
    diag("bench gelu_fwd (bias) n=%d f=%d: %.1f us, %.0f GB/s", n, f, t * 1e3,
         2.0 * n * f * 2 / t / 1e6);
    tic();
    for (int i = 0; i < reps; i++)
        G->ops->gelu_bwd(G, y, dw, y, x, w, n, f);
    t = toc(reps);
    diag("bench gelu_bwd (bias, dbias) n=%d f=%d: %.1f us, %.0f GB/s", n, f,
         t * 1e3, 4.0 * n * f * 2 / t / 1e6);
    tic();
    for (int i = 0; i < reps; i++)
        G->ops->bias_grad(G, dw, x, n, h);
    t = toc(reps);
    diag("bench bias_grad n=%d w=%d: %.1f us, %.0f GB/s", n, h, t * 1e3,
         1.0 * n * h * 2 / t / 1e6);
    tic();
    for (int i = 0; i < reps; i++)
        G->ops->dropout(G, y, x, n, h, &dp);
    t = toc(reps);
    diag("bench dropout n=%d w=%d: %.1f us, %.0f GB/s", n, h, t * 1e3,
         2.0 * n * h * 2 / t / 1e6);
    tic();
    for (int i = 0; i < reps; i++)
        G->ops->bias_dropout_add(G, y, y, x, w, n, h, &dp);
    t = toc(reps);
    diag("bench bias_dropout_add n=%d w=%d: %.1f us, %.0f GB/s", n, h, t * 1e3,
         3.0 * n * h * 2 / t / 1e6);
    G->ops->free(G, mn);
    G->ops->free(G, x);
    G->ops->free(G, y);
    G->ops->free(G, w);
    G->ops->free(G, dw);
    G->ops->free(G, rs);

    /* cross-entropy over the full vocabulary, n = 8192 tokens */
    int V = 128256;
    n = 4096;
    void *z = G->ops->alloc(G, (size_t)n * V * 2);
    int32_t *tg = G->ops->alloc(G, (size_t)n * 4);
    float *st = G->ops->alloc(G, (size_t)n * 16), *gsc = G->ops->alloc(G, (size_t)n * 4);
    tic();
    for (int i = 0; i < 5; i++) {
        G->ops->ce_max(G, st, z, V, n, V);
        G->ops->ce_sum(G, st + n, z, V, tg, st, n, V, 0);
        G->ops->ce_bwd(G, st + 3 * n, z, V, tg, st, st + n, gsc, n, V, V, 0);
    }
    t = toc(5);
    diag("bench cross-entropy n=%d V=%d (3 steps): %.3f ms, %.0f GB/s", n, V, t,
         4.0 * n * V * 2 / t / 1e6);
    G->ops->free(G, z);
    G->ops->free(G, tg);
    G->ops->free(G, st);
    G->ops->free(G, gsc);

    /* AdamW over 100M parameters in 200 segments */
    size_t P = 100000000, per = P / 200;
    float *buf = G->ops->alloc(G, P * 16);
    void *act = G->ops->alloc(G, P * 2);
    gl_adamw_seg *sg = gl_malloc(200 * sizeof *sg);
    for (int s = 0; s < 200; s++)
        sg[s] = (gl_adamw_seg){buf + s * per, buf + P + s * per, buf + 2 * P + s * per,
                               buf + 3 * P + s * per, (uint16_t *)act + s * per, per, 0.1f};
    gl_adamw_hyper hp = {1e-4f, 0.9f, 0.95f, 1e-8f, 1, 1};
    G->ops->adamw(G, sg, 200, &hp);
    tic();
    for (int i = 0; i < 5; i++)
        G->ops->adamw(G, sg, 200, &hp);
    t = toc(5);
    diag("bench adamw %zu params: %.3f ms, %.0f GB/s", P, t, 30.0 * P / t / 1e6);
    bench_moe(8192, 2048, 8, 2, 5632);     /* issue 13's two MoE shapes */
    bench_moe(8192, 2048, 128, 8, 768);
    G->ops->free(G, buf);
    G->ops->free(G, act);
    free(sg);
}

int main(void)
{
    gl_log_set_program("ops-cuda.t");
    gpu_seed(0x2545F4914F6CDD1Dull);
    if (gl_cuda_device_count() == 0)
        skip_all("no CUDA device");
    /* bda_layernorm's one-kernel form, off by default, is what is tested */
    setenv("GRIDLM_FUSED_NORM", "1", 0);
    G = gl_dev_open_cuda(0);
    C = gl_dev_open_cpu();
    plan(NO_PLAN);
    int quick = getenv("GL_OPS_CUDA_QUICK") != NULL;
    ok(G && G->act == GL_DT_BF16 && G->act_bytes == 2 && G->comm == GL_COMM_NCCL &&
       G->stream != NULL && G->index == 0, "the cuda device: bf16, NCCL, a stream");

    test_memory();
    test_casts(1 << 20, 0);
    test_casts(1001, 3);
    test_add(1 << 20, 0);
    test_add(999, 1);

    test_gemm(0, 0, 67, 45, 33, 0, 1, 0, 1);
    test_gemm(0, 1, 64, 96, 128, 0, 0.5f, 0, 1);
    test_gemm(1, 0, 33, 70, 129, 1, 1, 1, 1);
    test_gemm(1, 1, 50, 31, 77, 1, 2, 0, 1);
    test_gemm(0, 1, 64, 96, 128, 0, 1, 0, 0);
    if (!quick) {
        test_gemm(0, 1, 1024, 3072, 2048, 0, 1, 0, 0); /* QKV projection */
        test_gemm(0, 1, 1024, 3072, 2048, 0, 1, 0, 1);
        test_gemm(1, 0, 2048, 2048, 1024, 1, 1, 1, 0); /* dW += dY^T X, f32 */
        test_gemm(1, 0, 2048, 2048, 1024, 1, 1, 1, 1);
        test_gemm(0, 0, 1024, 2048, 8192, 0, 1, 0, 0); /* dX = dY W */
        test_gemm(0, 0, 1024, 2048, 8192, 0, 1, 0, 1);
    }

    /* rmsnorm: the backward's row kernel takes a row per warp up to
     * h = 2048 (16-byte loads), per team of 2, 4, 8 warps up to 16384, and
     * a general kernel beyond (or beyond 2048 for odd h); row counts that
     * fill no grid evenly, and a single row */
    test_rmsnorm(quick ? 64 : 4096, 2048, 0);
    test_rmsnorm(quick ? 64 : 4096, 2048, 1);
    test_rmsnorm(quick ? 301 : 3001, 2048, 1);
    test_rmsnorm(1, 2048, 0);
    test_rmsnorm(quick ? 100 : 4096, 256, 1);
    test_rmsnorm(quick ? 129 : 1027, 256, 0);
    test_rmsnorm(200, 512, 0);
    test_rmsnorm(513, 1024, 1);
    test_rmsnorm(77, 4096, 1);
    test_rmsnorm(33, 8192, 0);
    test_rmsnorm(9, 16384, 1);
    test_rmsnorm(5, 20000, 1);                     /* general, 16-byte */
    test_rmsnorm(37, 100, 1);
    test_rmsnorm(5, 33, 0);
    test_rmsnorm(50, 700, 1);                      /* odd h: teams of 4 */
    test_rmsnorm(6, 1500, 1);                      /* odd h: teams of 8 */
    test_rmsnorm(3, 2500, 0);                      /* odd h: general */

    /* head_rmsnorm: Qwen3-8B's q (32 heads of 128 in a row of 48 heads)
     * and k (8 heads after them), written to a row of 40 heads; small
     * and odd head sizes; a single token */
    test_head_rmsnorm(quick ? 64 : 4096, 32, 128, 48 * 128, 40 * 128);
    test_head_rmsnorm(quick ? 64 : 4096, 8, 128, 48 * 128, 40 * 128);
    test_head_rmsnorm(300, 4, 64, 8 * 64, 6 * 64);
    test_head_rmsnorm(77, 3, 6, 5 * 6, 3 * 6);
    test_head_rmsnorm(5, 2, 256, 4 * 256, 3 * 256);
    test_head_rmsnorm(1, 1, 512, 512, 512);

    test_rope(2, 64, 4, 64, 0);
    if (!quick)
        test_rope(1, 4096, 48, 64, 0);             /* q and k of the fused buffer */
    test_rope(2, 100, 3, 128, 2 * 128 + 5);        /* a view: gap columns untouched */

    test_swiglu(quick ? 16 : 4096, 8192);
    test_swiglu(7, 37);

    if (!quick)
        test_embed(4096, 2048, 16032, 16032, 64128); /* a shard, real h */
    test_embed(300, 50, 100, 400, 700);
    test_embed(300, 50, 0, 400, 400);

    test_ce(64, 32000, 31990, 32000, 0, 32000);
    test_ce(37, 1001, 995, 1010, 1001, 3000);      /* shard 2, odd, ld > vl */
    if (!quick)
        test_ce(512, 64128, 64128, 64128, 64128, 128256);

    test_f32_helpers(quick ? 100003 : 10000003);
    test_f32_helpers(5);
    test_adamw();

    test_attn(2, 200, 8, 2, 64, 8);                /* ragged S, GQA 4 */
    test_attn(1, 256, 4, 4, 128, 4);               /* MHA, D=128 */
    test_attn(2, 130, 6, 3, 128, 6);
    test_attn(1, 1, 2, 1, 64, 2);                  /* one token */
    /* attention dropout against the CPU: S % 4 == 0 (the kernels' grouped
     * draws) and not (per element), D = 64 and 128, GQA and MHA, sample
     * and head offsets (e past 2^32 at b0 = 40000) */
    test_attn_dropout(2, 200, 8, 2, 64, 8, 3, 2);
    test_attn_dropout(2, 130, 6, 3, 128, 6, 3, 2);
    test_attn_dropout(1, 128, 4, 4, 128, 4, 0, 0);
    test_attn_dropout(2, 131, 4, 1, 64, 4, 1, 5);
    test_attn_dropout(1, 1000, 8, 2, 64, 4, 40000, 8);
    test_attn_dropout(1, 1000, 4, 2, 128, 2, 7, 1);
    /* the mask bit for bit in all three kernels */
    test_attn_dropout_mask(2, 128, 2, 2, 64, 3, 1, 4);
    test_attn_dropout_mask(2, 130, 4, 2, 128, 1, 3, 8);
    test_attn_dropout_mask(1, 1000, 4, 1, 64, 40000, 2, 8);
    test_attn_dropout_mask(1, 1000, 2, 1, 128, 5, 0, 2);
    test_attn_dropout_mask(2, 203, 4, 4, 64, 0, 0, 4);
    test_attn_dropout_mask(1, 12, 2, 1, 64, 2, 1, 3);
    if (!quick) {
        test_attn(1, 4096, 32, 8, 64, 4);          /* the 1.5B model's shape */
        test_attn(1, 4096, 32, 8, 128, 4);
    }

    /* context parallelism's block attention: each block of a ring alone
     * (CP 2: causal diagonal, mixed and keyless rows), full and empty
     * blocks, ragged sizes, D = 64 and 128, GQA and MHA; whole rings (CP 2
     * and 4, one-token chunks) against attn_fwd/attn_bwd on the whole
     * sequence; convert_2d.  The kernels of attn_block.cu at their own
     * tolerances (GL_ATTN_NATIVE), then two rings under GL_ATTN_AUTO,
     * whose blocks cuDNN runs, cut into parts (tile-sized chunks:
     * c = 64); t/attn-cudnn.c tests cuDNN's blocks one by one */
    int impl = gl_cuda_attn_impl(G, GL_ATTN_NATIVE);
    test_attn_block_shapes(2, 40, 8, 2, 64);
    test_attn_block_shapes(1, 33, 4, 4, 128);
    test_attn_block_shapes(2, 17, 6, 3, 128);
    test_attn_ring(2, 2, 48, 8, 2, 64, 0);
    test_attn_ring(1, 4, 20, 4, 1, 128, 0);
    test_attn_ring(2, 4, 1, 4, 2, 64, 0);
    if (!quick)
        test_attn_ring(1, 4, 128, 8, 2, 128, 0);  /* S = 1024 */
    gl_cuda_attn_impl(G, GL_ATTN_AUTO);
    test_attn_ring(2, 2, 64, 8, 2, 64, 1);
    test_attn_ring(1, 4, 64, 4, 1, 128, 1);
    gl_cuda_attn_impl(G, impl);
    test_convert_2d(37, 45, 50, 48);
    test_convert_2d(256, 1024, 3072, 1024);
    test_convert_2d_wide();

    /* FP8: quantization in the 16-byte path (rows % 16 == 0, cols % 8 ==
     * 0), with partial tiles, in the general path, each output alone;
     * a scale of 2^126 brings bf16 subnormals into FP8's range (a
     * flushed product would give 0) */
    test_fp8_quantize(256, 512, GL_FP8_E4M3, 1.0f, 1, 7);
    test_fp8_quantize(256, 512, GL_FP8_E5M2, 1.0f, 1, 7);
    test_fp8_quantize(128, 256, GL_FP8_E4M3, 1.0f, 2, 7);
    test_fp8_quantize(128, 256, GL_FP8_E5M2, 3.7f, 2, 7);
    test_fp8_quantize(80, 72, GL_FP8_E4M3, 0.75f, 1, 7);
    test_fp8_quantize(64, 64, GL_FP8_E4M3, 0x1p126f, 1, 7);
    test_fp8_quantize(64, 64, GL_FP8_E5M2, 0x1p126f, 1, 7);
    test_fp8_quantize(37, 45, GL_FP8_E4M3, 1.0f, 1, 7);
    test_fp8_quantize(37, 45, GL_FP8_E5M2, 3.7f, 2, 7);
    test_fp8_quantize(24, 40, GL_FP8_E4M3, 1.0f, 0, 7);   /* rows % 16 != 0 */
    test_fp8_quantize(1, 1, GL_FP8_E4M3, 1.0f, 0, 7);
    /* an expert's rows padded to 16 (fp8_quantize_pad): the 16-byte
     * path and the general one, no row of x, all of them */
    test_fp8_quantize_pad(200, 208, 512, GL_FP8_E4M3, 1.0f);
    test_fp8_quantize_pad(1, 16, 256, GL_FP8_E5M2, 3.7f);
    test_fp8_quantize_pad(37, 48, 72, GL_FP8_E4M3, 0.75f);
    test_fp8_quantize_pad(30, 37, 45, GL_FP8_E5M2, 1.0f);
    test_fp8_quantize_pad(0, 16, 64, GL_FP8_E4M3, 1.0f);
    test_fp8_quantize_pad(64, 64, 64, GL_FP8_E4M3, 1.0f);
    test_fp8_quantize(256, 512, GL_FP8_E4M3, 1.0f, 0, 1);
    test_fp8_quantize(256, 512, GL_FP8_E5M2, 1.0f, 0, 2);
    test_fp8_quantize(256, 512, GL_FP8_E4M3, 1.0f, 0, 4);
    test_fp8_quantize(40, 48, GL_FP8_E5M2, 1.0f, 0, 6);
    test_fp8_transpose(45, 77);                           /* part tiles */
    test_fp8_transpose(64, 96);
    if (!quick) {
        test_fp8_quantize(8192, 2048, GL_FP8_E4M3, 1.0f, 0, 7);  /* X of the 1.5B model */
        test_fp8_quantize(3072, 2048, GL_FP8_E4M3, 1.0f, 1, 7);  /* its QKV weight */
        test_fp8_quantize(8192, 3072, GL_FP8_E5M2, 1.0f, 1, 7);  /* dY of QKV */
        test_fp8_transpose(3072, 2048);     /* the 1.5B model's QKV weight */
    }
    /* block scaling: 1D and 2D, both formats, whole and ragged tiles,
     * specials (a tile of infinities, bf16 subnormals) and a NaN, each
     * orientation alone */
    for (int b2 = 0; b2 < 2; b2++) {
        test_fp8_quantize_tiles(256, 384, GL_FP8_E4M3, b2, 0, 3);
        test_fp8_quantize_tiles(256, 384, GL_FP8_E5M2, b2, 1, 3);
        test_fp8_quantize_tiles(384, 256, GL_FP8_E4M3, b2, 2, 3);
        test_fp8_quantize_tiles(200, 300, GL_FP8_E4M3, b2, 2, 3);
        test_fp8_quantize_tiles(37, 45, GL_FP8_E5M2, b2, 1, 3);
        test_fp8_quantize_tiles(128, 256, GL_FP8_E4M3, b2, 1, 1);
        test_fp8_quantize_tiles(128, 256, GL_FP8_E4M3, b2, 1, 2);
        if (!quick)
            test_fp8_quantize_tiles(8192, 2048, GL_FP8_E4M3, b2, 1, 3);
    }
    test_fp8_block_pieces(200, 300, GL_FP8_E4M3, 2);    /* ragged blocks, specials, a NaN */
    test_fp8_block_pieces(256, 384, GL_FP8_E5M2, 1);
    if (!quick)
        test_fp8_block_pieces(3072, 2048, GL_FP8_E4M3, 1);  /* the 1.5B model's QKV weight */
    /* the FP8-producing ops: 16-byte path, partial tiles, the general
     * path (rows % 16 != 0, odd widths), with and without their bf16
     * output, saturating scales */
    for (int op = 0; op < 3; op++) {
        int w2 = op == 2 ? 2 : 1;                 /* swiglu_bwd: [n, 2 f] */
        test_fp8_fused(op, 256, 512 * w2, GL_FP8_E4M3, 100.0f, 0, 0);
        test_fp8_fused(op, 256, 512 * w2, GL_FP8_E5M2, 3.7f, 1, 0);
        test_fp8_fused(op, 80, 72 * w2, GL_FP8_E4M3, 448.0f, 1, 0);
        test_fp8_fused(op, 37, 45 * w2, GL_FP8_E4M3, 30.0f, 1, 0);
        test_fp8_fused(op, 24, 40 * w2, GL_FP8_E5M2, 1.0f, 0, 0);
    }
    test_fp8_fused(2, 64, 128, GL_FP8_E4M3, 50.0f, 0, 1);
    test_fp8_fused(0, 8, 4096, GL_FP8_E4M3, 50.0f, 0, 0);
    if (!quick) {
        test_fp8_fused(0, 8192, 2048, GL_FP8_E4M3, 60.0f, 0, 0);   /* the 1.5B model */
        test_fp8_fused(1, 8192, 5632, GL_FP8_E4M3, 60.0f, 0, 0);
        test_fp8_fused(2, 8192, 2 * 5632, GL_FP8_E5M2, 6000.0f, 1, 0);
    }
    test_fp8_amax(quick ? 100000 : 1 << 24, 0, 0);
    test_fp8_amax(1 << 20, 0, 1);
    test_fp8_amax(1001, 3, 0);
    test_fp8_amax(999, 1, 1);
    test_fp8_amax_scale(quick ? 100000 : 1 << 24, 0, 0, GL_FP8_E4M3, 1);
    test_fp8_amax_scale(1 << 20, 0, 1, GL_FP8_E5M2, 1);
    test_fp8_amax_scale(1 << 20, 0, 0, GL_FP8_E5M2, 0);
    test_fp8_amax_scale(8192 * 2048, 0, 0, GL_FP8_E4M3, 1);  /* X of the 1.5B model */
    test_fp8_amax_scale(1001, 3, 0, GL_FP8_E4M3, 1);
    test_fp8_amax_scale(999, 1, 1, GL_FP8_E4M3, 1);
    test_fp8_amax_scale(8, 0, 0, GL_FP8_E4M3, 1);
    test_fp8_amax_scale(0, 8, 0, GL_FP8_E4M3, 1);       /* nothing: amax 0, scale 1 */
    test_fp8_scale_delayed(7, 1, GL_FP8_AMAX_MAX, 0, GL_FP8_E4M3, 1);
    test_fp8_scale_delayed(50, 5, GL_FP8_AMAX_MAX, 2, GL_FP8_E4M3, 1);
    test_fp8_scale_delayed(50, 5, GL_FP8_AMAX_MOST_RECENT, 0, GL_FP8_E5M2, 1);
    test_fp8_scale_delayed(200, 300, GL_FP8_AMAX_MAX, 0, GL_FP8_E5M2, 1);
    test_fp8_scale_delayed(113, 1024, GL_FP8_AMAX_MAX, 1, GL_FP8_E4M3, 1);
    test_fp8_scale_delayed(113, 1024, GL_FP8_AMAX_MOST_RECENT, 0, GL_FP8_E4M3, 1);
    test_fp8_scale_delayed(7, 1, GL_FP8_AMAX_MAX, 0, GL_FP8_E4M3, 4);  /* fp8.c's tables */
    test_fp8_scale_delayed(113, 1024, GL_FP8_AMAX_MAX, 1, GL_FP8_E5M2, 4);
    test_fp8_scale_current(300, GL_FP8_E4M3, 1);
    test_fp8_scale_current(300, GL_FP8_E5M2, 1);
    test_fp8_scale_current(300, GL_FP8_E4M3, 4);
    test_gemm_fp8_exact();
    test_gemm_fp8(64, 96, 128, GL_FP8_E4M3, GL_FP8_E4M3, 1, 1, 0, 0, 0, 0);
    test_gemm_fp8(64, 96, 128, GL_FP8_E4M3, GL_FP8_E5M2, 0, 0.5f, 0, 0, 16, 0);
    test_gemm_fp8(128, 64, 256, GL_FP8_E5M2, GL_FP8_E4M3, 1, 1, 1, 0, 16, 0);
    test_gemm_fp8(128, 64, 256, GL_FP8_E4M3, GL_FP8_E4M3, 0, 1, 0, 1, 0, 0);
    /* the experts' products: rows, then k, changing within a bucket
     * (256) and across (512), forward with fast accumulation, the weight
     * gradient's fp32 accumulation */
    test_gemm_fp8(208, 96, 128, GL_FP8_E4M3, GL_FP8_E4M3, 0, 1, 0, 1, 0, 1);
    test_gemm_fp8(144, 96, 128, GL_FP8_E4M3, GL_FP8_E4M3, 0, 1, 0, 1, 0, 1);
    test_gemm_fp8(400, 96, 128, GL_FP8_E5M2, GL_FP8_E4M3, 0, 1, 0, 0, 0, 1);
    test_gemm_fp8(96, 128, 208, GL_FP8_E5M2, GL_FP8_E4M3, 1, 1, 1, 0, 0, 2);
    test_gemm_fp8(96, 128, 144, GL_FP8_E5M2, GL_FP8_E4M3, 1, 1, 1, 0, 0, 2);
    test_gemm_fp8(96, 128, 400, GL_FP8_E5M2, GL_FP8_E4M3, 1, 1, 1, 0, 0, 2);
    test_fp8_linear(256, 512, 768);
    test_fp8_linear_tiles(256, 512, 768);
    test_fp8_linear_tiles(128, 384, 256);   /* the shapes of t/train-fp8.t's blockwise model */
    if (!quick) {
        test_gemm_fp8(1024, 3072, 2048, GL_FP8_E4M3, GL_FP8_E4M3, 0, 1, 0, 1, 0, 0);
        test_gemm_fp8(1024, 3072, 2048, GL_FP8_E4M3, GL_FP8_E4M3, 0, 1, 0, 0, 0, 0);
        test_gemm_fp8(1024, 2048, 8192, GL_FP8_E5M2, GL_FP8_E4M3, 0, 1, 0, 0, 0, 0);
        test_gemm_fp8(2048, 2048, 1024, GL_FP8_E5M2, GL_FP8_E4M3, 1, 1, 1, 0, 0, 0);
        test_fp8_linear(2048, 2048, 3072);
    }

    /* the GPT ops: LayerNorm's backward by teams of 1, 2, 4, 8 warps
     * (16-byte loads up to h = 16384, scalar ones up to 2048) and the
     * general kernel beyond, the 1p variant, accumulation; GeLU with and
     * without bias; dropout pieces at offsets (a shard at column 13 of
     * rows of 100, a sequence-parallel block of rows), odd widths whose
     * 8-element groups straddle Philox's 4-word groups */
    test_layernorm(quick ? 64 : 4096, 2048, 0, 0);
    test_layernorm(quick ? 64 : 4096, 2048, 1, 1);
    test_layernorm(301, 1024, 1, 0);
    test_layernorm(1, 2048, 0, 1);
    test_layernorm(37, 100, 1, 1);
    test_layernorm(5, 33, 0, 0);
    test_layernorm(9, 8192, 1, 0);
    test_layernorm(77, 4096, 1, 0);                /* teams of 2 */
    test_layernorm(5, 12288, 1, 0);                /* teams of 8 */
    test_layernorm(3, 20000, 1, 0);                /* general, 16-byte */
    test_layernorm(50, 700, 0, 1);                 /* odd h: teams of 4 */
    test_layernorm(6, 1500, 1, 1);                 /* odd h: teams of 8 */
    test_layernorm(3, 2500, 0, 1);                 /* odd h: general */
    test_gelu(quick ? 16 : 4096, 8192, 1);
    test_gelu(7, 37, 1);
    test_gelu(64, 256, 0);
    test_bias(quick ? 64 : 4096, 2048);
    test_bias(301, 8192);
    test_bias(37, 45);
    test_bias(1, 16);
    test_dropout(quick ? 64 : 4096, 2048, 0.1f, 0, 0, 2048);
    test_dropout(512, 2048, 0.5f, 3 * 512, 0, 2048);
    test_dropout(37, 45, 0.3f, 5, 13, 100);
    test_dropout(40, 64, 0.9f, 7, 3, 70);        /* 16-byte rows, odd e */
    test_dropout(3, 5, 0.0f, 0, 0, 5);
    test_pos_embed(quick ? 64 : 4096, 2048, 2048);
    test_pos_embed(30, 45, 7);
    /* bias-dropout-add fused with the next LayerNorm: 16-byte rows and
     * scalar ones (odd h), with and without bias and dropout, 1p, out
     * over y */
    test_bda_layernorm(quick ? 64 : 4096, 768, 0.1f, 1, 0, 0);
    test_bda_layernorm(301, 2048, 0.1f, 1, 1, 1);
    test_bda_layernorm(37, 100, 0.3f, 0, 0, 0);
    test_bda_layernorm(9, 45, 0.1f, 1, 0, 1);
    test_bda_layernorm(64, 1024, 0.0f, 1, 0, 0);
    test_bda_layernorm(5, 8192, 0.5f, 1, 0, 0);
    /* the GeLU MLP's products with their epilogues (GPT-2's shape at 512
     * tokens, and small odd ones that may take the plain kernels) */
    test_linear_gelu(quick ? 64 : 512, 3072, 768);
    test_linear_gelu(100, 256, 64);
    test_linear_gelu(9, 40, 24);

    /* mixture of experts: Mixtral's E = 8 top-2; E = 64 top-8 with a
     * quarter of the experts rarely chosen (some get no rows); capacity
     * by probs and by position, with and without padding; pre-softmax;
     * DeepSeek's sigmoid with an expert bias and scaling; ties; odd
     * widths (scalar gathers); a token with no rows left (capacity 1) */
    test_moe(256, 8, 2, 128, 64, GL_MOE_SOFTMAX, 0, 0, 0, GL_MOE_DROP_PROBS, 0, 0, 1);
    test_moe(300, 64, 8, 64, 32, GL_MOE_SOFTMAX, 0, 0, 0, GL_MOE_DROP_PROBS, 0, 0, 0);
    test_moe(256, 8, 2, 64, 32, GL_MOE_SOFTMAX, 0, 0, 1.0, GL_MOE_DROP_PROBS, 0, 0, 1);
    test_moe(256, 8, 2, 64, 32, GL_MOE_SOFTMAX, 0, 0, 1.0, GL_MOE_DROP_POSITION, 0, 0, 0);
    test_moe(256, 8, 2, 64, 32, GL_MOE_SOFTMAX, 1, 0, 1.25, GL_MOE_DROP_PROBS, 1, 0, 0);
    test_moe(200, 64, 8, 64, 32, GL_MOE_SOFTMAX, 0, 0, 1.0, GL_MOE_DROP_POSITION, 1, 0, 1);
    test_moe(200, 64, 8, 64, 32, GL_MOE_SOFTMAX, 0, 0, 0.5, GL_MOE_DROP_PROBS, 0, 0, 0);
    test_moe(256, 64, 8, 64, 32, GL_MOE_SIGMOID, 0, 2.5f, 0, GL_MOE_DROP_PROBS, 0, 1, 1);
    test_moe(256, 16, 1, 64, 32, GL_MOE_SIGMOID, 0, 0, 0, GL_MOE_DROP_PROBS, 0, 0, 0);
    test_moe_lanes(384, 8, 2, 320, 448);
    test_moe(256, 16, 4, 64, 32, GL_MOE_SIGMOID, 0, 0, 1.0, GL_MOE_DROP_PROBS, 1, 1, 0);
    test_moe(77, 8, 2, 45, 21, GL_MOE_SOFTMAX, 1, 0, 0, GL_MOE_DROP_PROBS, 0, 0, 1);
    test_moe(64, 8, 2, 64, 32, GL_MOE_SOFTMAX, 0, 0, 0.01, GL_MOE_DROP_PROBS, 0, 0, 0);
    if (!quick) {
        test_moe(4096, 8, 2, 2048, 1408, GL_MOE_SOFTMAX, 0, 0, 0, GL_MOE_DROP_PROBS, 0, 0, 0);
        test_moe(2048, 128, 8, 2048, 768, GL_MOE_SOFTMAX, 0, 0, 0, GL_MOE_DROP_PROBS, 0, 0, 0);
    }

    if (getenv("GL_OPS_CUDA_BENCH"))
        bench();
    gl_dev_close(G);
    gl_dev_close(C);
    return done_testing();
}
