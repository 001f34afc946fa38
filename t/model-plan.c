/*
 * model-plan: the counter-based RNG and the parameter table.
 *
 * RNG: pure (same inputs, same number), N(0, 1) by its first two moments,
 * independent streams per key.
 * Table, for every rank of TP 2 x PP 2 with 2 virtual chunks (and the
 * single-rank layout), tied and untied:
 *   - every element of every logical tensor is held by exactly one TP x
 *     PP position (tied copies aside), so the layout loses nothing;
 *   - the flat ranges do not overlap, fit in nflat, and fused pieces are
 *     adjacent (wq wk wv, w_gate w_up); group starts are aligned; nflat
 *     is a multiple of the alignment x DP;
 *   - the replicated range holds exactly the norm weights, which are the
 *     only parameters without weight decay, counted in the gradient norm
 *     on TP rank 0 only; tied copies are never counted;
 *   - the parameters counted once over all ranks number
 *     gl_arch_num_params();
 *   - with --qk-layernorm (with and without sequence parallelism) the
 *     q_norm / k_norm weights lie at the end of the replicated range, and
 *     gl_model_tp_sum_range() names that range's end without sequence
 *     parallelism, all of it with, nothing for TP 1.
 * The same for a mixture-of-experts model (dense layers among MoE ones, a
 * shared expert, the expert bias): stacked [E, out, in] experts split on
 * F in every expert alike, on MoE layers only; the router a replicated
 * matrix, the expert bias a replicated buffer never counted; the experts
 * initialised as the dense MLP (w_down scaled); gl_param_view's
 * rectangle names the piece's elements in logical order.
 */
#include <config.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "model/model.h"
#include "tap.h"
#include "model-cfg.h"


static void test_rng(void)
{
    uint64_t k = gl_rng_key("layers.0.attention.wq.weight");
    ok(gl_rng_normal(7, k, 12345) == gl_rng_normal(7, k, 12345), "rng: pure function");
    ok(gl_rng_normal(7, k, 1) != gl_rng_normal(8, k, 1), "rng: the seed matters");
    ok(gl_rng_key("a") != gl_rng_key("b"), "rng: keys of names differ");
    const int n = 200000;
    double s = 0, s2 = 0, cross = 0;
    uint64_t k2 = gl_rng_key("layers.1.attention.wq.weight");
    for (int i = 0; i < n; i++) {
        double x = gl_rng_normal(1234, k, (uint64_t)i);
        s += x;
        s2 += x * x;
        cross += x * gl_rng_normal(1234, k2, (uint64_t)i);
    }
    /* 4.5 standard errors: 1/sqrt(n) for the mean and the correlation,
     * sqrt(2/n) for the variance */
    ok(fabs(s / n) < 4.5 / sqrt(n), "rng: mean %.5f", s / n);
    ok(fabs(s2 / n - 1) < 4.5 * sqrt(2.0 / n), "rng: variance %.5f", s2 / n);
    ok(fabs(cross / n) < 4.5 / sqrt(n), "rng: streams of two keys uncorrelated (%.5f)", cross / n);
}

typedef struct {
    char name[64];
    long numel;
    unsigned char *seen;
} logical;

static logical *find(logical *ls, int *nl, const gl_param *q)
{
    for (int i = 0; i < *nl; i++)
        if (!strcmp(ls[i].name, q->name))
            return &ls[i];
    logical *l = &ls[(*nl)++];
    snprintf(l->name, sizeof l->name, "%s", q->name);
    l->numel = q->shape[0] * q->shape[1] * q->shape[2];
    l->seen = calloc((size_t)l->numel, 1);
    return l;
}

/* The logical (row-major) index of element k of q's local piece,
 * counted row-major over the piece's own shape. */
