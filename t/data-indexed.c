/* data-indexed: the Megatron .bin/.idx reader and writer, byte for byte,
 * every dtype, and every kind of bad file refused with a message. */
#include <config.h>
#include "data/indexed.h"
#include "tap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

static char dir[256];

static void put_file(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n)
        bail_out("cannot write %s", path);
    fclose(f);
}

static unsigned char *get_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc(*n + 1);
    if (fread(p, 1, *n, f) != *n)
        bail_out("cannot read %s", path);
    fclose(f);
    return p;
}

/* Two documents, uint16: [1, 2, 3] and [65535, 7].  Every byte written
 * out by hand from the layout in megatron-data.md. */
static const unsigned char FIX_IDX[] = {
    'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0,        /* magic */
    1, 0, 0, 0, 0, 0, 0, 0,                         /* version 1 */
    8,                                              /* dtype uint16 */
    2, 0, 0, 0, 0, 0, 0, 0,                         /* N = 2 sequences */
    3, 0, 0, 0, 0, 0, 0, 0,                         /* D = 3 boundaries */
    3, 0, 0, 0, 2, 0, 0, 0,                         /* lengths 3, 2 */
    0, 0, 0, 0, 0, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0, /* offsets 0, 6 */
    0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, /* boundaries 0, 1, 2 */
    2, 0, 0, 0, 0, 0, 0, 0,
};
static const unsigned char FIX_BIN[] = { 1, 0, 2, 0, 3, 0, 0xff, 0xff, 7, 0 };

static char *path(const char *name, const char *ext)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s%s", dir, name, ext);
    return buf[k];
}

static void put_pair(const char *name, const unsigned char *idx, size_t ni,
                     const unsigned char *bin, size_t nb)
{
    put_file(path(name, ".idx"), idx, ni);
    put_file(path(name, ".bin"), bin, nb);
}

/* Expect gl_idx_open to refuse `name` with a message holding `what`. */
static void refuses(const char *name, const char *what, const char *desc)
{
    gl_error err = { "" };
    gl_idx *x = gl_idx_open(path(name, ""), &err);
    ok(x == NULL && strstr(err.text, what) && strstr(err.text, name), "refuses %s: %s", desc, err.text);
    gl_idx_close(x);
}

static void test_fixture(void)
{
    gl_idx_writer *w = gl_idx_writer_open(path("w", ""), GL_IDX_UINT16);
    int32_t d0[] = { 1, 2, 3 }, d1[] = { 65535, 7 };
    gl_idx_writer_add_document(w, d0, 3);
    ok(access(path("w", ".idx"), F_OK) != 0 && access(path("w", ".bin"), F_OK) != 0,
       "nothing under the final names before finish");
    gl_idx_writer_add_document(w, d1, 2);
    gl_idx_writer_finish(w);
    size_t ni, nb;
    unsigned char *idx = get_file(path("w", ".idx"), &ni), *bin = get_file(path("w", ".bin"), &nb);
    ok(idx && ni == sizeof FIX_IDX && memcmp(idx, FIX_IDX, ni) == 0, "writer's .idx equals the hand-built bytes");
    ok(bin && nb == sizeof FIX_BIN && memcmp(bin, FIX_BIN, nb) == 0, "writer's .bin equals the hand-built bytes");
    free(idx);
    free(bin);

    put_pair("fix", FIX_IDX, sizeof FIX_IDX, FIX_BIN, sizeof FIX_BIN);
    gl_error err;
    gl_idx *x = gl_idx_open(path("fix", ""), &err);
    ok(x != NULL, "reader opens the fixture");
    if (!x)
        bail_out("%s", err.text);
    is_int(gl_idx_dtype(x), GL_IDX_UINT16, "dtype uint16");
    is_int(gl_idx_num_sequences(x), 2, "2 sequences");
    is_int(gl_idx_num_documents(x), 2, "2 documents");
    is_int(gl_idx_num_tokens(x), 5, "5 tokens");
    int32_t t[3];
    gl_idx_read_tokens(x, 1, 0, 2, t, 0);
    ok(t[0] == 65535 && t[1] == 7, "document 1 reads 65535 7");
    gl_idx_read_tokens(x, 0, 1, 2, t, 0);
    ok(t[0] == 2 && t[1] == 3, "offset read within a sequence");
    ok(gl_idx_read_tokens_checked(x, 1, 0, 2, t, 65535, &err) != 0 &&
       strstr(err.text, "65535") && strstr(err.text, "fix"), "token beyond the vocabulary refused: %s",
       err.text);
    ok(gl_idx_read_tokens_checked(x, 0, 2, 2, t, 0, &err) != 0, "read past a sequence refused");
    ok(gl_idx_read_tokens_checked(x, 2, 0, 1, t, 0, &err) != 0, "sequence out of range refused");
    gl_idx_close(x);
}

