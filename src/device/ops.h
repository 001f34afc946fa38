/*
 * ops.h: the compute interface the model is written against.
 *
 * A gl_dev is one compute device with a table of operations.  Two back
 * ends implement it:
 *   - cpu  (src/device/ops_cpu.c): fp32 everywhere, plain loops and CBLAS.
 *          It is the reference every other back end is checked against.
 *   - cuda (cuda/): activations and compute weights in bf16, fp32 master
 *          weights, fp32 gradients and optimizer state.
 *
 * Buffer types.  "act" buffers (void *) hold elements of d->act (F32 on the
 * CPU, BF16 on CUDA): activations, their gradients, and the compute copy
 * of weights.  "f32" buffers (float *) are always fp32: master weights,
 * main gradients, optimizer moments, norms' rstd, attention's
 * log-sum-exp, loss statistics.  "i32" buffers hold token ids.  All
 * pointers are device memory of the back end (host memory for the CPU).
 *
 * Layout.  Matrices are row-major.  n is the number of tokens of the
 * operation (micro-batch x sequence, or the local part of it under
 * sequence parallelism), h the hidden size.  Linear layers follow
 * Megatron: W is [out, in] and Y = X W^T.
 *
 * Calls are asynchronous on the device's compute stream (d->stream) and
 * ordered with each other; download() and sync() wait.  Nothing here
 * communicates: the model puts comm.h calls between ops.
 *
 * "accumulate" outputs are added to (+=), others are overwritten.
 */
#ifndef GL_DEVICE_OPS_H
#define GL_DEVICE_OPS_H

#include <stddef.h>
#include <stdint.h>
#include "comm/comm.h"
#include "device/fp8.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gl_dev gl_dev;
typedef struct gl_ops gl_ops;

/* Where an FP8-producing op writes its output quantized (ops.h's
 * "FP8 operands out of the kernels that produce them"): the arguments of
 * fp8_quantize other than x and the shape. */
typedef struct {
    uint8_t *q, *qt;           /* [rows, cols] and its transpose; or NULL */
    float *amax;               /* max |Y| folded in; or NULL */
    const float *scale;        /* device scalar: q = fp8(Y scale) */
    gl_fp8_format f;
} gl_fp8_out;

/* One segment of a multi-tensor AdamW update: count fp32 elements of
 * master weights, their gradient and moments, and where the updated
 * weights go in act dtype (NULL: nowhere). */
typedef struct {
    float *master;
    const float *grad;
    float *m, *v;
    void *act_out;
    size_t count;
    float weight_decay;        /* 0 for norm weights */
} gl_adamw_seg;

/* AdamW hyper-parameters of one step.  step counts from 1; the update is
 *   m = b1 m + (1-b1) g          v = b2 v + (1-b2) g^2
 *   mhat = m / (1-b1^step)       vhat = v / (1-b2^step)
 *   w -= lr (mhat / (sqrt(vhat) + eps) + wd w)
 * with g = grad * grad_scale (the clipping factor). */
typedef struct {
    float lr, beta1, beta2, eps, grad_scale;
    long step;
} gl_adamw_hyper;

/* One dropout call: where its mask comes from (base/philox.h) and where
 * this call's [n, w] piece lies in the full logical tensor.  Element
 * (i, j) of the piece is element e = (row0 + i) width + col0 + j of the
 * full tensor, whose mask is drawn from (seed, iteration, layer, site)
 * and e alone: a tensor split over ranks by rows (sequence parallelism,
 * data parallelism, micro-batches) or by columns (tensor parallelism)
 * draws the same mask as the whole would.  Kept elements are scaled by
 * 1 / (1 - p); p in [0, 1) (ops die otherwise), p = 0 keeps everything. */
typedef struct {
    uint64_t seed;          /* the run's --seed */
    uint32_t iteration;     /* the training iteration */
    uint32_t layer;         /* < 2^28: the layer (0 for the embedding) */
    uint32_t site;          /* < 16: which dropout of the layer */
    float p;                /* drop probability */
    long row0, col0;        /* the piece's first row and column in the whole */
    long width;             /* the whole tensor's row width (>= col0 + w) */
} gl_dropout;

/* Dies, naming `what`, when dp's probability, layer, site or placement of
 * an [n, w] piece is out of range (every back end checks with it). */
void gl_dropout_check(const gl_dropout *dp, int n, int w, const char *what);

/* Attention dropout (Megatron's core-attention dropout): dropout on the
 * softmax probabilities P [B, Hq, S, S] of one attn_fwd / attn_bwd call,
 * from the same generator as gl_dropout.  Element (b, h, i, j) of the
 * call's P (sample b, query head h, query position i, key position j) is
 * element
 *   e = ((b0 + b) heads + h0 + h) S^2 + i S + j
 * of the full logical probability tensor [global sample, global head,
 * query, key] of (seed, iteration, layer, site): the row-major index with
 * the global batch's samples outermost, then all heads of the model.
 * Tensor parallelism (a call holds heads h0 .. h0 + Hq - 1 of `heads`),
 * data parallelism and micro-batches (a call holds samples b0 .. b0 +
 * B - 1 of the global batch) thus draw the same mask as the whole; S is
 * the full sequence (sequence parallelism gathers it before attention).
 * Kept probabilities are scaled by 1 / (1 - p); p in [0, 1). */
typedef struct {
    uint64_t seed;          /* the run's --seed */
    uint32_t iteration;     /* the training iteration */
    uint32_t layer;         /* < 2^28: the layer key */
    uint32_t site;          /* < 16: the layer's attention-dropout site */
    float p;                /* drop probability */
    long b0;                /* the call's first sample in the global batch */
    long h0;                /* the call's first query head among all */
    long heads;             /* the model's query heads (>= h0 + Hq) */
    long seq;               /* the block ops only (attn_block_fwd ...): the
                             * full sequence's S of the element index, above
                             * every position; attn_fwd and attn_bwd use
                             * their own S and do not read it */
} gl_attn_dropout;

/* Dies, naming `what`, when dp does not fit a call of Hq query heads. */
void gl_attn_dropout_check(const gl_attn_dropout *dp, int Hq, const char *what);

/* ---- Mixture of experts (issue 13): the types of the moe_* ops at the
 * end of struct gl_ops, whose comment says what they compute. ---- */

/* Score function of the router (--moe-router-score-function). */
typedef enum { GL_MOE_SOFTMAX = 0, GL_MOE_SIGMOID = 1 } gl_moe_score;

/* Which routed (token, slot) pairs an expert over its capacity keeps
 * (--moe-token-drop-policy): those of the highest weights, or those of
 * the first tokens. */
typedef enum { GL_MOE_DROP_PROBS = 0, GL_MOE_DROP_POSITION = 1 } gl_moe_drop;

/* The router's options, Megatron's flags.  Host memory, read at the call. */
typedef struct {
    int E;                 /* --num-experts */
    int k;                 /* --moe-router-topk, 1 <= k <= E */
    gl_moe_score score;    /* --moe-router-score-function */
    int pre_softmax;       /* --moe-router-pre-softmax; no effect with
                              sigmoid, element-wise (as in Megatron) */
    float scaling;         /* --moe-router-topk-scaling-factor; 0: none */
    int capacity;          /* rows per expert in this call, from
                              gl_moe_capacity(); 0: no capacity (no
                              --moe-expert-capacity-factor), nothing dropped */
    gl_moe_drop drop;      /* --moe-token-drop-policy (with a capacity) */
    int pad;               /* --moe-pad-expert-input-to-capacity */
} gl_moe_route_cfg;

/* Megatron's expert capacity of a call routing n tokens:
 * ceil(n k / E * factor) (its get_capacity over n k slots), in double. */
int gl_moe_capacity(int n, int k, int E, double factor);

/* The rows a routing of n tokens can dispatch (the size of the permuted
 * buffers): n k without a capacity; with capacity c' = min(c, n),
 * E c' when padding, else min(n k, E c'). */
int gl_moe_rows_max(int n, const gl_moe_route_cfg *cfg);

/* Dies, naming `what`, when cfg is not a routing gridlm computes (no
 * experts, k out of [1, E], an unknown score function or drop policy, a
 * negative capacity). */
void gl_moe_route_check(const gl_moe_route_cfg *cfg, const char *what);

