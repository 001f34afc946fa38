/*
 * gemm.cu: matrix products through cuBLASLt, bf16 inputs, fp32 compute,
 * bf16 or fp32 output.
 *
 * ops.h speaks row-major: C[m,n] = alpha op(A)[m,k] op(B)[k,n] + beta C.
 * cuBLASLt speaks column-major.  A row-major matrix with row stride ld is
 * the column-major matrix of its transpose with leading dimension ld, so
 * the product is computed as its transpose,
 *     C^T[n,m] = op(B)^T[n,k] op(A)^T[k,m],
 * i.e. cuBLASLt's "A" is our B and its "B" is our A, each with the same
 * transpose flag as ours (a row-major [k,n] B is a column-major [n,k]
 * matrix, which is exactly op(B)^T when transb == 0).
 *
 * Creating descriptors and asking the heuristic for an algorithm costs
 * tens of microseconds, so each distinct shape (with the alignment of its
 * pointers, which the heuristic depends on) is planned once and cached.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "gl_cuda.h"

struct gl_gemm_plan {
    /* key */
    int transa, transb, m, n, k, lda, ldb, ldc;
    gl_dtype ctype;
    int beta_zero;
    unsigned align_a, align_b, align_c;
    /* plan */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
};

/* The largest power of two, up to 256, that divides the address. */
static unsigned align_of(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    unsigned al = 256;
    while (al > 1 && a % al)
        al /= 2;
    return al;
}

static void plan_make(gl_cuda_state *st, gl_gemm_plan *p)
{
    cudaDataType_t ct = p->ctype == GL_DT_F32 ? CUDA_R_32F : CUDA_R_16BF;
    GL_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F,
                                             CUDA_R_32F));
    /* cuBLASLt's A is our B, its B is our A (see the top of the file). */
    cublasOperation_t opa = p->transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t opb = p->transa ? CUBLAS_OP_T : CUBLAS_OP_N;
    GL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
        p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    GL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
        p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    /* Stored shapes, column-major: our B is [k,n] row-major (n x k
     * column-major) or, transposed, [n,k] (k x n); likewise A. */
    int la_rows = p->transb ? p->k : p->n, la_cols = p->transb ? p->n : p->k;
    int lb_rows = p->transa ? p->m : p->k, lb_cols = p->transa ? p->k : p->m;
    GL_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->la, CUDA_R_16BF, la_rows,
                                               la_cols, p->ldb));
    GL_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lb, CUDA_R_16BF, lb_rows,
                                               lb_cols, p->lda));
    GL_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lc, ct, p->n, p->m,
                                               p->ldc));

    cublasLtMatmulPreference_t pref;
    GL_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = st->lt_workspace_bytes;
    GL_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    uint32_t aa = p->align_b, ab = p->align_a, ac = p->align_c;
    GL_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa, sizeof aa));
    GL_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ab, sizeof ab));
    GL_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ac, sizeof ac));
    GL_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ac, sizeof ac));

    /* Split-K partial sums must meet in fp32: the schemes that add them
     * in the output type would round each partial to bf16 (errors of
     * several bf16 ulps were seen on Hopper).  No split (NONE) is always
     * allowed. */
    if (p->ctype != GL_DT_F32) {
        uint32_t mask = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
        GL_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &mask,
            sizeof mask));
    }

    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    GL_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(st->lt, p->desc, p->la,
                                                   p->lb, p->lc, p->lc, pref,
                                                   1, &res, &found));
    GL_CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    if (found < 1)
        gl_die("gemm: cuBLASLt has no algorithm for m=%d n=%d k=%d "
               "(transa=%d transb=%d lda=%d ldb=%d ldc=%d, output %s)",
               p->m, p->n, p->k, p->transa, p->transb, p->lda, p->ldb, p->ldc,
               gl_dtype_name(p->ctype));
    p->algo = res.algo;
}

static gl_gemm_plan *plan_find(gl_cuda_state *st, const gl_gemm_plan *key)
{
    for (int i = 0; i < st->nplans; i++) {
        gl_gemm_plan *p = &st->plans[i];
        if (p->transa == key->transa && p->transb == key->transb &&
            p->m == key->m && p->n == key->n && p->k == key->k &&
            p->lda == key->lda && p->ldb == key->ldb && p->ldc == key->ldc &&
            p->ctype == key->ctype && p->beta_zero == key->beta_zero &&
            p->align_a == key->align_a && p->align_b == key->align_b &&
            p->align_c == key->align_c)
            return p;
    }
    if (st->nplans == st->cap_plans) {
        st->cap_plans = st->cap_plans ? 2 * st->cap_plans : 64;
        st->plans = (gl_gemm_plan *)gl_realloc(
            st->plans, (size_t)st->cap_plans * sizeof *st->plans);
    }
    gl_gemm_plan *p = &st->plans[st->nplans];
    *p = *key;
    plan_make(st, p);
    st->nplans++;
    return p;
}

void gl_cuda_gemm(gl_dev *d, int transa, int transb, int m, int n, int k,
                  float alpha, const void *A, int lda, const void *B, int ldb,
                  float beta, void *C, gl_dtype ctype, int ldc)
{
    if (m <= 0 || n <= 0)
        return;
    if (ctype != GL_DT_F32 && ctype != GL_DT_BF16)
        gl_die("gemm: output dtype %s is not bf16 or fp32",
               gl_dtype_name(ctype));
    if (k <= 0)
        gl_die("gemm: k = %d (m=%d n=%d): an empty inner dimension", k, m, n);
    gl_cuda_state *st = gl_cuda_st(d);
    gl_gemm_plan key;
    memset(&key, 0, sizeof key);
    key.transa = transa != 0;
    key.transb = transb != 0;
    key.m = m;
    key.n = n;
    key.k = k;
    key.lda = lda;
    key.ldb = ldb;
    key.ldc = ldc;
    key.ctype = ctype;
    key.beta_zero = beta == 0.0f;
    key.align_a = align_of(A);
    key.align_b = align_of(B);
    key.align_c = align_of(C);
    gl_gemm_plan *p = plan_find(st, &key);
    GL_CUBLAS_CHECK(cublasLtMatmul(st->lt, p->desc, &alpha, B, p->la, A, p->lb,
                                   &beta, C, p->lc, C, p->lc, &p->algo,
                                   st->lt_workspace, st->lt_workspace_bytes,
                                   st->stream));
}

void gl_cuda_gemm_close(gl_dev *d)
{
    gl_cuda_state *st = gl_cuda_st(d);
    for (int i = 0; i < st->nplans; i++) {
        gl_gemm_plan *p = &st->plans[i];
        GL_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->la));
        GL_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->lb));
        GL_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->lc));
        GL_CUBLAS_CHECK(cublasLtMatmulDescDestroy(p->desc));
    }
    free(st->plans);
    st->plans = NULL;
    st->nplans = st->cap_plans = 0;
}
