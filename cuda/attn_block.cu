/*
 * attn_block.cu: context parallelism's block attention (ops.h, the ops at
 * the end of gl_ops): attention of a block of Sq queries against a block
 * of Sk keys whose rows carry positions in the full sequence (two
 * contiguous runs each, gl_attn_pos), causal or full; the log-sum-exp
 * merge of blocks; the backward's row sums delta; the block backward from
 * the final lse; and convert_2d, the strided copy with conversion.
 *
 * The kernels are deliberately simple: one warp per output row, each lane
 * holding E = D/32 consecutive elements of the head (2 or 4), a dot
 * product being a warp sum.  The forward runs the online softmax of
 * attention_fwd.cu (running maximum m, denominator l, unnormalised output
 * O, base-2 exponentials on s log2(e)) over the row's allowed keys.
 * Masked work is never done: since each run's positions increase by one
 * per row, the keys a causal query sees in a run are a prefix of the run
 * (and the queries a causal key is seen by, a suffix), computed from the
 * positions in O(1), so a row walks exactly its allowed pairs and a fully
 * masked block costs one pass writing o = 0, lse = -inf.
 *
 * The backward recomputes P from the FINAL lse in two kernels without
 * atomics: one warp per query row accumulates dq over the row's keys, one
 * warp per key row and kv head accumulates dk, dv over the queries of the
 * heads of its group that see it.  Each adds (+=) its f32 sums to the
 * accumulators once, so the result is deterministic.
 *
 * Not the tensor-core tiling of attention_fwd.cu/attention_bwd.cu: K and V
 * rows are read from global memory (L2) by every query row; correct
 * first, the place to speed up later.
 */
#include <config.h>

#include <math.h>

#include "gl_cuda.h"
#include "warp.cuh"

#define BLK_WARPS 4
#define BLK_THREADS (BLK_WARPS * 32)
#define BLK_LOG2E 1.4426950408889634f
#define BLK_LN2 0.6931471805599453f

/* The positions of a block's rows, passed by value to the kernels. */
struct blk_pos {
    int n, split;
    long start0, start1;
};

static blk_pos blk_pos_of(const gl_attn_pos *p, int n)
{
    blk_pos r;
    r.n = n;
    r.split = p->split;
    r.start0 = p->start[0];
    r.start1 = p->split < n ? p->start[1] : 0;
    return r;
}

__device__ __forceinline__ long blk_pos_at(const blk_pos &p, int i)
{
    return i < p.split ? p.start0 + i : p.start1 + (i - p.split);
}

/* Rows [lo, hi) of run r of block p whose positions x satisfy x <= lim
 * (prefix: keys a query at lim sees) -- or x >= lim (suffix: queries that
 * see a key at lim) when suffix is set.  Run 0 is rows [0, split), run 1
 * rows [split, n). */
__device__ __forceinline__ void blk_run_range(const blk_pos &p, int r, long lim,
                                              bool suffix, int *lo, int *hi)
{
    int base = r == 0 ? 0 : p.split;
    int len = r == 0 ? p.split : p.n - p.split;
    long start = r == 0 ? p.start0 : p.start1;
    if (!suffix) {                  /* start + i <= lim: i < lim - start + 1 */
        long c = lim - start + 1;
        c = c < 0 ? 0 : c > len ? len : c;
        *lo = base;
        *hi = base + (int)c;
    } else {                        /* start + i >= lim: i >= lim - start */
        long c = lim - start;
        c = c < 0 ? 0 : c > len ? len : c;
        *lo = base + (int)c;
        *hi = base + len;
    }
}

/* The keys of run r that a query at position qpos attends: under a
 * causal mask those at positions <= qpos (blk_run_range's prefix), else
 * the whole run. */
__device__ __forceinline__ void blk_keys_seen(const blk_pos &kp, int r, long qpos,
                                              bool causal, int *lo, int *hi)
{
    if (causal) {
        blk_run_range(kp, r, qpos, false, lo, hi);
    } else {
        *lo = r == 0 ? 0 : kp.split;
        *hi = r == 0 ? kp.split : kp.n;
    }
}

/* E consecutive bf16 of a lane as floats, and back. */
template <int E>
__device__ __forceinline__ void load_e(float (&x)[E], const bf16 *p)
{
#pragma unroll
    for (int e = 0; e < E; e += 2) {
        float2 f = __bfloat1622float2(*(const __nv_bfloat162 *)(p + e));
        x[e] = f.x;
        x[e + 1] = f.y;
    }
}