/* One routing of n tokens to E experts, k slots per token: moe_route's
 * outputs, what the permutation, the combination and the grouped products
 * read.  All arrays are device memory of the caller, sized as shown;
 * offsets_host is host memory (alloc_host) or NULL.
 *   expert   i32 [n, k]  slot j of token t: its expert; the k slots in
 *                        decreasing order of the selection score, equal
 *                        scores by lower expert index
 *   weight   f32 [n, k]  its routing weight (0 for a dropped slot)
 *   rows     i32 [n, k]  its row in the permuted buffers, -1 when dropped
 *   row_tok  i32 [rows_max]  the token of each permuted row; -1 past the
 *                        last row (offsets[E])
 *   offsets  i32 [E + 1] expert e's rows are [offsets[e], offsets[e+1]),
 *                        offsets[0] = 0: the rows are grouped by expert,
 *                        expert 0's first, and within an expert in
 *                        increasing token order
 *   offsets_host         the same E + 1 values on the host, when not NULL
 */
typedef struct {
    int n, k, E;
    int rows_max;          /* >= gl_moe_rows_max(n, cfg) */
    int32_t *expert;
    float *weight;
    int32_t *rows;
    int32_t *row_tok;
    int32_t *offsets;
    int32_t *offsets_host;
} gl_moe_map;
/* Context parallelism's block attention (the ops at the end of gl_ops):
 * where the rows of a block of queries or keys lie in the full sequence.
 * Row i of a block of n rows has position
 *   pos(i) = start[0] + i               for i <  split,
 *            start[1] + (i - split)     for split <= i < n,
 * two contiguous runs, as Megatron's CP layout gives each rank (chunks r
 * and 2 CP - 1 - r of the sequence); one run is split = n (start[1] is
 * then not read).  Every sample of the batch has the same positions.
 * Runs rather than a position array, so that a kernel knows the positions
 * of a tile from two numbers and skips the tiles the mask removes without
 * reading memory. */
typedef struct {
    int split;              /* rows of the first run, 0 <= split <= n */
    long start[2];          /* the positions of rows 0 and split */
} gl_attn_pos;

/* Which (query, key) pairs a block attends: causal, key allowed iff its
 * position <= the query's; full, every pair. */
typedef enum { GL_ATTN_CAUSAL = 0, GL_ATTN_FULL = 1 } gl_attn_mask;

/* A block cut into pieces that whole-sequence attention runs as they
 * are: query rows [q0, q0 + nq) against key rows [k0, k0 + nk), every
 * pair (causal 0) or the causal diagonal by row index (causal 1: key row
 * k0 + j allowed for query row q0 + i iff j <= i); nk = 0, rows that see
 * no key (o 0, lse -inf).  Every query row lies in exactly one part, so
 * the parts' outputs need no merging. */
typedef struct {
    int q0, nq, k0, nk, causal;
} gl_attn_part;

#define GL_ATTN_PARTS 2     /* the most parts gl_attn_block_split makes */

/* Cut the block of Sq query rows (positions qpos) against Sk key rows
 * (kpos) under mask into parts whose pairs are exactly the block's
 * allowed pairs, one part per query run at most, runs that share their
 * keys joined.  Each (query run, key run) pair must be all allowed, none
 * allowed, or a diagonal (the two runs start at the same position); a
 * block with a pair that is partly allowed any other way has no such
 * cut.  Megatron's CP layout (chunks r and 2 CP - 1 - r) never has one:
 * every block of its ring is one or two parts.  Returns the number of
 * parts (at most GL_ATTN_PARTS) written to part, or 0 when there is no
 * cut (the general kernels run the block); bad sizes or splits also
 * give 0. */
int gl_attn_block_split(const gl_attn_pos *qpos, int Sq, const gl_attn_pos *kpos,
                        int Sk, gl_attn_mask mask, gl_attn_part part[GL_ATTN_PARTS]);

/* gl_attn_dropout_check for a block call (attn_block_fwd, attn_block_bwd)
 * of Hq heads, Sq query and Sk key rows: also dies when a position of the
 * runs is not below dp->seq. */
void gl_attn_block_dropout_check(const gl_attn_dropout *dp, int Hq,
                                 const gl_attn_pos *qpos, int Sq,
                                 const gl_attn_pos *kpos, int Sk, const char *what);

/* A back end's table (ops_cpu.c, cuda/dev_cuda.cu) sets every member by
 * name, .op = fn, so that a member added or moved shifts no other. */
struct gl_ops {
    const char *name;

    /* memory */
    void *(*alloc)(gl_dev *d, size_t bytes);          /* zeroed; dies on OOM */
    void (*free)(gl_dev *d, void *p);
    void (*upload)(gl_dev *d, void *dst, const void *host, size_t bytes);
    void (*download)(gl_dev *d, void *host, const void *src, size_t bytes);
    void (*copy)(gl_dev *d, void *dst, const void *src, size_t bytes); /* no overlap */
    void (*zero)(gl_dev *d, void *p, size_t bytes);
    void (*sync)(gl_dev *d);

    /* dtype conversion: f32 <-> act, count elements */
    void (*to_act)(gl_dev *d, void *dst, const float *src, size_t count);
    void (*to_f32)(gl_dev *d, float *dst, const void *src, size_t count);

    /* C[m,n] = alpha op(A)[m,k] op(B)[k,n] + beta C, row-major, A and B in
     * act dtype, C in ctype (act or GL_DT_F32, the latter for weight
     * gradients accumulated in fp32 with beta = 1).  op(X) = X^T when
     * trans is non-zero; lda/ldb/ldc are row strides as stored. */
    void (*gemm)(gl_dev *d, int transa, int transb, int m, int n, int k,
                 float alpha, const void *A, int lda, const void *B, int ldb,
                 float beta, void *C, gl_dtype ctype, int ldc);

    /* y = x + r, count act elements (y may alias x or r). */
    void (*add)(gl_dev *d, void *y, const void *x, const void *r, size_t count);

    /* RMSNorm over rows of h: y = x / rms(x) * w, rms = sqrt(mean(x^2)+eps).
     * rstd[i] = 1/rms of row i (f32, kept for backward). */
    void (*rmsnorm_fwd)(gl_dev *d, void *y, float *rstd, const void *x,
                        const void *w, int n, int h, float eps);
    /* dx (+)= d/dx, dw += d/dw (f32).  accumulate_dx selects += for dx, so
     * the residual stream's gradient is summed in the same pass. */
    void (*rmsnorm_bwd)(gl_dev *d, void *dx, float *dw, const void *dy,
                        const void *x, const void *w, const float *rstd,
                        int n, int h, int accumulate_dx);

    /* Rotary embedding, rotate-half convention (pairs i and i + D/2), in
     * place on x viewed as [B, S, H, D] with row stride `ld` elements
     * between consecutive tokens (heads contiguous within a token).
     * cos/sin are f32 tables [S, D/2]; bwd applies the inverse rotation. */
    void (*rope_fwd)(gl_dev *d, void *x, int ld, int B, int S, int H, int D,
                     const float *cos, const float *sin);
    void (*rope_bwd)(gl_dev *d, void *x, int ld, int B, int S, int H, int D,
                     const float *cos, const float *sin);

    /* Causal grouped-query attention.  q is [B, S, Hq, D], k and v
     * [B, S, Hkv, D], each token's heads contiguous, token row strides
     * ldq/ldk/ldv (so they may be views into one fused QKV buffer); o is
     * [B, S, Hq, D] with stride ldo.  Query head j uses kv head
     * j / (Hq/Hkv).  lse [B, Hq, S] (f32) is the log-sum-exp of each
     * softmax row, kept for backward.  scale is usually 1/sqrt(D).
     * dp (NULL or p = 0: none) drops probabilities after the softmax:
     *   P = softmax(scale Q K^T + causal mask),  O = P' V,
     *   P' = M P / (1 - p), M the 0/1 mask of gl_attn_dropout;
     * lse stays that of the undropped softmax. */
    void (*attn_fwd)(gl_dev *d, void *o, int ldo, float *lse,
                     const void *q, int ldq, const void *k, int ldk,
                     const void *v, int ldv, int B, int S, int Hq, int Hkv,
                     int D, float scale, const gl_attn_dropout *dp);
    /* dq, dk, dv (overwritten) with the same layouts and strides as q, k,
     * v; they may be views into one fused buffer.  dp must be the
     * forward's (the same key redraws the same mask). */
    void (*attn_bwd)(gl_dev *d, void *dq, void *dk, void *dv, int ldg,
                     const void *dout, int lddo, const void *o, int ldo,
                     const float *lse, const void *q, int ldq,
                     const void *k, int ldk, const void *v, int ldv,
                     int B, int S, int Hq, int Hkv, int D, float scale,
                     const gl_attn_dropout *dp);

