/*
 * philox.c: base/philox.h against the published definition of
 * Philox-4x32-10 and the statistics a dropout mask must have.
 *
 *  - the known-answer vectors of Random123's kat_vectors (Salmon et al.,
 *    SC 2011) for philox4x32 with 10 rounds;
 *  - the threshold of p: floor(p 2^32), 0 for p = 0;
 *  - keep rates: over N = 2^20 elements with keep probability q, the kept
 *    count is Binomial(N, q); it must lie within 6 standard deviations
 *    sqrt(N q (1 - q)) of N q (a false alarm has probability < 2e-9, and
 *    the draws are fixed, so a pass is a pass for good);
 *  - neighbours and streams independent: pairs of neighbouring elements
 *    both kept at rate q^2, and two masks of different iterations, layers
 *    or sites agreeing at rate q^2 + (1 - q)^2, within the same 6 sigma.
 */
#include <config.h>

#include <math.h>
#include <stdint.h>

#include "base/philox.h"
#include "tap.h"

static void test_kat(void)
{
    static const struct {
        uint32_t c[4], k[2], want[4];
    } kat[] = {
        {{0, 0, 0, 0}, {0, 0},
         {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
         {0xffffffff, 0xffffffff},
         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
         {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (int t = 0; t < 3; t++) {
        uint32_t out[4];
        gl_philox4x32_10(out, kat[t].c, kat[t].k);
        ok(out[0] == kat[t].want[0] && out[1] == kat[t].want[1] &&
           out[2] == kat[t].want[2] && out[3] == kat[t].want[3],
           "philox4x32-10 known answer %d: %08x %08x %08x %08x", t, out[0],
           out[1], out[2], out[3]);
    }
    /* the mask's words are Philox of (e/4 lo, e/4 hi, iteration, stream)
     * under the key (seed lo, seed hi) */
    uint32_t w[4], c[4] = {0x89abcdef, 0x1234567, 77, 5 * 16 + 3},
                   k[2] = {0x9abcdef0, 0x12345678}, want[4];
    gl_dropout_words(w, 0x123456789abcdef0ull, 77, gl_dropout_stream(5, 3),
                     0x0123456789abcdefull);
    gl_philox4x32_10(want, c, k);
    ok(w[0] == want[0] && w[1] == want[1] && w[2] == want[2] && w[3] == want[3],
       "gl_dropout_words packs the group, iteration, stream and seed as documented");
}

static void test_threshold(void)
{
    is_int(gl_dropout_threshold(0), 0, "threshold of p = 0 is 0 (keep all)");
    is_int(gl_dropout_threshold(0.5f), 0x80000000ll, "threshold of p = 0.5 is 2^31");
    is_int(gl_dropout_threshold(0.1f), (long long)floor(0.1f * 4294967296.0),
           "threshold of p = 0.1 is floor(p 2^32)");
    ok(gl_dropout_threshold(0.99999f) < 0xffffffffu,
       "threshold below 2^32 - 1 for p < 1");
}

#define N (1 << 20)

/* |count - N r| <= 6 sqrt(N r (1 - r)). */
static int within(long count, double r, double *sigmas)
{
    double sd = sqrt(N * r * (1 - r));
    *sigmas = (count - N * r) / sd;
    return fabs(*sigmas) <= 6;
}

static int keep(uint32_t iter, uint32_t layer, uint32_t site, uint64_t e,
                uint32_t thr)
{
    return gl_dropout_keep(42, iter, gl_dropout_stream(layer, site), e, thr);
}

static void test_rates(float p)
{
    uint32_t thr = gl_dropout_threshold(p);
    double q = 1 - (double)thr / 4294967296.0, z;
    long kept = 0, pairs = 0, agree_it = 0, agree_layer = 0, agree_site = 0;
    for (uint64_t e = 0; e < N; e++) {
        int a = keep(7, 3, 1, e, thr);
        kept += a;
        pairs += a && keep(7, 3, 1, e + 1, thr);
        agree_it += a == keep(8, 3, 1, e, thr);
        agree_layer += a == keep(7, 4, 1, e, thr);
        agree_site += a == keep(7, 3, 2, e, thr);
    }
    int good = within(kept, q, &z);
    ok(good, "p = %g: %ld of %d kept, %.2f sigma from N (1 - p)", (double)p,
       kept, N, z);
    good = within(pairs, q * q, &z);
    ok(good, "p = %g: neighbours both kept at q^2 (%ld pairs, %.2f sigma)",
       (double)p, pairs, z);
    double agree = q * q + (1 - q) * (1 - q);
    good = within(agree_it, agree, &z);
    ok(good, "p = %g: another iteration's mask is independent (%.2f sigma)",
       (double)p, z);
    good = within(agree_layer, agree, &z);
    ok(good, "p = %g: another layer's mask is independent (%.2f sigma)",
       (double)p, z);
    good = within(agree_site, agree, &z);
    ok(good, "p = %g: another site's mask is independent (%.2f sigma)",
       (double)p, z);
}

int main(void)
{
    plan(NO_PLAN);
    test_kat();
    test_threshold();
    test_rates(0.1f);
    test_rates(0.5f);
    test_rates(0.9f);
    /* p = 0 keeps everything */
    int all = 1;
    for (uint64_t e = 0; e < 4096; e++)
        all &= keep(1, 0, 0, e, gl_dropout_threshold(0));
    ok(all, "p = 0 keeps every element");
    return done_testing();
}
