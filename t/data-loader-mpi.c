/* data-loader-mpi: gl_loader under MPI (t/data-loader.t).  Rank 0 writes
 * two datasets A (tokens < 1000) and B (tokens >= 1000) whose documents
 * end with the eod; then, for several layouts, the global batches put
 * together from every data-parallel rank's samples must be the same;
 * the index cache is built once by rank 0 and mapped by the others;
 * blending follows the weights; resuming at a sample continues exactly;
 * the read-ahead thread serves sequential requests; the loss mask hides
 * the eod inputs; validation samples come from the valid documents. */
#include <config.h>
#include "data/indexed.h"
#include "data/loader.h"
#include "base/log.h"
#include "tap.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEQ 24
#define GBS 8
#define ITERS 6
#define VOCAB 2000   /* NullTokenizer: ids 0..1999, eod = 2000 */

static char dir[256];
static int me, np;

static void write_dataset(const char *name, int base, int ndocs)
{
    char prefix[400];
    snprintf(prefix, sizeof prefix, "%s/%s", dir, name);
    gl_idx_writer *w = gl_idx_writer_open(prefix, GL_IDX_UINT16);
    srand(base + 1);
    for (int d = 0; d < ndocs; d++) {
        int32_t t[64];
        int n = 3 + rand() % 50;
        for (int i = 0; i < n - 1; i++)
            t[i] = base + (d % 1000);        /* the document's number, as every token */
        t[n - 1] = VOCAB;                    /* eod */
        gl_idx_writer_add_document(w, t, n);
    }
    gl_idx_writer_finish(w);
}

/* A loader's two arguments. */
typedef struct {
    gl_data_opts data;
    gl_loader_want want;
} source;

/* Valid samples asked for: Megatron's (ITERS / eval-interval 3 + 1) x
 * eval-iters 2 x GBS (train/'s gl_config_loader_want counts them so). */
#define VALID ((ITERS / 3 + 1) * 2 * GBS)

static source cfg(const char *cache, int blended)
{
    static char pa[400], pb[400];
    source c;
    memset(&c, 0, sizeof c);
    snprintf(pa, sizeof pa, "%s/A", dir);
    snprintf(pb, sizeof pb, "%s/B", dir);
    c.want.seq_length = SEQ;
    c.want.train_samples = (long)ITERS * GBS;
    c.want.valid_samples = VALID;
    c.want.seed = 1234;
    c.data.num_workers = 2;
    c.want.vocab_size = VOCAB;
    strcpy(c.data.tokenizer_type, "NullTokenizer");
    strcpy(c.data.split, "90,10,0");
    c.data.eod_mask_loss = 1;
    c.data.data_cache_path = (char *)cache;
    if (blended) {
        c.data.n_data_paths = 2;
        c.data.data_path[0] = pa;
        c.data.data_path[1] = pb;
        c.data.data_weight[0] = 0.3;
        c.data.data_weight[1] = 0.7;
        c.data.data_weights_given = 1;
    } else {
        c.data.n_data_paths = 1;
        c.data.data_path[0] = pa;
    }
    return c;
}

/* All ITERS global batches under a layout of dp data-parallel ranks (the
 * other ranks need no tokens), gathered on rank 0 in sample order. */
