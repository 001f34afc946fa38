/* bpe_train.c: byte-level BPE training (see bpe_train.h). */
#include <config.h>
#include "data/bpe_train.h"
#include "data/lines.h"
#include "data/strmap.h"
#include "data/tokenizer.h"
#include "data/utf8.h"
#include "base/file.h"
#include "base/log.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The distinct pre-tokenized words and their counts. */
typedef struct {
    gl_strmap index;            /* word -> number */
    char **word; size_t *wlen;
    int64_t *count;
    size_t n, cap;
} wordbag;

static void bag_add(void *ctx, const char *w, size_t n)
{
    wordbag *b = ctx;
    int32_t k = gl_strmap_get(&b->index, w, n);
    if (k >= 0) {
        b->count[k]++;
        return;
    }
    if (b->n == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 4096;
        b->word = gl_realloc(b->word, b->cap * sizeof *b->word);
        b->wlen = gl_realloc(b->wlen, b->cap * sizeof *b->wlen);
        b->count = gl_realloc(b->count, b->cap * sizeof *b->count);
    }
    if (b->n >= INT32_MAX)
        gl_die("--train-tokenizer: more than 2^31 distinct words");
    b->word[b->n] = gl_malloc(n);
    memcpy(b->word[b->n], w, n);
    b->wlen[b->n] = n;
    b->count[b->n] = 1;
    gl_strmap_put(&b->index, w, n, (int32_t)b->n);
    b->n++;
}

/* Training state: each distinct word as a sequence of token ids. */
typedef struct {
    int32_t **sym; int32_t *nsym;   /* per word */
    int64_t *wcount;
    size_t nwords;
    gl_u64map pair_count;           /* (a << 32 | b) -> count (int64 stored as u64) */
    gl_u64map pair_where;           /* pair -> index into where lists */
    int32_t **where; int32_t *nwhere, *capwhere; size_t nlists, listcap;
    /* max-heap of (count, pair) with lazy invalidation */
    struct hent { int64_t count; uint64_t pair; } *heap; size_t nheap, heapcap;
    int32_t *seen; int32_t stamp;   /* per word: last merge that touched it */
} trainer;

static int hent_before(const struct hent *x, const struct hent *y)
{
    if (x->count != y->count)
        return x->count > y->count;
    return x->pair < y->pair;       /* smaller left id, then smaller right id */
}

static void hpush(trainer *T, int64_t count, uint64_t pair)
{
    if (T->nheap == T->heapcap) {
        T->heapcap = T->heapcap ? 2 * T->heapcap : 4096;
        T->heap = gl_realloc(T->heap, T->heapcap * sizeof *T->heap);
    }
    struct hent x = { count, pair };
    size_t i = T->nheap++;
    while (i > 0 && hent_before(&x, &T->heap[(i - 1) / 2])) {
        T->heap[i] = T->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    T->heap[i] = x;
}

static struct hent hpop(trainer *T)
{
    struct hent top = T->heap[0], x = T->heap[--T->nheap];
    size_t i = 0, n = T->nheap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && hent_before(&T->heap[c + 1], &T->heap[c]))
            c++;
        if (!hent_before(&T->heap[c], &x))
            break;
        T->heap[i] = T->heap[c];
        i = c;
    }
    if (n)
        T->heap[i] = x;
    return top;
}

static int64_t pcount(trainer *T, uint64_t pair)
{
    uint64_t v;
    return gl_u64map_get(&T->pair_count, pair, &v) ? (int64_t)v : 0;
}

static void note_where(trainer *T, uint64_t pair, int32_t w)
{
    uint64_t li;
    if (!gl_u64map_get(&T->pair_where, pair, &li)) {
        if (T->nlists == T->listcap) {
            T->listcap = T->listcap ? 2 * T->listcap : 4096;
            T->where = gl_realloc(T->where, T->listcap * sizeof *T->where);
            T->nwhere = gl_realloc(T->nwhere, T->listcap * sizeof *T->nwhere);
            T->capwhere = gl_realloc(T->capwhere, T->listcap * sizeof *T->capwhere);
        }
        li = T->nlists++;
        T->where[li] = NULL;
        T->nwhere[li] = T->capwhere[li] = 0;
        gl_u64map_put(&T->pair_where, pair, li);
    }
    if (T->nwhere[li] && T->where[li][T->nwhere[li] - 1] == w)
        return;
    if (T->nwhere[li] == T->capwhere[li]) {
        T->capwhere[li] = T->capwhere[li] ? 2 * T->capwhere[li] : 4;
        T->where[li] = gl_realloc(T->where[li], (size_t)T->capwhere[li] * sizeof **T->where);
    }
    T->where[li][T->nwhere[li]++] = w;
}

