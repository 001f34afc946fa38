/*
 * plan.c: the parameter table and flat layout of one rank (model.h).
 *
 * Pure arithmetic on the configuration: which logical tensors this rank
 * holds, which piece of each, and where the piece goes in the flat
 * buffer.  The training loop, the optimizer and the checkpoint code all
 * read the table built here.
 */
#include <config.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/rng.h"
#include "model/model.h"

static size_t align_up(size_t x, size_t a)
{
    return (x + a - 1) / a * a;
}

/* Fill the sizes of the model and of the rank's share; die on a model
 * that does not split evenly (the configuration checks most of these
 * already, with the same flags named). */
static void plan_dims(gl_model_dims *dm, const gl_arch *a, const gl_layout *l, int tp_rank,
                      int pp_rank, int ep_rank)
{
    memset(dm, 0, sizeof *dm);
    dm->L = a->num_layers;
    dm->h = a->hidden_size;
    dm->Hq = a->num_attention_heads;
    dm->Hkv = gl_arch_groups(a);
    dm->D = gl_arch_head_dim(a);
    dm->f = a->ffn_hidden_size;
    dm->V = a->vocab_size;
    dm->Vpad = a->padded_vocab_size ? a->padded_vocab_size : a->vocab_size;
    dm->Sfull = a->seq_length;
    dm->cp = l->context_parallel_size > 0 ? l->context_parallel_size : 1;
    if (a->seq_length % (dm->cp > 1 ? 2 * dm->cp : 1))
        gl_die_code(2, "--seq-length %d is not divisible by 2 x --context-parallel-size = %d",
                    a->seq_length, 2 * dm->cp);
    dm->S = a->seq_length / dm->cp;
    dm->cp_all_gather = !strcmp(l->cp_comm_type, "all_gather");
    dm->cp_a2a = !strcmp(l->cp_comm_type, "a2a");
    dm->B = l->micro_batch_size;
    dm->eps = a->norm_epsilon;
    dm->tied = !a->untie_embeddings_and_output_weights;
    dm->tp = l->tensor_model_parallel_size > 0 ? l->tensor_model_parallel_size : 1;
    dm->pp = l->pipeline_model_parallel_size > 0 ? l->pipeline_model_parallel_size : 1;
    dm->vpp = l->virtual_pipeline_size > 0 ? l->virtual_pipeline_size : 1;
    dm->tp_rank = tp_rank;
    dm->pp_rank = pp_rank;
    dm->sp = l->sequence_parallel && dm->tp > 1;

    if (dm->Hq % dm->Hkv)
        gl_die_code(2, "--num-query-groups %d does not divide --num-attention-heads %d",
                    dm->Hkv, dm->Hq);
    if (dm->Hkv % dm->tp || dm->f % dm->tp || dm->Vpad % dm->tp)
        gl_die_code(2, "--tensor-model-parallel-size %d must divide the query groups "
                    "(%d), --ffn-hidden-size (%d) and the padded vocabulary (%d)",
                    dm->tp, dm->Hkv, dm->f, dm->Vpad);
    if (dm->D % 2)
        gl_die_code(2, "--kv-channels %d: rotary embeddings need an even head size", dm->D);
    if (dm->L % (dm->pp * dm->vpp))
        gl_die_code(2, "--num-layers %d is not divisible by %d pipeline chunks "
                    "(--pipeline-model-parallel-size %d x %d virtual stages)",
                    dm->L, dm->pp * dm->vpp, dm->pp, dm->vpp);
    dm->hq = dm->Hq / dm->tp;
    dm->hkv = dm->Hkv / dm->tp;
    dm->fl = dm->f / dm->tp;
    dm->vl = dm->Vpad / dm->tp;
    dm->vocab_start = (long)tp_rank * dm->vl;
    long valid = dm->V - dm->vocab_start;
    dm->valid = valid < 0 ? 0 : valid > dm->vl ? dm->vl : (int)valid;
    dm->qkvw = (dm->hq + 2 * dm->hkv) * dm->D;
    dm->n = dm->B * dm->S;
    if (dm->sp && dm->n % dm->tp)
        gl_die_code(2, "--sequence-parallel: --micro-batch-size %d x --seq-length %d "
                    "tokens do not split over --tensor-model-parallel-size %d",
                    dm->B, dm->S, dm->tp);
    dm->nl = dm->sp ? dm->n / dm->tp : dm->n;
    dm->Lc = dm->L / (dm->pp * dm->vpp);
    dm->layernorm = a->normalization == GL_NORM_LAYERNORM;
    dm->one_p = a->apply_layernorm_1p;
    dm->swiglu = a->swiglu;
    dm->guw = dm->swiglu ? 2 * dm->fl : dm->fl;
    dm->lin_bias = a->add_bias_linear;
    dm->qkv_bias = a->add_bias_linear || a->add_qkv_bias;
    dm->learned_pos = a->position_embedding_type == GL_POS_LEARNED_ABSOLUTE;
    dm->rope = a->position_embedding_type == GL_POS_ROPE;
    dm->qk_norm = a->qk_layernorm;
    dm->qkw = (dm->hq + dm->hkv) * dm->D;
    dm->hidden_dropout = (float)a->hidden_dropout;
    dm->attention_dropout = (float)a->attention_dropout;
    dm->P = a->max_position_embeddings ? a->max_position_embeddings : a->seq_length;
    if (a->num_experts > 0) {
        dm->E = a->num_experts;
        dm->topk = a->moe_router_topk;
        dm->fe = gl_arch_moe_ffn(a);
        dm->fs = a->moe_shared_expert_intermediate_size;
        dm->etp = l->expert_tensor_parallel_size > 0 ? l->expert_tensor_parallel_size : dm->tp;
        dm->etp_rank = tp_rank % dm->etp;
        if (dm->fe % dm->etp || dm->fs % dm->tp)
            gl_die_code(2, "the experts' FFN width %d must split over "
                        "--expert-tensor-parallel-size %d, and "
                        "--moe-shared-expert-intermediate-size %d over "
                        "--tensor-model-parallel-size %d", dm->fe, dm->etp, dm->fs, dm->tp);
        dm->fel = dm->fe / dm->etp;
        dm->fsl = dm->fs / dm->tp;
    }
    dm->ep = l->expert_model_parallel_size > 0 ? l->expert_model_parallel_size : 1;
    if (dm->ep > 1 && (dm->E % dm->ep || ep_rank < 0 || ep_rank >= dm->ep))
        gl_die_code(2, "--expert-model-parallel-size %d must divide --num-experts %d",
                    dm->ep, dm->E);
    dm->ep_rank = dm->ep > 1 ? ep_rank : 0;
    dm->El = dm->E / dm->ep;
    dm->e0 = dm->ep_rank * dm->El;
}

