/*
 * hf_config.h: Hugging Face's config.json <-> gl_arch (Llama, Qwen2, Qwen3,
 * GPT-2).
 *
 * A LlamaForCausalLM's config.json names the architecture with
 * transformers' keys:
 *
 *   config.json                        gl_arch
 *   hidden_size                        hidden_size
 *   intermediate_size                  ffn_hidden_size
 *   num_hidden_layers                  num_layers
 *   num_attention_heads                num_attention_heads
 *   num_key_value_heads (= heads)      num_query_groups
 *   head_dim (= hidden / heads)        kv_channels
 *   rms_norm_eps (1e-6)                norm_epsilon
 *   rope_theta (10000)                 rotary_base
 *   rope_scaling {rope_type "llama3", factor, low_freq_factor,
 *     high_freq_factor, original_max_position_embeddings}
 *                                      use_rope_scaling, rope_scaling_*
 *   vocab_size                         vocab_size
 *   max_position_embeddings (2048)     max_position_embeddings
 *   tie_word_embeddings (false)        !untie_embeddings_and_output_weights
 *
 * A Qwen2ForCausalLM (model_type "qwen2") has the same keys and is the
 * Llama form with biases on q, k and v (add_qkv_bias); Qwen2Config's
 * defaults differ where it matters (max_position_embeddings 32768;
 * num_key_value_heads is required, as its default is 32, not "= heads"),
 * and use_sliding_window true is refused (gridlm's attention is full).
 * The export writes a Qwen2ForCausalLM for that form, a LlamaForCausalLM
 * for the Llama form.
 *
 * A Qwen3ForCausalLM (model_type "qwen3") has the same keys too and is the
 * Llama form with an RMSNorm over each head of q and k (qk_layernorm);
 * Qwen3Config's head_dim (default 128, not hidden / heads) and
 * num_key_value_heads (default 32) are required, attention_bias true (q,
 * k, v and o biases) is refused, and so are use_sliding_window true and a
 * layer_types entry other than "full_attention" (as for Qwen2).
 *
 * A GPT2LMHeadModel (model_type "gpt2") has GPT2Config's keys: n_embd,
 * n_layer, n_head, n_positions (1024), n_inner (null: 4 n_embd),
 * layer_norm_epsilon (1e-5), activation_function ("gelu_new"; only the
 * tanh GeLUs are accepted), tie_word_embeddings (true); it is GPT's form
 * (LayerNorm, GeLU, learned positions, linear biases) with no dropout.
 *
 * (defaults in parentheses are LlamaConfig's, used when a key is
 * missing).  transformers v5's rope_parameters (rope_theta inside) is read
 * too, and rope_scaling wins when both are there, as in v5.  Anything
 * gridlm would compute differently from transformers is refused by name:
 * another rope_type, a partial_rotary_factor other than 1, per-layer-type
 * RoPE, biases, an activation other than silu, another model type.
 */
#ifndef GL_ARCH_HF_CONFIG_H
#define GL_ARCH_HF_CONFIG_H

#include "arch/arch.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Fill a (from gl_arch_defaults) from config.json's object j (a Llama, a
 * Qwen2, a Qwen3, a Mixtral -- the Llama form with experts --, a Qwen3-MoE
 * -- the Qwen3 form with experts -- or a GPT-2); path names
 * the file in messages.  -1 with err filled when gridlm cannot run the
 * model exactly as transformers would. */
int gl_arch_from_hf_config(gl_arch *a, json_t *j, const char *path, gl_error *err);

/* config.json text for a (the Llama, Qwen2, Qwen3, Mixtral, Qwen3-MoE or GPT-2 form:
 * gl_arch_is_llama, gl_arch_is_qwen2, gl_arch_is_qwen3, gl_arch_is_gpt2): starts from original (an imported config.json's
 * text, may be NULL) so that the keys gridlm does not use (token ids,
 * ...) survive, then sets every architecture key; torch_dtype is dtype.
 * NULL when out of memory. */
char *gl_arch_to_hf_config(const gl_arch *a, const char *original, const char *dtype);

/* Can the mixture-of-experts model a be written as a MixtralForCausalLM
 * (the Llama form; every layer MoE; Megatron's default softmax router
 * without scaling or expert bias; no shared experts)?  1, or 0 with the
 * reason in why (n bytes). */
int gl_hf_mixtral_ok(const gl_arch *a, char *why, size_t n);

/* Can the mixture-of-experts model a be written as a Qwen3MoeForCausalLM
 * (the Qwen3 form, QK norm included; a softmax router, renormalised over
 * the top k or, with --moe-router-pre-softmax, not; no scaling, expert
 * bias or shared experts; any layers dense, as mlp_only_layers)?  1, or 0
 * with the reason in why (n bytes). */
int gl_hf_qwen3_moe_ok(const gl_arch *a, char *why, size_t n);

/* The MoE export's check: gl_hf_qwen3_moe_ok for a model with QK norm,
 * else gl_hf_mixtral_ok. */
int gl_hf_moe_ok(const gl_arch *a, char *why, size_t n);

#ifdef __cplusplus
}
#endif
#endif
