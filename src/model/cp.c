/*
 * cp.c: context parallelism -- each rank holds two chunks of every
 * sequence and attention sees the whole of it (model.h,
 * gl_model_set_cp).
 *
 * Everything but attention works token by token, so the rest of the
 * model runs unchanged on the rank's S = Sfull / CP rows (with their own
 * positions for RoPE and learned positions).  Attention of the rank's
 * queries against all keys is split into CP blocks, one per rank's K/V
 * chunks, with ops.h's block attention:
 *
 *   forward:  (o, lse) = merge over the blocks of attn_block_fwd(q, K_s, V_s)
 *   backward: delta = rowsum(dO o); for each block,
 *             dq += ..., dK_s, dV_s += ... (attn_block_bwd, from the final
 *             lse), and dK_s, dV_s summed over the ranks back to owner s.
 *
 * p2p (the ring): at step i rank r holds the K/V of rank (r - i) mod CP
 * and passes it to r + 1 while receiving the next from r - 1.  In the
 * backward the dK/dV accumulator of a block travels with the block: rank
 * r adds its share, passes it to r + 1, and after CP steps the last pass
 * lands it at its owner.  all_gather: every rank's K/V gathered at once,
 * dK/dV reduce-scattered back.  Running outputs and gradients are f32
 * until the end, so CP adds no act rounding between blocks.
 */
#include <config.h>

#include <math.h>
#include <string.h>

#include "base/log.h"
#include "model/model.h"

#define OPS (m->d->ops)

int gl_model_cp_position(int Sfull, int cp, int cp_rank, int t)
{
    int c = Sfull / (2 * cp);
    return t < c ? cp_rank * c + t : (2 * cp - 1 - cp_rank) * c + (t - c);
}

/* The positions of the S rows of CP rank r as block attention's runs. */
static gl_attn_pos cp_runs(const gl_model_dims *dm, int r)
{
    int c = dm->S / 2;
    gl_attn_pos p = { .split = c, .start = { (long)r * c, (long)(2 * dm->cp - 1 - r) * c } };
    return p;
}

void gl_model_set_cp(gl_model *m, gl_comm *cp, int cp_rank)
{
    const gl_model_dims *dm = &m->plan->dm;
    gl_dev *d = m->d;
    m->cp = dm->cp > 1 ? cp : NULL;
    m->cp_rank = dm->cp > 1 ? cp_rank : 0;
    if (dm->cp <= 1)
        return;
    if (!cp || gl_comm_size(cp) != dm->cp)
        gl_die("internal error: context-parallel group of %d ranks, expected %d",
               cp ? gl_comm_size(cp) : 0, dm->cp);
    if (!OPS->attn_block_fwd || !OPS->attn_merge || !OPS->attn_delta ||
        !OPS->attn_block_bwd || !OPS->convert_2d)
        gl_die_code(2, "--context-parallel-size %d: the %s device has no block attention "
                    "yet (ops.h's attn_block_fwd ...); run context parallelism on the CPU "
                    "(--device cpu) or use --context-parallel-size 1", dm->cp, OPS->name);
    if (dm->hidden_dropout > 0 || dm->attention_dropout > 0)
        gl_die_code(2, "--context-parallel-size %d with dropout: add --attention-dropout 0 "
                    "--hidden-dropout 0", dm->cp);
    if (dm->qk_norm)
        gl_die_code(2, "--context-parallel-size %d with --qk-layernorm is not built yet",
                    dm->cp);

    /* RoPE tables of this rank's rows: the rows of the full table at
     * their positions */
    int half = dm->D / 2;
    float *cf = gl_malloc((size_t)dm->Sfull * half * sizeof(float));
    float *sf = gl_malloc((size_t)dm->Sfull * half * sizeof(float));
    float *cl = gl_malloc((size_t)dm->S * half * sizeof(float));
    float *sl = gl_malloc((size_t)dm->S * half * sizeof(float));
    gl_rope_tables(&m->plan->arch, dm->D, dm->Sfull, cf, sf);
    for (int t = 0; t < dm->S; t++) {
        int pos = gl_model_cp_position(dm->Sfull, dm->cp, m->cp_rank, t);
        memcpy(cl + (size_t)t * half, cf + (size_t)pos * half, (size_t)half * sizeof(float));
        memcpy(sl + (size_t)t * half, sf + (size_t)pos * half, (size_t)half * sizeof(float));
    }
    d->ops->upload(d, m->cos, cl, (size_t)dm->S * half * sizeof(float));
    d->ops->upload(d, m->sin, sl, (size_t)dm->S * half * sizeof(float));
    /* learned positions of the own rows (model.c's, with the chunks'
     * positions) */
    int32_t *posv = gl_malloc((size_t)dm->nl * sizeof(int32_t));
    long row0 = dm->sp ? (long)dm->tp_rank * dm->nl : 0;
    for (int j = 0; j < dm->nl; j++)
        posv[j] = gl_model_cp_position(dm->Sfull, dm->cp, m->cp_rank,
                                       (int)((row0 + j) % dm->S));
    d->ops->upload(d, m->positions, posv, (size_t)dm->nl * sizeof(int32_t));
    d->ops->sync(d);
    free(posv);
    free(cf);
    free(sf);
    free(cl);
    free(sl);

    if (m->fwd_only)
        gl_die_code(2, "--context-parallel-size %d: evaluation has no context parallelism "
                    "yet; use 1", dm->cp);
    size_t n = (size_t)dm->n, kvw = 2 * (size_t)dm->hkv * dm->D, qw = (size_t)dm->hq * dm->D;
    size_t many = dm->cp_all_gather ? (size_t)dm->cp : 1;
    m->kv[0] = d->ops->alloc(d, many * n * kvw * d->act_bytes);
    m->dkv[0] = d->ops->alloc(d, many * n * kvw * sizeof(float));
    if (!dm->cp_all_gather) {
        m->kv[1] = d->ops->alloc(d, n * kvw * d->act_bytes);
        m->dkv[1] = d->ops->alloc(d, n * kvw * sizeof(float));
    } else {
        m->dkv[1] = d->ops->alloc(d, n * kvw * sizeof(float));   /* the owner's sum */
    }
    m->o_acc = d->ops->alloc(d, n * qw * sizeof(float));
    m->o_blk = d->ops->alloc(d, n * qw * sizeof(float));
    m->dq_acc = d->ops->alloc(d, n * qw * sizeof(float));
    m->lse_blk = d->ops->alloc(d, (size_t)dm->B * dm->hq * dm->S * sizeof(float));
    m->delta = d->ops->alloc(d, (size_t)dm->B * dm->hq * dm->S * sizeof(float));
    gl_info0("context parallelism: %d ranks, %s; rank 0 holds positions [0, %d) and "
             "[%d, %d) of each sequence", dm->cp,
             dm->cp_all_gather ? "K/V all-gathered" : "K/V passed round the ring (p2p)",
             dm->S / 2, dm->Sfull - dm->S / 2, dm->Sfull);
}

