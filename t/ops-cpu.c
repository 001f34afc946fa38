/*
 * ops-cpu.c: the CPU back end of ops.h.
 *
 * Gradients are checked in double: the kernels are compiled a second time
 * on double (gl_cpu_NAME_f64, the same source as the float ones the
 * device runs), and each backward is compared with central finite
 * differences of a scalar loss.  Forwards are compared with direct
 * formulas.  The device's float operations are then checked against the
 * double kernels on the same inputs, which tests the operation table's
 * wiring and the float arithmetic.  Sizes are small and odd, with row
 * strides wider than the rows, so that index mistakes show.
 */
#include <config.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "base/philox.h"
#include "device/fp8.h"
#include "device/ops.h"
#include "device/ops_cpu.h"
#define OPS_TEST_SEED 0x243f6a8885a308d3ULL
#include "ops-test.h"
#include "tap.h"

/* ---- tolerances ------------------------------------------------------ */

#define FD_TOL 1e-6      /* finite differences in double */
#define F32_TOL 2e-6     /* float operation against the double kernel */

/* ---- device basics ---------------------------------------------------- */

static void test_device(gl_dev *d)
{
    is_string(d->ops->name, "cpu", "cpu device: ops name");
    ok(d->act == GL_DT_F32 && d->act_bytes == 4, "cpu device: act is fp32, 4 bytes");
    ok(d->comm == GL_COMM_MPI, "cpu device: reached by the MPI comm back end");
    ok(d->stream == NULL && d->index == -1, "cpu device: no stream, index -1");
}

static void test_memory(gl_dev *d)
{
    size_t use0, peak0, total;
    d->ops->mem_info(d, &use0, &peak0, &total);
    unsigned char *a = d->ops->alloc(d, 1000);
    unsigned char *b = d->ops->alloc(d, 24);
    size_t use1, peak1;
    d->ops->mem_info(d, &use1, &peak1, NULL);
    is_int((long long)(use1 - use0), 1024, "mem_info: in_use grows by the bytes allocated");
    ok(peak1 >= use1 && peak1 >= peak0, "mem_info: peak >= in_use");
    ok(((uintptr_t)a % 64) == 0 && ((uintptr_t)b % 64) == 0, "alloc: 64-byte aligned");
    int zero = 1;
    for (int i = 0; i < 1000; i++)
        zero &= a[i] == 0;
    ok(zero, "alloc: memory is zeroed");
    d->ops->free(d, a);
    size_t use2, peak2;
    d->ops->mem_info(d, &use2, &peak2, NULL);
    is_int((long long)(use2 - use0), 24, "mem_info: free returns the bytes");
    is_int((long long)peak2, (long long)peak1, "mem_info: peak is kept after free");
    d->ops->free(d, b);
    d->ops->free(d, NULL);
    d->ops->mem_info(d, &use2, NULL, NULL);
    is_int((long long)use2, (long long)use0, "mem_info: back to the start after freeing all");
    ok(total > 0, "mem_info: total reports the machine's memory (%zu bytes)", total);

    /* upload / download / copy / zero / to_act / to_f32 */
    float host[7] = { 1.5f, -2, 3.25f, 1e-30f, -0.0f, 7, 8 }, back[7];
    float *x = d->ops->alloc(d, sizeof host), *y = d->ops->alloc(d, sizeof host);
    d->ops->upload(d, x, host, sizeof host);
    d->ops->copy(d, y, x, sizeof host);
    d->ops->sync(d);
    d->ops->download(d, back, y, sizeof host);
    ok(memcmp(back, host, sizeof host) == 0, "upload, copy, download round-trip");
    d->ops->zero(d, y + 2, 3 * sizeof(float));
    d->ops->download(d, back, y, sizeof host);
    ok(back[0] == 1.5f && back[1] == -2 && back[2] == 0 && back[3] == 0 &&
       back[4] == 0 && back[5] == 7 && back[6] == 8, "zero clears just the range given");
    d->ops->to_act(d, y, host, 7);
    d->ops->to_f32(d, back, y, 7);
    ok(memcmp(back, host, sizeof host) == 0, "to_act then to_f32 is exact (act is fp32)");
    d->ops->free(d, x);
    d->ops->free(d, y);
}

/* ---- gemm ------------------------------------------------------------- */

static void naive_gemm(int ta, int tb, int m, int n, int k, double alpha,
                       const double *A, int lda, const double *B, int ldb,
                       double beta, double *C, int ldc)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double acc = 0;
            for (int p = 0; p < k; p++) {
                double a = ta ? A[p * lda + i] : A[i * lda + p];
                double b = tb ? B[j * ldb + p] : B[p * ldb + j];
                acc += a * b;
            }
            C[i * ldc + j] = alpha * acc + beta * C[i * ldc + j];
        }
}

static void test_gemm(gl_dev *d)
{
    const int m = 5, n = 7, k = 3;
    const double alpha = 0.7, beta = -0.3;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            int arows = ta ? k : m, acols = ta ? m : k;
            int brows = tb ? n : k, bcols = tb ? k : n;
            int lda = acols + 2, ldb = bcols + 1, ldc = n + 3;
            size_t na = (size_t)arows * lda, nb = (size_t)brows * ldb,
                   nc = (size_t)m * ldc;
            double *A = rnd(na, 1), *B = rnd(nb, 1), *C0 = rnd(nc, 1);
            double *C = dcopy(C0, nc), *Cref = dcopy(C0, nc);
            gl_cpu_gemm_f64(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
            naive_gemm(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, Cref, ldc);
            ok(relerr(C, Cref, nc) < 1e-14, "gemm f64 transa=%d transb=%d vs triple loop (rel %.2g)",
               ta, tb, relerr(C, Cref, nc));

            /* The device's fp32 gemm on the same (rounded) inputs. */
            float *fA = dev_f(d, A, na), *fB = dev_f(d, B, nb), *fC = dev_f(d, C0, nc);
            double *rA = rounded(A, na), *rB = rounded(B, nb), *rC = rounded(C0, nc);
            naive_gemm(ta, tb, m, n, k, alpha, rA, lda, rB, ldb, beta, rC, ldc);
            d->ops->gemm(d, ta, tb, m, n, k, (float)alpha, fA, lda, fB, ldb,
                         (float)beta, fC, GL_DT_F32, ldc);
            int pad_kept = 1;
            for (int i = 0; i < m; i++)
                for (int j = n; j < ldc; j++)
                    pad_kept &= fC[i * ldc + j] == (float)C0[i * ldc + j];
            ok(relerr_f(fC, rC, nc) < F32_TOL && pad_kept,
               "gemm f32 device transa=%d transb=%d vs triple loop, columns past n untouched (rel %.2g)",
               ta, tb, relerr_f(fC, rC, nc));
            d->ops->free(d, fA);
            d->ops->free(d, fB);
            d->ops->free(d, fC);
            free(A); free(B); free(C0); free(C); free(Cref);
            free(rA); free(rB); free(rC);
        }

    /* k = 0: an empty product, C = beta C */
    float c0[6] = { 1, 2, 3, 4, 5, 6 };
    d->ops->gemm(d, 0, 0, 2, 3, 0, 1, c0, 1, c0, 3, 0.5f, c0, GL_DT_F32, 3);
    ok(c0[0] == 0.5f && c0[5] == 3, "gemm with k = 0 scales C by beta");
}

/* ---- add, scale, sumsq, nonfinite, dot ---------------------------------- */

static void test_vector_ops(gl_dev *d)
{
    float *x = d->ops->alloc(d, 5 * sizeof(float)), *r = d->ops->alloc(d, 5 * sizeof(float));
    for (int i = 0; i < 5; i++) {
        x[i] = (float)i + 0.5f;
        r[i] = (float)(10 * i);
    }
    d->ops->add(d, x, x, r, 5);       /* y aliases x */
    int good = 1;
    for (int i = 0; i < 5; i++)
        good &= x[i] == (float)i + 0.5f + (float)(10 * i);
    ok(good, "add: y = x + r, in place on x");
    d->ops->scale_f32(d, x, -2, 5);
    ok(x[0] == -1 && x[4] == -2 * (4.5f + 40), "scale_f32 multiplies every element");

    /* sumsq accumulates in double: 4096^2 = 2^24, plus 1000 ones.  A float
     * running sum would stay at 2^24 (each +1 rounds away). */
    size_t cnt = 1001;
    float *s = d->ops->alloc(d, cnt * sizeof(float)), *out = d->ops->alloc(d, sizeof(float));
    s[0] = 4096;
    for (size_t i = 1; i < cnt; i++)
        s[i] = 1;
    d->ops->sumsq_f32(d, out, s, cnt);
    is_double(out[0], 16778216.0, 0, "sumsq_f32 sums in double (2^24 + 1000 exactly)");
    out[0] = 2;
    d->ops->sumsq_f32(d, out, s + 1, 3);
    is_double(out[0], 5, 0, "sumsq_f32 adds to out[0]");

    double *rv = rnd(37, 3), dref = 0, sref = 0;
    float *fv = dev_f(d, rv, 37), *fw = dev_f(d, rv + 1, 36);
    for (int i = 0; i < 37; i++)
        sref += (double)fv[i] * fv[i];
    for (int i = 0; i < 36; i++)
        dref += (double)fv[i] * fw[i];
    out[0] = 0;
    d->ops->sumsq_f32(d, out, fv, 37);
    is_double(out[0], sref, sref * 1e-7, "sumsq_f32 of random values");
    out[0] = 1.25f;
    d->ops->dot_f32(d, out, fv, fw, 36);
    is_double(out[0], 1.25 + dref, fabs(1.25 + dref) * 1e-7 + 1e-7, "dot_f32 adds sum x*w to out[0]");

    out[0] = 0;
    d->ops->nonfinite_f32(d, out, fv, 37);
    is_double(out[0], 0, 0, "nonfinite_f32: all finite leaves out[0] at 0");
    out[0] = 0.5f;
    d->ops->nonfinite_f32(d, out, fv, 37);
    is_double(out[0], 0.5, 0, "nonfinite_f32: all finite leaves out[0] unchanged");
    float specials[3] = { NAN, INFINITY, -INFINITY };
    for (int k = 0; k < 3; k++) {
        float save = fv[20];
        fv[20] = specials[k];
        out[0] = 0;
        d->ops->nonfinite_f32(d, out, fv, 37);
        is_double(out[0], 1, 0, "nonfinite_f32 finds %s", k == 0 ? "NaN" : k == 1 ? "+Inf" : "-Inf");
        fv[20] = save;
    }
    d->ops->free(d, x); d->ops->free(d, r); d->ops->free(d, s); d->ops->free(d, out);
    d->ops->free(d, fv); d->ops->free(d, fw);
    free(rv);
}

/* ---- RMSNorm ----------------------------------------------------------- */

typedef struct {
    int n, h;
    double eps, *x, *w, *y, *rstd, *r;
} rms_ctx;

static double rms_loss(void *p)
{
    rms_ctx *c = p;
    gl_cpu_rmsnorm_fwd_f64(c->y, c->rstd, c->x, c->w, c->n, c->h, c->eps);
    double L = 0;
    for (int i = 0; i < c->n * c->h; i++)
        L += c->y[i] * c->r[i];
    return L;
}

