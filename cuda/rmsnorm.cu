/*
 * rmsnorm.cu: RMSNorm forward and backward, fp32 math on bf16 rows.
 *
 * Forward, for each row x of h elements:
 *   rstd = 1 / sqrt(mean(x^2) + eps),   y_j = x_j rstd w_j,
 * one warp per row: a pass for the sum of squares (warp shuffles), a pass
 * to write y.
 *
 * Backward: see the comment above rmsnorm_bwd_rows.
 */
#include <config.h>

#include "fp8_tile.cuh"
#include "gl_cuda.h"
#include "norm_common.cuh"
#include "vec.cuh"
#include "warp.cuh"

/* The row's rstd, summed by the warp (lane's chunks of V, then shuffles):
 * one order for rmsnorm_fwd and rmsnorm_fwd_fp8, so the same bits. */
template <int V>
static __device__ __forceinline__ float row_rstd(const bf16 *xr, int h,
                                                 float eps, int lane)
{
    float ss = 0;
    for (int c = lane * V; c < h; c += 32 * V) {
        float f[V];
        load_bf16<V>(f, xr + c);
        for (int i = 0; i < V; i++)
            ss += f[i] * f[i];
    }
    ss = warp_sum(ss);
    return 1.0f / sqrtf(ss / h + eps);
}

/* y_j of a row with rstd r: one expression for both forward paths. */
static __device__ __forceinline__ float norm_y(float x, float r, float w)
{
    return x * r * w;
}

template <int V>
__global__ void rmsnorm_fwd_kernel(bf16 *y, float *rstd, const bf16 *x,
                                   const bf16 *w, int n, int h, float eps)
{
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= n)
        return;
    const bf16 *xr = x + (size_t)row * h;
    bf16 *yr = y + (size_t)row * h;
    float r = row_rstd<V>(xr, h, eps, lane);
    for (int c = lane * V; c < h; c += 32 * V) {
        float f[V], g[V];
        load_bf16<V>(f, xr + c);
        load_bf16<V>(g, w + c);
        for (int i = 0; i < V; i++)
            f[i] = norm_y(f[i], r, g[i]);
        store_bf16<V>(yr + c, f);
    }
    if (lane == 0)
        rstd[row] = r;
}

/* rstd alone, a warp per row: the first half of rmsnorm_fwd_fp8. */
template <int V>
__global__ void rmsnorm_rstd_kernel(float *rstd, const bf16 *x, int n, int h,
                                    float eps)
{
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= n)
        return;
    float r = row_rstd<V>(x + (size_t)row * h, h, eps, lane);
    if (lane == 0)
        rstd[row] = r;
}

/* The second half: y as rmsnorm_fwd_kernel makes it (rounded to bf16,
 * stored when y is given), the source of fp8_tile.cuh's kernel. */
struct norm_src {
    bf16 *y;
    const float *rstd;
    const bf16 *x, *w;
    int h;
    template <int W>
    __device__ __forceinline__ void load(float (&o)[W], int r, int c) const
    {
        float g[W];
        float rs = rstd[r];
        load_bf16<W>(o, x + (size_t)r * h + c);
        load_bf16<W>(g, w + c);
#pragma unroll
        for (int i = 0; i < W; i++)
            o[i] = bf16_round(norm_y(o[i], rs, g[i]));
        if (y)
            store_bf16<W>(y + (size_t)r * h + c, o);
    }
};

