/*
 * strmap.h: two small open-addressing hash tables for the tokenizer.
 *
 *   gl_strmap: byte string -> int32 (the vocabulary; keys are copied).
 *   gl_u64map: uint64 -> uint64 (BPE merges: (left id, right id) ->
 *              (rank, merged id)).
 *
 * Both grow by doubling at 50% load, use linear probing, and never
 * delete.  Lookups are read-only and safe from many threads at once.
 */
#ifndef GL_DATA_STRMAP_H
#define GL_DATA_STRMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    size_t cap, count;          /* cap is a power of two */
    uint32_t *hash;             /* 0 marks an empty slot */
    char **key;
    uint32_t *klen;
    int32_t *val;
} gl_strmap;

void gl_strmap_init(gl_strmap *m);
void gl_strmap_free(gl_strmap *m);
/* Insert or overwrite. */
void gl_strmap_put(gl_strmap *m, const char *k, size_t n, int32_t v);
/* Value, or -1 when absent. */
int32_t gl_strmap_get(const gl_strmap *m, const char *k, size_t n);

typedef struct {
    size_t cap, count;
    uint64_t *key;              /* UINT64_MAX marks an empty slot */
    uint64_t *val;
} gl_u64map;

void gl_u64map_init(gl_u64map *m);
void gl_u64map_free(gl_u64map *m);
void gl_u64map_put(gl_u64map *m, uint64_t k, uint64_t v);
/* 1 and *v set when present, 0 otherwise. */
int gl_u64map_get(const gl_u64map *m, uint64_t k, uint64_t *v);

/* The hash used here and for cache file names: gl_fnv1a64 (base/hash.h). */
#include "base/hash.h"

#endif