/* The table under construction. */
typedef struct {
    gl_model_plan *p;
    const gl_arch *arch;
    int cap;
    size_t cursor;
} builder;

/* Add tensor id of layer `layer` (-1 outside the layers) to local chunk
 * `chunk`: its name, shape, split and initialisation from the parameter
 * table (arch/tensors.h), its place at the cursor. */
static gl_param *add_param(builder *b, gl_tensor_id id, int layer, int chunk)
{
    gl_model_plan *p = b->p;
    if (p->nparams == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 64;
        p->param = gl_realloc(p->param, (size_t)b->cap * sizeof *p->param);
    }
    const gl_tensor_info *t = gl_tensor(id);
    gl_param *q = &p->param[p->nparams++];
    memset(q, 0, sizeof *q);
    q->id = id;
    gl_tensor_name(id, layer, 0, q->name, sizeof q->name);
    q->ndim = gl_tensor_shape(id, b->arch, p->dm.Vpad, q->shape);
    gl_shard shard = q->shard = t->shard;
    double std = b->arch->init_method_std;
    if (t->init == GL_INIT_SCALED_NORMAL)
        std /= sqrt(2.0 * p->dm.L);                 /* Megatron's scaled init */
    q->init_std = t->init == GL_INIT_ONES || t->init == GL_INIT_ZEROS ? 0 : std;
    int tp = p->dm.tp, r = p->dm.tp_rank;
    /* the split dimension: the first or second of a matrix, the second or
     * third of stacked experts (every expert's matrix alike: over ETP) */
    int split = shard == GL_SHARD_NONE ? -1 : (shard == GL_SHARD_COLS) + (q->ndim == 3);
    if (q->ndim == 3) {
        tp = p->dm.etp;
        r = p->dm.etp_rank;
    }
    for (int d = 0; d < GL_TENSOR_MAXDIM; d++) {
        q->local_shape[d] = q->shape[d];
        if (d == split) {
            q->local_shape[d] = q->shape[d] / tp;
            q->global_offset[d] = (long)r * q->local_shape[d];
        }
    }
    /* a routed expert's stacked weights: the rank's experts only */
    q->expert = q->ndim == 3;
    if (q->expert) {
        q->local_shape[0] = p->dm.El;
        q->global_offset[0] = p->dm.e0;
    }
    q->count = (size_t)q->local_shape[0] * (size_t)q->local_shape[1] *
               (size_t)q->local_shape[2];
    q->offset = b->cursor;
    b->cursor += q->count;
    q->chunk = chunk;
    q->layer = layer;
    q->no_weight_decay = q->ndim == 1;
    q->buffer = t->buffer;
    q->counted = (shard != GL_SHARD_NONE || r == 0) && !q->buffer;
    q->init_ones = t->init == GL_INIT_ONES;
    if (q->init_ones && b->arch->apply_layernorm_1p)
        q->init_ones = 0;           /* stored as w - 1: zeros stand for ones */
    return q;
}

