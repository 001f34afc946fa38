/*
 * ops-moe.c: the mixture-of-experts ops of ops.h on the CPU back end.
 *
 * Three kinds of checks, as t/ops-cpu.c makes them:
 *   - routing, capacity and the losses' counts on small cases whose
 *     answers are written here by hand (ties, both drop policies,
 *     padding, the three score functions);
 *   - every backward against central finite differences of a scalar
 *     loss, on the double kernels (gl_cpu_NAME_f64): the router (with the
 *     auxiliary and z losses), and a whole expert layer (routing,
 *     permutation, two grouped products with SwiGLU between, weighted
 *     combination) with respect to its input, its stacked weights and
 *     the router's logits;
 *   - the device's float ops against the double kernels on the same
 *     inputs (the operation table's wiring and the float arithmetic).
 */
#include <config.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "device/ops.h"
#include "device/ops_cpu.h"
#include "device/ops_cpu_moe.h"
#include "ops-test.h"
#include "tap.h"

/* ---- helpers ---------------------------------------------------------- */

static int ints_equal(const int32_t *a, const int32_t *b, size_t n)
{
    return memcmp(a, b, n * sizeof *a) == 0;
}

static int close_to(const double *a, const double *b, size_t n, double tol)
{
    for (size_t i = 0; i < n; i++)
        if (fabs(a[i] - b[i]) > tol)
            return 0;
    return 1;
}

#define FD_TOL 1e-6      /* finite differences in double */
#define F32_TOL 2e-6     /* float operation against the double kernel */

/* One routing's double arrays (the map's, with double weights). */
typedef struct {
    int n, k, E, rows_max;
    int32_t *expert, *rows, *row_tok, *offsets;
    double *weight, *tpe, dropped;
} route64;

static void route64_init(route64 *r, int n, const gl_moe_route_cfg *cfg)
{
    r->n = n;
    r->k = cfg->k;
    r->E = cfg->E;
    r->rows_max = gl_moe_rows_max(n, cfg);
    r->expert = izeros((size_t)n * cfg->k);
    r->rows = izeros((size_t)n * cfg->k);
    r->row_tok = izeros((size_t)r->rows_max);
    r->offsets = izeros((size_t)cfg->E + 1);
    r->weight = dzeros((size_t)n * cfg->k);
    r->tpe = dzeros((size_t)cfg->E);
    r->dropped = 0;
}

static void route64_free(route64 *r)
{
    free(r->expert);
    free(r->rows);
    free(r->row_tok);
    free(r->offsets);
    free(r->weight);
    free(r->tpe);
}

static void route64_run(route64 *r, const double *logits, const double *bias,
                        const gl_moe_route_cfg *cfg)
{
    memset(r->tpe, 0, (size_t)r->E * sizeof *r->tpe);
    r->dropped = 0;
    gl_cpu_moe_route_f64(r->expert, r->weight, r->rows, r->row_tok,
                         r->offsets, r->tpe, &r->dropped, logits, bias, r->n,
                         r->rows_max, cfg);
}

static gl_moe_route_cfg cfg_of(int E, int k, gl_moe_score score,
                               int pre_softmax)
{
    gl_moe_route_cfg c;
    memset(&c, 0, sizeof c);
    c.E = E;
    c.k = k;
    c.score = score;
    c.pre_softmax = pre_softmax;
    c.drop = GL_MOE_DROP_PROBS;
    return c;
}

static double sigm(double x)
{
    return 1 / (1 + exp(-x));
}

/* ---- routing: hand-computed cases -------------------------------------- */

/* Softmax after top-k (Megatron's default) and before (pre-softmax), with
 * ties broken by the lower expert index. */
