/* tok-load: tokenizer files are checked before they are trusted.
 * Every id must be a JSON integer from 0 that fits 32 bits (4294967296
 * no longer wraps to 0), and below the number of tokens the files hold
 * (2^31 no longer crashes, 2^31-1 no longer allocates 24 GB); no id may
 * name two tokens; an added token's id must be the one Hugging Face
 * tokenizers gives it (its vocabulary id, or the next one after the
 * vocabulary, in the file's order); a token listed twice in added_tokens
 * is one token whose later entry's options win (as in Hugging Face); an
 * empty vocabulary is refused; post-processor ids must name tokens; a
 * tokenizer_config.json that is there must parse (the error names line
 * and column) and its eos_token must be a token.  GPT-2's vocab.json is
 * held to the same rules.  gl_tokenizer_open() stops with a message
 * (exit 2, a usage error, not a crash) on such a file. */
#include <config.h>
#include "data/tokenizer.h"
#include "base/log.h"
#include "child.h"
#include "tap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *DIR_ = "t/tok-load.dir";

/* The vocabulary a b ab Ġ (ids 0-3) with the merge "a b", ByteLevel
 * without prefix space; then ADDED (the added_tokens array's
 * members), EXTRA (more members of the top object, after a comma). */
static void write_tok(const char *vocab, const char *added, const char *extra)
{
    char path[512];
    snprintf(path, sizeof path, "%s/tokenizer.json", DIR_);
    FILE *f = fopen(path, "w");
    if (!f)
        bail_out("cannot write %s", path);
    fprintf(f, "{\"version\": \"1.0\", \"added_tokens\": [%s],\n"
            " \"normalizer\": null,\n"
            " \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false,"
            " \"trim_offsets\": true, \"use_regex\": true},\n"
            " \"decoder\": {\"type\": \"ByteLevel\"},\n"
            " \"model\": {\"type\": \"BPE\", \"vocab\": {%s}, \"merges\": [\"a b\"]}%s%s}\n",
            added, vocab, extra ? ",\n" : "", extra ? extra : "");
    fclose(f);
}

static const char *V = "\"a\": 0, \"b\": 1, \"ab\": 2, \"\xc4\xa0\": 3";

static char *tok_entry(long long id, const char *content, int lstrip)
{
    static char s[8][256];
    static int k;
    k = (k + 1) % 8;
    snprintf(s[k], sizeof s[k], "{\"id\": %lld, \"content\": \"%s\", \"single_word\": false,"
             " \"lstrip\": %s, \"rstrip\": false, \"normalized\": false, \"special\": true}",
             id, content, lstrip ? "true" : "false");
    return s[k];
}

static void write_config(const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", DIR_);
    if (!text) {
        unlink(path);
        return;
    }
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0)
        bail_out("cannot write %s", path);
}

/* Loading must fail with every pattern in the message. */
static void refused(const char *what, const char *p1, const char *p2)
{
    gl_error err = { "" };
    gl_tokenizer *t = gl_tokenizer_load(DIR_, &err);
    int good = !t && strstr(err.text, "tokenizer") && strstr(err.text, p1) &&
               (!p2 || strstr(err.text, p2));
    ok(good, "%s: refused", what);
    if (!good)
        diag("%s", t ? "loaded" : err.text);
    gl_tokenizer_free(t);
}

static gl_tokenizer *loads(const char *what)
{
    gl_error err = { "" };
    gl_tokenizer *t = gl_tokenizer_load(DIR_, &err);
    ok(t != NULL, "%s: loads", what);
    if (!t)
        diag("%s", err.text);
    return t;
}

/* The ids of text, as one string "0 3 4". */
static const char *encode(const gl_tokenizer *t, const char *text)
{
    static char out[256];
    gl_tok_encoder *e = gl_tok_encoder_new(t);
    const int32_t *ids;
    size_t n = gl_tok_encode(e, text, strlen(text), 0, &ids);
    size_t k = 0;
    out[0] = '\0';
    for (size_t i = 0; i < n && k + 16 < sizeof out; i++)
        k += (size_t)snprintf(out + k, sizeof out - k, i ? " %d" : "%d", ids[i]);
    gl_tok_encoder_free(e);
    return out;
}

