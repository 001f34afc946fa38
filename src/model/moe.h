/*
 * moe.h: the mixture-of-experts MLP of a decoder layer (moe.c), for
 * layer.c and model.c only (the model room's inside; model.h is the
 * room's contract).
 *
 * The layer's MoE block replaces the dense MLP between the MLP norm and
 * the row-parallel reduction:
 *
 *   mg [n, h] (gathered under SP)  ->  gl_moe_fwd  ->  y [n, h], partial
 *                                      sums over TP (reduced by layer.c
 *                                      as the dense MLP's down output)
 *
 * Tensor parallelism splits every expert's F (and the shared experts'
 * width) as the dense MLP's; every TP rank routes all n tokens with the
 * replicated router, so every rank makes the same routing, and the
 * expert outputs, combined by the (linear) unpermutation, are partial
 * sums like the dense MLP's.  The router's own terms -- its weight
 * gradient, its share of the input gradient, the auxiliary and z losses
 * -- are taken on the rank's own rows (its nl rows under sequence
 * parallelism, all n rows without), so that its weight gradient is a
 * partial sum over TP exactly when the other replicated weights' are.
 * Under expert parallelism with whole experts (ETP 1 < TP) each TP rank
 * dispatches only its share of the tokens, and y is whole on the share's
 * rows and zero on the others': still a partial sum over TP (moe.c).
 */
#ifndef GL_MODEL_MOE_H
#define GL_MODEL_MOE_H

#include "model/model.h"

/* End (exclusive) of the TP-split range of MoE layer lo (its experts'
 * and shared experts' matrices; under expert parallelism without the
 * routed experts, which are in region 3), for the weights_needed
 * callback. */
size_t gl_moe_split_end(const gl_model *m, const gl_layer_offs *lo);

/* Where MoE layer lo's stacked w_up of its local experts is in the flat
 * buffer: after their w_gate (SwiGLU), or at egu. */
size_t gl_moe_up_off(const gl_model *m, const gl_layer_offs *lo);

/* Ask for the layer's MoE weights (router, expert bias; the routed
 * experts under expert parallelism). */
void gl_moe_need(gl_model *m, const gl_layer_offs *lo);

/* Forward of global layer `layer`'s MoE block on mg [n, h]: y [n, h]
 * (partial over TP) and A->moe kept for the backward.  Adds the
 * micro-batch's statistics to m->moe_stats unless a forward-only pass
 * or a recomputation runs. */
void gl_moe_fwd(gl_model *m, const gl_mb *mb, int layer, const gl_layer_offs *lo,
                gl_layer_acts *A, const void *mg, void *y);

/* Backward from dz [n, h], the full gradient of the block's output (the
 * same on every TP rank): the weight gradients added, dmg [n, h] the
 * gradient of mg without the router's share, partial over TP like the
 * dense MLP's (the caller reduces it, then calls gl_moe_router_dx). */
void gl_moe_bwd(gl_model *m, const gl_mb *mb, int layer, const gl_layer_offs *lo,
                gl_layer_acts *A, const void *mg, const void *dz, void *dmg);

/* own [nl, h] (the reduced gradient of mg's own rows) += the router's
 * share, from the dlogits gl_moe_bwd left (their own rows, in act). */
void gl_moe_router_dx(gl_model *m, const gl_layer_offs *lo, void *own);

/* Free what gl_moe_fwd allocated for A, and the model's MoE scratch. */
void gl_moe_acts_free(gl_model *m, gl_layer_acts *A);
void gl_moe_free(gl_model *m);

#endif
