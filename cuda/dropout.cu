/*
 * dropout.cu: dropout with masks drawn from Philox (base/philox.h), and
 * Megatron's bias-dropout-add, in one kernel:
 *   out = residual + m (y + bias) / (1 - p)
 * with residual and bias optional (plain dropout: out = m y / (1 - p))
 * and m = 1 everywhere when the call has no dropout.  Element (i, j) of
 * the [n, w] piece is element e = (row0 + i) width + col0 + j of the whole
 * tensor, and its mask bit is word e % 4 of the Philox call for e / 4:
 * the same bits as the CPU's, whatever the split.  One thread per 8 (or
 * 1) consecutive columns: its elements span two or three Philox calls
 * (one per distinct e / 4).  fp32 math; a thread reads before it writes,
 * so out may alias residual or y.
 */
#include <config.h>

#include "base/philox.h"
#include "gl_cuda.h"
#include "layernorm.cuh"
#include "vec.cuh"

/* What a kernel needs of a gl_dropout, by value. */
typedef struct {
    uint64_t seed;
    uint32_t iteration, stream, threshold;
    float scale;
    long row0, col0, width;
    int on;                      /* 0: no dropout at all */
} mask_args;

/* Element i of v[V] (y's V elements of row `row` from column c) becomes
 * residual + m (y + bias) / (1 - p), each part as the call has it; fp32. */
template <int V>
__device__ inline void bda_chunk(float (&v)[V], const bf16 *residual,
                                 const bf16 *y, const bf16 *bias, int w,
                                 size_t row, int c, const mask_args &m)
{
    float b[V], r[V];
    load_bf16<V>(v, y + row * w + c);
    if (bias)
        load_bf16<V>(b, bias + c);
    if (residual)
        load_bf16<V>(r, residual + row * w + c);
    uint64_t e0 = (uint64_t)(m.row0 + (long)row) * (uint64_t)m.width +
                  (uint64_t)(m.col0 + c);
    uint64_t group = ~0ull;
    uint32_t words[4] = {0, 0, 0, 0};
#pragma unroll
    for (int i = 0; i < V; i++) {
        if (bias)
            v[i] += b[i];
        if (m.on) {
            uint64_t e = e0 + i;
            if (e >> 2 != group) {
                group = e >> 2;
                gl_dropout_words(words, m.seed, m.iteration, m.stream, group);
            }
            uint32_t k = (uint32_t)(e & 3);
            uint32_t word = k == 0 ? words[0] : k == 1 ? words[1]
                          : k == 2 ? words[2] : words[3];
            v[i] = word >= m.threshold ? v[i] * m.scale : 0.0f;
        }
        if (residual)
            v[i] += r[i];
    }
}

template <int V>
__global__ void dropout_kernel(bf16 *out, const bf16 *residual, const bf16 *y,
                               const bf16 *bias, int w, size_t total,
                               mask_args m)
{
    for_row_chunks<V>(w, total, [&](size_t row, int c) {
        float v[V];
        bda_chunk<V>(v, residual, y, bias, w, row, c, m);
        store_bf16<V>(out + row * w + c, v);
    });
}

/*
 * Bias-dropout-add and the LayerNorm of its result (ops.h: bda_layernorm),
 * one warp per row as layernorm.cu's forward: pass 1 makes the lane's
 * elements of out (bda_chunk), stores them and adds them as stored (bf16)
 * in layernorm_fwd_kernel's order; layernorm_row_finish then reads the
 * row back (from cache) as that kernel reads its input.  So out is
 * bias_dropout_add's and ln layernorm_fwd's of out, bit for bit, and y,
 * bias and residual are read once instead of out being written, then read
 * again by a second kernel.  A lane reads back only what it wrote.
 */