static long logical_index(const gl_param *q, long k)
{
    long l2 = q->local_shape[2], l1 = q->local_shape[1];
    long c = k % l2, b = k / l2 % l1, a = k / (l1 * l2);
    return ((q->global_offset[0] + a) * q->shape[1] + q->global_offset[1] + b) * q->shape[2] +
           q->global_offset[2] + c;
}

/* qk: --qk-layernorm, whose weights sit at the end of the replicated
 * range, all of them (and only them) in gl_model_tp_sum_range's range
 * without sequence parallelism (sp: TP > 1 with it).  moe: 4 experts of
 * width 96 (2 of every layer but layer 0 and 5), with a shared expert of
 * width 64 and the expert bias. */
static void test_layout(int tp, int pp, int vpp, int dp, int tied, int qk, int sp, int moe)
{
    model_cfg c;
    model_cfg_defaults(&c);
    c.arch.num_layers = 8;
    c.arch.hidden_size = 64;
    c.arch.num_attention_heads = 8;
    c.arch.num_query_groups = 4;
    c.arch.kv_channels = 8;
    c.arch.ffn_hidden_size = 176;
    c.arch.seq_length = 16;
    c.layout.micro_batch_size = 2;
    c.arch.vocab_size = 500;
    c.arch.padded_vocab_size = 512;
    c.arch.untie_embeddings_and_output_weights = !tied;
    c.layout.tensor_model_parallel_size = tp;
    c.layout.pipeline_model_parallel_size = pp;
    c.layout.virtual_pipeline_size = vpp;
    c.layout.sequence_parallel = sp && tp > 1;
    c.arch.qk_layernorm = qk;
    if (moe) {
        c.arch.num_experts = 4;
        c.arch.moe_router_topk = 2;
        c.arch.moe_ffn_hidden_size = 96;
        c.arch.moe_shared_expert_intermediate_size = 64;
        c.arch.moe_router_score_function = GL_ROUTER_SIGMOID;
        c.arch.moe_router_enable_expert_bias = 1;
        gl_error err;
        if (gl_moe_layer_freq_parse("[0,1,1,1,1,0,1,1]", 8, c.arch.moe_layer_freq,
                                    sizeof c.arch.moe_layer_freq, &err))
            bail_out("moe_layer_freq: %s", err.text);
    }
    char what[96];
    snprintf(what, sizeof what, "TP %d PP %d V %d DP %d %s%s%s%s", tp, pp, vpp, dp,
             tied ? "tied" : "untied", qk ? ", QK norm" : "", sp && tp > 1 ? ", SP" : "",
             moe ? ", MoE" : "");
    int nexperts = 0, nbuffers = 0;

    logical ls[256];
    int nl = 0, bad = 0;
    long counted = 0;
    for (int r = 0; r < tp; r++)
        for (int s = 0; s < pp; s++) {
            gl_model_plan *p = gl_model_plan_new(&c.arch, &c.layout, r, s, 0, dp);
            unsigned char *used = calloc(p->nflat, 1);
            size_t tb, te;
            gl_model_tp_sum_range(p, &tb, &te);
            size_t want_tb = tp == 1 ? p->rep_end : sp ? p->rep_begin : p->qk_norm_begin;
            if (tb != want_tb || te != p->rep_end || p->qk_norm_begin < p->rep_begin)
                bad = 1, diag("%s: TP-sum range [%zu, %zu) in [%zu, %zu)", what, tb, te,
                              p->rep_begin, p->rep_end);
            if (p->nflat % (GL_MODEL_ALIGN * (size_t)dp))
                bad = 1, diag("%s: nflat %zu not aligned", what, p->nflat);
            for (int i = 0; i < p->nparams; i++) {
                const gl_param *q = &p->param[i];
                if (q->offset + q->count > p->nflat)
                    bad = 1, diag("%s: %s out of range", what, q->name);
                for (size_t e = q->offset; e < q->offset + q->count && e < p->nflat; e++)
                    if (used[e]++)
                        bad = 1, diag("%s: %s overlaps", what, q->name);
                int rep = q->offset >= p->rep_begin && q->offset < p->rep_end;
                if (rep != (q->shard == GL_SHARD_NONE) || q->no_weight_decay != (q->ndim == 1))
                    bad = 1, diag("%s: %s in the wrong region", what, q->name);
                int qkn = strstr(q->name, "q_norm") || strstr(q->name, "k_norm");
                if (qkn != (q->offset >= p->qk_norm_begin && q->offset < p->rep_end))
                    bad = 1, diag("%s: %s inside or outside the QK-norm range", what, q->name);
                if (q->ndim == 2 && rep != !!strstr(q->name, "router."))
                    bad = 1, diag("%s: %s: a replicated matrix", what, q->name);
                if (rep && q->counted != (r == 0 && !q->buffer))
                    bad = 1, diag("%s: %s counted wrongly", what, q->name);
                if (q->buffer != !!strstr(q->name, "expert_bias"))
                    bad = 1, diag("%s: %s: buffer %d", what, q->name, q->buffer);
                nbuffers += q->buffer;
                if (q->ndim == 3) {
                    nexperts++;
                    int l = q->layer;
                    if (l < 0 || l == 0 || l == 5 || q->shape[0] != 4)
                        bad = 1, diag("%s: %s on a dense layer", what, q->name);
                    /* Megatron: the experts' fc1 as the dense MLP's, fc2 scaled */
                    double want = strstr(q->name, "w_down") ? 0.02 / sqrt(16.0) : 0.02;
                    if (fabs(q->init_std - want) > 1e-15)
                        bad = 1, diag("%s: %s init std %g", what, q->name, q->init_std);
                }
                if (strstr(q->name, ".mlp.w_") && q->layer > 0 && q->layer != 5 && moe)
                    bad = 1, diag("%s: %s: a dense MLP on an MoE layer", what, q->name);
                if (q->tied_copy && q->counted)
                    bad = 1, diag("%s: tied copy counted", what);
                if (strstr(q->name, "wk.") || strstr(q->name, "wv.") || strstr(q->name, "w_up.") ||
                    strstr(q->name, "k_norm")) {
                    if (q->offset != p->param[i - 1].offset + p->param[i - 1].count)
                        bad = 1, diag("%s: %s not fused with its neighbour", what, q->name);
                } else if (q->offset % GL_MODEL_ALIGN) {
                    bad = 1, diag("%s: %s not aligned", what, q->name);
                }
                if (q->counted)
                    counted += (long)q->count;
                if (q->tied_copy)
                    continue;
                logical *l = find(ls, &nl, q);
                /* gl_param_view's rectangle covers the same elements in
                 * the same order (initialisation and checkpoints use it) */
                long view[2], loc[2], off[2];
                gl_param_view(q, view, loc, off);
                if (view[0] * view[1] != l->numel || loc[0] * loc[1] != (long)q->count)
                    bad = 1, diag("%s: %s: view sizes", what, q->name);
                for (long k = 0; k < (long)q->count; k++) {
                    long e = logical_index(q, k);
                    if (e != (off[0] + k / loc[1]) * view[1] + off[1] + k % loc[1]) {
                        bad = 1, diag("%s: %s: element %ld off the view", what, q->name, k);
                        break;
                    }
                    /* replicated pieces are held by every TP rank */
                    if (q->shard == GL_SHARD_NONE && r > 0)
                        continue;
                    if (e < 0 || e >= l->numel || l->seen[e]++)
                        bad = 1;
                }
            }
            free(used);
            gl_model_plan_free(p);
        }
    for (int i = 0; i < nl; i++) {
        for (long e = 0; e < ls[i].numel; e++)
            if (ls[i].seen[e] != 1) {
                bad = 1;
                diag("%s: %s element %ld held %d times", what, ls[i].name, e, ls[i].seen[e]);
                break;
            }
        free(ls[i].seen);
    }
    ok(!bad, "%s: %d logical tensors, every element held once, ranges sound", what, nl);
    if (moe)   /* 6 MoE layers: 3 stacked tensors and an expert bias each */
        ok(nexperts == 18 * tp && nbuffers == 6 * tp, "%s: %d stacked pieces, %d buffers", what,
           nexperts, nbuffers);
    is_int(counted, gl_arch_num_params(&c.arch), "%s: counted parameters = the model's", what);
}

