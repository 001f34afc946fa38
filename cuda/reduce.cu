/*
 * reduce.cu: reductions of fp32 buffers into one device scalar, for the
 * gradient norm (sumsq), the loss average (dot) and the overflow check
 * (nonfinite).
 *
 * sumsq and dot run in two passes so that the result does not depend on
 * timing: pass 1 gives each of G blocks a fixed stride of the input and
 * reduces it (per thread, then warp shuffles, then across warps) into
 * partial[block]; pass 2, one block, sums the G partials in the same tree
 * and adds the total to out[0].  G depends only on the count, so the same
 * input always gives the same bits.  No atomics.
 */
#include <config.h>

#include <math.h>

#include "gl_cuda.h"
#include "warp.cuh"

#define THREADS 256
#define MAX_BLOCKS 1024

/* partial[b] = sum over this block's stride of x_i * w_i (w == NULL: x_i^2). */
__global__ void __launch_bounds__(THREADS)
dot_partial(float *partial, const float *x, const float *w, size_t n)
{
    float acc = 0;
    for (size_t i = blockIdx.x * (size_t)THREADS + threadIdx.x; i < n;
         i += (size_t)gridDim.x * THREADS) {
        float a = x[i];
        acc += a * (w ? w[i] : a);
    }
    acc = block_sum<THREADS>(acc);
    if (threadIdx.x == 0)
        partial[blockIdx.x] = acc;
}

/* partial[b] = sum over this block's stride of x_i^2, for the gradient
 * norm: the same fixed partition as dot_partial, but x read 16 bytes at a
 * time from its first 16-byte boundary, two loads in flight per thread
 * (a load of 4 bytes at a time kept an H200 at 2.5 TB/s on the gradients
 * of a 2.8B model: too few bytes in flight).  The at most 3 elements
 * before that boundary and the at most 3 after the last whole float4 go
 * to the first threads.  The partition depends only on n and x's
 * alignment, so the same input gives the same bits. */
__global__ void __launch_bounds__(THREADS)
sumsq_partial(float *partial, const float *x, size_t n, size_t head)
{
    size_t tid = blockIdx.x * (size_t)THREADS + threadIdx.x;
    size_t T = (size_t)gridDim.x * THREADS;
    const float4 *v = (const float4 *)(x + head);
    size_t nv = (n - head) / 4, rest = head + 4 * nv;
    float a0 = 0, a1 = 0;
    size_t i = tid;
    for (; i + T < nv; i += 2 * T) {
        float4 p = v[i], q = v[i + T];
        a0 += p.x * p.x + p.y * p.y + p.z * p.z + p.w * p.w;
        a1 += q.x * q.x + q.y * q.y + q.z * q.z + q.w * q.w;
    }
    if (i < nv) {
        float4 p = v[i];
        a0 += p.x * p.x + p.y * p.y + p.z * p.z + p.w * p.w;
    }
    if (tid < head)
        a0 += x[tid] * x[tid];
    if (tid < n - rest)
        a1 += x[rest + tid] * x[rest + tid];
    float acc = block_sum<THREADS>(a0 + a1);
    if (threadIdx.x == 0)
        partial[blockIdx.x] = acc;
}

/* out[0] += sum of the nparts partials. */
__global__ void __launch_bounds__(THREADS)
dot_final(float *out, const float *partial, int nparts)
{
    float acc = 0;
    for (int i = threadIdx.x; i < nparts; i += THREADS)
        acc += partial[i];
    acc = block_sum<THREADS>(acc);
    if (threadIdx.x == 0)
        out[0] += acc;
}

/* out[0] = 1 if some x_i is NaN or +-Inf.  Every writer writes the same
 * value, so the race between them is harmless. */
__global__ void nonfinite_kernel(float *out, const float *x, size_t n)
{
    int bad = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        bad |= !isfinite(x[i]);
    if (__syncthreads_or(bad) && threadIdx.x == 0)
        out[0] = 1.0f;
}

static void dot_launch(gl_dev *d, float *out, const float *x, const float *w,
                       size_t n)
{
    if (!n)
        return;
    gl_cuda_state *st = gl_cuda_st(d);
    size_t nb = (n + THREADS * 8 - 1) / (THREADS * 8);   /* >= 8 per thread */
    int blocks = nb > MAX_BLOCKS ? MAX_BLOCKS : (int)nb;
    float *part = (float *)gl_cuda_scratch(d, &st->s_reduce,
                                           MAX_BLOCKS * sizeof(float));
    if (w) {
        dot_partial<<<blocks, THREADS, 0, st->stream>>>(part, x, w, n);
        GL_CUDA_LAUNCHED("dot_partial");
    } else {
        size_t head = (16 - (uintptr_t)x % 16) % 16 / sizeof(float);
        sumsq_partial<<<blocks, THREADS, 0, st->stream>>>(
            part, x, n, head < n ? head : n);
        GL_CUDA_LAUNCHED("sumsq_partial");
    }
    dot_final<<<1, THREADS, 0, st->stream>>>(out, part, blocks);
    GL_CUDA_LAUNCHED("dot_final");
}

void gl_cuda_sumsq(gl_dev *d, float *out, const float *x, size_t n)
{
    dot_launch(d, out, x, NULL, n);
}

void gl_cuda_dot(gl_dev *d, float *out, const float *x, const float *w,
                 size_t n)
{
    dot_launch(d, out, x, w, n);
}

void gl_cuda_nonfinite(gl_dev *d, float *out, const float *x, size_t n)
{
    if (!n)
        return;
    unsigned blocks = gl_cuda_grid(n, THREADS);
    if (blocks > 4096)
        blocks = 4096;
    nonfinite_kernel<<<blocks, THREADS, 0, gl_cuda_st(d)->stream>>>(out, x, n);
    GL_CUDA_LAUNCHED("nonfinite");
}
