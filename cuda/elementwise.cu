/*
 * elementwise.cu: the memory-bound one-liners: dtype casts, the residual
 * add, and scaling an fp32 buffer.
 *
 * Each kernel is a grid-stride loop.  When every pointer is 16-byte
 * aligned, a thread moves 8 bf16 (or 4 fp32) elements per access with
 * one 16-byte load/store, the widest a thread can issue; the last
 * count % width elements, or everything for unaligned views, go one by one.
 */
#include <config.h>

#include "gl_cuda.h"

#define THREADS 256

static bool aligned16(const void *p)
{
    return ((uintptr_t)p & 15) == 0;
}

/* Eight bf16 in one 16-byte word. */
union bf16x8 {
    uint4 u;
    bf16 h[8];
};

/* dst = round-to-nearest-even bf16 of src. */
__global__ void to_bf16_vec(bf16 *dst, const float *src, size_t nvec)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < nvec;
         i += (size_t)gridDim.x * blockDim.x) {
        float4 a = ((const float4 *)src)[2 * i];
        float4 b = ((const float4 *)src)[2 * i + 1];
        bf16x8 o;
        o.h[0] = __float2bfloat16_rn(a.x); o.h[1] = __float2bfloat16_rn(a.y);
        o.h[2] = __float2bfloat16_rn(a.z); o.h[3] = __float2bfloat16_rn(a.w);
        o.h[4] = __float2bfloat16_rn(b.x); o.h[5] = __float2bfloat16_rn(b.y);
        o.h[6] = __float2bfloat16_rn(b.z); o.h[7] = __float2bfloat16_rn(b.w);
        ((uint4 *)dst)[i] = o.u;
    }
}

__global__ void to_bf16_scalar(bf16 *dst, const float *src, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __float2bfloat16_rn(src[i]);
}

/* dst = src widened to fp32 (exact). */
__global__ void to_f32_vec(float *dst, const bf16 *src, size_t nvec)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < nvec;
         i += (size_t)gridDim.x * blockDim.x) {
        bf16x8 s;
        s.u = ((const uint4 *)src)[i];
        float4 a = make_float4(__bfloat162float(s.h[0]), __bfloat162float(s.h[1]),
                               __bfloat162float(s.h[2]), __bfloat162float(s.h[3]));
        float4 b = make_float4(__bfloat162float(s.h[4]), __bfloat162float(s.h[5]),
                               __bfloat162float(s.h[6]), __bfloat162float(s.h[7]));
        ((float4 *)dst)[2 * i] = a;
        ((float4 *)dst)[2 * i + 1] = b;
    }
}

__global__ void to_f32_scalar(float *dst, const bf16 *src, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __bfloat162float(src[i]);
}

/* y = x + r, added in fp32 and rounded once (y may alias x or r: each
 * element is read before it is written, by the same thread). */
__global__ void add_vec(bf16 *y, const bf16 *x, const bf16 *r, size_t nvec)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < nvec;
         i += (size_t)gridDim.x * blockDim.x) {
        bf16x8 a, b, o;
        a.u = ((const uint4 *)x)[i];
        b.u = ((const uint4 *)r)[i];
        for (int j = 0; j < 8; j++)
            o.h[j] = __float2bfloat16_rn(__bfloat162float(a.h[j]) +
                                         __bfloat162float(b.h[j]));
        ((uint4 *)y)[i] = o.u;
    }
}

__global__ void add_scalar(bf16 *y, const bf16 *x, const bf16 *r, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = __float2bfloat16_rn(__bfloat162float(x[i]) +
                                   __bfloat162float(r[i]));
}

/* x *= s in fp32. */
__global__ void scale_f32_kernel(float *x, float s, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] *= s;
}

/* y += x in fp32. */
__global__ void add_f32_kernel(float *y, const float *x, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] += x[i];
}

/* A cast of n elements: vec over the groups of 8 when both pointers are
 * 16-byte aligned, scalar over the rest (or everything). */
template <typename D, typename S>
static void cast(cudaStream_t st, D *dst, const S *src, size_t n,
                 void (*vec)(D *, const S *, size_t), const char *vec_name,
                 void (*scalar)(D *, const S *, size_t), const char *scalar_name)
{
    if (!n)
        return;
    size_t nvec = aligned16(dst) && aligned16(src) ? n / 8 : 0;
    if (nvec) {
        vec<<<gl_cuda_grid(nvec, THREADS), THREADS, 0, st>>>(dst, src, nvec);
        GL_CUDA_LAUNCHED(vec_name);
    }
    size_t done = nvec * 8;
    if (done < n) {
        scalar<<<gl_cuda_grid(n - done, THREADS), THREADS, 0, st>>>(
            dst + done, src + done, n - done);
        GL_CUDA_LAUNCHED(scalar_name);
    }
}

void gl_cuda_to_bf16(cudaStream_t st, bf16 *dst, const float *src, size_t n)
{
    cast(st, dst, src, n, to_bf16_vec, "to_bf16_vec", to_bf16_scalar, "to_bf16_scalar");
}

void gl_cuda_to_f32(cudaStream_t st, float *dst, const bf16 *src, size_t n)
{
    cast(st, dst, src, n, to_f32_vec, "to_f32_vec", to_f32_scalar, "to_f32_scalar");
}

void gl_cuda_add(cudaStream_t st, bf16 *y, const bf16 *x, const bf16 *r,
                 size_t n)
{
    if (!n)
        return;
    size_t nvec = 0;
    if (aligned16(y) && aligned16(x) && aligned16(r)) {
        nvec = n / 8;
        if (nvec) {
            add_vec<<<gl_cuda_grid(nvec, THREADS), THREADS, 0, st>>>(y, x, r,
                                                                    nvec);
            GL_CUDA_LAUNCHED("add_vec");
        }
    }
    size_t done = nvec * 8;
    if (done < n) {
        add_scalar<<<gl_cuda_grid(n - done, THREADS), THREADS, 0, st>>>(
            y + done, x + done, r + done, n - done);
        GL_CUDA_LAUNCHED("add_scalar");
    }
}

void gl_cuda_add_f32(cudaStream_t st, float *y, const float *x, size_t n)
{
    if (!n)
        return;
    add_f32_kernel<<<gl_cuda_grid(n, THREADS), THREADS, 0, st>>>(y, x, n);
    GL_CUDA_LAUNCHED("add_f32");
}

void gl_cuda_scale_f32(cudaStream_t st, float *x, float s, size_t n)
{
    if (!n)
        return;
    scale_f32_kernel<<<gl_cuda_grid(n, THREADS), THREADS, 0, st>>>(x, s, n);
    GL_CUDA_LAUNCHED("scale_f32");
}
