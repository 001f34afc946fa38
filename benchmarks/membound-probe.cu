/*
 * membound-probe.cu: how near the optimizer's memory-bound passes run to
 * the GPU's bandwidth, and whether the gradient norm's pass can hide
 * behind matrix products on a second stream.  A probe, not part of
 * gridlm: build and run it by hand on a GPU machine,
 *
 *   nvcc -O3 -arch=sm_90a -o membound-probe benchmarks/membound-probe.cu -lcublas
 *   ./membound-probe [elements, default 1.5e9]
 *
 * Part 1 times AdamW's byte pattern (4 fp32 loads, 3 fp32 stores and a
 * bf16 store an element, as cuda/adamw.cu) written several ways, beside
 * plain passes that read only (the gradient norm's sum of squares), write
 * only, and copy.  Part 2 times a run of bf16 products (an expert's
 * weight-gradient shape) alone, the sum of squares alone, and both at
 * once on two streams.  Every figure is the best of 5 runs, in GB/s
 * (bytes the kernel must move over its time) or ms.
 */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); exit(1); } } while (0)

#define THREADS 256
#define CHUNK (THREADS * 64)

struct hyper { float lr, b1, b2, eps, bc1, bc2, wd; };

__device__ __forceinline__ void upd(float g, float &m, float &v, float &w, const hyper &k)
{
    m = k.b1 * m + (1.0f - k.b1) * g;
    v = k.b2 * v + (1.0f - k.b2) * g * g;
    w -= k.lr * ((m / k.bc1) / (sqrtf(v / k.bc2) + k.eps) + k.wd * w);
}

/* Loads and stores, plain or streaming (evict-first) by template flag. */
template <bool CS> __device__ __forceinline__ float4 ld(const float4 *p) { return CS ? __ldcs(p) : *p; }
template <bool CS> __device__ __forceinline__ void st(float4 *p, float4 v) { if (CS) __stcs(p, v); else *p = v; }
template <bool CS> __device__ __forceinline__ void st2(uint2 *p, uint2 v) { if (CS) __stcs(p, v); else *p = v; }

template <bool CS>
__device__ __forceinline__ void quad(const float4 *g, float4 *m, float4 *v, float4 *w, uint2 *o,
                                     size_t i, float4 G, float4 M, float4 V, float4 W, const hyper &k)
{
    upd(G.x, M.x, V.x, W.x, k); upd(G.y, M.y, V.y, W.y, k);
    upd(G.z, M.z, V.z, W.z, k); upd(G.w, M.w, V.w, W.w, k);
    st<CS>(m + i, M); st<CS>(v + i, V); st<CS>(w + i, W);
    union { uint2 u; __nv_bfloat162 h[2]; } b;
    b.h[0] = __floats2bfloat162_rn(W.x, W.y);
    b.h[1] = __floats2bfloat162_rn(W.z, W.w);
    st2<CS>(o + i, b.u);
}

/* Chunked, as cuda/adamw.cu: block b takes CHUNK elements, GROUPS quads
 * of each thread loaded before any is stored.  n a multiple of 4. */
template <bool CS, int GROUPS, int MINB = 1>
__global__ void __launch_bounds__(THREADS, MINB)
adamw_chunked(const float4 *g, float4 *m, float4 *v, float4 *w, uint2 *o, size_t n4, hyper k)
{
    size_t c0 = (size_t)blockIdx.x * (CHUNK / 4);
    size_t c1 = c0 + CHUNK / 4 < n4 ? c0 + CHUNK / 4 : n4;
    for (size_t j = c0 + threadIdx.x; j < c1; j += GROUPS * THREADS) {
        float4 G[GROUPS], M[GROUPS], V[GROUPS], W[GROUPS];
#pragma unroll
        for (int q = 0; q < GROUPS; q++) {
            size_t i = j + q * THREADS;
            if (i < c1) { G[q] = ld<CS>(g + i); M[q] = ld<CS>(m + i); V[q] = ld<CS>(v + i); W[q] = ld<CS>(w + i); }
        }
#pragma unroll
        for (int q = 0; q < GROUPS; q++) {
            size_t i = j + q * THREADS;
            if (i < c1) quad<CS>(g, m, v, w, o, i, G[q], M[q], V[q], W[q], k);
        }
    }
}

