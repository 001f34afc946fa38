/*
 * fp8_tile.cuh: FP8 quantization of a [rows, cols] tensor, TILE x TILE
 * tiles per block, into q (row-major) and / or its transpose qt, with the
 * tensor's amax folded into amax[0]: fp8.cu's fp8_quantize, and the
 * kernels that write their output quantized as they make it (ops.h: "FP8
 * operands out of the kernels that produce them"; rmsnorm.cu,
 * swiglu.cu).  The exactness rules are at the top of fp8.cu.
 *
 * The tensor's values come from a source: a struct with
 *     template <int W> __device__ void load(float (&f)[W], int r, int c)
 * that yields elements (r, c .. c+W-1), each exactly the value the tensor
 * holds (for a bf16 tensor: bf16-rounded), and may store them too (the
 * producer's own output).  With W = 8 the chunk lies wholly inside a row
 * and starts at a multiple of 8.
 */
#ifndef GL_CUDA_FP8_TILE_CUH
#define GL_CUDA_FP8_TILE_CUH

#include <cuda_fp8.h>

#include "gl_cuda.h"
#include "vec.cuh"
#include "warp.cuh"

/* ---- exact arithmetic (see the top of fp8.cu) ---- */

static __device__ __forceinline__ float mul_rn(float a, float b)
{
    float r;
    asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}

/* Bits of |v|: an amax in the integer order of fp8.cu. */
static __device__ __forceinline__ unsigned abs_bits(float v)
{
    return __float_as_uint(v) & 0x7FFFFFFFu;
}

/* max of two amaxes by their bits, for block_reduce. */
struct op_amax {
    __device__ float operator()(float a, float b) const
    {
        return __uint_as_float(max(__float_as_uint(a), __float_as_uint(b)));
    }
};

/* amax[0] = the larger of amax[0] and a (bits of a non-negative value or
 * NaN).  As signed integers, a's bits are >= 0 and compare as above, and
 * whatever amax[0] holds that is negative loses, as on the host. */
static __device__ __forceinline__ void amax_fold_global(float *amax, unsigned a)
{
    atomicMax((int *)amax, (int)a);
}

/* f rounded to bf16 and back: the value a bf16 tensor holds for f
 * (store_bf16's rounding). */
static __device__ __forceinline__ float bf16_round(float f)
{
    return __bfloat162float(__float2bfloat16_rn(f));
}

/* ---- quantization ---- */

template <int FMT>
static __device__ __forceinline__ __nv_fp8_interpretation_t interp()
{
    return FMT == GL_FP8_E4M3 ? __NV_E4M3 : __NV_E5M2;
}

/* b[j] = fp8(f[j] * s) for W values; pairs go through one conversion. */
template <int W, int FMT>
static __device__ __forceinline__ void encode(uint8_t (&b)[W], const float (&f)[W],
                                       float s)
{
    if constexpr (W % 2 == 0) {
#pragma unroll
        for (int j = 0; j < W; j += 2) {
            float2 p = make_float2(mul_rn(f[j], s), mul_rn(f[j + 1], s));
            __nv_fp8x2_storage_t two =
                __nv_cvt_float2_to_fp8x2(p, __NV_SATFINITE, interp<FMT>());
            b[j] = (uint8_t)(two & 0xFF);         /* p.x in the low byte */
            b[j + 1] = (uint8_t)(two >> 8);
        }
    } else {
#pragma unroll
        for (int j = 0; j < W; j++)
            b[j] = __nv_cvt_float_to_fp8(mul_rn(f[j], s), __NV_SATFINITE,
                                         interp<FMT>());
    }
}

/* W bytes to p: one 8- or 16-byte store when W is 8 or 16. */
template <int W>
static __device__ __forceinline__ void store_bytes(uint8_t *p, const uint8_t (&b)[W])
{
    if constexpr (W == 8 || W == 16) {
        union { uint8_t b[W]; uint2 u2; uint4 u4; } w;
#pragma unroll
        for (int j = 0; j < W; j++)
            w.b[j] = b[j];
        if constexpr (W == 8)
            *(uint2 *)p = w.u2;
        else
            *(uint4 *)p = w.u4;
    } else {
#pragma unroll
        for (int j = 0; j < W; j++)
            p[j] = b[j];
    }
}

#define TILE 64          /* a block quantizes a TILE x TILE tile of x */
#define Q_THREADS 256

/*
 * One TILE x TILE tile of the tensor [rows, cols] per block, in two
 * passes:
 *   1. along rows: each thread takes chunks of RW consecutive elements of a
 *      row (RW = 8: one 16-byte load), scales and rounds them, writes the
 *      bytes to q, keeps them in the shared tile, and folds |x| into its
 *      amax;
 *   2. along columns (qt only): each thread takes CW consecutive bytes of
 *      one tile column (rows r .. r+CW-1) from the shared tile and writes
 *      them as one run of qt's row c (CW = 16: one 16-byte store).  Two
 *      neighbouring threads take rows r and r + CW of the same column, so
 *      that a warp's stores fill whole 32-byte sectors of qt (16 columns
 *      a warp; one sector a column).  Their shared-memory reads, 16 tile
 *      rows apart, fall in the same bank: a 2-way conflict, cheaper than
 *      the half-filled sectors it removes.
 * Then the block's amax (a block reduction of the bit patterns) is folded
 * into amax[0] with one atomic max: max is exact in any order, so the
 * result does not depend on which block comes first.
 * RW = 8 and CW = 16 need cols % 8 == 0, rows % 16 == 0 and aligned
 * buffers (then a chunk is wholly inside the tensor or wholly outside);
 * RW = CW = 1 is the fallback for any shape.  The source loads every
 * element once, so one that also stores its output writes it whole.
 */
