/*
 * attention_fwd.cu: causal grouped-query flash attention, forward.
 *
 * For query token t of head j (kv head g = j / (Hq/Hkv)) and keys u <= t:
 *   s_tu = scale q_t . k_u,   lse_t = log sum_u exp(s_tu),
 *   o_t  = sum_u exp(s_tu - lse_t) v_u.
 * No S x S matrix is formed.  A block owns 128 queries of one head and
 * walks the key tiles up to its last query, 64 keys at a time; each of its
 * 4 warps owns 32 query rows and keeps, per row, the running maximum m, the
 * running denominator l and the unnormalised output O in registers (the
 * online softmax):
 *   m' = max(m, max_u s_tu),   l' = l e^(m - m') + sum_u e^(s_tu - m'),
 *   O' = O e^(m - m') + sum_u e^(s_tu - m') v_u,
 * and at the end o_t = O / l, lse_t = m + log l.  Exponentials are base 2
 * on s log2(e) (one ex2 instruction each).
 *
 * Both products per tile, S = Q K^T and O += P V, run on the tensor cores
 * (mma.sync m16n8k16, attn_common.cuh); Q stays in registers for the
 * whole walk (at D = 64; re-read from shared memory at D = 128), K and V
 * tiles stream through shared memory with cp.async,
 * two stages deep, so the next tile loads while this one computes.  Only
 * the two diagonal tiles need the causal mask.  The grid's slowest index
 * is the query tile, last tile first, so the longest walks of every head
 * start first and the short ones fill the tail.
 *
 * Attention dropout (DROP, gl_attn_dropout): l and lse are those of the
 * undropped softmax, and each exponential is multiplied by its keep
 * factor (0 or 1/(1-p), attn_drop) after it entered l and before it
 * enters O, so o_t = sum_u P'_tu v_u with P' = M P / (1 - p).  DROP is
 * the launch's attn_drop_mode: with S a multiple of 4 (GROUPS) a lane
 * draws one Philox call per 16 x 8 tile of scores, i.e. per four of its
 * scores (attn_drop::keep_rows); else one per score (EACH).
 */
#include <config.h>

#include <math.h>

#include "attn_common.cuh"
#include "warp.cuh"

/* Query rows per block: 4 warps x 2 m-tiles of 16.  Each K or V fragment
 * a warp loads from shared memory feeds both of its m-tiles, which halves
 * the shared-memory traffic per multiply of a 16-row warp. */
#define FWD_MT 2
#define FWD_ROWS (ATTN_WARPS * 16 * FWD_MT)

