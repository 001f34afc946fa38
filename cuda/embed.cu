/*
 * embed.cu: the vocab-parallel embedding lookup and its backward.
 *
 * Forward: y_i = table[id_i - vocab_start] when the id falls in this
 * rank's vl rows, else a zero row (the sum over tensor-parallel ranks then
 * holds the one real row).  One thread per 8 (or 1) elements of a row.
 *
 * Backward: dtable[id_i - vocab_start] += dy_i for every token i of the
 * shard.  Tokens repeat, so rows would collide under one-thread-per-token
 * atomics, and float addition in arrival order is not reproducible.
 * Instead the (id, token) pairs are sorted by id with CUB's radix sort
 * (stable: tokens of one id stay in ascending order); then the first
 * position of each run of equal ids sums that run's dy rows in fp32, in
 * token order, and adds the sum to its table row once.  Same bits every
 * run, no atomics.
 *
 * Learned positions: y_i += pos[positions_i], one thread per 8 (or 1)
 * elements of a row; a position outside the table leaves its row as it
 * is (the CPU back end stops there).  Their backward is embed_bwd's.
 */
#include <config.h>

#include <cub/cub.cuh>

#include "gl_cuda.h"
#include "vec.cuh"

template <int V>
__global__ void embed_fwd_kernel(bf16 *y, const bf16 *table, const int32_t *ids,
                                 int h, long vocab_start, int vl, size_t total)
{
    int per_row = h / V;
    for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < total;
         t += (size_t)gridDim.x * blockDim.x) {
        size_t i = t / per_row;
        int c = (int)(t % per_row) * V;
        long r = (long)ids[i] - vocab_start;
        float f[V];
        if (r >= 0 && r < vl)
            load_bf16<V>(f, table + (size_t)r * h + c);
        else
            for (int k = 0; k < V; k++)
                f[k] = 0;
        store_bf16<V>(y + i * h + c, f);
    }
}

template <int V>
__global__ void pos_embed_fwd_kernel(bf16 *y, const bf16 *pos,
                                     const int32_t *positions, int h,
                                     int max_pos, size_t total)
{
    int per_row = h / V;
    for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < total;
         t += (size_t)gridDim.x * blockDim.x) {
        size_t i = t / per_row;
        int c = (int)(t % per_row) * V;
        int p = positions[i];
        if (p < 0 || p >= max_pos)
            continue;
        float f[V], e[V];
        load_bf16<V>(f, y + i * h + c);
        load_bf16<V>(e, pos + (size_t)p * h + c);
        for (int k = 0; k < V; k++)
            f[k] += e[k];
        store_bf16<V>(y + i * h + c, f);
    }
}

__global__ void iota_kernel(int32_t *v, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        v[i] = i;
}

/* One block per sorted position p; only the first position of each run of
 * equal ids works. */
template <int V>
__global__ void embed_bwd_kernel(float *dtable, const bf16 *dy,
                                 const int32_t *sorted_ids,
                                 const int32_t *sorted_tok, int n, int h,
                                 long vocab_start, int vl)
{
    int p = blockIdx.x;
    int id = sorted_ids[p];
    if (p > 0 && sorted_ids[p - 1] == id)
        return;
    long r = (long)id - vocab_start;
    if (r < 0 || r >= vl)
        return;
    int end = p + 1;
    while (end < n && sorted_ids[end] == id)
        end++;
    float *row = dtable + (size_t)r * h;
    for (int c = threadIdx.x * V; c < h; c += blockDim.x * V) {
        float acc[V];
        for (int k = 0; k < V; k++)
            acc[k] = 0;
        for (int q = p; q < end; q++) {
            float f[V];
            load_bf16<V>(f, dy + (size_t)sorted_tok[q] * h + c);
            for (int k = 0; k < V; k++)
                acc[k] += f[k];
        }
        for (int k = 0; k < V; k++)
            row[c + k] += acc[k];
    }
}

void gl_cuda_embed_fwd(cudaStream_t st, bf16 *y, const bf16 *table,
                       const int32_t *ids, int n, int h, long vocab_start,
                       int vl)
{
    if (n <= 0 || h <= 0)
        return;
    if (gl_vec8_ok(h, y, table)) {
        size_t total = (size_t)n * (h / 8);
        embed_fwd_kernel<8><<<gl_cuda_grid(total, 256), 256, 0, st>>>(
            y, table, ids, h, vocab_start, vl, total);
    } else {
        size_t total = (size_t)n * h;
        embed_fwd_kernel<1><<<gl_cuda_grid(total, 256), 256, 0, st>>>(
            y, table, ids, h, vocab_start, vl, total);
    }
    GL_CUDA_LAUNCHED("embed_fwd");
}

void gl_cuda_embed_bwd(gl_dev *d, float *dtable, const bf16 *dy,
                       const int32_t *ids, int n, int h, long vocab_start,
                       int vl)
{
    if (n <= 0 || h <= 0)
        return;
    gl_cuda_state *st = gl_cuda_st(d);
    size_t temp = 0;
    GL_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
        NULL, temp, (const int32_t *)NULL, (int32_t *)NULL,
        (const int32_t *)NULL, (int32_t *)NULL, n, 0, 32, st->stream));
    size_t arr = ((size_t)n * sizeof(int32_t) + 255) / 256 * 256;
    char *base = (char *)gl_cuda_scratch(d, &st->s_embed, 3 * arr + temp);
    int32_t *tok = (int32_t *)base;
    int32_t *sids = (int32_t *)(base + arr);
    int32_t *stok = (int32_t *)(base + 2 * arr);
    void *tmp = base + 3 * arr;
    iota_kernel<<<(n + 255) / 256, 256, 0, st->stream>>>(tok, n);
    GL_CUDA_LAUNCHED("iota");
    GL_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(tmp, temp, ids, sids, tok,
                                                  stok, n, 0, 32, st->stream));
    if (gl_vec8_ok(h, dy))
        embed_bwd_kernel<8><<<n, 256, 0, st->stream>>>(
            dtable, dy, sids, stok, n, h, vocab_start, vl);
    else
        embed_bwd_kernel<1><<<n, 256, 0, st->stream>>>(
            dtable, dy, sids, stok, n, h, vocab_start, vl);
    GL_CUDA_LAUNCHED("embed_bwd");
}

void gl_cuda_pos_embed_fwd(cudaStream_t st, bf16 *y, const bf16 *pos,
                           const int32_t *positions, int n, int h,
                           int max_pos)
{
    if (n <= 0 || h <= 0)
        return;
    if (gl_vec8_ok(h, y, pos)) {
        size_t total = (size_t)n * (h / 8);
        pos_embed_fwd_kernel<8><<<gl_cuda_grid(total, 256), 256, 0, st>>>(
            y, pos, positions, h, max_pos, total);
    } else {
        size_t total = (size_t)n * h;
        pos_embed_fwd_kernel<1><<<gl_cuda_grid(total, 256), 256, 0, st>>>(
            y, pos, positions, h, max_pos, total);
    }
    GL_CUDA_LAUNCHED("pos_embed_fwd");
}
