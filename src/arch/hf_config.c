/*
 * hf_config.c: config.json <-> gl_arch (hf_config.h).
 */
#include <config.h>

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "arch/hf_config.h"

/* A positive integer member that fits an int; missing or null: dflt, or
 * an error when required. */
static int get_int(json_t *o, const char *key, int *v, int required, long dflt,
                   const char *path, gl_error *err)
{
    json_t *x = json_object_get(o, key);
    if (!x || json_is_null(x)) {
        if (required)
            return gl_errprintf(err, "%s has no \"%s\"", path, key);
        *v = (int)dflt;
        return 0;
    }
    if (!json_is_integer(x) || json_integer_value(x) <= 0)
        return gl_errprintf(err, "%s: \"%s\" must be a positive integer", path, key);
    if (json_integer_value(x) > INT_MAX)
        return gl_errprintf(err, "%s: \"%s\" %lld is too large", path, key,
                            (long long)json_integer_value(x));
    *v = (int)json_integer_value(x);
    return 0;
}

static int get_double(json_t *o, const char *key, double *v, double dflt, const char *path,
                      gl_error *err)
{
    json_t *x = json_object_get(o, key);
    if (!x || json_is_null(x)) {
        *v = dflt;
        return 0;
    }
    if (!json_is_number(x) || json_number_value(x) <= 0)
        return gl_errprintf(err, "%s: \"%s\" must be a positive number", path, key);
    *v = json_number_value(x);
    return 0;
}

/* config.json's RoPE: rope_theta and rope_scaling (absent or null: plain
 * RoPE), or transformers v5's rope_parameters, one object holding both
 * (rope_scaling wins when both are there, as in v5; a rope_theta inside
 * the object wins over the top-level one; no rope_type there means
 * "default").  gridlm runs rope_type "llama3", the frequency scaling of
 * Llama 3.1 and 3.2, with all four of its parameters (gl_rope_inv_freq in
 * src/model/model.c); transformers requires factor, low_freq_factor and
 * high_freq_factor and takes original_max_position_embeddings from
 * max_position_embeddings when it is missing, and so does this. */
