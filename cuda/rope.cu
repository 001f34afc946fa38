/*
 * rope.cu: rotary position embedding, rotate-half convention, in place.
 *
 * In each head of D elements, element i < D/2 pairs with i + D/2 and the
 * pair turns by the angle of (token position s, frequency i):
 *   x'_i       = x_i cos - x_{i+D/2} sin
 *   x'_{i+D/2} = x_{i+D/2} cos + x_i sin      (cos, sin = table[s, i]).
 * The backward is the inverse rotation: the same with sin negated, which
 * the caller passes as sign = -1.
 *
 * One thread per V consecutive pairs (V = 8 when the rows allow 16-byte
 * moves, else 1): it loads x[i .. i+V) and x[i+D/2 .. i+D/2+V) as two
 * vectors, so a warp reads two contiguous runs of a head and one row of
 * each table, and the index arithmetic is paid once per V pairs.
 */
#include <config.h>

#include "gl_cuda.h"
#include "vec.cuh"

template <int V>
__global__ void rope_kernel(bf16 *x, int ld, int S, int H, int half,
                            const float *cos, const float *sin, float sign,
                            size_t total)
{
    int hv = half / V;                          /* vectors per half head */
    for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < total;
         t += (size_t)gridDim.x * blockDim.x) {
        int i = (int)(t % hv) * V;
        size_t rest = t / hv;
        int hd = (int)(rest % H);
        size_t tok = rest / H;                  /* b * S + s */
        int s = (int)(tok % S);
        bf16 *xh = x + tok * ld + (size_t)hd * 2 * half;
        const float *cr = cos + (size_t)s * half + i;
        const float *sr = sin + (size_t)s * half + i;
        float a[V], b[V];
        load_bf16<V>(a, xh + i);
        load_bf16<V>(b, xh + i + half);
        float oa[V], ob[V];
        for (int k = 0; k < V; k++) {
            float c = cr[k], sn = sign * sr[k];
            oa[k] = a[k] * c - b[k] * sn;
            ob[k] = b[k] * c + a[k] * sn;
        }
        store_bf16<V>(xh + i, oa);
        store_bf16<V>(xh + i + half, ob);
    }
}

void gl_cuda_rope(cudaStream_t st, bf16 *x, int ld, int B, int S, int H, int D,
                  const float *cos, const float *sin, float sign)
{
    if (D % 2 != 0)
        gl_die("rope: head dimension %d is odd; rotary embedding pairs "
               "elements i and i + D/2 and needs an even head dimension", D);
    int half = D / 2;
    size_t pairs = (size_t)B * S * H * half;
    if (!pairs)
        return;
    /* every vector starts at x + tok ld + hd D + {0, half} + multiple of 8 */
    if (half % 8 == 0 && gl_vec8_ok(ld, x)) {
        size_t total = pairs / 8;
        rope_kernel<8><<<gl_cuda_grid(total, 256), 256, 0, st>>>(
            x, ld, S, H, half, cos, sin, sign, total);
    } else {
        rope_kernel<1><<<gl_cuda_grid(pairs, 256), 256, 0, st>>>(
            x, ld, S, H, half, cos, sin, sign, pairs);
    }
    GL_CUDA_LAUNCHED("rope");
}
