/*
 * fp8.cu: FP8 quantization and per-tensor scales (ops.h's fp8_quantize,
 * fp8_amax, fp8_amax_scale, fp8_scale_delayed, fp8_scale_current), bit
 * for bit what
 * src/device/fp8.c computes on the host.  The FP8 products themselves are
 * in gemm.cu; the quantization kernel is fp8_tile.cuh's, which rmsnorm.cu
 * and swiglu.cu also run with their own math as its source.
 *
 * Exactness under --use_fast_math.  The back end is compiled with
 * -ftz=true -prec-div=false, under which plain f32 arithmetic flushes
 * subnormals to zero (in comparisons too) and '/' is approximate.  Where
 * the bits must match the host's:
 *   - x * scale is PTX mul.rn.f32 without .ftz: one IEEE rounding to
 *     nearest, subnormals kept, as the host's float product;
 *   - divisions are div.rn.f32 without .ftz: IEEE, as the host's '/';
 *   - amaxes are compared as integers: the bits of a float with the sign
 *     clear order as its value (subnormals included, where a flushed
 *     comparison would see zero), and every such NaN lies above
 *     +infinity, so the largest bit pattern is the amax with NaN winning;
 *   - float -> FP8 is cuda_fp8.h's __nv_cvt_float*_to_fp8*, the hardware's
 *     cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32 on sm_89 and later (a software
 *     rounding before): round to nearest even, saturate to the largest
 *     finite value, NaN to 0x7F, which is gl_fp8_encode().
 */
#include "config.h"

#include <float.h>
#include <cuda_fp8.h>

#include "fp8_tile.cuh"
#include "gl_cuda.h"
#include "vec.cuh"
#include "warp.cuh"

/* ---- exact arithmetic (see the top of the file) ---- */