template <int V>
__global__ void bda_layernorm_kernel(bf16 *out, bf16 *ln, float *mean,
                                     float *rstd, const bf16 *residual,
                                     const bf16 *y, const bf16 *bias,
                                     const bf16 *w, const bf16 *b, int n,
                                     int h, float eps, int one_plus,
                                     mask_args m)
{
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= n)
        return;
    bf16 *outr = out + (size_t)row * h;
    float s = 0;
    for (int c = lane * V; c < h; c += 32 * V) {
        float v[V];
        bda_chunk<V>(v, residual, y, bias, h, (size_t)row, c, m);
        store_bf16<V>(outr + c, v);
        for (int i = 0; i < V; i++)
            s += __bfloat162float(__float2bfloat16_rn(v[i]));
    }
    layernorm_row_finish<V>(ln + (size_t)row * h, mean, rstd, row, outr, w, b,
                            h, eps, one_plus, lane, s);
}

/* The kernels' view of dp (NULL: no dropout), checked against [n, w]. */
static mask_args mask_of(const gl_dropout *dp, int n, int w, const char *what)
{
    mask_args m = {};
    if (dp) {
        gl_dropout_check(dp, n, w, what);
        m.seed = dp->seed;
        m.iteration = dp->iteration;
        m.stream = gl_dropout_stream(dp->layer, dp->site);
        m.threshold = gl_dropout_threshold(dp->p);
        m.scale = (float)(1 / (1 - (double)dp->p));
        m.row0 = dp->row0;
        m.col0 = dp->col0;
        m.width = dp->width;
        m.on = 1;
    }
    return m;
}

static void launch(cudaStream_t st, bf16 *out, const bf16 *residual,
                   const bf16 *y, const bf16 *bias, int n, int w,
                   const gl_dropout *dp, const char *what)
{
    if (n <= 0 || w <= 0)
        return;
    mask_args m = mask_of(dp, n, w, what);
    if (gl_vec8_ok(w, out, residual, y, bias)) {
        size_t total = (size_t)n * (w / 8);
        dropout_kernel<8><<<gl_cuda_grid(total, 256), 256, 0, st>>>(
            out, residual, y, bias, w, total, m);
    } else {
        size_t total = (size_t)n * w;
        dropout_kernel<1><<<gl_cuda_grid(total, 256), 256, 0, st>>>(
            out, residual, y, bias, w, total, m);
    }
    GL_CUDA_LAUNCHED(what);
}

void gl_cuda_dropout(cudaStream_t st, bf16 *y, const bf16 *x, int n, int w,
                     const gl_dropout *dp)
{
    launch(st, y, NULL, x, NULL, n, w, dp, "dropout");
}

void gl_cuda_bias_dropout_add(cudaStream_t st, bf16 *out,
                              const bf16 *residual, const bf16 *y,
                              const bf16 *bias, int n, int w,
                              const gl_dropout *dp)
{
    launch(st, out, residual, y, bias, n, w, dp, "bias_dropout_add");
}

void gl_cuda_bda_layernorm(cudaStream_t st, int fused, bf16 *out, bf16 *ln,
                           float *mean, float *rstd, const bf16 *residual,
                           const bf16 *y, const bf16 *bias,
                           const gl_dropout *dp, const bf16 *w, const bf16 *b,
                           int n, int h, float eps, int one_plus)
{
    if (n <= 0 || h <= 0)
        return;
    /* One kernel when asked and when it moves 8 elements at a time exactly
     * where layernorm_fwd would (its sums' order depends on that); else
     * the two kernels. */
    bool v8 = gl_vec8_ok(h, ln, out, w, b);
    if (!fused || v8 != gl_vec8_ok(h, out, residual, y, bias)) {
        gl_cuda_bias_dropout_add(st, out, residual, y, bias, n, h, dp);
        gl_cuda_layernorm_fwd(st, ln, mean, rstd, out, w, b, n, h, eps,
                              one_plus);
        return;
    }
    mask_args m = mask_of(dp, n, h, "bda_layernorm");
    int warps = 8;
    unsigned blocks = (unsigned)((n + warps - 1) / warps);
    if (v8)
        bda_layernorm_kernel<8><<<blocks, warps * 32, 0, st>>>(
            out, ln, mean, rstd, residual, y, bias, w, b, n, h, eps, one_plus,
            m);
    else
        bda_layernorm_kernel<1><<<blocks, warps * 32, 0, st>>>(
            out, ln, mean, rstd, residual, y, bias, w, b, n, h, eps, one_plus,
            m);
    GL_CUDA_LAUNCHED("bda_layernorm");
}
