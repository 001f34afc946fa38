/*
 * gemm.cu: matrix products through cuBLASLt, bf16 or FP8 inputs, fp32
 * compute, bf16 or fp32 output.
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
 * tens of microseconds, so each distinct product is planned once and
 * cached.  The key is everything that defines one: m, n, k, the two
 * transposes, lda/ldb/ldc, the input and output types (and for FP8
 * inputs the fast-accumulation flag), whether beta is 0, and the alignment of the three pointers, which the
 * heuristic depends on, and the epilogue.
 *
 * Epilogues (gl_cuda_gemm_epilogue, for ops.h's linear_gelu_fwd and
 * linear_dgelu_bwd).  Our C[m, n] is cuBLASLt's D [n rows, m columns],
 * so a bias over our columns (the n features) is cuBLASLt's bias over
 * D's rows, as its epilogues want it.  GELU_AUX_BIAS writes D = gelu(AB
 * + bias) and the pre-activation AB + bias as the auxiliary matrix (bf16,
 * C's leading dimension); DGELU_BGRAD writes D = AB gelu'(aux) and the
 * bias gradient, the sums of D's rows, as fp32.  The bias and auxiliary
 * pointers change from call to call and are set on the plan's descriptor
 * before each call, as FP8's scales.  Such plans are not tuned; when
 * cuBLASLt has no algorithm for one (or refuses them all), the call
 * returns -1 and the caller runs the plain kernels.
 *
 * FP8 (gemm_fp8).  The same plans with FP8 operand types: ops.h's one
 * layout C = A B^T (A [m, k], B [n, k] row-major) is transa = 0,
 * transb = 1 here, i.e. cuBLASLt's A (our B) transposed and its B (our
 * A) not: the "TN" form, the only one Hopper's FP8 kernels take.  The
 * operands' dequantization scales go in as device pointers
 * (CUBLASLT_MATMUL_DESC_A_SCALE_POINTER / B_SCALE_POINTER, cuBLASLt's A
 * scale being our B's); they change from call to call and are not part
 * of the key: each call sets them on the plan's descriptor, which
 * cublasLtMatmul reads when it enqueues; a plan is made with its first
 * call's, set before the heuristic is asked, as NVIDIA's samples do.
 * Scale pointers that are not 16-byte aligned are first copied to an
 * aligned scratch pair (one one-thread kernel, in order on the stream):
 * cuBLASLt 13.0 on an H100 refused with CUBLAS_STATUS_NOT_SUPPORTED, at
 * cublasLtMatmul, every FP8 product of the first runs here, each of which
 * had a scale pointer off 16-byte alignment, and cuBLAS wants 16-byte
 * aligned scale addresses for vector scales (PyTorch #159957).  Aligned
 * scales cost nothing: the model's scale tables (src/model/fp8.c) give
 * every tensor a 16-byte record, so its products never stage.  CUBLASLT_MATMUL_DESC_FAST_ACCUM
 * is part of the key.  cuBLASLt computes alpha * scaleA * scaleB * sum +
 * beta * C with the sum in fp32 (promoted from the tensor cores'
 * accumulators every few k steps unless fast accumulation is on).
 *
 * Tuning (GRIDLM_GEMM_TUNE).  The heuristic's first answer comes from a
 * model of the GPU, and on Hopper it can be well off the fastest kernel
 * cuBLASLt has for the shape.  With tuning on, the first call of a plan
 * asks the heuristic for up to TUNE_MAX candidates and times each on the
 * call's own operands, on the compute stream: one warm-up product, then
 * TUNE_REPS products between two CUDA events.  The host never waits for
 * them: the call then does its real product with the heuristic's first
 * algorithm, and a later call of the same plan that finds the timings
 * complete (cudaEventQuery) keeps the fastest candidate for the rest of
 * the process.  Not blocking matters on a grid: a host that waited for
 * its stream in mid-step could hold back a send that a pipeline peer's
 * stream, and through it this one's, is waiting for.
 *   - The output.  With beta = 0 the candidates write C, and the real
 *     product, later on the same stream, overwrites all of it.  With
 *     beta != 0 they write a zeroed scratch matrix of C's layout, taken
 *     with cudaMallocAsync and given back with cudaFreeAsync (stream-
 *     ordered: no device-wide synchronisation), so C only ever receives
 *     the real product.  The scratch (as large as C: 1 GiB for the fp32
 *     gradient of a 128256 x 2048 LM head) is outside the back end's
 *     memory accounting; when it cannot be had, the plan keeps the
 *     heuristic's answer.
 *   - The choice.  The heuristic's first algorithm stays unless another
 *     is at least TUNE_MARGIN faster, so that timing noise alone does not
 *     move a plan off it.
 *   - The cost.  (1 + TUNE_REPS) products per candidate, once per plan,
 *     in the first iteration of a run (a few tenths of a second for a
 *     1.5B model); the choice is cached per process (per device).
 *   - Non-determinism.  The choice depends on measured times, so two
 *     runs, or two ranks, can use different algorithms for one shape,
 *     whose results differ in the last bits (summation order, split-K).
 *     GRIDLM_GEMM_TUNE=0 makes runs repeat bit for bit again.
 *
 * GRIDLM_GEMM_TUNE: 0 (default) takes the heuristic's first answer; 1
 * tunes as above; 2 tunes and prints one line per plan on rank 0 (the
 * candidates' times and the configuration of the chosen kernel).  It is
 * read whenever a plan is made, so a device opened after setenv() follows
 * the new value (gridlm-bench gemm --llama compares the two that way).
 *
 * Refusals: cuBLASLt can refuse at launch an algorithm its heuristic
 * offered (CUBLAS_STATUS_NOT_SUPPORTED); the plan then takes the first
 * other of up to TUNE_MAX candidates that runs (plan_run).
 *
 * Split-K: the partial sums of a bf16 product must meet in fp32 (see
 * plan_make); tuning only chooses among what that preference allows.
 * The workspace (dev_cuda.cu) is 32 MiB, what cuBLASLt asks for on
 * Hopper.
 */