template <int E>
__device__ __forceinline__ float dot_e(const float (&a)[E], const float (&b)[E])
{
    float s = 0;
#pragma unroll
    for (int e = 0; e < E; e++)
        s = fmaf(a[e], b[e], s);
    return s;
}

/*
 * The per-row loop of the forward and of the dq backward: walk the keys
 * that a query at position qpos attends (blk_keys_seen, both runs, in
 * key order), calling f(kf, vf, s) for each with the lane's elements kf,
 * vf of its key and value rows and the raw score s = q . k_u (a warp sum,
 * the same in every lane; the caller scales it).  qf is the lane's part
 * of the query; kb and vb point at the lane's part of key row 0 of the
 * kv head, row strides ldk and ldv.
 */
template <int E, class F>
__device__ __forceinline__ void blk_row_keys(const float (&qf)[E],
                                             const bf16 *kb, int ldk,
                                             const bf16 *vb, int ldv,
                                             const blk_pos &kp, long qpos,
                                             int causal, F f)
{
    for (int r = 0; r < 2; r++) {
        int lo, hi;
        blk_keys_seen(kp, r, qpos, causal, &lo, &hi);
        for (int u = lo; u < hi; u++) {
            float kf[E], vf[E];
            load_e<E>(kf, kb + (long)u * ldk);
            load_e<E>(vf, vb + (long)u * ldv);
            f(kf, vf, warp_sum(dot_e<E>(qf, kf)));
        }
    }
}

/* ---- forward ---- */

/* Warp w of the grid: query row i of head h of sample b, w = (b Sq + i)
 * Hq + h (heads fastest: the query heads of a group read the same K/V
 * rows close together in time). */
template <int D>
__global__ void __launch_bounds__(BLK_THREADS)
attn_block_fwd_kernel(float *o, int ldo, float *lse, const bf16 *q, int ldq,
                      const bf16 *k, int ldk, const bf16 *v, int ldv, int B,
                      int Sq, int Sk, int Hq, int group, float scale_log2,
                      blk_pos qp, blk_pos kp, int causal)
{
    constexpr int E = D / 32;
    long w = (long)blockIdx.x * BLK_WARPS + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (w >= (long)B * Sq * Hq)
        return;
    int h = (int)(w % Hq);
    long row = w / Hq;                      /* b Sq + i */
    int i = (int)(row % Sq), b = (int)(row / Sq);
    int g = h / group;

    float qf[E], acc[E];
    load_e<E>(qf, q + row * ldq + (long)h * D + lane * E);
#pragma unroll
    for (int e = 0; e < E; e++)
        acc[e] = 0;
    float m = -INFINITY, l = 0;             /* m in log2 units */
    long qpos = blk_pos_at(qp, i);
    const bf16 *kb = k + (long)b * Sk * ldk + (long)g * D + lane * E;
    const bf16 *vb = v + (long)b * Sk * ldv + (long)g * D + lane * E;

    blk_row_keys<E>(qf, kb, ldk, vb, ldv, kp, qpos, causal,
                    [&](const float (&)[E], const float (&vf)[E], float qk) {
        float s = qk * scale_log2;
        float mnew = fmaxf(m, s);
        float corr = exp2f(m - mnew);       /* 0 while m = -inf */
        float p = exp2f(s - mnew);
        l = l * corr + p;
#pragma unroll
        for (int e = 0; e < E; e++)
            acc[e] = fmaf(acc[e], corr, p * vf[e]);
        m = mnew;
    });

    /* a row without keys: o = 0, lse = -inf (l = 0) */
    float inv = l > 0 ? 1.0f / l : 0.0f;
    float *orow = o + row * ldo + (long)h * D + lane * E;
#pragma unroll
    for (int e = 0; e < E; e++)
        orow[e] = acc[e] * inv;
    if (lane == 0)
        lse[((long)b * Hq + h) * Sq + i] =
            l > 0 ? (m + log2f(l)) * BLK_LN2 : -INFINITY;
}

/* The checks both directions share: shapes and alignment as attn_fwd's,
 * the runs' splits and the mask. */
