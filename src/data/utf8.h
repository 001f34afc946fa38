/*
 * utf8.h: UTF-8 decoding, encoding and repair for the tokenizer.
 *
 * Hugging Face `tokenizers` only ever sees valid Unicode text (a Rust
 * &str, a Python str).  gridlm reads bytes, so text that is not valid
 * UTF-8 is first repaired the way Python's bytes.decode("utf-8",
 * errors="replace") does it: each maximal subpart of an ill-formed
 * sequence (Unicode's "U+FFFD substitution of maximal subparts") becomes
 * one U+FFFD.  The encoding of the repaired text is then exactly what
 * Hugging Face gives for that decoded str.
 */
#ifndef GL_DATA_UTF8_H
#define GL_DATA_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Length of the well-formed sequence at s[0..n), or 0 if ill-formed;
 * *cp receives the code point. */
size_t gl_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp);
/* Bytes of the maximal ill-formed subpart at s (>= 1). */
size_t gl_utf8_bad_prefix(const unsigned char *s, size_t n);
/* Write cp as UTF-8 into out (4 bytes room); returns the length. */
size_t gl_utf8_encode(uint32_t cp, char *out);
/* 1 when s[0..n) is valid UTF-8. */
int gl_utf8_valid(const char *s, size_t n);
/* Repair into *out (grown with gl_realloc, capacity *cap); returns the
 * new length. */
size_t gl_utf8_repair(const char *s, size_t n, char **out, size_t *cap);

#endif
