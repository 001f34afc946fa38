/*
 * crossentropy.cu: vocab-parallel cross-entropy in three steps around two
 * tensor-parallel all-reduces (see ops.h), never storing probabilities.
 *
 * With M = max_j z_j over all shards and Z = sum_j exp(z_j - M):
 *   loss = log Z + M - z_target = -log softmax(z)_target,
 *   d loss / d z_j = exp(z_j - M) / Z - [j == target],
 * scaled by gscale_i (loss mask and 1/tokens).  Padding columns
 * (j >= valid) enter neither M nor Z and get gradient 0.
 *
 * Each step is one block per row of logits: the threads stride over the
 * row (8 bf16 per 16-byte load when aligned), reduce in fp32 through warp
 * shuffles and shared memory, and thread 0 writes the row's statistics.
 * The gradient overwrites the logits in place, computed from the same
 * element it replaces.
 */
#include <config.h>

#include <math.h>

#include "gl_cuda.h"
#include "vec.cuh"
#include "warp.cuh"

#define THREADS 512

/* Calls f(j, z_j) for this thread's share of columns [0, valid). */
template <int V, class F>
__device__ void for_row(const bf16 *z, int valid, F f)
{
    int vend = valid / V * V;
    for (int c = threadIdx.x * V; c < vend; c += THREADS * V) {
        float x[V];
        load_bf16<V>(x, z + c);
        for (int k = 0; k < V; k++)
            f(c + k, x[k]);
    }
    for (int c = vend + threadIdx.x; c < valid; c += THREADS)
        f(c, __bfloat162float(z[c]));
}

template <int V>
__global__ void __launch_bounds__(THREADS)
ce_max_kernel(float *rowmax, const bf16 *logits, int ld, int valid)
{
    const bf16 *z = logits + (size_t)blockIdx.x * ld;
    float m = -INFINITY;
    for_row<V>(z, valid, [&](int, float x) { m = fmaxf(m, x); });
    m = block_reduce<THREADS>(m, gl_op_max(), -INFINITY);
    if (threadIdx.x == 0)
        rowmax[blockIdx.x] = m;
}

template <int V>
__global__ void __launch_bounds__(THREADS)
ce_sum_kernel(float *stats, const bf16 *logits, int ld, const int32_t *targets,
              const float *rowmax, int valid, long vocab_start)
{
    int i = blockIdx.x;
    const bf16 *z = logits + (size_t)i * ld;
    float m = rowmax[i];
    float s = 0;
    for_row<V>(z, valid, [&](int, float x) { s += expf(x - m); });
    s = block_reduce<THREADS>(s, gl_op_sum(), 0.0f);
    if (threadIdx.x == 0) {
        long t = (long)targets[i] - vocab_start;
        stats[2 * i] = s;
        stats[2 * i + 1] = (t >= 0 && t < valid) ? __bfloat162float(z[t]) : 0.0f;
    }
}

template <int V>
__global__ void __launch_bounds__(THREADS)
ce_bwd_kernel(float *loss, bf16 *logits, int ld, const int32_t *targets,
              const float *rowmax, const float *stats, const float *gscale,
              int vl, int valid, long vocab_start)
{
    int i = blockIdx.x;
    if (loss && threadIdx.x == 0)
        loss[i] = logf(stats[2 * i]) + rowmax[i] - stats[2 * i + 1];
    if (!gscale)
        return;
    bf16 *z = logits + (size_t)i * ld;
    long t = (long)targets[i] - vocab_start;
    float m = rowmax[i], inv = 1.0f / stats[2 * i], g = gscale[i];
    int vend = valid / V * V;
    for (int c = threadIdx.x * V; c < vend; c += THREADS * V) {
        float x[V];
        load_bf16<V>(x, z + c);
        for (int k = 0; k < V; k++)
            x[k] = (expf(x[k] - m) * inv - (c + k == t ? 1.0f : 0.0f)) * g;
        store_bf16<V>(z + c, x);
    }
    for (int c = vend + threadIdx.x; c < valid; c += THREADS) {
        float x = __bfloat162float(z[c]);
        z[c] = __float2bfloat16_rn((expf(x - m) * inv - (c == t ? 1.0f : 0.0f)) * g);
    }
    for (int c = valid + threadIdx.x; c < vl; c += THREADS)
        z[c] = __float2bfloat16_rn(0.0f);
}

void gl_cuda_ce_max(cudaStream_t st, float *rowmax, const bf16 *logits, int ld,
                    int n, int valid)
{
    if (n <= 0)
        return;
    if (gl_vec8_ok(ld, logits))
        ce_max_kernel<8><<<n, THREADS, 0, st>>>(rowmax, logits, ld, valid);
    else
        ce_max_kernel<1><<<n, THREADS, 0, st>>>(rowmax, logits, ld, valid);
    GL_CUDA_LAUNCHED("ce_max");
}

void gl_cuda_ce_sum(cudaStream_t st, float *stats, const bf16 *logits, int ld,
                    const int32_t *targets, const float *rowmax, int n,
                    int valid, long vocab_start)
{
    if (n <= 0)
        return;
    if (gl_vec8_ok(ld, logits))
        ce_sum_kernel<8><<<n, THREADS, 0, st>>>(stats, logits, ld, targets,
                                                rowmax, valid, vocab_start);
    else
        ce_sum_kernel<1><<<n, THREADS, 0, st>>>(stats, logits, ld, targets,
                                                rowmax, valid, vocab_start);
    GL_CUDA_LAUNCHED("ce_sum");
}

void gl_cuda_ce_bwd(cudaStream_t st, float *loss, bf16 *logits, int ld,
                    const int32_t *targets, const float *rowmax,
                    const float *stats, const float *gscale, int n, int vl,
                    int valid, long vocab_start)
{
    if (n <= 0)
        return;
    if (gl_vec8_ok(ld, logits))
        ce_bwd_kernel<8><<<n, THREADS, 0, st>>>(loss, logits, ld, targets,
                                                rowmax, stats, gscale, vl,
                                                valid, vocab_start);
    else
        ce_bwd_kernel<1><<<n, THREADS, 0, st>>>(loss, logits, ld, targets,
                                                rowmax, stats, gscale, vl,
                                                valid, vocab_start);
    GL_CUDA_LAUNCHED("ce_bwd");
}