/* Pass buf (count elements) to the next rank of the ring and receive the
 * previous rank's into into. */
static void ring_pass(gl_model *m, const void *buf, void *into, size_t count, gl_dtype t)
{
    int cp = m->plan->dm.cp, r = m->cp_rank;
    gl_comm_group_start();
    gl_send(m->cp, buf, count, t, (r + 1) % cp, m->d->stream);
    gl_recv(m->cp, into, count, t, (r + cp - 1) % cp, m->d->stream);
    gl_comm_group_end();
}

/* This rank's K/V, [n, 2 hkv D] from the fused QKV rows, into kv. */
static void own_kv(gl_model *m, void *kv, const void *qkv)
{
    const gl_model_dims *dm = &m->plan->dm;
    gl_dev *d = m->d;
    int qw = dm->hq * dm->D, kvw = 2 * dm->hkv * dm->D;
    OPS->convert_2d(d, kv, d->act, kvw, (const char *)qkv + (size_t)qw * d->act_bytes,
                    d->act, dm->qkvw, dm->n, kvw);
}

/* The K/V block of CP rank s: in m->kv[0] at step i of the ring, or rank
 * s's part of the gathered buffer. */
static void *kv_of(gl_model *m, int s)
{
    const gl_model_dims *dm = &m->plan->dm;
    size_t blk = (size_t)dm->n * 2 * dm->hkv * dm->D;
    return dm->cp_all_gather ? (char *)m->kv[0] + (size_t)s * blk * m->d->act_bytes
                             : m->kv[0];
}

