/*
 * norm_common.cuh: the team scheme shared by the backward kernels of
 * RMSNorm (rmsnorm.cu, rmsnorm_bwd_rows) and LayerNorm (layernorm.cu,
 * layernorm_bwd_teams).
 *
 * A block is NORM_WARPS warps; a team of T of them (T = 1, 2, 4 or 8)
 * takes a row of h elements, so a block holds NORM_WARPS / T teams.  A
 * lane owns the same columns in every row: CH chunks of V elements, chunk
 * k at column norm_col<V, T>(k, q, lane) = ((k T + q) 32 + lane) V for
 * warp q of its team, so each load instruction of a warp reads 32
 * consecutive chunks.  The kernels keep a row's chunks in registers
 * (norm_load_chunks), add up their row sums over the team
 * (norm_row_sums), accumulate their weight-gradient terms in registers
 * [CH][V], and at the end add those into one row per block
 * (norm_block_row).  norm_pick_team chooses the instance for a width.
 *
 * Every sum has an order fixed by the shapes and the launch, never by
 * timing: the same bits every run.
 */
#ifndef GL_CUDA_NORM_COMMON_CUH
#define GL_CUDA_NORM_COMMON_CUH

#include "gl_cuda.h"
#include "vec.cuh"
#include "warp.cuh"

#define NORM_WARPS 8
#define NORM_THREADS (32 * NORM_WARPS)

/* The first column of chunk k of lane `lane` in warp q of a team. */
template <int V, int T>
__device__ __forceinline__ int norm_col(int k, int q, int lane)
{
    return ((k * T + q) * 32 + lane) * V;
}

/* Loads the lane's chunks of rows xr and dyr, and of dxr when
 * accumulate_dx, into registers as bf16; chunks at or past h are left
 * untouched. */
template <int V, int CH, int T>
__device__ __forceinline__ void
norm_load_chunks(bf16_raw<V> (&xv)[CH], bf16_raw<V> (&dv)[CH],
                 bf16_raw<V> (&ov)[CH], const bf16 *xr, const bf16 *dyr,
                 const bf16 *dxr, int h, int q, int lane, int accumulate_dx)
{
#pragma unroll
    for (int k = 0; k < CH; k++) {
        int c = norm_col<V, T>(k, q, lane);
        if (c < h) {
            xv[k] = load_raw<V>(xr + c);
            dv[k] = load_raw<V>(dyr + c);
            if (accumulate_dx)
                ov[k] = load_raw<V>(dxr + c);
        }
    }
}

/*
 * Turns each lane's parts s[0..S-1] of a row's S sums into the team's
 * sums, on every lane of the team: a warp sums its lanes (warp_sum), and
 * a team of several warps adds its warps' sums, in warp order, through
 * shared memory.  `it` counts the block's passes over rows: two slots by
 * its parity, as a warp can write the next row's sums before a slower one
 * has read this row's, but not the one after, which the next barrier
 * holds back.  With T > 1 every warp of the block must call this equally
 * often (it has a barrier).
 */
template <int T, int S>
__device__ __forceinline__ void norm_row_sums(float (&s)[S], int it)
{
#pragma unroll
    for (int j = 0; j < S; j++)
        s[j] = warp_sum(s[j]);
    if constexpr (T > 1) {
        __shared__ float slot[2][S][NORM_WARPS];
        int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
        int team = warp / T;
        if (lane == 0)
            for (int j = 0; j < S; j++)
                slot[it & 1][j][warp] = s[j];
        __syncthreads();
#pragma unroll
        for (int j = 0; j < S; j++) {
            s[j] = 0;
            for (int w = 0; w < T; w++)
                s[j] += slot[it & 1][j][team * T + w];
        }
    }
}

/*
 * The block's row of sums: team 0 writes its accumulators acc into row
 * [h] (shared memory), the other teams add theirs in team order (each
 * team covers every column once); then the block copies the row to out
 * [h] (its row of partial sums in global memory).  team, q and lane
 * are the calling lane's, as in norm_col.  Every thread of the block must
 * call this.
 */
template <int V, int CH, int T>
__device__ __forceinline__ void norm_block_row(float *row, float *out,
                                               const float (&acc)[CH][V],
                                               int h, int team, int q,
                                               int lane)
{
    constexpr int TEAMS = NORM_WARPS / T;
    for (int t = 0; t < TEAMS; t++) {
        if (team == t)
#pragma unroll
            for (int k = 0; k < CH; k++) {
                int c = norm_col<V, T>(k, q, lane);
                if (c < h)
#pragma unroll
                    for (int i = 0; i < V; i++)
                        row[c + i] = (t ? row[c + i] : 0.0f) + acc[k][i];
            }
        __syncthreads();
    }
    for (int c = threadIdx.x; c < h; c += NORM_THREADS)
        out[c] = row[c];
}

/* One entry of a table of team kernels: instance k covers rows of up to
 * `chunks` chunks per warp-wide pass (32 V elements) with `teams` teams
 * per block. */
template <class K>
struct norm_team_entry {
    int chunks;
    K k;
    int teams;
};

/* The table for KERNEL<V, CH, T>: the fewest chunks per lane that cover
 * a row, up to 8, then teams of 2, 4 and 8 warps (rows up to 64 chunks:
 * 16384 elements for V = 8, 2048 for V = 1). */
#define NORM_TEAM_TABLE(KERNEL, V)                                         \
    {                                                                      \
        {1, KERNEL<V, 1, 1>, NORM_WARPS},                                  \
        {2, KERNEL<V, 2, 1>, NORM_WARPS},                                  \
        {4, KERNEL<V, 4, 1>, NORM_WARPS},                                  \
        {8, KERNEL<V, 8, 1>, NORM_WARPS},                                  \
        {16, KERNEL<V, 8, 2>, NORM_WARPS / 2},                             \
        {32, KERNEL<V, 8, 4>, NORM_WARPS / 4},                             \
        {64, KERNEL<V, 8, 8>, 1},                                          \
    }

/* The first instance of table[] (NORM_TEAM_TABLE) that covers rows of h
 * elements moved V at a time; sets its teams per block.  NULL where the
 * rows are too wide for all of them. */
template <int V, class K, size_t N>
static K norm_pick_team(const norm_team_entry<K> (&table)[N], int h,
                        int *teams)
{
    int chunks = (h + 32 * V - 1) / (32 * V);   /* per warp-wide pass */
    for (size_t i = 0; i < N; i++)
        if (chunks <= table[i].chunks) {
            *teams = table[i].teams;
            return table[i].k;
        }
    return NULL;
}

#endif