/* gl_model_init_weights (threaded for tensors of 2^20 elements and
 * more) writes exactly gl_param_init_value. */
static void test_init(int moe)
{
    model_cfg c;
    model_cfg_defaults(&c);
    c.arch.num_layers = 2;
    c.arch.hidden_size = 64;
    c.arch.num_attention_heads = 4;
    c.arch.num_query_groups = 2;
    c.arch.kv_channels = 16;
    c.arch.ffn_hidden_size = 128;
    c.arch.seq_length = 8;
    c.layout.micro_batch_size = 1;
    c.arch.vocab_size = c.arch.padded_vocab_size = 32768;
    c.arch.untie_embeddings_and_output_weights = 1;
    c.arch.init_method_std = 0.02;
    if (moe) {          /* stacked experts, drawn from their logical index */
        c.arch.num_experts = 4;
        c.arch.moe_router_topk = 2;
        c.arch.moe_shared_expert_intermediate_size = 32;
    }
    gl_model_plan *p = gl_model_plan_new(&c.arch, &c.layout, 0, 0, 0, 1);
    gl_dev *d = gl_dev_open_cpu();
    gl_model *m = gl_model_new(p, d, NULL, NULL);
    float *master = d->ops->alloc(d, 1000 * sizeof(float));
    size_t mb = p->nflat - 1500;
    gl_master mr = { .n = 1, .at = { master }, .begin = { mb }, .end = { mb + 1000 } };
    gl_model_init_weights(m, 99, &mr);
    const float *w = m->w;
    long bad = 0, total = 0;
    for (int i = 0; i < p->nparams; i++) {
        const gl_param *q = &p->param[i];
        for (size_t e = 0; e < q->count; e++, total++)
            if (w[q->offset + e] != (float)gl_param_init_value(q, 99, (long)e))
                bad++;
    }
    ok(bad == 0, "init%s: %ld of %ld weights differ from gl_param_init_value",
       moe ? " (MoE)" : "", bad, total);
    ok(!memcmp(master, w + mb, 1000 * sizeof(float)), "init%s: master range copied",
       moe ? " (MoE)" : "");
    d->ops->free(d, master);
    gl_model_free(m);
    gl_model_plan_free(p);
    gl_dev_close(d);
}