template <int D, int DROP>
__global__ void __launch_bounds__(ATTN_THREADS)
attn_fwd_kernel(bf16 *o, int ldo, float *lse, const bf16 *q, int ldq,
                const bf16 *k, int ldk, const bf16 *v, int ldv, int S, int Hq,
                int group, float scale_log2, attn_drop dr)
{
    constexpr int KS = D / 16;        /* k-steps over the head dimension */
    constexpr int NT = D / 8;         /* n-tiles of the output */
    constexpr int MT = FWD_MT;
    /* Q fragments stay in registers at D = 64; at D = 128 they would not
     * fit beside the accumulators and are re-read from shared memory. */
    constexpr bool QREG = D == 64;
    extern __shared__ __align__(128) bf16 smem[];
    bf16 *sQ = smem;                  /* [128][D] */
    bf16 *sK = sQ + FWD_ROWS * D;     /* [2][64][D] */
    bf16 *sV = sK + 2 * ATTN_TILE * D;

    int nqt = (S + FWD_ROWS - 1) / FWD_ROWS;
    int nkt = (S + ATTN_TILE - 1) / ATTN_TILE;
    int qt = nqt - 1 - blockIdx.z;    /* z is scheduled last: longest first */
    int h = blockIdx.x, b = blockIdx.y;
    int kvh = h / group;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int g = lane / 4, t = lane % 4;
    int q0 = qt * FWD_ROWS;
    int wrow0 = q0 + warp * 16 * MT;  /* this warp's first query */
    int jmax = min(nkt - 1, (q0 + FWD_ROWS - 1) / ATTN_TILE);

    const bf16 *qb = q + (long)b * S * ldq + (long)h * D;
    const bf16 *kb = k + (long)b * S * ldk + (long)kvh * D;
    const bf16 *vb = v + (long)b * S * ldv + (long)kvh * D;

    load_tile<D>(sQ, qb, ldq, q0, S);
    load_tile<D>(sQ + ATTN_TILE * D, qb, ldq, q0 + ATTN_TILE, S);
    load_tile<D>(sK, kb, ldk, 0, S);
    load_tile<D>(sV, vb, ldv, 0, S);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();

    uint32_t qf[QREG ? MT : 1][QREG ? KS : 1][4];
    if constexpr (QREG) {
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int kk = 0; kk < KS; kk++)
                frag_a<D>(qf[mt][kk], sQ, warp * 16 * MT + mt * 16, kk, lane);
    }

    float acc[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int i = 0; i < NT; i++)
            acc[mt][i][0] = acc[mt][i][1] = acc[mt][i][2] = acc[mt][i][3] = 0;
    /* per thread: rows (mt, hr) = wrow0 + mt*16 + hr*8 + g */
    float m_r[MT][2], l_r[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
        m_r[mt][0] = m_r[mt][1] = -INFINITY, l_r[mt][0] = l_r[mt][1] = 0;

    for (int j = 0; j <= jmax; j++) {
        int buf = j & 1;
        if (j < jmax) {               /* prefetch the next tile */
            load_tile<D>(sK + (buf ^ 1) * ATTN_TILE * D, kb, ldk,
                         (j + 1) * ATTN_TILE, S);
            load_tile<D>(sV + (buf ^ 1) * ATTN_TILE * D, vb, ldv,
                         (j + 1) * ATTN_TILE, S);
        }
        cp_async_commit();
        const bf16 *tK = sK + buf * ATTN_TILE * D;
        const bf16 *tV = sV + buf * ATTN_TILE * D;
        int key0 = j * ATTN_TILE;

        /* A warp whose queries all precede this tile's keys has nothing
         * to add (its rows see only masked keys): it waits at the barrier. */
        if (key0 <= wrow0 + 16 * MT - 1) {
            /* GROUPS: the dropout mask of the warp's MT x 8 tiles, one
             * Philox call per lane per tile (MT x 8 per key tile instead
             * of 4 MT x 8), drawn by every lane (keep_rows shuffles)
             * before the products, while s is not yet live.  Rows past S
             * and keys past the diagonal are drawn too (and unused). */
            uint64_t keepm = 0;
            if constexpr (DROP == ATTN_DROP_GROUPS)
                keepm = dr.keep_rows_block<MT>(b, h, S, wrow0, key0, lane);

            /* S = Q K^T for 32 rows x 64 keys: MT x 8 n-tiles */
            float s[MT][8][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int i = 0; i < 8; i++)
                    s[mt][i][0] = s[mt][i][1] = s[mt][i][2] = s[mt][i][3] = 0;
#pragma unroll
            for (int kk = 0; kk < KS; kk++) {
                uint32_t qa[MT][4];
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    if constexpr (QREG) {
#pragma unroll
                        for (int e = 0; e < 4; e++)
                            qa[mt][e] = qf[QREG ? mt : 0][QREG ? kk : 0][e];
                    } else {
                        frag_a<D>(qa[mt], sQ, warp * 16 * MT + mt * 16, kk, lane);
                    }
                }
#pragma unroll
                for (int np = 0; np < 4; np++) {
                    uint32_t r[4];
                    frag_b_rows<D>(r, tK, np * 16, kk, lane);
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) {
                        mma16816(s[mt][2 * np], qa[mt], r[0], r[1]);
                        mma16816(s[mt][2 * np + 1], qa[mt], r[2], r[3]);
                    }
                }
            }

            /* the causal mask where the tile reaches the rows */
            bool diag = key0 + ATTN_TILE - 1 > wrow0;
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int i = 0; i < 8; i++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        int key = key0 + i * 8 + 2 * t + (e & 1);
                        int row = wrow0 + mt * 16 + (e >> 1) * 8 + g;
                        if (diag && key > row)
                            s[mt][i][e] = -INFINITY;
                    }

            /* online softmax per row.  The maximum is taken on the raw
             * scores (scale > 0 keeps the order) and each exponent is one
             * fused multiply-add, s scale log2(e) - m, in log2 units. */
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int hr = 0; hr < 2; hr++) {
                    float mx = -INFINITY;
#pragma unroll
                    for (int i = 0; i < 8; i++)
                        mx = fmaxf(mx, fmaxf(s[mt][i][2 * hr], s[mt][i][2 * hr + 1]));
                    mx = warp_max<4>(mx);       /* over the row's quad */
                    float mnew = fmaxf(m_r[mt][hr], mx * scale_log2);
                    /* a row with no visible key yet keeps its state */
                    float base = mnew == -INFINITY ? 0.0f : mnew;
                    float corr = exp2f(m_r[mt][hr] - base);
                    m_r[mt][hr] = mnew;
                    float sum = 0;
#pragma unroll
                    for (int i = 0; i < 8; i++) {
                        s[mt][i][2 * hr] = exp2f(fmaf(s[mt][i][2 * hr], scale_log2, -base));
                        s[mt][i][2 * hr + 1] =
                            exp2f(fmaf(s[mt][i][2 * hr + 1], scale_log2, -base));
                        sum += s[mt][i][2 * hr] + s[mt][i][2 * hr + 1];
                    }
                    l_r[mt][hr] = l_r[mt][hr] * corr + sum;
#pragma unroll
                    for (int i = 0; i < NT; i++) {
                        acc[mt][i][2 * hr] *= corr;
                        acc[mt][i][2 * hr + 1] *= corr;
                    }
                }

            /* P' = keep P (after l has summed P); a masked score is 0
             * either way */
            if constexpr (DROP == ATTN_DROP_GROUPS) {
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
#pragma unroll
                    for (int i = 0; i < 8; i++) {
                        uint32_t bits = (uint32_t)(keepm >> 4 * (8 * mt + i));
#pragma unroll
                        for (int e = 0; e < 4; e++)
                            s[mt][i][e] *= dr.factor(bits, e);
                    }
            } else if constexpr (DROP == ATTN_DROP_EACH) {
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
#pragma unroll
                    for (int i = 0; i < 8; i++)
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            int key = key0 + i * 8 + 2 * t + (e & 1);
                            int row = wrow0 + mt * 16 + (e >> 1) * 8 + g;
                            if (s[mt][i][e] != 0.0f)
                                s[mt][i][e] *= dr.keep(b, h, S, row, key);
                        }
            }

            /* O += P V: P from registers */
            mma_p_tile<D, MT>(acc, s, tV, lane);
        }
        cp_async_wait<0>();
        __syncthreads();
    }

    /* finish: the quad's partial sums make l; o = O / l */
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            float l = l_r[mt][hr];
            l = warp_sum<4>(l);
            float inv = 1.0f / l;
            int row = wrow0 + mt * 16 + hr * 8 + g;
            if (row < S) {
                bf16 *orow = o + ((long)b * S + row) * ldo + (long)h * D;
#pragma unroll
                for (int i = 0; i < NT; i++)
                    *(__nv_bfloat162 *)(orow + i * 8 + 2 * t) =
                        __floats2bfloat162_rn(acc[mt][i][2 * hr] * inv,
                                              acc[mt][i][2 * hr + 1] * inv);
                if (t == 0)
                    lse[((long)b * Hq + h) * S + row] =
                        (m_r[mt][hr] + log2f(l)) * LN2;
            }
        }
}

