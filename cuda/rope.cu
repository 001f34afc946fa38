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
 * One thread per pair; consecutive threads take consecutive i, so a warp
 * reads two contiguous runs of a head and one row of each table.
 */
#include "config.h"

#include "gl_cuda.h"

__global__ void rope_kernel(bf16 *x, int ld, int S, int H, int half,
                            const float *cos, const float *sin, float sign,
                            size_t total)
{
    for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < total;
         t += (size_t)gridDim.x * blockDim.x) {
        int i = (int)(t % half);
        size_t rest = t / half;
        int hd = (int)(rest % H);
        size_t tok = rest / H;                  /* b * S + s */
        int s = (int)(tok % S);
        bf16 *xh = x + tok * ld + (size_t)hd * 2 * half;
        float c = cos[(size_t)s * half + i];
        float sn = sign * sin[(size_t)s * half + i];
        float a = __bfloat162float(xh[i]), b = __bfloat162float(xh[i + half]);
        xh[i] = __float2bfloat16_rn(a * c - b * sn);
        xh[i + half] = __float2bfloat16_rn(b * c + a * sn);
    }
}

void gl_cuda_rope(cudaStream_t st, bf16 *x, int ld, int B, int S, int H, int D,
                  const float *cos, const float *sin, float sign)
{
    if (D % 2 != 0)
        gl_die("rope: head dimension %d is odd; rotary embedding pairs "
               "elements i and i + D/2 and needs an even head dimension", D);
    size_t total = (size_t)B * S * H * (D / 2);
    if (!total)
        return;
    rope_kernel<<<gl_cuda_grid(total, 256), 256, 0, st>>>(x, ld, S, H, D / 2,
                                                          cos, sin, sign, total);
    GL_CUDA_LAUNCHED("rope");
}
