/*
 * ops_cpu_moe_impl.h: the CPU kernels of the mixture-of-experts ops of
 * ops.h, generic over the element type.
 *
 * No include guard: ops_cpu_moe.c includes this file twice, with `real`
 * defined as float and as double and GL_K(name) naming the function of
 * that type (gl_cpu_NAME_f32, gl_cpu_NAME_f64), as ops_cpu_kern.c does
 * for ops_cpu_impl.h.  The double versions let the tests check every
 * backward against finite differences without float rounding in the way.
 *
 * The maths of each op is in ops.h; the comments here say how the
 * kernels do it.  Per-token computations (scores, softmax, sums) run in
 * double in both versions; every sum runs in a fixed order (slots j =
 * 0..k-1, experts e = 0..E-1, tokens in increasing order), so the result
 * never depends on anything but the inputs.
 */

/* The index of the largest of the E values v not yet taken (taken[e]
 * non-zero), the lower index among equal values: a strict ">" while
 * scanning upwards. */
static int GL_K(moe_argmax)(const double *v, const char *taken, int E)
{
    int best = -1;
    for (int e = 0; e < E; e++)
        if (!taken[e] && (best < 0 || v[e] > v[best]))
            best = e;
    return best;
}

/* The top k of the E values v into sel[0..k-1], in decreasing order,
 * equal values by lower index.  taken is scratch of E bytes. */
static void GL_K(moe_topk)(int *sel, const double *v, int E, int k,
                           char *taken)
{
    memset(taken, 0, (size_t)E);
    for (int j = 0; j < k; j++) {
        sel[j] = GL_K(moe_argmax)(v, taken, E);
        taken[sel[j]] = 1;
    }
}

/* p = softmax(l) over E values, in double; returns log sum exp(l). */
static double GL_K(moe_softmax)(double *p, const real *l, int E)
{
    double mx = -INFINITY, sum = 0;
    for (int e = 0; e < E; e++)
        if (l[e] > mx)
            mx = l[e];
    for (int e = 0; e < E; e++) {
        p[e] = exp((double)l[e] - mx);
        sum += p[e];
    }
    for (int e = 0; e < E; e++)
        p[e] /= sum;
    return mx + log(sum);
}

static double GL_K(moe_sigmoid)(double x)
{
    return 1 / (1 + exp(-x));
}

/* The routing weights of one token, given its logits l [E] and its
 * selected experts sel [k] (already chosen), into w [k] (before
 * scaling).  p is scratch of E doubles. */
static void GL_K(moe_weights)(double *w, const real *l, const int *sel,
                              const gl_moe_route_cfg *cfg, double *p)
{
    int E = cfg->E, k = cfg->k;
    if (cfg->score == GL_MOE_SOFTMAX && cfg->pre_softmax) {
        GL_K(moe_softmax)(p, l, E);
        for (int j = 0; j < k; j++)
            w[j] = p[sel[j]];
    } else if (cfg->score == GL_MOE_SOFTMAX) {
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < k; j++)
            if (l[sel[j]] > mx)
                mx = l[sel[j]];
        for (int j = 0; j < k; j++) {
            w[j] = exp((double)l[sel[j]] - mx);
            sum += w[j];
        }
        for (int j = 0; j < k; j++)
            w[j] /= sum;
    } else {
        double sum = 0;
        for (int j = 0; j < k; j++) {
            w[j] = GL_K(moe_sigmoid)(l[sel[j]]);
            sum += w[j];
        }
        if (k > 1)
            for (int j = 0; j < k; j++)
                w[j] /= sum + 1e-20;
    }
}

/* One routed (token, slot) pair while an expert's capacity is applied. */
typedef struct {
    double w;
    int t, j;
} GL_K(moe_cand);

/* Order of the "probs" drop policy: higher weight first, then lower
 * token (a total order, so qsort's instability does not matter). */
static int GL_K(moe_cand_cmp)(const void *a, const void *b)
{
    const GL_K(moe_cand) *x = a, *y = b;
    if (x->w != y->w)
        return x->w > y->w ? -1 : 1;
    return (x->t > y->t) - (x->t < y->t);
}