    /* SwiGLU.  gu is [n, 2f] with each row [gate (f) | up (f)];
     * y[n, f] = silu(gate) * up.  bwd writes dgu [n, 2f]. */
    void (*swiglu_fwd)(gl_dev *d, void *y, const void *gu, int n, int f);
    void (*swiglu_bwd)(gl_dev *d, void *dgu, const void *dy, const void *gu,
                       int n, int f);

    /* Vocab-parallel embedding.  table is this rank's rows
     * [vocab_start, vocab_start + vl) of the (padded) vocabulary, [vl, h].
     * fwd writes y[n, h] (zero rows for ids outside the shard, so a sum
     * over TP gives the full lookup); bwd accumulates into dtable (f32). */
    void (*embed_fwd)(gl_dev *d, void *y, const void *table, const int32_t *ids,
                      int n, int h, long vocab_start, int vl);
    void (*embed_bwd)(gl_dev *d, float *dtable, const void *dy,
                      const int32_t *ids, int n, int h, long vocab_start, int vl);

    /* Vocab-parallel cross-entropy in three steps around two TP
     * all-reduces, never storing probabilities:
     *   1. ce_max:  rowmax[i] = max over valid local columns of logits
     *               (all-reduce MAX over TP);
     *   2. ce_sum:  stats[2i] = sum_j exp(logit_ij - rowmax_i) over valid
     *               local columns, stats[2i+1] = the target's logit if the
     *               target is in this shard, else 0 (all-reduce SUM);
     *   3. ce_bwd:  loss_i = log(stats[2i]) + rowmax_i - stats[2i+1]
     *               written to loss[i] (when loss != NULL), and logits
     *               replaced in place by their gradient
     *               (softmax - onehot(target)) * gscale[i].
     * logits is [n, vl] with row stride ld (act), covering vocabulary ids
     * [vocab_start, vocab_start + vl); only the first `valid` columns are
     * real tokens (the rest pad the vocabulary: never predicted, gradient
     * 0).  gscale (f32, per token) carries the loss mask and the 1/tokens
     * averaging; NULL skips the gradient. */
    void (*ce_max)(gl_dev *d, float *rowmax, const void *logits, int ld,
                   int n, int valid);
    void (*ce_sum)(gl_dev *d, float *stats, const void *logits, int ld,
                   const int32_t *targets, const float *rowmax, int n,
                   int valid, long vocab_start);
    void (*ce_bwd)(gl_dev *d, float *loss, void *logits, int ld,
                   const int32_t *targets, const float *rowmax,
                   const float *stats, const float *gscale, int n, int vl,
                   int valid, long vocab_start);

    /* f32 helpers on fp32 buffers. */
    void (*scale_f32)(gl_dev *d, float *x, float s, size_t count);
    /* out[0] += sum of x^2 (f32 device scalar, accumulated in double on
     * the CPU and in fp32 tree order on GPUs). */
    void (*sumsq_f32)(gl_dev *d, float *out, const float *x, size_t count);
    /* out[0] = 1 if any element of x is NaN or Inf, else unchanged. */
    void (*nonfinite_f32)(gl_dev *d, float *out, const float *x, size_t count);
    /* out[0] += sum of x * w over count f32 elements (loss averaging). */
    void (*dot_f32)(gl_dev *d, float *out, const float *x, const float *w,
                    size_t count);

    /* Multi-tensor AdamW over nseg segments, writing the act copy too. */
    void (*adamw)(gl_dev *d, const gl_adamw_seg *segs, int nseg,
                  const gl_adamw_hyper *hp);

    /* Bytes of device memory in use / peak since start, and the device's
     * total memory (physical RAM on the CPU); 0 where unknown. */
    void (*mem_info)(gl_dev *d, size_t *in_use, size_t *peak, size_t *total);

    void (*close)(gl_dev *d);

    /* ---- added with the host-device pipeline (keep new ops below) ---- */

    /* Host memory that uploads and downloads can use without waiting:
     * page-locked on CUDA (cudaMallocHost), so upload() from it returns at
     * once and the copy runs on the stream in order with the kernels; the
     * caller must not rewrite it until the stream has passed the copy (a
     * sync, a download, or later work that it waited for).  Plain heap
     * memory on the CPU.  Zeroed; dies on failure. */
    void *(*alloc_host)(gl_dev *d, size_t bytes);
    void (*free_host)(gl_dev *d, void *p);

    /* The communication stream (d->comm_stream): where bucketed gradient
     * reductions run beside the compute stream.
     *   comm_wait_compute: work enqueued on the comm stream from now on
     *       starts after everything enqueued so far on the compute stream;
     *   compute_wait_comm: work enqueued on the compute stream from now on
     *       starts after everything enqueued so far on the comm stream.
     * Neither blocks the host.  No-ops on the CPU, where every call
     * completes before it returns. */
    void (*comm_wait_compute)(gl_dev *d);
    void (*compute_wait_comm)(gl_dev *d);
    /* The same pair for the point-to-point stream (d->p2p_stream), where
     * the pipeline's activation and gradient exchanges run, so that they
     * neither hold up the compute stream nor queue behind the gradient
     * buckets of the communication stream. */
    void (*p2p_wait_compute)(gl_dev *d);
    void (*compute_wait_p2p)(gl_dev *d);

    /* ---- FP8 with per-tensor scales (Megatron's "delayed" and
     * "tensorwise" recipes) ----
     *
     * An FP8 tensor is its bytes (uint8_t, E4M3 or E5M2 exactly as fp8.h
     * defines them) and one f32 scale: q = fp8(x * scale), and q stands for
     * decode(q) * scale_inv with scale_inv = 1 / scale.  Scales, their
     * inverses and amaxes are f32 scalars in device memory that no op reads
     * on the host, so FP8 adds no host synchronisation to an iteration.
     * The CPU back end computes the same bits as the CUDA back end
     * (quantization, amaxes, scales) and the same products up to fp32
     * summation order.
     *
     * Layout of the products.  Hopper's FP8 tensor cores read both
     * operands along k (cuBLASLt's "TN": in its column-major terms A
     * transposed, B not), so gemm_fp8 has one form, C = A B^T with A [m, k]
     * and B [n, k] row-major.  The three products of a linear layer
     * Y = X W^T (X [t, in], W [out, in]) take these operands:
     *     forward  Y [t, out]   = X W^T      A = X    [t, in]    B = W   [out, in]
     *     dgrad    dX[t, in]    = dY W       A = dY   [t, out]   B = W^T [in, out]
     *     wgrad    dW[out, in] += dY^T X     A = dY^T [out, t]   B = X^T [in, t]
     * so X, W and dY are each quantized once into the orientations their
     * products need, fp8_quantize's q and qt, in the same pass that takes
     * their amax.  Every size (m, n, k: tokens, in, out) and ldc must be a
     * multiple of 16 (16-byte rows), the buffers 16-byte aligned
     * (allocations are), and E5M2 never meets E5M2 (the hardware has no
     * such product: gradients are E5M2 and the other operand E4M3).  Both
     * back ends stop the job otherwise (gl_fp8_gemm_check).
     *
     * One step of each recipe, for a tensor x with scale s:
     *   delayed:    fp8_quantize(x, s) folds max|x| into row 0 of the amax
     *               history (amax = hist + t); after the step (and the
     *               history's row 0 all-reduced with MAX over the groups
     *               that shard the tensors), fp8_scale_delayed rolls the
     *               history and sets the scales of the next step.
     *   tensorwise: fp8_amax_scale(x) (or, for a TP slice, its amax
     *               all-reduced with MAX, then fp8_scale_current), then
     *               fp8_quantize(x, s) with amax NULL: two passes over x,
     *               the scale from x itself.
     */

