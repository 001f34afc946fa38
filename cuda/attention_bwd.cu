/*
 * attention_bwd.cu: causal grouped-query flash attention, backward.
 *
 * With P_tu = exp(scale q_t . k_u - lse_t) recomputed from the saved lse
 * (u <= t), and dO the output's gradient:
 *   dv_u  = sum_t P_tu do_t                   (over the group's query heads)
 *   dP_tu = do_t . v_u
 *   dS_tu = P_tu (dP_tu - D_t),   D_t = do_t . o_t   (= sum_u P_tu dP_tu)
 *   dq_t  = scale sum_u dS_tu k_u,   dk_u = scale sum_t dS_tu q_t.
 *
 * Three kernels, no atomics, no S x S matrix:
 *   1. attn_delta: D_t for every (batch, head, token), fp32 scratch.
 *   2. attn_bwd_dkdv: a block owns 64 keys of one kv head and walks every
 *      query tile at or after them, for each query head of its group in
 *      turn, so dk and dv of a kv head sum their query heads' shares in
 *      registers.  Per query tile each warp (16 keys) forms, on the tensor
 *      cores, S^T = K Q^T and dP^T = V dO^T, turns them into P^T and dS^T
 *      in registers, and accumulates dV += P^T dO and dK += dS^T Q.
 *   3. attn_bwd_dq: a block owns 128 (D = 64) or 64 (D = 128) queries of
 *      one head and walks the key tiles up to its last query, as in the
 *      forward: S = Q K^T, dP = dO V^T, dS = P (dP - D), dQ += dS K.
 * Kernels 2 and 3 both recompute S and dP (7 tile products instead of the
 * 5 of a version that adds dq with atomics); in exchange every output is
 * written once, by one block, in a fixed order.  Q, dO tiles (kernel 2)
 * and K, V tiles (kernel 3) stream through shared memory with cp.async,
 * two stages deep.
 *
 * With attention dropout (DROP), the forward's O = P' V with
 * P'_tu = keep_tu P_tu, keep = M / (1 - p) (attn_drop, the forward's own
 * mask, redrawn from the same key).  Then
 *   dv_u  = sum_t P'_tu do_t
 *   dP'_tu = do_t . v_u,   dP_tu = keep_tu dP'_tu
 *   dS_tu = P_tu (dP_tu - sum_w P_tw dP_tw)   (undropped P: the softmax's
 *                                              own backward)
 * and sum_w P_tw dP_tw = sum_w P'_tw do_t . v_w = do_t . o_t with o the
 * forward's (dropped) output: D_t of kernel 1 is unchanged, and only the
 * two P^T / dS^T (P / dS) steps of kernels 2 and 3 take the keep factor:
 *   P'^T for dV,   dS = P (keep dP' - D).
 * DROP is the launch's attn_drop_mode: with S a multiple of 4 (GROUPS) a
 * lane draws one Philox call per 16 x 8 tile, i.e. per four of its
 * elements (attn_drop::keep_cols in kernel 2, keep_rows in kernel 3);
 * else one per element (EACH).
 */
#include <config.h>

#include <math.h>

#include "attn_common.cuh"
#include "warp.cuh"

/* 4 bytes global -> shared, zero-filled when !valid. */
__device__ __forceinline__ void cp_async4(void *smem, const void *gmem,
                                          bool valid)
{
    int n = valid ? 4 : 0;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(
                     smem_u32(smem)),
                 "l"(gmem), "r"(n));
}

