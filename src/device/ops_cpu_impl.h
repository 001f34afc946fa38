/*
 * ops_cpu_impl.h: the CPU kernels, generic over the element type.
 *
 * No include guard: ops_cpu_kern.c includes this file twice, with `real`
 * defined as float and as double, GL_K(name) naming the function and
 * GL_K_GEMM the CBLAS routine of that type.  <tgmath.h> makes exp, log,
 * sqrt and pow follow the type of their argument.
 *
 * Clear before fast: plain loops over row-major arrays, one CBLAS call
 * for the matrix product.  Sums that reduce many terms (norms, dot
 * products, softmax denominators) accumulate in double in both versions.
 * Each kernel's comment gives the forward math and the derivation of its
 * backward.
 */

/*
 * C = alpha op(A) op(B) + beta C, row-major, op(X) = X^T when trans is set.
 * The backward of Y = X W^T (X [n, in], W [out, in]) is two more calls:
 *   dX = dY W       (gemm(0, 0, n, in, out, dY, W))
 *   dW += dY^T X    (gemm(1, 0, out, in, n, dY, X, beta = 1)).
 */
void GL_K(gemm)(int transa, int transb, int m, int n, int k, real alpha,
                const real *A, int lda, const real *B, int ldb, real beta,
                real *C, int ldc)
{
    if (m <= 0 || n <= 0)
        return;
    if (k <= 0) {                 /* an empty product: C = beta C */
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++)
                C[(size_t)i * ldc + j] = beta == 0 ? 0 : beta * C[(size_t)i * ldc + j];
        return;
    }
    GL_K_GEMM(CblasRowMajor, transa ? CblasTrans : CblasNoTrans,
              transb ? CblasTrans : CblasNoTrans, m, n, k, alpha,
              A, lda, B, ldb, beta, C, ldc);
}

/* y = x + r elementwise; backward is the identity into both operands. */
void GL_K(add)(real *y, const real *x, const real *r, size_t count)
{
    for (size_t i = 0; i < count; i++)
        y[i] = x[i] + r[i];
}

/*
 * RMSNorm of each row x of h elements:
 *   rstd = 1 / sqrt(mean(x^2) + eps),   y_j = x_j rstd w_j.
 * Backward, with g = w * dy (the gradient reaching x rstd):
 *   d rstd / d x_k = -rstd^3 x_k / h, so
 *   dx_k = rstd g_k - x_k rstd^3 (1/h) sum_j g_j x_j
 *        = rstd (g_k - x_k rstd^2 mean(g x)),
 *   dw_j = sum over rows of dy_j x_j rstd.
 */
void GL_K(rmsnorm_fwd)(real *y, real *rstd, const real *x, const real *w,
                       int n, int h, real eps)
{
    for (int i = 0; i < n; i++) {
        const real *xi = x + (size_t)i * h;
        real *yi = y + (size_t)i * h;
        double ss = 0;
        for (int j = 0; j < h; j++)
            ss += (double)xi[j] * xi[j];
        real r = (real)(1 / sqrt(ss / h + eps));
        for (int j = 0; j < h; j++)
            yi[j] = xi[j] * r * w[j];
        rstd[i] = r;
    }
}

void GL_K(rmsnorm_bwd)(real *dx, real *dw, const real *dy, const real *x,
                       const real *w, const real *rstd, int n, int h,
                       int accumulate_dx)
{
    for (int i = 0; i < n; i++) {
        const real *xi = x + (size_t)i * h, *dyi = dy + (size_t)i * h;
        real *dxi = dx + (size_t)i * h;
        real r = rstd[i];
        double gx = 0;
        for (int j = 0; j < h; j++)
            gx += (double)w[j] * dyi[j] * xi[j];
        real c = (real)(gx / h) * r * r;
        for (int j = 0; j < h; j++) {
            real d = r * (w[j] * dyi[j] - xi[j] * c);
            dxi[j] = accumulate_dx ? dxi[j] + d : d;
            dw[j] += dyi[j] * xi[j] * r;
        }
    }
}

/*
 * Rotary embedding, rotate-half convention: in each head of D elements,
 * element i < D/2 pairs with i + D/2, and the pair turns by the angle of
 * token position s and frequency i:
 *   x'_i       = x_i cos - x_{i+D/2} sin
 *   x'_{i+D/2} = x_{i+D/2} cos + x_i sin        (cos, sin = table[s, i]).
 * The map is a rotation R, so its backward (multiplication by R^T) is the
 * inverse rotation, the same formula with sin negated.
 */
static void GL_K(rope_apply)(real *x, int ld, int B, int S, int H, int D,
                             const real *cos, const real *sin, real sign,
                             const char *what)
{
    if (D % 2 != 0)
        gl_die("%s: head dimension %d is odd; rotary embedding pairs "
               "elements i and i + D/2 and needs an even head dimension",
               what, D);
    int half = D / 2;
    for (int b = 0; b < B; b++)
        for (int s = 0; s < S; s++) {
            const real *cs = cos + (size_t)s * half;
            const real *sn = sin + (size_t)s * half;
            real *tok = x + ((size_t)b * S + s) * ld;
            for (int hd = 0; hd < H; hd++) {
                real *xh = tok + (size_t)hd * D;
                for (int i = 0; i < half; i++) {
                    real a = xh[i], c = xh[i + half];
                    real sv = sign * sn[i];
                    xh[i] = a * cs[i] - c * sv;
                    xh[i + half] = c * cs[i] + a * sv;
                }
            }
        }
}

void GL_K(rope_fwd)(real *x, int ld, int B, int S, int H, int D,
                    const real *cos, const real *sin)
{
    GL_K(rope_apply)(x, ld, B, S, H, D, cos, sin, 1, "rope_fwd");
}

