/*
 * tokenizer_load.c: building a gl_tokenizer (tokenizer.h) -- from a
 * Hugging Face tokenizer.json (with tokenizer_config.json's eos_token),
 * from GPT-2's vocab.json and merges.txt, or as the byte-level skeleton
 * that BPE training uses -- with every id and step checked; freeing it;
 * and the queries on its vocabulary.  Running it is tokenizer_pipeline.c;
 * the structure they share is tokenizer_impl.h.
 */
#include <config.h>
#include "data/tokenizer_impl.h"
#include "base/error.h"
#include "base/file.h"
#include "base/json.h"

#include <jansson.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The regexes exactly as Hugging Face writes them in tokenizer.json
 * (ByteLevel's built-in GPT-2 pattern; Llama 3's Split pattern). */
const char GL_GPT2_REGEX[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
const char GL_LLAMA3_REGEX[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* ------------------------------------------------------------------ */
/* Loading.  Each step returns 0, or -1 with the reason in err (the first
 * failure ends the load); the public loaders put the file's name before
 * it.  A reason is cut at 767 bytes. */
#define WHY_FMT "%.767s"

/* Rewrite \s and \S to Oniguruma's White_Space meaning, inside and
 * outside character classes; everything else passes through. */
static char *translate_regex(const char *src)
{
    size_t n = strlen(src), cap = n * 8 + 256, o = 0;
    char *out = gl_malloc(cap);
    int in_class = 0;
    for (size_t i = 0; i < n; i++) {
        if (o + 200 > cap) {
            cap *= 2;
            out = gl_realloc(out, cap);
        }
        char c = src[i];
        if (c == '\\' && i + 1 < n) {
            char d = src[i + 1];
            if (d == 's' || d == 'S') {
                const char *rep = in_class ? (d == 's' ? WS_CLASS : NULL)
                                           : (d == 's' ? "[" WS_CLASS "]" : "[^" WS_CLASS "]");
                if (rep) {
                    size_t k = strlen(rep);
                    memcpy(out + o, rep, k);
                    o += k;
                    i++;
                    continue;
                }
            }
            out[o++] = c;
            out[o++] = d;
            i++;
            continue;
        }
        if (!in_class && c == '[') {
            in_class = 1;
            out[o++] = c;
            /* A ']' right after '[' or '[^' is a literal. */
            if (i + 1 < n && src[i + 1] == '^')
                out[o++] = src[++i];
            if (i + 1 < n && src[i + 1] == ']')
                out[o++] = src[++i];
            continue;
        }
        if (in_class && c == '[' && i + 1 < n && src[i + 1] == ':') {
            const char *end = strstr(src + i + 2, ":]");
            if (end) {
                size_t k = (size_t)(end + 2 - (src + i));
                while (o + k + 1 > cap) { /* a [:name:] may be longer than the 200 reserved */
                    cap *= 2;
                    out = gl_realloc(out, cap);
                }
                memcpy(out + o, src + i, k);
                o += k;
                i += k - 1;
                continue;
            }
        }
        if (in_class && c == ']')
            in_class = 0;
        out[o++] = c;
    }
    out[o] = '\0';
    return out;
}

static pcre2_code *compile_regex(const char *pattern, gl_error *err, const char *what)
{
    char *p = translate_regex(pattern);
    int code;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)p, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                                   &code, &off, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        gl_errprintf(err, "%s: regex /%s/ does not compile at offset %zu: %s", what, pattern,
                     (size_t)off, (char *)msg);
    } else
        pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* falls back to the interpreter */
    free(p);
    return re;
}

static const char *jstr(json_t *o, const char *key, size_t *len)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_string(v))
        return NULL;
    if (len)
        *len = json_string_length(v);
    return json_string_value(v);
}

