/*
 * arch.h: what the model is, independent of how it is trained.
 *
 * One struct, gl_arch, describes a decoder: its shape, normalisation,
 * MLP activation, positions (rotary and its scaling, or learned), biases,
 * dropout, vocabulary and padding, tied or untied head, and the
 * initialisation.  Field names are Megatron-LM's argument
 * names (--hidden-size is hidden_size), and the same names are the keys of
 * the "config" JSON a gridlm checkpoint carries.  Everything that has to
 * know the architecture reads it from here:
 *
 *   - the presets (--model llama3-8b, ...): gl_arch_preset();
 *   - the derived defaults (query groups, head size, FFN width, maximum
 *     positions): gl_arch_resolve();
 *   - the vocabulary's padding: gl_arch_pad_vocab();
 *   - the parameter and FLOP counts: gl_arch_num_params(),
 *     gl_arch_flops_per_token() and its terms (../shared/reference/flops.md);
 *   - the flags that give an architecture, and its fields as key=value
 *     lines: gl_arch_to_flags(), gl_arch_print_keys();
 *   - the checkpoint's "config" JSON, written and read by one codec, and
 *     the comparison of a checkpoint's architecture with a run's:
 *     gl_arch_to_json(), gl_arch_from_json(), gl_arch_diff();
 *   - the table of parameters (names, Hugging Face names, shapes, how
 *     they shard): arch/tensors.h;
 *   - Hugging Face's config.json: arch/hf_config.h.
 *
 * A new model option (experts, QK normalisation, biases, ...) is a field
 * here and a row of the field table in arch.c; the JSON codec, the check
 * on --load and the start-up summary follow from the row.
 *
 * No MPI, no CUDA, no training state: model/, ckpt/, data/ and train/ all
 * use this room, and it uses only base/.
 */
#ifndef GL_ARCH_ARCH_H
#define GL_ARCH_ARCH_H

#include <stddef.h>
#include <stdio.h>

#include "base/error.h"
#include "base/json.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Room for gl_arch.moe_layer_freq's text: a list of up to 1000 layers. */
#define GL_MOE_FREQ_MAX 2048

/* --normalization and --position-embedding-type (Megatron's spellings in
 * gl_arch_norm_names and gl_arch_position_names). */
typedef enum { GL_NORM_LAYERNORM = 0, GL_NORM_RMSNORM } gl_norm;
/* --moe-router-score-function (spellings in gl_arch_moe_score_names).
 * (device/ops.h has its own gl_moe_score for the router op, with the
 * same values; model/ passes one as the other.) */
typedef enum { GL_ROUTER_SOFTMAX = 0, GL_ROUTER_SIGMOID } gl_router_score;
extern const char *const gl_arch_moe_score_names[];  /* "softmax", "sigmoid", NULL */
typedef enum { GL_POS_LEARNED_ABSOLUTE = 0, GL_POS_ROPE, GL_POS_NONE } gl_position;
extern const char *const gl_arch_norm_names[];       /* "LayerNorm", "RMSNorm", NULL */
extern const char *const gl_arch_position_names[];   /* "learned_absolute", "rope", "none", NULL */

