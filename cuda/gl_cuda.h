/*
 * gl_cuda.h: what the CUDA back end's files share.
 *
 *   - GL_CUDA_CHECK(call) / GL_CUBLAS_CHECK(call): every CUDA runtime and
 *     cuBLAS(Lt) call goes through one of these; a failure stops the job
 *     through gl_die(), naming the call, the error and the source line.
 *   - gl_cuda_state: what sits behind gl_dev->impl (the stream, the
 *     cuBLASLt handle and workspace, memory accounting, scratch buffers).
 *   - the launchers of the kernels (one .cu file each), which the
 *     operation table in dev_cuda.cu calls.  Each takes the compute stream
 *     and enqueues; none synchronises.
 *
 * Activations are bf16 (__nv_bfloat16); every reduction and every
 * nonlinearity is computed in fp32.
 */
#ifndef GL_CUDA_GL_CUDA_H
#define GL_CUDA_GL_CUDA_H

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cublasLt.h>
#include <cublas_v2.h>

#include "base/log.h"
#include "device/ops.h"
#include "attn_cudnn.h"

typedef __nv_bfloat16 bf16;

#define GL_CUDA_CHECK(call)                                                  \
    do {                                                                     \
        cudaError_t gl_e_ = (call);                                          \
        if (gl_e_ != cudaSuccess)                                            \
            gl_die("CUDA call %s failed: %s (%s) at %s:%d", #call,           \
                   cudaGetErrorString(gl_e_), cudaGetErrorName(gl_e_),       \
                   __FILE__, __LINE__);                                      \
    } while (0)

#define GL_CUBLAS_CHECK(call)                                                \
    do {                                                                     \
        cublasStatus_t gl_s_ = (call);                                       \
        if (gl_s_ != CUBLAS_STATUS_SUCCESS)                                  \
            gl_die("cuBLAS call %s failed: status %d (%s) at %s:%d", #call,  \
                   (int)gl_s_, cublasLtGetStatusString(gl_s_), __FILE__,     \
                   __LINE__);                                                \
    } while (0)

/* After a kernel launch: catches bad launch configurations at once, naming
 * the kernel (its own faults surface at the next synchronising call). */
#define GL_CUDA_LAUNCHED(name)                                               \
    do {                                                                     \
        cudaError_t gl_e_ = cudaGetLastError();                              \
        if (gl_e_ != cudaSuccess)                                            \
            gl_die("CUDA kernel %s did not launch: %s (%s) at %s:%d", name,  \
                   cudaGetErrorString(gl_e_), cudaGetErrorName(gl_e_),       \
                   __FILE__, __LINE__);                                      \
    } while (0)

/* One cached cuBLASLt plan (gemm.cu). */
typedef struct gl_gemm_plan gl_gemm_plan;

/* cuDNN's attention state (attn_cudnn.cu) and the profiler (profile.cu). */
typedef struct gl_cudnn gl_cudnn;
typedef struct gl_prof gl_prof;

/* A grow-only device buffer for a kernel's temporary data. */
typedef struct {
    void *p;
    size_t bytes;
} gl_scratch;

/* adamw.cu: a segment list whose tables (the list, then the chunk table)
 * are in device memory, so that a step with the same list uploads
 * nothing. */
typedef struct {
    gl_scratch mem;
    gl_adamw_seg *segs;        /* the list's host copy; NULL: unused */
    int nseg;
    size_t nchunks;
    unsigned long used;        /* adamw_calls when last used */
} gl_adamw_table;
#define GL_ADAMW_TABLES 2

