/*
 * arch.c: the architecture's defaults, presets, derived values, counts,
 * its JSON codec, and the flags and key=value lines that spell it out
 * (arch.h).
 */
#include <config.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch/arch.h"

/* ------------------------------------------------------------------ */
/* Defaults and presets.                                               */

const char *const gl_arch_norm_names[] = {"LayerNorm", "RMSNorm", NULL};
const char *const gl_arch_position_names[] = {"learned_absolute", "rope", "none", NULL};
const char *const gl_arch_moe_score_names[] = {"softmax", "sigmoid", NULL};
const char *const gl_moe_lb_names[] = {"aux_loss", "seq_aux_loss", "global_aux_loss", "none",
                                       NULL};

void gl_arch_llama(gl_arch *a)
{
    a->normalization = GL_NORM_RMSNORM;
    a->apply_layernorm_1p = 0;
    a->swiglu = 1;
    a->position_embedding_type = GL_POS_ROPE;
    a->rotary_percent = 1;
    a->add_bias_linear = 0;
    a->add_qkv_bias = 0;
    a->qk_layernorm = 0;
    a->attention_dropout = 0;
    a->hidden_dropout = 0;
}

int gl_arch_is_llama(const gl_arch *a)
{
    gl_arch l = *a;
    gl_arch_llama(&l);
    return a->normalization == l.normalization && a->apply_layernorm_1p == l.apply_layernorm_1p &&
           a->swiglu == l.swiglu && a->position_embedding_type == l.position_embedding_type &&
           a->rotary_percent == l.rotary_percent && a->add_bias_linear == l.add_bias_linear &&
           a->add_qkv_bias == l.add_qkv_bias && a->qk_layernorm == l.qk_layernorm;
}

int gl_arch_is_qwen2(const gl_arch *a)
{
    gl_arch l = *a;
    l.add_qkv_bias = 0;
    return a->add_qkv_bias && !a->add_bias_linear && gl_arch_is_llama(&l);
}

int gl_arch_is_qwen3(const gl_arch *a)
{
    gl_arch l = *a;
    l.qk_layernorm = 0;
    return a->qk_layernorm && gl_arch_is_llama(&l);
}

int gl_arch_is_gpt2(const gl_arch *a)
{
    return a->normalization == GL_NORM_LAYERNORM && !a->apply_layernorm_1p && !a->swiglu &&
           a->position_embedding_type == GL_POS_LEARNED_ABSOLUTE && a->add_bias_linear;
}

const char *gl_arch_describe(const gl_arch *a, char *out, size_t n)
{
    gl_arch d;
    gl_arch_defaults(&d);
    const char *form = gl_arch_is_llama(a) ? "Llama-style"
                       : gl_arch_is_qwen3(a) ? "Qwen3-style"
                                             : "GPT-style";
    /* "(Megatron defaults)" only when the form is the defaults' GPT one. */
    int defaults = !gl_arch_is_llama(&d) && !gl_arch_is_llama(a) && !a->qk_layernorm &&
                   a->normalization == d.normalization && a->swiglu == d.swiglu &&
                   a->position_embedding_type == d.position_embedding_type &&
                   a->add_bias_linear == d.add_bias_linear;
    const char *bias = a->add_bias_linear ? "linear biases"
                       : a->add_qkv_bias  ? "QKV biases only"
                                          : "no biases";
    char pos[64];
    if (a->position_embedding_type == GL_POS_ROPE && a->rotary_percent != 1)
        snprintf(pos, sizeof pos, "RoPE on %g%% of each head", 100 * a->rotary_percent);
    else
        snprintf(pos, sizeof pos, "%s",
                 a->position_embedding_type == GL_POS_ROPE ? "RoPE"
                 : a->position_embedding_type == GL_POS_NONE ? "no positions"
                                                             : "learned absolute positions");
    char mlp[160];
    if (a->num_experts > 0)
        snprintf(mlp, sizeof mlp, "%s experts: %d, top-%d, on %d of %d layers%s",
                 a->swiglu ? "SwiGLU" : "GeLU", a->num_experts, a->moe_router_topk,
                 gl_arch_num_moe_layers(a), a->num_layers,
                 a->moe_shared_expert_intermediate_size ? ", with a shared expert" : "");
    else
        snprintf(mlp, sizeof mlp, "%s", a->swiglu ? "SwiGLU" : "GeLU");
    snprintf(out, n, "%s%s (%s%s, %s, %s, %s%s, attention dropout %g, hidden dropout %g)", form,
             defaults ? " (Megatron defaults)" : "",
             gl_arch_norm_names[a->normalization], a->apply_layernorm_1p ? " 1p" : "",
             mlp, pos, bias, a->qk_layernorm ? ", QK RMSNorm" : "",
             a->attention_dropout, a->hidden_dropout);
    return out;
}

void gl_arch_defaults(gl_arch *a)
{
    memset(a, 0, sizeof *a);
    a->make_vocab_size_divisible_by = 128;
    a->norm_epsilon = 1e-5;
    a->rotary_base = 10000;
    a->rope_scaling_factor = 8;
    a->rope_scaling_low_freq_factor = 1;     /* Llama 3.1's and 3.2's values */
    a->rope_scaling_high_freq_factor = 4;
    a->rope_scaling_original_max_position_embeddings = 8192;
    a->init_method_std = 0.02;
    /* Megatron's GPT: LayerNorm, GeLU, learned absolute positions, biases
     * on the linear layers, dropout 0.1 (gridlm-train refuses attention
     * dropout > 0 until the attention kernels drop). */
    a->normalization = GL_NORM_LAYERNORM;
    a->apply_layernorm_1p = 0;
    a->swiglu = 0;
    a->position_embedding_type = GL_POS_LEARNED_ABSOLUTE;
    a->rotary_percent = 1;
    a->add_bias_linear = 1;
    a->add_qkv_bias = 0;
    a->attention_dropout = 0.1;
    a->hidden_dropout = 0.1;
    /* Megatron's MoE defaults (used once --num-experts is given). */
    a->num_experts = 0;
    a->moe_router_topk = 2;
    snprintf(a->moe_layer_freq, sizeof a->moe_layer_freq, "1");
    a->moe_router_score_function = GL_ROUTER_SOFTMAX;
}