#include <config.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gl_cuda.h"

#define TUNE_MAX 8          /* candidates asked of the heuristic */
#define TUNE_REPS 4         /* timed products per candidate */
#define TUNE_MARGIN 0.01f   /* how much faster than the heuristic's first */
/* GRIDLM_GEMM_TUNE when unset: off.  On an H200 (2026-11-21) tuning
 * gained nothing on the 1.5B model's 15 products (0.99x in total,
 * `gridlm-bench gemm --llama`) nor in training (65.6k against 66.5k
 * tokens/s without it): there the heuristic's first answer is as good as
 * any candidate, and tuning would only cost determinism. */
#define TUNE_DEFAULT 0

/* A ragged plan's open dimension (gl_cuda_gemm_ragged). */
enum { RAGGED_NONE = 0, RAGGED_M, RAGGED_K };
#define RAGGED_MIN 128      /* the smallest bucket */

/* Where a plan's tuning stands. */
enum {
    TUNE_OFF = 0,           /* p->algo is final */
    TUNE_WANTED,            /* candidates found, not yet timed */
    TUNE_RUNNING,           /* timings enqueued, waiting for ev_done */
};

struct gl_gemm_plan {
    /* key */
    int transa, transb, m, n, k, lda, ldb, ldc;
    cudaDataType_t atype, btype;        /* our A's and B's element types */
    int fast_accum;                     /* FP8 only */
    const float *lt_scale_a, *lt_scale_b;   /* FP8: cuBLASLt's A and B scale
                                               pointers (our B's, our A's)
                                               of the first call; not key */
    int lt_mode_a, lt_mode_b;           /* FP8: cuBLASLt's A and B scale
                                           modes (cublasLtMatmulMatrixScale_t;
                                           0, per tensor, but for block
                                           scaling: gemm_fp8_tiles) */
    gl_dtype ctype;
    int beta_zero;
    unsigned align_a, align_b, align_c;
    int epi;                            /* GL_EPI_*: none, or an epilogue
                                           of gl_cuda_gemm_epilogue */
    int ragged;                         /* RAGGED_*: the dimension left
                                           open (gl_cuda_gemm_ragged) */
    /* plan */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;          /* what calls use */
    /* tuning (see the top of the file); cand[0] is the heuristic's
     * first, ev[2i] and ev[2i+1] bracket cand[i]'s timed products */
    int tune, verbose, ncand, scratch_used;
    cublasLtMatmulAlgo_t cand[TUNE_MAX];
    int timed[TUNE_MAX];
    cudaEvent_t ev[2 * TUNE_MAX], ev_done;
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

/* GRIDLM_GEMM_TUNE as 0, 1 or 2 (dies on anything else). */
static int tune_from_env(void)
{
    const char *e = getenv("GRIDLM_GEMM_TUNE");
    if (!e || !*e)
        return TUNE_DEFAULT;
    if ((e[0] == '0' || e[0] == '1' || e[0] == '2') && !e[1])
        return e[0] - '0';
    gl_die("GRIDLM_GEMM_TUNE=%s: use 0 (cuBLASLt's first heuristic answer), "
           "1 (time the candidates once per shape, keep the fastest) or 2 "
           "(as 1, and print each choice)", e);
}

/* "bf16", "e4m3", "e5m2": an operand type, for messages. */
static const char *type_name(cudaDataType_t t)
{
    return t == CUDA_R_8F_E4M3 ? "e4m3" : t == CUDA_R_8F_E5M2 ? "e5m2" : "bf16";
}

/* The dequantization scales of an FP8 product, on p's descriptor. */
static void set_scales(gl_gemm_plan *p, const float *lt_a, const float *lt_b)
{
    GL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
        p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &lt_a, sizeof lt_a));
    GL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
        p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &lt_b, sizeof lt_b));
}

static void plan_name(const gl_gemm_plan *p, char *buf, size_t n);