/* Start a fused group (or a lone tensor) on an aligned offset. */
static size_t start_group(builder *b)
{
    b->cursor = align_up(b->cursor, GL_MODEL_ALIGN);
    return b->cursor;
}

/* The TP-split tensors of MoE layer l in place of the dense MLP's: the
 * experts' w_gate (SwiGLU) then w_up, one after the other (each one
 * range: the gate/up product runs as two grouped products into the two
 * halves of its output rows), w_down; the shared experts' [w_gate; w_up]
 * adjacent as the dense MLP's, and w_down. */
static void add_experts(builder *b, gl_layer_offs *lo, int l, int ci)
{
    const gl_model_dims *dm = &b->p->dm;
    lo->egu = start_group(b);
    if (dm->swiglu)
        add_param(b, GL_T_EXPERT_W_GATE, l, ci);
    add_param(b, GL_T_EXPERT_W_UP, l, ci);
    lo->edown = start_group(b);
    add_param(b, GL_T_EXPERT_W_DOWN, l, ci);
}

/* (under expert parallelism the routed experts go to region 3 instead:
 * gl_model_plan.exp_begin) */
static void add_moe_split(builder *b, gl_layer_offs *lo, int l, int ci)
{
    const gl_model_dims *dm = &b->p->dm;
    lo->moe = 1;
    if (dm->ep == 1)
        add_experts(b, lo, l, ci);
    if (dm->fs) {
        lo->sgu = start_group(b);
        if (dm->swiglu)
            add_param(b, GL_T_SHARED_W_GATE, l, ci);
        add_param(b, GL_T_SHARED_W_UP, l, ci);
        lo->sdown = start_group(b);
        add_param(b, GL_T_SHARED_W_DOWN, l, ci);
    }
}

/* The table's contract (model.h): in order of offset.  add_param places
 * each parameter at the cursor, which only moves forward (the experts that
 * expert parallelism places last are also added last); checked here so
 * that a change to the builder cannot break the searches silently. */
static void check_offset_order(const gl_model_plan *p)
{
    for (int i = 1; i < p->nparams; i++)
        if (p->param[i].offset < p->param[i - 1].offset + p->param[i - 1].count)
            gl_die("internal error: parameter %s at offset %zu is placed before the end "
                   "of %s, which precedes it in the table", p->param[i].name,
                   p->param[i].offset, p->param[i - 1].name);
}