typedef struct {
    int ordinal;
    cudaStream_t stream;
    /* the communication stream and the two events that order it with the
     * compute stream (ops->comm_wait_compute, ops->compute_wait_comm) */
    cudaStream_t comm_stream;
    cudaEvent_t ev_compute, ev_comm;
    /* the pipeline's point-to-point stream (ops->p2p_wait_compute) */
    cudaStream_t p2p_stream;
    cudaEvent_t ev_p2p;
    cudaDeviceProp prop;

    cublasLtHandle_t lt;
    void *lt_workspace;
    size_t lt_workspace_bytes;
    gl_gemm_plan *plans;       /* cache of matmul plans, keyed by shape */
    int nplans, cap_plans;

    /* accounting of ops->alloc: pointer -> size (open addressing) */
    void **alloc_ptr;
    size_t *alloc_size;
    size_t alloc_cap, alloc_count;
    size_t in_use, peak;

    /* scratch: reductions' partials, attention's row statistics, embed's
     * sorted ids, norms' partials, FP8 products' aligned scales */
    gl_scratch s_reduce, s_attn, s_embed, s_norm, s_fp8;
    gl_scratch s_bias;         /* bias.cu: column sums' partials */
    /* adamw.cu: the last segment lists used, two as --decoupled-lr steps
     * two lists in turn (src/train/optim.c), and the calls so far */
    gl_adamw_table adamw[GL_ADAMW_TABLES];
    unsigned long adamw_calls;

    /* attention: the implementation in use (GL_ATTN_*), cuDNN's handle,
     * plans and workspace, and how calls ran */
    int attn_impl;
    gl_cudnn *cudnn;
    gl_scratch s_cudnn;
    gl_attn_counts attn_counts;
    int attn_drop_logged;      /* the cuDNN fallback for dropout was logged */
    int deterministic;         /* GRIDLM_DETERMINISTIC=1 (--deterministic-mode):
                                * attention's backward deterministic
                                * (gl_cuda_deterministic) */

    gl_prof *prof;             /* GRIDLM_PROFILE=1, else NULL */
    int fused_norm;            /* bda_layernorm in one kernel: 0 (two
                                * kernels) unless GRIDLM_FUSED_NORM=1 */

    /* moe.cu: routing's counts and the losses' per-token terms (s_moe),
     * the grouped products' operand pointers (s_moe_ptr), and the cuBLAS
     * handle of cublasGemmGroupedBatchedEx (created at first use) */
    gl_scratch s_moe, s_moe_ptr;
    cublasHandle_t blas;
    int moe_loop;              /* bit per product form (fwd, dgrad, wgrad)
                                  that cuBLAS's grouped call refused */
    /* lanes.cu's lanes (ops.h): lane 0 is the compute stream, saved in
     * lane_main with its workspace while `stream` names the lane in use;
     * the others are created at first use, each with its own cuBLASLt
     * workspace of lt_workspace_bytes (lane_ws[0] unused) */
    cudaStream_t lane[GL_LANES_MAX];
    cudaEvent_t lane_ev[GL_LANES_MAX];
    void *lane_ws[GL_LANES_MAX];
    cudaStream_t lane_main;
    void *lane_main_ws;
    int lane_cur;              /* the lane in use (0 outside a fork) */
} gl_cuda_state;

static inline gl_cuda_state *gl_cuda_st(gl_dev *d)
{
    return (gl_cuda_state *)d->impl;
}

/* Device memory that the back end uses itself: counted like alloc's. */
void *gl_cuda_scratch(gl_dev *d, gl_scratch *s, size_t bytes);
void *gl_cuda_malloc_counted(gl_dev *d, size_t bytes, const char *what);
void gl_cuda_free_counted(gl_dev *d, void *p);

/* gemm.cu */
void gl_cuda_gemm(gl_dev *d, int transa, int transb, int m, int n, int k,
                  float alpha, const void *A, int lda, const void *B, int ldb,
                  float beta, void *C, gl_dtype ctype, int ldc);
/* As gl_cuda_gemm, for products whose m (or k, with ragged_k) changes
 * from call to call: one plan per power-of-two bucket of it (gemm.cu). */
void gl_cuda_gemm_ragged(gl_dev *d, int ragged_k, int transa, int transb,
                         int m, int n, int k, float alpha, const void *A,
                         int lda, const void *B, int ldb, float beta, void *C,
                         gl_dtype ctype, int ldc);
void gl_cuda_gemm_close(gl_dev *d);