/* D_t = sum_d do_t[d] o_t[d]: one warp per (token, head) row. */
__global__ void attn_delta_kernel(float *delta, const bf16 *dout, int lddo,
                                  const bf16 *o, int ldo, int S, int Hq, int D,
                                  long rows)
{
    long r = blockIdx.x * (long)(blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (r >= rows)
        return;
    int h = (int)(r % Hq);
    long tok = r / Hq;                      /* b * S + s */
    const bf16 *dr = dout + tok * lddo + (long)h * D;
    const bf16 *orow = o + tok * ldo + (long)h * D;
    float acc = 0;
    for (int c = lane * 2; c < D; c += 64) {
        float2 a = __bfloat1622float2(*(const __nv_bfloat162 *)(dr + c));
        float2 bb = __bfloat1622float2(*(const __nv_bfloat162 *)(orow + c));
        acc += a.x * bb.x + a.y * bb.y;
    }
    acc = warp_sum(acc);
    if (lane == 0) {
        long b = tok / S, s = tok % S;
        delta[(b * Hq + h) * S + s] = acc;
    }
}

template <int D, int DROP>
__global__ void __launch_bounds__(ATTN_THREADS)
attn_bwd_dkdv_kernel(bf16 *dk, bf16 *dv, int ldg, const bf16 *dout, int lddo,
                     const float *lse, const float *delta, const bf16 *q,
                     int ldq, const bf16 *k, int ldk, const bf16 *v, int ldv,
                     int S, int Hq, int group, float scale, float scale_log2,
                     attn_drop dr)
{
    constexpr int KS = D / 16, NT = D / 8, T = ATTN_TILE;
    extern __shared__ __align__(128) bf16 smem[];
    bf16 *sK = smem, *sV = sK + T * D;
    bf16 *sQ = sV + T * D;                    /* [2][64][D] */
    bf16 *sdO = sQ + 2 * T * D;               /* [2][64][D] */
    float *sL = (float *)(sdO + 2 * T * D);   /* [2][64] lse, log2 units */
    float *sDl = sL + 2 * T;                  /* [2][64] D_t */

    int nqt = (S + T - 1) / T;
    int kt = blockIdx.z, kvh = blockIdx.x, b = blockIdx.y;  /* longest first */
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int g = lane / 4, t = lane % 4;
    int k0 = kt * T;
    int per = nqt - kt;                       /* query tiles per head */
    int n_it = group * per;

    load_tile<D>(sK, k + (long)b * S * ldk + (long)kvh * D, ldk, k0, S);
    load_tile<D>(sV, v + (long)b * S * ldv + (long)kvh * D, ldv, k0, S);

    /* Stage iteration it (query head kvh*group + it/per, query tile
     * kt + it%per) into buffer buf. */
    auto issue = [&](int it, int buf) {
        int h = kvh * group + it / per, qt = kt + it % per;
        load_tile<D>(sQ + buf * T * D, q + (long)b * S * ldq + (long)h * D, ldq,
                     qt * T, S);
        load_tile<D>(sdO + buf * T * D, dout + (long)b * S * lddo + (long)h * D,
                     lddo, qt * T, S);
        if (threadIdx.x < 2 * T) {
            int i = threadIdx.x % T, s = qt * T + i;
            const float *src = (threadIdx.x < T ? lse : delta) +
                               ((long)b * Hq + h) * S + s;
            float *dst = (threadIdx.x < T ? sL : sDl) + buf * T + i;
            cp_async4(dst, s < S ? src : lse, s < S);
        }
    };

    /* At D = 64 the warp's K and V rows stay in registers as A fragments
     * for the whole walk; at D = 128 they would crowd out the
     * accumulators and are re-read from shared memory. */
    constexpr bool KVREG = D == 64;
    uint32_t kf[KVREG ? KS : 1][4], vf[KVREG ? KS : 1][4];

    float dka[NT][4], dva[NT][4];
#pragma unroll
    for (int i = 0; i < NT; i++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            dka[i][e] = dva[i][e] = 0;

    issue(0, 0);
    cp_async_commit();
    if constexpr (KVREG) {
        cp_async_wait<0>();
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < KS; kk++) {
            frag_a<D>(kf[KVREG ? kk : 0], sK, warp * 16, kk, lane);
            frag_a<D>(vf[KVREG ? kk : 0], sV, warp * 16, kk, lane);
        }
    }
    for (int it = 0; it < n_it; it++) {
        int buf = it & 1;
        if (it + 1 < n_it)
            issue(it + 1, buf ^ 1);
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        const bf16 *tQ = sQ + buf * T * D, *tdO = sdO + buf * T * D;
        const float *tL = sL + buf * T, *tD = sDl + buf * T;
        int q0 = (kt + it % per) * T;
        int hq = kvh * group + it / per;      /* the query head */

        /* GROUPS: the dropout mask of the warp's 8 transposed tiles, one
         * Philox call per lane per tile (8 per query tile instead of 32),
         * drawn by every lane (keep_cols shuffles) before the products */
        uint32_t keepm = 0;
        if constexpr (DROP == ATTN_DROP_GROUPS)
            keepm = dr.keep_cols_block(b, hq, S, q0, k0 + warp * 16, lane);

        /* S^T = K Q^T and dP^T = V dO^T: 16 keys x 64 queries each */
        float p[8][4], dp[8][4];
#pragma unroll
        for (int i = 0; i < 8; i++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                p[i][e] = dp[i][e] = 0;
#pragma unroll
        for (int kk = 0; kk < KS; kk++) {
            uint32_t ka[4], va[4];
            if constexpr (KVREG) {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    ka[e] = kf[KVREG ? kk : 0][e];
                    va[e] = vf[KVREG ? kk : 0][e];
                }
            } else {
                frag_a<D>(ka, sK, warp * 16, kk, lane);
                frag_a<D>(va, sV, warp * 16, kk, lane);
            }
#pragma unroll
            for (int np = 0; np < 4; np++) {
                uint32_t r[4];
                frag_b_rows<D>(r, tQ, np * 16, kk, lane);
                mma16816(p[2 * np], ka, r[0], r[1]);
                mma16816(p[2 * np + 1], ka, r[2], r[3]);
                frag_b_rows<D>(r, tdO, np * 16, kk, lane);
                mma16816(dp[2 * np], va, r[0], r[1]);
                mma16816(dp[2 * np + 1], va, r[2], r[3]);
            }
        }
        /* P^T = exp(S^T scale - lse) where key <= query < S, else 0;
         * dS^T = P^T (dP^T - D) */
#pragma unroll
        for (int i = 0; i < 8; i++) {
            uint32_t bits = keepm >> 4 * i;
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int key = k0 + warp * 16 + g + (e >> 1) * 8;
                int qi = i * 8 + 2 * t + (e & 1), qg = q0 + qi;
                float pv = 0, kf = 1;
                if (key <= qg && qg < S) {
                    pv = exp2f(p[i][e] * scale_log2 - tL[qi] * LOG2E);
                    if constexpr (DROP == ATTN_DROP_GROUPS)
                        kf = dr.factor(bits, e);
                    else if constexpr (DROP == ATTN_DROP_EACH)
                        kf = dr.keep(b, hq, S, qg, key);
                }
                p[i][e] = DROP ? pv * kf : pv;
                dp[i][e] = pv * ((DROP ? kf * dp[i][e] : dp[i][e]) - tD[qi]);
            }
        }
        /* dV += P^T dO, dK += dS^T Q: k runs over the 64 queries */
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            uint32_t pa[4], sa[4];
            pa[0] = pack_bf16(p[2 * kk][0], p[2 * kk][1]);
            pa[1] = pack_bf16(p[2 * kk][2], p[2 * kk][3]);
            pa[2] = pack_bf16(p[2 * kk + 1][0], p[2 * kk + 1][1]);
            pa[3] = pack_bf16(p[2 * kk + 1][2], p[2 * kk + 1][3]);
            sa[0] = pack_bf16(dp[2 * kk][0], dp[2 * kk][1]);
            sa[1] = pack_bf16(dp[2 * kk][2], dp[2 * kk][3]);
            sa[2] = pack_bf16(dp[2 * kk + 1][0], dp[2 * kk + 1][1]);
            sa[3] = pack_bf16(dp[2 * kk + 1][2], dp[2 * kk + 1][3]);
#pragma unroll
            for (int dn = 0; dn < D / 16; dn++) {
                uint32_t r[4];
                frag_b_cols<D>(r, tdO, kk * 16, dn, lane);
                mma16816(dva[2 * dn], pa, r[0], r[1]);
                mma16816(dva[2 * dn + 1], pa, r[2], r[3]);
                frag_b_cols<D>(r, tQ, kk * 16, dn, lane);
                mma16816(dka[2 * dn], sa, r[0], r[1]);
                mma16816(dka[2 * dn + 1], sa, r[2], r[3]);
            }
        }
        __syncthreads();       /* buf is refilled by the next iteration's issue */
    }

