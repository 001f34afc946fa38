/* samples.c: Megatron's document, sample and shuffle indices; blending;
 * the .npy cache (see samples.h). */
#include <config.h>
#include "data/samples.h"
#include "data/rng.h"
#include "data/strmap.h"
#include "base/file.h"
#include "base/log.h"
#include "base/mapped.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int gl_parse_split(const char *s, double w[3], gl_error *err)
{
    w[0] = w[1] = w[2] = 0;
    int n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        double v = strtod(p, &end);
        if (end == p || errno || v < 0 || !isfinite(v) || n == 3) {
            return gl_errprintf(err, "--split %s: expected up to three non-negative weights"
                                " separated by commas, like 969,30,1", s);
        }
        w[n++] = v;
        p = end;
        if (*p == ',' || *p == '/')
            p++;
        else if (*p)
            return gl_errprintf(err, "--split %s: unexpected '%c'; write weights like 969,30,1",
                                s, *p);
    }
    double sum = w[0] + w[1] + w[2];
    if (sum <= 0)
        return gl_errprintf(err, "--split %s: the weights sum to 0", s);
    for (int i = 0; i < 3; i++)
        w[i] /= sum;
    return 0;
}

void gl_split_bounds(const double w[3], int64_t n, int64_t b[4])
{
    b[0] = 0;
    for (int i = 0; i < 3; i++)
        b[i + 1] = b[i] + (int64_t)nearbyint(w[i] * (double)n); /* ties to even, as Python's round */
    int64_t diff = b[3] - n;
    for (int i = 1; i < 4; i++)
        b[i] -= diff;
}

/* ------------------------------------------------------------------ */
/* Building.                                                           */

static int64_t tokens_of(const gl_gpt_index *g)
{
    int64_t t = 0;
    for (int64_t s = g->begin; s < g->end; s++)
        t += gl_idx_seq_length(g->ds, s);
    return t;
}

/* The split's ids `epochs` times over, shuffled as one array. */
static void doc_index_part(gl_mt19937 *r, const gl_gpt_index *g, int epochs, int32_t *out)
{
    int64_t nd = g->end - g->begin;
    for (int e = 0; e < epochs; e++)
        for (int64_t d = 0; d < nd; d++)
            out[e * nd + d] = (int32_t)(g->begin + d);
    gl_np_shuffle_i32(r, out, (size_t)(epochs * nd));
}

void gl_gpt_index_build(gl_gpt_index *g)
{
    const int64_t extra = 1;        /* add_extra_token_to_sequence */
    int64_t tpe = tokens_of(g), s = g->seq_length;
    const char *prefix = gl_idx_prefix(g->ds);
    if (g->end <= g->begin || tpe <= 1)
        gl_die("--data-path %s: the %s split has %" PRId64 " documents and %" PRId64
               " tokens, too few to make samples; give it a larger share with --split",
               prefix, g->split_name, g->end - g->begin, tpe);
    if (g->end - g->begin > INT32_MAX)
        gl_die("--data-path %s: more than 2^31 documents in one split", prefix);

    /* Epochs: enough tokens for num_samples samples of s + 1 tokens. */
    int epochs = 1;
    if (g->num_samples > 0) {
        int64_t need = g->num_samples * s + extra, have = tpe;
        while (have < need) {
            epochs++;
            have += tpe;
        }
    }
    int separate_last = 0;
    int64_t sans_last = 0;
    if (epochs > 1) {
        sans_last = ((epochs - 1) * tpe - extra) / s;
        int64_t from_last = g->num_samples - sans_last;
        int64_t per_epoch = (tpe - extra) / s;
        separate_last = from_last < (int64_t)(0.80 * (double)per_epoch);
    }
    g->num_epochs = epochs;

    gl_mt19937 r;
    gl_mt19937_seed(&r, g->seed);
    int64_t nd = g->end - g->begin;
    g->n_doc_index = epochs * nd;
    g->doc_index = gl_malloc((size_t)g->n_doc_index * sizeof *g->doc_index);
    if (!separate_last)
        doc_index_part(&r, g, epochs, g->doc_index);
    else {
        doc_index_part(&r, g, epochs - 1, g->doc_index);
        doc_index_part(&r, g, 1, g->doc_index + (epochs - 1) * nd);
    }

    /* Sample starts: Megatron's build_sample_idx, dropping the last
     * partial sample. */
    int64_t n = (epochs * tpe - extra) / s;
    g->n_samples = n;
    g->sample_index = gl_malloc((size_t)(2 * (n + 1)) * sizeof *g->sample_index);
    int64_t di = 0, off = 0;
    g->sample_index[0] = 0;
    g->sample_index[1] = 0;
    for (int64_t k = 1; k <= n; k++) {
        int64_t remaining = s + extra;
        while (remaining != 0) {
            int64_t len = gl_idx_seq_length(g->ds, g->doc_index[di]) - off;
            remaining -= len;
            if (remaining <= 0) {
                off += remaining + len - extra;
                remaining = 0;
            } else {
                if (di == g->n_doc_index - 1)
                    gl_die("internal error: sample index ran out of documents at sample %" PRId64, k);
                di++;
                off = 0;
            }
        }
        g->sample_index[2 * k] = di;
        g->sample_index[2 * k + 1] = off;
    }

    /* Sample order. */
    g->shuffle_index = gl_malloc((size_t)(n ? n : 1) * sizeof *g->shuffle_index);
    int64_t first = separate_last ? sans_last : n;
    for (int64_t i = 0; i < n; i++)
        g->shuffle_index[i] = i;
    gl_np_shuffle_i64(&r, g->shuffle_index, (size_t)first);
    if (first < n)
        gl_np_shuffle_i64(&r, g->shuffle_index + first, (size_t)(n - first));
}