static void test_rmsnorm(gl_dev *d)
{
    const int n = 7, h = 12;
    const size_t nh = (size_t)n * h;
    rms_ctx c = { n, h, 1e-5, rnd(nh, 2), rnd(h, 1), dzeros(nh), dzeros(n), rnd(nh, 1) };
    for (int j = 0; j < h; j++)
        c.w[j] += 1.5;

    /* forward against the formula */
    rms_loss(&c);
    double err = 0;
    for (int i = 0; i < n; i++) {
        double ss = 0;
        for (int j = 0; j < h; j++)
            ss += c.x[i * h + j] * c.x[i * h + j];
        double rs = 1 / sqrt(ss / h + c.eps);
        err = fmax(err, fabs(rs - c.rstd[i]) / rs);
        for (int j = 0; j < h; j++)
            err = fmax(err, fabs(c.x[i * h + j] * rs * c.w[j] - c.y[i * h + j]));
    }
    ok(err < 1e-14, "rmsnorm_fwd f64: y and rstd as the formula (err %.2g)", err);

    double *dx = dzeros(nh), *dw = dzeros(h);
    gl_cpu_rmsnorm_bwd_f64(dx, dw, c.r, c.x, c.w, c.rstd, n, h, 0);
    double ex = fd_relerr(rms_loss, &c, c.x, nh, dx);
    double ew = fd_relerr(rms_loss, &c, c.w, h, dw);
    ok(ex < FD_TOL, "rmsnorm_bwd f64: dx vs finite differences (rel %.2g)", ex);
    ok(ew < FD_TOL, "rmsnorm_bwd f64: dw vs finite differences (rel %.2g)", ew);

    /* accumulate_dx adds to dx; dw always adds. */
    rms_loss(&c);
    double *dx2 = rnd(nh, 1), *dw2 = rnd(h, 1);
    double *dx0 = dcopy(dx2, nh), *dw0 = dcopy(dw2, h);
    gl_cpu_rmsnorm_bwd_f64(dx2, dw2, c.r, c.x, c.w, c.rstd, n, h, 1);
    double ea = 0, eb = 0;
    for (size_t i = 0; i < nh; i++)
        ea = fmax(ea, fabs(dx2[i] - (dx0[i] + dx[i])));
    for (int j = 0; j < h; j++)
        eb = fmax(eb, fabs(dw2[j] - (dw0[j] + dw[j])));
    ok(ea < 1e-14, "rmsnorm_bwd accumulate_dx=1: dx += gradient (err %.2g)", ea);
    ok(eb < 1e-13, "rmsnorm_bwd: dw += gradient (err %.2g)", eb);
    memcpy(dx2, dx0, nh * sizeof *dx2);
    gl_cpu_rmsnorm_bwd_f64(dx2, dw2, c.r, c.x, c.w, c.rstd, n, h, 0);
    ok(relerr(dx2, dx, nh) < 1e-15, "rmsnorm_bwd accumulate_dx=0 overwrites dx");

    /* the device's float operations */
    double *rx = rounded(c.x, nh), *rw = rounded(c.w, h), *rr = rounded(c.r, nh);
    double *ry = dzeros(nh), *rrs = dzeros(n), *rdx = dzeros(nh), *rdw = dzeros(h);
    gl_cpu_rmsnorm_fwd_f64(ry, rrs, rx, rw, n, h, (double)(float)c.eps);
    gl_cpu_rmsnorm_bwd_f64(rdx, rdw, rr, rx, rw, rrs, n, h, 0);
    float *fx = dev_f(d, c.x, nh), *fw = dev_f(d, c.w, h), *fr = dev_f(d, c.r, nh);
    float *fy = d->ops->alloc(d, nh * 4), *frs = d->ops->alloc(d, n * 4);
    float *fdx = d->ops->alloc(d, nh * 4), *fdw = d->ops->alloc(d, h * 4);
    d->ops->rmsnorm_fwd(d, fy, frs, fx, fw, n, h, (float)c.eps);
    d->ops->rmsnorm_bwd(d, fdx, fdw, fr, fx, fw, frs, n, h, 0);
    ok(relerr_f(fy, ry, nh) < F32_TOL && relerr_f(frs, rrs, n) < F32_TOL,
       "rmsnorm_fwd f32 device vs f64 (rel %.2g)", relerr_f(fy, ry, nh));
    ok(relerr_f(fdx, rdx, nh) < F32_TOL && relerr_f(fdw, rdw, h) < F32_TOL,
       "rmsnorm_bwd f32 device vs f64 (rel %.2g, %.2g)", relerr_f(fdx, rdx, nh),
       relerr_f(fdw, rdw, h));
    d->ops->free(d, fx); d->ops->free(d, fw); d->ops->free(d, fr); d->ops->free(d, fy);
    d->ops->free(d, frs); d->ops->free(d, fdx); d->ops->free(d, fdw);
    free(rx); free(rw); free(rr); free(ry); free(rrs); free(rdx); free(rdw);
    free(c.x); free(c.w); free(c.y); free(c.rstd); free(c.r);
    free(dx); free(dw); free(dx2); free(dw2); free(dx0); free(dw0);
}

/* ---- RoPE -------------------------------------------------------------- */

static void test_rope(gl_dev *d)
{
    const int B = 2, S = 5, H = 3, D = 8, half = D / 2, ld = H * D + 3;
    const size_t nx = (size_t)B * S * ld, nt = (size_t)S * half;
    double *cs = malloc(nt * sizeof *cs), *sn = malloc(nt * sizeof *sn);
    for (int s = 0; s < S; s++)
        for (int i = 0; i < half; i++) {
            double ang = (s + 3) * pow(10000.0, -2.0 * i / D);
            cs[s * half + i] = cos(ang);
            sn[s * half + i] = sin(ang);
        }
    double *x = rnd(nx, 1), *y = dcopy(x, nx);
    gl_cpu_rope_fwd_f64(y, ld, B, S, H, D, cs, sn);
    double err = 0;
    int pad_kept = 1;
    for (int b = 0; b < B; b++)
        for (int s = 0; s < S; s++) {
            size_t row = ((size_t)b * S + s) * ld;
            for (int hd = 0; hd < H; hd++)
                for (int i = 0; i < half; i++) {
                    size_t p = row + (size_t)hd * D + i, q = p + half;
                    double c = cs[s * half + i], sv = sn[s * half + i];
                    err = fmax(err, fabs(y[p] - (x[p] * c - x[q] * sv)));
                    err = fmax(err, fabs(y[q] - (x[q] * c + x[p] * sv)));
                }
            for (int e = H * D; e < ld; e++)
                pad_kept &= y[row + e] == x[row + e];
        }
    ok(err < 1e-15, "rope_fwd f64 vs direct cos/sin formula (err %.2g)", err);
    ok(pad_kept, "rope_fwd leaves the row stride's padding untouched");

    double *z = dcopy(y, nx);
    gl_cpu_rope_bwd_f64(z, ld, B, S, H, D, cs, sn);
    ok(relerr(z, x, nx) < 1e-15, "rope_bwd after rope_fwd is the identity (rel %.2g)",
       relerr(z, x, nx));

    /* backward is the transpose: <R x, g> = <x, R^T g> */
    double *g = rnd(nx, 1), *gt = dcopy(g, nx);
    gl_cpu_rope_bwd_f64(gt, ld, B, S, H, D, cs, sn);
    double lhs = 0, rhs = 0;
    for (size_t i = 0; i < nx; i++) {
        lhs += y[i] * g[i];
        rhs += x[i] * gt[i];
    }
    is_double(lhs, rhs, 1e-13 * fabs(lhs), "rope_bwd is the transpose: <rope(x), g> = <x, rope_bwd(g)>");

    /* the device's float operations */
    double *rx = rounded(x, nx), *rc = rounded(cs, nt), *rs = rounded(sn, nt);
    float *fx = dev_f(d, x, nx), *fc = dev_f(d, cs, nt), *fs = dev_f(d, sn, nt);
    gl_cpu_rope_fwd_f64(rx, ld, B, S, H, D, rc, rs);
    d->ops->rope_fwd(d, fx, ld, B, S, H, D, fc, fs);
    ok(relerr_f(fx, rx, nx) < F32_TOL, "rope_fwd f32 device vs f64 (rel %.2g)", relerr_f(fx, rx, nx));
    gl_cpu_rope_bwd_f64(rx, ld, B, S, H, D, rc, rs);
    d->ops->rope_bwd(d, fx, ld, B, S, H, D, fc, fs);
    ok(relerr_f(fx, rx, nx) < F32_TOL, "rope_bwd f32 device vs f64 (rel %.2g)", relerr_f(fx, rx, nx));
    d->ops->free(d, fx); d->ops->free(d, fc); d->ops->free(d, fs);
    free(rx); free(rc); free(rs);
    free(cs); free(sn); free(x); free(y); free(z); free(g); free(gt);
}

/* ---- attention ---------------------------------------------------------- */

/* q, k and v as views into one fused buffer [B, S, ld] holding
 * [q heads | k heads | v heads | padding] per token, as the model's QKV
 * projection writes them. */
typedef struct {
    int B, S, Hq, Hkv, D, ld, ldo, lddo;
    double scale, *qkv, *o, *lse, *r;
    const gl_attn_dropout *drop;    /* NULL: none */
} attn_ctx;

static void attn_run(attn_ctx *c, double *o, double *lse, const double *qkv)
{
    gl_cpu_attn_fwd_f64(o, c->ldo, lse, qkv, c->ld, qkv + c->Hq * c->D, c->ld,
                        qkv + (c->Hq + c->Hkv) * c->D, c->ld, c->B, c->S,
                        c->Hq, c->Hkv, c->D, c->scale, c->drop);
}

static double attn_loss(void *p)
{
    attn_ctx *c = p;
    attn_run(c, c->o, c->lse, c->qkv);
    double L = 0;
    for (int t = 0; t < c->B * c->S; t++)
        for (int e = 0; e < c->Hq * c->D; e++)
            L += c->o[t * c->ldo + e] * c->r[t * c->lddo + e];
    return L;
}

