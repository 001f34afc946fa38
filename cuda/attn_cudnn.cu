/*
 * attn_cudnn.cu: causal grouped-query attention through cuDNN 9's fused
 * flash attention, built with the backend graph API (cudnn_graph.h).
 *
 * cuDNN 9.19 has single-node SDPA operations, but causal masking in them
 * needs a mask subgraph that only later versions accept, so the attention
 * is described the way cuDNN's runtime-fusion engines recognise it: an
 * operation graph of matmuls, pointwise and reduction nodes that the
 * engine compiles into one flash-attention kernel (wgmma on Hopper), the
 * score matrix never leaving the chip.  With s = scale q.k^T per head:
 *
 * forward    s  -> causal mask (column > row gets the lowest float)
 *            m = rowmax(s),  e = exp(s - m),  l = rowsum(e)
 *            stats = m + log(l)           natural log: exactly ops.h's lse
 *            o = (e / l) v
 * backward   delta = rowsum(dO * o)                   (fp32, workspace)
 *            p  = exp(mask(s - stats))
 *            dv = p^T dO           summed over the query heads of a group
 *            dS = scale p (dO v^T - delta)
 *            dk = dS^T q           summed over the query heads of a group
 *            dq = dS k             accumulated in fp32 (workspace), then bf16
 *
 * Tensors are 4-D [B, H, S, D] with strides [R ld, D, ld, 1], R the rows
 * of a sample in memory (S, or more for a part of a block): the q, k, v
 * (and dq, dk, dv) views of the fused [B S, (Hq + 2 Hkv) D] buffer need no
 * copies.  k and v enter transposed ([B, Hkv, D, S], strides [S ld, D, 1,
 * ld]); the matmuls broadcast a kv head over its Hq/Hkv query heads.  The
 * scale and the mask's fill value are passed by value, so one plan serves
 * every scale.
 *
 * Plans are built once per shape and strides (B, S, Hq, Hkv, D, every ld)
 * and cached with all their descriptors until the device closes; a shape
 * cuDNN builds no plan for is remembered as refused, so the fallback to
 * the kernels of attention_fwd.cu / attention_bwd.cu costs one attempt.
 * The workspace (cuDNN's own, and the backward's delta and fp32 dq) comes
 * from the device allocator as a grow-only scratch buffer.
 *
 * Context parallelism's blocks (attn_block_fwd, attn_block_bwd) use the
 * same graphs with Sq query rows against Sk key rows, the causal mask or
 * none, and a backward that reads the caller's delta: see "context
 * parallelism's blocks" below for which blocks and how their f32
 * outputs are made.
 */
#include <config.h>

#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gl_cuda.h"

#ifdef GL_HAVE_CUDNN
#include <cudnn.h>
#endif

/* ---- the choice of implementation (all builds) ---- */

int gl_cuda_attn_impl_from_env(void)
{
    const char *e = getenv("GRIDLM_ATTENTION");
    int impl;
    if (!e || !*e || !strcmp(e, "auto"))
        impl = GL_ATTN_AUTO;
    else if (!strcmp(e, "cudnn"))
        impl = GL_ATTN_CUDNN;
    else if (!strcmp(e, "native"))
        impl = GL_ATTN_NATIVE;
    else
        gl_die("GRIDLM_ATTENTION=%s is not an attention implementation; use "
               "auto (cuDNN when it has a plan), cudnn or native", e);
#ifndef GL_HAVE_CUDNN
    if (impl == GL_ATTN_CUDNN)
        gl_die("GRIDLM_ATTENTION=cudnn, but this gridlm was built without "
               "cuDNN; reconfigure with --with-cudnn=DIR or unset "
               "GRIDLM_ATTENTION");
#endif
    return impl;
}

extern "C" int gl_cuda_attn_impl(gl_dev *d, int impl)
{
    gl_cuda_state *st = gl_cuda_st(d);
    int old = st->attn_impl;
    if (impl < 0)
        return old;
    if (impl > GL_ATTN_NATIVE)
        gl_die("gl_cuda_attn_impl: %d is not an attention implementation", impl);
#ifndef GL_HAVE_CUDNN
    if (impl == GL_ATTN_CUDNN)
        gl_die("the cuDNN attention was asked for, but this gridlm was built "
               "without cuDNN");
#endif
    st->attn_impl = impl;
    return old;
}

extern "C" int gl_cuda_deterministic(gl_dev *d, int on)
{
    gl_cuda_state *st = gl_cuda_st(d);
    int old = st->deterministic;
    if (on < 0 || !on == !old)
        return old;
    /* plans built under the other setting were chosen by other rules */
    GL_CUDA_CHECK(cudaStreamSynchronize(st->stream));
    gl_cudnn_close(d);
    st->deterministic = on != 0;
    return old;
}

extern "C" void gl_cuda_attn_counts(gl_dev *d, gl_attn_counts *c)
{
    *c = gl_cuda_st(d)->attn_counts;
}

#ifndef GL_HAVE_CUDNN

extern "C" long gl_cuda_cudnn_version(void)
{
    return 0;
}

int gl_cudnn_attn_fwd(gl_dev *, bf16 *, int, float *, const bf16 *, int,
                      const bf16 *, int, const bf16 *, int, int, int, int, int,
                      int, float)
{
    return 0;
}

int gl_cudnn_attn_bwd(gl_dev *, bf16 *, bf16 *, bf16 *, int, const bf16 *, int,
                      const bf16 *, int, const float *, const bf16 *, int,
                      const bf16 *, int, const bf16 *, int, int, int, int, int,
                      int, float)
{
    return 0;
}

int gl_cudnn_attn_block_fwd(gl_dev *, float *, int, float *, const bf16 *,
                            int, const bf16 *, int, const bf16 *, int, int,
                            int, int, int, int, int, float,
                            const gl_attn_pos *, const gl_attn_pos *,
                            gl_attn_mask)
{
    return 0;
}

int gl_cudnn_attn_block_bwd(gl_dev *, float *, int, float *, float *, int,
                            const bf16 *, int, const float *, const float *,
                            const bf16 *, int, const bf16 *, int, const bf16 *,
                            int, int, int, int, int, int, int, float,
                            const gl_attn_pos *, const gl_attn_pos *,
                            gl_attn_mask)
{
    return 0;
}

void gl_cudnn_close(gl_dev *)
{
}

#else /* GL_HAVE_CUDNN */

typedef cudnnBackendDescriptor_t desc_t;

extern "C" long gl_cuda_cudnn_version(void)
{
    return (long)cudnnGetVersion();
}

/* Unique ids of the tensors the variant pack binds; virtual (on-chip)
 * tensors are numbered from U_VIRTUAL. */
enum {
    U_Q = 1, U_K, U_V, U_O, U_STATS, U_DO, U_DQ, U_DK, U_DV,
    U_SCALE, U_NEG, U_ONE, U_DELTA, U_DQACC, U_VIRTUAL = 100
};

/* The graphs: the forward; the whole-sequence backward, which computes
 * delta = rowsum(dO * o) itself; the block backward, which reads delta
 * (and needs no o). */
enum { FWD = 0, BWD = 1, BWD_DELTA = 2 };

/* What identifies a plan: direction, shape, every row and sample stride
 * and the mask.  S query rows against Sk key rows (S = Sk for
 * whole-sequence attention); causal: key column j allowed for query row
 * i iff j <= i, else every pair (a full block of context parallelism).
 * A part of a block (gl_attn_part) reads rows of larger tensors: qrows
 * rows a sample for q, o, dO (krows for k, v), and the lse and delta
 * [B, Hq, lrows] (lrows = S: packed).  Whole-sequence attention has
 * qrows = lrows = S and krows = Sk; the gradients and the fp32 dq are
 * always packed, S (Sk) rows a sample. */
typedef struct {
    int dir, B, S, Hq, Hkv, D, ldq, ldk, ldv, ldo, lddo, ldg, Sk, causal;
    int qrows, krows, lrows;
    int det;                   /* backward: the deterministic graph */
} plan_key;

/* A graph being built: every descriptor made (destroyed with the plan),
 * the operation nodes in order, and the first failure, after which every
 * step is a no-op. */