static void plan_make(gl_cuda_state *st, gl_gemm_plan *p)
{
    cudaDataType_t ct = p->ctype == GL_DT_F32 ? CUDA_R_32F : CUDA_R_16BF;
    GL_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F,
                                             CUDA_R_32F));
    if (p->atype != CUDA_R_16BF) {
        int8_t fast = (int8_t)p->fast_accum;
        GL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
            p->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast));
        set_scales(p, p->lt_scale_a, p->lt_scale_b);
        if (p->lt_mode_a || p->lt_mode_b) {
            int32_t ma = p->lt_mode_a, mb = p->lt_mode_b;
            GL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
                p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &ma, sizeof ma));
            GL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
                p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mb, sizeof mb));
        }
    }
    if (p->epi != GL_EPI_NONE) {
        /* the pre-activation (aux) as bf16 with the output's leading
         * dimension; the bias bf16 (forward) or its gradient fp32 */
        cublasLtEpilogue_t e = p->epi == GL_EPI_GELU_AUX_BIAS
                                   ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                                   : CUBLASLT_EPILOGUE_DGELU_BGRAD;
        cudaDataType_t bt = p->epi == GL_EPI_GELU_AUX_BIAS ? CUDA_R_16BF
                                                            : CUDA_R_32F;
        cudaDataType_t at = CUDA_R_16BF;
        int64_t ld = p->ldc;
        GL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
            p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e));
        GL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
            p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
        GL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
            p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &at,
            sizeof at));
        GL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
            p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
    }
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
    GL_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->la, p->btype, la_rows,
                                               la_cols, p->ldb));
    GL_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lb, p->atype, lb_rows,
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

    int tune = tune_from_env();
    cublasLtMatmulHeuristicResult_t res[TUNE_MAX];
    int found = 0;
    cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(
        st->lt, p->desc, p->la, p->lb, p->lc, p->lc, pref, TUNE_MAX, res,
        &found);
    if (hs != CUBLAS_STATUS_SUCCESS && p->epi != GL_EPI_NONE) {
        /* no algorithm with this epilogue: the plain kernels run */
        if (hs != CUBLAS_STATUS_NOT_SUPPORTED) {
            char nm[96];
            plan_name(p, nm, sizeof nm);
            gl_warn("gemm %s: cuBLASLt refuses epilogue %d (status %d, %s); "
                    "the plain kernels run instead", nm, p->epi, (int)hs,
                    cublasLtGetStatusString(hs));
        }
        found = 0;
    } else {
        GL_CUBLAS_CHECK(hs);
    }
    GL_CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    p->ncand = 0;
    for (int i = 0; i < found; i++)
        if (res[i].state == CUBLAS_STATUS_SUCCESS)
            p->cand[p->ncand++] = res[i].algo;
    if (p->ncand < 1 && p->epi != GL_EPI_NONE) {
        p->tune = TUNE_OFF;          /* the caller takes the plain path */
        return;
    }
    if (p->ncand < 1)
        gl_die("gemm: cuBLASLt has no algorithm for m=%d n=%d k=%d "
               "(transa=%d transb=%d lda=%d ldb=%d ldc=%d, inputs %s x %s, "
               "output %s)", p->m, p->n, p->k, p->transa, p->transb, p->lda,
               p->ldb, p->ldc, type_name(p->atype), type_name(p->btype),
               gl_dtype_name(p->ctype));
    p->algo = p->cand[0];
    /* epilogue plans are not tuned: their candidates would write the
     * auxiliary outputs too */
    p->tune = tune && p->ncand > 1 && p->epi == GL_EPI_NONE && !p->ragged
                  ? TUNE_WANTED
                  : TUNE_OFF;
    p->verbose = tune == 2;
}