static void test_route_softmax(void)
{
    const int n = 3, E = 4, k = 2;
    const double logits[] = {
        1, 3, 3, 0,      /* tie between experts 1 and 2 */
        2, 2, 2, 2,      /* all equal: experts 0 and 1 */
        0, 1, 0, 5,      /* 3 first, then 1 */
    };
    gl_moe_route_cfg cfg = cfg_of(E, k, GL_MOE_SOFTMAX, 0);
    route64 r;
    route64_init(&r, n, &cfg);
    is_int(r.rows_max, n * k, "rows_max without a capacity is n k");
    route64_run(&r, logits, NULL, &cfg);
    const int32_t expert[] = { 1, 2, 0, 1, 3, 1 };
    ok(ints_equal(r.expert, expert, 6),
       "softmax: top-2 in decreasing order, ties by lower expert");
    double e4 = exp(4.0);
    const double w[] = { 0.5, 0.5, 0.5, 0.5, e4 / (1 + e4), 1 / (1 + e4) };
    ok(close_to(r.weight, w, 6, 1e-15),
       "softmax: weights are the softmax over the two selected logits");
    const int32_t offsets[] = { 0, 1, 4, 5, 6 };
    const int32_t rows[] = { 1, 4, 0, 2, 5, 3 };
    const int32_t row_tok[] = { 1, 0, 1, 2, 0, 2 };
    ok(ints_equal(r.offsets, offsets, 5), "offsets group the rows by expert");
    ok(ints_equal(r.rows, rows, 6) && ints_equal(r.row_tok, row_tok, 6),
       "rows: expert-major, tokens in increasing order within an expert");
    const double tpe[] = { 1, 3, 1, 1 };
    ok(close_to(r.tpe, tpe, 4, 0) && r.dropped == 0,
       "tokens per expert 1 3 1 1, nothing dropped");

    /* pre-softmax: the probabilities over all four experts, not
     * renormalised over the two */
    cfg.pre_softmax = 1;
    cfg.scaling = 2.5f;
    route64_run(&r, logits, NULL, &cfg);
    ok(ints_equal(r.expert, expert, 6), "pre-softmax: the same selection");
    double z0 = exp(1.0) + 2 * exp(3.0) + 1, z2 = 2 + exp(1.0) + exp(5.0);
    const double wp[] = { 2.5 * exp(3.0) / z0, 2.5 * exp(3.0) / z0,
                          2.5 * 0.25, 2.5 * 0.25,
                          2.5 * exp(5.0) / z2, 2.5 * exp(1.0) / z2 };
    ok(close_to(r.weight, wp, 6, 1e-15),
       "pre-softmax: weights p[e_j] over all experts, times the scaling factor");
    route64_free(&r);
}

/* Sigmoid: the bias selects but does not weigh; top-k renormalised when
 * k > 1, the plain sigmoid when k = 1. */
static void test_route_sigmoid(void)
{
    const int n = 2, E = 4;
    const double logits[] = {
        0, 1, 2, -1,
        0.5, -2, 0.25, 3,
    };
    const double bias[] = { 1, 0, 0, 0.25 };
    gl_moe_route_cfg cfg = cfg_of(E, 2, GL_MOE_SIGMOID, 0);
    route64 r;
    route64_init(&r, n, &cfg);
    route64_run(&r, logits, bias, &cfg);
    /* row 0: s + b = 1.5, .73, .88, .52 -> 0, 2; row 1: 1.62, .12, .56,
     * 1.20 -> 0, 3 */
    const int32_t expert[] = { 0, 2, 0, 3 };
    ok(ints_equal(r.expert, expert, 4), "sigmoid: the bias takes part in the selection");
    double s00 = sigm(0), s02 = sigm(2), s10 = sigm(0.5), s13 = sigm(3);
    const double w[] = { s00 / (s00 + s02 + 1e-20), s02 / (s00 + s02 + 1e-20),
                         s10 / (s10 + s13 + 1e-20), s13 / (s10 + s13 + 1e-20) };
    ok(close_to(r.weight, w, 4, 1e-15),
       "sigmoid, k = 2: the selected sigmoids (without bias), renormalised");
    route64_free(&r);

    cfg.k = 1;
    cfg.scaling = 2.5f;
    route64_init(&r, n, &cfg);
    route64_run(&r, logits, NULL, &cfg);
    const int32_t e1[] = { 2, 3 };
    const double w1[] = { 2.5 * s02, 2.5 * s13 };
    ok(ints_equal(r.expert, e1, 2) && close_to(r.weight, w1, 2, 1e-15),
       "sigmoid, k = 1: the plain sigmoid times the scaling factor");
    route64_free(&r);
}

/* Capacity 2 for 6 tokens, 2 experts, top-1 (factor 0.5: ceil(6 / 2
 * 0.5) = 2), pre-softmax so that weights differ.  Expert 0 is routed
 * tokens 0 1 2 3 5 with logits 1 2 3 2 0.5 (weights sigmoid of those),
 * expert 1 token 4. */