void GL_K(rope_bwd)(real *x, int ld, int B, int S, int H, int D,
                    const real *cos, const real *sin)
{
    GL_K(rope_apply)(x, ld, B, S, H, D, cos, sin, -1, "rope_bwd");
}

/*
 * Causal grouped-query attention, one (batch, query head j) at a time,
 * with kv head g = j / (Hq / Hkv).  For query token t and keys u <= t:
 *   s_tu = scale q_t . k_u,  lse_t = log sum_{u<=t} exp(s_tu),
 *   P_tu = exp(s_tu - lse_t),  o_t = sum_{u<=t} P_tu v_u.
 * Backward, from dO (dout):
 *   dv_u = sum_t P_tu do_t                    (over the query heads of g)
 *   dP_tu = do_t . v_u
 *   dS_tu = P_tu (dP_tu - sum_w P_tw dP_tw) = P_tu (dP_tu - do_t . o_t)
 *   dq_t = scale sum_u dS_tu k_u,   dk_u = scale sum_t dS_tu q_t.
 * P is recomputed from q, k and the saved lse; only one score row of S
 * elements exists at a time.
 */
static void GL_K(attn_check)(int Hq, int Hkv, const char *what)
{
    if (Hkv <= 0 || Hq % Hkv != 0)
        gl_die("%s: %d query heads are not a multiple of %d key/value heads; "
               "choose --num-attention-heads divisible by --num-query-groups",
               what, Hq, Hkv);
}

/* The dropout factor of probability (b, h, t, u) of an attention call:
 * 1 / (1 - p) when kept, 0 when dropped, 1 without dropout (dp NULL or
 * p = 0).  The element index is gl_attn_dropout's. */
static double GL_K(attn_keep)(const gl_attn_dropout *dp, int b, int h, int S,
                              long t, long u)
{
    if (!dp || dp->p <= 0)
        return 1;
    uint64_t e = ((uint64_t)(dp->b0 + b) * (uint64_t)dp->heads + (uint64_t)(dp->h0 + h)) *
                 (uint64_t)S * (uint64_t)S + (uint64_t)t * (uint64_t)S + (uint64_t)u;
    uint32_t stream = gl_dropout_stream(dp->layer, dp->site);
    if (!gl_dropout_keep(dp->seed, dp->iteration, stream, e, gl_dropout_threshold(dp->p)))
        return 0;
    return 1.0 / (1.0 - (double)dp->p);
}

/*
 * The position of row i of a block (gl_attn_pos: two contiguous runs).
 * The whole sequence of attn_fwd and attn_bwd is one run from position
 * 0: there row t is position t.
 */
static long GL_K(block_pos)(const gl_attn_pos *p, int i)
{
    return i < p->split ? p->start[0] + i : p->start[1] + (i - p->split);
}

/*
 * The keys a query at position qp attends, as row ranges [lo[r], hi[r])
 * of the two runs r of the keys' positions kpos (Sk rows).  Under the
 * full mask a run is whole; under the causal mask (keys at positions <=
 * qp), as a run's positions rise by one a row, its allowed keys are a
 * prefix of it.  So a row visits exactly its allowed keys, in key order:
 * in the whole sequence, rows 0 .. t of run 0.
 */
typedef struct {
    int lo[2], hi[2];
} GL_K(attn_keys);

static GL_K(attn_keys) GL_K(keys_seen)(const gl_attn_pos *kpos, int Sk,
                                       gl_attn_mask mask, long qp)
{
    GL_K(attn_keys) ks;
    for (int r = 0; r < 2; r++) {
        int lo = r == 0 ? 0 : kpos->split, hi = r == 0 ? kpos->split : Sk;
        if (mask == GL_ATTN_CAUSAL && lo < hi) {
            long n = qp - kpos->start[r] + 1;   /* start + i <= qp: i < n */
            if (n < hi - lo)
                hi = lo + (n > 0 ? (int)n : 0);
        }
        ks.lo[r] = lo;
        ks.hi[r] = hi;
    }
    return ks;
}

/*
 * One (sample b, query head j) of an attention call, as its query rows
 * see it: the Sk key and value rows of the query head's kv head (k and v
 * point at that head in key row 0; row strides ldk and ldv; D elements a
 * head), their positions kpos, the mask, and the dropout (NULL: none, as
 * in every block call), whose element index attn_keep forms from b, j,
 * the sequence length S and the positions of the query and the key.
 */
typedef struct {
    const real *k, *v;
    int ldk, ldv, Sk, D;
    real scale;
    const gl_attn_pos *kpos;
    gl_attn_mask mask;
    const gl_attn_dropout *drop;
    int b, j, S;
} GL_K(attn_head);

/* Point h at sample b and query head j of the calls' k and v, of Sk key
 * rows a sample and Hq / Hkv = group query heads a kv head. */
static void GL_K(attn_head_at)(GL_K(attn_head) *h, const real *k,
                               const real *v, int b, int j, int group)
{
    size_t head = (size_t)(j / group) * h->D;
    h->k = k + (size_t)b * h->Sk * h->ldk + head;
    h->v = v + (size_t)b * h->Sk * h->ldv + head;
    h->b = b;
    h->j = j;
}

/*
 * One query row of attn_fwd and attn_block_fwd: the output ot (D
 * elements) and the lse *lt of query qt, at position qp, against the keys
 * of h that it attends (A, keys_seen):
 *   s_u = scale qt . k_u,  lse = log sum_{u in A} exp(s_u),
 *   ot  = sum_{u in A} exp(s_u - lse) keep_u v_u,
 * keep_u the dropout factor of attn_keep (1 without dropout).  p (Sk
 * doubles, of which the rows of A are used) and acc (D doubles) are
 * scratch.  An empty A gives ot = 0 and lse = -inf.
 */
