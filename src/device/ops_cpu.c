/*
 * ops_cpu.c: the CPU reference device, the operation table of ops.h on
 * host memory in fp32.  "act" and "f32" buffers are both float arrays
 * here, so each operation hands its pointers to the float kernel of
 * ops_cpu_impl.h (gl_cpu_NAME_f32); calls complete before they return.
 *
 * Memory comes from the C heap with a 64-byte header in front of each
 * block that records its size, so mem_info can report the bytes held
 * through alloc now and at most.
 */
#include <config.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "device/fp8.h"
#include "device/ops_cpu.h"
#include "device/ops_cpu_moe.h"

/* The header before each block: its size, padded so that the block
 * itself stays 64-byte aligned (a cache line, enough for any SIMD). */
#define CPU_HEADER 64

static gl_cpu_state *cpu_state(gl_dev *d)
{
    return (gl_cpu_state *)d->impl;
}

static void *cpu_alloc(gl_dev *d, size_t bytes)
{
    void *p = NULL;
    if (bytes > SIZE_MAX - CPU_HEADER ||
        posix_memalign(&p, CPU_HEADER, CPU_HEADER + bytes) != 0)
        gl_die("out of host memory allocating %zu bytes for the CPU device "
               "(%zu bytes already in use); reduce --micro-batch-size, recompute "
               "activations (--recompute-granularity full --recompute-method uniform "
               "--recompute-num-layers 1), or shrink the model", bytes, cpu_state(d)->in_use);
    memset(p, 0, CPU_HEADER + bytes);
    *(size_t *)p = bytes;
    gl_cpu_state *st = cpu_state(d);
    st->in_use += bytes;
    if (st->in_use > st->peak)
        st->peak = st->in_use;
    return (char *)p + CPU_HEADER;
}

static void cpu_free(gl_dev *d, void *p)
{
    if (!p)
        return;
    char *base = (char *)p - CPU_HEADER;
    cpu_state(d)->in_use -= *(size_t *)base;
    free(base);
}

static void cpu_upload(gl_dev *d, void *dst, const void *host, size_t bytes)
{
    memcpy(dst, host, bytes);
}

static void cpu_download(gl_dev *d, void *host, const void *src, size_t bytes)
{
    memcpy(host, src, bytes);
}

/* Copies may overlap (a shift within one buffer): memmove. */
static void cpu_copy(gl_dev *d, void *dst, const void *src, size_t bytes)
{
    memmove(dst, src, bytes);
}

static void cpu_zero(gl_dev *d, void *p, size_t bytes)
{
    memset(p, 0, bytes);
}

/* Every call has completed when it returns: nothing to wait for. */
static void cpu_sync(gl_dev *d)
{
}

/* act is fp32 on the CPU: conversion is a copy. */
static void cpu_to_act(gl_dev *d, void *dst, const float *src, size_t count)
{
    memmove(dst, src, count * sizeof(float));
}

static void cpu_to_f32(gl_dev *d, float *dst, const void *src, size_t count)
{
    memmove(dst, src, count * sizeof(float));
}

static void cpu_gemm(gl_dev *d, int transa, int transb, int m, int n, int k,
                     float alpha, const void *A, int lda, const void *B,
                     int ldb, float beta, void *C, gl_dtype ctype, int ldc)
{
    if (ctype != GL_DT_F32)
        gl_die("gemm on the CPU device: output dtype %d is not fp32 (%d); the "
               "CPU back end computes everything in fp32", (int)ctype,
               (int)GL_DT_F32);
    gl_cpu_gemm_f32(transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C,
                    ldc);
}

static void cpu_add(gl_dev *d, void *y, const void *x, const void *r,
                    size_t count)
{
    gl_cpu_add_f32(y, x, r, count);
}

static void cpu_rmsnorm_fwd(gl_dev *d, void *y, float *rstd, const void *x,
                            const void *w, int n, int h, float eps)
{
    gl_cpu_rmsnorm_fwd_f32(y, rstd, x, w, n, h, eps);
}

static void cpu_rmsnorm_bwd(gl_dev *d, void *dx, float *dw, const void *dy,
                            const void *x, const void *w, const float *rstd,
                            int n, int h, int accumulate_dx)
{
    gl_cpu_rmsnorm_bwd_f32(dx, dw, dy, x, w, rstd, n, h, accumulate_dx);
}

static void cpu_rope_fwd(gl_dev *d, void *x, int ld, int B, int S, int H,
                         int D, const float *cos, const float *sin)
{
    gl_cpu_rope_fwd_f32(x, ld, B, S, H, D, cos, sin);
}

static void cpu_rope_bwd(gl_dev *d, void *x, int ld, int B, int S, int H,
                         int D, const float *cos, const float *sin)
{
    gl_cpu_rope_bwd_f32(x, ld, B, S, H, D, cos, sin);
}

