/* hf.c: Hugging Face Llama directories <-> gridlm checkpoints (hf.h). */
#include <config.h>
#include "ckpt/hf.h"
#include "ckpt/ckpt.h"
#include "base/file.h"
#include "base/json.h"
#include "base/log.h"

#include <jansson.h>
#include <mpi.h>

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static _Thread_local char errbuf[1536];

const char *gl_hf_error(void) { return errbuf; }

static int fail(const char *fmt, ...) GL_PRINTF(1, 2);
static int fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errbuf, sizeof errbuf, fmt, ap);
    va_end(ap);
    return -1;
}

/* ------------------------------------------------------------------ */
/* The name table                                                      */
/* ------------------------------------------------------------------ */

/* Shapes, in terms of the configuration. */
typedef enum { S_VH, S_H, S_QH, S_KVH, S_HQ, S_FH, S_HF } shape_kind;

/* One row per weight; "%d" stands for the layer number. */
static const struct hf_name {
    const char *hf, *gl;
    shape_kind shape;
    int per_layer;
} names[] = {
    { "model.embed_tokens.weight", "embedding.weight", S_VH, 0 },
    { "model.layers.%d.input_layernorm.weight", "layers.%d.attention_norm.weight", S_H, 1 },
    { "model.layers.%d.self_attn.q_proj.weight", "layers.%d.attention.wq.weight", S_QH, 1 },
    { "model.layers.%d.self_attn.k_proj.weight", "layers.%d.attention.wk.weight", S_KVH, 1 },
    { "model.layers.%d.self_attn.v_proj.weight", "layers.%d.attention.wv.weight", S_KVH, 1 },
    { "model.layers.%d.self_attn.o_proj.weight", "layers.%d.attention.wo.weight", S_HQ, 1 },
    { "model.layers.%d.post_attention_layernorm.weight", "layers.%d.mlp_norm.weight", S_H, 1 },
    { "model.layers.%d.mlp.gate_proj.weight", "layers.%d.mlp.w_gate.weight", S_FH, 1 },
    { "model.layers.%d.mlp.up_proj.weight", "layers.%d.mlp.w_up.weight", S_FH, 1 },
    { "model.layers.%d.mlp.down_proj.weight", "layers.%d.mlp.w_down.weight", S_HF, 1 },
    { "model.norm.weight", "final_norm.weight", S_H, 0 },
    { "lm_head.weight", "lm_head.weight", S_VH, 0 },
};
enum { NNAMES = sizeof names / sizeof names[0], LM_HEAD = NNAMES - 1 };

/* Does name match pattern (with at most one "%d", a layer number)? */
static int match(const char *pattern, const char *name, int *layer)
{
    const char *d = strstr(pattern, "%d");
    if (!d)
        return strcmp(pattern, name) == 0;
    size_t pre = (size_t)(d - pattern);
    if (strncmp(pattern, name, pre) != 0)
        return 0;
    const char *p = name + pre;
    if (*p < '0' || *p > '9' || (*p == '0' && p[1] >= '0' && p[1] <= '9'))
        return 0;
    char *end;
    long l = strtol(p, &end, 10);
    if (strcmp(end, d + 2) != 0 || l > 1000000)
        return 0;
    *layer = (int)l;
    return 1;
}

static int translate(const char *from, char *out, size_t n, int to_gl)
{
    for (int i = 0; i < NNAMES; i++) {
        int layer = 0;
        if (match(to_gl ? names[i].hf : names[i].gl, from, &layer)) {
            const char *fmt = to_gl ? names[i].gl : names[i].hf;
            if (names[i].per_layer)
                snprintf(out, n, fmt, layer);
            else
                snprintf(out, n, "%s", fmt);
            return 1;
        }
    }
    return 0;
}

int gl_hf_to_gridlm(const char *hf, char *out, size_t n) { return translate(hf, out, n, 1); }
int gl_hf_from_gridlm(const char *gl, char *out, size_t n) { return translate(gl, out, n, 0); }

/* The logical shape of a table row under a configuration; vocab rows
 * are the given count (V for Hugging Face, Vpad for gridlm). */
static int shape_of(shape_kind k, const gl_hf_config *c, long vocab, long shape[2])
{
    long h = c->hidden_size, q = c->num_attention_heads * c->head_dim;
    long kv = c->num_key_value_heads * c->head_dim, f = c->intermediate_size;
    switch (k) {
    case S_VH: shape[0] = vocab; shape[1] = h; return 2;
    case S_H: shape[0] = h; shape[1] = 0; return 1;
    case S_QH: shape[0] = q; shape[1] = h; return 2;
    case S_KVH: shape[0] = kv; shape[1] = h; return 2;
    case S_HQ: shape[0] = h; shape[1] = q; return 2;
    case S_FH: shape[0] = f; shape[1] = h; return 2;
    case S_HF: shape[0] = h; shape[1] = f; return 2;
    }
    return 0;
}

