/*
 * attn_common.cuh: the tensor-core building blocks of the flash-attention
 * kernels (attention_fwd.cu, attention_bwd.cu).
 *
 * Tiles of 64 tokens x D (64 or 128) bf16 live in shared memory, one token
 * per row of D/8 16-byte chunks.  Chunk c of row r is stored at chunk
 * c ^ (r & 7): the 8 rows that one ldmatrix phase reads then hit 8
 * different bank groups (no conflicts), and a cp.async of a whole row still
 * writes 16 contiguous bytes per thread.
 *
 * The matrix unit is mma.sync m16n8k16 (bf16 in, fp32 accumulate).  Per
 * warp, with lane = 4 g + t:
 *   A (16x16, row-major): a0 = A[g][2t..2t+1],   a1 = A[g+8][2t..],
 *                         a2 = A[g][2t+8..],     a3 = A[g+8][2t+8..]
 *   B (16x8, k x n):      b0 = B[2t..2t+1][g],   b1 = B[2t+8..2t+9][g]
 *   C (16x8):             c0,c1 = C[g][2t..2t+1], c2,c3 = C[g+8][2t..2t+1]
 * ldmatrix.x4 fills four such 8x8 pieces from 32 row addresses; .trans
 * hands each thread a column pair instead of a row pair, which turns a
 * row-major [k][n] tile into B fragments.  An accumulator C of two
 * neighbouring n-tiles has exactly the layout of an A fragment, so
 * probabilities computed in registers feed the next product directly.
 */
#ifndef GL_CUDA_ATTN_COMMON_CUH
#define GL_CUDA_ATTN_COMMON_CUH

#include "base/philox.h"
#include "gl_cuda.h"

#define ATTN_TILE 64          /* tokens per tile, queries and keys */
#define ATTN_WARPS 4          /* 16 rows each */
#define ATTN_THREADS (ATTN_WARPS * 32)
#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f

__device__ __forceinline__ uint32_t smem_u32(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16 bytes global -> shared without passing through registers; with
 * valid == false the destination is zero-filled and nothing is read. */
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem,
                                           bool valid)
{
    int n = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(
                     smem_u32(smem)),
                 "l"(gmem), "r"(n));
}

__device__ __forceinline__ void cp_async_commit()
{
    asm volatile("cp.async.commit_group;\n" ::);
}

template <int N>
__device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}

__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const void *p)
{
    asm volatile(
        "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
        : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
        : "r"(smem_u32(p)));
}

/* c += a b, one m16n8k16 tile. */
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4],
                                         uint32_t b0, uint32_t b1)
{
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&v;
}

/* Element offset of (row, 16-byte chunk) in a swizzled tile of width D. */
template <int D>
__device__ __forceinline__ int swz(int row, int chunk)
{
    return row * D + ((chunk ^ (row & 7)) << 3);
}

/* Copies tokens [s0, s0 + 64) of one head (columns [0, D) at `base`, token
 * row stride ld, tokens >= S zero-filled) into a swizzled tile. */
template <int D>
__device__ __forceinline__ void load_tile(bf16 *tile, const bf16 *base,
                                          long ld, int s0, int S)
{
    constexpr int CH = D / 8;
    for (int idx = threadIdx.x; idx < ATTN_TILE * CH; idx += ATTN_THREADS) {
        int r = idx / CH, c = idx % CH;
        int s = s0 + r;
        bool ok = s < S;
        const bf16 *src = ok ? base + (long)s * ld + c * 8 : base;
        cp_async16(tile + swz<D>(r, c), src, ok);
    }
}

/* A fragments (16 rows starting at row0, k-step kk of 16 columns) of a
 * row-major swizzled tile. */
template <int D>
__device__ __forceinline__ void frag_a(uint32_t (&r)[4], const bf16 *tile,
                                       int row0, int kk, int lane)
{
    ldsm_x4(r, tile + swz<D>(row0 + (lane & 15), kk * 2 + (lane >> 4)));
}

