/*
 * base-tfevents.c: src/base/tfevents.h -- CRC-32C, the TFRecord mask and
 * frame, the protocol buffer bytes of one event worked out by hand, and
 * the writer: its file name, its refusal to write through a planted link,
 * its queue, and a missing directory made.  (t/train-tensorboard.t reads
 * gridlm-train's files with TensorBoard's own reader.)
 */
#include <config.h>
#include "base/tfevents.h"
#include "tap.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char dir[4096];

static long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/* The check values. */
static void test_crc(void)
{
    /* The CRC-32C check value of the nine digits (RFC 3720, B.4). */
    is_int(gl_crc32c("123456789", 9), 0xE3069283u, "CRC-32C(\"123456789\") = 0xE3069283");
    is_int(gl_crc32c("", 0), 0, "CRC-32C of nothing is 0");
    /* mask(0xE3069283): rotate right by 15,
     *   0xE3069283 >> 15            = 0x0001C60D
     *   (0xE3069283 << 17) mod 2^32 = 0x25060000  (low 15 bits 0x1283, shifted)
     *   or                          = 0x2507C60D
     * plus 0xA282EAD8               = 0xC78AB0E5 (mod 2^32). */
    is_int(gl_tfrecord_mask(0xE3069283u), 0xC78AB0E5u, "masked CRC of the check value");
    is_int(gl_tfrecord_mask(0), 0xA282EAD8u, "mask(0) is the mask's constant");
}

/* One scalar event: wall_time 1.0, step 1, tag "a", value 1.0.
 *
 *   Event.wall_time, field 1, wire type 1 (64-bit): key (1 << 3) | 1 = 0x09,
 *     then 1.0 as a little-endian double (0x3FF0000000000000):
 *     00 00 00 00 00 00 F0 3F
 *   Event.step, field 2, wire type 0 (varint): key (2 << 3) | 0 = 0x10, 01
 *   Event.summary, field 5, wire type 2 (length): key (5 << 3) | 2 = 0x2A,
 *     length 10, then the Summary:
 *       Summary.value, field 1, wire type 2: key 0x0A, length 8, the Value:
 *         Value.tag, field 1, wire type 2: 0x0A, length 1, 'a' = 0x61
 *         Value.simple_value, field 2, wire type 5 (32-bit): key
 *           (2 << 3) | 5 = 0x15, then 1.0f (0x3F800000): 00 00 80 3F
 *       (the Value is 3 + 5 = 8 bytes; the Summary 2 + 8 = 10)
 *   23 bytes in all: 9 + 2 + 2 + 10.
 *
 * The TFRecord around it: the length 23 as 8 little-endian bytes
 * 17 00 00 00 00 00 00 00; the masked CRC-32C of those 8 bytes
 * (CRC 0xF207BE3A, masked 0x1EF8CEE7) as E7 CE F8 1E; the 23 bytes; the
 * masked CRC-32C of the 23 bytes (CRC 0xA501B066, masked 0x035034DB) as
 * DB 34 50 03.  (The CRCs were computed bit by bit, apart from this
 * file's table-driven code; the masks follow as above.) */
static const unsigned char event_a[23] = {
    0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xF0, 0x3F,
    0x10, 0x01,
    0x2A, 0x0A,
    0x0A, 0x08,
    0x0A, 0x01, 0x61,
    0x15, 0x00, 0x00, 0x80, 0x3F,
};

static void test_encode(void)
{
    unsigned char buf[128];
    size_t n = gl_tfevents_encode(buf, sizeof buf, 1.0, 1, "a", 1.0f);
    ok(n == sizeof event_a && memcmp(buf, event_a, n) == 0,
       "the scalar event's 23 bytes are as worked out by hand");
    is_int(gl_crc32c(event_a, sizeof event_a), 0xA501B066u, "CRC-32C of the event");

    unsigned char rec[128];
    size_t r = gl_tfrecord_frame(rec, event_a, sizeof event_a);
    static const unsigned char head[12] = {
        0x17, 0, 0, 0, 0, 0, 0, 0, 0xE7, 0xCE, 0xF8, 0x1E,
    };
    static const unsigned char tail[4] = { 0xDB, 0x34, 0x50, 0x03 };
    ok(r == 23 + 16 && memcmp(rec, head, 12) == 0 && memcmp(rec + 12, event_a, 23) == 0 &&
       memcmp(rec + 35, tail, 4) == 0, "the TFRecord: length, masked CRCs, data");

    /* The file_version event: wall_time, then field 3 (key 0x1A),
     * length 13, "brain.Event:2"; no step. */
    static const unsigned char version[24] = {
        0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xF0, 0x3F,
        0x1A, 0x0D, 'b', 'r', 'a', 'i', 'n', '.', 'E', 'v', 'e', 'n', 't', ':', '2',
    };
    n = gl_tfevents_encode(buf, sizeof buf, 1.0, 0, NULL, 0);
    ok(n == sizeof version && memcmp(buf, version, n) == 0, "the file_version event");

    /* A step of 300 is a two-byte varint (0xAC 0x02); a negative step
     * ten bytes; step 0 is left out. */
    n = gl_tfevents_encode(buf, sizeof buf, 1.0, 300, "a", 1.0f);
    ok(n == 24 && buf[9] == 0x10 && buf[10] == 0xAC && buf[11] == 0x02, "step 300 as a varint");
    n = gl_tfevents_encode(buf, sizeof buf, 1.0, -1, "a", 1.0f);
    ok(n == 32 && buf[10] == 0xFF && buf[19] == 0x01, "a negative step as ten varint bytes");
    n = gl_tfevents_encode(buf, sizeof buf, 1.0, 0, "a", 1.0f);
    ok(n == 21 && buf[9] == 0x2A, "step 0 left out");
    is_int(gl_tfevents_encode(buf, 10, 1.0, 1, "a", 1.0f), 0, "too small a buffer: 0");

    /* A tag of 200 bytes: its length and the Value's and Summary's
     * lengths take two varint bytes each. */
    char tag[201];
    memset(tag, 'x', 200);
    tag[200] = 0;
    n = gl_tfevents_encode(buf, sizeof buf, 1.0, 1, tag, 1.0f);
    is_int(n, 0, "a long tag does not fit 128 bytes");
    unsigned char big[512];
    n = gl_tfevents_encode(big, sizeof big, 1.0, 1, tag, 1.0f);
    /* Value: 1 + 2 + 200 + 5 = 208; Summary: 1 + 2 + 208 = 211;
     * Event: 9 + 2 + 1 + 2 + 211 = 225 */
    ok(n == 225 && big[11] == 0x2A && big[12] == ((211 & 0x7F) | 0x80) && big[13] == 211 >> 7,
       "a 200-byte tag: two-byte lengths (%zu bytes)", n);
}