/*
 * Routing in three passes:
 *   1. per token, the selection score (softmax or logits, or sigmoid plus
 *      bias), its top k (GL_K(moe_topk)), the weights of the k;
 *   2. per expert, its routed slots in token order, cut to the capacity
 *      by the drop policy (dropped slots: weight 0, row -1), padded with
 *      the lowest tokens not routed to it when asked;
 *   3. per expert, its kept and padding tokens in increasing order get
 *      consecutive rows from offsets[e].
 * member [n] marks, for the expert at hand, which slot of each token it
 * keeps (>= 0), padding (-2) or nothing (-1).
 */
void GL_K(moe_route)(int32_t *expert, real *weight, int32_t *rows,
                     int32_t *row_tok, int32_t *offsets,
                     real *tokens_per_expert, real *dropped,
                     const real *logits, const real *bias, int n,
                     int rows_max, const gl_moe_route_cfg *cfg)
{
    gl_moe_route_check(cfg, "moe_route");
    int E = cfg->E, k = cfg->k;
    if (bias && cfg->score != GL_MOE_SIGMOID)
        gl_die("moe_route: an expert bias needs the sigmoid score function "
               "(Megatron's --moe-router-enable-expert-bias supports only "
               "--moe-router-score-function sigmoid)");
    if (rows_max < gl_moe_rows_max(n, cfg))
        gl_die("moe_route: the permuted buffers hold %d rows, fewer than the "
               "%d this routing can dispatch (gl_moe_rows_max)", rows_max,
               gl_moe_rows_max(n, cfg));
    double *v = gl_malloc((size_t)E * sizeof *v);
    double *p = gl_malloc((size_t)E * sizeof *p);
    double *w = gl_malloc((size_t)k * sizeof *w);
    int *sel = gl_malloc((size_t)k * sizeof *sel);
    char *taken = gl_malloc((size_t)E);
    int *member = gl_malloc((size_t)(n > 0 ? n : 1) * sizeof *member);
    GL_K(moe_cand) *cand = gl_malloc((size_t)(n > 0 ? n : 1) * sizeof *cand);
    double scale = cfg->scaling != 0 ? cfg->scaling : 1;

    /* 1. selection and weights */
    for (int t = 0; t < n; t++) {
        const real *l = logits + (size_t)t * E;
        for (int e = 0; e < E; e++) {
            if (cfg->score == GL_MOE_SIGMOID)
                v[e] = GL_K(moe_sigmoid)(l[e]) + (bias ? bias[e] : 0);
            else
                v[e] = l[e];
        }
        if (cfg->score == GL_MOE_SOFTMAX && cfg->pre_softmax)
            GL_K(moe_softmax)(v, l, E);
        GL_K(moe_topk)(sel, v, E, k, taken);
        GL_K(moe_weights)(w, l, sel, cfg, p);
        for (int j = 0; j < k; j++) {
            expert[(size_t)t * k + j] = sel[j];
            weight[(size_t)t * k + j] = (real)(w[j] * scale);
            rows[(size_t)t * k + j] = -1;
        }
    }

    /* 2 and 3, one expert at a time */
    int cap = cfg->capacity > 0 ? (cfg->capacity < n ? cfg->capacity : n) : n;
    long ndropped = 0;
    int32_t next = 0;
    for (int e = 0; e < E; e++) {
        int routed = 0;
        for (int t = 0; t < n; t++) {
            member[t] = -1;
            for (int j = 0; j < k; j++)
                if (expert[(size_t)t * k + j] == e) {
                    cand[routed].w = weight[(size_t)t * k + j];
                    cand[routed].t = t;
                    cand[routed].j = j;
                    routed++;
                }
        }
        /* cand is in token order: the position policy keeps its head */
        if (routed > cap && cfg->drop == GL_MOE_DROP_PROBS)
            qsort(cand, (size_t)routed, sizeof *cand, GL_K(moe_cand_cmp));
        int kept = routed < cap ? routed : cap;
        for (int i = 0; i < routed; i++) {
            if (i < kept) {
                member[cand[i].t] = cand[i].j;
            } else {
                weight[(size_t)cand[i].t * k + cand[i].j] = 0;
                ndropped++;
            }
        }
        if (cfg->capacity > 0 && cfg->pad)
            for (int t = 0, need = cap - kept; t < n && need > 0; t++) {
                int mine = 0;
                for (int j = 0; j < k; j++)
                    mine |= expert[(size_t)t * k + j] == e;
                if (!mine) {
                    member[t] = -2;
                    need--;
                }
            }
        offsets[e] = next;
        for (int t = 0; t < n; t++) {
            if (member[t] == -1)
                continue;
            if (member[t] >= 0)
                rows[(size_t)t * k + member[t]] = next;
            row_tok[next++] = t;
        }
        if (tokens_per_expert)
            tokens_per_expert[e] += (real)(next - offsets[e]);
    }
    offsets[E] = next;
    for (int r = next; r < rows_max; r++)
        row_tok[r] = -1;
    if (dropped)
        dropped[0] += (real)ndropped;
    free(v);
    free(p);
    free(w);
    free(sel);
    free(taken);
    free(member);
    free(cand);
}

