/*
 * model-cfg.h: what a model test builds a model from -- a gl_arch and a
 * gl_layout, Megatron's defaults but the Llama form of the model
 * (gl_arch_llama: RMSNorm, SwiGLU, RoPE, no biases, no dropout), which the
 * model tests were written for -- and no training configuration.
 */
#ifndef GL_T_MODEL_CFG_H
#define GL_T_MODEL_CFG_H

#include "arch/arch.h"
#include "model/layout.h"

typedef struct {
    gl_arch arch;
    gl_layout layout;
} model_cfg;

static inline void model_cfg_defaults(model_cfg *c)
{
    gl_arch_defaults(&c->arch);
    gl_arch_llama(&c->arch);
    gl_layout_defaults(&c->layout);
}

/* The micro model the gradient tests (t/model-grad.c, t/model-moe.c)
 * start from: model_cfg_defaults, then 2 layers of width 16, 4 query
 * heads in 2 groups, FFN 20, 8 tokens by 2 samples, a vocabulary of 37
 * padded to 48 (11 padding rows, never predicted), weights drawn large
 * enough (std 0.3) for a curved loss.  Each test sets the rest. */
static inline void model_cfg_micro(model_cfg *c)
{
    model_cfg_defaults(c);
    c->arch.num_layers = 2;
    c->arch.hidden_size = 16;
    c->arch.num_attention_heads = 4;
    c->arch.num_query_groups = 2;
    c->arch.ffn_hidden_size = 20;
    c->arch.seq_length = 8;
    c->layout.micro_batch_size = 2;
    c->arch.vocab_size = 37;
    c->arch.padded_vocab_size = 48;
    c->arch.norm_epsilon = 1e-5;
    c->arch.init_method_std = 0.3;
}

#endif