typedef struct gl_arch {
    char model[64];                  /* --model preset name, "" when none */
    int num_layers;                  /* --num-layers */
    int hidden_size;                 /* --hidden-size */
    int ffn_hidden_size;             /* --ffn-hidden-size (0: 4h, or Megatron's SwiGLU rule) */
    int num_attention_heads;         /* --num-attention-heads */
    int num_query_groups;            /* --num-query-groups (0: = heads, i.e. MHA) */
    int kv_channels;                 /* --kv-channels: the head size (0: hidden / heads) */
    int seq_length;                  /* --seq-length */
    int max_position_embeddings;     /* --max-position-embeddings (0: seq_length) */
    int vocab_size;                  /* --vocab-size (0: from the tokenizer) */
    int padded_vocab_size;           /* vocab_size padded (gl_arch_set_vocab) */
    int make_vocab_size_divisible_by;/* --make-vocab-size-divisible-by (128) */
    double norm_epsilon;             /* --norm-epsilon (1e-5) */
    int normalization;               /* --normalization: gl_norm (LayerNorm has a bias) */
    int apply_layernorm_1p;          /* --apply-layernorm-1p: the weight is stored as w - 1 */
    int swiglu;                      /* --swiglu: SwiGLU MLP; else GeLU (tanh) */
    int position_embedding_type;     /* --position-embedding-type: gl_position */
    double rotary_percent;           /* --rotary-percent (1: every channel of a head) */
    int add_bias_linear;             /* --add-bias-linear / --disable-bias-linear */
    int add_qkv_bias;                /* --add-qkv-bias: Q, K, V biases only (Qwen2) */
    int qk_layernorm;                /* --qk-layernorm: RMSNorm over each head's q and k,
                                      * before RoPE, one weight [head size] for q's heads
                                      * and one for k's (Qwen3) */
    double attention_dropout;        /* --attention-dropout */
    double hidden_dropout;           /* --hidden-dropout */
    double rotary_base;              /* --rotary-base (10000) */
    int use_rope_scaling;            /* --use-rope-scaling (Llama 3.1 frequency scaling) */
    double rope_scaling_factor;      /* --rope-scaling-factor (8) */
    double rope_scaling_low_freq_factor;  /* --rope-scaling-low-freq-factor (1) */
    double rope_scaling_high_freq_factor; /* --rope-scaling-high-freq-factor (4) */
    int rope_scaling_original_max_position_embeddings;
                                     /* --rope-scaling-original-max-position-embeddings (8192) */
    int untie_embeddings_and_output_weights; /* --untie-embeddings-and-output-weights */
    double init_method_std;          /* --init-method-std (0.02) */
    /* Mixture of experts (Megatron's --num-experts and --moe-* flags that
     * shape the weights or how the router uses them; the training-time
     * MoE settings are gl_moe_opts').  Every field below is ignored, left
     * out of the JSON, the flags and gl_arch_diff while num_experts is 0,
     * and a checkpoint's "config" without them reads as their defaults. */
    int num_experts;                 /* --num-experts (0: a dense model) */
    int moe_ffn_hidden_size;         /* --moe-ffn-hidden-size (0: ffn_hidden_size) */
    int moe_router_topk;             /* --moe-router-topk (2) */
    char moe_layer_freq[GL_MOE_FREQ_MAX]; /* --moe-layer-freq: "N" (layers i with i % N == 0
                                      * are MoE layers) or "[0,1,1,1]", one digit a layer
                                      * (gl_moe_layer_freq_parse writes this form) */
    int moe_shared_expert_intermediate_size; /* --moe-shared-expert-intermediate-size (0: none) */
    int moe_router_score_function;   /* --moe-router-score-function: gl_router_score (softmax) */
    int moe_router_pre_softmax;      /* --moe-router-pre-softmax: softmax over all experts
                                      * before top-k (Mixtral), else over the k chosen */
    double moe_router_topk_scaling_factor; /* --moe-router-topk-scaling-factor (0: none) */
    int moe_router_enable_expert_bias; /* --moe-router-enable-expert-bias: a per-expert bias
                                      * (a buffer, not trained) added to the scores for the
                                      * choice of experts only */
} gl_arch;

/* FP8 training (Megatron's --fp8-* flags).  Not part of gl_arch (a
 * checkpoint's weights do not depend on it, and a run may switch it on or
 * off across a resume), but, unlike the layout, it changes what the model
 * computes: every linear product inside the decoder layers, except those
 * of the layers kept in bf16, runs on FP8 operands with per-tensor or
 * per-block scales (src/model/fp8.c). */
typedef enum { GL_FP8_OFF = 0, GL_FP8_FMT_E4M3, GL_FP8_FMT_HYBRID } gl_fp8_fmt;
typedef enum {
    GL_FP8_DELAYED = 0,     /* scale from an amax history, updated after a step */
    GL_FP8_TENSORWISE,      /* scale from the tensor's own amax, each call */
    GL_FP8_BLOCKWISE,       /* power-of-two scales of 1x128 tiles and 128x128
                             * weight blocks, from each tile's own amax */
    GL_FP8_MXFP8            /* refused: needs Blackwell */
} gl_fp8_recipe;
typedef enum { GL_FP8_ALGO_MOST_RECENT = 0, GL_FP8_ALGO_MAX } gl_fp8_algo;