/* Import and export walk the table in the order the weights are stored
 * in, which is also Hugging Face's: the embedding at step -1, each
 * layer's weights at steps 0..L-1, the final norm and the head at step
 * L.  Is row k of the table written at step l?  (The head is not, when
 * the configuration ties it to the embedding.) */
static int in_step(const gl_hf_config *c, int l, int k)
{
    if (names[k].per_layer != (l >= 0 && l < c->num_hidden_layers))
        return 0;
    if (!names[k].per_layer && (l == -1) != (k == 0))
        return 0;
    return !(k == LM_HEAD && c->tie_word_embeddings);
}

/* Row k's names at layer l: Hugging Face's, and the dataset path in a
 * gridlm checkpoint ("model/" and gridlm's name). */
static void step_names(int k, int l, char hf[256], char full[300])
{
    char gl[256];
    snprintf(hf, 256, names[k].hf, l);
    snprintf(gl, sizeof gl, names[k].gl, l);
    snprintf(full, 300, "model/%s", gl);
}

/* ------------------------------------------------------------------ */
/* config.json                                                         */
/* ------------------------------------------------------------------ */

static int get_long(json_t *o, const char *key, long *v, int required, long dflt,
                    const char *path)
{
    json_t *x = json_object_get(o, key);
    if (!x || json_is_null(x)) {
        if (required)
            return fail("%s has no \"%s\"", path, key);
        *v = dflt;
        return 0;
    }
    if (!json_is_integer(x) || json_integer_value(x) <= 0)
        return fail("%s: \"%s\" must be a positive integer", path, key);
    *v = (long)json_integer_value(x);
    return 0;
}