    /* q[r, c] = fp8(x[r, c] * scale[0]) (q [rows, cols], row stride cols)
     * and qt[c, r] = the same byte (qt [cols, rows], the transpose, row
     * stride rows), for x [rows, cols] in act dtype, contiguous; either of
     * q and qt may be NULL.  fp8() is gl_fp8_encode() of the f32 product:
     * round to nearest even, saturation to the largest finite value, NaN
     * to 0x7F.  amax (NULL: not taken): amax[0] = gl_fp8_amax_fold(amax[0],
     * max |x|), so calls on several micro-batches accumulate, and a NaN in
     * x makes it NaN; amax[0] must hold 0 or what such calls left there.
     * One pass over x. */
    void (*fp8_quantize)(gl_dev *d, uint8_t *q, uint8_t *qt, float *amax,
                         const void *x, int rows, int cols, const float *scale,
                         gl_fp8_format f);
    /* fp8_quantize of [rows, cols] whose first xrows rows (0 <= xrows <=
     * rows) are x's and the others zero, without reading past x's xrows
     * rows: an expert's rows padded to what the FP8 products take, with
     * no padded copy of them.  The bytes and amax of fp8_quantize on x
     * copied into a buffer of rows rows, the rest zeroed. */
    void (*fp8_quantize_pad)(gl_dev *d, uint8_t *q, uint8_t *qt, float *amax,
                             const void *x, int xrows, int rows, int cols,
                             const float *scale, gl_fp8_format f);

    /* amax[0] = gl_fp8_amax_fold(amax[0], max |x|) over count act
     * elements: the amax alone, for current scaling. */
    void (*fp8_amax)(gl_dev *d, float *amax, const void *x, size_t count);

    /* Current scaling of one tensor, amax and scale in one op: amax[0] =
     * max |x| over count act elements (written, not folded: amax[0] needs
     * no zeroing first; NaN when x holds one), then, unless scale is
     * NULL, scale[0] and scale_inv[0] from that amax as fp8_scale_current
     * sets them for one tensor.  The same bits as zero + fp8_amax +
     * fp8_scale_current, in one launch on CUDA (the last block to finish
     * computes the scale) where those took three.  With scale NULL, the
     * amax alone, for a TP all-reduce before fp8_scale_current. */
    void (*fp8_amax_scale)(gl_dev *d, float *amax, float *scale,
                           float *scale_inv, const void *x, size_t count,
                           gl_fp8_format f);

    /* Delayed scaling of n tensors in one call: hist [len, n], and tensor
     * t's scale and scale_inv at scale[t * stride] and
     * scale_inv[t * stride] (stride >= 1; 1: packed arrays [n]; the model
     * uses 4 so that every scale_inv is 16-byte aligned, as gemm_fp8 on
     * CUDA wants them), as gl_fp8_scale_delayed() in fp8.h says (TE's
     * formulas: scale = fp8_max / 2^margin / amax, amax the max of the
     * history or its newest entry, the old scale kept when that amax is 0
     * or not finite; the history rolled, row 0 zeroed for the next step).
     * One format per call (the forward tensors' and the gradients' apart
     * under "hybrid"). */
    void (*fp8_scale_delayed)(gl_dev *d, float *hist, float *scale,
                              float *scale_inv, int stride, int n, int len,
                              gl_fp8_amax_algo algo, int margin,
                              gl_fp8_format f);

    /* Current scaling of n tensors: scale[t s] = fp8_max / amax[t] (1
     * when amax[t] is 0 or not finite), scale_inv[t s] = 1 / scale[t s]
     * with s = stride (as above); see gl_fp8_scale_current(). */
    void (*fp8_scale_current)(gl_dev *d, const float *amax, float *scale,
                              float *scale_inv, int stride, int n,
                              gl_fp8_format f);

    /* C[m, n] = alpha (a_scale_inv[0] A)(b_scale_inv[0] B)^T + beta C with
     * A [m, k] in format fa and B [n, k] in format fb, both row-major and
     * contiguous (the layout above), C in ctype (act, or GL_DT_F32 for
     * weight gradients accumulated in fp32 with beta = 1) with row stride
     * ldc.  The scale_inv pointers are device f32 scalars; on CUDA
     * 16-byte aligned ones are read in place, others are first copied by
     * a one-thread kernel (cuBLASLt wants them aligned: keep them aligned,
     * as the model's stride-4 scale tables do, and that launch is never
     * made).  The products of FP8 values are exact and summed in fp32, then
     * scaled by alpha a_scale_inv b_scale_inv.  fast_accum lets the CUDA
     * back end use Hopper's fast accumulation
     * (CUBLASLT_MATMUL_DESC_FAST_ACCUM: partial sums kept in the tensor
     * core's reduced-precision accumulator, never promoted to fp32 along
     * k; faster, less accurate, for forward products only, as Megatron
     * does); the CPU ignores it. */
    void (*gemm_fp8)(gl_dev *d, int m, int n, int k, float alpha,
                     const uint8_t *A, gl_fp8_format fa,
                     const float *a_scale_inv, const uint8_t *B,
                     gl_fp8_format fb, const float *b_scale_inv, float beta,
                     void *C, gl_dtype ctype, int ldc, int fast_accum);

    /* gemm_fp8 for a product one of whose dimensions changes from call
     * to call, the experts' (their rows follow the routing): m, or k
     * when ragged_k.  The same sum as gemm_fp8's; the CUDA back end
     * plans such products per power-of-two bucket of the open dimension
     * (as its bf16 expert products), so that the host does not ask
     * cuBLASLt's heuristic anew at nearly every call. */
    void (*gemm_fp8_ragged)(gl_dev *d, int ragged_k, int m, int n, int k,
                            float alpha, const uint8_t *A, gl_fp8_format fa,
                            const float *a_scale_inv, const uint8_t *B,
                            gl_fp8_format fb, const float *b_scale_inv,
                            float beta, void *C, gl_dtype ctype, int ldc,
                            int fast_accum);

    /* ---- Megatron's GPT model (--normalization LayerNorm, --no-swiglu
     * with GeLU, biases, --position-embedding-type learned_absolute,
     * dropout) ----
     *
     * Parameters (w, b, bias, pos) are act buffers, the compute copies of
     * the weights; their gradients are f32 and accumulated (+=) in an
     * order fixed by the shapes, never by timing: the same bits every run.
     * Math is fp32 (double for the CPU's row sums). */

    /* LayerNorm over rows of h:
     *   mean = mean(x),  var = mean((x - mean)^2)  (biased),
     *   rstd = 1 / sqrt(var + eps),  y = (x - mean) rstd w' + b,
     * w' = w, or 1 + w with one_plus (--apply-layernorm-1p, where the
     * stored weight is w' - 1).  mean[i], rstd[i] (f32) are kept for the
     * backward.  y may not alias x. */
    void (*layernorm_fwd)(gl_dev *d, void *y, float *mean, float *rstd,
                          const void *x, const void *w, const void *b,
                          int n, int h, float eps, int one_plus);
    /* dx (+)= d/dx (accumulate_dx as rmsnorm_bwd's), dw += sum over rows
     * of dy xhat, db += sum over rows of dy (f32), xhat = (x - mean) rstd. */
    void (*layernorm_bwd)(gl_dev *d, void *dx, float *dw, float *db,
                          const void *dy, const void *x, const void *w,
                          const float *mean, const float *rstd, int n, int h,
                          int one_plus, int accumulate_dx);

    /* GeLU, tanh approximation (Megatron's bias_gelu), of x + bias over
     * [n, f] (bias [f], NULL: none):
     *   y = 0.5 u (1 + tanh(0.79788456 u (1 + 0.044715 u^2))),  u = x + bias.
     * y may alias x. */
    void (*gelu_fwd)(gl_dev *d, void *y, const void *x, const void *bias,
                     int n, int f);
    /* dx = dy gelu'(x + bias) (dx may alias dy or x), and, when dbias is
     * not NULL, dbias += the column sums of dx as stored (f32). */
    void (*gelu_bwd)(gl_dev *d, void *dx, float *dbias, const void *dy,
                     const void *x, const void *bias, int n, int f);

    /* The bias of a linear layer without GeLU, on y [n, w] in place:
     * y[i, j] += bias[j]; and its gradient, dbias[j] += sum_i dy[i, j]
     * (f32). */
    void (*bias_add)(gl_dev *d, void *y, const void *bias, int n, int w);
    void (*bias_grad)(gl_dev *d, float *dbias, const void *dy, int n, int w);

    /* Dropout of x [n, w] into y (may alias x): y = m x / (1 - p), m the
     * mask of dp (see gl_dropout).  The map is diagonal, so the backward
     * is the same call on dy with the same dp: the mask is drawn again,
     * never stored. */
    void (*dropout)(gl_dev *d, void *y, const void *x, int n, int w,
                    const gl_dropout *dp);
    /* Megatron's bias-dropout-add, the end of each sublayer:
     *   out = residual + dropout(y + bias)
     * over [n, w] (bias NULL: none; dp NULL: no dropout, as in
     * evaluation).  out may alias residual or y.  Backward: the residual's
     * gradient is dout itself, y's is dropout(dout) (the call above) and
     * the bias's bias_grad of that. */
    void (*bias_dropout_add)(gl_dev *d, void *out, const void *residual,
                             const void *y, const void *bias, int n, int w,
                             const gl_dropout *dp);