typedef struct gl_fp8_opts {
    gl_fp8_fmt format;               /* --fp8-format e4m3|hybrid (off) */
    gl_fp8_recipe recipe;            /* --fp8-recipe (delayed) */
    int margin;                      /* --fp8-margin (0) */
    int amax_history_len;            /* --fp8-amax-history-len (1) */
    gl_fp8_algo amax_compute_algo;   /* --fp8-amax-compute-algo (most_recent) */
    int first_last_layers_bf16;      /* --first-last-layers-bf16 */
    int num_layers_at_start_in_bf16; /* --num-layers-at-start-in-bf16 (1) */
    int num_layers_at_end_in_bf16;   /* --num-layers-at-end-in-bf16 (1) */
} gl_fp8_opts;

/* Megatron's defaults: FP8 off, delayed, margin 0, history 1, most_recent,
 * one layer at each end in bf16 when --first-last-layers-bf16 is given. */
void gl_fp8_defaults(gl_fp8_opts *o);

/* Whether global layer `layer` of a model of num_layers runs in FP8. */
int gl_fp8_layer_on(const gl_fp8_opts *o, int layer, int num_layers);

/* "delayed (hybrid, margin 0, history 1, most_recent)": the start-up
 * summary's words for o, "off" when FP8 is off. */
const char *gl_fp8_describe(const gl_fp8_opts *o, char *buf, size_t n);

/* The training-time settings of a mixture-of-experts model (Megatron's
 * --moe-* flags that change neither the weights nor their meaning: the
 * balancing losses, the router's precision, token dropping, the expert
 * bias's update).  Not part of gl_arch: like gl_fp8_opts, a run may
 * change them across a resume. */
typedef enum {
    GL_MOE_LB_AUX_LOSS = 0,         /* GShard/Switch's, over the micro-batch */
    GL_MOE_LB_SEQ_AUX_LOSS,         /* DeepSeek-V2's, per sequence */
    GL_MOE_LB_GLOBAL_AUX_LOSS,      /* over the global batch */
    GL_MOE_LB_NONE
} gl_moe_lb;
extern const char *const gl_moe_lb_names[];   /* Megatron's spellings, NULL-terminated */
typedef enum { GL_MOE_DTYPE_ACT = 0, GL_MOE_DTYPE_FP32, GL_MOE_DTYPE_FP64 } gl_moe_dtype;
/* --moe-token-drop-policy (ops.h's gl_moe_drop has the same values). */
typedef enum { GL_DROP_BY_PROBS = 0, GL_DROP_BY_POSITION } gl_drop_policy;

/* --moe-token-dispatcher-type: how tokens reach the experts of other
 * expert-parallel ranks (the same experts' products either way). */
typedef enum { GL_DISPATCH_ALLGATHER = 0, GL_DISPATCH_ALLTOALL } gl_moe_dispatcher;

typedef struct gl_moe_opts {
    gl_moe_lb load_balancing_type;   /* --moe-router-load-balancing-type (aux_loss) */
    double aux_loss_coeff;           /* --moe-aux-loss-coeff (0) */
    double z_loss_coeff;             /* --moe-z-loss-coeff (0: none) */
    gl_moe_dtype router_dtype;       /* --moe-router-dtype fp32|fp64 (the activations') */
    double capacity_factor;          /* --moe-expert-capacity-factor (0: no dropping) */
    gl_drop_policy token_drop_policy;/* --moe-token-drop-policy (probs) */
    int pad_expert_input_to_capacity;/* --moe-pad-expert-input-to-capacity */
    double router_bias_update_rate;  /* --moe-router-bias-update-rate (1e-3) */
    gl_moe_dispatcher token_dispatcher; /* --moe-token-dispatcher-type (allgather) */
    int shared_expert_overlap;       /* --moe-shared-expert-overlap: the shared
                                      * experts run during the alltoall dispatch */
} gl_moe_opts;

/* Megatron's defaults: aux_loss with coefficient 0, no z-loss, the
 * router in the activations' precision, no capacity (no dropping),
 * policy probs, no padding, bias update rate 1e-3. */
void gl_moe_defaults(gl_moe_opts *o);