/* Add (sign = +1) or remove (-1) the pairs of word w from the counts. */
static void word_pairs(trainer *T, int32_t w, int sign, int push)
{
    for (int32_t i = 0; i + 1 < T->nsym[w]; i++) {
        uint64_t pair = (uint64_t)(uint32_t)T->sym[w][i] << 32 | (uint32_t)T->sym[w][i + 1];
        int64_t c = pcount(T, pair) + sign * T->wcount[w];
        gl_u64map_put(&T->pair_count, pair, (uint64_t)c);
        if (sign > 0) {
            note_where(T, pair, w);
            if (push)
                hpush(T, c, pair);
        }
    }
}

static char *mkstr(const char *a, size_t an, const char *b, size_t bn)
{
    char *s = gl_malloc(an + bn + 1);
    memcpy(s, a, an);
    memcpy(s + an, b, bn);
    s[an + bn] = '\0';
    return s;
}

/* Write `root` to path whole or not at all (base/file.h). */
static void write_json(json_t *root, const char *path)
{
    char *text = json_dumps(root, JSON_INDENT(2));
    gl_error e;
    if (!text)
        gl_die("--output %s: cannot format the JSON (out of memory?)", path);
    if (gl_file_write_all(path, text, strlen(text), 0, &e) < 0)
        gl_die("--output: %s", e.text);
    free(text);
}

static json_t *added_json(int id, const char *content)
{
    return json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", id, "content", content,
                     "single_word", 0, "lstrip", 0, "rstrip", 0, "normalized", 0, "special", 1);
}

static json_t *bytelevel_json(int prefix)
{
    return json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", prefix,
                     "trim_offsets", 1, "use_regex", 1);
}

