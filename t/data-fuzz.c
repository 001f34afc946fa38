/* data-fuzz: random corruptions of a valid .bin/.idx pair.  Every
 * corrupted pair is either refused with a message naming the file or
 * accepted and then fully readable without leaving the mapped files; the
 * reader never crashes.  Deterministic (xorshift64*, fixed seed). */
#include <config.h>
#include "data/indexed.h"
#include "tap.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rs = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void)
{
    rs ^= rs >> 12; rs ^= rs << 25; rs ^= rs >> 27;
    return rs * 0x2545F4914F6CDD1Dull;
}

static unsigned char *slurp(const char *p, size_t *n)
{
    FILE *f = fopen(p, "rb");
    if (!f) bail_out("cannot read %s", p);
    fseek(f, 0, SEEK_END); *n = (size_t)ftell(f); fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n + 64);
    if (fread(b, 1, *n, f) != *n) bail_out("short read %s", p);
    fclose(f);
    return b;
}

static void spit(const char *p, const unsigned char *b, size_t n)
{
    FILE *f = fopen(p, "wb");
    if (!f || (n && fwrite(b, 1, n, f) != n)) bail_out("cannot write %s", p);
    fclose(f);
}

/* One random corruption of the index (idx) or the tokens (bin). */
static void mutate(unsigned char *idx, size_t *ni, unsigned char *bin, size_t *nb)
{
    switch (rnd() % 7) {
    case 0: case 1: /* a byte anywhere in the index, mostly the header */
        if (*ni) idx[rnd() % 2 ? rnd() % (*ni < 34 ? *ni : 34) : rnd() % *ni] = (unsigned char)rnd();
        break;
    case 2: /* a 64-bit field set to an extreme value */
        if (*ni >= 34) {
            static const uint64_t ext[] = { 0, 1, UINT64_MAX, INT64_MAX, (uint64_t)INT64_MIN, 1ull << 32, 0xfffffffffffffff0ull };
            uint64_t v = ext[rnd() % 7];
            size_t at = (rnd() % 2) ? 18 + 8 * (rnd() % 2) : 34 + rnd() % (*ni - 33);
            if (at + 8 <= *ni) memcpy(idx + at, &v, 8);
        }
        break;
    case 3: if (*ni) *ni = rnd() % *ni; break;                 /* truncate idx */
    case 4: if (*nb) *nb = rnd() % *nb; break;                 /* truncate bin */
    case 5: { size_t k = rnd() % 40; for (size_t i = 0; i < k; i++) idx[(*ni)++] = (unsigned char)rnd(); break; }
    case 6: if (*nb) bin[rnd() % *nb] = (unsigned char)rnd(); break; /* token byte */
    }
}

int main(void)
{
    char dir[256], prefix[300], p_idx[310], p_bin[310], cmd[700];
    snprintf(dir, sizeof dir, "%s/data-fuzz.d", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
    if (system(cmd) != 0) bail_out("cannot make %s", dir);
    plan(NO_PLAN);

    long accepted = 0, refused = 0, named = 0, readable = 0, token_refusals = 0;
    for (int base = 0; base < 2; base++) {
        int dtype = base ? GL_IDX_INT32 : GL_IDX_UINT16;
        snprintf(prefix, sizeof prefix, "%s/base%d", dir, base);
        gl_idx_writer *w = gl_idx_writer_open(prefix, dtype);
        int32_t t[64];
        for (int d = 0; d < 12; d++) {
            int n = (int)(rnd() % 64);
            for (int i = 0; i < n; i++) t[i] = (int32_t)(rnd() % 1000);
            if (d == 5) gl_idx_writer_end_document(w);
            else gl_idx_writer_add_document(w, t, n);
        }
        gl_idx_writer_finish(w);
        snprintf(p_idx, sizeof p_idx, "%s.idx", prefix);
        snprintf(p_bin, sizeof p_bin, "%s.bin", prefix);
        size_t ni0, nb0;
        unsigned char *idx0 = slurp(p_idx, &ni0), *bin0 = slurp(p_bin, &nb0);
        unsigned char *idx = malloc(ni0 + 400), *bin = malloc(nb0 + 64);

        snprintf(prefix, sizeof prefix, "%s/fuzz", dir);
        snprintf(p_idx, sizeof p_idx, "%s.idx", prefix);
        snprintf(p_bin, sizeof p_bin, "%s.bin", prefix);
        for (int it = 0; it < 4000; it++) {
            size_t ni = ni0, nb = nb0;
            memcpy(idx, idx0, ni0);
            memcpy(bin, bin0, nb0);
            int k = 1 + (int)(rnd() % 3);
            for (int m = 0; m < k; m++) mutate(idx, &ni, bin, &nb);
            spit(p_idx, idx, ni);
            spit(p_bin, bin, nb);
            gl_error err = { "" };
            gl_idx *x = gl_idx_open(prefix, &err);
            if (!x) {
                refused++;
                named += strstr(err.text, "fuzz.") != NULL;
                continue;
            }
            accepted++;
            int64_t sum = 0;
            int good = 1;
            for (int64_t s = 0; s < gl_idx_num_sequences(x); s++) {
                int32_t len = gl_idx_seq_length(x, s);
                int32_t *out = malloc(((size_t)len + 1) * 4);
                if (gl_idx_read_tokens_checked(x, s, 0, len, out, 1000, &err) != 0) {
                    token_refusals++;
                    good &= strstr(err.text, "outside the vocabulary") != NULL;
                }
                free(out);
                sum += len;
            }
            for (int64_t j = 0; j < gl_idx_num_documents(x); j++)
                good &= gl_idx_doc_boundary(x, j) <= gl_idx_doc_boundary(x, j + 1);
            readable += good && sum == gl_idx_num_tokens(x) &&
                        (size_t)sum * (size_t)gl_idx_dtype_size(gl_idx_dtype(x)) == nb;
            gl_idx_close(x);
        }
        free(idx0); free(bin0); free(idx); free(bin);
    }
    diag("%ld corrupted pairs refused, %ld accepted (%ld token reads refused)", refused, accepted, token_refusals);
    ok(refused > 4000, "most corruptions refused (%ld)", refused);
    is_int(named, refused, "every refusal names the file");
    ok(accepted > 0, "harmless corruptions (token bytes) accepted (%ld)", accepted);
    is_int(readable, accepted, "every accepted pair reads consistently to the end");
    ok(token_refusals > 0, "corrupted token bytes caught as out-of-vocabulary ids");
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) diag("could not remove %s", dir);
    return done_testing();
}