/* lanes.cu: ops.h's lanes_fork, lane_use and lanes_join */
int gl_cuda_lanes_fork(gl_dev *d, int n);
void gl_cuda_lane_use(gl_dev *d, int i);
void gl_cuda_lanes_join(gl_dev *d, int n);

/* elementwise.cu */
void gl_cuda_to_bf16(cudaStream_t st, bf16 *dst, const float *src, size_t n);
void gl_cuda_to_f32(cudaStream_t st, float *dst, const bf16 *src, size_t n);
void gl_cuda_add(cudaStream_t st, bf16 *y, const bf16 *x, const bf16 *r,
                 size_t n);
void gl_cuda_scale_f32(cudaStream_t st, float *x, float s, size_t n);
void gl_cuda_add_f32(cudaStream_t st, float *y, const float *x, size_t n);

/* reduce.cu */
void gl_cuda_sumsq(gl_dev *d, float *out, const float *x, size_t n);
void gl_cuda_dot(gl_dev *d, float *out, const float *x, const float *w,
                 size_t n);
void gl_cuda_nonfinite(gl_dev *d, float *out, const float *x, size_t n);

/* rmsnorm.cu */
void gl_cuda_rmsnorm_fwd(gl_dev *d, bf16 *y, float *rstd, const bf16 *x,
                         const bf16 *w, int n, int h, float eps);
void gl_cuda_rmsnorm_fwd_fp8(gl_dev *d, bf16 *y, float *rstd, const bf16 *x,
                             const bf16 *w, int n, int h, float eps,
                             const gl_fp8_out *o);
void gl_cuda_rmsnorm_bwd(gl_dev *d, bf16 *dx, float *dw, const bf16 *dy,
                         const bf16 *x, const bf16 *w, const float *rstd,
                         int n, int h, int accumulate_dx);
void gl_cuda_head_rmsnorm_fwd(gl_dev *d, bf16 *y, int ldy, float *rstd,
                              const bf16 *x, int ldx, const bf16 *w, int n,
                              int heads, int D, float eps);
void gl_cuda_head_rmsnorm_bwd(gl_dev *d, bf16 *dx, int ldg, float *dw,
                              const bf16 *dy, const bf16 *x, int ldx,
                              const bf16 *w, const float *rstd, int n,
                              int heads, int D);

/* rope.cu */
void gl_cuda_rope(cudaStream_t st, bf16 *x, int ld, int B, int S, int H, int D,
                  const float *cos, const float *sin, float sign);

/* swiglu.cu */
void gl_cuda_swiglu_fwd(cudaStream_t st, bf16 *y, const bf16 *gu, int n, int f);
void gl_cuda_swiglu_bwd(cudaStream_t st, bf16 *dgu, const bf16 *dy,
                        const bf16 *gu, int n, int f);
void gl_cuda_swiglu_fwd_fp8(cudaStream_t st, bf16 *y, const bf16 *gu, int n,
                            int f, const gl_fp8_out *o);
void gl_cuda_swiglu_bwd_fp8(cudaStream_t st, bf16 *dgu, const bf16 *dy,
                            const bf16 *gu, int n, int f, const gl_fp8_out *o);

/* embed.cu */
void gl_cuda_embed_fwd(cudaStream_t st, bf16 *y, const bf16 *table,
                       const int32_t *ids, int n, int h, long vocab_start,
                       int vl);
void gl_cuda_embed_bwd(gl_dev *d, float *dtable, const bf16 *dy,
                       const int32_t *ids, int n, int h, long vocab_start,
                       int vl);

/* crossentropy.cu */
void gl_cuda_ce_max(cudaStream_t st, float *rowmax, const bf16 *logits, int ld,
                    int n, int valid);
void gl_cuda_ce_sum(cudaStream_t st, float *stats, const bf16 *logits, int ld,
                    const int32_t *targets, const float *rowmax, int n,
                    int valid, long vocab_start);
void gl_cuda_ce_bwd(cudaStream_t st, float *loss, bf16 *logits, int ld,
                    const int32_t *targets, const float *rowmax,
                    const float *stats, const float *gscale, int n, int vl,
                    int valid, long vocab_start);