static int jbool(json_t *o, const char *key, int dflt)
{
    json_t *v = json_object_get(o, key);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

/* A token as messages show it: at most 40 bytes, quotes, backslashes and
 * control bytes escaped. */
typedef struct { char s[200]; } shown;

static shown show(const char *s, size_t n)
{
    shown o;
    size_t k = 0;
    for (size_t i = 0; i < n && k + 8 < sizeof o.s; i++) {
        unsigned char c = (unsigned char)s[i];
        if (i == 40) {
            k += (size_t)snprintf(o.s + k, sizeof o.s - k, "...");
            break;
        }
        if (c < 0x20 || c == 0x7f || c == '"' || c == '\\')
            k += (size_t)snprintf(o.s + k, sizeof o.s - k, "\\x%02x", c);
        else
            o.s[k++] = (char)c;
    }
    o.s[k] = '\0';
    return o;
}

/* The id -> token table.  Its size is the number of entries the files
 * actually hold (model vocabulary plus added tokens), never a number
 * written in them: every id must be below it, so an id of 2^31 in a
 * ten-token file is refused instead of allocating 24 GB (or writing at
 * a negative index). */
static int reserve_ids(gl_tokenizer *t, size_t n_tokens, gl_error *err)
{
    if (n_tokens > (size_t)INT32_MAX)
        return gl_errprintf(err, "%zu tokens: more than gridlm's 32-bit ids can number", n_tokens);
    t->n_ids = (long)n_tokens;
    t->id_str = gl_calloc(n_tokens, sizeof *t->id_str);
    t->id_len = gl_calloc(n_tokens, sizeof *t->id_len);
    return 0;
}

/* Give token s the id: the id must be below the number of tokens and
 * name no other token (the same token may come twice: in the vocabulary
 * and again as an added token). */
static int set_id_string(gl_tokenizer *t, long long id, const char *s, size_t n, const char *what,
                         gl_error *err)
{
    if (id < 0 || id >= t->n_ids)
        return gl_errprintf(err, "%s \"%s\" has id %lld, but the file holds only %ld tokens, so"
                            " ids run from 0 to %ld (fix the id)", what, show(s, n).s, id,
                            t->n_ids, t->n_ids - 1);
    if (t->id_str[id]) {
        if (t->id_len[id] == n && memcmp(t->id_str[id], s, n) == 0)
            return 0;
        return gl_errprintf(err, "id %lld is given to both \"%s\" and \"%s\": an id names one"
                            " token (fix one of them)", id,
                            show(t->id_str[id], t->id_len[id]).s, show(s, n).s);
    }
    t->id_str[id] = dupn(s, n);
    t->id_len[id] = (uint32_t)n;
    if (id + 1 > t->vocab_size)
        t->vocab_size = (long)id + 1;
    return 0;
}

/* An id as Hugging Face reads it: a JSON integer that fits an unsigned
 * 32-bit number (it refuses anything else).  -1 when it is not one. */
static long long json_id(json_t *v)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        json_integer_value(v) > (json_int_t)UINT32_MAX)
        return -1;
    return (long long)json_integer_value(v);
}

/* What is wrong with an id json_id() refused, for messages. */
typedef struct { char s[64]; } id_why;

static id_why bad_id(json_t *v)
{
    id_why w;
    if (!v)
        snprintf(w.s, sizeof w.s, "no id");
    else if (!json_is_integer(v))
        snprintf(w.s, sizeof w.s, "an id that is not an integer");
    else
        snprintf(w.s, sizeof w.s, "id %lld, %s", (long long)json_integer_value(v),
                 json_integer_value(v) < 0 ? "which is negative" : "which does not fit 32 bits");
    return w;
}

/* A pattern object {"String": s} or {"Regex": r}. */
static int load_pattern(json_t *pat, char **lit, size_t *litlen, pcre2_code **re, gl_error *err,
                        const char *what)
{
    size_t n;
    const char *s;
    if ((s = jstr(pat, "String", &n))) {
        *lit = dupn(s, n);
        *litlen = n;
        return 0;
    }
    if ((s = jstr(pat, "Regex", &n))) {
        *re = compile_regex(s, err, what);
        return *re ? 0 : -1;
    }
    return gl_errprintf(err, "%s: pattern is neither {\"String\": ...} nor {\"Regex\": ...}",
                        what);
}

/* The normalizer, pre_tokenizer, decoder and post_processor of a
 * tokenizer.json share one shape: null or absent means none, a
 * {"type": "Sequence", LIST: [...]} nests steps, any other type is one
 * step.  step_type() handles the first two and sets *type to the type of
 * a single step, or to NULL when nothing is left to load: the step is
 * absent, it was a Sequence (whose members `load` has loaded), or it has
 * no type (an error "WHAT without a type" when `what` is given, else
 * ignored).  It returns -1 on such an error or when a member fails. */
typedef int (*step_loader)(gl_tokenizer *t, json_t *step, gl_error *err);

static int step_type(gl_tokenizer *t, json_t *step, const char *list, step_loader load,
                     const char *what, const char **type, gl_error *err)
{
    *type = NULL;
    if (!step || json_is_null(step))
        return 0;
    const char *ty = jstr(step, "type", NULL);
    if (!ty)
        return what ? gl_errprintf(err, "%s without a type", what) : 0;
    if (strcmp(ty, "Sequence") == 0) {
        size_t i;
        json_t *v;
        json_array_foreach(json_object_get(step, list), i, v)
            if (load(t, v, err))
                return -1;
        return 0;
    }
    *type = ty;
    return 0;
}

static int load_normalizer(gl_tokenizer *t, json_t *n, gl_error *err)
{
    const char *type;
    if (step_type(t, n, "normalizers", load_normalizer, "normalizer", &type, err))
        return -1;
    if (!type)
        return 0;
    norm_step s = { 0 };
    size_t len;
    const char *str;
    if (strcmp(type, "Prepend") == 0 && (str = jstr(n, "prepend", &len))) {
        s.kind = NORM_PREPEND;
        s.a = dupn(str, len);
        s.alen = len;
    } else if (strcmp(type, "Replace") == 0 && (str = jstr(n, "content", &len))) {
        s.kind = NORM_REPLACE;
        s.b = dupn(str, len);
        s.blen = len;
        if (load_pattern(json_object_get(n, "pattern"), &s.a, &s.alen, &s.re, err,
                         "normalizer Replace")) {
            free(s.b);
            return -1;
        }
    } else {
        return gl_errprintf(err, "normalizer %s is not supported by gridlm (supported: Sequence,"
                            " Prepend, Replace)", type);
    }
    t->norms = gl_realloc(t->norms, (size_t)(t->n_norms + 1) * sizeof *t->norms);
    t->norms[t->n_norms++] = s;
    return 0;
}

