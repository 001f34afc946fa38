/*
 * tensors.c: the parameter table (tensors.h).
 */
#include <config.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch/tensors.h"

static const gl_tensor_info table[GL_T_COUNT] = {
    [GL_T_EMBEDDING] = {"embedding.weight", "model.embed_tokens.weight", 0, 2,
                        GL_SHARD_ROWS, GL_INIT_NORMAL},
    [GL_T_POSITION_EMBEDDING] = {"position_embeddings.weight", "model.embed_positions.weight",
                                 0, 2, GL_SHARD_NONE, GL_INIT_NORMAL},
    [GL_T_ATTENTION_NORM] = {"layers.%d.attention_norm.weight",
                             "model.layers.%d.input_layernorm.weight", 1, 1, GL_SHARD_NONE,
                             GL_INIT_ONES},
    [GL_T_ATTENTION_NORM_BIAS] = {"layers.%d.attention_norm.bias",
                                  "model.layers.%d.input_layernorm.bias", 1, 1, GL_SHARD_NONE,
                                  GL_INIT_ZEROS},
    [GL_T_WQ] = {"layers.%d.attention.wq.weight", "model.layers.%d.self_attn.q_proj.weight", 1,
                 2, GL_SHARD_ROWS, GL_INIT_NORMAL},
    [GL_T_BQ] = {"layers.%d.attention.wq.bias", "model.layers.%d.self_attn.q_proj.bias", 1, 1,
                 GL_SHARD_ROWS, GL_INIT_ZEROS},
    [GL_T_WK] = {"layers.%d.attention.wk.weight", "model.layers.%d.self_attn.k_proj.weight", 1,
                 2, GL_SHARD_ROWS, GL_INIT_NORMAL},
    [GL_T_BK] = {"layers.%d.attention.wk.bias", "model.layers.%d.self_attn.k_proj.bias", 1, 1,
                 GL_SHARD_ROWS, GL_INIT_ZEROS},
    [GL_T_WV] = {"layers.%d.attention.wv.weight", "model.layers.%d.self_attn.v_proj.weight", 1,
                 2, GL_SHARD_ROWS, GL_INIT_NORMAL},
    [GL_T_BV] = {"layers.%d.attention.wv.bias", "model.layers.%d.self_attn.v_proj.bias", 1, 1,
                 GL_SHARD_ROWS, GL_INIT_ZEROS},
    [GL_T_WO] = {"layers.%d.attention.wo.weight", "model.layers.%d.self_attn.o_proj.weight", 1,
                 2, GL_SHARD_COLS, GL_INIT_SCALED_NORMAL},
    [GL_T_BO] = {"layers.%d.attention.wo.bias", "model.layers.%d.self_attn.o_proj.bias", 1, 1,
                 GL_SHARD_NONE, GL_INIT_ZEROS},
    [GL_T_Q_NORM] = {"layers.%d.attention.q_norm.weight", "model.layers.%d.self_attn.q_norm.weight",
                     1, 1, GL_SHARD_NONE, GL_INIT_ONES},
    [GL_T_K_NORM] = {"layers.%d.attention.k_norm.weight", "model.layers.%d.self_attn.k_norm.weight",
                     1, 1, GL_SHARD_NONE, GL_INIT_ONES},
    [GL_T_MLP_NORM] = {"layers.%d.mlp_norm.weight",
                       "model.layers.%d.post_attention_layernorm.weight", 1, 1, GL_SHARD_NONE,
                       GL_INIT_ONES},
    [GL_T_MLP_NORM_BIAS] = {"layers.%d.mlp_norm.bias",
                            "model.layers.%d.post_attention_layernorm.bias", 1, 1, GL_SHARD_NONE,
                            GL_INIT_ZEROS},
    [GL_T_W_GATE] = {"layers.%d.mlp.w_gate.weight", "model.layers.%d.mlp.gate_proj.weight", 1,
                     2, GL_SHARD_ROWS, GL_INIT_NORMAL},
    [GL_T_B_GATE] = {"layers.%d.mlp.w_gate.bias", "model.layers.%d.mlp.gate_proj.bias", 1, 1,
                     GL_SHARD_ROWS, GL_INIT_ZEROS},
    [GL_T_W_UP] = {"layers.%d.mlp.w_up.weight", "model.layers.%d.mlp.up_proj.weight", 1, 2,
                   GL_SHARD_ROWS, GL_INIT_NORMAL},
    [GL_T_B_UP] = {"layers.%d.mlp.w_up.bias", "model.layers.%d.mlp.up_proj.bias", 1, 1,
                   GL_SHARD_ROWS, GL_INIT_ZEROS},
    [GL_T_W_DOWN] = {"layers.%d.mlp.w_down.weight", "model.layers.%d.mlp.down_proj.weight", 1,
                     2, GL_SHARD_COLS, GL_INIT_SCALED_NORMAL},
    [GL_T_B_DOWN] = {"layers.%d.mlp.w_down.bias", "model.layers.%d.mlp.down_proj.bias", 1, 1,
                     GL_SHARD_NONE, GL_INIT_ZEROS},
    [GL_T_ROUTER] = {"layers.%d.mlp.router.weight", "", 1, 2, GL_SHARD_NONE, GL_INIT_NORMAL},
    [GL_T_EXPERT_BIAS] = {"layers.%d.mlp.router.expert_bias", "", 1, 1, GL_SHARD_NONE,
                          GL_INIT_ZEROS, 1},
    [GL_T_EXPERT_W_GATE] = {"layers.%d.mlp.experts.w_gate.weight", "", 1, 3, GL_SHARD_ROWS,
                            GL_INIT_NORMAL},
    [GL_T_EXPERT_W_UP] = {"layers.%d.mlp.experts.w_up.weight", "", 1, 3, GL_SHARD_ROWS,
                          GL_INIT_NORMAL},
    [GL_T_EXPERT_W_DOWN] = {"layers.%d.mlp.experts.w_down.weight", "", 1, 3, GL_SHARD_COLS,
                            GL_INIT_SCALED_NORMAL},
    [GL_T_SHARED_W_GATE] = {"layers.%d.mlp.shared_experts.w_gate.weight", "", 1, 2,
                            GL_SHARD_ROWS, GL_INIT_NORMAL},
    [GL_T_SHARED_W_UP] = {"layers.%d.mlp.shared_experts.w_up.weight", "", 1, 2, GL_SHARD_ROWS,
                          GL_INIT_NORMAL},
    [GL_T_SHARED_W_DOWN] = {"layers.%d.mlp.shared_experts.w_down.weight", "", 1, 2,
                            GL_SHARD_COLS, GL_INIT_SCALED_NORMAL},
    [GL_T_FINAL_NORM] = {"final_norm.weight", "model.norm.weight", 0, 1, GL_SHARD_NONE,
                         GL_INIT_ONES},
    [GL_T_FINAL_NORM_BIAS] = {"final_norm.bias", "model.norm.bias", 0, 1, GL_SHARD_NONE,
                              GL_INIT_ZEROS},
    [GL_T_LM_HEAD] = {"lm_head.weight", "lm_head.weight", 0, 2, GL_SHARD_ROWS, GL_INIT_NORMAL},
};