static void test_route_capacity(void)
{
    const int n = 6, E = 2;
    const double logits[] = { 1, 0, 2, 0, 3, 0, 2, 0, 0, 2, 0.5, 0 };
    gl_moe_route_cfg cfg = cfg_of(E, 1, GL_MOE_SOFTMAX, 1);
    cfg.capacity = gl_moe_capacity(n, 1, E, 0.5);
    is_int(cfg.capacity, 2, "gl_moe_capacity(6 tokens, top-1, 2 experts, 0.5) = 2");
    is_int(gl_moe_capacity(8, 2, 4, 1.25), 5, "gl_moe_capacity(8 tokens, top-2, 4 experts, 1.25) = 5");
    is_int(gl_moe_rows_max(n, &cfg), 4, "rows_max with capacity 2: min(n k, E c) = 4");

    /* probs: expert 0 keeps tokens 2 (weight sigmoid(3)) and 1 (sigmoid(2),
     * tied with token 3: the lower token) */
    route64 r;
    route64_init(&r, n, &cfg);
    route64_run(&r, logits, NULL, &cfg);
    const int32_t rows_p[] = { -1, 0, 1, -1, 2, -1 };
    const int32_t tok_p[] = { 1, 2, 4, -1 };
    const int32_t off_p[] = { 0, 2, 3 };
    ok(ints_equal(r.rows, rows_p, 6) && ints_equal(r.row_tok, tok_p, 4) &&
       ints_equal(r.offsets, off_p, 3),
       "drop policy probs: the highest weights kept, ties by lower token");
    ok(r.weight[0] == 0 && r.weight[3] == 0 && r.weight[5] == 0 &&
       r.weight[1] == sigm(2) && r.weight[4] == sigm(2),
       "dropped slots weigh 0, kept ones keep their weight");
    const double tpe[] = { 2, 1 };
    ok(close_to(r.tpe, tpe, 2, 0) && r.dropped == 3,
       "tokens per expert 2 1 after dropping; 3 slots dropped");

    /* position: the first two tokens */
    cfg.drop = GL_MOE_DROP_POSITION;
    route64_run(&r, logits, NULL, &cfg);
    const int32_t rows_q[] = { 0, 1, -1, -1, 2, -1 };
    const int32_t tok_q[] = { 0, 1, 4, -1 };
    ok(ints_equal(r.rows, rows_q, 6) && ints_equal(r.row_tok, tok_q, 4) &&
       r.dropped == 3, "drop policy position: the first tokens kept");
    route64_free(&r);

    /* padding: expert 1 is padded with token 0, the lowest token not
     * routed to it, with weight 0 and in no slot */
    cfg.drop = GL_MOE_DROP_PROBS;
    cfg.pad = 1;
    route64_init(&r, n, &cfg);
    is_int(r.rows_max, 4, "rows_max when padding: E c = 4");
    route64_run(&r, logits, NULL, &cfg);
    const int32_t rows_r[] = { -1, 0, 1, -1, 3, -1 };
    const int32_t tok_r[] = { 1, 2, 0, 4 };
    const int32_t off_r[] = { 0, 2, 4 };
    const double tpe_r[] = { 2, 2 };
    ok(ints_equal(r.rows, rows_r, 6) && ints_equal(r.row_tok, tok_r, 4) &&
       ints_equal(r.offsets, off_r, 3) && close_to(r.tpe, tpe_r, 2, 0),
       "pad: every expert has c rows, padding rows among them in token order");
    route64_free(&r);

    /* a capacity above the tokens: every expert gets all n tokens */
    cfg.capacity = 10;
    route64_init(&r, n, &cfg);
    is_int(r.rows_max, 12, "rows_max with capacity > n and padding: E n");
    route64_run(&r, logits, NULL, &cfg);
    ok(r.offsets[1] == 6 && r.offsets[2] == 12 && r.dropped == 0,
       "capacity above the tokens, padded: n rows per expert, nothing dropped");
    route64_free(&r);
}

/* The auxiliary losses' counts, per sequence, and the expert-bias update. */
static void test_counts_and_bias(void)
{
    /* 4 tokens, rows 2..5 of sequences of length 3: groups 0 1 1 1 */
    const int n = 4, E = 3;
    const double logits[] = { 0, 1, 2,   5, 5, 0,   1, 0, 0,   0, 0, 3 };
    gl_moe_route_cfg cfg = cfg_of(E, 2, GL_MOE_SOFTMAX, 0);
    double counts[6] = { 0 };
    gl_cpu_moe_aux_counts_f64(counts, logits, n, 2, 3, &cfg);
    /* tops: {2, 1}, {0, 1}, {0, 1} (tie 1 = 2: lower), {2, 0} */
    const double want[] = { 0, 1, 1,   3, 2, 1 };
    ok(close_to(counts, want, 6, 0), "aux counts: top-k per token, summed per sequence");
    cfg.score = GL_MOE_SIGMOID;
    double one[3] = { 1, 1, 1 };
    gl_cpu_moe_aux_counts_f64(one, logits, n, 0, 0, &cfg);
    const double want1[] = { 4, 4, 3 };
    ok(close_to(one, want1, 3, 0), "aux counts: seq_len 0 puts every token in one group, +=");

    double bias[] = { 0.5, 0.5, 0.5, 0.5 };
    const double c4[] = { 1, 3, 2, 2 };
    gl_cpu_moe_bias_update_f64(bias, c4, 4, 0.125);
    const double wb[] = { 0.625, 0.375, 0.5, 0.5 };
    ok(close_to(bias, wb, 4, 0), "bias update: + rate below the mean, - above, 0 at it");
}

