/* prep.c: corpus -> Megatron indexed datasets, inspect, merge (prep.h). */
#include <config.h>
#include "data/prep.h"
#include "data/indexed.h"
#include "data/lines.h"
#include "data/tokenizer.h"
#include "data/utf8.h"
#include "base/log.h"

#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* A batch: a run of input lines, and once a worker is done with it, the
 * tokens of each line for each key.                                   */

#define BATCH_BYTES (1 << 20)
#define BATCH_LINES 4096

enum { LINE_DOC = 0, LINE_BLANK, LINE_BAD };

typedef struct {
    /* input */
    char *text; size_t tlen, tcap;
    size_t *off, *len; int n; int lcap;
    long first_line;
    /* output */
    unsigned char *status;          /* per line */
    char **why;                     /* per bad line: the parser's message */
    int32_t *tok; size_t ntok, tokcap;  /* all tokens, line-major then key */
    int64_t *count;                 /* per line x key: tokens */
    int repaired;                   /* lines whose UTF-8 was repaired */
    /* queue state */
    int state;                      /* 0 free, 1 ready, 2 taken, 3 done */
} batch;

typedef struct {
    const gl_prep_opts *o;
    const gl_tokenizer *tok;
    int32_t eod;
    batch *q; int qn;
    long next_take, submitted;      /* batch sequence numbers */
    int stop;
    pthread_mutex_t mu;
    pthread_cond_t work, done;
} pipeline;

static void batch_reset(batch *b, long first_line)
{
    b->tlen = 0;
    b->n = 0;
    b->first_line = first_line;
    b->ntok = 0;
    b->repaired = 0;
}

static void batch_add_line(batch *b, const char *s, size_t n)
{
    if (b->tlen + n + 1 > b->tcap) {
        b->tcap = (b->tlen + n + 1) * 2;
        b->text = gl_realloc(b->text, b->tcap);
    }
    if (b->n == b->lcap) {
        b->lcap = b->lcap ? 2 * b->lcap : 256;
        b->off = gl_realloc(b->off, (size_t)b->lcap * sizeof *b->off);
        b->len = gl_realloc(b->len, (size_t)b->lcap * sizeof *b->len);
    }
    memcpy(b->text + b->tlen, s, n);
    b->off[b->n] = b->tlen;
    b->len[b->n] = n;
    b->tlen += n;
    b->text[b->tlen++] = '\0';
    b->n++;
}

static void batch_push_tokens(batch *b, const int32_t *ids, size_t n)
{
    if (b->ntok + n > b->tokcap) {
        b->tokcap = (b->ntok + n) * 2 + 1024;
        b->tok = gl_realloc(b->tok, b->tokcap * sizeof *b->tok);
    }
    memcpy(b->tok + b->ntok, ids, n * sizeof *ids);
    b->ntok += n;
}

/* Parse and tokenize every line of a batch. */
static void process_batch(pipeline *p, gl_tok_encoder *enc, batch *b, char **rep, size_t *repcap)
{
    const gl_prep_opts *o = p->o;
    b->status = gl_realloc(b->status, (size_t)(b->n ? b->n : 1));
    b->why = gl_realloc(b->why, (size_t)(b->n ? b->n : 1) * sizeof *b->why);
    b->count = gl_realloc(b->count, (size_t)(b->n ? b->n : 1) * (size_t)o->n_keys * sizeof *b->count);
    for (int i = 0; i < b->n; i++) {
        const char *s = b->text + b->off[i];
        size_t n = b->len[i];
        b->why[i] = NULL;
        for (int k = 0; k < o->n_keys; k++)
            b->count[(size_t)i * (size_t)o->n_keys + (size_t)k] = 0;
        size_t j = 0;
        while (j < n && (s[j] == ' ' || s[j] == '\t' || s[j] == '\r'))
            j++;
        if (j == n) {
            b->status[i] = LINE_BLANK;
            continue;
        }
        if (!gl_utf8_valid(s, n)) {
            n = gl_utf8_repair(s, n, rep, repcap);
            s = *rep;
            b->repaired++;
        }
        json_error_t je;
        json_t *doc = json_loadb(s, n, JSON_ALLOW_NUL, &je);
        char msg[300];
        msg[0] = '\0';
        if (!doc)
            snprintf(msg, sizeof msg, "malformed JSON at column %d: %s", je.column, je.text);
        else if (!json_is_object(doc))
            snprintf(msg, sizeof msg, "not a JSON object");
        else
            for (int k = 0; k < o->n_keys && !msg[0]; k++) {
                json_t *v = json_object_get(doc, o->json_keys[k]);
                if (!v)
                    snprintf(msg, sizeof msg, "no key \"%s\" (see --json-keys)", o->json_keys[k]);
                else if (!json_is_string(v))
                    snprintf(msg, sizeof msg, "the value of \"%s\" is not a string", o->json_keys[k]);
            }
        if (msg[0]) {
            b->status[i] = LINE_BAD;
            b->why[i] = gl_strdup(msg);
            json_decref(doc);
            continue;
        }
        b->status[i] = LINE_DOC;
        for (int k = 0; k < o->n_keys; k++) {
            json_t *v = json_object_get(doc, o->json_keys[k]);
            const int32_t *ids;
            size_t nt = gl_tok_encode(enc, json_string_value(v), json_string_length(v), 1, &ids);
            batch_push_tokens(b, ids, nt);
            /* Megatron appends the eod only to a non-empty document. */
            if (o->append_eod && nt > 0) {
                batch_push_tokens(b, &p->eod, 1);
                nt++;
            }
            b->count[(size_t)i * (size_t)o->n_keys + (size_t)k] = (int64_t)nt;
        }
        json_decref(doc);
    }
}

