/* hf.c: Hugging Face Llama, Qwen2, Qwen3, Mixtral, Qwen3-MoE and GPT-2 directories <-> gridlm checkpoints (hf.h). */
#include <config.h>
#include "ckpt/hf.h"
#include "arch/hf_config.h"
#include "arch/tensors.h"
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

/* ------------------------------------------------------------------ */
/* The steps of an import or export                                    */
/* ------------------------------------------------------------------ */

/* Import and export walk the parameter table (arch/tensors.h) in the
 * order the weights are stored in, which is also Hugging Face's: the
 * embedding at step -1, each layer's tensors at steps 0..L-1, the final
 * norm and the head at step L.  Is tensor id written at step l?  (The
 * head is not, when the model ties it to the embedding.) */
static int in_step(const gl_arch *a, int l, gl_tensor_id id)
{
    int per_layer = gl_tensor(id)->per_layer;
    if (per_layer != (l >= 0 && l < a->num_layers))
        return 0;
    if (!per_layer && (l == -1) != (id == GL_T_EMBEDDING))
        return 0;
    return gl_tensor_present_at(id, a, l);
}

/* Where tensor id at layer l lives in a Hugging Face directory of a's
 * form: its name, and for GPT-2 whether it is a Conv1D ([in, out]) and
 * which block of attn.c_attn it is (gl_tensor_gpt2); part -1 and conv1d
 * 0 for every other form, whose matrices are gridlm's [out, in]. */
typedef struct {
    char name[256];
    int part;
    int conv1d;
} hf_place;

/* MixtralForCausalLM's spellings of the MoE tensors: the router, and
 * (with the expert's number after the layer's) each expert's matrices,
 * gridlm's stacked [E, out, in] tensor being the E of them in order; w1
 * is the gate, w3 the up and w2 the down projection, all [out, in].
 * NULL: no Mixtral tensor (Mixtral has no expert bias or shared experts;
 * gl_hf_mixtral_ok refuses those). */
static const char *mixtral_name(gl_tensor_id id)
{
    switch (id) {
    case GL_T_ROUTER: return "model.layers.%d.block_sparse_moe.gate.weight";
    case GL_T_EXPERT_W_GATE: return "model.layers.%d.block_sparse_moe.experts.%d.w1.weight";
    case GL_T_EXPERT_W_UP: return "model.layers.%d.block_sparse_moe.experts.%d.w3.weight";
    case GL_T_EXPERT_W_DOWN: return "model.layers.%d.block_sparse_moe.experts.%d.w2.weight";
    default: return NULL;
    }
}

/* Qwen3MoeForCausalLM's spellings of the same: the router mlp.gate, each
 * expert's gate_proj, up_proj and down_proj (all [out, in]).  Its dense
 * layers (mlp_only_layers) are the Llama names of gl_tensor_name. */
static const char *qwen3_moe_name(gl_tensor_id id)
{
    switch (id) {
    case GL_T_ROUTER: return "model.layers.%d.mlp.gate.weight";
    case GL_T_EXPERT_W_GATE: return "model.layers.%d.mlp.experts.%d.gate_proj.weight";
    case GL_T_EXPERT_W_UP: return "model.layers.%d.mlp.experts.%d.up_proj.weight";
    case GL_T_EXPERT_W_DOWN: return "model.layers.%d.mlp.experts.%d.down_proj.weight";
    default: return NULL;
    }
}

/* The MoE spelling of id for a's family: Qwen3-MoE's when a has QK norm
 * (gl_hf_moe_ok), else Mixtral's. */
static const char *moe_name(const gl_arch *a, gl_tensor_id id)
{
    return a->qk_layernorm ? qwen3_moe_name(id) : mixtral_name(id);
}

/* Is id one of the stacked experts (a Hugging Face tensor per expert)? */
static int per_expert(gl_tensor_id id)
{
    return gl_tensor(id)->ndim == 3;
}

/* The Hugging Face name of expert e's matrix of stacked tensor id at
 * layer l. */
static void expert_name(const gl_arch *a, gl_tensor_id id, int l, int e, char *out, size_t n)
{
    snprintf(out, n, moe_name(a, id), l, e);
}

/* The checkpoint's 2-D dataset of a stacked [E, A, B] tensor (shape):
 * [E, A B] when its TP split is over rows (gate, up), else [E A, B]
 * (down) -- the model's gl_shape_view, which the checkpoint stores.
 * Either way the E experts' [A, B] matrices lie one after the other. */
