/*
 * tokenizer_pipeline.c: running a loaded gl_tokenizer (tokenizer.h):
 * the per-thread encoder -- added tokens cut out of the text, the
 * normalizers, the pre-tokenizers, BPE on each word (through a word
 * cache), the post-processor's special tokens -- and decoding ids back
 * to bytes.  Loading is tokenizer_load.c; the structure they share is
 * tokenizer_impl.h.
 */
#define _GNU_SOURCE 1 /* memmem */
#include <config.h>
#include "data/tokenizer_impl.h"
#include "data/utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* GPT-2's byte-to-unicode map.  The printable bytes '!'..'~', 0xA1..0xAC
 * and 0xAE..0xFF stand for themselves; the other 68 bytes (controls,
 * space, 0x7F..0xA0, 0xAD) take the code points 256, 257, ... in byte
 * order.  Every byte thus becomes one visible character.               */

static int printable_byte(unsigned b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t gl_bytelevel_char(unsigned b)
{
    if (printable_byte(b))
        return b;
    uint32_t k = 0;
    for (unsigned c = 0; c < b; c++)
        k += !printable_byte(c);
    return 256 + k;
}

/* ------------------------------------------------------------------ */
/* The encoder: per-thread state.                                       */

#define MAX_LEVELS 16
#define CACHE_SLOTS 65536           /* words cached per encoder (direct-mapped) */
#define CACHE_MAX_WORD 96           /* longer words are not cached */

typedef struct { size_t s, e; } span;

typedef struct {
    span *v; size_t n, cap;         /* the pieces of the current input at this level */
    unsigned char *flag; size_t fcap; /* per span: a match / to be removed */
    char *buf; size_t bcap;         /* transformed text (ByteLevel) */
    char *pre; size_t pcap;         /* the input with a prefix space */
    pcre2_match_data *md;
} level;

typedef struct {
    uint64_t hash;
    char *key; uint32_t klen;
    int32_t *ids; uint32_t nids;
} cache_slot;

typedef struct { uint32_t rank, pos; int32_t id; } heap_ent;

struct gl_tok_encoder {
    const gl_tokenizer *t;
    char *rep; size_t repcap;       /* UTF-8 repaired input */
    char *nbuf; size_t ncap;        /* normalized piece */
    char *nbuf2; size_t ncap2;
    level lv[MAX_LEVELS];
    int32_t *ids; size_t nids, idcap;
    cache_slot *cache;
    pcre2_match_data *md;           /* normalizer Replace and single_word */
    /* BPE scratch */
    int32_t *sym; int32_t *prev, *next; size_t symcap;
    heap_ent *heap; size_t nheap, heapcap;
    char *wbuf; size_t wcap;
    gl_word_fn hook; void *hook_ctx;
};

gl_tok_encoder *gl_tok_encoder_new(const gl_tokenizer *t)
{
    gl_tok_encoder *e = gl_calloc(1, sizeof *e);
    e->t = t;
    for (int i = 0; i < MAX_LEVELS; i++)
        e->lv[i].md = pcre2_match_data_create(16, NULL);
    e->md = pcre2_match_data_create(16, NULL);
    e->cache = gl_calloc(CACHE_SLOTS, sizeof *e->cache);
    return e;
}

void gl_tok_encoder_set_word_hook(gl_tok_encoder *e, gl_word_fn fn, void *ctx)
{
    e->hook = fn;
    e->hook_ctx = ctx;
}

void gl_tok_encoder_free(gl_tok_encoder *e)
{
    if (!e)
        return;
    free(e->rep); free(e->nbuf); free(e->nbuf2);
    for (int i = 0; i < MAX_LEVELS; i++) {
        free(e->lv[i].v);
        free(e->lv[i].flag);
        free(e->lv[i].buf);
        free(e->lv[i].pre);
        pcre2_match_data_free(e->lv[i].md);
    }
    pcre2_match_data_free(e->md);
    for (size_t i = 0; i < CACHE_SLOTS; i++) {
        free(e->cache[i].key);
        free(e->cache[i].ids);
    }
    free(e->cache);
    free(e->ids);
    free(e->sym); free(e->prev); free(e->next);
    free(e->heap);
    free(e->wbuf);
    free(e);
}

static void push_id(gl_tok_encoder *e, int32_t id)
{
    if (e->nids == e->idcap) {
        e->idcap = e->idcap ? 2 * e->idcap : 1024;
        e->ids = gl_realloc(e->ids, e->idcap * sizeof *e->ids);
    }
    e->ids[e->nids++] = id;
}

static void grow(char **p, size_t *cap, size_t need)
{
    if (need > *cap) {
        *cap = need * 2 + 64;
        *p = gl_realloc(*p, *cap);
    }
}

/* --- BPE on one word ---------------------------------------------- */

static int heap_less(const heap_ent *a, const heap_ent *b)
{
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(gl_tok_encoder *e, heap_ent x)
{
    if (e->nheap == e->heapcap) {
        e->heapcap = e->heapcap ? 2 * e->heapcap : 256;
        e->heap = gl_realloc(e->heap, e->heapcap * sizeof *e->heap);
    }
    size_t i = e->nheap++;
    while (i > 0 && heap_less(&x, &e->heap[(i - 1) / 2])) {
        e->heap[i] = e->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    e->heap[i] = x;
}

static heap_ent heap_pop(gl_tok_encoder *e)
{
    heap_ent top = e->heap[0], x = e->heap[--e->nheap];
    size_t i = 0, n = e->nheap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && heap_less(&e->heap[c + 1], &e->heap[c]))
            c++;
        if (!heap_less(&e->heap[c], &x))
            break;
        e->heap[i] = e->heap[c];
        i = c;
    }
    if (n)
        e->heap[i] = x;
    return top;
}

static void sym_push(gl_tok_encoder *e, size_t *n, int32_t id)
{
    if (*n == e->symcap) {
        e->symcap = e->symcap ? 2 * e->symcap : 256;
        e->sym = gl_realloc(e->sym, e->symcap * sizeof *e->sym);
        e->prev = gl_realloc(e->prev, e->symcap * sizeof *e->prev);
        e->next = gl_realloc(e->next, e->symcap * sizeof *e->next);
    }
    e->sym[(*n)++] = id;
}

static void try_pair(gl_tok_encoder *e, int32_t pos)
{
    int32_t nx = e->next[pos];
    if (nx < 0)
        return;
    uint64_t v;
    uint64_t key = (uint64_t)(uint32_t)e->sym[pos] << 32 | (uint32_t)e->sym[nx];
    if (gl_u64map_get(&e->t->merges, key, &v))
        heap_push(e, (heap_ent){ (uint32_t)(v >> 32), (uint32_t)pos, (int32_t)(uint32_t)v });
}

/* Split a word into vocabulary characters (byte fallback, unk), then
 * apply merges: always the lowest-ranked adjacent pair, leftmost first,
 * as Hugging Face's Word::merge_all does with its priority queue. */
static void bpe_word(gl_tok_encoder *e, const char *w, size_t n)
{
    const gl_tokenizer *t = e->t;
    if (t->ignore_merges) {
        int32_t id = gl_strmap_get(&t->vocab, w, n);
        if (id >= 0) {
            push_id(e, id);
            return;
        }
    }
    size_t ns = 0;
    int32_t unk = -1;               /* a pending unk (fused or not) */
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        size_t k = gl_utf8_decode((const unsigned char *)w + i, n - i, &cp);
        if (!k)
            k = 1;
        const char *s = w + i;
        size_t sl = k;
        if (t->cont_prefix || t->eow_suffix) {
            size_t pl = (t->cont_prefix && i > 0) ? strlen(t->cont_prefix) : 0;
            size_t xl = (t->eow_suffix && i + k == n) ? strlen(t->eow_suffix) : 0;
            grow(&e->wbuf, &e->wcap, pl + k + xl + 1);
            if (pl) memcpy(e->wbuf, t->cont_prefix, pl);
            memcpy(e->wbuf + pl, w + i, k);
            if (xl) memcpy(e->wbuf + pl + k, t->eow_suffix, xl);
            s = e->wbuf;
            sl = pl + k + xl;
        }
        int32_t id = gl_strmap_get(&t->vocab, s, sl);
        if (id >= 0) {
            if (unk >= 0) {
                sym_push(e, &ns, unk);
                unk = -1;
            }
            sym_push(e, &ns, id);
        } else {
            int done = 0;
            if (t->byte_fallback) {
                int all = 1;
                for (size_t j = 0; j < sl; j++)
                    all &= t->byte_tok[(unsigned char)s[j]] >= 0;
                if (all) {
                    for (size_t j = 0; j < sl; j++)
                        sym_push(e, &ns, t->byte_tok[(unsigned char)s[j]]);
                    done = 1;
                }
            }
            if (!done && t->unk_id >= 0) {
                if (unk >= 0 && !t->fuse_unk)
                    sym_push(e, &ns, unk);
                unk = t->unk_id;
            }
        }
        i += k;
    }
    if (unk >= 0)
        sym_push(e, &ns, unk);
    if (ns == 0)
        return;
    for (size_t j = 0; j < ns; j++) {
        e->prev[j] = (int32_t)j - 1;
        e->next[j] = j + 1 < ns ? (int32_t)j + 1 : -1;
    }
    e->nheap = 0;
    for (size_t j = 0; j + 1 < ns; j++)
        try_pair(e, (int32_t)j);
    while (e->nheap) {
        heap_ent m = heap_pop(e);
        int32_t p = (int32_t)m.pos;
        if (e->sym[p] < 0)
            continue;               /* merged away */
        int32_t nx = e->next[p];
        if (nx < 0)
            continue;
        uint64_t v;
        uint64_t key = (uint64_t)(uint32_t)e->sym[p] << 32 | (uint32_t)e->sym[nx];
        if (!gl_u64map_get(&t->merges, key, &v) || (int32_t)(uint32_t)v != m.id)
            continue;               /* stale entry */
        e->sym[p] = m.id;
        e->sym[nx] = -1;
        e->next[p] = e->next[nx];
        if (e->next[nx] >= 0)
            e->prev[e->next[nx]] = p;
        if (e->prev[p] >= 0)
            try_pair(e, e->prev[p]);
        try_pair(e, p);
    }
    for (int32_t j = 0; j >= 0; j = e->next[j])
        push_id(e, e->sym[j]);
}