static int rope_from_hf(json_t *j, gl_arch *a, const char *path, gl_error *err)
{
    json_t *rs = json_object_get(j, "rope_scaling");
    int v5 = !rs || json_is_null(rs);
    if (v5)
        rs = json_object_get(j, "rope_parameters");
    if (get_double(j, "rope_theta", &a->rotary_base, 10000.0, path, err))
        return -1;
    json_t *prf[2] = {json_object_get(j, "partial_rotary_factor"),
                      json_is_object(rs) ? json_object_get(rs, "partial_rotary_factor") : NULL};
    for (int i = 0; i < 2; i++)
        if (prf[i] && !json_is_null(prf[i]) &&
            !(json_is_number(prf[i]) && json_number_value(prf[i]) == 1.0))
            return gl_errprintf(err, "%s: partial_rotary_factor is not 1; gridlm rotates "
                                "every channel of a head", path);
    if (!rs || json_is_null(rs))
        return 0;
    if (!json_is_object(rs))
        return gl_errprintf(err, "%s: %s is not a JSON object", path,
                            v5 ? "rope_parameters" : "rope_scaling");
    const char *key;
    json_t *val;
    json_object_foreach(rs, key, val)
        if (json_is_object(val))       /* v5's per-layer-type form (Gemma, ...) */
            return gl_errprintf(err, "%s: rope_parameters differ per layer type (\"%s\"); "
                                "gridlm's Llama has one RoPE for every layer", path, key);
    if (json_object_get(rs, "rope_theta") &&
        get_double(rs, "rope_theta", &a->rotary_base, 10000.0, path, err))
        return -1;
    json_t *t = json_object_get(rs, "rope_type");
    if (!t)
        t = json_object_get(rs, "type");      /* the older spelling */
    const char *type = json_is_string(t) ? json_string_value(t) : !t && v5 ? "default" : "?";
    if (!strcmp(type, "default"))
        return 0;
    if (strcmp(type, "llama3") != 0)
        return gl_errprintf(err, "%s: rope_scaling type \"%s\"; gridlm supports \"llama3\" "
                            "(Llama 3.1 and 3.2) scaling or none: its rotary frequencies "
                            "would differ from transformers'", path, type);
    static const char *const need[] = {"factor", "low_freq_factor", "high_freq_factor", NULL};
    for (int i = 0; need[i]; i++)
        if (!json_is_number(json_object_get(rs, need[i])))
            return gl_errprintf(err, "%s: rope_scaling (llama3) has no number \"%s\": "
                                "transformers requires factor, low_freq_factor and "
                                "high_freq_factor", path, need[i]);
    a->use_rope_scaling = 1;
    if (get_double(rs, "factor", &a->rope_scaling_factor, 8.0, path, err) ||
        get_double(rs, "low_freq_factor", &a->rope_scaling_low_freq_factor, 1.0, path, err) ||
        get_double(rs, "high_freq_factor", &a->rope_scaling_high_freq_factor, 4.0, path, err) ||
        get_int(rs, "original_max_position_embeddings",
                &a->rope_scaling_original_max_position_embeddings, 0,
                a->max_position_embeddings, path, err))
        return -1;
    /* The rule blends between the wavelengths original / high and
     * original / low and divides by high - low (gridlm-train's
     * --rope-scaling-high-freq-factor must exceed the low one too). */
    if (!(a->rope_scaling_high_freq_factor > a->rope_scaling_low_freq_factor))
        return gl_errprintf(err, "%s: rope_scaling has high_freq_factor %g not larger than "
                            "low_freq_factor %g: the llama3 rule needs high > low (Llama "
                            "3.1: 4 and 1)", path, a->rope_scaling_high_freq_factor,
                            a->rope_scaling_low_freq_factor);
    return 0;
}

/* The families gridlm reads from config.json. */
typedef enum { HF_OTHER = 0, HF_LLAMA, HF_QWEN2, HF_QWEN3, HF_GPT2, HF_MIXTRAL, HF_QWEN3_MOE } hf_family;

/* The families' model_type and class names. */
static const struct {
    hf_family fam;
    const char *model_type, *class_name;
} families[] = {
    {HF_LLAMA, "llama", "LlamaForCausalLM"},
    {HF_QWEN2, "qwen2", "Qwen2ForCausalLM"},
    {HF_QWEN3, "qwen3", "Qwen3ForCausalLM"},
    {HF_GPT2, "gpt2", "GPT2LMHeadModel"},
    {HF_MIXTRAL, "mixtral", "MixtralForCausalLM"},
    {HF_QWEN3_MOE, "qwen3_moe", "Qwen3MoeForCausalLM"},
};
enum { NFAMILIES = sizeof families / sizeof families[0] };

/* Which family j is: its model_type, or else a class among the
 * architectures. */
static hf_family family_of(json_t *j)
{
    json_t *mt = json_object_get(j, "model_type");
    for (int k = 0; k < NFAMILIES; k++)
        if (json_is_string(mt) && !strcmp(json_string_value(mt), families[k].model_type))
            return families[k].fam;
    size_t i;
    json_t *a;
    json_array_foreach(json_object_get(j, "architectures"), i, a)
        for (int k = 0; k < NFAMILIES; k++)
            if (json_is_string(a) && !strcmp(json_string_value(a), families[k].class_name))
                return families[k].fam;
    return HF_OTHER;
}

/* Qwen2's and Qwen3's own keys: sliding-window attention
 * (use_sliding_window, or a layer_types entry other than
 * "full_attention"; gridlm's attention is full causal) is refused. */