/*
 * The router's backward, per token, the selection fixed.  g_j = scaling
 * dweight_j for the kept slots, 0 for the dropped ones (their weight is
 * the constant 0, but their logit still enters the other weights).
 *   softmax over the k:  w'_j = softmax(l[e_j]), dl[e_j] = w'_j (g_j -
 *                        sum_i w'_i g_i)  (the softmax's Jacobian);
 *   pre_softmax:         w_j = p[e_j], p = softmax(l) over E, so
 *                        dl_e = p_e (G_e - sum_j p[e_j] g_j);
 *   sigmoid:             w_j = s_j / S, S = sum_i s_i + 1e-20, so
 *                        dw_j/ds_i = [i == j] / S - s_j / S^2 and
 *                        ds_i = g_i / S - sum_j g_j s_j / S^2; then
 *                        dl = ds s (1 - s).  k = 1: w = s, ds = g.
 */
void GL_K(moe_route_bwd)(real *dlogits, const real *dweight,
                         const real *logits, const int32_t *expert,
                         const int32_t *rows, int n,
                         const gl_moe_route_cfg *cfg)
{
    gl_moe_route_check(cfg, "moe_route_bwd");
    int E = cfg->E, k = cfg->k;
    double scale = cfg->scaling != 0 ? cfg->scaling : 1;
    double *p = gl_malloc((size_t)E * sizeof *p);
    double *w = gl_malloc((size_t)k * sizeof *w);
    double *g = gl_malloc((size_t)k * sizeof *g);
    int *sel = gl_malloc((size_t)k * sizeof *sel);
    for (int t = 0; t < n; t++) {
        const real *l = logits + (size_t)t * E;
        real *dl = dlogits + (size_t)t * E;
        for (int j = 0; j < k; j++) {
            size_t s = (size_t)t * k + j;
            sel[j] = expert[s];
            g[j] = rows[s] >= 0 ? scale * dweight[s] : 0;
        }
        for (int e = 0; e < E; e++)
            dl[e] = 0;
        if (cfg->score == GL_MOE_SOFTMAX && cfg->pre_softmax) {
            GL_K(moe_softmax)(p, l, E);
            double dot = 0;
            for (int j = 0; j < k; j++)
                dot += p[sel[j]] * g[j];
            for (int e = 0; e < E; e++)
                dl[e] = (real)(-p[e] * dot);
            for (int j = 0; j < k; j++)
                dl[sel[j]] = (real)(p[sel[j]] * (g[j] - dot));
        } else if (cfg->score == GL_MOE_SOFTMAX) {
            GL_K(moe_weights)(w, l, sel, cfg, p);
            double dot = 0;
            for (int j = 0; j < k; j++)
                dot += w[j] * g[j];
            for (int j = 0; j < k; j++)
                dl[sel[j]] = (real)(w[j] * (g[j] - dot));
        } else {
            double S = 0, gs = 0;
            for (int j = 0; j < k; j++) {
                w[j] = GL_K(moe_sigmoid)(l[sel[j]]);   /* s_j */
                S += w[j];
                gs += g[j] * w[j];
            }
            S += 1e-20;
            for (int j = 0; j < k; j++) {
                double ds = k > 1 ? g[j] / S - gs / (S * S) : g[j];
                dl[sel[j]] = (real)(ds * w[j] * (1 - w[j]));
            }
        }
    }
    free(p);
    free(w);
    free(g);
    free(sel);
}