gl_model_plan *gl_model_plan_new(const gl_arch *a, const gl_layout *lay, int tp_rank,
                                 int pp_rank, int ep_rank, int dp)
{
    gl_model_plan *p = gl_calloc(1, sizeof *p);
    p->arch = *a;
    p->layout = *lay;
    plan_dims(&p->dm, a, lay, tp_rank, pp_rank, ep_rank);
    const gl_model_dims *dm = &p->dm;
    builder b = { p, &p->arch, 0, 0 };

    p->nchunks = dm->vpp;
    p->chunk = gl_calloc((size_t)p->nchunks, sizeof *p->chunk);
    p->embed_param = p->head_param = -1;
    int last_mc = dm->pp * dm->vpp - 1;
    int holds_embed = 0;

    /* Region 1: the TP-split tensors, chunk by chunk. */
    for (int ci = 0; ci < p->nchunks; ci++) {
        gl_chunk_plan *ch = &p->chunk[ci];
        ch->mc = ci * dm->pp + dm->pp_rank;
        ch->first_layer = ch->mc * dm->Lc;
        ch->has_embed = ch->mc == 0;
        ch->has_head = ch->mc == last_mc;
        ch->layer = gl_calloc((size_t)dm->Lc, sizeof *ch->layer);
        if (ch->has_embed) {
            ch->embed = start_group(&b);
            p->embed_param = p->nparams;
            add_param(&b, GL_T_EMBEDDING, -1, ci);
            holds_embed = 1;
        }
        for (int i = 0; i < dm->Lc; i++) {
            int l = ch->first_layer + i;
            gl_layer_offs *lo = &ch->layer[i];
            /* (the column-parallel biases between the matrices, so that
             * [qkv, down's end) covers every TP-split tensor of the layer) */
            lo->qkv = start_group(&b);
            add_param(&b, GL_T_WQ, l, ci);
            add_param(&b, GL_T_WK, l, ci);
            add_param(&b, GL_T_WV, l, ci);
            if (dm->qkv_bias) {
                lo->bqkv = start_group(&b);
                add_param(&b, GL_T_BQ, l, ci);
                add_param(&b, GL_T_BK, l, ci);
                add_param(&b, GL_T_BV, l, ci);
            }
            lo->wo = start_group(&b);
            add_param(&b, GL_T_WO, l, ci);
            if (gl_arch_is_moe_layer(&p->arch, l)) {
                add_moe_split(&b, lo, l, ci);
                continue;
            }
            lo->gate_up = start_group(&b);
            if (dm->swiglu)
                add_param(&b, GL_T_W_GATE, l, ci);
            add_param(&b, GL_T_W_UP, l, ci);
            if (dm->lin_bias) {
                lo->bgu = start_group(&b);
                if (dm->swiglu)
                    add_param(&b, GL_T_B_GATE, l, ci);
                add_param(&b, GL_T_B_UP, l, ci);
            }
            lo->down = start_group(&b);
            add_param(&b, GL_T_W_DOWN, l, ci);
        }
    }
    /* The head last, so a tied copy can see whether the embedding is here. */
    for (int ci = 0; ci < p->nchunks; ci++) {
        gl_chunk_plan *ch = &p->chunk[ci];
        if (!ch->has_head)
            continue;
        if (dm->tied && holds_embed) {
            ch->head = p->chunk[0].embed;      /* model chunk 0 is local chunk 0 */
        } else {
            ch->head = start_group(&b);
            p->head_param = p->nparams;
            gl_param *q = add_param(&b, dm->tied ? GL_T_EMBEDDING : GL_T_LM_HEAD, -1, ci);
            if (dm->tied) {
                q->tied_copy = 1;
                q->counted = 0;
            }
        }
    }

    /* Region 2: the TP-replicated tensors: norm weights and biases, the
     * biases of the row-parallel linears (added once, after the TP
     * reduction, as Megatron's), the learned positions.  Each is used on
     * the rank's own rows, so under sequence parallelism its gradient is
     * a partial sum over TP (reduced with the region). */
    p->rep_begin = start_group(&b);
    for (int ci = 0; ci < p->nchunks; ci++) {
        gl_chunk_plan *ch = &p->chunk[ci];
        if (ch->has_embed && dm->learned_pos) {
            ch->pos = start_group(&b);
            add_param(&b, GL_T_POSITION_EMBEDDING, -1, ci);
        }
        for (int i = 0; i < dm->Lc; i++) {
            int l = ch->first_layer + i;
            gl_layer_offs *lo = &ch->layer[i];
            lo->attn_norm = start_group(&b);
            add_param(&b, GL_T_ATTENTION_NORM, l, ci);
            if (dm->layernorm) {
                lo->attn_norm_b = start_group(&b);
                add_param(&b, GL_T_ATTENTION_NORM_BIAS, l, ci);
            }
            if (dm->lin_bias) {
                lo->bo = start_group(&b);
                add_param(&b, GL_T_BO, l, ci);
            }
            lo->mlp_norm = start_group(&b);
            add_param(&b, GL_T_MLP_NORM, l, ci);
            if (dm->layernorm) {
                lo->mlp_norm_b = start_group(&b);
                add_param(&b, GL_T_MLP_NORM_BIAS, l, ci);
            }
            if (lo->moe) {
                lo->router = start_group(&b);
                add_param(&b, GL_T_ROUTER, l, ci);
                if (gl_tensor_present_at(GL_T_EXPERT_BIAS, &p->arch, l)) {
                    lo->ebias = start_group(&b);
                    add_param(&b, GL_T_EXPERT_BIAS, l, ci);
                }
            } else if (dm->lin_bias) {
                lo->bdown = start_group(&b);
                add_param(&b, GL_T_B_DOWN, l, ci);
            }
        }
        if (ch->has_head) {
            ch->final_norm = start_group(&b);
            add_param(&b, GL_T_FINAL_NORM, -1, ci);
            if (dm->layernorm) {
                ch->final_norm_b = start_group(&b);
                add_param(&b, GL_T_FINAL_NORM_BIAS, -1, ci);
            }
        }
    }
    /* The QK-norm weights last: under TP their gradients are partial
     * sums over the ranks' heads, with or without sequence parallelism
     * (gl_model_tp_sum_range). */
    p->qk_norm_begin = dm->qk_norm ? start_group(&b) : b.cursor;
    for (int ci = 0; ci < p->nchunks && dm->qk_norm; ci++) {
        gl_chunk_plan *ch = &p->chunk[ci];
        for (int i = 0; i < dm->Lc; i++) {
            int l = ch->first_layer + i;
            ch->layer[i].qk_norm = start_group(&b);
            add_param(&b, GL_T_Q_NORM, l, ci);
            add_param(&b, GL_T_K_NORM, l, ci);
        }
    }
    p->rep_end = b.cursor;
    size_t dp_align = (size_t)GL_MODEL_ALIGN * (size_t)(dp > 0 ? dp : 1);
    /* Region 3, under expert parallelism only: the routed experts, which
     * are summed and sharded over EDP rather than DP (optim.h), after
     * the rest, on a DP shard boundary */
    if (dm->ep > 1) {
        b.cursor = align_up(b.cursor, dp_align);
        p->exp_begin = b.cursor;
        for (int ci = 0; ci < p->nchunks; ci++) {
            gl_chunk_plan *ch = &p->chunk[ci];
            for (int i = 0; i < dm->Lc; i++)
                if (ch->layer[i].moe)
                    add_experts(&b, &ch->layer[i], ch->first_layer + i, ci);
        }
    }
    p->nflat = align_up(b.cursor, dp_align);
    if (p->nflat == 0)
        p->nflat = GL_MODEL_ALIGN;
    if (dm->ep == 1)
        p->exp_begin = p->nflat;
    check_offset_order(p);
    return p;
}