/* The model, through the word cache. */
static void model_word(gl_tok_encoder *e, const char *w, size_t n)
{
    if (n == 0)
        return;
    if (e->hook) {
        e->hook(e->hook_ctx, w, n);
        return;
    }
    if (n > CACHE_MAX_WORD) {
        bpe_word(e, w, n);
        return;
    }
    uint64_t h = gl_fnv1a64(w, n, GL_FNV1A64_INIT);
    cache_slot *c = &e->cache[h & (CACHE_SLOTS - 1)];
    if (c->key && c->hash == h && c->klen == n && memcmp(c->key, w, n) == 0) {
        for (uint32_t i = 0; i < c->nids; i++)
            push_id(e, c->ids[i]);
        return;
    }
    size_t first = e->nids;
    bpe_word(e, w, n);
    free(c->key);
    free(c->ids);
    c->hash = h;
    c->key = dupn(w, n);
    c->klen = (uint32_t)n;
    c->nids = (uint32_t)(e->nids - first);
    c->ids = gl_malloc((c->nids ? c->nids : 1) * sizeof *c->ids);
    memcpy(c->ids, e->ids + first, c->nids * sizeof *c->ids);
}

/* --- pre-tokenizers ------------------------------------------------ */

static void lv_push(level *l, size_t s, size_t e)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->v = gl_realloc(l->v, l->cap * sizeof *l->v);
    }
    l->v[l->n++] = (span){ s, e };
}