static void test_attention(gl_dev *d)
{
    attn_ctx c = { .B = 2, .S = 5, .Hq = 4, .Hkv = 2, .D = 8 };
    c.ld = (c.Hq + 2 * c.Hkv) * c.D + 1;
    c.ldo = c.Hq * c.D + 2;
    c.lddo = c.Hq * c.D + 3;
    c.scale = 1 / sqrt((double)c.D);
    const int BS = c.B * c.S, HD = c.Hq * c.D, D = c.D, S = c.S;
    const size_t nqkv = (size_t)BS * c.ld, no = (size_t)BS * c.ldo,
                 nr = (size_t)BS * c.lddo, nl = (size_t)c.B * c.Hq * c.S;
    c.qkv = rnd(nqkv, 1.5);
    c.o = dzeros(no);
    c.lse = dzeros(nl);
    c.r = rnd(nr, 1);
    attn_loss(&c);

    /* forward against a direct softmax, computed without the max shift */
    double eo = 0, el = 0;
    int group = c.Hq / c.Hkv;
    for (int b = 0; b < c.B; b++)
        for (int j = 0; j < c.Hq; j++)
            for (int t = 0; t < S; t++) {
                const double *q = c.qkv + (size_t)(b * S + t) * c.ld + j * D;
                double w[16], z = 0;
                for (int u = 0; u <= t; u++) {
                    const double *k = c.qkv + (size_t)(b * S + u) * c.ld + HD + (j / group) * D;
                    double s = 0;
                    for (int e = 0; e < D; e++)
                        s += q[e] * k[e];
                    w[u] = exp(c.scale * s);
                    z += w[u];
                }
                el = fmax(el, fabs(log(z) - c.lse[(b * c.Hq + j) * S + t]));
                for (int e = 0; e < D; e++) {
                    double acc = 0;
                    for (int u = 0; u <= t; u++)
                        acc += w[u] / z * c.qkv[(size_t)(b * S + u) * c.ld + HD + c.Hkv * D + (j / group) * D + e];
                    eo = fmax(eo, fabs(acc - c.o[(size_t)(b * S + t) * c.ldo + j * D + e]));
                }
            }
    ok(eo < 1e-14, "attn_fwd f64: o vs direct causal GQA softmax (err %.2g)", eo);
    ok(el < 1e-14, "attn_fwd f64: lse vs direct log-sum-exp (err %.2g)", el);

    /* causality: changing tokens after t leaves outputs up to t alone */
    {
        const int t0 = 2;
        double *q2 = dcopy(c.qkv, nqkv), *o2 = dzeros(no), *l2 = dzeros(nl);
        for (int t = t0 + 1; t < S; t++)
            for (int e = 0; e < c.ld; e++)
                q2[(size_t)(0 * S + t) * c.ld + e] += 5 * rnd1();
        attn_run(&c, o2, l2, q2);
        int same = 1, changed = 0;
        for (int t = 0; t < BS; t++)
            for (int e = 0; e < HD; e++) {
                int future = t < S && t > t0;
                double a = o2[(size_t)t * c.ldo + e], b = c.o[(size_t)t * c.ldo + e];
                if (future)
                    changed |= a != b;
                else
                    same &= a == b;
            }
        ok(same && changed, "attn_fwd is causal: changing tokens > %d changes only their outputs", t0);
        free(q2); free(o2); free(l2);
    }

    /* backward against finite differences of L = sum(o * r) */
    double *g = dzeros(nqkv);
    gl_cpu_attn_bwd_f64(g, g + HD, g + HD + c.Hkv * D, c.ld, c.r, c.lddo, c.o,
                        c.ldo, c.lse, c.qkv, c.ld, c.qkv + HD, c.ld,
                        c.qkv + HD + c.Hkv * D, c.ld, c.B, S, c.Hq, c.Hkv, D, c.scale, NULL);
    /* check dq, dk, dv separately: pull each part out of the fused rows */
    const char *part[3] = { "dq", "dk", "dv" };
    int off[3] = { 0, HD, HD + c.Hkv * D }, width[3] = { HD, c.Hkv * D, c.Hkv * D };
    double *fdg = dzeros(nqkv);
    for (size_t i = 0; i < nqkv; i++) {
        double save = c.qkv[i];
        c.qkv[i] = save + FD_STEP;
        double lp = attn_loss(&c);
        c.qkv[i] = save - FD_STEP;
        double lm = attn_loss(&c);
        c.qkv[i] = save;
        fdg[i] = (lp - lm) / (2 * FD_STEP);
    }
    for (int p = 0; p < 3; p++) {
        size_t cnt = (size_t)BS * width[p];
        double *a = malloc(cnt * sizeof *a), *f = malloc(cnt * sizeof *f);
        for (int t = 0; t < BS; t++)
            for (int e = 0; e < width[p]; e++) {
                a[(size_t)t * width[p] + e] = g[(size_t)t * c.ld + off[p] + e];
                f[(size_t)t * width[p] + e] = fdg[(size_t)t * c.ld + off[p] + e];
            }
        double e = relerr(a, f, cnt);
        ok(e < FD_TOL, "attn_bwd f64: %s vs finite differences (rel %.2g)", part[p], e);
        free(a); free(f);
    }
    int pad_zero = 1;
    for (int t = 0; t < BS; t++)
        pad_zero &= g[(size_t)t * c.ld + c.ld - 1] == 0 && fdg[(size_t)t * c.ld + c.ld - 1] == 0;
    ok(pad_zero, "attn_bwd leaves the fused buffer's padding alone");

    /* the device's float operations (grad buffer pre-filled: overwritten) */
    attn_ctx rc = c;
    rc.qkv = rounded(c.qkv, nqkv);
    rc.r = rounded(c.r, nr);
    double *ro = dzeros(no), *rl = dzeros(nl), *rg = dzeros(nqkv);
    gl_cpu_attn_fwd_f64(ro, c.ldo, rl, rc.qkv, c.ld, rc.qkv + HD, c.ld, rc.qkv + HD + c.Hkv * D,
                        c.ld, c.B, S, c.Hq, c.Hkv, D, (double)(float)c.scale, NULL);
    gl_cpu_attn_bwd_f64(rg, rg + HD, rg + HD + c.Hkv * D, c.ld, rc.r, c.lddo, ro, c.ldo, rl,
                        rc.qkv, c.ld, rc.qkv + HD, c.ld, rc.qkv + HD + c.Hkv * D, c.ld,
                        c.B, S, c.Hq, c.Hkv, D, (double)(float)c.scale, NULL);
    float *fq = dev_f(d, c.qkv, nqkv), *fr = dev_f(d, c.r, nr);
    float *fo = d->ops->alloc(d, no * 4), *fl = d->ops->alloc(d, nl * 4);
    double *junk = rnd(nqkv, 1);
    for (int t = 0; t < BS; t++)
        junk[(size_t)t * c.ld + c.ld - 1] = 0;
    float *fg = dev_f(d, junk, nqkv);
    d->ops->attn_fwd(d, fo, c.ldo, fl, fq, c.ld, fq + HD, c.ld, fq + HD + c.Hkv * D, c.ld,
                     c.B, S, c.Hq, c.Hkv, D, (float)c.scale, NULL);
    d->ops->attn_bwd(d, fg, fg + HD, fg + HD + c.Hkv * D, c.ld, fr, c.lddo, fo, c.ldo, fl,
                     fq, c.ld, fq + HD, c.ld, fq + HD + c.Hkv * D, c.ld,
                     c.B, S, c.Hq, c.Hkv, D, (float)c.scale, NULL);
    ok(relerr_f(fo, ro, no) < F32_TOL && relerr_f(fl, rl, nl) < F32_TOL,
       "attn_fwd f32 device vs f64 (rel %.2g, lse %.2g)", relerr_f(fo, ro, no), relerr_f(fl, rl, nl));
    ok(relerr_f(fg, rg, nqkv) < 1e-5,
       "attn_bwd f32 device vs f64, gradients overwritten (rel %.2g)", relerr_f(fg, rg, nqkv));
    d->ops->free(d, fq); d->ops->free(d, fr); d->ops->free(d, fo);
    d->ops->free(d, fl); d->ops->free(d, fg);
    free(rc.qkv); free(rc.r); free(ro); free(rl); free(rg); free(junk);
    free(c.qkv); free(c.o); free(c.lse); free(c.r); free(g); free(fdg);
}

/* Attention dropout: the backward against finite differences with p > 0
 * (the mask is a fixed function of the key, so L is smooth in q, k, v),
 * the drop rate, and layout independence: calls on a head slice (tensor
 * parallelism) or on one sample (data parallelism, micro-batches) with
 * b0 / h0 set give exactly the whole call's outputs. */
static void test_attention_dropout(gl_dev *d)
{
    gl_attn_dropout dp = { .seed = 1234, .iteration = 7, .layer = 3, .site = 2,
                           .p = 0.3f, .b0 = 5, .h0 = 0, .heads = 4 };
    attn_ctx c = { .B = 2, .S = 6, .Hq = 4, .Hkv = 2, .D = 4, .drop = &dp };
    c.ld = (c.Hq + 2 * c.Hkv) * c.D;
    c.ldo = c.lddo = c.Hq * c.D;
    c.scale = 1 / sqrt((double)c.D);
    const int BS = c.B * c.S, HD = c.Hq * c.D, D = c.D, S = c.S;
    const size_t nqkv = (size_t)BS * c.ld, no = (size_t)BS * c.ldo,
                 nl = (size_t)c.B * c.Hq * c.S;
    c.qkv = rnd(nqkv, 1.5);
    c.o = dzeros(no);
    c.lse = dzeros(nl);
    c.r = rnd(no, 1);
    attn_loss(&c);

    /* o differs from the undropped one, lse does not */
    double *o0 = dzeros(no), *l0 = dzeros(nl);
    c.drop = NULL;
    attn_run(&c, o0, l0, c.qkv);
    c.drop = &dp;
    ok(relerr(c.o, o0, no) > 0.01 && relerr(c.lse, l0, nl) == 0,
       "attn_fwd with dropout: o changes (rel %.2g), lse is the undropped softmax's",
       relerr(c.o, o0, no));

    /* backward against finite differences of L = sum(o * r) */
    double *g = dzeros(nqkv);
    gl_cpu_attn_bwd_f64(g, g + HD, g + HD + c.Hkv * D, c.ld, c.r, c.lddo, c.o,
                        c.ldo, c.lse, c.qkv, c.ld, c.qkv + HD, c.ld,
                        c.qkv + HD + c.Hkv * D, c.ld, c.B, S, c.Hq, c.Hkv, D, c.scale, &dp);
    double *fdg = dzeros(nqkv);
    for (size_t i = 0; i < nqkv; i++) {
        double save = c.qkv[i];
        c.qkv[i] = save + FD_STEP;
        double lp = attn_loss(&c);
        c.qkv[i] = save - FD_STEP;
        double lm = attn_loss(&c);
        c.qkv[i] = save;
        fdg[i] = (lp - lm) / (2 * FD_STEP);
    }
    attn_loss(&c);
    ok(relerr(g, fdg, nqkv) < FD_TOL,
       "attn_bwd f64 with dropout p = 0.3: dq, dk, dv vs finite differences (rel %.2g)",
       relerr(g, fdg, nqkv));

    /* the whole call, split by heads (2 TP ranks of 2 query heads and 1
     * kv head each) and by samples (one sample per call) */
    int same_h = 1, same_b = 1;
    for (int r = 0; r < 2; r++) {
        int hq = c.Hq / 2, hk = c.Hkv / 2, ld = (hq + 2 * hk) * D;
        double *q = dzeros((size_t)BS * ld), *o = dzeros((size_t)BS * hq * D),
               *l = dzeros((size_t)c.B * hq * S);
        for (int t = 0; t < BS; t++) {
            const double *src = c.qkv + (size_t)t * c.ld;
            memcpy(q + (size_t)t * ld, src + r * hq * D, (size_t)hq * D * sizeof *q);
            memcpy(q + (size_t)t * ld + hq * D, src + HD + r * hk * D,
                   (size_t)hk * D * sizeof *q);
            memcpy(q + (size_t)t * ld + (hq + hk) * D, src + HD + (c.Hkv + r * hk) * D,
                   (size_t)hk * D * sizeof *q);
        }
        gl_attn_dropout part = dp;
        part.h0 = r * hq;
        gl_cpu_attn_fwd_f64(o, hq * D, l, q, ld, q + hq * D, ld, q + (hq + hk) * D, ld,
                            c.B, S, hq, hk, D, c.scale, &part);
        for (int t = 0; t < BS; t++)
            same_h &= !memcmp(o + (size_t)t * hq * D, c.o + (size_t)t * c.ldo + r * hq * D,
                              (size_t)hq * D * sizeof *o);
        free(q); free(o); free(l);
    }
    for (int b = 0; b < c.B; b++) {
        double *o = dzeros((size_t)S * c.ldo), *l = dzeros((size_t)c.Hq * S);
        const double *q = c.qkv + (size_t)b * S * c.ld;
        gl_attn_dropout part = dp;
        part.b0 = dp.b0 + b;
        gl_cpu_attn_fwd_f64(o, c.ldo, l, q, c.ld, q + HD, c.ld, q + HD + c.Hkv * D, c.ld,
                            1, S, c.Hq, c.Hkv, D, c.scale, &part);
        same_b &= !memcmp(o, c.o + (size_t)b * S * c.ldo, (size_t)S * c.ldo * sizeof *o);
        free(o); free(l);
    }
    ok(same_h, "attention dropout: a head split (h0) gives the whole call's outputs");
    ok(same_b, "attention dropout: a sample split (b0) gives the whole call's outputs");

    /* the generator's drop rate near p over a large tensor */
    long kept = 0, all = 0;
    uint32_t thr = gl_dropout_threshold(dp.p), st = gl_dropout_stream(dp.layer, dp.site);
    for (uint64_t e = 0; e < 400000; e++, all++)
        kept += gl_dropout_keep(dp.seed, dp.iteration, st, e, thr);
    double rate = 1 - (double)kept / all;
    ok(fabs(rate - 0.3) < 0.005, "attention dropout drops %.4f of a tensor (p = 0.3)", rate);

    /* the f32 device op with the same key: the same mask as f64 */
    float *fq = dev_f(d, c.qkv, nqkv), *fo = d->ops->alloc(d, no * 4),
          *fl = d->ops->alloc(d, nl * 4);
    double *rq = rounded(c.qkv, nqkv), *ro = dzeros(no), *rl = dzeros(nl);
    gl_cpu_attn_fwd_f64(ro, c.ldo, rl, rq, c.ld, rq + HD, c.ld, rq + HD + c.Hkv * D, c.ld,
                        c.B, S, c.Hq, c.Hkv, D, (double)(float)c.scale, &dp);
    d->ops->attn_fwd(d, fo, c.ldo, fl, fq, c.ld, fq + HD, c.ld, fq + HD + c.Hkv * D, c.ld,
                     c.B, S, c.Hq, c.Hkv, D, (float)c.scale, &dp);
    ok(relerr_f(fo, ro, no) < F32_TOL, "attn_fwd f32 device with dropout vs f64 (rel %.2g)",
       relerr_f(fo, ro, no));
    d->ops->free(d, fq); d->ops->free(d, fo); d->ops->free(d, fl);
    free(rq); free(ro); free(rl);
    free(c.qkv); free(c.o); free(c.lse); free(c.r); free(g); free(fdg); free(o0); free(l0);
}