static int qwen_from_hf(json_t *j, const char *path, gl_error *err)
{
    json_t *sw = json_object_get(j, "use_sliding_window");
    if (sw && json_is_true(sw))
        return gl_errprintf(err, "%s: use_sliding_window is true; gridlm's attention is full "
                            "causal attention, not sliding-window", path);
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(j, "layer_types"), i, t)
        if (!json_is_string(t) || strcmp(json_string_value(t), "full_attention") != 0)
            return gl_errprintf(err, "%s: layer_types[%zu] is not \"full_attention\"; gridlm's "
                                "attention is full causal attention in every layer", path, i);
    return 0;
}

/* Is member key of o true (a JSON true)? */
static int is_true(json_t *o, const char *key)
{
    json_t *x = json_object_get(o, key);
    return x && json_is_true(x);
}

/* MixtralConfig's own keys (after the Llama ones): every layer a sparse
 * MoE block of num_local_experts SwiGLU experts of intermediate_size,
 * num_experts_per_tok of them per token.  Its router is a softmax over
 * all experts, the top k kept and renormalised to sum 1: the same weights
 * as Megatron's default (top k of the logits, softmax over those k), so
 * no router option is set.  router_aux_loss_coef and output_router_logits
 * are training settings (--moe-aux-loss-coeff), not the model's.
 * Sliding-window attention is refused (gridlm's is full causal). */
static int mixtral_from_hf(gl_arch *a, json_t *j, const char *path, gl_error *err)
{
    json_t *sw = json_object_get(j, "sliding_window");
    if (sw && !json_is_null(sw))
        return gl_errprintf(err, "%s: sliding_window is set; gridlm's attention is full "
                            "causal attention, not sliding-window (Mixtral's default is null)",
                            path);
    if (get_int(j, "num_local_experts", &a->num_experts, 0, 8, path, err) ||
        get_int(j, "num_experts_per_tok", &a->moe_router_topk, 0, 2, path, err))
        return -1;
    if (a->moe_router_topk > a->num_experts)
        return gl_errprintf(err, "%s: num_experts_per_tok %d exceeds num_local_experts %d",
                            path, a->moe_router_topk, a->num_experts);
    a->moe_ffn_hidden_size = a->ffn_hidden_size;
    snprintf(a->moe_layer_freq, sizeof a->moe_layer_freq, "1");
    a->moe_shared_expert_intermediate_size = 0;
    a->moe_router_score_function = GL_ROUTER_SOFTMAX;
    a->moe_router_pre_softmax = 0;
    a->moe_router_topk_scaling_factor = 0;
    a->moe_router_enable_expert_bias = 0;
    return 0;
}

/* Qwen3MoeConfig's own keys (after the Qwen3 ones): num_experts SwiGLU
 * experts of moe_intermediate_size, num_experts_per_tok per token, on
 * layer l iff l is not in mlp_only_layers and (l + 1) % decoder_sparse_step
 * is 0 (the other layers are dense SwiGLU MLPs of intermediate_size).  Its
 * router is a softmax over all experts, the top k kept; norm_topk_prob
 * true renormalises them to sum 1 (Megatron's default router), false
 * keeps them as they are (--moe-router-pre-softmax).  No shared experts. */
