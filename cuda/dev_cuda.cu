/*
 * dev_cuda.cu: the CUDA device: opening a GPU, its memory, and the
 * operation table of ops.h, whose entries hand their bf16/fp32 buffers to
 * the kernels of this directory (one .cu file per kernel family) and to
 * cuBLASLt (gemm.cu); the mixture-of-experts ops are moe.cu's.
 *
 * Everything is enqueued on one compute stream created here (d->stream);
 * download() and sync() wait for it.  Memory is plain cudaMalloc (never
 * managed memory), zeroed on allocation; a table of live allocations
 * gives mem_info its bytes in use and peak.
 *
 * Attention runs through cuDNN's fused flash attention when the build has
 * cuDNN and it has a plan for the shape, else through the kernels here
 * (GRIDLM_ATTENTION, attn_cudnn.h).  GRIDLM_PROFILE=1 swaps the table for
 * one that times every op (profile.cu).
 */
#include <config.h>

#include <stdlib.h>
#include <string.h>

#include "gl_cuda.h"

/* ---- allocation table: pointer -> bytes, open addressing ---- */

#define TOMB ((void *)1)

static size_t slot_of(const void *p, size_t cap)
{
    uintptr_t x = (uintptr_t)p >> 8;          /* cudaMalloc aligns to 256 */
    x ^= x >> 17;
    x *= (uintptr_t)0x9E3779B97F4A7C15ull;
    return (size_t)(x >> 7) & (cap - 1);
}

static void table_put(gl_cuda_state *st, void *p, size_t bytes);

static void table_grow(gl_cuda_state *st)
{
    size_t oldcap = st->alloc_cap;
    void **op = st->alloc_ptr;
    size_t *os = st->alloc_size;
    st->alloc_cap = oldcap ? oldcap * 2 : 1024;
    st->alloc_ptr = (void **)gl_calloc(st->alloc_cap, sizeof(void *));
    st->alloc_size = (size_t *)gl_calloc(st->alloc_cap, sizeof(size_t));
    st->alloc_count = 0;
    for (size_t i = 0; i < oldcap; i++)
        if (op[i] && op[i] != TOMB)
            table_put(st, op[i], os[i]);
    free(op);
    free(os);
}

/* alloc_count counts live entries and tombstones: both lengthen probes. */
static void table_put(gl_cuda_state *st, void *p, size_t bytes)
{
    if (2 * (st->alloc_count + 1) > st->alloc_cap)
        table_grow(st);
    size_t i = slot_of(p, st->alloc_cap);
    while (st->alloc_ptr[i] && st->alloc_ptr[i] != TOMB)
        i = (i + 1) & (st->alloc_cap - 1);
    if (!st->alloc_ptr[i])
        st->alloc_count++;
    st->alloc_ptr[i] = p;
    st->alloc_size[i] = bytes;
}

/* Removes p and returns its size; dies if p was not allocated here. */
static size_t table_take(gl_cuda_state *st, void *p)
{
    if (st->alloc_cap) {
        size_t i = slot_of(p, st->alloc_cap);
        while (st->alloc_ptr[i]) {
            if (st->alloc_ptr[i] == p) {
                st->alloc_ptr[i] = TOMB;
                return st->alloc_size[i];
            }
            i = (i + 1) & (st->alloc_cap - 1);
        }
    }
    gl_die("cuda free: pointer %p was not allocated by this device "
           "(double free, or a pointer into a buffer)", p);
}

/* ---- memory ---- */

static const char OOM_HINT[] =
    "reduce memory with --micro-batch-size, --recompute-granularity, "
    "--tensor-model-parallel-size, --pipeline-model-parallel-size or "
    "--use-distributed-optimizer";

void *gl_cuda_malloc_counted(gl_dev *d, size_t bytes, const char *what)
{
    gl_cuda_state *st = gl_cuda_st(d);
    void *p = NULL;
    size_t n = bytes ? bytes : 1;
    cudaError_t e = cudaMalloc(&p, n);
    if (e == cudaErrorMemoryAllocation) {
        size_t fr = 0, tot = 0;
        (void)cudaGetLastError();
        cudaMemGetInfo(&fr, &tot);
        gl_die("out of GPU memory on GPU %d allocating %zu bytes (%.2f GiB) "
               "for %s: %.2f GiB allocated by gridlm, %.2f GiB free of %.2f "
               "GiB; %s", st->ordinal, bytes, bytes / 1073741824.0, what,
               st->in_use / 1073741824.0, fr / 1073741824.0,
               tot / 1073741824.0, OOM_HINT);
    }
    GL_CUDA_CHECK(e);
    /* Zeroed before any stream (the compute stream or a communicator's)
     * can touch it: allocation is rare, so waiting here costs nothing. */
    GL_CUDA_CHECK(cudaMemsetAsync(p, 0, n, st->stream));
    GL_CUDA_CHECK(cudaStreamSynchronize(st->stream));
    table_put(st, p, bytes);
    st->in_use += bytes;
    if (st->in_use > st->peak)
        st->peak = st->in_use;
    return p;
}

void gl_cuda_free_counted(gl_dev *d, void *p)
{
    if (!p)
        return;
    gl_cuda_state *st = gl_cuda_st(d);
    st->in_use -= table_take(st, p);
    /* cudaFree waits for the device, so no kernel still reads p. */
    GL_CUDA_CHECK(cudaFree(p));
}

void *gl_cuda_scratch(gl_dev *d, gl_scratch *s, size_t bytes)
{
    if (bytes > s->bytes) {
        gl_cuda_free_counted(d, s->p);
        size_t want = bytes + bytes / 4;
        s->p = gl_cuda_malloc_counted(d, want, "a kernel's scratch buffer");
        s->bytes = want;
    }
    return s->p;
}