template <int D, int DROP>
static void launch(gl_cuda_state *st, bf16 *o, int ldo, float *lse,
                   const bf16 *q, int ldq, const bf16 *k, int ldk,
                   const bf16 *v, int ldv, int B, int S, int Hq, int Hkv,
                   float scale, const attn_drop &dr)
{
    size_t smem = (FWD_ROWS + 4 * ATTN_TILE) * D * sizeof(bf16);
    GL_CUDA_CHECK(cudaFuncSetAttribute(attn_fwd_kernel<D, DROP>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)smem));
    dim3 grid(Hq, B, (S + FWD_ROWS - 1) / FWD_ROWS);
    attn_fwd_kernel<D, DROP><<<grid, ATTN_THREADS, smem, st->stream>>>(
        o, ldo, lse, q, ldq, k, ldk, v, ldv, S, Hq, Hq / Hkv, scale * LOG2E, dr);
    GL_CUDA_LAUNCHED("attn_fwd");
}

/* launch<D, mode> for the attn_drop_mode `mode`. */
template <int D>
static void launch_d(gl_cuda_state *st, bf16 *o, int ldo, float *lse,
                     const bf16 *q, int ldq, const bf16 *k, int ldk,
                     const bf16 *v, int ldv, int B, int S, int Hq, int Hkv,
                     float scale, int mode, const attn_drop &dr)
{
    if (mode == ATTN_DROP_GROUPS)
        launch<D, ATTN_DROP_GROUPS>(st, o, ldo, lse, q, ldq, k, ldk, v, ldv, B, S,
                                    Hq, Hkv, scale, dr);
    else if (mode == ATTN_DROP_EACH)
        launch<D, ATTN_DROP_EACH>(st, o, ldo, lse, q, ldq, k, ldk, v, ldv, B, S,
                                  Hq, Hkv, scale, dr);
    else
        launch<D, ATTN_DROP_NONE>(st, o, ldo, lse, q, ldq, k, ldk, v, ldv, B, S,
                                  Hq, Hkv, scale, dr);
}

