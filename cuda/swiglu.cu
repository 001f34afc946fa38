/*
 * swiglu.cu: the SwiGLU activation of the MLP, on rows [gate (f) | up (f)]:
 *   y = silu(a) b,   silu(a) = a sigmoid(a),
 * and its backward, with silu'(a) = sigmoid(a) (1 + a (1 - sigmoid(a))):
 *   da = dy b silu'(a),   db = dy silu(a).
 * fp32 math, one thread per 8 (or 1) consecutive columns of a row.  dgu
 * may alias gu: a thread reads its a, b before writing da, db.
 */
#include <config.h>

#include "fp8_tile.cuh"
#include "gl_cuda.h"
#include "vec.cuh"

/* The element-wise math, one place for the plain kernels and the FP8
 * sources below (the same expressions, so the same bits). */
static __device__ __forceinline__ float swiglu_sig(float a)
{
    return 1.0f / (1.0f + __expf(-a));
}

static __device__ __forceinline__ float swiglu_y(float a, float b)
{
    float sg = swiglu_sig(a);
    return a * sg * b;
}

static __device__ __forceinline__ float swiglu_da(float a, float b, float d)
{
    float sg = swiglu_sig(a);
    return d * b * sg * (1.0f + a * (1.0f - sg));
}

static __device__ __forceinline__ float swiglu_db(float a, float d)
{
    float sg = swiglu_sig(a);
    return d * a * sg;
}

template <int V>
__global__ void swiglu_fwd_kernel(bf16 *y, const bf16 *gu, int f, size_t total)
{
    for_row_chunks<V>(f, total, [&](size_t row, int c) {
        const bf16 *a = gu + row * 2 * f + c;
        float fa[V], fb[V], o[V];
        load_bf16<V>(fa, a);
        load_bf16<V>(fb, a + f);
        for (int i = 0; i < V; i++)
            o[i] = swiglu_y(fa[i], fb[i]);
        store_bf16<V>(y + row * f + c, o);
    });
}

template <int V>
__global__ void swiglu_bwd_kernel(bf16 *dgu, const bf16 *dy, const bf16 *gu,
                                  int f, size_t total)
{
    for_row_chunks<V>(f, total, [&](size_t row, int c) {
        const bf16 *a = gu + row * 2 * f + c;
        float fa[V], fb[V], fd[V], da[V], db[V];
        load_bf16<V>(fa, a);
        load_bf16<V>(fb, a + f);
        load_bf16<V>(fd, dy + row * f + c);
        for (int i = 0; i < V; i++) {
            da[i] = swiglu_da(fa[i], fb[i], fd[i]);
            db[i] = swiglu_db(fa[i], fd[i]);
        }
        bf16 *o = dgu + row * 2 * f + c;
        store_bf16<V>(o, da);
        store_bf16<V>(o + f, db);
    });
}

void gl_cuda_swiglu_fwd(cudaStream_t st, bf16 *y, const bf16 *gu, int n, int f)
{
    if (n <= 0 || f <= 0)
        return;
    if (gl_vec8_ok(f, y, gu)) {
        size_t total = (size_t)n * (f / 8);
        swiglu_fwd_kernel<8><<<gl_cuda_grid(total, 256), 256, 0, st>>>(
            y, gu, f, total);
    } else {
        size_t total = (size_t)n * f;
        swiglu_fwd_kernel<1><<<gl_cuda_grid(total, 256), 256, 0, st>>>(
            y, gu, f, total);
    }
    GL_CUDA_LAUNCHED("swiglu_fwd");
}

void gl_cuda_swiglu_bwd(cudaStream_t st, bf16 *dgu, const bf16 *dy,
                        const bf16 *gu, int n, int f)
{
    if (n <= 0 || f <= 0)
        return;
    if (gl_vec8_ok(f, dgu, dy, gu)) {
        size_t total = (size_t)n * (f / 8);
        swiglu_bwd_kernel<8><<<gl_cuda_grid(total, 256), 256, 0, st>>>(
            dgu, dy, gu, f, total);
    } else {
        size_t total = (size_t)n * f;
        swiglu_bwd_kernel<1><<<gl_cuda_grid(total, 256), 256, 0, st>>>(
            dgu, dy, gu, f, total);
    }
    GL_CUDA_LAUNCHED("swiglu_bwd");
}