void gl_moe_defaults(gl_moe_opts *o)
{
    memset(o, 0, sizeof *o);
    o->load_balancing_type = GL_MOE_LB_AUX_LOSS;
    o->router_dtype = GL_MOE_DTYPE_ACT;
    o->token_drop_policy = GL_DROP_BY_PROBS;
    o->router_bias_update_rate = 1e-3;
}

typedef struct {
    const char *name;
    int layers, hidden, ffn, heads, groups, vocab, seq, max_pos;
    double rope_base;
    int rope_scaling;
    double rope_factor;
    int untie;
    int form;                   /* PRESET_LLAMA, PRESET_QWEN2, PRESET_QWEN3, PRESET_GPT2 */
    double eps;                 /* the norms' epsilon */
    int head_dim;               /* --kv-channels (0: hidden / heads) */
} preset;

/* The model forms of the presets: the Llama form (gl_arch_llama), Qwen2's
 * (that with QKV biases), Qwen3's (that with QK norm), GPT-2's (LayerNorm, GeLU, learned positions,
 * linear biases; no dropout, as the others). */
enum { PRESET_LLAMA = 0, PRESET_QWEN2, PRESET_QWEN3, PRESET_GPT2 };

/* The published shapes of the Llama 3, Qwen2.5, Qwen3 and GPT-2 models
 * (config.json of each), and the small model the tests train.  Columns:
 * layers, hidden, FFN, heads, query groups, vocabulary, sequence, max
 * positions, RoPE base, RoPE scaling (and factor), untied embeddings,
 * form, norm epsilon, head size (0: hidden / heads; Qwen3's is 128
 * whatever its hidden size).  (GPT-2's RoPE columns are unused: its
 * positions are learned, n_positions of them.) */
