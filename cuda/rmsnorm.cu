/*
 * rmsnorm.cu: RMSNorm forward and backward, fp32 math on bf16 rows.
 *
 * Forward, for each row x of h elements:
 *   rstd = 1 / sqrt(mean(x^2) + eps),   y_j = x_j rstd w_j,
 * one warp per row: a pass for the sum of squares (warp shuffles), a pass
 * to write y.
 *
 * Backward, with g = w * dy:
 *   dx_j = rstd (g_j - x_j rstd^2 mean(g x)),
 *   dw_j = sum over rows of dy_j x_j rstd.
 * dx needs one dot product per row; dw is a column sum over all n rows.
 * Pass 1: G blocks each take a contiguous run of rows; a thread owns the
 * same columns in every row, so it adds its columns' dw terms into its own
 * slots of a shared-memory row without atomics, and the block writes that
 * row of partial sums to scratch [G, h].  Pass 2 adds the G partials of
 * each column, in block order, into dw (fp32).  The result is the same
 * bits every run.
 */
#include "config.h"

#include "gl_cuda.h"
#include "vec.cuh"

#define BWD_THREADS 256

template <int V>
__global__ void rmsnorm_fwd_kernel(bf16 *y, float *rstd, const bf16 *x,
                                   const bf16 *w, int n, int h, float eps)
{
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= n)
        return;
    const bf16 *xr = x + (size_t)row * h;
    bf16 *yr = y + (size_t)row * h;
    float ss = 0;
    for (int c = lane * V; c < h; c += 32 * V) {
        float f[V];
        load_bf16<V>(f, xr + c);
        for (int i = 0; i < V; i++)
            ss += f[i] * f[i];
    }
    for (int o = 16; o > 0; o /= 2)
        ss += __shfl_xor_sync(0xffffffffu, ss, o);
    float r = 1.0f / sqrtf(ss / h + eps);
    for (int c = lane * V; c < h; c += 32 * V) {
        float f[V], g[V];
        load_bf16<V>(f, xr + c);
        load_bf16<V>(g, w + c);
        for (int i = 0; i < V; i++)
            f[i] = f[i] * r * g[i];
        store_bf16<V>(yr + c, f);
    }
    if (lane == 0)
        rstd[row] = r;
}

template <int V>
__global__ void __launch_bounds__(BWD_THREADS)
rmsnorm_bwd_partial(bf16 *dx, float *partial, const bf16 *dy, const bf16 *x,
                    const bf16 *w, const float *rstd, int n, int h,
                    int rows_per_block, int accumulate_dx)
{
    extern __shared__ float dwp[];              /* [h] */
    __shared__ float warp_part[2][BWD_THREADS / 32];
    int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    for (int c = tid * V; c < h; c += BWD_THREADS * V)
        for (int i = 0; i < V; i++)
            dwp[c + i] = 0;
    int r0 = blockIdx.x * rows_per_block;
    int r1 = min(n, r0 + rows_per_block);
    for (int row = r0; row < r1; row++) {
        const bf16 *xr = x + (size_t)row * h, *dyr = dy + (size_t)row * h;
        float r = rstd[row];
        float gx = 0;
        for (int c = tid * V; c < h; c += BWD_THREADS * V) {
            float fx[V], fd[V], fw[V];
            load_bf16<V>(fx, xr + c);
            load_bf16<V>(fd, dyr + c);
            load_bf16<V>(fw, w + c);
            for (int i = 0; i < V; i++)
                gx += fw[i] * fd[i] * fx[i];
        }
        for (int o = 16; o > 0; o /= 2)
            gx += __shfl_xor_sync(0xffffffffu, gx, o);
        /* Two slots by row parity: the next row's writes cannot race the
         * reads of this one, which a barrier separates. */
        if (lane == 0)
            warp_part[row & 1][warp] = gx;
        __syncthreads();
        gx = 0;
        for (int i = 0; i < BWD_THREADS / 32; i++)
            gx += warp_part[row & 1][i];
        float cc = gx / h * r * r;
        bf16 *dxr = dx + (size_t)row * h;
        for (int c = tid * V; c < h; c += BWD_THREADS * V) {
            float fx[V], fd[V], fw[V], o[V];
            load_bf16<V>(fx, xr + c);
            load_bf16<V>(fd, dyr + c);
            load_bf16<V>(fw, w + c);
            if (accumulate_dx)
                load_bf16<V>(o, dxr + c);
            for (int i = 0; i < V; i++) {
                float dv = r * (fw[i] * fd[i] - fx[i] * cc);
                o[i] = accumulate_dx ? o[i] + dv : dv;
                dwp[c + i] += fd[i] * fx[i] * r;
            }
            store_bf16<V>(dxr + c, o);
        }
    }
    float *pr = partial + (size_t)blockIdx.x * h;
    for (int c = tid * V; c < h; c += BWD_THREADS * V)
        for (int i = 0; i < V; i++)
            pr[c + i] = dwp[c + i];
}

