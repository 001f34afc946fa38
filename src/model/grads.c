/*
 * grads.c: how an iteration's gradients start (model.h, "gradient
 * writes").
 *
 * The buffer holds fp32 gradients for every parameter of the rank.  Some
 * tensors' gradients are made piece by piece by kernels that add into
 * them (RMSNorm's weight, a bias, the embedding's rows); these start
 * each iteration at zero.  The others' gradients are whole products,
 * dW = dY^T X, one per micro-batch (an expert's one per micro-batch in
 * which it has rows; moe_gemm_wgrad writes zeros for an expert without
 * any): the first product of the iteration writes with beta 0 and the
 * later ones add.  For a Llama model those are nearly all of the
 * buffer, so a step saves a pass writing 4 bytes a parameter and the
 * first product's read of as many.
 *
 * Which tensors are product-written is a fact of the passes (layer.c,
 * moe.c, fp8.c), listed once in product_written() below; a tied
 * embedding is not, as its gradient also comes from the embedding's
 * backward, so the head's product adds into it.  The zeroed ranges are
 * the complement of the product-written ones in [0, nflat): the padding
 * between tensors is zeroed too, as the optimizer's passes run over it.
 */
#include <config.h>

#include "base/log.h"
#include "model/model.h"

/* Whether every gradient contribution to a tensor of this id is a
 * product over its whole range (see the top). */
static int product_written(gl_tensor_id id)
{
    switch (id) {
    case GL_T_WQ: case GL_T_WK: case GL_T_WV: case GL_T_WO:
    case GL_T_W_GATE: case GL_T_W_UP: case GL_T_W_DOWN:
    case GL_T_ROUTER:
    case GL_T_EXPERT_W_GATE: case GL_T_EXPERT_W_UP: case GL_T_EXPERT_W_DOWN:
    case GL_T_SHARED_W_GATE: case GL_T_SHARED_W_UP: case GL_T_SHARED_W_DOWN:
    case GL_T_LM_HEAD:
        return 1;
    default:
        return 0;
    }
}

/* The ranges to zero, and the flags. */
static void setup(gl_model *m)
{
    const gl_model_plan *p = m->plan;
    int n = p->nparams;
    m->gfresh = gl_calloc((size_t)(n ? n : 1), 1);
    m->gzero = gl_malloc((size_t)(2 * n + 2) * sizeof *m->gzero);
    size_t at = 0;                      /* start of the gap to zero */
    for (int k = 0; k < n; k++) {
        const gl_param *q = &p->param[k];
        if (!product_written(q->id))
            continue;
        if (q->offset > at) {
            m->gzero[2 * m->ngzero] = at;
            m->gzero[2 * m->ngzero + 1] = q->offset;
            m->ngzero++;
        }
        at = q->offset + q->count;
    }
    if (p->nflat > at) {
        m->gzero[2 * m->ngzero] = at;
        m->gzero[2 * m->ngzero + 1] = p->nflat;
        m->ngzero++;
    }
}

void gl_model_grads_begin(gl_model *m)
{
    const gl_model_plan *p = m->plan;
    if (!m->gfresh)
        setup(m);
    for (int i = 0; i < m->ngzero; i++) {
        size_t a = m->gzero[2 * i], b = m->gzero[2 * i + 1];
        m->d->ops->zero(m->d, m->g + a, (b - a) * sizeof(float));
    }
    for (int i = 0; i < p->nparams; i++)
        m->gfresh[i] = (uint8_t)product_written(p->param[i].id);
}

float gl_model_grad_beta(gl_model *m, size_t off, size_t count)
{
    if (!m->gfresh)
        return 1.0f;
    const gl_model_plan *p = m->plan;
    int fresh = -1;
    for (int k = gl_model_plan_first_at(p, off);
         k < p->nparams && p->param[k].offset < off + count; k++) {
        if (fresh >= 0 && m->gfresh[k] != fresh)
            gl_die("internal error: a product writes the gradients of %s and of %s, one "
                   "already written in this iteration and one not", p->param[k].name,
                   p->param[k - 1].name);
        fresh = m->gfresh[k];
        m->gfresh[k] = 0;
    }
    return fresh == 1 ? 0.0f : 1.0f;
}

void gl_model_grads_end(const gl_model *m)
{
    if (!m->gfresh)
        return;
    for (int i = 0; i < m->plan->nparams; i++)
        if (m->gfresh[i])
            gl_die("internal error: no product wrote the gradient of %s in this iteration; "
                   "it would hold the last iteration's", m->plan->param[i].name);
}