static gl_gemm_plan *plan_find(gl_cuda_state *st, const gl_gemm_plan *key)
{
    for (int i = 0; i < st->nplans; i++) {
        gl_gemm_plan *p = &st->plans[i];
        if (p->transa == key->transa && p->transb == key->transb &&
            p->m == key->m && p->n == key->n && p->k == key->k &&
            p->lda == key->lda && p->ldb == key->ldb && p->ldc == key->ldc &&
            p->atype == key->atype && p->btype == key->btype &&
            p->fast_accum == key->fast_accum &&
            p->lt_mode_a == key->lt_mode_a && p->lt_mode_b == key->lt_mode_b &&
            p->ctype == key->ctype && p->beta_zero == key->beta_zero &&
            p->align_a == key->align_a && p->align_b == key->align_b &&
            p->align_c == key->align_c && p->epi == key->epi &&
            p->ragged == key->ragged)
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

/* One product of plan p with the given algorithm into C (also D). */
static cublasStatus_t matmul(gl_cuda_state *st, const gl_gemm_plan *p,
                             const cublasLtMatmulAlgo_t *algo,
                             const float *alpha, const void *A, const void *B,
                             const float *beta, void *C)
{
    return cublasLtMatmul(st->lt, p->desc, alpha, B, p->la, A, p->lb, beta, C,
                          p->lc, C, p->lc, algo, st->lt_workspace,
                          st->lt_workspace_bytes, st->stream);
}

/* "NT 8192x3072x2048 bf16 beta=0", "NT 8192x3072x2048 e4m3xe4m3 fast
 * bf16 beta=0": a plan, for messages. */
static void plan_name(const gl_gemm_plan *p, char *buf, size_t n)
{
    char in[32] = "";
    if (p->atype != CUDA_R_16BF)
        snprintf(in, sizeof in, "%sx%s%s ", type_name(p->atype),
                 type_name(p->btype), p->fast_accum ? " fast" : "");
    snprintf(buf, n, "%c%c %dx%dx%d %s%s beta%s", p->transa ? 'T' : 'N',
             p->transb ? 'T' : 'N', p->m, p->n, p->k, in,
             gl_dtype_name(p->ctype), p->beta_zero ? "=0" : "!=0");
}

/* Enqueue the timing of every candidate of p on the call's operands (see
 * the top of the file); the host does not wait.  Leaves p TUNE_RUNNING,
 * or TUNE_OFF when no scratch output could be had for beta != 0. */
static void tune_start(gl_cuda_state *st, gl_gemm_plan *p, const float *alpha,
                       const void *A, const void *B, const float *beta,
                       void *C)
{
    void *out = C, *scratch = NULL;
    p->tune = TUNE_OFF;
    if (*beta != 0.0f) {
        size_t es = p->ctype == GL_DT_F32 ? sizeof(float) : sizeof(bf16);
        size_t bytes = ((size_t)(p->m - 1) * p->ldc + p->n) * es;
        if (cudaMallocAsync(&scratch, bytes, st->stream) != cudaSuccess) {
            (void)cudaGetLastError();
            if (p->verbose) {
                char nm[96];
                plan_name(p, nm, sizeof nm);
                gl_info0("gemm tune %s: no memory for a %zu-byte scratch "
                         "output; keeping the heuristic's algorithm", nm,
                         bytes);
            }
            return;
        }
        GL_CUDA_CHECK(cudaMemsetAsync(scratch, 0, bytes, st->stream));
        out = scratch;
    }
    for (int i = 0; i < 2 * p->ncand; i++)
        GL_CUDA_CHECK(cudaEventCreate(&p->ev[i]));
    GL_CUDA_CHECK(cudaEventCreate(&p->ev_done));
    for (int i = 0; i < p->ncand; i++) {
        /* A candidate cuBLASLt refuses at launch is no candidate. */
        int ok = matmul(st, p, &p->cand[i], alpha, A, B, beta, out) ==
                 CUBLAS_STATUS_SUCCESS;
        GL_CUDA_CHECK(cudaEventRecord(p->ev[2 * i], st->stream));
        for (int r = 0; ok && r < TUNE_REPS; r++)
            ok = matmul(st, p, &p->cand[i], alpha, A, B, beta, out) ==
                 CUBLAS_STATUS_SUCCESS;
        GL_CUDA_CHECK(cudaEventRecord(p->ev[2 * i + 1], st->stream));
        p->timed[i] = ok;
    }
    if (scratch)
        GL_CUDA_CHECK(cudaFreeAsync(scratch, st->stream));
    GL_CUDA_CHECK(cudaEventRecord(p->ev_done, st->stream));
    p->scratch_used = scratch != NULL;
    p->tune = TUNE_RUNNING;
}

/* An attribute of an algorithm's configuration, for the tuning report
 * (size: the attribute's type's, 2 or 4 bytes); -1 when unknown. */
static long algo_attr(const cublasLtMatmulAlgo_t *a,
                      cublasLtMatmulAlgoConfigAttributes_t at, size_t size)
{
    size_t got = 0;
    if (size == 2) {
        uint16_t v = 0;
        if (cublasLtMatmulAlgoConfigGetAttribute(a, at, &v, size, &got) ==
            CUBLAS_STATUS_SUCCESS)
            return v;
    } else {
        uint32_t v = 0;
        if (cublasLtMatmulAlgoConfigGetAttribute(a, at, &v, size, &got) ==
            CUBLAS_STATUS_SUCCESS)
            return v;
    }
    return -1;
}

/* "algo 66 tile 20 stages 8 splitk 1 red 0 swz 0 cluster 2": cuBLASLt's
 * ids (cublasLt.h's enums) of the kernel an algorithm names. */
static void algo_desc(const cublasLtMatmulAlgo_t *a, char *buf, size_t n)
{
    snprintf(buf, n, "algo %ld tile %ld stages %ld splitk %ld red %ld "
             "swz %ld cluster %ld",
             algo_attr(a, CUBLASLT_ALGO_CONFIG_ID, 4),
             algo_attr(a, CUBLASLT_ALGO_CONFIG_TILE_ID, 4),
             algo_attr(a, CUBLASLT_ALGO_CONFIG_STAGES_ID, 4),
             algo_attr(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, 4),
             algo_attr(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, 4),
             algo_attr(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, 4),
             algo_attr(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, 2));
}

/* Release what tuning holds (its events; the scratch's memory). */
static void tune_release(gl_cuda_state *st, gl_gemm_plan *p)
{
    for (int i = 0; i < 2 * p->ncand; i++)
        GL_CUDA_CHECK(cudaEventDestroy(p->ev[i]));
    GL_CUDA_CHECK(cudaEventDestroy(p->ev_done));
    if (p->scratch_used) {
        /* The pool keeps freed memory until a synchronisation; hand it
         * back now, so that a cudaMalloc elsewhere can have it. */
        cudaMemPool_t pool;
        GL_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, st->ordinal));
        GL_CUDA_CHECK(cudaMemPoolTrimTo(pool, 0));
    }
    p->tune = TUNE_OFF;
}