/* GPT2LMHeadModel's spellings ("transformer." prefixed, as save_pretrained
 * writes them); part: which third of attn.c_attn (q, k, v), -1 for a
 * tensor of its own.  NULL: GPT-2 has no such tensor. */
static const struct {
    const char *name;
    int part;
} gpt2_table[GL_T_COUNT] = {
    [GL_T_EMBEDDING] = {"transformer.wte.weight", -1},
    [GL_T_POSITION_EMBEDDING] = {"transformer.wpe.weight", -1},
    [GL_T_ATTENTION_NORM] = {"transformer.h.%d.ln_1.weight", -1},
    [GL_T_ATTENTION_NORM_BIAS] = {"transformer.h.%d.ln_1.bias", -1},
    [GL_T_WQ] = {"transformer.h.%d.attn.c_attn.weight", 0},
    [GL_T_BQ] = {"transformer.h.%d.attn.c_attn.bias", 0},
    [GL_T_WK] = {"transformer.h.%d.attn.c_attn.weight", 1},
    [GL_T_BK] = {"transformer.h.%d.attn.c_attn.bias", 1},
    [GL_T_WV] = {"transformer.h.%d.attn.c_attn.weight", 2},
    [GL_T_BV] = {"transformer.h.%d.attn.c_attn.bias", 2},
    [GL_T_WO] = {"transformer.h.%d.attn.c_proj.weight", -1},
    [GL_T_BO] = {"transformer.h.%d.attn.c_proj.bias", -1},
    [GL_T_Q_NORM] = {NULL, -1},
    [GL_T_K_NORM] = {NULL, -1},
    [GL_T_MLP_NORM] = {"transformer.h.%d.ln_2.weight", -1},
    [GL_T_MLP_NORM_BIAS] = {"transformer.h.%d.ln_2.bias", -1},
    [GL_T_W_GATE] = {NULL, -1},
    [GL_T_B_GATE] = {NULL, -1},
    [GL_T_W_UP] = {"transformer.h.%d.mlp.c_fc.weight", -1},
    [GL_T_B_UP] = {"transformer.h.%d.mlp.c_fc.bias", -1},
    [GL_T_W_DOWN] = {"transformer.h.%d.mlp.c_proj.weight", -1},
    [GL_T_B_DOWN] = {"transformer.h.%d.mlp.c_proj.bias", -1},
    [GL_T_ROUTER] = {NULL, -1},
    [GL_T_EXPERT_BIAS] = {NULL, -1},
    [GL_T_EXPERT_W_GATE] = {NULL, -1},
    [GL_T_EXPERT_W_UP] = {NULL, -1},
    [GL_T_EXPERT_W_DOWN] = {NULL, -1},
    [GL_T_SHARED_W_GATE] = {NULL, -1},
    [GL_T_SHARED_W_UP] = {NULL, -1},
    [GL_T_SHARED_W_DOWN] = {NULL, -1},
    [GL_T_FINAL_NORM] = {"transformer.ln_f.weight", -1},
    [GL_T_FINAL_NORM_BIAS] = {"transformer.ln_f.bias", -1},
    [GL_T_LM_HEAD] = {"lm_head.weight", -1},
};

