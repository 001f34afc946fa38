/*
 * batch.c: the mock batch source and the sampler's arithmetic (batch.h).
 */
#include <config.h>

#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "train/batch.h"

typedef struct {
    uint64_t seed;
    long vocab;
} mock_state;

static void mock_batch(gl_batch_source *s, long first, int count, int32_t *tokens,
                       float *mask)
{
    mock_state *m = s->impl;
    int S = s->seq_length;
    for (int i = 0; i < count; i++) {
        gl_mock_sample(m->seed, first + i, S + 1, m->vocab, tokens + (size_t)i * (S + 1));
        for (int t = 0; t < S; t++)
            mask[(size_t)i * S + t] = 1.0f;
    }
}

static void mock_valid_batch(gl_batch_source *s, long first, int count, int32_t *tokens,
                             float *mask)
{
    mock_state *m = s->impl;
    int S = s->seq_length;
    for (int i = 0; i < count; i++) {
        gl_mock_sample(m->seed + GL_MOCK_VALID_SEED_OFFSET, first + i, S + 1, m->vocab,
                       tokens + (size_t)i * (S + 1));
        for (int t = 0; t < S; t++)
            mask[(size_t)i * S + t] = 1.0f;
    }
}

static void mock_close(gl_batch_source *s)
{
    free(s->impl);
    free(s);
}

gl_batch_source *gl_batch_mock(const gl_config *c)
{
    if (c->arch.vocab_size <= 0)
        gl_die_code(2, "--mock-data needs --vocab-size (or a --model preset) to draw tokens from");
    gl_batch_source *s = gl_calloc(1, sizeof *s);
    mock_state *m = gl_calloc(1, sizeof *m);
    m->seed = (uint64_t)(unsigned)c->seed;
    m->vocab = c->arch.vocab_size;
    s->name = "mock";
    s->seq_length = c->arch.seq_length;
    s->batch = mock_batch;
    s->valid_batch = mock_valid_batch;
    s->close = mock_close;
    s->impl = m;
    return s;
}

static void loader_batch(gl_batch_source *s, long first, int count, int32_t *tokens,
                         float *mask)
{
    gl_loader_batch(s->impl, first, count, tokens, mask);
}

static void loader_valid_batch(gl_batch_source *s, long first, int count, int32_t *tokens,
                               float *mask)
{
    gl_loader_valid_batch(s->impl, first, count, tokens, mask);
}

static void loader_close(gl_batch_source *s)
{
    gl_loader_close(s->impl);
    free(s);
}

gl_batch_source *gl_batch_loader(const gl_config *c, gl_loader *L)
{
    gl_batch_source *s = gl_calloc(1, sizeof *s);
    s->name = "loader";
    s->seq_length = c->arch.seq_length;
    s->batch = loader_batch;
    s->valid_batch = gl_loader_has_valid(L) ? loader_valid_batch : NULL;
    s->close = loader_close;
    s->impl = L;
    return s;
}

long gl_batch_sample_at(const gl_config *c, long first, int j, int r, int b)
{
    long B = c->layout.micro_batch_size, dp = c->data_parallel_size > 0 ? c->data_parallel_size : 1;
    return first + (long)j * B * dp + (long)r * B + b;
}

long gl_batch_sample_index(const gl_config *c, long it, int j, int r, int b)
{
    return gl_batch_sample_at(c, it * (long)c->global_batch_size, j, r, b);
}

void gl_batch_close(gl_batch_source *s)
{
    if (s)
        s->close(s);
}

/* Micro-batch j's first token among the global batch's: its first
 * sample's index in the batch (the sampler's order) x S.  The index
 * counts from the batch's first sample, so it holds for every batch
 * size of a --rampup-batch-size ramp: micro-batch j of DP rank r is
 * always the batch's samples j B dp + r B .. + B - 1. */
static long mb_row0(const gl_batch_buf *bb, int j)
{
    return gl_batch_sample_at(bb->c, 0, j, bb->dp_rank, 0) * bb->S;
}