/* If p's timings are complete, keep the fastest candidate; otherwise
 * leave it for a later call. */
static void tune_finish(gl_cuda_state *st, gl_gemm_plan *p)
{
    cudaError_t e = cudaEventQuery(p->ev_done);
    if (e == cudaErrorNotReady) {
        (void)cudaGetLastError();      /* not an error: not yet */
        return;
    }
    GL_CUDA_CHECK(e);
    float ms[TUNE_MAX];
    int fast = -1;
    for (int i = 0; i < p->ncand; i++) {
        ms[i] = -1;
        if (!p->timed[i])
            continue;
        GL_CUDA_CHECK(cudaEventElapsedTime(&ms[i], p->ev[2 * i],
                                           p->ev[2 * i + 1]));
        ms[i] /= TUNE_REPS;
        if (fast < 0 || ms[i] < ms[fast])
            fast = i;
    }
    int keep = 0;
    if (fast > 0 && (!p->timed[0] || ms[fast] < (1 - TUNE_MARGIN) * ms[0]))
        keep = fast;
    p->algo = p->cand[keep];
    if (p->verbose) {
        char nm[96], desc[160], times[TUNE_MAX * 10 + 1];
        size_t at = 0;
        times[0] = 0;
        for (int i = 0; i < p->ncand; i++)
            at += snprintf(times + at, sizeof times - at, i ? " %.3f" : "%.3f",
                           ms[i]);
        plan_name(p, nm, sizeof nm);
        algo_desc(&p->algo, desc, sizeof desc);
        gl_info0("gemm tune %s: ms %s; keep #%d (%.2fx) %s", nm, times, keep,
                 ms[keep] > 0 && ms[0] > 0 ? ms[0] / ms[keep] : 1.0, desc);
    }
    tune_release(st, p);
}

/* A key for a product of the given shape and types; the rest zero. */
static gl_gemm_plan plan_key(int transa, int transb, int m, int n, int k,
                             const void *A, int lda, cudaDataType_t atype,
                             const void *B, int ldb, cudaDataType_t btype,
                             float beta, const void *C, gl_dtype ctype,
                             int ldc)
{
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
    key.atype = atype;
    key.btype = btype;
    key.ctype = ctype;
    key.beta_zero = beta == 0.0f;
    key.align_a = align_of(A);
    key.align_b = align_of(B);
    key.align_c = align_of(C);
    return key;
}

/* The product of plan p on these operands, tuning it first when asked. */
static void plan_run(gl_cuda_state *st, gl_gemm_plan *p, float alpha,
                     const void *A, const void *B, float beta, void *C)
{
    if (p->tune == TUNE_WANTED)
        tune_start(st, p, &alpha, A, B, &beta, C);
    else if (p->tune == TUNE_RUNNING)
        tune_finish(st, p);
    cublasStatus_t s = matmul(st, p, &p->algo, &alpha, A, B, &beta, C);
    /* An algorithm the heuristic offered can still be refused at launch
     * ("try them one by one until something works", says cuBLASLt): the
     * plan moves to the first other candidate that runs, for good. */
    for (int i = 0; s == CUBLAS_STATUS_NOT_SUPPORTED && i < p->ncand; i++)
        if (memcmp(&p->cand[i], &p->algo, sizeof p->algo) &&
            (s = matmul(st, p, &p->cand[i], &alpha, A, B, &beta, C)) ==
                CUBLAS_STATUS_SUCCESS)
            p->algo = p->cand[i];
    if (s != CUBLAS_STATUS_SUCCESS) {
        char nm[96];
        plan_name(p, nm, sizeof nm);
        gl_die("gemm %s: cuBLASLt refused all %d algorithms its heuristic "
               "offered: status %d (%s)", nm, p->ncand, (int)s,
               cublasLtGetStatusString(s));
    }
}

/* Whether a bf16 product of these sizes has work (0: an empty output,
 * nothing to do); dies on an output type other than bf16 or fp32 and on
 * an empty inner dimension. */
static int gemm_wanted(int m, int n, int k, gl_dtype ctype)
{
    if (m <= 0 || n <= 0)
        return 0;
    if (ctype != GL_DT_F32 && ctype != GL_DT_BF16)
        gl_die("gemm: output dtype %s is not bf16 or fp32",
               gl_dtype_name(ctype));
    if (k <= 0)
        gl_die("gemm: k = %d (m=%d n=%d): an empty inner dimension", k, m, n);
    return 1;
}

void gl_cuda_gemm(gl_dev *d, int transa, int transb, int m, int n, int k,
                  float alpha, const void *A, int lda, const void *B, int ldb,
                  float beta, void *C, gl_dtype ctype, int ldc)
{
    if (!gemm_wanted(m, n, k, ctype))
        return;
    gl_cuda_state *st = gl_cuda_st(d);
    gl_gemm_plan key = plan_key(transa, transb, m, n, k, A, lda, CUDA_R_16BF,
                                B, ldb, CUDA_R_16BF, beta, C, ctype, ldc);
    plan_run(st, plan_find(st, &key), alpha, A, B, beta, C);
}

