/* data-samples: split bounds, Megatron's document/sample/shuffle indices
 * (every token used, no sample out of its split, neighbours share one
 * token, epochs just enough), the .npy cache, blending proportions and
 * mock samples. */
#include <config.h>
#include "data/indexed.h"
#include "data/samples.h"
#include "data/loader.h"
#include "tap.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char dir[256];

/* Token of document d at position p: unique, and tells where it is from. */
static int32_t tok(int d, int p) { return d * 100 + p; }

static gl_idx *make_dataset(const char *name, int ndocs, int *lens)
{
    char prefix[512];
    gl_error err;
    snprintf(prefix, sizeof prefix, "%s/%s", dir, name);
    gl_idx_writer *w = gl_idx_writer_open(prefix, GL_IDX_INT32);
    srand(7);
    for (int d = 0; d < ndocs; d++) {
        int32_t t[100];
        lens[d] = 1 + rand() % 40;
        for (int p = 0; p < lens[d]; p++)
            t[p] = tok(d, p);
        gl_idx_writer_add_document(w, t, lens[d]);
    }
    gl_idx_writer_finish(w);
    gl_idx *x = gl_idx_open(prefix, &err);
    if (!x)
        bail_out("%s", err.text);
    return x;
}

static void test_split(void)
{
    double w[3];
    gl_error err;
    int64_t b[4];
    ok(gl_parse_split("969,30,1", w, &err) == 0 && fabs(w[0] - 0.969) < 1e-12, "parse 969,30,1");
    gl_split_bounds(w, 1000, b);
    ok(b[0] == 0 && b[1] == 969 && b[2] == 999 && b[3] == 1000, "969,30,1 of 1000: 0 969 999 1000");
    gl_split_bounds(w, 10, b);
    ok(b[1] == 10 && b[2] == 10 && b[3] == 10, "969,30,1 of 10: all train (rounding as Megatron)");
    gl_parse_split("1,1", w, &err);
    gl_split_bounds(w, 5, b);
    ok(b[1] == 3 && b[2] == 5 && b[3] == 5, "1,1 of 5: round(2.5) = 2 (half to even), shifted: 0 3 5 5");
    ok(gl_parse_split("90,x", w, &err) != 0 && strstr(err.text, "--split"), "bad --split refused: %s",
       err.text);
    ok(gl_parse_split("0,0,0", w, &err) != 0, "all-zero --split refused");
    ok(gl_parse_split("1,2,3,4", w, &err) != 0, "four weights refused");
}