static void cpu_attn_fwd(gl_dev *d, void *o, int ldo, float *lse,
                         const void *q, int ldq, const void *k, int ldk,
                         const void *v, int ldv, int B, int S, int Hq,
                         int Hkv, int D, float scale,
                         const gl_attn_dropout *dp)
{
    gl_cpu_attn_fwd_f32(o, ldo, lse, q, ldq, k, ldk, v, ldv, B, S, Hq, Hkv,
                        D, scale, dp);
}

static void cpu_attn_bwd(gl_dev *d, void *dq, void *dk, void *dv, int ldg,
                         const void *dout, int lddo, const void *o, int ldo,
                         const float *lse, const void *q, int ldq,
                         const void *k, int ldk, const void *v, int ldv,
                         int B, int S, int Hq, int Hkv, int D, float scale,
                         const gl_attn_dropout *dp)
{
    gl_cpu_attn_bwd_f32(dq, dk, dv, ldg, dout, lddo, o, ldo, lse, q, ldq, k,
                        ldk, v, ldv, B, S, Hq, Hkv, D, scale, dp);
}

/* Context parallelism's block attention: act and f32 are both float
 * here. */
static void cpu_attn_block_fwd(gl_dev *d, float *o, int ldo, float *lse,
                               const void *q, int ldq, const void *k, int ldk,
                               const void *v, int ldv, int B, int Sq, int Sk,
                               int Hq, int Hkv, int D, float scale,
                               const gl_attn_pos *qpos, const gl_attn_pos *kpos,
                               gl_attn_mask mask, const gl_attn_dropout *dp)
{
    gl_cpu_attn_block_fwd_f32(o, ldo, lse, q, ldq, k, ldk, v, ldv, B, Sq, Sk,
                              Hq, Hkv, D, scale, qpos, kpos, mask, dp);
}

static void cpu_attn_merge(gl_dev *d, float *o, float *lse, const float *o_b,
                           const float *lse_b, int B, int S, int Hq, int D,
                           int first)
{
    gl_cpu_attn_merge_f32(o, lse, o_b, lse_b, B, S, Hq, D, first);
}

static void cpu_attn_delta(gl_dev *d, float *delta, const void *dout, int lddo,
                           const void *o, int ldo, int B, int S, int Hq, int D)
{
    gl_cpu_attn_delta_f32(delta, dout, lddo, o, ldo, B, S, Hq, D);
}

static void cpu_attn_block_bwd(gl_dev *d, float *dq, int lddq, float *dk,
                               float *dv, int lddkv, const void *dout, int lddo,
                               const float *lse, const float *delta,
                               const void *q, int ldq, const void *k, int ldk,
                               const void *v, int ldv, int B, int Sq, int Sk,
                               int Hq, int Hkv, int D, float scale,
                               const gl_attn_pos *qpos, const gl_attn_pos *kpos,
                               gl_attn_mask mask, const gl_attn_dropout *dp)
{
    gl_cpu_attn_block_bwd_f32(dq, lddq, dk, dv, lddkv, dout, lddo, lse, delta,
                              q, ldq, k, ldk, v, ldv, B, Sq, Sk, Hq, Hkv, D,
                              scale, qpos, kpos, mask, dp);
}

/* Every buffer is float on the CPU, so the conversion is a strided copy. */
static void cpu_convert_2d(gl_dev *d, void *dst, gl_dtype dt, long lddst,
                           const void *src, gl_dtype st, long ldsrc, int rows,
                           long cols)
{
    if (dt != GL_DT_F32 || st != GL_DT_F32)
        gl_die("convert_2d: the CPU device holds only f32 buffers");
    for (int r = 0; r < rows; r++)      /* offsets in 64 bits (ops.h) */
        memcpy((float *)dst + (long)r * lddst,
               (const float *)src + (long)r * ldsrc, (size_t)cols * sizeof(float));
}

static void cpu_swiglu_fwd(gl_dev *d, void *y, const void *gu, int n, int f)
{
    gl_cpu_swiglu_fwd_f32(y, gu, n, f);
}

static void cpu_swiglu_bwd(gl_dev *d, void *dgu, const void *dy,
                           const void *gu, int n, int f)
{
    gl_cpu_swiglu_bwd_f32(dgu, dy, gu, n, f);
}

static void cpu_embed_fwd(gl_dev *d, void *y, const void *table,
                          const int32_t *ids, int n, int h, long vocab_start,
                          int vl)
{
    gl_cpu_embed_fwd_f32(y, table, ids, n, h, vocab_start, vl);
}

static void cpu_embed_bwd(gl_dev *d, float *dtable, const void *dy,
                          const int32_t *ids, int n, int h, long vocab_start,
                          int vl)
{
    gl_cpu_embed_bwd_f32(dtable, dy, ids, n, h, vocab_start, vl);
}

static void cpu_ce_max(gl_dev *d, float *rowmax, const void *logits, int ld,
                       int n, int valid)
{
    gl_cpu_ce_max_f32(rowmax, logits, ld, n, valid);
}