static int qwen3_moe_from_hf(gl_arch *a, json_t *j, const char *path, gl_error *err)
{
    int step;
    if (get_int(j, "num_experts", &a->num_experts, 0, 128, path, err) ||
        get_int(j, "num_experts_per_tok", &a->moe_router_topk, 0, 8, path, err) ||
        get_int(j, "moe_intermediate_size", &a->moe_ffn_hidden_size, 0, 768, path, err) ||
        get_int(j, "decoder_sparse_step", &step, 0, 1, path, err))
        return -1;
    if (a->num_experts < 1 || a->moe_router_topk < 1 || a->moe_router_topk > a->num_experts)
        return gl_errprintf(err, "%s: num_experts %d and num_experts_per_tok %d: gridlm needs "
                            "1 <= num_experts_per_tok <= num_experts", path, a->num_experts,
                            a->moe_router_topk);
    if (step < 1)
        return gl_errprintf(err, "%s: decoder_sparse_step %d must be positive", path, step);
    if (a->num_layers > (GL_MOE_FREQ_MAX - 2) / 2)
        return gl_errprintf(err, "%s: %d layers; gridlm's --moe-layer-freq list holds %d",
                            path, a->num_layers, (GL_MOE_FREQ_MAX - 2) / 2);
    /* The MoE layers as Megatron's list "[1,0,...]" (gl_arch_is_moe_layer's
     * canonical form), or "1" when every layer is one. */
    char *f = a->moe_layer_freq;
    int dense = 0;
    f[0] = '[';
    for (int l = 0; l < a->num_layers; l++) {
        int moe = (l + 1) % step == 0;
        size_t i;
        json_t *x;
        json_array_foreach(json_object_get(j, "mlp_only_layers"), i, x)
            if (json_is_integer(x) && json_integer_value(x) == l)
                moe = 0;
        dense += !moe;
        f[1 + 2 * l] = moe ? '1' : '0';
        f[2 + 2 * l] = l + 1 < a->num_layers ? ',' : ']';
    }
    f[1 + 2 * a->num_layers] = '\0';
    if (!dense)
        snprintf(f, GL_MOE_FREQ_MAX, "1");
    a->moe_shared_expert_intermediate_size = 0;
    a->moe_router_score_function = GL_ROUTER_SOFTMAX;
    a->moe_router_pre_softmax = !is_true(j, "norm_topk_prob");  /* Qwen3MoeConfig: false */
    a->moe_router_topk_scaling_factor = 0;
    a->moe_router_enable_expert_bias = 0;
    return 0;
}

/* GPT-2's activations that are GeLU's tanh approximation, which gridlm
 * computes; the first is GPT2Config's default. */
static const char *const gpt2_tanh_gelus[] = {"gelu_new", "gelu_pytorch_tanh", NULL};

/* A GPT2LMHeadModel's config.json (GPT2Config's keys and defaults):
 * LayerNorm with biases, GeLU (tanh) MLP, learned positions, biases on
 * every linear layer, multi-head attention scaled by 1 / sqrt(head size).
 * Dropout (resid/embd/attn_pdrop) is a training choice: the import has
 * none, like a Llama's. */
static int gpt2_from_hf(gl_arch *a, json_t *j, const char *path, gl_error *err)
{
    a->normalization = GL_NORM_LAYERNORM;
    a->swiglu = 0;
    a->position_embedding_type = GL_POS_LEARNED_ABSOLUTE;
    a->add_bias_linear = 1;
    if (get_int(j, "n_embd", &a->hidden_size, 1, 0, path, err) ||
        get_int(j, "n_layer", &a->num_layers, 1, 0, path, err) ||
        get_int(j, "n_head", &a->num_attention_heads, 1, 0, path, err) ||
        get_int(j, "vocab_size", &a->vocab_size, 1, 0, path, err) ||
        get_int(j, "n_positions", &a->max_position_embeddings, 0, 1024, path, err) ||
        get_int(j, "n_inner", &a->ffn_hidden_size, 0, 4L * a->hidden_size, path, err) ||
        get_double(j, "layer_norm_epsilon", &a->norm_epsilon, 1e-5, path, err))
        return -1;
    if (a->hidden_size % a->num_attention_heads)
        return gl_errprintf(err, "%s: n_embd %d is not a multiple of n_head %d", path,
                            a->hidden_size, a->num_attention_heads);
    a->num_query_groups = a->num_attention_heads;
    a->kv_channels = a->hidden_size / a->num_attention_heads;
    json_t *act = json_object_get(j, "activation_function");
    if (act && !json_is_null(act)) {
        const char *s = json_is_string(act) ? json_string_value(act) : "?";
        int i = 0;
        while (gpt2_tanh_gelus[i] && strcmp(gpt2_tanh_gelus[i], s) != 0)
            i++;
        if (!gpt2_tanh_gelus[i])
            return gl_errprintf(err, "%s: activation_function \"%s\"; gridlm's GPT MLP computes "
                                "GeLU's tanh approximation (\"gelu_new\" or "
                                "\"gelu_pytorch_tanh\") only", path, s);
    }
    json_t *sw = json_object_get(j, "scale_attn_weights");
    if (sw && json_is_false(sw))
        return gl_errprintf(err, "%s: scale_attn_weights is false; gridlm scales attention "
                            "scores by 1 / sqrt(head size)", path);
    if (is_true(j, "scale_attn_by_inverse_layer_idx"))
        return gl_errprintf(err, "%s: scale_attn_by_inverse_layer_idx is true; gridlm does "
                            "not scale attention by the layer number", path);
    if (is_true(j, "add_cross_attention"))
        return gl_errprintf(err, "%s: add_cross_attention is true; gridlm's GPT is a decoder "
                            "without cross-attention", path);
    json_t *tie = json_object_get(j, "tie_word_embeddings");     /* GPT2Config: true */
    a->untie_embeddings_and_output_weights = tie && json_is_false(tie);
    return 0;
}