static void set_views(gl_batch_buf *bb)
{
    gl_batch_set *st = &bb->set[bb->cur];
    for (int j = 0; j < bb->M; j++)
        bb->mbs[j] = (gl_mb){ st->ids + (size_t)j * bb->n, st->tg + (size_t)j * bb->n,
                              st->gscale + (size_t)j * bb->n,
                              st->per_mb ? st->lmask + (size_t)j * bb->n : NULL,
                              mb_row0(bb, j) };
}

void gl_batch_buf_init(gl_batch_buf *bb, const gl_config *c, gl_dev *d,
                       const gl_model_plan *p, int dp_rank)
{
    memset(bb, 0, sizeof *bb);
    bb->c = c;
    bb->dp_rank = dp_rank;
    bb->d = d;
    bb->M = c->num_micro_batches;
    bb->n = p->dm.n;
    bb->S = p->dm.S;
    bb->Sfull = p->dm.Sfull;
    bb->cp = p->dm.cp;
    bb->B = p->dm.B;
    for (int i = 0; i < p->nchunks; i++) {
        bb->has_embed |= p->chunk[i].has_embed;
        bb->has_head |= p->chunk[i].has_head;
    }
    bb->mbs = gl_calloc((size_t)bb->M, sizeof *bb->mbs);
    bb->set[0].first = bb->set[1].first = -1;
    for (int j = 0; j < bb->M; j++)
        bb->mbs[j].row0 = mb_row0(bb, j);
    if (!bb->has_embed && !bb->has_head)
        return;
    size_t tot = (size_t)bb->M * bb->n;
    bb->tok = gl_malloc((size_t)bb->B * ((size_t)bb->Sfull + 1) * sizeof(int32_t));
    bb->mask_tmp = gl_malloc((size_t)bb->B * (size_t)bb->Sfull * sizeof(float));
    for (int k = 0; k < 2; k++) {
        gl_batch_set *st = &bb->set[k];
        st->ids_h = d->ops->alloc_host(d, tot * sizeof(int32_t));
        st->tg_h = d->ops->alloc_host(d, tot * sizeof(int32_t));
        st->mask_h = d->ops->alloc_host(d, tot * sizeof(float));
        st->gscale_h = d->ops->alloc_host(d, tot * sizeof(float));
        st->ids = d->ops->alloc(d, tot * sizeof(int32_t));
        st->tg = d->ops->alloc(d, tot * sizeof(int32_t));
        st->gscale = d->ops->alloc(d, tot * sizeof(float));
        st->lmask = d->ops->alloc(d, tot * sizeof(float));
    }
    bb->ids_h = gl_malloc(tot * sizeof(int32_t));
    bb->tg_h = gl_malloc(tot * sizeof(int32_t));
    bb->mask_h = gl_malloc(tot * sizeof(float));
    bb->ids = bb->set[0].ids;
    bb->tg = bb->set[0].tg;
    bb->gscale = bb->set[0].gscale;
    set_views(bb);
}

void gl_batch_buf_free(gl_batch_buf *bb)
{
    gl_dev *d = bb->d;
    if (bb->tok)
        d->ops->sync(d);              /* no upload still reads the staging */
    for (int k = 0; k < 2 && bb->tok; k++) {
        gl_batch_set *st = &bb->set[k];
        d->ops->free(d, st->ids);
        d->ops->free(d, st->tg);
        d->ops->free(d, st->gscale);
        d->ops->free(d, st->lmask);
        d->ops->free_host(d, st->gscale_h);
        d->ops->free_host(d, st->ids_h);
        d->ops->free_host(d, st->tg_h);
        d->ops->free_host(d, st->mask_h);
    }
    free(bb->ids_h);
    free(bb->tg_h);
    free(bb->mask_h);
    free(bb->tok);
    free(bb->mask_tmp);
    free(bb->mbs);
}

/* Fill set st on the host with the nmb micro-batches of this DP rank
 * from the batch that starts at sample `first` (of the valid split when
 * valid is set) and enqueue their upload; returns the unmasked targets.
 * Training batches get the gradient weights of the loss normalisation
 * (batch.h). */