static void test_ids(void)
{
    char v[256], a[600];
    write_tok(V, tok_entry(4, "<x>", 0), NULL);
    gl_tokenizer *t = loads("vocabulary 0-3, added token 4");
    if (t) {
        is_int(gl_tokenizer_vocab_size(t), 5, "... 5 ids");
        is_string(encode(t, "ab <x>"), "2 3 4", "... encodes as Hugging Face does");
    }
    gl_tokenizer_free(t);

    write_tok(V, tok_entry(4294967296LL, "<x>", 0), NULL);
    refused("an added id of 2^32 (wrapped to 0 before)", "does not fit 32 bits", "4294967296");
    write_tok(V, tok_entry(2147483648LL, "<x>", 0), NULL);
    refused("an added id of 2^31 (crashed before)", "2147483648", "gives it id 4");
    write_tok(V, tok_entry(-1, "<x>", 0), NULL);
    refused("a negative added id", "negative", NULL);
    write_tok(V, tok_entry(7, "<x>", 0), NULL);
    refused("an added id after a gap", "has id 7", "gives it id 4");
    write_tok(V, tok_entry(1, "<x>", 0), NULL);
    refused("an added id that is a vocabulary token's", "has id 1", "gives it id 4");

    snprintf(v, sizeof v, "%s, \"c\": 2147483647", V);
    write_tok(v, "", NULL);
    refused("a vocabulary id of 2^31-1 (24 GB before)", "2147483647", "ids run from 0 to 4");
    snprintf(v, sizeof v, "%s, \"c\": 2147483648", V);
    write_tok(v, "", NULL);
    refused("a vocabulary id of 2^31", "2147483648", NULL);
    snprintf(v, sizeof v, "%s, \"c\": 1.0", V);
    write_tok(v, "", NULL);
    refused("a vocabulary id that is not an integer", "\"c\" has an id that is not an integer", NULL);
    snprintf(v, sizeof v, "%s, \"c\": 1", V);
    write_tok(v, "", NULL);
    refused("two vocabulary tokens with one id", "id 1 is given to both \"b\" and \"c\"", NULL);
    write_tok("", "", NULL);
    refused("an empty vocabulary", "vocabulary (model.vocab) is empty", NULL);

    snprintf(a, sizeof a, "%s, %s", tok_entry(4, "<x>", 0), tok_entry(4, "<y>", 0));
    write_tok(V, a, NULL);
    refused("two added tokens with one id", "\"<y>\" has id 4", "gives it id 5");
    snprintf(a, sizeof a, "%s, %s", tok_entry(4, "<x>", 0), tok_entry(5, "<x>", 0));
    write_tok(V, a, NULL);
    refused("one added token listed twice with two ids", "listed twice", "gives it id 4");
    write_tok(V, tok_entry(2, "ab", 0), NULL);
    t = loads("an added token that is in the vocabulary, with its id");
    if (t)
        is_int(gl_tokenizer_vocab_size(t), 4, "... adds no id");
    gl_tokenizer_free(t);
    write_tok(V, tok_entry(9, "ab", 0), NULL);
    refused("an added token in the vocabulary with another id", "its id in the vocabulary", NULL);
}

/* Listed twice with the same id: one token, the later entry's options
 * win (lstrip here takes the space before <x>). */
static void test_twice(void)
{
    char a[600];
    snprintf(a, sizeof a, "%s, %s", tok_entry(4, "<x>", 0), tok_entry(4, "<x>", 1));
    write_tok(V, a, NULL);
    gl_tokenizer *t = loads("an added token listed twice, the second with lstrip");
    if (t) {
        is_int(gl_tokenizer_vocab_size(t), 5, "... is one token");
        is_string(encode(t, "a <x>"), "0 4", "... with the later entry's lstrip");
    }
    gl_tokenizer_free(t);
    snprintf(a, sizeof a, "%s, %s", tok_entry(4, "<x>", 1), tok_entry(4, "<x>", 0));
    write_tok(V, a, NULL);
    t = loads("an added token listed twice, the first with lstrip");
    if (t)
        is_string(encode(t, "a <x>"), "0 3 4", "... without it");
    gl_tokenizer_free(t);
}