/* The bucket of a ragged dimension: the next power of two, at least
 * RAGGED_MIN. */
static int ragged_bucket(int v)
{
    int b = RAGGED_MIN;
    while (b < v && b < (1 << 30))
        b *= 2;
    return b;
}

static void layout_dims(cublasLtMatrixLayout_t l, int rows, int cols)
{
    uint64_t r = (uint64_t)rows, c = (uint64_t)cols;
    GL_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
        l, CUBLASLT_MATRIX_LAYOUT_ROWS, &r, sizeof r));
    GL_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
        l, CUBLASLT_MATRIX_LAYOUT_COLS, &c, sizeof c));
}

/* A ragged plan's layouts set to the call's m and k (plan_make's shapes
 * with the open dimension filled in). */
static void ragged_dims(gl_gemm_plan *p, int m, int k)
{
    layout_dims(p->la, p->transb ? k : p->n, p->transb ? p->n : k);
    layout_dims(p->lb, p->transa ? m : k, p->transa ? k : m);
    layout_dims(p->lc, p->n, m);
}

/* Ragged plan p at the call's m and k: its algorithm, else another of
 * its bucket's candidates.  CUBLAS_STATUS_NOT_SUPPORTED when none takes
 * the exact size (nothing was written); dies on any other failure. */
static cublasStatus_t ragged_run(gl_cuda_state *st, gl_gemm_plan *p, int m, int k,
                                 float alpha, const void *A, const void *B, float beta,
                                 void *C)
{
    ragged_dims(p, m, k);
    cublasStatus_t s = matmul(st, p, &p->algo, &alpha, A, B, &beta, C);
    for (int i = 0; s == CUBLAS_STATUS_NOT_SUPPORTED && i < p->ncand; i++)
        if (memcmp(&p->cand[i], &p->algo, sizeof p->algo))
            s = matmul(st, p, &p->cand[i], &alpha, A, B, &beta, C);
    if (s != CUBLAS_STATUS_SUCCESS && s != CUBLAS_STATUS_NOT_SUPPORTED) {
        char nm[96];
        plan_name(p, nm, sizeof nm);
        gl_die("gemm %s (ragged, m=%d k=%d): status %d (%s)", nm, m, k,
               (int)s, cublasLtGetStatusString(s));
    }
    return s;
}

/* gl_cuda_gemm for the products one of whose dimensions changes from call
 * to call (the experts' products, whose rows follow the routing): m, or k
 * when ragged_k.  A plan per exact shape would ask cuBLASLt's heuristic
 * on the host at nearly every call (tens of microseconds each, hundreds
 * of calls per step) and grow the plan list without end; instead the
 * open dimension is bucketed (ragged_bucket), the plan is made and its
 * algorithm chosen for the bucket's size, and each call sets the exact
 * size on the plan's layouts before it enqueues (cublasLtMatmul reads
 * them then, as it reads FP8's scale pointers).  The algorithm of a
 * shape thus depends only on its bucket: a run repeats bit for bit, and
 * the same rows give the same bits whatever came before.  Ragged plans
 * are not tuned.  Where cuBLASLt refuses every candidate of the bucket
 * for the exact size, the call takes gl_cuda_gemm's exact plan. */
void gl_cuda_gemm_ragged(gl_dev *d, int ragged_k, int transa, int transb,
                         int m, int n, int k, float alpha, const void *A,
                         int lda, const void *B, int ldb, float beta, void *C,
                         gl_dtype ctype, int ldc)
{
    if ((ragged_k && k <= 0) || !gemm_wanted(m, n, k, ctype))
        return;             /* no rows: nothing to add up */
    gl_cuda_state *st = gl_cuda_st(d);
    int bm = ragged_k ? m : ragged_bucket(m), bk = ragged_k ? ragged_bucket(k) : k;
    gl_gemm_plan key = plan_key(transa, transb, bm, n, bk, A, lda, CUDA_R_16BF,
                                B, ldb, CUDA_R_16BF, beta, C, ctype, ldc);
    key.ragged = ragged_k ? RAGGED_K : RAGGED_M;
    gl_gemm_plan *p = plan_find(st, &key);
    if (ragged_run(st, p, m, k, alpha, A, B, beta, C) == CUBLAS_STATUS_NOT_SUPPORTED)
        /* nothing was written: the exact shape's own plan */
        gl_cuda_gemm(d, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta,
                     C, ctype, ldc);
}

/* A bf16 product C[m, n] = op(A) op(B) with a cuBLASLt epilogue over
 * C's columns (our n: the features; see gl_cuda.h).  0 when it ran, -1
 * when cuBLASLt has nothing for it (nothing was written: the caller runs
 * the plain kernels). */