#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        int key = k0 + warp * 16 + g + hr * 8;
        if (key >= S)
            continue;
        bf16 *dkr = dk + ((long)b * S + key) * ldg + (long)kvh * D;
        bf16 *dvr = dv + ((long)b * S + key) * ldg + (long)kvh * D;
#pragma unroll
        for (int i = 0; i < NT; i++) {
            *(__nv_bfloat162 *)(dkr + i * 8 + 2 * t) = __floats2bfloat162_rn(
                dka[i][2 * hr] * scale, dka[i][2 * hr + 1] * scale);
            *(__nv_bfloat162 *)(dvr + i * 8 + 2 * t) =
                __floats2bfloat162_rn(dva[i][2 * hr], dva[i][2 * hr + 1]);
        }
    }
}

/* Query rows of a warp in the dq kernel: 2 m-tiles at D = 64 (each K or
 * V fragment then feeds two products), 1 at D = 128 (registers). */
template <int D>
struct dq_shape {
    static constexpr int MT = D == 64 ? 2 : 1;
    static constexpr int ROWS = ATTN_WARPS * 16 * MT;
};

template <int D, int DROP>
__global__ void __launch_bounds__(ATTN_THREADS)
attn_bwd_dq_kernel(bf16 *dq, int ldg, const bf16 *dout, int lddo,
                   const float *lse, const float *delta, const bf16 *q, int ldq,
                   const bf16 *k, int ldk, const bf16 *v, int ldv, int S,
                   int Hq, int group, float scale, float scale_log2,
                   attn_drop dr)
{
    constexpr int KS = D / 16, NT = D / 8, T = ATTN_TILE;
    constexpr int MT = dq_shape<D>::MT, ROWS = dq_shape<D>::ROWS;
    extern __shared__ __align__(128) bf16 smem[];
    bf16 *sQ = smem, *sdO = sQ + ROWS * D;
    bf16 *sK = sdO + ROWS * D;                /* [2][64][D] */
    bf16 *sV = sK + 2 * T * D;                /* [2][64][D] */

    int nqt = (S + ROWS - 1) / ROWS, nkt = (S + T - 1) / T;
    int qt = nqt - 1 - blockIdx.z;            /* longest first */
    int h = blockIdx.x, b = blockIdx.y, kvh = h / group;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int g = lane / 4, t = lane % 4;
    int q0 = qt * ROWS;
    int wrow0 = q0 + warp * 16 * MT;
    int jmax = min(nkt - 1, (q0 + ROWS - 1) / T);
    const bf16 *kb = k + (long)b * S * ldk + (long)kvh * D;
    const bf16 *vb = v + (long)b * S * ldv + (long)kvh * D;

#pragma unroll
    for (int r = 0; r < ROWS; r += T) {
        load_tile<D>(sQ + r * D, q + (long)b * S * ldq + (long)h * D, ldq,
                     q0 + r, S);
        load_tile<D>(sdO + r * D, dout + (long)b * S * lddo + (long)h * D,
                     lddo, q0 + r, S);
    }
    load_tile<D>(sK, kb, ldk, 0, S);
    load_tile<D>(sV, vb, ldv, 0, S);
    cp_async_commit();

    /* rows (mt, hr) = wrow0 + mt*16 + hr*8 + g */
    float lse2[MT][2], dl[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            int row = wrow0 + mt * 16 + hr * 8 + g;
            bool ok = row < S;
            long idx = ((long)b * Hq + h) * S + row;
            lse2[mt][hr] = ok ? lse[idx] * LOG2E : 0.0f;
            dl[mt][hr] = ok ? delta[idx] : 0.0f;
        }
    float acc[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int i = 0; i < NT; i++)
            acc[mt][i][0] = acc[mt][i][1] = acc[mt][i][2] = acc[mt][i][3] = 0;
    cp_async_wait<0>();
    __syncthreads();

    for (int j = 0; j <= jmax; j++) {
        int buf = j & 1;
        if (j < jmax) {
            load_tile<D>(sK + (buf ^ 1) * T * D, kb, ldk, (j + 1) * T, S);
            load_tile<D>(sV + (buf ^ 1) * T * D, vb, ldv, (j + 1) * T, S);
        }
        cp_async_commit();
        const bf16 *tK = sK + buf * T * D, *tV = sV + buf * T * D;
        int key0 = j * T;

        if (key0 <= wrow0 + 16 * MT - 1) {     /* else all masked */
            /* GROUPS: the dropout mask of the warp's MT x 8 tiles, one
             * Philox call per lane per tile (MT x 8 per key tile instead
             * of 4 MT x 8), drawn by every lane (keep_rows shuffles)
             * before the products */
            uint64_t keepm = 0;
            if constexpr (DROP == ATTN_DROP_GROUPS)
                keepm = dr.keep_rows_block<MT>(b, h, S, wrow0, key0, lane);

            /* S = Q K^T and dP = dO V^T: 16 MT queries x 64 keys each */
            float p[MT][8][4], dp[MT][8][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int i = 0; i < 8; i++)
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        p[mt][i][e] = dp[mt][i][e] = 0;
#pragma unroll
            for (int kk = 0; kk < KS; kk++) {
                uint32_t qa[MT][4], da[MT][4];
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    frag_a<D>(qa[mt], sQ, warp * 16 * MT + mt * 16, kk, lane);
                    frag_a<D>(da[mt], sdO, warp * 16 * MT + mt * 16, kk, lane);
                }
#pragma unroll
                for (int np = 0; np < 4; np++) {
                    uint32_t r[4];
                    frag_b_rows<D>(r, tK, np * 16, kk, lane);
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) {
                        mma16816(p[mt][2 * np], qa[mt], r[0], r[1]);
                        mma16816(p[mt][2 * np + 1], qa[mt], r[2], r[3]);
                    }
                    frag_b_rows<D>(r, tV, np * 16, kk, lane);
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) {
                        mma16816(dp[mt][2 * np], da[mt], r[0], r[1]);
                        mma16816(dp[mt][2 * np + 1], da[mt], r[2], r[3]);
                    }
                }
            }
            /* dS = P (dP - D), P = exp(S scale - lse) where key <= query;
             * with dropout dP = keep dP' */
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    uint32_t bits = (uint32_t)(keepm >> 4 * (8 * mt + i));
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        int key = key0 + i * 8 + 2 * t + (e & 1);
                        int row = wrow0 + mt * 16 + (e >> 1) * 8 + g;
                        float pv = 0, dpk = dp[mt][i][e];
                        if (key <= row) {
                            pv = exp2f(p[mt][i][e] * scale_log2 - lse2[mt][e >> 1]);
                            if constexpr (DROP == ATTN_DROP_GROUPS)
                                dpk *= dr.factor(bits, e);
                            else if constexpr (DROP == ATTN_DROP_EACH)
                                dpk *= dr.keep(b, h, S, row, key);
                        }
                        dp[mt][i][e] = pv * (dpk - dl[mt][e >> 1]);
                    }
                }
            /* dQ += dS K: k runs over the 64 keys */
            mma_p_tile<D, MT>(acc, dp, tK, lane);
        }
        cp_async_wait<0>();
        __syncthreads();
    }