/* Read back the records of a file: each frame's CRCs checked; the
 * number of records, or -1 on a bad frame. */
static int count_records(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    int count = 0;
    unsigned char h[12], data[4096], t[4];
    while (fread(h, 1, 12, f) == 12) {
        uint64_t len = 0;
        for (int i = 7; i >= 0; i--)
            len = len << 8 | h[i];
        uint32_t c = h[8] | h[9] << 8 | h[10] << 16 | (uint32_t)h[11] << 24;
        if (c != gl_tfrecord_mask(gl_crc32c(h, 8)) || len > sizeof data ||
            fread(data, 1, len, f) != len || fread(t, 1, 4, f) != 4) {
            count = -1;
            break;
        }
        c = t[0] | t[1] << 8 | t[2] << 16 | (uint32_t)t[3] << 24;
        if (c != gl_tfrecord_mask(gl_crc32c(data, len))) {
            count = -1;
            break;
        }
        count++;
    }
    fclose(f);
    return count;
}

static void test_writer(void)
{
    gl_error err = {""};
    char sub[4200];
    snprintf(sub, sizeof sub, "%s/made/here", dir);
    gl_tfevents *w = gl_tfevents_open(sub, 3, &err);
    ok(w != NULL, "opens in a directory it makes%s%s", err.text[0] ? ": " : "", err.text);
    if (!w)
        return;
    const char *p = gl_tfevents_path(w);
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    const char *base = strrchr(p, '/') + 1;
    ok(strncmp(base, "events.out.tfevents.", 20) == 0 && strlen(base) > 31 && base[30] == '.' &&
       strcmp(base + 31, host) == 0, "named events.out.tfevents.<10 digits>.<host>: %s", base);
    long v = file_size(p);
    is_int(v, 24 + 16, "the version record is on disk at once");
    gl_tfevents_scalar(w, "a", 1, 1.0, &err);
    gl_tfevents_scalar(w, "a", 2, 2.0, &err);
    is_int(file_size(p), v, "two events wait in the queue of three");
    gl_tfevents_scalar(w, "a", 3, 3.0, &err);
    is_int(file_size(p), v + 3 * (21 + 2 + 16), "the third fills the queue: written");
    gl_tfevents_scalar(w, "a", 4, 4.0, &err);
    ok(gl_tfevents_flush(w, &err) == 0 && file_size(p) == v + 4 * 39, "flush writes the rest");
    gl_tfevents_scalar(w, "a", 5, 5.0, &err);
    char path[4200];
    snprintf(path, sizeof path, "%s", p);
    ok(gl_tfevents_close(w, &err) == 0, "close");
    is_int(count_records(path), 6, "6 well-framed records after close");

    /* A link planted at the names the next file could take (this second
     * and the next two): never followed; the file gets a suffix. */
    char target[4200], link[4400];
    snprintf(target, sizeof target, "%s/target", dir);
    close(open(target, O_WRONLY | O_CREAT | O_TRUNC, 0644));
    time_t now = time(NULL);
    for (int k = 0; k < 3; k++) {
        snprintf(link, sizeof link, "%s/events.out.tfevents.%010lld.%s", dir,
                 (long long)now + k, host);
        if (symlink(target, link) != 0)
            diag("symlink %s failed", link);
    }
    w = gl_tfevents_open(dir, 10, &err);
    ok(w != NULL, "opens beside planted links%s%s", err.text[0] ? ": " : "", err.text);
    if (w) {
        p = gl_tfevents_path(w);
        size_t n = strlen(p);
        ok(n > 2 && strcmp(p + n - 2, ".1") == 0, "the new file takes the suffix .1: %s", p);
        gl_tfevents_close(w, NULL);
    }
    is_int(file_size(target), 0, "the link's target was not written");

    /* A directory that cannot be made: an error that names it. */
    snprintf(sub, sizeof sub, "%s/target/sub", dir);
    err.text[0] = 0;
    w = gl_tfevents_open(sub, 1, &err);
    ok(w == NULL && strstr(err.text, "target") != NULL, "a file in the way: %s", err.text);
}

int main(void)
{
    plan(NO_PLAN);
    test_crc();
    test_encode();
    snprintf(dir, sizeof dir, "%s/base-tfevents.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR")
                                                                          : "/tmp");
    if (!mkdtemp(dir))
        bail_out("mkdtemp %s failed", dir);
    test_writer();
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        diag("could not remove %s", dir);
    return done_testing();
}