static void run_layout(int dp, const char *cache, int32_t *all, long *prefetched)
{
    source c = cfg(cache, 1);
    int r = me % dp, needs = me < dp;
    gl_loader *L = gl_loader_open(&c.data, &c.want, r, dp, needs, MPI_COMM_WORLD);
    int mbs = 2, row = SEQ + 1;
    int32_t *buf = malloc((size_t)mbs * row * sizeof *buf);
    float *mask = malloc((size_t)mbs * SEQ * sizeof *mask);
    int32_t *mine = calloc((size_t)ITERS * GBS * row, sizeof *mine);
    for (int it = 0; it < ITERS && needs; it++)
        for (int m = 0; m < GBS / (mbs * dp); m++) {
            long first = (long)it * GBS + (long)m * mbs * dp + (long)r * mbs;
            gl_loader_batch(L, first, mbs, buf, mask);
            memcpy(mine + first * row, buf, (size_t)mbs * row * sizeof *buf);
        }
    /* every sample is written by exactly one rank: a sum gathers them */
    MPI_Reduce(mine, all, ITERS * GBS * row, MPI_INT32_T, MPI_SUM, 0, MPI_COMM_WORLD);
    long pf = 0, direct = 0;
    if (needs)
        gl_loader_stats(L, &pf, &direct);
    MPI_Reduce(&pf, prefetched, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    free(buf); free(mask); free(mine);
    gl_loader_close(L);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    if (me)
        tap_quiet(1);
    gl_log_set_program("data-loader-mpi");
    snprintf(dir, sizeof dir, "%s", argc > 1 ? argv[1] : "t/data-loader.dir");
    if (me == 0) {
        write_dataset("A", 0, 300);
        write_dataset("B", 1000, 300);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    plan(NO_PLAN);
    int row = SEQ + 1;
    size_t total = (size_t)ITERS * GBS * row;
    int32_t *ref = calloc(total, sizeof *ref), *got = calloc(total, sizeof *got);
    char cache[400];
    snprintf(cache, sizeof cache, "%s/cache", dir);

    /* The cache: built by rank 0 once, mapped by the others. */
    source c = cfg(cache, 1);
    gl_loader *L = gl_loader_open(&c.data, &c.want, 0, 1, 1, MPI_COMM_WORLD);
    int origin = gl_loader_index_origin(L), o0, omin, omax;
    MPI_Reduce(&origin, &o0, 1, MPI_INT, MPI_MAX, 0, MPI_COMM_WORLD);
    int other = me ? origin : 1;
    MPI_Reduce(&other, &omin, 1, MPI_INT, MPI_MIN, 0, MPI_COMM_WORLD);
    MPI_Reduce(&other, &omax, 1, MPI_INT, MPI_MAX, 0, MPI_COMM_WORLD);
    ok(o0 == 2 && omin == 1 && omax == 1, "rank 0 built the index cache, the other %d ranks mapped it", np - 1);
    is_int(gl_loader_vocab_size(L), VOCAB + 1, "NullTokenizer: vocabulary %d + eod", VOCAB);
    is_int(gl_loader_eod(L), VOCAB, "NullTokenizer: eod is %d", VOCAB);
    ok(gl_loader_has_valid(L), "the valid split has samples");
    is_int(gl_loader_valid_samples(L), VALID, "the valid split gives the %d samples asked for", VALID);
    /* loss mask */
    int32_t tok[4 * 25];
    float mask[4 * 24];
    gl_loader_batch(L, 3, 4, tok, mask);
    int good = 1, eods = 0;
    for (int s = 0; s < 4; s++)
        for (int t = 0; t < SEQ; t++) {
            good &= mask[s * SEQ + t] == (tok[s * row + t] == VOCAB ? 0.0f : 1.0f);
            eods += tok[s * row + t] == VOCAB;
        }
    ok(good && eods > 0, "--eod-mask-loss: mask is 0 exactly at the %d eod inputs", eods);
    /* validation: only valid documents (A: docs 270..299, B: 1270..1299) */
    gl_loader_valid_batch(L, 0, 4, tok, NULL);
    good = 1;
    for (int i = 0; i < 4 * row; i++)
        good &= tok[i] == VOCAB || (tok[i] % 1000) >= 270;
    ok(good, "valid samples hold only valid-split documents");
    gl_loader_close(L);
    L = gl_loader_open(&c.data, &c.want, 0, 1, 1, MPI_COMM_WORLD);
    origin = gl_loader_index_origin(L);
    MPI_Reduce(&origin, &omax, 1, MPI_INT, MPI_MAX, 0, MPI_COMM_WORLD);
    ok(omax == 1, "a second run with the same description reuses the cache everywhere");
    gl_loader_close(L);

    /* Layouts: dp = 1, 2, np (the rest need no tokens). */
    long pf;
    run_layout(1, cache, ref, &pf);
    int dps[3] = { 2, np, 0 };
    for (int k = 0; k < 2; k++) {
        if (dps[k] > np || (k == 1 && np == 2))
            continue;
        memset(got, 0, total * sizeof *got);
        run_layout(dps[k], cache, got, &pf);
        if (me == 0)
            ok(memcmp(ref, got, total * sizeof *ref) == 0, "dp=%d gives the same global batches as dp=1", dps[k]);
        if (me == 0)
            ok(pf > 0, "dp=%d: the read-ahead thread served %ld batches", dps[k], pf);
    }
    /* without a cache the same samples */
    memset(got, 0, total * sizeof *got);
    run_layout(1, NULL, got, &pf);
    if (me == 0)
        ok(memcmp(ref, got, total * sizeof *ref) == 0, "without --data-cache-path: the same samples");

    if (me == 0) {
        /* blending: 30% of the samples from A */
        long fromA = 0, n = ITERS * GBS, mixed = 0;
        for (long s = 0; s < n; s++) {
            int a = 0, b = 0;
            for (int t = 0; t < row; t++) {
                int32_t v = ref[s * row + t];
                if (v == VOCAB) continue;
                if (v < 1000) a = 1; else b = 1;
            }
            fromA += a && !b;
            mixed += a && b;
        }
        ok(mixed == 0 && labs(fromA - (long)(0.3 * n + 0.5)) <= 1,
           "blend 0.3 A / 0.7 B: %ld of %ld samples from A, none mixed", fromA, n);
        /* resume: a fresh loader from sample 20 continues the sequence */
        source c1 = cfg(cache, 1);
        L = gl_loader_open(&c1.data, &c1.want, 0, 1, 1, MPI_COMM_SELF);
        int32_t *b = malloc((size_t)28 * row * sizeof *b);
        gl_loader_batch(L, 20, 28, b, NULL);
        ok(memcmp(b, ref + 20 * row, (size_t)28 * row * sizeof *b) == 0, "resuming at sample 20 continues exactly");
        free(b);
        gl_loader_close(L);
        /* mock data: the same whatever the layout */
        source m = cfg(NULL, 0);
        m.data.mock_data = 1;
        m.data.n_data_paths = 0;
        L = gl_loader_open(&m.data, &m.want, 0, 1, 1, MPI_COMM_SELF);
        int32_t x[2 * 25], y[25];
        gl_loader_batch(L, 10, 2, x, NULL);
        gl_mock_sample(1234, 11, row, VOCAB + 1, y);
        ok(memcmp(x + row, y, sizeof y) == 0, "--mock-data sample 11 is gl_mock_sample(seed, 11)");
        gl_loader_close(L);
    }
    free(ref);
    free(got);
    /* only rank 0's results are meaningful (the reductions land there) */
    int rc = done_testing();
    MPI_Finalize();
    return me == 0 ? rc : 0;
}
