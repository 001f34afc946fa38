/* loader.c: batches from blended, split, shuffled datasets, read ahead by
 * a background thread (see loader.h). */
#include <config.h>
#include "data/loader.h"
#include "data/indexed.h"
#include "data/samples.h"
#include "data/tokenizer.h"
#include "base/log.h"
#include "base/rng.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { SPLIT_TRAIN = 0, SPLIT_VALID = 1 };

/* The samples of one split: one dataset directly, or a blend. */
typedef struct {
    int present;
    int blended;
    int n;
    gl_gpt_index g[GL_MAX_DATA_PATHS];
    gl_blend blend;
    long size;                      /* samples one may ask for */
} split_set;

enum { SLOT_EMPTY = 0, SLOT_PENDING, SLOT_BUSY, SLOT_READY };

typedef struct {
    int state, split, count;
    long first;
    int32_t *tokens;
    size_t cap;                     /* in samples */
} slot;

struct gl_loader {
    int seq_length, eod_mask_loss, mock, needs_tokens, dp_rank, dp_size;
    uint64_t seed;
    long vocab;
    int32_t eod;
    int nds;
    gl_idx *ds[GL_MAX_DATA_PATHS];
    split_set split[2];
    /* read-ahead */
    int nslots;
    slot *slots;
    pthread_t thread;
    int thread_on, stop;
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    long prefetched, direct;
};

void gl_mock_sample(uint64_t seed, long sample_index, int n, long vocab, int32_t *out)
{
    uint64_t key = gl_rng_key("mock-data");
    for (int j = 0; j < n; j++)
        out[j] = (int32_t)(gl_rng_u64(seed, key, (uint64_t)sample_index * (uint64_t)n + (uint64_t)j)
                           % (uint64_t)vocab);
}

/* ------------------------------------------------------------------ */

static void read_sample(gl_loader *L, int split, long k, int32_t *out)
{
    int n = L->seq_length + 1;
    if (L->mock) {
        /* the valid split draws from its own stream */
        gl_mock_sample(L->seed + (uint64_t)split * GL_MOCK_VALID_SEED_OFFSET, k, n, L->vocab, out);
        return;
    }
    split_set *s = &L->split[split];
    if (!s->present)
        gl_die("the %s split has no samples: it needs a share in --split and, for training,"
               " --train-iters or --train-samples (for validation, --eval-iters)",
               split == SPLIT_TRAIN ? "train" : "valid");
    if (k < 0 || k >= s->size)
        gl_die("%s sample %ld requested, but only %ld were prepared for this run (--train-iters,"
               " --train-samples, --eval-iters, --eval-interval, --global-batch-size)",
               split == SPLIT_TRAIN ? "train" : "valid", k, s->size);
    if (!s->blended)
        gl_gpt_sample(&s->g[0], k, out, L->vocab);
    else
        gl_gpt_sample(&s->g[s->blend.dataset_index[k]], s->blend.dataset_sample_index[k], out,
                      L->vocab);
}

static void read_batch(gl_loader *L, int split, long first, int count, int32_t *tokens)
{
    for (int c = 0; c < count; c++)
        read_sample(L, split, first + c, tokens + (size_t)c * (size_t)(L->seq_length + 1));
}

static void *prefetch_main(void *arg)
{
    gl_loader *L = arg;
    pthread_mutex_lock(&L->mu);
    for (;;) {
        slot *job = NULL;
        for (int i = 0; i < L->nslots; i++)
            if (L->slots[i].state == SLOT_PENDING && (!job || L->slots[i].first < job->first))
                job = &L->slots[i];
        if (!job) {
            if (L->stop)
                break;
            pthread_cond_wait(&L->wake, &L->mu);
            continue;
        }
        job->state = SLOT_BUSY;
        size_t need = (size_t)job->count;
        if (need > job->cap) {
            job->tokens = gl_realloc(job->tokens, need * (size_t)(L->seq_length + 1) * sizeof *job->tokens);
            job->cap = need;
        }
        pthread_mutex_unlock(&L->mu);
        read_batch(L, job->split, job->first, job->count, job->tokens);
        pthread_mutex_lock(&L->mu);
        job->state = SLOT_READY;
        pthread_cond_broadcast(&L->done);
    }
    pthread_mutex_unlock(&L->mu);
    return NULL;
}

static slot *find_slot(gl_loader *L, int split, long first, int count)
{
    for (int i = 0; i < L->nslots; i++) {
        slot *s = &L->slots[i];
        if (s->state != SLOT_EMPTY && s->split == split && s->first == first && s->count == count)
            return s;
    }
    return NULL;
}