/* ---- router backward against finite differences ---------------------- */

typedef struct {
    const gl_moe_route_cfg *cfg;
    route64 *r;
    double *logits, *bias, *c, *counts;
    int n, row0, seq_len;
    double aux_scale, z_scale;
} router_ctx;

/* L = sum c w (the routing weights against fixed random dweights) + the
 * auxiliary loss with fixed counts + the z-loss. */
static double router_loss(void *p)
{
    router_ctx *x = p;
    route64_run(x->r, x->logits, x->bias, x->cfg);
    double L = 0;
    for (int i = 0; i < x->n * x->cfg->k; i++)
        L += x->c[i] * x->r->weight[i];
    double aux = 0, z = 0;
    gl_cpu_moe_aux_loss_f64(&aux, NULL, x->logits, x->counts, x->n, x->row0,
                            x->seq_len, x->aux_scale, 0, x->cfg);
    gl_cpu_moe_z_loss_f64(&z, NULL, x->logits, x->n, x->cfg->E, x->z_scale, 0);
    return L + aux + z;
}

static void router_case(const char *name, gl_moe_route_cfg cfg, int use_bias,
                        int seq_len)
{
    const int n = 9, E = cfg.E, k = cfg.k;
    route64 r;
    route64_init(&r, n, &cfg);
    router_ctx x = { &cfg, &r, rnd((size_t)n * E, 2),
                     use_bias ? rnd((size_t)E, 0.3) : NULL,
                     rnd((size_t)n * k, 1), dzeros((size_t)3 * E), n, 1,
                     seq_len, 0.37, 0.11 };
    gl_cpu_moe_aux_counts_f64(x.counts, x.logits, n, x.row0, seq_len, &cfg);
    router_loss(&x);
    double *dl = dzeros((size_t)n * E);
    gl_cpu_moe_route_bwd_f64(dl, x.c, x.logits, r.expert, r.rows, n, &cfg);
    gl_cpu_moe_aux_loss_f64(NULL, dl, x.logits, x.counts, n, x.row0, seq_len,
                            0, x.aux_scale, &cfg);
    gl_cpu_moe_z_loss_f64(NULL, dl, x.logits, n, E, 0, x.z_scale);
    double e = fd_relerr(router_loss, &x, x.logits, (size_t)n * E, dl);
    ok(e < FD_TOL, "router %s: dlogits (weights + aux + z loss) vs finite "
       "differences (rel %.2g)", name, e);
    free(x.logits);
    free(x.bias);
    free(x.c);
    free(x.counts);
    free(dl);
    route64_free(&r);
}

static void test_router_grad(void)
{
    gl_moe_route_cfg c = cfg_of(6, 2, GL_MOE_SOFTMAX, 0);
    router_case("softmax top-2", c, 0, 0);
    c.scaling = 1.7f;
    router_case("softmax top-2, scaled, per-sequence aux", c, 0, 4);
    c = cfg_of(6, 3, GL_MOE_SOFTMAX, 1);
    router_case("pre-softmax top-3", c, 0, 0);
    c = cfg_of(6, 2, GL_MOE_SIGMOID, 0);
    router_case("sigmoid top-2 with bias", c, 1, 5);
    c = cfg_of(6, 1, GL_MOE_SIGMOID, 0);
    c.scaling = 2.5f;
    router_case("sigmoid top-1, scaled", c, 1, 0);
    c = cfg_of(5, 2, GL_MOE_SOFTMAX, 0);
    c.capacity = gl_moe_capacity(9, 2, 5, 0.6);
    router_case("softmax top-2, capacity, drop by probs", c, 0, 0);
    c.drop = GL_MOE_DROP_POSITION;
    c.pad = 1;
    router_case("softmax top-2, capacity, drop by position, padded", c, 0, 0);
}

/* ---- a whole expert layer against finite differences -------------------
 *
 * out = unpermute(moe_gemm(swiglu(gu), W2)) with the routing weights of
 * logits, gu = [xp Wg^T | xp Wu^T] (two products into the halves of gu,
 * row stride 2f, as the model runs them), xp = permute(x); L = <R, out>.
 * Gradients with respect to x, Wg, Wu, W2 and the logits through every
 * backward of the layer. */

typedef struct {
    const gl_moe_route_cfg *cfg;
    route64 *r;
    int n, h, f;
    double *x, *Wg, *Wu, *W2, *logits, *R;
    double *xp, *gu, *a, *yp, *out;
} layer_ctx;