/*
 * Backward.  With g = w * dy (elementwise) and rstd = r of the row,
 *   y_j = x_j r w_j,   d r / d x_k = -r^3 x_k / h,  so
 *   dx_k = r g_k - x_k r^3 (1/h) sum_j g_j x_j
 *        = r (g_k - x_k c),       c = r^2 mean(g x)      (one dot per row)
 *   dw_j = sum over rows i of dy_ij x_ij r_i           (a column sum)
 * and with accumulate_dx the result is added to dx (the residual stream's
 * gradient, summed in the same pass).
 *
 * The traffic is x and dy read once, dx written once (and read once when
 * accumulating): 6 or 8 bytes per element, 128 MiB for [8192 x 2048]
 * accumulating, against which the math is nothing, so the aim is memory
 * speed: each byte moved once, 16-byte accesses, enough loads in flight,
 * and dw's column sums without a second pass over the rows.  Two kernels:
 *
 * rmsnorm_bwd_rows: a team of T warps takes a row (T = 1 up to h = 2048
 * with 16-byte loads; wider rows take teams of 2, 4 or 8 warps).  A lane
 * owns the same columns in every row: CH chunks of V elements, chunk k at
 * column ((k T + q) 32 + lane) V for warp q of the team, so each load
 * instruction of a warp reads 32 consecutive chunks (norm_common.cuh has
 * the parts shared with LayerNorm's backward).  The lane loads its
 * chunks of x, dy (and the old dx) once, keeps them in registers as bf16,
 * adds up its part of the dot sum g x, and the warp sums it with
 * shuffles (a team of several warps adds the warps' sums through shared
 * memory, in warp order).  Then it writes its chunks of dx and adds
 * dy x r into fp32 accumulators, also in registers: no shared memory and
 * no barrier per row when T = 1.  The block's teams take rows
 * blockIdx.x * TEAMS + team, then grid-stride (all blocks' teams) on;
 * at the end the teams add their accumulators into one shared-memory row
 * in team order, and the block writes that row of partial sums to
 * scratch: partial[blockIdx.x][h] (fp32).  At h = 2048 a lane holds 64
 * fp32 sums and 3 x 8 16-byte words of row data (about 220 registers):
 * one block of 8 warps per SM, each warp with 12 KiB of loads in flight
 * per row, which is plenty to keep HBM busy.  The grid is as many blocks
 * as fit on the GPU at once (fewer for few rows), so G is small (132 on
 * an H200 at h = 2048) and the partials cost ~1% of the traffic.
 *
 * rmsnorm_bwd_dw: dw_j += the G partials of column j, added in a fixed
 * tree (a thread sums blocks b = ty, ty + 32, ... of its column; then the
 * 32 sums are added in ty order).
 *
 * Every sum has an order fixed by the shapes and the launch (grid size
 * from the occupancy of this GPU), never by timing: the result is the
 * same bits every run.  Rows wider than the teams cover (V = 8 beyond
 * h = 16384, V = 1 beyond 2048) take rmsnorm_bwd_general, which keeps the
 * block's dw row in shared memory.
 */
template <int V, int CH, int T>
__global__ void __launch_bounds__(NORM_THREADS)
rmsnorm_bwd_rows(bf16 *dx, float *partial, const bf16 *dy, const bf16 *x,
                 const bf16 *w, const float *rstd, int n, int h,
                 int accumulate_dx)
{
    constexpr int TEAMS = NORM_WARPS / T;
    extern __shared__ float dw_block[];               /* [h] */
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int team = warp / T, q = warp % T;
    float acc[CH][V];
    for (int k = 0; k < CH; k++)
        for (int i = 0; i < V; i++)
            acc[k][i] = 0;

    /* base is the same in the whole block, so every warp meets the
     * team barrier equally often; a team past the last row idles. */
    int it = 0;
    for (int base = blockIdx.x * TEAMS; base < n;
         base += gridDim.x * TEAMS, it++) {
        int row = base + team;
        bool live = row < n;
        bf16_raw<V> xv[CH], dv[CH], ov[CH];
        float r = 0, dot = 0;
        const bf16 *xr = x + (size_t)row * h, *dyr = dy + (size_t)row * h;
        bf16 *dxr = dx + (size_t)row * h;
        if (live) {
            r = rstd[row];
            norm_load_chunks<V, CH, T>(xv, dv, ov, xr, dyr, dxr, h, q, lane,
                                       accumulate_dx);
            for (int k = 0; k < CH; k++) {
                int c = norm_col<V, T>(k, q, lane);
                if (c < h) {
                    float fx[V], fd[V], fw[V];
                    unpack_bf16<V>(fx, xv[k]);
                    unpack_bf16<V>(fd, dv[k]);
                    load_bf16<V>(fw, w + c);
                    for (int i = 0; i < V; i++)
                        dot += fw[i] * fd[i] * fx[i];
                }
            }
        }
        float sums[1] = {dot};
        norm_row_sums<T>(sums, it);
        if (!live)
            continue;
        float cc = sums[0] / h * r * r;
        for (int k = 0; k < CH; k++) {
            int c = norm_col<V, T>(k, q, lane);
            if (c < h) {
                float fx[V], fd[V], fw[V], o[V];
                unpack_bf16<V>(fx, xv[k]);
                unpack_bf16<V>(fd, dv[k]);
                load_bf16<V>(fw, w + c);
                if (accumulate_dx)
                    unpack_bf16<V>(o, ov[k]);
                for (int i = 0; i < V; i++) {
                    float d = r * (fw[i] * fd[i] - fx[i] * cc);
                    o[i] = accumulate_dx ? o[i] + d : d;
                    acc[k][i] += fd[i] * fx[i] * r;
                }
                store_bf16<V>(dxr + c, o);
            }
        }
    }

    /* the block's dw row, the teams' sums added in team order */
    norm_block_row<V, CH, T>(dw_block, partial + (size_t)blockIdx.x * h, acc,
                             h, team, q, lane);
}

