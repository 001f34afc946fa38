/* lines.c: line reader over plain, gzip and zstd input (see lines.h).
 *
 * Compressed bytes are read into one input buffer and fed to zlib's
 * inflate (gzip framing only) or to libzstd; both stop at the end of
 * each member or frame, which is where this file checks that the stream
 * goes on with another one or ends exactly there.  zlib's gzread() is
 * not used because it reports a stream that breaks off as a clean end of
 * file and skips bytes after the last member without a word. */
#include <config.h>
#include "data/lines.h"
#include "base/file.h"
#include "base/log.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>
#include <zstd_errors.h>

enum { SRC_PLAIN, SRC_GZIP, SRC_ZSTD };

#define IN_CAP (1u << 17)      /* compressed bytes read at a time */

struct gl_lines {
    char *path;
    int kind;
    FILE *f;
    /* Compressed input: zin[0, zin_len) holds the bytes read last, the
     * first of them at file offset zin_off; in_eof once the file ended. */
    unsigned char *zin;
    size_t zin_len;
    uint64_t zin_off;
    int in_eof;
    z_stream gz;
    int gz_ready;
    ZSTD_DCtx *zd;
    ZSTD_inBuffer zib;
    /* The member (gzip) or frame (zstd) being decoded. */
    int in_unit;                /* 1 between its first byte and its verified end */
    uint64_t unit_start;        /* file offset of its first byte */
    unsigned char unit_first;   /* and that byte */
    long units;                 /* members or frames verified so far */
    gl_error broken;            /* set once the input failed: every later call fails */
    char *buf; size_t cap, lo, hi;  /* decompressed data in buf[lo, hi) */
    int eof;
    long lineno;
    uint64_t bytes;
};

static const char *kind_name(int kind) { return kind == SRC_GZIP ? "gzip" : "zstd"; }
static const char *unit_name(int kind) { return kind == SRC_GZIP ? "member" : "frame"; }

/* File offset of the next compressed byte the decoder will take. */
static uint64_t in_pos(const gl_lines *r)
{
    size_t used = r->kind == SRC_GZIP ? r->zin_len - r->gz.avail_in : r->zib.pos;
    return r->zin_off + used;
}

static size_t in_left(const gl_lines *r)
{
    return r->kind == SRC_GZIP ? r->gz.avail_in : r->zib.size - r->zib.pos;
}

/* Point the decoder at zin[0, zin_len). */
static void in_reset(gl_lines *r)
{
    r->gz.next_in = r->zin;
    r->gz.avail_in = (uInt)r->zin_len;
    r->zib = (ZSTD_inBuffer){ r->zin, r->zin_len, 0 };
}

/* Replace the consumed input with the file's next bytes; at the end of
 * the file sets in_eof.  -1 with err on a read error. */
static int fill_input(gl_lines *r, gl_error *err)
{
    r->zin_off += r->zin_len;
    r->zin_len = fread(r->zin, 1, IN_CAP, r->f);
    if (r->zin_len == 0) {
        if (ferror(r->f))
            return gl_errprintf(err, "%s: read error at byte %" PRIu64 ": %s", r->path,
                                r->zin_off, strerror(errno));
        r->in_eof = 1;
    }
    in_reset(r);
    return 0;
}

/* Stream magic: gzip 1f 8b; a zstd frame 28 b5 2f fd; a zstd skippable
 * frame 5X 2a 4d 18 (a zstd file may begin with one). */
static int sniff(const unsigned char *m, size_t n)
{
    if (n >= 2 && m[0] == 0x1f && m[1] == 0x8b)
        return SRC_GZIP;
    if (n >= 4 && m[0] == 0x28 && m[1] == 0xb5 && m[2] == 0x2f && m[3] == 0xfd)
        return SRC_ZSTD;
    if (n >= 4 && (m[0] & 0xf0) == 0x50 && m[1] == 0x2a && m[2] == 0x4d && m[3] == 0x18)
        return SRC_ZSTD;
    return SRC_PLAIN;
}

/* Set up the decoder for the kind the first bytes show.  The bytes read
 * to find out stay in zin: a plain file's go to the line buffer. */