/* Matches of a regex (or literal) in s as alternating spans, each with
 * its flag (1: a match), covering all of s, as Hugging Face's Pattern
 * find_matches yields them.  Spans go to l->v, flags to `flag`. */
static size_t find_matches(level *l, const pretok *p, const char *s, size_t n)
{
    unsigned char **flag = &l->flag;
    size_t *flagcap = &l->fcap;
    l->n = 0;
    size_t nf = 0;
#define PUSH(a, b, f) do { lv_push(l, a, b); if (nf == *flagcap) { *flagcap = *flagcap ? 2 * *flagcap : 64; \
        *flag = gl_realloc(*flag, *flagcap); } (*flag)[nf++] = (unsigned char)(f); } while (0)
    size_t prev = 0, at = 0;
    while (at <= n) {
        size_t ms, me;
        if (p->re) {
            int rc = pcre2_match(p->re, (PCRE2_SPTR)s, n, at, PCRE2_NO_UTF_CHECK, l->md, NULL);
            if (rc < 0)
                break;
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(l->md);
            ms = ov[0];
            me = ov[1];
        } else {
            if (p->litlen == 0 || n - at < p->litlen)
                break;
            const char *hit = memmem(s + at, n - at, p->lit, p->litlen);
            if (!hit)
                break;
            ms = (size_t)(hit - s);
            me = ms + p->litlen;
        }
        if (prev != ms)
            PUSH(prev, ms, 0);
        PUSH(ms, me, 1);
        prev = me;
        if (me == ms) {             /* empty match: step one character */
            if (me >= n)
                break;
            uint32_t cp;
            size_t k = gl_utf8_decode((const unsigned char *)s + me, n - me, &cp);
            at = me + (k ? k : 1);
        } else
            at = me;
    }
    if (prev != n)
        PUSH(prev, n, 0);