int gl_arch_from_hf_config(gl_arch *a, json_t *j, const char *path, gl_error *err)
{
    gl_arch_defaults(a);
    gl_arch_llama(a);   /* LlamaForCausalLM: RMSNorm, SwiGLU, RoPE, no biases */
    if (!json_is_object(j))
        return gl_errprintf(err, "%s is not a JSON object", path);
    hf_family fam = family_of(j);
    if (fam == HF_OTHER) {
        json_t *mt = json_object_get(j, "model_type");
        return gl_errprintf(err, "%s does not describe a LlamaForCausalLM, Qwen2ForCausalLM, "
                            "Qwen3ForCausalLM, MixtralForCausalLM, Qwen3MoeForCausalLM or GPT2LMHeadModel "
                            "(model_type "
                            "\"%s\"): gridlm imports those only", path,
                            json_is_string(mt) ? json_string_value(mt) : "?");
    }
    if (fam == HF_GPT2)
        return gpt2_from_hf(a, j, path, err);
    if (fam == HF_QWEN2)
        a->add_qkv_bias = 1;    /* Qwen2 = Llama + biases on q, k and v */
    int qwen3 = fam == HF_QWEN3 || fam == HF_QWEN3_MOE;
    if (qwen3)
        a->qk_layernorm = 1;    /* Qwen3 = Llama + RMSNorm on each head of q and k */
    int qwen = fam == HF_QWEN2 || qwen3;
    if (qwen && qwen_from_hf(j, path, err))
        return -1;
    if (get_int(j, "hidden_size", &a->hidden_size, 1, 0, path, err) ||
        get_int(j, "intermediate_size", &a->ffn_hidden_size, 1, 0, path, err) ||
        get_int(j, "num_hidden_layers", &a->num_layers, 1, 0, path, err) ||
        get_int(j, "num_attention_heads", &a->num_attention_heads, 1, 0, path, err) ||
        get_int(j, "vocab_size", &a->vocab_size, 1, 0, path, err) ||
        /* Qwen2Config's and Qwen3Config's default is 32 key/value heads,
         * not "= heads", and Qwen3Config's head size is 128, not hidden /
         * heads: required there rather than guessed. */
        get_int(j, "num_key_value_heads", &a->num_query_groups, qwen,
                a->num_attention_heads, path, err) ||
        get_int(j, "head_dim", &a->kv_channels, qwen3,
                a->hidden_size / a->num_attention_heads, path, err) ||
        get_int(j, "max_position_embeddings", &a->max_position_embeddings, 0,
                qwen ? 32768 : fam == HF_MIXTRAL ? 4096 * 32 : 2048, path, err) ||
        get_double(j, "rms_norm_eps", &a->norm_epsilon, fam == HF_MIXTRAL ? 1e-5 : 1e-6,
                   path, err))
        return -1;
    if (fam == HF_MIXTRAL && mixtral_from_hf(a, j, path, err))
        return -1;
    if (fam == HF_QWEN3_MOE && qwen3_moe_from_hf(a, j, path, err))
        return -1;
    if (a->num_attention_heads % a->num_query_groups)
        return gl_errprintf(err, "%s: num_attention_heads %d is not a multiple of "
                            "num_key_value_heads %d", path, a->num_attention_heads,
                            a->num_query_groups);
    json_t *tie = json_object_get(j, "tie_word_embeddings");
    a->untie_embeddings_and_output_weights = !(tie && json_is_true(tie));
    json_t *bias = json_object_get(j, "attention_bias");
    json_t *mbias = json_object_get(j, "mlp_bias");
    if ((bias && json_is_true(bias)) || (mbias && json_is_true(mbias)))
        return gl_errprintf(err, "%s: attention_bias or mlp_bias is set; gridlm's Llama and "
                            "Qwen3 have no biases (and Qwen2 biases on q, k and v only)", path);
    json_t *act = json_object_get(j, "hidden_act");
    if (act && json_is_string(act) && strcmp(json_string_value(act), "silu") != 0)
        return gl_errprintf(err, "%s: hidden_act \"%s\"; gridlm's MLP is SwiGLU (silu)", path,
                            json_string_value(act));
    if (rope_from_hf(j, a, path, err))
        return -1;
    /* MixtralConfig's rope_theta default is 1e6, not Llama's 10000. */
    json_t *theta = json_object_get(j, "rope_theta");
    if (fam == HF_MIXTRAL && (!theta || json_is_null(theta)) &&
        !json_is_object(json_object_get(j, "rope_parameters")))
        a->rotary_base = 1e6;
    return 0;
}

