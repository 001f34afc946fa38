/*
 * batch.h: where training samples come from, behind one small interface,
 * and how a global batch is cut into micro-batches.
 *
 * A source numbers the samples of the training stream 0, 1, 2, ... and
 * gives `count` consecutive ones from `first`, each as seq_length + 1
 * token ids (inputs are tokens[0..S-1], targets tokens[1..S]) and S
 * loss-mask values for the targets (1 keep, 0 ignore).  Two sources:
 *   - mock (--mock-data): data/loader.h's gl_mock_sample, tokens from the
 *     counter-based RNG keyed by (seed, sample index), every target
 *     counted; it needs no MPI and no files;
 *   - loader (--data-path): data/loader.h's Megatron .bin/.idx loader
 *     (blending, --split, --eod-mask-loss, read-ahead).
 * Either way every layout sees the same samples.
 *
 * Iteration i (from 0) trains on samples [i G, (i + 1) G), G the global
 * batch, as Megatron's pretraining sampler deals them: micro-batch j of
 * DP rank r holds samples i G + j (B DP) + r B + [0, B).
 */
#ifndef GL_TRAIN_BATCH_H
#define GL_TRAIN_BATCH_H

#include <stdint.h>
#include "data/loader.h"
#include "device/ops.h"
#include "model/model.h"
#include "train/run_config.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gl_batch_source gl_batch_source;
struct gl_batch_source {
    const char *name;
    int seq_length;
    /* tokens: count x (seq_length + 1) ids; loss_mask: count x seq_length. */
    void (*batch)(gl_batch_source *s, long first, int count, int32_t *tokens,
                  float *loss_mask);
    /* The same for the validation split; NULL when there is none. */
    void (*valid_batch)(gl_batch_source *s, long first, int count, int32_t *tokens,
                        float *loss_mask);
    void (*close)(gl_batch_source *s);
    void *impl;
};

/* Synthetic tokens: uniform over [0, vocab_size) from (seed, sample
 * index, position); every target counts.  Its validation split is the
 * same generator with the seed offset by GL_MOCK_VALID_SEED_OFFSET (the
 * offset data/loader.c gives its mock valid split), so validation samples
 * are never training samples. */
gl_batch_source *gl_batch_mock(const gl_config *c);

/* The training split of an opened loader (closed with the source), and
 * its validation split when it has one. */
gl_batch_source *gl_batch_loader(const gl_config *c, gl_loader *L);

/* The global sample index of row b of micro-batch j of DP rank r in
 * iteration it (from 0). */
long gl_batch_sample_index(const gl_config *c, long it, int j, int r, int b);

void gl_batch_close(gl_batch_source *s);

/* One iteration's micro-batches of this rank on the device: M micro-
 * batches of B sequences of S tokens (ids, targets, loss mask), filled
 * on the host in page-locked staging buffers (ops->alloc_host) and
 * uploaded asynchronously on the compute stream.  Two sets of buffers:
 * while iteration i computes from one, iteration i + 1's batch is read
 * and its upload enqueued into the other (gl_batch_buf_prefetch), so the
 * GPU never waits for the host's data between iterations.  Ranks that
 * hold neither the embedding nor the head (middle pipeline stages) read
 * no data: their buffers stay empty. */
typedef struct {
    int32_t *ids_h, *tg_h;      /* page-locked host [M n] */
    float *mask_h;
    int32_t *ids, *tg;          /* device [M n] */
    float *gscale;              /* device [M n]: the loss mask */
    long it;                    /* training iteration held, -1 none */
    double count;               /* its unmasked targets */
} gl_batch_set;

typedef struct {
    const struct gl_config *c;
    struct gl_dev *d;
    int M, n, S, B;
    int has_embed, has_head;
    int32_t *tok;
    float *mask_tmp;
    /* For callers that fill a batch themselves (gridlm-eval): pageable
     * host buffers [M n] and set 0's device buffers, which mbs views
     * until the first gl_batch_buf_load/prefetch.  Pageable, so an upload
     * has read them when it returns and they may be rewritten at once. */
    int32_t *ids_h, *tg_h;
    float *mask_h;
    int32_t *ids, *tg;
    float *gscale;
    gl_batch_set set[2];
    int cur;                    /* the set mbs views */
    gl_mb *mbs;                 /* [M] views of set[cur] */
    int dp_rank;                /* whose micro-batches: places them (gl_mb.row0) */
} gl_batch_buf;

/* Buffers for the micro-batches of data-parallel rank dp_rank (every
 * stage's mbs carry their row0, the ones without data too). */
void gl_batch_buf_init(gl_batch_buf *bb, const gl_config *c, gl_dev *d,
                       const gl_model_plan *p, int dp_rank);
void gl_batch_buf_free(gl_batch_buf *bb);

/* Load and upload iteration it's micro-batches of DP rank dp_rank (from
 * the validation split when valid is set: "iteration" it then numbers
 * global batches of the valid split) into the current set; a training
 * batch that gl_batch_buf_prefetch() already brought is taken from there
 * instead, without touching the host or waiting.  Otherwise the device
 * is synchronised first (the staging buffers may still feed an earlier
 * upload).  Returns the number of unmasked targets among them (0 on
 * ranks that read no data). */
double gl_batch_buf_load(gl_batch_buf *bb, gl_batch_source *src, int valid, long it,
                         int dp_rank);

/* Read training iteration it's batch into the set that is not current
 * and enqueue its upload, without waiting.  The caller guarantees that
 * the device has passed every earlier upload from that set (the training
 * loop's download at the end of each iteration does), and that the next
 * gl_batch_buf_load() of iteration it comes after the stream work that
 * still reads the current set was enqueued. */
void gl_batch_buf_prefetch(gl_batch_buf *bb, gl_batch_source *src, long it, int dp_rank);

#ifdef __cplusplus
}
#endif
#endif