#undef PUSH
    return nf;
}

static void pretok_apply(gl_tok_encoder *e, int lvl, const char *s, size_t n);

/* Hugging Face's NormalizedString::split with a behaviour: decide which
 * spans survive and which get merged, then recurse into each piece. */
static void split_apply(gl_tok_encoder *e, int lvl, const pretok *p, const char *s, size_t n)
{
    level *l = &e->lv[lvl];
    size_t nf = find_matches(l, p, s, n);
    unsigned char *flag = l->flag;
    if (p->invert)
        for (size_t i = 0; i < nf; i++)
            flag[i] = !flag[i];
    /* Build the output list in place: out[k] spans with remove flags. */
    size_t k = 0;
    int prev_match = 0;
    switch (p->behavior) {
    case SB_ISOLATED:
        for (size_t i = 0; i < nf; i++)
            flag[i] = 0;
        k = nf;
        break;
    case SB_REMOVED:
        k = nf;
        break;
    case SB_CONTIGUOUS:
    case SB_MERGED_PREV:
        /* A span joins the piece before it when it continues a run of
         * its kind (Contiguous) or is a match after a non-match
         * (MergedWithPrevious). */
        for (size_t i = 0; i < nf; i++) {
            int m = flag[i];
            int join = p->behavior == SB_CONTIGUOUS ? m == prev_match : m && !prev_match;
            if (join && k > 0)
                l->v[k - 1].e = l->v[i].e;
            else {
                l->v[k] = l->v[i];
                flag[k++] = 0;
            }
            prev_match = m;
        }
        break;
    case SB_MERGED_NEXT: {
        /* The same from the right, then reversed back. */
        size_t w = nf;
        for (size_t ii = nf; ii-- > 0;) {
            int m = flag[ii];
            if (m && !prev_match && w < nf)
                l->v[w].s = l->v[ii].s;
            else {
                w--;
                l->v[w] = l->v[ii];
                flag[w] = 0;
            }
            prev_match = m;
        }
        /* shift survivors [w, nf) to the front */
        for (size_t i = w; i < nf; i++) {
            l->v[i - w] = l->v[i];
            flag[i - w] = flag[i];
        }
        k = nf - w;
        break;
    }
    }
    /* Deeper levels use their own level state, so l->v and l->flag
     * survive the recursion. */
    size_t cnt = k;
    for (size_t i = 0; i < cnt; i++) {
        if (flag[i] || l->v[i].e == l->v[i].s)
            continue;
        span sp = l->v[i];
        pretok_apply(e, lvl + 1, s + sp.s, sp.e - sp.s);
    }
}

/* ByteLevel: optional prefix space, the GPT-2 split, then every byte
 * becomes its stand-in character. */
static void bytelevel_apply(gl_tok_encoder *e, int lvl, const pretok *p, const char *s, size_t n)
{
    level *l = &e->lv[lvl];
    const char *src = s;
    size_t len = n;
    if (p->add_prefix_space && !(n > 0 && s[0] == ' ')) {
        grow(&l->pre, &l->pcap, n + 2);
        l->pre[0] = ' ';
        memcpy(l->pre + 1, s, n);
        src = l->pre;
        len = n + 1;
    }
    if (p->use_regex)
        find_matches(l, p, src, len);
    else {
        l->n = 0;
        lv_push(l, 0, len);
    }
    for (size_t i = 0; i < l->n; i++) {
        size_t a = l->v[i].s, b = l->v[i].e;
        if (a == b)
            continue;
        grow(&l->buf, &l->bcap, 2 * (b - a) + 1);
        size_t o = 0;
        for (size_t j = a; j < b; j++)
            o += gl_utf8_encode(gl_bytelevel_char((unsigned char)src[j]), l->buf + o);
        pretok_apply(e, lvl + 1, l->buf, o);
    }
}