void gl_gpt_sample(const gl_gpt_index *g, int64_t i, int32_t *out, long vocab_size)
{
    if (i < 0 || i >= g->n_samples)
        gl_die("--data-path %s: %s sample %" PRId64 " requested, the index has %" PRId64
               " (was it built for fewer samples?)", gl_idx_prefix(g->ds), g->split_name, i,
               g->n_samples);
    int64_t k = g->shuffle_index[i];
    int64_t d0 = g->sample_index[2 * k], o0 = g->sample_index[2 * k + 1];
    int64_t d1 = g->sample_index[2 * k + 2], o1 = g->sample_index[2 * k + 3];
    int64_t want = g->seq_length + 1, at = 0;
    if (k < 0 || k >= g->n_samples || d0 < 0 || d1 < d0 || d1 >= g->n_doc_index)
        gl_die("--data-path %s: the %s sample index is corrupt at sample %" PRId64
               "; delete the cache and rerun", gl_idx_prefix(g->ds), g->split_name, i);
    for (int64_t d = d0; d <= d1; d++) {
        int64_t seq = g->doc_index[d];
        int64_t off = d == d0 ? o0 : 0;
        int64_t len = d < d1 ? gl_idx_seq_length(g->ds, seq) - off : o1 + 1 - off;
        if (len < 0 || at + len > want)
            gl_die("--data-path %s: the %s sample index is corrupt at sample %" PRId64
                   "; delete the cache and rerun", gl_idx_prefix(g->ds), g->split_name, i);
        gl_idx_read_tokens(g->ds, seq, off, len, out + at, vocab_size);
        at += len;
    }
    if (at != want)
        gl_die("--data-path %s: %s sample %" PRId64 " has %" PRId64 " tokens, not %" PRId64
               "; delete the cache and rerun", gl_idx_prefix(g->ds), g->split_name, i, at, want);
}

void gl_gpt_index_free(gl_gpt_index *g)
{
    if (g->maps[0] || g->maps[1] || g->maps[2]) {
        for (int i = 0; i < 3; i++)
            if (g->maps[i]) {
                gl_mapped_remove(g->maps[i]);
                munmap(g->maps[i], g->map_len[i]);
            }
    } else {
        free(g->doc_index);
        free(g->sample_index);
        free(g->shuffle_index);
    }
    g->doc_index = NULL;
    g->sample_index = NULL;
    g->shuffle_index = NULL;
    memset(g->maps, 0, sizeof g->maps);
}

/* ------------------------------------------------------------------ */
/* The .npy cache.  NumPy's format 1.0: "\x93NUMPY", 1, 0, a little-endian
 * uint16 header length, then a Python dict literal padded with spaces and
 * ending in "\n" so that the data starts on a 64-byte boundary.         */

static void npy_header(char *h, size_t *hl, const char *descr, const char *shape)
{
    char dict[256];
    int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                     descr, shape);
    size_t total = 10 + (size_t)n + 1;
    size_t pad = (64 - total % 64) % 64;
    memcpy(h, "\x93NUMPY\x01\x00", 8);
    uint16_t len = (uint16_t)(n + pad + 1);
    memcpy(h + 8, &len, 2);
    memcpy(h + 10, dict, (size_t)n);
    memset(h + 10 + n, ' ', pad);
    h[10 + n + pad] = '\n';
    *hl = 10 + (size_t)n + pad + 1;
}