static void get_batch(gl_loader *L, int split, long first, int count, int32_t *tokens, float *mask)
{
    if (!L->needs_tokens)
        gl_die("internal error: a rank that needs no tokens asked for a batch");
    size_t row = (size_t)(L->seq_length + 1);
    pthread_mutex_lock(&L->mu);
    slot *s = L->thread_on ? find_slot(L, split, first, count) : NULL;
    if (s) {
        while (s->state != SLOT_READY)
            pthread_cond_wait(&L->done, &L->mu);
        memcpy(tokens, s->tokens, (size_t)count * row * sizeof *tokens);
        s->state = SLOT_EMPTY;
        L->prefetched++;
        pthread_mutex_unlock(&L->mu);
    } else {
        L->direct++;
        pthread_mutex_unlock(&L->mu);
        read_batch(L, split, first, count, tokens);
    }

    /* Read ahead what this rank asks for next: the same block of the
     * following micro-batches. */
    if (L->thread_on) {
        long stride = (long)count * L->dp_size;
        long limit = L->mock ? -1 : L->split[split].size;
        pthread_mutex_lock(&L->mu);
        /* drop predictions that were passed by */
        for (int i = 0; i < L->nslots; i++)
            if (L->slots[i].state == SLOT_READY && L->slots[i].split == split &&
                L->slots[i].first <= first)
                L->slots[i].state = SLOT_EMPTY;
        for (int k = 1; k <= L->nslots; k++) {
            long f = first + k * stride;
            if (limit >= 0 && f + count > limit)
                break;
            if (find_slot(L, split, f, count))
                continue;
            slot *e = NULL;
            for (int i = 0; i < L->nslots && !e; i++)
                if (L->slots[i].state == SLOT_EMPTY)
                    e = &L->slots[i];
            if (!e)
                break;
            e->split = split;
            e->first = f;
            e->count = count;
            e->state = SLOT_PENDING;
        }
        pthread_cond_signal(&L->wake);
        pthread_mutex_unlock(&L->mu);
    }

    if (mask) {
        size_t sl = (size_t)L->seq_length;
        for (int c = 0; c < count; c++)
            for (size_t t = 0; t < sl; t++)
                mask[(size_t)c * sl + t] =
                    (L->eod_mask_loss && tokens[(size_t)c * row + t] == L->eod) ? 0.0f : 1.0f;
    }
}

void gl_loader_batch(gl_loader *L, long first, int count, int32_t *tokens, float *mask)
{
    get_batch(L, SPLIT_TRAIN, first, count, tokens, mask);
}

void gl_loader_valid_batch(gl_loader *L, long first, int count, int32_t *tokens, float *mask)
{
    if (!gl_loader_has_valid(L))
        gl_die("validation asked for, but the valid split is empty (--split gives it no share,"
               " or --eval-iters is 0)");
    get_batch(L, SPLIT_VALID, first, count, tokens, mask);
}

/* ------------------------------------------------------------------ */
/* Opening.                                                             */

