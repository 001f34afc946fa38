/*
 * moe.cu: the mixture-of-experts ops of ops.h on CUDA (issue 13).
 *
 * Routing (gl_cuda_moe_route), four launches and one host wait:
 *   1. route_kernel, a warp per token: the selection keys, the top k by
 *      k warp arg-max rounds (larger key, then lower expert: the
 *      contract's tie rule), the weights in fp32 in slot order, and an
 *      integer atomic count of each expert's routed slots (integers: the
 *      order of the additions changes nothing);
 *   2. offsets_kernel, one block: from the routed counts and the
 *      capacity, each expert's rows (the counts alone fix them: kept =
 *      min(routed, c'), c' with padding), offsets by a sequential scan,
 *      tokens_per_expert and dropped, row_tok = -1 past the last row;
 *   3. assign_kernel, a block per expert: one pass over the tokens in
 *      increasing order with a block scan gives each routed slot its rank
 *      in the expert, so its row (no capacity, the position policy, and
 *      padding: the padding tokens are the first non-routed ones, so a
 *      token's row is rank + min(non-routed before it, need)); the probs
 *      policy with drops first selects the c'-th largest weight by an
 *      8-bit radix select over the expert's slots (kept: larger weights,
 *      and of those equal to the threshold the lowest tokens);
 *   4. the offsets downloaded to map->offsets_host, when given: the one
 *      host wait of a MoE layer.
 * Nothing depends on timing: the layout is fixed by the inputs.
 *
 * Selection keys: the softmax score functions select on the logits
 * (softmax is increasing, so the top k of p are those of the logits, and
 * ties are the same), sigmoid without bias likewise; sigmoid with bias on
 * sigmoid(l) + bias in fp32.
 *
 * Grouped products: cublasGemmGroupedBatchedEx over the experts with
 * rows, one group each, sizes from map->offsets_host (downloaded here
 * when NULL: a wait the model avoids by passing offsets_host to
 * moe_route); the device arrays of operand pointers are written by a
 * one-thread kernel from the device offsets (no upload, no staging
 * buffer to protect).  Where cuBLAS's grouped kernels lose, a loop of
 * one full-size product per expert (gemm.cu's gl_cuda_gemm_ragged: a
 * cuBLASLt plan per power-of-two bucket of the rows, so the host does not
 * ask cuBLAS's heuristic for every new row count, which made the loop
 * host-bound at 600 products a step: iterations of 75 to 107 ms on the
 * 8-expert shape below, 2026-11-24): measured on an H200
 * (t/ops-cuda.c, GL_OPS_CUDA_BENCH=1; W1 forward, h 2048, 8192 tokens),
 * E = 8 top-2 f = 5632 (2048 rows per expert) 331 TFLOP/s grouped and
 * 838 looped, E = 128 top-8 f = 768 (512 rows) 309 grouped and 287
 * looped; so the loop from LOOP_ROWS rows per expert on average.  The
 * weight gradient (fp32 output) always loops: CUDA 13.0's
 * grouped call refuses an fp32 output (CUBLAS_STATUS_NOT_SUPPORTED).
 * Both forms ask cuBLAS for fp32 split-K reductions.

 * Row gathers (permute, unpermute and their backwards) run a warp per
 * row with 16-byte loads where rows allow (vec.cuh), fp32 sums in slot
 * order.  Token sums (losses) go to a per-token scratch, summed by one
 * block in a fixed tree.
 */
#include <config.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gl_cuda.h"
#include "vec.cuh"
#include "warp.cuh"

#define WARPS 8                 /* warps per block of the per-token kernels */
#define ASSIGN_THREADS 512      /* block of assign_kernel */

/* ---- helpers ---- */

/* Exclusive scan of v over a block of THREADS threads; *total gets the
 * sum.  Integer: the order of the additions does not matter.  Uniform
 * calls only (barriers). */
template <int THREADS>
__device__ int block_excl_scan(int v, int *total)
{
    __shared__ int warp_sum_[THREADS / 32];
    __shared__ int all_;
    int lane = threadIdx.x % 32, w = threadIdx.x / 32;
    int x = v;
    for (int o = 1; o < 32; o *= 2) {
        int y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o)
            x += y;
    }
    if (lane == 31)
        warp_sum_[w] = x;
    __syncthreads();
    if (threadIdx.x == 0) {
        int s = 0;
        for (int i = 0; i < THREADS / 32; i++) {
            int t = warp_sum_[i];
            warp_sum_[i] = s;
            s += t;
        }
        all_ = s;
    }
    __syncthreads();
    int r = x - v + warp_sum_[w];
    *total = all_;
    __syncthreads();
    return r;
}

/* The better of two (key, expert) candidates: larger key, then lower
 * expert; e < 0 is no candidate. */
__device__ __forceinline__ bool better(float ka, int ea, float kb, int eb)
{
    if (eb < 0)
        return ea >= 0;
    if (ea < 0)
        return false;
    return ka > kb || (ka == kb && ea < eb);
}

/* One arg-max round of a warp's top-k selection: the best expert under
 * better() (largest key, then lowest index) among the E whose taken flag
 * is 0, or -1 when none is left.  Each lane scans experts lane, lane +
 * 32, ...; the butterfly then leaves the same winner in every lane. */
__device__ __forceinline__ int warp_best_untaken(const float *key,
                                                 const int *taken, int E)
{
    int lane = threadIdx.x % 32;
    float bk = 0;
    int be = -1;
    for (int e = lane; e < E; e += 32)
        if (!taken[e] && better(key[e], e, bk, be)) {
            bk = key[e];
            be = e;
        }
    for (int o = 16; o > 0; o /= 2) {
        float ok = __shfl_xor_sync(0xffffffffu, bk, o);
        int oe = __shfl_xor_sync(0xffffffffu, be, o);
        if (better(ok, oe, bk, be)) {
            bk = ok;
            be = oe;
        }
    }
    return be;
}