#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            int row = wrow0 + mt * 16 + hr * 8 + g;
            if (row >= S)
                continue;
            bf16 *dr = dq + ((long)b * S + row) * ldg + (long)h * D;
#pragma unroll
            for (int i = 0; i < NT; i++)
                *(__nv_bfloat162 *)(dr + i * 8 + 2 * t) = __floats2bfloat162_rn(
                    acc[mt][i][2 * hr] * scale, acc[mt][i][2 * hr + 1] * scale);
        }
}

template <int D, int DROP>
static void launch(gl_dev *d, float *delta, bf16 *dq, bf16 *dk, bf16 *dv,
                   int ldg, const bf16 *dout, int lddo, const float *lse,
                   const bf16 *q, int ldq, const bf16 *k, int ldk,
                   const bf16 *v, int ldv, int B, int S, int Hq, int Hkv,
                   float scale, const attn_drop &dr)
{
    cudaStream_t st = gl_cuda_st(d)->stream;
    int group = Hq / Hkv, nt = (S + ATTN_TILE - 1) / ATTN_TILE;
    float sl2 = scale * LOG2E;

    size_t smem1 = 6 * ATTN_TILE * D * sizeof(bf16) + 4 * ATTN_TILE * sizeof(float);
    GL_CUDA_CHECK(cudaFuncSetAttribute(attn_bwd_dkdv_kernel<D, DROP>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)smem1));
    attn_bwd_dkdv_kernel<D, DROP><<<dim3(Hkv, B, nt), ATTN_THREADS, smem1, st>>>(
        dk, dv, ldg, dout, lddo, lse, delta, q, ldq, k, ldk, v, ldv, S, Hq,
        group, scale, sl2, dr);
    GL_CUDA_LAUNCHED("attn_bwd_dkdv");

    constexpr int ROWS = dq_shape<D>::ROWS;
    size_t smem2 = (2 * ROWS + 4 * ATTN_TILE) * D * sizeof(bf16);
    GL_CUDA_CHECK(cudaFuncSetAttribute(attn_bwd_dq_kernel<D, DROP>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)smem2));
    int nq = (S + ROWS - 1) / ROWS;
    attn_bwd_dq_kernel<D, DROP><<<dim3(Hq, B, nq), ATTN_THREADS, smem2, st>>>(
        dq, ldg, dout, lddo, lse, delta, q, ldq, k, ldk, v, ldv, S, Hq, group,
        scale, sl2, dr);
    GL_CUDA_LAUNCHED("attn_bwd_dq");
}