static void cpu_ce_sum(gl_dev *d, float *stats, const void *logits, int ld,
                       const int32_t *targets, const float *rowmax, int n,
                       int valid, long vocab_start)
{
    gl_cpu_ce_sum_f32(stats, logits, ld, targets, rowmax, n, valid,
                      vocab_start);
}

static void cpu_ce_bwd(gl_dev *d, float *loss, void *logits, int ld,
                       const int32_t *targets, const float *rowmax,
                       const float *stats, const float *gscale, int n, int vl,
                       int valid, long vocab_start)
{
    gl_cpu_ce_bwd_f32(loss, logits, ld, targets, rowmax, stats, gscale, n, vl,
                      valid, vocab_start);
}

static void cpu_scale_f32(gl_dev *d, float *x, float s, size_t count)
{
    gl_cpu_scale_f32(x, s, count);
}

static void cpu_add_f32(gl_dev *d, float *y, const float *x, size_t count)
{
    for (size_t i = 0; i < count; i++)
        y[i] += x[i];
}

static void cpu_sumsq_f32(gl_dev *d, float *out, const float *x, size_t count)
{
    gl_cpu_sumsq_f32(out, x, count);
}

static void cpu_nonfinite_f32(gl_dev *d, float *out, const float *x,
                              size_t count)
{
    gl_cpu_nonfinite_f32(out, x, count);
}

static void cpu_dot_f32(gl_dev *d, float *out, const float *x, const float *w,
                        size_t count)
{
    gl_cpu_dot_f32(out, x, w, count);
}

static void cpu_adamw(gl_dev *d, const gl_adamw_seg *segs, int nseg,
                      const gl_adamw_hyper *hp)
{
    for (int s = 0; s < nseg; s++)
        gl_cpu_adamw_f32(segs[s].master, segs[s].grad, segs[s].m, segs[s].v,
                         segs[s].act_out, segs[s].count, segs[s].weight_decay,
                         hp->lr, hp->beta1, hp->beta2, hp->eps,
                         hp->grad_scale, hp->step);
}

/* in_use and peak count the bytes held through alloc; total is the
 * machine's physical memory (0 when the system does not say). */
static void cpu_mem_info(gl_dev *d, size_t *in_use, size_t *peak,
                         size_t *total)
{
    gl_cpu_state *st = cpu_state(d);
    if (in_use)
        *in_use = st->in_use;
    if (peak)
        *peak = st->peak;
    if (total) {
        long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
        *total = pages > 0 && size > 0 ? (size_t)pages * (size_t)size : 0;
    }
}

static void cpu_close(gl_dev *d)
{
    free(d->impl);
    free(d);
}

/* Host staging memory is ordinary heap memory here (not counted in
 * mem_info: it is not the device's). */
static void *cpu_alloc_host(gl_dev *d, size_t bytes)
{
    (void)d;
    return gl_calloc(1, bytes ? bytes : 1);
}

static void cpu_free_host(gl_dev *d, void *p)
{
    (void)d;
    free(p);
}

/* One stream of execution: every call has completed when it returns. */
static void cpu_stream_wait(gl_dev *d)
{
    (void)d;
}

/* Lanes: every op completes before it returns, so there is one. */
static int cpu_lanes_fork(gl_dev *d, int n)
{
    (void)d;
    (void)n;
    return 1;
}

static void cpu_lane_use(gl_dev *d, int i)
{
    (void)d;
    if (i != 0)
        gl_die("internal error: lane %d used on the CPU, where lanes_fork grants one", i);
}

static void cpu_lanes_join(gl_dev *d, int n)
{
    (void)d;
    (void)n;
}

/* ---- FP8: the exact emulation of fp8.c on fp32 act buffers ---- */

static void cpu_fp8_transpose(gl_dev *d, uint8_t *qt, const uint8_t *q, int rows, int cols)
{
    (void)d;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++)
            qt[(size_t)c * rows + r] = q[(size_t)r * cols + c];
}

static void cpu_fp8_quantize_pad(gl_dev *d, uint8_t *q, uint8_t *qt, float *amax,
                                 const void *x, int xrows, int rows, int cols,
                                 const float *scale, gl_fp8_format f)
{
    (void)d;
    if (xrows < 0 || xrows > rows)
        gl_die("internal error: fp8_quantize_pad of %d rows of %d", xrows, rows);
    float a = gl_fp8_quantize_2d_pad(q, qt, x, xrows, rows, cols, scale[0], f);
    if (amax)
        amax[0] = gl_fp8_amax_fold(amax[0], a);
}

static void cpu_fp8_quantize(gl_dev *d, uint8_t *q, uint8_t *qt, float *amax,
                             const void *x, int rows, int cols,
                             const float *scale, gl_fp8_format f)
{
    cpu_fp8_quantize_pad(d, q, qt, amax, x, rows, rows, cols, scale, f);
}

/* The FP8-producing ops (ops.h): the plain op into y (or a scratch row
 * block when y is NULL), then cpu_fp8_quantize of it, which is what the
 * definition says. */