static int behavior_code(const char *b)
{
    if (!b) return SB_ISOLATED;
    if (strcmp(b, "Removed") == 0) return SB_REMOVED;
    if (strcmp(b, "Isolated") == 0) return SB_ISOLATED;
    if (strcmp(b, "MergedWithPrevious") == 0) return SB_MERGED_PREV;
    if (strcmp(b, "MergedWithNext") == 0) return SB_MERGED_NEXT;
    if (strcmp(b, "Contiguous") == 0) return SB_CONTIGUOUS;
    return 0;
}

static int load_pretokenizer(gl_tokenizer *t, json_t *p, gl_error *err)
{
    const char *type;
    if (step_type(t, p, "pretokenizers", load_pretokenizer, "pre_tokenizer", &type, err))
        return -1;
    if (!type)
        return 0;
    pretok s = { 0 };
    if (strcmp(type, "ByteLevel") == 0) {
        s.kind = PT_BYTELEVEL;
        s.add_prefix_space = jbool(p, "add_prefix_space", 1);
        s.use_regex = jbool(p, "use_regex", 1);
        if (s.use_regex && !(s.re = compile_regex(GL_GPT2_REGEX, err, "ByteLevel")))
            return -1;
        t->byte_level = 1;
    } else if (strcmp(type, "Split") == 0) {
        s.kind = PT_SPLIT;
        s.behavior = behavior_code(jstr(p, "behavior", NULL));
        s.invert = jbool(p, "invert", 0);
        if (!s.behavior)
            return gl_errprintf(err, "pre_tokenizer Split: unknown behavior %s",
                                jstr(p, "behavior", NULL));
        if (load_pattern(json_object_get(p, "pattern"), &s.lit, &s.litlen, &s.re, err,
                         "pre_tokenizer Split"))
            return -1;
    } else if (strcmp(type, "Digits") == 0) {
        s.kind = PT_DIGITS;
        s.individual = jbool(p, "individual_digits", 0);
    } else {
        return gl_errprintf(err, "pre_tokenizer %s is not supported by gridlm (supported:"
                            " ByteLevel, Split, Digits, Sequence)", type);
    }
    t->pts = gl_realloc(t->pts, (size_t)(t->n_pts + 1) * sizeof *t->pts);
    t->pts[t->n_pts++] = s;
    return 0;
}

static int load_decoder(gl_tokenizer *t, json_t *d, gl_error *err)
{
    const char *type;
    if (step_type(t, d, "decoders", load_decoder, NULL, &type, err))
        return -1;
    if (!type)
        return 0;
    dec_step s = { 0 };
    size_t n;
    const char *str;
    if (strcmp(type, "ByteLevel") == 0) {
        s.kind = DEC_BYTELEVEL;
        t->byte_level = 1;
    } else if (strcmp(type, "ByteFallback") == 0)
        s.kind = DEC_BYTEFALLBACK;
    else if (strcmp(type, "Fuse") == 0)
        s.kind = DEC_FUSE;
    else if (strcmp(type, "Replace") == 0 && (str = jstr(json_object_get(d, "pattern"), "String", &n))) {
        s.kind = DEC_REPLACE;
        s.a = dupn(str, n);
        s.alen = n;
        str = jstr(d, "content", &n);
        s.b = dupn(str ? str : "", str ? n : 0);
        s.blen = str ? n : 0;
    } else if (strcmp(type, "Strip") == 0 && (str = jstr(d, "content", &n))) {
        s.kind = DEC_STRIP;
        s.a = dupn(str, n);
        s.alen = n;
        s.start = (int)json_integer_value(json_object_get(d, "start"));
        s.stop = (int)json_integer_value(json_object_get(d, "stop"));
    } else if (strcmp(type, "Metaspace") == 0) {
        s.kind = DEC_METASPACE;
        str = jstr(d, "replacement", &n);
        s.a = dupn(str ? str : "\xe2\x96\x81", str ? n : 3);
        s.alen = str ? n : 3;
    } else
        return 0; /* decoding is for people (--inspect); tokens are shown raw */
    t->decs = gl_realloc(t->decs, (size_t)(t->n_decs + 1) * sizeof *t->decs);
    t->decs[t->n_decs++] = s;
    return 0;
}

/* Special tokens of a post-processor, before and after the sequence.
 * Each id must name a token of the tokenizer. */
static int pp_add(gl_tokenizer *t, int pre, json_t *idv, const char *what, gl_error *err)
{
    long long id = json_id(idv);
    if (id < 0 || id >= t->vocab_size || !t->id_str[id]) {
        char got[32] = "(not an integer)";
        if (json_is_integer(idv))
            snprintf(got, sizeof got, "%lld", (long long)json_integer_value(idv));
        return gl_errprintf(err, "post_processor: the id %s of %s names no token of the tokenizer"
                            " (ids run from 0 to %ld); fix the id", got, what, t->vocab_size - 1);
    }
    int32_t **v = pre ? &t->pp_pre : &t->pp_post;
    int *n = pre ? &t->n_pp_pre : &t->n_pp_post;
    *v = gl_realloc(*v, (size_t)(*n + 1) * sizeof **v);
    (*v)[(*n)++] = (int32_t)id;
    return 0;
}