/* ---- SwiGLU ------------------------------------------------------------ */

typedef struct {
    int n, f;
    double *gu, *y, *r;
} swiglu_ctx;

static double swiglu_loss(void *p)
{
    swiglu_ctx *c = p;
    gl_cpu_swiglu_fwd_f64(c->y, c->gu, c->n, c->f);
    double L = 0;
    for (int i = 0; i < c->n * c->f; i++)
        L += c->y[i] * c->r[i];
    return L;
}

static void test_swiglu(gl_dev *d)
{
    const int n = 7, f = 5;
    const size_t ng = (size_t)n * 2 * f, ny = (size_t)n * f;
    swiglu_ctx c = { n, f, rnd(ng, 3), dzeros(ny), rnd(ny, 1) };
    swiglu_loss(&c);
    double err = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < f; j++) {
            double a = c.gu[i * 2 * f + j], b = c.gu[i * 2 * f + f + j];
            err = fmax(err, fabs(a / (1 + exp(-a)) * b - c.y[i * f + j]));
        }
    ok(err < 1e-15, "swiglu_fwd f64: silu(gate) * up (err %.2g)", err);
    double *dgu = dzeros(ng);
    gl_cpu_swiglu_bwd_f64(dgu, c.r, c.gu, n, f);
    double e = fd_relerr(swiglu_loss, &c, c.gu, ng, dgu);
    ok(e < FD_TOL, "swiglu_bwd f64: dgate, dup vs finite differences (rel %.2g)", e);

    double *rg = rounded(c.gu, ng), *rr = rounded(c.r, ny), *ry = dzeros(ny), *rd = dzeros(ng);
    gl_cpu_swiglu_fwd_f64(ry, rg, n, f);
    gl_cpu_swiglu_bwd_f64(rd, rr, rg, n, f);
    float *fg = dev_f(d, c.gu, ng), *fr = dev_f(d, c.r, ny);
    float *fy = d->ops->alloc(d, ny * 4), *fd = d->ops->alloc(d, ng * 4);
    d->ops->swiglu_fwd(d, fy, fg, n, f);
    d->ops->swiglu_bwd(d, fd, fr, fg, n, f);
    ok(relerr_f(fy, ry, ny) < F32_TOL && relerr_f(fd, rd, ng) < F32_TOL,
       "swiglu f32 device vs f64 (rel %.2g, %.2g)", relerr_f(fy, ry, ny), relerr_f(fd, rd, ng));
    d->ops->free(d, fg); d->ops->free(d, fr); d->ops->free(d, fy); d->ops->free(d, fd);
    free(rg); free(rr); free(ry); free(rd);
    free(c.gu); free(c.y); free(c.r); free(dgu);
}

/* ---- embedding ---------------------------------------------------------- */

static void test_embedding(gl_dev *d)
{
    const int h = 4, vl = 6, n = 9;
    const long vs = 10;
    /* in shard: 10, 15, 12 (twice), 10 (twice); outside: 9, 16, 3 */
    const int32_t ids[9] = { 10, 9, 15, 12, 16, 12, 3, 10, 10 };
    double *table = rnd((size_t)vl * h, 1), *y = rnd((size_t)n * h, 1);
    gl_cpu_embed_fwd_f64(y, table, ids, n, h, vs, vl);
    int good = 1;
    for (int i = 0; i < n; i++) {
        long r = ids[i] - vs;
        for (int e = 0; e < h; e++)
            good &= y[i * h + e] == (r >= 0 && r < vl ? table[r * h + e] : 0.0);
    }
    ok(good, "embed_fwd: rows of the shard, zero rows for ids outside it");

    double *dy = rnd((size_t)n * h, 1), *dt = rnd((size_t)vl * h, 1);
    double *want = dcopy(dt, (size_t)vl * h);
    for (int i = 0; i < n; i++) {
        long r = ids[i] - vs;
        if (r >= 0 && r < vl)
            for (int e = 0; e < h; e++)
                want[r * h + e] += dy[i * h + e];
    }
    gl_cpu_embed_bwd_f64(dt, dy, ids, n, h, vs, vl);
    ok(relerr(dt, want, (size_t)vl * h) == 0, "embed_bwd adds each token's dy to its row (repeats summed)");

    int32_t *fid = d->ops->alloc(d, sizeof ids);
    d->ops->upload(d, fid, ids, sizeof ids);
    float *ft = dev_f(d, table, (size_t)vl * h), *fy = d->ops->alloc(d, (size_t)n * h * 4);
    float *fdy = dev_f(d, dy, (size_t)n * h), *fdt = d->ops->alloc(d, (size_t)vl * h * 4);
    double *ry = dzeros((size_t)n * h), *rdt = dzeros((size_t)vl * h), *rt = rounded(table, (size_t)vl * h);
    double *rdy = rounded(dy, (size_t)n * h);
    gl_cpu_embed_fwd_f64(ry, rt, ids, n, h, vs, vl);
    gl_cpu_embed_bwd_f64(rdt, rdy, ids, n, h, vs, vl);
    d->ops->embed_fwd(d, fy, ft, fid, n, h, vs, vl);
    d->ops->embed_bwd(d, fdt, fdy, fid, n, h, vs, vl);
    ok(relerr_f(fy, ry, (size_t)n * h) == 0 && relerr_f(fdt, rdt, (size_t)vl * h) < F32_TOL,
       "embed f32 device vs f64");
    d->ops->free(d, fid); d->ops->free(d, ft); d->ops->free(d, fy);
    d->ops->free(d, fdy); d->ops->free(d, fdt);
    free(ry); free(rdt); free(rt); free(rdy);
    free(table); free(y); free(dy); free(dt); free(want);
}

/* ---- cross-entropy ------------------------------------------------------ */

/* The whole vocabulary on one shard: 11 real tokens padded to 13 columns,
 * row stride 15. */
enum { CE_N = 6, CE_V = 11, CE_VL = 13, CE_LD = 15 };

typedef struct {
    double *z, *gscale;
    const int32_t *tgt;
} ce_ctx;

/* The three steps on one shard; returns sum_i gscale_i loss_i, leaves the
 * losses in loss and (when grad) the gradient in z. */
static double ce_run(double *z, int ld, const int32_t *tgt, const double *gscale,
                     double *loss, int grad, int vl, int valid, long vs)
{
    double mx[CE_N], st[2 * CE_N];
    gl_cpu_ce_max_f64(mx, z, ld, CE_N, valid);
    gl_cpu_ce_sum_f64(st, z, ld, tgt, mx, CE_N, valid, vs);
    gl_cpu_ce_bwd_f64(loss, z, ld, tgt, mx, st, grad ? gscale : NULL, CE_N, vl, valid, vs);
    double L = 0;
    for (int i = 0; i < CE_N; i++)
        L += gscale[i] * loss[i];
    return L;
}

static double ce_loss(void *p)
{
    ce_ctx *c = p;
    double loss[CE_N];
    return ce_run(c->z, CE_LD, c->tgt, c->gscale, loss, 0, CE_VL, CE_V, 0);
}