    /* Learned absolute position embedding: y[i] += pos[positions[i]] for
     * the n rows of y [n, h], pos [max_pos, h], positions (i32, device
     * memory) in [0, max_pos).  The backward is embed_bwd(dpos, dy,
     * positions, n, h, 0, max_pos). */
    void (*pos_embed_fwd)(gl_dev *d, void *y, const void *pos,
                          const int32_t *positions, int n, int h,
                          int max_pos);

    /* ---- Mixture of experts (issue 13), Megatron's MoE layer with its
     * router options ----
     *
     * One MoE layer of n tokens x [n, h] (act), E experts, top-k:
     *   logits [n, E] = x Wr^T          gemm (the model's choice of act
     *                                   or f32 output), then to_f32:
     *                                   the router's maths is fp32, as
     *                                   Megatron's (its logits are cast
     *                                   to fp32 for the score function
     *                                   whatever --moe-router-dtype; it
     *                                   casts the weights back to the
     *                                   logits' dtype, gridlm keeps them
     *                                   fp32)
     *   moe_route                       -> gl_moe_map: experts, weights,
     *                                   rows, per-expert offsets
     *   moe_permute  x -> xp [rows, h]  grouped by expert
     *   moe_gemm x 2 xp -> gu [rows, 2f]    gate and up halves, each
     *                                       from its weights [E, f, h]
     *   swiglu_fwd   gu -> a [rows, f]      the existing op, on the rows
     *   moe_gemm     a -> yp [rows, h]      (down weights [E, h, f])
     *   moe_unpermute yp -> out [n, h]  out[t] = sum_j w[t,j] yp[row(t,j)]
     * and backward: moe_unpermute_bwd (dyp, dweight), moe_gemm_dgrad /
     * moe_gemm_wgrad, swiglu_bwd, moe_permute_bwd (dx), moe_route_bwd
     * (dweight -> dlogits), moe_aux_loss / moe_z_loss (+= into dlogits),
     * then gemm for dx += dlogits Wr and dWr += dlogits^T x.
     *
     * Buffers.  x, xp, gu, a, yp, out, their gradients and the stacked
     * expert weights are act; logits, dlogits, weights, dweights, counts,
     * losses and the expert bias are f32; the map's indices are i32.
     * "+=" marks accumulated outputs; every other output is overwritten.
     * Permuted buffers have map->rows_max rows; rows past offsets[E] are
     * never read and are zeroed where an op writes a permuted buffer, so
     * whole-buffer ops (swiglu on rows_max rows) stay finite; the model
     * may instead pass offsets_host[E] rows to them.
     *
     * Determinism.  Every output is a function of the inputs alone: each
     * sum runs in an order fixed by the shapes and the map (slot order j
     * = 0..k-1 for a token's sums, increasing token order for an expert's,
     * fp32 on CUDA, double on the CPU), never by timing or atomics; ties
     * are broken by the lower index everywhere (expert, then token).
     *
     * Host synchronisation.  moe_route fills map->offsets_host when it is
     * not NULL: on CUDA, the one wait of the host for the GPU of a MoE
     * layer (the grouped products need the per-expert row counts on the
     * host; the backward reuses the same host copy).  No other moe_* op
     * waits for the GPU.
     *
     * Communication is the model's: these ops compute the local part
     * (the tokens of this call); counts that Megatron sums over TP/CP/DP
     * ranks are summed by the model between moe_aux_counts and
     * moe_aux_loss, and before moe_bias_update.
     *
     * Not here: FP8 forms of the grouped products, group-limited routing
     * (--moe-router-num-groups), sinkhorn, expert parallelism. */

    /* Routing of n tokens (map->n, k = cfg->k, E = cfg->E, all three
     * equal in map and cfg) from logits f32 [n, E] and, with sigmoid,
     * the expert bias f32 [E] (--moe-router-enable-expert-bias; NULL:
     * none; bias with softmax dies, as Megatron refuses it).  Per token,
     * in fp32 (double on the CPU):
     *   softmax, pre_softmax: p = softmax(logits) over the E experts;
     *       select the top k of p; w_j = p[e_j], not renormalised
     *       (Qwen3-MoE with norm_topk_prob false)
     *   softmax (Megatron's default): select the top k of the logits;
     *       w = softmax over the k selected logits         (= softmax over
     *       all, top k, renormalised over the k: Mixtral, and Qwen3-MoE
     *       with norm_topk_prob true)
     *   sigmoid: s = sigmoid(logits); select the top k of s + bias (the
     *       bias selects only); w_j = s[e_j] / (sum_i s[e_i] + 1e-20)
     *       when k > 1, w = s[e_0] when k = 1            (DeepSeek-V3)
     * then w *= scaling when scaling != 0.  Selection order: decreasing
     * score, equal scores by lower expert index; slot j holds the j-th.
     * Capacity (cfg->capacity = c > 0, c' = min(c, n)), per expert
     * (Megatron's apply_router_token_dropping on this call's tokens):
     *   probs:    the expert keeps the c' routed slots of highest weight
     *             (equal weights: lower token first);
     *   position: the c' routed slots of the lowest tokens;
     * the other slots are dropped (weight 0, row -1, not dispatched).  With
     * pad, an expert with fewer than c' kept slots gets padding rows, the
     * lowest tokens not routed to it, until it has c' rows: they are
     * dispatched with weight 0 (in no slot: rows[] never names them) and
     * contribute nothing to out or to any gradient.
     * Outputs: every array of map (see gl_moe_map); tokens_per_expert f32
     * [E] += the rows of each expert (Megatron's routing_map.sum(0) after
     * dropping and padding: the counts of the expert-bias update and of
     * the log; NULL: not wanted); dropped f32 [1] += the number of
     * dropped slots (NULL: not wanted).  Dies (gl_moe_route_check) on a
     * bad cfg, or when map->rows_max < gl_moe_rows_max(n, cfg). */
    void (*moe_route)(gl_dev *d, gl_moe_map *map, const float *logits,
                      const float *bias, const gl_moe_route_cfg *cfg,
                      float *tokens_per_expert, float *dropped);

    /* dlogits f32 [n, E] (overwritten) from dweight f32 [n, k], the
     * gradient of the loss with respect to map->weight, through the
     * forward's weight formula with the selection held fixed (a piecewise
     * constant choice: no gradient).  Dropped slots (rows -1) are constant
     * 0 and their dweight is ignored.  With s the selected values and
     * g_j = scaling dweight_j (scaling 1 when 0):
     *   softmax:      dl[e_j] = w'_j (g_j - sum_i w'_i g_i), w' the
     *                 softmax over the k, others 0
     *   pre_softmax:  dl_e = p_e (G_e - sum_j p[e_j] g_j), G_e = g_j for
     *                 e = e_j, else 0
     *   sigmoid:      ds_j = g_j / S - sum_i g_i s_i / S^2 (S = sum s +
     *                 1e-20; ds_j = g_j when k = 1), dl[e_j] = ds_j s_j
     *                 (1 - s_j), others 0.
     * logits, map and cfg are the forward's. */
    void (*moe_route_bwd)(gl_dev *d, float *dlogits, const float *dweight,
                          const float *logits, const gl_moe_map *map,
                          const gl_moe_route_cfg *cfg);

    /* xp[r] = x[row_tok[r]] for the rows r < offsets[E] of map (xp
     * [rows_max, h], x [n, h]), rows past them zeroed. */
    void (*moe_permute)(gl_dev *d, void *xp, const void *x, int h,
                        const gl_moe_map *map);
    /* dx[t] (+)= sum over j = 0..k-1 with rows[t, j] >= 0 of
     * dxp[rows[t, j]], summed in that order (accumulate_dx: += for the
     * residual-stream sum, as rmsnorm_bwd's).  Padding rows are no slot's:
     * their gradient, zero when dyp came from moe_unpermute_bwd, is not
     * gathered. */
    void (*moe_permute_bwd)(gl_dev *d, void *dx, const void *dxp, int h,
                            const gl_moe_map *map, int accumulate_dx);