static double layer_loss(void *p)
{
    layer_ctx *c = p;
    route64 *r = c->r;
    int E = c->cfg->E;
    route64_run(r, c->logits, NULL, c->cfg);
    gl_cpu_moe_permute_f64(c->xp, c->x, c->h, r->row_tok, r->offsets, E,
                           r->rows_max);
    gl_cpu_moe_gemm_f64(c->gu, 2 * c->f, c->xp, c->Wg, c->h, c->f,
                        r->offsets, E, r->rows_max);
    gl_cpu_moe_gemm_f64(c->gu + c->f, 2 * c->f, c->xp, c->Wu, c->h, c->f,
                        r->offsets, E, r->rows_max);
    gl_cpu_swiglu_fwd_f64(c->a, c->gu, r->rows_max, c->f);
    gl_cpu_moe_gemm_f64(c->yp, c->h, c->a, c->W2, c->f, c->h, r->offsets, E,
                        r->rows_max);
    gl_cpu_moe_unpermute_f64(c->out, c->yp, c->h, r->weight, r->rows, c->n,
                             r->k);
    double L = 0;
    for (int i = 0; i < c->n * c->h; i++)
        L += c->R[i] * c->out[i];
    return L;
}

/* The layer's backward, in the order the model runs it. */
static void layer_grads(layer_ctx *c, double *dx, double *dWg, double *dWu,
                        double *dW2, double *dlogits)
{
    route64 *r = c->r;
    int E = c->cfg->E, rm = r->rows_max, n = c->n, h = c->h, f = c->f;
    double *dyp = dzeros((size_t)rm * h), *dw = dzeros((size_t)n * r->k);
    double *da = dzeros((size_t)rm * f), *dgu = dzeros((size_t)rm * 2 * f);
    double *dxp = dzeros((size_t)rm * h);
    layer_loss(c);
    gl_cpu_moe_unpermute_bwd_f64(dyp, dw, c->R, c->yp, h, r->weight, r->rows,
                                 r->row_tok, r->offsets, n, r->k, E, rm);
    gl_cpu_moe_gemm_wgrad_f64(dW2, dyp, h, c->a, f, h, r->offsets, E, 1);
    gl_cpu_moe_gemm_dgrad_f64(da, dyp, h, c->W2, f, h, r->offsets, E, rm, 0);
    gl_cpu_swiglu_bwd_f64(dgu, da, c->gu, rm, f);
    gl_cpu_moe_gemm_wgrad_f64(dWg, dgu, 2 * f, c->xp, h, f, r->offsets, E, 1);
    gl_cpu_moe_gemm_wgrad_f64(dWu, dgu + f, 2 * f, c->xp, h, f, r->offsets, E, 1);
    gl_cpu_moe_gemm_dgrad_f64(dxp, dgu, 2 * f, c->Wg, h, f, r->offsets, E, rm, 0);
    gl_cpu_moe_gemm_dgrad_f64(dxp, dgu + f, 2 * f, c->Wu, h, f, r->offsets, E,
                              rm, 1);
    for (int i = 0; i < n * h; i++)
        dx[i] = 0.25;           /* accumulate_dx adds to what is there */
    gl_cpu_moe_permute_bwd_f64(dx, dxp, h, r->rows, n, r->k, 1);
    for (int i = 0; i < n * h; i++)
        dx[i] -= 0.25;
    gl_cpu_moe_route_bwd_f64(dlogits, dw, c->logits, r->expert, r->rows, n,
                             c->cfg);
    free(dyp);
    free(dw);
    free(da);
    free(dgu);
    free(dxp);
}

/* The same layer through the device's float ops, compared with the double
 * kernels on the rounded inputs. */