/* B fragments of two n-tiles (rows n0..n0+15 of the tile are the n index,
 * its columns kk*16.. the k index): r0,r1 for n-tile n0, r2,r3 for n0+8. */
template <int D>
__device__ __forceinline__ void frag_b_rows(uint32_t (&r)[4], const bf16 *tile,
                                            int n0, int kk, int lane)
{
    ldsm_x4(r, tile + swz<D>(n0 + (lane & 7) + ((lane >> 4) << 3),
                             kk * 2 + ((lane >> 3) & 1)));
}

/* B fragments of two n-tiles where the tile's rows k0..k0+15 are the k
 * index and its columns dn*16.. the n index: r0,r1 for columns dn*16..+7,
 * r2,r3 for dn*16+8..+15. */
template <int D>
__device__ __forceinline__ void frag_b_cols(uint32_t (&r)[4], const bf16 *tile,
                                            int k0, int dn, int lane)
{
    ldsm_x4_t(r, tile + swz<D>(k0 + (lane & 7) + (((lane >> 3) & 1) << 3),
                               dn * 2 + (lane >> 4)));
}

/* acc += P X over one block of 64 keys, for the warp's MT m-tiles of 16
 * query rows: P [16 MT rows x 64 keys] is in fp32 registers in the mma
 * accumulator layout (where the block's Q K^T product left it), rounded
 * to bf16 and packed into A fragments; X is the [64 keys x D] tile in
 * shared memory, read as B fragments by frag_b_cols.  Four k-steps of 16
 * keys.  The forward's O += P V and the backward's dQ += dS K. */
template <int D, int MT>
__device__ __forceinline__ void mma_p_tile(float (&acc)[MT][D / 8][4],
                                           const float (&p)[MT][8][4],
                                           const bf16 *tile, int lane)
{
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        uint32_t a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            a[mt][0] = pack_bf16(p[mt][2 * kk][0], p[mt][2 * kk][1]);
            a[mt][1] = pack_bf16(p[mt][2 * kk][2], p[mt][2 * kk][3]);
            a[mt][2] = pack_bf16(p[mt][2 * kk + 1][0], p[mt][2 * kk + 1][1]);
            a[mt][3] = pack_bf16(p[mt][2 * kk + 1][2], p[mt][2 * kk + 1][3]);
        }
#pragma unroll
        for (int dn = 0; dn < D / 16; dn++) {
            uint32_t r[4];
            frag_b_cols<D>(r, tile, kk * 16, dn, lane);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                mma16816(acc[mt][2 * dn], a[mt], r[0], r[1]);
                mma16816(acc[mt][2 * dn + 1], a[mt], r[2], r[3]);
            }
        }
    }
}

/*
 * Attention dropout in the kernels (gl_attn_dropout of device/ops.h):
 * the call's key, threshold and placement, passed by value.  keep()
 * is the factor of probability (b, h, i, j) of the call: 1 / (1 - p)
 * when kept, 0 when dropped, from element
 *   e = ((b0 + b) heads + h0 + h) S^2 + i S + j
 * of the full probability tensor, exactly as the CPU reference draws it.
 *
 * Each Philox call gives the words of four elements 4 n .. 4 n + 3.
 * keep() uses one of them (one call per element).  When S is a multiple
 * of 4, e of key j of query i is j mod 4 (mod 4), so keys 4 m .. 4 m + 3
 * of one query are one Philox group, and the two helpers below draw each
 * group once and pass its bits to the lanes that hold it with warp
 * shuffles: one call per lane per 16 x 8 accumulator tile instead of
 * four.  The kernels choose per launch (attn_drop_mode):
 *   ATTN_DROP_EACH    keep() per element, any S;
 *   ATTN_DROP_GROUPS  keep_rows() / keep_cols(), S a multiple of 4 and
 *                     tiles starting at multiples of 8.
 * Both draw the same mask.
 */
