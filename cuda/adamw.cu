/*
 * adamw.cu: the multi-tensor AdamW step, fused with the bf16 weight copy.
 *
 * For every element of every segment, step counted from 1:
 *   g = grad grad_scale
 *   m = b1 m + (1 - b1) g,   v = b2 v + (1 - b2) g^2
 *   w -= lr (m / bc1 / (sqrt(v / bc2) + eps) + wd w)
 *   act_out = bf16(w)                                  (when given)
 * with the bias corrections bc1 = 1 - b1^step, bc2 = 1 - b2^step computed
 * once on the host in double, as the CPU back end does.
 *
 * All segments go in one launch: the host cuts each segment into chunks
 * of CHUNK elements and uploads the segment list and a chunk table
 * (segment, first element) to device memory, stream-ordered; block b
 * updates chunk b.  The last GL_ADAMW_TABLES lists stay uploaded, so the
 * optimizer's steps, which pass the same list (or, with --decoupled-lr,
 * the same two in turn), copy nothing from the host.  Each element is
 * read and written once: 4 fp32 loads, 3 fp32 stores and one bf16
 * store, 16 and 8 bytes at a time where the arrays are aligned (about 30
 * bytes a parameter: the step is bound by the memory's bandwidth).
 */
#include <config.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gl_cuda.h"

#define THREADS 256
#define CHUNK (THREADS * 64)

typedef struct {
    int seg;
    int pad;
    size_t start;
} adamw_chunk;

typedef struct {
    float lr, b1, b2, eps, gs, bc1, bc2;
} adamw_k;

/* One element's update, the formula at the top. */
__device__ __forceinline__ void update(float g, float &m, float &v, float &w, float wd,
                                       const adamw_k &k)
{
    g *= k.gs;
    m = k.b1 * m + (1.0f - k.b1) * g;
    v = k.b2 * v + (1.0f - k.b2) * g * g;
    w -= k.lr * ((m / k.bc1) / (sqrtf(v / k.bc2) + k.eps) + wd * w);
}

/* Four consecutive elements from index i (a multiple of 4 of 16-byte
 * aligned arrays): 16-byte loads and stores, the bf16 copy 8 bytes. */
struct quad {
    float4 g, m, v, w;
};

__device__ __forceinline__ quad load4(const gl_adamw_seg &sg, size_t i)
{
    quad q;
    q.g = *(const float4 *)(sg.grad + i);
    q.m = *(const float4 *)(sg.m + i);
    q.v = *(const float4 *)(sg.v + i);
    q.w = *(const float4 *)(sg.master + i);
    return q;
}

__device__ __forceinline__ void update4(const gl_adamw_seg &sg, size_t i, quad q,
                                        const adamw_k &k)
{
    float wd = sg.weight_decay;
    update(q.g.x, q.m.x, q.v.x, q.w.x, wd, k);
    update(q.g.y, q.m.y, q.v.y, q.w.y, wd, k);
    update(q.g.z, q.m.z, q.v.z, q.w.z, wd, k);
    update(q.g.w, q.m.w, q.v.w, q.w.w, wd, k);
    *(float4 *)(sg.m + i) = q.m;
    *(float4 *)(sg.v + i) = q.v;
    *(float4 *)(sg.master + i) = q.w;
    if (sg.act_out) {
        union { uint2 u; __nv_bfloat162 h[2]; } o;
        o.h[0] = __floats2bfloat162_rn(q.w.x, q.w.y);
        o.h[1] = __floats2bfloat162_rn(q.w.z, q.w.w);
        *(uint2 *)((bf16 *)sg.act_out + i) = o.u;
    }
}

/* Block b updates chunk b.  Where the segment's arrays allow (fp32 ones
 * 16-byte aligned, the bf16 copy 8-byte), four elements a thread at a
 * time (a load of 4 bytes at a time left too few bytes in flight to
 * reach the memory's bandwidth); the rest element by element.  The
 * arithmetic is the same either way.  One group of four a thread in
 * flight, not two: the registers of two cost occupancy, and an H200 ran
 * this byte pattern at 3.5 TB/s with two and 4.0 (a plain copy's rate)
 * with one (benchmarks/membound-probe.cu). */