/* llama3 RoPE scaling, written here the way Hugging Face's
 * _compute_llama3_parameters does it (masks over all frequencies), for
 * head size D, base, factor, low_freq_factor, high_freq_factor and the
 * original context L; gl_rope_inv_freq must agree to 1e-12 relative and
 * leave the frequencies base^(-2i/D) alone without --use-rope-scaling.
 * Each case is chosen so that some frequencies are kept, some divided
 * and some smoothed. */
static void rope_case(const char *what, int D, double base, double factor, double low,
                      double high, int L)
{
    model_cfg c;
    model_cfg_defaults(&c);
    c.arch.rotary_base = base;
    c.arch.use_rope_scaling = 1;
    c.arch.rope_scaling_factor = factor;
    c.arch.rope_scaling_low_freq_factor = low;
    c.arch.rope_scaling_high_freq_factor = high;
    c.arch.rope_scaling_original_max_position_embeddings = L;
    double got[64], plain[64];
    gl_rope_inv_freq(&c.arch, D, got);
    c.arch.use_rope_scaling = 0;
    gl_rope_inv_freq(&c.arch, D, plain);
    int bad = 0, kept = 0, divided = 0, smoothed = 0;
    for (int i = 0; i < D / 2; i++) {
        double f = 1.0 / pow(base, (2.0 * i) / D);
        double wl = 2 * M_PI / f;
        double llama = wl > L / low ? f / factor : f;
        double smooth = (L / wl - low) / (high - low);
        double sm = (1 - smooth) * llama / factor + smooth * llama;
        int medium = !(wl < L / high) && !(wl > L / low);
        double want = medium ? sm : llama;
        kept += want == f;
        divided += !medium && want != f;
        smoothed += medium;
        if (fabs(got[i] - want) > 1e-12 * want || fabs(plain[i] - f) > 1e-12 * f)
            bad = 1;
    }
    ok(!bad && kept && divided && smoothed, "rope: %s (%d kept, %d divided, %d smoothed)",
       what, kept, divided, smoothed);
}