static void GL_K(attn_row_fwd)(real *ot, real *lt, const real *qt, long qp,
                               const GL_K(attn_head) *h, double *p,
                               double *acc)
{
    int D = h->D;
    GL_K(attn_keys) ks = GL_K(keys_seen)(h->kpos, h->Sk, h->mask, qp);
    double mx = -INFINITY;
    for (int r = 0; r < 2; r++)
        for (int u = ks.lo[r]; u < ks.hi[r]; u++) {
            const real *ku = h->k + (size_t)u * h->ldk;
            double dot = 0;
            for (int e = 0; e < D; e++)
                dot += (double)qt[e] * ku[e];
            p[u] = h->scale * dot;
            if (p[u] > mx)
                mx = p[u];
        }
    if (mx == -INFINITY) {               /* no allowed key */
        memset(ot, 0, (size_t)D * sizeof *ot);
        *lt = -INFINITY;
        return;
    }
    double sum = 0;
    for (int r = 0; r < 2; r++)
        for (int u = ks.lo[r]; u < ks.hi[r]; u++)
            sum += exp(p[u] - mx);
    double l = mx + log(sum);
    for (int e = 0; e < D; e++)
        acc[e] = 0;
    for (int r = 0; r < 2; r++)
        for (int u = ks.lo[r]; u < ks.hi[r]; u++) {
            /* w = P' = M P / (1 - p), the dropped probability */
            double w = exp(p[u] - l) *
                       GL_K(attn_keep)(h->drop, h->b, h->j, h->S, qp,
                                       GL_K(block_pos)(h->kpos, u));
            const real *vu = h->v + (size_t)u * h->ldv;
            for (int e = 0; e < D; e++)
                acc[e] += w * vu[e];
        }
    for (int e = 0; e < D; e++)
        ot[e] = (real)acc[e];
    *lt = (real)l;
}

/*
 * The backward of one query row of attn_row_fwd, with dropout.  For query
 * qt at position qp and each key u it attends, with s_u = scale qt.k_u,
 * P_u = exp(s_u - l) (l the row's lse), keep_u = M_u / (1 - p) (1
 * without dropout) and P'_u = keep_u P_u:
 *   O_t   = sum_u P'_u v_u
 *   dv_u += P'_u dO_t
 *   dP'_u = dO_t.v_u,   dP_u = keep_u dP'_u
 *   ds_u  = P_u (dP_u - sum_w P_w dP_w)       (the softmax's backward,
 *                                              with the undropped P)
 * and the row sum is sum_w P_w keep_w dP'_w = sum_w P'_w dO_t.v_w
 * = dO_t.O_t = Dt with O the (dropped) output: the usual Dt, unchanged.
 * dq_t += scale ds_u k_u, dk_u += scale ds_u q_t.  dqt is the row's dq
 * (D elements); dk and dv point at h's kv head in key row 0, row stride
 * lddkv; all three accumulate.
 */
static void GL_K(attn_row_bwd)(real *dqt, real *dk, real *dv, int lddkv,
                               const real *qt, const real *dot_, long qp,
                               double l, double Dt, const GL_K(attn_head) *h)
{
    int D = h->D;
    GL_K(attn_keys) ks = GL_K(keys_seen)(h->kpos, h->Sk, h->mask, qp);
    for (int r = 0; r < 2; r++)
        for (int u = ks.lo[r]; u < ks.hi[r]; u++) {
            const real *ku = h->k + (size_t)u * h->ldk;
            const real *vu = h->v + (size_t)u * h->ldv;
            real *dku = dk + (size_t)u * lddkv;
            real *dvu = dv + (size_t)u * lddkv;
            double s = 0, dp = 0;
            for (int e = 0; e < D; e++) {
                s += (double)qt[e] * ku[e];
                dp += (double)dot_[e] * vu[e];
            }
            /* dp = dO.V_u is dP' of the dropped probability P' = keep P;
             * dP = keep dP' (keep: attn_keep) */
            double keep = GL_K(attn_keep)(h->drop, h->b, h->j, h->S, qp,
                                          GL_K(block_pos)(h->kpos, u));
            double p = exp(h->scale * s - l);
            real ds = (real)(p * (keep * dp - Dt) * h->scale);
            for (int e = 0; e < D; e++) {
                dqt[e] += ds * ku[e];
                dku[e] += ds * qt[e];
                dvu[e] += (real)(keep * p) * dot_[e];
            }
        }
}

/* attn_fwd: attn_row_fwd over every row, the sequence one causal block. */
void GL_K(attn_fwd)(real *o, int ldo, real *lse, const real *q, int ldq,
                    const real *k, int ldk, const real *v, int ldv,
                    int B, int S, int Hq, int Hkv, int D, real scale,
                    const gl_attn_dropout *drop)
{
    GL_K(attn_check)(Hq, Hkv, "attn_fwd");
    if (drop)
        gl_attn_dropout_check(drop, Hq, "attn_fwd");
    gl_attn_pos whole = { .split = S, .start = { 0, 0 } };
    GL_K(attn_head) h = { .ldk = ldk, .ldv = ldv, .Sk = S, .D = D,
                          .scale = scale, .kpos = &whole,
                          .mask = GL_ATTN_CAUSAL, .drop = drop, .S = S };
    int group = Hq / Hkv;
    double *p = gl_malloc((size_t)(S > 0 ? S : 1) * sizeof *p);
    double *acc = gl_malloc((size_t)(D > 0 ? D : 1) * sizeof *acc);
    for (int b = 0; b < B; b++)
        for (int j = 0; j < Hq; j++) {
            GL_K(attn_head_at)(&h, k, v, b, j, group);
            for (int t = 0; t < S; t++) {
                size_t row = (size_t)b * S + t;
                GL_K(attn_row_fwd)(o + row * ldo + (size_t)j * D,
                                   lse + ((size_t)b * Hq + j) * S + t,
                                   q + row * ldq + (size_t)j * D, t, &h,
                                   p, acc);
            }
        }
    free(acc);
    free(p);
}

