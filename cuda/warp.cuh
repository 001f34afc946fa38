/*
 * warp.cuh: reductions across the lanes of a warp and the warps of a block,
 * the one copy every kernel uses.
 *
 * A butterfly: at step o every lane combines its value with lane (id ^ o)'s,
 * for o = W/2, W/4, ..., 1.  After log2(W) steps each lane of every group
 * of W consecutive lanes holds the group's reduction, and all lanes did the
 * same operations in the same order, so the result is identical on every
 * lane and from run to run (no atomics).
 *
 *   warp_sum(v) / warp_max(v)      over the 32 lanes
 *   warp_sum<W>(v) / warp_max<W>(v) over groups of W lanes (W a power of
 *                                   two <= 32: the 4 lanes of an mma quad)
 *   block_reduce<THREADS>(v, op, identity)
 *                                   over the block: each warp reduces, warp
 *                                   0 reduces the warps' results; returned
 *                                   to every thread.  THREADS must be the
 *                                   block size, a multiple of 32; the block
 *                                   must call it uniformly (it has barriers).
 */
#ifndef GL_CUDA_WARP_CUH
#define GL_CUDA_WARP_CUH

struct gl_op_sum {
    __device__ float operator()(float a, float b) const { return a + b; }
};
struct gl_op_max {
    __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

template <int W = 32, class Op>
__device__ __forceinline__ float warp_reduce(float v, Op op)
{
    static_assert(W >= 1 && W <= 32 && (W & (W - 1)) == 0, "W: a power of two <= 32");
#pragma unroll
    for (int o = W / 2; o > 0; o /= 2)
        v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

template <int W = 32>
__device__ __forceinline__ float warp_sum(float v) { return warp_reduce<W>(v, gl_op_sum()); }

template <int W = 32>
__device__ __forceinline__ float warp_max(float v) { return warp_reduce<W>(v, gl_op_max()); }

template <int THREADS, class Op>
__device__ float block_reduce(float v, Op op, float identity)
{
    static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS: whole warps");
    __shared__ float part[THREADS / 32];
    __shared__ float result;
    v = warp_reduce(v, op);
    if (threadIdx.x % 32 == 0)
        part[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        v = threadIdx.x < THREADS / 32 ? part[threadIdx.x] : identity;
        v = warp_reduce(v, op);
        if (threadIdx.x == 0)
            result = v;
    }
    __syncthreads();
    return result;
}

template <int THREADS>
__device__ __forceinline__ float block_sum(float v)
{
    return block_reduce<THREADS>(v, gl_op_sum(), 0.0f);
}

#endif