static float *out_or_scratch(void *y, size_t count)
{
    return y ? y : gl_malloc(count * sizeof(float) + 1);
}

static void quantize_out(gl_dev *d, const gl_fp8_out *o, void *y, float *buf, int rows,
                         int cols)
{
    cpu_fp8_quantize(d, o->q, o->qt, o->amax, buf, rows, cols, o->scale, o->f);
    if (!y)
        free(buf);
}

static void cpu_rmsnorm_fwd_fp8(gl_dev *d, void *y, float *rstd, const void *x,
                                const void *w, int n, int h, float eps,
                                const gl_fp8_out *o)
{
    float *buf = out_or_scratch(y, (size_t)n * h);
    gl_cpu_rmsnorm_fwd_f32(buf, rstd, x, w, n, h, eps);
    quantize_out(d, o, y, buf, n, h);
}

static void cpu_swiglu_fwd_fp8(gl_dev *d, void *y, const void *gu, int n, int f,
                               const gl_fp8_out *o)
{
    float *buf = out_or_scratch(y, (size_t)n * f);
    gl_cpu_swiglu_fwd_f32(buf, gu, n, f);
    quantize_out(d, o, y, buf, n, f);
}

static void cpu_swiglu_bwd_fp8(gl_dev *d, void *dgu, const void *dy, const void *gu, int n,
                               int f, const gl_fp8_out *o)
{
    float *buf = out_or_scratch(dgu, (size_t)n * 2 * f);
    gl_cpu_swiglu_bwd_f32(buf, dy, gu, n, f);
    quantize_out(d, o, dgu, buf, n, 2 * f);
}

static void cpu_fp8_amax(gl_dev *d, float *amax, const void *x, size_t count)
{
    (void)d;
    const float *v = x;
    float a = amax[0];
    for (size_t i = 0; i < count; i++)
        a = gl_fp8_amax_fold(a, fabsf(v[i]));
    amax[0] = a;
}

/* The host's scale updates work on packed arrays: a strided table's
 * entries are gathered into packed copies (n scales, then n inverses),
 * updated there, and put back. */