/* Build (or load) the indices of one split for every dataset. */
static void build_split(gl_loader *L, const gl_data_opts *o, const gl_loader_want *want_of,
                        int split, long want,
                        const double *weights, int weights_given, const char *cache, int may_build,
                        int keep)
{
    split_set *s = &L->split[split];
    double sw[3];
    gl_error err;
    if (gl_parse_split(o->split[0] ? o->split : "969,30,1", sw, &err) != 0)
        gl_die_code(2, "%s", err.text);
    s->present = want > 0 && sw[split] > 0;
    if (!s->present)
        return;
    s->n = L->nds;
    s->blended = L->nds > 1 || weights_given;
    const char *name = split == SPLIT_TRAIN ? "train" : "valid";
    double w[GL_MAX_DATA_PATHS];
    int64_t epoch_samples[GL_MAX_DATA_PATHS];
    for (int i = 0; i < L->nds; i++) {
        int64_t b[4];
        gl_split_bounds(sw, gl_idx_num_sequences(L->ds[i]), b);
        gl_gpt_index *g = &s->g[i];
        memset(g, 0, sizeof *g);
        g->ds = L->ds[i];
        g->split_name = name;
        g->begin = b[split];
        g->end = b[split + 1];
        g->seq_length = want_of->seq_length;
        g->seed = (uint32_t)want_of->seed;
        w[i] = weights[i];
        if (!weights_given && L->nds > 1) {
            /* no weights: each dataset in proportion to its one-epoch
             * samples */
            int64_t t = 0;
            for (int64_t q = g->begin; q < g->end; q++)
                t += gl_idx_seq_length(g->ds, q);
            epoch_samples[i] = t > 1 ? (t - 1) / want_of->seq_length : 0;
        }
    }
    if (!weights_given && L->nds > 1) {
        double sum = 0;
        for (int i = 0; i < L->nds; i++)
            sum += (double)epoch_samples[i];
        for (int i = 0; i < L->nds; i++)
            w[i] = sum > 0 ? (double)epoch_samples[i] / sum : 1.0 / L->nds;
    }
    for (int i = 0; i < L->nds; i++) {
        gl_gpt_index *g = &s->g[i];
        if (s->blended && !(w[i] > 0))
            gl_die_code(2, "--data-path: the weight of %s is %g; weights must be positive",
                        gl_idx_prefix(g->ds), w[i]);
        g->num_samples = s->blended ? (int64_t)ceil((double)want * w[i] * 1.005) : want;
        if (cache) {
            if (gl_gpt_index_cached(g, cache, may_build) != 0) {
                gl_warn("--data-cache-path %s: the %s indices of %s are not there after rank 0"
                        " built them (a file system this node does not share?); building them"
                        " in memory", cache, name, gl_idx_prefix(g->ds));
                gl_gpt_index_build(g);
            }
        } else
            gl_gpt_index_build(g);
        if (!keep)
            gl_gpt_index_free(g);
    }
    if (s->blended) {
        s->blend.n = L->nds;
        for (int i = 0; i < L->nds; i++)
            s->blend.w[i] = w[i];
        s->blend.size = want;
        if (keep)
            gl_blend_build(&s->blend);
    }
    s->size = s->blended ? want : (long)s->g[0].n_samples;
}

gl_loader *gl_loader_open(const gl_data_opts *o, const gl_loader_want *w, int dp_rank,
                          int dp_size, int needs_tokens, MPI_Comm world)
{
    gl_loader *L = gl_calloc(1, sizeof *L);
    int me = 0;
    MPI_Comm_rank(world, &me);
    L->seq_length = w->seq_length;
    L->eod_mask_loss = o->eod_mask_loss;
    L->mock = o->mock_data;
    L->needs_tokens = needs_tokens;
    L->dp_rank = dp_rank;
    L->dp_size = dp_size > 0 ? dp_size : 1;
    L->seed = w->seed;
    L->eod = -1;
    if (w->seq_length < 1)
        gl_die_code(2, "--seq-length %d: must be at least 1", w->seq_length);

    /* Vocabulary and eod: rank 0 reads the tokenizer, everyone learns. */
    long info[2] = { w->vocab_size, -1 };
    int null_tok = strcmp(o->tokenizer_type, "NullTokenizer") == 0;
    if (me == 0 && !null_tok && o->tokenizer_model && *o->tokenizer_model) {
        gl_tokenizer *t = gl_tokenizer_open(o->tokenizer_type, o->tokenizer_model);
        info[1] = gl_tokenizer_eod(t);
        if (w->vocab_size <= 0)
            info[0] = gl_tokenizer_vocab_size(t);
        else if (w->vocab_size < gl_tokenizer_vocab_size(t))
            gl_die_code(2, "--vocab-size %ld is smaller than the tokenizer's %ld entries (%s)",
                        w->vocab_size, gl_tokenizer_vocab_size(t), o->tokenizer_model);
        gl_tokenizer_free(t);
    } else if (null_tok) {
        /* Megatron's NullTokenizer: ids 0..V-1, and V is the eod. */
        if (w->vocab_size <= 0)
            gl_die_code(2, "--tokenizer-type NullTokenizer needs --vocab-size");
        info[0] = w->vocab_size + 1;
        info[1] = w->vocab_size;
    }
    MPI_Bcast(info, 2, MPI_LONG, 0, world);
    L->vocab = info[0];
    L->eod = (int32_t)info[1];
    if (L->vocab <= 0)
        gl_die_code(2, "no vocabulary size: give --tokenizer-model PATH (HuggingFaceTokenizer),"
                    " or --vocab-size N");
    if (o->eod_mask_loss && L->eod < 0)
        gl_die_code(2, "--eod-mask-loss: the tokenizer has no end-of-document token");

    long want_train = w->train_samples, want_valid = w->valid_samples;

    if (!L->mock) {
        if (o->n_data_paths < 1)
            gl_die_code(2, "no data: give --data-path PREFIX (a Megatron .bin/.idx prefix made by"
                        " gridlm-prep or preprocess_data.py) or --mock-data");
        L->nds = o->n_data_paths;
        int open_here = needs_tokens || me == 0;
        double weights[GL_MAX_DATA_PATHS];
        for (int i = 0; i < L->nds; i++) {
            weights[i] = o->n_data_paths == 1 && !o->data_weights_given ? 1.0 : o->data_weight[i];
            if (open_here)
                L->ds[i] = gl_idx_open_or_die(o->data_path[i]);
        }
        const char *cache = o->data_cache_path && *o->data_cache_path ? o->data_cache_path : NULL;
        if (cache) {
            /* world rank 0 builds (or finds) every index; then the others
             * map them */
            if (me == 0)
                for (int sp = 0; sp < 2; sp++)
                    build_split(L, o, w, sp, sp ? want_valid : want_train, weights,
                                o->data_weights_given, cache, 1, needs_tokens);
            MPI_Barrier(world);
            if (me != 0 && needs_tokens)
                for (int sp = 0; sp < 2; sp++)
                    build_split(L, o, w, sp, sp ? want_valid : want_train, weights,
                                o->data_weights_given, cache, 0, 1);
        } else if (needs_tokens)
            for (int sp = 0; sp < 2; sp++)
                build_split(L, o, w, sp, sp ? want_valid : want_train, weights,
                            o->data_weights_given, NULL, 0, 1);
        if (!needs_tokens)
            for (int i = 0; i < L->nds; i++) {
                gl_idx_close(L->ds[i]);
                L->ds[i] = NULL;
            }
        if (me == 0 && L->split[0].present) {
            const gl_gpt_index *g = &L->split[0].g[0];
            char how[96];
            if (g->from_cache == 1)
                snprintf(how, sizeof how, "indices from the cache");
            else
                snprintf(how, sizeof how, "%d epoch%s of %s", g->num_epochs,
                         g->num_epochs == 1 ? "" : "s", o->data_path[0]);
            gl_info0("data: %d dataset%s, %ld train and %ld valid samples (%s)%s", L->nds,
                     L->nds > 1 ? "s" : "", want_train, L->split[1].present ? want_valid : 0, how,
                     cache ? "" : "; pass --data-cache-path DIR to build the indices once");
        }
    } else {
        L->split[0].present = 1;
        L->split[0].size = want_train;
        L->split[1].present = want_valid > 0;
        L->split[1].size = want_valid;
    }

    /* The read-ahead thread. */
    if (needs_tokens) {
        L->nslots = o->num_workers > 0 ? o->num_workers : 1;
        L->slots = gl_calloc((size_t)L->nslots, sizeof *L->slots);
        pthread_mutex_init(&L->mu, NULL);
        pthread_cond_init(&L->wake, NULL);
        pthread_cond_init(&L->done, NULL);
        if (pthread_create(&L->thread, NULL, prefetch_main, L) != 0)
            gl_die("cannot start the data read-ahead thread");
        L->thread_on = 1;
    }
    return L;
}