static void test_dtypes(void)
{
    for (int dt = 1; dt <= 8; dt++) {
        char name[32];
        snprintf(name, sizeof name, "dt%d", dt);
        long maxv = dt == GL_IDX_INT8 ? 127 : dt == GL_IDX_UINT8 ? 255 : dt == GL_IDX_INT16 ? 32767
                  : dt == GL_IDX_UINT16 ? 65535 : dt == GL_IDX_FLOAT32 ? 16777216L : 2000000000L;
        gl_idx_writer *w = gl_idx_writer_open(path(name, ""), dt);
        srand(dt);
        int32_t buf[300], total = 0, ndoc = 50;
        for (int d = 0; d < ndoc; d++) {
            int n = rand() % 300;
            for (int i = 0; i < n; i++)
                buf[i] = (int32_t)(((long)rand() * 7919L + i) % (maxv + 1));
            if (d % 7 == 0)
                buf[0] = (int32_t)maxv, n = n ? n : 1;
            gl_idx_writer_add_document(w, buf, n);
            total += n;
        }
        gl_idx_writer_finish(w);
        gl_error err;
        gl_idx *x = gl_idx_open(path(name, ""), &err);
        int good = x && gl_idx_dtype(x) == dt && gl_idx_num_documents(x) == ndoc &&
                   gl_idx_num_tokens(x) == total;
        srand(dt);
        for (int d = 0; good && d < ndoc; d++) {
            int n = rand() % 300;
            int32_t want[300], got[300];
            for (int i = 0; i < n; i++)
                want[i] = (int32_t)(((long)rand() * 7919L + i) % (maxv + 1));
            if (d % 7 == 0)
                want[0] = (int32_t)maxv, n = n ? n : 1;
            good = gl_idx_seq_length(x, d) == n;
            if (good) {
                gl_idx_read_tokens(x, d, 0, n, got, 0);
                good = memcmp(want, got, (size_t)n * 4) == 0;
            }
        }
        ok(good, "round trip of 50 documents as %s (item size %d)", gl_idx_dtype_name(dt), gl_idx_dtype_size(dt));
        gl_idx_close(x);
    }
}

static void test_structure(void)
{
    /* A document with no sequence (Megatron: empty text) adds only a
     * boundary; sequences and documents then differ. */
    gl_idx_writer *w = gl_idx_writer_open(path("empty", ""), GL_IDX_INT32);
    int32_t a[] = { 5, 6 };
    gl_idx_writer_add_document(w, a, 2);
    gl_idx_writer_end_document(w);
    gl_idx_writer_add_sequence(w, a, 1);
    gl_idx_writer_add_sequence(w, a + 1, 1);
    gl_idx_writer_end_document(w);
    gl_idx_writer_finish(w);
    gl_error err;
    gl_idx *x = gl_idx_open(path("empty", ""), &err);
    ok(x && gl_idx_num_sequences(x) == 3 && gl_idx_num_documents(x) == 3 &&
       gl_idx_doc_boundary(x, 1) == 1 && gl_idx_doc_boundary(x, 2) == 1 &&
       gl_idx_doc_boundary(x, 3) == 3, "empty documents and multi-sequence documents keep their boundaries");

    /* --merge: fixture + this one. */
    gl_idx *f = gl_idx_open(path("fix", ""), &err);
    gl_idx_writer *m = gl_idx_writer_open(path("merged", ""), GL_IDX_INT32);
    gl_idx_writer_append_dataset(m, x);
    gl_idx_writer_append_dataset(m, x);
    gl_idx_writer_finish(m);
    gl_idx *y = gl_idx_open(path("merged", ""), &err);
    ok(y && gl_idx_num_sequences(y) == 6 && gl_idx_num_documents(y) == 6 &&
       gl_idx_doc_boundary(y, 4) == 4 && gl_idx_doc_boundary(y, 6) == 6 && gl_idx_num_tokens(y) == 8,
       "merge of a dataset with itself doubles sequences, documents, tokens");
    gl_idx_close(y);
    gl_idx_close(f);
    gl_idx_close(x);

    /* Multimodal: N mode bytes after the boundaries are accepted. */
    unsigned char mm[sizeof FIX_IDX + 2];
    memcpy(mm, FIX_IDX, sizeof FIX_IDX);
    mm[sizeof FIX_IDX] = 0;
    mm[sizeof FIX_IDX + 1] = 1;
    put_pair("mm", mm, sizeof mm, FIX_BIN, sizeof FIX_BIN);
    x = gl_idx_open(path("mm", ""), &err);
    ok(x && gl_idx_multimodal(x), "multimodal index (sequence modes) accepted");
    gl_idx_close(x);
}