static void *worker_main(void *arg)
{
    pipeline *p = arg;
    gl_tok_encoder *enc = gl_tok_encoder_new(p->tok);
    char *rep = NULL;
    size_t repcap = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->next_take == p->submitted)
            pthread_cond_wait(&p->work, &p->mu);
        if (p->next_take == p->submitted && p->stop)
            break;
        batch *b = &p->q[p->next_take % p->qn];
        p->next_take++;
        b->state = 2;
        pthread_mutex_unlock(&p->mu);
        process_batch(p, enc, b, &rep, &repcap);
        pthread_mutex_lock(&p->mu);
        b->state = 3;
        pthread_cond_broadcast(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    free(rep);
    gl_tok_encoder_free(enc);
    return NULL;
}

static void output_path(char *buf, size_t n, const char *prefix, const char *key)
{
    snprintf(buf, n, "%s_%s_document", prefix, key);
}

/* The input broke off or is damaged: whatever was tokenized is thrown
 * away, so that no dataset made of part of a corpus carries a final name.
 * (The workers still running are stopped by the exit.) */
GL_NORETURN static void input_broken(const gl_prep_opts *o, gl_idx_writer **w, const gl_error *err)
{
    for (int k = 0; k < o->n_keys; k++)
        gl_idx_writer_abandon(w[k]);
    gl_die("--input %s (nothing was written)", err->text);
}

