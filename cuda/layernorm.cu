/*
 * layernorm.cu: LayerNorm forward and backward, fp32 math on bf16 rows,
 * with w' = w, or 1 + w under one_plus (--apply-layernorm-1p).
 *
 * Forward, for each row x of h elements:
 *   mean = mean(x),  var = mean((x - mean)^2),  rstd = 1 / sqrt(var + eps),
 *   y_j = (x_j - mean) rstd w'_j + b_j,
 * one warp per row: a pass for the sum (warp shuffles), a pass for the
 * squared deviations from the mean, a pass to write y (the row is read
 * three times, the last two from cache).
 *
 * Backward, with xhat = (x - mean) rstd and g = w' dy:
 *   dx_k = rstd (g_k - mean(g) - xhat_k mean(g xhat)),
 *   dw_j = sum over rows of dy_j xhat_j,  db_j = sum over rows of dy_j.
 * Rows up to 16384 wide (2048 for odd sizes or unaligned views) take
 * layernorm_bwd_teams (see the comment above it), which keeps rows and
 * dw's sums in registers (the loops fully unrolled, or the arrays go to
 * local memory), with db from bias.cu's column sums of dy: one more read
 * of dy, where db's sums in registers too would not fit; wider rows take
 * the general kernel:
 * layernorm_bwd_rows: a block of 256 threads takes a run of consecutive
 * rows, all its threads on one row at a time; a thread owns the same
 * columns in every row.  Per row: a pass for the two sums (g and g xhat:
 * per thread, warp shuffles, then the warps' sums in warp order through
 * shared memory), a pass that writes dx and adds dy xhat and dy into the
 * thread's own slots of the block's [2h] shared-memory row (no atomics).
 * At the end the block writes that row to partial[block] (f32), and
 * bias.cu's colsum_final adds the G blocks' rows into dw and db in a
 * fixed order.  The grid (the blocks that fit on the GPU at once, up to 4
 * per SM) and everything else follow from the shapes and the GPU: the
 * same bits every run.
 */
#include <config.h>

#include "gl_cuda.h"
#include "norm_common.cuh"
#include "layernorm.cuh"
#include "vec.cuh"
#include "warp.cuh"

template <int V>
__global__ void layernorm_fwd_kernel(bf16 *y, float *mean, float *rstd,
                                     const bf16 *x, const bf16 *w,
                                     const bf16 *b, int n, int h, float eps,
                                     int one_plus)
{
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= n)
        return;
    const bf16 *xr = x + (size_t)row * h;
    bf16 *yr = y + (size_t)row * h;
    float s = 0;
    for (int c = lane * V; c < h; c += 32 * V) {
        float f[V];
        load_bf16<V>(f, xr + c);
        for (int i = 0; i < V; i++)
            s += f[i];
    }
    layernorm_row_finish<V>(yr, mean, rstd, row, xr, w, b, h, eps, one_plus,
                            lane, s);
}

template <int V>
__global__ void __launch_bounds__(NORM_THREADS)
layernorm_bwd_rows(bf16 *dx, float *partial, const bf16 *dy, const bf16 *x,
                   const bf16 *w, const float *mean, const float *rstd, int n,
                   int h, int rows_per_block, int one_plus, int accumulate_dx)
{
    extern __shared__ float acc[];          /* [2h]: dw terms, db terms */
    __shared__ float warp_part[2][2][NORM_WARPS];
    int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    for (int c = tid * V; c < h; c += NORM_THREADS * V)
        for (int i = 0; i < V; i++)
            acc[c + i] = acc[h + c + i] = 0;
    int r0 = blockIdx.x * rows_per_block;
    int r1 = min(n, r0 + rows_per_block);
    for (int row = r0; row < r1; row++) {
        const bf16 *xr = x + (size_t)row * h, *dyr = dy + (size_t)row * h;
        float mu = mean[row], r = rstd[row];
        float sg = 0, sgx = 0;
        for (int c = tid * V; c < h; c += NORM_THREADS * V) {
            float fx[V], fd[V], fw[V];
            load_bf16<V>(fx, xr + c);
            load_bf16<V>(fd, dyr + c);
            load_bf16<V>(fw, w + c);
            for (int i = 0; i < V; i++) {
                float g = (one_plus ? 1.0f + fw[i] : fw[i]) * fd[i];
                sg += g;
                sgx += g * (fx[i] - mu) * r;
            }
        }
        sg = warp_sum(sg);
        sgx = warp_sum(sgx);
        /* two slots by row parity: a warp may write the next row's sums
         * before a slower one has read this row's, but not the one after,
         * which the next barrier holds back */
        if (lane == 0) {
            warp_part[row & 1][0][warp] = sg;
            warp_part[row & 1][1][warp] = sgx;
        }
        __syncthreads();
        sg = sgx = 0;
        for (int i = 0; i < NORM_WARPS; i++) {
            sg += warp_part[row & 1][0][i];
            sgx += warp_part[row & 1][1][i];
        }
        float mg = sg / h, mgx = sgx / h;
        bf16 *dxr = dx + (size_t)row * h;
        for (int c = tid * V; c < h; c += NORM_THREADS * V) {
            float fx[V], fd[V], fw[V], o[V];
            load_bf16<V>(fx, xr + c);
            load_bf16<V>(fd, dyr + c);
            load_bf16<V>(fw, w + c);
            if (accumulate_dx)
                load_bf16<V>(o, dxr + c);
            for (int i = 0; i < V; i++) {
                float xhat = (fx[i] - mu) * r;
                float g = (one_plus ? 1.0f + fw[i] : fw[i]) * fd[i];
                float d = r * (g - mg - xhat * mgx);
                o[i] = accumulate_dx ? o[i] + d : d;
                acc[c + i] += fd[i] * xhat;
                acc[h + c + i] += fd[i];
            }
            store_bf16<V>(dxr + c, o);
        }
    }
    __syncthreads();
    float *pr = partial + (size_t)blockIdx.x * 2 * h;
    for (int c = tid; c < 2 * h; c += NORM_THREADS)
        pr[c] = acc[c];
}