static void *cu_alloc(gl_dev *d, size_t bytes)
{
    return gl_cuda_malloc_counted(d, bytes, "a tensor");
}

static void cu_free(gl_dev *d, void *p)
{
    gl_cuda_free_counted(d, p);
}

/* Uploads are ordered with the stream's work; from pageable memory the
 * call returns once the host buffer has been read. */
static void cu_upload(gl_dev *d, void *dst, const void *host, size_t bytes)
{
    GL_CUDA_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice,
                                  gl_cuda_st(d)->stream));
}

static void cu_download(gl_dev *d, void *host, const void *src, size_t bytes)
{
    gl_cuda_state *st = gl_cuda_st(d);
    GL_CUDA_CHECK(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost,
                                  st->stream));
    GL_CUDA_CHECK(cudaStreamSynchronize(st->stream));
}

static void cu_copy(gl_dev *d, void *dst, const void *src, size_t bytes)
{
    GL_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                                  gl_cuda_st(d)->stream));
}

static void cu_zero(gl_dev *d, void *p, size_t bytes)
{
    GL_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, gl_cuda_st(d)->stream));
}

static void cu_sync(gl_dev *d)
{
    gl_cuda_state *st = gl_cuda_st(d);
    GL_CUDA_CHECK(cudaStreamSynchronize(st->comm_stream));
    GL_CUDA_CHECK(cudaStreamSynchronize(st->p2p_stream));
    GL_CUDA_CHECK(cudaStreamSynchronize(st->stream));
}

/* Page-locked host memory: copies from it are true DMA on the stream,
 * with no staging and no wait on the host. */
static void *cu_alloc_host(gl_dev *d, size_t bytes)
{
    void *p = NULL;
    cudaError_t e = cudaMallocHost(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        gl_die("cannot allocate %zu bytes of page-locked host memory for GPU "
               "%d: %s; check the memory lock limit (ulimit -l) and the "
               "host's free memory", bytes, gl_cuda_st(d)->ordinal,
               cudaGetErrorString(e));
    }
    memset(p, 0, bytes ? bytes : 1);
    return p;
}

static void cu_free_host(gl_dev *d, void *p)
{
    (void)d;
    if (p)
        GL_CUDA_CHECK(cudaFreeHost(p));
}

/* An event recorded on one stream and waited for by the other: the wait
 * takes the event's latest record at the time of the call, so one event
 * per direction serves every call. */
/* Work enqueued on consumer from now on starts after what producer
 * holds now. */
static void stream_wait(cudaEvent_t ev, cudaStream_t producer, cudaStream_t consumer)
{
    GL_CUDA_CHECK(cudaEventRecord(ev, producer));
    GL_CUDA_CHECK(cudaStreamWaitEvent(consumer, ev, 0));
}

static void cu_comm_wait_compute(gl_dev *d)
{
    gl_cuda_state *st = gl_cuda_st(d);
    stream_wait(st->ev_compute, st->stream, st->comm_stream);
}

static void cu_compute_wait_comm(gl_dev *d)
{
    gl_cuda_state *st = gl_cuda_st(d);
    stream_wait(st->ev_comm, st->comm_stream, st->stream);
}

static void cu_p2p_wait_compute(gl_dev *d)
{
    gl_cuda_state *st = gl_cuda_st(d);
    stream_wait(st->ev_compute, st->stream, st->p2p_stream);
}

static void cu_compute_wait_p2p(gl_dev *d)
{
    gl_cuda_state *st = gl_cuda_st(d);
    stream_wait(st->ev_p2p, st->p2p_stream, st->stream);
}

/* ---- the operations: casts from void * and launches ---- */

static void cu_to_act(gl_dev *d, void *dst, const float *src, size_t count)
{
    gl_cuda_to_bf16(gl_cuda_st(d)->stream, (bf16 *)dst, src, count);
}

static void cu_to_f32(gl_dev *d, float *dst, const void *src, size_t count)
{
    gl_cuda_to_f32(gl_cuda_st(d)->stream, dst, (const bf16 *)src, count);
}

static void cu_add(gl_dev *d, void *y, const void *x, const void *r,
                   size_t count)
{
    gl_cuda_add(gl_cuda_st(d)->stream, (bf16 *)y, (const bf16 *)x,
                (const bf16 *)r, count);
}

static void cu_rmsnorm_fwd(gl_dev *d, void *y, float *rstd, const void *x,
                           const void *w, int n, int h, float eps)
{
    gl_cuda_rmsnorm_fwd(d, (bf16 *)y, rstd, (const bf16 *)x, (const bf16 *)w,
                        n, h, eps);
}

static void cu_rmsnorm_bwd(gl_dev *d, void *dx, float *dw, const void *dy,
                           const void *x, const void *w, const float *rstd,
                           int n, int h, int accumulate_dx)
{
    gl_cuda_rmsnorm_bwd(d, (bf16 *)dx, dw, (const bf16 *)dy, (const bf16 *)x,
                        (const bf16 *)w, rstd, n, h, accumulate_dx);
}

static void cu_head_rmsnorm_fwd(gl_dev *d, void *y, int ldy, float *rstd,
                                const void *x, int ldx, const void *w, int n,
                                int heads, int D, float eps)
{
    gl_cuda_head_rmsnorm_fwd(d, (bf16 *)y, ldy, rstd, (const bf16 *)x, ldx,
                             (const bf16 *)w, n, heads, D, eps);
}

static void cu_head_rmsnorm_bwd(gl_dev *d, void *dx, int ldg, float *dw,
                                const void *dy, const void *x, int ldx,
                                const void *w, const float *rstd, int n,
                                int heads, int D)
{
    gl_cuda_head_rmsnorm_bwd(d, (bf16 *)dx, ldg, dw, (const bf16 *)dy,
                             (const bf16 *)x, ldx, (const bf16 *)w, rstd, n,
                             heads, D);
}

