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

#endif