/* Digits: ASCII digits isolated one by one, or in runs. */
static void digits_apply(gl_tok_encoder *e, int lvl, const pretok *p, const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        int d = s[i] >= '0' && s[i] <= '9';
        size_t j = i + 1;
        if (!d || !p->individual)
            while (j < n && ((s[j] >= '0' && s[j] <= '9') == d))
                j++;
        pretok_apply(e, lvl + 1, s + i, j - i);
        i = j;
    }
}

static void pretok_apply(gl_tok_encoder *e, int lvl, const char *s, size_t n)
{
    const gl_tokenizer *t = e->t;
    if (n == 0)
        return;
    if (lvl >= t->n_pts) {
        model_word(e, s, n);
        return;
    }
    if (lvl + 1 >= MAX_LEVELS)
        gl_die("tokenizer: more than %d nested pre-tokenizers", MAX_LEVELS - 1);
    const pretok *p = &t->pts[lvl];
    switch (p->kind) {
    case PT_BYTELEVEL: bytelevel_apply(e, lvl, p, s, n); break;
    case PT_SPLIT: split_apply(e, lvl, p, s, n); break;
    case PT_DIGITS: digits_apply(e, lvl, p, s, n); break;
    }
}

/* --- normalizers ------------------------------------------------------ */

/* Apply the normalizers to s; returns the result (s itself, or nbuf). */
static const char *normalize(gl_tok_encoder *e, const char *s, size_t n, size_t *outn)
{
    const gl_tokenizer *t = e->t;
    const char *cur = s;
    size_t cn = n;
    for (int i = 0; i < t->n_norms; i++) {
        const norm_step *st = &t->norms[i];
        if (st->kind == NORM_PREPEND) {
            if (cn == 0)
                continue;
            grow(&e->nbuf2, &e->ncap2, cn + st->alen + 1);
            memcpy(e->nbuf2, st->a, st->alen);
            memcpy(e->nbuf2 + st->alen, cur, cn);
            cn += st->alen;
        } else {
            size_t o = 0, at = 0;
            grow(&e->nbuf2, &e->ncap2, cn + 1);
            while (at < cn) {
                size_t ms, me;
                if (st->re) {
                    if (pcre2_match(st->re, (PCRE2_SPTR)cur, cn, at, PCRE2_NO_UTF_CHECK, e->md, NULL) < 0)
                        break;
                    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
                    ms = ov[0];
                    me = ov[1];
                } else {
                    const char *hit = st->alen ? memmem(cur + at, cn - at, st->a, st->alen) : NULL;
                    if (!hit)
                        break;
                    ms = (size_t)(hit - cur);
                    me = ms + st->alen;
                }
                grow(&e->nbuf2, &e->ncap2, o + (ms - at) + st->blen + (cn - me) + 8);
                memcpy(e->nbuf2 + o, cur + at, ms - at);
                o += ms - at;
                memcpy(e->nbuf2 + o, st->b, st->blen);
                o += st->blen;
                if (me == ms) {     /* empty match: keep one character */
                    if (me >= cn)
                        break;
                    e->nbuf2[o++] = cur[me];
                    me++;
                    while (me < cn && ((unsigned char)cur[me] & 0xC0) == 0x80)
                        e->nbuf2[o++] = cur[me++];
                }
                at = me;
            }
            grow(&e->nbuf2, &e->ncap2, o + (cn - at) + 1);
            memcpy(e->nbuf2 + o, cur + at, cn - at);
            cn = o + (cn - at);
        }
        /* swap: the result becomes current */
        char *tb = e->nbuf; size_t tc = e->ncap;
        e->nbuf = e->nbuf2; e->ncap = e->ncap2;
        e->nbuf2 = tb; e->ncap2 = tc;
        cur = e->nbuf;
    }
    *outn = cn;
    return cur;
}

/* --- added tokens ------------------------------------------------------ */

/* The code point that ends just before position `at` (0 if at == 0);
 * *len is its length in bytes. */