static void cu_rope_fwd(gl_dev *d, void *x, int ld, int B, int S, int H,
                        int D, const float *cos, const float *sin)
{
    gl_cuda_rope(gl_cuda_st(d)->stream, (bf16 *)x, ld, B, S, H, D, cos, sin,
                 1.0f);
}

static void cu_rope_bwd(gl_dev *d, void *x, int ld, int B, int S, int H,
                        int D, const float *cos, const float *sin)
{
    gl_cuda_rope(gl_cuda_st(d)->stream, (bf16 *)x, ld, B, S, H, D, cos, sin,
                 -1.0f);
}

/* 1 when dp drops attention probabilities.  cuDNN's fused attention
 * draws its dropout masks from its own generator, which cannot give
 * gl_attn_dropout's masks, so such calls run the native kernels:
 * GRIDLM_ATTENTION=cudnn dies here with why, auto falls back (logged
 * once). */
static int attn_dropping(gl_cuda_state *st, const gl_attn_dropout *dp)
{
    if (!dp || dp->p <= 0)
        return 0;
    if (st->attn_impl == GL_ATTN_CUDNN)
        gl_die("GRIDLM_ATTENTION=cudnn cannot apply attention dropout (cuDNN "
               "draws its own masks, not gridlm's layout-independent ones); "
               "unset GRIDLM_ATTENTION or pass --attention-dropout 0");
    if (st->attn_impl == GL_ATTN_AUTO && !st->attn_drop_logged) {
        gl_info0("attention dropout %g: attention runs gridlm's kernels, "
                    "not cuDNN's", (double)dp->p);
        st->attn_drop_logged = 1;
    }
    return 1;
}

static void cu_attn_fwd(gl_dev *d, void *o, int ldo, float *lse,
                        const void *q, int ldq, const void *k, int ldk,
                        const void *v, int ldv, int B, int S, int Hq, int Hkv,
                        int D, float scale, const gl_attn_dropout *dp)
{
    gl_cuda_state *st = gl_cuda_st(d);
    if (!attn_dropping(st, dp) && st->attn_impl != GL_ATTN_NATIVE &&
        gl_cudnn_attn_fwd(d, (bf16 *)o, ldo, lse, (const bf16 *)q, ldq,
                          (const bf16 *)k, ldk, (const bf16 *)v, ldv, B, S, Hq,
                          Hkv, D, scale)) {
        st->attn_counts.fwd_cudnn++;
        return;
    }
    st->attn_counts.fwd_native++;
    gl_cuda_attn_fwd(d, (bf16 *)o, ldo, lse, (const bf16 *)q, ldq,
                     (const bf16 *)k, ldk, (const bf16 *)v, ldv, B, S, Hq, Hkv,
                     D, scale, dp);
}

static void cu_attn_bwd(gl_dev *d, void *dq, void *dk, void *dv, int ldg,
                        const void *dout, int lddo, const void *o, int ldo,
                        const float *lse, const void *q, int ldq,
                        const void *k, int ldk, const void *v, int ldv,
                        int B, int S, int Hq, int Hkv, int D, float scale,
                        const gl_attn_dropout *dp)
{
    gl_cuda_state *st = gl_cuda_st(d);
    if (!attn_dropping(st, dp) && st->attn_impl != GL_ATTN_NATIVE &&
        gl_cudnn_attn_bwd(d, (bf16 *)dq, (bf16 *)dk, (bf16 *)dv, ldg,
                          (const bf16 *)dout, lddo, (const bf16 *)o, ldo, lse,
                          (const bf16 *)q, ldq, (const bf16 *)k, ldk,
                          (const bf16 *)v, ldv, B, S, Hq, Hkv, D, scale)) {
        st->attn_counts.bwd_cudnn++;
        return;
    }
    st->attn_counts.bwd_native++;
    gl_cuda_attn_bwd(d, (bf16 *)dq, (bf16 *)dk, (bf16 *)dv, ldg,
                     (const bf16 *)dout, lddo, (const bf16 *)o, ldo, lse,
                     (const bf16 *)q, ldq, (const bf16 *)k, ldk,
                     (const bf16 *)v, ldv, B, S, Hq, Hkv, D, scale, dp);
}

static void cu_swiglu_fwd(gl_dev *d, void *y, const void *gu, int n, int f)
{
    gl_cuda_swiglu_fwd(gl_cuda_st(d)->stream, (bf16 *)y, (const bf16 *)gu, n,
                       f);
}

static void cu_swiglu_bwd(gl_dev *d, void *dgu, const void *dy,
                          const void *gu, int n, int f)
{
    gl_cuda_swiglu_bwd(gl_cuda_st(d)->stream, (bf16 *)dgu, (const bf16 *)dy,
                       (const bf16 *)gu, n, f);
}

static void cu_embed_fwd(gl_dev *d, void *y, const void *table,
                         const int32_t *ids, int n, int h, long vocab_start,
                         int vl)
{
    gl_cuda_embed_fwd(gl_cuda_st(d)->stream, (bf16 *)y, (const bf16 *)table,
                      ids, n, h, vocab_start, vl);
}

static void cu_embed_bwd(gl_dev *d, float *dtable, const void *dy,
                         const int32_t *ids, int n, int h, long vocab_start,
                         int vl)
{
    gl_cuda_embed_bwd(d, dtable, (const bf16 *)dy, ids, n, h, vocab_start, vl);
}

static void cu_ce_max(gl_dev *d, float *rowmax, const void *logits, int ld,
                      int n, int valid)
{
    gl_cuda_ce_max(gl_cuda_st(d)->stream, rowmax, (const bf16 *)logits, ld, n,
                   valid);
}

