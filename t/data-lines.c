/* data-lines: the corpus reader (src/data/lines.c) reads compressed input
 * to its verified end or fails naming the file and the byte offset.
 * gzip: intact multi-member files (an empty member too) are read whole; a
 * second member cut short, without its 8-byte trailer, or one byte short
 * fails as truncated at the right offsets; a bad CRC-32 or length fails
 * as corrupt; bytes after the last member (zero padding too) fail.
 * zstd: intact multi-frame files with and without checksums, and with
 * skippable frames at the start, middle and end, are read whole; a frame
 * cut short, without its checksum, or without checksum and one byte
 * short fails as truncated; a wrong checksum or content size fails as
 * corrupt; trailing bytes fail.  Compressed standard input is recognised.
 * The streams are made here with zlib and libzstd (no tools needed), and
 * are large enough that members and frames straddle the reader's
 * 128 KiB input buffer. */
#include <config.h>
#include "data/lines.h"
#include "tap.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

static const char *DIR_ = "t/data-lines.dir";

/* A growable byte buffer. */
typedef struct { unsigned char *p; size_t n, cap; } buf;

static void put(buf *b, const void *p, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2;
        b->p = realloc(b->p, b->cap);
        if (!b->p)
            bail_out("out of memory");
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
}

/* Lines "k word word ...\n" from a small LCG: text that compresses
 * only about 2:1, so that the streams are hundreds of KiB. */
static void text(buf *b, int first, int count)
{
    unsigned long long s = 0x9e3779b97f4a7c15ull * (unsigned)(first + 1);
    for (int k = first; k < first + count; k++) {
        char line[256];
        int n = snprintf(line, sizeof line, "%d", k);
        for (int w = 0; w < 6; w++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            n += snprintf(line + n, sizeof line - (size_t)n, " %08llx", s >> 33);
        }
        line[n++] = '\n';
        put(b, line, (size_t)n);
    }
}