static void layer_device(gl_dev *d, const char *name, layer_ctx *c)
{
    const gl_ops *o = d->ops;
    const gl_moe_route_cfg *cfg = c->cfg;
    int n = c->n, h = c->h, f = c->f, E = cfg->E, k = cfg->k;
    int rm = gl_moe_rows_max(n, cfg);
    size_t nx = (size_t)n * h, nw1 = (size_t)E * f * h,
           nw2 = (size_t)E * h * f, nl = (size_t)n * E;

    /* the double reference on the float-rounded inputs */
    layer_ctx rc = *c;
    route64 rr;
    route64_init(&rr, n, cfg);
    rc.r = &rr;
    rc.x = rounded(c->x, nx);
    rc.Wg = rounded(c->Wg, nw1);
    rc.Wu = rounded(c->Wu, nw1);
    rc.W2 = rounded(c->W2, nw2);
    rc.logits = rounded(c->logits, nl);
    rc.R = rounded(c->R, nx);
    double *dx = dzeros(nx), *dWg = dzeros(nw1), *dWu = dzeros(nw1),
           *dW2 = dzeros(nw2), *dl = dzeros(nl);
    layer_grads(&rc, dx, dWg, dWu, dW2, dl);

    gl_moe_map m = { n, k, E, rm, o->alloc(d, (size_t)n * k * 4),
                     o->alloc(d, (size_t)n * k * 4),
                     o->alloc(d, (size_t)n * k * 4), o->alloc(d, (size_t)rm * 4),
                     o->alloc(d, (size_t)(E + 1) * 4),
                     o->alloc_host(d, (size_t)(E + 1) * 4) };
    float *x = dev_f(d, c->x, nx), *Wg = dev_f(d, c->Wg, nw1),
          *Wu = dev_f(d, c->Wu, nw1),
          *W2 = dev_f(d, c->W2, nw2), *lg = dev_f(d, c->logits, nl),
          *R = dev_f(d, c->R, nx);
    float *xp = o->alloc(d, (size_t)rm * h * 4), *gu = o->alloc(d, (size_t)rm * 2 * f * 4),
          *a = o->alloc(d, (size_t)rm * f * 4), *yp = o->alloc(d, (size_t)rm * h * 4),
          *out = o->alloc(d, nx * 4);
    float *tpe = o->alloc(d, (size_t)E * 4), *drop = o->alloc(d, 4);
    o->moe_route(d, &m, lg, NULL, cfg, tpe, drop);
    o->moe_permute(d, xp, x, h, &m);
    o->moe_gemm(d, gu, 2 * f, xp, Wg, h, f, &m);
    o->moe_gemm(d, gu + f, 2 * f, xp, Wu, h, f, &m);
    o->swiglu_fwd(d, a, gu, rm, f);
    o->moe_gemm(d, yp, h, a, W2, f, h, &m);
    o->moe_unpermute(d, out, yp, h, &m);
    int same_map = ints_equal(m.expert, rr.expert, (size_t)n * k) &&
                   ints_equal(m.rows, rr.rows, (size_t)n * k) &&
                   ints_equal(m.row_tok, rr.row_tok, (size_t)rm) &&
                   ints_equal(m.offsets, rr.offsets, (size_t)E + 1) &&
                   ints_equal(m.offsets_host, rr.offsets, (size_t)E + 1);
    int same_counts = drop[0] == (float)rr.dropped;
    for (int e = 0; e < E; e++)
        same_counts &= tpe[e] == (float)rr.tpe[e];
    ok(same_map && same_counts, "layer %s f32 device: the same routing map, "
       "host offsets, counts and drops as f64", name);
    double eo = relerr_f(out, rc.out, nx);
    ok(eo < F32_TOL, "layer %s f32 device: output vs f64 (rel %.2g)", name, eo);

    float *dyp = o->alloc(d, (size_t)rm * h * 4), *dw = o->alloc(d, (size_t)n * k * 4),
          *da = o->alloc(d, (size_t)rm * f * 4), *dgu = o->alloc(d, (size_t)rm * 2 * f * 4),
          *dxp = o->alloc(d, (size_t)rm * h * 4), *fdx = o->alloc(d, nx * 4),
          *fdWg = o->alloc(d, nw1 * 4), *fdWu = o->alloc(d, nw1 * 4),
          *fdW2 = o->alloc(d, nw2 * 4),
          *fdl = o->alloc(d, nl * 4);
    o->moe_unpermute_bwd(d, dyp, dw, R, yp, h, &m);
    o->moe_gemm_wgrad(d, fdW2, dyp, h, a, f, h, &m, 1);
    o->moe_gemm_dgrad(d, da, dyp, h, W2, f, h, &m, 0);
    o->swiglu_bwd(d, dgu, da, gu, rm, f);
    o->moe_gemm_wgrad(d, fdWg, dgu, 2 * f, xp, h, f, &m, 1);
    o->moe_gemm_wgrad(d, fdWu, dgu + f, 2 * f, xp, h, f, &m, 1);
    o->moe_gemm_dgrad(d, dxp, dgu, 2 * f, Wg, h, f, &m, 0);
    o->moe_gemm_dgrad(d, dxp, dgu + f, 2 * f, Wu, h, f, &m, 1);
    o->moe_permute_bwd(d, fdx, dxp, h, &m, 0);
    o->moe_route_bwd(d, fdl, dw, lg, &m, cfg);
    double e1 = relerr_f(fdx, dx, nx), e2 = relerr_f(fdWg, dWg, nw1),
           e5 = relerr_f(fdWu, dWu, nw1), e3 = relerr_f(fdW2, dW2, nw2),
           e4 = relerr_f(fdl, dl, nl);
    ok(e1 < F32_TOL && e2 < F32_TOL && e5 < F32_TOL && e3 < F32_TOL &&
       e4 < F32_TOL, "layer %s f32 device: dx, dWg, dWu, dW2, dlogits vs f64 "
       "(rel %.2g %.2g %.2g %.2g %.2g)", name, e1, e2, e5, e3, e4);

    /* the router's losses through the device */
    float *counts = o->alloc(d, (size_t)2 * E * 4), *loss = o->alloc(d, 2 * 4);
    double rcounts[64] = { 0 }, rloss[2] = { 0 };
    double *rdl = dzeros(nl);
    o->zero(d, fdl, nl * 4);
    o->moe_aux_counts(d, counts, lg, n, 3, 5, cfg);
    o->moe_aux_loss(d, loss, fdl, lg, counts, n, 3, 5, 0.3f, 0.7f, cfg);
    o->moe_z_loss(d, loss + 1, fdl, lg, n, E, 0.2f, 0.9f);
    gl_cpu_moe_aux_counts_f64(rcounts, rc.logits, n, 3, 5, cfg);
    gl_cpu_moe_aux_loss_f64(rloss, rdl, rc.logits, rcounts, n, 3, 5, 0.3f,
                            0.7f, cfg);
    gl_cpu_moe_z_loss_f64(rloss + 1, rdl, rc.logits, n, E, 0.2f, 0.9f);
    int same = 1;
    for (int i = 0; i < 2 * E; i++)
        same &= counts[i] == (float)rcounts[i];
    double el = relerr_f(loss, rloss, 2), ed = relerr_f(fdl, rdl, nl);
    ok(same && el < F32_TOL && ed < F32_TOL, "layer %s f32 device: aux counts, "
       "aux and z losses and their gradient vs f64 (rel %.2g %.2g)", name, el, ed);

    float *fb = dev_f(d, c->R, (size_t)E);
    double *rb = rounded(c->R, (size_t)E);
    o->moe_bias_update(d, fb, counts, E, 0.01f);
    gl_cpu_moe_bias_update_f64(rb, rcounts, E, 0.01f);
    ok(relerr_f(fb, rb, (size_t)E) < F32_TOL,
       "layer %s f32 device: expert-bias update vs f64", name);

    void *bufs[] = { m.expert, m.weight, m.rows, m.row_tok, m.offsets, x, Wg,
                     Wu, W2, lg, R, xp, gu, a, yp, out, tpe, drop, dyp, dw, da,
                     dgu, dxp, fdx, fdWg, fdWu, fdW2, fdl, counts, loss, fb };
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        o->free(d, bufs[i]);
    o->free_host(d, m.offsets_host);
    free(rc.x);
    free(rc.Wg);
    free(rc.Wu);
    free(rc.W2);
    free(rc.logits);
    free(rc.R);
    free(dx);
    free(dWg);
    free(dWu);
    free(dW2);
    free(dl);
    free(rdl);
    free(rb);
    route64_free(&rr);
}

