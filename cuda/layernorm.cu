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
 * layernorm_bwd_rows: a block of 256 threads takes a run of consecutive
 * rows, all its threads on one row at a time; a thread owns the same
 * columns in every row.  Per row: a pass for the two sums (g and g xhat:
 * per thread, warp shuffles, then the warps' sums in warp order through
 * shared memory), a pass that writes dx and adds dy xhat and dy into the
 * thread's own slots of the block's [2h] shared-memory row (no atomics).
 * At the end the block writes that row to partial[block] (f32), and
 * bias.cu's colsum_final adds the G blocks' rows into dw and db in a
 * fixed order.  The grid (2 blocks per SM) and everything else follow
 * from the shapes and the GPU: the same bits every run.
 */
#include <config.h>

#include "gl_cuda.h"
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
    float mu = warp_sum(s) / h;
    float ss = 0;
    for (int c = lane * V; c < h; c += 32 * V) {
        float f[V];
        load_bf16<V>(f, xr + c);
        for (int i = 0; i < V; i++)
            ss += (f[i] - mu) * (f[i] - mu);
    }
    float r = 1.0f / sqrtf(warp_sum(ss) / h + eps);
    for (int c = lane * V; c < h; c += 32 * V) {
        float f[V], g[V], bb[V];
        load_bf16<V>(f, xr + c);
        load_bf16<V>(g, w + c);
        load_bf16<V>(bb, b + c);
        for (int i = 0; i < V; i++)
            f[i] = (f[i] - mu) * r * (one_plus ? 1.0f + g[i] : g[i]) + bb[i];
        store_bf16<V>(yr + c, f);
    }
    if (lane == 0) {
        mean[row] = mu;
        rstd[row] = r;
    }
}

#define LN_WARPS 8
#define LN_THREADS (32 * LN_WARPS)

template <int V>
__global__ void __launch_bounds__(LN_THREADS)
layernorm_bwd_rows(bf16 *dx, float *partial, const bf16 *dy, const bf16 *x,
                   const bf16 *w, const float *mean, const float *rstd, int n,
                   int h, int rows_per_block, int one_plus, int accumulate_dx)
{
    extern __shared__ float acc[];          /* [2h]: dw terms, db terms */
    __shared__ float warp_part[2][2][LN_WARPS];
    int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    for (int c = tid * V; c < h; c += LN_THREADS * V)
        for (int i = 0; i < V; i++)
            acc[c + i] = acc[h + c + i] = 0;
    int r0 = blockIdx.x * rows_per_block;
    int r1 = min(n, r0 + rows_per_block);
    for (int row = r0; row < r1; row++) {
        const bf16 *xr = x + (size_t)row * h, *dyr = dy + (size_t)row * h;
        float mu = mean[row], r = rstd[row];
        float sg = 0, sgx = 0;
        for (int c = tid * V; c < h; c += LN_THREADS * V) {
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
        for (int i = 0; i < LN_WARPS; i++) {
            sg += warp_part[row & 1][0][i];
            sgx += warp_part[row & 1][1][i];
        }
        float mg = sg / h, mgx = sgx / h;
        bf16 *dxr = dx + (size_t)row * h;
        for (int c = tid * V; c < h; c += LN_THREADS * V) {
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
    for (int c = tid; c < 2 * h; c += LN_THREADS)
        pr[c] = acc[c];
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

void gl_cuda_layernorm_bwd(gl_dev *d, bf16 *dx, float *dw, float *db,
                           const bf16 *dy, const bf16 *x, const bf16 *w,
                           const float *mean, const float *rstd, int n, int h,
                           int one_plus, int accumulate_dx)
{
    if (n <= 0 || h <= 0)
        return;
    gl_cuda_state *st = gl_cuda_st(d);
    size_t smem = (size_t)2 * h * sizeof(float);
    if (smem > (size_t)st->prop.sharedMemPerBlockOptin - 1024)
        gl_die("layernorm_bwd: hidden size %d needs %zu bytes of shared "
               "memory per block, more than this GPU's %zu", h, smem,
               (size_t)st->prop.sharedMemPerBlockOptin - 1024);
    int G = 2 * st->prop.multiProcessorCount;
    if (G > n)
        G = n;
    int rpb = (n + G - 1) / G;
    G = (n + rpb - 1) / rpb;
    float *partial = (float *)gl_cuda_scratch(d, &st->s_norm,
                                              (size_t)G * 2 * h * sizeof(float));
    if (gl_vec8_ok(h, dx, dy, x, w)) {
        GL_CUDA_CHECK(cudaFuncSetAttribute(
            layernorm_bwd_rows<8>, cudaFuncAttributeMaxDynamicSharedMemorySize,
            (int)smem));
        layernorm_bwd_rows<8><<<G, LN_THREADS, smem, st->stream>>>(
            dx, partial, dy, x, w, mean, rstd, n, h, rpb, one_plus,
            accumulate_dx);
    } else {
        GL_CUDA_CHECK(cudaFuncSetAttribute(
            layernorm_bwd_rows<1>, cudaFuncAttributeMaxDynamicSharedMemorySize,
            (int)smem));
        layernorm_bwd_rows<1><<<G, LN_THREADS, smem, st->stream>>>(
            dx, partial, dy, x, w, mean, rstd, n, h, rpb, one_plus,
            accumulate_dx);
    }
    GL_CUDA_LAUNCHED("layernorm_bwd_rows");
    gl_cuda_colsum_final(st->stream, dw, partial, G, h, 2L * h);
    gl_cuda_colsum_final(st->stream, db, partial + h, G, h, 2L * h);
}