/* Shared by both directions: the shapes the kernels handle. */
void gl_cuda_attn_check(const char *what, int Hq, int Hkv, int D, float scale,
                        const void *p[], const int ld[], int np)
{
    if (Hkv <= 0 || Hq % Hkv != 0)
        gl_die("%s: %d query heads are not a multiple of %d key/value heads; "
               "choose --num-attention-heads divisible by --num-query-groups",
               what, Hq, Hkv);
    if (!(scale > 0))
        gl_die("%s: softmax scale %g is not positive (it is usually "
               "1/sqrt(head dimension))", what, scale);
    if (D != 64 && D != 128)
        gl_die("%s: head dimension %d is not supported by the CUDA attention "
               "kernels (64 or 128); choose --kv-channels 64 or 128 (hidden "
               "size / attention heads)", what, D);
    for (int i = 0; i < np; i++)
        if (((uintptr_t)p[i] & 15) || ld[i] % 8)
            gl_die("%s: a q/k/v/o view is not 16-byte aligned (pointer %p, "
                   "row stride %d elements); the attention kernels load 8 "
                   "bf16 at a time", what, p[i], ld[i]);
}

void gl_cuda_attn_fwd(gl_dev *d, bf16 *o, int ldo, float *lse, const bf16 *q,
                      int ldq, const bf16 *k, int ldk, const bf16 *v, int ldv,
                      int B, int S, int Hq, int Hkv, int D, float scale,
                      const gl_attn_dropout *dp)
{
    const void *p[] = {o, q, k, v};
    const int ld[] = {ldo, ldq, ldk, ldv};
    gl_cuda_attn_check("attn_fwd", Hq, Hkv, D, scale, p, ld, 4);
    attn_drop dr;
    int drop = attn_drop_of(&dr, dp, Hq, "attn_fwd");
    if (B <= 0 || S <= 0 || Hq <= 0)
        return;
    gl_cuda_state *st = gl_cuda_st(d);
    if (D == 64)
        launch_d<64>(st, o, ldo, lse, q, ldq, k, ldk, v, ldv, B, S, Hq, Hkv, scale,
                     attn_drop_mode(drop, S), dr);
    else
        launch_d<128>(st, o, ldo, lse, q, ldq, k, ldk, v, ldv, B, S, Hq, Hkv, scale,
                      attn_drop_mode(drop, S), dr);
}