    /* out[t] = sum over j = 0..k-1 with rows[t, j] >= 0 of
     * weight[t, j] yp[rows[t, j]], in that order (out [n, h]; a token
     * whose slots are all dropped gets 0).  Linear in yp: under tensor
     * parallelism yp may be a partial sum over ranks, and so is out. */
    void (*moe_unpermute)(gl_dev *d, void *out, const void *yp, int h,
                          const gl_moe_map *map);
    /* The backward of moe_unpermute from dout [n, h]:
     *   dyp[r] = weight of r's slot times dout[row_tok[r]] for r <
     *            offsets[E] (0 for padding rows; rows past them zeroed);
     *   dweight[t, j] = <dout[t], yp[rows[t, j]]> (f32 [n, k]; 0 for a
     *            dropped slot), summed in fp32 (double on the CPU).
     * When yp is a partial sum over TP ranks, so is dweight: the model
     * all-reduces it before moe_route_bwd. */
    void (*moe_unpermute_bwd)(gl_dev *d, void *dyp, float *dweight,
                              const void *dout, const void *yp, int h,
                              const gl_moe_map *map);

    /* Grouped products, all E experts in one call, expert e on its rows
     * [offsets[e], offsets[e+1]) of map (experts without rows are skipped),
     * with the stacked weights W [E, out, in] (act, expert-major, each
     * [out, in] as a linear layer's, contiguous):
     *   moe_gemm:       Y[r] = X[r] W_e^T      X [rows, in] -> Y [rows, out]
     *   moe_gemm_dgrad: dX[r] (+)= dY[r] W_e   dY [rows, out] -> dX [rows, in]
     *   moe_gemm_wgrad: dW_e (+)= dY_e^T X_e   dW f32 [E, out, in], as
     *                   gemm's weight gradients (fp32 accumulation): added
     *                   with accumulate_dw, else written (beta 0: what dW
     *                   held is not read), an expert without rows then
     *                   getting zeros
     * X and dX are contiguous ([rows, in]); Y and dY, the "out" side, have
     * row stride ldY >= out (elements), so that a product may fill or read
     * a column block of a wider buffer: the gate and up halves of SwiGLU's
     * gu [rows, 2f] from the separate gate and up weights, ldY = 2f.  Y's
     * out columns are overwritten on every row < offsets[E] and zeroed on
     * the rows past it; dX likewise, or with accumulate_dx added to on the
     * rows < offsets[E] and left alone past them (the second of the gate
     * and up data gradients).  Tensor parallelism shards in or out of
     * every expert alike. */
    void (*moe_gemm)(gl_dev *d, void *Y, int ldY, const void *X,
                     const void *W, int in, int out, const gl_moe_map *map);
    void (*moe_gemm_dgrad)(gl_dev *d, void *dX, const void *dY, int ldY,
                           const void *W, int in, int out,
                           const gl_moe_map *map, int accumulate_dx);
    void (*moe_gemm_wgrad)(gl_dev *d, float *dW, const void *dY, int ldY,
                           const void *X, int in, int out,
                           const gl_moe_map *map, int accumulate_dw);

    /* Auxiliary load-balancing losses, Megatron's switch loss
     *   aux = scale sum_t sum_e sc[t, e] counts[g(t), e]
     * in two steps around the model's all-reduce of the counts.  sc are
     * the scores over all E experts: softmax(logits), or with sigmoid
     * s_e / (sum_i s_i + 1e-20), s = sigmoid(logits) (the bias plays no
     * part, nor the capacity); counts[g, e] the number of tokens of group g
     * whose top k of sc holds e (ties: lower expert).  A token's group is
     * g(t) = (row0 + t) / seq_len, t the call's row, row0 the global row
     * of its first token in [B, S] order: its sequence for seq_aux_loss
     * (seq_len = S, G = B groups); seq_len = 0 puts every token in group 0
     * (aux_loss, global_aux_loss; G = 1).  counts is f32 [G, E].
     * Megatron's three losses are then (T the tokens of the micro-batch,
     * n_loc the call's tokens, |grp| a group's ranks):
     *   aux_loss:        counts summed over TP x CP; scale = coeff E /
     *                    (k T^2), T = n_loc |TP x CP|
     *   seq_aux_loss:    the same per sequence, divided by the B
     *                    sequences: scale = coeff E / (k S^2 B)
     *   global_aux_loss: counts summed over TP x CP x DP and over the
     *                    micro-batches of the step so far, divided by
     *                    their number; T = n_loc |TP x CP x DP|
     * each rank's loss its local share (the logged loss is their sum). */
    /* counts f32 [G, E] += the local top-k counts of the call's tokens. */
    void (*moe_aux_counts)(gl_dev *d, float *counts, const float *logits,
                           int n, long row0, int seq_len,
                           const gl_moe_route_cfg *cfg);
    /* loss f32 [1] += scale sum_t sum_e sc[t, e] counts[g(t), e] (NULL:
     * skipped), and dlogits f32 [n, E] += gscale times its gradient with
     * respect to logits (NULL: skipped; gscale = scale times the loss's
     * backward scale): with c = counts[g(t)] and f = sum_e sc_e c_e,
     *   softmax: dl_e = sc_e (c_e - f)
     *   sigmoid: dl_e = (c_e - f) / (sum_i s_i + 1e-20) s_e (1 - s_e). */
    void (*moe_aux_loss)(gl_dev *d, float *loss, float *dlogits,
                         const float *logits, const float *counts, int n,
                         long row0, int seq_len, float scale, float gscale,
                         const gl_moe_route_cfg *cfg);

    /* Router z-loss (ST-MoE; Megatron's z_loss_func): with z_t =
     * logsumexp(logits[t]) over the E experts,
     *   loss f32 [1] += scale sum_t z_t^2            (NULL: skipped)
     *   dlogits[t, e] += gscale 2 z_t softmax(logits[t])_e (NULL: skipped)
     * Megatron's mean over tokens and --moe-z-loss-coeff divided by the
     * TP x CP size: scale = coeff / (n |TP x CP|). */
    void (*moe_z_loss)(gl_dev *d, float *loss, float *dlogits,
                       const float *logits, int n, int E, float scale,
                       float gscale);

    /* Aux-loss-free balancing (DeepSeek-V3, Megatron's
     * get_updated_expert_bias), after the optimizer step: with counts f32
     * [E] the step's tokens per expert (moe_route's tokens_per_expert,
     * summed over the micro-batches and all-reduced over TP x CP x DP by
     * the model) and m their mean,
     *   bias_e += rate sign(m - counts_e)      (sign 0 at 0). */
    void (*moe_bias_update)(gl_dev *d, float *bias, const float *counts,
                            int E, float rate);
    /* ---- context parallelism: attention of a block of queries against a
     * block of keys, the merge of blocks, and the block backward (ring
     * attention; keep CP ops below) ----
     *
     * Ring attention computes causal attention of a rank's queries over
     * the whole sequence as CP blocks, one per K/V chunk that travels
     * round the ring.  Each block gives an output and its log-sum-exp; the
     * merge folds it into the running pair; the final (o, lse) equal
     * attn_fwd's on the whole sequence.  The backward recomputes every
     * block's probabilities from the FINAL lse (flash-attention style), so
     * the blocks' gradients simply add.  Shapes, GQA and strides are
     * attn_fwd's, with Sq query and Sk key rows; q, k, v, dout are act,
     * and the running output, the lse and every gradient accumulator are
     * f32 (summed over CP blocks without act rounding in between; the
     * model converts them once, with convert_2d).
     *
     * Attention dropout (dp NULL or p = 0: none) as attn_fwd's, keyed by
     * positions: the probability of query row i and key row u of sample
     * b, query head h, is element (b, h, qpos(i), kpos(u)) of
     * gl_attn_dropout's full tensor with S = dp->seq, so the blocks of a
     * sequence draw the mask that attn_fwd on the whole draws.  The lse
     * stays that of the undropped softmax and each kept probability is
     * scaled by 1 / (1 - p) before it weighs v, so the merge of dropped
     * blocks is the dropped whole; the backward takes the same dp. */