static void test_cross_entropy(gl_dev *d)
{
    const size_t nz = (size_t)CE_N * CE_LD;
    const int32_t tgt[CE_N] = { 3, 0, 10, 7, 5, 10 };
    double gscale[CE_N] = { 0.25, 0.5, 0, 0.125, 0.3, 1 };   /* token 2 masked */
    double *z = rnd(nz, 4);
    for (int i = 0; i < CE_N; i++)
        for (int j = CE_V; j < CE_LD; j++)
            z[i * CE_LD + j] = 50;   /* padding: would dominate if counted */
    ce_ctx c = { z, gscale, tgt };

    /* loss against a direct log-softmax over the real columns */
    double loss[CE_N], err = 0;
    double *zg = dcopy(z, nz);
    ce_run(zg, CE_LD, tgt, gscale, loss, 1, CE_VL, CE_V, 0);
    for (int i = 0; i < CE_N; i++) {
        double s = 0;
        for (int j = 0; j < CE_V; j++)
            s += exp(z[i * CE_LD + j]);
        err = fmax(err, fabs(loss[i] - (log(s) - z[i * CE_LD + tgt[i]])));
    }
    ok(err < 1e-13, "ce f64: loss = -log softmax(target) over the real columns (err %.2g)", err);

    /* gradient against finite differences (the stride's columns past vl
     * are no logits: they must not move the loss, finite difference 0) */
    double *gcmp = dcopy(zg, nz);
    for (int i = 0; i < CE_N; i++)
        for (int j = CE_VL; j < CE_LD; j++)
            gcmp[i * CE_LD + j] = 0;
    double e = fd_relerr(ce_loss, &c, z, nz, gcmp);
    free(gcmp);
    int pad = 1;
    for (int i = 0; i < CE_N; i++) {
        for (int j = CE_V; j < CE_VL; j++)
            pad &= zg[i * CE_LD + j] == 0;
        for (int j = CE_VL; j < CE_LD; j++)   /* beyond vl: not ours */
            pad &= zg[i * CE_LD + j] == 50;
    }
    ok(e < FD_TOL, "ce_bwd f64: gradient vs finite differences (rel %.2g)", e);
    ok(pad, "ce_bwd: padding columns get gradient 0, columns past vl untouched");

    /* padding never predicted: its values change nothing */
    double *z2 = dcopy(z, nz), loss2[CE_N];
    for (int i = 0; i < CE_N; i++)
        for (int j = CE_V; j < CE_VL; j++)
            z2[i * CE_LD + j] = (j % 2) ? -1e3 : 1e3;
    ce_run(z2, CE_LD, tgt, gscale, loss2, 1, CE_VL, CE_V, 0);
    ok(memcmp(loss, loss2, sizeof loss) == 0 && relerr(z2, zg, (size_t)CE_N * CE_VL) == 0,
       "ce: padding columns' values change neither loss nor gradient");

    /* two shards by hand: columns [0, 7) and [7, 13), the second holding
     * 4 real tokens and the 2 padding columns */
    {
        const int vl0 = 7, vl1 = CE_VL - 7, valid1 = CE_V - 7;
        double *a = dcopy(z, nz), *b = dcopy(z + vl0, nz - vl0);
        double mx0[CE_N], mx1[CE_N], st0[2 * CE_N], st1[2 * CE_N], mx[CE_N], st[2 * CE_N];
        double la[CE_N], lb[CE_N];
        gl_cpu_ce_max_f64(mx0, a, CE_LD, CE_N, vl0);
        gl_cpu_ce_max_f64(mx1, b, CE_LD, CE_N, valid1);
        for (int i = 0; i < CE_N; i++)
            mx[i] = fmax(mx0[i], mx1[i]);                    /* all-reduce MAX */
        gl_cpu_ce_sum_f64(st0, a, CE_LD, tgt, mx, CE_N, vl0, 0);
        gl_cpu_ce_sum_f64(st1, b, CE_LD, tgt, mx, CE_N, valid1, vl0);
        for (int i = 0; i < 2 * CE_N; i++)
            st[i] = st0[i] + st1[i];                         /* all-reduce SUM */
        gl_cpu_ce_bwd_f64(la, a, CE_LD, tgt, mx, st, gscale, CE_N, vl0, vl0, 0);
        gl_cpu_ce_bwd_f64(lb, b, CE_LD, tgt, mx, st, gscale, CE_N, vl1, valid1, vl0);
        double el = 0, eg = 0;
        for (int i = 0; i < CE_N; i++) {
            el = fmax(el, fmax(fabs(la[i] - loss[i]), fabs(lb[i] - loss[i])));
            for (int j = 0; j < CE_VL; j++) {
                double gj = j < vl0 ? a[i * CE_LD + j] : b[i * CE_LD + j - vl0];
                eg = fmax(eg, fabs(gj - zg[i * CE_LD + j]));
            }
        }
        ok(el < 1e-14 && eg < 1e-15,
           "ce split over 2 shards (max/sum combined) equals unsplit (loss %.2g, grad %.2g)", el, eg);
        free(a); free(b);
    }

    /* gscale NULL leaves the logits alone; loss NULL skips the loss */
    {
        double *z3 = dcopy(z, nz), mx[CE_N], st[2 * CE_N], l3[CE_N];
        gl_cpu_ce_max_f64(mx, z3, CE_LD, CE_N, CE_V);
        gl_cpu_ce_sum_f64(st, z3, CE_LD, tgt, mx, CE_N, CE_V, 0);
        gl_cpu_ce_bwd_f64(l3, z3, CE_LD, tgt, mx, st, NULL, CE_N, CE_VL, CE_V, 0);
        int same = memcmp(z3, z, nz * sizeof *z) == 0;
        gl_cpu_ce_bwd_f64(NULL, z3, CE_LD, tgt, mx, st, gscale, CE_N, CE_VL, CE_V, 0);
        ok(same && memcmp(l3, loss, sizeof l3) == 0 && relerr(z3, zg, nz) == 0,
           "ce_bwd: gscale NULL keeps logits, loss NULL still writes the gradient");
        free(z3);
    }

    /* the device's float operations */
    {
        double *rz = rounded(z, nz), rg[CE_N], rloss[CE_N], mx[CE_N], st[2 * CE_N];
        for (int i = 0; i < CE_N; i++)
            rg[i] = (float)gscale[i];
        gl_cpu_ce_max_f64(mx, rz, CE_LD, CE_N, CE_V);
        gl_cpu_ce_sum_f64(st, rz, CE_LD, tgt, mx, CE_N, CE_V, 0);
        gl_cpu_ce_bwd_f64(rloss, rz, CE_LD, tgt, mx, st, rg, CE_N, CE_VL, CE_V, 0);
        float *fz = dev_f(d, z, nz), *fg = dev_f(d, gscale, CE_N);
        float *fm = d->ops->alloc(d, CE_N * 4), *fs = d->ops->alloc(d, 2 * CE_N * 4);
        float *fl = d->ops->alloc(d, CE_N * 4);
        int32_t *ft = d->ops->alloc(d, sizeof tgt);
        d->ops->upload(d, ft, tgt, sizeof tgt);
        d->ops->ce_max(d, fm, fz, CE_LD, CE_N, CE_V);
        d->ops->ce_sum(d, fs, fz, CE_LD, ft, fm, CE_N, CE_V, 0);
        d->ops->ce_bwd(d, fl, fz, CE_LD, ft, fm, fs, fg, CE_N, CE_VL, CE_V, 0);
        for (int i = 0; i < CE_N; i++)     /* compare the logit columns only */
            for (int j = CE_VL; j < CE_LD; j++)
                fz[i * CE_LD + j] = (float)(rz[i * CE_LD + j] = 0);
        ok(relerr_f(fl, rloss, CE_N) < F32_TOL && relerr_f(fz, rz, nz) < F32_TOL,
           "ce f32 device vs f64 (loss %.2g, grad %.2g)", relerr_f(fl, rloss, CE_N),
           relerr_f(fz, rz, nz));
        d->ops->free(d, fz); d->ops->free(d, fg); d->ops->free(d, fm);
        d->ops->free(d, fs); d->ops->free(d, fl); d->ops->free(d, ft);
        free(rz);
    }
    free(z); free(zg); free(z2);
}

/* ---- AdamW -------------------------------------------------------------- */

/* One AdamW step written out in double, element by element. */
static void adamw_ref(double *w, const double *grad, double *m, double *v, size_t n,
                      double wd, double lr, double b1, double b2, double eps,
                      double gs, long step)
{
    for (size_t i = 0; i < n; i++) {
        double g = grad[i] * gs;
        m[i] = b1 * m[i] + (1 - b1) * g;
        v[i] = b2 * v[i] + (1 - b2) * g * g;
        double mhat = m[i] / (1 - pow(b1, step)), vhat = v[i] / (1 - pow(b2, step));
        w[i] -= lr * (mhat / (sqrt(vhat) + eps) + wd * w[i]);
    }
}

static void test_adamw(gl_dev *d)
{
    enum { N0 = 5, N1 = 3, N = N0 + N1 };
    const float wd0 = 0.1f, wd1 = 0;
    gl_adamw_hyper hp = { .lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                          .grad_scale = 0.5f };
    double w[N], m[N] = { 0 }, v[N] = { 0 };
    float *fw = d->ops->alloc(d, N * 4), *fgr = d->ops->alloc(d, N * 4);
    float *fm = d->ops->alloc(d, N * 4), *fv = d->ops->alloc(d, N * 4);
    float *act = d->ops->alloc(d, N0 * 4);
    for (int i = 0; i < N; i++)
        fw[i] = (float)(w[i] = (float)(1 + rnd1()));
    gl_adamw_seg seg[2] = {
        { fw, fgr, fm, fv, act, N0, wd0 },
        { fw + N0, fgr + N0, fm + N0, fv + N0, NULL, N1, wd1 },
    };
    for (long step = 1; step <= 2; step++) {
        double gr[N];
        for (int i = 0; i < N; i++)
            fgr[i] = (float)(gr[i] = (float)(0.3 * rnd1()));
        hp.step = step;
        d->ops->adamw(d, seg, 2, &hp);
        adamw_ref(w, gr, m, v, N0, wd0, hp.lr, hp.beta1, hp.beta2, hp.eps, hp.grad_scale, step);
        adamw_ref(w + N0, gr + N0, m + N0, v + N0, N1, wd1, hp.lr, hp.beta1, hp.beta2,
                  hp.eps, hp.grad_scale, step);
        double ew = 0, em = 0, ev = 0;
        for (int i = 0; i < N; i++) {
            ew = fmax(ew, fabs(fw[i] - w[i]));
            em = fmax(em, fabs(fm[i] - m[i]) / fabs(m[i]));
            ev = fmax(ev, fabs(fv[i] - v[i]) / fabs(v[i]));
        }
        ok(ew < 1e-6 && em < 1e-6 && ev < 1e-6,
           "adamw step %ld (wd %.1f and 0, grad_scale 0.5) vs hand-written step "
           "(w %.2g, m %.2g, v %.2g)", step, wd0, ew, em, ev);
        ok(memcmp(act, fw, N0 * 4) == 0, "adamw step %ld writes the updated weights to act_out", step);
    }
    /* the double kernel agrees with the hand-written step to rounding */
    double w2[N0], g2[N0], m2[N0] = { 0 }, v2[N0] = { 0 }, w3[N0], m3[N0] = { 0 }, v3[N0] = { 0 };
    for (int i = 0; i < N0; i++) {
        w2[i] = w3[i] = 1 + rnd1();
        g2[i] = rnd1();
    }
    for (long step = 1; step <= 2; step++) {
        gl_cpu_adamw_f64(w2, g2, m2, v2, NULL, N0, 0.1, 0.01, 0.9, 0.95, 1e-8, 0.5, step);
        adamw_ref(w3, g2, m3, v3, N0, 0.1, 0.01, 0.9, 0.95, 1e-8, 0.5, step);
    }
    ok(relerr(w2, w3, N0) < 1e-15 && relerr(m2, m3, N0) < 1e-15 && relerr(v2, v3, N0) < 1e-15,
       "adamw f64 kernel, two steps, equals the hand-written step");
    d->ops->free(d, fw); d->ops->free(d, fgr); d->ops->free(d, fm);
    d->ops->free(d, fv); d->ops->free(d, act);
}

/* ---- FP8 ---------------------------------------------------------------- */

/*
 * The FP8 ops of the CPU device: quantization and amax through the table
 * (the emulation itself is t/fp8.t's), and products that must be exact:
 * operands that are small integers (exact in E4M3 up to 16, in E5M2 up
 * to 8), power-of-two scales, sums far below 2^24, so fp32 arithmetic
 * makes no rounding anywhere and C equals an integer product.
 */