static int load_post(gl_tokenizer *t, json_t *p, gl_error *err)
{
    const char *type;
    if (step_type(t, p, "processors", load_post, NULL, &type, err))
        return -1;
    if (!type)
        return 0;
    if (strcmp(type, "ByteLevel") == 0)
        return 0; /* changes offsets only */
    if (strcmp(type, "TemplateProcessing") == 0) {
        json_t *single = json_object_get(p, "single"), *specials = json_object_get(p, "special_tokens");
        size_t i;
        json_t *item;
        int seen_seq = 0;
        json_array_foreach(single, i, item) {
            json_t *sp = json_object_get(item, "SpecialToken");
            if (!sp) {
                seen_seq = 1;
                continue;
            }
            const char *name = jstr(sp, "id", NULL);
            json_t *st = name ? json_object_get(specials, name) : NULL;
            json_t *ids = json_object_get(st, "ids");
            size_t k;
            json_t *idv;
            if (!json_is_array(ids))
                return gl_errprintf(err, "post_processor TemplateProcessing: special token %s"
                                    " has no ids", name ? name : "?");
            json_array_foreach(ids, k, idv)
                if (pp_add(t, !seen_seq, idv, name, err))
                    return -1;
        }
        return 0;
    }
    if (strcmp(type, "RobertaProcessing") == 0 || strcmp(type, "BertProcessing") == 0) {
        json_t *cls = json_object_get(p, "cls"), *sep = json_object_get(p, "sep");
        if (pp_add(t, 1, json_array_get(cls, 1), "cls", err))
            return -1;
        return pp_add(t, 0, json_array_get(sep, 1), "sep", err);
    }
    return gl_errprintf(err, "post_processor %s is not supported by gridlm", type);
}

static void add_to_set(gl_tokenizer *t, added_set *s, int k)
{
    unsigned char b = (unsigned char)t->added[k].content[0];
    s->idx[b] = gl_realloc(s->idx[b], (size_t)(s->n[b] + 1) * sizeof(int));
    /* keep each bucket longest first: the first hit is the longest */
    int j = s->n[b]++;
    while (j > 0 && t->added[s->idx[b][j - 1]].len < t->added[k].len) {
        s->idx[b][j] = s->idx[b][j - 1];
        j--;
    }
    s->idx[b][j] = k;
}

/* The id Hugging Face `tokenizers` gives the next added token: the id of
 * its content in the model vocabulary, else the next id after the
 * vocabulary and the new added tokens before it, in the file's order
 * (tokenizers 0.23; t/tok-ids.t checks it).  It does not use the id
 * written in the file; gridlm refuses a file whose id differs, so that
 * the file, Hugging Face and gridlm all agree on every id. */
static long long hf_added_id(const gl_tokenizer *t, const char *c, size_t n, int32_t before,
                             long long *next_new)
{
    if (before >= 0)
        return t->added[before].id;  /* listed before: the same token */
    int32_t id = gl_strmap_get(&t->vocab, c, n);
    if (id >= 0)
        return id;
    return (*next_new)++;
}

/* One entry of added_tokens: checked, then added (or, for a content
 * listed before, its options replaced: the later entry wins, as in
 * Hugging Face).  An empty content is ignored, as there.  `seen` maps
 * each content to its index in t->added. */
static int add_added(gl_tokenizer *t, size_t i, json_t *v, gl_strmap *seen, long long *next_new,
                     gl_error *err)
{
    size_t n;
    const char *c = jstr(v, "content", &n);
    long long file_id = json_id(json_object_get(v, "id"));
    if (!c)
        return gl_errprintf(err, "added_tokens[%zu] has no \"content\" string", i);
    if (file_id < 0)
        return gl_errprintf(err, "added_tokens[%zu] \"%s\" has %s (ids are integers from 0)", i,
                            show(c, n).s, bad_id(json_object_get(v, "id")).s);
    if (n == 0)
        return 0;
    int32_t before = gl_strmap_get(seen, c, n);
    long long id = hf_added_id(t, c, n, before, next_new);
    if (file_id != id)
        return gl_errprintf(err, "added_tokens[%zu] \"%s\" has id %lld, but Hugging Face tokenizers"
                            " gives it id %lld (%s); fix the id in the file", i, show(c, n).s,
                            file_id, id, before >= 0 ? "it is listed twice"
                            : gl_strmap_get(&t->vocab, c, n) >= 0 ? "its id in the vocabulary"
                            : "added tokens not in the vocabulary are numbered on from it, in"
                              " the file's order");
    int special = jbool(v, "special", 0);
    added_tok a = {
        .content = dupn(c, n), .len = n, .id = (int32_t)id,
        .single_word = jbool(v, "single_word", 0), .lstrip = jbool(v, "lstrip", 0),
        .rstrip = jbool(v, "rstrip", 0), .normalized = jbool(v, "normalized", !special),
        .special = special,
    };
    if (before >= 0) {                  /* listed twice: replace */
        free(t->added[before].content);
        t->added[before] = a;
        return 0;
    }
    if (set_id_string(t, id, c, n, "added token", err)) {
        free(a.content);
        return -1;
    }
    t->added = gl_realloc(t->added, (size_t)(t->n_added + 1) * sizeof *t->added);
    gl_strmap_put(seen, c, n, t->n_added);
    t->added[t->n_added++] = a;
    gl_strmap_put(&t->added_map, c, n, a.id);
    return 0;
}