static float *strided_get(const float *scale, const float *scale_inv, int stride, int n)
{
    float *p = gl_malloc(2 * (size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int t = 0; t < n; t++) {
        p[t] = scale[(size_t)t * stride];
        p[n + t] = scale_inv[(size_t)t * stride];
    }
    return p;
}

static void strided_put(float *scale, float *scale_inv, int stride, int n, float *p)
{
    for (int t = 0; t < n; t++) {
        scale[(size_t)t * stride] = p[t];
        scale_inv[(size_t)t * stride] = p[n + t];
    }
    free(p);
}

static void cpu_fp8_amax_scale(gl_dev *d, float *amax, float *scale, float *scale_inv,
                               const void *x, size_t count, gl_fp8_format f)
{
    amax[0] = 0;
    cpu_fp8_amax(d, amax, x, count);
    if (scale)
        gl_fp8_scale_current(amax, scale, scale_inv, 1, f);
}

static void cpu_fp8_scale_delayed(gl_dev *d, float *hist, float *scale,
                                  float *scale_inv, int stride, int n, int len,
                                  gl_fp8_amax_algo algo, int margin,
                                  gl_fp8_format f)
{
    (void)d;
    float *p = strided_get(scale, scale_inv, stride, n);
    gl_fp8_scale_delayed(hist, p, p + n, n, len, algo, margin, f);
    strided_put(scale, scale_inv, stride, n, p);
}

static void cpu_fp8_scale_current(gl_dev *d, const float *amax, float *scale,
                                  float *scale_inv, int stride, int n, gl_fp8_format f)
{
    (void)d;
    float *p = strided_get(scale, scale_inv, stride, n);
    gl_fp8_scale_current(amax, p, p + n, n, f);
    strided_put(scale, scale_inv, stride, n, p);
}

/* rows x k FP8 values decoded to floats (exact), in a new array. */
static float *fp8_decoded(const uint8_t *q, int rows, int k, gl_fp8_format f)
{
    size_t count = (size_t)rows * k;
    float *v = gl_malloc(count * sizeof *v);
    for (size_t i = 0; i < count; i++)
        v[i] = gl_fp8_decode(q[i], f);
    return v;
}

/* The decoded operands multiplied by CBLAS in fp32, the two scales and
 * alpha applied to the sums as cuBLASLt's epilogue applies them.  Fast
 * accumulation is a GPU's trade of accuracy for speed: not emulated. */
static void cpu_gemm_fp8(gl_dev *d, int m, int n, int k, float alpha,
                         const uint8_t *A, gl_fp8_format fa,
                         const float *a_scale_inv, const uint8_t *B,
                         gl_fp8_format fb, const float *b_scale_inv,
                         float beta, void *C, gl_dtype ctype, int ldc,
                         int fast_accum)
{
    (void)d, (void)fast_accum;
    gl_fp8_gemm_check("gemm_fp8 on the CPU device", m, n, k, ldc, fa, fb, A,
                      B, C);
    if (ctype != GL_DT_F32)
        gl_die("gemm_fp8 on the CPU device: output dtype %s is not fp32; the "
               "CPU back end computes everything in fp32", gl_dtype_name(ctype));
    float *a = fp8_decoded(A, m, k, fa), *b = fp8_decoded(B, n, k, fb);
    float factor = alpha * a_scale_inv[0] * b_scale_inv[0];
    gl_cpu_gemm_f32(0, 1, m, n, k, factor, a, k, b, k, beta, C, ldc);
    free(a);
    free(b);
}

/* Plans are a GPU's concern: the same product. */
static void cpu_gemm_fp8_ragged(gl_dev *d, int ragged_k, int m, int n, int k, float alpha,
                                const uint8_t *A, gl_fp8_format fa, const float *a_scale_inv,
                                const uint8_t *B, gl_fp8_format fb, const float *b_scale_inv,
                                float beta, void *C, gl_dtype ctype, int ldc, int fast_accum)
{
    (void)ragged_k;
    cpu_gemm_fp8(d, m, n, k, alpha, A, fa, a_scale_inv, B, fb, b_scale_inv, beta, C, ctype,
                 ldc, fast_accum);
}

/* ---- FP8 with block scales: the same host functions ---- */

static void cpu_fp8_quantize_tiles(gl_dev *d, uint8_t *q, float *q_sinv, uint8_t *qt,
                                   float *qt_sinv, const void *x, int rows, int cols,
                                   int block2d, gl_fp8_format f)
{
    (void)d;
    gl_fp8_quantize_tiles(q, q_sinv, qt, qt_sinv, x, rows, cols, block2d, f);
}

static void cpu_fp8_block_amax(gl_dev *d, float *amax, const void *x, size_t e0, size_t count,
                               int cols)
{
    (void)d;
    gl_fp8_block_amax(amax, x, e0, count, cols);
}

static void cpu_fp8_block_sinv(gl_dev *d, float *q_sinv, float *qt_sinv, const float *amax,
                               int rows, int cols, gl_fp8_format f)
{
    (void)d;
    gl_fp8_block_sinv(q_sinv, qt_sinv, amax, rows, cols, f);
}

static void cpu_fp8_quantize_block_range(gl_dev *d, uint8_t *q, const void *x, size_t e0,
                                         size_t count, int cols, const float *amax,
                                         gl_fp8_format f)
{
    (void)d;
    gl_fp8_quantize_block_range(q, x, e0, count, cols, amax, f);
}

/* A tiled operand [rows, k] dequantized into a new array (exact: the
 * factors are powers of two). */
static float *tiles_decoded(const uint8_t *q, const float *sinv, int rows, int k, int block2d,
                            gl_fp8_format f)
{
    float *v = gl_malloc((size_t)rows * k * sizeof *v);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < k; c++)
            v[(size_t)r * k + c] = gl_fp8_tile_value(q, sinv, rows, k, r, c, block2d, f);
    return v;
}

static void cpu_gemm_fp8_tiles(gl_dev *d, int m, int n, int k, float alpha, const uint8_t *A,
                               gl_fp8_format fa, const float *a_sinv, const uint8_t *B,
                               gl_fp8_format fb, const float *b_sinv, int b_block2d,
                               float beta, void *C, gl_dtype ctype, int ldc)
{
    (void)d;
    gl_fp8_gemm_check("gemm_fp8_tiles on the CPU device", m, n, k, ldc, fa, fb, A, B, C);
    if (ctype != GL_DT_F32)
        gl_die("gemm_fp8_tiles on the CPU device: output dtype %s is not fp32; the "
               "CPU back end computes everything in fp32", gl_dtype_name(ctype));
    float *a = tiles_decoded(A, a_sinv, m, k, 0, fa);
    float *b = tiles_decoded(B, b_sinv, n, k, b_block2d, fb);
    gl_cpu_gemm_f32(0, 1, m, n, k, alpha, a, k, b, k, beta, C, ldc);
    free(a);
    free(b);
}

/* ---- Megatron's GPT model: LayerNorm, GeLU, biases, dropout, positions */

static void cpu_layernorm_fwd(gl_dev *d, void *y, float *mean, float *rstd,
                              const void *x, const void *w, const void *b,
                              int n, int h, float eps, int one_plus)
{
    (void)d;
    gl_cpu_layernorm_fwd_f32(y, mean, rstd, x, w, b, n, h, eps, one_plus);
}

static void cpu_layernorm_bwd(gl_dev *d, void *dx, float *dw, float *db,
                              const void *dy, const void *x, const void *w,
                              const float *mean, const float *rstd, int n,
                              int h, int one_plus, int accumulate_dx)
{
    (void)d;
    gl_cpu_layernorm_bwd_f32(dx, dw, db, dy, x, w, mean, rstd, n, h, one_plus,
                             accumulate_dx);
}