/* dw[j] += sum over the G partial rows of column j, in row order. */
__global__ void rmsnorm_bwd_dw(float *dw, const float *partial, int G, int h)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= h)
        return;
    float s = 0;
    for (int b = 0; b < G; b++)
        s += partial[(size_t)b * h + j];
    dw[j] += s;
}

void gl_cuda_rmsnorm_fwd(gl_dev *d, bf16 *y, float *rstd, const bf16 *x,
                         const bf16 *w, int n, int h, float eps)
{
    if (n <= 0)
        return;
    cudaStream_t st = gl_cuda_st(d)->stream;
    int warps = 8;
    unsigned blocks = (unsigned)((n + warps - 1) / warps);
    if (gl_vec8_ok(h, y, x, w))
        rmsnorm_fwd_kernel<8><<<blocks, warps * 32, 0, st>>>(y, rstd, x, w, n,
                                                             h, eps);
    else
        rmsnorm_fwd_kernel<1><<<blocks, warps * 32, 0, st>>>(y, rstd, x, w, n,
                                                             h, eps);
    GL_CUDA_LAUNCHED("rmsnorm_fwd");
}

void gl_cuda_rmsnorm_bwd(gl_dev *d, bf16 *dx, float *dw, const bf16 *dy,
                         const bf16 *x, const bf16 *w, const float *rstd,
                         int n, int h, int accumulate_dx)
{
    if (n <= 0)
        return;
    gl_cuda_state *st = gl_cuda_st(d);
    size_t smem = (size_t)h * sizeof(float);
    if (smem > (size_t)st->prop.sharedMemPerBlockOptin - 1024)
        gl_die("rmsnorm_bwd: hidden size %d needs %zu bytes of shared memory "
               "per block, more than this GPU's %zu", h, smem,
               (size_t)st->prop.sharedMemPerBlockOptin - 1024);
    int G = 2 * st->prop.multiProcessorCount;
    if (G > n)
        G = n;
    int rpb = (n + G - 1) / G;
    G = (n + rpb - 1) / rpb;
    float *partial = (float *)gl_cuda_scratch(d, &st->s_norm,
                                              (size_t)G * h * sizeof(float));
    if (gl_vec8_ok(h, dx, dy, x, w)) {
        GL_CUDA_CHECK(cudaFuncSetAttribute(
            rmsnorm_bwd_partial<8>, cudaFuncAttributeMaxDynamicSharedMemorySize,
            (int)smem));
        rmsnorm_bwd_partial<8><<<G, BWD_THREADS, smem, st->stream>>>(
            dx, partial, dy, x, w, rstd, n, h, rpb, accumulate_dx);
    } else {
        GL_CUDA_CHECK(cudaFuncSetAttribute(
            rmsnorm_bwd_partial<1>, cudaFuncAttributeMaxDynamicSharedMemorySize,
            (int)smem));
        rmsnorm_bwd_partial<1><<<G, BWD_THREADS, smem, st->stream>>>(
            dx, partial, dy, x, w, rstd, n, h, rpb, accumulate_dx);
    }
    GL_CUDA_LAUNCHED("rmsnorm_bwd_partial");
    rmsnorm_bwd_dw<<<(h + 255) / 256, 256, 0, st->stream>>>(dw, partial, G, h);
    GL_CUDA_LAUNCHED("rmsnorm_bwd_dw");
}