/* Megatron's defaults (every size 0: not given): its GPT -- LayerNorm,
 * a GeLU MLP (4h), learned absolute positions, biases on the linear
 * layers, attention and hidden dropout 0.1, tied embeddings. */
void gl_arch_defaults(gl_arch *a);

/* Set the fields that make a the Llama form of Megatron's model, over
 * whatever they were: RMSNorm, SwiGLU, RoPE over every channel, no
 * biases, no QK norm, no dropout, no 1p.  The presets apply it, and a checkpoint's
 * "config" that lacks one of these keys (every checkpoint written before
 * they existed) reads it as this value. */
void gl_arch_llama(gl_arch *a);

/* Whether a is the Llama form in every field gl_arch_llama sets but the
 * dropout rates (a training choice, not the model's form). */
int gl_arch_is_llama(const gl_arch *a);

/* Whether a is the Qwen2 form: the Llama form (as gl_arch_is_llama) but
 * with biases on q, k and v (--add-qkv-bias). */
int gl_arch_is_qwen2(const gl_arch *a);

/* Whether a is the Qwen3 form: the Llama form (as gl_arch_is_llama) but
 * with --qk-layernorm. */
int gl_arch_is_qwen3(const gl_arch *a);

/* Whether a is GPT-2's form: LayerNorm (not 1p), GeLU (tanh), learned
 * positions, biases on every linear layer.  (Its shape -- query groups,
 * head size -- is not looked at.) */
int gl_arch_is_gpt2(const gl_arch *a);

/* The model's form in words for the start-up summary: "Llama-style
 * (RMSNorm, SwiGLU, RoPE, no biases, no dropout)" or "GPT-style (Megatron
 * defaults) (LayerNorm, GeLU, ...)"; out is always terminated. */
const char *gl_arch_describe(const gl_arch *a, char *out, size_t n);

/* Apply preset `name` (shape, RoPE, vocabulary, sequence, tying, and the
 * form: Llama's, Qwen2's, Qwen3's or GPT-2's, without dropout) over a;
 * -1 (a unchanged) when there is no such preset. */
int gl_arch_preset(gl_arch *a, const char *name);

/* "llama3-8b, llama3-70b, llama3.2-1b, qwen2.5-1.5b, qwen3-8b, gpt2, gpt2-medium, gpt2-xl
 * or tiny":
 * for messages and --help. */
extern const char gl_arch_preset_names[];

/* Fill the values whose default depends on others (0 means "derive"):
 * query groups = heads, head size = hidden / heads, the FFN width (4h
 * for GeLU; Megatron's SwiGLU rule, 2/3 of 4h rounded down to a multiple
 * of 64, with --swiglu), maximum positions = sequence length. */
void gl_arch_resolve(gl_arch *a);

/* Megatron's padding: the vocabulary rounded up to a multiple of
 * make_vocab_size_divisible_by x tp, so that each of tp ranks holds an
 * equal, aligned slice of the embedding. */
int gl_arch_pad_vocab(const gl_arch *a, int vocab, int tp);

/* Set vocab_size and padded_vocab_size for tp tensor-parallel ranks. */
void gl_arch_set_vocab(gl_arch *a, int vocab, int tp);

/* Query groups and head size, resolved (0 fields taken as their rule). */
int gl_arch_groups(const gl_arch *a);
int gl_arch_head_dim(const gl_arch *a);

/* Parse --moe-layer-freq's text as Megatron does: an integer N (layers
 * i with i % N == 0 are MoE layers), or, when it holds '[', a Python
 * list expression of 0s and 1s built from list literals, "+" (joining)
 * and "* N" (repeating), with parentheses: "[0,1,1,1]", "([0]+[1]*23)",
 * "[0]*1+[1]*45".  On success writes the canonical form ("N", or the
 * expanded list "[0,1,...]") into out (n bytes) and returns 0; a list
 * must have one entry per layer of num_layers (0: not checked).  -1 with
 * err saying what is wrong otherwise. */
int gl_moe_layer_freq_parse(const char *text, int num_layers, char *out, size_t n,
                            gl_error *err);