static double fill_set(gl_batch_buf *bb, gl_batch_set *st, gl_batch_source *src, int valid,
                       long first, int nmb, int dp_rank)
{
    gl_dev *d = bb->d;
    double count = 0;
    int per_mb = !valid && !bb->c->calculate_per_token_loss;
    for (int j = 0; j < nmb; j++) {
        long s0 = gl_batch_sample_at(bb->c, first, j, dp_rank, 0);
        if (valid)
            src->valid_batch(src, s0, bb->B, bb->tok, bb->mask_tmp);
        else
            src->batch(src, s0, bb->B, bb->tok, bb->mask_tmp);
        double mb_count = 0, own = 0;   /* whole sequences', this rank's */
        for (int b = 0; b < bb->B; b++) {
            const int32_t *tok = bb->tok + (size_t)b * (bb->Sfull + 1);
            const float *mk = bb->mask_tmp + (size_t)b * bb->Sfull;
            size_t row = (size_t)j * bb->n + (size_t)b * bb->S;
            for (int t = 0; t < bb->Sfull; t++)
                mb_count += mk[t];
            for (int t = 0; t < bb->S; t++) {
                int pos = gl_model_cp_position(bb->Sfull, bb->cp, bb->cp_rank, t);
                st->ids_h[row + t] = tok[pos];
                st->tg_h[row + t] = tok[pos + 1];
                st->mask_h[row + t] = mk[pos];
                own += mk[pos];
            }
        }
        /* the micro-batch's token mean, times its B S positions: B S /
         * its tokens (at least 1), exactly 1 when nothing is masked (S
         * and the tokens those of the whole sequences) */
        float w = per_mb ? (float)((double)bb->B * bb->Sfull / (mb_count > 1 ? mb_count : 1))
                         : 1.0f;
        size_t row = (size_t)j * bb->n;
        for (int t = 0; t < bb->n; t++)
            st->gscale_h[row + t] = st->mask_h[row + t] * w;
        count += own;
    }
    size_t tot = (size_t)nmb * bb->n;
    d->ops->upload(d, st->ids, st->ids_h, tot * sizeof(int32_t));
    d->ops->upload(d, st->tg, st->tg_h, tot * sizeof(int32_t));
    d->ops->upload(d, st->gscale, st->gscale_h, tot * sizeof(float));
    if (per_mb)
        d->ops->upload(d, st->lmask, st->mask_h, tot * sizeof(float));
    st->first = valid ? -1 : first;
    st->nmb = nmb;
    st->per_mb = per_mb;
    st->count = count;
    return count;
}

/* Make set k current and point the micro-batch views at it. */
static void use_set(gl_batch_buf *bb, int k)
{
    bb->cur = k;
    set_views(bb);
}

double gl_batch_buf_load(gl_batch_buf *bb, gl_batch_source *src, long first, int nmb,
                         int dp_rank)
{
    if (!bb->has_embed && !bb->has_head)
        return 0;
    if (nmb < 1 || nmb > bb->M)
        gl_die("internal error: %d micro-batches asked of a buffer of %d", nmb, bb->M);
    int other = 1 - bb->cur;
    if (bb->set[other].first == first && bb->set[other].nmb == nmb) {
        bb->set[other].first = -1;    /* taken: a later load reads anew */
        use_set(bb, other);
        return bb->set[other].count;
    }
    bb->d->ops->sync(bb->d);
    double n = fill_set(bb, &bb->set[bb->cur], src, 0, first, nmb, dp_rank);
    use_set(bb, bb->cur);
    return n;
}

double gl_batch_buf_load_valid(gl_batch_buf *bb, gl_batch_source *src, long it, int dp_rank)
{
    if (!bb->has_embed && !bb->has_head)
        return 0;
    if (!src->valid_batch)
        gl_die("internal error: validation batch asked of a source without a valid split");
    bb->d->ops->sync(bb->d);
    double n = fill_set(bb, &bb->set[bb->cur], src, 1, it * (long)bb->c->global_batch_size,
                        bb->M, dp_rank);
    use_set(bb, bb->cur);
    return n;
}

void gl_batch_buf_prefetch(gl_batch_buf *bb, gl_batch_source *src, long first, int nmb,
                           int dp_rank)
{
    if (!bb->has_embed && !bb->has_head)
        return;
    fill_set(bb, &bb->set[1 - bb->cur], src, 0, first, nmb, dp_rank);
}
