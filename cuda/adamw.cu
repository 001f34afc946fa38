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
 * the same two in turn), copy nothing from the host.  Each element is read and written once: 4 fp32 loads,
 * 3 fp32 stores and one bf16 store.
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

__global__ void __launch_bounds__(THREADS)
adamw_kernel(const gl_adamw_seg *segs, const adamw_chunk *chunks, float lr,
             float b1, float b2, float eps, float gs, float bc1, float bc2)
{
    adamw_chunk ch = chunks[blockIdx.x];
    const gl_adamw_seg sg = segs[ch.seg];
    size_t end = ch.start + CHUNK < sg.count ? ch.start + CHUNK : sg.count;
    bf16 *out = (bf16 *)sg.act_out;
    for (size_t i = ch.start + threadIdx.x; i < end; i += THREADS) {
        float g = sg.grad[i] * gs;
        float m = b1 * sg.m[i] + (1.0f - b1) * g;
        float v = b2 * sg.v[i] + (1.0f - b2) * g * g;
        float w = sg.master[i];
        w -= lr * ((m / bc1) / (sqrtf(v / bc2) + eps) + sg.weight_decay * w);
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
    float bc1 = (float)(1 - pow((double)hp->beta1, (double)hp->step));
    float bc2 = (float)(1 - pow((double)hp->beta2, (double)hp->step));
    adamw_kernel<<<(unsigned)nchunks, THREADS, 0, st->stream>>>(
        (const gl_adamw_seg *)buf, (const adamw_chunk *)(buf + seg_bytes),
        hp->lr, hp->beta1, hp->beta2, hp->eps, hp->grad_scale, bc1, bc2);
    GL_CUDA_LAUNCHED("adamw");
}