static void start_decoder(gl_lines *r)
{
    r->kind = sniff(r->zin, r->zin_len);
    in_reset(r);
    if (r->kind == SRC_GZIP) {
        /* 16 + MAX_WBITS: gzip framing only, with its CRC-32 and length. */
        if (inflateInit2(&r->gz, 16 + MAX_WBITS) != Z_OK)
            gl_die("--input %s: cannot start the gzip decoder (out of memory?)", r->path);
        r->gz_ready = 1;
    } else if (r->kind == SRC_ZSTD) {
        r->zd = ZSTD_createDCtx();
        if (!r->zd)
            gl_die("--input %s: cannot start the zstd decoder (out of memory?)", r->path);
    } else {
        memcpy(r->buf, r->zin, r->zin_len);
        r->hi = r->zin_len;
        r->in_eof = r->zin_len < IN_CAP;
    }
}

gl_lines *gl_lines_open(const char *path)
{
    gl_lines *r = gl_calloc(1, sizeof *r);
    r->path = gl_strdup(path);
    gl_error e;
    r->f = strcmp(path, "-") == 0 ? stdin : gl_file_fopen_read(path, &e);
    if (!r->f)
        gl_die("--input: %s", e.text);
    r->cap = 1 << 20;
    r->buf = gl_malloc(r->cap);
    r->zin = gl_malloc(IN_CAP);
    r->zin_len = fread(r->zin, 1, IN_CAP, r->f);
    if (r->zin_len < IN_CAP && ferror(r->f))
        gl_die("--input %s: read error: %s", path, strerror(errno));
    start_decoder(r);
    return r;
}

/* ---- errors of compressed streams ---------------------------------- */

static int truncated(gl_lines *r, gl_error *err)
{
    return gl_errprintf(err, "%s: truncated %s input: the %s that starts at byte %" PRIu64
                        " is cut off at byte %" PRIu64 ", where the file ends, before its end"
                        " and its check; the file is incomplete (an interrupted copy or"
                        " download?): fetch or compress it again", r->path, kind_name(r->kind),
                        unit_name(r->kind), r->unit_start, in_pos(r));
}

/* Bytes after the last complete member or frame that do not start
 * another one: garbage, padding, or the remains of a lost member. */
static int trailing(gl_lines *r, gl_error *err)
{
    return gl_errprintf(err, "%s: %ld complete %s %s%s, then bytes from byte %" PRIu64
                        " on (first 0x%02x) that do not start another; gridlm does not skip them"
                        " (they may be a damaged %s): check the file, or recompress its"
                        " content", r->path, r->units, kind_name(r->kind), unit_name(r->kind),
                        r->units == 1 ? "" : "s", r->unit_start, r->unit_first,
                        unit_name(r->kind));
}

/* zlib leaves its input position where it stopped on an error; libzstd
 * leaves it where the call began, so the damage is somewhere in the
 * bytes handed to that call. */
static int corrupt(gl_lines *r, const char *why, gl_error *err)
{
    char where[96];
    if (r->kind == SRC_GZIP)
        snprintf(where, sizeof where, "detected at byte %" PRIu64, in_pos(r));
    else
        snprintf(where, sizeof where, "detected in bytes %" PRIu64 " to %" PRIu64, in_pos(r),
                 r->zin_off + r->zin_len);
    return gl_errprintf(err, "%s: corrupt %s input: %s in the %s that starts at byte %" PRIu64
                        " (%s); the file is damaged: fetch or compress it again", r->path,
                        kind_name(r->kind), why, unit_name(r->kind), r->unit_start, where);
}

/* Note where a member or frame begins, before the decoder takes its
 * first byte. */
static void begin_unit(gl_lines *r)
{
    if (r->in_unit || in_left(r) == 0)
        return;
    r->in_unit = 1;
    r->unit_start = in_pos(r);
    r->unit_first = r->zin[r->unit_start - r->zin_off];
}

/* ---- decoders: up to room bytes into dst; 0 at the verified end ---- */

static long read_gzip(gl_lines *r, char *dst, size_t room, gl_error *err)
{
    for (;;) {
        if (r->gz.avail_in == 0 && !r->in_eof && fill_input(r, err) < 0)
            return -1;
        if (r->gz.avail_in == 0 && r->in_eof && !r->in_unit)
            return 0;
        begin_unit(r);
        r->gz.next_out = (unsigned char *)dst;
        r->gz.avail_out = (uInt)room;
        int rc = inflate(&r->gz, Z_NO_FLUSH);
        size_t got = room - r->gz.avail_out;
        if (rc == Z_STREAM_END) {       /* trailer checked: CRC-32 and length */
            r->in_unit = 0;
            r->units++;
            inflateReset(&r->gz);
        } else if (rc == Z_DATA_ERROR && r->units > 0 && r->unit_first != 0x1f) {
            return trailing(r, err);
        } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
            return corrupt(r, r->gz.msg ? r->gz.msg : zError(rc), err);
        }
        if (got > 0)
            return (long)got;
        if (rc != Z_STREAM_END && r->gz.avail_in == 0 && r->in_eof)
            return truncated(r, err);
    }
}