/* Zero `heads` heads of D elements in each of B*S token rows of stride ld. */
static void GL_K(zero_heads)(real *x, int ld, int BS, int heads, int D)
{
    for (int r = 0; r < BS; r++)
        memset(x + (size_t)r * ld, 0, (size_t)heads * D * sizeof(real));
}

/* The backward of attn_fwd: attn_row_bwd over every row, with the row
 * sum Dt = dO_t.O_t summed here in double. */
void GL_K(attn_bwd)(real *dq, real *dk, real *dv, int ldg,
                    const real *dout, int lddo, const real *o, int ldo,
                    const real *lse, const real *q, int ldq,
                    const real *k, int ldk, const real *v, int ldv,
                    int B, int S, int Hq, int Hkv, int D, real scale,
                    const gl_attn_dropout *drop)
{
    GL_K(attn_check)(Hq, Hkv, "attn_bwd");
    if (drop)
        gl_attn_dropout_check(drop, Hq, "attn_bwd");
    gl_attn_pos whole = { .split = S, .start = { 0, 0 } };
    GL_K(attn_head) h = { .ldk = ldk, .ldv = ldv, .Sk = S, .D = D,
                          .scale = scale, .kpos = &whole,
                          .mask = GL_ATTN_CAUSAL, .drop = drop, .S = S };
    int group = Hq / Hkv;
    GL_K(zero_heads)(dq, ldg, B * S, Hq, D);
    GL_K(zero_heads)(dk, ldg, B * S, Hkv, D);
    GL_K(zero_heads)(dv, ldg, B * S, Hkv, D);
    for (int b = 0; b < B; b++)
        for (int j = 0; j < Hq; j++) {
            GL_K(attn_head_at)(&h, k, v, b, j, group);
            size_t kv = (size_t)b * S * ldg + (size_t)(j / group) * D;
            for (int t = 0; t < S; t++) {
                size_t row = (size_t)b * S + t;
                const real *dot_ = dout + row * lddo + (size_t)j * D;
                const real *ot = o + row * ldo + (size_t)j * D;
                double Dt = 0;
                for (int e = 0; e < D; e++)
                    Dt += (double)dot_[e] * ot[e];
                GL_K(attn_row_bwd)(dq + row * ldg + (size_t)j * D,
                                   dk + kv, dv + kv, ldg,
                                   q + row * ldq + (size_t)j * D, dot_, t,
                                   lse[((size_t)b * Hq + j) * S + t], Dt,
                                   &h);
            }
        }
}

/*
 * Context parallelism's block attention (see ops.h): attention of Sq
 * queries against Sk keys that may be any part of the sequence, each row
 * carrying its position (two contiguous runs, gl_attn_pos).  With the
 * allowed keys A_i of query i (causal: kpos(u) <= qpos(i); full: all):
 *   s_iu = scale q_i . k_u,  lse_i = log sum_{u in A_i} exp(s_iu),
 *   o_i  = sum_{u in A_i} exp(s_iu - lse_i) v_u;
 * an empty A_i gives o_i = 0 and lse_i = -inf.  Blocks over a partition
 * of the keys merge exactly (attn_merge) into attention over all of
 * them, and the backward of each block from the final lse and delta is
 * attn_bwd's restricted to the block's pairs, so the blocks' gradients
 * add up to attn_bwd's.  The rows are attn_fwd's and attn_bwd's
 * (attn_row_fwd, attn_row_bwd), without dropout.
 */
static void GL_K(block_check)(const gl_attn_pos *qpos, int Sq,
                              const gl_attn_pos *kpos, int Sk,
                              gl_attn_mask mask, const char *what)
{
    if (qpos->split < 0 || qpos->split > Sq || kpos->split < 0 || kpos->split > Sk)
        gl_die("%s: a position run splits at row %d of %d queries or %d of %d "
               "keys: split must lie in [0, rows]", what, qpos->split, Sq,
               kpos->split, Sk);
    if (mask != GL_ATTN_CAUSAL && mask != GL_ATTN_FULL)
        gl_die("%s: unknown mask %d", what, (int)mask);
}

void GL_K(attn_block_fwd)(real *o, int ldo, real *lse, const real *q, int ldq,
                          const real *k, int ldk, const real *v, int ldv,
                          int B, int Sq, int Sk, int Hq, int Hkv, int D,
                          real scale, const gl_attn_pos *qpos,
                          const gl_attn_pos *kpos, gl_attn_mask mask)
{
    GL_K(attn_check)(Hq, Hkv, "attn_block_fwd");
    GL_K(block_check)(qpos, Sq, kpos, Sk, mask, "attn_block_fwd");
    GL_K(attn_head) h = { .ldk = ldk, .ldv = ldv, .Sk = Sk, .D = D,
                          .scale = scale, .kpos = kpos, .mask = mask };
    int group = Hq / Hkv;
    double *p = gl_malloc((size_t)(Sk > 0 ? Sk : 1) * sizeof *p);
    double *acc = gl_malloc((size_t)(D > 0 ? D : 1) * sizeof *acc);
    for (int b = 0; b < B; b++)
        for (int j = 0; j < Hq; j++) {
            GL_K(attn_head_at)(&h, k, v, b, j, group);
            for (int t = 0; t < Sq; t++) {
                size_t row = (size_t)b * Sq + t;
                GL_K(attn_row_fwd)(o + row * ldo + (size_t)j * D,
                                   lse + ((size_t)b * Hq + j) * Sq + t,
                                   q + row * ldq + (size_t)j * D,
                                   GL_K(block_pos)(qpos, t), &h, p, acc);
            }
        }
    free(acc);
    free(p);
}
/*
 * The merge of two partial softmaxes over disjoint key sets: with
 * lse' = log(e^lse + e^lse_b), each part's weights were normalised by its
 * own sum, so rescaling by e^(lse - lse') and e^(lse_b - lse') renormalises
 * them to the union.  Computed from the larger lse m so that neither
 * exponential overflows: lse' = m + log(e^(lse-m) + e^(lse_b-m)).  A part
 * with lse = -inf has no keys and weight 0.
 */