static void layer_case(gl_dev *d, const char *name, gl_moe_route_cfg cfg)
{
    const int n = 7, h = 5, f = 3, E = cfg.E;
    route64 r;
    route64_init(&r, n, &cfg);
    int rm = r.rows_max;
    layer_ctx c = { &cfg, &r, n, h, f,
                    rnd((size_t)n * h, 1), rnd((size_t)E * f * h, 0.6),
                    rnd((size_t)E * f * h, 0.6),
                    rnd((size_t)E * h * f, 0.6), rnd((size_t)n * E, 1.5),
                    rnd((size_t)n * h, 1),
                    dzeros((size_t)rm * h), dzeros((size_t)rm * 2 * f),
                    dzeros((size_t)rm * f), dzeros((size_t)rm * h),
                    dzeros((size_t)n * h) };
    size_t nx = (size_t)n * h, nw1 = (size_t)E * f * h,
           nw2 = (size_t)E * h * f, nl = (size_t)n * E;
    double *dx = dzeros(nx), *dWg = dzeros(nw1), *dWu = dzeros(nw1),
           *dW2 = dzeros(nw2), *dl = dzeros(nl);
    layer_grads(&c, dx, dWg, dWu, dW2, dl);
    double ex = fd_relerr(layer_loss, &c, c.x, nx, dx);
    double eg = fd_relerr(layer_loss, &c, c.Wg, nw1, dWg);
    double eu = fd_relerr(layer_loss, &c, c.Wu, nw1, dWu);
    double e2 = fd_relerr(layer_loss, &c, c.W2, nw2, dW2);
    double el = fd_relerr(layer_loss, &c, c.logits, nl, dl);
    ok(ex < FD_TOL, "layer %s: dx (permute, grouped dgrad, accumulated) vs "
       "finite differences (rel %.2g)", name, ex);
    ok(eg < FD_TOL && eu < FD_TOL && e2 < FD_TOL, "layer %s: dWg, dWu, dW2 "
       "(grouped wgrad, strided) vs finite differences (rel %.2g, %.2g, %.2g)",
       name, eg, eu, e2);
    ok(el < FD_TOL, "layer %s: dlogits (unpermute's dweight, router) vs "
       "finite differences (rel %.2g)", name, el);

    /* rows past the last dispatched one: zero in every permuted buffer */
    int tail_zero = 1;
    for (int rr = r.offsets[E]; rr < rm; rr++)
        for (int j = 0; j < h; j++)
            tail_zero &= c.xp[(size_t)rr * h + j] == 0 && c.yp[(size_t)rr * h + j] == 0;
    for (int rr = r.offsets[E]; rr < rm; rr++)
        for (int j = 0; j < 2 * f; j++)
            tail_zero &= c.gu[(size_t)rr * 2 * f + j] == 0;
    ok(tail_zero, "layer %s: %d unused rows of the permuted buffers are zero",
       name, rm - r.offsets[E]);

    layer_device(d, name, &c);
    free(c.x); free(c.Wg); free(c.Wu); free(c.W2); free(c.logits); free(c.R);
    free(c.xp); free(c.gu); free(c.a); free(c.yp); free(c.out);
    free(dx); free(dWg); free(dWu); free(dW2); free(dl);
    route64_free(&r);
}