int gl_model_plan_first_at(const gl_model_plan *p, size_t off)
{
    int lo = 0, hi = p->nparams;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (p->param[mid].offset >= off)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

void gl_model_plan_free(gl_model_plan *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->nchunks; i++)
        free(p->chunk[i].layer);
    free(p->chunk);
    free(p->param);
    free(p);
}

void gl_model_tp_sum_range(const gl_model_plan *p, size_t *begin, size_t *end)
{
    *begin = *end = p->rep_end;
    if (p->dm.tp > 1)
        *begin = p->dm.sp ? p->rep_begin : p->qk_norm_begin;
}

void gl_shape_view(int ndim, const long shape[GL_TENSOR_MAXDIM], gl_shard shard, long view[2])
{
    if (ndim < 3) {
        view[0] = shape[0];
        view[1] = ndim == 1 ? 1 : shape[1];
    } else if (shard == GL_SHARD_ROWS) {
        view[0] = shape[0];
        view[1] = shape[1] * shape[2];
    } else {
        view[0] = shape[0] * shape[1];
        view[1] = shape[2];
    }
}

void gl_param_view(const gl_param *q, long view[2], long local[2], long offset[2])
{
    gl_shape_view(q->ndim, q->shape, q->shard, view);
    long lv[2], ov[2];
    if (q->ndim < 3) {
        lv[0] = q->local_shape[0];
        lv[1] = q->ndim == 1 ? 1 : q->local_shape[1];
        ov[0] = q->global_offset[0];
        ov[1] = q->ndim == 1 ? 0 : q->global_offset[1];
    } else if (q->shard == GL_SHARD_ROWS) {   /* dim 1 split: columns of [E, A B] */
        lv[0] = q->local_shape[0];
        lv[1] = q->local_shape[1] * q->local_shape[2];
        ov[0] = q->global_offset[0];          /* the first local expert */
        ov[1] = q->global_offset[1] * q->shape[2];
    } else {                                  /* dim 2 split (or none): [E A, B] */
        lv[0] = q->local_shape[0] * q->local_shape[1];
        lv[1] = q->local_shape[2];
        ov[0] = q->global_offset[0] * q->shape[1]; /* (dim 1 whole here) */
        ov[1] = q->global_offset[2];
    }
    if (local) {
        local[0] = lv[0];
        local[1] = lv[1];
    }
    if (offset) {
        offset[0] = ov[0];
        offset[1] = ov[1];
    }
}

double gl_param_init_value(const gl_param *p, uint64_t seed, long e)
{
    if (p->init_ones)
        return 1.0;
    return p->init_std * gl_rng_normal(seed, gl_rng_key(p->name), (uint64_t)e);
}