/* The fallback for rows wider than rmsnorm_bwd_rows covers: the block
 * takes a contiguous run of rows, all its threads on one row at a time;
 * a thread owns the same columns in every row and adds their dw terms
 * into its own slots of a shared-memory row [h] (no atomics), which the
 * block writes to partial[blockIdx.x] at the end. */
template <int V>
__global__ void __launch_bounds__(NORM_THREADS)
rmsnorm_bwd_general(bf16 *dx, float *partial, const bf16 *dy, const bf16 *x,
                    const bf16 *w, const float *rstd, int n, int h,
                    int rows_per_block, int accumulate_dx)
{
    extern __shared__ float dwp[];              /* [h] */
    __shared__ float warp_part[2][NORM_WARPS];
    int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    for (int c = tid * V; c < h; c += NORM_THREADS * V)
        for (int i = 0; i < V; i++)
            dwp[c + i] = 0;
    int r0 = blockIdx.x * rows_per_block;
    int r1 = min(n, r0 + rows_per_block);
    for (int row = r0; row < r1; row++) {
        const bf16 *xr = x + (size_t)row * h, *dyr = dy + (size_t)row * h;
        float r = rstd[row];
        float gx = 0;
        for (int c = tid * V; c < h; c += NORM_THREADS * V) {
            float fx[V], fd[V], fw[V];
            load_bf16<V>(fx, xr + c);
            load_bf16<V>(fd, dyr + c);
            load_bf16<V>(fw, w + c);
            for (int i = 0; i < V; i++)
                gx += fw[i] * fd[i] * fx[i];
        }
        gx = warp_sum(gx);
        /* two slots by row parity, as in rmsnorm_bwd_rows */
        if (lane == 0)
            warp_part[row & 1][warp] = gx;
        __syncthreads();
        gx = 0;
        for (int i = 0; i < NORM_WARPS; i++)
            gx += warp_part[row & 1][i];
        float cc = gx / h * r * r;
        bf16 *dxr = dx + (size_t)row * h;
        for (int c = tid * V; c < h; c += NORM_THREADS * V) {
            float fx[V], fd[V], fw[V], o[V];
            load_bf16<V>(fx, xr + c);
            load_bf16<V>(fd, dyr + c);
            load_bf16<V>(fw, w + c);
            if (accumulate_dx)
                load_bf16<V>(o, dxr + c);
            for (int i = 0; i < V; i++) {
                float dv = r * (fw[i] * fd[i] - fx[i] * cc);
                o[i] = accumulate_dx ? o[i] + dv : dv;
                dwp[c + i] += fd[i] * fx[i] * r;
            }
            store_bf16<V>(dxr + c, o);
        }
    }
    __syncthreads();
    float *pr = partial + (size_t)blockIdx.x * h;
    for (int c = tid; c < h; c += NORM_THREADS)
        pr[c] = dwp[c];
}