__device__ __forceinline__ float sigmoidf_(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

/* ---- 1. routing per token ---- */

/* Shared memory per warp: keys [E] and taken flags [E]. */
__global__ void __launch_bounds__(WARPS * 32)
route_kernel(int32_t *expert, float *weight, int *routed, const float *logits,
             const float *bias, int n, int E, int k, int score, int pre,
             float scale)
{
    extern __shared__ float sh[];
    int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    float *key = sh + (size_t)w * 2 * E;
    int *taken = (int *)(key + E);
    for (int t = blockIdx.x * WARPS + w; t < n; t += gridDim.x * WARPS) {
        const float *l = logits + (size_t)t * E;
        for (int e = lane; e < E; e += 32) {
            float v = l[e];
            if (score == GL_MOE_SIGMOID && bias)
                v = sigmoidf_(v) + bias[e];
            key[e] = v;
            taken[e] = 0;
        }
        __syncwarp();
        /* k arg-max rounds */
        for (int j = 0; j < k; j++) {
            int be = warp_best_untaken(key, taken, E);
            if (lane == 0) {
                taken[be] = 1;
                expert[(size_t)t * k + j] = be;
                atomicAdd(&routed[be], 1);
            }
            __syncwarp();
        }
        /* pre-softmax: the max and the sum over all E (butterfly order) */
        float mx = -INFINITY, sum = 0;
        if (score == GL_MOE_SOFTMAX && pre) {
            for (int e = lane; e < E; e += 32)
                mx = fmaxf(mx, l[e]);
            mx = warp_max(mx);
            for (int e = lane; e < E; e += 32)
                sum += expf(l[e] - mx);
            sum = warp_sum(sum);
        }
        if (lane == 0) {
            const int32_t *sel = expert + (size_t)t * k;
            float *wt = weight + (size_t)t * k;
            if (score == GL_MOE_SOFTMAX && pre) {
                for (int j = 0; j < k; j++)
                    wt[j] = expf(l[sel[j]] - mx) / sum * scale;
            } else if (score == GL_MOE_SOFTMAX) {
                float m0 = l[sel[0]], s = 0;
                for (int j = 0; j < k; j++)
                    s += expf(l[sel[j]] - m0);
                for (int j = 0; j < k; j++)
                    wt[j] = expf(l[sel[j]] - m0) / s * scale;
            } else {
                float s = 0;
                for (int j = 0; j < k; j++)
                    s += sigmoidf_(l[sel[j]]);
                for (int j = 0; j < k; j++) {
                    float sj = sigmoidf_(l[sel[j]]);
                    wt[j] = (k > 1 ? sj / (s + 1e-20f) : sj) * scale;
                }
            }
        }
        __syncwarp();
    }
}

/* ---- 2. per-expert rows and offsets ---- */

/* The rows expert e dispatches, from its routed slots m (see the top). */
__device__ __forceinline__ int expert_rows(int m, int cap, int pad)
{
    if (cap <= 0)
        return m;
    return pad ? cap : (m < cap ? m : cap);
}

__global__ void offsets_kernel(int32_t *offsets, int32_t *row_tok,
                               float *tokens_per_expert, float *dropped,
                               const int *routed, int E, int cap, int pad,
                               int rows_max)
{
    __shared__ int total;
    if (threadIdx.x == 0) {
        int next = 0;
        long nd = 0;
        for (int e = 0; e < E; e++) {
            int m = routed[e], r = expert_rows(m, cap, pad);
            offsets[e] = next;
            next += r;
            if (cap > 0 && m > cap)
                nd += m - cap;
            if (tokens_per_expert)
                tokens_per_expert[e] += (float)r;
        }
        offsets[E] = next;
        if (dropped)
            dropped[0] += (float)nd;
        total = next;
    }
    __syncthreads();
    for (int r = total + threadIdx.x; r < rows_max; r += blockDim.x)
        row_tok[r] = -1;
}

/* ---- 3. rows within an expert ---- */

/* A float as an unsigned key of the same order (-0 as +0). */
__device__ __forceinline__ unsigned order_key(float f)
{
    if (f == 0)
        f = 0;
    unsigned u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : u | 0x80000000u;
}

/* The slot of token t routed to e, or -1. */
__device__ __forceinline__ int slot_of(const int32_t *expert, int t, int k,
                                       int e)
{
    for (int j = 0; j < k; j++)
        if (expert[(size_t)t * k + j] == e)
            return j;
    return -1;
}

/*
 * Block e: the rows of expert e.  cap = c' (0: none).  With the probs
 * policy and drops, pass 0 finds the threshold key T and the number of
 * slots of key T to keep (the lowest tokens), by 8-bit digits from the
 * top, counting over every routed slot of e (a pass over the tokens per
 * digit).
 */
__global__ void __launch_bounds__(ASSIGN_THREADS)
assign_kernel(int32_t *rows, int32_t *row_tok, float *weight,
              const int32_t *expert, const int32_t *offsets,
              const int *routed, int n, int k, int cap, int drop, int pad)
{
    __shared__ int hist[256];
    __shared__ unsigned s_prefix;
    __shared__ int s_remain;
    int e = blockIdx.x, m = routed[e], base = offsets[e];
    int probs = cap > 0 && m > cap && drop == GL_MOE_DROP_PROBS;
    unsigned thr = 0;
    int keep_eq = 0;
    if (probs) {
        unsigned prefix = 0, mask = 0;
        int remain = cap;
        for (int shift = 24; shift >= 0; shift -= 8) {
            for (int i = threadIdx.x; i < 256; i += ASSIGN_THREADS)
                hist[i] = 0;
            __syncthreads();
            for (int t = threadIdx.x; t < n; t += ASSIGN_THREADS) {
                int j = slot_of(expert, t, k, e);
                if (j < 0)
                    continue;
                unsigned key = order_key(weight[(size_t)t * k + j]);
                if ((key & mask) == prefix)
                    atomicAdd(&hist[(key >> shift) & 255], 1);
            }
            __syncthreads();
            if (threadIdx.x == 0) {
                int above = 0, d = 255;
                for (; d > 0; d--) {
                    if (above + hist[d] >= remain)
                        break;
                    above += hist[d];
                }
                s_remain = remain - above;
                s_prefix = prefix | ((unsigned)d << shift);
            }
            __syncthreads();
            remain = s_remain;
            prefix = s_prefix;
            mask |= 255u << shift;
            __syncthreads();
        }
        thr = prefix;
        keep_eq = remain;
    }
    int need = cap > 0 && pad && m < cap ? cap - m : 0;
    /* one pass in token order: routed rank i, rows of kept slots, -1 and
     * weight 0 for dropped ones, padding */
    int seen = 0, seen_eq = 0, kept_before = 0;
    for (int t0 = 0; t0 < n; t0 += ASSIGN_THREADS) {
        int t = t0 + threadIdx.x;
        int j = t < n ? slot_of(expert, t, k, e) : -1;
        int tot, tot_eq, tot_kept;
        int i = seen + block_excl_scan<ASSIGN_THREADS>(j >= 0, &tot);
        int keep = j >= 0, eq = 0;
        unsigned key = 0;
        if (probs && j >= 0) {
            key = order_key(weight[(size_t)t * k + j]);
            eq = key == thr;
        }
        int ieq = seen_eq + block_excl_scan<ASSIGN_THREADS>(eq, &tot_eq);
        if (probs && j >= 0)
            keep = key > thr || (eq && ieq < keep_eq);
        else if (cap > 0 && j >= 0)
            keep = i < cap;
        int ik = kept_before + block_excl_scan<ASSIGN_THREADS>(keep, &tot_kept);
        if (t < n && need > 0) {
            /* padding, no drops: the first `need` tokens not routed to e
             * are padding, so t's row is its rank plus the padding
             * tokens before it */
            int fb = t - i, p = fb < need ? fb : need;
            if (j >= 0) {
                rows[(size_t)t * k + j] = base + i + p;
                row_tok[base + i + p] = t;
            } else if (fb < need) {
                row_tok[base + i + fb] = t;
            }
        } else if (t < n && j >= 0) {
            if (keep) {
                rows[(size_t)t * k + j] = base + ik;
                row_tok[base + ik] = t;
            } else {
                rows[(size_t)t * k + j] = -1;
                weight[(size_t)t * k + j] = 0;
            }
        }
        seen += tot;
        seen_eq += tot_eq;
        kept_before += tot_kept;
    }
}

/* ---- scratch ---- */

/* The MoE scratch: `ints` 4-byte words. */
static int *moe_scratch(gl_dev *d, size_t ints)
{
    return (int *)gl_cuda_scratch(d, &gl_cuda_st(d)->s_moe,
                                  (ints ? ints : 1) * sizeof(int));
}

static void map_check(const gl_moe_map *map, const gl_moe_route_cfg *cfg,
                      const char *what)
{
    gl_moe_route_check(cfg, what);
    if (map->k != cfg->k || map->E != cfg->E || map->n < 0)
        gl_die("%s: the map routes %d tokens to %d of %d experts, the "
               "options %d of %d", what, map->n, map->k, map->E, cfg->k,
               cfg->E);
}

void gl_cuda_moe_route(gl_dev *d, gl_moe_map *map, const float *logits,
                       const float *bias, const gl_moe_route_cfg *cfg,
                       float *tokens_per_expert, float *dropped)
{
    map_check(map, cfg, "moe_route");
    int n = map->n, E = cfg->E, k = cfg->k;
    if (bias && cfg->score != GL_MOE_SIGMOID)
        gl_die("moe_route: an expert bias needs the sigmoid score function "
               "(Megatron's --moe-router-enable-expert-bias supports only "
               "--moe-router-score-function sigmoid)");
    if (map->rows_max < gl_moe_rows_max(n, cfg))
        gl_die("moe_route: the permuted buffers hold %d rows, fewer than the "
               "%d this routing can dispatch (gl_moe_rows_max)",
               map->rows_max, gl_moe_rows_max(n, cfg));
    gl_cuda_state *st = gl_cuda_st(d);
    cudaStream_t s = st->stream;
    int *routed = moe_scratch(d, (size_t)E);
    GL_CUDA_CHECK(cudaMemsetAsync(routed, 0, (size_t)E * sizeof(int), s));
    float scale = cfg->scaling != 0 ? cfg->scaling : 1.0f;
    size_t shmem = (size_t)WARPS * 2 * E * sizeof(float);
    if (shmem > 48 * 1024)
        GL_CUDA_CHECK(cudaFuncSetAttribute(
            route_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
            (int)shmem));
    if (n > 0) {
        unsigned blocks = (unsigned)((n + WARPS - 1) / WARPS);
        if (blocks > 65535)
            blocks = 65535;
        route_kernel<<<blocks, WARPS * 32, shmem, s>>>(
            map->expert, map->weight, routed, logits, bias, n, E, k,
            (int)cfg->score, cfg->pre_softmax, scale);
        GL_CUDA_LAUNCHED("moe route_kernel");
    }
    int cap = cfg->capacity > 0 ? (cfg->capacity < n ? cfg->capacity : n) : 0;
    int pad = cfg->capacity > 0 && cfg->pad;
    /* capacity 0 with n = 0: no rows; cap stays 0 (no capacity) */
    offsets_kernel<<<1, 1024, 0, s>>>(map->offsets, map->row_tok,
                                      tokens_per_expert, dropped, routed, E,
                                      cfg->capacity > 0 ? cap : 0, pad,
                                      map->rows_max);
    GL_CUDA_LAUNCHED("moe offsets_kernel");
    if (n > 0) {
        assign_kernel<<<E, ASSIGN_THREADS, 0, s>>>(
            map->rows, map->row_tok, map->weight, map->expert, map->offsets,
            routed, n, k, cfg->capacity > 0 ? cap : 0, (int)cfg->drop, pad);
        GL_CUDA_LAUNCHED("moe assign_kernel");
    }
    if (map->offsets_host) {
        GL_CUDA_CHECK(cudaMemcpyAsync(map->offsets_host, map->offsets,
                                      (size_t)(E + 1) * sizeof(int32_t),
                                      cudaMemcpyDeviceToHost, s));
        GL_CUDA_CHECK(cudaStreamSynchronize(s));
    }
}

/* ---- router backward ---- */

/* A warp per token; every lane computes the slot sums (slot order) and
 * lanes write the entries. */
__global__ void __launch_bounds__(WARPS * 32)
route_bwd_kernel(float *dlogits, const float *dweight, const float *logits,
                 const int32_t *expert, const int32_t *rows, int n, int E,
                 int k, int score, int pre, float scale)
{
    int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int t = blockIdx.x * WARPS + w; t < n; t += gridDim.x * WARPS) {
        const float *l = logits + (size_t)t * E;
        float *dl = dlogits + (size_t)t * E;
        const int32_t *sel = expert + (size_t)t * k;
        const int32_t *rw = rows + (size_t)t * k;
        const float *dw = dweight + (size_t)t * k;
        if (score == GL_MOE_SOFTMAX && pre) {
            float mx = -INFINITY, sum = 0;
            for (int e = lane; e < E; e += 32)
                mx = fmaxf(mx, l[e]);
            mx = warp_max(mx);
            for (int e = lane; e < E; e += 32)
                sum += expf(l[e] - mx);
            sum = warp_sum(sum);
            float dot = 0;
            for (int j = 0; j < k; j++)
                if (rw[j] >= 0)
                    dot += expf(l[sel[j]] - mx) / sum * (scale * dw[j]);
            for (int e = lane; e < E; e += 32) {
                float G = 0;
                for (int j = 0; j < k; j++)
                    if (sel[j] == e && rw[j] >= 0)
                        G = scale * dw[j];
                dl[e] = expf(l[e] - mx) / sum * (G - dot);
            }
            continue;
        }
        for (int e = lane; e < E; e += 32)
            dl[e] = 0;
        __syncwarp();
        if (score == GL_MOE_SOFTMAX) {
            float m0 = l[sel[0]], s = 0, dot = 0;
            for (int j = 0; j < k; j++)
                s += expf(l[sel[j]] - m0);
            for (int j = 0; j < k; j++)
                if (rw[j] >= 0)
                    dot += expf(l[sel[j]] - m0) / s * (scale * dw[j]);
            for (int j = lane; j < k; j += 32) {
                float wj = expf(l[sel[j]] - m0) / s;
                float g = rw[j] >= 0 ? scale * dw[j] : 0;
                dl[sel[j]] = wj * (g - dot);
            }
        } else {
            float S = 0, gs = 0;
            for (int j = 0; j < k; j++) {
                float sj = sigmoidf_(l[sel[j]]);
                S += sj;
                if (rw[j] >= 0)
                    gs += scale * dw[j] * sj;
            }
            S += 1e-20f;
            for (int j = lane; j < k; j += 32) {
                float sj = sigmoidf_(l[sel[j]]);
                float g = rw[j] >= 0 ? scale * dw[j] : 0;
                float ds = k > 1 ? g / S - gs / (S * S) : g;
                dl[sel[j]] = ds * sj * (1 - sj);
            }
        }
        __syncwarp();
    }
}