/* One gzip member of src, appended to out. */
static void gz_member(buf *out, const buf *src)
{
    z_stream z = { 0 };
    if (deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        bail_out("deflateInit2");
    size_t cap = deflateBound(&z, src->n) + 64;
    unsigned char *tmp = malloc(cap);
    z.next_in = src->p;
    z.avail_in = (uInt)src->n;
    z.next_out = tmp;
    z.avail_out = (uInt)cap;
    if (deflate(&z, Z_FINISH) != Z_STREAM_END)
        bail_out("deflate");
    put(out, tmp, cap - z.avail_out);
    deflateEnd(&z);
    free(tmp);
}

/* One zstd frame of src, with or without checksum, appended to out. */
static void zst_frame(buf *out, const buf *src, int checksum)
{
    ZSTD_CCtx *c = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(c, ZSTD_c_checksumFlag, checksum);
    size_t cap = ZSTD_compressBound(src->n);
    unsigned char *tmp = malloc(cap);
    size_t n = ZSTD_compress2(c, tmp, cap, src->p, src->n);
    if (ZSTD_isError(n))
        bail_out("ZSTD_compress2: %s", ZSTD_getErrorName(n));
    put(out, tmp, n);
    ZSTD_freeCCtx(c);
    free(tmp);
}

/* A skippable frame: magic 0x184D2A5X, 4-byte length, payload. */
static void zst_skippable(buf *out, unsigned x, const char *payload)
{
    unsigned char h[8] = { (unsigned char)(0x50 | x), 0x2a, 0x4d, 0x18 };
    uint32_t n = (uint32_t)strlen(payload);
    memcpy(h + 4, &n, 4);          /* little-endian hosts only, as gridlm */
    put(out, h, 8);
    put(out, payload, n);
}

static char *write_file(const char *name, const void *p, size_t n)
{
    static char path[8][512];
    static int k;
    k = (k + 1) % 8;
    snprintf(path[k], sizeof path[k], "%s/%s", DIR_, name);
    FILE *f = fopen(path[k], "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0)
        bail_out("cannot write %s", path[k]);
    return path[k];
}

/* Read everything: the concatenated lines (with "\n") into got; returns
 * what the last gl_lines_next() returned (0 or -1), err filled. */
static int read_all(const char *path, buf *got, gl_error *err)
{
    gl_lines *r = gl_lines_open(path);
    const char *line;
    size_t len;
    int rc;
    got->n = 0;
    gl_error_clear(err);
    while ((rc = gl_lines_next(r, &line, &len, err)) > 0) {
        put(got, line, len);
        put(got, "\n", 1);
    }
    if (rc < 0) {                   /* the error stays */
        gl_error again;
        ok(gl_lines_next(r, &line, &len, &again) < 0 && !strcmp(again.text, err->text),
           "%s: a second call fails with the same error", path);
    }
    gl_lines_close(r);
    return rc;
}

static void reads_whole(const char *name, const buf *file, const buf *want)
{
    buf got = { 0 };
    gl_error err;
    char *path = write_file(name, file->p, file->n);
    int rc = read_all(path, &got, &err);
    ok(rc == 0 && got.n == want->n && !memcmp(got.p, want->p, want->n),
       "%s: read whole (%zu bytes)", name, got.n);
    if (rc)
        diag("%s", err.text);
    free(got.p);
}

/* The file's first n bytes must fail with every pattern in the
 * NULL-terminated list (the path among them). */
static void fails(const char *name, const buf *file, size_t n, const char *const *pats)
{
    buf got = { 0 };
    gl_error err;
    char *path = write_file(name, file->p, n);
    int rc = read_all(path, &got, &err);
    int all = rc < 0 && strstr(err.text, path);
    for (int i = 0; pats[i]; i++)
        all = all && strstr(err.text, pats[i]);
    ok(all, "%s: refused, naming the file and where", name);
    if (!all)
        diag("rc %d: %s", rc, err.text);
    free(got.p);
}

static const char *at(const char *fmt, size_t v)
{
    static char s[8][64];
    static int k;
    k = (k + 1) % 8;
    snprintf(s[k], sizeof s[k], fmt, v);
    return s[k];
}

static void test_gzip(const buf *a, const buf *b, const buf *ab)
{
    buf f = { 0 }, empty = { 0 };
    gz_member(&f, a);
    size_t m1 = f.n;
    gz_member(&f, b);
    ok(m1 > (1 << 17) && f.n - m1 > (1 << 17), "gzip members larger than the input buffer");
    reads_whole("two.gz", &f, ab);

    buf e = { 0 };
    gz_member(&e, &empty);
    put(&e, f.p, f.n);
    reads_whole("empty-first.gz", &e, ab);

    const char *start = at("starts at byte %zu ", m1);
    size_t cut = m1 + (f.n - m1) / 2;
    fails("cut.gz", &f, cut, (const char *[]){ "truncated gzip", start, at("at byte %zu,", cut), NULL });
    fails("no-trailer.gz", &f, f.n - 8,
          (const char *[]){ "truncated gzip", start, at("at byte %zu,", f.n - 8), NULL });
    fails("one-short.gz", &f, f.n - 1, (const char *[]){ "truncated gzip", start, NULL });

    f.p[f.n - 6] ^= 0x55;          /* CRC-32 */
    fails("crc.gz", &f, f.n, (const char *[]){ "corrupt gzip", "incorrect data check", start, NULL });
    f.p[f.n - 6] ^= 0x55;
    f.p[f.n - 2] ^= 0x01;          /* ISIZE */
    fails("isize.gz", &f, f.n, (const char *[]){ "corrupt gzip", "incorrect length check", NULL });
    f.p[f.n - 2] ^= 0x01;

    size_t end = f.n;
    put(&f, "\0\0\0\0\0\0\0\0", 8);
    fails("zero-pad.gz", &f, f.n,
          (const char *[]){ "2 complete gzip members", at("from byte %zu on", end), NULL });
    f.n = end;
    put(&f, "garbage\n", 8);
    fails("garbage.gz", &f, f.n, (const char *[]){ "2 complete gzip members", NULL });
    free(f.p);
    free(e.p);
}

static void test_zstd(const buf *a, const buf *b, const buf *ab)
{
    buf f = { 0 };
    zst_frame(&f, a, 1);
    size_t f1 = f.n;
    zst_frame(&f, b, 1);
    ok(f1 > (1 << 17) && f.n - f1 > (1 << 17), "zstd frames larger than the input buffer");
    reads_whole("two.zst", &f, ab);

    const char *start = at("starts at byte %zu ", f1);
    size_t cut = f1 + (f.n - f1) / 2;
    fails("cut.zst", &f, cut, (const char *[]){ "truncated zstd", start, at("at byte %zu,", cut), NULL });
    fails("no-checksum-bytes.zst", &f, f.n - 4,
          (const char *[]){ "truncated zstd", start, at("at byte %zu,", f.n - 4), NULL });
    f.p[f.n - 1] ^= 0x55;
    fails("checksum.zst", &f, f.n, (const char *[]){ "corrupt zstd", "checksum", start, NULL });
    f.p[f.n - 1] ^= 0x55;

    size_t end = f.n;
    put(&f, "\0\0\0\0\0\0\0\0", 8);
    fails("zero-pad.zst", &f, f.n,
          (const char *[]){ "2 complete zstd frames", at("from byte %zu on", end), NULL });
    f.n = end;

    /* Frames without checksum: only completeness can be checked. */
    buf n = { 0 };
    zst_frame(&n, a, 0);
    size_t n1 = n.n;
    zst_frame(&n, b, 0);
    reads_whole("no-checksum.zst", &n, ab);
    fails("no-checksum-cut.zst", &n, n.n - 1,
          (const char *[]){ "truncated zstd", at("starts at byte %zu ", n1), NULL });

    /* Skippable frames before, between and after. */
    buf s = { 0 };
    zst_skippable(&s, 0, "first");
    zst_frame(&s, a, 1);
    zst_skippable(&s, 7, "between");
    zst_frame(&s, b, 0);
    zst_skippable(&s, 15, "");
    reads_whole("skippable.zst", &s, ab);

    /* A frame whose header declares one byte less content than it holds:
     * the frame content size is the second byte after the 1-byte
     * descriptor when the descriptor says so; flip the lowest bit of
     * whatever size field ZSTD wrote (4 bytes after the magic). */
    buf c = { 0 }, small = { 0 };
    text(&small, 0, 3);
    zst_frame(&c, &small, 0);
    unsigned fhd = c.p[4];
    int single = (fhd >> 5) & 1, fcs_flag = fhd >> 6, did = fhd & 3;
    size_t fcs_at = 5 + (single ? 0 : 1) + (did == 0 ? 0 : did == 1 ? 1 : did == 2 ? 2 : 4);
    ok(fcs_flag > 0 || single, "the small frame declares its content size");
    c.p[fcs_at] ^= 0x01;
    fails("content-size.zst", &c, c.n, (const char *[]){ "corrupt zstd", NULL });
    free(f.p);
    free(n.p);
    free(s.p);
    free(c.p);
    free(small.p);
}

/* "-" reads standard input, and recognises compression there too. */
static void test_stdin(const buf *a)
{
    buf f = { 0 }, got = { 0 };
    gl_error err;
    gz_member(&f, a);
    char *path = write_file("stdin.gz", f.p, f.n);
    int saved = dup(0), fd = open(path, O_RDONLY);
    if (saved < 0 || fd < 0 || dup2(fd, 0) < 0)
        bail_out("cannot redirect standard input");
    close(fd);
    int rc = read_all("-", &got, &err);
    dup2(saved, 0);
    close(saved);
    ok(rc == 0 && got.n == a->n && !memcmp(got.p, a->p, a->n), "gzip on standard input is read whole");
    free(f.p);
    free(got.p);
}

int main(void)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", DIR_, DIR_);
    if (system(cmd) != 0)
        bail_out("cannot make %s", DIR_);
    plan(NO_PLAN);
    buf a = { 0 }, b = { 0 }, ab = { 0 };
    text(&a, 0, 6000);
    text(&b, 6000, 6000);
    put(&ab, a.p, a.n);
    put(&ab, b.p, b.n);
    test_gzip(&a, &b, &ab);
    test_zstd(&a, &b, &ab);
    test_stdin(&a);
    free(a.p);
    free(b.p);
    free(ab.p);
    if (!tap_failed()) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", DIR_);
        if (system(cmd) != 0)
            diag("cannot remove %s", DIR_);
    }
    return done_testing();
}