    /* One block: for query row i (position qpos(i)) and key row u
     * (position kpos(u)) allowed by mask (gl_attn_mask),
     *   s_iu = scale q_i . k_u,   lse_i = log sum_u exp(s_iu),
     *   o_i  = sum_u exp(s_iu - lse_i) v_u,
     * o f32 [B, Sq, Hq, D] (row stride ldo, f32 elements, overwritten),
     * lse f32 [B, Hq, Sq] (overwritten).  A row with no allowed key (a
     * causal block whose keys all lie after the query) gets o_i = 0 and
     * lse_i = -inf; a block may be entirely so.  Query head j reads K/V
     * head j / (Hq / Hkv).  With dropout o_i = sum_u M'_iu exp(s_iu -
     * lse_i) v_u, M'_iu the keep factor (0 or 1 / (1 - p)). */
    void (*attn_block_fwd)(gl_dev *d, float *o, int ldo, float *lse,
                           const void *q, int ldq, const void *k, int ldk,
                           const void *v, int ldv, int B, int Sq, int Sk,
                           int Hq, int Hkv, int D, float scale,
                           const gl_attn_pos *qpos, const gl_attn_pos *kpos,
                           gl_attn_mask mask, const gl_attn_dropout *dp);

    /* Fold a block (o_b, lse_b) into the running (o, lse), all f32, o and
     * o_b contiguous [B, S, Hq, D], lse and lse_b [B, Hq, S]:
     *   lse' = log(exp lse + exp lse_b),
     *   o'   = o exp(lse - lse') + o_b exp(lse_b - lse'),
     * where a term whose lse is -inf contributes 0 (both -inf: o' = 0,
     * lse' = -inf; never a NaN).  first != 0 starts the pair: o = o_b,
     * lse = lse_b (o and lse are then not read). */
    void (*attn_merge)(gl_dev *d, float *o, float *lse, const float *o_b,
                       const float *lse_b, int B, int S, int Hq, int D,
                       int first);

    /* delta [B, Hq, S] (f32, overwritten) = the row sums of dout * o over
     * each head's D elements, o the FINAL attention output (act, as the
     * next layer read it): the D_t of attn_bwd, computed once for all
     * blocks of the backward. */
    void (*attn_delta)(gl_dev *d, float *delta, const void *dout, int lddo,
                       const void *o, int ldo, int B, int S, int Hq, int D);

    /* The backward of one block, accumulating (+=) into f32 dq [B, Sq,
     * Hq, D] (row stride lddq), dk and dv [B, Sk, Hkv, D] (row stride
     * lddkv): with the FINAL lse (the merge's) and delta (attn_delta),
     * for each allowed pair (mask, positions as attn_block_fwd),
     *   P_iu  = exp(scale q_i . k_u - lse_i),   dP_iu = dout_i . v_u,
     *   dS_iu = P_iu (M'_iu dP_iu - delta_i),
     *   dq_i += scale dS_iu k_u,  dk_u += scale dS_iu q_i,
     *   dv_u += M'_iu P_iu dout_i,
     * summed over the query heads of each K/V head, M'_iu dp's keep
     * factor (1 without dropout).  Rows whose lse is -inf add nothing. */
    void (*attn_block_bwd)(gl_dev *d, float *dq, int lddq, float *dk,
                           float *dv, int lddkv, const void *dout, int lddo,
                           const float *lse, const float *delta,
                           const void *q, int ldq, const void *k, int ldk,
                           const void *v, int ldv, int B, int Sq, int Sk,
                           int Hq, int Hkv, int D, float scale,
                           const gl_attn_pos *qpos, const gl_attn_pos *kpos,
                           gl_attn_mask mask, const gl_attn_dropout *dp);

    /* A strided 2-D copy with conversion: dst[r, c] = src[r, c] for
     * rows x cols elements, dst of type dt and src of type st (each
     * d->act or GL_DT_F32), row strides lddst and ldsrc in elements of
     * their own type; no overlap.  Moves K/V out of the fused QKV buffer
     * into the ring's contiguous chunks, the f32 accumulators of the ops
     * above back into act views, and a2a's chunks of [B, S, w] rows in and
     * out of the full sequence [B, Sfull, w].
     *
     * Limits: rows < 2^31; cols, lddst and ldsrc are longs (64 bits), and
     * every index (r ld + c, rows x cols) is taken in 64 bits, so a stride
     * or a whole view may pass 2^31 elements (a2a's Sfull w under long
     * sequences and large context parallelism).  Callers compute their
     * strides in long too. */
    void (*convert_2d)(gl_dev *d, void *dst, gl_dtype dt, long lddst,
                       const void *src, gl_dtype st, long ldsrc, int rows,
                       long cols);
    /* ---- fused GPT-form ops (issue 16's speed work) ----
     *
     * Bias-dropout-add, then LayerNorm of its result, in one call:
     *   out = residual + dropout(y + bias)        (bias_dropout_add)
     *   ln  = LayerNorm(out) w' + b, mean, rstd   (layernorm_fwd of out)
     * over [n, h], with the same results as the two calls one after the
     * other: the norm reads out as stored (in the act dtype), so
     * layernorm_fwd on out later (recomputation) writes the same bits.  A
     * sublayer's end and the next sublayer's norm: a back end may make it
     * one pass over y, bias and residual.  bias and dp may be NULL (as in
     * bias_dropout_add); out may alias residual or y; ln aliases none of
     * the others.  (The CUDA back end runs the two kernels unless
     * GRIDLM_FUSED_NORM=1 asks for the one.) */
    void (*bda_layernorm)(gl_dev *d, void *out, void *ln, float *mean,
                          float *rstd, const void *residual, const void *y,
                          const void *bias, const gl_dropout *dp,
                          const void *w, const void *b, int n, int h,
                          float eps, int one_plus);

    /* The GeLU MLP's first product with its bias and GeLU:
     *   pre = X W^T + bias,  s = gelu(pre)   (gelu_fwd of pre, no bias)
     * X [n, k], W [f, k], bias [f], pre and s [n, f] (act); and the
     * backward through the GeLU from the second product's input gradient:
     *   dpre = (dY Wd) gelu'(pre),  dbias += column sums of dpre (f32)
     * dY [n, k2], Wd [k2, f], dpre [n, f].  The CPU runs gemm, bias_add
     * and gelu_fwd (gemm and gelu_bwd with bias NULL); a GPU runs each as
     * one cuBLASLt product with an epilogue (GELU_AUX_BIAS, DGELU_BGRAD),
     * which takes X W^T + bias and dY Wd to the GeLU in fp32: the same
     * values up to bf16 rounding, one pass over [n, f] fewer each way
     * (the plain kernels where cuBLASLt has no such product). */
    void (*linear_gelu_fwd)(gl_dev *d, void *s, void *pre, const void *X,
                            const void *W, const void *bias, int n, int f,
                            int k);
    void (*linear_dgelu_bwd)(gl_dev *d, void *dpre, float *dbias,
                             const void *dY, const void *Wd, const void *pre,
                             int n, int f, int k2);
    /* ---- FP8 operands out of the kernels that produce them ----
     *
     * Under delayed scaling the scale of an FP8 tensor is known before
     * the kernel that makes the tensor runs, so that kernel can write the
     * tensor quantized at once: one pass where the producer's bf16 write
     * and fp8_quantize's read of it took two.  Each op below is, bit for
     * bit, its plain op followed by
     *     fp8_quantize(o->q, o->qt, o->amax, Y, rows, cols, o->scale, o->f)
     * of its output Y (act values, so on CUDA the bf16-rounded ones), and
     * Y itself may be NULL: then only the FP8 forms are written (o->q,
     * o->qt, o->amax each NULL as fp8_quantize allows).  The back end
     * may fall back to the two ops for shapes or alignments its fused
     * kernels do not take; the bits are the same either way. */

    /* rmsnorm_fwd(y, rstd, x, w, n, h, eps) (rstd always written), then
     * its y [n, h] quantized.  With y NULL the CUDA back end sums the
     * squares as rmsnorm_fwd does into an aligned y. */
    void (*rmsnorm_fwd_fp8)(gl_dev *d, void *y, float *rstd, const void *x,
                            const void *w, int n, int h, float eps,
                            const gl_fp8_out *o);
    /* swiglu_fwd(y, gu, n, f), then y [n, f] quantized. */
    void (*swiglu_fwd_fp8)(gl_dev *d, void *y, const void *gu, int n, int f,
                           const gl_fp8_out *o);
    /* swiglu_bwd(dgu, dy, gu, n, f), then dgu [n, 2 f] quantized (dgu
     * may alias gu, or be NULL). */
    void (*swiglu_bwd_fp8)(gl_dev *d, void *dgu, const void *dy,
                           const void *gu, int n, int f, const gl_fp8_out *o);
    /* ---- QK normalisation (--qk-layernorm: Qwen3's q_norm and k_norm)
     * ---- */