/* The llama3 RoPE scaling parameters, config.json's names, into o
 * (rope_scaling, or v5's rope_parameters). */
static void llama3_to_hf(const gl_arch *a, json_t *o)
{
    json_object_set_new(o, "factor", json_real(a->rope_scaling_factor));
    json_object_set_new(o, "low_freq_factor", json_real(a->rope_scaling_low_freq_factor));
    json_object_set_new(o, "high_freq_factor", json_real(a->rope_scaling_high_freq_factor));
    json_object_set_new(o, "original_max_position_embeddings",
                        json_integer(a->rope_scaling_original_max_position_embeddings));
}

int gl_hf_mixtral_ok(const gl_arch *a, char *why, size_t n)
{
    const char *no = NULL;
    char buf[160];
    if (!gl_arch_is_llama(a))
        no = "it is not of the Llama form (RMSNorm, SwiGLU, RoPE, no biases)";
    else if (a->moe_shared_expert_intermediate_size > 0)
        no = "it has shared experts";
    else if (a->moe_router_score_function != GL_ROUTER_SOFTMAX || a->moe_router_pre_softmax)
        no = "its router is not Megatron's default softmax (Mixtral renormalises the top k)";
    else if (a->moe_router_topk_scaling_factor > 0)
        no = "its router scales the top-k weights (--moe-router-topk-scaling-factor)";
    else if (a->moe_router_enable_expert_bias)
        no = "its router has an expert bias";
    else if (gl_arch_num_moe_layers(a) != a->num_layers) {
        snprintf(buf, sizeof buf, "%d of its %d layers are dense (--moe-layer-freq); "
                 "every Mixtral layer is an MoE layer", a->num_layers - gl_arch_num_moe_layers(a),
                 a->num_layers);
        no = buf;
    }
    if (no)
        snprintf(why, n, "%s", no);
    return !no;
}

int gl_hf_qwen3_moe_ok(const gl_arch *a, char *why, size_t n)
{
    const char *no = NULL;
    if (!gl_arch_is_qwen3(a))
        no = "it is not of the Qwen3 form (RMSNorm, SwiGLU, RoPE, QK norm, no biases)";
    else if (a->moe_shared_expert_intermediate_size > 0)
        no = "it has shared experts";
    else if (a->moe_router_score_function != GL_ROUTER_SOFTMAX)
        no = "its router is not a softmax";
    else if (a->moe_router_topk_scaling_factor > 0)
        no = "its router scales the top-k weights (--moe-router-topk-scaling-factor)";
    else if (a->moe_router_enable_expert_bias)
        no = "its router has an expert bias";
    if (no)
        snprintf(why, n, "%s", no);
    return !no;
}