/*
 * layernorm_bwd_teams: the faster path, for rows up to 16384 wide (2048
 * for odd sizes).  A team of T warps takes a row (T = 1 up to h = 2048
 * with 16-byte loads, then 2, 4, 8 warps); a lane owns the same columns
 * in every row: CH chunks of V elements, chunk k at column
 * ((k T + q) 32 + lane) V for warp q of the team.  The lane loads its
 * chunks of x and dy (and the old dx) once and keeps them in registers as
 * bf16, adds its part of the two row sums (warp shuffles; a team of
 * several warps adds its warps' sums through shared memory in warp
 * order), writes its dx and adds dy xhat into fp32 accumulators held in
 * registers.  The block's teams take rows blockIdx.x * TEAMS + team, then
 * grid-stride on; at the end the teams add their accumulators into one
 * shared-memory row [h] in team order, written to partial[block].  Every
 * order is fixed by the shapes and the grid.  norm_common.cuh has the
 * parts shared with RMSNorm's backward.
 */
template <int V, int CH, int T>
__global__ void __launch_bounds__(NORM_THREADS)
layernorm_bwd_teams(bf16 *dx, float *partial, const bf16 *dy, const bf16 *x,
                    const bf16 *w, const float *mean, const float *rstd,
                    int n, int h, int rows_per_block, int one_plus,
                    int accumulate_dx)
{
    constexpr int TEAMS = NORM_WARPS / T;
    (void)rows_per_block;        /* the general kernel's; teams stride */
    extern __shared__ float acc_block[];              /* [h] */
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int team = warp / T, q = warp % T;
    float aw[CH][V];
    #pragma unroll
    for (int k = 0; k < CH; k++)
        #pragma unroll
        for (int i = 0; i < V; i++)
            aw[k][i] = 0;

    /* base is the same in the whole block, so every warp meets the team
     * barrier equally often; a team past the last row idles */
    int it = 0;
    for (int base = blockIdx.x * TEAMS; base < n;
         base += gridDim.x * TEAMS, it++) {
        int row = base + team;
        bool live = row < n;
        bf16_raw<V> xv[CH], dv[CH], ov[CH];
        float mu = 0, r = 0, sg = 0, sgx = 0;
        const bf16 *xr = x + (size_t)row * h, *dyr = dy + (size_t)row * h;
        bf16 *dxr = dx + (size_t)row * h;
        if (live) {
            mu = mean[row];
            r = rstd[row];
            norm_load_chunks<V, CH, T>(xv, dv, ov, xr, dyr, dxr, h, q, lane,
                                       accumulate_dx);
            #pragma unroll
            for (int k = 0; k < CH; k++) {
                int c = norm_col<V, T>(k, q, lane);
                if (c < h) {
                    float fx[V], fd[V], fw[V];
                    unpack_bf16<V>(fx, xv[k]);
                    unpack_bf16<V>(fd, dv[k]);
                    load_bf16<V>(fw, w + c);
                    #pragma unroll
                    for (int i = 0; i < V; i++) {
                        float g = (one_plus ? 1.0f + fw[i] : fw[i]) * fd[i];
                        sg += g;
                        sgx += g * (fx[i] - mu) * r;
                    }
                }
            }
        }
        float sums[2] = {sg, sgx};
        norm_row_sums<T>(sums, it);
        if (!live)
            continue;
        float mg = sums[0] / h, mgx = sums[1] / h;
        #pragma unroll
        for (int k = 0; k < CH; k++) {
            int c = norm_col<V, T>(k, q, lane);
            if (c < h) {
                float fx[V], fd[V], fw[V], o[V];
                unpack_bf16<V>(fx, xv[k]);
                unpack_bf16<V>(fd, dv[k]);
                load_bf16<V>(fw, w + c);
                if (accumulate_dx)
                    unpack_bf16<V>(o, ov[k]);
                #pragma unroll
                for (int i = 0; i < V; i++) {
                    float xhat = (fx[i] - mu) * r;
                    float g = (one_plus ? 1.0f + fw[i] : fw[i]) * fd[i];
                    float d = r * (g - mg - xhat * mgx);
                    o[i] = accumulate_dx ? o[i] + d : d;
                    aw[k][i] += fd[i] * xhat;
                }
                store_bf16<V>(dxr + c, o);
            }
        }
    }

    /* the block's row of dw sums, the teams' added in team order */
    norm_block_row<V, CH, T>(acc_block, partial + (size_t)blockIdx.x * h, aw,
                             h, team, q, lane);
}

