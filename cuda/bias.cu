/*
 * bias.cu: the bias of a linear layer and its gradient.
 *
 * bias_add: y[i, j] += bias[j] on [n, w] in place, fp32 math, one thread
 * per 8 (or 1) consecutive columns of a row.
 *
 * bias_grad: dbias[j] += sum_i dy[i, j] (f32), in two passes so that the
 * sum's order is fixed by the shape alone (no atomics):
 *   colsum_partial: the rows are cut into G chunks of consecutive rows; a
 *     block of 32 x 8 threads takes 32 V columns of one chunk, thread
 *     (tx, ty) adds rows ty, ty + 8, ... of its V columns, then thread
 *     (tx, 0) adds the 8 sums in ty order into partial[chunk][column];
 *   colsum_final: dbias[j] += the G partials of column j, added in a fixed
 *     tree (thread (tx, ty) sums chunks ty, ty + 32, ...; then the 32 sums
 *     in ty order).
 * colsum_final also adds up LayerNorm's per-block weight and bias
 * partials (gl_cuda_colsum_final).
 */
#include <config.h>

#include "gl_cuda.h"
#include "vec.cuh"

template <int V>
__global__ void bias_add_kernel(bf16 *y, const bf16 *bias, int w,
                                size_t total)
{
    for_row_chunks<V>(w, total, [&](size_t row, int c) {
        float f[V], b[V];
        load_bf16<V>(f, y + row * w + c);
        load_bf16<V>(b, bias + c);
        for (int i = 0; i < V; i++)
            f[i] += b[i];
        store_bf16<V>(y + row * w + c, f);
    });
}

#define CS_COLS 32
#define CS_ROWS 8

template <int V>
__global__ void __launch_bounds__(CS_COLS * CS_ROWS)
colsum_partial(float *partial, const bf16 *dy, int n, int w,
               int rows_per_chunk)
{
    __shared__ float part[CS_ROWS][CS_COLS * V];
    int tx = threadIdx.x, ty = threadIdx.y;
    int c = (blockIdx.x * CS_COLS + tx) * V;
    int r0 = blockIdx.y * rows_per_chunk;
    int r1 = min(n, r0 + rows_per_chunk);
    float acc[V];
    for (int i = 0; i < V; i++)
        acc[i] = 0;
    if (c < w)
        for (int r = r0 + ty; r < r1; r += CS_ROWS) {
            float f[V];
            load_bf16<V>(f, dy + (size_t)r * w + c);
            for (int i = 0; i < V; i++)
                acc[i] += f[i];
        }
    for (int i = 0; i < V; i++)
        part[ty][tx * V + i] = acc[i];
    __syncthreads();
    if (ty == 0 && c < w)
        for (int i = 0; i < V; i++) {
            float s = 0;
            for (int k = 0; k < CS_ROWS; k++)
                s += part[k][tx * V + i];
            partial[(size_t)blockIdx.y * w + c + i] = s;
        }
}

#define CF_COLS 32
#define CF_ROWS 32

/* out[j] += sum over g < G of partial[g ld + j]. */
__global__ void __launch_bounds__(CF_COLS * CF_ROWS)
colsum_final(float *out, const float *partial, int G, int w, long ld)
{
    __shared__ float sums[CF_ROWS][CF_COLS + 1];
    int tx = threadIdx.x, ty = threadIdx.y;
    int j = blockIdx.x * CF_COLS + tx;
    float s = 0;
    if (j < w)
        for (int g = ty; g < G; g += CF_ROWS)
            s += partial[(size_t)g * ld + j];
    sums[ty][tx] = s;
    __syncthreads();
    if (ty == 0 && j < w) {
        float t = 0;
        for (int i = 0; i < CF_ROWS; i++)
            t += sums[i][tx];
        out[j] += t;
    }
}

void gl_cuda_colsum_final(cudaStream_t st, float *out, const float *partial,
                          int G, int w, long ld)
{
    if (w <= 0)
        return;
    dim3 block(CF_COLS, CF_ROWS);
    colsum_final<<<(w + CF_COLS - 1) / CF_COLS, block, 0, st>>>(out, partial,
                                                                 G, w, ld);
    GL_CUDA_LAUNCHED("colsum_final");
}

void gl_cuda_bias_add(cudaStream_t st, bf16 *y, const bf16 *bias, int n,
                      int w)
{
    if (n <= 0 || w <= 0)
        return;
    if (gl_vec8_ok(w, y, bias)) {
        size_t total = (size_t)n * (w / 8);
        bias_add_kernel<8><<<gl_cuda_grid(total, 256), 256, 0, st>>>(
            y, bias, w, total);
    } else {
        size_t total = (size_t)n * w;
        bias_add_kernel<1><<<gl_cuda_grid(total, 256), 256, 0, st>>>(
            y, bias, w, total);
    }
    GL_CUDA_LAUNCHED("bias_add");
}

/* Chunks of at least 64 rows, at most 256 chunks: G depends on n only. */
void gl_cuda_bias_grad(gl_dev *d, float *dbias, const bf16 *dy, int n, int w)
{
    if (n <= 0 || w <= 0)
        return;
    gl_cuda_state *st = gl_cuda_st(d);
    int G = (n + 63) / 64;
    if (G > 256)
        G = 256;
    int rpc = (n + G - 1) / G;
    G = (n + rpc - 1) / rpc;
    float *partial = (float *)gl_cuda_scratch(d, &st->s_bias,
                                              (size_t)G * w * sizeof(float));
    dim3 block(CS_COLS, CS_ROWS);
    if (gl_vec8_ok(w, dy)) {
        dim3 grid((w / 8 + CS_COLS - 1) / CS_COLS, G);
        colsum_partial<8><<<grid, block, 0, st->stream>>>(partial, dy, n, w,
                                                          rpc);
    } else {
        dim3 grid((w + CS_COLS - 1) / CS_COLS, G);
        colsum_partial<1><<<grid, block, 0, st->stream>>>(partial, dy, n, w,
                                                          rpc);
    }
    GL_CUDA_LAUNCHED("colsum_partial");
    gl_cuda_colsum_final(st->stream, dbias, partial, G, w, w);
}