static void cu_ce_sum(gl_dev *d, float *stats, const void *logits, int ld,
                      const int32_t *targets, const float *rowmax, int n,
                      int valid, long vocab_start)
{
    gl_cuda_ce_sum(gl_cuda_st(d)->stream, stats, (const bf16 *)logits, ld,
                   targets, rowmax, n, valid, vocab_start);
}

static void cu_ce_bwd(gl_dev *d, float *loss, void *logits, int ld,
                      const int32_t *targets, const float *rowmax,
                      const float *stats, const float *gscale, int n, int vl,
                      int valid, long vocab_start)
{
    gl_cuda_ce_bwd(gl_cuda_st(d)->stream, loss, (bf16 *)logits, ld, targets,
                   rowmax, stats, gscale, n, vl, valid, vocab_start);
}

static void cu_add_f32(gl_dev *d, float *y, const float *x, size_t count)
{
    gl_cuda_add_f32(gl_cuda_st(d)->stream, y, x, count);
}

static void cu_scale_f32(gl_dev *d, float *x, float s, size_t count)
{
    gl_cuda_scale_f32(gl_cuda_st(d)->stream, x, s, count);
}

static void cu_sumsq_f32(gl_dev *d, float *out, const float *x, size_t count)
{
    gl_cuda_sumsq(d, out, x, count);
}

static void cu_nonfinite_f32(gl_dev *d, float *out, const float *x,
                             size_t count)
{
    gl_cuda_nonfinite(d, out, x, count);
}

static void cu_dot_f32(gl_dev *d, float *out, const float *x, const float *w,
                       size_t count)
{
    gl_cuda_dot(d, out, x, w, count);
}

static void cu_fp8_quantize(gl_dev *d, uint8_t *q, uint8_t *qt, float *amax,
                            const void *x, int rows, int cols,
                            const float *scale, gl_fp8_format f)
{
    gl_cuda_fp8_quantize(gl_cuda_st(d)->stream, q, qt, amax, (const bf16 *)x,
                         rows, cols, scale, f);
}

static void cu_fp8_quantize_pad(gl_dev *d, uint8_t *q, uint8_t *qt, float *amax,
                                const void *x, int xrows, int rows, int cols,
                                const float *scale, gl_fp8_format f)
{
    gl_cuda_fp8_quantize_pad(gl_cuda_st(d)->stream, q, qt, amax, (const bf16 *)x,
                             xrows, rows, cols, scale, f);
}

static void cu_fp8_transpose(gl_dev *d, uint8_t *qt, const uint8_t *q, int rows, int cols)
{
    gl_cuda_fp8_transpose(gl_cuda_st(d)->stream, qt, q, rows, cols);
}

static void cu_fp8_quantize_tiles(gl_dev *d, uint8_t *q, float *q_sinv, uint8_t *qt,
                                  float *qt_sinv, const void *x, int rows, int cols,
                                  int block2d, gl_fp8_format f)
{
    gl_cuda_fp8_quantize_tiles(gl_cuda_st(d)->stream, q, q_sinv, qt, qt_sinv,
                               (const bf16 *)x, rows, cols, block2d, f);
}

static void cu_fp8_block_amax(gl_dev *d, float *amax, const void *x, size_t e0, size_t count,
                              int cols)
{
    gl_cuda_fp8_block_amax(gl_cuda_st(d)->stream, amax, (const bf16 *)x, e0, count, cols);
}

static void cu_fp8_block_sinv(gl_dev *d, float *q_sinv, float *qt_sinv, const float *amax,
                              int rows, int cols, gl_fp8_format f)
{
    gl_cuda_fp8_block_sinv(gl_cuda_st(d)->stream, q_sinv, qt_sinv, amax, rows, cols, f);
}

static void cu_fp8_quantize_block_range(gl_dev *d, uint8_t *q, const void *x, size_t e0,
                                        size_t count, int cols, const float *amax,
                                        gl_fp8_format f)
{
    gl_cuda_fp8_quantize_block_range(gl_cuda_st(d)->stream, q, (const bf16 *)x, e0, count,
                                     cols, amax, f);
}

static void cu_fp8_amax(gl_dev *d, float *amax, const void *x, size_t count)
{
    gl_cuda_fp8_amax(gl_cuda_st(d)->stream, amax, (const bf16 *)x, count);
}

static void cu_fp8_amax_scale(gl_dev *d, float *amax, float *scale,
                              float *scale_inv, const void *x, size_t count,
                              gl_fp8_format f)
{
    gl_cuda_state *st = gl_cuda_st(d);
    gl_cuda_fp8_amax_scale(st->stream, st->lane_cur, amax, scale, scale_inv,
                           (const bf16 *)x, count, f);
}

static void cu_fp8_scale_delayed(gl_dev *d, float *hist, float *scale,
                                 float *scale_inv, int stride, int n, int len,
                                 gl_fp8_amax_algo algo, int margin,
                                 gl_fp8_format f)
{
    gl_cuda_fp8_scale_delayed(gl_cuda_st(d)->stream, hist, scale, scale_inv,
                              stride, n, len, algo, margin, f);
}

static void cu_fp8_scale_current(gl_dev *d, const float *amax, float *scale,
                                 float *scale_inv, int stride, int n,
                                 gl_fp8_format f)
{
    gl_cuda_fp8_scale_current(gl_cuda_st(d)->stream, amax, scale, scale_inv,
                              stride, n, f);
}

