/*
 * indexed.h: Megatron-LM's indexed dataset (PREFIX.bin + PREFIX.idx),
 * read through mmap and written byte for byte as Megatron writes it.
 *
 * The layout (../shared/reference/megatron-data.md):
 *
 *   .idx  magic "MMIDIDX\0\0" | u64 version = 1 | u8 dtype code
 *         | u64 N sequences | u64 D document boundaries
 *         | i32 length[N] | i64 byte offset[N] | i64 boundary[D]
 *         | (i8 mode[N], multimodal datasets only)
 *   .bin  the tokens of every sequence, concatenated, in that dtype.
 *
 * All integers are little-endian and packed; the header is 34 bytes, so
 * the 64-bit arrays are not aligned and are read with memcpy.
 *
 * The reader trusts nothing: gl_idx_open() checks the magic, the
 * version, the dtype, that the file sizes match N and D, that lengths
 * are non-negative, that offsets are exactly the running sums of the
 * lengths, that the boundaries start at 0, never decrease and end at N,
 * and that the last sequence ends where the .bin ends.  A file that
 * fails any check is refused with a message naming the file and the
 * problem; nothing past the checks can read out of bounds.
 *
 * Token ids beyond the vocabulary are caught when tokens are read
 * (gl_idx_read_tokens with a vocabulary size), because checking every
 * token of a terabyte corpus at open time would take hours.
 */
#ifndef GL_DATA_INDEXED_H
#define GL_DATA_INDEXED_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Megatron's dtype codes (DType in indexed_dataset.py). */
enum {
    GL_IDX_UINT8 = 1, GL_IDX_INT8 = 2, GL_IDX_INT16 = 3, GL_IDX_INT32 = 4,
    GL_IDX_INT64 = 5, GL_IDX_FLOAT64 = 6, GL_IDX_FLOAT32 = 7, GL_IDX_UINT16 = 8
};

#define GL_IDX_HEADER_SIZE 34

/* Bytes per item of a dtype code, 0 for an unknown code. */
int gl_idx_dtype_size(int code);
/* "uint16", "int32", ...; "unknown" for a bad code. */
const char *gl_idx_dtype_name(int code);
/* Parse a name as above; 0 when unknown. */
int gl_idx_dtype_from_name(const char *name);
/* Megatron's choice: uint16 below 65,500 entries, int32 otherwise. */
int gl_idx_dtype_for_vocab(long vocab_size);

typedef struct gl_idx gl_idx;

/* Open PREFIX.idx and PREFIX.bin.  On failure returns NULL and writes
 * one line (naming the file and the problem) into err. */
gl_idx *gl_idx_open(const char *prefix, gl_error *err);
/* Same, but stops the job with that line on failure. */
gl_idx *gl_idx_open_or_die(const char *prefix);
void gl_idx_close(gl_idx *x);

const char *gl_idx_prefix(const gl_idx *x);
int gl_idx_dtype(const gl_idx *x);
int64_t gl_idx_num_sequences(const gl_idx *x);
/* Documents = boundaries - 1. */
int64_t gl_idx_num_documents(const gl_idx *x);
int64_t gl_idx_num_tokens(const gl_idx *x);
int gl_idx_multimodal(const gl_idx *x);

/* Length (tokens) and first-token element offset of sequence i. */
int32_t gl_idx_seq_length(const gl_idx *x, int64_t i);
/* Boundary j (0 <= j <= documents): the first sequence of document j. */
int64_t gl_idx_doc_boundary(const gl_idx *x, int64_t j);
/* All sequence lengths as a copy (n entries), for the sample index. */
int32_t *gl_idx_lengths_copy(const gl_idx *x);

/* Copy `count` tokens of sequence i starting at token `offset` into out
 * as int32.  Bounds are checked (dies naming the file on a bad request).
 * If vocab_size > 0, a token < 0 or >= vocab_size stops the job with a
 * message naming the file, the sequence and the id.  Floating dtypes
 * must hold whole numbers. */
void gl_idx_read_tokens(const gl_idx *x, int64_t i, int64_t offset, int64_t count,
                        int32_t *out, long vocab_size);
/* Non-dying variant for tools and tests: 0 on success, -1 with err. */
int gl_idx_read_tokens_checked(const gl_idx *x, int64_t i, int64_t offset, int64_t count,
                               int32_t *out, long vocab_size, gl_error *err);

/* ------------------------------------------------------------------
 * Writer.  Streams tokens to a temporary beside PREFIX.bin and lengths
 * and boundaries to two more (base/file.h: exclusive, random names,
 * removed when the program fails or is stopped); gl_idx_writer_finish()
 * writes the .idx through a fourth, fsyncs and renames .bin then .idx
 * over the final names, so nothing half written ever carries a final
 * name.  Opening a writer removes the temporaries a killed earlier run
 * left beside PREFIX, saying so.  Errors stop the job, naming the file.
 */
typedef struct gl_idx_writer gl_idx_writer;

gl_idx_writer *gl_idx_writer_open(const char *prefix, int dtype);
/* Append one sequence (whose tokens must fit the dtype; dies otherwise). */
void gl_idx_writer_add_sequence(gl_idx_writer *w, const int32_t *tokens, int64_t n);
/* Append raw bytes of an already-encoded sequence of n items (merge). */
void gl_idx_writer_add_raw(gl_idx_writer *w, const void *bytes, int64_t n);
/* Close the current document (Megatron's end_document / add_document). */
void gl_idx_writer_end_document(gl_idx_writer *w);
/* Convenience: one sequence that is a whole document. */
void gl_idx_writer_add_document(gl_idx_writer *w, const int32_t *tokens, int64_t n);
/* Write the index, rename both files into place, free w. */
void gl_idx_writer_finish(gl_idx_writer *w);
/* Remove the temporary files and free w (on an error path). */
void gl_idx_writer_abandon(gl_idx_writer *w);
int64_t gl_idx_writer_tokens(const gl_idx_writer *w);
int64_t gl_idx_writer_documents(const gl_idx_writer *w);

/* Append all of src (a whole dataset, same dtype) to w: --merge. */
void gl_idx_writer_append_dataset(gl_idx_writer *w, const gl_idx *src);

#ifdef __cplusplus
}
#endif
#endif
