/*
 * vec.cuh: loading and storing V consecutive bf16 elements as fp32.
 *
 * V = 8 moves 16 bytes with one instruction (the pointer must be 16-byte
 * aligned); V = 1 is the fallback for unaligned views and odd sizes.
 * Kernels are templated on V and the launcher picks 8 when it can.
 */
#ifndef GL_CUDA_VEC_CUH
#define GL_CUDA_VEC_CUH

#include "gl_cuda.h"

template <int V>
__device__ __forceinline__ void store_bf16(bf16 *p, const float (&f)[V])
{
    if constexpr (V == 8) {
        union { uint4 u; __nv_bfloat162 h[4]; } w;
        for (int i = 0; i < 4; i++)
            w.h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
        *(uint4 *)p = w.u;
    } else {
        for (int i = 0; i < V; i++)
            p[i] = __float2bfloat16_rn(f[i]);
    }
}

/* V consecutive bf16 values as they lie in memory (one 16-byte word for
 * V = 8), for kernels that keep a row in registers between two passes:
 * half the registers of the same values as fp32. */
template <int V>
struct bf16_raw {
    bf16 v[V];
};

template <>
struct bf16_raw<8> {
    uint4 u;
};

template <int V>
__device__ __forceinline__ bf16_raw<V> load_raw(const bf16 *p)
{
    bf16_raw<V> r;
    if constexpr (V == 8) {
        r.u = *(const uint4 *)p;
    } else {
        for (int i = 0; i < V; i++)
            r.v[i] = p[i];
    }
    return r;
}

template <int V>
__device__ __forceinline__ void unpack_bf16(float (&f)[V],
                                            const bf16_raw<V> &r)
{
    if constexpr (V == 8) {
        union { uint4 u; __nv_bfloat162 h[4]; } w;
        w.u = r.u;
        for (int i = 0; i < 4; i++) {
            float2 t = __bfloat1622float2(w.h[i]);
            f[2 * i] = t.x;
            f[2 * i + 1] = t.y;
        }
    } else {
        for (int i = 0; i < V; i++)
            f[i] = __bfloat162float(r.v[i]);
    }
}

/* V consecutive bf16 values at p as fp32 (one 16-byte load for V = 8). */
template <int V>
__device__ __forceinline__ void load_bf16(float (&f)[V], const bf16 *p)
{
    unpack_bf16(f, load_raw<V>(p));
}

/* The grid-stride loop of the elementwise kernels over rows of w
 * elements, cut into chunks of V consecutive columns (w a multiple of V):
 * total = rows x (w / V) chunks, chunk t the (t mod w / V)-th of row
 * t / (w / V).  Thread i of the grid takes chunks i, i + the grid's
 * thread count, ...: body(row, c) for each, c the chunk's first column. */
template <int V, class Body>
__device__ __forceinline__ void for_row_chunks(int w, size_t total, Body body)
{
    int per_row = w / V;
    for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < total;
         t += (size_t)gridDim.x * blockDim.x)
        body(t / per_row, (int)(t % per_row) * V);
}

/* Whether rows of `elems` bf16 elements starting at each pointer can be
 * moved 8 at a time. */
static inline bool gl_vec8_ok(long elems, const void *a, const void *b = 0,
                              const void *c = 0, const void *d = 0)
{
    uintptr_t m = (uintptr_t)a | (uintptr_t)b | (uintptr_t)c | (uintptr_t)d;
    return elems % 8 == 0 && (m & 15) == 0;
}

#endif