static void test_fp8(gl_dev *d)
{
    enum { M = 32, N = 48, K = 64 };
    float *x = d->ops->alloc(d, M * K * sizeof(float));
    for (int i = 0; i < M * K; i++)
        x[i] = (float)((i * 7) % 33 - 16) / 4;  /* quarters in [-4, 4] */
    x[5] = -9.0f;
    uint8_t *q = d->ops->alloc(d, M * K), *qt = d->ops->alloc(d, M * K);
    float *sc = d->ops->alloc(d, 4 * sizeof(float));
    sc[0] = 4;                                  /* scale: x * 4 are integers */
    sc[1] = 0;                                  /* amax */
    d->ops->fp8_quantize(d, q, qt, &sc[1], x, M, K, &sc[0], GL_FP8_E4M3);
    int good = 1;
    for (int r = 0; r < M; r++)
        for (int c = 0; c < K; c++) {
            uint8_t b = gl_fp8_encode(x[r * K + c] * 4, GL_FP8_E4M3);
            good &= q[r * K + c] == b && qt[c * M + r] == b;
        }
    ok(good && sc[1] == 9.0f, "fp8_quantize: q, its transpose qt, and the amax (%g)", sc[1]);
    x[7] = 12.5f;
    d->ops->fp8_quantize(d, NULL, qt, &sc[1], x, M, K, &sc[0], GL_FP8_E4M3);
    x[7] = 1;
    d->ops->fp8_quantize(d, q, NULL, &sc[1], x, M, K, &sc[0], GL_FP8_E4M3);
    ok(sc[1] == 12.5f, "fp8_quantize: amax accumulates over calls (max 12.5, then 9)");
    sc[2] = 3;
    d->ops->fp8_amax(d, &sc[2], x, M * K);
    x[9] = NAN;
    sc[3] = 0;
    d->ops->fp8_amax(d, &sc[3], x, M * K);
    ok(sc[2] == 9 && isnan(sc[3]), "fp8_amax: folds into what is there; NaN propagates");
    x[9] = 0;

    /* fp8_amax_scale: the amax written over what was there (12.5 stays
     * out), the scale and inverse of gl_fp8_scale_current */
    float as[4] = {12.5f, 0, 0, 0}, want_s, want_i, nine = 9;
    gl_fp8_scale_current(&nine, &want_s, &want_i, 1, GL_FP8_E4M3);
    d->ops->fp8_amax_scale(d, &as[0], &as[1], &as[2], x, M * K, GL_FP8_E4M3);
    ok(as[0] == 9 && as[1] == want_s && as[2] == want_i && as[1] == 448.0f / 9,
       "fp8_amax_scale: amax 9 (not folded into 12.5), scale 448/9 and its inverse");
    as[1] = as[2] = -1;
    d->ops->fp8_amax_scale(d, &as[0], NULL, NULL, x, M * K, GL_FP8_E5M2);
    ok(as[0] == 9 && as[1] == -1 && as[2] == -1, "fp8_amax_scale without a scale: the amax alone");
    x[9] = NAN;
    d->ops->fp8_amax_scale(d, &as[0], &as[1], &as[2], x, M * K, GL_FP8_E5M2);
    x[9] = 0;
    ok(isnan(as[0]) && as[1] == 1 && as[2] == 1, "fp8_amax_scale: a NaN gives amax NaN, scale 1");
    for (int i = 0; i < M * K; i++)
        if (i != 5)
            x[i] = 0;
    x[5] = 0;
    d->ops->fp8_amax_scale(d, &as[0], &as[1], &as[2], x, M * K, GL_FP8_E4M3);
    ok(as[0] == 0 && as[1] == 1 && as[2] == 1, "fp8_amax_scale: all zeros give scale 1");
    for (int i = 0; i < M * K; i++)             /* x as it was */
        x[i] = (float)((i * 7) % 33 - 16) / 4;
    x[5] = -9.0f;

    /* the products: A [M, K] (E4M3, integers in [-16, 16]), B [N, K]
     * (E5M2, integers in [-8, 8]), scale_inv 1/2 and 1/4, alpha 2 */
    uint8_t *a8 = d->ops->alloc(d, M * K), *b8 = d->ops->alloc(d, N * K);
    int *ai = malloc(M * K * sizeof *ai), *bi = malloc(N * K * sizeof *bi);
    for (int i = 0; i < M * K; i++) {
        ai[i] = (i * 11) % 33 - 16;
        a8[i] = gl_fp8_encode((float)ai[i], GL_FP8_E4M3);
    }
    for (int i = 0; i < N * K; i++) {
        bi[i] = (i * 5) % 17 - 8;
        b8[i] = gl_fp8_encode((float)bi[i], GL_FP8_E5M2);
    }
    float *inv = d->ops->alloc(d, 2 * sizeof(float));
    inv[0] = 0.5f;
    inv[1] = 0.25f;
    int ldc = N + 16;
    float *c = d->ops->alloc(d, M * ldc * sizeof(float));
    for (int i = 0; i < M * ldc; i++)
        c[i] = (float)(i % 5);
    d->ops->gemm_fp8(d, M, N, K, 2.0f, a8, GL_FP8_E4M3, &inv[0], b8, GL_FP8_E5M2,
                     &inv[1], 0.0f, c, GL_DT_F32, ldc, 0);
    int exact = 1, pad = 1;
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
            long dot = 0;
            for (int l = 0; l < K; l++)
                dot += (long)ai[i * K + l] * bi[j * K + l];
            exact &= c[i * ldc + j] == (float)dot / 4;  /* 2 * 1/2 * 1/4 */
        }
        for (int j = N; j < ldc; j++)
            pad &= c[i * ldc + j] == (float)((i * ldc + j) % 5);
    }
    ok(exact && pad, "gemm_fp8 E4M3 x E5M2: exact integer products, scaled by "
       "alpha a_scale_inv b_scale_inv; ldc padding untouched");
    /* beta = 1, A against itself (E4M3 x E4M3), fast_accum (ignored) */
    for (int i = 0; i < M * ldc; i++)
        c[i] = 1.0f;
    d->ops->gemm_fp8(d, M, M, K, 1.0f, a8, GL_FP8_E4M3, &inv[0], a8, GL_FP8_E4M3,
                     &inv[0], 1.0f, c, GL_DT_F32, ldc, 1);
    exact = 1;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < M; j++) {
            long dot = 0;
            for (int l = 0; l < K; l++)
                dot += (long)ai[i * K + l] * ai[j * K + l];
            exact &= c[i * ldc + j] == (float)dot / 4 + 1;
        }
    ok(exact, "gemm_fp8 E4M3 x E4M3, beta 1: C += the exact product");
    free(ai);
    free(bi);
    void *bufs[] = {x, q, qt, sc, a8, b8, inv, c};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        d->ops->free(d, bufs[i]);

    /* the scale updates through the table: the functions t/fp8.t checks */
    float *h = d->ops->alloc(d, 6 * sizeof(float)), *s = d->ops->alloc(d, 6 * sizeof(float));
    float hh[6] = {7, 2, 3, 14, 0, 0};          /* [len 2, n 3] */
    memcpy(h, hh, sizeof hh);
    s[0] = s[1] = s[2] = 1;
    d->ops->fp8_scale_delayed(d, h, s, s + 3, 1, 3, 2, GL_FP8_AMAX_MAX, 1, GL_FP8_E4M3);
    ok(s[0] == 16 && s[1] == 112 && s[2] == 224.0f / 3 && s[3] == 1.0f / 16 &&
       h[0] == 0 && h[3] == 7 && h[4] == 2,
       "fp8_scale_delayed through the table: margin 1, max over the history, rolled");
    hh[0] = 0;
    d->ops->fp8_scale_current(d, hh, s, s + 3, 1, 3, GL_FP8_E5M2);
    ok(s[0] == 1 && s[1] == 28672 && s[4] == 1.0f / 28672,
       "fp8_scale_current through the table");

    /* the same with fp8.c's stride-4 records {inverse, scale, -, -}: the
     * packed results, the entries between records untouched */
    float *r = d->ops->alloc(d, 12 * sizeof(float));
    for (int i = 0; i < 12; i++)
        r[i] = i % 4 == 1 ? 1.0f : -5.0f;
    float hs[6] = {7, 2, 3, 14, 0, 0};
    memcpy(h, hs, sizeof hs);
    d->ops->fp8_scale_delayed(d, h, r + 1, r, 4, 3, 2, GL_FP8_AMAX_MAX, 1, GL_FP8_E4M3);
    ok(r[1] == 16 && r[5] == 112 && r[9] == 224.0f / 3 && r[0] == 1.0f / 16 &&
       r[4] == 1.0f / 112 && r[8] == 1.0f / r[9] && r[2] == -5 && r[11] == -5 &&
       h[0] == 0 && h[3] == 7 && h[4] == 2,
       "fp8_scale_delayed with stride 4: the packed results, nothing else written");
    d->ops->fp8_scale_current(d, hh, r + 1, r, 4, 3, GL_FP8_E5M2);
    ok(r[1] == 1 && r[5] == 28672 && r[4] == 1.0f / 28672 && r[0] == 1 && r[3] == -5,
       "fp8_scale_current with stride 4");
    d->ops->free(d, r);
    d->ops->free(d, h);
    d->ops->free(d, s);
}

/* ---- Megatron's GPT ops: LayerNorm, GeLU, biases, dropout, positions -- */

typedef struct {
    int n, h, one_plus;
    double eps, *x, *w, *b, *y, *mean, *rstd, *r;
} ln_ctx;

static double ln_loss(void *p)
{
    ln_ctx *c = p;
    gl_cpu_layernorm_fwd_f64(c->y, c->mean, c->rstd, c->x, c->w, c->b, c->n,
                             c->h, c->eps, c->one_plus);
    double L = 0;
    for (int i = 0; i < c->n * c->h; i++)
        L += c->y[i] * c->r[i];
    return L;
}