__global__ void __launch_bounds__(THREADS)
adamw_kernel(const gl_adamw_seg *segs, const adamw_chunk *chunks, adamw_k k)
{
    adamw_chunk ch = chunks[blockIdx.x];
    const gl_adamw_seg sg = segs[ch.seg];
    size_t end = ch.start + CHUNK < sg.count ? ch.start + CHUNK : sg.count;
    size_t tail = ch.start;            /* where the element-wise part starts */
    uintptr_t a32 = (uintptr_t)sg.grad | (uintptr_t)sg.m | (uintptr_t)sg.v |
                    (uintptr_t)sg.master;
    if (!(a32 & 15) && !((uintptr_t)sg.act_out & 7)) {
        size_t n4 = (end - ch.start) / 4;
        for (size_t j = threadIdx.x; j < n4; j += THREADS)
            update4(sg, ch.start + 4 * j, load4(sg, ch.start + 4 * j), k);
        tail = ch.start + 4 * n4;
    }
    bf16 *out = (bf16 *)sg.act_out;
    for (size_t i = tail + threadIdx.x; i < end; i += THREADS) {
        float m = sg.m[i], v = sg.v[i], w = sg.master[i];
        update(sg.grad[i], m, v, w, sg.weight_decay, k);
        sg.m[i] = m;
        sg.v[i] = v;
        sg.master[i] = w;
        if (out)
            out[i] = __float2bfloat16_rn(w);
    }
}

void gl_cuda_adamw(gl_dev *d, const gl_adamw_seg *segs, int nseg,
                   const gl_adamw_hyper *hp)
{
    if (hp->step < 1)
        gl_die("adamw: step %ld is not positive; optimizer steps count from 1",
               hp->step);
    size_t nchunks = 0;
    for (int s = 0; s < nseg; s++)
        nchunks += (segs[s].count + CHUNK - 1) / CHUNK;
    if (!nchunks)
        return;
    if (nchunks > 0x7fffffffu)
        gl_die("adamw: %zu chunks exceed one launch's grid", nchunks);
    gl_cuda_state *st = gl_cuda_st(d);
    size_t seg_bytes = ((size_t)nseg * sizeof(gl_adamw_seg) + 255) / 256 * 256;
    size_t chunk_bytes = nchunks * sizeof(adamw_chunk);
    size_t list_bytes = (size_t)nseg * sizeof *segs;
    /* The table holding this list, else the least recently used one,
     * which takes it. */
    gl_adamw_table *t = NULL, *lru = &st->adamw[0];
    for (int i = 0; i < GL_ADAMW_TABLES && !t; i++) {
        gl_adamw_table *u = &st->adamw[i];
        if (u->segs && u->nseg == nseg && u->nchunks == nchunks &&
            !memcmp(u->segs, segs, list_bytes))
            t = u;
        else if (u->used < lru->used)
            lru = u;
    }
    if (!t) {
        t = lru;
        char *buf = (char *)gl_cuda_scratch(d, &t->mem, seg_bytes + chunk_bytes);
        adamw_chunk *host = (adamw_chunk *)gl_malloc(chunk_bytes);
        size_t c = 0;
        for (int s = 0; s < nseg; s++)
            for (size_t start = 0; start < segs[s].count; start += CHUNK) {
                host[c].seg = s;
                host[c].pad = 0;
                host[c].start = start;
                c++;
            }
        /* From pageable memory: the copies read the host arrays before
         * they return, so freeing them right after is safe. */
        GL_CUDA_CHECK(cudaMemcpyAsync(buf, segs, list_bytes,
                                      cudaMemcpyHostToDevice, st->stream));
        GL_CUDA_CHECK(cudaMemcpyAsync(buf + seg_bytes, host, chunk_bytes,
                                      cudaMemcpyHostToDevice, st->stream));
        free(host);
        free(t->segs);
        t->segs = (gl_adamw_seg *)gl_malloc(list_bytes);
        memcpy(t->segs, segs, list_bytes);
        t->nseg = nseg;
        t->nchunks = nchunks;
    }
    t->used = ++st->adamw_calls;
    const char *buf = (const char *)t->mem.p;
    adamw_k k = { hp->lr, hp->beta1, hp->beta2, hp->eps, hp->grad_scale,
                  (float)(1 - pow((double)hp->beta1, (double)hp->step)),
                  (float)(1 - pow((double)hp->beta2, (double)hp->step)) };
    adamw_kernel<<<(unsigned)nchunks, THREADS, 0, st->stream>>>(
        (const gl_adamw_seg *)buf, (const adamw_chunk *)(buf + seg_bytes), k);
    GL_CUDA_LAUNCHED("adamw");
}