static void test_rope_scaling(void)
{
    rope_case("Llama 3.1 8B: D 128, base 500000, factor 8, low 1, high 4, L 8192", 128,
              500000, 8, 1, 4, 8192);
    rope_case("D 16, base 10000, factor 4, low 2, high 8, L 256 (t/eval-hf.t's c)", 16,
              10000, 4, 2, 8, 256);
    rope_case("D 64, base 500000, factor 32, low 1.5, high 6, L 4096", 64, 500000, 32, 1.5,
              6, 4096);

    /* The defaults are Llama 3.1's, and a configuration whose three fields
     * are zero (not from gl_config_defaults) gets them too. */
    model_cfg c;
    model_cfg_defaults(&c);
    ok(c.arch.rope_scaling_low_freq_factor == 1 && c.arch.rope_scaling_high_freq_factor == 4 &&
       c.arch.rope_scaling_original_max_position_embeddings == 8192,
       "rope: defaults low 1, high 4, L 8192");
    c.arch.use_rope_scaling = 1;
    c.arch.rotary_base = 500000;
    double a[64], b[64];
    gl_rope_inv_freq(&c.arch, 128, a);
    c.arch.rope_scaling_low_freq_factor = c.arch.rope_scaling_high_freq_factor = 0;
    c.arch.rope_scaling_original_max_position_embeddings = 0;
    gl_rope_inv_freq(&c.arch, 128, b);
    ok(!memcmp(a, b, sizeof a), "rope: zero low, high and L mean the defaults");
}

int main(void)
{
    plan(NO_PLAN);
    test_rng();
    test_init(0);
    test_init(1);
    test_rope_scaling();
    test_layout(1, 1, 1, 1, 1, 0, 1, 0);
    test_layout(1, 1, 1, 1, 0, 0, 1, 0);
    test_layout(2, 2, 2, 2, 1, 0, 1, 0);
    test_layout(2, 2, 2, 3, 0, 0, 1, 0);
    test_layout(4, 2, 1, 1, 1, 0, 1, 0);
    test_layout(2, 4, 1, 2, 1, 0, 1, 0);
    test_layout(2, 1, 1, 1, 1, 0, 0, 0);
    test_layout(1, 1, 1, 1, 0, 1, 0, 0);
    test_layout(2, 2, 2, 2, 1, 1, 0, 0);
    test_layout(2, 2, 2, 3, 0, 1, 1, 0);
    test_layout(4, 1, 1, 2, 1, 1, 0, 0);
    for (int qk = 0; qk < 2; qk++) {   /* MoE layers, with and without the QK norm */
        test_layout(1, 1, 1, 1, 1, qk, 1, 1);
        test_layout(1, 1, 1, 1, 0, qk, 1, 1);
        test_layout(2, 2, 2, 2, 1, qk, 1, 1);
        test_layout(2, 2, 2, 3, 0, qk, 1, 1);
        test_layout(4, 2, 1, 1, 1, qk, 1, 1);
        test_layout(2, 4, 1, 2, 1, qk, 0, 1);
    }
    return done_testing();
}