static int get_double(json_t *o, const char *key, double *v, double dflt, const char *path)
{
    json_t *x = json_object_get(o, key);
    if (!x || json_is_null(x)) {
        *v = dflt;
        return 0;
    }
    if (!json_is_number(x) || json_number_value(x) <= 0)
        return fail("%s: \"%s\" must be a positive number", path, key);
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
static int rope_from_hf(json_t *j, gl_hf_config *c, const char *path)
{
    json_t *rs = json_object_get(j, "rope_scaling");
    int v5 = !rs || json_is_null(rs);
    if (v5)
        rs = json_object_get(j, "rope_parameters");
    if (get_double(j, "rope_theta", &c->rope_theta, 10000.0, path))
        return -1;
    json_t *prf[2] = {json_object_get(j, "partial_rotary_factor"),
                      json_is_object(rs) ? json_object_get(rs, "partial_rotary_factor") : NULL};
    for (int i = 0; i < 2; i++)
        if (prf[i] && !json_is_null(prf[i]) &&
            !(json_is_number(prf[i]) && json_number_value(prf[i]) == 1.0))
            return fail("%s: partial_rotary_factor is not 1; gridlm rotates every channel "
                        "of a head", path);
    if (!rs || json_is_null(rs))
        return 0;
    if (!json_is_object(rs))
        return fail("%s: %s is not a JSON object", path, v5 ? "rope_parameters" : "rope_scaling");
    const char *key;
    json_t *val;
    json_object_foreach(rs, key, val)
        if (json_is_object(val))       /* v5's per-layer-type form (Gemma, ...) */
            return fail("%s: rope_parameters differ per layer type (\"%s\"); gridlm's "
                        "Llama has one RoPE for every layer", path, key);
    if (json_object_get(rs, "rope_theta") &&
        get_double(rs, "rope_theta", &c->rope_theta, 10000.0, path))
        return -1;
    json_t *t = json_object_get(rs, "rope_type");
    if (!t)
        t = json_object_get(rs, "type");      /* the older spelling */
    const char *type = json_is_string(t) ? json_string_value(t) : !t && v5 ? "default" : "?";
    if (!strcmp(type, "default"))
        return 0;
    if (strcmp(type, "llama3") != 0)
        return fail("%s: rope_scaling type \"%s\"; gridlm supports \"llama3\" (Llama 3.1 "
                    "and 3.2) scaling or none: its rotary frequencies would differ from "
                    "transformers'", path, type);
    static const char *const need[] = {"factor", "low_freq_factor", "high_freq_factor", NULL};
    for (int i = 0; need[i]; i++)
        if (!json_is_number(json_object_get(rs, need[i])))
            return fail("%s: rope_scaling (llama3) has no number \"%s\": transformers "
                        "requires factor, low_freq_factor and high_freq_factor", path, need[i]);
    c->rope_scaling = 1;
    if (get_double(rs, "factor", &c->rope_factor, 8.0, path) ||
        get_double(rs, "low_freq_factor", &c->low_freq_factor, 1.0, path) ||
        get_double(rs, "high_freq_factor", &c->high_freq_factor, 4.0, path) ||
        get_long(rs, "original_max_position_embeddings", &c->original_max_position_embeddings,
                 0, c->max_position_embeddings, path))
        return -1;
    /* The rule blends between the wavelengths original / high and
     * original / low and divides by high - low (gridlm-train's
     * --rope-scaling-high-freq-factor must exceed the low one too). */
    if (!(c->high_freq_factor > c->low_freq_factor))
        return fail("%s: rope_scaling has high_freq_factor %g not larger than "
                    "low_freq_factor %g: the llama3 rule needs high > low (Llama 3.1: 4 "
                    "and 1)", path, c->high_freq_factor, c->low_freq_factor);
    if (c->original_max_position_embeddings > INT_MAX)
        return fail("%s: rope_scaling original_max_position_embeddings %ld is too large",
                    path, c->original_max_position_embeddings);
    return 0;
}

/* Fill c from a config.json object (Hugging Face's LlamaConfig defaults
 * for what is missing), checking that gridlm can run the model. */
static int config_from_hf(json_t *j, gl_hf_config *c, const char *path)
{
    memset(c, 0, sizeof *c);
    if (!json_is_object(j))
        return fail("%s is not a JSON object", path);
    json_t *arch = json_object_get(j, "architectures");
    json_t *mt = json_object_get(j, "model_type");
    int llama = mt && json_is_string(mt) && !strcmp(json_string_value(mt), "llama");
    size_t i;
    json_t *a;
    json_array_foreach(arch, i, a)
        if (json_is_string(a) && !strcmp(json_string_value(a), "LlamaForCausalLM"))
            llama = 1;
    if (!llama)
        return fail("%s does not describe a LlamaForCausalLM (model_type \"%s\"): "
                    "gridlm imports Llama models only", path,
                    mt && json_is_string(mt) ? json_string_value(mt) : "?");
    if (get_long(j, "hidden_size", &c->hidden_size, 1, 0, path) ||
        get_long(j, "intermediate_size", &c->intermediate_size, 1, 0, path) ||
        get_long(j, "num_hidden_layers", &c->num_hidden_layers, 1, 0, path) ||
        get_long(j, "num_attention_heads", &c->num_attention_heads, 1, 0, path) ||
        get_long(j, "vocab_size", &c->vocab_size, 1, 0, path) ||
        get_long(j, "num_key_value_heads", &c->num_key_value_heads, 0,
                 c->num_attention_heads, path) ||
        get_long(j, "head_dim", &c->head_dim, 0,
                 c->hidden_size / c->num_attention_heads, path) ||
        get_long(j, "max_position_embeddings", &c->max_position_embeddings, 0, 2048, path) ||
        get_double(j, "rms_norm_eps", &c->rms_norm_eps, 1e-6, path))
        return -1;
    if (c->num_attention_heads % c->num_key_value_heads)
        return fail("%s: num_attention_heads %ld is not a multiple of "
                    "num_key_value_heads %ld", path, c->num_attention_heads,
                    c->num_key_value_heads);
    json_t *tie = json_object_get(j, "tie_word_embeddings");
    c->tie_word_embeddings = tie && json_is_true(tie);
    json_t *bias = json_object_get(j, "attention_bias");
    json_t *mbias = json_object_get(j, "mlp_bias");
    if ((bias && json_is_true(bias)) || (mbias && json_is_true(mbias)))
        return fail("%s: attention_bias or mlp_bias is set; gridlm's Llama has no "
                    "biases", path);
    json_t *act = json_object_get(j, "hidden_act");
    if (act && json_is_string(act) && strcmp(json_string_value(act), "silu") != 0)
        return fail("%s: hidden_act \"%s\"; gridlm's MLP is SwiGLU (silu)", path,
                    json_string_value(act));
    return rope_from_hf(j, c, path);
}

/* The "config" attribute of a gridlm checkpoint, Megatron's names. */
static char *config_to_gridlm(const gl_hf_config *c, long vpad)
{
    json_t *j = json_object();
    json_object_set_new(j, "num_layers", json_integer(c->num_hidden_layers));
    json_object_set_new(j, "hidden_size", json_integer(c->hidden_size));
    json_object_set_new(j, "ffn_hidden_size", json_integer(c->intermediate_size));
    json_object_set_new(j, "num_attention_heads", json_integer(c->num_attention_heads));
    json_object_set_new(j, "num_query_groups", json_integer(c->num_key_value_heads));
    json_object_set_new(j, "kv_channels", json_integer(c->head_dim));
    json_object_set_new(j, "norm_epsilon", json_real(c->rms_norm_eps));
    json_object_set_new(j, "rotary_base", json_real(c->rope_theta));
    json_object_set_new(j, "use_rope_scaling", json_boolean(c->rope_scaling));
    if (c->rope_scaling) {
        json_object_set_new(j, "rope_scaling_factor", json_real(c->rope_factor));
        json_object_set_new(j, "rope_scaling_low_freq_factor", json_real(c->low_freq_factor));
        json_object_set_new(j, "rope_scaling_high_freq_factor", json_real(c->high_freq_factor));
        json_object_set_new(j, "rope_scaling_original_max_position_embeddings",
                            json_integer(c->original_max_position_embeddings));
    }
    json_object_set_new(j, "max_position_embeddings", json_integer(c->max_position_embeddings));
    json_object_set_new(j, "vocab_size", json_integer(c->vocab_size));
    json_object_set_new(j, "padded_vocab_size", json_integer(vpad));
    json_object_set_new(j, "untie_embeddings_and_output_weights",
                        json_boolean(!c->tie_word_embeddings));
    char *s = json_dumps(j, JSON_PRESERVE_ORDER | JSON_INDENT(1));
    json_decref(j);
    return s;
}

/* The configuration from a checkpoint's "config" attribute. */
static int config_from_gridlm(const char *text, const char *file, gl_hf_config *c,
                              long *vpad)
{
    json_error_t je;
    json_t *j = text ? json_loads(text, 0, &je) : NULL;
    if (!j)
        return fail("%s has no readable \"config\" attribute (JSON with the "
                    "model's sizes): cannot describe the model to Hugging Face", file);
    memset(c, 0, sizeof *c);
    gl_json_reader r;
    gl_json_reader_init(&r, j);
    c->num_hidden_layers = gl_json_long(&r, "num_layers", 0);
    c->hidden_size = gl_json_long(&r, "hidden_size", 0);
    c->intermediate_size = gl_json_long(&r, "ffn_hidden_size", 0);
    c->num_attention_heads = gl_json_long(&r, "num_attention_heads", 0);
    c->num_key_value_heads = gl_json_long(&r, "num_query_groups", 0);
    if (c->num_key_value_heads <= 0)
        c->num_key_value_heads = c->num_attention_heads;
    c->head_dim = gl_json_long(&r, "kv_channels", 0);
    if (c->head_dim <= 0 && c->num_attention_heads > 0)
        c->head_dim = c->hidden_size / c->num_attention_heads;
    c->rms_norm_eps = gl_json_num(&r, "norm_epsilon", 1e-5);
    c->rope_theta = gl_json_num(&r, "rotary_base", 10000.0);
    c->rope_scaling = gl_json_bool(&r, "use_rope_scaling", 0);
    c->rope_factor = gl_json_num(&r, "rope_scaling_factor", 8.0);
    c->low_freq_factor = gl_json_num(&r, "rope_scaling_low_freq_factor", 1.0);
    c->high_freq_factor = gl_json_num(&r, "rope_scaling_high_freq_factor", 4.0);
    c->original_max_position_embeddings =
        gl_json_long(&r, "rope_scaling_original_max_position_embeddings", 8192);
    c->max_position_embeddings = gl_json_long(&r, "max_position_embeddings", 0);
    if (c->max_position_embeddings <= 0)
        c->max_position_embeddings = gl_json_long(&r, "seq_length", 0);
    c->vocab_size = gl_json_long(&r, "vocab_size", 0);
    *vpad = gl_json_long(&r, "padded_vocab_size", 0);
    c->tie_word_embeddings = !gl_json_bool(&r, "untie_embeddings_and_output_weights", 0);
    json_decref(j);
    if (r.err[0])
        return fail("%s: its \"config\" attribute: %s", file, r.err);
    const char *missing = !c->num_hidden_layers ? "num_layers" : !c->hidden_size ? "hidden_size"
        : !c->intermediate_size ? "ffn_hidden_size" : !c->num_attention_heads ? "num_attention_heads"
        : !c->vocab_size ? "vocab_size" : !c->max_position_embeddings ? "max_position_embeddings"
        : NULL;
    if (missing)
        return fail("%s: its \"config\" attribute lacks %s", file, missing);
    /* Export shapes and counts the tensors by these. */
    const struct { const char *key; long v; } sizes[] = {
        { "num_layers", c->num_hidden_layers }, { "hidden_size", c->hidden_size },
        { "ffn_hidden_size", c->intermediate_size },
        { "num_attention_heads", c->num_attention_heads },
        { "num_query_groups", c->num_key_value_heads }, { "kv_channels", c->head_dim },
        { "vocab_size", c->vocab_size }, { "max_position_embeddings", c->max_position_embeddings },
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i].v < 0)
            return fail("%s: its \"config\" attribute has %s %ld, which must be positive",
                        file, sizes[i].key, sizes[i].v);
    return 0;
}