static uint32_t cp_before(const char *s, size_t at, size_t *len)
{
    *len = 0;
    if (at == 0)
        return 0;
    size_t b = at - 1;
    while (b > 0 && at - b < 4 && ((unsigned char)s[b] & 0xC0) == 0x80)
        b--;
    uint32_t cp = 0;
    size_t k = gl_utf8_decode((const unsigned char *)s + b, at - b, &cp);
    if (k != at - b) {
        *len = 1;
        return (unsigned char)s[at - 1];
    }
    *len = k;
    return cp;
}

static int is_word_char(gl_tok_encoder *e, const char *s, size_t n)
{
    if (!e->t->word_re || n == 0)
        return 0;
    return pcre2_match(e->t->word_re, (PCRE2_SPTR)s, n, 0, PCRE2_ANCHORED | PCRE2_NO_UTF_CHECK,
                       e->md, NULL) >= 0;
}

typedef void (*piece_fn)(gl_tok_encoder *e, const char *s, size_t n);

/* Hugging Face's AddedVocabulary::find_matches: cut the added tokens of
 * `set` out of s (leftmost, then longest); text between them goes to fn,
 * token ids straight to the output. */
static void split_added(gl_tok_encoder *e, const added_set *set, const char *s, size_t n, piece_fn fn)
{
    const gl_tokenizer *t = e->t;
    size_t start_offset = 0, i = 0;
    while (i < n) {
        unsigned char b = (unsigned char)s[i];
        int hit = -1;
        for (int j = 0; j < set->n[b]; j++) {
            const added_tok *a = &t->added[set->idx[b][j]];
            if (a->len <= n - i && memcmp(s + i, a->content, a->len) == 0) {
                hit = set->idx[b][j];
                break;
            }
        }
        if (hit < 0) {
            i++;
            continue;
        }
        const added_tok *a = &t->added[hit];
        size_t start = i, stop = i + a->len;
        if (a->single_word) {
            size_t cl = 0;
            if (start > 0)
                cp_before(s, start, &cl);
            int left_word = start > 0 && is_word_char(e, s + start - cl, cl);
            uint32_t c2;
            size_t k2 = stop < n ? gl_utf8_decode((const unsigned char *)s + stop, n - stop, &c2) : 0;
            int right_word = stop < n && is_word_char(e, s + stop, k2 ? k2 : 1);
            if (left_word || right_word) {
                i = stop;
                continue;
            }
        }
        if (a->lstrip) {
            size_t ns = start;
            while (ns > 0) {
                size_t cl;
                uint32_t cp = cp_before(s, ns, &cl);
                if (!cl || !is_white_space(cp))
                    break;
                ns -= cl;
            }
            start = ns > start_offset ? ns : start_offset;
        }
        if (a->rstrip) {
            while (stop < n) {
                uint32_t cp;
                size_t k = gl_utf8_decode((const unsigned char *)s + stop, n - stop, &cp);
                if (!k || !is_white_space(cp))
                    break;
                stop += k;
            }
        }
        if (start_offset < start)
            fn(e, s + start_offset, start - start_offset);
        push_id(e, a->id);
        start_offset = stop;
        i = stop;
    }
    if (start_offset < n)
        fn(e, s + start_offset, n - start_offset);
}

static void pretok_piece(gl_tok_encoder *e, const char *s, size_t n)
{
    pretok_apply(e, 0, s, n);
}

/* Step 2: normalize a raw piece, cut normalized added tokens, go on. */
static void raw_piece(gl_tok_encoder *e, const char *s, size_t n)
{
    size_t nn;
    const char *ns = normalize(e, s, n, &nn);
    if (ns == s) {
        split_added(e, &e->t->norm_set, s, n, pretok_piece);
        return;
    }
    /* The normalized text lives in e->nbuf, which the next raw piece
     * overwrites; keep a private copy for the rest of this piece. */
    char *copy = dupn(ns, nn);
    split_added(e, &e->t->norm_set, copy, nn, pretok_piece);
    free(copy);
}

size_t gl_tok_encode(gl_tok_encoder *e, const char *text, size_t len, int add_special,
                     const int32_t **ids)
{
    const gl_tokenizer *t = e->t;
    e->nids = 0;
    if (!gl_utf8_valid(text, len)) {
        len = gl_utf8_repair(text, len, &e->rep, &e->repcap);
        text = e->rep;
    }
    if (add_special)
        for (int i = 0; i < t->n_pp_pre; i++)
            push_id(e, t->pp_pre[i]);
    split_added(e, &t->raw_set, text, len, raw_piece);
    if (add_special)
        for (int i = 0; i < t->n_pp_post; i++)
            push_id(e, t->pp_post[i]);
    *ids = e->ids;
    return e->nids;
}