    /* RMSNorm over each head of a [n, heads, D] view: head j of token i
     * is x[i ldx + j D .. + D) and goes to y[i ldy + j D .. + D) (ld in
     * elements: strided views into the fused QKV buffer), with w [D]
     * shared by every head:
     *   rstd = 1 / sqrt(mean(x^2) + eps),   y = x rstd w,
     * rstd[i heads + j] (f32) kept for the backward.  fp32 math, the sum
     * of squares in double on the CPU.  y may alias x (with ldy = ldx). */
    void (*head_rmsnorm_fwd)(gl_dev *d, void *y, int ldy, float *rstd,
                             const void *x, int ldx, const void *w, int n,
                             int heads, int D, float eps);
    /* Its backward (rmsnorm_bwd's formulas on each head): dx (overwritten)
     * and dy share the row stride ldg and may alias; x has the forward's
     * ldx; dw [D] += the sum over every token and head (f32, in an order
     * fixed by the shapes). */
    void (*head_rmsnorm_bwd)(gl_dev *d, void *dx, int ldg, float *dw,
                             const void *dy, const void *x, int ldx,
                             const void *w, const float *rstd, int n,
                             int heads, int D);

    /* ---- context parallelism's ring, its exchanges overlapped (issue
     * 15) ---- */

    /* y += x over count f32 elements, each element on its own (one
     * rounding each, so every back end gives the same bits).  y and x
     * are equal or do not overlap.  The ring adds a block's dK/dV to the
     * accumulator that travelled while the block was computed. */
    void (*add_f32)(gl_dev *d, float *y, const float *x, size_t count);

    /* ---- --fp8-param-gather: FP8 weights that arrive quantized ---- */

    /* qt[c, r] = q[r, c] for the bytes q [rows, cols] (qt [cols, rows]):
     * the data gradient's orientation of a weight whose bytes were
     * gathered rather than quantized here (fp8_quantize writes both
     * orientations in one pass; a gathered weight has only q).  Bytes
     * are copied, not decoded: any FP8 format. */
    void (*fp8_transpose)(gl_dev *d, uint8_t *qt, const uint8_t *q, int rows,
                          int cols);

    /* ---- FP8 with block scales (Megatron's "blockwise" recipe) ----
     *
     * fp8.h's "Block scaling" defines the tiles, their power-of-two
     * scales from each tile's own amax, and the layout of the
     * dequantization factors (sinv, f32, cuBLASLt's layouts for its
     * VEC128 and BLK128x128 modes; gl_fp8_tile_count() floats).  No amax leaves these ops: a
     * tile's scale depends on its 128 (or 128 x 128) values alone, so
     * nothing is reduced over any group.  The layout of the products is
     * gemm_fp8's (C = A B^T, A [m, k], B [n, k], sizes multiples of 16),
     * the operands tiled along k:
     *     forward  A = X    1D          B = W   2D
     *     dgrad    A = dY   1D          B = W^T 2D
     *     wgrad    A = dY^T 1D          B = X^T 1D
     * Both back ends have them (CUDA: fp8.cu, and gemm.cu through
     * cuBLASLt's VEC128 and BLK128x128 scale modes, Hopper only). */

    /* gl_fp8_quantize_tiles() of x [rows, cols] in act dtype (contiguous):
     * q [rows, cols] with q_sinv and / or qt [cols, rows] with qt_sinv
     * (a NULL pair is skipped), 1 x 128 tiles or, with block2d,
     * 128 x 128 blocks.  Bit for bit the host function's bytes and
     * factors (padding entries of the sinv arrays are not written). */
    void (*fp8_quantize_tiles)(gl_dev *d, uint8_t *q, float *q_sinv,
                               uint8_t *qt, float *qt_sinv, const void *x,
                               int rows, int cols, int block2d,
                               gl_fp8_format f);

    /* A weight quantized in 128 x 128 blocks from flat pieces
     * (--fp8-param-gather; fp8.h: gl_fp8_block_amax and the two after
     * it, bit for bit).  x (act dtype) is the piece [e0, e0 + count) of a
     * tensor with cols columns; amax is in q_sinv's layout, folded into
     * with MAX (zero it first). */
    void (*fp8_block_amax)(gl_dev *d, float *amax, const void *x, size_t e0,
                           size_t count, int cols);
    void (*fp8_block_sinv)(gl_dev *d, float *q_sinv, float *qt_sinv,
                           const float *amax, int rows, int cols,
                           gl_fp8_format f);
    void (*fp8_quantize_block_range)(gl_dev *d, uint8_t *q, const void *x,
                                     size_t e0, size_t count, int cols,
                                     const float *amax, gl_fp8_format f);

    /* C[m, n] = alpha sum over k of a(i, k) b(j, k) + beta C, with
     * a(i, k) = gl_fp8_tile_value(A, a_sinv, m, k, i, k, 0) (A 1D) and
     * b(j, k) the same of B, 1D or, with b_block2d, 2D; C as gemm_fp8's
     * (ctype act, or GL_DT_F32 with beta 1 for weight gradients; row
     * stride ldc).  Each product of two FP8 values times their two
     * factors is exact (powers of two), and summed in fp32: the CPU
     * multiplies the dequantized operands, cuBLASLt sums each k-tile in
     * the tensor core and scales the partial sums; the results differ by
     * the order of fp32 summation.  Never fast accumulation. */
    void (*gemm_fp8_tiles)(gl_dev *d, int m, int n, int k, float alpha,
                           const uint8_t *A, gl_fp8_format fa,
                           const float *a_sinv, const uint8_t *B,
                           gl_fp8_format fb, const float *b_sinv,
                           int b_block2d, float beta, void *C,
                           gl_dtype ctype, int ldc);

    /* ---- lanes: streams beside the compute stream for independent work
     * (the experts' products) ----
     *
     *   lanes_fork(d, n): lanes 1 .. n'-1 start after everything enqueued
     *       so far on the compute stream (lane 0); returns n', the lanes
     *       granted: at most n, GL_LANES_MAX and GRIDLM_MOE_LANES (1 ..
     *       GL_LANES_MAX, default GL_LANES_MAX; a bad value dies naming
     *       the variable); 1 on the CPU.
     *   lane_use(d, i): ops enqueued from now on go to lane i (< n'),
     *       each lane with its own cuBLASLt workspace.
     *   lanes_join(d, n'): ops go to the compute stream again, and it
     *       waits for lanes 1 .. n'-1.
     * Work on two lanes may run at once: it must not share outputs or
     * scratch.  The ops keep what device state they carry between
     * launches per lane (fp8_amax_scale's ticket); collectives stay on
     * lane 0.  Every product picks its algorithm by its shape, not its
     * lane, so the bits do not depend on the number of lanes.  No-ops on
     * the CPU. */
    int (*lanes_fork)(gl_dev *d, int n);
    void (*lane_use)(gl_dev *d, int i);
    void (*lanes_join)(gl_dev *d, int n);
};

/* The most lanes lanes_fork grants. */
#define GL_LANES_MAX 4

struct gl_dev {
    const gl_ops *ops;
    gl_dtype act;          /* GL_DT_F32 (cpu) or GL_DT_BF16 (cuda) */
    size_t act_bytes;      /* gl_dtype_size(act) */
    gl_comm_kind comm;     /* the comm back end that reaches this memory */
    void *stream;          /* cudaStream_t of the compute stream; NULL on cpu */
    void *comm_stream;     /* cudaStream_t of the communication stream
                              (ops->comm_wait_compute); NULL on cpu */
    void *p2p_stream;      /* cudaStream_t of the point-to-point stream
                              (ops->p2p_wait_compute); NULL on cpu */
    int index;             /* GPU ordinal, -1 on cpu */
    char name[96];         /* "cpu", or the GPU's name ("NVIDIA H200") for
                              the peak-FLOP table behind MFU */
    void *impl;            /* back-end state */
};

/* Which device a program is asked for (--device auto|cpu|cuda). */
typedef enum { GL_DEVICE_AUTO = 0, GL_DEVICE_CPU, GL_DEVICE_CUDA } gl_device_kind;

/* The CPU reference device (always available). */
gl_dev *gl_dev_open_cpu(void);

/* The CUDA device of the given ordinal; NULL when this build has no CUDA
 * back end.  Dies with a clear message when the GPU cannot be used. */
gl_dev *gl_dev_open_cuda(int ordinal);

/* Number of CUDA devices visible (0 without the CUDA back end or GPUs). */
int gl_cuda_device_count(void);

void gl_dev_close(gl_dev *d);

#ifdef __cplusplus
}
#endif
#endif