/* attention_fwd.cu, attention_bwd.cu: the native kernels, with dropout
 * (dp NULL or p = 0: none); attn_cudnn.cu never drops. */
void gl_cuda_attn_fwd(gl_dev *d, bf16 *o, int ldo, float *lse, const bf16 *q,
                      int ldq, const bf16 *k, int ldk, const bf16 *v, int ldv,
                      int B, int S, int Hq, int Hkv, int D, float scale,
                      const gl_attn_dropout *dp);
void gl_cuda_attn_bwd(gl_dev *d, bf16 *dq, bf16 *dk, bf16 *dv, int ldg,
                      const bf16 *dout, int lddo, const bf16 *o, int ldo,
                      const float *lse, const bf16 *q, int ldq, const bf16 *k,
                      int ldk, const bf16 *v, int ldv, int B, int S, int Hq,
                      int Hkv, int D, float scale, const gl_attn_dropout *dp);

/* attn_block.cu: context parallelism's block attention, merge, delta,
 * block backward and strided conversion (ops.h's contracts). */
void gl_cuda_attn_block_fwd(gl_dev *d, float *o, int ldo, float *lse,
                            const bf16 *q, int ldq, const bf16 *k, int ldk,
                            const bf16 *v, int ldv, int B, int Sq, int Sk,
                            int Hq, int Hkv, int D, float scale,
                            const gl_attn_pos *qpos, const gl_attn_pos *kpos,
                            gl_attn_mask mask, const gl_attn_dropout *dp);
void gl_cuda_attn_merge(gl_dev *d, float *o, float *lse, const float *o_b,
                        const float *lse_b, int B, int S, int Hq, int D,
                        int first);
void gl_cuda_attn_delta(gl_dev *d, float *delta, const bf16 *dout, int lddo,
                        const bf16 *o, int ldo, int B, int S, int Hq, int D);
void gl_cuda_attn_block_bwd(gl_dev *d, float *dq, int lddq, float *dk,
                            float *dv, int lddkv, const bf16 *dout, int lddo,
                            const float *lse, const float *delta,
                            const bf16 *q, int ldq, const bf16 *k, int ldk,
                            const bf16 *v, int ldv, int B, int Sq, int Sk,
                            int Hq, int Hkv, int D, float scale,
                            const gl_attn_pos *qpos, const gl_attn_pos *kpos,
                            gl_attn_mask mask, const gl_attn_dropout *dp);
void gl_cuda_convert_2d(gl_dev *d, void *dst, gl_dtype dt, long lddst,
                        const void *src, gl_dtype st, long ldsrc, int rows,
                        long cols);

/* The shapes, scale (> 0) and alignment the attention kernels need (dies
 * otherwise):
 * p[i] are the np q/k/v/o views, ld[i] their token row strides. */
void gl_cuda_attn_check(const char *what, int Hq, int Hkv, int D, float scale,
                        const void *p[], const int ld[], int np);

/* attn_cudnn.cu: cuDNN's fused attention.  Each returns 1 when it ran
 * the call, 0 when cuDNN has no plan for the shape (the caller runs the
 * kernels here); under GL_ATTN_CUDNN a refusal dies instead. */
int gl_cudnn_attn_fwd(gl_dev *d, bf16 *o, int ldo, float *lse, const bf16 *q,
                      int ldq, const bf16 *k, int ldk, const bf16 *v, int ldv,
                      int B, int S, int Hq, int Hkv, int D, float scale);
int gl_cudnn_attn_bwd(gl_dev *d, bf16 *dq, bf16 *dk, bf16 *dv, int ldg,
                      const bf16 *dout, int lddo, const bf16 *o, int ldo,
                      const float *lse, const bf16 *q, int ldq, const bf16 *k,
                      int ldk, const bf16 *v, int ldv, int B, int S, int Hq,
                      int Hkv, int D, float scale);