void GL_K(attn_merge)(real *o, real *lse, const real *o_b, const real *lse_b,
                      int B, int S, int Hq, int D, int first)
{
    if (first) {
        memcpy(o, o_b, (size_t)B * S * Hq * D * sizeof *o);
        memcpy(lse, lse_b, (size_t)B * Hq * S * sizeof *lse);
        return;
    }
    for (int b = 0; b < B; b++)
        for (int j = 0; j < Hq; j++)
            for (int t = 0; t < S; t++) {
                real *lt = lse + ((size_t)b * Hq + j) * S + t;
                double la = *lt, lb = lse_b[((size_t)b * Hq + j) * S + t];
                real *ot = o + (((size_t)b * S + t) * Hq + j) * D;
                const real *obt = o_b + (((size_t)b * S + t) * Hq + j) * D;
                if (lb == -INFINITY)           /* nothing to add */
                    continue;
                if (la == -INFINITY) {         /* nothing yet: take the block */
                    memcpy(ot, obt, (size_t)D * sizeof *ot);
                    *lt = (real)lb;
                    continue;
                }
                double m = la > lb ? la : lb;
                double l = m + log(exp(la - m) + exp(lb - m));
                double wa = exp(la - l), wb = exp(lb - l);
                for (int e = 0; e < D; e++)
                    ot[e] = (real)(wa * ot[e] + wb * obt[e]);
                *lt = (real)l;
            }
}

/* delta_i = dout_i . o_i per head: attn_bwd's D_t. */
void GL_K(attn_delta)(real *delta, const real *dout, int lddo, const real *o,
                      int ldo, int B, int S, int Hq, int D)
{
    for (int b = 0; b < B; b++)
        for (int j = 0; j < Hq; j++)
            for (int t = 0; t < S; t++) {
                const real *dt = dout + ((size_t)b * S + t) * lddo + (size_t)j * D;
                const real *ot = o + ((size_t)b * S + t) * ldo + (size_t)j * D;
                double s = 0;
                for (int e = 0; e < D; e++)
                    s += (double)dt[e] * ot[e];
                delta[((size_t)b * Hq + j) * S + t] = (real)s;
            }
}

/* The backward of a block: attn_row_bwd over its rows, with P from the
 * final lse and the row sum delta given; a row without keys (lse -inf)
 * has no gradient. */
void GL_K(attn_block_bwd)(real *dq, int lddq, real *dk, real *dv, int lddkv,
                          const real *dout, int lddo, const real *lse,
                          const real *delta, const real *q, int ldq,
                          const real *k, int ldk, const real *v, int ldv,
                          int B, int Sq, int Sk, int Hq, int Hkv, int D,
                          real scale, const gl_attn_pos *qpos,
                          const gl_attn_pos *kpos, gl_attn_mask mask)
{
    GL_K(attn_check)(Hq, Hkv, "attn_block_bwd");
    GL_K(block_check)(qpos, Sq, kpos, Sk, mask, "attn_block_bwd");
    GL_K(attn_head) h = { .ldk = ldk, .ldv = ldv, .Sk = Sk, .D = D,
                          .scale = scale, .kpos = kpos, .mask = mask };
    int group = Hq / Hkv;
    for (int b = 0; b < B; b++)
        for (int j = 0; j < Hq; j++) {
            GL_K(attn_head_at)(&h, k, v, b, j, group);
            size_t kv = (size_t)b * Sk * lddkv + (size_t)(j / group) * D;
            for (int t = 0; t < Sq; t++) {
                size_t row = (size_t)b * Sq + t;
                double l = lse[((size_t)b * Hq + j) * Sq + t];
                if (l == -INFINITY)            /* a row without keys */
                    continue;
                GL_K(attn_row_bwd)(dq + row * lddq + (size_t)j * D,
                                   dk + kv, dv + kv, lddkv,
                                   q + row * ldq + (size_t)j * D,
                                   dout + row * lddo + (size_t)j * D,
                                   GL_K(block_pos)(qpos, t), l,
                                   delta[((size_t)b * Hq + j) * Sq + t], &h);
            }
        }
}

/*
 * SwiGLU on rows [gate (f) | up (f)]:
 *   y = silu(a) b,  silu(a) = a sigmoid(a),
 *   silu'(a) = sigmoid(a) (1 + a (1 - sigmoid(a))),
 * so da = dy b silu'(a) and db = dy silu(a).
 */
void GL_K(swiglu_fwd)(real *y, const real *gu, int n, int f)
{
    for (int i = 0; i < n; i++) {
        const real *a = gu + (size_t)i * 2 * f, *b = a + f;
        real *yi = y + (size_t)i * f;
        for (int j = 0; j < f; j++) {
            real sg = 1 / (1 + exp(-a[j]));
            yi[j] = a[j] * sg * b[j];
        }
    }
}

void GL_K(swiglu_bwd)(real *dgu, const real *dy, const real *gu, int n, int f)
{
    for (int i = 0; i < n; i++) {
        const real *a = gu + (size_t)i * 2 * f, *b = a + f;
        const real *dyi = dy + (size_t)i * f;
        real *da = dgu + (size_t)i * 2 * f, *db = da + f;
        for (int j = 0; j < f; j++) {
            real aj = a[j], bj = b[j], d = dyi[j];   /* dgu may alias gu */
            real sg = 1 / (1 + exp(-aj));
            da[j] = d * bj * sg * (1 + aj * (1 - sg));
            db[j] = d * aj * sg;
        }
    }
}