static void npy_write(const char *path, const char *descr, const char *shape, const void *p, size_t bytes)
{
    char h[512];
    size_t hl;
    npy_header(h, &hl, descr, shape);
    gl_error e;
    gl_file_tmp *t = gl_file_tmp_create(path, 0, &e);
    if (!t)
        gl_die("--data-cache-path: %s", e.text);
    FILE *f = gl_file_tmp_stream(t);
    if (fwrite(h, 1, hl, f) != hl || (bytes && fwrite(p, 1, bytes, f) != bytes))
        gl_die("--data-cache-path: cannot write %s: %s", gl_file_tmp_path(t), strerror(errno));
    if (gl_file_tmp_publish(t, 0, &e) < 0)
        gl_die("--data-cache-path: %s", e.text);
}

/* Map an .npy file we wrote; NULL unless its header is exactly what we
 * would write for (descr, shape) and the size matches. */
static void *npy_map(const char *path, const char *descr, const char *shape, size_t bytes,
                     void **map, size_t *maplen)
{
    char h[512];
    size_t hl;
    npy_header(h, &hl, descr, shape);
    int fd = gl_file_open_read(path, NULL);
    if (fd < 0)
        return NULL;
    struct stat st;
    if (fstat(fd, &st) != 0 || (size_t)st.st_size != hl + bytes) {
        close(fd);
        return NULL;
    }
    void *m = mmap(NULL, hl + bytes, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return NULL;
    if (memcmp(m, h, hl) != 0) {
        munmap(m, hl + bytes);
        return NULL;
    }
    gl_mapped_add(m, hl + bytes, path);     /* SIGBUS, if it shrinks, names it */
    *map = m;
    *maplen = hl + bytes;
    return (char *)m + hl;
}

/* The first dimension of an .npy file's shape, -1 if unreadable. */
static int64_t npy_dim0(const char *path)
{
    FILE *f = gl_file_fopen_read(path, NULL);
    if (!f)
        return -1;
    char h[512];
    size_t n = fread(h, 1, sizeof h - 1, f);
    fclose(f);
    h[n] = '\0';
    const char *p = n > 10 ? strstr(h + 10, "'shape': (") : NULL;
    long long d;
    if (!p || sscanf(p + 10, "%lld", &d) != 1 || d < 0)
        return -1;
    return (int64_t)d;
}

static char *slurp_text(const char *path)
{
    char *s;
    return gl_file_read_all(path, &s, NULL, NULL) == 0 ? s : NULL;
}

/* The cache's own files: HASH-GPTDataset-SPLIT-{description.txt,
 * document_index.npy, sample_index.npy, shuffle_index.npy}. */
static int cache_name(const char *final, void *arg)
{
    static const char *const ends[] = { "-description.txt", "-document_index.npy",
                                        "-sample_index.npy", "-shuffle_index.npy" };
    (void)arg;
    size_t n = strlen(final);
    if (!strstr(final, "-GPTDataset-"))
        return 0;
    for (int i = 0; i < 4; i++)
        if (n > strlen(ends[i]) && !strcmp(final + n - strlen(ends[i]), ends[i]))
            return 1;
    return 0;
}

/* The directory, without the temporaries killed builders left there (a
 * builder still at work holds its temporaries locked: they stay). */
static void cache_dir_ready(const char *dir)
{
    gl_error e;
    if (gl_file_mkdirs(dir, &e) < 0)
        gl_die("--data-cache-path: %s", e.text);
    if (gl_file_clean_temps(dir, cache_name, NULL, "index build", &e) < 0)
        gl_warn("--data-cache-path: %s", e.text);
}

int gl_gpt_index_cached(gl_gpt_index *g, const char *dir, int may_build)
{
    /* The description names everything the indices depend on. */
    char desc[8192];
    char real[4096];
    const char *prefix = gl_idx_prefix(g->ds);
    if (!realpath(prefix, real)) {
        /* the prefix names files, not itself: resolve its .idx */
        char idx[4200];
        snprintf(idx, sizeof idx, "%s.idx", prefix);
        if (!realpath(idx, real))
            snprintf(real, sizeof real, "%s", prefix);
    }
    snprintf(desc, sizeof desc,
             "{\"class\": \"GPTDataset\", \"format\": \"gridlm-1\", \"dataset\": \"%s\","
             " \"sequences\": %" PRId64 ", \"tokens\": %" PRId64 ", \"dtype\": %d,"
             " \"split\": \"%s\", \"range\": [%" PRId64 ", %" PRId64 "], \"sequence_length\": %d,"
             " \"num_samples\": %" PRId64 ", \"random_seed\": %u,"
             " \"add_extra_token_to_sequence\": true, \"drop_last_partial_sequence\": true}\n",
             real, gl_idx_num_sequences(g->ds), gl_idx_num_tokens(g->ds), gl_idx_dtype(g->ds),
             g->split_name, g->begin, g->end, g->seq_length, g->num_samples, g->seed);
    uint64_t h = gl_fnv1a64(desc, strlen(desc), GL_FNV1A64_INIT);
    char base[4500], pd[4600], pdoc[4600], psam[4600], pshu[4600];
    snprintf(base, sizeof base, "%s/%016" PRIx64 "-GPTDataset-%s", dir, h, g->split_name);
    snprintf(pd, sizeof pd, "%s-description.txt", base);
    snprintf(pdoc, sizeof pdoc, "%s-document_index.npy", base);
    snprintf(psam, sizeof psam, "%s-sample_index.npy", base);
    snprintf(pshu, sizeof pshu, "%s-shuffle_index.npy", base);

    /* Reuse: description equal and three arrays whose headers are exactly
     * what we write, with consistent shapes. */
    char *old = slurp_text(pd);
    if (old && strcmp(old, desc) == 0) {
        int64_t nd = npy_dim0(pdoc), ns = npy_dim0(pshu);
        char shape[64];
        void *m;
        size_t ml;
        snprintf(shape, sizeof shape, "(%" PRId64 ",)", nd);
        if (nd >= 0 && (g->doc_index = npy_map(pdoc, "<i4", shape, (size_t)nd * 4, &m, &ml))) {
            g->maps[0] = m;
            g->map_len[0] = ml;
        }
        snprintf(shape, sizeof shape, "(%" PRId64 ",)", ns);
        if (ns >= 0 && (g->shuffle_index = npy_map(pshu, "<i8", shape, (size_t)ns * 8, &m, &ml))) {
            g->maps[2] = m;
            g->map_len[2] = ml;
        }
        snprintf(shape, sizeof shape, "(%" PRId64 ", 2)", ns + 1);
        if (ns >= 0 && (g->sample_index = npy_map(psam, "<i8", shape, (size_t)(ns + 1) * 16, &m, &ml))) {
            g->maps[1] = m;
            g->map_len[1] = ml;
        }
        if (g->doc_index && g->sample_index && g->shuffle_index) {
            g->n_doc_index = nd;
            g->n_samples = ns;
            g->from_cache = 1;
            free(old);
            return 0;
        }
        gl_warn("--data-cache-path: %s does not match its description; rebuilding it", base);
        gl_gpt_index_free(g);
    }
    free(old);
    if (!may_build)
        return -1;
    gl_gpt_index_build(g);
    cache_dir_ready(dir);
    char shape[64];
    snprintf(shape, sizeof shape, "(%" PRId64 ",)", g->n_doc_index);
    npy_write(pdoc, "<i4", shape, g->doc_index, (size_t)g->n_doc_index * 4);
    snprintf(shape, sizeof shape, "(%" PRId64 ", 2)", g->n_samples + 1);
    npy_write(psam, "<i8", shape, g->sample_index, (size_t)(g->n_samples + 1) * 16);
    snprintf(shape, sizeof shape, "(%" PRId64 ",)", g->n_samples);
    npy_write(pshu, "<i8", shape, g->shuffle_index, (size_t)g->n_samples * 8);
    /* the description last: its presence marks a complete entry */
    gl_error e;
    if (gl_file_write_all(pd, desc, strlen(desc), 0, &e) < 0)
        gl_die("--data-cache-path: %s", e.text);
    g->from_cache = 2;
    return 0;
}

/* ------------------------------------------------------------------ */

void gl_blend_build(gl_blend *b)
{
    b->dataset_index = gl_malloc((size_t)(b->size ? b->size : 1) * sizeof *b->dataset_index);
    b->dataset_sample_index = gl_malloc((size_t)(b->size ? b->size : 1) * sizeof *b->dataset_sample_index);
    int64_t count[64] = { 0 };
    for (int64_t k = 0; k < b->size; k++) {
        double kd = k > 1 ? (double)k : 1.0;
        int best = 0;
        double best_err = b->w[0] * kd - (double)count[0];
        for (int i = 1; i < b->n; i++) {
            double err = b->w[i] * kd - (double)count[i];
            if (err > best_err) {
                best_err = err;
                best = i;
            }
        }
        b->dataset_index[k] = (int16_t)best;
        b->dataset_sample_index[k] = count[best]++;
    }
}

void gl_blend_free(gl_blend *b)
{
    free(b->dataset_index);
    free(b->dataset_sample_index);
    b->dataset_index = NULL;
    b->dataset_sample_index = NULL;
}