static void expert_dataset(gl_tensor_id id, const long shape[GL_TENSOR_MAXDIM], long ds[2])
{
    if (gl_tensor(id)->shard == GL_SHARD_ROWS) {
        ds[0] = shape[0];
        ds[1] = shape[1] * shape[2];
    } else {
        ds[0] = shape[0] * shape[1];
        ds[1] = shape[2];
    }
}

static void hf_place_of(const gl_arch *a, gl_tensor_id id, int l, hf_place *p)
{
    p->part = -1;
    p->conv1d = 0;
    if (a->num_experts > 0 && moe_name(a, id)) {
        /* a stacked tensor's name is expert_name's pattern */
        if (per_expert(id))
            snprintf(p->name, sizeof p->name, "%s", moe_name(a, id));
        else
            snprintf(p->name, sizeof p->name, moe_name(a, id), l);
        return;
    }
    if (gl_arch_is_gpt2(a) &&
        gl_tensor_gpt2(id, l, p->name, sizeof p->name, &p->part, &p->conv1d))
        return;
    gl_tensor_name(id, l, 1, p->name, sizeof p->name);
}

/* The shape of p's tensor in the Hugging Face file, from gridlm's logical
 * shape want (nd dimensions): transposed for a Conv1D, three blocks wide
 * for c_attn. */
static void hf_shape(const hf_place *p, int nd, const long want[2], long hs[2])
{
    long parts = p->part >= 0 ? 3 : 1;
    if (nd == 2 && p->conv1d) {
        hs[0] = want[1];
        hs[1] = want[0] * parts;
    } else {
        hs[0] = want[0] * parts;
        hs[1] = nd == 2 ? want[1] : 0;
    }
}

/* Tensor id's names at layer l: Hugging Face's, and the dataset path in a
 * gridlm checkpoint ("model/" and gridlm's name). */
static void step_names(const gl_arch *a, gl_tensor_id id, int l, hf_place *hf, char full[300])
{
    char gl[256];
    hf_place_of(a, id, l, hf);
    gl_tensor_name(id, l, 0, gl, sizeof gl);
    snprintf(full, 300, "model/%s", gl);
}

/* Tensor name in m; GPT-2's also without "transformer." (the hub's
 * original GPT-2 files are GPT2Model's, unprefixed; transformers loads
 * both). */
static const gl_st_tensor *find_hf(const gl_st_model *m, const char *name)
{
    const gl_st_tensor *t = gl_st_model_find(m, name);
    const char *pre = "transformer.";
    if (!t && !strncmp(name, pre, strlen(pre)))
        t = gl_st_model_find(m, name + strlen(pre));
    return t;
}

/* Does the tensor have a vocabulary's rows? */
static int vocab_rows(gl_tensor_id id)
{
    return id == GL_T_EMBEDDING || id == GL_T_LM_HEAD;
}

/* The "config" attribute of an imported checkpoint. */
static char *config_to_gridlm(const gl_arch *a)
{
    json_t *j = json_object();
    gl_arch_to_json(a, j);
    char *s = json_dumps(j, JSON_PRESERVE_ORDER | JSON_INDENT(1));
    json_decref(j);
    return s;
}