static int load_added(gl_tokenizer *t, json_t *arr, gl_error *err)
{
    if (arr && !json_is_null(arr) && !json_is_array(arr))
        return gl_errprintf(err, "added_tokens is not an array");
    long long next_new = t->n_model;
    gl_strmap seen;
    gl_strmap_init(&seen);
    size_t i;
    json_t *v;
    int rc = 0;
    json_array_foreach(arr, i, v)
        if ((rc = add_added(t, i, v, &seen, &next_new, err)) != 0)
            break;
    gl_strmap_free(&seen);
    if (rc != 0)
        return -1;
    /* Raw and normalized sets: Hugging Face's order, special tokens
     * first, then the others. */
    for (int pass = 0; pass < 2; pass++)
        for (int k = 0; k < t->n_added; k++) {
            const added_tok *a = &t->added[k];
            if (a->special != (pass == 0))
                continue;
            add_to_set(t, a->normalized ? &t->norm_set : &t->raw_set, k);
            if (a->single_word && !t->word_re &&
                !(t->word_re = compile_regex("[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}"
                                             "\\p{Join_Control}]", err, "single_word")))
                return -1;
        }
    return 0;
}

static gl_tokenizer *tok_new(void)
{
    gl_tokenizer *t = gl_calloc(1, sizeof *t);
    gl_strmap_init(&t->vocab);
    gl_strmap_init(&t->added_map);
    gl_u64map_init(&t->merges);
    t->unk_id = -1;
    t->eod = -1;
    for (int b = 0; b < 256; b++)
        t->byte_tok[b] = -1;
    for (int c = 0; c < 512; c++)
        t->u2b[c] = -1;
    for (unsigned b = 0; b < 256; b++)
        t->u2b[gl_bytelevel_char(b)] = (int)b;
    return t;
}

static int add_merge(gl_tokenizer *t, const char *a, size_t an, const char *b, size_t bn,
                     uint32_t rank, gl_error *err)
{
    int32_t ia = gl_strmap_get(&t->vocab, a, an), ib = gl_strmap_get(&t->vocab, b, bn);
    char *ab = gl_malloc(an + bn + 1);
    memcpy(ab, a, an);
    memcpy(ab + an, b, bn);
    int32_t iab = gl_strmap_get(&t->vocab, ab, an + bn);
    free(ab);
    if (ia < 0 || ib < 0 || iab < 0)
        return gl_errprintf(err, "merge %u (\"%.*s\" \"%.*s\") names a token missing from the"
                            " vocabulary", rank, (int)an, a, (int)bn, b);
    uint64_t key = (uint64_t)(uint32_t)ia << 32 | (uint32_t)ib, old;
    if (gl_u64map_get(&t->merges, key, &old))
        return 0; /* the first (lowest) rank of a repeated merge wins */
    gl_u64map_put(&t->merges, key, (uint64_t)rank << 32 | (uint32_t)iab);
    return 0;
}

/* Finish: byte-fallback ids, the eod. */
static void tok_finish(gl_tokenizer *t)
{
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        t->byte_tok[b] = gl_strmap_get(&t->vocab, name, 6);
    }
    if (t->eod < 0) {
        static const char *const eos_names[] = { "<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>" };
        for (size_t i = 0; i < sizeof eos_names / sizeof *eos_names && t->eod < 0; i++)
            t->eod = gl_tokenizer_token_to_id(t, eos_names[i], strlen(eos_names[i]));
    }
}

/* One vocabulary entry "token": id, from tokenizer.json or vocab.json. */
static int add_vocab(gl_tokenizer *t, const char *key, size_t klen, json_t *v, gl_error *err)
{
    long long id = json_id(v);
    if (id < 0) {
        gl_errprintf(err, "vocab entry \"%s\" has %s (ids are integers from 0)", show(key, klen).s,
                     bad_id(v).s);
        return -1;
    }
    if (set_id_string(t, id, key, klen, "vocab entry", err))
        return -1;
    gl_strmap_put(&t->vocab, key, klen, (int32_t)id);
    return 0;
}