int gl_cuda_gemm_epilogue(gl_dev *d, int epi, int transa, int transb, int m,
                          int n, int k, const void *A, int lda, const void *B,
                          int ldb, void *C, int ldc, void *bias, void *aux)
{
    gl_cuda_state *st = gl_cuda_st(d);
    if (m <= 0 || n <= 0 || k <= 0 || ldc % 8 || align_of(aux) < 16 ||
        align_of(bias) < 16)
        return -1;
    gl_gemm_plan key = plan_key(transa, transb, m, n, k, A, lda, CUDA_R_16BF,
                                B, ldb, CUDA_R_16BF, 0.0f, C, GL_DT_BF16,
                                ldc);
    key.epi = epi;
    gl_gemm_plan *p = plan_find(st, &key);
    if (p->ncand < 1)
        return -1;
    GL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
        p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    GL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
        p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
        sizeof aux));
    float alpha = 1.0f, beta = 0.0f;
    cublasStatus_t s = matmul(st, p, &p->algo, &alpha, A, B, &beta, C);
    for (int i = 0; s == CUBLAS_STATUS_NOT_SUPPORTED && i < p->ncand; i++)
        if (memcmp(&p->cand[i], &p->algo, sizeof p->algo) &&
            (s = matmul(st, p, &p->cand[i], &alpha, A, B, &beta, C)) ==
                CUBLAS_STATUS_SUCCESS)
            p->algo = p->cand[i];
    if (s == CUBLAS_STATUS_NOT_SUPPORTED) {
        p->ncand = 0;                /* the plain path from now on */
        return -1;
    }
    if (s != CUBLAS_STATUS_SUCCESS) {
        char nm[96];
        plan_name(p, nm, sizeof nm);
        gl_die("gemm %s with epilogue %d: status %d (%s)", nm, epi, (int)s,
               cublasLtGetStatusString(s));
    }
    return 0;
}

static cudaDataType_t fp8_type(gl_fp8_format f)
{
    return f == GL_FP8_E4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
}

/* The checks of every FP8 product's arguments (gemm_fp8, gemm_fp8_ragged,
 * gemm_fp8_tiles): fp8.h's shapes, formats and pointers, and the output
 * dtype. */
static void fp8_args_check(const char *who, int m, int n, int k, int ldc, gl_fp8_format fa,
                           gl_fp8_format fb, const void *A, const void *B, const void *C,
                           gl_dtype ctype)
{
    gl_fp8_gemm_check(who, m, n, k, ldc, fa, fb, A, B, C);
    if (ctype != GL_DT_F32 && ctype != GL_DT_BF16)
        gl_die("%s: output dtype %s is not bf16 or fp32", who, gl_dtype_name(ctype));
}

/* gemm_fp8's argument checks (its and gemm_fp8_ragged's), and its scale
 * pointers made 16-byte aligned: cuBLASLt reads aligned ones in place;
 * others are first copied by a one-thread kernel (ops.h). */
static void fp8_prepare(gl_dev *d, const char *who, int m, int n, int k, int ldc,
                        gl_fp8_format fa, gl_fp8_format fb, const void *A, const void *B,
                        const void *C, gl_dtype ctype, const float **a_scale_inv,
                        const float **b_scale_inv)
{
    gl_cuda_state *st = gl_cuda_st(d);
    fp8_args_check(who, m, n, k, ldc, fa, fb, A, B, C, ctype);
    if (st->prop.major * 10 + st->prop.minor < 89)
        gl_die("%s: GPU %d (%s) has compute capability %d.%d; FP8 "
               "products need 8.9 (Ada) or 9.0 (Hopper) and later: train "
               "without FP8 on this GPU", who, st->ordinal, st->prop.name,
               st->prop.major, st->prop.minor);
    if (((uintptr_t)*a_scale_inv | (uintptr_t)*b_scale_inv) % 16) {
        float *s = (float *)gl_cuda_scratch(d, &st->s_fp8, 8 * sizeof(float));
        gl_cuda_fp8_stage_scales(st->stream, s, *a_scale_inv, *b_scale_inv);
        *a_scale_inv = s;
        *b_scale_inv = s + 4;
    }
}

void gl_cuda_gemm_fp8(gl_dev *d, int m, int n, int k, float alpha,
                      const uint8_t *A, gl_fp8_format fa,
                      const float *a_scale_inv, const uint8_t *B,
                      gl_fp8_format fb, const float *b_scale_inv, float beta,
                      void *C, gl_dtype ctype, int ldc, int fast_accum)
{
    gl_cuda_state *st = gl_cuda_st(d);
    fp8_prepare(d, "gemm_fp8", m, n, k, ldc, fa, fb, A, B, C, ctype, &a_scale_inv,
                &b_scale_inv);
    gl_gemm_plan key = plan_key(0, 1, m, n, k, A, k, fp8_type(fa), B, k,
                                fp8_type(fb), beta, C, ctype, ldc);
    key.fast_accum = fast_accum != 0;
    key.lt_scale_a = b_scale_inv;       /* cuBLASLt's A is our B */
    key.lt_scale_b = a_scale_inv;
    gl_gemm_plan *p = plan_find(st, &key);
    set_scales(p, b_scale_inv, a_scale_inv);
    plan_run(st, p, alpha, A, B, beta, C);
}

static void layout_ld(cublasLtMatrixLayout_t l, int ld)
{
    int64_t v = ld;
    GL_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_LD, &v,
                                                     sizeof v));
}