static void cpu_gelu_fwd(gl_dev *d, void *y, const void *x, const void *bias,
                         int n, int f)
{
    (void)d;
    gl_cpu_gelu_fwd_f32(y, x, bias, n, f);
}

static void cpu_gelu_bwd(gl_dev *d, void *dx, float *dbias, const void *dy,
                         const void *x, const void *bias, int n, int f)
{
    (void)d;
    gl_cpu_gelu_bwd_f32(dx, dbias, dy, x, bias, n, f);
}

static void cpu_bias_add(gl_dev *d, void *y, const void *bias, int n, int w)
{
    (void)d;
    gl_cpu_bias_add_f32(y, bias, n, w);
}

static void cpu_bias_grad(gl_dev *d, float *dbias, const void *dy, int n,
                          int w)
{
    (void)d;
    gl_cpu_bias_grad_f32(dbias, dy, n, w);
}

static void cpu_dropout(gl_dev *d, void *y, const void *x, int n, int w,
                        const gl_dropout *dp)
{
    (void)d;
    gl_cpu_dropout_f32(y, x, n, w, dp);
}

static void cpu_bias_dropout_add(gl_dev *d, void *out, const void *residual,
                                 const void *y, const void *bias, int n,
                                 int w, const gl_dropout *dp)
{
    (void)d;
    gl_cpu_bias_dropout_add_f32(out, residual, y, bias, n, w, dp);
}

static void cpu_pos_embed_fwd(gl_dev *d, void *y, const void *pos,
                              const int32_t *positions, int n, int h,
                              int max_pos)
{
    (void)d;
    gl_cpu_pos_embed_fwd_f32(y, pos, positions, n, h, max_pos);
}

/* ---- Mixture of experts: ops_cpu_moe_impl.h's float kernels on the
 * arrays of the map ---- */

/* Dies unless map and cfg describe the same routing. */
static void cpu_moe_map_check(const gl_moe_map *map, const gl_moe_route_cfg *cfg,
                              const char *what)
{
    gl_moe_route_check(cfg, what);
    if (map->k != cfg->k || map->E != cfg->E || map->n < 0)
        gl_die("%s: the map routes %d tokens to %d of %d experts, the "
               "options %d of %d", what, map->n, map->k, map->E, cfg->k,
               cfg->E);
}

static void cpu_moe_route(gl_dev *d, gl_moe_map *map, const float *logits,
                          const float *bias, const gl_moe_route_cfg *cfg,
                          float *tokens_per_expert, float *dropped)
{
    (void)d;
    cpu_moe_map_check(map, cfg, "moe_route");
    gl_cpu_moe_route_f32(map->expert, map->weight, map->rows, map->row_tok,
                         map->offsets, tokens_per_expert, dropped, logits,
                         bias, map->n, map->rows_max, cfg);
    if (map->offsets_host)
        memcpy(map->offsets_host, map->offsets,
               (size_t)(map->E + 1) * sizeof *map->offsets);
}

static void cpu_moe_route_bwd(gl_dev *d, float *dlogits, const float *dweight,
                              const float *logits, const gl_moe_map *map,
                              const gl_moe_route_cfg *cfg)
{
    (void)d;
    cpu_moe_map_check(map, cfg, "moe_route_bwd");
    gl_cpu_moe_route_bwd_f32(dlogits, dweight, logits, map->expert, map->rows,
                             map->n, cfg);
}

static void cpu_moe_permute(gl_dev *d, void *xp, const void *x, int h,
                            const gl_moe_map *map)
{
    (void)d;
    gl_cpu_moe_permute_f32(xp, x, h, map->row_tok, map->offsets, map->E,
                           map->rows_max);
}

static void cpu_moe_permute_bwd(gl_dev *d, void *dx, const void *dxp, int h,
                                const gl_moe_map *map, int accumulate_dx)
{
    (void)d;
    gl_cpu_moe_permute_bwd_f32(dx, dxp, h, map->rows, map->n, map->k,
                               accumulate_dx);
}

static void cpu_moe_unpermute(gl_dev *d, void *out, const void *yp, int h,
                              const gl_moe_map *map)
{
    (void)d;
    gl_cpu_moe_unpermute_f32(out, yp, h, map->weight, map->rows, map->n,
                             map->k);
}

static void cpu_moe_unpermute_bwd(gl_dev *d, void *dyp, float *dweight,
                                  const void *dout, const void *yp, int h,
                                  const gl_moe_map *map)
{
    (void)d;
    gl_cpu_moe_unpermute_bwd_f32(dyp, dweight, dout, yp, h, map->weight,
                                 map->rows, map->row_tok, map->offsets,
                                 map->n, map->k, map->E, map->rows_max);
}

/* ldY >= out, or the blocks of the out side would overlap. */
static void cpu_moe_ld_check(int ldY, int out, const char *what)
{
    if (ldY < out)
        gl_die("%s: row stride %d is less than the %d output columns", what,
               ldY, out);
}