void gl_prep_run(const gl_prep_opts *o)
{
    if (o->n_keys < 1)
        gl_die_code(2, "--json-keys: give at least one key");
    gl_tokenizer *tok = gl_tokenizer_open(o->tokenizer_type, o->tokenizer_model);
    int32_t eod = gl_tokenizer_eod(tok);
    if (o->append_eod && eod < 0)
        gl_die_code(2, "--append-eod: the tokenizer %s has no end-of-document token (no eos_token"
                    " in tokenizer_config.json and none of <|endoftext|>, <|end_of_text|>, </s>)",
                    o->tokenizer_model);
    long vocab = gl_tokenizer_vocab_size(tok);
    int dtype = gl_idx_dtype_for_vocab(vocab);
    int workers = o->workers > 0 ? o->workers : 1;

    gl_lines *in = gl_lines_open(o->input);
    gl_idx_writer *w[GL_PREP_MAX_KEYS];
    char path[4096];
    for (int k = 0; k < o->n_keys; k++) {
        output_path(path, sizeof path, o->output_prefix, o->json_keys[k]);
        w[k] = gl_idx_writer_open(path, dtype);
    }

    pipeline p = { .o = o, .tok = tok, .eod = eod, .qn = 2 * workers + 2 };
    p.q = gl_calloc((size_t)p.qn, sizeof *p.q);
    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.work, NULL);
    pthread_cond_init(&p.done, NULL);
    pthread_t *th = gl_malloc((size_t)workers * sizeof *th);
    for (int i = 0; i < workers; i++)
        if (pthread_create(&th[i], NULL, worker_main, &p) != 0)
            gl_die("cannot start worker thread %d of %d", i + 1, workers);

    gl_error ierr;
    long written = 0, docs = 0, blank = 0, bad = 0, repaired = 0;
    uint64_t done_bytes = 0;        /* input bytes of the batches written */
    int eof = 0;
    double t0 = gl_now(), last_log = t0;
    long next_log = o->log_interval > 0 ? o->log_interval : 10000;
    for (;;) {
        /* Fill free slots with input. */
        pthread_mutex_lock(&p.mu);
        while (!eof && p.submitted - written < p.qn) {
            batch *b = &p.q[p.submitted % p.qn];
            pthread_mutex_unlock(&p.mu);
            batch_reset(b, gl_lines_number(in) + 1);
            const char *line;
            size_t len;
            while (b->n < BATCH_LINES && b->tlen < BATCH_BYTES) {
                int got = gl_lines_next(in, &line, &len, &ierr);
                if (got < 0)
                    input_broken(o, w, &ierr);
                if (got == 0) {
                    eof = 1;
                    break;
                }
                batch_add_line(b, line, len);
            }
            pthread_mutex_lock(&p.mu);
            if (b->n == 0)
                break;
            b->state = 1;
            p.submitted++;
            pthread_cond_signal(&p.work);
        }
        if (written == p.submitted) {
            pthread_mutex_unlock(&p.mu);
            break;
        }
        /* Write the oldest batch, in input order, once done. */
        batch *b = &p.q[written % p.qn];
        while (b->state != 3)
            pthread_cond_wait(&p.done, &p.mu);
        pthread_mutex_unlock(&p.mu);
        size_t at = 0;
        repaired += b->repaired;
        done_bytes += b->tlen;          /* each line's NUL stands for its newline */
        for (int i = 0; i < b->n; i++) {
            if (b->status[i] == LINE_BLANK) {
                blank++;
                continue;
            }
            if (b->status[i] == LINE_BAD) {
                bad++;
                if (!o->skip_bad_lines) {
                    for (int k = 0; k < o->n_keys; k++)
                        gl_idx_writer_abandon(w[k]);
                    gl_die("%s:%ld: %s; fix the line or pass --skip-bad-lines (nothing was written)",
                           o->input, b->first_line + i, b->why[i]);
                }
                if (bad <= 10)
                    gl_warn("%s:%ld: %s; line skipped", o->input, b->first_line + i, b->why[i]);
                free(b->why[i]);
                continue;
            }
            for (int k = 0; k < o->n_keys; k++) {
                int64_t nt = b->count[(size_t)i * (size_t)o->n_keys + (size_t)k];
                if (nt > 0)
                    gl_idx_writer_add_sequence(w[k], b->tok + at, nt);
                gl_idx_writer_end_document(w[k]);
                at += (size_t)nt;
            }
            docs++;
        }
        pthread_mutex_lock(&p.mu);
        b->state = 0;
        written++;
        pthread_mutex_unlock(&p.mu);
        double now = gl_now();
        if (!o->quiet && (docs >= next_log || now - last_log > 10)) {
            double mb = (double)done_bytes / 1e6;
            fprintf(stderr, "%s: processed %ld documents, %.1f MB (%.0f docs/s, %.2f MB/s)\n",
                    gl_log_program(), docs, mb, docs / (now - t0), mb / (now - t0));
            while (next_log <= docs)
                next_log += o->log_interval > 0 ? o->log_interval : 10000;
            last_log = now;
        }
    }
    pthread_mutex_lock(&p.mu);
    p.stop = 1;
    pthread_cond_broadcast(&p.work);
    pthread_mutex_unlock(&p.mu);
    for (int i = 0; i < workers; i++)
        pthread_join(th[i], NULL);
    double secs = gl_now() - t0;
    double mb = (double)gl_lines_bytes(in) / 1e6;

    for (int k = 0; k < o->n_keys; k++) {
        int64_t ntok = gl_idx_writer_tokens(w[k]);
        gl_idx_writer_finish(w[k]);
        output_path(path, sizeof path, o->output_prefix, o->json_keys[k]);
        if (!o->quiet)
            fprintf(stderr, "%s: wrote %s.{bin,idx}: %ld documents, %" PRId64 " tokens, %s\n",
                    gl_log_program(), path, docs, ntok, gl_idx_dtype_name(dtype));
    }
    if (!o->quiet)
        fprintf(stderr, "%s: %.1f MB in %.1f s: %.2f MB/s with %d worker%s (%.2f MB/s per worker)"
                "%s%ld bad line%s skipped, %ld blank, %ld repaired as UTF-8\n", gl_log_program(),
                mb, secs, mb / (secs > 0 ? secs : 1e-9), workers, workers > 1 ? "s" : "",
                mb / (secs > 0 ? secs : 1e-9) / workers, "; ", bad, bad == 1 ? "" : "s", blank,
                repaired);
    for (int i = 0; i < p.qn; i++) {
        free(p.q[i].text); free(p.q[i].off); free(p.q[i].len); free(p.q[i].status);
        free(p.q[i].why); free(p.q[i].tok); free(p.q[i].count);
    }
    free(p.q);
    free(th);
    gl_lines_close(in);
    gl_tokenizer_free(tok);
}

/* ------------------------------------------------------------------ */