/* Whether layer l (0-based, global) of a is an MoE layer: never for a
 * dense model (num_experts 0), else as moe_layer_freq says ("" or a
 * malformed text: every layer). */
int gl_arch_is_moe_layer(const gl_arch *a, int l);

/* How many of a's layers are MoE layers. */
int gl_arch_num_moe_layers(const gl_arch *a);

/* The experts' FFN width: moe_ffn_hidden_size, else ffn_hidden_size. */
int gl_arch_moe_ffn(const gl_arch *a);

/* Parameters of the model, each logical tensor once (the padded
 * vocabulary's rows included, a tied head counted once, biases, norm
 * biases and learned positions when a has them). */
long gl_arch_num_params(const gl_arch *a);

/* The parameters one token uses, as Megatron counts "activated"
 * parameters: gl_arch_num_params with each MoE layer's routed experts
 * counted topk times instead of num_experts times (the router, shared
 * experts and every other tensor in full).  = gl_arch_num_params for a
 * dense model. */
long gl_arch_num_active_params(const gl_arch *a);

/* Model FLOPs per trained token, forward and backward, as
 * ../shared/reference/flops.md counts them:
 *
 *   gl_arch_layer_flops:     one dense decoder layer (its projections, MLP --
 *                            three matrices with SwiGLU, two with GeLU --
 *                            and causal attention over seq_length; as
 *                            Megatron, biases and norms are not counted);
 *   gl_arch_moe_layer_flops: one MoE layer: the same with the MLP term
 *                            for the topk routed experts of width
 *                            gl_arch_moe_ffn, the shared experts and the
 *                            router (6 h E), as flops.md counts them
 *                            (Megatron's code omits the router:
 *                            doc/flops-moe.md);
 *   gl_arch_head_flops:      the LM head, over the padded vocabulary
 *                            (padded for tp ranks when padded_vocab_size
 *                            is not set yet);
 *   gl_arch_flops_per_token: the model, its dense and MoE layers + the head.
 */
double gl_arch_layer_flops(const gl_arch *a);
double gl_arch_moe_layer_flops(const gl_arch *a);
double gl_arch_head_flops(const gl_arch *a, int tp);
double gl_arch_flops_per_token(const gl_arch *a, int tp);

/* Add every field to obj under its JSON key, in the table's order; sizes
 * that are 0 (not set) and an empty model name are left out. */
void gl_arch_to_json(const gl_arch *a, json_t *obj);

/* The gridlm-train flags that give a, written into out (n bytes, always
 * terminated when n > 0): "--num-layers 16 --hidden-size 2048 ...", every
 * field that has a flag of its own (not the preset name, not the padded
 * vocabulary) in the table's order, sizes that are 0 (not set) and flags
 * that are off left out, numbers with the fewest digits that read back
 * the same value.  Returns the length of the whole text (as snprintf:
 * out was too small when it is n or more). */
size_t gl_arch_to_flags(const gl_arch *a, char *out, size_t n);

/* Print every field as a "key=value" line under its JSON key, in the
 * table's order: numbers as gl_arch_to_flags writes them, booleans 1 or
 * 0, sizes that are 0 (not set) as 0, the preset name (maybe empty). */
void gl_arch_print_keys(const gl_arch *a, FILE *out);

/* Read the fields of obj over a (keys that are missing keep a's value,
 * except the model-form keys gl_arch_llama sets, which read as its
 * value: a checkpoint written before they existed is a Llama model);
 * -1 with err filled when a key holds a value of the wrong type, or one of
 * the sizes every checkpoint has (num_layers, hidden_size,
 * ffn_hidden_size, num_attention_heads, vocab_size) is missing: "its
 * \"config\" attribute lacks KEY". */
int gl_arch_from_json(gl_arch *a, json_t *obj, gl_error *err);

/* Compare the fields that shape the weights or what the model computes
 * with them (not the sequence length, the vocabulary's padding, the
 * dropout rates or the initialisation; the maximum positions only when
 * both learn positions; the RoPE scaling parameters only when both
 * scale).  Writes "--flag X there, Y here"
 * items joined by "; " into out and returns how many fields differ. */
int gl_arch_diff(const gl_arch *there, const gl_arch *here, char *out, size_t n);

#ifdef __cplusplus
}
#endif
#endif