static void blk_check(const char *what, int Sq, int Sk, int Hq, int Hkv, int D,
                      float scale, const gl_attn_pos *qpos,
                      const gl_attn_pos *kpos, gl_attn_mask mask,
                      const void *p[], const int ld[], int np)
{
    gl_cuda_attn_check(what, Hq, Hkv, D, scale, p, ld, np);
    if (qpos->split < 0 || qpos->split > Sq || kpos->split < 0 ||
        kpos->split > Sk)
        gl_die("%s: a position run splits at row %d of %d queries or %d of %d "
               "keys: split must lie in [0, rows]", what, qpos->split, Sq,
               kpos->split, Sk);
    if (mask != GL_ATTN_CAUSAL && mask != GL_ATTN_FULL)
        gl_die("%s: unknown mask %d", what, (int)mask);
}

static unsigned blk_grid(long warps)
{
    return (unsigned)((warps + BLK_WARPS - 1) / BLK_WARPS);
}

void gl_cuda_attn_block_fwd(gl_dev *d, float *o, int ldo, float *lse,
                            const bf16 *q, int ldq, const bf16 *k, int ldk,
                            const bf16 *v, int ldv, int B, int Sq, int Sk,
                            int Hq, int Hkv, int D, float scale,
                            const gl_attn_pos *qpos, const gl_attn_pos *kpos,
                            gl_attn_mask mask)
{
    const void *p[] = {q, k, v};
    const int ld[] = {ldq, ldk, ldv};
    blk_check("attn_block_fwd", Sq, Sk, Hq, Hkv, D, scale, qpos, kpos, mask,
              p, ld, 3);
    long warps = (long)B * Sq * Hq;
    if (warps <= 0)
        return;
    cudaStream_t s = gl_cuda_st(d)->stream;
    blk_pos qp = blk_pos_of(qpos, Sq), kp = blk_pos_of(kpos, Sk);
    int causal = mask == GL_ATTN_CAUSAL;
    if (D == 64)
        attn_block_fwd_kernel<64><<<blk_grid(warps), BLK_THREADS, 0, s>>>(
            o, ldo, lse, q, ldq, k, ldk, v, ldv, B, Sq, Sk, Hq, Hq / Hkv,
            scale * BLK_LOG2E, qp, kp, causal);
    else
        attn_block_fwd_kernel<128><<<blk_grid(warps), BLK_THREADS, 0, s>>>(
            o, ldo, lse, q, ldq, k, ldk, v, ldv, B, Sq, Sk, Hq, Hq / Hkv,
            scale * BLK_LOG2E, qp, kp, causal);
    GL_CUDA_LAUNCHED("attn_block_fwd");
}

/* ---- merge ---- */

/* Warp per (b, t, h) row of o [B, S, Hq, D]: the log-sum-exp merge from
 * the larger lse (no overflow), -inf parts weighing 0. */
__global__ void __launch_bounds__(BLK_THREADS)
attn_merge_kernel(float *o, float *lse, const float *o_b, const float *lse_b,
                  int B, int S, int Hq, int D)
{
    long w = (long)blockIdx.x * BLK_WARPS + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (w >= (long)B * S * Hq)
        return;
    int h = (int)(w % Hq);
    long row = w / Hq;
    int t = (int)(row % S), b = (int)(row / S);
    long li = ((long)b * Hq + h) * S + t;
    float la = lse[li], lb = lse_b[li];
    if (lb == -INFINITY)                    /* nothing to add */
        return;
    float *ot = o + w * D;
    const float *obt = o_b + w * D;
    float ln = lb;
    if (la == -INFINITY) {                  /* nothing yet: take the block */
        for (int e = lane; e < D; e += 32)
            ot[e] = obt[e];
    } else {
        float mx = fmaxf(la, lb);
        ln = mx + logf(expf(la - mx) + expf(lb - mx));
        float wa = expf(la - ln), wb = expf(lb - ln);
        for (int e = lane; e < D; e += 32)
            ot[e] = wa * ot[e] + wb * obt[e];
    }
    __syncwarp();
    if (lane == 0)
        lse[li] = ln;
}