/* ---- FP8 outputs (ops.h's swiglu_fwd_fp8 and swiglu_bwd_fp8) ----
 *
 * fp8_tile.cuh's quantize kernel with a source that computes each element
 * as the kernels above do, rounds it to bf16 as they store it, and stores
 * it where the op has an output: the same bytes as the plain op followed
 * by fp8_quantize, in one pass. */

/* y [n, f] from gu [n, 2f]. */
struct swiglu_fwd_src {
    bf16 *y;
    const bf16 *gu;
    int f;
    template <int W>
    __device__ __forceinline__ void load(float (&o)[W], int r, int c) const
    {
        const bf16 *a = gu + (size_t)r * 2 * f + c;
        float fa[W], fb[W];
        load_bf16<W>(fa, a);
        load_bf16<W>(fb, a + f);
#pragma unroll
        for (int i = 0; i < W; i++)
            o[i] = bf16_round(swiglu_y(fa[i], fb[i]));
        if (y)
            store_bf16<W>(y + (size_t)r * f + c, o);
    }
};

/* dgu [n, 2f] from dy [n, f] and gu: columns below f are da, the others
 * db (a chunk of 8 lies in one half: f % 8 == 0 for the wide kernel).
 * The da and db of one position are made by different threads, which
 * both read its a: dgu must not alias gu here (an aliased dgu takes the
 * two-op path below). */
struct swiglu_bwd_src {
    bf16 *dgu;
    const bf16 *dy, *gu;
    int f;
    template <int W>
    __device__ __forceinline__ void load(float (&o)[W], int r, int c) const
    {
        const bf16 *row = gu + (size_t)r * 2 * f;
        int j = c < f ? c : c - f;
        float fa[W], fd[W];
        load_bf16<W>(fa, row + j);
        load_bf16<W>(fd, dy + (size_t)r * f + j);
        if (c < f) {
            float fb[W];
            load_bf16<W>(fb, row + f + j);
#pragma unroll
            for (int i = 0; i < W; i++)
                o[i] = bf16_round(swiglu_da(fa[i], fb[i], fd[i]));
        } else {
#pragma unroll
            for (int i = 0; i < W; i++)
                o[i] = bf16_round(swiglu_db(fa[i], fd[i]));
        }
        if (dgu)
            store_bf16<W>(dgu + (size_t)r * 2 * f + c, o);
    }
};

void gl_cuda_swiglu_fwd_fp8(cudaStream_t st, bf16 *y, const bf16 *gu, int n,
                            int f, const gl_fp8_out *o)
{
    if (n <= 0 || f <= 0)
        return;
    if (!o->q && !o->qt && !o->amax) {
        if (y)
            gl_cuda_swiglu_fwd(st, y, gu, n, f);
        return;
    }
    bool vec = quantize_tile_vec_ok(o->q, o->qt, n, f) && gl_vec8_ok(f, y, gu);
    quantize_tile_launch(st, "swiglu_fwd_fp8", o->q, o->qt, o->amax,
                         swiglu_fwd_src{y, gu, f}, n, f, o->scale, o->f, vec);
}

void gl_cuda_swiglu_bwd_fp8(cudaStream_t st, bf16 *dgu, const bf16 *dy,
                            const bf16 *gu, int n, int f, const gl_fp8_out *o)
{
    if (n <= 0 || f <= 0)
        return;
    if (!o->q && !o->qt && !o->amax) {
        if (dgu)
            gl_cuda_swiglu_bwd(st, dgu, dy, gu, n, f);
        return;
    }
    if (dgu == gu) {
        /* in place: the plain kernel (a thread reads a, b before writing
         * da, db), then the quantization of its output */
        gl_cuda_swiglu_bwd(st, dgu, dy, gu, n, f);
        gl_cuda_fp8_quantize(st, o->q, o->qt, o->amax, dgu, n, 2 * f, o->scale,
                             o->f);
        return;
    }
    bool vec = quantize_tile_vec_ok(o->q, o->qt, n, 2 * f) &&
               gl_vec8_ok(f, dgu, dy, gu);
    quantize_tile_launch(st, "swiglu_bwd_fp8", o->q, o->qt, o->amax,
                         swiglu_bwd_src{dgu, dy, gu, f}, n, 2 * f, o->scale,
                         o->f, vec);
}