/* ------------------------------------------------------------------ */
/* Decoding (for people: --inspect).                                   */

typedef struct { char *p; size_t n, cap; } sbuf;

static void sb_put(sbuf *b, const void *p, size_t n)
{
    grow(&b->p, &b->cap, b->n + n + 1);
    memcpy(b->p + b->n, p, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10
         : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

char *gl_tok_decode(const gl_tokenizer *t, const int32_t *ids, size_t n, size_t *outlen)
{
    /* Each token as a separate string, run through the decoders in order,
     * then joined. */
    sbuf *tok = gl_calloc(n ? n : 1, sizeof *tok);
    for (size_t i = 0; i < n; i++) {
        size_t len;
        const char *s = gl_tokenizer_id_to_token(t, ids[i], &len);
        if (s)
            sb_put(&tok[i], s, len);
        else {
            char tmp[32];
            int k = snprintf(tmp, sizeof tmp, "<unknown id %d>", ids[i]);
            sb_put(&tok[i], tmp, (size_t)k);
        }
    }
    for (int d = 0; d < t->n_decs; d++) {
        const dec_step *st = &t->decs[d];
        for (size_t i = 0; i < n; i++) {
            sbuf *b = &tok[i];
            sbuf o = { 0 };
            if (gl_strmap_get(&t->added_map, b->p ? b->p : "", b->n) >= 0 && st->kind != DEC_FUSE)
                continue;           /* added tokens are shown as written */
            switch (st->kind) {
            case DEC_BYTELEVEL:
                for (size_t j = 0; j < b->n;) {
                    uint32_t cp;
                    size_t k = gl_utf8_decode((unsigned char *)b->p + j, b->n - j, &cp);
                    if (k && cp < 512 && t->u2b[cp] >= 0) {
                        char c = (char)t->u2b[cp];
                        sb_put(&o, &c, 1);
                    } else
                        sb_put(&o, b->p + j, k ? k : 1);
                    j += k ? k : 1;
                }
                break;
            case DEC_BYTEFALLBACK:
                if (b->n == 6 && memcmp(b->p, "<0x", 3) == 0 && b->p[5] == '>' &&
                    hexval(b->p[3]) >= 0 && hexval(b->p[4]) >= 0) {
                    char c = (char)(hexval(b->p[3]) * 16 + hexval(b->p[4]));
                    sb_put(&o, &c, 1);
                } else
                    sb_put(&o, b->p, b->n);
                break;
            case DEC_REPLACE:
            case DEC_METASPACE: {
                const char *pat = st->a;
                size_t pl = st->alen;
                const char *rep = st->kind == DEC_REPLACE ? st->b : " ";
                size_t rl = st->kind == DEC_REPLACE ? st->blen : 1;
                for (size_t j = 0; j < b->n;) {
                    if (pl && j + pl <= b->n && memcmp(b->p + j, pat, pl) == 0) {
                        sb_put(&o, rep, rl);
                        j += pl;
                    } else
                        sb_put(&o, b->p + j++, 1);
                }
                if (st->kind == DEC_METASPACE && i == 0 && o.n && o.p[0] == ' ') {
                    memmove(o.p, o.p + 1, o.n--);
                }
                break;
            }
            case DEC_STRIP: {
                size_t a = 0, z = b->n;
                for (int k = 0; k < st->start && a + st->alen <= z && memcmp(b->p + a, st->a, st->alen) == 0; k++)
                    a += st->alen;
                for (int k = 0; k < st->stop && z >= a + st->alen && memcmp(b->p + z - st->alen, st->a, st->alen) == 0; k++)
                    z -= st->alen;
                sb_put(&o, b->p + a, z - a);
                break;
            }
            case DEC_FUSE:
            default:
                sb_put(&o, b->p ? b->p : "", b->n);
                break;
            }
            free(b->p);
            *b = o;
        }
    }
    sbuf out = { 0 };
    sb_put(&out, "", 0);
    for (size_t i = 0; i < n; i++) {
        if (tok[i].n)
            sb_put(&out, tok[i].p, tok[i].n);
        free(tok[i].p);
    }
    free(tok);
    *outlen = out.n;
    return out.p;
}