static void test_layer(gl_dev *d)
{
    gl_moe_route_cfg c = cfg_of(4, 2, GL_MOE_SOFTMAX, 0);
    layer_case(d, "softmax top-2", c);
    c = cfg_of(4, 2, GL_MOE_SOFTMAX, 1);
    c.scaling = 1.5f;
    layer_case(d, "pre-softmax top-2, scaled", c);
    c = cfg_of(4, 2, GL_MOE_SIGMOID, 0);
    layer_case(d, "sigmoid top-2", c);
    c = cfg_of(4, 2, GL_MOE_SOFTMAX, 0);
    c.capacity = gl_moe_capacity(7, 2, 4, 0.7);
    layer_case(d, "capacity 3, drop by probs", c);
    c.drop = GL_MOE_DROP_POSITION;
    layer_case(d, "capacity 3, drop by position", c);
    c.pad = 1;
    c.drop = GL_MOE_DROP_PROBS;
    layer_case(d, "capacity 3, padded", c);
}

/* moe_gemm_wgrad written (accumulate_dw 0) on a grouping whose expert 1
 * has no rows: what dW held (NaN) is not read, expert 1's slice is zero,
 * the others equal the sum added to zeros (accumulate_dw 1). */
static void test_wgrad_written(gl_dev *d)
{
    enum { E = 3, IN = 5, OUT = 4, ROWS = 6 };
    const gl_ops *o = d->ops;
    int32_t off[E + 1] = { 0, 4, 4, ROWS };
    gl_moe_map m = { .n = ROWS, .k = 1, .E = E, .rows_max = ROWS, .offsets = off,
                     .offsets_host = off };
    float dY[ROWS * OUT], X[ROWS * IN];
    for (int i = 0; i < ROWS * OUT; i++)
        dY[i] = (float)((i * 7) % 11) / 8 - 0.5f;
    for (int i = 0; i < ROWS * IN; i++)
        X[i] = (float)((i * 5) % 13) / 4 - 1.5f;
    size_t nw = (size_t)E * OUT * IN;
    float *want = o->alloc(d, nw * 4), *got = o->alloc(d, nw * 4);
    o->zero(d, want, nw * 4);
    o->moe_gemm_wgrad(d, want, dY, OUT, X, IN, OUT, &m, 1);
    for (size_t i = 0; i < nw; i++)
        got[i] = NAN;
    o->moe_gemm_wgrad(d, got, dY, OUT, X, IN, OUT, &m, 0);
    int same = !memcmp(want, got, nw * 4), idle_zero = 1, busy = 0;
    for (int i = 0; i < OUT * IN; i++) {
        idle_zero &= got[OUT * IN + i] == 0 && !signbit(got[OUT * IN + i]);
        busy |= got[i] != 0;
    }
    ok(same && idle_zero && busy, "moe_gemm_wgrad written: NaN in dW not read, the rowless "
       "expert's slice zero, the rest equal to the sum added to zeros");
    o->free(d, want);
    o->free(d, got);
}

int main(void)
{
    plan(NO_PLAN);
    gl_dev *d = gl_dev_open_cpu();
    size_t use0;
    d->ops->mem_info(d, &use0, NULL, NULL);
    test_route_softmax();
    test_route_sigmoid();
    test_route_capacity();
    test_counts_and_bias();
    test_router_grad();
    test_layer(d);
    test_wgrad_written(d);
    size_t use1;
    d->ops->mem_info(d, &use1, NULL, NULL);
    is_int((long long)use1, (long long)use0, "every device allocation of the tests was freed");
    gl_dev_close(d);
    return done_testing();
}
