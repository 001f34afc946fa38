/*
 * tfevents.c: TensorBoard event files (tfevents.h).
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/file.h"
#include "base/log.h"
#include "base/tfevents.h"

#ifndef O_CLOEXEC
#define O_CLOEXEC 0
#endif

/* ------------------------------------------------------------------ */
/* CRC-32C and the TFRecord frame.                                     */

/* The table of the reflected Castagnoli polynomial, built on first use. */
static uint32_t crc_table[256];
static int crc_ready;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[i] = c;
    }
    crc_ready = 1;
}

uint32_t gl_crc32c(const void *buf, size_t n)
{
    const unsigned char *p = buf;
    if (!crc_ready)
        crc_init();
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++)
        c = crc_table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

uint32_t gl_tfrecord_mask(uint32_t crc)
{
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

static void put_le32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put_le64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

size_t gl_tfrecord_frame(unsigned char *out, const void *data, size_t n)
{
    put_le64(out, (uint64_t)n);
    put_le32(out + 8, gl_tfrecord_mask(gl_crc32c(out, 8)));
    memcpy(out + 12, data, n);
    put_le32(out + 12 + n, gl_tfrecord_mask(gl_crc32c(data, n)));
    return n + GL_TFRECORD_OVERHEAD;
}

/* ------------------------------------------------------------------ */
/* The protocol buffer encoding of Event, Summary and Value.           */

/* Wire types. */
enum { VARINT = 0, FIXED64 = 1, LENGTH = 2, FIXED32 = 5 };

/* A bounded output: what would not fit sets `full` and is dropped. */
typedef struct {
    unsigned char *p;
    size_t len, cap;
    int full;
} out_buf;

static void put_bytes(out_buf *o, const void *b, size_t n)
{
    if (o->full || n > o->cap - o->len) {
        o->full = 1;
        return;
    }
    memcpy(o->p + o->len, b, n);
    o->len += n;
}

static void put_varint(out_buf *o, uint64_t v)
{
    unsigned char b[10];
    size_t n = 0;
    do {
        b[n] = (unsigned char)(v & 0x7F);
        v >>= 7;
        if (v)
            b[n] |= 0x80;
        n++;
    } while (v);
    put_bytes(o, b, n);
}

static void put_key(out_buf *o, unsigned field, unsigned wire)
{
    put_varint(o, (uint64_t)field << 3 | wire);
}

/* The length of the varint of v. */
static size_t varint_len(uint64_t v)
{
    size_t n = 1;
    while (v >>= 7)
        n++;
    return n;
}

size_t gl_tfevents_encode(unsigned char *out, size_t cap, double wall_time, int64_t step,
                          const char *tag, float value)
{
    out_buf o = { out, 0, cap, 0 };
    unsigned char b[8];
    uint64_t w;
    memcpy(&w, &wall_time, sizeof w);
    put_key(&o, 1, FIXED64);                 /* Event.wall_time */
    put_le64(b, w);
    put_bytes(&o, b, 8);
    if (!tag) {
        static const char version[] = "brain.Event:2";
        put_key(&o, 3, LENGTH);              /* Event.file_version */
        put_varint(&o, sizeof version - 1);
        put_bytes(&o, version, sizeof version - 1);
        return o.full ? 0 : o.len;
    }
    if (step != 0) {
        put_key(&o, 2, VARINT);              /* Event.step: two's complement */
        put_varint(&o, (uint64_t)step);
    }
    size_t tag_len = strlen(tag);
    /* Value: key, length, tag bytes; key, 4 bytes of float */
    size_t value_len = 1 + varint_len(tag_len) + tag_len + 1 + 4;
    /* Summary: key, length, Value */
    size_t summary_len = 1 + varint_len(value_len) + value_len;
    put_key(&o, 5, LENGTH);                  /* Event.summary */
    put_varint(&o, summary_len);
    put_key(&o, 1, LENGTH);                  /* Summary.value */
    put_varint(&o, value_len);
    put_key(&o, 1, LENGTH);                  /* Value.tag */
    put_varint(&o, tag_len);
    put_bytes(&o, tag, tag_len);
    uint32_t f;
    memcpy(&f, &value, sizeof f);
    put_key(&o, 2, FIXED32);                 /* Value.simple_value */
    put_le32(b, f);
    put_bytes(&o, b, 4);
    return o.full ? 0 : o.len;
}

/* ------------------------------------------------------------------ */
/* The writer.                                                         */

struct gl_tfevents {
    int fd;
    char *path;
    unsigned char *buf;          /* framed records not yet written */
    size_t len, cap;
    int queued, queue_size;
};

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Frame one encoded event onto the queue. */
static void enqueue(gl_tfevents *w, const unsigned char *event, size_t n)
{
    size_t need = w->len + n + GL_TFRECORD_OVERHEAD;
    if (need > w->cap) {
        size_t cap = w->cap ? w->cap : 4096;
        while (cap < need)
            cap *= 2;
        w->buf = gl_realloc(w->buf, cap);
        w->cap = cap;
    }
    w->len += gl_tfrecord_frame(w->buf + w->len, event, n);
    w->queued++;
}

int gl_tfevents_flush(gl_tfevents *w, gl_error *err)
{
    size_t done = 0;
    while (done < w->len) {
        ssize_t k = write(w->fd, w->buf + done, w->len - done);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            int e = k < 0 ? errno : EIO;
            /* keep what was not written, so a later flush can retry */
            memmove(w->buf, w->buf + done, w->len - done);
            w->len -= done;
            return gl_errprintf(err, "%s: write failed: %s", w->path, strerror(e));
        }
        done += (size_t)k;
    }
    w->len = 0;
    w->queued = 0;
    return 0;
}