enum { ATTN_DROP_NONE = 0, ATTN_DROP_EACH = 1, ATTN_DROP_GROUPS = 2 };

struct attn_drop {
    uint64_t seed;
    uint32_t iteration, stream, threshold;
    float scale;                  /* 1 / (1 - p) */
    long b0, h0, heads;

    /* e of probability (b, h, i, j): query i, key j. */
    __device__ __forceinline__ uint64_t elem(int b, int h, int S, int i, int j) const
    {
        return ((uint64_t)(b0 + b) * (uint64_t)heads + (uint64_t)(h0 + h)) *
                   (uint64_t)S * (uint64_t)S +
               (uint64_t)i * (uint64_t)S + (uint64_t)j;
    }

    __device__ __forceinline__ float keep(int b, int h, int S, int i, int j) const
    {
        return gl_dropout_keep(seed, iteration, stream, elem(b, h, S, i, j),
                               threshold) ? scale : 0.0f;
    }

    /* The keep bits of elements e .. e + 3 (e a multiple of 4): bit c for
     * element e + c.  One Philox call. */
    __device__ __forceinline__ uint32_t keep4(uint64_t e) const
    {
        uint32_t w[4];
        gl_dropout_words(w, seed, iteration, stream, e >> 2);
        return (uint32_t)(w[0] >= threshold) | (uint32_t)(w[1] >= threshold) << 1 |
               (uint32_t)(w[2] >= threshold) << 2 | (uint32_t)(w[3] >= threshold) << 3;
    }

    /* The factor of a keep bit (from keep_rows / keep_cols). */
    __device__ __forceinline__ float factor(uint32_t bits, int e) const
    {
        return (bits >> e & 1) ? scale : 0.0f;
    }

    /*
     * The keep bits of one lane's accumulator c[0..3] (mma layout, lane =
     * 4 g + t) of a 16 x 8 tile whose rows are queries i0 .. i0 + 15 and
     * whose columns are keys j0 .. j0 + 7: bit 2 hr + c for c[2 hr + c],
     * query i0 + 8 hr + g, key j0 + 2 t + c.  S % 4 == 0 and j0 % 4 == 0.
     *
     * The lanes t = 2 m and 2 m + 1 of group g hold keys j0 + 4 m .. +3
     * (one Philox group) of queries i0 + g and i0 + g + 8: lane t draws
     * the group of query i0 + g + 8 (t & 1), keeps its words 2 (t & 1)
     * and 2 (t & 1) + 1 (its own keys) and hands the other two to lane
     * t ^ 1, which holds them for the other query: one Philox call and
     * one shuffle per lane for the four elements.  Every lane of the warp
     * must call it (the shuffle), with warp-uniform i0, j0.
     */
    __device__ __forceinline__ uint32_t keep_rows(int b, int h, int S, int i0,
                                                  int j0, int lane) const
    {
        int g = lane >> 2, t = lane & 3, odd = t & 1;
        uint32_t mine = keep4(elem(b, h, S, i0 + g + 8 * odd, j0 + 4 * (t >> 1)));
        uint32_t other = __shfl_xor_sync(0xffffffffu, mine, 1);
        uint32_t top = odd ? other : mine;     /* query i0 + g */
        uint32_t bot = odd ? mine : other;     /* query i0 + g + 8 */
        return (top >> 2 * odd & 3) | (bot >> 2 * odd & 3) << 2;
    }