static long read_zstd(gl_lines *r, char *dst, size_t room, gl_error *err)
{
    for (;;) {
        if (r->zib.pos == r->zib.size && !r->in_eof && fill_input(r, err) < 0)
            return -1;
        if (r->zib.pos == r->zib.size && r->in_eof && !r->in_unit)
            return 0;
        begin_unit(r);
        ZSTD_outBuffer ob = { dst, room, 0 };
        /* Returns at the end of each frame: 0 once it is decoded, checked
         * (checksum, content size) and flushed. */
        size_t rc = ZSTD_decompressStream(r->zd, &ob, &r->zib);
        if (ZSTD_isError(rc)) {
            if (ZSTD_getErrorCode(rc) == ZSTD_error_prefix_unknown && r->units > 0)
                return trailing(r, err);
            return corrupt(r, ZSTD_getErrorName(rc), err);
        }
        if (rc == 0) {
            r->in_unit = 0;
            r->units++;
        }
        if (ob.pos > 0)
            return (long)ob.pos;
        if (rc != 0 && r->zib.pos == r->zib.size && r->in_eof)
            return truncated(r, err);
    }
}

static long read_plain(gl_lines *r, char *dst, size_t room, gl_error *err)
{
    if (r->in_eof)
        return 0;
    size_t got = fread(dst, 1, room, r->f);
    if (got == 0 && ferror(r->f))
        return gl_errprintf(err, "%s: read error after byte %" PRIu64 ": %s", r->path,
                            r->bytes + (r->hi - r->lo), strerror(errno));
    if (got == 0)
        r->in_eof = 1;
    return (long)got;
}

/* Append more decompressed bytes after buf[hi]: >0 bytes, 0 at the
 * verified end, -1 with err. */
static long refill(gl_lines *r, gl_error *err)
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
    size_t room = r->cap - r->hi;
    if (room > (1u << 30))
        room = 1u << 30;            /* zlib counts in 32 bits */
    long got = r->kind == SRC_GZIP ? read_gzip(r, r->buf + r->hi, room, err)
             : r->kind == SRC_ZSTD ? read_zstd(r, r->buf + r->hi, room, err)
             : read_plain(r, r->buf + r->hi, room, err);
    if (got > 0)
        r->hi += (size_t)got;
    return got;
}

/* Hand out buf[start, end) as a line (a trailing "\r" dropped); the
 * line's bytes up to next_lo are consumed. */
static int give_line(gl_lines *r, size_t start, size_t end, size_t next_lo,
                     const char **line, size_t *len)
{
    r->bytes += next_lo - start;
    r->lo = next_lo;
    if (end > start && r->buf[end - 1] == '\r')
        end--;
    *line = r->buf + start;
    *len = end - start;
    r->lineno++;
    return 1;
}

int gl_lines_next(gl_lines *r, const char **line, size_t *len, gl_error *err)
{
    if (r->broken.text[0]) {
        if (err)
            *err = r->broken;
        return -1;
    }
    size_t scan = r->lo;
    for (;;) {
        char *nl = memchr(r->buf + scan, '\n', r->hi - scan);
        if (nl) {
            size_t end = (size_t)(nl - r->buf);
            return give_line(r, r->lo, end, end + 1, line, len);
        }
        if (r->eof)
            return r->lo == r->hi ? 0 : give_line(r, r->lo, r->hi, r->hi, line, len);
        size_t off = r->hi - r->lo;     /* already scanned, relative */
        long got = refill(r, &r->broken);
        if (got < 0) {
            if (err)
                *err = r->broken;
            return -1;
        }
        if (got == 0)
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
    if (r->gz_ready)
        inflateEnd(&r->gz);
    if (r->f && r->f != stdin)
        fclose(r->f);
    if (r->zd)
        ZSTD_freeDCtx(r->zd);
    free(r->zin);
    free(r->buf);
    free(r->path);
    free(r);
}