static void cpu_moe_gemm(gl_dev *d, void *Y, int ldY, const void *X,
                         const void *W, int in, int out, const gl_moe_map *map)
{
    (void)d;
    cpu_moe_ld_check(ldY, out, "moe_gemm");
    gl_cpu_moe_gemm_f32(Y, ldY, X, W, in, out, map->offsets, map->E,
                        map->rows_max);
}

static void cpu_moe_gemm_dgrad(gl_dev *d, void *dX, const void *dY, int ldY,
                               const void *W, int in, int out,
                               const gl_moe_map *map, int accumulate_dx)
{
    (void)d;
    cpu_moe_ld_check(ldY, out, "moe_gemm_dgrad");
    gl_cpu_moe_gemm_dgrad_f32(dX, dY, ldY, W, in, out, map->offsets, map->E,
                              map->rows_max, accumulate_dx);
}

static void cpu_moe_gemm_wgrad(gl_dev *d, float *dW, const void *dY, int ldY,
                               const void *X, int in, int out,
                               const gl_moe_map *map, int accumulate_dw)
{
    (void)d;
    cpu_moe_ld_check(ldY, out, "moe_gemm_wgrad");
    gl_cpu_moe_gemm_wgrad_f32(dW, dY, ldY, X, in, out, map->offsets, map->E,
                              accumulate_dw);
}

static void cpu_moe_aux_counts(gl_dev *d, float *counts, const float *logits,
                               int n, long row0, int seq_len,
                               const gl_moe_route_cfg *cfg)
{
    (void)d;
    gl_cpu_moe_aux_counts_f32(counts, logits, n, row0, seq_len, cfg);
}

static void cpu_moe_aux_loss(gl_dev *d, float *loss, float *dlogits,
                             const float *logits, const float *counts, int n,
                             long row0, int seq_len, float scale, float gscale,
                             const gl_moe_route_cfg *cfg)
{
    (void)d;
    gl_cpu_moe_aux_loss_f32(loss, dlogits, logits, counts, n, row0, seq_len,
                            scale, gscale, cfg);
}

static void cpu_moe_z_loss(gl_dev *d, float *loss, float *dlogits,
                           const float *logits, int n, int E, float scale,
                           float gscale)
{
    (void)d;
    gl_cpu_moe_z_loss_f32(loss, dlogits, logits, n, E, scale, gscale);
}

static void cpu_moe_bias_update(gl_dev *d, float *bias, const float *counts,
                                int E, float rate)
{
    (void)d;
    gl_cpu_moe_bias_update_f32(bias, counts, E, rate);
}

/* The reference is the two ops, one after the other. */
static void cpu_bda_layernorm(gl_dev *d, void *out, void *ln, float *mean,
                              float *rstd, const void *residual,
                              const void *y, const void *bias,
                              const gl_dropout *dp, const void *w,
                              const void *b, int n, int h, float eps,
                              int one_plus)
{
    cpu_bias_dropout_add(d, out, residual, y, bias, n, h, dp);
    cpu_layernorm_fwd(d, ln, mean, rstd, out, w, b, n, h, eps, one_plus);
}

/* The reference: the products, then the bias and the GeLU. */
static void cpu_linear_gelu_fwd(gl_dev *d, void *s, void *pre, const void *X,
                                const void *W, const void *bias, int n, int f,
                                int k)
{
    cpu_gemm(d, 0, 1, n, f, k, 1.0f, X, k, W, k, 0.0f, pre, d->act, f);
    cpu_bias_add(d, pre, bias, n, f);
    cpu_gelu_fwd(d, s, pre, NULL, n, f);
}

static void cpu_linear_dgelu_bwd(gl_dev *d, void *dpre, float *dbias,
                                 const void *dY, const void *Wd,
                                 const void *pre, int n, int f, int k2)
{
    cpu_gemm(d, 0, 0, n, f, k2, 1.0f, dY, k2, Wd, f, 0.0f, dpre, d->act, f);
    cpu_gelu_bwd(d, dpre, dbias, dpre, pre, NULL, n, f);
}

static void cpu_head_rmsnorm_fwd(gl_dev *d, void *y, int ldy, float *rstd,
                                 const void *x, int ldx, const void *w, int n,
                                 int heads, int D, float eps)
{
    (void)d;
    gl_cpu_head_rmsnorm_fwd_f32(y, ldy, rstd, x, ldx, w, n, heads, D, eps);
}

static void cpu_head_rmsnorm_bwd(gl_dev *d, void *dx, int ldg, float *dw,
                                 const void *dy, const void *x, int ldx,
                                 const void *w, const float *rstd, int n,
                                 int heads, int D)
{
    (void)d;
    gl_cpu_head_rmsnorm_bwd_f32(dx, ldg, dw, dy, x, ldx, w, rstd, n, heads, D);
}