/* dw[j] += the G partial rows of column j: a 32 x 32 block takes 32
 * columns; thread (tx, ty) adds rows ty, ty + 32, ... of column tx in
 * order, then thread (tx, 0) adds the 32 sums in ty order. */
#define DW_COLS 32
#define DW_ROWS 32

__global__ void __launch_bounds__(DW_COLS * DW_ROWS)
rmsnorm_bwd_dw(float *dw, const float *partial, int G, int h)
{
    __shared__ float sums[DW_ROWS][DW_COLS + 1];
    int tx = threadIdx.x, ty = threadIdx.y;
    int j = blockIdx.x * DW_COLS + tx;
    float s = 0;
    if (j < h) {
#pragma unroll 8
        for (int b = ty; b < G; b += DW_ROWS)
            s += partial[(size_t)b * h + j];
    }
    sums[ty][tx] = s;
    __syncthreads();
    if (ty == 0 && j < h) {
        float t = 0;
        for (int i = 0; i < DW_ROWS; i++)
            t += sums[i][tx];
        dw[j] += t;
    }
}

void gl_cuda_rmsnorm_fwd(gl_dev *d, bf16 *y, float *rstd, const bf16 *x,
                         const bf16 *w, int n, int h, float eps)
{
    if (n <= 0)
        return;
    cudaStream_t st = gl_cuda_st(d)->stream;
    int warps = 8;
    unsigned blocks = (unsigned)((n + warps - 1) / warps);
    if (gl_vec8_ok(h, y, x, w))
        rmsnorm_fwd_kernel<8><<<blocks, warps * 32, 0, st>>>(y, rstd, x, w, n,
                                                             h, eps);
    else
        rmsnorm_fwd_kernel<1><<<blocks, warps * 32, 0, st>>>(y, rstd, x, w, n,
                                                             h, eps);
    GL_CUDA_LAUNCHED("rmsnorm_fwd");
}

/* rmsnorm_fwd_fp8 (ops.h): rstd by rows as rmsnorm_fwd sums them (the
 * same V for the same x, w and y), then y quantized by tiles, made from
 * x, w and rstd as rmsnorm_fwd makes it: two launches, x read twice (the
 * plain forward reads it twice too), y's bf16 write and fp8_quantize's
 * read of it gone. */
void gl_cuda_rmsnorm_fwd_fp8(gl_dev *d, bf16 *y, float *rstd, const bf16 *x,
                             const bf16 *w, int n, int h, float eps,
                             const gl_fp8_out *o)
{
    if (n <= 0)
        return;
    cudaStream_t st = gl_cuda_st(d)->stream;
    if (y && !o->q && !o->qt && !o->amax) {
        gl_cuda_rmsnorm_fwd(d, y, rstd, x, w, n, h, eps);
        return;
    }
    int warps = 8;
    unsigned blocks = (unsigned)((n + warps - 1) / warps);
    bool v8 = gl_vec8_ok(h, y, x, w);
    if (v8)
        rmsnorm_rstd_kernel<8><<<blocks, warps * 32, 0, st>>>(rstd, x, n, h, eps);
    else
        rmsnorm_rstd_kernel<1><<<blocks, warps * 32, 0, st>>>(rstd, x, n, h, eps);
    GL_CUDA_LAUNCHED("rmsnorm_fwd_fp8 rstd");
    bool vec = v8 && quantize_tile_vec_ok(o->q, o->qt, n, h);
    quantize_tile_launch(st, "rmsnorm_fwd_fp8", o->q, o->qt, o->amax,
                         norm_src{y, rstd, x, w, h}, n, h, o->scale, o->f, vec);
}

typedef void (*rows_kernel)(bf16 *, float *, const bf16 *, const bf16 *,
                            const bf16 *, const float *, int, int, int);

/* The rmsnorm_bwd_rows instance for rows of h elements moved V (8 or 1)
 * at a time (norm_pick_team); sets its teams per block.  NULL where the
 * rows are too wide for it. */
