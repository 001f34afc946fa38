/*
 * tokenizer_impl.h: the inside of a gl_tokenizer, private to the two
 * files that implement tokenizer.h: tokenizer_load.c builds it from the
 * files (tokenizer.json, GPT-2's vocab.json and merges.txt), and
 * tokenizer_pipeline.c runs it (normalize, pre-tokenize, BPE, decode).
 * Nothing else includes this header.
 */
#ifndef GL_DATA_TOKENIZER_IMPL_H
#define GL_DATA_TOKENIZER_IMPL_H

#include <stdint.h>
#include <string.h>

#include "data/tokenizer.h"
#include "data/strmap.h"
#include "base/log.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

enum { NORM_PREPEND = 1, NORM_REPLACE };
typedef struct {
    int kind;
    char *a; size_t alen;       /* Prepend: text; Replace: literal pattern */
    char *b; size_t blen;       /* Replace: content */
    pcre2_code *re;             /* Replace with a Regex pattern */
} norm_step;

enum { PT_BYTELEVEL = 1, PT_SPLIT, PT_DIGITS };
enum { SB_REMOVED = 1, SB_ISOLATED, SB_MERGED_PREV, SB_MERGED_NEXT, SB_CONTIGUOUS };
typedef struct {
    int kind;
    int add_prefix_space, use_regex;   /* ByteLevel */
    pcre2_code *re;                    /* Split (regex) or ByteLevel's GPT-2 regex */
    char *lit; size_t litlen;          /* Split with a String pattern */
    int behavior, invert;              /* Split */
    int individual;                    /* Digits */
} pretok;

enum { DEC_BYTELEVEL = 1, DEC_BYTEFALLBACK, DEC_FUSE, DEC_REPLACE, DEC_STRIP, DEC_METASPACE };
typedef struct {
    int kind;
    char *a; size_t alen, blen; char *b;
    int start, stop;
} dec_step;

typedef struct {
    char *content; size_t len;
    int32_t id;
    int single_word, lstrip, rstrip, normalized, special;
} added_tok;

typedef struct {                /* added tokens grouped by first byte */
    int *idx[256];
    int n[256];
} added_set;

struct gl_tokenizer {
    gl_strmap vocab;            /* model vocabulary */
    gl_strmap added_map;        /* added token content -> id */
    char **id_str; uint32_t *id_len; long n_ids;  /* n_ids: tokens in the files (see reserve_ids) */
    long n_model;               /* entries of the model vocabulary */
    gl_u64map merges;           /* (left << 32 | right) -> (rank << 32 | merged) */
    int ignore_merges, byte_fallback, fuse_unk;
    int32_t unk_id;
    char *cont_prefix, *eow_suffix;
    int32_t byte_tok[256];      /* <0xNN> ids for byte fallback, -1 when absent */
    norm_step *norms; int n_norms;
    pretok *pts; int n_pts;
    dec_step *decs; int n_decs;
    added_tok *added; int n_added;
    added_set raw_set, norm_set;
    int32_t *pp_pre, *pp_post; int n_pp_pre, n_pp_post;
    int32_t eod;
    long vocab_size;
    int byte_level;
    int u2b[512];               /* code point (< 512) -> byte, -1 */
    pcre2_code *word_re;        /* \w as Rust's regex means it, for single_word */
};

/* n bytes of s as a NUL-terminated malloc'd string. */
static inline char *dupn(const char *s, size_t n)
{
    char *d = gl_malloc(n + 1);
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

/* White_Space, the meaning of \s in Oniguruma and in Rust's regex: as a
 * test, and as the body of a PCRE2 character class (the same set). */
static inline int is_white_space(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

#define WS_CLASS "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}" \
                 "\\x{202F}\\x{205F}\\x{3000}"

#endif