/* The llama3 RoPE scaling parameters, config.json's names, into o
 * (rope_scaling, or v5's rope_parameters). */
static void llama3_to_hf(const gl_hf_config *c, json_t *o)
{
    json_object_set_new(o, "factor", json_real(c->rope_factor));
    json_object_set_new(o, "low_freq_factor", json_real(c->low_freq_factor));
    json_object_set_new(o, "high_freq_factor", json_real(c->high_freq_factor));
    json_object_set_new(o, "original_max_position_embeddings",
                        json_integer(c->original_max_position_embeddings));
}

/* config.json: start from the imported original (hf_text, may be NULL) so
 * that fields gridlm does not use survive, then set every architecture
 * field from c. */
static char *config_to_hf(const gl_hf_config *c, const char *hf_text, const char *dtype)
{
    json_t *j = hf_text ? json_loads(hf_text, 0, NULL) : NULL;
    if (!json_is_object(j)) {
        json_decref(j);
        j = json_object();
    }
    json_t *arch = json_array();
    json_array_append_new(arch, json_string("LlamaForCausalLM"));
    json_object_set_new(j, "architectures", arch);
    json_object_set_new(j, "model_type", json_string("llama"));
    json_object_set_new(j, "hidden_act", json_string("silu"));
    json_object_set_new(j, "hidden_size", json_integer(c->hidden_size));
    json_object_set_new(j, "intermediate_size", json_integer(c->intermediate_size));
    json_object_set_new(j, "num_hidden_layers", json_integer(c->num_hidden_layers));
    json_object_set_new(j, "num_attention_heads", json_integer(c->num_attention_heads));
    json_object_set_new(j, "num_key_value_heads", json_integer(c->num_key_value_heads));
    json_object_set_new(j, "head_dim", json_integer(c->head_dim));
    json_object_set_new(j, "rms_norm_eps", json_real(c->rms_norm_eps));
    json_object_set_new(j, "rope_theta", json_real(c->rope_theta));
    if (c->rope_scaling) {
        json_t *rs = json_object();
        json_object_set_new(rs, "rope_type", json_string("llama3"));
        llama3_to_hf(c, rs);
        json_object_set_new(j, "rope_scaling", rs);
    } else {
        json_object_set_new(j, "rope_scaling", json_null());
    }
    /* An original written by transformers v5 holds its RoPE in
     * rope_parameters: rewrite that too, so that the two agree. */
    if (json_is_object(json_object_get(j, "rope_parameters"))) {
        json_t *rp = json_object();
        json_object_set_new(rp, "rope_type", json_string(c->rope_scaling ? "llama3" : "default"));
        json_object_set_new(rp, "rope_theta", json_real(c->rope_theta));
        if (c->rope_scaling)
            llama3_to_hf(c, rp);
        json_object_set_new(j, "rope_parameters", rp);
    }
    json_object_set_new(j, "vocab_size", json_integer(c->vocab_size));
    json_object_set_new(j, "max_position_embeddings", json_integer(c->max_position_embeddings));
    json_object_set_new(j, "tie_word_embeddings", json_boolean(c->tie_word_embeddings));
    json_object_set_new(j, "attention_bias", json_false());
    json_object_set_new(j, "mlp_bias", json_false());
    json_object_set_new(j, "torch_dtype", json_string(dtype));
    char *s = json_dumps(j, JSON_PRESERVE_ORDER | JSON_INDENT(2));
    json_decref(j);
    return s;
}