void gl_bpe_train(const gl_bpe_train_opts *o)
{
    double t0 = gl_now();
    /* Special tokens first (ids 0..), then the 256 byte characters. */
    char *specials_copy = gl_strdup(o->special_tokens ? o->special_tokens : "");
    char *spec[64];
    int nspec = 0;
    char *save = NULL;
    for (char *s = strtok_r(specials_copy, ",", &save); s; s = strtok_r(NULL, ",", &save)) {
        if (nspec == 64)
            gl_die_code(2, "--special-tokens: at most 64");
        spec[nspec++] = s;
    }
    if (o->vocab_size < 256 + nspec)
        gl_die_code(2, "--vocab-size %ld: a byte-level vocabulary needs at least 256 + %d (special"
                    " tokens) entries", o->vocab_size, nspec);

    /* 1. Count the words of the corpus. */
    gl_tokenizer *skel = gl_tokenizer_bytelevel_skeleton(o->special_tokens);
    gl_tok_encoder *enc = gl_tok_encoder_new(skel);
    wordbag bag = { 0 };
    gl_strmap_init(&bag.index);
    gl_tok_encoder_set_word_hook(enc, bag_add, &bag);
    gl_lines *in = gl_lines_open(o->input);
    const char *line;
    size_t len;
    long docs = 0, bad = 0;
    char *rep = NULL;
    size_t repcap = 0;
    gl_error ierr;
    int got;
    while ((got = gl_lines_next(in, &line, &len, &ierr)) > 0) {
        if (len == 0)
            continue;
        if (!gl_utf8_valid(line, len)) {
            len = gl_utf8_repair(line, len, &rep, &repcap);
            line = rep;
        }
        json_t *doc = json_loadb(line, len, JSON_ALLOW_NUL, NULL);
        json_t *v = json_object_get(doc, o->json_key);
        if (!json_is_string(v)) {
            if (bad++ < 10)
                gl_warn("%s:%ld: no string \"%s\" in a JSON object; line skipped", o->input,
                        gl_lines_number(in), o->json_key);
            json_decref(doc);
            continue;
        }
        const int32_t *ids;
        gl_tok_encode(enc, json_string_value(v), json_string_length(v), 0, &ids);
        json_decref(doc);
        docs++;
    }
    if (got < 0)
        gl_die("--input %s (no tokenizer was written)", ierr.text);
    free(rep);
    gl_lines_close(in);
    gl_tok_encoder_free(enc);
    gl_tokenizer_free(skel);
    if (!o->quiet)
        fprintf(stderr, "%s: %ld documents, %zu distinct words (%.1f s)\n", gl_log_program(), docs,
                bag.n, gl_now() - t0);

    /* 2. The vocabulary so far: specials, then the bytes in byte order. */
    size_t vcap = (size_t)o->vocab_size;
    char **tok = gl_calloc(vcap, sizeof *tok);
    size_t *tlen = gl_calloc(vcap, sizeof *tlen);
    size_t nv = 0;
    gl_strmap vocab;
    gl_strmap_init(&vocab);
    for (int i = 0; i < nspec; i++) {
        tok[nv] = gl_strdup(spec[i]);
        tlen[nv] = strlen(spec[i]);
        gl_strmap_put(&vocab, tok[nv], tlen[nv], (int32_t)nv);
        nv++;
    }
    int32_t byte_id[256];
    for (unsigned b = 0; b < 256; b++) {
        char u[4];
        size_t k = gl_utf8_encode(gl_bytelevel_char(b), u);
        tok[nv] = mkstr(u, k, "", 0);
        tlen[nv] = k;
        gl_strmap_put(&vocab, tok[nv], k, (int32_t)nv);
        byte_id[b] = (int32_t)nv++;
    }

    /* 3. Words as byte-character ids. */
    trainer T = { 0 };
    T.nwords = bag.n;
    T.sym = gl_malloc((bag.n ? bag.n : 1) * sizeof *T.sym);
    T.nsym = gl_malloc((bag.n ? bag.n : 1) * sizeof *T.nsym);
    T.wcount = bag.count;
    T.seen = gl_calloc(bag.n ? bag.n : 1, sizeof *T.seen);
    gl_u64map_init(&T.pair_count);
    gl_u64map_init(&T.pair_where);
    for (size_t w = 0; w < bag.n; w++) {
        T.sym[w] = gl_malloc((bag.wlen[w] + 1) * sizeof **T.sym);
        int32_t n = 0;
        for (size_t i = 0; i < bag.wlen[w];) {
            uint32_t cp;
            size_t k = gl_utf8_decode((const unsigned char *)bag.word[w] + i, bag.wlen[w] - i, &cp);
            int32_t id = gl_strmap_get(&vocab, bag.word[w] + i, k ? k : 1);
            if (id < 0) /* not a byte character: cannot happen after ByteLevel */
                id = byte_id[(unsigned char)bag.word[w][i]];
            T.sym[w][n++] = id;
            i += k ? k : 1;
        }
        T.nsym[w] = n;
        word_pairs(&T, (int32_t)w, +1, 0);
    }
    for (size_t i = 0; i < T.pair_count.cap; i++)
        if (T.pair_count.key[i] != UINT64_MAX && (int64_t)T.pair_count.val[i] > 0)
            hpush(&T, (int64_t)T.pair_count.val[i], T.pair_count.key[i]);

    /* 4. Merge until the vocabulary is full. */
    json_t *merges = json_array();
    while (nv < vcap && T.nheap) {
        struct hent top = hpop(&T);
        int64_t cur = pcount(&T, top.pair);
        if (cur != top.count) {
            if (cur > 0)
                hpush(&T, cur, top.pair);
            continue;
        }
        if (cur < o->min_frequency)
            break;
        int32_t a = (int32_t)(top.pair >> 32), b = (int32_t)(uint32_t)top.pair;
        /* A string made before by another split keeps its id (Hugging
         * Face's trainer does the same): the merge is recorded, the
         * vocabulary does not grow. */
        char *s = mkstr(tok[a], tlen[a], tok[b], tlen[b]);
        int32_t nid = gl_strmap_get(&vocab, s, tlen[a] + tlen[b]);
        if (nid >= 0)
            free(s);
        else {
            nid = (int32_t)nv;
            tok[nv] = s;
            tlen[nv] = tlen[a] + tlen[b];
            gl_strmap_put(&vocab, s, tlen[nv], nid);
            nv++;
        }
        char *m = gl_malloc(tlen[a] + tlen[b] + 2);
        memcpy(m, tok[a], tlen[a]);
        m[tlen[a]] = ' ';
        memcpy(m + tlen[a] + 1, tok[b], tlen[b]);
        m[tlen[a] + 1 + tlen[b]] = '\0';
        json_array_append_new(merges, json_stringn(m, tlen[a] + 1 + tlen[b]));
        free(m);

        /* Rewrite the words that hold the pair. */
        T.stamp++;
        uint64_t li;
        if (!gl_u64map_get(&T.pair_where, top.pair, &li))
            continue;
        int32_t nw = T.nwhere[li];
        int32_t *ws = gl_malloc((size_t)(nw ? nw : 1) * sizeof *ws);
        memcpy(ws, T.where[li], (size_t)nw * sizeof *ws);
        for (int32_t j = 0; j < nw; j++) {
            int32_t w = ws[j];
            if (T.seen[w] == T.stamp)
                continue;
            T.seen[w] = T.stamp;
            int32_t *x = T.sym[w], n = T.nsym[w], o2 = 0;
            int has = 0;
            for (int32_t i = 0; i + 1 < n; i++)
                has |= x[i] == a && x[i + 1] == b;
            if (!has)
                continue;
            word_pairs(&T, w, -1, 0);
            for (int32_t i = 0; i < n;) {
                if (i + 1 < n && x[i] == a && x[i + 1] == b) {
                    x[o2++] = nid;
                    i += 2;
                } else
                    x[o2++] = x[i++];
            }
            T.nsym[w] = o2;
            word_pairs(&T, w, +1, 1);
        }
        free(ws);
    }
    if (nv < vcap && !o->quiet)
        gl_warn("--vocab-size %ld: the corpus supports only %zu tokens (no pair occurs %ld times"
                " more); the vocabulary is smaller", o->vocab_size, nv, o->min_frequency);

    /* 5. tokenizer.json, as Hugging Face writes it. */
    json_t *vj = json_object();
    for (size_t i = 0; i < nv; i++)
        json_object_set_new_nocheck(vj, tok[i], json_integer((json_int_t)i));
    json_t *added = json_array();
    for (int i = 0; i < nspec; i++)
        json_array_append_new(added, added_json(i, spec[i]));
    json_t *model = json_pack("{s:s, s:n, s:n, s:n, s:n, s:b, s:b, s:b, s:o, s:o}",
                              "type", "BPE", "dropout", "unk_token", "continuing_subword_prefix",
                              "end_of_word_suffix", "fuse_unk", 0, "byte_fallback", 0,
                              "ignore_merges", 0, "vocab", vj, "merges", merges);
    json_t *root = json_pack("{s:s, s:n, s:n, s:o, s:n, s:o, s:o, s:o, s:o}",
                             "version", "1.0", "truncation", "padding", "added_tokens", added,
                             "normalizer", "pre_tokenizer", bytelevel_json(0),
                             "post_processor", bytelevel_json(1), "decoder", bytelevel_json(1),
                             "model", model);
    /* the output's directory, if missing */
    char dir[4096];
    gl_error e;
    gl_file_dirname(o->output, dir, sizeof dir);
    if (gl_file_mkdirs(dir, &e) < 0)
        gl_die("--output %s: %s", o->output, e.text);
    write_json(root, o->output);
    json_decref(root);
    if (nspec) {
        char cfg[4200];
        snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", dir);
        json_t *c = json_pack("{s:s, s:s, s:s, s:s, s:b}", "tokenizer_class", "PreTrainedTokenizerFast",
                              "eos_token", spec[0], "bos_token", spec[0], "unk_token", spec[0],
                              "clean_up_tokenization_spaces", 0);
        write_json(c, cfg);
        json_decref(c);
    }
    if (!o->quiet)
        fprintf(stderr, "%s: wrote %s: %zu tokens (%d special, 256 bytes, %zu merges) in %.1f s\n",
                gl_log_program(), o->output, nv, nspec, nv - 256 - (size_t)nspec, gl_now() - t0);

    for (size_t i = 0; i < nv; i++)
        free(tok[i]);
    free(tok);
    free(tlen);
    gl_strmap_free(&vocab);
    for (size_t w = 0; w < bag.n; w++) {
        free(bag.word[w]);
        free(T.sym[w]);
    }
    for (size_t i = 0; i < T.nlists; i++)
        free(T.where[i]);
    free(T.where); free(T.nwhere); free(T.capwhere);
    free(T.sym); free(T.nsym); free(T.seen); free(T.heap);
    gl_u64map_free(&T.pair_count);
    gl_u64map_free(&T.pair_where);
    free(bag.word); free(bag.wlen); free(bag.count);
    gl_strmap_free(&bag.index);
    free(specials_copy);
}
