/*
 * loader.h: training and validation batches for the training loop.
 *
 *   gl_loader *L = gl_loader_open(&opts, &want, dp_rank, dp_size, needs_tokens, world);
 *   gl_config_set_vocab_size(cfg, gl_loader_vocab_size(L));
 *   ...each micro-step: first = consumed + micro * mbs * dp + dp_rank * mbs
 *   gl_loader_batch(L, first, mbs, tokens, loss_mask);
 *   ...evaluation:       gl_loader_valid_batch(L, first, mbs, tokens, loss_mask);
 *   gl_loader_close(L);
 *
 * Samples are addressed by their global index, so a batch depends on
 * nothing but (data, --split, --seq-length, --seed, sizes, index): the
 * same for every parallel layout, and resuming at consumed_samples
 * continues exactly where the run stopped.  Each rank reads only the
 * samples it asks for; ranks that do not need tokens (needs_tokens = 0:
 * pipeline stages other than the first and the last) read nothing.
 *
 * Data comes from --data-path (one prefix, or "W1 P1 W2 P2 ..." blended,
 * or several prefixes weighted by their sizes), split by --split into
 * train/valid/test ranges of documents, turned into samples as samples.h
 * describes; or, with --mock-data, from gl_mock_sample.  The train split
 * gives want->train_samples samples, the valid split want->valid_samples
 * (the training configuration counts them as Megatron does).
 *
 * gl_loader_open is collective over `world`.  With --data-cache-path,
 * world rank 0 builds the sample indices (or finds them cached from an
 * earlier run with the same description) and writes them there while
 * the others wait at a barrier, then every rank that needs tokens maps
 * them; a rank that cannot see the files (no shared file system) builds
 * its own copy in memory and says so.  Without --data-cache-path every
 * rank that needs tokens builds the indices in memory.
 *
 * A background thread reads ahead: after a request for samples
 * [first, first + count) it prepares [first + k count dp, ...) for the
 * next num_workers (at least 1) values of k, which is what the next
 * micro-steps of this rank ask for; a request that was not predicted is
 * simply read at once.  Every token is checked against the vocabulary.
 */
#ifndef GL_DATA_LOADER_H
#define GL_DATA_LOADER_H

#include <stdint.h>
#include <mpi.h>

#include "base/hash.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GL_MAX_DATA_PATHS 64

/* Where the data comes from and how it is read: gridlm-train's Data
 * options, Megatron's names. */
typedef struct gl_data_opts {
    int mock_data;                   /* --mock-data */
    int n_data_paths;                /* --data-path [W1] P1 [W2] P2 ... */
    double data_weight[GL_MAX_DATA_PATHS];
    char *data_path[GL_MAX_DATA_PATHS];
    int data_weights_given;          /* 1: weights were given, data_weight[] sums to 1;
                                        0: none (one path: weight 1; several: Megatron
                                        weights them by size, data_weight[] = 0) */
    char split[64];                  /* --split (969,30,1) */
    char *data_cache_path;           /* --data-cache-path */
    char tokenizer_type[64];         /* --tokenizer-type ("HuggingFaceTokenizer" when only
                                        --tokenizer-model is given) */
    char *tokenizer_model;           /* --tokenizer-model (GPT2BPETokenizer: "VOCAB:MERGES"
                                        when given as --vocab-file/--merge-file) */
    char *vocab_file, *merge_file;   /* --vocab-file, --merge-file (GPT2BPETokenizer) */
    int eod_mask_loss;               /* --eod-mask-loss */
    int num_workers;                 /* --num-workers (2) */
} gl_data_opts;

/* What a run asks of the data. */
typedef struct gl_loader_want {
    int seq_length;                  /* tokens per sample (labels: one more) */
    long vocab_size;                 /* --vocab-size, 0: the tokenizer's */
    uint64_t seed;                   /* --seed: the shuffles */
    long train_samples;              /* samples the train split must give */
    long valid_samples;              /* ... the valid split (0: no validation) */
} gl_loader_want;

typedef struct gl_loader gl_loader;

gl_loader *gl_loader_open(const gl_data_opts *o, const gl_loader_want *w, int dp_rank,
                          int dp_size, int needs_tokens, MPI_Comm world);
void gl_loader_close(gl_loader *L);

/* `count` training samples from global sample index first_sample:
 * tokens is count x (seq_length + 1) (inputs are [0, s), labels [1, s]);
 * loss_mask (count x seq_length, may be NULL) is 1, or 0 where the input
 * token is the end-of-document token and --eod-mask-loss is set (as
 * Megatron's get_ltor_masks_and_position_ids). */
void gl_loader_batch(gl_loader *L, long first_sample, int count, int32_t *tokens,
                     float *loss_mask);

/* Whether the valid split has samples (--split gives it a share and
 * --eval-iters > 0), and the same call for it. */
int gl_loader_has_valid(const gl_loader *L);
void gl_loader_valid_batch(gl_loader *L, long first_sample, int count, int32_t *tokens,
                           float *loss_mask);

/* The tokenizer's vocabulary size (--vocab-size when given, or for
 * --mock-data without a tokenizer), and its end-of-document id (-1 if
 * none).  Known on every rank. */
long gl_loader_vocab_size(const gl_loader *L);
int32_t gl_loader_eod(const gl_loader *L);
/* Samples available in each split. */
long gl_loader_train_samples(const gl_loader *L);
long gl_loader_valid_samples(const gl_loader *L);
/* For tests: index files built (2), loaded from the cache (1), built in
 * memory (0) for the train split of dataset 0; -1 when not applicable. */
int gl_loader_index_origin(const gl_loader *L);
/* Batches served from the read-ahead thread, and read on demand. */
void gl_loader_stats(const gl_loader *L, long *prefetched, long *direct);

/* --mock-data: sample `sample_index` as n tokens in [0, vocab): token j
 * is gl_rng_u64(seed, gl_rng_key("mock-data"), sample_index * n + j) mod
 * vocab (base/rng.h's counter-based generator), the same on every rank
 * and in every layout. */
void gl_mock_sample(uint64_t seed, long sample_index, int n, long vocab, int32_t *out);

/* The valid split's mock samples come from the seed offset by this. */
#define GL_MOCK_VALID_SEED_OFFSET GL_GOLDEN64

#ifdef __cplusplus
}
#endif
#endif