static void cu_layernorm_fwd(gl_dev *d, void *y, float *mean, float *rstd,
                             const void *x, const void *w, const void *b,
                             int n, int h, float eps, int one_plus)
{
    gl_cuda_layernorm_fwd(gl_cuda_st(d)->stream, (bf16 *)y, mean, rstd,
                          (const bf16 *)x, (const bf16 *)w, (const bf16 *)b, n,
                          h, eps, one_plus);
}

static void cu_layernorm_bwd(gl_dev *d, void *dx, float *dw, float *db,
                             const void *dy, const void *x, const void *w,
                             const float *mean, const float *rstd, int n,
                             int h, int one_plus, int accumulate_dx)
{
    gl_cuda_layernorm_bwd(d, (bf16 *)dx, dw, db, (const bf16 *)dy,
                          (const bf16 *)x, (const bf16 *)w, mean, rstd, n, h,
                          one_plus, accumulate_dx);
}

static void cu_gelu_fwd(gl_dev *d, void *y, const void *x, const void *bias,
                        int n, int f)
{
    gl_cuda_gelu_fwd(gl_cuda_st(d)->stream, (bf16 *)y, (const bf16 *)x,
                     (const bf16 *)bias, n, f);
}

static void cu_gelu_bwd(gl_dev *d, void *dx, float *dbias, const void *dy,
                        const void *x, const void *bias, int n, int f)
{
    gl_cuda_gelu_bwd(d, (bf16 *)dx, dbias, (const bf16 *)dy, (const bf16 *)x,
                     (const bf16 *)bias, n, f);
}

static void cu_bias_add(gl_dev *d, void *y, const void *bias, int n, int w)
{
    gl_cuda_bias_add(gl_cuda_st(d)->stream, (bf16 *)y, (const bf16 *)bias, n,
                     w);
}

static void cu_bias_grad(gl_dev *d, float *dbias, const void *dy, int n,
                         int w)
{
    gl_cuda_bias_grad(d, dbias, (const bf16 *)dy, n, w);
}

static void cu_dropout(gl_dev *d, void *y, const void *x, int n, int w,
                       const gl_dropout *dp)
{
    gl_dropout_check(dp, n, w, "dropout");
    gl_cuda_dropout(gl_cuda_st(d)->stream, (bf16 *)y, (const bf16 *)x, n, w,
                    dp);
}

static void cu_bias_dropout_add(gl_dev *d, void *out, const void *residual,
                                const void *y, const void *bias, int n, int w,
                                const gl_dropout *dp)
{
    gl_cuda_bias_dropout_add(gl_cuda_st(d)->stream, (bf16 *)out,
                             (const bf16 *)residual, (const bf16 *)y,
                             (const bf16 *)bias, n, w, dp);
}

static void cu_pos_embed_fwd(gl_dev *d, void *y, const void *pos,
                             const int32_t *positions, int n, int h,
                             int max_pos)
{
    gl_cuda_pos_embed_fwd(gl_cuda_st(d)->stream, (bf16 *)y, (const bf16 *)pos,
                          positions, n, h, max_pos);
}

static void cu_bda_layernorm(gl_dev *d, void *out, void *ln, float *mean,
                             float *rstd, const void *residual, const void *y,
                             const void *bias, const gl_dropout *dp,
                             const void *w, const void *b, int n, int h,
                             float eps, int one_plus)
{
    gl_cuda_state *st = gl_cuda_st(d);
    gl_cuda_bda_layernorm(st->stream, st->fused_norm, (bf16 *)out, (bf16 *)ln,
                          mean, rstd, (const bf16 *)residual, (const bf16 *)y,
                          (const bf16 *)bias, dp, (const bf16 *)w,
                          (const bf16 *)b, n, h, eps, one_plus);
}

/* One cuBLASLt product with its epilogue where cuBLASLt has one, else
 * the plain kernels (gemm.cu: gl_cuda_gemm_epilogue). */
static void cu_linear_gelu_fwd(gl_dev *d, void *s, void *pre, const void *X,
                               const void *W, const void *bias, int n, int f,
                               int k)
{
    gl_cuda_state *st = gl_cuda_st(d);
    if (gl_cuda_gemm_epilogue(d, GL_EPI_GELU_AUX_BIAS, 0, 1, n, f, k, X, k, W,
                              k, s, f, (void *)bias, pre) == 0)
        return;
    gl_cuda_gemm(d, 0, 1, n, f, k, 1.0f, X, k, W, k, 0.0f, pre, GL_DT_BF16,
                 f);
    gl_cuda_bias_add(st->stream, (bf16 *)pre, (const bf16 *)bias, n, f);
    gl_cuda_gelu_fwd(st->stream, (bf16 *)s, (const bf16 *)pre, NULL, n, f);
}

static void cu_linear_dgelu_bwd(gl_dev *d, void *dpre, float *dbias,
                                const void *dY, const void *Wd,
                                const void *pre, int n, int f, int k2)
{
    gl_cuda_state *st = gl_cuda_st(d);
    /* cuBLASLt writes the bias gradient; it is added into dbias after */
    float *bg = (float *)gl_cuda_scratch(d, &st->s_bias,
                                         (size_t)f * sizeof(float));
    if (dbias && gl_cuda_gemm_epilogue(d, GL_EPI_DGELU_BGRAD, 0, 0, n, f, k2,
                                       dY, k2, Wd, f, dpre, f, bg,
                                       (void *)pre) == 0) {
        gl_cuda_colsum_final(st->stream, dbias, bg, 1, f, f);
        return;
    }
    gl_cuda_gemm(d, 0, 0, n, f, k2, 1.0f, dY, k2, Wd, f, 0.0f, dpre,
                 GL_DT_BF16, f);
    gl_cuda_gelu_bwd(d, (bf16 *)dpre, dbias, (const bf16 *)dpre,
                     (const bf16 *)pre, NULL, n, f);
}

