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
 *
 * The ring's exchanges overlap the blocks' computation.  At step i the
 * pass of the K/V that step i + 1 needs is posted (ring_post: on the
 * device's point-to-point stream, after what the compute stream has
 * enqueued; MPI_Isend/Irecv on the CPU), block i is computed on the
 * K/V at hand, and only then does the compute stream wait for the pass
 * (ring_wait); the two K/V buffers swap roles.  In the backward a block's
 * dK/dV go to a buffer of their own (dkv_blk) while the accumulator of
 * that block travels from r - 1; after the wait it is added (add_f32)
 * and sent on, travelling during step i + 1.  Rank s's own block starts
 * its accumulator (step 0), so the accumulator of block s is
 * ((g_s + g_s+1) + g_s+2) ..., each g a block's dK/dV alone, in ring
 * order.  The order of blocks, merges and sums is fixed by the ring, not
 * by when data arrives: with GRIDLM_CP_RING_OVERLAP=0 each pass is
 * waited for at once (cp_ring_serial) and the results are the same bits.
 *
 * a2a (Ulysses): instead of passing keys around, trade sequence for
 * heads.  An all-to-all turns each rank's Q, K, V [own 2 chunks, all
 * local heads] into [the whole sequence in position order, heads / CP]
 * (rank g takes head group g: query heads g hq/CP ..., K/V heads
 * g hkv/CP ..., which keeps GQA's query-to-K/V mapping), plain attn_fwd
 * runs over the full causal sequence, and the reverse all-to-all brings
 * the output back to [own chunks, all heads].  The lse kept for the
 * backward is that of the rank's head group over the full sequence,
 * [B, hq/CP, Sfull] (as many floats as [B, hq, S]).  The backward redoes
 * the Q/K/V exchange, exchanges dO and O the same way, runs attn_bwd and
 * sends dQ, dK, dV back by the reverse all-to-all.
 *
 * The attention's inputs are those of attn_fwd (gl_attn_in): q and k as
 * the QK norm (--qk-layernorm) and RoPE left them on the own rows, v from
 * the fused rows.  Attention dropout keeps the whole sequence's masks:
 * the block ops key each probability by its query's and key's positions
 * (the runs above) in the full sequence, and Ulysses' attn_fwd, which
 * sees the full sequence already, by the global index of its heads.
 */
#include <config.h>

#include <math.h>
#include <stdlib.h>
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

/* Ulysses' scratch, four act buffers of n rows as wide as the widest
 * exchange (Q/K/V, or dO with O): kv[0] the send side, kv[1] the
 * receive side, o_acc and o_blk the full-sequence views (as bytes: the
 * fields' f32 type does not apply here), dq_acc the full-sequence
 * gradients. */
static void cp_a2a_alloc(gl_model *m)
{
    const gl_model_dims *dm = &m->plan->dm;
    gl_dev *d = m->d;
    if (dm->hq % dm->cp || dm->hkv % dm->cp)
        gl_die_code(2, "--cp-comm-type a2a: the %d local query heads and %d local key/value "
                    "heads must be multiples of --context-parallel-size %d", dm->hq, dm->hkv,
                    dm->cp);
    if (!OPS->convert_2d)
        gl_die_code(2, "--cp-comm-type a2a: the %s device has no strided copy (ops.h's "
                    "convert_2d) yet; use --cp-comm-type p2p or all_gather", OPS->name);
    int wide = dm->hq + 2 * dm->hkv > 2 * dm->hq ? dm->hq + 2 * dm->hkv : 2 * dm->hq;
    size_t bytes = (size_t)dm->n * wide * dm->D * d->act_bytes;
    m->kv[0] = d->ops->alloc(d, bytes);
    m->kv[1] = d->ops->alloc(d, bytes);
    m->o_acc = d->ops->alloc(d, bytes);
    m->o_blk = d->ops->alloc(d, bytes);
    m->dq_acc = d->ops->alloc(d, bytes);
    gl_info0("context parallelism: %d ranks, Ulysses all-to-all (%d query heads, %d K/V "
             "heads per rank over the whole sequence); rank 0 holds positions [0, %d) and "
             "[%d, %d) of each sequence", dm->cp, dm->hq / dm->cp, dm->hkv / dm->cp,
             dm->S / 2, dm->Sfull - dm->S / 2, dm->Sfull);
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
    if (!dm->cp_a2a && (!OPS->attn_block_fwd || !OPS->attn_merge || !OPS->attn_delta ||
                        !OPS->attn_block_bwd || !OPS->convert_2d || !OPS->add_f32))
        gl_die_code(2, "--context-parallel-size %d: the %s device has no block attention "
                    "yet (ops.h's attn_block_fwd ...); run context parallelism on the CPU "
                    "(--device cpu) or use --context-parallel-size 1", dm->cp, OPS->name);

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
    if (dm->cp_a2a) {
        cp_a2a_alloc(m);
        return;
    }
    size_t n = (size_t)dm->n, kvw = 2 * (size_t)dm->hkv * dm->D, qw = (size_t)dm->hq * dm->D;
    size_t many = dm->cp_all_gather ? (size_t)dm->cp : 1;
    m->kv[0] = d->ops->alloc(d, many * n * kvw * d->act_bytes);
    m->dkv[0] = d->ops->alloc(d, many * n * kvw * sizeof(float));
    if (!dm->cp_all_gather) {
        const char *ov = getenv("GRIDLM_CP_RING_OVERLAP");
        m->cp_ring_serial = ov && !strcmp(ov, "0");
        m->kv[1] = d->ops->alloc(d, n * kvw * d->act_bytes);
        m->dkv[1] = d->ops->alloc(d, n * kvw * sizeof(float));
        m->dkv_blk = d->ops->alloc(d, n * kvw * sizeof(float));
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
             dm->cp_all_gather ? "K/V all-gathered"
             : m->cp_ring_serial ? "K/V passed round the ring (p2p), each pass waited for "
                                   "before the block (GRIDLM_CP_RING_OVERLAP=0)"
                                 : "K/V passed round the ring (p2p) while the blocks compute",
             dm->S / 2, dm->Sfull - dm->S / 2, dm->Sfull);
}

/* Wait for every pass posted: the compute stream's work from now on
 * starts after them (and on the MPI back end the host returns when they
 * are done). */
static void ring_wait(gl_model *m)
{
    gl_comm_wait_posted();
    OPS->compute_wait_p2p(m->d);
}

/* Post the pass of buf (count elements) to the next rank of the ring
 * and the receipt of the previous rank's into into, without waiting: on
 * the point-to-point stream, after everything the compute stream has
 * enqueued (buf written, into's last reader done).  Until ring_wait, buf
 * must not be written nor into touched.  The pipeline's exchanges share
 * that stream; in the order they are enqueued, as on the CPU. */
static void ring_post(gl_model *m, const void *buf, void *into, size_t count, gl_dtype t)
{
    gl_dev *d = m->d;
    int cp = m->plan->dm.cp, r = m->cp_rank;
    OPS->p2p_wait_compute(d);
    gl_comm_group_start();
    gl_send(m->cp, buf, count, t, (r + 1) % cp, d->p2p_stream);
    gl_recv(m->cp, into, count, t, (r + cp - 1) % cp, d->p2p_stream);
    gl_comm_group_post();
    if (m->cp_ring_serial)
        ring_wait(m);
}

static void swap_ptr(void **a, void **b)
{
    void *t = *a;
    *a = *b;
    *b = t;
}

/* This rank's K/V, [n, 2 hkv D] (each row k then v), into kv: k from
 * the k heads of the q/k rows, v from v's rows. */
static void own_kv(gl_model *m, void *kv, const gl_attn_in *in)
{
    const gl_model_dims *dm = &m->plan->dm;
    gl_dev *d = m->d;
    int qw = dm->hq * dm->D, kw = dm->hkv * dm->D;
    OPS->convert_2d(d, kv, d->act, 2 * kw, (const char *)in->qk + (size_t)qw * d->act_bytes,
                    d->act, in->ldqk, dm->n, kw);
    OPS->convert_2d(d, (char *)kv + (size_t)kw * d->act_bytes, d->act, 2 * kw, in->v, d->act,
                    in->ldv, dm->n, kw);
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

/* ---- a2a (Ulysses) ----
 *
 * Rows are [B, S] on a rank ([B, Sfull] for the full sequence), each row
 * a width w of act elements.  An exchange in one direction packs member
 * j's part of every local row into send block j, gl_all_to_all moves
 * block j to member j, and the received block s (member s's rows) goes
 * to its chunks' positions of the full sequence.  The other direction
 * does the opposite.  All moves are device copies (convert_2d act to
 * act), so it runs wherever the ops do. */

/* One column range of a head-split exchange: member j's part of a local
 * row is the cols elements at src + j * cols (row stride ld) and goes to
 * column off of the packed row (width w). */
typedef struct {
    const void *src;
    void *dst;
    int ld, cols, off;
} a2a_part;

/* Head split: send block j = [n rows, w] from the parts' columns of head
 * group j (local rows to per-member blocks, or back when back is set:
 * per-member blocks into the parts' columns). */
static void a2a_heads(gl_model *m, void *blocks, int w, const a2a_part *part, int nparts,
                      int back)
{
    const gl_model_dims *dm = &m->plan->dm;
    gl_dev *d = m->d;
    size_t ab = d->act_bytes;
    for (int j = 0; j < dm->cp; j++) {
        char *blk = (char *)blocks + (size_t)j * dm->n * w * ab;
        for (int i = 0; i < nparts; i++) {
            const a2a_part *p = &part[i];
            size_t at = (size_t)j * p->cols * ab;
            if (back)
                OPS->convert_2d(d, (char *)p->dst + at, d->act, p->ld,
                                blk + (size_t)p->off * ab, d->act, w, dm->n, p->cols);
            else
                OPS->convert_2d(d, blk + (size_t)p->off * ab, d->act, w,
                                (const char *)p->src + at, d->act, p->ld, dm->n, p->cols);
        }
    }
}

/* Sequence split: block s = member s's rows [B, S, w] of full
 * [B, Sfull, w] (to_full: blocks into the full sequence; else the full
 * sequence into blocks).  Chunk k of member s, for all B sequences at
 * once, is B rows of c w elements. */
static void a2a_seq(gl_model *m, void *full, void *blocks, int w, int to_full)
{
    const gl_model_dims *dm = &m->plan->dm;
    gl_dev *d = m->d;
    size_t ab = d->act_bytes;
    /* strides and chunk widths in long: Sfull w may pass 2^31 elements
     * (ops.h: convert_2d's limits) */
    long c = dm->S / 2, cw = c * w, ldfull = (long)dm->Sfull * w, ldblk = (long)dm->S * w;
    for (int s = 0; s < dm->cp; s++) {
        gl_attn_pos p = cp_runs(dm, s);
        for (int k = 0; k < 2; k++) {
            char *b = (char *)blocks + ((size_t)s * dm->n * w + (size_t)k * cw) * ab;
            char *f = (char *)full + (size_t)p.start[k] * w * ab;
            if (to_full)
                OPS->convert_2d(d, f, d->act, ldfull, b, d->act, ldblk, dm->B, cw);
            else
                OPS->convert_2d(d, b, d->act, ldblk, f, d->act, ldfull, dm->B, cw);
        }
    }
}

/* Local rows (parts) -> full sequence of this rank's head group in full
 * ([B, Sfull, w]). */
static void a2a_gather(gl_model *m, void *full, int w, const a2a_part *part, int nparts)
{
    gl_dev *d = m->d;
    a2a_heads(m, m->kv[0], w, part, nparts, 0);
    gl_all_to_all(m->cp, m->kv[0], m->kv[1], (size_t)m->plan->dm.n * w, d->act, d->stream);
    a2a_seq(m, full, m->kv[1], w, 1);
}

/* The reverse: full [B, Sfull, w] of this rank's head group -> the
 * parts' columns of the local rows. */
static void a2a_scatter(gl_model *m, const void *full, int w, const a2a_part *part,
                        int nparts)
{
    gl_dev *d = m->d;
    a2a_seq(m, (void *)full, m->kv[0], w, 0);
    gl_all_to_all(m->cp, m->kv[0], m->kv[1], (size_t)m->plan->dm.n * w, d->act, d->stream);
    a2a_heads(m, m->kv[1], w, part, nparts, 1);
}

/* Q, K, V of the layer's rows (in) -> o_acc as [B, Sfull, (hq + 2 hkv)
 * / CP heads of D]; returns that width. */
static int a2a_qkv(gl_model *m, const gl_attn_in *in)
{
    const gl_model_dims *dm = &m->plan->dm;
    size_t ab = m->d->act_bytes;
    int D = dm->D, cp = dm->cp, qc = dm->hq / cp * D, kc = dm->hkv / cp * D;
    const char *b = in->qk;
    a2a_part part[3] = {
        { b, NULL, in->ldqk, qc, 0 },
        { b + (size_t)dm->hq * D * ab, NULL, in->ldqk, kc, qc },
        { in->v, NULL, in->ldv, kc, qc + kc },
    };
    a2a_gather(m, m->o_acc, qc + 2 * kc, part, 3);
    return qc + 2 * kc;
}

/* The dropout of the rank's head group (Ulysses): its query heads are
 * cp_rank hq / CP .. of the rank's hq, over the whole sequence. */
static const gl_attn_dropout *a2a_dp(const gl_model *m, const gl_attn_dropout *dp,
                                     gl_attn_dropout *own)
{
    if (!dp)
        return NULL;
    *own = *dp;
    own->h0 += (long)m->cp_rank * (m->plan->dm.hq / m->plan->dm.cp);
    return own;
}

static void a2a_attn_fwd(gl_model *m, void *o, float *lse, const gl_attn_in *in,
                         const gl_attn_dropout *dp)
{
    gl_attn_dropout own;
    const gl_model_dims *dm = &m->plan->dm;
    size_t ab = m->d->act_bytes;
    int D = dm->D, cp = dm->cp, qc = dm->hq / cp * D, kc = dm->hkv / cp * D;
    int w = a2a_qkv(m, in);
    char *f = (char *)m->o_acc;
    OPS->attn_fwd(m->d, m->o_blk, qc, lse, f, w, f + (size_t)qc * ab, w,
                  f + (size_t)(qc + kc) * ab, w, dm->B, dm->Sfull, dm->hq / cp, dm->hkv / cp,
                  D, (float)(1.0 / sqrt((double)D)), a2a_dp(m, dp, &own));
    a2a_part back = { NULL, o, dm->hq * D, qc, 0 };
    a2a_scatter(m, m->o_blk, qc, &back, 1);
}

static void a2a_attn_bwd(gl_model *m, void *dqkv, const void *d_o, const void *o,
                         const float *lse, const gl_attn_in *in,
                         const gl_attn_dropout *dp)
{
    gl_attn_dropout own;
    const gl_model_dims *dm = &m->plan->dm;
    size_t ab = m->d->act_bytes;
    int D = dm->D, cp = dm->cp, qw = dm->hq * D, qc = dm->hq / cp * D, kc = dm->hkv / cp * D;
    int w = a2a_qkv(m, in);
    /* dO and O side by side: [B, Sfull, dO | O] of the head group */
    a2a_part od[2] = { { d_o, NULL, qw, qc, 0 }, { o, NULL, qw, qc, qc } };
    a2a_gather(m, m->o_blk, 2 * qc, od, 2);
    char *f = (char *)m->o_acc, *g = (char *)m->dq_acc, *e = (char *)m->o_blk;
    OPS->attn_bwd(m->d, g, g + (size_t)qc * ab, g + (size_t)(qc + kc) * ab, w,
                  e, 2 * qc, e + (size_t)qc * ab, 2 * qc, lse,
                  f, w, f + (size_t)qc * ab, w, f + (size_t)(qc + kc) * ab, w,
                  dm->B, dm->Sfull, dm->hq / cp, dm->hkv / cp, D,
                  (float)(1.0 / sqrt((double)D)), a2a_dp(m, dp, &own));
    char *b = dqkv;
    a2a_part back[3] = {
        { NULL, b, dm->qkvw, qc, 0 },
        { NULL, b + (size_t)qw * ab, dm->qkvw, kc, qc },
        { NULL, b + (size_t)(qw + dm->hkv * D) * ab, dm->qkvw, kc, qc + kc },
    };
    a2a_scatter(m, m->dq_acc, w, back, 3);
}

void gl_model_cp_attn_fwd(gl_model *m, void *o, float *lse, const gl_attn_in *in,
                          const gl_attn_dropout *dp)
{
    const gl_model_dims *dm = &m->plan->dm;
    gl_dev *d = m->d;
    int cp = dm->cp, r = m->cp_rank, D = dm->D;
    int qw = dm->hq * D, kw = dm->hkv * D;
    size_t blk = (size_t)dm->n * 2 * kw;
    float scale = (float)(1.0 / sqrt((double)D));
    gl_attn_pos qp = cp_runs(dm, r);

    if (dm->cp_a2a) {
        a2a_attn_fwd(m, o, lse, in, dp);
        return;
    }
    if (dm->cp_all_gather) {
        own_kv(m, kv_of(m, r), in);
        gl_all_gather(m->cp, kv_of(m, r), m->kv[0], blk, d->act, d->stream);
    } else {
        own_kv(m, m->kv[0], in);
    }
    for (int step = 0; step < cp; step++) {
        int s = (r - step + cp) % cp;          /* whose K/V this block is */
        void *kv = kv_of(m, s);
        gl_attn_pos kp = cp_runs(dm, s);
        int pass = !dm->cp_all_gather && step + 1 < cp;
        if (pass)                              /* the next block's K/V travels */
            ring_post(m, m->kv[0], m->kv[1], blk, d->act);
        OPS->attn_block_fwd(d, m->o_blk, qw, m->lse_blk, in->qk, in->ldqk, kv, 2 * kw,
                            (char *)kv + (size_t)kw * d->act_bytes, 2 * kw, dm->B, dm->S,
                            dm->S, dm->hq, dm->hkv, D, scale, &qp, &kp, GL_ATTN_CAUSAL, dp);
        OPS->attn_merge(d, m->o_acc, lse, m->o_blk, m->lse_blk, dm->B, dm->S, dm->hq, D,
                        step == 0);
        if (pass) {
            ring_wait(m);
            swap_ptr(&m->kv[0], &m->kv[1]);
        }
    }
    OPS->convert_2d(d, o, d->act, qw, m->o_acc, GL_DT_F32, qw, dm->n, qw);
}

void gl_model_cp_attn_bwd(gl_model *m, void *dqkv, const void *d_o, const void *o,
                          const float *lse, const gl_attn_in *in,
                          const gl_attn_dropout *dp)
{
    const gl_model_dims *dm = &m->plan->dm;
    gl_dev *d = m->d;
    int cp = dm->cp, r = m->cp_rank, D = dm->D;
    int qw = dm->hq * D, kw = dm->hkv * D;
    size_t blk = (size_t)dm->n * 2 * kw;
    float scale = (float)(1.0 / sqrt((double)D));
    gl_attn_pos qp = cp_runs(dm, r);

    if (dm->cp_a2a) {
        a2a_attn_bwd(m, dqkv, d_o, o, lse, in, dp);
        return;
    }
    OPS->attn_delta(d, m->delta, d_o, qw, o, qw, dm->B, dm->S, dm->hq, D);
    OPS->zero(d, m->dq_acc, (size_t)dm->n * qw * sizeof(float));
    if (dm->cp_all_gather) {
        own_kv(m, kv_of(m, r), in);
        gl_all_gather(m->cp, kv_of(m, r), m->kv[0], blk, d->act, d->stream);
        OPS->zero(d, m->dkv[0], (size_t)cp * blk * sizeof(float));
    } else {
        own_kv(m, m->kv[0], in);
        OPS->zero(d, m->dkv[0], blk * sizeof(float));
    }
    for (int step = 0; step < cp; step++) {
        int s = (r - step + cp) % cp;
        void *kv = kv_of(m, s);
        gl_attn_pos kp = cp_runs(dm, s);
        /* where this block's dK/dV go: all_gather, block s's sum; the
         * ring, the accumulator at the first step (it starts with the own
         * block), later a buffer of their own, added after the wait */
        float *dkv = dm->cp_all_gather ? m->dkv[0] + (size_t)s * blk
                     : step == 0       ? m->dkv[0]
                                       : m->dkv_blk;
        int pass = !dm->cp_all_gather && step + 1 < cp;
        if (pass)
            ring_post(m, m->kv[0], m->kv[1], blk, d->act);
        if (!dm->cp_all_gather && step > 0)
            OPS->zero(d, m->dkv_blk, blk * sizeof(float));
        OPS->attn_block_bwd(d, m->dq_acc, qw, dkv, dkv + kw, 2 * kw, d_o, qw, lse, m->delta,
                            in->qk, in->ldqk, kv, 2 * kw, (char *)kv + (size_t)kw * d->act_bytes,
                            2 * kw, dm->B, dm->S, dm->S, dm->hq, dm->hkv, D, scale, &qp, &kp,
                            GL_ATTN_CAUSAL, dp);
        if (dm->cp_all_gather)
            continue;
        /* the next K/V, and the accumulator of this block from r - 1 */
        ring_wait(m);
        if (pass)
            swap_ptr(&m->kv[0], &m->kv[1]);
        if (step > 0)
            OPS->add_f32(d, m->dkv[0], m->dkv_blk, blk);
        /* the accumulator on to r + 1, after the last step too: that
         * pass brings each rank its own */
        ring_post(m, m->dkv[0], m->dkv[1], blk, GL_DT_F32);
        float *t = m->dkv[0];
        m->dkv[0] = m->dkv[1];
        m->dkv[1] = t;
    }
    if (!dm->cp_all_gather)
        ring_wait(m);
    float *own = m->dkv[0];
    if (dm->cp_all_gather) {
        gl_reduce_scatter(m->cp, m->dkv[0], m->dkv[1], blk, GL_DT_F32, GL_OP_SUM, d->stream);
        own = m->dkv[1];
    }
    OPS->convert_2d(d, dqkv, d->act, dm->qkvw, m->dq_acc, GL_DT_F32, qw, dm->n, qw);
    OPS->convert_2d(d, (char *)dqkv + (size_t)qw * d->act_bytes, d->act, dm->qkvw, own,
                    GL_DT_F32, 2 * kw, dm->n, 2 * kw);
}
