/*
 * prep.h: the work of gridlm-prep (src/tools/gridlm-prep.c parses the
 * flags and calls these).
 *
 *   gl_prep_run        JSONL corpus -> {prefix}_{key}_document.bin/.idx,
 *                      as Megatron's tools/preprocess_data.py writes them
 *   gl_prep_inspect    print a dataset's summary and chosen documents
 *   gl_prep_merge      concatenate datasets into one
 */
#ifndef GL_DATA_PREP_H
#define GL_DATA_PREP_H

#include <stdint.h>

#define GL_PREP_MAX_KEYS 16

typedef struct {
    const char *input;              /* --input: JSONL, .gz or .zst, "-" = stdin */
    const char *output_prefix;      /* --output-prefix */
    const char *json_keys[GL_PREP_MAX_KEYS];  /* --json-keys (default text) */
    int n_keys;
    const char *tokenizer_type;     /* --tokenizer-type */
    const char *tokenizer_model;    /* --tokenizer-model */
    int append_eod;                 /* --append-eod */
    int workers;                    /* --workers */
    int skip_bad_lines;             /* --skip-bad-lines (gridlm) */
    long log_interval;              /* --log-interval: documents between progress lines */
    int quiet;                      /* no progress lines */
} gl_prep_opts;

/* Tokenize the corpus.  Streams: memory is bounded by the workers'
 * batches, whatever the corpus size.  Nothing appears under the final
 * names unless the whole corpus was processed. */
void gl_prep_run(const gl_prep_opts *o);

/* Print dtype, sequences, documents and tokens of PREFIX; then for each
 * of the n docs listed, its tokens and (with a tokenizer) decoded text. */
void gl_prep_inspect(const char *prefix, const int64_t *docs, int n,
                     const char *tokenizer_type, const char *tokenizer_model);

/* Concatenate the datasets (all one dtype) into out_prefix. */
void gl_prep_merge(const char *const *prefixes, int n, const char *out_prefix);

#endif