int gl_tensor_gpt2(gl_tensor_id id, int l, char *out, size_t n, int *part, int *conv1d)
{
    if (!gpt2_table[id].name)
        return 0;
    if (table[id].per_layer)
        snprintf(out, n, gpt2_table[id].name, l);
    else
        snprintf(out, n, "%s", gpt2_table[id].name);
    *part = gpt2_table[id].part;
    *conv1d = table[id].ndim == 2 && id != GL_T_EMBEDDING && id != GL_T_POSITION_EMBEDDING &&
              id != GL_T_LM_HEAD;
    return 1;
}

const gl_tensor_info *gl_tensor(gl_tensor_id id)
{
    return &table[id];
}

int gl_tensor_shape(gl_tensor_id id, const gl_arch *a, long vocab_rows,
                    long shape[GL_TENSOR_MAXDIM])
{
    long h = a->hidden_size, D = gl_arch_head_dim(a);
    long q = (long)a->num_attention_heads * D, kv = (long)gl_arch_groups(a) * D;
    long f = a->ffn_hidden_size, E = a->num_experts, F = gl_arch_moe_ffn(a);
    long S = a->moe_shared_expert_intermediate_size;
    long rows = h, cols = 1;
    shape[2] = 1;
    switch (id) {
    case GL_T_ROUTER: rows = E; cols = h; break;
    case GL_T_EXPERT_BIAS: rows = E; break;
    case GL_T_EXPERT_W_GATE:
    case GL_T_EXPERT_W_UP: rows = E; cols = F; shape[2] = h; break;
    case GL_T_EXPERT_W_DOWN: rows = E; cols = h; shape[2] = F; break;
    case GL_T_SHARED_W_GATE:
    case GL_T_SHARED_W_UP: rows = S; cols = h; break;
    case GL_T_SHARED_W_DOWN: rows = h; cols = S; break;
    case GL_T_EMBEDDING:
    case GL_T_LM_HEAD: rows = vocab_rows; cols = h; break;
    case GL_T_POSITION_EMBEDDING:
        rows = a->max_position_embeddings ? a->max_position_embeddings : a->seq_length;
        cols = h;
        break;
    case GL_T_BQ: rows = q; break;
    case GL_T_BK:
    case GL_T_BV: rows = kv; break;
    case GL_T_B_GATE:
    case GL_T_B_UP: rows = f; break;
    case GL_T_WQ: rows = q; cols = h; break;
    case GL_T_WK:
    case GL_T_WV: rows = kv; cols = h; break;
    case GL_T_WO: rows = h; cols = q; break;
    case GL_T_W_GATE:
    case GL_T_W_UP: rows = f; cols = h; break;
    case GL_T_W_DOWN: rows = h; cols = f; break;
    case GL_T_Q_NORM:
    case GL_T_K_NORM: rows = D; break;
    default: break;                     /* the norms, their biases, bo, b_down: [h] */
    }
    shape[0] = rows;
    shape[1] = cols;
    return table[id].ndim;
}