static void test_post(void)
{
    const char *tp = "\"post_processor\": {\"type\": \"TemplateProcessing\", \"single\":"
                     " [{\"SpecialToken\": {\"id\": \"<x>\", \"type_id\": 0}},"
                     " {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}], \"pair\": [],"
                     " \"special_tokens\": {\"<x>\": {\"id\": \"<x>\", \"ids\": [%s],"
                     " \"tokens\": [\"<x>\"]}}}";
    char extra[600];
    snprintf(extra, sizeof extra, tp, "99");
    write_tok(V, tok_entry(4, "<x>", 0), extra);
    refused("a post-processor id beyond the tokens", "the id 99 of <x> names no token", NULL);
    snprintf(extra, sizeof extra, tp, "4");
    write_tok(V, tok_entry(4, "<x>", 0), extra);
    gl_tokenizer *t = loads("a post-processor id that names a token");
    gl_tokenizer_free(t);
}

static void test_config(void)
{
    write_tok(V, tok_entry(4, "<x>", 0), NULL);
    write_config("{\n  \"eos_token\": \"<x>\",\n}\n");
    refused("a tokenizer_config.json that does not parse",
            "tokenizer_config.json is not valid JSON", "at line 3, column");
    write_config("{\"eos_token\": \"<nope>\"}");
    refused("an eos_token that is not a token", "eos_token \"<nope>\" is not a token", NULL);
    write_config("{\"eos_token\": 4}");
    refused("an eos_token that is a number", "eos_token is neither a string", NULL);
    write_config("[\"eos_token\"]");
    refused("a tokenizer_config.json that is not an object", "not a JSON object", NULL);
    write_config("{\"eos_token\": {\"content\": \"ab\"}}");
    gl_tokenizer *t = loads("an eos_token that names a token");
    if (t)
        is_int(gl_tokenizer_eod(t), 2, "... is the end-of-document token");
    gl_tokenizer_free(t);
    write_config(NULL);
    t = loads("no tokenizer_config.json");
    if (t)
        is_int(gl_tokenizer_eod(t), -1, "... no end-of-document token");
    gl_tokenizer_free(t);
}

static void test_gpt2(void)
{
    char vpath[512], mpath[512];
    gl_error err;
    snprintf(vpath, sizeof vpath, "%s/vocab.json", DIR_);
    snprintf(mpath, sizeof mpath, "%s/merges.txt", DIR_);
    FILE *f = fopen(mpath, "w");
    fputs("#version: 0.2\n", f);
    fclose(f);
    static const struct { const char *vocab, *what, *pat; } cases[] = {
        { "{}", "an empty vocab.json", "vocabulary is empty" },
        { "{\"a\": 0, \"b\": 0}", "two tokens with one id in vocab.json", "is given to both" },
        { "{\"a\": 0, \"b\": 2147483648}", "an id of 2^31 in vocab.json", "ids run from 0 to 1" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        f = fopen(vpath, "w");
        fputs(cases[i].vocab, f);
        fclose(f);
        gl_tokenizer *t = gl_tokenizer_load_gpt2(vpath, mpath, &err);
        ok(!t && strstr(err.text, "vocab.json") && strstr(err.text, cases[i].pat), "%s: refused",
           cases[i].what);
        if (t)
            gl_tokenizer_free(t);
        else if (!strstr(err.text, cases[i].pat))
            diag("%s", err.text);
    }
}

static void open_it(void *arg)
{
    (void)arg;
    gl_log_set_program("tok-load");
    gl_tokenizer_free(gl_tokenizer_open("HuggingFaceTokenizer", DIR_));
}

/* What gridlm-prep and gridlm-train call: a message and exit 2 (the
 * flag names a bad file: tokenizer.h), where the id 2^31 crashed them
 * with SIGSEGV before. */
static void test_open(void)
{
    char err[4096];
    write_tok(V, tok_entry(2147483648LL, "<x>", 0), NULL);
    int rc = run_in_child(open_it, NULL, err, sizeof err);
    ok(rc == 2 && strstr(err, "tok-load: error: --tokenizer-model") && strstr(err, "2147483648"),
       "gl_tokenizer_open stops with a message, exit 2");
    if (rc != 1)
        diag("exit %d: %s", rc, err);
}

int main(void)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", DIR_, DIR_);
    if (system(cmd) != 0)
        bail_out("cannot make %s", DIR_);
    plan(NO_PLAN);
    test_ids();
    test_twice();
    test_post();
    test_config();
    test_gpt2();
    test_open();
    if (!tap_failed()) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", DIR_);
        if (system(cmd) != 0)
            diag("cannot remove %s", DIR_);
    }
    return done_testing();
}