void gl_cuda_attn_merge(gl_dev *d, float *o, float *lse, const float *o_b,
                        const float *lse_b, int B, int S, int Hq, int D,
                        int first)
{
    long warps = (long)B * S * Hq;
    if (warps <= 0 || D <= 0)
        return;
    cudaStream_t s = gl_cuda_st(d)->stream;
    if (first) {
        GL_CUDA_CHECK(cudaMemcpyAsync(o, o_b, (size_t)warps * D * sizeof *o,
                                      cudaMemcpyDeviceToDevice, s));
        GL_CUDA_CHECK(cudaMemcpyAsync(lse, lse_b, (size_t)warps * sizeof *lse,
                                      cudaMemcpyDeviceToDevice, s));
        return;
    }
    attn_merge_kernel<<<blk_grid(warps), BLK_THREADS, 0, s>>>(o, lse, o_b,
                                                              lse_b, B, S, Hq, D);
    GL_CUDA_LAUNCHED("attn_merge");
}

/* ---- delta ---- */

__global__ void __launch_bounds__(BLK_THREADS)
attn_delta_kernel(float *delta, const bf16 *dout, int lddo, const bf16 *o,
                  int ldo, int B, int S, int Hq, int D)
{
    long w = (long)blockIdx.x * BLK_WARPS + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (w >= (long)B * S * Hq)
        return;
    int h = (int)(w % Hq);
    long row = w / Hq;
    int t = (int)(row % S), b = (int)(row / S);
    const bf16 *dr = dout + row * lddo + (long)h * D;
    const bf16 *orow = o + row * ldo + (long)h * D;
    float s = 0;
    for (int e = lane; e < D; e += 32)
        s = fmaf(__bfloat162float(dr[e]), __bfloat162float(orow[e]), s);
    s = warp_sum(s);
    if (lane == 0)
        delta[((long)b * Hq + h) * S + t] = s;
}

void gl_cuda_attn_delta(gl_dev *d, float *delta, const bf16 *dout, int lddo,
                        const bf16 *o, int ldo, int B, int S, int Hq, int D)
{
    long warps = (long)B * S * Hq;
    if (warps <= 0)
        return;
    attn_delta_kernel<<<blk_grid(warps), BLK_THREADS, 0,
                        gl_cuda_st(d)->stream>>>(delta, dout, lddo, o, ldo, B,
                                                 S, Hq, D);
    GL_CUDA_LAUNCHED("attn_delta");
}

/* ---- backward ---- */

/* dq: warp per query row as in the forward; P from the final lse (natural
 * units, so lse log2(e) in the base-2 exponent). */
template <int D>
__global__ void __launch_bounds__(BLK_THREADS)
attn_block_dq_kernel(float *dq, int lddq, const bf16 *dout, int lddo,
                     const float *lse, const float *delta, const bf16 *q,
                     int ldq, const bf16 *k, int ldk, const bf16 *v, int ldv,
                     int B, int Sq, int Sk, int Hq, int group, float scale,
                     blk_pos qp, blk_pos kp, int causal)
{
    constexpr int E = D / 32;
    long w = (long)blockIdx.x * BLK_WARPS + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (w >= (long)B * Sq * Hq)
        return;
    int h = (int)(w % Hq);
    long row = w / Hq;
    int i = (int)(row % Sq), b = (int)(row / Sq);
    int g = h / group;
    long li = ((long)b * Hq + h) * Sq + i;
    float l = lse[li];
    if (l == -INFINITY)                     /* a row without keys */
        return;
    float l2 = l * BLK_LOG2E, dt = delta[li], sl2 = scale * BLK_LOG2E;

    float qf[E], df[E], acc[E];
    load_e<E>(qf, q + row * ldq + (long)h * D + lane * E);
    load_e<E>(df, dout + row * lddo + (long)h * D + lane * E);
#pragma unroll
    for (int e = 0; e < E; e++)
        acc[e] = 0;
    long qpos = blk_pos_at(qp, i);
    const bf16 *kb = k + (long)b * Sk * ldk + (long)g * D + lane * E;
    const bf16 *vb = v + (long)b * Sk * ldv + (long)g * D + lane * E;
    blk_row_keys<E>(qf, kb, ldk, vb, ldv, kp, qpos, causal,
                    [&](const float (&kf)[E], const float (&vf)[E], float s) {
        float dp = warp_sum(dot_e<E>(df, vf));
        float p = exp2f(fmaf(s, sl2, -l2));
        float ds = p * (dp - dt) * scale;
#pragma unroll
        for (int e = 0; e < E; e++)
            acc[e] = fmaf(ds, kf[e], acc[e]);
    });
    float *dqr = dq + row * lddq + (long)h * D + lane * E;
#pragma unroll
    for (int e = 0; e < E; e++)
        dqr[e] += acc[e];
}