/* Print bytes, escaping what is not printable UTF-8. */
static void print_text(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        size_t k = gl_utf8_decode((const unsigned char *)s + i, n - i, &cp);
        if (k && (cp >= 0x20 || cp == '\n' || cp == '\t') && cp != 0x7f) {
            fwrite(s + i, 1, k, stdout);
            i += k;
        } else {
            printf("\\x%02x", (unsigned char)s[i]);
            i++;
        }
    }
}

void gl_prep_inspect(const char *prefix, const int64_t *docs, int n,
                     const char *tokenizer_type, const char *tokenizer_model)
{
    gl_error err;
    gl_idx *x = gl_idx_open(prefix, &err);
    if (!x)
        gl_die("--inspect: %s", err.text);
    printf("dataset:    %s\n", prefix);
    printf("dtype:      %s (code %d)\n", gl_idx_dtype_name(gl_idx_dtype(x)), gl_idx_dtype(x));
    printf("documents:  %" PRId64 "\n", gl_idx_num_documents(x));
    printf("sequences:  %" PRId64 "\n", gl_idx_num_sequences(x));
    printf("tokens:     %" PRId64 "\n", gl_idx_num_tokens(x));
    if (gl_idx_multimodal(x))
        printf("multimodal: yes (sequence modes present)\n");
    gl_tokenizer *tok = NULL;
    if (tokenizer_model && *tokenizer_model)
        tok = gl_tokenizer_open(tokenizer_type, tokenizer_model);
    for (int d = 0; d < n; d++) {
        int64_t doc = docs[d];
        if (doc < 0 || doc >= gl_idx_num_documents(x))
            gl_die("--inspect: document %" PRId64 " requested, %s has %" PRId64 " (0 to %" PRId64 ")",
                   doc, prefix, gl_idx_num_documents(x), gl_idx_num_documents(x) - 1);
        int64_t s0 = gl_idx_doc_boundary(x, doc), s1 = gl_idx_doc_boundary(x, doc + 1);
        int64_t total = 0;
        for (int64_t s = s0; s < s1; s++)
            total += gl_idx_seq_length(x, s);
        int32_t *ids = gl_malloc((size_t)(total ? total : 1) * sizeof *ids);
        int64_t at = 0;
        for (int64_t s = s0; s < s1; s++) {
            int32_t len = gl_idx_seq_length(x, s);
            if (gl_idx_read_tokens_checked(x, s, 0, len, ids + at, tok ? gl_tokenizer_vocab_size(tok) : 0,
                                           &err) != 0)
                gl_die("--inspect: %s", err.text);
            at += len;
        }
        printf("document %" PRId64 ": %" PRId64 " sequence%s, %" PRId64 " tokens\n", doc, s1 - s0,
               s1 - s0 == 1 ? "" : "s", total);
        printf("  tokens:");
        for (int64_t i = 0; i < total; i++)
            printf(" %d", ids[i]);
        printf("\n");
        if (tok) {
            size_t len;
            char *text = gl_tok_decode(tok, ids, (size_t)total, &len);
            printf("  text:   ");
            print_text(text, len);
            printf("\n");
            free(text);
        }
        free(ids);
    }
    gl_tokenizer_free(tok);
    gl_idx_close(x);
}

void gl_prep_merge(const char *const *prefixes, int n, const char *out_prefix)
{
    if (n < 1)
        gl_die_code(2, "--merge: name the datasets to merge");
    gl_idx **x = gl_malloc((size_t)n * sizeof *x);
    gl_error err;
    for (int i = 0; i < n; i++) {
        x[i] = gl_idx_open(prefixes[i], &err);
        if (!x[i])
            gl_die("--merge: %s", err.text);
        if (gl_idx_dtype(x[i]) != gl_idx_dtype(x[0]))
            gl_die_code(2, "--merge: %s holds %s tokens and %s holds %s; merge datasets of one dtype",
                        prefixes[0], gl_idx_dtype_name(gl_idx_dtype(x[0])), prefixes[i],
                        gl_idx_dtype_name(gl_idx_dtype(x[i])));
    }
    gl_idx_writer *w = gl_idx_writer_open(out_prefix, gl_idx_dtype(x[0]));
    for (int i = 0; i < n; i++)
        gl_idx_writer_append_dataset(w, x[i]);
    int64_t docs = gl_idx_writer_documents(w), toks = gl_idx_writer_tokens(w);
    gl_idx_writer_finish(w);
    fprintf(stderr, "%s: merged %d datasets into %s.{bin,idx}: %" PRId64 " documents, %" PRId64
            " tokens\n", gl_log_program(), n, out_prefix, docs, toks);
    for (int i = 0; i < n; i++)
        gl_idx_close(x[i]);
    free(x);
}
