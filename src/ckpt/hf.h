/*
 * hf.h: Hugging Face Llama checkpoints <-> gridlm checkpoints.
 *
 * A Hugging Face LlamaForCausalLM directory holds config.json and the
 * weights in safetensors (model.safetensors, or shards listed by
 * model.safetensors.index.json).  gridlm's parameters are the same
 * logical tensors under other names (src/model/model.h), stored in a
 * checkpoint as "model/<name>":
 *
 *   Hugging Face                                 gridlm
 *   model.embed_tokens.weight          [V, h]    embedding.weight          [Vpad, h]
 *   model.layers.N.input_layernorm.weight        layers.N.attention_norm.weight
 *   model.layers.N.self_attn.q_proj.weight       layers.N.attention.wq.weight  [Hq D, h]
 *   model.layers.N.self_attn.k_proj.weight       layers.N.attention.wk.weight  [Hkv D, h]
 *   model.layers.N.self_attn.v_proj.weight       layers.N.attention.wv.weight  [Hkv D, h]
 *   model.layers.N.self_attn.o_proj.weight       layers.N.attention.wo.weight  [h, Hq D]
 *   model.layers.N.post_attention_layernorm.weight layers.N.mlp_norm.weight
 *   model.layers.N.mlp.gate_proj.weight          layers.N.mlp.w_gate.weight    [f, h]
 *   model.layers.N.mlp.up_proj.weight            layers.N.mlp.w_up.weight      [f, h]
 *   model.layers.N.mlp.down_proj.weight          layers.N.mlp.w_down.weight    [h, f]
 *   model.norm.weight                            final_norm.weight
 *   lm_head.weight                     [V, h]    lm_head.weight            [Vpad, h]
 *                                                (absent when tie_word_embeddings)
 *
 * Every matrix is [out, in] in both (PyTorch's Linear layout), and gridlm
 * rotates with the rotate-half convention Hugging Face uses, so q and k
 * need no permutation: the conversion copies values and pads or drops
 * vocabulary rows, nothing else.  Vpad is the vocabulary rounded up to a
 * multiple of --make-vocab-size-divisible-by; the padding rows are zero.
 *
 * The run's configuration travels in the checkpoint's "config" attribute,
 * a JSON object with Megatron's argument names (gl_config's fields):
 * num_layers, hidden_size, ffn_hidden_size, num_attention_heads,
 * num_query_groups, kv_channels, norm_epsilon, rotary_base,
 * use_rope_scaling, rope_scaling_factor, max_position_embeddings,
 * vocab_size, padded_vocab_size, untie_embeddings_and_output_weights,
 * rope_scaling_low_freq_factor, rope_scaling_high_freq_factor,
 * rope_scaling_original_max_position_embeddings (gridlm-train's
 * --rope-scaling-* options).  config.json's rope_scaling of rope_type
 * "llama3" (Llama 3.1 and 3.2) maps onto use_rope_scaling and those four
 * (factor, low_freq_factor, high_freq_factor,
 * original_max_position_embeddings), and back on export; transformers
 * v5's rope_parameters (rope_theta inside) is read too.  Any other
 * rope_type, or a partial_rotary_factor other than 1, is refused by name:
 * the model would compute other rotary frequencies than transformers.
 * An import also keeps the original config.json text in "hf_config", so
 * that an export gives back the fields gridlm does not use (token ids,
 * ...) unchanged.
 */
#ifndef GL_CKPT_HF_H
#define GL_CKPT_HF_H

#include <stddef.h>

#include "ckpt/safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The Llama architecture fields of config.json. */
typedef struct gl_hf_config {
    long hidden_size, intermediate_size, num_hidden_layers;
    long num_attention_heads, num_key_value_heads, head_dim;
    double rms_norm_eps, rope_theta;
    int rope_scaling;                    /* rope_scaling.rope_type "llama3" */
    double rope_factor, low_freq_factor, high_freq_factor;
    long original_max_position_embeddings;
    long vocab_size, max_position_embeddings;
    int tie_word_embeddings;
} gl_hf_config;

/* The table: gridlm's name for a Hugging Face tensor name (and back),
 * into out; 0 when the name is not a Llama weight. */
int gl_hf_to_gridlm(const char *hf, char *out, size_t n);
int gl_hf_from_gridlm(const char *gl, char *out, size_t n);

/* HF_DIR (config.json and safetensors) -> a gridlm checkpoint: OUT is a
 * file (OUT.h5) or, when it is a directory, OUT/iter_0000000.h5 with the
 * tracker file.  Vocabulary rows are padded to a multiple of divisible_by.
 * Needs MPI initialised (the file is written through MPI-IO on
 * MPI_COMM_SELF).  Returns 0, or -1 with the message in gl_hf_error(). */
int gl_hf_import(const char *hf_dir, const char *out, int divisible_by, int quiet);

/* A gridlm checkpoint (file or directory) -> OUT_DIR with config.json and
 * safetensors in dtype (F32, BF16 or F16), shards of at most max_shard
 * bytes.  Only the model's weights are exported. */
int gl_hf_export(const char *ckpt, const char *out_dir, gl_st_dtype dtype,
                 size_t max_shard, int quiet);

const char *gl_hf_error(void);

#ifdef __cplusplus
}
#endif
#endif
