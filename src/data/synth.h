/*
 * synth.h: gridlm's built-in synthetic corpus (gridlm-prep
 * --synthetic-corpus), the quick start's training data.
 *
 * Deterministic: document d of seed s depends on (s, d) alone, drawn
 * from the counter-based generator of base/rng.h.  The text is English-like
 * and learnable at several levels, so a tiny model's loss falls well
 * below the unigram entropy: a fixed grammar (stories whose characters
 * recur within a document, so copying pays), fixed facts shared by all
 * documents (a country's capital, an animal's sound: memorisation pays),
 * arithmetic with small numbers, counting sequences, tiny programs, and
 * questions answered from earlier in the same document.
 */
#ifndef GL_DATA_SYNTH_H
#define GL_DATA_SYNTH_H

#include <stddef.h>
#include <stdint.h>

/* Document d as text (malloc'ed, NUL-terminated). */
char *gl_synth_document(uint64_t seed, uint64_t d, size_t *len);
/* Write documents 0..n-1 as JSONL {"text": ...} lines to path (atomic). */
void gl_synth_write(const char *path, long n, uint64_t seed);

#endif