/* dk, dv: warp per key row u of kv head g, w = (b Sk + u) Hkv + g, over
 * the query heads of the group and the query rows that see the key. */
template <int D>
__global__ void __launch_bounds__(BLK_THREADS)
attn_block_dkv_kernel(float *dk, float *dv, int lddkv, const bf16 *dout,
                      int lddo, const float *lse, const float *delta,
                      const bf16 *q, int ldq, const bf16 *k, int ldk,
                      const bf16 *v, int ldv, int B, int Sq, int Sk, int Hq,
                      int Hkv, float scale, blk_pos qp, blk_pos kp, int causal)
{
    constexpr int E = D / 32;
    long w = (long)blockIdx.x * BLK_WARPS + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (w >= (long)B * Sk * Hkv)
        return;
    int g = (int)(w % Hkv);
    long row = w / Hkv;
    int u = (int)(row % Sk), b = (int)(row / Sk);
    int group = Hq / Hkv;
    float sl2 = scale * BLK_LOG2E;

    float kf[E], vf[E], ak[E], av[E];
    load_e<E>(kf, k + row * ldk + (long)g * D + lane * E);
    load_e<E>(vf, v + row * ldv + (long)g * D + lane * E);
#pragma unroll
    for (int e = 0; e < E; e++)
        ak[e] = av[e] = 0;
    long kpos = blk_pos_at(kp, u);
    for (int h = g * group; h < (g + 1) * group; h++) {
        const bf16 *qb = q + (long)b * Sq * ldq + (long)h * D + lane * E;
        const bf16 *db = dout + (long)b * Sq * lddo + (long)h * D + lane * E;
        const float *lb = lse + ((long)b * Hq + h) * Sq;
        const float *tb = delta + ((long)b * Hq + h) * Sq;
        for (int r = 0; r < 2; r++) {
            int lo, hi;
            if (causal)
                blk_run_range(qp, r, kpos, true, &lo, &hi);
            else
                lo = r == 0 ? 0 : qp.split, hi = r == 0 ? qp.split : Sq;
            for (int i = lo; i < hi; i++) {
                float l = lb[i];
                if (l == -INFINITY)         /* uniform across the warp */
                    continue;
                float qf[E], df[E];
                load_e<E>(qf, qb + (long)i * ldq);
                load_e<E>(df, db + (long)i * lddo);
                float s = warp_sum(dot_e<E>(qf, kf));
                float dp = warp_sum(dot_e<E>(df, vf));
                float p = exp2f(fmaf(s, sl2, -l * BLK_LOG2E));
                float ds = p * (dp - tb[i]) * scale;
#pragma unroll
                for (int e = 0; e < E; e++) {
                    ak[e] = fmaf(ds, qf[e], ak[e]);
                    av[e] = fmaf(p, df[e], av[e]);
                }
            }
        }
    }
    float *dkr = dk + row * lddkv + (long)g * D + lane * E;
    float *dvr = dv + row * lddkv + (long)g * D + lane * E;
#pragma unroll
    for (int e = 0; e < E; e++) {
        dkr[e] += ak[e];
        dvr[e] += av[e];
    }
}