/* Open DIR/NAME, or NAME.1 ... NAME.99 when taken, never through a link
 * and never over an existing file.  The path in *path (allocated). */
static int create_new(const char *dir, const char *name, char **path, gl_error *err)
{
    size_t n = strlen(dir) + strlen(name) + 8;
    char *p = gl_malloc(n);
    for (int k = 0; k < 100; k++) {
        if (k == 0)
            snprintf(p, n, "%s/%s", dir, name);
        else
            snprintf(p, n, "%s/%s.%d", dir, name, k);
        int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
        if (fd >= 0) {
            *path = p;
            return fd;
        }
        if (errno != EEXIST) {
            gl_errprintf(err, "%s: cannot create: %s", p, strerror(errno));
            free(p);
            return -1;
        }
    }
    gl_errprintf(err, "%s/%s: that name and .1 to .99 are all taken; give an empty directory",
                 dir, name);
    free(p);
    return -1;
}

gl_tfevents *gl_tfevents_open(const char *dir, int queue_size, gl_error *err)
{
    if (!dir || !*dir) {
        gl_errprintf(err, "no directory given for the event file");
        return NULL;
    }
    if (gl_file_mkdirs(dir, err) < 0)
        return NULL;
    char host[256] = "localhost";
    if (gethostname(host, sizeof host - 1) != 0 || !host[0])
        snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = 0;
    for (char *s = host; *s; s++)        /* a name, never a path */
        if (*s == '/')
            *s = '_';
    char name[320];
    snprintf(name, sizeof name, "events.out.tfevents.%010lld.%s", (long long)time(NULL), host);

    gl_tfevents *w = gl_calloc(1, sizeof *w);
    w->queue_size = queue_size > 0 ? queue_size : 1;
    w->fd = create_new(dir, name, &w->path, err);
    if (w->fd < 0) {
        free(w);
        return NULL;
    }
    unsigned char ev[64];
    size_t n = gl_tfevents_encode(ev, sizeof ev, wall_now(), 0, NULL, 0);
    enqueue(w, ev, n);
    if (gl_tfevents_flush(w, err) < 0) {
        gl_tfevents_close(w, NULL);
        return NULL;
    }
    return w;
}

const char *gl_tfevents_path(const gl_tfevents *w)
{
    return w->path;
}

int gl_tfevents_scalar(gl_tfevents *w, const char *tag, int64_t step, double value,
                       gl_error *err)
{
    size_t cap = strlen(tag) + 64;
    unsigned char small[256];
    unsigned char *ev = cap <= sizeof small ? small : gl_malloc(cap);
    size_t n = gl_tfevents_encode(ev, cap, wall_now(), step, tag, (float)value);
    enqueue(w, ev, n);
    if (ev != small)
        free(ev);
    if (w->queued >= w->queue_size)
        return gl_tfevents_flush(w, err);
    return 0;
}

int gl_tfevents_close(gl_tfevents *w, gl_error *err)
{
    if (!w)
        return 0;
    int rc = gl_tfevents_flush(w, err);
    if (close(w->fd) != 0 && rc == 0)
        rc = gl_errprintf(err, "%s: close failed: %s", w->path, strerror(errno));
    free(w->path);
    free(w->buf);
    free(w);
    return rc;
}