/* ------------------------------------------------------------------ */
/* Import                                                              */
/* ------------------------------------------------------------------ */

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Tensors a Hugging Face directory may hold that are not weights. */
static int ignorable(const char *name)
{
    size_t n = strlen(name);
    const char *suffix = "rotary_emb.inv_freq";
    return n > strlen(suffix) && !strcmp(name + n - strlen(suffix), suffix);
}

/* With tie_word_embeddings, transformers ties lm_head to the embedding
 * and ignores an lm_head.weight in the files.  A copy of the embedding is
 * harmless (said, then dropped); a different matrix would be trained
 * weights lost without a word, so it is refused with the two ways on. */
static int check_tied_head(const gl_st_model *m, const gl_hf_config *c, const char *hf_dir)
{
    const gl_st_tensor *head = gl_st_model_find(m, "lm_head.weight");
    const gl_st_tensor *emb = gl_st_model_find(m, "model.embed_tokens.weight");
    if (!c->tie_word_embeddings || !head || !emb)
        return 0;
    int same = head->ndim == emb->ndim && head->shape[0] == emb->shape[0] &&
               head->shape[1] == emb->shape[1];
    if (same && head->dtype == emb->dtype) {
        same = head->nbytes == emb->nbytes && !memcmp(head->data, emb->data, head->nbytes);
    } else if (same) {
        size_t n = (size_t)gl_st_numel(head);
        float *a = gl_malloc(n * sizeof *a), *b = gl_malloc(n * sizeof *b);
        same = !gl_st_to_f32(head, a) && !gl_st_to_f32(emb, b) && !memcmp(a, b, n * sizeof *a);
        free(a);
        free(b);
    }
    if (!same)
        return fail("%s: config.json has \"tie_word_embeddings\": true, but lm_head.weight "
                    "differs from model.embed_tokens.weight (transformers would tie them and "
                    "silently drop lm_head.weight): set \"tie_word_embeddings\": false in "
                    "config.json to import both (an untied model), or remove lm_head.weight "
                    "to import the tied model transformers runs", hf_dir);
    gl_warn("%s: lm_head.weight is a copy of model.embed_tokens.weight and config.json ties "
            "them (\"tie_word_embeddings\": true): importing the one tied matrix, as "
            "transformers does", hf_dir);
    return 0;
}