#define MAX_DESC 192
#define MAX_OPS 48
typedef struct {
    cudnnHandle_t h;
    desc_t all[MAX_DESC];
    int nall;
    desc_t ops[MAX_OPS];
    int nops;
    int64_t next_uid;
    int deterministic;         /* refuse engines noted nondeterministic */
    cudnnStatus_t err;
    char why[384];
} graph;

typedef struct {
    plan_key key;
    desc_t plan;               /* NULL: cuDNN refused the shape */
    int64_t ws;                /* cuDNN's workspace bytes */
    desc_t *keep;              /* the descriptors the plan was built from */
    int nkeep;
} plan_entry;

struct gl_cudnn {
    cudnnHandle_t h;
    int unusable;              /* cudnnCreate failed: every shape refused */
    char unusable_why[256];
    int warned;                /* the one fallback warning was printed */
    int delta_via_o;           /* the block backward's BWD_DELTA graph was
                                * refused: it goes through o (said once) */
    int det_ws_said;           /* det_too_big said so */
    plan_entry *e;
    int n, cap;
};

/* ---- building blocks ---- */

static void fail(graph *g, cudnnStatus_t s, const char *what)
{
    if (g->err)
        return;
    g->err = s ? s : CUDNN_STATUS_NOT_SUPPORTED;
    char last[256] = "";
    cudnnGetLastErrorString(last, sizeof last);
    snprintf(g->why, sizeof g->why, "%s: %s%s%s", what,
             cudnnGetErrorString(g->err), *last ? ": " : "", last);
    /* one line: cuDNN's messages may hold newlines */
    for (char *c = g->why; *c; c++)
        if (*c == '\n' || *c == '\r')
            *c = ' ';
}

static desc_t make(graph *g, cudnnBackendDescriptorType_t type)
{
    if (g->err)
        return NULL;
    if (g->nall == MAX_DESC) {
        fail(g, CUDNN_STATUS_INTERNAL_ERROR, "too many descriptors");
        return NULL;
    }
    desc_t d = NULL;
    cudnnStatus_t s = cudnnBackendCreateDescriptor(type, &d);
    if (s != CUDNN_STATUS_SUCCESS) {
        fail(g, s, "cudnnBackendCreateDescriptor");
        return NULL;
    }
    g->all[g->nall++] = d;
    return d;
}

static void set(graph *g, desc_t d, cudnnBackendAttributeName_t name,
                cudnnBackendAttributeType_t type, int64_t n, const void *v)
{
    if (g->err)
        return;
    cudnnStatus_t s = cudnnBackendSetAttribute(d, name, type, n, v);
    if (s != CUDNN_STATUS_SUCCESS) {
        char what[64];
        snprintf(what, sizeof what, "cudnnBackendSetAttribute(%d)", (int)name);
        fail(g, s, what);
    }
}

static void set_desc(graph *g, desc_t d, cudnnBackendAttributeName_t name,
                     desc_t v)
{
    set(g, d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v);
}

static void finalize(graph *g, desc_t d, const char *what)
{
    if (g->err)
        return;
    cudnnStatus_t s = cudnnBackendFinalize(d);
    if (s != CUDNN_STATUS_SUCCESS)
        fail(g, s, what);
}

static void add_op(graph *g, desc_t op)
{
    if (g->err)
        return;
    if (g->nops == MAX_OPS) {
        fail(g, CUDNN_STATUS_INTERNAL_ERROR, "too many operations");
        return;
    }
    g->ops[g->nops++] = op;
}

typedef struct {
    int64_t dim[4], str[4];
} shape4;

static shape4 sh(int64_t d0, int64_t d1, int64_t d2, int64_t d3, int64_t s0,
                 int64_t s1, int64_t s2, int64_t s3)
{
    shape4 x = {{d0, d1, d2, d3}, {s0, s1, s2, s3}};
    return x;
}

/* A tensor: virtual ones live on chip only; by-value ones are host
 * scalars bound at execution. */