/* xp[r] = x[row_tok[r]] for r < offsets[E]; the rows after, zero. */
void GL_K(moe_permute)(real *xp, const real *x, int h,
                       const int32_t *row_tok, const int32_t *offsets, int E,
                       int rows_max)
{
    int total = offsets[E];
    for (int r = 0; r < total; r++)
        memcpy(xp + (size_t)r * h, x + (size_t)row_tok[r] * h,
               (size_t)h * sizeof(real));
    if (rows_max > total)
        memset(xp + (size_t)total * h, 0,
               (size_t)(rows_max - total) * h * sizeof(real));
}

/* dx[t] (+)= sum_j dxp[rows[t, j]] over kept slots, j in order: the
 * permutation's transpose, gathered per token (no scatter, no races). */
void GL_K(moe_permute_bwd)(real *dx, const real *dxp, int h,
                           const int32_t *rows, int n, int k,
                           int accumulate_dx)
{
    for (int t = 0; t < n; t++) {
        real *dxt = dx + (size_t)t * h;
        if (!accumulate_dx)
            memset(dxt, 0, (size_t)h * sizeof(real));
        for (int j = 0; j < k; j++) {
            int32_t r = rows[(size_t)t * k + j];
            if (r < 0)
                continue;
            const real *src = dxp + (size_t)r * h;
            for (int c = 0; c < h; c++)
                dxt[c] += src[c];
        }
    }
}

/* out[t] = sum_j weight[t, j] yp[rows[t, j]] over kept slots, j in order. */
void GL_K(moe_unpermute)(real *out, const real *yp, int h,
                         const real *weight, const int32_t *rows, int n,
                         int k)
{
    for (int t = 0; t < n; t++) {
        real *ot = out + (size_t)t * h;
        memset(ot, 0, (size_t)h * sizeof(real));
        for (int j = 0; j < k; j++) {
            int32_t r = rows[(size_t)t * k + j];
            if (r < 0)
                continue;
            real wj = weight[(size_t)t * k + j];
            const real *y = yp + (size_t)r * h;
            for (int c = 0; c < h; c++)
                ot[c] += wj * y[c];
        }
    }
}

/*
 * The backward of out[t] = sum_j w_j yp[r_j]:
 *   dyp[r_j] = w_j dout[t]  (each kept row belongs to one slot; padding
 *   rows to none: 0), dweight_j = <dout[t], yp[r_j]> (0 when dropped).
 * A row's slot is found among the k slots of its token (row_tok).
 */
void GL_K(moe_unpermute_bwd)(real *dyp, real *dweight, const real *dout,
                             const real *yp, int h, const real *weight,
                             const int32_t *rows, const int32_t *row_tok,
                             const int32_t *offsets, int n, int k, int E,
                             int rows_max)
{
    int total = offsets[E];
    for (int r = 0; r < total; r++) {
        int t = row_tok[r];
        real wr = 0;
        for (int j = 0; j < k; j++)
            if (rows[(size_t)t * k + j] == r)
                wr = weight[(size_t)t * k + j];
        real *d = dyp + (size_t)r * h;
        const real *g = dout + (size_t)t * h;
        for (int c = 0; c < h; c++)
            d[c] = wr * g[c];
    }
    if (rows_max > total)
        memset(dyp + (size_t)total * h, 0,
               (size_t)(rows_max - total) * h * sizeof(real));
    for (int t = 0; t < n; t++)
        for (int j = 0; j < k; j++) {
            int32_t r = rows[(size_t)t * k + j];
            double acc = 0;
            if (r >= 0) {
                const real *g = dout + (size_t)t * h;
                const real *y = yp + (size_t)r * h;
                for (int c = 0; c < h; c++)
                    acc += (double)g[c] * y[c];
            }
            dweight[(size_t)t * k + j] = (real)acc;
        }
}