/* The architecture from a checkpoint's "config" attribute. */
static int config_from_gridlm(const char *text, const char *file, gl_arch *a, gl_error *err)
{
    json_error_t je;
    json_t *j = text ? json_loads(text, 0, &je) : NULL;
    if (!j)
        return gl_errprintf(err, "%s has no readable \"config\" attribute (JSON with the "
                    "model's sizes): cannot describe the model to Hugging Face", file);
    gl_arch_defaults(a);
    gl_error e;
    int rc = gl_arch_from_json(a, j, &e);
    json_decref(j);
    if (rc)
        return gl_errprintf(err, "%s: %s", file, e.text);
    char why[256];
    if (a->num_experts > 0 && !gl_hf_moe_ok(a, why, sizeof why))
        return gl_errprintf(err, "%s holds a mixture-of-experts model that is not a %s "
                            "(gridlm's MoE exports: Qwen3MoeForCausalLM with QK norm, "
                            "MixtralForCausalLM without): %s", file,
                            a->qk_layernorm ? "Qwen3MoeForCausalLM" : "MixtralForCausalLM",
                            why);
    if (!gl_arch_is_llama(a) && !gl_arch_is_qwen2(a) && !gl_arch_is_qwen3(a) &&
        !gl_arch_is_gpt2(a)) {
        char form[256];
        return gl_errprintf(err, "%s holds a %s model: gridlm exports the Llama, Qwen2, Qwen3 "
                            "and GPT-2 forms only (LlamaForCausalLM, Qwen2ForCausalLM, "
                            "Qwen3ForCausalLM, GPT2LMHeadModel)", file,
                            gl_arch_describe(a, form, sizeof form));
    }
    if (!a->max_position_embeddings)
        a->max_position_embeddings = a->seq_length;
    if (!a->max_position_embeddings)
        return gl_errprintf(err, "%s: its \"config\" attribute lacks max_position_embeddings", file);
    gl_arch_resolve(a);
    /* Export shapes and counts the tensors by these. */
    const struct { const char *key; long v; } sizes[] = {
        { "num_layers", a->num_layers }, { "hidden_size", a->hidden_size },
        { "ffn_hidden_size", a->ffn_hidden_size },
        { "num_attention_heads", a->num_attention_heads },
        { "num_query_groups", a->num_query_groups }, { "kv_channels", a->kv_channels },
        { "vocab_size", a->vocab_size }, { "max_position_embeddings", a->max_position_embeddings },
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i].v < 0)
            return gl_errprintf(err, "%s: its \"config\" attribute has %s %ld, which must be positive",
                        file, sizes[i].key, sizes[i].v);
    /* GPT-2's c_attn is three [h, h] blocks: multi-head attention with
     * heads x head size = hidden. */
    if (gl_arch_is_gpt2(a) && (a->num_query_groups != a->num_attention_heads ||
                               (long)a->kv_channels * a->num_attention_heads != a->hidden_size))
        return gl_errprintf(err, "%s: a GPT-2 needs query groups = heads and heads x head size "
                            "= hidden size (its attn.c_attn is [h, 3h]), not %d groups of %d "
                            "heads of %d for hidden %d", file, a->num_query_groups,
                            a->num_attention_heads, a->kv_channels, a->hidden_size);
    return 0;
}

/* ------------------------------------------------------------------ */
/* Import                                                              */
/* ------------------------------------------------------------------ */

/* Tensor t (Hugging Face shape hs) into buf as gridlm's want: as it is,
 * or for GPT-2 p's block of the columns of a Conv1D [in, out] transposed
 * to [out, in] (or of a c_attn bias). */
static int gpt2_get(const gl_st_tensor *t, const hf_place *p, int nd, const long want[2],
                    const long hs[2], float *buf, gl_error *err)
{
    if (!p->conv1d && p->part < 0)
        return gl_st_to_f32(t, buf, err);
    float *all = gl_malloc((size_t)gl_st_numel(t) * sizeof *all);
    if (gl_st_to_f32(t, all, err) != 0) {
        free(all);
        return -1;
    }
    long off = p->part >= 0 ? p->part * want[0] : 0;
    if (nd == 2)            /* buf[r][c] = all[c][off + r] */
        for (long r = 0; r < want[0]; r++)
            for (long c = 0; c < want[1]; c++)
                buf[r * want[1] + c] = all[c * hs[1] + off + r];
    else
        memcpy(buf, all + off, (size_t)want[0] * sizeof *buf);
    free(all);
    return 0;
}

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n > k && !strcmp(s + n - k, suffix);
}

/* Tensors a Hugging Face directory may hold that are not weights:
 * Llama's RoPE frequencies; GPT-2's causal-mask buffers (attn.bias,
 * attn.masked_bias -- not attn.c_attn.bias). */
static int ignorable(const gl_arch *a, const char *name)
{
    if (gl_arch_is_gpt2(a))
        return ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias");
    return ends_with(name, "rotary_emb.inv_freq");
}

/* Is name one of the experts' or routers' tensors of a (moe_name)? */
static int moe_weight(const gl_arch *a, const char *name)
{
    char hf[256];
    for (int l = 0; l < a->num_layers; l++)
        for (int k = 0; k < GL_T_COUNT; k++) {
            if (!in_step(a, l, k) || !moe_name(a, k))
                continue;
            for (int e = 0; e < (per_expert(k) ? a->num_experts : 1); e++) {
                if (per_expert(k))
                    expert_name(a, k, l, e, hf, sizeof hf);
                else
                    snprintf(hf, sizeof hf, moe_name(a, k), l);
                if (!strcmp(name, hf))
                    return 1;
            }
        }
    return 0;
}

/* Is name a GPT-2 weight of a (with or without "transformer.")?  A tied
 * model's lm_head.weight is check_tied_head's. */