/* import-hf writes a new checkpoint and nothing else: a directory that
 * holds checkpoints (its tracker would be rewound to 0, its
 * iter_0000000.h5 replaced) or an existing file is refused.  Leftovers
 * of a killed import there are removed. */
static int check_out(const char *out)
{
    char tracker[4200];
    gl_error e;
    if (is_dir(out)) {
        long *its;
        int n = gl_ckpt_list(out, &its);
        free(its);
        struct stat st;
        snprintf(tracker, sizeof tracker, "%s/%s", out, GL_CKPT_TRACKER);
        if (n || lstat(tracker, &st) == 0)
            return fail("import-hf: %s already holds checkpoints (%s%s): import into a new "
                        "directory or a new .h5 file name; import-hf never writes over a "
                        "checkpoint", out, n ? "iter_*.h5 files" : GL_CKPT_TRACKER,
                        n && lstat(tracker, &st) == 0 ? " and " GL_CKPT_TRACKER : "");
        return gl_ckpt_clean_temps(out, &e) < 0 ? fail("%s", e.text) : 0;
    }
    struct stat st;
    if (lstat(out, &st) == 0)
        return fail("import-hf: %s already exists: give a new file name (or a directory); "
                    "import-hf never writes over a file", out);
    char dir[4200];
    const char *slash = strrchr(out, '/');
    const char *own[] = { slash ? slash + 1 : out, NULL };
    gl_file_dirname(out, dir, sizeof dir);
    return gl_file_clean_temps(dir, gl_file_name_in, (void *)own, "import", &e) < 0
           ? fail("%s", e.text) : 0;
}

int gl_hf_import(const char *hf_dir, const char *out, int divisible_by, int quiet)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", hf_dir);
    char *text;
    gl_error e;
    if (gl_file_read_all(path, &text, NULL, &e) < 0)
        return fail("%s (import-hf needs a Hugging Face model directory)", e.text);
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    if (!j) {
        free(text);
        return fail("%s is not valid JSON (%s at line %d)", path, je.text, je.line);
    }
    gl_hf_config c;
    int rc = config_from_hf(j, &c, path);
    json_decref(j);
    if (rc) {
        free(text);
        return -1;
    }
    if (divisible_by < 1)
        divisible_by = 1;
    long vpad = (c.vocab_size + divisible_by - 1) / divisible_by * divisible_by;

    gl_st_model *m;
    if (gl_st_model_open(hf_dir, &m) != 0) {
        free(text);
        return fail("%s", gl_st_error());
    }
    /* Every tensor in the directory must be a weight we place. */
    for (int fi = 0; fi < m->nfiles; fi++)
        for (int ti = 0; ti < m->files[fi]->n; ti++) {
            const char *name = m->files[fi]->t[ti].name;
            char gl[256];
            int layer = -1;
            int ok = gl_hf_to_gridlm(name, gl, sizeof gl) || ignorable(name);
            for (int k = 0; ok && k < NNAMES; k++)
                if (names[k].per_layer && match(names[k].hf, name, &layer) &&
                    layer >= c.num_hidden_layers)
                    ok = 0;
            if (!ok) {
                fail("%s holds tensor %s, which is not a weight of a %ld-layer "
                     "LlamaForCausalLM", hf_dir, name, c.num_hidden_layers);
                gl_st_model_close(m);
                free(text);
                return -1;
            }
        }

    if (check_tied_head(m, &c, hf_dir) != 0 || check_out(out) != 0) {
        gl_st_model_close(m);
        free(text);
        return -1;
    }

    char out_file[4200];
    const char *dir = NULL, *file = out;
    if (is_dir(out) || (strlen(out) && out[strlen(out) - 1] == '/')) {
        dir = out;
        file = NULL;
        gl_ckpt_file_name(out_file, sizeof out_file, out, 0);
    } else {
        snprintf(out_file, sizeof out_file, "%s", out);
    }
    gl_ckpt_writer *w;
    if (gl_ckpt_begin(MPI_COMM_SELF, dir, file, 0, &w) != GL_CKPT_OK) {
        gl_st_model_close(m);
        free(text);
        return fail("%s", gl_ckpt_error());
    }
    rc = 0;
    double bytes = 0;
    for (int l = -1; l <= c.num_hidden_layers && rc == 0; l++)
        for (int k = 0; k < NNAMES && rc == 0; k++) {
            if (!in_step(&c, l, k))
                continue;
            char hf[256], full[300];
            step_names(k, l, hf, full);
            long want[2], vshape[2];
            int nd = shape_of(names[k].shape, &c, c.vocab_size, want);
            shape_of(names[k].shape, &c, vpad, vshape);
            const gl_st_tensor *t = gl_st_model_find(m, hf);
            if (!t) {
                rc = fail("%s has no tensor %s (config.json describes %ld layers%s)",
                          hf_dir, hf, c.num_hidden_layers,
                          k == LM_HEAD ? " and untied embeddings" : "");
                break;
            }
            if (t->ndim != nd || t->shape[0] != want[0] || (nd == 2 && t->shape[1] != want[1])) {
                rc = fail("%s: tensor %s has shape [%ld%s%ld], config.json implies "
                          "[%ld%s%ld]", hf_dir, hf, t->shape[0], t->ndim > 1 ? ", " : "",
                          t->ndim > 1 ? t->shape[1] : 0L, want[0], nd > 1 ? ", " : "",
                          nd > 1 ? want[1] : 0L);
                break;
            }
            long rows = vshape[0], cols = nd == 2 ? vshape[1] : 1;
            float *buf = gl_calloc((size_t)(rows * cols), sizeof *buf);  /* padding: 0 */
            if (gl_st_to_f32(t, buf) != 0) {
                rc = fail("%s", gl_st_error());
                free(buf);
                break;
            }
            gl_ckpt_tensor ct = {
                .name = full, .ndim = nd, .shape = { vshape[0], nd == 2 ? vshape[1] : 0 },
                .offset = { 0, 0 }, .count = { vshape[0], nd == 2 ? vshape[1] : 0 },
                .data = buf, .writes = 1,
            };
            if (gl_ckpt_put(w, &ct) != GL_CKPT_OK)
                rc = fail("%s", gl_ckpt_error());
            free(buf);
            bytes += 4.0 * rows * cols;
            if (!quiet && rc == 0)
                printf("  %-48s -> %-40s %s [%ld%s%.0ld]\n", hf, full,
                       gl_st_dtype_name(t->dtype), vshape[0], nd == 2 ? ", " : "",
                       nd == 2 ? vshape[1] : 0L);
        }
    gl_st_model_close(m);
    if (rc) {
        gl_ckpt_abort(w);
        free(text);
        return -1;
    }
    char *cfg = config_to_gridlm(&c, vpad);
    gl_ckpt_attr attrs[] = {
        { .key = "config", .type = GL_CKPT_STR, .s = cfg },
        { .key = "hf_config", .type = GL_CKPT_STR, .s = text },
        { .key = "vocab_size", .type = GL_CKPT_I64, .i = c.vocab_size },
        { .key = "consumed_train_samples", .type = GL_CKPT_I64, .i = 0 },
        { .key = "imported_from", .type = GL_CKPT_STR, .s = hf_dir },
    };
    gl_ckpt_save_stats st;
    rc = gl_ckpt_finish(w, attrs, 5, &st);
    free(cfg);
    free(text);
    if (rc != GL_CKPT_OK)
        return fail("%s", gl_ckpt_error());
    if (!quiet)
        printf("wrote %s: %.3f GB of fp32 in %.2f s (%.2f GB/s); vocabulary %ld "
               "padded to %ld\n", st.path, bytes / 1e9, st.seconds,
               st.seconds > 0 ? bytes / 1e9 / st.seconds : 0.0, c.vocab_size, vpad);
    return 0;
}