__device__ __forceinline__ float div_rn(float a, float b)
{
    float r;
    asm("div.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}

/* A value is a usable amax, finite and > 0, when its bits, sign clear,
 * lie strictly between those of 0 and of +infinity. */
__device__ __forceinline__ bool amax_usable(unsigned u)
{
    return u != 0 && u < 0x7F800000u;
}

/* The scale that maps amax a (usable) to top: an IEEE quotient, FLT_MAX
 * where it overflows. */
__device__ __forceinline__ float scale_for(float top, float a)
{
    float s = div_rn(top, a);
    return __float_as_uint(s) == 0x7F800000u ? FLT_MAX : s;
}

/* ---- quantization: fp8_tile.cuh's kernel over a bf16 tensor ---- */

/* x [xrows, cols], then zero rows (fp8_quantize_pad): W elements lie in
 * one row, so they are all x's or all zero. */
struct rows_src {
    const bf16 *x;
    int cols, xrows;
    template <int W>
    __device__ __forceinline__ void load(float (&f)[W], int r, int c) const
    {
        if (r < xrows) {
            load_bf16<W>(f, x + (size_t)r * cols + c);
        } else {
#pragma unroll
            for (int j = 0; j < W; j++)
                f[j] = 0.0f;
        }
    }
};

void gl_cuda_fp8_quantize_pad(cudaStream_t st, uint8_t *q, uint8_t *qt,
                              float *amax, const bf16 *x, int xrows, int rows,
                              int cols, const float *scale, gl_fp8_format f)
{
    if (xrows < 0 || xrows > rows)
        gl_die("internal error: fp8_quantize_pad of %d rows of %d", xrows, rows);
    if (rows <= 0 || cols <= 0 || (!q && !qt && !amax))
        return;
    bool vec = quantize_tile_vec_ok(q, qt, rows, cols) && gl_vec8_ok(cols, x);
    quantize_tile_launch(st, "fp8 quantize", q, qt, amax,
                         rows_src{x, cols, xrows}, rows, cols, scale, f, vec);
}

void gl_cuda_fp8_quantize(cudaStream_t st, uint8_t *q, uint8_t *qt,
                          float *amax, const bf16 *x, int rows, int cols,
                          const float *scale, gl_fp8_format f)
{
    gl_cuda_fp8_quantize_pad(st, q, qt, amax, x, rows, rows, cols, scale, f);
}

/* ---- amax alone ---- */

#define A_THREADS 256

/*
 * The block's max |x_i| over its grid-stride share of n, V elements at a
 * time, returned to every thread as block_reduce does.  The block is A_THREADS threads and must call this
 * uniformly (block_reduce has barriers).
 */
template <int V>
__device__ float block_amax(const bf16 *x, size_t n)
{
    unsigned am = 0;
    for (size_t i = (blockIdx.x * (size_t)A_THREADS + threadIdx.x) * V; i < n;
         i += (size_t)gridDim.x * A_THREADS * V) {
        float f[V];
        load_bf16<V>(f, x + i);
#pragma unroll
        for (int j = 0; j < V; j++)
            am = max(am, abs_bits(f[j]));
    }
    return block_reduce<A_THREADS>(__uint_as_float(am), op_amax(), 0.0f);
}

/* max |x_i| over a grid-stride share of n (block_amax), folded into
 * amax[0] per block as in quantize_kernel. */
template <int V>
__global__ void __launch_bounds__(A_THREADS)
amax_kernel(float *amax, const bf16 *x, size_t n)
{
    float m = block_amax<V>(x, n);
    if (threadIdx.x == 0)
        amax_fold_global(amax, __float_as_uint(m));
}

void gl_cuda_fp8_amax(cudaStream_t st, float *amax, const bf16 *x, size_t n)
{
    if (!n)
        return;
    if (n % 8 == 0 && gl_vec8_ok(8, x)) {
        unsigned blocks = gl_cuda_grid((n + 7) / 8, A_THREADS);
        amax_kernel<8><<<blocks > 2048 ? 2048 : blocks, A_THREADS, 0, st>>>(
            amax, x, n);
    } else {
        unsigned blocks = gl_cuda_grid(n, A_THREADS);
        amax_kernel<1><<<blocks > 2048 ? 2048 : blocks, A_THREADS, 0, st>>>(
            amax, x, n);
    }
    GL_CUDA_LAUNCHED("fp8 amax");
}

/* ---- scales ---- */

#define S_THREADS 256

/*
 * Delayed scaling of tensor t = blockIdx.x, column t of hist [len, n]
 * (gl_fp8_scale_delayed in fp8.h):
 *   - the column's max, NaN and negative entries skipped (fmaxf's rule
 *     from 0), as integers: bits at most those of +infinity are exactly
 *     the non-negative non-NaN values;
 *   - the roll h'[i] = h[i+1], h'[len-1] = h[0], h'[0] = 0, in place, a
 *     block's worth at a time: each thread reads its h[i+1], the block
 *     meets at a barrier, each writes its h'[i].  Chunk k writes entries
 *     below (k+1) * S_THREADS, which only chunk k read, and reads entries
 *     above, which nobody has written yet;
 *   - thread 0 then sets the scale and its inverse.
 */
__global__ void __launch_bounds__(S_THREADS)
scale_delayed_kernel(float *hist, float *scale, float *scale_inv, int stride,
                     int n, int len, int most_recent, float top)
{
    const int t = blockIdx.x;
    float *h = hist + t;
    const float newest = h[0];
    unsigned am = 0;
    for (int i = threadIdx.x; i < len; i += S_THREADS) {
        unsigned u = __float_as_uint(h[(size_t)i * n]);
        if (u <= 0x7F800000u)
            am = max(am, u);
    }
    am = __float_as_uint(block_reduce<S_THREADS>(__uint_as_float(am),
                                                 op_amax(), 0.0f));

    for (int off = 0; off < len; off += S_THREADS) {
        int i = off + threadIdx.x;
        float v = 0;
        if (i < len)
            v = i < len - 1 ? h[(size_t)(i + 1) * n] : newest;
        __syncthreads();
        if (i < len)
            h[(size_t)i * n] = i > 0 ? v : 0.0f;
    }

    if (threadIdx.x == 0) {
        unsigned a = most_recent ? __float_as_uint(newest) : am;
        size_t at = (size_t)t * stride;
        float s = scale[at];
        if (amax_usable(a))
            s = scale_for(top, __uint_as_float(a));
        scale[at] = s;
        scale_inv[at] = div_rn(1.0f, s);
    }
}

/* Current scaling: one thread per tensor (gl_fp8_scale_current), tensor
 * t's scale and inverse at t * stride. */
__global__ void scale_current_kernel(const float *amax, float *scale,
                                     float *scale_inv, int stride, int n,
                                     float top)
{
    for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < n;
         t += gridDim.x * blockDim.x) {
        unsigned a = __float_as_uint(amax[t]);
        float s = amax_usable(a) ? scale_for(top, __uint_as_float(a)) : 1.0f;
        scale[(size_t)t * stride] = s;
        scale_inv[(size_t)t * stride] = div_rn(1.0f, s);
    }
}

/* ---- amax and current scale in one launch ---- */

/*
 * Each block reduces its grid-stride share of x (block_amax), and
 * thread 0 stores the block's amax (bits) in as_part[block], makes it
 * visible device-wide (__threadfence) and takes a ticket from as_done.
 * The block that draws the last ticket has seen every other block's
 * fence, so all partials are in place: it reduces them (volatile loads,
 * past any stale cache line), writes amax[0], the scale and its inverse
 * as scale_current_kernel does, and resets as_done to 0 for the next
 * launch.  No atomic max into amax[0], so amax needs no zeroing launch
 * first, and no scale launch after: one launch where zero + amax + scale
 * took three.
 *
 * as_part and as_done are this module's, one set per lane (ops.h's
 * lanes; slot = the lane) of each GPU context: the launches that use one
 * set must not overlap, which holds as they run on its lane's stream (a
 * later launch on a stream starts after the earlier one has finished,
 * its reset included), and the lanes' launches, which may run at once,
 * use sets of their own.  as_done starts at 0 (static device memory is
 * zeroed at module load).
 */
#define AS_BLOCKS 1024                  /* grid size cap, as_part's size */

static __device__ unsigned as_part[GL_LANES_MAX][AS_BLOCKS];
static __device__ unsigned as_done[GL_LANES_MAX];

template <int V>
__global__ void __launch_bounds__(A_THREADS)
amax_scale_kernel(float *amax, float *scale, float *scale_inv, const bf16 *x,
                  size_t n, float top, int slot)
{
    __shared__ bool last;
    float m = block_amax<V>(x, n);
    if (threadIdx.x == 0) {
        as_part[slot][blockIdx.x] = __float_as_uint(m);
        __threadfence();
        last = atomicAdd(&as_done[slot], 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last)                          /* uniform over the block */
        return;

    const volatile unsigned *part = as_part[slot];
    unsigned am = 0;
    for (unsigned b = threadIdx.x; b < gridDim.x; b += A_THREADS)
        am = max(am, part[b]);
    am = __float_as_uint(block_reduce<A_THREADS>(__uint_as_float(am),
                                                 op_amax(), 0.0f));
    if (threadIdx.x == 0) {
        amax[0] = __uint_as_float(am);
        if (scale) {
            float s = amax_usable(am) ? scale_for(top, __uint_as_float(am))
                                      : 1.0f;
            scale[0] = s;
            scale_inv[0] = div_rn(1.0f, s);
        }
        as_done[slot] = 0;
    }
}

void gl_cuda_fp8_amax_scale(cudaStream_t st, int slot, float *amax, float *scale,
                            float *scale_inv, const bf16 *x, size_t n,
                            gl_fp8_format f)
{
    if (slot < 0 || slot >= GL_LANES_MAX)
        gl_die("internal error: fp8 amax_scale on lane %d", slot);
    float top = gl_fp8_max(f);
    /* n = 0 still launches one block: amax 0, scale 1, as specified */
    if (n % 8 == 0 && gl_vec8_ok(8, x)) {
        unsigned blocks = gl_cuda_grid(n ? (n + 7) / 8 : 1, A_THREADS);
        amax_scale_kernel<8><<<blocks > AS_BLOCKS ? AS_BLOCKS : blocks,
                               A_THREADS, 0, st>>>(amax, scale, scale_inv, x,
                                                   n, top, slot);
    } else {
        unsigned blocks = gl_cuda_grid(n ? n : 1, A_THREADS);
        amax_scale_kernel<1><<<blocks > AS_BLOCKS ? AS_BLOCKS : blocks,
                               A_THREADS, 0, st>>>(amax, scale, scale_inv, x,
                                                   n, top, slot);
    }
    GL_CUDA_LAUNCHED("fp8 amax_scale");
}

/* Two scalars moved, not computed: their bits, subnormals included. */
__global__ void stage_scales_kernel(float *dst, const float *a, const float *b)
{
    dst[0] = a[0];
    dst[4] = b[0];
}

void gl_cuda_fp8_stage_scales(cudaStream_t st, float *dst, const float *a,
                              const float *b)
{
    stage_scales_kernel<<<1, 1, 0, st>>>(dst, a, b);
    GL_CUDA_LAUNCHED("fp8 stage_scales");
}

void gl_cuda_fp8_scale_delayed(cudaStream_t st, float *hist, float *scale,
                               float *scale_inv, int stride, int n, int len,
                               gl_fp8_amax_algo algo, int margin,
                               gl_fp8_format f)
{
    if (n <= 0)
        return;
    if (len < 1)
        gl_die("fp8_scale_delayed: an amax history of length %d; it needs at "
               "least 1 entry", len);
    scale_delayed_kernel<<<n, S_THREADS, 0, st>>>(
        hist, scale, scale_inv, stride, n, len,
        algo == GL_FP8_AMAX_MOST_RECENT,
        gl_fp8_scaled_max(f, margin));
    GL_CUDA_LAUNCHED("fp8 scale_delayed");
}

void gl_cuda_fp8_scale_current(cudaStream_t st, const float *amax,
                               float *scale, float *scale_inv, int stride,
                               int n, gl_fp8_format f)
{
    if (n <= 0)
        return;
    scale_current_kernel<<<gl_cuda_grid(n, 128), 128, 0, st>>>(
        amax, scale, scale_inv, stride, n, gl_fp8_max(f));
    GL_CUDA_LAUNCHED("fp8 scale_current");
}

/* ---- the transpose of gathered FP8 weights (--fp8-param-gather) ----
 *
 * One 32 x 32 tile of bytes per block, through shared memory so that
 * both the reads and the writes run along rows.  Once per weight and
 * step: plain is enough. */

#define T_TILE 32

__global__ void transpose_bytes_kernel(uint8_t *qt, const uint8_t *q, int rows, int cols)
{
    __shared__ uint8_t tile[T_TILE][T_TILE + 1];
    int c0 = blockIdx.x * T_TILE, r0 = blockIdx.y * T_TILE;
    for (int i = threadIdx.y; i < T_TILE; i += blockDim.y) {
        int r = r0 + i, c = c0 + threadIdx.x;
        if (r < rows && c < cols)
            tile[i][threadIdx.x] = q[(size_t)r * cols + c];
    }
    __syncthreads();
    for (int i = threadIdx.y; i < T_TILE; i += blockDim.y) {
        int c = c0 + i, r = r0 + threadIdx.x;
        if (r < rows && c < cols)
            qt[(size_t)c * rows + r] = tile[threadIdx.x][i];
    }
}

void gl_cuda_fp8_transpose(cudaStream_t st, uint8_t *qt, const uint8_t *q, int rows, int cols)
{
    if (rows <= 0 || cols <= 0)
        return;
    dim3 grid((cols + T_TILE - 1) / T_TILE, (rows + T_TILE - 1) / T_TILE);
    transpose_bytes_kernel<<<grid, dim3(T_TILE, 8), 0, st>>>(qt, q, rows, cols);
    GL_CUDA_LAUNCHED("fp8 transpose");
}

/* ---- block scaling (fp8.h: "Block scaling"; ops.h's fp8_quantize_tiles) ---- */

#define TL_THREADS 256
#define TL 128                  /* GL_FP8_TILE */

/* gl_fp8_tile_scale of the amax whose bits are u: 1 when it is 0, NaN or
 * infinite, else top / amax (FLT_MAX on overflow) with its mantissa
 * cleared, a power of two. */
__device__ __forceinline__ float tile_scale(unsigned u, float top)
{
    if (!amax_usable(u))
        return 1.0f;
    float s = scale_for(top, __uint_as_float(u));
    return __uint_as_float(__float_as_uint(s) & 0xFF800000u);
}

/* gl_fp8_tile_at: the factor of element (r, c) of a [rows, k] operand. */
__device__ __forceinline__ size_t tile_at(int rows, int k, int r, int c, int block2d)
{
    if (block2d)
        return (size_t)(r / TL) * (((k + TL - 1) / TL + 3) / 4 * 4) + c / TL;
    return (size_t)(c / TL) * ((rows + 3) / 4 * 4) + r;
}

template <int FMT>
__device__ __forceinline__ uint8_t encode1(float v, float s)
{
    uint8_t b[1];
    float f[1] = {v};
    encode<1, FMT>(b, f, s);
    return b[0];
}

/*
 * One block per 128 x 128 region [r0, r0 + nr) x [c0, c0 + nc) of x (the
 * ragged edge's smaller).  2D: the region is one tile, its amax reduced
 * over the block.  1D: q's tiles are the region's rows (a warp per row,
 * four values a lane), qt's its columns (a thread per column).  Plain,
 * unvectorised loads and byte stores: the path for shapes with ragged
 * edges; whole regions take tiles_fast_kernel below.
 */
template <int FMT>
__global__ void __launch_bounds__(TL_THREADS)
tiles_kernel(uint8_t *q, float *q_sinv, uint8_t *qt, float *qt_sinv, const bf16 *x,
             int rows, int cols, int block2d)
{
    const float top = FMT == GL_FP8_E4M3 ? 448.0f : 57344.0f;
    int r0 = blockIdx.y * TL, c0 = blockIdx.x * TL;
    int nr = min(TL, rows - r0), nc = min(TL, cols - c0);
    if (block2d) {
        unsigned am = 0;
        for (int i = threadIdx.x; i < nr * nc; i += TL_THREADS) {
            size_t at = (size_t)(r0 + i / nc) * cols + c0 + i % nc;
            am = max(am, abs_bits(__bfloat162float(x[at])));
        }
        float a = block_reduce<TL_THREADS>(__uint_as_float(am), op_amax(), 0.0f);
        float s = tile_scale(__float_as_uint(a), top);
        for (int i = threadIdx.x; i < nr * nc; i += TL_THREADS) {
            int r = r0 + i / nc, c = c0 + i % nc;
            uint8_t b = encode1<FMT>(__bfloat162float(x[(size_t)r * cols + c]), s);
            if (q)
                q[(size_t)r * cols + c] = b;
            if (qt)
                qt[(size_t)c * rows + r] = b;
        }
        if (threadIdx.x == 0) {
            float inv = div_rn(1.0f, s);
            if (q)
                q_sinv[tile_at(rows, cols, r0, c0, 1)] = inv;
            if (qt)
                qt_sinv[tile_at(cols, rows, c0, r0, 1)] = inv;
        }
        return;
    }
    if (q) {
        int lane = threadIdx.x % 32;
        for (int rr = threadIdx.x / 32; rr < nr; rr += TL_THREADS / 32) {
            const bf16 *row = x + (size_t)(r0 + rr) * cols + c0;
            float v[TL / 32];
            unsigned am = 0;
#pragma unroll
            for (int j = 0; j < TL / 32; j++) {
                int c = lane + 32 * j;
                v[j] = c < nc ? __bfloat162float(row[c]) : 0.0f;
                am = max(am, abs_bits(v[j]));
            }
            float a = warp_reduce(__uint_as_float(am), op_amax());
            float s = tile_scale(__float_as_uint(a), top);
#pragma unroll
            for (int j = 0; j < TL / 32; j++) {
                int c = lane + 32 * j;
                if (c < nc)
                    q[(size_t)(r0 + rr) * cols + c0 + c] = encode1<FMT>(v[j], s);
            }
            if (lane == 0)
                q_sinv[tile_at(rows, cols, r0 + rr, c0, 0)] = div_rn(1.0f, s);
        }
    }
    if (qt && (int)threadIdx.x < nc) {
        int c = c0 + threadIdx.x;
        unsigned am = 0;
        for (int rr = 0; rr < nr; rr++)
            am = max(am, abs_bits(__bfloat162float(x[(size_t)(r0 + rr) * cols + c])));
        float s = tile_scale(am, top);
        for (int rr = 0; rr < nr; rr++)
            qt[(size_t)c * rows + r0 + rr] =
                encode1<FMT>(__bfloat162float(x[(size_t)(r0 + rr) * cols + c]), s);
        qt_sinv[tile_at(cols, rows, c, r0, 0)] = div_rn(1.0f, s);
    }
}

/* Four bytes as one little-endian word: b[0] lowest, as they lie in memory. */
__device__ __forceinline__ uint32_t pack4(const uint8_t (&b)[4])
{
    return b[0] | b[1] << 8 | b[2] << 16 | (uint32_t)b[3] << 24;
}

/* Row pitch in bytes of the transposed bytes' table in tiles_fast_kernel:
 * 128 + 4, so that 32 threads writing a word each of 32 consecutive
 * table rows (pitch 33 words) hit 32 different banks. */
#define TL_PITCH (TL + 4)

/*
 * tiles_kernel for whole 128 x 128 regions: the same bytes and factors
 * (the same tile_scale and encode), written with full-width accesses.
 * The region is read once, 16 bytes a thread at a time, into shared
 * memory as bf16 [128][128]; then
 *   q:  a warp per row, 4 consecutive values a lane: the row tile's amax
 *       by a warp reduction (1D), and one 4-byte store a lane, so that a
 *       warp writes the row's 128 bytes at once;
 *   qt: two threads per column, 64 rows each: the column tile's amax
 *       (1D; the halves meet in shared memory), its bytes encoded into 16
 *       words of registers; once every thread is done reading the region,
 *       the words are written over it as a [128][TL_PITCH]-byte table of
 *       qt's rows, which each warp copies out a row at a time, 4 bytes a
 *       lane.
 * 2D: one amax for the region, reduced over the block.  Needs rows and
 * cols multiples of 128, x 16-byte aligned, q and qt 4-byte aligned
 * (tiles_fast_ok).
 */
template <int FMT, int BLOCK2D>
__global__ void __launch_bounds__(TL_THREADS)
tiles_fast_kernel(uint8_t *q, float *q_sinv, uint8_t *qt, float *qt_sinv, const bf16 *x,
                  int rows, int cols)
{
    static_assert(TL_THREADS == 2 * TL, "two threads per column");
    static_assert(TL * TL_PITCH <= TL * TL * (int)sizeof(bf16), "qt's table fits");
    __shared__ __align__(16) bf16 xs[TL][TL];
    __shared__ unsigned col_am[2][TL];
    const float top = FMT == GL_FP8_E4M3 ? 448.0f : 57344.0f;
    const int r0 = blockIdx.y * TL, c0 = blockIdx.x * TL;
    const int t = threadIdx.x, lane = t % 32, warp = t / 32;

    unsigned am = 0;                    /* 2D: this thread's share */
    for (int i = t; i < TL * TL / 8; i += TL_THREADS) {
        int r = i / (TL / 8), c = i % (TL / 8) * 8;
        uint4 v = *(const uint4 *)(x + (size_t)(r0 + r) * cols + c0 + c);
        *(uint4 *)&xs[r][c] = v;
        if (BLOCK2D) {
            const bf16 *h = (const bf16 *)&v;
#pragma unroll
            for (int j = 0; j < 8; j++)
                am = max(am, abs_bits(__bfloat162float(h[j])));
        }
    }
    float s2 = 1.0f;
    if (BLOCK2D) {
        /* block_reduce's barriers also order the loads above before the reads below */
        float a = block_reduce<TL_THREADS>(__uint_as_float(am), op_amax(), 0.0f);
        s2 = tile_scale(__float_as_uint(a), top);
        if (t == 0) {
            float inv = div_rn(1.0f, s2);
            if (q)
                q_sinv[tile_at(rows, cols, r0, c0, 1)] = inv;
            if (qt)
                qt_sinv[tile_at(cols, rows, c0, r0, 1)] = inv;
        }
    } else {
        __syncthreads();
    }

    if (q) {
        for (int r = warp; r < TL; r += TL_THREADS / 32) {
            float f[4];
            unsigned ra = 0;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                f[j] = __bfloat162float(xs[r][4 * lane + j]);
                ra = max(ra, abs_bits(f[j]));
            }
            float s = s2;
            if (!BLOCK2D) {
                float a = warp_reduce(__uint_as_float(ra), op_amax());
                s = tile_scale(__float_as_uint(a), top);
                if (lane == 0)
                    q_sinv[tile_at(rows, cols, r0 + r, c0, 0)] = div_rn(1.0f, s);
            }
            uint8_t b[4];
            encode<4, FMT>(b, f, s);
            *(uint32_t *)(q + (size_t)(r0 + r) * cols + c0 + 4 * lane) = pack4(b);
        }
    }
    if (!qt)
        return;

    const int c = t % TL, half = t / TL, rb = half * (TL / 2);
    float s = s2;
    if (!BLOCK2D) {
        unsigned ca = 0;
        for (int r = rb; r < rb + TL / 2; r++)
            ca = max(ca, abs_bits(__bfloat162float(xs[r][c])));
        col_am[half][c] = ca;
        __syncthreads();
        s = tile_scale(max(col_am[0][c], col_am[1][c]), top);
        if (half == 0)
            qt_sinv[tile_at(cols, rows, c0 + c, r0, 0)] = div_rn(1.0f, s);
    }
    uint32_t w[TL / 8];                 /* this thread's 64 bytes */
#pragma unroll
    for (int k = 0; k < TL / 8; k++) {
        float f[4];
#pragma unroll
        for (int j = 0; j < 4; j++)
            f[j] = __bfloat162float(xs[rb + 4 * k + j][c]);
        uint8_t b[4];
        encode<4, FMT>(b, f, s);
        w[k] = pack4(b);
    }
    __syncthreads();                    /* every read of xs is done */
    uint8_t *tab = (uint8_t *)&xs[0][0];
#pragma unroll
    for (int k = 0; k < TL / 8; k++)
        *(uint32_t *)(tab + c * TL_PITCH + rb + 4 * k) = w[k];
    __syncthreads();
    for (int cc = warp; cc < TL; cc += TL_THREADS / 32)
        *(uint32_t *)(qt + (size_t)(c0 + cc) * rows + r0 + 4 * lane) =
            *(const uint32_t *)(tab + cc * TL_PITCH + 4 * lane);
}

/* Whether tiles_fast_kernel takes this call. */
static bool tiles_fast_ok(const uint8_t *q, const uint8_t *qt, const bf16 *x, int rows,
                          int cols)
{
    return rows % TL == 0 && cols % TL == 0 && (uintptr_t)x % 16 == 0 &&
           (uintptr_t)q % 4 == 0 && (uintptr_t)qt % 4 == 0;
}

template <int FMT>
static void tiles_launch(cudaStream_t st, uint8_t *q, float *q_sinv, uint8_t *qt,
                         float *qt_sinv, const bf16 *x, int rows, int cols, int block2d)
{
    dim3 grid((cols + TL - 1) / TL, (rows + TL - 1) / TL);
    if (!tiles_fast_ok(q, qt, x, rows, cols))
        tiles_kernel<FMT><<<grid, TL_THREADS, 0, st>>>(q, q_sinv, qt, qt_sinv, x, rows, cols,
                                                       block2d);
    else if (block2d)
        tiles_fast_kernel<FMT, 1><<<grid, TL_THREADS, 0, st>>>(q, q_sinv, qt, qt_sinv, x,
                                                              rows, cols);
    else
        tiles_fast_kernel<FMT, 0><<<grid, TL_THREADS, 0, st>>>(q, q_sinv, qt, qt_sinv, x,
                                                              rows, cols);
}

void gl_cuda_fp8_quantize_tiles(cudaStream_t st, uint8_t *q, float *q_sinv, uint8_t *qt,
                                float *qt_sinv, const bf16 *x, int rows, int cols,
                                int block2d, gl_fp8_format f)
{
    if (rows <= 0 || cols <= 0 || (!q && !qt))
        return;
    if ((rows + TL - 1) / TL > 65535)
        gl_die("fp8 quantize tiles: %d rows; at most %d in one call", rows, 65535 * TL);
    if (f == GL_FP8_E4M3)
        tiles_launch<GL_FP8_E4M3>(st, q, q_sinv, qt, qt_sinv, x, rows, cols, block2d);
    else
        tiles_launch<GL_FP8_E5M2>(st, q, q_sinv, qt, qt_sinv, x, rows, cols, block2d);
    GL_CUDA_LAUNCHED("fp8 quantize tiles");
}

/* ---- 128 x 128 blocks from flat pieces (ops.h: fp8_block_amax and the
 * two after it; fp8.h: gl_fp8_block_amax) ----
 *
 * The piece [e0, e0 + count) of a [rows, cols] tensor is cut into
 * segments, the 1 x 128 pieces of rows inside one block column: segment
 * g covers row g / kt, columns of tile g % kt (kt = ceil(cols / 128)),
 * clipped to the piece. */

#define BR_THREADS 256

/* The segment that element e lies in. */
__device__ __host__ __forceinline__ size_t segment_of(size_t e, int cols)
{
    size_t kt = (cols + TL - 1) / TL;
    return e / cols * kt + e % cols / TL;
}

/* One warp per segment: the lanes' largest |x| bits, the warp's, and one
 * fold into the segment's block.  A warp returns or loops as a whole. */
__global__ void __launch_bounds__(BR_THREADS)
block_amax_kernel(float *amax, const bf16 *x, size_t e0, size_t count, int cols, size_t g0,
                  size_t nseg)
{
    size_t w = (blockIdx.x * (size_t)BR_THREADS + threadIdx.x) / 32;
    int lane = threadIdx.x % 32;
    if (w >= nseg)
        return;
    size_t g = g0 + w, kt = (cols + TL - 1) / TL;
    int r = (int)(g / kt), c0 = (int)(g % kt) * TL;
    size_t s = (size_t)r * cols + c0, e = s + min(TL, cols - c0);
    s = max(s, e0);
    e = min(e, e0 + count);
    unsigned am = 0;
    for (size_t i = s + lane; i < e; i += 32)
        am = max(am, abs_bits(__bfloat162float(x[i - e0])));
    float a = warp_reduce(__uint_as_float(am), op_amax());
    if (lane == 0)
        amax_fold_global(amax + tile_at(0, cols, r, c0, 1), __float_as_uint(a));
}

void gl_cuda_fp8_block_amax(cudaStream_t st, float *amax, const bf16 *x, size_t e0,
                            size_t count, int cols)
{
    if (!count)
        return;
    size_t g0 = segment_of(e0, cols), nseg = segment_of(e0 + count - 1, cols) - g0 + 1;
    size_t blocks = (nseg + BR_THREADS / 32 - 1) / (BR_THREADS / 32);
    block_amax_kernel<<<(unsigned)blocks, BR_THREADS, 0, st>>>(amax, x, e0, count, cols, g0,
                                                               nseg);
    GL_CUDA_LAUNCHED("fp8 block amax");
}

/* A thread per block (b, j): its factor 1 / s into both layouts. */
template <int FMT>
__global__ void block_sinv_kernel(float *q_sinv, float *qt_sinv, const float *amax, int rows,
                                  int cols)
{
    const float top = FMT == GL_FP8_E4M3 ? 448.0f : 57344.0f;
    int nbr = (rows + TL - 1) / TL, kt = (cols + TL - 1) / TL;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nbr * kt)
        return;
    int r0 = i / kt * TL, c0 = i % kt * TL;
    size_t at = tile_at(rows, cols, r0, c0, 1);
    float inv = div_rn(1.0f, tile_scale(__float_as_uint(amax[at]), top));
    q_sinv[at] = inv;
    qt_sinv[tile_at(cols, rows, c0, r0, 1)] = inv;
}