void gl_tensor_name(gl_tensor_id id, int l, int hf, char *out, size_t n)
{
    if (hf && !table[id].hf_name[0]) {
        snprintf(out, n, "%s", "");
        return;
    }
    const char *fmt = hf ? table[id].hf_name : table[id].name;
    if (table[id].per_layer)
        snprintf(out, n, fmt, l);
    else
        snprintf(out, n, "%s", fmt);
}

int gl_tensor_present(gl_tensor_id id, const gl_arch *a)
{
    int layernorm = a->normalization == GL_NORM_LAYERNORM;
    switch (id) {
    case GL_T_LM_HEAD: return a->untie_embeddings_and_output_weights;
    case GL_T_POSITION_EMBEDDING: return a->position_embedding_type == GL_POS_LEARNED_ABSOLUTE;
    case GL_T_ATTENTION_NORM_BIAS:
    case GL_T_MLP_NORM_BIAS:
    case GL_T_FINAL_NORM_BIAS: return layernorm;
    case GL_T_BQ:
    case GL_T_BK:
    case GL_T_BV: return a->add_bias_linear || a->add_qkv_bias;   /* as Megatron's QKV */
    case GL_T_BO:
    case GL_T_B_UP:
    case GL_T_B_DOWN: return a->add_bias_linear;
    case GL_T_W_GATE: return a->swiglu;
    case GL_T_B_GATE: return a->swiglu && a->add_bias_linear;
    case GL_T_Q_NORM:
    case GL_T_K_NORM: return a->qk_layernorm;
    case GL_T_ROUTER:
    case GL_T_EXPERT_W_UP:
    case GL_T_EXPERT_W_DOWN: return a->num_experts > 0;
    case GL_T_EXPERT_BIAS: return a->num_experts > 0 && a->moe_router_enable_expert_bias;
    case GL_T_EXPERT_W_GATE: return a->num_experts > 0 && a->swiglu;
    case GL_T_SHARED_W_UP:
    case GL_T_SHARED_W_DOWN:
        return a->num_experts > 0 && a->moe_shared_expert_intermediate_size > 0;
    case GL_T_SHARED_W_GATE:
        return a->num_experts > 0 && a->moe_shared_expert_intermediate_size > 0 && a->swiglu;
    default: return 1;
    }
}

/* Is id one of the MoE block's tensors, or one of the dense MLP's? */
static int is_moe_tensor(gl_tensor_id id)
{
    return id >= GL_T_ROUTER && id <= GL_T_SHARED_W_DOWN;
}

static int is_dense_mlp_tensor(gl_tensor_id id)
{
    return id >= GL_T_W_GATE && id <= GL_T_B_DOWN;
}

int gl_tensor_present_at(gl_tensor_id id, const gl_arch *a, int l)
{
    if (!gl_tensor_present(id, a))
        return 0;
    if (!table[id].per_layer)
        return 1;
    if (is_moe_tensor(id))
        return gl_arch_is_moe_layer(a, l);
    if (is_dense_mlp_tensor(id))
        return !gl_arch_is_moe_layer(a, l);
    return 1;
}

/* Does name match pattern (with at most one "%d", a layer number written
 * without leading zeros)? */
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

int gl_tensor_translate(const char *from, int to_hf, char *out, size_t n, gl_tensor_id *id,
                        int *layer)
{
    for (int i = 0; i < GL_T_COUNT; i++) {
        int l = 0;
        if (!table[i].hf_name[0])
            continue;           /* no Hugging Face name of its own */
        if (match(to_hf ? table[i].name : table[i].hf_name, from, &l)) {
            gl_tensor_name((gl_tensor_id)i, l, to_hf, out, n);
            if (id)
                *id = (gl_tensor_id)i;
            if (layer)
                *layer = table[i].per_layer ? l : -1;
            return 1;
        }
    }
    return 0;
}