static void test_bad(void)
{
    unsigned char b[sizeof FIX_IDX];
#define MUT(name, stmt, what, desc) do { memcpy(b, FIX_IDX, sizeof b); stmt; \
        put_pair(name, b, sizeof b, FIX_BIN, sizeof FIX_BIN); refuses(name, what, desc); } while (0)
    MUT("magic", b[3] = 'X', "magic", "wrong magic");
    MUT("version", b[9] = 2, "version 2", "version 2");
    MUT("dtype", b[17] = 9, "dtype code 9", "unknown dtype code");
    MUT("dtype0", b[17] = 0, "dtype code 0", "dtype code 0");
    MUT("nseq", b[18] = 200, "truncated", "N larger than the file");
    MUT("nbig", b[25] = 0x80, "truncated", "N near 2^63");
    MUT("dbig", b[33] = 0xff, "truncated", "D near 2^64");
    MUT("nsmall", b[18] = 1, "does not match", "N smaller than the file");
    MUT("len", b[34] = 4, "disagree", "lengths and offsets disagree");
    MUT("neg", (b[38] = 0xff, b[39] = 0xff, b[40] = 0xff, b[41] = 0xff), "negative", "negative length");
    MUT("off", b[50] = 4, "disagree", "offset not the running sum");
    MUT("b0", b[58] = 1, "boundary 0", "first boundary not 0");
    MUT("bdec", (b[66] = 0, b[74] = 1), "not the number", "last boundary short of N");
    MUT("bover", b[74] = 3, "boundary 2", "boundary beyond N");
    MUT("bin", b[38] = 1, "does not belong", "lengths cover less than the .bin");
#undef MUT
    put_pair("short", FIX_IDX, 20, FIX_BIN, sizeof FIX_BIN);
    refuses("short", "truncated", "index shorter than the header");
    put_pair("cut", FIX_IDX, sizeof FIX_IDX - 3, FIX_BIN, sizeof FIX_BIN);
    refuses("cut", "truncated", "index cut in the boundaries");
    put_pair("cutbin", FIX_IDX, sizeof FIX_IDX, FIX_BIN, sizeof FIX_BIN - 2);
    refuses("cutbin", "truncated .bin", "truncated .bin");
    unsigned char longbin[sizeof FIX_BIN + 2] = { 0 };
    memcpy(longbin, FIX_BIN, sizeof FIX_BIN);
    put_pair("longbin", FIX_IDX, sizeof FIX_IDX, longbin, sizeof longbin);
    refuses("longbin", "does not belong", ".bin longer than the index says");
    put_file(path("nobin", ".idx"), FIX_IDX, sizeof FIX_IDX);
    refuses("nobin", "cannot open", "missing .bin");
    refuses("nothing", "cannot open", "missing .idx");

    /* A float dataset with a fractional token. */
    gl_idx_writer *w = gl_idx_writer_open(path("flt", ""), GL_IDX_FLOAT32);
    int32_t t[] = { 1, 2 };
    gl_idx_writer_add_document(w, t, 2);
    gl_idx_writer_finish(w);
    size_t nb;
    unsigned char *bin = get_file(path("flt", ".bin"), &nb);
    float half = 1.5f;
    memcpy(bin + 4, &half, 4);
    put_file(path("flt", ".bin"), bin, nb);
    free(bin);
    gl_error err;
    gl_idx *x = gl_idx_open(path("flt", ""), &err);
    int32_t out[2];
    ok(x && gl_idx_read_tokens_checked(x, 0, 0, 2, out, 0, &err) != 0 &&
       strstr(err.text, "whole number"), "fractional float token refused: %s", err.text);
    gl_idx_close(x);
}

int main(void)
{
    snprintf(dir, sizeof dir, "%s/data-indexed.d", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
    if (system(cmd) != 0)
        bail_out("cannot make %s", dir);
    plan(NO_PLAN);
    test_fixture();
    test_dtypes();
    test_structure();
    test_bad();
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (!tap_failed() && system(cmd) != 0)
        diag("could not remove %s", dir);
    return done_testing();
}