void gl_model_cp_attn_fwd(gl_model *m, void *o, float *lse, const void *qkv)
{
    const gl_model_dims *dm = &m->plan->dm;
    gl_dev *d = m->d;
    int cp = dm->cp, r = m->cp_rank, D = dm->D;
    int qw = dm->hq * D, kw = dm->hkv * D;
    size_t blk = (size_t)dm->n * 2 * kw;
    float scale = (float)(1.0 / sqrt((double)D));
    gl_attn_pos qp = cp_runs(dm, r);

    if (dm->cp_all_gather) {
        own_kv(m, kv_of(m, r), qkv);
        gl_all_gather(m->cp, kv_of(m, r), m->kv[0], blk, d->act, d->stream);
    } else {
        own_kv(m, m->kv[0], qkv);
    }
    for (int step = 0; step < cp; step++) {
        int s = (r - step + cp) % cp;          /* whose K/V this block is */
        void *kv = kv_of(m, s);
        gl_attn_pos kp = cp_runs(dm, s);
        OPS->attn_block_fwd(d, m->o_blk, qw, m->lse_blk, qkv, dm->qkvw, kv, 2 * kw,
                            (char *)kv + (size_t)kw * d->act_bytes, 2 * kw, dm->B, dm->S,
                            dm->S, dm->hq, dm->hkv, D, scale, &qp, &kp, GL_ATTN_CAUSAL);
        OPS->attn_merge(d, m->o_acc, lse, m->o_blk, m->lse_blk, dm->B, dm->S, dm->hq, D,
                        step == 0);
        if (!dm->cp_all_gather && step + 1 < cp) {
            ring_pass(m, m->kv[0], m->kv[1], blk, d->act);
            void *t = m->kv[0];
            m->kv[0] = m->kv[1];
            m->kv[1] = t;
        }
    }
    OPS->convert_2d(d, o, d->act, qw, m->o_acc, GL_DT_F32, qw, dm->n, qw);
}

void gl_model_cp_attn_bwd(gl_model *m, void *dqkv, const void *d_o, const void *o,
                          const float *lse, const void *qkv)
{
    const gl_model_dims *dm = &m->plan->dm;
    gl_dev *d = m->d;
    int cp = dm->cp, r = m->cp_rank, D = dm->D;
    int qw = dm->hq * D, kw = dm->hkv * D;
    size_t blk = (size_t)dm->n * 2 * kw;
    float scale = (float)(1.0 / sqrt((double)D));
    gl_attn_pos qp = cp_runs(dm, r);

    OPS->attn_delta(d, m->delta, d_o, qw, o, qw, dm->B, dm->S, dm->hq, D);
    OPS->zero(d, m->dq_acc, (size_t)dm->n * qw * sizeof(float));
    if (dm->cp_all_gather) {
        own_kv(m, kv_of(m, r), qkv);
        gl_all_gather(m->cp, kv_of(m, r), m->kv[0], blk, d->act, d->stream);
        OPS->zero(d, m->dkv[0], (size_t)cp * blk * sizeof(float));
    } else {
        own_kv(m, m->kv[0], qkv);
        OPS->zero(d, m->dkv[0], blk * sizeof(float));
    }
    for (int step = 0; step < cp; step++) {
        int s = (r - step + cp) % cp;
        void *kv = kv_of(m, s);
        float *dkv = dm->cp_all_gather ? m->dkv[0] + (size_t)s * blk : m->dkv[0];
        gl_attn_pos kp = cp_runs(dm, s);
        OPS->attn_block_bwd(d, m->dq_acc, qw, dkv, dkv + kw, 2 * kw, d_o, qw, lse, m->delta,
                            qkv, dm->qkvw, kv, 2 * kw, (char *)kv + (size_t)kw * d->act_bytes,
                            2 * kw, dm->B, dm->S, dm->S, dm->hq, dm->hkv, D, scale, &qp, &kp,
                            GL_ATTN_CAUSAL);
        if (dm->cp_all_gather)
            continue;
        /* the K/V on to the next step (not after the last), the
         * accumulator after them (after the last step too: that pass
         * brings each rank its own) */
        if (step + 1 < cp) {
            ring_pass(m, m->kv[0], m->kv[1], blk, d->act);
            void *t = m->kv[0];
            m->kv[0] = m->kv[1];
            m->kv[1] = t;
        }
        ring_pass(m, m->dkv[0], m->dkv[1], blk, GL_DT_F32);
        float *t = m->dkv[0];
        m->dkv[0] = m->dkv[1];
        m->dkv[1] = t;
    }
    float *own = m->dkv[0];
    if (dm->cp_all_gather) {
        gl_reduce_scatter(m->cp, m->dkv[0], m->dkv[1], blk, GL_DT_F32, GL_OP_SUM, d->stream);
        own = m->dkv[1];
    }
    OPS->convert_2d(d, dqkv, d->act, dm->qkvw, m->dq_acc, GL_DT_F32, qw, dm->n, qw);
    OPS->convert_2d(d, (char *)dqkv + (size_t)qw * d->act_bytes, d->act, dm->qkvw, own,
                    GL_DT_F32, 2 * kw, dm->n, 2 * kw);
}