/*
 * Vocab-parallel embedding lookup: y_i = table[id_i - vocab_start] when
 * the id is in this rank's rows, else 0 (the TP sum then holds the one
 * real row).  The lookup is a selection, so its backward adds dy_i to the
 * row it read: dtable[id_i - vocab_start] += dy_i.
 */
void GL_K(embed_fwd)(real *y, const real *table, const int32_t *ids, int n,
                     int h, long vocab_start, int vl)
{
    for (int i = 0; i < n; i++) {
        long r = (long)ids[i] - vocab_start;
        real *yi = y + (size_t)i * h;
        if (r >= 0 && r < vl)
            memcpy(yi, table + (size_t)r * h, (size_t)h * sizeof(real));
        else
            memset(yi, 0, (size_t)h * sizeof(real));
    }
}

void GL_K(embed_bwd)(real *dtable, const real *dy, const int32_t *ids, int n,
                     int h, long vocab_start, int vl)
{
    for (int i = 0; i < n; i++) {
        long r = (long)ids[i] - vocab_start;
        if (r < 0 || r >= vl)
            continue;
        real *row = dtable + (size_t)r * h;
        const real *dyi = dy + (size_t)i * h;
        for (int e = 0; e < h; e++)
            row[e] += dyi[e];
    }
}

/*
 * Cross-entropy over a vocabulary split in column shards, in three steps
 * (see ops.h).  With M = max_j z_j (all shards) and Z = sum_j exp(z_j - M),
 *   loss = log Z + M - z_target = -log softmax(z)_target,
 *   d loss / d z_j = exp(z_j - M) / Z - [j == target].
 * Padding columns (j >= valid) are no tokens: they enter neither M nor Z
 * and get gradient 0.  The gradient is scaled by gscale_i (loss mask and
 * 1/tokens averaging).
 */
void GL_K(ce_max)(real *rowmax, const real *logits, int ld, int n, int valid)
{
    for (int i = 0; i < n; i++) {
        const real *zi = logits + (size_t)i * ld;
        real mx = -INFINITY;
        for (int j = 0; j < valid; j++)
            if (zi[j] > mx)
                mx = zi[j];
        rowmax[i] = mx;
    }
}

void GL_K(ce_sum)(real *stats, const real *logits, int ld,
                  const int32_t *targets, const real *rowmax, int n,
                  int valid, long vocab_start)
{
    for (int i = 0; i < n; i++) {
        const real *zi = logits + (size_t)i * ld;
        double sum = 0;
        for (int j = 0; j < valid; j++)
            sum += exp((double)zi[j] - rowmax[i]);
        long t = (long)targets[i] - vocab_start;
        stats[2 * i] = (real)sum;
        stats[2 * i + 1] = (t >= 0 && t < valid) ? zi[t] : 0;
    }
}

void GL_K(ce_bwd)(real *loss, real *logits, int ld, const int32_t *targets,
                  const real *rowmax, const real *stats, const real *gscale,
                  int n, int vl, int valid, long vocab_start)
{
    for (int i = 0; i < n; i++) {
        if (loss)
            loss[i] = (real)(log((double)stats[2 * i]) + rowmax[i]
                             - stats[2 * i + 1]);
        if (!gscale)
            continue;
        real *zi = logits + (size_t)i * ld;
        long t = (long)targets[i] - vocab_start;
        double inv = 1 / (double)stats[2 * i];
        for (int j = 0; j < valid; j++) {
            double p = exp((double)zi[j] - rowmax[i]) * inv;
            zi[j] = (real)((p - (j == t ? 1 : 0)) * gscale[i]);
        }
        for (int j = valid; j < vl; j++)
            zi[j] = 0;
    }
}

/* x *= s. */
void GL_K(scale)(real *x, real s, size_t count)
{
    for (size_t i = 0; i < count; i++)
        x[i] *= s;
}

/* out[0] += sum x_i^2, summed in double, added once. */
void GL_K(sumsq)(real *out, const real *x, size_t count)
{
    double acc = 0;
    for (size_t i = 0; i < count; i++)
        acc += (double)x[i] * x[i];
    out[0] = (real)(out[0] + acc);
}

/* out[0] = 1 when some x_i is NaN or +-Inf; otherwise out is untouched. */
void GL_K(nonfinite)(real *out, const real *x, size_t count)
{
    for (size_t i = 0; i < count; i++)
        if (!isfinite(x[i])) {
            out[0] = 1;
            return;
        }
}

/* out[0] += sum x_i w_i, summed in double. */
void GL_K(dot)(real *out, const real *x, const real *w, size_t count)
{
    double acc = 0;
    for (size_t i = 0; i < count; i++)
        acc += (double)x[i] * w[i];
    out[0] = (real)(out[0] + acc);
}

/*
 * AdamW with decoupled weight decay, step counted from 1:
 *   g = grad grad_scale
 *   m = b1 m + (1 - b1) g,  v = b2 v + (1 - b2) g^2
 *   mhat = m / (1 - b1^step),  vhat = v / (1 - b2^step)
 *   w -= lr (mhat / (sqrt(vhat) + eps) + wd w)
 * and out (the compute copy) = the new w.
 */
void GL_K(adamw)(real *master, const real *grad, real *m, real *v, real *out,
                 size_t count, real weight_decay, real lr, real beta1,
                 real beta2, real eps, real grad_scale, long step)
{
    if (step < 1)
        gl_die("adamw: step %ld is not positive; optimizer steps count from 1",
               step);
    real bc1 = (real)(1 - pow((double)beta1, (double)step));
    real bc2 = (real)(1 - pow((double)beta2, (double)step));
    for (size_t i = 0; i < count; i++) {
        real g = grad[i] * grad_scale;
        m[i] = beta1 * m[i] + (1 - beta1) * g;
        v[i] = beta2 * v[i] + (1 - beta2) * g * g;
        real mhat = m[i] / bc1, vhat = v[i] / bc2;
        real w = master[i];
        w -= lr * (mhat / (sqrt(vhat) + eps) + weight_decay * w);
        master[i] = w;
        if (out)
            out[i] = w;
    }
}

