/*
 * tensors.h: the one table of the model's parameters.
 *
 * Every logical tensor of the decoder, once: gridlm's name (the name in
 * a checkpoint, under "model/"), Hugging Face's name, its shape in terms
 * of gl_arch, how tensor parallelism splits it, and how it is
 * initialised.  "%d" in a name stands for the layer number.
 *
 *   gridlm                          Hugging Face                              shape       TP
 *   embedding.weight                model.embed_tokens.weight                 [Vpad, h]   rows
 *   layers.N.attention_norm.weight  model.layers.N.input_layernorm.weight     [h]         -
 *   layers.N.attention.wq.weight    model.layers.N.self_attn.q_proj.weight    [Hq D, h]   rows
 *   layers.N.attention.wk.weight    model.layers.N.self_attn.k_proj.weight    [Hkv D, h]  rows
 *   layers.N.attention.wv.weight    model.layers.N.self_attn.v_proj.weight    [Hkv D, h]  rows
 *   layers.N.attention.wo.weight    model.layers.N.self_attn.o_proj.weight    [h, Hq D]   cols
 *   layers.N.mlp_norm.weight        model.layers.N.post_attention_layernorm.weight [h]    -
 *   layers.N.mlp.w_gate.weight      model.layers.N.mlp.gate_proj.weight       [f, h]      rows
 *   layers.N.mlp.w_up.weight        model.layers.N.mlp.up_proj.weight         [f, h]      rows
 *   layers.N.mlp.w_down.weight      model.layers.N.mlp.down_proj.weight       [h, f]      cols
 *   final_norm.weight               model.norm.weight                         [h]         -
 *   lm_head.weight                  lm_head.weight                            [Vpad, h]   rows
 *                                   (absent when the head is tied to the embedding)
 *
 * The GPT form (arch.h) adds rows, each present only when the arch has it
 * (gl_tensor_present): the learned positions position_embeddings.weight
 * [P, h] (P = max positions; replicated, as Megatron's), LayerNorm's
 * biases (attention_norm.bias, mlp_norm.bias, final_norm.bias [h]), the
 * linear biases (attention.bq/bk/bv.bias split with their rows,
 * attention.wo.bias and mlp.w_down.bias [h] replicated: added once after
 * the row-parallel reduction, mlp.w_gate/w_up.bias [f] split with their
 * rows); the QKV biases alone with --add-qkv-bias.  The GeLU MLP is
 * w_up (fc1) and w_down (fc2), without w_gate.  Their Hugging Face names
 * are the Llama/Qwen2 spellings ("...q_proj.bias"); GPT2LMHeadModel's
 * names and layout (Conv1D, q, k and v packed in attn.c_attn) are
 * gl_tensor_gpt2's.
 *
 * --qk-layernorm (Qwen3) adds the RMSNorm weights of each head's q and k,
 * layers.N.attention.q_norm.weight and k_norm.weight [D] (Hugging Face's
 * model.layers.N.self_attn.q_norm.weight, k_norm.weight), replicated over
 * TP: every rank's heads use the same weight.
 *
 * A mixture-of-experts model (gl_arch.num_experts > 0) has, on each MoE
 * layer (gl_arch_is_moe_layer), in place of the dense MLP's mlp.w_gate,
 * w_up and w_down (and their biases):
 *
 *   layers.N.mlp.router.weight              [E, h]      -   (replicated over TP, as Megatron's)
 *   layers.N.mlp.router.expert_bias         [E]         -   (with --moe-router-enable-expert-bias;
 *                                                            a buffer: checkpointed, not trained)
 *   layers.N.mlp.experts.w_gate.weight      [E, F, h]   rows (SwiGLU only)
 *   layers.N.mlp.experts.w_up.weight        [E, F, h]   rows
 *   layers.N.mlp.experts.w_down.weight      [E, h, F]   cols
 *   layers.N.mlp.shared_experts.w_gate.weight [S, h]    rows (SwiGLU; with a shared expert)
 *   layers.N.mlp.shared_experts.w_up.weight   [S, h]    rows
 *   layers.N.mlp.shared_experts.w_down.weight [h, S]    cols
 *
 * (E experts, F = gl_arch_moe_ffn, S = the shared experts' width.)  The
 * experts are one stacked logical tensor each, [E, out, in]: "rows" and
 * "cols" split every expert's matrix alike (TP splits F as in the dense
 * MLP); expert parallelism will split dim 0.  MoE layers take no linear
 * biases (gridlm-train refuses --add-bias-linear with experts).  Their
 * Hugging Face column is empty: Mixtral and Qwen3-MoE store one tensor
 * per expert, which the Hugging Face interchange will map.
 *
 * Every matrix is [out, in] in both (PyTorch's Linear layout).  Hugging
 * Face stores the vocabulary's V rows where gridlm stores Vpad (the
 * padding rows are zero); gl_tensor_shape takes the row count to use.
 *
 * The table's order is the order weights are stored in, which is also
 * Hugging Face's: the embedding, each layer's tensors, the final norm and
 * the head.
 */
#ifndef GL_ARCH_TENSORS_H
#define GL_ARCH_TENSORS_H

#include <stddef.h>

#include "arch/arch.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How TP splits a logical tensor (a stacked [E, out, in] one: each
 * expert's matrix alike, dims 1 and 2). */