/*
 * Grouped products: one gemm per expert with rows, on its block of rows
 * [offsets[e], offsets[e+1]) and its weight W_e = W + e out in, the out
 * side (Y, dY) with row stride ldY:
 *   Y_e = X_e W_e^T,   dX_e (+)= dY_e W_e,   dW_e += dY_e^T X_e.
 * The rows past offsets[E] of Y (its out columns) and of dX (unless
 * accumulating) are zeroed.
 */
void GL_K(moe_gemm)(real *Y, int ldY, const real *X, const real *W, int in,
                    int out, const int32_t *offsets, int E, int rows_max)
{
    for (int e = 0; e < E; e++) {
        int r0 = offsets[e], m = offsets[e + 1] - r0;
        if (m > 0)
            GL_K(gemm)(0, 1, m, out, in, 1, X + (size_t)r0 * in, in,
                       W + (size_t)e * out * in, in, 0, Y + (size_t)r0 * ldY,
                       ldY);
    }
    for (int r = offsets[E]; r < rows_max; r++)
        memset(Y + (size_t)r * ldY, 0, (size_t)out * sizeof(real));
}

void GL_K(moe_gemm_dgrad)(real *dX, const real *dY, int ldY, const real *W,
                          int in, int out, const int32_t *offsets, int E,
                          int rows_max, int accumulate_dx)
{
    for (int e = 0; e < E; e++) {
        int r0 = offsets[e], m = offsets[e + 1] - r0;
        if (m > 0)
            GL_K(gemm)(0, 0, m, in, out, 1, dY + (size_t)r0 * ldY, ldY,
                       W + (size_t)e * out * in, in, accumulate_dx ? 1 : 0,
                       dX + (size_t)r0 * in, in);
    }
    if (!accumulate_dx && rows_max > offsets[E])
        memset(dX + (size_t)offsets[E] * in, 0,
               (size_t)(rows_max - offsets[E]) * in * sizeof(real));
}

void GL_K(moe_gemm_wgrad)(real *dW, const real *dY, int ldY, const real *X,
                          int in, int out, const int32_t *offsets, int E,
                          int accumulate_dw)
{
    for (int e = 0; e < E; e++) {
        int r0 = offsets[e], m = offsets[e + 1] - r0;
        real *dWe = dW + (size_t)e * out * in;
        if (m > 0)
            GL_K(gemm)(1, 0, out, in, m, 1, dY + (size_t)r0 * ldY, ldY,
                       X + (size_t)r0 * in, in, accumulate_dw ? 1 : 0, dWe, in);
        else if (!accumulate_dw)
            memset(dWe, 0, (size_t)out * in * sizeof(real));
    }
}

/* The auxiliary losses' scores of one token over all E experts: softmax,
 * or sigmoid normalised by its sum + 1e-20; s (may be NULL) receives the
 * plain sigmoids.  Returns the sigmoids' normaliser S (1 for softmax). */
static double GL_K(moe_aux_scores)(double *sc, double *s, const real *l,
                                   const gl_moe_route_cfg *cfg)
{
    int E = cfg->E;
    if (cfg->score == GL_MOE_SOFTMAX) {
        GL_K(moe_softmax)(sc, l, E);
        return 1;
    }
    double S = 0;
    for (int e = 0; e < E; e++) {
        sc[e] = GL_K(moe_sigmoid)(l[e]);
        if (s)
            s[e] = sc[e];
        S += sc[e];
    }
    S += 1e-20;
    for (int e = 0; e < E; e++)
        sc[e] /= S;
    return S;
}

/* The group of the call's row t (see ops.h): its sequence, or 0. */
static long GL_K(moe_group)(int t, long row0, int seq_len)
{
    return seq_len > 0 ? (row0 + t) / seq_len : 0;
}