/* launch<D, mode> for the attn_drop_mode `mode`. */
template <int D>
static void launch_d(gl_dev *d, float *delta, bf16 *dq, bf16 *dk, bf16 *dv,
                     int ldg, const bf16 *dout, int lddo, const float *lse,
                     const bf16 *q, int ldq, const bf16 *k, int ldk,
                     const bf16 *v, int ldv, int B, int S, int Hq, int Hkv,
                     float scale, int mode, const attn_drop &dr)
{
    if (mode == ATTN_DROP_GROUPS)
        launch<D, ATTN_DROP_GROUPS>(d, delta, dq, dk, dv, ldg, dout, lddo, lse, q,
                                    ldq, k, ldk, v, ldv, B, S, Hq, Hkv, scale, dr);
    else if (mode == ATTN_DROP_EACH)
        launch<D, ATTN_DROP_EACH>(d, delta, dq, dk, dv, ldg, dout, lddo, lse, q,
                                  ldq, k, ldk, v, ldv, B, S, Hq, Hkv, scale, dr);
    else
        launch<D, ATTN_DROP_NONE>(d, delta, dq, dk, dv, ldg, dout, lddo, lse, q,
                                  ldq, k, ldk, v, ldv, B, S, Hq, Hkv, scale, dr);
}

void gl_cuda_attn_bwd(gl_dev *d, bf16 *dq, bf16 *dk, bf16 *dv, int ldg,
                      const bf16 *dout, int lddo, const bf16 *o, int ldo,
                      const float *lse, const bf16 *q, int ldq, const bf16 *k,
                      int ldk, const bf16 *v, int ldv, int B, int S, int Hq,
                      int Hkv, int D, float scale, const gl_attn_dropout *dp)
{
    const void *p[] = {dq, dk, dv, dout, o, q, k, v};
    const int ld[] = {ldg, ldg, ldg, lddo, ldo, ldq, ldk, ldv};
    gl_cuda_attn_check("attn_bwd", Hq, Hkv, D, scale, p, ld, 8);
    attn_drop dr;
    int drop = attn_drop_of(&dr, dp, Hq, "attn_bwd");
    if (B <= 0 || S <= 0 || Hq <= 0)
        return;
    gl_cuda_state *st = gl_cuda_st(d);
    long rows = (long)B * S * Hq;
    float *delta = (float *)gl_cuda_scratch(d, &st->s_attn,
                                            (size_t)rows * sizeof(float));
    attn_delta_kernel<<<(unsigned)((rows + 7) / 8), 256, 0, st->stream>>>(
        delta, dout, lddo, o, ldo, S, Hq, D, rows);
    GL_CUDA_LAUNCHED("attn_delta");
    if (D == 64)
        launch_d<64>(d, delta, dq, dk, dv, ldg, dout, lddo, lse, q, ldq, k, ldk, v,
                     ldv, B, S, Hq, Hkv, scale, attn_drop_mode(drop, S), dr);
    else
        launch_d<128>(d, delta, dq, dk, dv, ldg, dout, lddo, lse, q, ldq, k, ldk, v,
                      ldv, B, S, Hq, Hkv, scale, attn_drop_mode(drop, S), dr);
}