/* Grid-stride over the whole array with a fixed grid. */
template <bool CS>
__global__ void __launch_bounds__(THREADS)
adamw_stride(const float4 *g, float4 *m, float4 *v, float4 *w, uint2 *o, size_t n4, hyper k)
{
    size_t T = (size_t)gridDim.x * THREADS;
    for (size_t i = blockIdx.x * (size_t)THREADS + threadIdx.x; i < n4; i += T)
        quad<CS>(g, m, v, w, o, i, ld<CS>(g + i), ld<CS>(m + i), ld<CS>(v + i), ld<CS>(w + i), k);
}

__global__ void __launch_bounds__(THREADS)
sumsq(float *part, const float4 *x, size_t n4)
{
    size_t T = (size_t)gridDim.x * THREADS;
    float a0 = 0, a1 = 0;
    size_t i = blockIdx.x * (size_t)THREADS + threadIdx.x;
    for (; i + T < n4; i += 2 * T) {
        float4 p = x[i], q = x[i + T];
        a0 += p.x * p.x + p.y * p.y + p.z * p.z + p.w * p.w;
        a1 += q.x * q.x + q.y * q.y + q.z * q.z + q.w * q.w;
    }
    if (i < n4) { float4 p = x[i]; a0 += p.x * p.x + p.y * p.y + p.z * p.z + p.w * p.w; }
    __shared__ float s[THREADS];
    s[threadIdx.x] = a0 + a1;
    __syncthreads();
    for (int h = THREADS / 2; h; h /= 2) {
        if ((int)threadIdx.x < h) s[threadIdx.x] += s[threadIdx.x + h];
        __syncthreads();
    }
    if (!threadIdx.x) part[blockIdx.x] = s[0];
}

__global__ void copy4(float4 *y, const float4 *x, size_t n4)
{
    size_t T = (size_t)gridDim.x * blockDim.x;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4; i += T)
        y[i] = x[i];
}

static cudaEvent_t e0, e1;

/* Best of 5 of fn(), in ms. */
template <typename F> static float best(F fn, cudaStream_t s)
{
    float b = 1e30f;
    for (int r = 0; r < 6; r++) {
        CK(cudaEventRecord(e0, s));
        fn();
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (r && ms < b)      /* the first run warms up */
            b = ms;
    }
    CK(cudaGetLastError());
    return b;
}