/* counts[g(t), e] += 1 for the top k of each token's aux scores. */
void GL_K(moe_aux_counts)(real *counts, const real *logits, int n,
                          long row0, int seq_len, const gl_moe_route_cfg *cfg)
{
    gl_moe_route_check(cfg, "moe_aux_counts");
    int E = cfg->E, k = cfg->k;
    double *sc = gl_malloc((size_t)E * sizeof *sc);
    int *sel = gl_malloc((size_t)k * sizeof *sel);
    char *taken = gl_malloc((size_t)E);
    for (int t = 0; t < n; t++) {
        GL_K(moe_aux_scores)(sc, NULL, logits + (size_t)t * E, cfg);
        GL_K(moe_topk)(sel, sc, E, k, taken);
        real *c = counts + GL_K(moe_group)(t, row0, seq_len) * E;
        for (int j = 0; j < k; j++)
            c[sel[j]] += 1;
    }
    free(sc);
    free(sel);
    free(taken);
}

/*
 * The switch loss of one token is f = sum_e sc_e c_e (c its group's
 * counts, constants).  Its gradient:
 *   softmax: df/dl_e = sc_e (c_e - f)              (softmax's Jacobian)
 *   sigmoid: sc_e = s_e / S, df/ds_e = c_e / S - sum_i c_i s_i / S^2
 *            = (c_e - f) / S, and ds_e/dl_e = s_e (1 - s_e).
 */
void GL_K(moe_aux_loss)(real *loss, real *dlogits, const real *logits,
                        const real *counts, int n, long row0, int seq_len,
                        real scale, real gscale, const gl_moe_route_cfg *cfg)
{
    gl_moe_route_check(cfg, "moe_aux_loss");
    int E = cfg->E;
    double *sc = gl_malloc((size_t)E * sizeof *sc);
    double *s = gl_malloc((size_t)E * sizeof *s);
    double acc = 0;
    for (int t = 0; t < n; t++) {
        const real *l = logits + (size_t)t * E;
        const real *c = counts + GL_K(moe_group)(t, row0, seq_len) * E;
        double S = GL_K(moe_aux_scores)(sc, s, l, cfg);
        double f = 0;
        for (int e = 0; e < E; e++)
            f += sc[e] * c[e];
        acc += f;
        if (!dlogits)
            continue;
        real *dl = dlogits + (size_t)t * E;
        for (int e = 0; e < E; e++) {
            double g = cfg->score == GL_MOE_SOFTMAX
                           ? sc[e] * (c[e] - f)
                           : (c[e] - f) / S * s[e] * (1 - s[e]);
            dl[e] += (real)(gscale * g);
        }
    }
    if (loss)
        loss[0] = (real)(loss[0] + scale * acc);
    free(sc);
    free(s);
}

/* z = logsumexp(l); d z^2 / dl_e = 2 z softmax(l)_e. */
void GL_K(moe_z_loss)(real *loss, real *dlogits, const real *logits, int n,
                      int E, real scale, real gscale)
{
    double *p = gl_malloc((size_t)(E > 0 ? E : 1) * sizeof *p);
    double acc = 0;
    for (int t = 0; t < n; t++) {
        double z = GL_K(moe_softmax)(p, logits + (size_t)t * E, E);
        acc += z * z;
        if (dlogits)
            for (int e = 0; e < E; e++)
                dlogits[(size_t)t * E + e] += (real)(gscale * 2 * z * p[e]);
    }
    if (loss)
        loss[0] = (real)(loss[0] + scale * acc);
    free(p);
}

/* bias_e += rate sign(mean(counts) - counts_e), the mean in double. */
void GL_K(moe_bias_update)(real *bias, const real *counts, int E, real rate)
{
    double sum = 0;
    for (int e = 0; e < E; e++)
        sum += counts[e];
    double mean = sum / E;
    for (int e = 0; e < E; e++) {
        double off = mean - counts[e];
        bias[e] += off > 0 ? rate : off < 0 ? -rate : 0;
    }
}