static int gpt2_weight(const gl_arch *a, const char *name)
{
    if (!strcmp(name, "lm_head.weight"))
        return 1;
    for (int l = -1; l <= a->num_layers; l++)
        for (int k = 0; k < GL_T_COUNT; k++) {
            if (!in_step(a, l, k))
                continue;
            hf_place p;
            hf_place_of(a, k, l, &p);
            if (!strcmp(name, p.name) ||
                (!strncmp(p.name, "transformer.", 12) && !strcmp(name, p.name + 12)))
                return 1;
        }
    return 0;
}

/* With tie_word_embeddings, transformers ties lm_head to the embedding
 * and ignores an lm_head.weight in the files.  A copy of the embedding is
 * harmless (said, then dropped); a different matrix would be trained
 * weights lost without a word, so it is refused with the two ways on. */
static int check_tied_head(const gl_st_model *m, const gl_arch *a, const char *hf_dir,
                           gl_error *err)
{
    hf_place ep;
    hf_place_of(a, GL_T_EMBEDDING, -1, &ep);
    const char *en = ep.name;
    const gl_st_tensor *head = gl_st_model_find(m, "lm_head.weight");
    const gl_st_tensor *emb = find_hf(m, en);
    if (a->untie_embeddings_and_output_weights || !head || !emb)
        return 0;
    int same = head->ndim == emb->ndim && head->shape[0] == emb->shape[0] &&
               head->shape[1] == emb->shape[1];
    if (same && head->dtype == emb->dtype) {
        same = head->nbytes == emb->nbytes && !memcmp(head->data, emb->data, head->nbytes);
    } else if (same) {
        size_t n = (size_t)gl_st_numel(head);
        float *x = gl_malloc(n * sizeof *x), *y = gl_malloc(n * sizeof *y);
        same = !gl_st_to_f32(head, x, NULL) && !gl_st_to_f32(emb, y, NULL) &&
               !memcmp(x, y, n * sizeof *x);
        free(x);
        free(y);
    }
    if (!same)
        return gl_errprintf(err, "%s: config.json has \"tie_word_embeddings\": true, but lm_head.weight "
                    "differs from %s (transformers would tie them and "
                    "silently drop lm_head.weight): set \"tie_word_embeddings\": false in "
                    "config.json to import both (an untied model), or remove lm_head.weight "
                    "to import the tied model transformers runs", hf_dir, en);
    gl_warn("%s: lm_head.weight is a copy of %s and config.json ties "
            "them (\"tie_word_embeddings\": true): importing the one tied matrix, as "
            "transformers does", hf_dir, en);
    return 0;
}

/* import-hf writes a new checkpoint and nothing else: a directory that
 * holds checkpoints (its tracker would be rewound to 0, its
 * iter_0000000.h5 replaced) or an existing file is refused.  Leftovers
 * of a killed import there are removed. */
static int check_out(const char *out, gl_error *err)
{
    char tracker[4200];
    if (is_dir(out)) {
        long *its;
        int n = gl_ckpt_list(out, &its);
        free(its);
        struct stat st;
        snprintf(tracker, sizeof tracker, "%s/%s", out, GL_CKPT_TRACKER);
        if (n || lstat(tracker, &st) == 0)
            return gl_errprintf(err, "import-hf: %s already holds checkpoints (%s%s): import into a new "
                        "directory or a new .h5 file name; import-hf never writes over a "
                        "checkpoint", out, n ? "iter_*.h5 files" : GL_CKPT_TRACKER,
                        n && lstat(tracker, &st) == 0 ? " and " GL_CKPT_TRACKER : "");
        return gl_ckpt_clean_temps(out, err) < 0 ? -1 : 0;
    }
    struct stat st;
    if (lstat(out, &st) == 0)
        return gl_errprintf(err, "import-hf: %s already exists: give a new file name (or a directory); "
                    "import-hf never writes over a file", out);
    char dir[4200];
    const char *slash = strrchr(out, '/');
    const char *own[] = { slash ? slash + 1 : out, NULL };
    gl_file_dirname(out, dir, sizeof dir);
    return gl_file_clean_temps(dir, gl_file_name_in, (void *)own, "import", err) < 0 ? -1 : 0;
}

/* Stacked tensor id of layer l from its E per-expert Hugging Face
 * tensors, into the checkpoint w as dataset full (expert_dataset). */