static int load_model(gl_tokenizer *t, json_t *m, gl_error *err)
{
    const char *type = jstr(m, "type", NULL);
    if (type && strcmp(type, "BPE") != 0)
        return gl_errprintf(err, "model type %s is not supported by gridlm (BPE only)", type);
    json_t *vocab = json_object_get(m, "vocab"), *merges = json_object_get(m, "merges");
    if (!json_is_object(vocab) || !json_is_array(merges))
        return gl_errprintf(err, "model has no \"vocab\" object or no \"merges\" array (not a BPE"
                            " tokenizer.json)");
    t->n_model = (long)json_object_size(vocab);
    if (t->n_model == 0)
        return gl_errprintf(err, "the model vocabulary (model.vocab) is empty: every document would"
                            " encode to nothing; is this the tokenizer that was meant?");
    const char *key;
    json_t *v;
#ifdef json_object_keylen_foreach
    size_t klen;
    json_object_keylen_foreach(vocab, key, klen, v) {
#else
    json_object_foreach(vocab, key, v) {
        size_t klen = strlen(key);
#endif
        if (add_vocab(t, key, klen, v, err))
            return -1;
    }
    size_t i;
    json_array_foreach(merges, i, v) {
        int rc;
        if (json_is_string(v)) {
            const char *s = json_string_value(v);
            const char *sp = strchr(s, ' ');
            if (!sp)
                return gl_errprintf(err, "merge %zu \"%s\" is not two tokens separated by a space",
                                    i, s);
            rc = add_merge(t, s, (size_t)(sp - s), sp + 1, strlen(sp + 1), (uint32_t)i, err);
        } else if (json_is_array(v) && json_array_size(v) == 2) {
            json_t *a = json_array_get(v, 0), *b = json_array_get(v, 1);
            if (!json_is_string(a) || !json_is_string(b))
                return gl_errprintf(err, "merge %zu is not a pair of strings", i);
            rc = add_merge(t, json_string_value(a), json_string_length(a), json_string_value(b),
                           json_string_length(b), (uint32_t)i, err);
        } else {
            return gl_errprintf(err, "merge %zu is neither \"a b\" nor [\"a\", \"b\"]", i);
        }
        if (rc != 0)
            return -1;
    }
    json_t *dropout = json_object_get(m, "dropout");
    if (json_is_number(dropout) && json_number_value(dropout) > 0)
        return gl_errprintf(err, "BPE dropout %g is not supported (it makes encoding random)",
                            json_number_value(dropout));
    t->ignore_merges = jbool(m, "ignore_merges", 0);
    t->byte_fallback = jbool(m, "byte_fallback", 0);
    t->fuse_unk = jbool(m, "fuse_unk", 0);
    size_t n;
    const char *s;
    if ((s = jstr(m, "unk_token", &n))) {
        t->unk_id = gl_strmap_get(&t->vocab, s, n);
        if (t->unk_id < 0)
            return gl_errprintf(err, "unk_token \"%s\" is not in the vocabulary", s);
    }
    if ((s = jstr(m, "continuing_subword_prefix", &n)) && n)
        t->cont_prefix = dupn(s, n);
    if ((s = jstr(m, "end_of_word_suffix", &n)) && n)
        t->eow_suffix = dupn(s, n);
    return 0;
}

/* tokenizer_config.json beside tokenizer.json: eos_token names the eod.
 * The file is optional, but one that is there must be right: one that
 * cannot be read or parsed, or that names a token the tokenizer lacks,
 * is an error, because ignoring it would end every document with some
 * other token (or none). */
static int load_config_eos(gl_tokenizer *t, const char *dir, gl_error *err)
{
    char path[4096];
    struct stat st;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    if (lstat(path, &st) != 0 && errno == ENOENT)
        return 0;
    gl_error je;
    json_t *c = gl_json_load(path, 0, &je);
    if (!c)
        return gl_errprintf(err, "%s; fix the file, or remove it (it names the end-of-document"
                            " token)", je.text);
    json_t *eos = json_object_get(c, "eos_token");
    const char *s = json_is_string(eos) ? json_string_value(eos) : jstr(eos, "content", NULL);
    int rc = 0;
    if (!json_is_object(c))
        rc = gl_errprintf(err, "%s: not a JSON object", path);
    else if (eos && !json_is_null(eos) && !s)
        rc = gl_errprintf(err, "%s: eos_token is neither a string nor an object with a"
                          " \"content\" string", path);
    else if (s && (t->eod = gl_tokenizer_token_to_id(t, s, strlen(s))) < 0)
        rc = gl_errprintf(err, "%s: eos_token \"%s\" is not a token of the tokenizer; name one of"
                          " its tokens (or remove eos_token)", path, show(s, strlen(s)).s);
    json_decref(c);
    return rc;
}

gl_tokenizer *gl_tokenizer_load(const char *path, gl_error *err)
{
    char file[4096], dir[4096];
    struct stat st;
    if (stat(path, &st) != 0) {
        gl_errprintf(err, "%s: %s", path, strerror(errno));
        return NULL;
    }
    if (S_ISDIR(st.st_mode)) {
        snprintf(dir, sizeof dir, "%s", path);
        snprintf(file, sizeof file, "%s/tokenizer.json", path);
    } else {
        snprintf(file, sizeof file, "%s", path);
        snprintf(dir, sizeof dir, "%s", path);
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = '\0';
        else
            strcpy(dir, ".");
    }
    gl_error je;
    json_t *root = gl_json_load(file, JSON_ALLOW_NUL, &je);
    if (!root) {
        gl_errprintf(err, "%s", je.text);
        return NULL;
    }
    gl_tokenizer *t = tok_new();
    gl_error why;       /* what is wrong inside the file */
    json_t *model = json_object_get(root, "model"), *added = json_object_get(root, "added_tokens");
    int rc = !json_is_object(model) ? gl_errprintf(&why, "no \"model\" object")
             : reserve_ids(t, json_object_size(json_object_get(model, "vocab")) +
                              json_array_size(added), &why);
    if (rc == 0)
        rc = load_model(t, model, &why);
    if (rc == 0)
        rc = load_added(t, added, &why);
    if (rc == 0)
        rc = load_normalizer(t, json_object_get(root, "normalizer"), &why);
    if (rc == 0)
        rc = load_pretokenizer(t, json_object_get(root, "pre_tokenizer"), &why);
    if (rc == 0)
        rc = load_post(t, json_object_get(root, "post_processor"), &why);
    if (rc == 0)
        rc = load_decoder(t, json_object_get(root, "decoder"), &why);
    json_decref(root);
    if (rc != 0) {
        gl_errprintf(err, "%s: " WHY_FMT, file, why.text);
        gl_tokenizer_free(t);
        return NULL;
    }
    if (load_config_eos(t, dir, err) != 0) {
        gl_tokenizer_free(t);
        return NULL;
    }
    tok_finish(t);
    return t;
}

gl_tokenizer *gl_tokenizer_load_gpt2(const char *vocab_file, const char *merge_file,
                                     gl_error *err)
{
    gl_error je;
    json_t *vocab = gl_json_load(vocab_file, 0, &je);
    if (!vocab || !json_is_object(vocab)) {
        if (vocab)
            gl_errprintf(err, "%s: not a JSON object (GPT-2's vocab.json maps tokens to ids)",
                         vocab_file);
        else
            gl_errprintf(err, "%s", je.text);
        json_decref(vocab);
        return NULL;
    }
    FILE *f = gl_file_fopen_read(merge_file, &je);
    if (!f) {
        gl_errprintf(err, "%s", je.text);
        json_decref(vocab);
        return NULL;
    }
    gl_tokenizer *t = tok_new();
    gl_error why;       /* what is wrong inside the file */
    const char *key;
    json_t *v;
    t->n_model = (long)json_object_size(vocab);
    int rc = t->n_model == 0
             ? gl_errprintf(&why, "the vocabulary is empty: every document would encode to nothing")
             : reserve_ids(t, json_object_size(vocab), &why);
    if (rc != 0) {
        gl_errprintf(err, "%s: " WHY_FMT, vocab_file, why.text);
        json_decref(vocab);
        fclose(f);
        gl_tokenizer_free(t);
        return NULL;
    }
    json_object_foreach(vocab, key, v) {
        if (add_vocab(t, key, strlen(key), v, &why)) {
            /* before the decref frees the key */
            gl_errprintf(err, "%s: " WHY_FMT, vocab_file, why.text);
            json_decref(vocab);
            fclose(f);
            gl_tokenizer_free(t);
            return NULL;
        }
    }
    json_decref(vocab);
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    uint32_t rank = 0;
    while (rc == 0 && (n = getline(&line, &cap, f)) > 0) {
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = '\0';
        if (n == 0 || (rank == 0 && strncmp(line, "#version", 8) == 0))
            continue;
        char *sp = strchr(line, ' ');
        if (!sp)
            rc = gl_errprintf(&why, "merge line \"%s\" is not two tokens separated by a space",
                              line);
        else
            rc = add_merge(t, line, (size_t)(sp - line), sp + 1, strlen(sp + 1), rank++, &why);
    }
    free(line);
    fclose(f);
    if (rc != 0) {
        gl_errprintf(err, "%s: " WHY_FMT, merge_file, why.text);
        gl_tokenizer_free(t);
        return NULL;
    }
    pretok p = { .kind = PT_BYTELEVEL, .add_prefix_space = 0, .use_regex = 1 };
    p.re = compile_regex(GL_GPT2_REGEX, err, "ByteLevel");
    t->pts = gl_malloc(sizeof *t->pts);
    t->pts[t->n_pts++] = p;
    t->decs = gl_malloc(sizeof *t->decs);
    t->decs[t->n_decs++] = (dec_step){ .kind = DEC_BYTELEVEL };
    t->byte_level = 1;
    /* GPT-2's <|endoftext|> is an ordinary vocabulary entry that must
     * still be matched whole in text, as Megatron's tokenizer does. */
    int32_t eot = gl_strmap_get(&t->vocab, "<|endoftext|>", 13);
    if (eot >= 0) {
        added_tok a = { .content = dupn("<|endoftext|>", 13), .len = 13, .id = eot, .special = 1 };
        t->added = gl_malloc(sizeof *t->added);
        t->added[t->n_added] = a;
        add_to_set(t, &t->raw_set, t->n_added++);
        gl_strmap_put(&t->added_map, a.content, a.len, eot);
    }
    tok_finish(t);
    return t;
}

gl_tokenizer *gl_tokenizer_open(const char *type, const char *model)
{
    gl_error err;
    gl_tokenizer *t = NULL;
    if (!type || !*type)
        type = "HuggingFaceTokenizer";
    if (strcmp(type, "HuggingFaceTokenizer") == 0) {
        if (!model || !*model)
            gl_die_code(2, "--tokenizer-type HuggingFaceTokenizer needs --tokenizer-model PATH"
                        " (a tokenizer.json or a directory holding one)");
        t = gl_tokenizer_load(model, &err);
    } else if (strcmp(type, "GPT2BPETokenizer") == 0) {
        char vocab[4096], merges[4096];
        const char *colon = model ? strchr(model, ':') : NULL;
        struct stat st;
        if (!model || !*model)
            gl_die_code(2, "--tokenizer-type GPT2BPETokenizer needs --tokenizer-model DIR (holding"
                        " vocab.json and merges.txt) or VOCAB.json:MERGES.txt");
        if (colon) {
            snprintf(vocab, sizeof vocab, "%.*s", (int)(colon - model), model);
            snprintf(merges, sizeof merges, "%s", colon + 1);
        } else if (stat(model, &st) == 0 && S_ISDIR(st.st_mode)) {
            snprintf(vocab, sizeof vocab, "%s/vocab.json", model);
            snprintf(merges, sizeof merges, "%s/merges.txt", model);
        } else
            gl_die_code(2, "--tokenizer-model %s: GPT2BPETokenizer wants a directory with"
                        " vocab.json and merges.txt, or VOCAB.json:MERGES.txt", model);
        t = gl_tokenizer_load_gpt2(vocab, merges, &err);
    } else
        gl_die_code(2, "--tokenizer-type %s is not supported: use HuggingFaceTokenizer"
                    " (with --tokenizer-model PATH) or GPT2BPETokenizer", type);
    if (!t)   /* a usage error: the file the flag names */
        gl_die_code(2, "--tokenizer-model: %s", err.text);
    return t;
}

void gl_tokenizer_free(gl_tokenizer *t)
{
    if (!t)
        return;
    gl_strmap_free(&t->vocab);
    gl_strmap_free(&t->added_map);
    gl_u64map_free(&t->merges);
    for (long i = 0; i < t->n_ids; i++)
        free(t->id_str[i]);
    free(t->id_str);
    free(t->id_len);
    free(t->cont_prefix);
    free(t->eow_suffix);
    for (int i = 0; i < t->n_norms; i++) {
        free(t->norms[i].a);
        free(t->norms[i].b);
        pcre2_code_free(t->norms[i].re);
    }
    free(t->norms);
    for (int i = 0; i < t->n_pts; i++) {
        pcre2_code_free(t->pts[i].re);
        free(t->pts[i].lit);
    }
    free(t->pts);
    for (int i = 0; i < t->n_decs; i++) {
        free(t->decs[i].a);
        free(t->decs[i].b);
    }
    free(t->decs);
    for (int i = 0; i < t->n_added; i++)
        free(t->added[i].content);
    free(t->added);
    for (int b = 0; b < 256; b++) {
        free(t->raw_set.idx[b]);
        free(t->norm_set.idx[b]);
    }
    free(t->pp_pre);
    free(t->pp_post);
    pcre2_code_free(t->word_re);
    free(t);
}

gl_tokenizer *gl_tokenizer_bytelevel_skeleton(const char *specials)
{
    gl_tokenizer *t = tok_new();
    pretok p = { .kind = PT_BYTELEVEL, .add_prefix_space = 0, .use_regex = 1 };
    p.re = compile_regex(GL_GPT2_REGEX, NULL, "ByteLevel");
    t->pts = gl_malloc(sizeof *t->pts);
    t->pts[t->n_pts++] = p;
    t->byte_level = 1;
    char *list = gl_strdup(specials ? specials : ""), *save = NULL;
    int32_t id = 0;
    for (char *s = strtok_r(list, ",", &save); s; s = strtok_r(NULL, ",", &save)) {
        size_t n = strlen(s);
        added_tok a = { .content = dupn(s, n), .len = n, .id = id++, .special = 1 };
        t->added = gl_realloc(t->added, (size_t)(t->n_added + 1) * sizeof *t->added);
        t->added[t->n_added] = a;
        add_to_set(t, &t->raw_set, t->n_added++);
        gl_strmap_put(&t->added_map, a.content, n, a.id);
    }
    free(list);
    return t;
}

long gl_tokenizer_vocab_size(const gl_tokenizer *t) { return t->vocab_size; }
int32_t gl_tokenizer_eod(const gl_tokenizer *t) { return t->eod; }
int gl_tokenizer_byte_level(const gl_tokenizer *t) { return t->byte_level; }

int32_t gl_tokenizer_token_to_id(const gl_tokenizer *t, const char *s, size_t n)
{
    int32_t id = gl_strmap_get(&t->added_map, s, n);
    return id >= 0 ? id : gl_strmap_get(&t->vocab, s, n);
}

const char *gl_tokenizer_id_to_token(const gl_tokenizer *t, int32_t id, size_t *len)
{
    if (id < 0 || id >= t->n_ids || !t->id_str[id])
        return NULL;
    if (len)
        *len = t->id_len[id];
    return t->id_str[id];
}