const gl_ops gl_ops_cpu = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_upload,
    .download = cpu_download,
    .copy = cpu_copy,
    .zero = cpu_zero,
    .sync = cpu_sync,
    .to_act = cpu_to_act,
    .to_f32 = cpu_to_f32,
    .gemm = cpu_gemm,
    .add = cpu_add,
    .rmsnorm_fwd = cpu_rmsnorm_fwd,
    .rmsnorm_bwd = cpu_rmsnorm_bwd,
    .rope_fwd = cpu_rope_fwd,
    .rope_bwd = cpu_rope_bwd,
    .attn_fwd = cpu_attn_fwd,
    .attn_bwd = cpu_attn_bwd,
    .swiglu_fwd = cpu_swiglu_fwd,
    .swiglu_bwd = cpu_swiglu_bwd,
    .embed_fwd = cpu_embed_fwd,
    .embed_bwd = cpu_embed_bwd,
    .ce_max = cpu_ce_max,
    .ce_sum = cpu_ce_sum,
    .ce_bwd = cpu_ce_bwd,
    .scale_f32 = cpu_scale_f32,
    .sumsq_f32 = cpu_sumsq_f32,
    .nonfinite_f32 = cpu_nonfinite_f32,
    .dot_f32 = cpu_dot_f32,
    .adamw = cpu_adamw,
    .mem_info = cpu_mem_info,
    .close = cpu_close,
    .alloc_host = cpu_alloc_host,
    .free_host = cpu_free_host,
    .comm_wait_compute = cpu_stream_wait,
    .compute_wait_comm = cpu_stream_wait,
    .p2p_wait_compute = cpu_stream_wait,
    .compute_wait_p2p = cpu_stream_wait,
    .fp8_quantize = cpu_fp8_quantize,
    .fp8_quantize_pad = cpu_fp8_quantize_pad,
    .fp8_amax = cpu_fp8_amax,
    .fp8_amax_scale = cpu_fp8_amax_scale,
    .fp8_scale_delayed = cpu_fp8_scale_delayed,
    .fp8_scale_current = cpu_fp8_scale_current,
    .gemm_fp8 = cpu_gemm_fp8,
    .gemm_fp8_ragged = cpu_gemm_fp8_ragged,
    .layernorm_fwd = cpu_layernorm_fwd,
    .layernorm_bwd = cpu_layernorm_bwd,
    .gelu_fwd = cpu_gelu_fwd,
    .gelu_bwd = cpu_gelu_bwd,
    .bias_add = cpu_bias_add,
    .bias_grad = cpu_bias_grad,
    .dropout = cpu_dropout,
    .bias_dropout_add = cpu_bias_dropout_add,
    .pos_embed_fwd = cpu_pos_embed_fwd,
    .moe_route = cpu_moe_route,
    .moe_route_bwd = cpu_moe_route_bwd,
    .moe_permute = cpu_moe_permute,
    .moe_permute_bwd = cpu_moe_permute_bwd,
    .moe_unpermute = cpu_moe_unpermute,
    .moe_unpermute_bwd = cpu_moe_unpermute_bwd,
    .moe_gemm = cpu_moe_gemm,
    .moe_gemm_dgrad = cpu_moe_gemm_dgrad,
    .moe_gemm_wgrad = cpu_moe_gemm_wgrad,
    .moe_aux_counts = cpu_moe_aux_counts,
    .moe_aux_loss = cpu_moe_aux_loss,
    .moe_z_loss = cpu_moe_z_loss,
    .moe_bias_update = cpu_moe_bias_update,
    .attn_block_fwd = cpu_attn_block_fwd,
    .attn_merge = cpu_attn_merge,
    .attn_delta = cpu_attn_delta,
    .attn_block_bwd = cpu_attn_block_bwd,
    .convert_2d = cpu_convert_2d,
    .bda_layernorm = cpu_bda_layernorm,
    .linear_gelu_fwd = cpu_linear_gelu_fwd,
    .linear_dgelu_bwd = cpu_linear_dgelu_bwd,
    .rmsnorm_fwd_fp8 = cpu_rmsnorm_fwd_fp8,
    .swiglu_fwd_fp8 = cpu_swiglu_fwd_fp8,
    .swiglu_bwd_fp8 = cpu_swiglu_bwd_fp8,
    .head_rmsnorm_fwd = cpu_head_rmsnorm_fwd,
    .head_rmsnorm_bwd = cpu_head_rmsnorm_bwd,
    .add_f32 = cpu_add_f32,
    .fp8_transpose = cpu_fp8_transpose,
    .fp8_quantize_tiles = cpu_fp8_quantize_tiles,
    .fp8_block_amax = cpu_fp8_block_amax,
    .fp8_block_sinv = cpu_fp8_block_sinv,
    .fp8_quantize_block_range = cpu_fp8_quantize_block_range,
    .gemm_fp8_tiles = cpu_gemm_fp8_tiles,
    .lanes_fork = cpu_lanes_fork,
    .lane_use = cpu_lane_use,
    .lanes_join = cpu_lanes_join,
};