static int import_experts(const gl_st_model *m, const gl_arch *a, gl_tensor_id id, int l,
                          const char *hf_dir, const char *full, gl_ckpt_writer *w, int quiet,
                          double *bytes, gl_error *err)
{
    long shape[GL_TENSOR_MAXDIM], ds[2];
    gl_tensor_shape(id, a, 0, shape);
    expert_dataset(id, shape, ds);
    long each = shape[1] * shape[2];
    float *buf = gl_malloc((size_t)(shape[0] * each) * sizeof *buf);
    int rc = 0;
    char hf[256];
    gl_st_dtype dtype = GL_ST_F32;
    for (long e = 0; e < shape[0] && rc == 0; e++) {
        expert_name(a, id, l, (int)e, hf, sizeof hf);
        const gl_st_tensor *t = gl_st_model_find(m, hf);
        if (!t)
            rc = gl_errprintf(err, "%s has no tensor %s (config.json describes %ld experts in "
                              "each of %d layers)", hf_dir, hf, shape[0], a->num_layers);
        else if (t->ndim != 2 || t->shape[0] != shape[1] || t->shape[1] != shape[2])
            rc = gl_errprintf(err, "%s: tensor %s has shape [%ld%s%ld], config.json implies "
                              "[%ld, %ld]", hf_dir, hf, t->shape[0], t->ndim > 1 ? ", " : "",
                              t->ndim > 1 ? t->shape[1] : 0L, shape[1], shape[2]);
        else
            rc = gl_st_to_f32(t, buf + e * each, err);
        if (t)
            dtype = t->dtype;
    }
    if (rc == 0) {
        gl_ckpt_tensor ct = {
            .name = full, .ndim = 2, .shape = { ds[0], ds[1] }, .offset = { 0, 0 },
            .count = { ds[0], ds[1] }, .data = buf, .writes = 1,
        };
        if (gl_ckpt_put(w, &ct, err) != GL_CKPT_OK)
            rc = -1;
    }
    free(buf);
    *bytes += 4.0 * shape[0] * each;
    if (!quiet && rc == 0) {
        expert_name(a, id, l, 0, hf, sizeof hf);
        printf("  %-48s -> %-40s %s [%ld, %ld, %ld] (%ld experts)\n", hf, full,
               gl_st_dtype_name(dtype), shape[0], shape[1], shape[2], shape[0]);
    }
    return rc;
}