static void test_layernorm(gl_dev *d, int one_plus)
{
    const int n = 7, h = 12;
    const size_t nh = (size_t)n * h;
    ln_ctx c = { n, h, one_plus, 1e-5, rnd(nh, 2), rnd(h, 1), rnd(h, 1),
                 dzeros(nh), dzeros(n), dzeros(n), rnd(nh, 1) };
    for (size_t i = 0; i < nh; i++)        /* rows far from zero mean */
        c.x[i] += 3 * (double)(i / h) - 9;
    if (!one_plus)
        for (int j = 0; j < h; j++)
            c.w[j] += 1.5;
    const char *v = one_plus ? " (1p)" : "";

    ln_loss(&c);
    double err = 0;
    for (int i = 0; i < n; i++) {
        double s = 0, ss = 0;
        for (int j = 0; j < h; j++)
            s += c.x[i * h + j];
        double mu = s / h;
        for (int j = 0; j < h; j++)
            ss += (c.x[i * h + j] - mu) * (c.x[i * h + j] - mu);
        double rs = 1 / sqrt(ss / h + c.eps);
        err = fmax(err, fabs(mu - c.mean[i]) + fabs(rs - c.rstd[i]) / rs);
        for (int j = 0; j < h; j++) {
            double wj = one_plus ? 1 + c.w[j] : c.w[j];
            err = fmax(err, fabs((c.x[i * h + j] - mu) * rs * wj + c.b[j] -
                                 c.y[i * h + j]));
        }
    }
    ok(err < 1e-13, "layernorm_fwd%s f64: y, mean, rstd as the formula (err %.2g)", v, err);

    double *dx = dzeros(nh), *dw = dzeros(h), *db = dzeros(h);
    gl_cpu_layernorm_bwd_f64(dx, dw, db, c.r, c.x, c.w, c.mean, c.rstd, n, h,
                             one_plus, 0);
    double ex = fd_relerr(ln_loss, &c, c.x, nh, dx);
    double ew = fd_relerr(ln_loss, &c, c.w, h, dw);
    double eb = fd_relerr(ln_loss, &c, c.b, h, db);
    ok(ex < FD_TOL, "layernorm_bwd%s f64: dx vs finite differences (rel %.2g)", v, ex);
    ok(ew < FD_TOL, "layernorm_bwd%s f64: dw vs finite differences (rel %.2g)", v, ew);
    ok(eb < FD_TOL, "layernorm_bwd%s f64: db vs finite differences (rel %.2g)", v, eb);

    /* accumulate_dx adds to dx; dw and db always add */
    ln_loss(&c);
    double *dx2 = rnd(nh, 1), *dw2 = rnd(h, 1), *db2 = rnd(h, 1);
    double *dx0 = dcopy(dx2, nh), *dw0 = dcopy(dw2, h), *db0 = dcopy(db2, h);
    gl_cpu_layernorm_bwd_f64(dx2, dw2, db2, c.r, c.x, c.w, c.mean, c.rstd, n,
                             h, one_plus, 1);
    double ea = 0, ep = 0;
    for (size_t i = 0; i < nh; i++)
        ea = fmax(ea, fabs(dx2[i] - (dx0[i] + dx[i])));
    for (int j = 0; j < h; j++)
        ep = fmax(ep, fabs(dw2[j] - (dw0[j] + dw[j])) + fabs(db2[j] - (db0[j] + db[j])));
    ok(ea < 1e-13 && ep < 1e-13, "layernorm_bwd%s accumulate_dx=1: dx += gradient, dw and db += (err %.2g, %.2g)",
       v, ea, ep);

    /* the device's float operations */
    double *rx = rounded(c.x, nh), *rw = rounded(c.w, h), *rb = rounded(c.b, h);
    double *rr = rounded(c.r, nh), *ry = dzeros(nh), *rm = dzeros(n), *rrs = dzeros(n);
    double *rdx = dzeros(nh), *rdw = dzeros(h), *rdb = dzeros(h);
    gl_cpu_layernorm_fwd_f64(ry, rm, rrs, rx, rw, rb, n, h, (double)(float)c.eps, one_plus);
    gl_cpu_layernorm_bwd_f64(rdx, rdw, rdb, rr, rx, rw, rm, rrs, n, h, one_plus, 0);
    float *fx = dev_f(d, c.x, nh), *fw = dev_f(d, c.w, h), *fb = dev_f(d, c.b, h);
    float *fr = dev_f(d, c.r, nh), *fy = d->ops->alloc(d, nh * 4);
    float *fm = d->ops->alloc(d, n * 4), *frs = d->ops->alloc(d, n * 4);
    float *fdx = d->ops->alloc(d, nh * 4), *fdw = d->ops->alloc(d, h * 4);
    float *fdb = d->ops->alloc(d, h * 4);
    d->ops->layernorm_fwd(d, fy, fm, frs, fx, fw, fb, n, h, (float)c.eps, one_plus);
    d->ops->layernorm_bwd(d, fdx, fdw, fdb, fr, fx, fw, fm, frs, n, h, one_plus, 0);
    ok(relerr_f(fy, ry, nh) < F32_TOL && relerr_f(fm, rm, n) < F32_TOL &&
       relerr_f(frs, rrs, n) < F32_TOL,
       "layernorm_fwd%s f32 device vs f64 (rel %.2g)", v, relerr_f(fy, ry, nh));
    ok(relerr_f(fdx, rdx, nh) < F32_TOL && relerr_f(fdw, rdw, h) < F32_TOL &&
       relerr_f(fdb, rdb, h) < F32_TOL,
       "layernorm_bwd%s f32 device vs f64 (rel %.2g, %.2g, %.2g)", v,
       relerr_f(fdx, rdx, nh), relerr_f(fdw, rdw, h), relerr_f(fdb, rdb, h));
    float *fp[] = { fx, fw, fb, fr, fy, fm, frs, fdx, fdw, fdb };
    for (size_t i = 0; i < sizeof fp / sizeof fp[0]; i++)
        d->ops->free(d, fp[i]);
    double *hp[] = { rx, rw, rb, rr, ry, rm, rrs, rdx, rdw, rdb, c.x, c.w, c.b,
                     c.y, c.mean, c.rstd, c.r, dx, dw, db, dx2, dw2, db2, dx0,
                     dw0, db0 };
    for (size_t i = 0; i < sizeof hp / sizeof hp[0]; i++)
        free(hp[i]);
}

typedef struct {
    int n, f;
    double *x, *bias, *y, *r;
} gelu_ctx;

static double gelu_loss(void *p)
{
    gelu_ctx *c = p;
    gl_cpu_gelu_fwd_f64(c->y, c->x, c->bias, c->n, c->f);
    double L = 0;
    for (int i = 0; i < c->n * c->f; i++)
        L += c->y[i] * c->r[i];
    return L;
}

static void test_gelu(gl_dev *d, int with_bias)
{
    const int n = 7, f = 9;
    const size_t nf = (size_t)n * f;
    gelu_ctx c = { n, f, rnd(nf, 4), with_bias ? rnd(f, 1) : NULL, dzeros(nf),
                   rnd(nf, 1) };
    const char *v = with_bias ? " with bias" : "";
    gelu_loss(&c);
    double err = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < f; j++) {
            double u = c.x[i * f + j] + (with_bias ? c.bias[j] : 0);
            double want = 0.5 * u * (1 + tanh(0.79788456 * (u + 0.044715 * u * u * u)));
            err = fmax(err, fabs(want - c.y[i * f + j]));
        }
    ok(err < 1e-15, "gelu_fwd%s f64: 0.5 u (1 + tanh(0.79788456 (u + 0.044715 u^3))) (err %.2g)",
       v, err);
    double *dx = dzeros(nf), *dbias = dzeros(f);
    gl_cpu_gelu_bwd_f64(dx, with_bias ? dbias : NULL, c.r, c.x, c.bias, n, f);
    /* Megatron's K2 = 0.1070322243 is 3 K0 K1 to 10 digits: the
     * derivative is exact to ~1e-10 */
    double ex = fd_relerr(gelu_loss, &c, c.x, nf, dx);
    ok(ex < FD_TOL, "gelu_bwd%s f64: dx vs finite differences (rel %.2g)", v, ex);
    if (with_bias) {
        double eb = fd_relerr(gelu_loss, &c, c.bias, f, dbias);
        ok(eb < FD_TOL, "gelu_bwd f64: dbias vs finite differences (rel %.2g)", eb);
    }
    /* dx may alias dy */
    double *dd = dcopy(c.r, nf);
    gl_cpu_gelu_bwd_f64(dd, NULL, dd, c.x, c.bias, n, f);
    ok(relerr(dd, dx, nf) == 0, "gelu_bwd%s: dx aliasing dy gives the same", v);

    double *rx = rounded(c.x, nf), *rb = with_bias ? rounded(c.bias, f) : NULL;
    double *rr = rounded(c.r, nf), *ry = dzeros(nf), *rdx = dzeros(nf), *rdb = dzeros(f);
    gl_cpu_gelu_fwd_f64(ry, rx, rb, n, f);
    gl_cpu_gelu_bwd_f64(rdx, rdb, rr, rx, rb, n, f);
    float *fx = dev_f(d, c.x, nf), *fb = with_bias ? dev_f(d, c.bias, f) : NULL;
    float *fr = dev_f(d, c.r, nf), *fy = d->ops->alloc(d, nf * 4);
    float *fdx = d->ops->alloc(d, nf * 4), *fdb = d->ops->alloc(d, f * 4);
    d->ops->gelu_fwd(d, fy, fx, fb, n, f);
    d->ops->gelu_bwd(d, fdx, fdb, fr, fx, fb, n, f);
    ok(relerr_f(fy, ry, nf) < F32_TOL && relerr_f(fdx, rdx, nf) < F32_TOL &&
       relerr_f(fdb, rdb, f) < F32_TOL,
       "gelu%s f32 device vs f64 (rel %.2g, %.2g, %.2g)", v, relerr_f(fy, ry, nf),
       relerr_f(fdx, rdx, nf), relerr_f(fdb, rdb, f));
    d->ops->free(d, fx); d->ops->free(d, fb); d->ops->free(d, fr);
    d->ops->free(d, fy); d->ops->free(d, fdx); d->ops->free(d, fdb);
    free(rx); free(rb); free(rr); free(ry); free(rdx); free(rdb); free(dd);
    free(c.x); free(c.bias); free(c.y); free(c.r); free(dx); free(dbias);
}

/* bias_add and bias_grad: y = x + bias, L = sum r y, dL/dbias = colsum(r). */
typedef struct {
    int n, w;
    double *x, *bias, *y, *r;
} bias_ctx;

static double bias_loss(void *p)
{
    bias_ctx *c = p;
    memcpy(c->y, c->x, (size_t)c->n * c->w * sizeof *c->y);
    gl_cpu_bias_add_f64(c->y, c->bias, c->n, c->w);
    double L = 0;
    for (int i = 0; i < c->n * c->w; i++)
        L += c->y[i] * c->r[i];
    return L;
}

static void test_bias(gl_dev *d)
{
    const int n = 11, w = 6;
    const size_t nw = (size_t)n * w;
    bias_ctx c = { n, w, rnd(nw, 1), rnd(w, 1), dzeros(nw), rnd(nw, 1) };
    bias_loss(&c);
    int good = 1;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < w; j++)
            good &= c.y[i * w + j] == c.x[i * w + j] + c.bias[j];
    ok(good, "bias_add: y[i, j] += bias[j]");
    double *db = rnd(w, 1), *db0 = dcopy(db, w), *g = dzeros(w);
    gl_cpu_bias_grad_f64(db, c.r, n, w);
    for (int j = 0; j < w; j++)
        g[j] = db[j] - db0[j];
    double e = fd_relerr(bias_loss, &c, c.bias, w, g);
    ok(e < FD_TOL, "bias_grad f64: dbias += the finite differences' gradient (rel %.2g)", e);

    float *fy = dev_f(d, c.x, nw), *fb = dev_f(d, c.bias, w), *fr = dev_f(d, c.r, nw);
    float *fdb = dev_f(d, db0, w);
    double *ry = rounded(c.x, nw), *rb = rounded(c.bias, w), *rr = rounded(c.r, nw);
    double *rdb = rounded(db0, w);
    gl_cpu_bias_add_f64(ry, rb, n, w);
    gl_cpu_bias_grad_f64(rdb, rr, n, w);
    d->ops->bias_add(d, fy, fb, n, w);
    d->ops->bias_grad(d, fdb, fr, n, w);
    ok(relerr_f(fy, ry, nw) < F32_TOL && relerr_f(fdb, rdb, w) < F32_TOL,
       "bias_add, bias_grad f32 device vs f64 (rel %.2g, %.2g)",
       relerr_f(fy, ry, nw), relerr_f(fdb, rdb, w));
    d->ops->free(d, fy); d->ops->free(d, fb); d->ops->free(d, fr); d->ops->free(d, fdb);
    free(ry); free(rb); free(rr); free(rdb);
    free(c.x); free(c.bias); free(c.y); free(c.r); free(db); free(db0); free(g);
}

/* out = residual + dropout(y + bias), L = sum r out. */
typedef struct {
    int n, w;
    const gl_dropout *dp;
    double *res, *y, *bias, *out, *r;
} bda_ctx;

static double bda_loss(void *p)
{
    bda_ctx *c = p;
    gl_cpu_bias_dropout_add_f64(c->out, c->res, c->y, c->bias, c->n, c->w, c->dp);
    double L = 0;
    for (int i = 0; i < c->n * c->w; i++)
        L += c->out[i] * c->r[i];
    return L;
}