/* The same for context parallelism's blocks (ops.h's attn_block_fwd and
 * attn_block_bwd, without dropout): 0 also for a block whose mask, given
 * the positions, is neither full nor the causal diagonal (attn_cudnn.cu
 * says which), for the kernels of attn_block.cu. */
int gl_cudnn_attn_block_fwd(gl_dev *d, float *o, int ldo, float *lse,
                            const bf16 *q, int ldq, const bf16 *k, int ldk,
                            const bf16 *v, int ldv, int B, int Sq, int Sk,
                            int Hq, int Hkv, int D, float scale,
                            const gl_attn_pos *qpos, const gl_attn_pos *kpos,
                            gl_attn_mask mask);
int gl_cudnn_attn_block_bwd(gl_dev *d, float *dq, int lddq, float *dk,
                            float *dv, int lddkv, const bf16 *dout, int lddo,
                            const float *lse, const float *delta,
                            const bf16 *q, int ldq, const bf16 *k, int ldk,
                            const bf16 *v, int ldv, int B, int Sq, int Sk,
                            int Hq, int Hkv, int D, float scale,
                            const gl_attn_pos *qpos, const gl_attn_pos *kpos,
                            gl_attn_mask mask);
/* GRIDLM_ATTENTION as a GL_ATTN_* value (dies on a bad value). */
int gl_cuda_attn_impl_from_env(void);
void gl_cudnn_close(gl_dev *d);

/* profile.cu: the table that wraps `real` with CUDA events (GRIDLM_PROFILE),
 * and its report (printed by the wrapped close). */
const gl_ops *gl_cuda_profile_wrap(gl_dev *d, const gl_ops *real);

/* fp8.cu */
void gl_cuda_fp8_quantize(cudaStream_t st, uint8_t *q, uint8_t *qt,
                          float *amax, const bf16 *x, int rows, int cols,
                          const float *scale, gl_fp8_format f);
void gl_cuda_fp8_quantize_pad(cudaStream_t st, uint8_t *q, uint8_t *qt,
                              float *amax, const bf16 *x, int xrows, int rows,
                              int cols, const float *scale, gl_fp8_format f);
void gl_cuda_fp8_amax(cudaStream_t st, float *amax, const bf16 *x, size_t n);
/* ops.h's fp8_quantize_tiles (block scaling), bf16 x */
void gl_cuda_fp8_quantize_tiles(cudaStream_t st, uint8_t *q, float *q_sinv, uint8_t *qt,
                                float *qt_sinv, const bf16 *x, int rows, int cols,
                                int block2d, gl_fp8_format f);
/* ops.h's fp8_block_amax, fp8_block_sinv and fp8_quantize_block_range
 * (128 x 128 blocks from flat pieces), bf16 x */
void gl_cuda_fp8_block_amax(cudaStream_t st, float *amax, const bf16 *x, size_t e0,
                            size_t count, int cols);
void gl_cuda_fp8_block_sinv(cudaStream_t st, float *q_sinv, float *qt_sinv,
                            const float *amax, int rows, int cols, gl_fp8_format f);
void gl_cuda_fp8_quantize_block_range(cudaStream_t st, uint8_t *q, const bf16 *x,
                                      size_t e0, size_t count, int cols,
                                      const float *amax, gl_fp8_format f);
/* slot: the lane whose stream st is (fp8.cu's amax_scale_kernel keeps a
 * ticket per lane) */
void gl_cuda_fp8_amax_scale(cudaStream_t st, int slot, float *amax, float *scale,
                            float *scale_inv, const bf16 *x, size_t n,
                            gl_fp8_format f);
void gl_cuda_fp8_scale_delayed(cudaStream_t st, float *hist, float *scale,
                               float *scale_inv, int stride, int n, int len,
                               gl_fp8_amax_algo algo, int margin,
                               gl_fp8_format f);
void gl_cuda_fp8_scale_current(cudaStream_t st, const float *amax,
                               float *scale, float *scale_inv, int stride,
                               int n, gl_fp8_format f);
/* qt [cols, rows] = the transpose of the bytes q [rows, cols] (ops.h:
 * fp8_transpose). */