/* ops.h's gemm_fp8_ragged: gemm_fp8 on gl_cuda_gemm_ragged's plans per
 * bucket of m, or of k when ragged_k.  The operands are contiguous [m, k]
 * and [n, k], so with k open their leading dimension is k too: the
 * bucket's plan is made with the bucket's, and each call sets the exact
 * one beside the exact sizes. */
void gl_cuda_gemm_fp8_ragged(gl_dev *d, int ragged_k, int m, int n, int k, float alpha,
                             const uint8_t *A, gl_fp8_format fa, const float *a_scale_inv,
                             const uint8_t *B, gl_fp8_format fb, const float *b_scale_inv,
                             float beta, void *C, gl_dtype ctype, int ldc, int fast_accum)
{
    gl_cuda_state *st = gl_cuda_st(d);
    const float *as = a_scale_inv, *bs = b_scale_inv;
    fp8_prepare(d, "gemm_fp8_ragged", m, n, k, ldc, fa, fb, A, B, C, ctype, &as, &bs);
    int bm = ragged_k ? m : ragged_bucket(m), bk = ragged_k ? ragged_bucket(k) : k;
    gl_gemm_plan key = plan_key(0, 1, bm, n, bk, A, bk, fp8_type(fa), B, bk,
                                fp8_type(fb), beta, C, ctype, ldc);
    key.fast_accum = fast_accum != 0;
    key.lt_scale_a = bs;
    key.lt_scale_b = as;
    key.ragged = ragged_k ? RAGGED_K : RAGGED_M;
    gl_gemm_plan *p = plan_find(st, &key);
    set_scales(p, bs, as);
    if (ragged_k) {
        layout_ld(p->la, k);
        layout_ld(p->lb, k);
    }
    if (ragged_run(st, p, m, k, alpha, A, B, beta, C) == CUBLAS_STATUS_NOT_SUPPORTED)
        gl_cuda_gemm_fp8(d, m, n, k, alpha, A, fa, a_scale_inv, B, fb, b_scale_inv, beta, C,
                         ctype, ldc, fast_accum);
}

/*
 * ops.h's gemm_fp8_tiles: the TN product of gemm_fp8 with cuBLASLt's
 * block-scaling modes.  Our A (activations or gradients, 1x128 tiles) is
 * cuBLASLt's B: CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F; our B is its A:
 * VEC128 too (the weight gradient's X^T), or BLK128x128_32F for a weight
 * (128x128 blocks).  The scale pointers take the factor arrays as
 * fp8.h lays them out, which is the layout of these modes (Transformer
 * Engine's "GEMM-ready" scales; they must be 16-byte aligned, as the
 * model's allocations are).  Hopper (sm_90) only: the modes need it.  No
 * fast accumulation: the partial sum of each k-tile is scaled and added
 * in fp32.
 */
void gl_cuda_gemm_fp8_tiles(gl_dev *d, int m, int n, int k, float alpha,
                            const uint8_t *A, gl_fp8_format fa, const float *a_sinv,
                            const uint8_t *B, gl_fp8_format fb, const float *b_sinv,
                            int b_block2d, float beta, void *C, gl_dtype ctype, int ldc)
{
    gl_cuda_state *st = gl_cuda_st(d);
    fp8_args_check("gemm_fp8_tiles", m, n, k, ldc, fa, fb, A, B, C, ctype);
    if (st->prop.major != 9)
        gl_die("gemm_fp8_tiles: GPU %d (%s) has compute capability %d.%d; "
               "cuBLASLt's 1x128 and 128x128 block-scaled FP8 products are "
               "Hopper's (9.0): use --fp8-recipe delayed or tensorwise",
               st->ordinal, st->prop.name, st->prop.major, st->prop.minor);
    if (((uintptr_t)a_sinv | (uintptr_t)b_sinv) % 16)
        gl_die("gemm_fp8_tiles: block factors at %p and %p; cuBLASLt wants "
               "them 16-byte aligned", (const void *)a_sinv, (const void *)b_sinv);
    gl_gemm_plan key = plan_key(0, 1, m, n, k, A, k, fp8_type(fa), B, k,
                                fp8_type(fb), beta, C, ctype, ldc);
    key.lt_mode_a = b_block2d ? CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F
                              : CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    key.lt_mode_b = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    key.lt_scale_a = b_sinv;            /* cuBLASLt's A is our B */
    key.lt_scale_b = a_sinv;
    gl_gemm_plan *p = plan_find(st, &key);
    set_scales(p, b_sinv, a_sinv);
    plan_run(st, p, alpha, A, B, beta, C);
}

void gl_cuda_gemm_close(gl_dev *d)
{
    gl_cuda_state *st = gl_cuda_st(d);
    for (int i = 0; i < st->nplans; i++) {
        gl_gemm_plan *p = &st->plans[i];
        if (p->tune == TUNE_RUNNING)
            tune_release(st, p);
        GL_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->la));
        GL_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->lb));
        GL_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->lc));
        GL_CUBLAS_CHECK(cublasLtMatmulDescDestroy(p->desc));
    }
    free(st->plans);
    st->plans = NULL;
    st->nplans = st->cap_plans = 0;
}