int gl_hf_import(const char *hf_dir, const char *out, int divisible_by, int quiet,
                 gl_error *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", hf_dir);
    char *text;
    gl_error e;
    if (gl_file_read_all(path, &text, NULL, &e) < 0)
        return gl_errprintf(err, "%s (import-hf needs a Hugging Face model directory)", e.text);
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    if (!j) {
        free(text);
        return gl_errprintf(err, "%s is not valid JSON (%s at line %d)", path, je.text, je.line);
    }
    gl_arch c;
    int rc = gl_arch_from_hf_config(&c, j, path, err);
    json_decref(j);
    if (rc) {
        free(text);
        return -1;
    }
    c.make_vocab_size_divisible_by = divisible_by < 1 ? 1 : divisible_by;
    gl_arch_set_vocab(&c, c.vocab_size, 1);
    long vpad = c.padded_vocab_size;

    gl_st_model *m;
    if (gl_st_model_open(hf_dir, &m, err) != 0) {
        free(text);
        return -1;
    }
    /* Every tensor in the directory must be a weight we place. */
    for (int fi = 0; fi < m->nfiles; fi++)
        for (int ti = 0; ti < m->files[fi]->n; ti++) {
            const char *name = m->files[fi]->t[ti].name;
            char gl[256];
            int layer = -1;
            gl_tensor_id id;
            /* A name of the table is not enough: a bias the model does
             * not have (a Llama's q_proj.bias) would be dropped unread.
             * (A tied model's lm_head.weight is check_tied_head's.) */
            int ok = ignorable(&c, name) || (c.num_experts > 0 && moe_weight(&c, name)) ||
                     (gl_arch_is_gpt2(&c) ? gpt2_weight(&c, name) :
                      gl_tensor_translate(name, 0, gl, sizeof gl, &id, &layer) &&
                      layer < c.num_layers &&
                      (id == GL_T_LM_HEAD || gl_tensor_present(id, &c)));
            if (!ok) {
                gl_errprintf(err, "%s holds tensor %s, which is not a weight of a %d-layer "
                     "%s", hf_dir, name, c.num_layers,
                     gl_arch_is_gpt2(&c) ? "GPT2LMHeadModel" :
                     c.num_experts > 0 ? (c.qk_layernorm ? "Qwen3MoeForCausalLM"
                                                          : "MixtralForCausalLM") :
                     gl_arch_is_qwen2(&c) ? "Qwen2ForCausalLM" :
                     gl_arch_is_qwen3(&c) ? "Qwen3ForCausalLM" : "LlamaForCausalLM");
                gl_st_model_close(m);
                free(text);
                return -1;
            }
        }

    if (check_tied_head(m, &c, hf_dir, err) != 0 || check_out(out, err) != 0) {
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
    if (gl_ckpt_begin(MPI_COMM_SELF, dir, file, 0, &w, err) != GL_CKPT_OK) {
        gl_st_model_close(m);
        free(text);
        return -1;
    }
    rc = 0;
    double bytes = 0;
    for (int l = -1; l <= c.num_layers && rc == 0; l++)
        for (int k = 0; k < GL_T_COUNT && rc == 0; k++) {
            if (!in_step(&c, l, k))
                continue;
            hf_place p;
            char full[300];
            step_names(&c, k, l, &p, full);
            if (per_expert(k)) {
                rc = import_experts(m, &c, k, l, hf_dir, full, w, quiet, &bytes, err);
                continue;
            }
            const char *hf = p.name;
            long want[GL_TENSOR_MAXDIM], vshape[GL_TENSOR_MAXDIM], hs[2];
            int nd = gl_tensor_shape(k, &c, c.vocab_size, want);
            gl_tensor_shape(k, &c, vpad, vshape);
            hf_shape(&p, nd, want, hs);
            const gl_st_tensor *t = find_hf(m, hf);
            if (!t) {
                rc = gl_errprintf(err, "%s has no tensor %s (config.json describes %d layers%s)",
                          hf_dir, hf, c.num_layers,
                          k == GL_T_LM_HEAD ? " and untied embeddings" : "");
                break;
            }
            if (t->ndim != nd || t->shape[0] != hs[0] || (nd == 2 && t->shape[1] != hs[1])) {
                rc = gl_errprintf(err, "%s: tensor %s has shape [%ld%s%ld], config.json implies "
                          "[%ld%s%ld]", hf_dir, hf, t->shape[0], t->ndim > 1 ? ", " : "",
                          t->ndim > 1 ? t->shape[1] : 0L, hs[0], nd > 1 ? ", " : "",
                          nd > 1 ? hs[1] : 0L);
                break;
            }
            long rows = vshape[0], cols = nd == 2 ? vshape[1] : 1;
            float *buf = gl_calloc((size_t)(rows * cols), sizeof *buf);  /* padding: 0 */
            if (gpt2_get(t, &p, nd, want, hs, buf, err) != 0) {
                rc = -1;
                free(buf);
                break;
            }
            gl_ckpt_tensor ct = {
                .name = full, .ndim = nd, .shape = { vshape[0], nd == 2 ? vshape[1] : 0 },
                .offset = { 0, 0 }, .count = { vshape[0], nd == 2 ? vshape[1] : 0 },
                .data = buf, .writes = 1,
            };
            if (gl_ckpt_put(w, &ct, err) != GL_CKPT_OK)
                rc = -1;
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
    char *cfg = config_to_gridlm(&c);
    gl_ckpt_attr attrs[] = {
        { .key = "config", .type = GL_CKPT_STR, .s = cfg },
        { .key = "hf_config", .type = GL_CKPT_STR, .s = text },
        { .key = "vocab_size", .type = GL_CKPT_I64, .i = c.vocab_size },
        { .key = "consumed_train_samples", .type = GL_CKPT_I64, .i = 0 },
        { .key = "imported_from", .type = GL_CKPT_STR, .s = hf_dir },
    };
    gl_ckpt_save_stats st;
    rc = gl_ckpt_finish(w, attrs, 5, &st, err);
    free(cfg);
    free(text);
    if (rc != GL_CKPT_OK)
        return -1;
    if (!quiet)
        printf("wrote %s: %.3f GB of fp32 in %.2f s (%.2f GB/s); vocabulary %ld "
               "padded to %ld\n", st.path, bytes / 1e9, st.seconds,
               st.seconds > 0 ? bytes / 1e9 / st.seconds : 0.0, (long)c.vocab_size, vpad);
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
static int export_prepare(const char *out_dir, gl_error *err)
{
    char path[4200];
    if (gl_file_mkdirs(out_dir, err) < 0 ||
        gl_file_clean_temps(out_dir, export_name, NULL, "export", err) < 0)
        return -1;
    snprintf(path, sizeof path, "%s/config.json", out_dir);
    if (unlink(path) != 0 && errno != ENOENT)
        return gl_errprintf(err, "cannot remove the earlier %s: %s", path, strerror(errno));
    return 0;
}

/* gridlm's tensor buf ([rows, cols], or [rows]) into GPT-2's tensor at p:
 * transposed into a Conv1D's [in, out], into block p->part of c_attn's
 * columns.  The first block makes the output tensor (outs[*n], named
 * keep[*n], data bufs[*n]); the later ones find it by name. */
static void gpt2_put(const hf_place *p, int nd, long rows, long cols, const float *buf,
                     gl_st_dtype dtype, gl_st_out *outs, char **keep, float **bufs, int *n)
{
    long want[2] = {rows, cols}, hs[2];
    hf_shape(p, nd, want, hs);
    int i = 0;
    while (i < *n && strcmp(keep[i], p->name) != 0)
        i++;
    if (i == *n) {
        keep[i] = gl_strdup(p->name);
        bufs[i] = gl_malloc((size_t)(hs[0] * (nd == 2 ? hs[1] : 1)) * sizeof *bufs[i]);
        outs[i] = (gl_st_out){ .name = keep[i], .dtype = dtype, .ndim = nd,
                               .shape = { hs[0], hs[1] }, .data = bufs[i] };
        (*n)++;
    }
    float *all = bufs[i];
    long off = p->part >= 0 ? p->part * rows : 0;
    if (nd == 2)            /* all[c][off + r] = buf[r][c] */
        for (long r = 0; r < rows; r++)
            for (long c = 0; c < cols; c++)
                all[c * hs[1] + off + r] = buf[r * cols + c];
    else
        memcpy(all + off, buf, (size_t)rows * sizeof *buf);
}

/* Stacked tensor id of layer l, dataset full of ck, as its E per-expert
 * Hugging Face tensors appended to outs/keep/bufs at *n. */
static int export_experts(gl_ckpt *ck, const gl_arch *a, gl_tensor_id id, int l,
                          const char *full, gl_st_dtype dtype, gl_st_out *outs, char **keep,
                          float **bufs, int *n, gl_error *err)
{
    long shape[GL_TENSOR_MAXDIM], ds[2];
    gl_tensor_shape(id, a, 0, shape);
    expert_dataset(id, shape, ds);
    int i = gl_ckpt_find(ck, full);
    if (i < 0)
        return gl_errprintf(err, "%s has no tensor %s (its config describes %d layers of %ld "
                            "experts)", gl_ckpt_path(ck), full, a->num_layers, shape[0]);
    const gl_ckpt_info *in = gl_ckpt_tensor_info(ck, i);
    if (in->ndim != 2 || in->shape[0] != ds[0] || in->shape[1] != ds[1])
        return gl_errprintf(err, "%s: tensor %s has shape [%ld, %ld], its config implies "
                            "[%ld, %ld]", gl_ckpt_path(ck), full, in->shape[0],
                            in->ndim > 1 ? in->shape[1] : 0L, ds[0], ds[1]);
    long each = shape[1] * shape[2];
    float *all = gl_malloc((size_t)(shape[0] * each) * sizeof *all);
    gl_ckpt_tensor t = {
        .name = full, .ndim = 2, .shape = { ds[0], ds[1] }, .offset = { 0, 0 },
        .count = { ds[0], ds[1] }, .data = all,
    };
    if (gl_ckpt_read(ck, &t, err) != GL_CKPT_OK) {
        free(all);
        return -1;
    }
    char hf[256];
    for (long e = 0; e < shape[0]; e++) {
        expert_name(a, id, l, (int)e, hf, sizeof hf);
        keep[*n] = gl_strdup(hf);
        bufs[*n] = gl_malloc((size_t)each * sizeof *bufs[*n]);
        memcpy(bufs[*n], all + e * each, (size_t)each * sizeof *all);
        outs[*n] = (gl_st_out){ .name = keep[*n], .dtype = dtype, .ndim = 2,
                                .shape = { shape[1], shape[2] }, .data = bufs[*n] };
        (*n)++;
    }
    free(all);
    return 0;
}

int gl_hf_export(const char *ckpt, const char *out_dir, gl_st_dtype dtype,
                 size_t max_shard, int quiet, gl_error *err)
{
    if (dtype != GL_ST_F32 && dtype != GL_ST_BF16 && dtype != GL_ST_F16)
        return gl_errprintf(err, "export-hf writes F32, BF16 or F16, not %s", gl_st_dtype_name(dtype));
    gl_ckpt *ck;
    int rc = gl_ckpt_open(MPI_COMM_SELF, ckpt, GL_CKPT_VERIFY, &ck, err);
    if (rc != GL_CKPT_OK)       /* GL_CKPT_NONE too: its message names the path */
        return -1;
    char *cfg_text = gl_ckpt_get_str(ck, "config");
    char *hf_text = gl_ckpt_get_str(ck, "hf_config");
    gl_arch c;
    rc = config_from_gridlm(cfg_text, gl_ckpt_path(ck), &c, err);
    long vpad = c.padded_vocab_size;
    free(cfg_text);
    if (rc) {
        free(hf_text);
        gl_ckpt_close(ck);
        return -1;
    }

    /* Gather the weights in Hugging Face's order, vocabulary padding
     * dropped.  (All in memory at once: gl_st_model_write shards them.) */
    int cap = (GL_T_COUNT + 3 * c.num_experts) * (c.num_layers + 1), n = 0;
    gl_st_out *outs = gl_calloc(cap, sizeof *outs);
    char **keep = gl_calloc(cap, sizeof *keep);
    float **bufs = gl_calloc(cap, sizeof *bufs);
    rc = 0;
    for (int l = -1; l <= c.num_layers && rc == 0; l++)
        for (int k = 0; k < GL_T_COUNT && rc == 0; k++) {
            if (!in_step(&c, l, k))
                continue;
            hf_place p;
            char full[300];
            step_names(&c, k, l, &p, full);
            if (per_expert(k)) {
                rc = export_experts(ck, &c, k, l, full, dtype, outs, keep, bufs, &n, err);
                continue;
            }
            int i = gl_ckpt_find(ck, full);
            if (i < 0) {
                rc = gl_errprintf(err, "%s has no tensor %s (its config describes %d layers%s)",
                          gl_ckpt_path(ck), full, c.num_layers,
                          k == GL_T_LM_HEAD ? " and untied embeddings" : "");
                break;
            }
            const gl_ckpt_info *in = gl_ckpt_tensor_info(ck, i);
            long want[GL_TENSOR_MAXDIM];
            int nd = gl_tensor_shape(k, &c, vocab_rows(k) ? in->shape[0] : 0, want);
            if (in->ndim != nd || in->shape[0] != want[0] || (nd == 2 && in->shape[1] != want[1])) {
                rc = gl_errprintf(err, "%s: tensor %s has shape [%ld, %ld], its config implies [%ld, %ld]",
                          gl_ckpt_path(ck), full, in->shape[0], in->shape[1], want[0],
                          nd == 2 ? want[1] : 0L);
                break;
            }
            long rows = in->shape[0];
            if (vocab_rows(k)) {
                if (rows < c.vocab_size) {
                    rc = gl_errprintf(err, "%s: tensor %s has %ld rows, fewer than vocab_size %d",
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
            if (gl_ckpt_read(ck, &t, err) != GL_CKPT_OK) {
                rc = -1;
                free(buf);
                break;
            }
            if (p.conv1d || p.part >= 0) {       /* GPT-2: into its Conv1D / c_attn */
                gpt2_put(&p, nd, rows, cols, buf, dtype, outs, keep, bufs, &n);
                free(buf);
                continue;
            }
            keep[n] = gl_strdup(p.name);
            bufs[n] = buf;
            outs[n] = (gl_st_out){ .name = keep[n], .dtype = dtype, .ndim = nd,
                                   .shape = { rows, nd == 2 ? cols : 0 }, .data = buf };
            n++;
        }
    if (rc == 0) {
        /* Only now that every weight was read: a failed read leaves an
         * earlier export as it was. */
        const char *meta[] = { "format", "pt" };
        if (export_prepare(out_dir, err) != 0)
            rc = -1;
        else if (gl_st_model_write(out_dir, outs, n, max_shard, meta, 1, err) != 0)
            rc = -1;
    }
    if (rc == 0) {
        const char *tname = dtype == GL_ST_F32 ? "float32" : dtype == GL_ST_BF16 ? "bfloat16" : "float16";
        char *json = gl_arch_to_hf_config(&c, hf_text, tname);
        char path[4200];
        snprintf(path, sizeof path, "%s/config.json", out_dir);
        if (!json) {
            rc = gl_errprintf(err, "cannot format %s (out of memory?)", path);
        } else {
            size_t len = strlen(json);
            char *text = gl_malloc(len + 2);
            memcpy(text, json, len);
            strcpy(text + len, "\n");
            if (gl_file_write_all(path, text, len + 1, 0, err) < 0)
                rc = -1;
            free(text);
        }
        free(json);
        if (!quiet && rc == 0)
            printf("wrote %s: config.json and %d tensors as %s (iteration %ld, "
                   "vocabulary %ld of %ld rows)\n", out_dir, n, gl_st_dtype_name(dtype),
                   gl_ckpt_iteration(ck), (long)c.vocab_size, vpad ? vpad : c.vocab_size);
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