void gl_cuda_fp8_transpose(cudaStream_t st, uint8_t *qt, const uint8_t *q,
                           int rows, int cols);
/* dst[0] = a[0], dst[4] = b[0]: two device scalars copied to 16-byte
 * aligned places (dst itself 16-byte aligned), in order on the stream. */
void gl_cuda_fp8_stage_scales(cudaStream_t st, float *dst, const float *a,
                              const float *b);

/* gemm.cu: a bf16 product C[m, n] (ldc) with a cuBLASLt epilogue on
 * C's columns, beta 0: GL_EPI_GELU_AUX_BIAS writes C = gelu(op(A) op(B) +
 * bias) (bias bf16 [n]) and aux = op(A) op(B) + bias [m, n] (ldc);
 * GL_EPI_DGELU_BGRAD writes C = op(A) op(B) gelu'(aux) and bias = the
 * column sums of C (fp32 [n], overwritten).  Returns -1 (writing
 * nothing) when cuBLASLt has no algorithm for it or the pointers are not
 * 16-byte aligned. */
enum { GL_EPI_NONE = 0, GL_EPI_GELU_AUX_BIAS, GL_EPI_DGELU_BGRAD };
int gl_cuda_gemm_epilogue(gl_dev *d, int epi, int transa, int transb, int m,
                          int n, int k, const void *A, int lda, const void *B,
                          int ldb, void *C, int ldc, void *bias, void *aux);
/* ops.h's gemm_fp8_tiles (block scaling) */
void gl_cuda_gemm_fp8_tiles(gl_dev *d, int m, int n, int k, float alpha,
                            const uint8_t *A, gl_fp8_format fa, const float *a_sinv,
                            const uint8_t *B, gl_fp8_format fb, const float *b_sinv,
                            int b_block2d, float beta, void *C, gl_dtype ctype, int ldc);
/* gemm.cu: ops.h's gemm_fp8 and gemm_fp8_ragged */
void gl_cuda_gemm_fp8(gl_dev *d, int m, int n, int k, float alpha,
                      const uint8_t *A, gl_fp8_format fa,
                      const float *a_scale_inv, const uint8_t *B,
                      gl_fp8_format fb, const float *b_scale_inv, float beta,
                      void *C, gl_dtype ctype, int ldc, int fast_accum);
void gl_cuda_gemm_fp8_ragged(gl_dev *d, int ragged_k, int m, int n, int k, float alpha,
                             const uint8_t *A, gl_fp8_format fa, const float *a_scale_inv,
                             const uint8_t *B, gl_fp8_format fb, const float *b_scale_inv,
                             float beta, void *C, gl_dtype ctype, int ldc, int fast_accum);

/* adamw.cu */
void gl_cuda_adamw(gl_dev *d, const gl_adamw_seg *segs, int nseg,
                   const gl_adamw_hyper *hp);

/* layernorm.cu */
void gl_cuda_layernorm_fwd(cudaStream_t st, bf16 *y, float *mean, float *rstd,
                           const bf16 *x, const bf16 *w, const bf16 *b, int n,
                           int h, float eps, int one_plus);
void gl_cuda_layernorm_bwd(gl_dev *d, bf16 *dx, float *dw, float *db,
                           const bf16 *dy, const bf16 *x, const bf16 *w,
                           const float *mean, const float *rstd, int n, int h,
                           int one_plus, int accumulate_dx);

/* gelu.cu */
void gl_cuda_gelu_fwd(cudaStream_t st, bf16 *y, const bf16 *x,
                      const bf16 *bias, int n, int f);
void gl_cuda_gelu_bwd(gl_dev *d, bf16 *dx, float *dbias, const bf16 *dy,
                      const bf16 *x, const bf16 *bias, int n, int f);

/* bias.cu; gl_cuda_colsum_final: out[j] += sum over g < G of
 * partial[g ld + j], in an order fixed by G */
void gl_cuda_bias_add(cudaStream_t st, bf16 *y, const bf16 *bias, int n,
                      int w);