static const preset presets[] = {
    {"llama3-8b", 32, 4096, 14336, 32, 8, 128256, 8192, 8192, 500000, 0, 8, 1, PRESET_LLAMA,
     1e-5, 0},
    {"llama3-70b", 80, 8192, 28672, 64, 8, 128256, 8192, 8192, 500000, 0, 8, 1, PRESET_LLAMA,
     1e-5, 0},
    {"llama3.2-1b", 16, 2048, 8192, 32, 8, 128256, 8192, 131072, 500000, 1, 32, 0, PRESET_LLAMA,
     1e-5, 0},
    {"qwen2.5-1.5b", 28, 1536, 8960, 12, 2, 151936, 4096, 131072, 1000000, 0, 8, 0, PRESET_QWEN2,
     1e-6, 0},
    {"qwen3-8b", 36, 4096, 12288, 32, 8, 151936, 4096, 40960, 1000000, 0, 8, 1, PRESET_QWEN3,
     1e-6, 128},
    {"gpt2", 12, 768, 3072, 12, 12, 50257, 1024, 1024, 10000, 0, 8, 0, PRESET_GPT2, 1e-5, 0},
    {"gpt2-medium", 24, 1024, 4096, 16, 16, 50257, 1024, 1024, 10000, 0, 8, 0, PRESET_GPT2,
     1e-5, 0},
    {"gpt2-xl", 48, 1600, 6400, 25, 25, 50257, 1024, 1024, 10000, 0, 8, 0, PRESET_GPT2, 1e-5, 0},
    {"tiny", 4, 64, 176, 8, 4, 512, 64, 64, 500000, 0, 8, 1, PRESET_LLAMA, 1e-5, 0},
    /* Mixtral-8x7B-v0.1 (the Llama form; FFN is each expert's, moe_presets
     * below adds the experts); sequence 4096 as Megatron's Mixtral recipe */
    {"mixtral-8x7b", 32, 4096, 14336, 32, 8, 32000, 4096, 32768, 1000000, 0, 8, 1, PRESET_LLAMA,
     1e-5, 0},
    /* Qwen3-30B-A3B (the Qwen3 form; FFN is the dense MLP's
     * intermediate_size, which no layer uses: moe_presets below adds the
     * experts of moe_intermediate_size) */
    {"qwen3-30b-a3b", 48, 2048, 6144, 32, 4, 151936, 4096, 40960, 1000000, 0, 8, 1,
     PRESET_QWEN3, 1e-6, 128},
    {NULL, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
};

const char gl_arch_preset_names[] =
    "llama3-8b, llama3-70b, llama3.2-1b, qwen2.5-1.5b, qwen3-8b, gpt2, gpt2-medium, gpt2-xl, "
    "mixtral-8x7b, qwen3-30b-a3b or tiny";

/* The mixture-of-experts presets' experts (config.json's
 * num_local_experts or num_experts, num_experts_per_tok, and Qwen3-MoE's
 * moe_intermediate_size; 0: the preset's FFN width): every layer MoE,
 * Megatron's default softmax router (Mixtral's renormalised top k, and
 * Qwen3-MoE's with norm_topk_prob true). */
static const struct {
    const char *name;
    int experts, topk, ffn;
} moe_presets[] = {
    {"mixtral-8x7b", 8, 2, 0},
    {"qwen3-30b-a3b", 128, 8, 768},
    {NULL, 0, 0, 0},
};

int gl_arch_preset(gl_arch *a, const char *name)
{
    const preset *p = presets;
    while (p->name && strcmp(p->name, name) != 0)
        p++;
    if (!p->name)
        return -1;
    snprintf(a->model, sizeof a->model, "%s", p->name);
    a->num_layers = p->layers;
    a->hidden_size = p->hidden;
    a->ffn_hidden_size = p->ffn;
    a->num_attention_heads = p->heads;
    a->num_query_groups = p->groups;
    a->kv_channels = p->head_dim;
    a->vocab_size = p->vocab;
    a->seq_length = p->seq;
    a->max_position_embeddings = p->max_pos;
    a->rotary_base = p->rope_base;
    a->use_rope_scaling = p->rope_scaling;
    a->rope_scaling_factor = p->rope_factor;
    a->untie_embeddings_and_output_weights = p->untie;
    a->norm_epsilon = p->eps;
    gl_arch_llama(a);
    if (p->form == PRESET_QWEN2)
        a->add_qkv_bias = 1;
    if (p->form == PRESET_QWEN3)
        a->qk_layernorm = 1;
    if (p->form == PRESET_GPT2) {
        a->normalization = GL_NORM_LAYERNORM;
        a->swiglu = 0;
        a->position_embedding_type = GL_POS_LEARNED_ABSOLUTE;
        a->add_bias_linear = 1;
    }
    for (int i = 0; moe_presets[i].name; i++)
        if (!strcmp(moe_presets[i].name, p->name)) {
            a->num_experts = moe_presets[i].experts;
            a->moe_router_topk = moe_presets[i].topk;
            a->moe_ffn_hidden_size = moe_presets[i].ffn ? moe_presets[i].ffn : p->ffn;
            snprintf(a->moe_layer_freq, sizeof a->moe_layer_freq, "1");
        }
    return 0;
}

/* ------------------------------------------------------------------ */
/* Derived values.                                                     */

/* Megatron's default FFN width: 4h; with SwiGLU 2/3 of 4h, so that the
 * three matrices cost what two 4h ones would, rounded down to a multiple
 * of 64. */
static int default_ffn(const gl_arch *a)
{
    if (!a->swiglu)
        return 4 * a->hidden_size;
    return (int)((4.0 * a->hidden_size * 2 / 3) / 64) * 64;
}

void gl_arch_resolve(gl_arch *a)
{
    if (!a->num_query_groups)
        a->num_query_groups = a->num_attention_heads;
    if (!a->kv_channels && a->num_attention_heads && a->hidden_size % a->num_attention_heads == 0)
        a->kv_channels = a->hidden_size / a->num_attention_heads;
    if (!a->ffn_hidden_size && a->hidden_size)
        a->ffn_hidden_size = default_ffn(a);
    if (!a->max_position_embeddings)
        a->max_position_embeddings = a->seq_length;
}

int gl_arch_groups(const gl_arch *a)
{
    return a->num_query_groups ? a->num_query_groups : a->num_attention_heads;
}

int gl_arch_head_dim(const gl_arch *a)
{
    if (a->kv_channels)
        return a->kv_channels;
    return a->num_attention_heads ? a->hidden_size / a->num_attention_heads : 0;
}

int gl_arch_pad_vocab(const gl_arch *a, int vocab, int tp)
{
    long m = (long)a->make_vocab_size_divisible_by * (tp > 0 ? tp : 1);
    return (int)((vocab + m - 1) / m * m);
}

void gl_arch_set_vocab(gl_arch *a, int vocab, int tp)
{
    a->vocab_size = vocab;
    a->padded_vocab_size = gl_arch_pad_vocab(a, vocab, tp);
}

/* ------------------------------------------------------------------ */
/* MoE layers: --moe-layer-freq.                                       */

/* A tiny recursive-descent reader of Megatron's list expressions:
 *
 *   expr := term ('+' term)*
 *   term := atom ('*' N)*
 *   atom := '[' [0|1 (',' 0|1)*] ']' | '(' expr ')'
 *
 * The list is built in pat (room for GL_MOE_FREQ_MAX entries). */
typedef struct {
    const char *p;
    char pat[GL_MOE_FREQ_MAX];
    int n;
    char why[160];
} freq_reader;

static void freq_skip(freq_reader *r)
{
    while (*r->p == ' ' || *r->p == '\t')
        r->p++;
}

static int freq_expr(freq_reader *r);

static int freq_atom(freq_reader *r)
{
    freq_skip(r);
    if (*r->p == '(') {
        r->p++;
        if (freq_expr(r) < 0)
            return -1;
        freq_skip(r);
        if (*r->p != ')') {
            snprintf(r->why, sizeof r->why, "a ')' is missing before \"%.20s\"", r->p);
            return -1;
        }
        r->p++;
        return 0;
    }
    if (*r->p != '[') {
        snprintf(r->why, sizeof r->why, "expected '[' or '(' at \"%.20s\"", r->p);
        return -1;
    }
    r->p++;
    freq_skip(r);
    if (*r->p == ']') {
        r->p++;
        return 0;
    }
    for (;;) {
        freq_skip(r);
        if (*r->p != '0' && *r->p != '1') {
            snprintf(r->why, sizeof r->why, "list entries must be 0 (dense) or 1 (MoE), "
                     "not \"%.20s\"", r->p);
            return -1;
        }
        if (r->n >= GL_MOE_FREQ_MAX / 2 - 1) {
            snprintf(r->why, sizeof r->why, "more than %d layers", GL_MOE_FREQ_MAX / 2 - 1);
            return -1;
        }
        r->pat[r->n++] = *r->p++;
        freq_skip(r);
        if (*r->p == ',') {
            r->p++;
            continue;
        }
        if (*r->p == ']') {
            r->p++;
            return 0;
        }
        snprintf(r->why, sizeof r->why, "expected ',' or ']' at \"%.20s\"", r->p);
        return -1;
    }
}

static int freq_term(freq_reader *r)
{
    int start = r->n;
    if (freq_atom(r) < 0)
        return -1;
    for (;;) {
        freq_skip(r);
        if (*r->p != '*')
            return 0;
        r->p++;
        freq_skip(r);
        char *end;
        long k = strtol(r->p, &end, 10);
        if (end == r->p || k < 0) {
            snprintf(r->why, sizeof r->why, "'*' needs a count, not \"%.20s\"", r->p);
            return -1;
        }
        r->p = end;
        int len = r->n - start;
        if (k > 0 && (long)len * k > GL_MOE_FREQ_MAX / 2 - 1 - start) {
            snprintf(r->why, sizeof r->why, "more than %d layers", GL_MOE_FREQ_MAX / 2 - 1);
            return -1;
        }
        for (long i = 1; i < k; i++)
            memcpy(r->pat + start + i * len, r->pat + start, (size_t)len);
        r->n = start + (int)(len * k);
    }
}

static int freq_expr(freq_reader *r)
{
    if (freq_term(r) < 0)
        return -1;
    for (;;) {
        freq_skip(r);
        if (*r->p != '+')
            return 0;
        r->p++;
        if (freq_term(r) < 0)
            return -1;
    }
}

int gl_moe_layer_freq_parse(const char *text, int num_layers, char *out, size_t n,
                            gl_error *err)
{
    if (!strchr(text, '[')) {
        char *end;
        long k = strtol(text, &end, 10);
        if (end == text || *end || k < 1 || k > 1000000)
            return gl_errprintf(err, "--moe-layer-freq %s: give a positive integer N (every "
                                "N-th layer is an MoE layer) or a list such as [0,1,1,1] or "
                                "([0]+[1]*23)", text);
        snprintf(out, n, "%ld", k);
        return 0;
    }
    freq_reader *r = calloc(1, sizeof *r);
    if (!r)
        return gl_errprintf(err, "--moe-layer-freq: out of memory");
    r->p = text;
    int rc = freq_expr(r);
    freq_skip(r);
    if (rc == 0 && *r->p) {
        snprintf(r->why, sizeof r->why, "unexpected \"%.20s\"", r->p);
        rc = -1;
    }
    if (rc < 0) {
        gl_errprintf(err, "--moe-layer-freq %s: %s (Megatron's forms: N, [0,1,1,1], "
                     "([0]+[1]*23))", text, r->why);
    } else if (num_layers > 0 && r->n != num_layers) {
        rc = gl_errprintf(err, "--moe-layer-freq %s: the list has %d entries for "
                          "--num-layers %d: give one 0 (dense) or 1 (MoE) per layer", text,
                          r->n, num_layers);
    } else if ((size_t)(2 * r->n + 2) > n) {
        rc = gl_errprintf(err, "--moe-layer-freq %s: %d layers are more than gridlm takes",
                          text, r->n);
    } else {
        size_t k = 0;
        out[k++] = '[';
        for (int i = 0; i < r->n; i++) {
            if (i)
                out[k++] = ',';
            out[k++] = r->pat[i];
        }
        out[k++] = ']';
        out[k] = '\0';
    }
    free(r);
    return rc;
}

int gl_arch_is_moe_layer(const gl_arch *a, int l)
{
    if (a->num_experts <= 0 || l < 0)
        return 0;
    const char *f = a->moe_layer_freq;
    if (f[0] == '[') {
        /* canonical: '[' then one digit every two characters */
        size_t at = 1 + 2 * (size_t)l;
        if (at >= strlen(f))
            return 1;
        return f[at] == '1';
    }
    long k = strtol(f, NULL, 10);
    return k < 1 || l % k == 0;
}

int gl_arch_num_moe_layers(const gl_arch *a)
{
    int n = 0;
    for (int l = 0; l < a->num_layers; l++)
        n += gl_arch_is_moe_layer(a, l);
    return n;
}

int gl_arch_moe_ffn(const gl_arch *a)
{
    return a->moe_ffn_hidden_size ? a->moe_ffn_hidden_size : a->ffn_hidden_size;
}

/* ------------------------------------------------------------------ */
/* Counts (../shared/reference/flops.md, doc/flops-moe.md).            */

/* The parameters of one MoE layer's MLP block, with `experts` routed
 * experts counted (num_experts for the model's total, topk for the
 * active count): the router [E, h], the experts' gate (SwiGLU), up and
 * down matrices, the shared experts' (an MLP of their width), the
 * linear biases where the model has them; the expert bias is a buffer,
 * not a parameter. */
static long moe_mlp_params(const gl_arch *a, long experts)
{
    long h = a->hidden_size, F = gl_arch_moe_ffn(a), S = a->moe_shared_expert_intermediate_size;
    long m = a->swiglu ? 3 : 2;
    long n = (long)a->num_experts * h + experts * m * F * h + m * S * h;
    if (a->add_bias_linear)
        n += experts * ((m - 1) * F + h) + (S ? (m - 1) * S + h : 0);
    return n;
}

static long count_params(const gl_arch *a, int active)
{
    long h = a->hidden_size, D = gl_arch_head_dim(a);
    long q = (long)a->num_attention_heads * D, kv = (long)gl_arch_groups(a) * D;
    long f = a->ffn_hidden_size;
    long V = a->padded_vocab_size ? a->padded_vocab_size : a->vocab_size;
    long norm = a->normalization == GL_NORM_LAYERNORM ? 2 * h : h;  /* LayerNorm's bias */
    long layer = h * (q + 2 * kv) + q * h + (a->swiglu ? 3 : 2) * f * h + 2 * norm;
    if (a->add_bias_linear || a->add_qkv_bias)
        layer += q + 2 * kv;                                  /* Q, K, V biases */
    if (a->add_bias_linear)
        layer += h + (a->swiglu ? 2 : 1) * f + h;             /* proj, fc1, fc2 biases */
    if (a->qk_layernorm)
        layer += 2 * D;                                       /* q_norm, k_norm */
    long n = a->num_layers * layer + V * h + norm;
    if (a->position_embedding_type == GL_POS_LEARNED_ABSOLUTE)
        n += (long)(a->max_position_embeddings ? a->max_position_embeddings : a->seq_length) * h;
    if (a->untie_embeddings_and_output_weights)
        n += V * h;
    /* MoE layers: the dense MLP's matrices (and biases) give way to the
     * MoE block's. */
    long dense_mlp = (a->swiglu ? 3 : 2) * f * h;
    if (a->add_bias_linear)
        dense_mlp += (a->swiglu ? 2 : 1) * f + h;
    long moe = moe_mlp_params(a, active ? a->moe_router_topk : a->num_experts);
    n += (long)gl_arch_num_moe_layers(a) * (moe - dense_mlp);
    return n;
}

long gl_arch_num_params(const gl_arch *a)
{
    return count_params(a, 0);
}

long gl_arch_num_active_params(const gl_arch *a)
{
    return count_params(a, 1);
}

/* The head size as the FLOP count takes it: --kv-channels, or hidden /
 * heads unrounded (gridlm-train refuses a hidden size the heads do not
 * divide; the count does not). */
static double flops_head_dim(const gl_arch *a)
{
    return a->kv_channels ? a->kv_channels : (double)a->hidden_size / a->num_attention_heads;
}

double gl_arch_layer_flops(const gl_arch *a)
{
    double h = a->hidden_size, ffn = a->ffn_hidden_size, s = a->seq_length;
    double head_dim = flops_head_dim(a);
    double q = a->num_attention_heads * head_dim, kv = gl_arch_groups(a) * head_dim;
    /* SwiGLU: gate, up and down projections; GeLU: fc1 and fc2 (Megatron's
     * gated_linear_multiplier of 3/2 over the two matrices). */
    double f = a->swiglu ? 3 : 2;

    /* Forward + backward is 3 x the forward's 2 FLOPs per multiply-add. */
    double mlp = 6 * h * (f * ffn);
    double proj = 6 * (h * (q + 2 * kv) + q * h);
    double attn = 6 * s * q; /* causal: half of QK^T and AV over s x s */
    return mlp + proj + attn;
}

double gl_arch_moe_layer_flops(const gl_arch *a)
{
    double h = a->hidden_size, f = a->swiglu ? 3 : 2;
    /* flops.md's count: the topk routed experts, the shared experts and
     * the router's [E, h] product in place of the dense MLP (Megatron's
     * code leaves the router out: doc/flops-moe.md) */
    double dense_mlp = 6 * h * (f * a->ffn_hidden_size);
    double routed = 6 * h * (f * gl_arch_moe_ffn(a)) * a->moe_router_topk;
    double shared = 6 * h * (f * a->moe_shared_expert_intermediate_size);
    double router = 6 * h * a->num_experts;
    return gl_arch_layer_flops(a) - dense_mlp + routed + shared + router;
}

double gl_arch_head_flops(const gl_arch *a, int tp)
{
    double V = a->padded_vocab_size ? a->padded_vocab_size
                                    : gl_arch_pad_vocab(a, a->vocab_size, tp);
    return 6.0 * a->hidden_size * V;
}

double gl_arch_flops_per_token(const gl_arch *a, int tp)
{
    int moe = gl_arch_num_moe_layers(a);
    double layers = (a->num_layers - moe) * gl_arch_layer_flops(a);
    if (moe)
        layers += moe * gl_arch_moe_layer_flops(a);
    return layers + gl_arch_head_flops(a, tp);
}

/* ------------------------------------------------------------------ */
/* The field table: the JSON codec and the comparison.                 */

typedef enum { F_STR, F_INT, F_NUM, F_BOOL, F_CHOICE } field_kind;

/* How a field takes part in gl_arch_diff. */
enum {
    NOT_COMPARED,     /* layout, training or length: may change between runs */
    COMPARED,
    IF_SCALING,       /* compared only when both runs scale RoPE */
    IF_LEARNED,       /* compared only when both have learned positions (a
                       * table of that many rows) */
    IF_MOE,           /* compared only when both have experts */
};

static const struct field {
    const char *key;            /* JSON key = Megatron's argument name */
    field_kind kind;
    size_t off;
    int compare;
    int required;               /* every checkpoint's config has it */
    int llama_if_absent;        /* a missing key reads as gl_arch_llama's value */
    const char *const *names;   /* F_CHOICE: the values' spellings (an int field) */
    const char *off_flag;       /* F_BOOL with a flag of its own for off */
    size_t size;                /* F_STR: the room for the text */
    int moe;                    /* an MoE field: left out (JSON, flags, keys) of a dense
                                 * model; a missing key reads as gl_arch_defaults' value */
} fields[] = {
#define F(key, kind, cmp, req) \
    { #key, kind, offsetof(gl_arch, key), cmp, req, 0, NULL, NULL, 0, 0 }
/* The fields of the model's form (gl_arch_llama). */
#define FORM(key, kind, cmp, names, off) \
    { #key, kind, offsetof(gl_arch, key), cmp, 0, 1, names, off, 0, 0 }
#define STRF(key, cmp, moe) \
    { #key, F_STR, offsetof(gl_arch, key), cmp, 0, 0, NULL, NULL, sizeof ((gl_arch *)0)->key, moe }
/* The mixture-of-experts fields. */
#define MOE(key, kind, names) \
    { #key, kind, offsetof(gl_arch, key), IF_MOE, 0, 0, names, NULL, 0, 1 }
    STRF(model, NOT_COMPARED, 0),
    F(num_layers, F_INT, COMPARED, 1),
    F(hidden_size, F_INT, COMPARED, 1),
    F(ffn_hidden_size, F_INT, COMPARED, 1),
    F(num_attention_heads, F_INT, COMPARED, 1),
    F(num_query_groups, F_INT, COMPARED, 0),
    F(kv_channels, F_INT, COMPARED, 0),
    F(seq_length, F_INT, NOT_COMPARED, 0),
    F(max_position_embeddings, F_INT, IF_LEARNED, 0),
    F(vocab_size, F_INT, COMPARED, 1),
    F(padded_vocab_size, F_INT, NOT_COMPARED, 0),
    F(make_vocab_size_divisible_by, F_INT, NOT_COMPARED, 0),
    F(norm_epsilon, F_NUM, COMPARED, 0),
    FORM(normalization, F_CHOICE, COMPARED, gl_arch_norm_names, NULL),
    FORM(apply_layernorm_1p, F_BOOL, COMPARED, NULL, NULL),
    FORM(swiglu, F_BOOL, COMPARED, NULL, NULL),
    FORM(position_embedding_type, F_CHOICE, COMPARED, gl_arch_position_names, NULL),
    FORM(rotary_percent, F_NUM, COMPARED, NULL, NULL),
    FORM(add_bias_linear, F_BOOL, COMPARED, NULL, "disable-bias-linear"),
    FORM(add_qkv_bias, F_BOOL, COMPARED, NULL, NULL),
    FORM(qk_layernorm, F_BOOL, COMPARED, NULL, NULL),
    FORM(attention_dropout, F_NUM, NOT_COMPARED, NULL, NULL),
    FORM(hidden_dropout, F_NUM, NOT_COMPARED, NULL, NULL),
    F(rotary_base, F_NUM, COMPARED, 0),
    F(use_rope_scaling, F_BOOL, COMPARED, 0),
    F(rope_scaling_factor, F_NUM, IF_SCALING, 0),
    F(rope_scaling_low_freq_factor, F_NUM, IF_SCALING, 0),
    F(rope_scaling_high_freq_factor, F_NUM, IF_SCALING, 0),
    F(rope_scaling_original_max_position_embeddings, F_INT, IF_SCALING, 0),
    F(untie_embeddings_and_output_weights, F_BOOL, COMPARED, 0),
    F(init_method_std, F_NUM, NOT_COMPARED, 0),
    { "num_experts", F_INT, offsetof(gl_arch, num_experts), COMPARED, 0, 0, NULL, NULL, 0, 1 },
    MOE(moe_ffn_hidden_size, F_INT, NULL),
    MOE(moe_router_topk, F_INT, NULL),
    STRF(moe_layer_freq, IF_MOE, 1),
    MOE(moe_shared_expert_intermediate_size, F_INT, NULL),
    MOE(moe_router_score_function, F_CHOICE, gl_arch_moe_score_names),
    MOE(moe_router_pre_softmax, F_BOOL, NULL),
    MOE(moe_router_topk_scaling_factor, F_NUM, NULL),
    MOE(moe_router_enable_expert_bias, F_BOOL, NULL),
#undef F
#undef FORM
#undef STRF
#undef MOE
};
enum { NFIELDS = sizeof fields / sizeof fields[0] };

#define AT(a, f, type) ((type *)((char *)(a) + (f)->off))
#define CAT(a, f, type) ((const type *)((const char *)(a) + (f)->off))

/* Is field f left out of a's JSON, flags and keys (an MoE field of a
 * dense model)? */
static int left_out(const struct field *f, const gl_arch *a)
{
    return f->moe && a->num_experts <= 0;
}

void gl_arch_to_json(const gl_arch *a, json_t *obj)
{
    for (int i = 0; i < NFIELDS; i++) {
        const struct field *f = &fields[i];
        json_t *v = NULL;
        if (left_out(f, a))
            continue;
        switch (f->kind) {
        case F_STR:
            if (CAT(a, f, char)[0])
                v = json_string(CAT(a, f, char));
            break;
        case F_INT:
            if (*CAT(a, f, int))
                v = json_integer(*CAT(a, f, int));
            break;
        case F_NUM:
            v = json_real(*CAT(a, f, double));
            break;
        case F_BOOL:
            v = json_boolean(*CAT(a, f, int));
            break;
        case F_CHOICE:
            v = json_string(f->names[*CAT(a, f, int)]);
            break;
        }
        if (v)
            json_object_set_new(obj, f->key, v);
    }
}

int gl_arch_from_json(gl_arch *a, json_t *obj, gl_error *err)
{
    if (!json_is_object(obj))
        return gl_errprintf(err, "no readable \"config\" attribute (JSON with the model's sizes)");
    gl_json_reader r;
    gl_json_reader_init(&r, obj);
    gl_arch llama = *a, defaults;
    gl_arch_llama(&llama);
    gl_arch_defaults(&defaults);
    for (int i = 0; i < NFIELDS; i++) {
        const struct field *f = &fields[i];
        json_t *v = json_object_get(obj, f->key);
        if (!v && (f->llama_if_absent || f->moe)) {
            const gl_arch *from = f->moe ? &defaults : &llama;
            memcpy(AT(a, f, char), CAT(from, f, char),
                   f->kind == F_STR ? f->size : f->kind == F_NUM ? sizeof(double) : sizeof(int));
            continue;
        }
        switch (f->kind) {
        case F_CHOICE: {
            int k = 0;
            while (json_is_string(v) && f->names[k] && strcmp(f->names[k], json_string_value(v)))
                k++;
            if (!json_is_string(v) || !f->names[k])
                return gl_errprintf(err, "its \"config\" attribute: %s is not one of the "
                                    "known values", f->key);
            *AT(a, f, int) = k;
            break;
        }
        case F_STR:
            if (json_is_string(v))
                snprintf(AT(a, f, char), f->size, "%s", json_string_value(v));
            break;
        case F_INT:
            *AT(a, f, int) = gl_json_int(&r, f->key, *AT(a, f, int));
            break;
        case F_NUM:
            *AT(a, f, double) = gl_json_num(&r, f->key, *AT(a, f, double));
            break;
        case F_BOOL:
            *AT(a, f, int) = gl_json_bool(&r, f->key, *AT(a, f, int));
            break;
        }
    }
    if (r.err[0])
        return gl_errprintf(err, "its \"config\" attribute: %s", r.err);
    for (int i = 0; i < NFIELDS; i++)
        if (fields[i].required && *CAT(a, &fields[i], int) == 0)
            return gl_errprintf(err, "its \"config\" attribute lacks %s", fields[i].key);
    return 0;
}

/* Does gridlm-train take the field as a flag of its own?  Not the preset
 * name (--model stands for many fields) and not the padded vocabulary,
 * which is derived. */
static int has_flag(const struct field *f)
{
    return f->off != offsetof(gl_arch, model) && f->off != offsetof(gl_arch, padded_vocab_size);
}

/* The field's value as text: the number with the fewest digits that
 * reads back as the same value, 1 or 0 for a boolean, the string. */
static void exact_text(const struct field *f, const gl_arch *a, char *out, size_t n)
{
    if (f->kind == F_CHOICE) {
        snprintf(out, n, "%s", f->names[*CAT(a, f, int)]);
    } else if (f->kind == F_STR) {
        snprintf(out, n, "%s", CAT(a, f, char));
    } else if (f->kind == F_NUM) {
        double x = *CAT(a, f, double);
        if (x == floor(x) && fabs(x) < 1e15) {  /* 500000, not 5e+05 */
            snprintf(out, n, "%.0f", x);
            return;
        }
        for (int digits = 1; digits <= 17; digits++) {
            snprintf(out, n, "%.*g", digits, x);
            if (strtod(out, NULL) == x)
                break;
        }
    } else {
        snprintf(out, n, "%d", *CAT(a, f, int));
    }
}

/* The flag of the field: its key with '-' for '_'. */
static void flag_name(const struct field *f, char *out, size_t n)
{
    snprintf(out, n, "%s", f->key);
    for (char *p = out; *p; p++)
        if (*p == '_')
            *p = '-';
}

size_t gl_arch_to_flags(const gl_arch *a, char *out, size_t n)
{
    size_t len = 0;
    if (n)
        out[0] = '\0';
    for (int i = 0; i < NFIELDS; i++) {
        const struct field *f = &fields[i];
        char flag[128], value[GL_MOE_FREQ_MAX] = "";
        if (!has_flag(f) || left_out(f, a))
            continue;
        int off_flag = f->kind == F_BOOL && f->off_flag && !*CAT(a, f, int);
        if ((f->kind == F_INT || f->kind == F_BOOL) && !*CAT(a, f, int) && !off_flag)
            continue;                   /* not set, or off */
        if (f->kind == F_NUM && f->moe && *CAT(a, f, double) == 0)
            continue;                   /* an MoE setting not given */
        if (f->kind != F_BOOL)
            exact_text(f, a, value, sizeof value);
        if (off_flag)
            snprintf(flag, sizeof flag, "%s", f->off_flag);
        else
            flag_name(f, flag, sizeof flag);
        len += (size_t)snprintf(len < n ? out + len : NULL, len < n ? n - len : 0, "%s--%s%s%s",
                                len ? " " : "", flag, value[0] ? " " : "", value);
    }
    return len;
}

void gl_arch_print_keys(const gl_arch *a, FILE *out)
{
    for (int i = 0; i < NFIELDS; i++) {
        char value[GL_MOE_FREQ_MAX];
        if (left_out(&fields[i], a))
            continue;
        exact_text(&fields[i], a, value, sizeof value);
        fprintf(out, "%s=%s\n", fields[i].key, value);
    }
}

/* The field's value as gridlm-train's flag takes it; precise: every digit. */
static void value_text(const struct field *f, const gl_arch *a, int precise, char *out, size_t n)
{
    if (f->kind == F_NUM)
        snprintf(out, n, precise ? "%.17g" : "%g", *CAT(a, f, double));
    else if (f->kind == F_CHOICE)
        snprintf(out, n, "%s", f->names[*CAT(a, f, int)]);
    else if (f->kind == F_BOOL)
        snprintf(out, n, "%s", *CAT(a, f, int) ? "on" : "off");
    else if (f->kind == F_STR)
        snprintf(out, n, "%s", CAT(a, f, char));
    else
        snprintf(out, n, "%d", *CAT(a, f, int));
}

static int differs(const struct field *f, const gl_arch *x, const gl_arch *y)
{
    if (f->compare == NOT_COMPARED)
        return 0;
    if (f->compare == IF_SCALING && !(x->use_rope_scaling && y->use_rope_scaling))
        return 0;
    if (f->compare == IF_LEARNED &&
        !(x->position_embedding_type == GL_POS_LEARNED_ABSOLUTE &&
          y->position_embedding_type == GL_POS_LEARNED_ABSOLUTE))
        return 0;
    if (f->compare == IF_MOE && !(x->num_experts > 0 && y->num_experts > 0))
        return 0;
    if (f->kind == F_STR)
        return strcmp(CAT(x, f, char), CAT(y, f, char)) != 0;
    if (f->kind == F_NUM)
        return *CAT(x, f, double) != *CAT(y, f, double);
    if (f->kind == F_BOOL)
        return !*CAT(x, f, int) != !*CAT(y, f, int);
    return *CAT(x, f, int) != *CAT(y, f, int);
}

/* Defaults spelled out, so that "0: as many groups as heads" compares
 * equal to the number it stands for. */
static void normalise(gl_arch *a)
{
    a->num_query_groups = gl_arch_groups(a);
    a->kv_channels = gl_arch_head_dim(a);
    a->moe_ffn_hidden_size = gl_arch_moe_ffn(a);
    /* --moe-layer-freq as the list it stands for: 1 = [1,1,1,1] */
    if (a->num_experts > 0 && a->moe_layer_freq[0] != '[' && a->num_layers > 0 &&
        (size_t)(2 * a->num_layers + 2) <= sizeof a->moe_layer_freq) {
        char list[GL_MOE_FREQ_MAX];
        size_t k = 0;
        list[k++] = '[';
        for (int l = 0; l < a->num_layers; l++) {
            if (l)
                list[k++] = ',';
            list[k++] = gl_arch_is_moe_layer(a, l) ? '1' : '0';
        }
        list[k++] = ']';
        list[k] = '\0';
        memcpy(a->moe_layer_freq, list, k + 1);
    }
}

int gl_arch_diff(const gl_arch *there, const gl_arch *here, char *out, size_t n)
{
    gl_arch x = *there, y = *here;
    normalise(&x);
    normalise(&y);
    size_t len = 0;
    int count = 0;
    if (n)
        out[0] = '\0';
    for (int i = 0; i < NFIELDS; i++) {
        const struct field *f = &fields[i];
        if (!differs(f, &x, &y))
            continue;
        char a[96], b[96], flag[128];
        value_text(f, &x, 0, a, sizeof a);
        value_text(f, &y, 0, b, sizeof b);
        if (!strcmp(a, b)) {     /* values that differ beyond %g's digits */
            value_text(f, &x, 1, a, sizeof a);
            value_text(f, &y, 1, b, sizeof b);
        }
        flag_name(f, flag, sizeof flag);
        if (len < n)
            len += (size_t)snprintf(out + len, n - len, "%s--%s %s there, %s here",
                                    count ? "; " : "", flag, a, b);
        count++;
    }
    return count;
}

/* ------------------------------------------------------------------ */
/* FP8 options.                                                        */

void gl_fp8_defaults(gl_fp8_opts *o)
{
    memset(o, 0, sizeof *o);
    o->format = GL_FP8_OFF;
    o->recipe = GL_FP8_DELAYED;
    o->amax_history_len = 1;
    o->amax_compute_algo = GL_FP8_ALGO_MOST_RECENT;
    o->num_layers_at_start_in_bf16 = 1;
    o->num_layers_at_end_in_bf16 = 1;
}

int gl_fp8_layer_on(const gl_fp8_opts *o, int layer, int num_layers)
{
    if (o->format == GL_FP8_OFF)
        return 0;
    if (!o->first_last_layers_bf16)
        return 1;
    return layer >= o->num_layers_at_start_in_bf16 &&
           layer < num_layers - o->num_layers_at_end_in_bf16;
}

const char *gl_fp8_describe(const gl_fp8_opts *o, char *buf, size_t n)
{
    static const char *const recipes[] = {"delayed", "tensorwise", "blockwise", "mxfp8"};
    if (o->format == GL_FP8_OFF) {
        snprintf(buf, n, "off");
        return buf;
    }
    const char *fmt = o->format == GL_FP8_FMT_HYBRID ? "hybrid" : "e4m3";
    if (o->recipe == GL_FP8_DELAYED)
        snprintf(buf, n, "delayed (%s, margin %d, amax history %d, %s)", fmt, o->margin,
                 o->amax_history_len,
                 o->amax_compute_algo == GL_FP8_ALGO_MAX ? "max" : "most_recent");
    else if (o->recipe == GL_FP8_BLOCKWISE)
        snprintf(buf, n, "blockwise (%s, 1x128 tiles, 128x128 weight blocks, power-of-two "
                 "scales)", fmt);
    else
        snprintf(buf, n, "%s (%s)", recipes[o->recipe], fmt);
    if (o->first_last_layers_bf16) {
        size_t k = strlen(buf);
        snprintf(buf + k, n - k, ", first %d and last %d layers in bf16",
                 o->num_layers_at_start_in_bf16, o->num_layers_at_end_in_bf16);
    }
    return buf;
}
