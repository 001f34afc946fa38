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
 * An iteration that starts after `first` consumed samples trains on
 * samples [first, first + G), G its global batch (--global-batch-size,
 * or the ramp-up's: run_config.h's gl_config_global_batch), as Megatron's
 * pretraining sampler deals them: micro-batch j of DP rank r holds
 * samples first + j (B DP) + r B + [0, B).  With a constant batch,
 * iteration i starts at first = i G.
 *
 * Loss normalisation (Megatron's two).  By default each micro-batch's
 * loss is the mean over its unmasked tokens, and the iteration's loss
 * the average of those over the micro-batches of every DP rank: each
 * token's gradient weight (gscale) is its mask x B S / its micro-batch's
 * unmasked tokens (at least 1, so an all-masked micro-batch adds
 * nothing, as Megatron's clamp), and the caller divides the summed
 * gradients by micro-batches x DP x B S.  The B S keeps the weights at
 * 1 when nothing is masked: the backward then carries exactly the
 * numbers of the per-token normalisation (no rescaling of the FP8
 * gradients' range).  With
 * --calculate-per-token-loss the loss is the mean over every unmasked
 * token of the global batch: gscale is the mask and the caller divides by
 * the global token count.  Either way the loss REPORTED is, as
 * Megatron's, the global batch's per-token mean (the plain mask rides
 * along as the micro-batch's lmask); the two differ only when micro-
 * batches hold different numbers of unmasked tokens (--eod-mask-loss).
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

/* The global sample index of row b of micro-batch j of DP rank r in an
 * iteration that starts after `first` consumed samples. */
long gl_batch_sample_at(const gl_config *c, long first, int j, int r, int b);

/* The same in iteration it (from 0) of a constant global batch. */
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
    float *gscale;              /* device [M n]: gradient weights */
    float *lmask;               /* device [M n]: the loss mask, when
                                 * gscale is normalised per micro-batch */
    float *gscale_h;            /* page-locked host [M n] */
    long first;                 /* training batch held (its first sample), -1 none */
    int nmb;                    /* its micro-batches */
    int per_mb;                 /* gscale normalised per micro-batch */
    double count;               /* its unmasked targets */
} gl_batch_set;

typedef struct {
    const struct gl_config *c;
    struct gl_dev *d;
    int M, n, S, B;             /* M: the most micro-batches of an iteration;
                                 * S: the tokens of a sequence this rank
                                 * holds (Sfull / CP) */
    int Sfull, cp;              /* --seq-length, --context-parallel-size */
    int cp_rank;                /* which chunks of each sequence this rank
                                 * holds (model.h, gl_model_set_cp); 0
                                 * unless the caller sets it after init */
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
 * stage's mbs carry their row0, the ones without data too).  Under
 * context parallelism each rank reads whole samples and keeps the rows
 * of its chunks (gl_model_cp_position): ids, targets and loss mask
 * follow, and a micro-batch's loss normalisation counts the unmasked
 * targets of the whole sequences, so the gradient weights are those of
 * CP = 1 (the returned counts are this rank's own targets: their sum over
 * the ranks is the batch's). */
void gl_batch_buf_init(gl_batch_buf *bb, const gl_config *c, gl_dev *d,
                       const gl_model_plan *p, int dp_rank);
void gl_batch_buf_free(gl_batch_buf *bb);

/* Load and upload the nmb (<= M) micro-batches of DP rank dp_rank of the
 * training batch that starts at sample `first` (gradient weights as the
 * loss normalisation wants them) into the current set; a batch that
 * gl_batch_buf_prefetch() already brought is taken from there instead,
 * without touching the host or waiting.  Otherwise the device is
 * synchronised first (the staging buffers may still feed an earlier
 * upload).  Returns the number of unmasked targets among them (0 on
 * ranks that read no data). */
double gl_batch_buf_load(gl_batch_buf *bb, gl_batch_source *src, long first, int nmb,
                         int dp_rank);

/* The same for global batch it of the validation split (M micro-batches,
 * gscale the plain loss mask). */
double gl_batch_buf_load_valid(gl_batch_buf *bb, gl_batch_source *src, long it, int dp_rank);

/* Read the training batch that starts at `first` (nmb micro-batches) into
 * the set that is not current and enqueue its upload, without waiting.
 * The caller guarantees that the device has passed every earlier upload
 * from that set (the training loop's download at the end of each
 * iteration does), and that the next gl_batch_buf_load() of that batch
 * comes after the stream work that still reads the current set was
 * enqueued. */
void gl_batch_buf_prefetch(gl_batch_buf *bb, gl_batch_source *src, long first, int nmb,
                           int dp_rank);

#ifdef __cplusplus
}
#endif
#endif