static unsigned warp_blocks(long items)
{
    long b = (items + WARPS - 1) / WARPS;
    if (b > 65535)
        b = 65535;
    return b > 0 ? (unsigned)b : 1;
}

void gl_cuda_moe_route_bwd(gl_dev *d, float *dlogits, const float *dweight,
                           const float *logits, const gl_moe_map *map,
                           const gl_moe_route_cfg *cfg)
{
    map_check(map, cfg, "moe_route_bwd");
    if (map->n <= 0)
        return;
    float scale = cfg->scaling != 0 ? cfg->scaling : 1.0f;
    route_bwd_kernel<<<warp_blocks(map->n), WARPS * 32, 0,
                       gl_cuda_st(d)->stream>>>(
        dlogits, dweight, logits, map->expert, map->rows, map->n, cfg->E,
        cfg->k, (int)cfg->score, cfg->pre_softmax, scale);
    GL_CUDA_LAUNCHED("moe route_bwd_kernel");
}

/* ---- row gathers ---- */

/* xp[r] = x[row_tok[r]] for r < offsets[E], else 0: a warp per row. */
template <int V>
__global__ void __launch_bounds__(WARPS * 32)
permute_kernel(bf16 *xp, const bf16 *x, const int32_t *row_tok,
               const int32_t *total, int h, int rows_max)
{
    int w = threadIdx.x / 32, lane = threadIdx.x % 32, tot = *total;
    for (long r = blockIdx.x * (long)WARPS + w; r < rows_max;
         r += (long)gridDim.x * WARPS) {
        bf16 *dst = xp + r * h;
        if (r < tot) {
            const bf16 *src = x + (long)row_tok[r] * h;
            for (int c = lane * V; c < h; c += 32 * V) {
                bf16_raw<V> v = load_raw<V>(src + c);
                if constexpr (V == 8)
                    *(uint4 *)(dst + c) = v.u;
                else
                    for (int i = 0; i < V; i++)
                        dst[c + i] = v.v[i];
            }
        } else {
            float z[V];
            for (int i = 0; i < V; i++)
                z[i] = 0;
            for (int c = lane * V; c < h; c += 32 * V)
                store_bf16<V>(dst + c, z);
        }
    }
}

