/*
 * gpu-util.c: helpers shared by the GPU test programs; see gpu-util.h for
 * the contract.
 */
#include <config.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "device/ops.h"
#include "gpu-util.h"
#include "tap.h"

gl_dev *G, *C;

/* ---- numbers ---- */

/* xorshift64; gpu_seed() sets it before the first draw. */
static uint64_t rng_state = 0x2545F4914F6CDD1Dull;

void gpu_seed(uint64_t seed)
{
    rng_state = seed;
}

double urand(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (rng_state >> 11) * (1.0 / 9007199254740992.0);
}

uint16_t f2bf(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return 0x7fc0;
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

float bf2f(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float round_bf(float f)
{
    return bf2f(f2bf(f));
}

float *rand_bf(size_t n, float lo, float hi)
{
    float *x = gl_malloc(n * sizeof *x + 1);
    for (size_t i = 0; i < n; i++)
        x[i] = round_bf(lo + (float)urand() * (hi - lo));
    return x;
}

/* ---- buffers on both devices ---- */

void *g_act(const float *h, size_t n)
{
    uint16_t *b = gl_malloc(n * 2 + 2);
    for (size_t i = 0; i < n; i++)
        b[i] = f2bf(h[i]);
    void *p = G->ops->alloc(G, n * 2);
    G->ops->upload(G, p, b, n * 2);
    G->ops->sync(G);
    free(b);
    return p;
}

float *g_f32(const float *h, size_t n)
{
    float *p = G->ops->alloc(G, n * 4);
    if (h)
        G->ops->upload(G, p, h, n * 4);
    G->ops->sync(G);
    return p;
}

float *c_buf(const float *h, size_t n)
{
    float *p = C->ops->alloc(C, n * 4);
    if (h)
        memcpy(p, h, n * 4);
    return p;
}

void g_poison(void *p, size_t bytes)
{
    void *h = gl_malloc(bytes + 1);
    memset(h, 0xff, bytes);
    G->ops->upload(G, p, h, bytes);
    G->ops->sync(G);
    free(h);
}

float *dl_act(const void *p, size_t n)
{
    uint16_t *b = gl_malloc(n * 2 + 2);
    G->ops->download(G, b, p, n * 2);
    float *f = gl_malloc(n * 4 + 4);
    for (size_t i = 0; i < n; i++)
        f[i] = bf2f(b[i]);
    free(b);
    return f;
}

float *dl_f32(const float *p, size_t n)
{
    float *f = gl_malloc(n * 4 + 4);
    G->ops->download(G, f, p, n * 4);
    return f;
}

void free_bufs(void *const *dev, void *const *host)
{
    for (; dev && *dev; dev++)
        G->ops->free(G, *dev);
    for (; host && *host; host++)
        free(*host);
}

/* ---- comparison ---- */

int cmp2d_env(const char *verbose_env, const char *what, const float *got,
              long ldg, const float *want, long ldw, long rows, long cols,
              double rtol, double atol, double floor)
{
    double maxref = 0, worst = 0, sq = 0, sqr = 0;
    long bad = 0, nan = 0, wi = -1;
    for (long r = 0; r < rows; r++)
        for (long c = 0; c < cols; c++) {
            double w = want[r * ldw + c];
            if (fabs(w) > maxref)
                maxref = fabs(w);
        }
    double scale = maxref > 0 ? maxref : 1.0;
    if (scale < floor)
        scale = floor;
    for (long r = 0; r < rows; r++)
        for (long c = 0; c < cols; c++) {
            double g = got[r * ldg + c], w = want[r * ldw + c];
            if (isnan(g) != isnan(w)) {
                nan++;
                continue;
            }
            double e = fabs(g - w);
            sq += e * e;
            sqr += w * w;
            double lim = atol * scale + rtol * fabs(w);
            if (e > lim) {
                bad++;
                if (e - lim > worst) {
                    worst = e - lim;
                    wi = r * cols + c;
                }
            }
        }
    int pass = ok(bad == 0 && nan == 0, "%s", what);
    double rel = sqr > 0 ? sqrt(sq / sqr) : sqrt(sq);
    if (!pass) {
        diag("  %ld elements out of tolerance, %ld NaN/unwritten (max|ref| "
             "%.4g, relative rms error %.3g)", bad, nan, maxref, rel);
        if (wi >= 0) {
            long r = wi / cols, c = wi % cols;
            diag("  worst at row %ld col %ld: got %.6g want %.6g", r, c,
                 got[r * ldg + c], want[r * ldw + c]);
        }
    } else if (getenv(verbose_env))
        diag("  max|ref| %.4g, relative rms error %.3g", maxref, rel);
    return pass;
}