static void cu_mem_info(gl_dev *d, size_t *in_use, size_t *peak,
                        size_t *total)
{
    gl_cuda_state *st = gl_cuda_st(d);
    if (in_use)
        *in_use = st->in_use;
    if (peak)
        *peak = st->peak;
    if (total) {
        size_t fr = 0, tot = 0;
        GL_CUDA_CHECK(cudaSetDevice(st->ordinal));
        GL_CUDA_CHECK(cudaMemGetInfo(&fr, &tot));
        *total = tot;
    }
}

static void cu_close(gl_dev *d)
{
    gl_cuda_state *st = gl_cuda_st(d);
    GL_CUDA_CHECK(cudaStreamSynchronize(st->comm_stream));
    GL_CUDA_CHECK(cudaStreamSynchronize(st->p2p_stream));
    GL_CUDA_CHECK(cudaStreamSynchronize(st->stream));
    gl_cuda_gemm_close(d);
    gl_cudnn_close(d);
    gl_scratch *sc[] = {&st->s_reduce, &st->s_attn, &st->s_embed,
                        &st->s_norm, &st->s_cudnn, &st->s_fp8, &st->s_bias,
                        &st->s_moe, &st->s_moe_ptr};
    for (size_t i = 0; i < sizeof sc / sizeof sc[0]; i++)
        gl_cuda_free_counted(d, sc[i]->p);
    for (int i = 0; i < GL_ADAMW_TABLES; i++) {
        gl_cuda_free_counted(d, st->adamw[i].mem.p);
        free(st->adamw[i].segs);
    }
    for (int i = 0; i < GL_LANES_MAX; i++) {
        if (st->lane[i])
            GL_CUDA_CHECK(cudaStreamSynchronize(st->lane[i]));
        if (st->lane_ws[i])
            gl_cuda_free_counted(d, st->lane_ws[i]);
        if (st->lane_ev[i])
            GL_CUDA_CHECK(cudaEventDestroy(st->lane_ev[i]));
        if (st->lane[i])
            GL_CUDA_CHECK(cudaStreamDestroy(st->lane[i]));
    }
    if (st->blas)
        GL_CUBLAS_CHECK(cublasDestroy(st->blas));
    GL_CUDA_CHECK(cudaFree(st->lt_workspace));
    GL_CUBLAS_CHECK(cublasLtDestroy(st->lt));
    GL_CUDA_CHECK(cudaEventDestroy(st->ev_compute));
    GL_CUDA_CHECK(cudaEventDestroy(st->ev_comm));
    GL_CUDA_CHECK(cudaEventDestroy(st->ev_p2p));
    GL_CUDA_CHECK(cudaStreamDestroy(st->comm_stream));
    GL_CUDA_CHECK(cudaStreamDestroy(st->p2p_stream));
    GL_CUDA_CHECK(cudaStreamDestroy(st->stream));
    free(st->alloc_ptr);
    free(st->alloc_size);
    free(st);
    free(d);
}

/* Context parallelism's block attention: cuDNN for the blocks it takes
 * (attn_cudnn.cu: full and causal-diagonal blocks without dropout), as
 * cu_attn_fwd chooses, else attn_block.cu's kernels; act is bf16. */
static void cu_attn_block_fwd(gl_dev *d, float *o, int ldo, float *lse,
                              const void *q, int ldq, const void *k, int ldk,
                              const void *v, int ldv, int B, int Sq, int Sk,
                              int Hq, int Hkv, int D, float scale,
                              const gl_attn_pos *qpos, const gl_attn_pos *kpos,
                              gl_attn_mask mask, const gl_attn_dropout *dp)
{
    gl_cuda_state *st = gl_cuda_st(d);
    if (!attn_dropping(st, dp) && st->attn_impl != GL_ATTN_NATIVE &&
        gl_cudnn_attn_block_fwd(d, o, ldo, lse, (const bf16 *)q, ldq,
                                (const bf16 *)k, ldk, (const bf16 *)v, ldv, B,
                                Sq, Sk, Hq, Hkv, D, scale, qpos, kpos, mask)) {
        st->attn_counts.blk_fwd_cudnn++;
        return;
    }
    st->attn_counts.blk_fwd_native++;
    gl_cuda_attn_block_fwd(d, o, ldo, lse, (const bf16 *)q, ldq,
                           (const bf16 *)k, ldk, (const bf16 *)v, ldv, B, Sq,
                           Sk, Hq, Hkv, D, scale, qpos, kpos, mask, dp);
}

static void cu_attn_merge(gl_dev *d, float *o, float *lse, const float *o_b,
                          const float *lse_b, int B, int S, int Hq, int D,
                          int first)
{
    gl_cuda_attn_merge(d, o, lse, o_b, lse_b, B, S, Hq, D, first);
}

static void cu_attn_delta(gl_dev *d, float *delta, const void *dout, int lddo,
                          const void *o, int ldo, int B, int S, int Hq, int D)
{
    gl_cuda_attn_delta(d, delta, (const bf16 *)dout, lddo, (const bf16 *)o,
                       ldo, B, S, Hq, D);
}