int main(int argc, char **argv)
{
    size_t n = argc > 1 ? (size_t)atof(argv[1]) : (size_t)1.5e9;
    n &= ~(size_t)(CHUNK - 1);
    size_t n4 = n / 4;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float *g, *m, *v, *w, *part;
    __nv_bfloat16 *o;
    CK(cudaMalloc(&g, n * 4)); CK(cudaMalloc(&m, n * 4)); CK(cudaMalloc(&v, n * 4));
    CK(cudaMalloc(&w, n * 4)); CK(cudaMalloc(&o, n * 2)); CK(cudaMalloc(&part, 1 << 20));
    CK(cudaMemset(g, 0, n * 4)); CK(cudaMemset(m, 0, n * 4));
    CK(cudaMemset(v, 0, n * 4)); CK(cudaMemset(w, 0, n * 4));
    hyper k = { 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.05f, 0.1f };
    cudaStream_t s = 0;
    const float4 *G = (const float4 *)g;
    float4 *M = (float4 *)m, *V = (float4 *)v, *W = (float4 *)w;
    uint2 *O = (uint2 *)o;
    unsigned chunks = (unsigned)(n / CHUNK);
    int sms;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    double ab = 30.0 * n / 1e6;      /* AdamW's bytes, in MB: GB/s = MB / ms */
    printf("elements %zu, SMs %d\n", n, sms);
#define A(name, launch) do { float t_ = best([&] { launch; }, s); \
        printf("%-34s %7.2f ms %6.0f GB/s\n", name, t_, ab / t_); } while (0)
    A("adamw chunked, 2 groups (gridlm)", (adamw_chunked<false, 2><<<chunks, THREADS>>>(G, M, V, W, O, n4, k)));
    A("adamw chunked, 2 groups, streaming", (adamw_chunked<true, 2><<<chunks, THREADS>>>(G, M, V, W, O, n4, k)));
    A("adamw chunked, 1 group", (adamw_chunked<false, 1><<<chunks, THREADS>>>(G, M, V, W, O, n4, k)));
    A("adamw chunked, 1 group, 6 blocks/SM", (adamw_chunked<false, 1, 6><<<chunks, THREADS>>>(G, M, V, W, O, n4, k)));
    A("adamw chunked, 1 group, 8 blocks/SM", (adamw_chunked<false, 1, 8><<<chunks, THREADS>>>(G, M, V, W, O, n4, k)));
    A("adamw chunked, 1 group, streaming", (adamw_chunked<true, 1><<<chunks, THREADS>>>(G, M, V, W, O, n4, k)));
    A("adamw chunked, 4 groups", (adamw_chunked<false, 4><<<chunks, THREADS>>>(G, M, V, W, O, n4, k)));
    A("adamw chunked, 4 groups, streaming", (adamw_chunked<true, 4><<<chunks, THREADS>>>(G, M, V, W, O, n4, k)));
    for (int per = 2; per <= 8; per *= 2) {
        char nm[64];
        snprintf(nm, sizeof nm, "adamw stride, %d blocks/SM", per);
        A(nm, (adamw_stride<false><<<sms * per, THREADS>>>(G, M, V, W, O, n4, k)));
        snprintf(nm, sizeof nm, "adamw stride, %d blocks/SM, stream", per);
        A(nm, (adamw_stride<true><<<sms * per, THREADS>>>(G, M, V, W, O, n4, k)));
    }
    float t;
    t = best([&] { sumsq<<<1024, THREADS>>>(part, G, n4); }, s);
    printf("%-34s %7.2f ms %6.0f GB/s\n", "sum of squares (read only)", t, 4.0 * n / 1e6 / t);
    t = best([&] { CK(cudaMemsetAsync(m, 0, n * 4, s)); }, s);
    printf("%-34s %7.2f ms %6.0f GB/s\n", "memset (write only)", t, 4.0 * n / 1e6 / t);
    t = best([&] { copy4<<<sms * 8, THREADS>>>(M, G, n4); }, s);
    printf("%-34s %7.2f ms %6.0f GB/s\n", "copy", t, 8.0 * n / 1e6 / t);

    /* Part 2: products beside the sum of squares. */
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) { fprintf(stderr, "cublas\n"); return 1; }
    cudaStream_t sa, sb;
    CK(cudaStreamCreateWithFlags(&sa, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&sb, cudaStreamNonBlocking));
    cublasSetStream(h, sa);
    int M1 = 11264, N1 = 2048, K1 = 1024, reps = 24;
    __nv_bfloat16 *a = (__nv_bfloat16 *)o, *b = a + (size_t)M1 * K1;
    float *c = m, one = 1, zero = 0;
    auto gemms = [&] {
        for (int r = 0; r < reps; r++)
            cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, M1, N1, K1, &one, a, CUDA_R_16BF, M1,
                         b, CUDA_R_16BF, N1, &zero, c + (size_t)(r % 4) * M1 * N1, CUDA_R_32F, M1,
                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    };
    cudaEvent_t fork;
    CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    size_t gn4 = (size_t)M1 * N1 / 4;     /* one gradient of that shape */
    int grids[] = { 1024, 4 * sms, sms, 32 };
    float tg = best(gemms, sa);
    double flop = 2.0 * M1 * N1 * K1 * reps;
    printf("%d products %dx%dx%d alone: %.2f ms (%.0f TFLOP/s)\n", reps, M1, N1, K1, tg, flop / tg / 1e9);
    for (int gi = 0; gi < 4; gi++) {
        int gr = grids[gi];
        auto norms = [&] {
            for (int r = 0; r < reps; r++)
                sumsq<<<gr, THREADS, 0, sb>>>(part + gr * (r % 4), (const float4 *)(v + (size_t)(r % 8) * 4 * gn4), gn4);
        };
        float tn = best(norms, sb);
        float tb = best([&] {
            CK(cudaEventRecord(fork, sa));
            CK(cudaStreamWaitEvent(sb, fork, 0));
            gemms();
            norms();
            cudaEvent_t j;
            CK(cudaEventCreateWithFlags(&j, cudaEventDisableTiming));
            CK(cudaEventRecord(j, sb));
            CK(cudaStreamWaitEvent(sa, j, 0));
            CK(cudaEventDestroy(j));
        }, sa);
        printf("  sums of squares, grid %4d: alone %.2f ms; both on two streams %.2f ms "
               "(serial %.2f; hidden %.0f%%)\n", gr, tn, tb, tg + tn, 100.0 * (tg + tn - tb) / tn);
    }
    return 0;
}