void gl_loader_close(gl_loader *L)
{
    if (!L)
        return;
    if (L->thread_on) {
        pthread_mutex_lock(&L->mu);
        L->stop = 1;
        pthread_cond_broadcast(&L->wake);
        pthread_mutex_unlock(&L->mu);
        pthread_join(L->thread, NULL);
        for (int i = 0; i < L->nslots; i++)
            free(L->slots[i].tokens);
        pthread_mutex_destroy(&L->mu);
        pthread_cond_destroy(&L->wake);
        pthread_cond_destroy(&L->done);
    }
    free(L->slots);
    for (int sp = 0; sp < 2; sp++) {
        for (int i = 0; i < L->split[sp].n; i++)
            gl_gpt_index_free(&L->split[sp].g[i]);
        gl_blend_free(&L->split[sp].blend);
    }
    for (int i = 0; i < L->nds; i++)
        gl_idx_close(L->ds[i]);
    free(L);
}

int gl_loader_has_valid(const gl_loader *L) { return L->split[SPLIT_VALID].present; }
long gl_loader_vocab_size(const gl_loader *L) { return L->vocab; }
int32_t gl_loader_eod(const gl_loader *L) { return L->eod; }
long gl_loader_train_samples(const gl_loader *L) { return L->split[SPLIT_TRAIN].size; }
long gl_loader_valid_samples(const gl_loader *L) { return L->split[SPLIT_VALID].size; }

int gl_loader_index_origin(const gl_loader *L)
{
    if (L->mock || !L->split[0].present || L->split[0].n < 1)
        return -1;
    return L->split[0].g[0].from_cache;
}

void gl_loader_stats(const gl_loader *L, long *prefetched, long *direct)
{
    *prefetched = L->prefetched;
    *direct = L->direct;
}