typedef enum {
    GL_SHARD_NONE = 0,     /* replicated on every TP rank */
    GL_SHARD_ROWS,         /* dim 0 split: column-parallel (output features) */
    GL_SHARD_COLS          /* dim 1 split: row-parallel (input features) */
} gl_shard;

/* The most dimensions a logical tensor has (stacked experts). */
#define GL_TENSOR_MAXDIM 3

typedef enum {
    GL_T_EMBEDDING = 0,
    GL_T_POSITION_EMBEDDING,
    GL_T_ATTENTION_NORM,
    GL_T_ATTENTION_NORM_BIAS,
    GL_T_WQ,
    GL_T_BQ,
    GL_T_WK,
    GL_T_BK,
    GL_T_WV,
    GL_T_BV,
    GL_T_WO,
    GL_T_BO,
    GL_T_Q_NORM,
    GL_T_K_NORM,
    GL_T_MLP_NORM,
    GL_T_MLP_NORM_BIAS,
    GL_T_W_GATE,
    GL_T_B_GATE,
    GL_T_W_UP,
    GL_T_B_UP,
    GL_T_W_DOWN,
    GL_T_B_DOWN,
    GL_T_ROUTER,
    GL_T_EXPERT_BIAS,
    GL_T_EXPERT_W_GATE,
    GL_T_EXPERT_W_UP,
    GL_T_EXPERT_W_DOWN,
    GL_T_SHARED_W_GATE,
    GL_T_SHARED_W_UP,
    GL_T_SHARED_W_DOWN,
    GL_T_FINAL_NORM,
    GL_T_FINAL_NORM_BIAS,
    GL_T_LM_HEAD,
    GL_T_COUNT
} gl_tensor_id;

/* Initialisation (Megatron's): normal(0, std) for matrices and learned
 * positions, where the output projections of each layer (wo, w_down) use
 * std / sqrt(2 L) (scaled_init_method_normal); ones for norm weights
 * (zeros under --apply-layernorm-1p: gl_tensor_init); zeros for biases. */
typedef enum { GL_INIT_NORMAL = 0, GL_INIT_SCALED_NORMAL, GL_INIT_ONES, GL_INIT_ZEROS } gl_init;

typedef struct {
    const char *name;           /* gridlm's name, "%d" = layer */
    const char *hf_name;        /* Hugging Face's name ("": none of its own) */
    int per_layer;              /* one per decoder layer */
    int ndim;                   /* 1 (norm weights, biases), 2, or 3 (stacked experts) */
    gl_shard shard;
    gl_init init;
    int buffer;                 /* not trained (the expert bias): checkpointed, no gradient */
} gl_tensor_info;

/* Row id of the table. */
const gl_tensor_info *gl_tensor(gl_tensor_id id);

/* The logical shape of tensor id under a ([h, 1] for vectors, [E, out,
 * in] for stacked experts; shape[2] is 1 for the others); vocab_rows is
 * the vocabulary's row count to use (Vpad for gridlm, V for Hugging
 * Face).  Returns ndim. */
int gl_tensor_shape(gl_tensor_id id, const gl_arch *a, long vocab_rows,
                    long shape[GL_TENSOR_MAXDIM]);

/* Tensor id's name (gridlm's, or Hugging Face's when hf) at layer l. */
void gl_tensor_name(gl_tensor_id id, int l, int hf, char *out, size_t n);

/* Is tensor id stored for a: the head when untied, w_gate with SwiGLU,
 * positions when learned, norm biases with LayerNorm, linear biases as
 * add_bias_linear and add_qkv_bias say, q_norm and k_norm with
 * qk_layernorm, the MoE tensors on some layer of an MoE model (the
 * expert bias when enabled, the shared experts with a width); every
 * other tensor always.  Per layer: gl_tensor_present_at. */
int gl_tensor_present(gl_tensor_id id, const gl_arch *a);

/* Is tensor id stored for a at layer l (ignored for a tensor outside the
 * layers): as gl_tensor_present, and the dense MLP's tensors on dense
 * layers only, the MoE tensors on MoE layers only. */
int gl_tensor_present_at(gl_tensor_id id, const gl_arch *a, int l);

/* Tensor id's name at layer l in a GPT2LMHeadModel (transformer.wte.weight,
 * transformer.h.N.attn.c_attn.weight, ...; "transformer." is the prefix
 * save_pretrained writes), 0 when GPT-2 has no such tensor (w_gate).
 * GPT-2's linear layers are transformers' Conv1D, stored [in, out], the
 * transpose of gridlm's [out, in]: *conv1d says so.  wq, wk and wv (and
 * their biases) are the three column blocks of attn.c_attn [h, 3h] (q, k,
 * v, each [h, h]): *part is the block, -1 for a tensor of its own. */
int gl_tensor_gpt2(gl_tensor_id id, int l, char *out, size_t n, int *part, int *conv1d);

/* Translate a name between gridlm's and Hugging Face's (to_hf: gridlm ->
 * Hugging Face); 0 when it is not a name of the table.  The layer number
 * of a per-layer name goes to *layer when layer is not NULL. */
int gl_tensor_translate(const char *from, int to_hf, char *out, size_t n, gl_tensor_id *id,
                        int *layer);

#ifdef __cplusplus
}
#endif
#endif