template <int RW, int CW, int FMT, class Src>
__global__ void __launch_bounds__(Q_THREADS)
quantize_tile_kernel(uint8_t *q, uint8_t *qt, float *amax, Src src,
                     int rows, int cols, const float *scale)
{
    __shared__ __align__(16) uint8_t tile[TILE][TILE];   /* 8-byte row stores */
    const float s = *scale;
    const int r0 = blockIdx.y * TILE, c0 = blockIdx.x * TILE;
    unsigned am = 0;

    for (int i = threadIdx.x; i < TILE * TILE / RW; i += Q_THREADS) {
        int r = i / (TILE / RW), c = i % (TILE / RW) * RW;
        if (r0 + r >= rows || c0 + c >= cols)
            continue;
        size_t at = (size_t)(r0 + r) * cols + c0 + c;
        float f[RW];
        src.template load<RW>(f, r0 + r, c0 + c);
        uint8_t b[RW];
        encode<RW, FMT>(b, f, s);
#pragma unroll
        for (int j = 0; j < RW; j++)
            am = max(am, abs_bits(f[j]));
        if (q)
            store_bytes<RW>(q + at, b);
        if (qt)
            store_bytes<RW>(&tile[r][c], b);
    }

    if (qt) {
        __syncthreads();
        for (int i = threadIdx.x; i < TILE * TILE / CW; i += Q_THREADS) {
            /* threads 2k and 2k + 1 take rows r and r + CW of one column:
             * 2 CW consecutive bytes of qt's row c, a whole 32-byte
             * sector for CW = 16 */
            int c = i / 2 % TILE, r = i % 2 * CW + i / (2 * TILE) * 2 * CW;
            if (r0 + r >= rows || c0 + c >= cols)
                continue;
            uint8_t b[CW];
#pragma unroll
            for (int j = 0; j < CW; j++)
                b[j] = tile[r + j][c];
            store_bytes<CW>(qt + (size_t)(c0 + c) * rows + r0 + r, b);
        }
    }

    if (amax) {
        float m = block_reduce<Q_THREADS>(__uint_as_float(am), op_amax(), 0.0f);
        if (threadIdx.x == 0)
            amax_fold_global(amax, __float_as_uint(m));
    }
}

/* Whether the 8 / 16 wide instance takes this shape and these outputs
 * (the source's own pointers are the caller's to check). */
static inline bool quantize_tile_vec_ok(const uint8_t *q, const uint8_t *qt,
                                        int rows, int cols)
{
    return cols % 8 == 0 && rows % 16 == 0 && (uintptr_t)q % 8 == 0 &&
           (uintptr_t)qt % 16 == 0;
}

/* The grid of quantize_tile_kernel; dies where rows exceed it. */
static inline dim3 quantize_tile_grid(const char *what, int rows, int cols)
{
    if ((rows + TILE - 1) / TILE > 65535)
        gl_die("%s: %d rows; at most %d in one call", what, rows, 65535 * TILE);
    return dim3((cols + TILE - 1) / TILE, (rows + TILE - 1) / TILE);
}

/* Launch the kernel over src: the wide instance when vec (which the
 * caller has checked with quantize_tile_vec_ok and its source's
 * alignment), else the scalar one. */
template <class Src>
static void quantize_tile_launch(cudaStream_t st, const char *what,
                                 uint8_t *q, uint8_t *qt, float *amax,
                                 const Src &src, int rows, int cols,
                                 const float *scale, gl_fp8_format f, bool vec)
{
    dim3 grid = quantize_tile_grid(what, rows, cols);
    if (f == GL_FP8_E4M3) {
        if (vec)
            quantize_tile_kernel<8, 16, GL_FP8_E4M3><<<grid, Q_THREADS, 0, st>>>(
                q, qt, amax, src, rows, cols, scale);
        else
            quantize_tile_kernel<1, 1, GL_FP8_E4M3><<<grid, Q_THREADS, 0, st>>>(
                q, qt, amax, src, rows, cols, scale);
    } else {
        if (vec)
            quantize_tile_kernel<8, 16, GL_FP8_E5M2><<<grid, Q_THREADS, 0, st>>>(
                q, qt, amax, src, rows, cols, scale);
        else
            quantize_tile_kernel<1, 1, GL_FP8_E5M2><<<grid, Q_THREADS, 0, st>>>(
                q, qt, amax, src, rows, cols, scale);
    }
    GL_CUDA_LAUNCHED(what);
}

#endif