static desc_t tensor(graph *g, int64_t uid, cudnnDataType_t type, shape4 s,
                     bool is_virtual, bool by_value)
{
    desc_t t = make(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    int64_t align = 16;
    set(g, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
    set(g, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, s.dim);
    set(g, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, s.str);
    set(g, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    set(g, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
    set(g, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
    if (by_value)
        set(g, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
    finalize(g, t, "tensor descriptor");
    return t;
}

static desc_t virt(graph *g, cudnnDataType_t type, shape4 s)
{
    return tensor(g, g->next_uid++, type, s, true, false);
}

static desc_t scalar(graph *g, int64_t uid)
{
    return tensor(g, uid, CUDNN_DATA_FLOAT, sh(1, 1, 1, 1, 1, 1, 1, 1), false,
                  true);
}

/* y = mode(x, b, t) elementwise, computed in `prec`; b and t may be NULL;
 * axis >= 0 for GEN_INDEX. */
static void pointwise(graph *g, cudnnPointwiseMode_t mode,
                      cudnnDataType_t prec, desc_t x, desc_t b, desc_t t,
                      desc_t y, int64_t axis = -1)
{
    desc_t pw = make(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    set(g, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    set(g, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    if (axis >= 0)
        set(g, pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    finalize(g, pw, "pointwise descriptor");
    desc_t op = make(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    set_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw);
    set_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
    if (b)
        set_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b);
    if (t)
        set_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t);
    set_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
    finalize(g, op, "pointwise operation");
    add_op(g, op);
}

/* y = reduce(x) over the dimensions where y has extent 1. */
static void reduction(graph *g, cudnnReduceTensorOp_t how, desc_t x, desc_t y)
{
    cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    desc_t r = make(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    set(g, r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE,
        1, &how);
    set(g, r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32);
    finalize(g, r, "reduction descriptor");
    desc_t op = make(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    set_desc(g, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, r);
    set_desc(g, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x);
    set_desc(g, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y);
    finalize(g, op, "reduction operation");
    add_op(g, op);
}

/* c = a b over the last two dimensions, batched (broadcast) over the
 * first two; fp32 accumulation. */
static void matmul(graph *g, desc_t a, desc_t b, desc_t c)
{
    cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    desc_t m = make(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    set(g, m, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32);
    finalize(g, m, "matmul descriptor");
    desc_t op = make(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    set_desc(g, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a);
    set_desc(g, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, b);
    set_desc(g, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c);
    set_desc(g, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, m);
    finalize(g, op, "matmul operation");
    add_op(g, op);
}

/* y = x viewed with other dimensions/strides (a transpose here). */
static void reshape(graph *g, desc_t x, desc_t y)
{
    desc_t op = make(g, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    set_desc(g, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x);
    set_desc(g, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y);
    finalize(g, op, "reshape operation");
    add_op(g, op);
}

/* The causal mask on scores s [B, H, Sq, Skv] (fp32): element (i, j)
 * keeps its value where row i >= column j and becomes `neg` (the lowest
 * float, bound by value) elsewhere. */
static desc_t causal_mask(graph *g, desc_t s, shape4 ss, desc_t neg)
{
    desc_t row = virt(g, CUDNN_DATA_INT32, ss);
    desc_t col = virt(g, CUDNN_DATA_INT32, ss);
    desc_t keep = virt(g, CUDNN_DATA_BOOLEAN, ss);
    desc_t out = virt(g, CUDNN_DATA_FLOAT, ss);
    pointwise(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, s, NULL, NULL,
              row, 2);
    pointwise(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, s, NULL, NULL,
              col, 3);
    pointwise(g, CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, col, NULL,
              keep);
    pointwise(g, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, s, neg, keep,
              out);
    return out;
}

/* The views of ops.h as 4-D tensors of S rows (the query or key rows)
 * out of R rows a sample. */
static shape4 bhsd(const plan_key *k, int H, int S, int R, int ld)  /* [B, H, S, D] */
{
    return sh(k->B, H, S, k->D, (int64_t)R * ld, k->D, ld, 1);
}

static shape4 bhds(const plan_key *k, int H, int S, int R, int ld)  /* transposed */
{
    return sh(k->B, H, k->D, S, (int64_t)R * ld, k->D, 1, ld);
}

/* The lse and delta [B, Hq, S, 1] at head stride lrows. */
static shape4 rows_of(const plan_key *k)
{
    return sh(k->B, k->Hq, k->S, 1, (int64_t)k->Hq * k->lrows, k->lrows, 1, 1);
}

static shape4 packed(int64_t B, int64_t H, int64_t R, int64_t C)
{
    return sh(B, H, R, C, H * R * C, R * C, C, 1);
}

/* The mask of k on scores s [B, Hq, S, Sk]: causal_mask's under a causal
 * key (the lowest float `neg` bound by value, U_NEG), s itself for a full
 * block (no U_NEG in the graph). */
static desc_t mask_of(graph *g, const plan_key *k, desc_t s, shape4 ss)
{
    if (!k->causal)
        return s;
    return causal_mask(g, s, ss, scalar(g, U_NEG));
}

static void build_fwd(graph *g, const plan_key *k)
{
    cudnnDataType_t BF = CUDNN_DATA_BFLOAT16, F = CUDNN_DATA_FLOAT;
    int64_t B = k->B, S = k->S, Sk = k->Sk, Hq = k->Hq;
    int QR = k->qrows, KR = k->krows;
    shape4 ss = packed(B, Hq, S, Sk), rs = packed(B, Hq, S, 1);
    desc_t q = tensor(g, U_Q, BF, bhsd(k, k->Hq, k->S, QR, k->ldq), false, false);
    desc_t kt = tensor(g, U_K, BF, bhds(k, k->Hkv, k->Sk, KR, k->ldk), false, false);
    desc_t v = tensor(g, U_V, BF, bhsd(k, k->Hkv, k->Sk, KR, k->ldv), false, false);
    desc_t o = tensor(g, U_O, BF, bhsd(k, k->Hq, k->S, QR, k->ldo), false, false);
    desc_t stats = tensor(g, U_STATS, F, rows_of(k), false, false);
    desc_t scale = scalar(g, U_SCALE);

    desc_t s = virt(g, F, ss), s1 = virt(g, F, ss);
    matmul(g, q, kt, s);
    pointwise(g, CUDNN_POINTWISE_MUL, F, s, scale, NULL, s1);
    desc_t s2 = mask_of(g, k, s1, ss);
    desc_t m = virt(g, F, rs), d = virt(g, F, ss), e = virt(g, F, ss);
    /* the engine takes the second product's probabilities in the i/o
     * type (bf16), as the backward's p^T */
    desc_t l = virt(g, F, rs), logl = virt(g, F, rs), p = virt(g, BF, ss);
    reduction(g, CUDNN_REDUCE_TENSOR_MAX, s2, m);
    pointwise(g, CUDNN_POINTWISE_SUB, F, s2, m, NULL, d);
    pointwise(g, CUDNN_POINTWISE_EXP, F, d, NULL, NULL, e);
    reduction(g, CUDNN_REDUCE_TENSOR_ADD, e, l);
    pointwise(g, CUDNN_POINTWISE_LOG, F, l, NULL, NULL, logl);
    pointwise(g, CUDNN_POINTWISE_ADD, F, m, logl, NULL, stats);
    pointwise(g, CUDNN_POINTWISE_DIV, F, e, l, NULL, p);
    matmul(g, p, v, o);
}

/* dst (Hkv heads of the Sk key rows) = the sum over each group of Hq/Hkv
 * query heads of a x b, or a x b itself without grouping. */
static void matmul_grouped(graph *g, const plan_key *k, desc_t a, desc_t b,
                           desc_t dst)
{
    if (k->Hq == k->Hkv) {
        matmul(g, a, b, dst);
        return;
    }
    desc_t full = virt(g, CUDNN_DATA_BFLOAT16, packed(k->B, k->Hq, k->Sk, k->D));
    matmul(g, a, b, full);
    reduction(g, CUDNN_REDUCE_TENSOR_ADD, full, dst);
}

static void build_bwd(graph *g, const plan_key *k)
{
    cudnnDataType_t BF = CUDNN_DATA_BFLOAT16, F = CUDNN_DATA_FLOAT;
    int64_t B = k->B, S = k->S, Sk = k->Sk, Hq = k->Hq, D = k->D;
    int QR = k->qrows, KR = k->krows;
    shape4 ss = packed(B, Hq, S, Sk), rs = packed(B, Hq, S, 1);
    /* p and dS transposed: [B, Hq, Sk, Sq] over the same storage */
    shape4 st = sh(B, Hq, Sk, S, Hq * S * Sk, S * Sk, 1, Sk);
    desc_t q = tensor(g, U_Q, BF, bhsd(k, k->Hq, k->S, QR, k->ldq), false, false);
    desc_t kt = tensor(g, U_K, BF, bhds(k, k->Hkv, k->Sk, KR, k->ldk), false, false);
    desc_t vt = tensor(g, U_V, BF, bhds(k, k->Hkv, k->Sk, KR, k->ldv), false, false);
    desc_t dout = tensor(g, U_DO, BF, bhsd(k, k->Hq, k->S, QR, k->lddo), false, false);
    desc_t stats = tensor(g, U_STATS, F, rows_of(k), false, false);
    desc_t dq = tensor(g, U_DQ, BF, bhsd(k, k->Hq, k->S, k->S, k->ldg), false, false);
    desc_t dk = tensor(g, U_DK, BF, bhsd(k, k->Hkv, k->Sk, k->Sk, k->ldg), false, false);
    desc_t dv = tensor(g, U_DV, BF, bhsd(k, k->Hkv, k->Sk, k->Sk, k->ldg), false, false);
    desc_t scale = scalar(g, U_SCALE);
    /* delta per row: computed into the workspace (BWD) or the caller's
     * (BWD_DELTA); dq accumulated in fp32 in the workspace (a non-virtual
     * fp32 dq is what selects cuDNN's flash backward without an S x Sk
     * buffer) */
    desc_t delta = tensor(g, U_DELTA, F, rows_of(k), false, false);

    if (k->dir == BWD) {            /* delta = rowsum(dO * o) */
        desc_t o = tensor(g, U_O, BF, bhsd(k, k->Hq, k->S, QR, k->ldo), false, false);
        desc_t one = scalar(g, U_ONE);
        desc_t prod = virt(g, F, packed(B, Hq, S, D)), rsum = virt(g, F, rs);
        pointwise(g, CUDNN_POINTWISE_MUL, F, dout, o, NULL, prod);
        reduction(g, CUDNN_REDUCE_TENSOR_ADD, prod, rsum);
        pointwise(g, CUDNN_POINTWISE_MUL, F, rsum, one, NULL, delta);
    }

    /* p = exp(mask(scale q k^T - stats)) */
    desc_t s = virt(g, F, ss), s1 = virt(g, F, ss), s2 = virt(g, F, ss);
    matmul(g, q, kt, s);
    pointwise(g, CUDNN_POINTWISE_MUL, F, s, scale, NULL, s1);
    pointwise(g, CUDNN_POINTWISE_SUB, F, s1, stats, NULL, s2);
    desc_t s3 = mask_of(g, k, s2, ss);
    desc_t p = virt(g, F, ss);
    pointwise(g, CUDNN_POINTWISE_EXP, F, s3, NULL, NULL, p);

    /* dv = p^T dO */
    desc_t pt = virt(g, BF, st);
    reshape(g, p, pt);
    matmul_grouped(g, k, pt, dout, dv);

    /* dS = scale p (dO v^T - delta) */
    desc_t dp = virt(g, F, ss), t1 = virt(g, F, ss), t2 = virt(g, F, ss);
    desc_t ds = virt(g, F, ss);
    matmul(g, dout, vt, dp);
    pointwise(g, CUDNN_POINTWISE_SUB, F, dp, delta, NULL, t1);
    pointwise(g, CUDNN_POINTWISE_MUL, F, t1, p, NULL, t2);
    pointwise(g, CUDNN_POINTWISE_MUL, F, t2, scale, NULL, ds);

    /* dk = dS^T q */
    desc_t dst = virt(g, BF, st);
    reshape(g, ds, dst);
    matmul_grouped(g, k, dst, q, dk);

    /* dq = dS k: through the fp32 accumulator, or, deterministic, straight
     * into dq, which is what makes cuDNN's engine keep dS in a workspace
     * of B Hq S Sk bf16 and add dq without atomics (the graph
     * cudnn-frontend builds for set_deterministic_algorithm on Hopper) */
    desc_t kk = virt(g, BF, bhsd(k, k->Hkv, k->Sk, KR, k->ldk));
    reshape(g, kt, kk);
    if (k->det) {
        matmul(g, ds, kk, dq);
    } else {
        desc_t dqacc = tensor(g, U_DQACC, F, packed(B, Hq, S, D), false, false);
        matmul(g, ds, kk, dqacc);
        pointwise(g, CUDNN_POINTWISE_IDENTITY, F, dqacc, NULL, NULL, dq);
    }
}

/* 1 when the engine of configuration cfg declares itself
 * nondeterministic (CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC: its results
 * may differ from run to run, as a backward that accumulates dq with
 * atomics does); a failed query counts as nondeterministic. */
static int nondeterministic(desc_t cfg)
{
    desc_t eng = NULL;
    int64_t n = 0;
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    int bad = 1;
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng) ==
            CUDNN_STATUS_SUCCESS &&
        cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE,
                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &eng) ==
            CUDNN_STATUS_SUCCESS &&
        cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                                 CUDNN_TYPE_NUMERICAL_NOTE,
                                 CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, notes) ==
            CUDNN_STATUS_SUCCESS) {
        bad = 0;
        for (int64_t i = 0; i < n; i++)
            bad |= notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC;
    }
    if (eng)
        cudnnBackendDestroyDescriptor(eng);
    return bad;
}

/* The operation graph of g, then the first engine configuration of the
 * heuristics that finalizes into a plan (under g->deterministic, the
 * first whose engine does not declare itself nondeterministic); NULL
 * (and g->why) otherwise. */
static desc_t make_plan(graph *g, int64_t *ws)
{
    desc_t og = make(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    set(g, og, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &g->h);
    set(g, og, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
        g->nops, g->ops);
    finalize(g, og, "operation graph");
    const cudnnBackendHeurMode_t modes[] = {CUDNN_HEUR_MODE_A,
                                            CUDNN_HEUR_MODE_FALLBACK};
    for (int mi = 0; mi < 2 && !g->err; mi++) {
        cudnnBackendHeurMode_t mode = modes[mi];
        desc_t heur = make(g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
        set_desc(g, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, og);
        set(g, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
        finalize(g, heur, "engine heuristics");
        if (g->err)
            break;
        int64_t n = 0;
        cudnnStatus_t s = cudnnBackendGetAttribute(
            heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
            0, &n, NULL);
        if (s != CUDNN_STATUS_SUCCESS) {
            fail(g, s, "engine heuristics results");
            break;
        }
        if (n > 8)
            n = 8;
        desc_t cfg[8];
        for (int64_t i = 0; i < n; i++)
            cfg[i] = make(g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
        if (g->err)
            break;
        int64_t got = 0;
        if (n > 0) {
            s = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, n, &got,
                                         cfg);
            if (s != CUDNN_STATUS_SUCCESS) {
                fail(g, s, "engine configurations");
                break;
            }
        }
        graph attempt = {};             /* the last refusal, for the message */
        for (int64_t i = 0; i < got; i++) {
            if (g->deterministic && nondeterministic(cfg[i])) {
                fail(&attempt, CUDNN_STATUS_NOT_SUPPORTED,
                     "--deterministic-mode: the engine declares itself "
                     "nondeterministic");
                continue;
            }
            desc_t plan = NULL;
            s = cudnnBackendCreateDescriptor(
                CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan);
            if (s == CUDNN_STATUS_SUCCESS)
                s = cudnnBackendSetAttribute(
                    plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE,
                    1, &g->h);
            if (s == CUDNN_STATUS_SUCCESS)
                s = cudnnBackendSetAttribute(
                    plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                    CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg[i]);
            if (s == CUDNN_STATUS_SUCCESS)
                s = cudnnBackendFinalize(plan);
            int64_t w = 0, nw = 0;
            if (s == CUDNN_STATUS_SUCCESS)
                s = cudnnBackendGetAttribute(
                    plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                    CUDNN_TYPE_INT64, 1, &nw, &w);
            if (s == CUDNN_STATUS_SUCCESS) {
                *ws = w;
                return plan;
            }
            fail(&attempt, s, "execution plan");
            if (plan)
                cudnnBackendDestroyDescriptor(plan);
        }
        if (mi == 1) {
            if (attempt.err) {
                g->err = attempt.err;
                memcpy(g->why, attempt.why, sizeof g->why);
            } else
                fail(g, CUDNN_STATUS_NOT_SUPPORTED,
                     "the engine heuristics offer no engine for this graph");
        }
    }
    return NULL;
}

/* ---- the cache and the calls ---- */

static gl_cudnn *state(gl_dev *d)
{
    gl_cuda_state *st = gl_cuda_st(d);
    if (!st->cudnn) {
        gl_cudnn *c = (gl_cudnn *)gl_calloc(1, sizeof *c);
        cudnnStatus_t s = cudnnCreate(&c->h);
        if (s == CUDNN_STATUS_SUCCESS) {
            s = cudnnSetStream(c->h, st->stream);
            if (s != CUDNN_STATUS_SUCCESS)
                cudnnDestroy(c->h);
        }
        if (s != CUDNN_STATUS_SUCCESS) {
            char last[200] = "";
            cudnnGetLastErrorString(last, sizeof last);
            c->unusable = 1;
            snprintf(c->unusable_why, sizeof c->unusable_why,
                     "cudnnCreate failed: %s%s%s", cudnnGetErrorString(s),
                     *last ? ": " : "", last);
        }
        st->cudnn = c;
    }
    return st->cudnn;
}

static void describe(char *buf, size_t n, const plan_key *k)
{
    static const char *dir[] = {"forward", "backward", "block backward"};
    char blk[64] = "";
    if (k->S != k->Sk || !k->causal || k->dir == BWD_DELTA)
        snprintf(blk, sizeof blk, " against Sk=%d keys, %s", k->Sk,
                 k->causal ? "causal" : "full");
    char part[96] = "";
    if (k->qrows != k->S || k->krows != k->Sk)
        snprintf(part, sizeof part, "; a part of a block of %d x %d rows, lse %s",
                 k->qrows, k->krows, k->lrows == k->S ? "packed" : "in place");
    snprintf(buf, n, "%s%s B=%d S=%d Hq=%d Hkv=%d D=%d%s (row strides q %d k %d "
             "v %d o %d%s%s)", k->det ? "deterministic " : "", dir[k->dir], k->B, k->S,
             k->Hq, k->Hkv, k->D, blk, k->ldq, k->ldk, k->ldv, k->ldo,
             k->dir == FWD ? "" : ", dO and gradients too", part);
}

/* The cached plan of key k, built on first use; NULL when cuDNN refuses
 * it (dies instead under GL_ATTN_CUDNN, warns once under GL_ATTN_AUTO;
 * quiet: neither, nor counted, for a caller that has another graph to
 * try). */
static plan_entry *lookup(gl_dev *d, const plan_key *k, int quiet)
{
    gl_cuda_state *st = gl_cuda_st(d);
    gl_cudnn *c = state(d);
    char what[320];
    for (int i = 0; i < c->n; i++)
        if (!memcmp(&c->e[i].key, k, sizeof *k)) {
            if (c->e[i].plan)
                return &c->e[i];
            if (st->attn_impl == GL_ATTN_CUDNN && !quiet) {
                describe(what, sizeof what, k);
                gl_die("GRIDLM_ATTENTION=cudnn, but cuDNN %ld built no fused "
                       "attention plan for the %s (see the warning above); "
                       "unset GRIDLM_ATTENTION to fall back to gridlm's "
                       "attention kernels", gl_cuda_cudnn_version(), what);
            }
            return NULL;
        }

    plan_entry e = {};
    e.key = *k;
    char why[400];
    if (c->unusable) {
        snprintf(why, sizeof why, "%s", c->unusable_why);
    } else {
        graph *g = (graph *)gl_calloc(1, sizeof *g);
        g->h = c->h;
        g->next_uid = U_VIRTUAL;
        g->deterministic = st->deterministic;
        if (k->dir == FWD)
            build_fwd(g, k);
        else
            build_bwd(g, k);
        e.plan = make_plan(g, &e.ws);
        snprintf(why, sizeof why, "%s", g->why);
        if (e.plan) {
            e.nkeep = g->nall;
            e.keep = (desc_t *)gl_malloc(g->nall * sizeof(desc_t) + 1);
            memcpy(e.keep, g->all, g->nall * sizeof(desc_t));
        } else {
            for (int i = g->nall - 1; i >= 0; i--)
                cudnnBackendDestroyDescriptor(g->all[i]);
        }
        free(g);
    }
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 8;
        c->e = (plan_entry *)gl_realloc(c->e, c->cap * sizeof *c->e);
    }
    c->e[c->n++] = e;

    describe(what, sizeof what, k);
    if (e.plan) {
        st->attn_counts.plans++;
        return &c->e[c->n - 1];
    }
    if (quiet)
        return NULL;
    st->attn_counts.refused++;
    if (st->attn_impl == GL_ATTN_CUDNN)
        gl_die("GRIDLM_ATTENTION=cudnn, but cuDNN %ld built no fused attention "
               "plan for the %s: %s; unset GRIDLM_ATTENTION to fall back to "
               "gridlm's attention kernels", gl_cuda_cudnn_version(), what, why);
    if (!c->warned) {
        c->warned = 1;
        gl_warn("cuDNN %ld built no fused attention plan for the %s (%s); "
                "gridlm's attention kernels run it and any other shape cuDNN "
                "refuses (GRIDLM_ATTENTION=native picks them outright)",
                gl_cuda_cudnn_version(), what, why);
    }
    return NULL;
}

static size_t round256(size_t n)
{
    return (n + 255) & ~(size_t)255;
}

/* The shapes the graphs describe: anything else goes to the kernels
 * here, whose own checks name the problem. */
static int usable(int B, int S, int Hq, int Hkv, int D, float scale,
                  const void *p[], const int ld[], int np)
{
    if (B <= 0 || S <= 0 || Hq <= 0 || Hkv <= 0 || Hq % Hkv || !(scale > 0) ||
        D <= 0 || D % 8)
        return 0;
    for (int i = 0; i < np; i++)
        if (((uintptr_t)p[i] & 15) || ld[i] % 8 || ld[i] <= 0)
            return 0;
    return 1;
}

/* A call's bindings: the unique id and the device pointer (or host
 * scalar) of every tensor of the plan's graph, and no other. */
typedef struct {
    int64_t uid[16];
    void *ptr[16];
    int n;
} bindings;

static void bind(bindings *b, int64_t uid, const void *p)
{
    b->uid[b->n] = uid;
    b->ptr[b->n++] = (void *)p;
}

static void execute(gl_dev *d, plan_entry *e, const bindings *b, void *ws)
{
    int n = b->n;
    const int64_t *uids = b->uid;
    void *const *ptrs = b->ptr;
    gl_cudnn *c = gl_cuda_st(d)->cudnn;
    desc_t vp = NULL;
    cudnnStatus_t s = cudnnBackendCreateDescriptor(
        CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS,
                                     CUDNN_TYPE_INT64, n, uids);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                                     CUDNN_TYPE_VOID_PTR, n, (void *)ptrs);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
                                     CUDNN_TYPE_VOID_PTR, 1, &ws);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendFinalize(vp);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendExecute(c->h, e->plan, vp);
    if (vp)
        cudnnBackendDestroyDescriptor(vp);
    if (s != CUDNN_STATUS_SUCCESS) {
        char last[256] = "", what[320];
        cudnnGetLastErrorString(last, sizeof last);
        describe(what, sizeof what, &e->key);
        gl_die("cuDNN attention failed to run the %s: %s%s%s", what,
               cudnnGetErrorString(s), *last ? ": " : "", last);
    }
}

int gl_cudnn_attn_fwd(gl_dev *d, bf16 *o, int ldo, float *lse, const bf16 *q,
                      int ldq, const bf16 *k, int ldk, const bf16 *v, int ldv,
                      int B, int S, int Hq, int Hkv, int D, float scale)
{
    const void *p[] = {o, q, k, v, lse};
    const int ld[] = {ldo, ldq, ldk, ldv, 8};
    if (!usable(B, S, Hq, Hkv, D, scale, p, ld, 5))
        return 0;
    plan_key key = {FWD, B, S, Hq, Hkv, D, ldq, ldk, ldv, ldo, 0, 0, S, 1, S, S, S, 0};
    plan_entry *e = lookup(d, &key, 0);
    if (!e)
        return 0;
    gl_cuda_state *st = gl_cuda_st(d);
    void *ws = gl_cuda_scratch(d, &st->s_cudnn, round256((size_t)e->ws));
    float fscale = scale, fneg = -3.402823466e38f;   /* the lowest float */
    bindings b = {};
    bind(&b, U_Q, q), bind(&b, U_K, k), bind(&b, U_V, v), bind(&b, U_O, o);
    bind(&b, U_STATS, lse), bind(&b, U_SCALE, &fscale), bind(&b, U_NEG, &fneg);
    execute(d, e, &b, ws);
    return 1;
}

/* The most workspace cuDNN's deterministic backward may take at once (it
 * keeps dS, B Hq S Sk bf16, there: 2 GiB at B 2, 32 heads, S 4096).  A
 * backward, whole or a block's part, that needs more runs in tiles
 * (det_tile); one whose smallest tile still needs more runs the kernels
 * here, which need none. */
#define DET_WS_MAX ((int64_t)4 << 30)

/* DET_WS_MAX, or the bytes GRIDLM_TEST_DET_WS_MAX gives: a test's way to
 * make small shapes take det_tile's tiles and the kernels' fallback. */
static int64_t det_ws_max(void)
{
    const char *e = getenv("GRIDLM_TEST_DET_WS_MAX");
    return e && *e ? strtoll(e, NULL, 10) : DET_WS_MAX;
}

/* Says that plan e, the smallest tile det_tile found for a deterministic
 * backward, passes the workspace limit `limit`, so the kernels run the call
 * (once a device; fatal under GRIDLM_ATTENTION=cudnn). */
static void det_too_big(gl_dev *d, const plan_entry *e, int64_t limit)
{
    gl_cuda_state *st = gl_cuda_st(d);
    gl_cudnn *c = st->cudnn;
    int fatal = st->attn_impl == GL_ATTN_CUDNN;
    if (!fatal && c->det_ws_said)
        return;
    char what[320];
    describe(what, sizeof what, &e->key);
    double gib = e->ws / 1073741824.0, max = limit / 1073741824.0;
    if (fatal)
        gl_die("GRIDLM_ATTENTION=cudnn with --deterministic-mode, but cuDNN's deterministic "
               "attention backward would take %.3g GiB of workspace for the %s, the "
               "smallest tile it cuts into (more than %.3g GiB); unset GRIDLM_ATTENTION to "
               "let gridlm's kernels run such shapes", gib, what, max);
    c->det_ws_said = 1;
    gl_info0("cuDNN's deterministic attention backward would take %.3g GiB of "
             "workspace for the %s, the smallest tile it cuts into (more than "
             "%.3g GiB): gridlm's kernels run such shapes", gib, what, max);
}

/* Bytes of the fp32 dq accumulator a backward graph of B Hq S rows of D
 * binds: none under --deterministic-mode, whose graph writes dq straight
 * into its bf16 output. */
static size_t dqacc_bytes(int det, int B, int Hq, int S, int D)
{
    return det ? 0 : round256((size_t)B * Hq * S * D * sizeof(float));
}

/* Plans key k (a backward, whole or a block's part; arg: what the part's
 * planner needs), NULL when cuDNN refuses it. */
typedef plan_entry *(*planner)(gl_dev *d, plan_key *k, const void *arg);

static plan_entry *plan_whole(gl_dev *d, plan_key *k, const void *)
{
    return lookup(d, k, 0);
}

/* The tile a deterministic backward of key k runs in, so that its
 * workspace fits det_ws_max(): k itself when it fits, else one sample at a
 * time (B = 1), then the heads in groups of Hq/g query heads with their
 * Hkv/g key heads (g = 2, 4, ...: whole GQA groups), the first tile whose
 * plan fits.  Attention is independent across samples and key-head
 * groups, so the tiles compute what the whole does, and each tile's bits
 * depend on its own inputs only: runs repeat.  The workspace scales with
 * B Hq, so tiles predicted not to fit are not planned.  can_tile: the
 * caller's pointers stay 16-byte aligned at every tile.  k becomes the
 * tile's key; NULL when cuDNN refuses a tile or none fits (det_too_big
 * has said so), and the kernels run the call. */
static plan_entry *det_tile(gl_dev *d, plan_key *k, planner plan,
                            const void *arg, int can_tile)
{
    plan_entry *e = plan(d, k, arg);
    if (!e || !k->det)
        return e;
    int64_t max = det_ws_max();     /* read under the flag only */
    if (e->ws <= max)
        return e;
    double per = (double)e->ws / ((double)k->B * k->Hq);   /* a sample's head */
    while (can_tile) {
        if (k->B > 1)
            k->B = 1;
        else if (k->Hkv % 2 == 0)
            k->Hq /= 2, k->Hkv /= 2;
        else
            break;
        int smallest = k->B == 1 && k->Hkv % 2;
        if (per * k->B * k->Hq > max && !smallest)
            continue;
        if (!(e = plan(d, k, arg)))
            return NULL;
        if (e->ws <= max) {
            gl_cuda_st(d)->attn_counts.det_tiled++;
            return e;
        }
    }
    det_too_big(d, e, max);
    return NULL;
}

int gl_cudnn_attn_bwd(gl_dev *d, bf16 *dq, bf16 *dk, bf16 *dv, int ldg,
                      const bf16 *dout, int lddo, const bf16 *o, int ldo,
                      const float *lse, const bf16 *q, int ldq, const bf16 *k,
                      int ldk, const bf16 *v, int ldv, int B, int S, int Hq,
                      int Hkv, int D, float scale)
{
    const void *p[] = {dq, dk, dv, dout, o, lse, q, k, v};
    const int ld[] = {ldg, ldg, ldg, lddo, ldo, 8, ldq, ldk, ldv};
    if (!usable(B, S, Hq, Hkv, D, scale, p, ld, 9))
        return 0;
    gl_cuda_state *st = gl_cuda_st(d);
    plan_key key = {BWD, B, S, Hq, Hkv, D, ldq, ldk, ldv, ldo, lddo, ldg, S, 1, S, S, S,
                    st->deterministic};
    plan_entry *e = det_tile(d, &key, plan_whole, NULL, S % 4 == 0);
    if (!e)
        return 0;
    /* tiles of tb samples and th query heads (th / (Hq / Hkv) key heads):
     * one tile, the whole call, unless det_tile cut it */
    int tb = key.B, th = key.Hq, group = Hq / Hkv;
    size_t wbytes = round256((size_t)e->ws);
    size_t dbytes = round256((size_t)tb * th * S * sizeof(float));
    size_t abytes = dqacc_bytes(key.det, tb, th, S, D);
    char *ws = (char *)gl_cuda_scratch(d, &st->s_cudnn, wbytes + dbytes + abytes);
    float fscale = scale, fneg = -3.402823466e38f, fone = 1.0f;
    for (int s0 = 0; s0 < B; s0 += tb)
        for (int h = 0; h < Hq; h += th) {
            size_t row = (size_t)s0 * S, hk = (size_t)(h / group) * D;
            bindings b = {};
            bind(&b, U_Q, q + row * ldq + (size_t)h * D);
            bind(&b, U_K, k + row * ldk + hk), bind(&b, U_V, v + row * ldv + hk);
            bind(&b, U_O, o + row * ldo + (size_t)h * D);
            bind(&b, U_DO, dout + row * lddo + (size_t)h * D);
            bind(&b, U_STATS, lse + ((size_t)s0 * Hq + h) * S);
            bind(&b, U_DQ, dq + row * ldg + (size_t)h * D);
            bind(&b, U_DK, dk + row * ldg + hk), bind(&b, U_DV, dv + row * ldg + hk);
            bind(&b, U_SCALE, &fscale), bind(&b, U_NEG, &fneg), bind(&b, U_ONE, &fone);
            bind(&b, U_DELTA, ws + wbytes);
            if (!key.det)
                bind(&b, U_DQACC, ws + wbytes + dbytes);
            execute(d, e, &b, ws);
        }
    return 1;
}

/* ---- context parallelism's blocks ----
 *
 * A block of Sq queries against Sk keys (ops.h's attn_block_fwd,
 * attn_block_bwd) runs as the parts gl_attn_block_split cuts it into:
 * each part is a full or a causal-diagonal piece, rows [q0, q0 + nq)
 * against rows [k0, k0 + nk), which the graphs above run in place on the
 * caller's tensors (their sample strides those of the whole block,
 * plan_key's qrows and krows).  Every query row lies in one part, so
 * nothing is merged; a part without keys writes o = 0, lse = -inf.  Under
 * Megatron's CP layout every block of the ring is one part (the own
 * diagonal, or the earlier rank's first chunk for all queries) or two
 * (the later rank's whole K/V for the second query chunk, no keys for
 * the first).  A block gl_attn_block_split cannot cut runs the kernels
 * of attn_block.cu.
 *
 * A part's lse and delta are rows [q0, q0 + nq) of [B, Hq, Sq]: the
 * graphs read and write them in place at head stride Sq where cuDNN
 * takes that (plan_key's lrows), else through packed copies.
 *
 * The graphs write act (bf16) outputs, the pattern cuDNN's fused
 * attention engine recognises; the block ops' outputs are f32, so the
 * forward writes o as bf16 into the workspace and converts it into the
 * f32 o (convert_2d), and the backward writes dq, dk, dv as bf16 into
 * the workspace and adds them to the f32 accumulators.  The lse comes
 * straight from the graph's statistics (fp32, the natural-log lse of
 * ops.h).  The backward reads the caller's delta and the FINAL lse: the
 * BWD_DELTA graph computes no delta and needs no o.  cuDNN 9.19 on an
 * H200 refuses that graph (no engine), so the part falls back, quietly
 * but for one line in the log, to the BWD graph fed an o' = delta dO /
 * |dO|^2 (rowsum(dO o') = delta, up to o''s bf16 rounding: the rounding
 * delta gets from o's in whole-sequence attention); BWD_DELTA stays
 * first, for the cuDNN that takes it.  The
 * forward's o, too, could be an FP32 output of the graph; whether the
 * engine then still runs flash attention is unseen, so o takes the bf16
 * path it is known to. */

/* The plan for a part's key k (its dir and lrows chosen here): the
 * directions dirs[0 .. ndir) in order of preference, each with the lse
 * and delta in place (lrows = Sq, when their rows start 16-byte aligned)
 * before packed (lrows = k->S); every refusal but the last quiet.  BWD
 * reads its o' at row stride OD, the whole block's Hq D (a tile of
 * det_tile has fewer heads, not narrower rows).  k keeps what was found;
 * 0 when cuDNN takes none. */
static int part_plan(gl_dev *d, plan_key *k, int Sq, int q0, int OD,
                     const int *dirs, int ndir)
{
    int lr[2], nl = 0;
    if (k->S < Sq && q0 % 4 == 0)
        lr[nl++] = Sq;
    lr[nl++] = k->S;
    for (int i = 0; i < ndir; i++)
        for (int j = 0; j < nl; j++) {
            k->dir = dirs[i];
            k->lrows = lr[j];
            if (k->dir == BWD)
                k->ldo = OD;                 /* o' in the workspace */
            if (lookup(d, k, i < ndir - 1 || j < nl - 1))
                return 1;
        }
    return 0;
}

/* The cached plan of a key part_plan found. */
static plan_entry *found(gl_dev *d, const plan_key *k)
{
    plan_entry *e = lookup(d, k, 1);
    if (!e)
        gl_die("cuDNN attention: the plan for a block part vanished");
    return e;
}

/* det_tile's planner for a block's part: part_plan over the directions
 * given. */
typedef struct {
    int Sq, q0, OD;
    const int *dirs;
    int ndir;
} part_args;

static plan_entry *plan_part(gl_dev *d, plan_key *k, const void *arg)
{
    const part_args *a = (const part_args *)arg;
    return part_plan(d, k, a->Sq, a->q0, a->OD, a->dirs, a->ndir) ? found(d, k) : NULL;
}

/* Rows [q0, q0 + n) of each sample without keys: o (bf16 [B, Sq, OD])
 * 0 and lse ([B, Hq, Sq]) -inf; a thread per (b, h, i). */
__global__ void part_empty_kernel(bf16 *o, float *lse, int Sq, int Hq, int D,
                                  int q0, int n, long total)
{
    long x = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (x >= total)
        return;
    long i = q0 + x % n, t = x / n;
    long h = t % Hq, b = t / Hq;
    lse[(b * Hq + h) * Sq + i] = -INFINITY;
    bf16 *row = o + (b * Sq + i) * (long)Hq * D + h * D;
    for (int e = 0; e < D; e++)
        row[e] = __float2bfloat16(0.0f);
}

/* dst f32 [B, Sp, H, D] rows s < S (row stride ldd) += src, element
 * (b, s, h, e) of src at b sb + s ss + h sh + e: a grid-stride loop,
 * indices in 64 bits. */
template <class T>
__global__ void block_add_kernel(float *dst, long ldd, int Sp, const T *src,
                                 long sb, long ss, long sh, int S, int H, int D,
                                 long n)
{
    for (long x = (long)blockIdx.x * blockDim.x + threadIdx.x; x < n;
         x += (long)gridDim.x * blockDim.x) {
        long e = x % D, r = x / D;
        long h = r % H, t = r / H;
        long s = t % S, b = t / S;
        float v;
        if constexpr (sizeof(T) == 2)
            v = __bfloat162float(src[b * sb + s * ss + h * sh + e]);
        else
            v = src[b * sb + s * ss + h * sh + e];
        dst[(b * Sp + s) * ldd + h * D + e] += v;
    }
}

template <class T>
static void block_add(gl_dev *d, float *dst, long ldd, int Sp, const T *src,
                      long sb, long ss, long sh, int B, int S, int H, int D)
{
    long n = (long)B * S * H * D;
    long blocks = (n + 255) / 256;
    unsigned grid = (unsigned)(blocks < 65536 ? blocks : 65536);
    block_add_kernel<T><<<grid, 256, 0, gl_cuda_st(d)->stream>>>(
        dst, ldd, Sp, src, sb, ss, sh, S, H, D, n);
    GL_CUDA_LAUNCHED("attn_block (cuDNN's gradients added)");
}

/* Rows [q0, q0 + n) of the [B Hq, Sq] floats x to or from a packed
 * [B Hq, n] copy y: a part's lse or delta when cuDNN takes them packed
 * only. */
static void rows_out(gl_dev *d, float *x, int Sq, const float *y, int q0,
                     int n, int BH)
{
    gl_cuda_convert_2d(d, x + q0, GL_DT_F32, Sq, y, GL_DT_F32, n, BH, n);
}

static void rows_in(gl_dev *d, float *y, const float *x, int Sq, int q0,
                    int n, int BH)
{
    gl_cuda_convert_2d(d, y, GL_DT_F32, n, x + q0, GL_DT_F32, Sq, BH, n);
}

int gl_cudnn_attn_block_fwd(gl_dev *d, float *o, int ldo, float *lse,
                            const bf16 *q, int ldq, const bf16 *k, int ldk,
                            const bf16 *v, int ldv, int B, int Sq, int Sk,
                            int Hq, int Hkv, int D, float scale,
                            const gl_attn_pos *qpos, const gl_attn_pos *kpos,
                            gl_attn_mask mask)
{
    gl_attn_part part[GL_ATTN_PARTS];
    int np = gl_attn_block_split(qpos, Sq, kpos, Sk, mask, part);
    if (!np || ldo < Hq * D)
        return 0;
    const void *p[] = {q, k, v, lse};
    const int ld[] = {ldq, ldk, ldv, 8};
    if (!usable(B, Sq, Hq, Hkv, D, scale, p, ld, 4))
        return 0;
    int OD = Hq * D;                      /* the bf16 o in the workspace */
    plan_key key[GL_ATTN_PARTS];
    size_t wbytes = 0;
    const int fwd[] = {FWD};
    for (int i = 0; i < np; i++) {
        if (!part[i].nk)
            continue;
        key[i] = (plan_key){FWD, B, part[i].nq, Hq, Hkv, D, ldq, ldk, ldv, OD,
                            0, 0, part[i].nk, part[i].causal, Sq, Sk, 0, 0};
        if (!part_plan(d, &key[i], Sq, part[i].q0, OD, fwd, 1))
            return 0;
        size_t w = round256((size_t)found(d, &key[i])->ws);
        wbytes = w > wbytes ? w : wbytes;
    }
    gl_cuda_state *st = gl_cuda_st(d);
    size_t obytes = round256((size_t)B * Sq * OD * sizeof(bf16));
    size_t lbytes = round256((size_t)B * Hq * Sq * sizeof(float));
    char *ws = (char *)gl_cuda_scratch(d, &st->s_cudnn, wbytes + obytes + lbytes);
    bf16 *obf = (bf16 *)(ws + wbytes);
    float *lpk = (float *)(ws + wbytes + obytes);   /* a packed lse */
    float fscale = scale, fneg = -3.402823466e38f;   /* the lowest float */
    for (int i = 0; i < np; i++) {
        const gl_attn_part *t = &part[i];
        if (!t->nk) {
            long total = (long)B * Hq * t->nq;
            part_empty_kernel<<<(unsigned)((total + 255) / 256), 256, 0,
                                st->stream>>>(obf, lse, Sq, Hq, D, t->q0,
                                              t->nq, total);
            GL_CUDA_LAUNCHED("attn_block (rows without keys)");
            continue;
        }
        int inplace = key[i].lrows == Sq;
        bindings b = {};
        bind(&b, U_Q, q + (size_t)t->q0 * ldq), bind(&b, U_K, k + (size_t)t->k0 * ldk);
        bind(&b, U_V, v + (size_t)t->k0 * ldv), bind(&b, U_O, obf + (size_t)t->q0 * OD);
        bind(&b, U_STATS, inplace ? lse + t->q0 : lpk), bind(&b, U_SCALE, &fscale);
        if (t->causal)
            bind(&b, U_NEG, &fneg);
        execute(d, found(d, &key[i]), &b, ws);
        if (!inplace)
            rows_out(d, lse, Sq, lpk, t->q0, t->nq, B * Hq);
    }
    gl_cuda_convert_2d(d, o, GL_DT_F32, ldo, obf, GL_DT_BF16, OD, B * Sq, OD);
    return 1;
}

/* Warp per row (b, i, h) of dO [B, S, Hq, D] (row stride lddo): the bf16
 * row o' = delta dO / |dO|^2 of ox [B, S, Hq D], so that rowsum(dO o') =
 * delta (0 where dO is 0, and then delta is too).  |o'| <= |o| for the o
 * delta was made from, so nothing overflows; o' rounds to bf16 as o did. */
__global__ void delta_as_o_kernel(bf16 *ox, const bf16 *dout, int lddo,
                                  const float *delta, int B, int S, int Hq,
                                  int D)
{
    long w = ((long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x % 32;
    if (w >= (long)B * S * Hq)
        return;
    int h = (int)(w % Hq);
    long t = w / Hq;                     /* b S + i */
    long b = t / S, i = t % S;
    const bf16 *g = dout + t * lddo + (long)h * D;
    float ss = 0;
    for (int e = lane; e < D; e += 32) {
        float x = __bfloat162float(g[e]);
        ss += x * x;
    }
    for (int off = 16; off > 0; off >>= 1)
        ss += __shfl_xor_sync(0xffffffffu, ss, off);
    float f = ss > 0 ? delta[(b * Hq + h) * S + i] / ss : 0.0f;
    bf16 *o = ox + t * (long)Hq * D + (long)h * D;
    for (int e = lane; e < D; e += 32)
        o[e] = __float2bfloat16(f * __bfloat162float(g[e]));
}

/* Said once a device: a backward part took the BWD graph. */
static void said_delta_via_o(gl_dev *d)
{
    gl_cudnn *c = gl_cuda_st(d)->cudnn;
    if (!c->delta_via_o) {
        c->delta_via_o = 1;
        gl_info0("cuDNN %ld takes no block attention backward that reads "
                 "delta; it recomputes delta from an o made for it",
                 gl_cuda_cudnn_version());
    }
}

int gl_cudnn_attn_block_bwd(gl_dev *d, float *dq, int lddq, float *dk,
                            float *dv, int lddkv, const bf16 *dout, int lddo,
                            const float *lse, const float *delta,
                            const bf16 *q, int ldq, const bf16 *k, int ldk,
                            const bf16 *v, int ldv, int B, int Sq, int Sk,
                            int Hq, int Hkv, int D, float scale,
                            const gl_attn_pos *qpos, const gl_attn_pos *kpos,
                            gl_attn_mask mask)
{
    gl_attn_part part[GL_ATTN_PARTS];
    int np = gl_attn_block_split(qpos, Sq, kpos, Sk, mask, part);
    if (!np)
        return 0;
    const void *p[] = {dout, lse, delta, q, k, v};
    const int ld[] = {lddo, 8, 8, ldq, ldk, ldv};
    if (!usable(B, Sq, Hq, Hkv, D, scale, p, ld, 6))
        return 0;
    /* the bf16 gradients in the workspace as the model's fused QKV rows:
     * dq, dk, dv side by side in rows of W, max(Sq, Sk) rows per sample */
    int W = (Hq + 2 * Hkv) * D, R = Sq > Sk ? Sq : Sk, OD = Hq * D;
    plan_key key[GL_ATTN_PARTS];
    size_t wbytes = 0;
    int via_o = 0, with_keys = 0;
    /* BWD_DELTA reads delta; BWD recomputes it from delta_as_o_kernel's o */
    const int bwd[] = {BWD_DELTA, BWD};
    gl_cuda_state *st = gl_cuda_st(d);
    for (int i = 0; i < np; i++) {
        if (!part[i].nk)
            continue;                     /* rows without keys add nothing */
        with_keys++;
        key[i] = (plan_key){BWD_DELTA, B, part[i].nq, Hq, Hkv, D, ldq, ldk,
                            ldv, 0, lddo, W, part[i].nk, part[i].causal, Sq,
                            Sk, 0, st->deterministic};
        part_args pa = {Sq, part[i].q0, OD, bwd, 2};
        plan_entry *e = det_tile(d, &key[i], plan_part, &pa,
                                 Sq % 4 == 0 && part[i].nq % 4 == 0);
        if (!e)
            return 0;
        via_o |= key[i].dir == BWD;
        size_t w = round256((size_t)e->ws);
        wbytes = w > wbytes ? w : wbytes;
    }
    if (!with_keys)
        return 1;                         /* a block without keys: nothing */
    size_t abytes = dqacc_bytes(st->deterministic, B, Hq, Sq, D);
    size_t gbytes = round256((size_t)B * R * W * sizeof(bf16));
    size_t lbytes = round256((size_t)B * Hq * Sq * sizeof(float));
    size_t obytes = via_o ? round256((size_t)B * Sq * OD * sizeof(bf16)) : 0;
    /* then: packed lse, packed delta (BWD_DELTA's input or BWD's output) */
    char *ws = (char *)gl_cuda_scratch(d, &st->s_cudnn, wbytes + abytes + gbytes +
                                                            obytes + 2 * lbytes);
    float *dqacc = (float *)(ws + wbytes);
    bf16 *g = (bf16 *)(ws + wbytes + abytes);
    bf16 *gdk = g + (size_t)Hq * D, *gdv = gdk + (size_t)Hkv * D;
    bf16 *ox = (bf16 *)(ws + wbytes + abytes + gbytes);
    float *lpk = (float *)(ws + wbytes + abytes + gbytes + obytes);
    float *dpk = lpk + lbytes / sizeof(float);
    float fscale = scale, fneg = -3.402823466e38f, fone = 1.0f;
    if (via_o) {
        said_delta_via_o(d);
        long threads = (long)B * Sq * Hq * 32;
        delta_as_o_kernel<<<(unsigned)((threads + 255) / 256), 256, 0,
                            st->stream>>>(ox, dout, lddo, delta, B, Sq, Hq, D);
        GL_CUDA_LAUNCHED("attn_block_bwd (delta as o)");
    }
    for (int i = 0; i < np; i++) {
        const gl_attn_part *t = &part[i];
        if (!t->nk)
            continue;
        const plan_key *kt = &key[i];
        int inplace = kt->lrows == Sq;
        /* the lse and delta rows of sample s, head h at l + (s Hq + h) ls */
        const float *l = lse + t->q0, *dl = delta + t->q0;
        float *dx = inplace ? dpk + t->q0 : dpk;   /* BWD's own delta */
        long ls = inplace ? Sq : t->nq;
        if (!inplace) {
            rows_in(d, lpk, lse, Sq, t->q0, t->nq, B * Hq);
            l = lpk;
            if (kt->dir == BWD_DELTA) {
                rows_in(d, dpk, delta, Sq, t->q0, t->nq, B * Hq);
                dl = dpk;
            }
        }
        plan_entry *e = found(d, kt);
        /* tiles of kt->B samples and kt->Hq heads (det_tile): one, the
         * whole part, unless the deterministic workspace cut it */
        for (int s0 = 0; s0 < B; s0 += kt->B)
            for (int h = 0; h < Hq; h += kt->Hq) {
                size_t qr = (size_t)s0 * Sq + t->q0, kr = (size_t)s0 * Sk + t->k0;
                size_t hq = (size_t)h * D, hk = (size_t)(h / (Hq / Hkv)) * D;
                size_t lo = ((size_t)s0 * Hq + h) * ls;
                bindings b = {};
                bind(&b, U_Q, q + qr * ldq + hq), bind(&b, U_K, k + kr * ldk + hk);
                bind(&b, U_V, v + kr * ldv + hk), bind(&b, U_DO, dout + qr * lddo + hq);
                bind(&b, U_STATS, l + lo), bind(&b, U_DQ, g + (size_t)s0 * t->nq * W + hq);
                bind(&b, U_DK, gdk + (size_t)s0 * t->nk * W + hk);
                bind(&b, U_DV, gdv + (size_t)s0 * t->nk * W + hk);
                bind(&b, U_SCALE, &fscale);
                if (t->causal)
                    bind(&b, U_NEG, &fneg);
                if (!kt->det)
                    bind(&b, U_DQACC, dqacc);
                if (kt->dir == BWD_DELTA) {
                    bind(&b, U_DELTA, dl + lo);
                } else {
                    /* o' for the graph's own delta, which goes where
                     * nobody reads it: dpk, at head stride Sq or packed */
                    bind(&b, U_O, ox + qr * OD + hq), bind(&b, U_ONE, &fone);
                    bind(&b, U_DELTA, dx + lo);
                }
                execute(d, e, &b, ws);
            }
        /* dq, dk, dv from the graph's bf16 outputs, rows [B, nq or nk, W].
         * Not dq from the fp32 accumulator: cuDNN's engine keeps its own
         * use of it (on an H200 with cuDNN 9.19 its contents after the
         * call were not dq: relative rms error 1.2 against the CPU), and
         * only the bf16 output is what the whole-sequence tests check. */
        block_add(d, dq + (size_t)t->q0 * lddq, lddq, Sq, g, (long)t->nq * W, W,
                  D, B, t->nq, Hq, D);
        block_add(d, dk + (size_t)t->k0 * lddkv, lddkv, Sk, gdk, (long)t->nk * W,
                  W, D, B, t->nk, Hkv, D);
        block_add(d, dv + (size_t)t->k0 * lddkv, lddkv, Sk, gdv, (long)t->nk * W,
                  W, D, B, t->nk, Hkv, D);
    }
    return 1;
}

void gl_cudnn_close(gl_dev *d)
{
    gl_cuda_state *st = gl_cuda_st(d);
    gl_cudnn *c = st->cudnn;
    if (!c)
        return;
    for (int i = 0; i < c->n; i++) {
        if (c->e[i].plan)
            cudnnBackendDestroyDescriptor(c->e[i].plan);
        for (int j = c->e[i].nkeep - 1; j >= 0; j--)
            cudnnBackendDestroyDescriptor(c->e[i].keep[j]);
        free(c->e[i].keep);
    }
    free(c->e);
    if (!c->unusable)
        cudnnDestroy(c->h);
    free(c);
    st->cudnn = NULL;
}

#endif /* GL_HAVE_CUDNN */
