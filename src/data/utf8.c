/* utf8.c: UTF-8 helpers (see utf8.h). */
#include <config.h>
#include "data/utf8.h"
#include "base/log.h"

#include <string.h>

/* Well-formed UTF-8 (Unicode Table 3-7): the second byte's range
 * depends on the first byte; later bytes are 80..BF. */
size_t gl_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp)
{
    if (n == 0)
        return 0;
    unsigned c = s[0];
    if (c < 0x80) { *cp = c; return 1; }
    size_t len;
    unsigned lo = 0x80, hi = 0xBF;
    uint32_t v;
    if (c >= 0xC2 && c <= 0xDF) { len = 2; v = c & 0x1F; }
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3; v = c & 0x0F;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4; v = c & 0x07;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else
        return 0;
    if (n < len)
        return 0;
    if (s[1] < lo || s[1] > hi)
        return 0;
    v = (v << 6) | (s[1] & 0x3F);
    for (size_t i = 2; i < len; i++) {
        if (s[i] < 0x80 || s[i] > 0xBF)
            return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    *cp = v;
    return len;
}

/* The maximal subpart: the lead byte plus as many following bytes as
 * could still begin a well-formed sequence; at least one byte. */
size_t gl_utf8_bad_prefix(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
    else return 1;
    size_t i = 1;
    if (i < n && i < len && s[i] >= lo && s[i] <= hi) {
        i++;
        while (i < n && i < len && s[i] >= 0x80 && s[i] <= 0xBF)
            i++;
    }
    return i;
}

size_t gl_utf8_encode(uint32_t cp, char *out)
{
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) { o[0] = (unsigned char)cp; return 1; }
    if (cp < 0x800) { o[0] = (unsigned char)(0xC0 | (cp >> 6)); o[1] = (unsigned char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12)); o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F)); return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18)); o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

int gl_utf8_valid(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        if (p[i] < 0x80) { i++; continue; }
        uint32_t cp;
        size_t k = gl_utf8_decode(p + i, n - i, &cp);
        if (!k)
            return 0;
        i += k;
    }
    return 1;
}

size_t gl_utf8_repair(const char *s, size_t n, char **out, size_t *cap)
{
    const unsigned char *p = (const unsigned char *)s;
    if (*cap < n + 16) {
        *cap = 2 * n + 16;
        *out = gl_realloc(*out, *cap);
    }
    size_t i = 0, o = 0;
    while (i < n) {
        if (*cap < o + 8) {
            *cap = 2 * *cap;
            *out = gl_realloc(*out, *cap);
        }
        uint32_t cp;
        size_t k = p[i] < 0x80 ? 1 : gl_utf8_decode(p + i, n - i, &cp);
        if (k) {
            memcpy(*out + o, s + i, k);
            o += k;
            i += k;
        } else {
            i += gl_utf8_bad_prefix(p + i, n - i);
            o += gl_utf8_encode(0xFFFD, *out + o);
        }
    }
    return o;
}
