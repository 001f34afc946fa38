/*
 * swiglu.cu: the SwiGLU activation of the MLP, on rows [gate (f) | up (f)]:
 *   y = silu(a) b,   silu(a) = a sigmoid(a),
 * and its backward, with silu'(a) = sigmoid(a) (1 + a (1 - sigmoid(a))):
 *   da = dy b silu'(a),   db = dy silu(a).
 * fp32 math, one thread per 8 (or 1) consecutive columns of a row.  dgu
 * may alias gu: a thread reads its a, b before writing da, db.
 */
#include <config.h>

#include "gl_cuda.h"
#include "vec.cuh"

template <int V>
__global__ void swiglu_fwd_kernel(bf16 *y, const bf16 *gu, int f, size_t total)
{
    for_row_chunks<V>(f, total, [&](size_t row, int c) {
        const bf16 *a = gu + row * 2 * f + c;
        float fa[V], fb[V], o[V];
        load_bf16<V>(fa, a);
        load_bf16<V>(fb, a + f);
        for (int i = 0; i < V; i++) {
            float sg = 1.0f / (1.0f + __expf(-fa[i]));
            o[i] = fa[i] * sg * fb[i];
        }
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
            float sg = 1.0f / (1.0f + __expf(-fa[i]));
            da[i] = fd[i] * fb[i] * sg * (1.0f + fa[i] * (1.0f - sg));
            db[i] = fd[i] * fa[i] * sg;
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