    /*
     * The same for the transposed tile of the dK/dV backward: rows are
     * keys j0 .. j0 + 15, columns queries i0 .. i0 + 7; bit 2 hr + c for
     * c[2 hr + c], key j0 + 8 hr + g, query i0 + 2 t + c.  S % 4 == 0 and
     * j0 % 4 == 0.
     *
     * Keys j0 + 8 hr + 4 m .. +3 (m = g >> 2) of query i0 + 2 t + c, one
     * Philox group, are held by the four lanes g = 4 m + r (r = 0..3) of
     * the same t, lane r holding word r as its c[2 hr + c].  Those four
     * lanes hold four groups ((hr, c) = (0,0), (0,1), (1,0), (1,1)):
     * lane r draws group s = r (hr = r >> 1, c = r & 1), and reads bit r
     * of group s from lane g = 4 m + s for each s (four shuffles): one
     * Philox call per lane for its four elements.  Every lane must call
     * it, with warp-uniform i0, j0.
     */
    __device__ __forceinline__ uint32_t keep_cols(int b, int h, int S, int i0,
                                                  int j0, int lane) const
    {
        int g = lane >> 2, t = lane & 3, r = g & 3;
        uint32_t mine = keep4(elem(b, h, S, i0 + 2 * t + (r & 1),
                                   j0 + 8 * (r >> 1) + 4 * (g >> 2)));
        uint32_t bits = 0;
#pragma unroll
        for (int s = 0; s < 4; s++) {
            uint32_t x = __shfl_sync(0xffffffffu, mine, (lane & ~12) | s << 2);
            bits |= (x >> r & 1) << s;
        }
        return bits;
    }

    /* keep_rows of the MT x 8 tiles of a warp's block of scores (MT <= 2):
     * m-tile mt (queries i0 + 16 mt ..), n-tile n (keys j0 + 8 n ..) in
     * bits 4 (8 mt + n) .. + 3.  One tile at a time (a rolled loop: the
     * state of one Philox call live), so that the kernels can draw the
     * mask before the score products, while few registers are live. */
    template <int MT>
    __device__ __forceinline__ uint64_t keep_rows_block(int b, int h, int S,
                                                        int i0, int j0,
                                                        int lane) const
    {
        static_assert(MT * 8 * 4 <= 64, "the bits of one block fit 64");
        uint64_t m = 0;
#pragma unroll 1
        for (int n = 0; n < MT * 8; n++)
            m |= (uint64_t)keep_rows(b, h, S, i0 + 16 * (n >> 3), j0 + 8 * (n & 7),
                                     lane) << 4 * n;
        return m;
    }

    /* keep_cols of the 8 tiles of a warp's transposed block (keys j0 ..
     * j0 + 15, queries i0 + 8 n ..): tile n in bits 4 n .. + 3; rolled
     * as keep_rows_block. */
    __device__ __forceinline__ uint32_t keep_cols_block(int b, int h, int S,
                                                        int i0, int j0,
                                                        int lane) const
    {
        uint32_t m = 0;
#pragma unroll 1
        for (int n = 0; n < 8; n++)
            m |= keep_cols(b, h, S, i0 + 8 * n, j0, lane) << 4 * n;
        return m;
    }
};

/* The dropout path of a launch: NONE without dropout (drop == 0), GROUPS
 * when S is a multiple of 4, else EACH. */
static inline int attn_drop_mode(int drop, int S)
{
    if (!drop)
        return ATTN_DROP_NONE;
    return S % 4 == 0 ? ATTN_DROP_GROUPS : ATTN_DROP_EACH;
}

/* dp as kernel arguments; returns 0 (no dropout to apply) when dp is NULL
 * or its p is 0.  Checks dp against a call of Hq heads (dies otherwise). */
static inline int attn_drop_of(attn_drop *a, const gl_attn_dropout *dp, int Hq,
                               const char *what)
{
    *a = attn_drop{};
    if (!dp)
        return 0;
    gl_attn_dropout_check(dp, Hq, what);
    if (dp->p <= 0)
        return 0;
    a->seed = dp->seed;
    a->iteration = dp->iteration;
    a->stream = gl_dropout_stream(dp->layer, dp->site);
    a->threshold = gl_dropout_threshold(dp->p);
    a->scale = (float)(1.0 / (1.0 - (double)dp->p));
    a->b0 = dp->b0;
    a->h0 = dp->h0;
    a->heads = dp->heads;
    return 1;
}

#endif