static void test_index(void)
{
    int lens[60];
    gl_idx *x = make_dataset("ds", 60, lens);
    double w[3];
    gl_error err;
    int64_t b[4];
    gl_parse_split("80,20,0", w, &err);
    gl_split_bounds(w, 60, b);
    int64_t tpe = 0;
    for (int d = (int)b[0]; d < b[1]; d++)
        tpe += lens[d];
    int s = 16;
    int64_t want = (3 * tpe) / s - 5;     /* needs 3 epochs */
    gl_gpt_index g = { .ds = x, .split_name = "train", .begin = b[0], .end = b[1],
                       .seq_length = s, .num_samples = want, .seed = 1234 };
    gl_gpt_index_build(&g);
    ok(g.num_epochs == 3 && g.n_samples >= want, "3 epochs for %ld samples (%ld built)", (long)want, (long)g.n_samples);
    /* document index: each split id exactly `epochs` times */
    int cnt[60] = { 0 }, good = 1;
    for (int64_t i = 0; i < g.n_doc_index; i++) {
        int32_t d = g.doc_index[i];
        good &= d >= b[0] && d < b[1];
        if (good) cnt[d]++;
    }
    for (int d = (int)b[0]; d < b[1]; d++)
        good &= cnt[d] == 3;
    ok(good, "document index holds each train document once per epoch, nothing else");
    /* shuffle index is a permutation */
    char *seen = calloc((size_t)g.n_samples, 1);
    good = 1;
    for (int64_t i = 0; i < g.n_samples; i++) {
        int64_t k = g.shuffle_index[i];
        good &= k >= 0 && k < g.n_samples && !seen[k];
        if (good) seen[k] = 1;
    }
    ok(good, "shuffle index is a permutation of the %ld samples", (long)g.n_samples);
    /* samples in unshuffled order: neighbours share a token; concatenated
     * (overlaps removed) they are the document stream. */
    int32_t *inv = malloc((size_t)g.n_samples * sizeof *inv);
    for (int64_t i = 0; i < g.n_samples; i++)
        inv[g.shuffle_index[i]] = (int32_t)i;
    int32_t *smp = malloc((size_t)(s + 1) * 4), prev_last = -1;
    int64_t pos = 0, di = 0, off = 0;
    int chain = 1, stream = 1, inrange = 1;
    for (int64_t k = 0; k < g.n_samples; k++) {
        gl_gpt_sample(&g, inv[k], smp, 0);
        if (k > 0)
            chain &= smp[0] == prev_last;
        prev_last = smp[s];
        for (int t = (k == 0 ? 0 : 1); t <= s; t++) {
            /* the document stream at this point */
            while (off >= lens[g.doc_index[di]]) { di++; off = 0; }
            stream &= smp[t] == tok(g.doc_index[di], (int)off);
            inrange &= smp[t] / 100 >= b[0] && smp[t] / 100 < b[1];
            off++;
            pos++;
        }
    }
    int64_t total = 3 * tpe;
    ok(chain, "each sample starts with the last token of the one before");
    ok(stream, "samples in order are the shuffled document stream, every token in turn");
    ok(inrange, "no train sample holds a token of another split");
    ok(total - pos >= 0 && total - pos < s + 1, "all but the last partial sample's tokens used (%ld of %ld)",
       (long)pos, (long)total);
    /* determinism and the seed */
    gl_gpt_index h = g;
    h.doc_index = NULL; h.sample_index = NULL; h.shuffle_index = NULL;
    gl_gpt_index_build(&h);
    ok(memcmp(h.shuffle_index, g.shuffle_index, (size_t)g.n_samples * 8) == 0 &&
       memcmp(h.doc_index, g.doc_index, (size_t)g.n_doc_index * 4) == 0, "the same seed builds the same indices");
    gl_gpt_index_free(&h);
    h = g;
    h.seed = 99;
    h.doc_index = NULL; h.sample_index = NULL; h.shuffle_index = NULL;
    gl_gpt_index_build(&h);
    ok(memcmp(h.shuffle_index, g.shuffle_index, (size_t)g.n_samples * 8) != 0, "another seed, another order");
    gl_gpt_index_free(&h);

    /* the cache */
    char cache[300];
    snprintf(cache, sizeof cache, "%s/cache/sub", dir);
    gl_gpt_index c1 = g;
    c1.doc_index = NULL; c1.sample_index = NULL; c1.shuffle_index = NULL; c1.from_cache = 0;
    gl_gpt_index_cached(&c1, cache, 1);
    gl_gpt_index c2 = c1;
    c2.doc_index = NULL; c2.sample_index = NULL; c2.shuffle_index = NULL; c2.from_cache = 0;
    memset(c2.maps, 0, sizeof c2.maps);
    int r = gl_gpt_index_cached(&c2, cache, 0);
    ok(c1.from_cache == 2 && r == 0 && c2.from_cache == 1, "first use builds and writes the cache, the second maps it");
    ok(c2.n_samples == g.n_samples && memcmp(c2.shuffle_index, g.shuffle_index, (size_t)g.n_samples * 8) == 0 &&
       memcmp(c2.sample_index, g.sample_index, (size_t)(g.n_samples + 1) * 16) == 0 &&
       memcmp(c2.doc_index, g.doc_index, (size_t)g.n_doc_index * 4) == 0, "cached indices equal the built ones");
    gl_gpt_index c3 = c1;
    c3.doc_index = NULL; c3.sample_index = NULL; c3.shuffle_index = NULL; c3.from_cache = 0;
    memset(c3.maps, 0, sizeof c3.maps);
    c3.seq_length = 8;
    ok(gl_gpt_index_cached(&c3, cache, 0) == -1, "another description misses the cache");
    gl_gpt_index_free(&c1);
    gl_gpt_index_free(&c2);

    /* the valid split */
    gl_gpt_index v = { .ds = x, .split_name = "valid", .begin = b[1], .end = b[2], .seq_length = s,
                       .num_samples = 20, .seed = 1234 };
    gl_gpt_index_build(&v);
    inrange = 1;
    for (int64_t i = 0; i < v.n_samples; i++) {
        gl_gpt_sample(&v, i, smp, 0);
        for (int t = 0; t <= s; t++)
            inrange &= smp[t] / 100 >= b[1] && smp[t] / 100 < b[2];
    }
    ok(inrange && v.n_samples >= 20, "valid samples come only from valid documents");
    gl_gpt_index_free(&v);
    gl_gpt_index_free(&g);
    free(inv); free(smp); free(seen);
    gl_idx_close(x);
}

static void test_blend(void)
{
    gl_blend b = { .n = 3, .w = { 0.2, 0.3, 0.5 }, .size = 5000 };
    gl_blend_build(&b);
    int64_t cnt[3] = { 0 };
    double worst = 0;
    int seq = 1;
    for (int64_t k = 0; k < b.size; k++) {
        int d = b.dataset_index[k];
        seq &= b.dataset_sample_index[k] == cnt[d];
        cnt[d]++;
        for (int i = 0; i < 3; i++) {
            double e = fabs((double)cnt[i] - b.w[i] * (double)(k + 1));
            if (e > worst) worst = e;
        }
    }
    ok(worst <= 1.0, "blend 0.2/0.3/0.5: every prefix within one sample of its share (worst %.2f)", worst);
    ok(seq, "each dataset's samples are taken in order 0, 1, 2, ...");
    ok(b.dataset_index[0] == 2 && b.dataset_index[1] == 1, "the first picks follow the largest error (2, then 1)");
    gl_blend_free(&b);
}

static void test_mock(void)
{
    int32_t a[64], c[64], d[64];
    gl_mock_sample(1234, 77, 64, 1000, a);
    gl_mock_sample(1234, 77, 64, 1000, c);
    gl_mock_sample(1234, 78, 64, 1000, d);
    int in = 1;
    for (int i = 0; i < 64; i++)
        in &= a[i] >= 0 && a[i] < 1000;
    ok(in && memcmp(a, c, sizeof a) == 0 && memcmp(a, d, sizeof a) != 0,
       "mock samples: in the vocabulary, a function of (seed, index)");
}

int main(void)
{
    snprintf(dir, sizeof dir, "%s/data-samples.d", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
    if (system(cmd) != 0)
        bail_out("cannot make %s", dir);
    plan(NO_PLAN);
    test_split();
    test_index();
    test_blend();
    test_mock();
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (!tap_failed() && system(cmd) != 0)
        diag("could not remove %s", dir);
    return done_testing();
}