/*
 * LayerNorm of each row x of h elements, with w' = w or 1 + w (one_plus):
 *   mean = (1/h) sum_j x_j,  var = (1/h) sum_j (x_j - mean)^2,
 *   rstd = 1 / sqrt(var + eps),  xhat_j = (x_j - mean) rstd,
 *   y_j = xhat_j w'_j + b_j.
 * Backward, with g = w' dy (the gradient reaching xhat):
 *   d xhat_j / d x_k = rstd ([j == k] - 1/h - xhat_j xhat_k / h), so
 *   dx_k = rstd (g_k - mean(g) - xhat_k mean(g xhat)),
 *   dw_j = sum over rows of dy_j xhat_j (the same for w and 1 + w),
 *   db_j = sum over rows of dy_j.
 * The variance is taken around the mean (two passes), not as
 * mean(x^2) - mean^2, which cancels badly when |mean| >> std.
 */
void GL_K(layernorm_fwd)(real *y, real *mean, real *rstd, const real *x,
                         const real *w, const real *b, int n, int h, real eps,
                         int one_plus)
{
    for (int i = 0; i < n; i++) {
        const real *xi = x + (size_t)i * h;
        real *yi = y + (size_t)i * h;
        double s = 0, ss = 0;
        for (int j = 0; j < h; j++)
            s += xi[j];
        real mu = (real)(s / h);
        for (int j = 0; j < h; j++)
            ss += ((double)xi[j] - mu) * ((double)xi[j] - mu);
        real r = (real)(1 / sqrt(ss / h + eps));
        for (int j = 0; j < h; j++) {
            real wj = one_plus ? 1 + w[j] : w[j];
            yi[j] = (xi[j] - mu) * r * wj + b[j];
        }
        mean[i] = mu;
        rstd[i] = r;
    }
}

void GL_K(layernorm_bwd)(real *dx, real *dw, real *db, const real *dy,
                         const real *x, const real *w, const real *mean,
                         const real *rstd, int n, int h, int one_plus,
                         int accumulate_dx)
{
    double *sw = gl_calloc((size_t)(h > 0 ? h : 1), 2 * sizeof *sw);
    double *sb = sw + h;
    for (int i = 0; i < n; i++) {
        const real *xi = x + (size_t)i * h, *dyi = dy + (size_t)i * h;
        real *dxi = dx + (size_t)i * h;
        real mu = mean[i], r = rstd[i];
        double sg = 0, sgx = 0;
        for (int j = 0; j < h; j++) {
            real g = (one_plus ? 1 + w[j] : w[j]) * dyi[j];
            sg += g;
            sgx += (double)g * ((xi[j] - mu) * r);
        }
        real mg = (real)(sg / h), mgx = (real)(sgx / h);
        for (int j = 0; j < h; j++) {
            real xhat = (xi[j] - mu) * r;
            real g = (one_plus ? 1 + w[j] : w[j]) * dyi[j];
            real d = r * (g - mg - xhat * mgx);
            dxi[j] = accumulate_dx ? dxi[j] + d : d;
            sw[j] += (double)dyi[j] * xhat;
            sb[j] += dyi[j];
        }
    }
    for (int j = 0; j < h; j++) {
        dw[j] = (real)(dw[j] + sw[j]);
        db[j] = (real)(db[j] + sb[j]);
    }
    free(sw);
}

/*
 * GeLU, tanh approximation, as Megatron's bias_gelu, of u = x + bias:
 *   t = tanh(K0 u (1 + K1 u^2)),  y = 0.5 u (1 + t),
 * K0 = 0.79788456 (sqrt(2/pi) to 8 digits, Megatron's constant),
 * K1 = 0.044715.  Its derivative, as Megatron's bias_gelu_back writes it:
 *   y' = 0.5 u (1 - t^2) (K0 + K2 u^2) + 0.5 (1 + t),
 * K2 = 0.1070322243 (3 K0 K1 to 10 digits).  The bias gradient is the
 * column sum of dx.
 */
#define GL_GELU_K0 0.79788456
#define GL_GELU_K1 0.044715
#define GL_GELU_K2 0.1070322243

void GL_K(gelu_fwd)(real *y, const real *x, const real *bias, int n, int f)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < f; j++) {
            size_t k = (size_t)i * f + j;
            real u = x[k] + (bias ? bias[j] : 0);
            real t = tanh((real)GL_GELU_K0 * u * (1 + (real)GL_GELU_K1 * u * u));
            y[k] = (real)0.5 * u * (1 + t);
        }
}

void GL_K(gelu_bwd)(real *dx, real *dbias, const real *dy, const real *x,
                    const real *bias, int n, int f)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < f; j++) {
            size_t k = (size_t)i * f + j;
            real u = x[k] + (bias ? bias[j] : 0);
            real t = tanh((real)GL_GELU_K0 * u * (1 + (real)GL_GELU_K1 * u * u));
            real dg = (real)0.5 * u * (1 - t * t) *
                      ((real)GL_GELU_K0 + (real)GL_GELU_K2 * u * u) +
                      (real)0.5 * (1 + t);
            dx[k] = dy[k] * dg;
        }
    if (dbias)
        GL_K(bias_grad)(dbias, dx, n, f);
}

/* y[i, j] += bias[j]; the gradient of the bias is the column sum of dy,
 * summed in double and added once. */