static void cu_attn_block_bwd(gl_dev *d, float *dq, int lddq, float *dk,
                              float *dv, int lddkv, const void *dout, int lddo,
                              const float *lse, const float *delta,
                              const void *q, int ldq, const void *k, int ldk,
                              const void *v, int ldv, int B, int Sq, int Sk,
                              int Hq, int Hkv, int D, float scale,
                              const gl_attn_pos *qpos, const gl_attn_pos *kpos,
                              gl_attn_mask mask, const gl_attn_dropout *dp)
{
    gl_cuda_state *st = gl_cuda_st(d);
    if (!attn_dropping(st, dp) && st->attn_impl != GL_ATTN_NATIVE &&
        gl_cudnn_attn_block_bwd(d, dq, lddq, dk, dv, lddkv, (const bf16 *)dout,
                                lddo, lse, delta, (const bf16 *)q, ldq,
                                (const bf16 *)k, ldk, (const bf16 *)v, ldv, B,
                                Sq, Sk, Hq, Hkv, D, scale, qpos, kpos, mask)) {
        st->attn_counts.blk_bwd_cudnn++;
        return;
    }
    st->attn_counts.blk_bwd_native++;
    gl_cuda_attn_block_bwd(d, dq, lddq, dk, dv, lddkv, (const bf16 *)dout,
                           lddo, lse, delta, (const bf16 *)q, ldq,
                           (const bf16 *)k, ldk, (const bf16 *)v, ldv, B, Sq,
                           Sk, Hq, Hkv, D, scale, qpos, kpos, mask, dp);
}

static void cu_convert_2d(gl_dev *d, void *dst, gl_dtype dt, long lddst,
                          const void *src, gl_dtype st, long ldsrc, int rows,
                          long cols)
{
    gl_cuda_convert_2d(d, dst, dt, lddst, src, st, ldsrc, rows, cols);
}

static void cu_rmsnorm_fwd_fp8(gl_dev *d, void *y, float *rstd, const void *x,
                               const void *w, int n, int h, float eps,
                               const gl_fp8_out *o)
{
    gl_cuda_rmsnorm_fwd_fp8(d, (bf16 *)y, rstd, (const bf16 *)x, (const bf16 *)w,
                            n, h, eps, o);
}

static void cu_swiglu_fwd_fp8(gl_dev *d, void *y, const void *gu, int n, int f,
                              const gl_fp8_out *o)
{
    gl_cuda_swiglu_fwd_fp8(gl_cuda_st(d)->stream, (bf16 *)y, (const bf16 *)gu, n,
                           f, o);
}

static void cu_swiglu_bwd_fp8(gl_dev *d, void *dgu, const void *dy,
                              const void *gu, int n, int f, const gl_fp8_out *o)
{
    gl_cuda_swiglu_bwd_fp8(gl_cuda_st(d)->stream, (bf16 *)dgu, (const bf16 *)dy,
                           (const bf16 *)gu, n, f, o);
}

static const gl_ops gl_ops_cuda = {
    .name = "cuda",
    .alloc = cu_alloc,
    .free = cu_free,
    .upload = cu_upload,
    .download = cu_download,
    .copy = cu_copy,
    .zero = cu_zero,
    .sync = cu_sync,
    .to_act = cu_to_act,
    .to_f32 = cu_to_f32,
    .gemm = gl_cuda_gemm,
    .add = cu_add,
    .rmsnorm_fwd = cu_rmsnorm_fwd,
    .rmsnorm_bwd = cu_rmsnorm_bwd,
    .rope_fwd = cu_rope_fwd,
    .rope_bwd = cu_rope_bwd,
    .attn_fwd = cu_attn_fwd,
    .attn_bwd = cu_attn_bwd,
    .swiglu_fwd = cu_swiglu_fwd,
    .swiglu_bwd = cu_swiglu_bwd,
    .embed_fwd = cu_embed_fwd,
    .embed_bwd = cu_embed_bwd,
    .ce_max = cu_ce_max,
    .ce_sum = cu_ce_sum,
    .ce_bwd = cu_ce_bwd,
    .scale_f32 = cu_scale_f32,
    .sumsq_f32 = cu_sumsq_f32,
    .nonfinite_f32 = cu_nonfinite_f32,
    .dot_f32 = cu_dot_f32,
    .adamw = gl_cuda_adamw,
    .mem_info = cu_mem_info,
    .close = cu_close,
    .alloc_host = cu_alloc_host,
    .free_host = cu_free_host,
    .comm_wait_compute = cu_comm_wait_compute,
    .compute_wait_comm = cu_compute_wait_comm,
    .p2p_wait_compute = cu_p2p_wait_compute,
    .compute_wait_p2p = cu_compute_wait_p2p,
    .fp8_quantize = cu_fp8_quantize,
    .fp8_quantize_pad = cu_fp8_quantize_pad,
    .fp8_amax = cu_fp8_amax,
    .fp8_amax_scale = cu_fp8_amax_scale,
    .fp8_scale_delayed = cu_fp8_scale_delayed,
    .fp8_scale_current = cu_fp8_scale_current,
    .gemm_fp8 = gl_cuda_gemm_fp8,
    .gemm_fp8_ragged = gl_cuda_gemm_fp8_ragged,
    .layernorm_fwd = cu_layernorm_fwd,
    .layernorm_bwd = cu_layernorm_bwd,
    .gelu_fwd = cu_gelu_fwd,
    .gelu_bwd = cu_gelu_bwd,
    .bias_add = cu_bias_add,
    .bias_grad = cu_bias_grad,
    .dropout = cu_dropout,
    .bias_dropout_add = cu_bias_dropout_add,
    .pos_embed_fwd = cu_pos_embed_fwd,
    .moe_route = gl_cuda_moe_route,
    .moe_route_bwd = gl_cuda_moe_route_bwd,
    .moe_permute = gl_cuda_moe_permute,
    .moe_permute_bwd = gl_cuda_moe_permute_bwd,
    .moe_unpermute = gl_cuda_moe_unpermute,
    .moe_unpermute_bwd = gl_cuda_moe_unpermute_bwd,
    .moe_gemm = gl_cuda_moe_gemm,
    .moe_gemm_dgrad = gl_cuda_moe_gemm_dgrad,
    .moe_gemm_wgrad = gl_cuda_moe_gemm_wgrad,
    .moe_aux_counts = gl_cuda_moe_aux_counts,
    .moe_aux_loss = gl_cuda_moe_aux_loss,
    .moe_z_loss = gl_cuda_moe_z_loss,
    .moe_bias_update = gl_cuda_moe_bias_update,
    .attn_block_fwd = cu_attn_block_fwd,
    .attn_merge = cu_attn_merge,
    .attn_delta = cu_attn_delta,
    .attn_block_bwd = cu_attn_block_bwd,
    .convert_2d = cu_convert_2d,
    .bda_layernorm = cu_bda_layernorm,
    .linear_gelu_fwd = cu_linear_gelu_fwd,
    .linear_dgelu_bwd = cu_linear_dgelu_bwd,
    .rmsnorm_fwd_fp8 = cu_rmsnorm_fwd_fp8,
    .swiglu_fwd_fp8 = cu_swiglu_fwd_fp8,
    .swiglu_bwd_fp8 = cu_swiglu_bwd_fp8,
    .head_rmsnorm_fwd = cu_head_rmsnorm_fwd,
    .head_rmsnorm_bwd = cu_head_rmsnorm_bwd,
    .add_f32 = cu_add_f32,
    .fp8_transpose = cu_fp8_transpose,
    .fp8_quantize_tiles = cu_fp8_quantize_tiles,
    .fp8_block_amax = cu_fp8_block_amax,
    .fp8_block_sinv = cu_fp8_block_sinv,
    .fp8_quantize_block_range = cu_fp8_quantize_block_range,
    .gemm_fp8_tiles = gl_cuda_gemm_fp8_tiles,
    .lanes_fork = gl_cuda_lanes_fork,
    .lane_use = gl_cuda_lane_use,
    .lanes_join = gl_cuda_lanes_join,
};