/* out[t] (+)= sum_j wt_j src[rows[t, j]] over kept slots, in slot order,
 * fp32; weight NULL: wt = 1 (permute's backward). */
template <int V>
__global__ void __launch_bounds__(WARPS * 32)
gather_sum_kernel(bf16 *out, const bf16 *src, const float *weight,
                  const int32_t *rows, int n, int k, int h, int accumulate)
{
    int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (long t = blockIdx.x * (long)WARPS + w; t < n;
         t += (long)gridDim.x * WARPS) {
        bf16 *o = out + t * h;
        const int32_t *rw = rows + t * k;
        for (int c = lane * V; c < h; c += 32 * V) {
            float acc[V];
            if (accumulate)
                load_bf16<V>(acc, o + c);
            else
                for (int i = 0; i < V; i++)
                    acc[i] = 0;
            for (int j = 0; j < k; j++) {
                int r = rw[j];
                if (r < 0)
                    continue;
                float v[V];
                load_bf16<V>(v, src + (long)r * h + c);
                if (weight) {
                    float wj = weight[t * k + j];
                    for (int i = 0; i < V; i++)
                        acc[i] += wj * v[i];
                } else {
                    for (int i = 0; i < V; i++)
                        acc[i] += v[i];
                }
            }
            store_bf16<V>(o + c, acc);
        }
    }
}

void gl_cuda_moe_permute(gl_dev *d, void *xp, const void *x, int h,
                         const gl_moe_map *map)
{
    if (map->rows_max <= 0 || h <= 0)
        return;
    cudaStream_t s = gl_cuda_st(d)->stream;
    unsigned b = warp_blocks(map->rows_max);
    if (gl_vec8_ok(h, xp, x))
        permute_kernel<8><<<b, WARPS * 32, 0, s>>>(
            (bf16 *)xp, (const bf16 *)x, map->row_tok, map->offsets + map->E,
            h, map->rows_max);
    else
        permute_kernel<1><<<b, WARPS * 32, 0, s>>>(
            (bf16 *)xp, (const bf16 *)x, map->row_tok, map->offsets + map->E,
            h, map->rows_max);
    GL_CUDA_LAUNCHED("moe permute_kernel");
}

static void gather_sum(gl_dev *d, void *out, const void *src,
                       const float *weight, int h, const gl_moe_map *map,
                       int accumulate)
{
    if (map->n <= 0 || h <= 0)
        return;
    cudaStream_t s = gl_cuda_st(d)->stream;
    unsigned b = warp_blocks(map->n);
    if (gl_vec8_ok(h, out, src))
        gather_sum_kernel<8><<<b, WARPS * 32, 0, s>>>(
            (bf16 *)out, (const bf16 *)src, weight, map->rows, map->n,
            map->k, h, accumulate);
    else
        gather_sum_kernel<1><<<b, WARPS * 32, 0, s>>>(
            (bf16 *)out, (const bf16 *)src, weight, map->rows, map->n,
            map->k, h, accumulate);
    GL_CUDA_LAUNCHED("moe gather_sum_kernel");
}