void gl_cuda_bias_grad(gl_dev *d, float *dbias, const bf16 *dy, int n, int w);
void gl_cuda_colsum_final(cudaStream_t st, float *out, const float *partial,
                          int G, int w, long ld);

/* dropout.cu */
void gl_cuda_dropout(cudaStream_t st, bf16 *y, const bf16 *x, int n, int w,
                     const gl_dropout *dp);
void gl_cuda_bias_dropout_add(cudaStream_t st, bf16 *out,
                              const bf16 *residual, const bf16 *y,
                              const bf16 *bias, int n, int w,
                              const gl_dropout *dp);
/* ops.h's bda_layernorm: one kernel when fused is non-zero (and the
 * pointers allow), else bias_dropout_add and layernorm_fwd */
void gl_cuda_bda_layernorm(cudaStream_t st, int fused, bf16 *out, bf16 *ln,
                           float *mean, float *rstd, const bf16 *residual,
                           const bf16 *y, const bf16 *bias,
                           const gl_dropout *dp, const bf16 *w, const bf16 *b,
                           int n, int h, float eps, int one_plus);

/* embed.cu: learned positions */
void gl_cuda_pos_embed_fwd(cudaStream_t st, bf16 *y, const bf16 *pos,
                           const int32_t *positions, int n, int h,
                           int max_pos);

/* moe.cu: ops.h's mixture-of-experts ops */
void gl_cuda_moe_route(gl_dev *d, gl_moe_map *map, const float *logits,
                       const float *bias, const gl_moe_route_cfg *cfg,
                       float *tokens_per_expert, float *dropped);
void gl_cuda_moe_route_bwd(gl_dev *d, float *dlogits, const float *dweight,
                           const float *logits, const gl_moe_map *map,
                           const gl_moe_route_cfg *cfg);
void gl_cuda_moe_permute(gl_dev *d, void *xp, const void *x, int h,
                         const gl_moe_map *map);
void gl_cuda_moe_permute_bwd(gl_dev *d, void *dx, const void *dxp, int h,
                             const gl_moe_map *map, int accumulate_dx);
void gl_cuda_moe_unpermute(gl_dev *d, void *out, const void *yp, int h,
                           const gl_moe_map *map);
void gl_cuda_moe_unpermute_bwd(gl_dev *d, void *dyp, float *dweight,
                               const void *dout, const void *yp, int h,
                               const gl_moe_map *map);
void gl_cuda_moe_gemm(gl_dev *d, void *Y, int ldY, const void *X,
                      const void *W, int in, int out, const gl_moe_map *map);
void gl_cuda_moe_gemm_dgrad(gl_dev *d, void *dX, const void *dY, int ldY,
                            const void *W, int in, int out,
                            const gl_moe_map *map, int accumulate_dx);
void gl_cuda_moe_gemm_wgrad(gl_dev *d, float *dW, const void *dY, int ldY,
                            const void *X, int in, int out,
                            const gl_moe_map *map, int accumulate_dw);
void gl_cuda_moe_aux_counts(gl_dev *d, float *counts, const float *logits,
                            int n, long row0, int seq_len,
                            const gl_moe_route_cfg *cfg);
void gl_cuda_moe_aux_loss(gl_dev *d, float *loss, float *dlogits,
                          const float *logits, const float *counts, int n,
                          long row0, int seq_len, float scale, float gscale,
                          const gl_moe_route_cfg *cfg);
void gl_cuda_moe_z_loss(gl_dev *d, float *loss, float *dlogits,
                        const float *logits, int n, int E, float scale,
                        float gscale);
void gl_cuda_moe_bias_update(gl_dev *d, float *bias, const float *counts,
                             int E, float rate);

/* Blocks for a grid-stride loop over n items, at most a few per SM. */
static inline unsigned gl_cuda_grid(size_t n, int threads)
{
    size_t b = (n + threads - 1) / threads;
    if (b > 65536)
        b = 65536;
    return b ? (unsigned)b : 1;
}

#endif