/* ---- opening ---- */

extern "C" int gl_cuda_device_count(void)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {        /* no driver or no GPU: none usable */
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

/* cuBLASLt's workspace: 32 MiB is what it asks for on Hopper. */
#define LT_WORKSPACE (32u << 20)

extern "C" gl_dev *gl_dev_open_cuda(int ordinal)
{
    int count = gl_cuda_device_count();
    if (ordinal < 0 || ordinal >= count)
        gl_die("GPU %d does not exist: this process sees %d CUDA device(s) "
               "(check CUDA_VISIBLE_DEVICES and the number of ranks per node)",
               ordinal, count);
    GL_CUDA_CHECK(cudaSetDevice(ordinal));

    gl_cuda_state *st = (gl_cuda_state *)gl_calloc(1, sizeof *st);
    st->ordinal = ordinal;
    GL_CUDA_CHECK(cudaGetDeviceProperties(&st->prop, ordinal));
    if (st->prop.major < 8)
        gl_die("GPU %d (%s) has compute capability %d.%d; gridlm's bf16 "
               "kernels need 8.0 (Ampere) or newer", ordinal, st->prop.name,
               st->prop.major, st->prop.minor);
    GL_CUDA_CHECK(cudaStreamCreateWithFlags(&st->stream,
                                            cudaStreamNonBlocking));
    /* The side streams run at the device's highest priority: when a
     * kernel of the compute stream retires its blocks, the waiting
     * communication kernel gets the SMs first instead of queueing behind
     * the next wave of a matrix product. */
    int prio_low = 0, prio_high = 0;
    GL_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&prio_low, &prio_high));
    (void)prio_low;
    GL_CUDA_CHECK(cudaStreamCreateWithPriority(&st->comm_stream,
                                               cudaStreamNonBlocking, prio_high));
    GL_CUDA_CHECK(cudaEventCreateWithFlags(&st->ev_compute,
                                           cudaEventDisableTiming));
    GL_CUDA_CHECK(cudaEventCreateWithFlags(&st->ev_comm,
                                           cudaEventDisableTiming));
    GL_CUDA_CHECK(cudaStreamCreateWithPriority(&st->p2p_stream,
                                               cudaStreamNonBlocking, prio_high));
    GL_CUDA_CHECK(cudaEventCreateWithFlags(&st->ev_p2p,
                                           cudaEventDisableTiming));
    GL_CUBLAS_CHECK(cublasLtCreate(&st->lt));
    st->lt_workspace_bytes = LT_WORKSPACE;
    cudaError_t e = cudaMalloc(&st->lt_workspace, st->lt_workspace_bytes);
    if (e == cudaErrorMemoryAllocation)
        gl_die("out of GPU memory on GPU %d allocating cuBLASLt's %u-byte "
               "workspace: another process holds the GPU?", ordinal,
               LT_WORKSPACE);
    GL_CUDA_CHECK(e);

    st->attn_impl = gl_cuda_attn_impl_from_env();
    const char *fn = getenv("GRIDLM_FUSED_NORM");
    st->fused_norm = fn && !strcmp(fn, "1");

    gl_dev *d = (gl_dev *)gl_calloc(1, sizeof *d);
    d->ops = &gl_ops_cuda;
    d->act = GL_DT_BF16;
    d->act_bytes = 2;
    d->comm = GL_COMM_NCCL;
    d->stream = (void *)st->stream;
    d->comm_stream = (void *)st->comm_stream;
    d->p2p_stream = (void *)st->p2p_stream;
    d->index = ordinal;
    strncpy(d->name, st->prop.name, sizeof d->name - 1);  /* MFU's peak table */
    d->impl = st;
    const char *det = getenv("GRIDLM_DETERMINISTIC");
    gl_cuda_deterministic(d, det && !strcmp(det, "1"));
    const char *prof = getenv("GRIDLM_PROFILE");
    if (prof && *prof && strcmp(prof, "0"))
        d->ops = gl_cuda_profile_wrap(d, &gl_ops_cuda);
    return d;
}
