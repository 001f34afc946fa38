/*
 * layernorm.cuh: the last two passes of a LayerNorm row's forward, one
 * warp per row (layernorm.cu), shared with the kernel that makes the row
 * first (dropout.cu's bias-dropout-add + LayerNorm): the same code on the
 * same stored row and the same lane sums gives the same bits, so a norm
 * recomputed by layernorm_fwd equals the fused kernel's.
 *
 * Lane `lane` of the row's warp owns columns lane V + 32 V k .. + V - 1
 * (k = 0, 1, ...); s is its sum of those elements of xr (pass 1, added in
 * that order).  Writes yr = (x - mean) rstd w' + b (w' = w, or 1 + w
 * under one_plus), and mean[row], rstd[row] from lane 0.
 */
#ifndef GRIDLM_CUDA_LAYERNORM_CUH
#define GRIDLM_CUDA_LAYERNORM_CUH

#include "gl_cuda.h"
#include "vec.cuh"
#include "warp.cuh"

template <int V>
__device__ inline void layernorm_row_finish(bf16 *yr, float *mean,
                                            float *rstd, int row,
                                            const bf16 *xr, const bf16 *w,
                                            const bf16 *b, int h, float eps,
                                            int one_plus, int lane, float s)
{
    float mu = warp_sum(s) / h;
    float ss = 0;
    for (int c = lane * V; c < h; c += 32 * V) {
        float f[V];
        load_bf16<V>(f, xr + c);
        for (int i = 0; i < V; i++)
            ss += (f[i] - mu) * (f[i] - mu);
    }
    float r = 1.0f / sqrtf(warp_sum(ss) / h + eps);
    for (int c = lane * V; c < h; c += 32 * V) {
        float f[V], g[V], bb[V];
        load_bf16<V>(f, xr + c);
        load_bf16<V>(g, w + c);
        load_bf16<V>(bb, b + c);
        for (int i = 0; i < V; i++)
            f[i] = (f[i] - mu) * r * (one_plus ? 1.0f + g[i] : g[i]) + bb[i];
        store_bf16<V>(yr + c, f);
    }
    if (lane == 0) {
        mean[row] = mu;
        rstd[row] = r;
    }
}

#endif