int gl_hf_moe_ok(const gl_arch *a, char *why, size_t n)
{
    if (a->qk_layernorm)
        return gl_hf_qwen3_moe_ok(a, why, n);
    return gl_hf_mixtral_ok(a, why, n);
}

/* GPT2Config's keys for a into j.  Two spellings of an original survive
 * when they say the same: n_inner null (= 4 n_embd) and the name of the
 * tanh GeLU. */
static void gpt2_to_hf(const gl_arch *a, json_t *j)
{
    json_t *arch = json_array();
    json_array_append_new(arch, json_string("GPT2LMHeadModel"));
    json_object_set_new(j, "architectures", arch);
    json_object_set_new(j, "model_type", json_string("gpt2"));
    json_object_set_new(j, "n_embd", json_integer(a->hidden_size));
    json_object_set_new(j, "n_layer", json_integer(a->num_layers));
    json_object_set_new(j, "n_head", json_integer(a->num_attention_heads));
    json_object_set_new(j, "n_positions", json_integer(a->max_position_embeddings));
    json_t *inner = json_object_get(j, "n_inner");
    if (!(a->ffn_hidden_size == 4 * a->hidden_size && (!inner || json_is_null(inner))))
        json_object_set_new(j, "n_inner", json_integer(a->ffn_hidden_size));
    json_object_set_new(j, "layer_norm_epsilon", json_real(a->norm_epsilon));
    json_t *act = json_object_get(j, "activation_function");
    if (!(json_is_string(act) && !strcmp(json_string_value(act), "gelu_pytorch_tanh")))
        json_object_set_new(j, "activation_function", json_string("gelu_new"));
    json_object_set_new(j, "vocab_size", json_integer(a->vocab_size));
    json_object_set_new(j, "tie_word_embeddings",
                        json_boolean(!a->untie_embeddings_and_output_weights));
}