void gl_cuda_attn_block_bwd(gl_dev *d, float *dq, int lddq, float *dk,
                            float *dv, int lddkv, const bf16 *dout, int lddo,
                            const float *lse, const float *delta,
                            const bf16 *q, int ldq, const bf16 *k, int ldk,
                            const bf16 *v, int ldv, int B, int Sq, int Sk,
                            int Hq, int Hkv, int D, float scale,
                            const gl_attn_pos *qpos, const gl_attn_pos *kpos,
                            gl_attn_mask mask)
{
    const void *p[] = {q, k, v, dout};
    const int ld[] = {ldq, ldk, ldv, lddo};
    blk_check("attn_block_bwd", Sq, Sk, Hq, Hkv, D, scale, qpos, kpos, mask,
              p, ld, 4);
    if (B <= 0 || Sq <= 0 || Sk <= 0 || Hq <= 0)
        return;
    cudaStream_t s = gl_cuda_st(d)->stream;
    blk_pos qp = blk_pos_of(qpos, Sq), kp = blk_pos_of(kpos, Sk);
    int causal = mask == GL_ATTN_CAUSAL;
    long wq = (long)B * Sq * Hq, wk = (long)B * Sk * Hkv;
    if (D == 64) {
        attn_block_dq_kernel<64><<<blk_grid(wq), BLK_THREADS, 0, s>>>(
            dq, lddq, dout, lddo, lse, delta, q, ldq, k, ldk, v, ldv, B, Sq,
            Sk, Hq, Hq / Hkv, scale, qp, kp, causal);
        GL_CUDA_LAUNCHED("attn_block_bwd (dq)");
        attn_block_dkv_kernel<64><<<blk_grid(wk), BLK_THREADS, 0, s>>>(
            dk, dv, lddkv, dout, lddo, lse, delta, q, ldq, k, ldk, v, ldv, B,
            Sq, Sk, Hq, Hkv, scale, qp, kp, causal);
    } else {
        attn_block_dq_kernel<128><<<blk_grid(wq), BLK_THREADS, 0, s>>>(
            dq, lddq, dout, lddo, lse, delta, q, ldq, k, ldk, v, ldv, B, Sq,
            Sk, Hq, Hq / Hkv, scale, qp, kp, causal);
        GL_CUDA_LAUNCHED("attn_block_bwd (dq)");
        attn_block_dkv_kernel<128><<<blk_grid(wk), BLK_THREADS, 0, s>>>(
            dk, dv, lddkv, dout, lddo, lse, delta, q, ldq, k, ldk, v, ldv, B,
            Sq, Sk, Hq, Hkv, scale, qp, kp, causal);
    }
    GL_CUDA_LAUNCHED("attn_block_bwd (dk, dv)");
}

/* ---- convert_2d ---- */

template <class T>
__device__ __forceinline__ float to_float(T x);
template <>
__device__ __forceinline__ float to_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ float to_float<bf16>(bf16 x) { return __bfloat162float(x); }

template <class T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ bf16 from_float<bf16>(float x) { return __float2bfloat16(x); }

/* Grid-stride over rows x cols, every index in 64 bits (ops.h's limits);
 * a bf16 -> bf16 copy passes through fp32 exactly. */
template <class TD, class TS>
__global__ void convert_2d_kernel(TD *dst, long lddst, const TS *src, long ldsrc,
                                  int rows, long cols)
{
    long n = (long)rows * cols;
    for (long x = (long)blockIdx.x * blockDim.x + threadIdx.x; x < n;
         x += (long)gridDim.x * blockDim.x) {
        long r = x / cols, c = x % cols;
        dst[r * lddst + c] = from_float<TD>(to_float<TS>(src[r * ldsrc + c]));
    }
}

void gl_cuda_convert_2d(gl_dev *d, void *dst, gl_dtype dt, long lddst,
                        const void *src, gl_dtype st, long ldsrc, int rows,
                        long cols)
{
    if ((dt != GL_DT_BF16 && dt != GL_DT_F32) ||
        (st != GL_DT_BF16 && st != GL_DT_F32))
        gl_die("convert_2d: the CUDA device converts between bf16 and f32 "
               "only (types %d and %d)", (int)dt, (int)st);
    long n = (long)rows * cols;
    if (rows <= 0 || cols <= 0)
        return;
    long blocks = (n + 255) / 256;
    unsigned grid = (unsigned)(blocks < 65536 ? blocks : 65536);
    cudaStream_t s = gl_cuda_st(d)->stream;
    if (dt == GL_DT_F32 && st == GL_DT_F32)
        convert_2d_kernel<float, float><<<grid, 256, 0, s>>>(
            (float *)dst, lddst, (const float *)src, ldsrc, rows, cols);
    else if (dt == GL_DT_F32)
        convert_2d_kernel<float, bf16><<<grid, 256, 0, s>>>(
            (float *)dst, lddst, (const bf16 *)src, ldsrc, rows, cols);
    else if (st == GL_DT_F32)
        convert_2d_kernel<bf16, float><<<grid, 256, 0, s>>>(
            (bf16 *)dst, lddst, (const float *)src, ldsrc, rows, cols);
    else
        convert_2d_kernel<bf16, bf16><<<grid, 256, 0, s>>>(
            (bf16 *)dst, lddst, (const bf16 *)src, ldsrc, rows, cols);
    GL_CUDA_LAUNCHED("convert_2d");
}
