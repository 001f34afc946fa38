/*
 * layer.h: helpers of the layer passes (layer.c) and of the
 * mixture-of-experts block (moe.c), for the model room's inside only
 * (model.h is the room's contract): where an activation lies in a buffer
 * of the compute dtype, and the two callbacks a layer pass makes to the
 * trainer -- gradients complete (grad_ready), weights needed
 * (weights_needed) -- each called the one way model.h states.
 */
#ifndef GL_MODEL_LAYER_H
#define GL_MODEL_LAYER_H

#include "model/model.h"

/* base advanced by elems activations of the model's compute dtype. */
static inline void *gl_act_at(const gl_model *m, const void *base, size_t elems)
{
    return (char *)base + elems * m->d->act_bytes;
}

/* Tell the gradient reducer that the parameters starting in
 * [off, off + count) are complete (model.h: grad_ready). */
static inline void gl_grads_ready(gl_model *m, size_t off, size_t count)
{
    if (m->grad_final && m->grad_ready)
        m->grad_ready(m->grad_ready_arg, off, off + count);
}

/* Ask for the weights in [off, off + count) before a forward reads them
 * (model.h: weights_needed). */
static inline void gl_need_weights(gl_model *m, size_t off, size_t count)
{
    if (m->weights_needed)
        m->weights_needed(m->weights_needed_arg, off, off + count);
}

#endif