template <int V>
static rows_kernel pick_rows(int h, int *teams)
{
    const norm_team_entry<rows_kernel> table[] =
        NORM_TEAM_TABLE(rmsnorm_bwd_rows, V);
    return norm_pick_team<V>(table, h, teams);
}

/* Launches the first pass into partial (scratch) and returns its row
 * count G. */
static int bwd_rows(gl_cuda_state *st, gl_dev *d, bf16 *dx, const bf16 *dy,
                    const bf16 *x, const bf16 *w, const float *rstd, int n,
                    int h, int accumulate_dx, float **partial)
{
    size_t smem = (size_t)h * sizeof(float);
    int v8 = gl_vec8_ok(h, dx, dy, x, w), teams = 0;
    rows_kernel k = v8 ? pick_rows<8>(h, &teams) : pick_rows<1>(h, &teams);
    if (k) {
        GL_CUDA_CHECK(cudaFuncSetAttribute(
            k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        int per_sm = 0;
        GL_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
            &per_sm, k, NORM_THREADS, smem));
        long G = (long)st->prop.multiProcessorCount * (per_sm > 0 ? per_sm : 1);
        long most = (n + teams - 1) / teams;     /* a row for every team */
        if (G > most)
            G = most;
        *partial = (float *)gl_cuda_scratch(d, &st->s_norm,
                                            (size_t)G * h * sizeof(float));
        k<<<(unsigned)G, NORM_THREADS, smem, st->stream>>>(
            dx, *partial, dy, x, w, rstd, n, h, accumulate_dx);
        GL_CUDA_LAUNCHED("rmsnorm_bwd_rows");
        return (int)G;
    }
    int G = 2 * st->prop.multiProcessorCount;
    if (G > n)
        G = n;
    int rpb = (n + G - 1) / G;
    G = (n + rpb - 1) / rpb;
    *partial = (float *)gl_cuda_scratch(d, &st->s_norm,
                                        (size_t)G * h * sizeof(float));
    if (v8) {
        GL_CUDA_CHECK(cudaFuncSetAttribute(
            rmsnorm_bwd_general<8>,
            cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        rmsnorm_bwd_general<8><<<G, NORM_THREADS, smem, st->stream>>>(
            dx, *partial, dy, x, w, rstd, n, h, rpb, accumulate_dx);
    } else {
        GL_CUDA_CHECK(cudaFuncSetAttribute(
            rmsnorm_bwd_general<1>,
            cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        rmsnorm_bwd_general<1><<<G, NORM_THREADS, smem, st->stream>>>(
            dx, *partial, dy, x, w, rstd, n, h, rpb, accumulate_dx);
    }
    GL_CUDA_LAUNCHED("rmsnorm_bwd_general");
    return G;
}

void gl_cuda_rmsnorm_bwd(gl_dev *d, bf16 *dx, float *dw, const bf16 *dy,
                         const bf16 *x, const bf16 *w, const float *rstd,
                         int n, int h, int accumulate_dx)
{
    if (n <= 0)
        return;
    gl_cuda_state *st = gl_cuda_st(d);
    size_t smem = (size_t)h * sizeof(float);
    if (smem > (size_t)st->prop.sharedMemPerBlockOptin - 1024)
        gl_die("rmsnorm_bwd: hidden size %d needs %zu bytes of shared memory "
               "per block, more than this GPU's %zu", h, smem,
               (size_t)st->prop.sharedMemPerBlockOptin - 1024);
    float *partial;
    int G = bwd_rows(st, d, dx, dy, x, w, rstd, n, h, accumulate_dx,
                     &partial);
    dim3 block(DW_COLS, DW_ROWS);
    rmsnorm_bwd_dw<<<(h + DW_COLS - 1) / DW_COLS, block, 0, st->stream>>>(
        dw, partial, G, h);
    GL_CUDA_LAUNCHED("rmsnorm_bwd_dw");
}

/*
 * RMSNorm of each head (--qk-layernorm): the rows are the heads of a
 * [n, heads, D] view into the fused QKV buffer (head j of token i at
 * i ld + j D), all normalised with one weight [D].  A head is short (D =
 * 128 in Qwen3), so a warp takes a whole head: a lane holds pairs of
 * elements (bf16x2 loads; D is even, as RoPE needs) at columns 2 (lane +
 * 32 k), k < HEAD_CH, in registers between the two passes.  The math is
 * rmsnorm_fwd_kernel's and rmsnorm_bwd_rows' with h = D.
 *
 * Backward: a block of NORM_WARPS warps takes heads blockIdx.x NORM_WARPS
 * + warp, then grid-stride on; a lane adds the dw terms of its columns
 * into registers, the block adds its warps' sums in warp order into a
 * shared row and writes it to partial[blockIdx.x][D]; rmsnorm_bwd_dw then
 * adds the G rows into dw.  Fixed orders throughout: the same bits every
 * run.  dx may alias dy: a lane reads its elements of dy before the warp's
 * sum and writes dx only to those elements after it.
 */
#define HEAD_CH 8                       /* D <= 2 x 32 x HEAD_CH = 512 */

__global__ void head_rmsnorm_fwd_kernel(bf16 *y, int ldy, float *rstd,
                                        const bf16 *x, int ldx, const bf16 *w,
                                        long rows, int heads, int D, float eps)
{
    long row = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= rows)
        return;
    long i = row / heads;
    int j = (int)(row % heads);
    const bf16 *xr = x + i * ldx + (long)j * D;
    bf16 *yr = y + i * ldy + (long)j * D;
    float2 v[HEAD_CH];
    float ss = 0;
#pragma unroll
    for (int k = 0; k < HEAD_CH; k++) {
        int c = 2 * (lane + 32 * k);
        if (c < D) {
            v[k] = __bfloat1622float2(*(const __nv_bfloat162 *)(xr + c));
            ss += v[k].x * v[k].x + v[k].y * v[k].y;
        }
    }
    ss = warp_sum(ss);
    float r = 1.0f / sqrtf(ss / D + eps);
#pragma unroll
    for (int k = 0; k < HEAD_CH; k++) {
        int c = 2 * (lane + 32 * k);
        if (c < D) {
            float2 g = __bfloat1622float2(*(const __nv_bfloat162 *)(w + c));
            *(__nv_bfloat162 *)(yr + c) =
                __floats2bfloat162_rn(v[k].x * r * g.x, v[k].y * r * g.y);
        }
    }
    if (lane == 0)
        rstd[row] = r;
}

__global__ void __launch_bounds__(NORM_THREADS)
head_rmsnorm_bwd_kernel(bf16 *dx, int ldg, float *partial, const bf16 *dy,
                        const bf16 *x, int ldx, const bf16 *w,
                        const float *rstd, long rows, int heads, int D)
{
    __shared__ float dw_block[2 * 32 * HEAD_CH];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    float2 acc[HEAD_CH];
#pragma unroll
    for (int k = 0; k < HEAD_CH; k++)
        acc[k] = make_float2(0, 0);
    for (long row = (long)blockIdx.x * NORM_WARPS + warp; row < rows;
         row += (long)gridDim.x * NORM_WARPS) {
        long i = row / heads;
        int j = (int)(row % heads);
        const bf16 *xr = x + i * ldx + (long)j * D;
        const bf16 *dyr = dy + i * ldg + (long)j * D;
        bf16 *dxr = dx + i * ldg + (long)j * D;
        float r = rstd[row], dot = 0;
        float2 xv[HEAD_CH], dv[HEAD_CH];
#pragma unroll
        for (int k = 0; k < HEAD_CH; k++) {
            int c = 2 * (lane + 32 * k);
            if (c < D) {
                xv[k] = __bfloat1622float2(*(const __nv_bfloat162 *)(xr + c));
                dv[k] = __bfloat1622float2(*(const __nv_bfloat162 *)(dyr + c));
                float2 g = __bfloat1622float2(*(const __nv_bfloat162 *)(w + c));
                dot += g.x * dv[k].x * xv[k].x + g.y * dv[k].y * xv[k].y;
            }
        }
        dot = warp_sum(dot);
        float cc = dot / D * r * r;
#pragma unroll
        for (int k = 0; k < HEAD_CH; k++) {
            int c = 2 * (lane + 32 * k);
            if (c < D) {
                float2 g = __bfloat1622float2(*(const __nv_bfloat162 *)(w + c));
                *(__nv_bfloat162 *)(dxr + c) = __floats2bfloat162_rn(
                    r * (g.x * dv[k].x - xv[k].x * cc),
                    r * (g.y * dv[k].y - xv[k].y * cc));
                acc[k].x += dv[k].x * xv[k].x * r;
                acc[k].y += dv[k].y * xv[k].y * r;
            }
        }
    }
    for (int t = 0; t < NORM_WARPS; t++) {
        if (warp == t)
#pragma unroll
            for (int k = 0; k < HEAD_CH; k++) {
                int c = 2 * (lane + 32 * k);
                if (c < D) {
                    dw_block[c] = (t ? dw_block[c] : 0.0f) + acc[k].x;
                    dw_block[c + 1] = (t ? dw_block[c + 1] : 0.0f) + acc[k].y;
                }
            }
        __syncthreads();
    }
    float *pr = partial + (size_t)blockIdx.x * D;
    for (int c = threadIdx.x; c < D; c += NORM_THREADS)
        pr[c] = dw_block[c];
}

/* D even (bf16x2 accesses, 4-byte aligned: ld and the views' starts are
 * even too) and at most 512 (the registers of a lane). */
static void check_head_dim(const char *op, int D, int ldx, int ldy)
{
    if (D % 2 || D > 2 * 32 * HEAD_CH || ldx % 2 || ldy % 2)
        gl_die("%s: head size %d (row strides %d, %d) is not an even size of at "
               "most %d", op, D, ldx, ldy, 2 * 32 * HEAD_CH);
}

void gl_cuda_head_rmsnorm_fwd(gl_dev *d, bf16 *y, int ldy, float *rstd,
                              const bf16 *x, int ldx, const bf16 *w, int n,
                              int heads, int D, float eps)
{
    long rows = (long)n * heads;
    if (rows <= 0)
        return;
    check_head_dim("head_rmsnorm_fwd", D, ldx, ldy);
    int warps = 8;
    unsigned blocks = (unsigned)((rows + warps - 1) / warps);
    head_rmsnorm_fwd_kernel<<<blocks, warps * 32, 0, gl_cuda_st(d)->stream>>>(
        y, ldy, rstd, x, ldx, w, rows, heads, D, eps);
    GL_CUDA_LAUNCHED("head_rmsnorm_fwd");
}

void gl_cuda_head_rmsnorm_bwd(gl_dev *d, bf16 *dx, int ldg, float *dw,
                              const bf16 *dy, const bf16 *x, int ldx,
                              const bf16 *w, const float *rstd, int n,
                              int heads, int D)
{
    long rows = (long)n * heads;
    if (rows <= 0)
        return;
    check_head_dim("head_rmsnorm_bwd", D, ldx, ldg);
    gl_cuda_state *st = gl_cuda_st(d);
    long G = 4L * st->prop.multiProcessorCount;
    long most = (rows + NORM_WARPS - 1) / NORM_WARPS;  /* a head per warp */
    if (G > most)
        G = most;
    float *partial = (float *)gl_cuda_scratch(d, &st->s_norm,
                                              (size_t)G * D * sizeof(float));
    head_rmsnorm_bwd_kernel<<<(unsigned)G, NORM_THREADS, 0, st->stream>>>(
        dx, ldg, partial, dy, x, ldx, w, rstd, rows, heads, D);
    GL_CUDA_LAUNCHED("head_rmsnorm_bwd");
    dim3 block(DW_COLS, DW_ROWS);
    rmsnorm_bwd_dw<<<(D + DW_COLS - 1) / DW_COLS, block, 0, st->stream>>>(
        dw, partial, (int)G, D);
    GL_CUDA_LAUNCHED("rmsnorm_bwd_dw");
}
