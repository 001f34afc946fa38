/*
 * samples.h: training samples from indexed datasets, as Megatron-LM's
 * GPTDataset and BlendedDataset make them.
 *
 * A split of a dataset is a contiguous range of its sequences ("documents"
 * in Megatron's GPTDataset).  For a split, seq_length and a number of
 * samples wanted:
 *
 *   epochs       the fewest whole passes over the split whose tokens cover
 *                num_samples * seq_length + 1;
 *   document     the split's sequence ids repeated `epochs` times and
 *   index        shuffled as one array (numpy RandomState(seed), rng.h); if
 *                the last epoch would give fewer than 80% of an epoch's
 *                samples it is shuffled separately and appended, so that it
 *                is not mixed with the full epochs;
 *   sample       (position in the document index, token offset) where each
 *   index        sample starts; a sample is seq_length + 1 consecutive
 *                tokens across document boundaries, and the next one starts
 *                at its last token (neighbours share one token); the last
 *                partial sample is dropped;
 *   shuffle      a permutation of the samples (the same generator, after
 *   index        the document index; the separate last epoch again
 *                shuffled on its own).
 *
 * Sample i of the split is then shuffle[i]'s tokens.  Blending several
 * datasets with weights w: blended sample k comes from the dataset i that
 * maximises w_i * max(k, 1) - count_i (ties: the lowest i), which is its
 * count_i-th sample; each dataset is asked for ceil(w_i * N * 1.005)
 * samples.  Megatron's helpers build_sample_idx and
 * build_blending_indices define all this; the indices and the order are
 * Megatron's for the same data, split, seed and sizes.
 *
 * The indices can be cached as .npy files in a directory; a cache entry
 * is reused only when its description (dataset, split range, sizes,
 * seed) matches exactly.
 */
#ifndef GL_DATA_SAMPLES_H
#define GL_DATA_SAMPLES_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "data/indexed.h"

/* --split "969,30,1" -> three weights summing to 1 (missing ones 0).
 * Returns 0, or -1 with a message in err. */
int gl_parse_split(const char *s, double w[3], gl_error *err);
/* Megatron's split bounds: b[0] = 0, b[i+1] = b[i] + round(w[i] * n)
 * (round half to even), then all shifted so that b[3] = n. */
void gl_split_bounds(const double w[3], int64_t n, int64_t b[4]);

typedef struct {
    /* description */
    const gl_idx *ds;
    const char *split_name;         /* "train", "valid", "test" */
    int64_t begin, end;             /* sequences [begin, end) */
    int seq_length;
    int64_t num_samples;            /* wanted; 0: one epoch */
    uint32_t seed;
    /* built (owned, or pointing into mmapped cache files) */
    int32_t *doc_index; int64_t n_doc_index;
    int64_t *sample_index;          /* 2 x (n_samples + 1) */
    int64_t *shuffle_index;
    int64_t n_samples;
    int num_epochs;
    int from_cache;                 /* 1: loaded, 2: built and written */
    void *maps[3]; size_t map_len[3];
} gl_gpt_index;

/* Build in memory. */
void gl_gpt_index_build(gl_gpt_index *g);
/* Build, or reuse a matching cache entry in dir (created if missing).
 * With may_build = 0 a missing entry returns -1 (the caller waits for the
 * rank that builds); 0 on success. */
int gl_gpt_index_cached(gl_gpt_index *g, const char *dir, int may_build);
void gl_gpt_index_free(gl_gpt_index *g);

/* Tokens of sample i (0 <= i < n_samples) into out[seq_length + 1];
 * tokens are checked against vocab_size (> 0). */
void gl_gpt_sample(const gl_gpt_index *g, int64_t i, int32_t *out, long vocab_size);

typedef struct {
    int n;                          /* datasets */
    double w[64];
    int64_t size;                   /* blended samples */
    int16_t *dataset_index;
    int64_t *dataset_sample_index;
} gl_blend;

/* Megatron's build_blending_indices. */
void gl_blend_build(gl_blend *b);
void gl_blend_free(gl_blend *b);

#endif