void gl_cuda_moe_permute_bwd(gl_dev *d, void *dx, const void *dxp, int h,
                             const gl_moe_map *map, int accumulate_dx)
{
    gather_sum(d, dx, dxp, NULL, h, map, accumulate_dx);
}

void gl_cuda_moe_unpermute(gl_dev *d, void *out, const void *yp, int h,
                           const gl_moe_map *map)
{
    gather_sum(d, out, yp, map->weight, h, map, 0);
}

/* dyp[r] = (weight of r's slot) dout[row_tok[r]] for r < offsets[E]
 * (padding rows: 0), rows after: 0.  A warp per row. */
template <int V>
__global__ void __launch_bounds__(WARPS * 32)
unpermute_dyp_kernel(bf16 *dyp, const bf16 *dout, const float *weight,
                     const int32_t *rows, const int32_t *row_tok,
                     const int32_t *total, int k, int h, int rows_max)
{
    int w = threadIdx.x / 32, lane = threadIdx.x % 32, tot = *total;
    for (long r = blockIdx.x * (long)WARPS + w; r < rows_max;
         r += (long)gridDim.x * WARPS) {
        float wr = 0;
        long t = 0;
        if (r < tot) {
            t = row_tok[r];
            for (int j = 0; j < k; j++)
                if (rows[t * k + j] == r)
                    wr = weight[t * k + j];
        }
        bf16 *o = dyp + r * h;
        for (int c = lane * V; c < h; c += 32 * V) {
            float v[V];
            if (wr != 0) {
                load_bf16<V>(v, dout + t * h + c);
                for (int i = 0; i < V; i++)
                    v[i] *= wr;
            } else {
                for (int i = 0; i < V; i++)
                    v[i] = 0;
            }
            store_bf16<V>(o + c, v);
        }
    }
}

/* dweight[t, j] = <dout[t], yp[rows[t, j]]>: a warp per slot, each lane
 * its columns in order, then the butterfly. */
template <int V>
__global__ void __launch_bounds__(WARPS * 32)
unpermute_dw_kernel(float *dweight, const bf16 *dout, const bf16 *yp,
                    const int32_t *rows, long slots, int k, int h)
{
    int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (long s = blockIdx.x * (long)WARPS + w; s < slots;
         s += (long)gridDim.x * WARPS) {
        int r = rows[s];
        float acc = 0;
        if (r >= 0) {
            const bf16 *a = dout + (s / k) * h, *b = yp + (long)r * h;
            for (int c = lane * V; c < h; c += 32 * V) {
                float x[V], y[V];
                load_bf16<V>(x, a + c);
                load_bf16<V>(y, b + c);
                for (int i = 0; i < V; i++)
                    acc += x[i] * y[i];
            }
            acc = warp_sum(acc);
        }
        if (lane == 0)
            dweight[s] = acc;
    }
}

void gl_cuda_moe_unpermute_bwd(gl_dev *d, void *dyp, float *dweight,
                               const void *dout, const void *yp, int h,
                               const gl_moe_map *map)
{
    cudaStream_t s = gl_cuda_st(d)->stream;
    if (map->rows_max > 0 && h > 0) {
        unsigned b = warp_blocks(map->rows_max);
        if (gl_vec8_ok(h, dyp, dout))
            unpermute_dyp_kernel<8><<<b, WARPS * 32, 0, s>>>(
                (bf16 *)dyp, (const bf16 *)dout, map->weight, map->rows,
                map->row_tok, map->offsets + map->E, map->k, h,
                map->rows_max);
        else
            unpermute_dyp_kernel<1><<<b, WARPS * 32, 0, s>>>(
                (bf16 *)dyp, (const bf16 *)dout, map->weight, map->rows,
                map->row_tok, map->offsets + map->E, map->k, h,
                map->rows_max);
        GL_CUDA_LAUNCHED("moe unpermute_dyp_kernel");
    }
    long slots = (long)map->n * map->k;
    if (slots > 0) {
        unsigned b = warp_blocks(slots);
        if (gl_vec8_ok(h, dout, yp))
            unpermute_dw_kernel<8><<<b, WARPS * 32, 0, s>>>(
                dweight, (const bf16 *)dout, (const bf16 *)yp, map->rows,
                slots, map->k, h);
        else
            unpermute_dw_kernel<1><<<b, WARPS * 32, 0, s>>>(
                dweight, (const bf16 *)dout, (const bf16 *)yp, map->rows,
                slots, map->k, h);
        GL_CUDA_LAUNCHED("moe unpermute_dw_kernel");
    }
}

/* ---- grouped products ---- */

/* The operand pointers of the experts with rows, in expert order: three
 * device arrays of E pointers each (A, B, C as cuBLAS names them). */
enum { GP_FWD, GP_DGRAD, GP_WGRAD };

__global__ void group_ptrs_kernel(const void **pa, const void **pb, void **pc,
                                  const int32_t *offsets, int E, int form,
                                  const bf16 *X, const bf16 *W, void *Y,
                                  int in, int out, int ldY)
{
    int g = 0;
    for (int e = 0; e < E; e++) {
        long r0 = offsets[e];
        if (offsets[e + 1] == r0)
            continue;
        if (form == GP_FWD) {            /* Y = X W^T */
            pa[g] = W + (long)e * out * in;
            pb[g] = X + r0 * in;
            pc[g] = (bf16 *)Y + r0 * ldY;
        } else if (form == GP_DGRAD) {   /* X here is dY, Y is dX */
            pa[g] = W + (long)e * out * in;
            pb[g] = X + r0 * ldY;
            pc[g] = (bf16 *)Y + r0 * in;
        } else {                         /* X is X, W is dY, Y is dW f32 */
            pa[g] = X + r0 * in;
            pb[g] = W + r0 * ldY;
            pc[g] = (float *)Y + (long)e * out * in;
        }
        g++;
    }
}