/* ------------------------------------------------------------------ */
/* Export                                                              */
/* ------------------------------------------------------------------ */

/* The files an export writes: the weights and config.json. */
static int export_name(const char *final, void *arg)
{
    (void)arg;
    return gl_st_is_model_file(final) || !strcmp(final, "config.json");
}

/* Before an export writes OUT_DIR: the directory, no leftovers of a
 * killed export, and no config.json until the new one is written last,
 * so that a directory caught halfway is refused by every loader rather
 * than read as a mix of two models.  (gl_st_model_write removes the
 * earlier export's other weight files.) */
static int export_prepare(const char *out_dir)
{
    gl_error e;
    char path[4200];
    if (gl_file_mkdirs(out_dir, &e) < 0 ||
        gl_file_clean_temps(out_dir, export_name, NULL, "export", &e) < 0)
        return fail("%s", e.text);
    snprintf(path, sizeof path, "%s/config.json", out_dir);
    if (unlink(path) != 0 && errno != ENOENT)
        return fail("cannot remove the earlier %s: %s", path, strerror(errno));
    return 0;
}

int gl_hf_export(const char *ckpt, const char *out_dir, gl_st_dtype dtype,
                 size_t max_shard, int quiet)
{
    if (dtype != GL_ST_F32 && dtype != GL_ST_BF16 && dtype != GL_ST_F16)
        return fail("export-hf writes F32, BF16 or F16, not %s", gl_st_dtype_name(dtype));
    gl_ckpt *ck;
    int rc = gl_ckpt_open(MPI_COMM_SELF, ckpt, GL_CKPT_VERIFY, &ck);
    if (rc != GL_CKPT_OK)       /* GL_CKPT_NONE too: its message names the path */
        return fail("%s", gl_ckpt_error());
    char *cfg_text = gl_ckpt_get_str(ck, "config");
    char *hf_text = gl_ckpt_get_str(ck, "hf_config");
    gl_hf_config c;
    long vpad = 0;
    rc = config_from_gridlm(cfg_text, gl_ckpt_path(ck), &c, &vpad);
    free(cfg_text);
    if (rc) {
        free(hf_text);
        gl_ckpt_close(ck);
        return -1;
    }

    /* Gather the weights in Hugging Face's order, vocabulary padding
     * dropped.  (All in memory at once: gl_st_model_write shards them.) */
    int cap = NNAMES * ((int)c.num_hidden_layers + 1), n = 0;
    gl_st_out *outs = gl_calloc(cap, sizeof *outs);
    char **keep = gl_calloc(cap, sizeof *keep);
    float **bufs = gl_calloc(cap, sizeof *bufs);
    rc = 0;
    for (int l = -1; l <= c.num_hidden_layers && rc == 0; l++)
        for (int k = 0; k < NNAMES && rc == 0; k++) {
            if (!in_step(&c, l, k))
                continue;
            char hf[256], full[300];
            step_names(k, l, hf, full);
            int i = gl_ckpt_find(ck, full);
            if (i < 0) {
                rc = fail("%s has no tensor %s (its config describes %ld layers%s)",
                          gl_ckpt_path(ck), full, c.num_hidden_layers,
                          k == LM_HEAD ? " and untied embeddings" : "");
                break;
            }
            const gl_ckpt_info *in = gl_ckpt_tensor_info(ck, i);
            long want[2];
            int nd = shape_of(names[k].shape, &c, names[k].shape == S_VH ? in->shape[0] : 0, want);
            if (in->ndim != nd || in->shape[0] != want[0] || (nd == 2 && in->shape[1] != want[1])) {
                rc = fail("%s: tensor %s has shape [%ld, %ld], its config implies [%ld, %ld]",
                          gl_ckpt_path(ck), full, in->shape[0], in->shape[1], want[0],
                          nd == 2 ? want[1] : 0L);
                break;
            }
            long rows = in->shape[0];
            if (names[k].shape == S_VH) {
                if (rows < c.vocab_size) {
                    rc = fail("%s: tensor %s has %ld rows, fewer than vocab_size %ld",
                              gl_ckpt_path(ck), full, rows, c.vocab_size);
                    break;
                }
                rows = c.vocab_size;        /* drop the padding */
            }
            long cols = nd == 2 ? in->shape[1] : 1;
            float *buf = gl_malloc((size_t)(rows * cols) * sizeof *buf);
            gl_ckpt_tensor t = {
                .name = full, .ndim = nd, .shape = { in->shape[0], in->shape[1] },
                .offset = { 0, 0 }, .count = { rows, nd == 2 ? cols : 0 }, .data = buf,
            };
            if (gl_ckpt_read(ck, &t) != GL_CKPT_OK) {
                rc = fail("%s", gl_ckpt_error());
                free(buf);
                break;
            }
            keep[n] = gl_strdup(hf);
            bufs[n] = buf;
            outs[n] = (gl_st_out){ .name = keep[n], .dtype = dtype, .ndim = nd,
                                   .shape = { rows, nd == 2 ? cols : 0 }, .data = buf };
            n++;
        }
    if (rc == 0) {
        /* Only now that every weight was read: a failed read leaves an
         * earlier export as it was. */
        const char *meta[] = { "format", "pt" };
        if (export_prepare(out_dir) != 0)
            rc = -1;
        else if (gl_st_model_write(out_dir, outs, n, max_shard, meta, 1) != 0)
            rc = fail("%s", gl_st_error());
    }
    if (rc == 0) {
        const char *tname = dtype == GL_ST_F32 ? "float32" : dtype == GL_ST_BF16 ? "bfloat16" : "float16";
        char *json = config_to_hf(&c, hf_text, tname);
        char path[4200];
        snprintf(path, sizeof path, "%s/config.json", out_dir);
        gl_error e;
        if (!json) {
            rc = fail("cannot format %s (out of memory?)", path);
        } else {
            size_t len = strlen(json);
            char *text = gl_malloc(len + 2);
            memcpy(text, json, len);
            strcpy(text + len, "\n");
            if (gl_file_write_all(path, text, len + 1, 0, &e) < 0)
                rc = fail("%s", e.text);
            free(text);
        }
        free(json);
        if (!quiet && rc == 0)
            printf("wrote %s: config.json and %d tensors as %s (iteration %ld, "
                   "vocabulary %ld of %ld rows)\n", out_dir, n, gl_st_dtype_name(dtype),
                   gl_ckpt_iteration(ck), c.vocab_size, vpad ? vpad : c.vocab_size);
    }
    for (int i = 0; i < n; i++) {
        free(keep[i]);
        free(bufs[i]);
    }
    free(keep);
    free(bufs);
    free(outs);
    free(hf_text);
    gl_ckpt_close(ck);
    return rc;
}