void gl_cuda_layernorm_fwd(cudaStream_t st, bf16 *y, float *mean, float *rstd,
                           const bf16 *x, const bf16 *w, const bf16 *b, int n,
                           int h, float eps, int one_plus)
{
    if (n <= 0 || h <= 0)
        return;
    int warps = 8;
    unsigned blocks = (unsigned)((n + warps - 1) / warps);
    if (gl_vec8_ok(h, y, x, w, b))
        layernorm_fwd_kernel<8><<<blocks, warps * 32, 0, st>>>(
            y, mean, rstd, x, w, b, n, h, eps, one_plus);
    else
        layernorm_fwd_kernel<1><<<blocks, warps * 32, 0, st>>>(
            y, mean, rstd, x, w, b, n, h, eps, one_plus);
    GL_CUDA_LAUNCHED("layernorm_fwd");
}

typedef void (*bwd_kernel)(bf16 *, float *, const bf16 *, const bf16 *,
                           const bf16 *, const float *, const float *, int,
                           int, int, int, int);

/* The layernorm_bwd_teams instance for rows of h elements moved V (8 or
 * 1) at a time (norm_pick_team); sets the rows a block takes at once.
 * NULL where the rows are too wide for it. */
template <int V>
static bwd_kernel pick_teams(int h, int *teams)
{
    const norm_team_entry<bwd_kernel> table[] =
        NORM_TEAM_TABLE(layernorm_bwd_teams, V);
    return norm_pick_team<V>(table, h, teams);
}

void gl_cuda_layernorm_bwd(gl_dev *d, bf16 *dx, float *dw, float *db,
                           const bf16 *dy, const bf16 *x, const bf16 *w,
                           const float *mean, const float *rstd, int n, int h,
                           int one_plus, int accumulate_dx)
{
    if (n <= 0 || h <= 0)
        return;
    gl_cuda_state *st = gl_cuda_st(d);
    int v8 = gl_vec8_ok(h, dx, dy, x, w), teams = 0;
    bwd_kernel k = v8 ? pick_teams<8>(h, &teams) : pick_teams<1>(h, &teams);
    bool general = k == NULL;
    if (general)
        k = v8 ? layernorm_bwd_rows<8> : layernorm_bwd_rows<1>;
    long ld = general ? 2L * h : h;      /* a partial row: [dw | db] or dw */
    size_t smem = (size_t)ld * sizeof(float);
    if (smem > (size_t)st->prop.sharedMemPerBlockOptin - 1024)
        gl_die("layernorm_bwd: hidden size %d needs %zu bytes of shared "
               "memory per block, more than this GPU's %zu", h, smem,
               (size_t)st->prop.sharedMemPerBlockOptin - 1024);
    GL_CUDA_CHECK(cudaFuncSetAttribute(
        k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    int per_sm = 0;
    GL_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &per_sm, k, NORM_THREADS, smem));
    per_sm = per_sm < 1 ? 1 : per_sm;
    /* as many blocks as fit on the GPU at once (the general kernel: up to
     * 4 per SM, each block adding a row of partial sums), fewer for few
     * rows; the general kernel's blocks take runs of rpb rows */
    int G = st->prop.multiProcessorCount * (general && per_sm > 4 ? 4 : per_sm);
    int most = general ? n : (n + teams - 1) / teams;
    if (G > most)
        G = most;
    int rpb = (n + G - 1) / G;
    if (general)
        G = (n + rpb - 1) / rpb;
    float *partial = (float *)gl_cuda_scratch(d, &st->s_norm,
                                              (size_t)G * ld * sizeof(float));
    k<<<G, NORM_THREADS, smem, st->stream>>>(dx, partial, dy, x, w, mean, rstd,
                                           n, h, rpb, one_plus, accumulate_dx);
    GL_CUDA_LAUNCHED(general ? "layernorm_bwd_rows" : "layernorm_bwd_teams");
    gl_cuda_colsum_final(st->stream, dw, partial, G, h, ld);
    if (general)
        gl_cuda_colsum_final(st->stream, db, partial + h, G, h, ld);
    else
        gl_cuda_bias_grad(d, db, dy, n, h);
}