static cublasHandle_t moe_blas(gl_dev *d)
{
    gl_cuda_state *st = gl_cuda_st(d);
    if (!st->blas) {
        GL_CUBLAS_CHECK(cublasCreate(&st->blas));
        GL_CUBLAS_CHECK(cublasSetStream(st->blas, st->stream));
        /* split-K partial sums meet in fp32, as gemm.cu asks of cuBLASLt */
        GL_CUBLAS_CHECK(cublasSetMathMode(
            st->blas, (cublasMath_t)(CUBLAS_DEFAULT_MATH |
                                     CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
    }
    return st->blas;
}

/* The map's offsets on the host: offsets_host, or a download (a wait). */
static const int32_t *host_offsets(gl_dev *d, const gl_moe_map *map,
                                   int32_t *buf)
{
    if (map->offsets_host)
        return map->offsets_host;
    GL_CUDA_CHECK(cudaMemcpyAsync(buf, map->offsets,
                                  (size_t)(map->E + 1) * sizeof(int32_t),
                                  cudaMemcpyDeviceToHost,
                                  gl_cuda_st(d)->stream));
    GL_CUDA_CHECK(cudaStreamSynchronize(gl_cuda_st(d)->stream));
    return buf;
}

/* The grouped products as one product per expert with rows, in ops.h's
 * row-major terms (the same products as grouped()'s column-major forms),
 * through gl_cuda_gemm_ragged: the rows change with the routing, and a
 * plan per bucket of them keeps cuBLASLt's heuristic off the host's path
 * (gemm.cu).  The experts go to the lanes in turn (lanes.cu; a product's
 * algorithm depends on its shape's bucket only, not on its lane, so the
 * bits are the same with any number of lanes).  Host offsets from off.
 *   fwd:   Y_e [m_e, out]   = X_e [m_e, in] W_e^T       (W_e [out, in])
 *   dgrad: dX_e [m_e, in]   = dY_e [m_e, out] W_e  (+ dX_e when beta 1)
 *   wgrad: dW_e [out, in]  += dY_e^T X_e               (fp32, k = m_e) */
static void loop_gemm(gl_dev *d, int form, void *C, const void *A,
                      const void *B, int in, int out, int ldY, float beta,
                      const int32_t *off, int E, int ng)
{
    int nl = gl_cuda_lanes_fork(d, ng), lane = 0;
    for (int e = 0; e < E; e++) {
        long r0 = off[e];
        int me = off[e + 1] - off[e];
        if (me <= 0)
            continue;
        gl_cuda_lane_use(d, lane);
        lane = (lane + 1) % nl;
        const bf16 *W = (const bf16 *)A, *R = (const bf16 *)B;
        if (form == GP_FWD)
            gl_cuda_gemm_ragged(d, 0, 0, 1, me, out, in, 1.0f, R + r0 * in,
                                in, W + (long)e * out * in, in, beta,
                                (bf16 *)C + r0 * ldY, GL_DT_BF16, ldY);
        else if (form == GP_DGRAD)
            gl_cuda_gemm_ragged(d, 0, 0, 0, me, in, out, 1.0f, R + r0 * ldY,
                                ldY, W + (long)e * out * in, in, beta,
                                (bf16 *)C + r0 * in, GL_DT_BF16, in);
        else    /* A is dY, B is X */
            gl_cuda_gemm_ragged(d, 1, 1, 0, out, in, me, 1.0f, W + r0 * ldY,
                                ldY, R + r0 * in, in, beta,
                                (float *)C + (long)e * out * in, GL_DT_F32,
                                in);
    }
    gl_cuda_lanes_join(d, nl);
}

/* Whether to loop over the experts rather than make one grouped call:
 * GRIDLM_MOE_GEMM=loop or grouped, else by the mean rows per expert (at
 * LOOP_ROWS and more, one full-size product per expert runs faster than
 * cuBLAS's grouped kernels; see t/ops-cuda.c's GL_OPS_CUDA_BENCH). */
#define LOOP_ROWS 1024

static int loop_wanted(int total, int ng)
{
    const char *e = getenv("GRIDLM_MOE_GEMM");
    if (e && !strcmp(e, "loop"))
        return 1;
    if (e && !strcmp(e, "grouped"))
        return 0;
    if (e && *e)
        gl_die("GRIDLM_MOE_GEMM=%s: use loop (a product per expert) or "
               "grouped (cuBLAS's grouped call), or leave it unset", e);
    return total >= (long)LOOP_ROWS * ng;
}

/* A written weight gradient's zeros: the [n] slices of dW of the experts
 * without rows, a memset per run of them. */
static void zero_idle(cudaStream_t stream, float *dW, size_t n, const int32_t *off, int E)
{
    int e = 0;
    while (e < E) {
        int e1 = e;
        while (e1 < E && off[e1 + 1] == off[e1])
            e1++;
        if (e1 > e)
            GL_CUDA_CHECK(cudaMemsetAsync(dW + e * n, 0, (e1 - e) * n * sizeof(float), stream));
        e = e1 + 1;
    }
}

/* One grouped call of the given form; see the top of the file and
 * gemm.cu for the row-major to column-major mapping.  Column-major per
 * expert with m_e rows:
 *   fwd:   Y^T [out, m_e]  = W_e (T of stored [in, out]) X_e^T [in, m_e]
 *   dgrad: dX^T [in, m_e]  = W_e^T (stored [in, out], N) dY_e^T [out, m_e]
 *   wgrad: dW_e^T [in, out] += X_e^T [in, m_e] (dY_e^T)^T [m_e, out] */
static void grouped(gl_dev *d, int form, void *C, const void *A,
                    const void *B, int in, int out, int ldY, float beta0,
                    const gl_moe_map *map, const char *what)
{
    gl_cuda_state *st = gl_cuda_st(d);
    int E = map->E;
    int32_t *hbuf = (int32_t *)gl_malloc((size_t)(E + 1) * sizeof *hbuf);
    const int32_t *off = host_offsets(d, map, hbuf);
    int ng = 0;
    cublasOperation_t *ta = (cublasOperation_t *)gl_malloc(E * sizeof *ta);
    cublasOperation_t *tb = (cublasOperation_t *)gl_malloc(E * sizeof *tb);
    int *iv = (int *)gl_malloc((size_t)7 * E * sizeof(int));
    int *mm = iv, *nn = iv + E, *kk = iv + 2 * E, *lda = iv + 3 * E;
    int *ldb = iv + 4 * E, *ldc = iv + 5 * E, *gs = iv + 6 * E;
    float *alpha = (float *)gl_malloc(2 * E * sizeof(float)), *beta = alpha + E;
    for (int e = 0; e < E; e++) {
        int me = off[e + 1] - off[e];
        if (me <= 0)
            continue;
        gs[ng] = 1;
        alpha[ng] = 1;
        beta[ng] = beta0;
        if (form == GP_FWD) {
            ta[ng] = CUBLAS_OP_T; tb[ng] = CUBLAS_OP_N;
            mm[ng] = out; nn[ng] = me; kk[ng] = in;
            lda[ng] = in; ldb[ng] = in; ldc[ng] = ldY;
        } else if (form == GP_DGRAD) {
            ta[ng] = CUBLAS_OP_N; tb[ng] = CUBLAS_OP_N;
            mm[ng] = in; nn[ng] = me; kk[ng] = out;
            lda[ng] = in; ldb[ng] = ldY; ldc[ng] = in;
        } else {
            ta[ng] = CUBLAS_OP_N; tb[ng] = CUBLAS_OP_T;
            mm[ng] = in; nn[ng] = out; kk[ng] = me;
            lda[ng] = in; ldb[ng] = ldY; ldc[ng] = in;
        }
        ng++;
    }
    int total = off[E];
    int loop = ng > 0 && ((st->moe_loop & (1 << form)) || loop_wanted(total, ng));
    if (loop)
        loop_gemm(d, form, C, A, B, in, out, ldY, beta0, off, E, ng);
    if (ng > 0 && !loop) {
        void **ptrs = (void **)gl_cuda_scratch(d, &st->s_moe_ptr,
                                               (size_t)3 * E * sizeof(void *));
        group_ptrs_kernel<<<1, 1, 0, st->stream>>>(
            (const void **)ptrs, (const void **)(ptrs + E), ptrs + 2 * E,
            map->offsets, E, form, (const bf16 *)B, (const bf16 *)A, C, in,
            out, ldY);
        GL_CUDA_LAUNCHED("moe group_ptrs_kernel");
        cudaDataType_t ct = form == GP_WGRAD ? CUDA_R_32F : CUDA_R_16BF;
        cublasStatus_t s = cublasGemmGroupedBatchedEx(
                moe_blas(d), ta, tb, mm, nn, kk, alpha,
                (const void *const *)ptrs, CUDA_R_16BF, lda,
                (const void *const *)(ptrs + E), CUDA_R_16BF, ldb, beta,
                ptrs + 2 * E, ct, ldc, ng, gs, CUBLAS_COMPUTE_32F);
        if (s == CUBLAS_STATUS_NOT_SUPPORTED) {
            /* this cuBLAS has no grouped kernel for these types (CUDA
             * 13.0's has none for an fp32 output: the weight gradient),
             * which is then not asked again; nothing was written */
            st->moe_loop |= 1 << form;
            loop_gemm(d, form, C, A, B, in, out, ldY, beta0, off, E, ng);
            s = CUBLAS_STATUS_SUCCESS;
        }
        if (s != CUBLAS_STATUS_SUCCESS)
            gl_die("%s: cublasGemmGroupedBatchedEx over %d experts (in %d, "
                   "out %d, %d rows) failed: status %d (%s)", what, ng, in,
                   out, total, (int)s, cublasGetStatusString(s));
    }
    if (form == GP_WGRAD && beta0 == 0)
        zero_idle(st->stream, (float *)C, (size_t)out * in, off, E);
    /* rows past the last: Y's out columns, dX unless accumulated */
    if (form != GP_WGRAD && beta0 == 0 && map->rows_max > total) {
        int w = form == GP_FWD ? out : in, ld = form == GP_FWD ? ldY : in;
        GL_CUDA_CHECK(cudaMemset2DAsync(
            (bf16 *)C + (size_t)total * ld, (size_t)ld * sizeof(bf16), 0,
            (size_t)w * sizeof(bf16), (size_t)(map->rows_max - total),
            st->stream));
    }
    free(hbuf);
    free(ta);
    free(tb);
    free(iv);
    free(alpha);
}

/* A is W for fwd/dgrad (passed as the kernel's W), B the row operand;
 * for wgrad A is dY, B is X. */
static void ld_check(int ldY, int out, const char *what)
{
    if (ldY < out)
        gl_die("%s: the out side's row stride %d is below its %d columns",
               what, ldY, out);
}

void gl_cuda_moe_gemm(gl_dev *d, void *Y, int ldY, const void *X,
                      const void *W, int in, int out, const gl_moe_map *map)
{
    ld_check(ldY, out, "moe_gemm");
    grouped(d, GP_FWD, Y, W, X, in, out, ldY, 0.0f, map, "moe_gemm");
}

void gl_cuda_moe_gemm_dgrad(gl_dev *d, void *dX, const void *dY, int ldY,
                            const void *W, int in, int out,
                            const gl_moe_map *map, int accumulate_dx)
{
    ld_check(ldY, out, "moe_gemm_dgrad");
    grouped(d, GP_DGRAD, dX, W, dY, in, out, ldY, accumulate_dx ? 1.0f : 0.0f,
            map, "moe_gemm_dgrad");
}

void gl_cuda_moe_gemm_wgrad(gl_dev *d, float *dW, const void *dY, int ldY,
                            const void *X, int in, int out,
                            const gl_moe_map *map, int accumulate_dw)
{
    ld_check(ldY, out, "moe_gemm_wgrad");
    grouped(d, GP_WGRAD, dW, dY, X, in, out, ldY, accumulate_dw ? 1.0f : 0.0f,
            map, "moe_gemm_wgrad");
}

/* ---- auxiliary losses ---- */

/* The scores of the aux losses over all E of one token, lane-strided:
 * returns S (the sigmoids' normaliser; 1 for softmax), with mx/sum for
 * softmax.  sc_e = softmax_e, or s_e / S. */
struct aux_norm {
    float mx, sum, S;
};

__device__ aux_norm aux_scores(const float *l, int E, int score)
{
    int lane = threadIdx.x % 32;
    aux_norm a = {-INFINITY, 0, 1};
    if (score == GL_MOE_SOFTMAX) {
        for (int e = lane; e < E; e += 32)
            a.mx = fmaxf(a.mx, l[e]);
        a.mx = warp_max(a.mx);
        for (int e = lane; e < E; e += 32)
            a.sum += expf(l[e] - a.mx);
        a.sum = warp_sum(a.sum);
    } else {
        float S = 0;
        for (int e = lane; e < E; e += 32)
            S += sigmoidf_(l[e]);
        a.S = warp_sum(S) + 1e-20f;
    }
    return a;
}

__device__ __forceinline__ float aux_sc(float l, const aux_norm &a, int score)
{
    return score == GL_MOE_SOFTMAX ? expf(l - a.mx) / a.sum
                                   : sigmoidf_(l) / a.S;
}

/* counts[g(t), e] += 1 for the top k of each token's scores: selected on
 * the logits (both scores are increasing in the logit). */
__global__ void __launch_bounds__(WARPS * 32)
aux_counts_kernel(float *counts, const float *logits, int n, long row0,
                  int seq_len, int E, int k)
{
    extern __shared__ int taken_sh[];
    int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    int *taken = taken_sh + (size_t)w * E;
    for (int t = blockIdx.x * WARPS + w; t < n; t += gridDim.x * WARPS) {
        const float *l = logits + (size_t)t * E;
        long g = seq_len > 0 ? (row0 + t) / seq_len : 0;
        for (int e = lane; e < E; e += 32)
            taken[e] = 0;
        __syncwarp();
        for (int j = 0; j < k; j++) {
            int be = warp_best_untaken(l, taken, E);
            if (lane == 0) {
                taken[be] = 1;
                /* adds of 1: the same sum in any order */
                atomicAdd(&counts[g * E + be], 1.0f);
            }
            __syncwarp();
        }
    }
}

/* per_tok[t] = f_t = sum_e sc_e c_e; dlogits += gscale d f_t / dl. */
__global__ void __launch_bounds__(WARPS * 32)
aux_loss_kernel(float *per_tok, float *dlogits, const float *logits,
                const float *counts, int n, long row0, int seq_len, int E,
                int score, float gscale)
{
    int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int t = blockIdx.x * WARPS + w; t < n; t += gridDim.x * WARPS) {
        const float *l = logits + (size_t)t * E;
        const float *c = counts +
                         (seq_len > 0 ? (row0 + t) / seq_len : 0) * (long)E;
        aux_norm a = aux_scores(l, E, score);
        float f = 0;
        for (int e = lane; e < E; e += 32)
            f += aux_sc(l[e], a, score) * c[e];
        f = warp_sum(f);
        if (lane == 0)
            per_tok[t] = f;
        if (!dlogits)
            continue;
        float *dl = dlogits + (size_t)t * E;
        for (int e = lane; e < E; e += 32) {
            float g;
            if (score == GL_MOE_SOFTMAX) {
                g = aux_sc(l[e], a, score) * (c[e] - f);
            } else {
                float s = sigmoidf_(l[e]);
                g = (c[e] - f) / a.S * s * (1 - s);
            }
            dl[e] += gscale * g;
        }
    }
}

/* per_tok[t] = z_t^2; dlogits += gscale 2 z_t softmax(l_t). */
__global__ void __launch_bounds__(WARPS * 32)
z_loss_kernel(float *per_tok, float *dlogits, const float *logits, int n,
              int E, float gscale)
{
    int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int t = blockIdx.x * WARPS + w; t < n; t += gridDim.x * WARPS) {
        const float *l = logits + (size_t)t * E;
        aux_norm a = aux_scores(l, E, GL_MOE_SOFTMAX);
        float z = a.mx + logf(a.sum);
        if (lane == 0)
            per_tok[t] = z * z;
        if (dlogits)
            for (int e = lane; e < E; e += 32)
                dlogits[(size_t)t * E + e] +=
                    gscale * 2 * z * (expf(l[e] - a.mx) / a.sum);
    }
}

/* loss[0] += scale sum_t v[t], one block, fixed tree. */
__global__ void __launch_bounds__(1024)
sum_tokens_kernel(float *loss, const float *v, int n, float scale)
{
    float acc = 0;
    for (int t = threadIdx.x; t < n; t += 1024)
        acc += v[t];
    acc = block_sum<1024>(acc);
    if (threadIdx.x == 0)
        loss[0] += scale * acc;
}

void gl_cuda_moe_aux_counts(gl_dev *d, float *counts, const float *logits,
                            int n, long row0, int seq_len,
                            const gl_moe_route_cfg *cfg)
{
    gl_moe_route_check(cfg, "moe_aux_counts");
    if (n <= 0)
        return;
    size_t shmem = (size_t)WARPS * cfg->E * sizeof(int);
    if (shmem > 48 * 1024)
        GL_CUDA_CHECK(cudaFuncSetAttribute(
            aux_counts_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
            (int)shmem));
    aux_counts_kernel<<<warp_blocks(n), WARPS * 32, shmem,
                        gl_cuda_st(d)->stream>>>(counts, logits, n, row0,
                                                 seq_len, cfg->E, cfg->k);
    GL_CUDA_LAUNCHED("moe aux_counts_kernel");
}

void gl_cuda_moe_aux_loss(gl_dev *d, float *loss, float *dlogits,
                          const float *logits, const float *counts, int n,
                          long row0, int seq_len, float scale, float gscale,
                          const gl_moe_route_cfg *cfg)
{
    gl_moe_route_check(cfg, "moe_aux_loss");
    if (n <= 0 || (!loss && !dlogits))
        return;
    cudaStream_t s = gl_cuda_st(d)->stream;
    float *per = (float *)moe_scratch(d, (size_t)n);
    aux_loss_kernel<<<warp_blocks(n), WARPS * 32, 0, s>>>(
        per, dlogits, logits, counts, n, row0, seq_len, cfg->E,
        (int)cfg->score, gscale);
    GL_CUDA_LAUNCHED("moe aux_loss_kernel");
    if (loss) {
        sum_tokens_kernel<<<1, 1024, 0, s>>>(loss, per, n, scale);
        GL_CUDA_LAUNCHED("moe sum_tokens_kernel");
    }
}

void gl_cuda_moe_z_loss(gl_dev *d, float *loss, float *dlogits,
                        const float *logits, int n, int E, float scale,
                        float gscale)
{
    if (n <= 0 || E <= 0 || (!loss && !dlogits))
        return;
    cudaStream_t s = gl_cuda_st(d)->stream;
    float *per = (float *)moe_scratch(d, (size_t)n);
    z_loss_kernel<<<warp_blocks(n), WARPS * 32, 0, s>>>(per, dlogits, logits,
                                                        n, E, gscale);
    GL_CUDA_LAUNCHED("moe z_loss_kernel");
    if (loss) {
        sum_tokens_kernel<<<1, 1024, 0, s>>>(loss, per, n, scale);
        GL_CUDA_LAUNCHED("moe sum_tokens_kernel");
    }
}

/* bias_e += rate sign(mean - counts_e); the mean of the E counts in
 * double, in expert order (counts are integers: exact up to 2^53). */
__global__ void bias_update_kernel(float *bias, const float *counts, int E,
                                   float rate)
{
    __shared__ double mean;
    if (threadIdx.x == 0) {
        double s = 0;
        for (int e = 0; e < E; e++)
            s += counts[e];
        mean = s / E;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        double off = mean - counts[e];
        bias[e] += off > 0 ? rate : off < 0 ? -rate : 0.0f;
    }
}

void gl_cuda_moe_bias_update(gl_dev *d, float *bias, const float *counts,
                             int E, float rate)
{
    if (E <= 0)
        return;
    bias_update_kernel<<<1, 256, 0, gl_cuda_st(d)->stream>>>(bias, counts, E,
                                                             rate);
    GL_CUDA_LAUNCHED("moe bias_update_kernel");
}