void gl_cuda_fp8_block_sinv(cudaStream_t st, float *q_sinv, float *qt_sinv,
                            const float *amax, int rows, int cols, gl_fp8_format f)
{
    int n = ((rows + TL - 1) / TL) * ((cols + TL - 1) / TL);
    if (n <= 0)
        return;
    unsigned blocks = gl_cuda_grid((size_t)n, S_THREADS);
    if (f == GL_FP8_E4M3)
        block_sinv_kernel<GL_FP8_E4M3><<<blocks, S_THREADS, 0, st>>>(q_sinv, qt_sinv, amax,
                                                                     rows, cols);
    else
        block_sinv_kernel<GL_FP8_E5M2><<<blocks, S_THREADS, 0, st>>>(q_sinv, qt_sinv, amax,
                                                                     rows, cols);
    GL_CUDA_LAUNCHED("fp8 block sinv");
}

/* Grid-stride over the piece, BR_RUN consecutive elements a thread: the
 * run's first element's row and column from one division, then stepped
 * along (a run may wrap to the next row), the block's scale computed
 * where the block changes. */
#define BR_RUN 8

template <int FMT>
__global__ void __launch_bounds__(BR_THREADS)
quantize_block_range_kernel(uint8_t *q, const bf16 *x, size_t e0, size_t count, int cols,
                            const float *amax)
{
    const float top = FMT == GL_FP8_E4M3 ? 448.0f : 57344.0f;
    for (size_t i0 = (blockIdx.x * (size_t)BR_THREADS + threadIdx.x) * BR_RUN; i0 < count;
         i0 += (size_t)gridDim.x * BR_THREADS * BR_RUN) {
        size_t e = e0 + i0;
        int r = (int)(e / cols), c = (int)(e % cols);
        float s = 0;
        for (size_t i = i0; i < i0 + BR_RUN && i < count; i++, c++) {
            if (c == cols)
                c = 0, r++;
            if (i == i0 || c % TL == 0)
                s = tile_scale(__float_as_uint(amax[tile_at(0, cols, r, c, 1)]), top);
            q[i] = encode1<FMT>(__bfloat162float(x[i]), s);
        }
    }
}

void gl_cuda_fp8_quantize_block_range(cudaStream_t st, uint8_t *q, const bf16 *x,
                                      size_t e0, size_t count, int cols,
                                      const float *amax, gl_fp8_format f)
{
    if (!count)
        return;
    unsigned blocks = gl_cuda_grid((count + BR_RUN - 1) / BR_RUN, BR_THREADS);
    if (blocks > 8192)
        blocks = 8192;
    if (f == GL_FP8_E4M3)
        quantize_block_range_kernel<GL_FP8_E4M3><<<blocks, BR_THREADS, 0, st>>>(
            q, x, e0, count, cols, amax);
    else
        quantize_block_range_kernel<GL_FP8_E5M2><<<blocks, BR_THREADS, 0, st>>>(
            q, x, e0, count, cols, amax);
    GL_CUDA_LAUNCHED("fp8 quantize block range");
}