static void test_dropout(gl_dev *d)
{
    enum { N = 24, W = 40 };
    const size_t nw = (size_t)N * W;
    gl_dropout dp = { .seed = 1234, .iteration = 17, .layer = 3, .site = 1,
                      .p = 0.3f, .row0 = 0, .col0 = 0, .width = W };
    double *x = rnd(nw, 1), *y = dzeros(nw);
    gl_cpu_dropout_f64(y, x, N, W, &dp);
    uint32_t thr = gl_dropout_threshold(dp.p);
    double scale = 1 / (1 - (double)dp.p), err = 0;
    long kept = 0;
    for (size_t e = 0; e < nw; e++) {
        int k = gl_dropout_keep(dp.seed, dp.iteration,
                                gl_dropout_stream(dp.layer, dp.site), e, thr);
        kept += k;
        err = fmax(err, fabs(y[e] - (k ? x[e] * scale : 0)));
    }
    ok(err < 1e-15 && kept > 0 && kept < (long)nw,
       "dropout f64: y = keep(e) x / (1 - p), %ld of %zu kept (err %.2g)", kept, nw, err);

    /* Layout independence: the [N, W] tensor cut into a 3 x 2 grid of
     * pieces of uneven sizes, each with its row0, col0 and the full width,
     * gives the whole tensor's result piece by piece. */
    const int rcut[4] = { 0, 5, 17, N }, ccut[3] = { 0, 13, W };
    int same = 1;
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 2; b++) {
            int pn = rcut[a + 1] - rcut[a], pw = ccut[b + 1] - ccut[b];
            double *px = dzeros((size_t)pn * pw), *py = dzeros((size_t)pn * pw);
            for (int i = 0; i < pn; i++)
                for (int j = 0; j < pw; j++)
                    px[i * pw + j] = x[(size_t)(rcut[a] + i) * W + ccut[b] + j];
            gl_dropout piece = dp;
            piece.row0 = rcut[a];
            piece.col0 = ccut[b];
            gl_cpu_dropout_f64(py, px, pn, pw, &piece);
            for (int i = 0; i < pn; i++)
                for (int j = 0; j < pw; j++)
                    same &= py[i * pw + j] == y[(size_t)(rcut[a] + i) * W + ccut[b] + j];
            free(px);
            free(py);
        }
    ok(same, "dropout: pieces by rows and columns (row0, col0, full width) draw the whole tensor's mask");
    /* ... and a different row0 draws another mask */
    gl_dropout moved = dp;
    moved.row0 = 1;
    double *z = dzeros(nw);
    gl_cpu_dropout_f64(z, x, N, W, &moved);
    ok(relerr(z, y, nw) > 0.1, "dropout: another row0 gives another mask");

    /* The map is diagonal: the backward is the same call (FD of
     * L = sum r dropout(x) is dropout(r)). */
    double *g = dzeros(nw), *rr = rnd(nw, 1);
    gl_cpu_dropout_f64(g, rr, N, W, &dp);
    bda_ctx c = { N, W, &dp, dzeros(nw), x, NULL, dzeros(nw), rr };
    double e = fd_relerr(bda_loss, &c, x, nw, g);
    ok(e < FD_TOL, "dropout backward = dropout(dy) vs finite differences (rel %.2g)", e);

    /* bias-dropout-add: d residual = dout, dy = dropout(dout),
     * dbias = colsum(dropout(dout)) */
    c.res = rnd(nw, 1);
    c.bias = rnd(W, 1);
    double *gb = dzeros(W);
    gl_cpu_bias_grad_f64(gb, g, N, W);
    double ey = fd_relerr(bda_loss, &c, c.y, nw, g);
    double eb = fd_relerr(bda_loss, &c, c.bias, W, gb);
    double er = fd_relerr(bda_loss, &c, c.res, nw, rr);
    ok(ey < FD_TOL && eb < FD_TOL && er < FD_TOL,
       "bias_dropout_add backward: dropout(dout), its column sums, dout vs finite differences (rel %.2g, %.2g, %.2g)",
       ey, eb, er);
    /* without dropout (dp NULL): out = residual + y + bias */
    gl_cpu_bias_dropout_add_f64(z, c.res, c.y, c.bias, N, W, NULL);
    err = 0;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < W; j++)
            err = fmax(err, fabs(z[i * W + j] - (c.res[i * W + j] + c.y[i * W + j] + c.bias[j])));
    ok(err < 1e-15, "bias_dropout_add without dropout: residual + y + bias (err %.2g)", err);

    /* the device's float operations, in place (out aliases residual) */
    float *fx = dev_f(d, x, nw), *fres = dev_f(d, c.res, nw), *fb = dev_f(d, c.bias, W);
    double *rx = rounded(x, nw), *rres = rounded(c.res, nw), *rb = rounded(c.bias, W);
    double *ry = dzeros(nw), *rout = dzeros(nw);
    gl_cpu_dropout_f64(ry, rx, N, W, &dp);
    gl_cpu_bias_dropout_add_f64(rout, rres, rx, rb, N, W, &dp);
    float *fy = d->ops->alloc(d, nw * 4);
    d->ops->dropout(d, fy, fx, N, W, &dp);
    d->ops->bias_dropout_add(d, fres, fres, fx, fb, N, W, &dp);
    ok(relerr_f(fy, ry, nw) < F32_TOL && relerr_f(fres, rout, nw) < F32_TOL,
       "dropout, bias_dropout_add (in place) f32 device vs f64 (rel %.2g, %.2g)",
       relerr_f(fy, ry, nw), relerr_f(fres, rout, nw));
    d->ops->free(d, fx); d->ops->free(d, fres); d->ops->free(d, fb); d->ops->free(d, fy);
    free(rx); free(rres); free(rb); free(ry); free(rout);
    free(x); free(y); free(z); free(g); free(rr); free(gb);
    free(c.res); free(c.bias); free(c.out);
}

/* bda_layernorm is bias_dropout_add then layernorm_fwd of its result,
 * bit for bit, also with out over y (as under sequence parallelism). */
static void test_bda_layernorm(gl_dev *d)
{
    const int N = 6, H = 20;
    const size_t nh = (size_t)N * H;
    gl_dropout dp = { .seed = 7, .iteration = 3, .layer = 2, .site = 0, .p = 0.25f,
                      .row0 = 12, .col0 = 0, .width = H };
    double *y = rnd(nh, 1), *res = rnd(nh, 2), *bias = rnd(H, 1), *w = rnd(H, 1), *b = rnd(H, 1);
    float *fy = dev_f(d, y, nh), *fy2 = dev_f(d, y, nh), *fres = dev_f(d, res, nh);
    float *fbias = dev_f(d, bias, H), *fw = dev_f(d, w, H), *fb = dev_f(d, b, H);
    float *ln = d->ops->alloc(d, nh * 4), *ln2 = d->ops->alloc(d, nh * 4);
    float *m = d->ops->alloc(d, N * 4), *m2 = d->ops->alloc(d, N * 4);
    float *r = d->ops->alloc(d, N * 4), *r2 = d->ops->alloc(d, N * 4);
    for (int k = 0; k < 2; k++) {
        const gl_dropout *dpp = k ? NULL : &dp;
        d->ops->bda_layernorm(d, fy, ln, m, r, fres, fy, fbias, dpp, fw, fb, N, H, 1e-5f, k);
        d->ops->bias_dropout_add(d, fy2, fres, fy2, fbias, N, H, dpp);
        d->ops->layernorm_fwd(d, ln2, m2, r2, fy2, fw, fb, N, H, 1e-5f, k);
        ok(!memcmp(fy, fy2, nh * 4) && !memcmp(ln, ln2, nh * 4) && !memcmp(m, m2, N * 4) &&
           !memcmp(r, r2, N * 4), "bda_layernorm%s: bias_dropout_add then layernorm_fwd, bit for bit",
           k ? " (no dropout, 1p)" : "");
    }
    float *fp[] = {fy, fy2, fres, fbias, fw, fb, ln, ln2, m, m2, r, r2};
    for (size_t i = 0; i < sizeof fp / sizeof fp[0]; i++)
        d->ops->free(d, fp[i]);
    free(y); free(res); free(bias); free(w); free(b);
}

/* y += pos[positions]; the backward is embed_bwd into dpos. */
typedef struct {
    int n, h, max_pos;
    const int32_t *positions;
    double *y0, *pos, *y, *r;
} pos_ctx;

static double pos_loss(void *p)
{
    pos_ctx *c = p;
    memcpy(c->y, c->y0, (size_t)c->n * c->h * sizeof *c->y);
    gl_cpu_pos_embed_fwd_f64(c->y, c->pos, c->positions, c->n, c->h, c->max_pos);
    double L = 0;
    for (int i = 0; i < c->n * c->h; i++)
        L += c->y[i] * c->r[i];
    return L;
}

static void test_pos_embed(gl_dev *d)
{
    /* two sequences of 4 tokens, the second with its positions reset
     * after a document end */
    enum { N = 8, H = 5, P = 6 };
    const int32_t positions[N] = { 0, 1, 2, 3, 0, 1, 0, 1 };
    pos_ctx c = { N, H, P, positions, rnd(N * H, 1), rnd(P * H, 1), dzeros(N * H),
                  rnd(N * H, 1) };
    pos_loss(&c);
    int good = 1;
    for (int i = 0; i < N; i++)
        for (int e = 0; e < H; e++)
            good &= c.y[i * H + e] == c.y0[i * H + e] + c.pos[positions[i] * H + e];
    ok(good, "pos_embed_fwd: y[i] += pos[positions[i]]");
    double *dpos = dzeros(P * H);
    gl_cpu_embed_bwd_f64(dpos, c.r, positions, N, H, 0, P);
    double e = fd_relerr(pos_loss, &c, c.pos, P * H, dpos);
    ok(e < FD_TOL, "pos_embed backward (embed_bwd into dpos) vs finite differences (rel %.2g)", e);

    int32_t *fpos_ids = d->ops->alloc(d, sizeof positions);
    d->ops->upload(d, fpos_ids, positions, sizeof positions);
    float *fy = dev_f(d, c.y0, N * H), *fp = dev_f(d, c.pos, P * H);
    double *ry = rounded(c.y0, N * H), *rp = rounded(c.pos, P * H);
    gl_cpu_pos_embed_fwd_f64(ry, rp, positions, N, H, P);
    d->ops->pos_embed_fwd(d, fy, fp, fpos_ids, N, H, P);
    ok(relerr_f(fy, ry, N * H) < F32_TOL, "pos_embed_fwd f32 device vs f64");
    d->ops->free(d, fpos_ids); d->ops->free(d, fy); d->ops->free(d, fp);
    free(ry); free(rp); free(dpos);
    free(c.y0); free(c.pos); free(c.y); free(c.r);
}

int main(void)
{
    plan(NO_PLAN);
    gl_dev *d = gl_dev_open_cpu();
    size_t use0;
    test_device(d);
    d->ops->mem_info(d, &use0, NULL, NULL);
    test_memory(d);
    test_gemm(d);
    test_vector_ops(d);
    test_rmsnorm(d);
    test_rope(d);
    test_attention(d);
    test_attention_dropout(d);
    test_swiglu(d);
    test_embedding(d);
    test_cross_entropy(d);
    test_adamw(d);
    test_fp8(d);
    test_layernorm(d, 0);
    test_layernorm(d, 1);
    test_gelu(d, 0);
    test_gelu(d, 1);
    test_bias(d);
    test_dropout(d);
    test_pos_embed(d);
    test_bda_layernorm(d);
    size_t use1;
    d->ops->mem_info(d, &use1, NULL, NULL);
    is_int((long long)use1, (long long)use0, "every device allocation of the tests was freed");
    gl_dev_close(d);
    return done_testing();
}
