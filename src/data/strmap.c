/* strmap.c: open-addressing hash tables (see strmap.h). */
#include <config.h>
#include "data/strmap.h"
#include "base/log.h"

#include <stdlib.h>
#include <string.h>

static uint32_t str_hash(const char *k, size_t n)
{
    uint64_t h = gl_fnv1a64(k, n, GL_FNV1A64_INIT);
    uint32_t v = (uint32_t)(h ^ (h >> 32));
    return v ? v : 1;
}

void gl_strmap_init(gl_strmap *m)
{
    memset(m, 0, sizeof *m);
    m->cap = 64;
    m->hash = gl_calloc(m->cap, sizeof *m->hash);
    m->key = gl_calloc(m->cap, sizeof *m->key);
    m->klen = gl_calloc(m->cap, sizeof *m->klen);
    m->val = gl_calloc(m->cap, sizeof *m->val);
}

void gl_strmap_free(gl_strmap *m)
{
    for (size_t i = 0; i < m->cap; i++)
        free(m->key[i]);
    free(m->hash); free(m->key); free(m->klen); free(m->val);
    memset(m, 0, sizeof *m);
}

static size_t str_slot(const gl_strmap *m, const char *k, size_t n, uint32_t h)
{
    size_t mask = m->cap - 1, i = h & mask;
    while (m->hash[i] && !(m->hash[i] == h && m->klen[i] == n && memcmp(m->key[i], k, n) == 0))
        i = (i + 1) & mask;
    return i;
}

static void str_grow(gl_strmap *m)
{
    gl_strmap old = *m;
    m->cap *= 2;
    m->hash = gl_calloc(m->cap, sizeof *m->hash);
    m->key = gl_calloc(m->cap, sizeof *m->key);
    m->klen = gl_calloc(m->cap, sizeof *m->klen);
    m->val = gl_calloc(m->cap, sizeof *m->val);
    for (size_t i = 0; i < old.cap; i++) {
        if (!old.hash[i])
            continue;
        size_t j = str_slot(m, old.key[i], old.klen[i], old.hash[i]);
        m->hash[j] = old.hash[i];
        m->key[j] = old.key[i];
        m->klen[j] = old.klen[i];
        m->val[j] = old.val[i];
    }
    free(old.hash); free(old.key); free(old.klen); free(old.val);
}

void gl_strmap_put(gl_strmap *m, const char *k, size_t n, int32_t v)
{
    if (2 * (m->count + 1) > m->cap)
        str_grow(m);
    uint32_t h = str_hash(k, n);
    size_t i = str_slot(m, k, n, h);
    if (!m->hash[i]) {
        m->hash[i] = h;
        m->key[i] = gl_malloc(n + 1);
        memcpy(m->key[i], k, n);
        m->key[i][n] = '\0';
        m->klen[i] = (uint32_t)n;
        m->count++;
    }
    m->val[i] = v;
}

int32_t gl_strmap_get(const gl_strmap *m, const char *k, size_t n)
{
    size_t i = str_slot(m, k, n, str_hash(k, n));
    return m->hash[i] ? m->val[i] : -1;
}

void gl_u64map_init(gl_u64map *m)
{
    m->cap = 64;
    m->count = 0;
    m->key = gl_malloc(m->cap * sizeof *m->key);
    memset(m->key, 0xff, m->cap * sizeof *m->key);
    m->val = gl_calloc(m->cap, sizeof *m->val);
}

void gl_u64map_free(gl_u64map *m)
{
    free(m->key);
    free(m->val);
    memset(m, 0, sizeof *m);
}

static size_t u64_slot(const gl_u64map *m, uint64_t k)
{
    size_t mask = m->cap - 1, i = gl_mix64(k) & mask;
    while (m->key[i] != UINT64_MAX && m->key[i] != k)
        i = (i + 1) & mask;
    return i;
}

void gl_u64map_put(gl_u64map *m, uint64_t k, uint64_t v)
{
    if (k == UINT64_MAX)
        gl_die("internal error: reserved key in gl_u64map");
    if (2 * (m->count + 1) > m->cap) {
        gl_u64map old = *m;
        m->cap *= 2;
        m->key = gl_malloc(m->cap * sizeof *m->key);
        memset(m->key, 0xff, m->cap * sizeof *m->key);
        m->val = gl_calloc(m->cap, sizeof *m->val);
        for (size_t i = 0; i < old.cap; i++)
            if (old.key[i] != UINT64_MAX) {
                size_t j = u64_slot(m, old.key[i]);
                m->key[j] = old.key[i];
                m->val[j] = old.val[i];
            }
        free(old.key);
        free(old.val);
    }
    size_t i = u64_slot(m, k);
    if (m->key[i] == UINT64_MAX) {
        m->key[i] = k;
        m->count++;
    }
    m->val[i] = v;
}

int gl_u64map_get(const gl_u64map *m, uint64_t k, uint64_t *v)
{
    size_t i = u64_slot(m, k);
    if (m->key[i] == UINT64_MAX)
        return 0;
    *v = m->val[i];
    return 1;
}
