/* lines.c: line reader over plain, gzip and zstd files (see lines.h). */
#include <config.h>
#include "data/lines.h"
#include "base/file.h"
#include "base/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

enum { SRC_PLAIN, SRC_GZIP, SRC_ZSTD };

struct gl_lines {
    char *path;
    int kind;
    FILE *f;                    /* plain and zstd */
    gzFile gz;
    ZSTD_DCtx *zd;
    unsigned char *zin; size_t zin_cap; ZSTD_inBuffer zib;
    char *buf; size_t cap, lo, hi;  /* decompressed data in buf[lo, hi) */
    int eof;
    long lineno;
    uint64_t bytes;
};

gl_lines *gl_lines_open(const char *path)
{
    gl_lines *r = gl_calloc(1, sizeof *r);
    r->path = gl_strdup(path);
    gl_error e;
    r->f = strcmp(path, "-") == 0 ? stdin : gl_file_fopen_read(path, &e);
    if (!r->f)
        gl_die("--input: %s", e.text);
    unsigned char magic[4] = { 0 };
    size_t m = 0;
    if (r->f != stdin) {
        m = fread(magic, 1, 4, r->f);
        rewind(r->f);
    }
    if (m >= 2 && magic[0] == 0x1f && magic[1] == 0x8b) {
        r->kind = SRC_GZIP;
        fclose(r->f);
        r->f = NULL;
        r->gz = gzopen(path, "rb");
        if (!r->gz)
            gl_die("--input %s: cannot open as gzip", path);
        gzbuffer(r->gz, 1 << 18);
    } else if (m == 4 && magic[0] == 0x28 && magic[1] == 0xb5 && magic[2] == 0x2f && magic[3] == 0xfd) {
        r->kind = SRC_ZSTD;
        r->zd = ZSTD_createDCtx();
        r->zin_cap = ZSTD_DStreamInSize();
        r->zin = gl_malloc(r->zin_cap);
        r->zib = (ZSTD_inBuffer){ r->zin, 0, 0 };
    }
    r->cap = 1 << 20;
    r->buf = gl_malloc(r->cap);
    return r;
}

/* Append more decompressed bytes after buf[hi]; 0 at the end. */
static size_t refill(gl_lines *r)
{
    if (r->cap - r->hi < (1 << 16)) {
        /* slide the partial line down, or grow for a long one */
        if (r->lo > 0) {
            memmove(r->buf, r->buf + r->lo, r->hi - r->lo);
            r->hi -= r->lo;
            r->lo = 0;
        }
        if (r->cap - r->hi < (1 << 16)) {
            r->cap *= 2;
            r->buf = gl_realloc(r->buf, r->cap);
        }
    }
    size_t room = r->cap - r->hi, got = 0;
    switch (r->kind) {
    case SRC_PLAIN:
        got = fread(r->buf + r->hi, 1, room, r->f);
        if (got == 0 && ferror(r->f))
            gl_die("--input %s: read error: %s", r->path, strerror(errno));
        break;
    case SRC_GZIP: {
        int k = gzread(r->gz, r->buf + r->hi, (unsigned)(room > (1u << 30) ? 1u << 30 : room));
        if (k < 0) {
            int errnum;
            const char *msg = gzerror(r->gz, &errnum);
            gl_die("--input %s: corrupt gzip stream: %s", r->path, msg);
        }
        got = (size_t)k;
        break;
    }
    case SRC_ZSTD:
        while (got == 0) {
            if (r->zib.pos == r->zib.size) {
                r->zib.size = fread(r->zin, 1, r->zin_cap, r->f);
                r->zib.pos = 0;
                if (r->zib.size == 0) {
                    if (ferror(r->f))
                        gl_die("--input %s: read error: %s", r->path, strerror(errno));
                    return 0;
                }
            }
            ZSTD_outBuffer ob = { r->buf + r->hi, room, 0 };
            size_t rc = ZSTD_decompressStream(r->zd, &ob, &r->zib);
            if (ZSTD_isError(rc))
                gl_die("--input %s: corrupt zstd stream: %s", r->path, ZSTD_getErrorName(rc));
            got = ob.pos;
        }
        break;
    }
    r->hi += got;
    return got;
}

int gl_lines_next(gl_lines *r, const char **line, size_t *len)
{
    size_t scan = r->lo;
    for (;;) {
        char *nl = memchr(r->buf + scan, '\n', r->hi - scan);
        if (nl) {
            size_t end = (size_t)(nl - r->buf), start = r->lo;
            r->lo = end + 1;
            r->bytes += end + 1 - start;
            if (end > start && r->buf[end - 1] == '\r')
                end--;
            *line = r->buf + start;
            *len = end - start;
            r->lineno++;
            return 1;
        }
        if (r->eof) {
            if (r->lo == r->hi)
                return 0;
            size_t start = r->lo, end = r->hi;
            r->bytes += end - start;
            r->lo = r->hi;
            if (end > start && r->buf[end - 1] == '\r')
                end--;
            *line = r->buf + start;
            *len = end - start;
            r->lineno++;
            return 1;
        }
        size_t off = r->hi - r->lo;     /* already scanned, relative */
        if (refill(r) == 0)
            r->eof = 1;
        scan = r->lo + off;
    }
}

long gl_lines_number(const gl_lines *r) { return r->lineno; }
uint64_t gl_lines_bytes(const gl_lines *r) { return r->bytes; }
const char *gl_lines_path(const gl_lines *r) { return r->path; }

void gl_lines_close(gl_lines *r)
{
    if (!r)
        return;
    if (r->gz)
        gzclose(r->gz);
    if (r->f && r->f != stdin)
        fclose(r->f);
    if (r->zd)
        ZSTD_freeDCtx(r->zd);
    free(r->zin);
    free(r->buf);
    free(r->path);
    free(r);
}
