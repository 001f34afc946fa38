/*
 * gelu.cu: GeLU, tanh approximation, of u = x + bias (Megatron's
 * bias_gelu; bias may be NULL), over [n, f]:
 *   t = tanh(K0 u (1 + K1 u^2)),  y = 0.5 u (1 + t),
 * and its backward (Megatron's bias_gelu_back):
 *   dx = dy (0.5 u (1 - t^2) (K0 + K2 u^2) + 0.5 (1 + t)),
 * K0 = 0.79788456, K1 = 0.044715, K2 = 0.1070322243 = 3 K0 K1.  fp32
 * math, one thread per 8 (or 1) consecutive columns of a row; a thread
 * reads its x and dy before writing, so y and dx may alias them.  The
 * bias gradient is bias.cu's column sum of dx.
 */
#include <config.h>

#include "gl_cuda.h"
#include "vec.cuh"

#define K0 0.79788456f
#define K1 0.044715f
#define K2 0.1070322243f

template <int V>
__global__ void gelu_fwd_kernel(bf16 *y, const bf16 *x, const bf16 *bias,
                                int f, size_t total)
{
    for_row_chunks<V>(f, total, [&](size_t row, int c) {
        float u[V], b[V];
        load_bf16<V>(u, x + row * f + c);
        if (bias)
            load_bf16<V>(b, bias + c);
        for (int i = 0; i < V; i++) {
            if (bias)
                u[i] += b[i];
            float th = tanhf(K0 * u[i] * (1.0f + K1 * u[i] * u[i]));
            u[i] = 0.5f * u[i] * (1.0f + th);
        }
        store_bf16<V>(y + row * f + c, u);
    });
}

template <int V>
__global__ void gelu_bwd_kernel(bf16 *dx, const bf16 *dy, const bf16 *x,
                                const bf16 *bias, int f, size_t total)
{
    for_row_chunks<V>(f, total, [&](size_t row, int c) {
        float u[V], g[V], b[V];
        load_bf16<V>(u, x + row * f + c);
        load_bf16<V>(g, dy + row * f + c);
        if (bias)
            load_bf16<V>(b, bias + c);
        for (int i = 0; i < V; i++) {
            if (bias)
                u[i] += b[i];
            float th = tanhf(K0 * u[i] * (1.0f + K1 * u[i] * u[i]));
            float d = 0.5f * u[i] * (1.0f - th * th) * (K0 + K2 * u[i] * u[i]) +
                      0.5f * (1.0f + th);
            g[i] *= d;
        }
        store_bf16<V>(dx + row * f + c, g);
    });
}

void gl_cuda_gelu_fwd(cudaStream_t st, bf16 *y, const bf16 *x,
                      const bf16 *bias, int n, int f)
{
    if (n <= 0 || f <= 0)
        return;
    if (gl_vec8_ok(f, y, x, bias)) {
        size_t total = (size_t)n * (f / 8);
        gelu_fwd_kernel<8><<<gl_cuda_grid(total, 256), 256, 0, st>>>(
            y, x, bias, f, total);
    } else {
        size_t total = (size_t)n * f;
        gelu_fwd_kernel<1><<<gl_cuda_grid(total, 256), 256, 0, st>>>(
            y, x, bias, f, total);
    }
    GL_CUDA_LAUNCHED("gelu_fwd");
}

void gl_cuda_gelu_bwd(gl_dev *d, bf16 *dx, float *dbias, const bf16 *dy,
                      const bf16 *x, const bf16 *bias, int n, int f)
{
    if (n <= 0 || f <= 0)
        return;
    cudaStream_t st = gl_cuda_st(d)->stream;
    if (gl_vec8_ok(f, dx, dy, x, bias)) {
        size_t total = (size_t)n * (f / 8);
        gelu_bwd_kernel<8><<<gl_cuda_grid(total, 256), 256, 0, st>>>(
            dx, dy, x, bias, f, total);
    } else {
        size_t total = (size_t)n * f;
        gelu_bwd_kernel<1><<<gl_cuda_grid(total, 256), 256, 0, st>>>(
            dx, dy, x, bias, f, total);
    }
    GL_CUDA_LAUNCHED("gelu_bwd");
    if (dbias)
        gl_cuda_bias_grad(d, dbias, dx, n, f);
}