char *gl_arch_to_hf_config(const gl_arch *a, const char *original, const char *dtype)
{
    json_t *j = original ? json_loads(original, 0, NULL) : NULL;
    if (!json_is_object(j)) {
        json_decref(j);
        j = json_object();
    }
    if (gl_arch_is_gpt2(a)) {
        gpt2_to_hf(a, j);
        json_object_set_new(j, "torch_dtype", json_string(dtype));
        char *s = json_dumps(j, JSON_PRESERVE_ORDER | JSON_INDENT(2));
        json_decref(j);
        return s;
    }
    /* Qwen2 is the Llama form with QKV biases (gl_arch_is_qwen2), Qwen3
     * the Llama form with QK norm (gl_arch_is_qwen3), Mixtral the Llama
     * form with experts (gl_hf_mixtral_ok). */
    int qwen2 = gl_arch_is_qwen2(a), qwen3 = gl_arch_is_qwen3(a);
    int qwen3_moe = a->num_experts > 0 && qwen3;
    int mixtral = a->num_experts > 0 && !qwen3;
    hf_family fam = qwen3_moe ? HF_QWEN3_MOE : mixtral ? HF_MIXTRAL : qwen2 ? HF_QWEN2
                    : qwen3 ? HF_QWEN3 : HF_LLAMA;
    int k = 0;
    while (families[k].fam != fam)
        k++;
    json_t *arch = json_array();
    json_array_append_new(arch, json_string(families[k].class_name));
    json_object_set_new(j, "architectures", arch);
    json_object_set_new(j, "model_type", json_string(families[k].model_type));
    json_object_set_new(j, "hidden_act", json_string("silu"));
    json_object_set_new(j, "hidden_size", json_integer(a->hidden_size));
    json_object_set_new(j, "intermediate_size",
                        json_integer(mixtral ? gl_arch_moe_ffn(a) : a->ffn_hidden_size));
    if (mixtral) {
        json_object_set_new(j, "num_local_experts", json_integer(a->num_experts));
        json_object_set_new(j, "num_experts_per_tok", json_integer(a->moe_router_topk));
        json_object_set_new(j, "sliding_window", json_null());
    }
    if (qwen3_moe) {
        /* Every layer MoE unless listed in mlp_only_layers. */
        json_object_set_new(j, "num_experts", json_integer(a->num_experts));
        json_object_set_new(j, "num_experts_per_tok", json_integer(a->moe_router_topk));
        json_object_set_new(j, "moe_intermediate_size", json_integer(gl_arch_moe_ffn(a)));
        json_object_set_new(j, "norm_topk_prob", json_boolean(!a->moe_router_pre_softmax));
        json_object_set_new(j, "decoder_sparse_step", json_integer(1));
        json_t *dense = json_array();
        for (int l = 0; l < a->num_layers; l++)
            if (!gl_arch_is_moe_layer(a, l))
                json_array_append_new(dense, json_integer(l));
        json_object_set_new(j, "mlp_only_layers", dense);
    }
    json_object_set_new(j, "num_hidden_layers", json_integer(a->num_layers));
    json_object_set_new(j, "num_attention_heads", json_integer(a->num_attention_heads));
    json_object_set_new(j, "num_key_value_heads", json_integer(gl_arch_groups(a)));
    json_object_set_new(j, "head_dim", json_integer(gl_arch_head_dim(a)));
    json_object_set_new(j, "rms_norm_eps", json_real(a->norm_epsilon));
    json_object_set_new(j, "rope_theta", json_real(a->rotary_base));
    if (a->use_rope_scaling) {
        json_t *rs = json_object();
        json_object_set_new(rs, "rope_type", json_string("llama3"));
        llama3_to_hf(a, rs);
        json_object_set_new(j, "rope_scaling", rs);
    } else {
        json_object_set_new(j, "rope_scaling", json_null());
    }
    /* An original written by transformers v5 holds its RoPE in
     * rope_parameters: rewrite that too, so that the two agree. */
    if (json_is_object(json_object_get(j, "rope_parameters"))) {
        json_t *rp = json_object();
        json_object_set_new(rp, "rope_type",
                            json_string(a->use_rope_scaling ? "llama3" : "default"));
        json_object_set_new(rp, "rope_theta", json_real(a->rotary_base));
        if (a->use_rope_scaling)
            llama3_to_hf(a, rp);
        json_object_set_new(j, "rope_parameters", rp);
    }
    json_object_set_new(j, "vocab_size", json_integer(a->vocab_size));
    json_object_set_new(j, "max_position_embeddings", json_integer(a->max_position_embeddings));
    json_object_set_new(j, "tie_word_embeddings",
                        json_boolean(!a->untie_embeddings_and_output_weights));
    if (mixtral) {
        /* MixtralConfig has no attention_bias / mlp_bias keys. */
    } else if (qwen2) {
        /* Qwen2Config has no attention_bias / mlp_bias keys: its biases
         * are fixed (q, k, v); its sliding window is off. */
        json_object_set_new(j, "use_sliding_window", json_false());
    } else if (qwen3) {
        /* Qwen3Config and Qwen3MoeConfig have attention_bias (q, k, v and o), no mlp_bias. */
        json_object_set_new(j, "attention_bias", json_false());
        json_object_set_new(j, "use_sliding_window", json_false());
    } else {
        json_object_set_new(j, "attention_bias", json_false());
        json_object_set_new(j, "mlp_bias", json_false());
    }
    json_object_set_new(j, "torch_dtype", json_string(dtype));
    char *s = json_dumps(j, JSON_PRESERVE_ORDER | JSON_INDENT(2));
    json_decref(j);
    return s;
}
