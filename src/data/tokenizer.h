/*
 * tokenizer.h: BPE tokenizers loaded from a Hugging Face tokenizer.json
 * (--tokenizer-type HuggingFaceTokenizer --tokenizer-model PATH) or from
 * GPT-2's vocab.json + merges.txt (GPT2BPETokenizer), encoding exactly
 * as Hugging Face `tokenizers` does.
 *
 * The pipeline is Hugging Face's:
 *   1. added tokens that are not "normalized" are cut out of the raw
 *      text (leftmost-longest match; single_word, lstrip, rstrip);
 *   2. each remaining piece is normalized, and "normalized" added tokens
 *      are cut out of the result;
 *   3. the pre-tokenizers split the pieces into words (Split with a
 *      regex or a string and its behaviour, ByteLevel with the GPT-2
 *      regex and the byte-to-unicode map, Digits, Sequence);
 *   4. the BPE model turns each word into ids: whole-word lookup when
 *      ignore_merges is set, otherwise characters merged by rank (the
 *      lowest-ranked adjacent pair first, the leftmost among equals),
 *      with byte fallback (<0xNN>) and unk as configured;
 *   5. with add_special, the post-processor adds its special tokens
 *      (TemplateProcessing, as Llama 3 adds <|begin_of_text|>).
 * Supported normalizers: Sequence, Prepend, Replace; pre-tokenizers:
 * ByteLevel, Split, Digits, Sequence.  Others (NFC, Metaspace, ...) are
 * refused at load time with a message naming them.
 * Regexes are compiled by PCRE2 with Unicode properties; \s and \S are
 * given Oniguruma's meaning (White_Space) so that PCRE2 splits where
 * Hugging Face does.  Input that is not valid UTF-8 is repaired first
 * (utf8.h).
 *
 * A gl_tokenizer is read-only after loading and shared by threads; each
 * thread encodes through its own gl_tok_encoder (regex match data, a
 * word cache, buffers).
 */
#ifndef GL_DATA_TOKENIZER_H
#define GL_DATA_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gl_tokenizer gl_tokenizer;
typedef struct gl_tok_encoder gl_tok_encoder;

/* PATH is a tokenizer.json or a directory holding one (and perhaps
 * tokenizer_config.json, whose eos_token names the end-of-document
 * token).  NULL with a message in err on failure.
 *
 * Nothing in the files is trusted: every id must be a JSON integer from
 * 0 that fits 32 bits and lies below the number of tokens the files
 * hold (the id table is sized by that number, never by an id); no id
 * may name two tokens; an added token's id must be the one Hugging Face
 * `tokenizers` gives it (its vocabulary id, or the next id after the
 * vocabulary and the added tokens before it); a content listed twice in
 * added_tokens is one token whose later entry wins; the vocabulary must
 * not be empty; post-processor ids must name tokens; a
 * tokenizer_config.json that is there must parse and its eos_token must
 * be a token.  GPT-2's vocab.json is held to the same rules. */
gl_tokenizer *gl_tokenizer_load(const char *path, gl_error *err);
/* GPT-2's files: vocab.json and merges.txt. */
gl_tokenizer *gl_tokenizer_load_gpt2(const char *vocab_file, const char *merge_file,
                                     gl_error *err);
/* By Megatron's --tokenizer-type: HuggingFaceTokenizer (model = PATH),
 * GPT2BPETokenizer (model = "VOCAB.json:MERGES.txt" or a directory
 * holding vocab.json and merges.txt).  Dies with a message naming the
 * flag on failure, exit code 2 (the flag names a bad file). */
gl_tokenizer *gl_tokenizer_open(const char *type, const char *model);
void gl_tokenizer_free(gl_tokenizer *t);

/* Largest id + 1 over the model vocabulary and the added tokens. */
long gl_tokenizer_vocab_size(const gl_tokenizer *t);
/* The end-of-document token (eos), or -1 when the tokenizer has none. */
int32_t gl_tokenizer_eod(const gl_tokenizer *t);
/* Id of a token string (model or added), or -1. */
int32_t gl_tokenizer_token_to_id(const gl_tokenizer *t, const char *s, size_t n);
/* The token string of an id (NULL if unused); *len set. */
const char *gl_tokenizer_id_to_token(const gl_tokenizer *t, int32_t id, size_t *len);
/* 1 when the tokenizer has a byte-level pre-tokenizer or decoder. */
int gl_tokenizer_byte_level(const gl_tokenizer *t);

gl_tok_encoder *gl_tok_encoder_new(const gl_tokenizer *t);
void gl_tok_encoder_free(gl_tok_encoder *e);
/* Encode text[0..len); returns the count, *ids pointing into the
 * encoder's buffer (valid until the next call).  add_special applies
 * the post-processor, as Hugging Face's encode(add_special_tokens=True)
 * and Megatron's HuggingFaceTokenizer.tokenize do. */
size_t gl_tok_encode(gl_tok_encoder *e, const char *text, size_t len, int add_special,
                     const int32_t **ids);

/* Decode ids to bytes as the tokenizer's decoder does (ByteLevel maps
 * characters back to bytes; ByteFallback, Fuse, Replace and Strip are
 * applied); returns a malloc'ed buffer (NUL-terminated) and its length.
 * Special tokens are kept. */
char *gl_tok_decode(const gl_tokenizer *t, const int32_t *ids, size_t n, size_t *outlen);

/* For training: a tokenizer with only GPT-2's ByteLevel pre-tokenizer
 * (no vocabulary), and an encoder hook that hands every pre-tokenized
 * word (in byte-level characters) to fn instead of the BPE model.
 * Added tokens listed in `specials` (comma-separated) are cut out of the
 * text first, as in encoding. */
gl_tokenizer *gl_tokenizer_bytelevel_skeleton(const char *specials);
typedef void (*gl_word_fn)(void *ctx, const char *word, size_t n);
void gl_tok_encoder_set_word_hook(gl_tok_encoder *e, gl_word_fn fn, void *ctx);

/* The GPT-2 byte-to-unicode map: the code point that stands for byte b. */
uint32_t gl_bytelevel_char(unsigned b);
/* The GPT-2 and Llama 3 pre-tokenization regexes, as Hugging Face
 * writes them in tokenizer.json. */
extern const char GL_GPT2_REGEX[];
extern const char GL_LLAMA3_REGEX[];

#ifdef __cplusplus
}
#endif
#endif