void GL_K(bias_add)(real *y, const real *bias, int n, int w)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < w; j++)
            y[(size_t)i * w + j] += bias[j];
}

void GL_K(bias_grad)(real *dbias, const real *dy, int n, int w)
{
    double *s = gl_calloc((size_t)(w > 0 ? w : 1), sizeof *s);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < w; j++)
            s[j] += dy[(size_t)i * w + j];
    for (int j = 0; j < w; j++)
        dbias[j] = (real)(dbias[j] + s[j]);
    free(s);
}

/*
 * Dropout: element (i, j) of the [n, w] piece is element
 * e = (row0 + i) width + col0 + j of the whole, kept when
 * gl_dropout_keep() says so (base/philox.h), and scaled by 1 / (1 - p)
 * then; dropped elements are 0.  Philox gives four words at a time, so
 * the words of e / 4 are kept while the row walks through them.
 */
typedef struct {
    const gl_dropout *dp;
    uint32_t threshold, stream;
    uint64_t group;           /* e / 4 of the words held (UINT64_MAX: none) */
    uint32_t words[4];
} GL_K(mask);

static void GL_K(mask_init)(GL_K(mask) *m, const gl_dropout *dp)
{
    m->dp = dp;
    m->threshold = gl_dropout_threshold(dp->p);
    m->stream = gl_dropout_stream(dp->layer, dp->site);
    m->group = UINT64_MAX;
}

static int GL_K(mask_keep)(GL_K(mask) *m, int i, int j)
{
    uint64_t e = (uint64_t)(m->dp->row0 + i) * (uint64_t)m->dp->width +
                 (uint64_t)(m->dp->col0 + j);
    if (e >> 2 != m->group) {
        m->group = e >> 2;
        gl_dropout_words(m->words, m->dp->seed, m->dp->iteration, m->stream,
                         m->group);
    }
    return m->words[e & 3] >= m->threshold;
}

void GL_K(dropout)(real *y, const real *x, int n, int w,
                   const gl_dropout *dp)
{
    gl_dropout_check(dp, n, w, "dropout");
    GL_K(mask) m;
    GL_K(mask_init)(&m, dp);
    real scale = (real)(1 / (1 - (double)dp->p));
    for (int i = 0; i < n; i++)
        for (int j = 0; j < w; j++) {
            size_t k = (size_t)i * w + j;
            y[k] = GL_K(mask_keep)(&m, i, j) ? x[k] * scale : 0;
        }
}

void GL_K(bias_dropout_add)(real *out, const real *residual, const real *y,
                            const real *bias, int n, int w,
                            const gl_dropout *dp)
{
    GL_K(mask) m = { 0 };
    real scale = 1;
    if (dp) {
        gl_dropout_check(dp, n, w, "bias_dropout_add");
        GL_K(mask_init)(&m, dp);
        scale = (real)(1 / (1 - (double)dp->p));
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < w; j++) {
            size_t k = (size_t)i * w + j;
            real v = y[k] + (bias ? bias[j] : 0);
            if (dp)
                v = GL_K(mask_keep)(&m, i, j) ? v * scale : 0;
            out[k] = residual[k] + v;
        }
}

/* y[i] += pos[positions[i]]: a lookup added to the token embedding; its
 * backward is embed_bwd's (a scatter-add into the rows read). */
void GL_K(pos_embed_fwd)(real *y, const real *pos, const int32_t *positions,
                         int n, int h, int max_pos)
{
    for (int i = 0; i < n; i++) {
        if (positions[i] < 0 || positions[i] >= max_pos)
            gl_die("pos_embed_fwd: position %d of row %d is outside the "
                   "table's %d positions (--max-position-embeddings)",
                   (int)positions[i], i, max_pos);
        const real *p = pos + (size_t)positions[i] * h;
        real *yi = y + (size_t)i * h;
        for (int e = 0; e < h; e++)
            yi[e] += p[e];
    }
}

/*
 * RMSNorm of each head (--qk-layernorm): row (i, j) of a [n, heads, D]
 * view is head j of token i, at x + i ldx + j D; the math is
 * rmsnorm_fwd's and rmsnorm_bwd's with h = D and one weight [D] for every
 * head.  The backward reads the whole row of dy before it writes dx, so
 * dx may alias dy.
 */
void GL_K(head_rmsnorm_fwd)(real *y, int ldy, real *rstd, const real *x,
                            int ldx, const real *w, int n, int heads, int D,
                            real eps)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < heads; j++) {
            const real *xr = x + (size_t)i * ldx + (size_t)j * D;
            real *yr = y + (size_t)i * ldy + (size_t)j * D;
            double ss = 0;
            for (int k = 0; k < D; k++)
                ss += (double)xr[k] * xr[k];
            real r = (real)(1 / sqrt(ss / D + eps));
            for (int k = 0; k < D; k++)
                yr[k] = xr[k] * r * w[k];
            rstd[(size_t)i * heads + j] = r;
        }
}

void GL_K(head_rmsnorm_bwd)(real *dx, int ldg, real *dw, const real *dy,
                            const real *x, int ldx, const real *w,
                            const real *rstd, int n, int heads, int D)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < heads; j++) {
            const real *xr = x + (size_t)i * ldx + (size_t)j * D;
            const real *dyr = dy + (size_t)i * ldg + (size_t)j * D;
            real *dxr = dx + (size_t)i * ldg + (size_t)j * D;
            real r = rstd[(size_t)i * heads + j];
            double gx = 0;
            for (int k = 0; k < D; k++) {
                gx += (double)w[k] * dyr[k] * xr[k];
                dw[k] += dyr[k] * xr[k] * r;
            }
            real c = (real)(gx / D) * r * r;
            for (int k = 0; k < D; k++)
                dxr[k] = r * (w[k] * dyr[k] - xr[k] * c);
        }
}
