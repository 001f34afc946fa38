/*
 * gpu-trace.c: where a GPU program's time goes, kernel by kernel, and how
 * long the GPU sat idle, from CUPTI's activity records.  A library that
 * the CUDA driver loads into any program when CUDA_INJECTION64_PATH names
 * it: the program is not changed, and nothing is timed from the host.
 * (GRIDLM_PROFILE=1 brackets each op with events instead, which counts a
 * host stall inside an op as the op's time.)
 *
 * Build (CUPTI comes with the CUDA toolkit):
 *   cc -O2 -Wall -Wextra -shared -fPIC -o gpu-trace.so benchmarks/gpu-trace.c \
 *      -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcupti -lpthread
 * Use:
 *   CUDA_INJECTION64_PATH=$PWD/gpu-trace.so GPU_TRACE_LAST_MS=700 \
 *      gridlm-train ...
 *
 * At exit it prints to standard error, over the window of the last
 * GPU_TRACE_LAST_MS milliseconds of GPU activity (default, and when the
 * run is shorter: all of it; the last iterations of a training run leave
 * out its first-use costs):
 *   - the window, the time some kernel, copy or memset ran (the union of
 *     their intervals, so work overlapping on several streams counts
 *     once) and the idle rest, with the gaps of 20 us or more between
 *     busy stretches, counted, summed and the longest given;
 *   - the GPU_TRACE_TOP (default 30) kernels with the most time inside
 *     the window, with their calls and mean; kernels running side by side
 *     each count in full, so the rows can add up to more than the busy
 *     time.
 * Names are the compiler's (mangled where the kernel is C++), cut to 90
 * characters.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cupti.h>

#define BUF_BYTES (8u << 20)    /* one activity buffer */
#define NAME_MAX_SHOWN 90
#define GAP_NS 20000            /* an idle stretch reported as a gap */

typedef struct {
    uint64_t start, end;
    int name;                   /* index into names */
} interval;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;  /* CUPTI's threads */
static int reported;            /* records after the report are dropped */
static interval *ivs;
static size_t niv, capiv;
static char **names;
static int nnames, capnames;

/* The index of a name, added at its first sight (a linear search from the
 * last hit: few distinct kernels, and a kernel's records come in runs). */
static int name_index(const char *s)
{
    static int last = -1;
    if (last >= 0 && !strcmp(names[last], s))
        return last;
    for (int i = 0; i < nnames; i++)
        if (!strcmp(names[i], s))
            return last = i;
    if (nnames == capnames) {
        capnames = capnames ? 2 * capnames : 256;
        names = realloc(names, (size_t)capnames * sizeof *names);
        if (!names)
            abort();
    }
    names[nnames] = strdup(s);
    return last = nnames++;
}

static void add(uint64_t start, uint64_t end, const char *name)
{
    if (end <= start)
        return;
    if (niv == capiv) {
        capiv = capiv ? 2 * capiv : 65536;
        ivs = realloc(ivs, capiv * sizeof *ivs);
        if (!ivs)
            abort();
    }
    ivs[niv++] = (interval){ start, end, name_index(name) };
}

static void CUPTIAPI buffer_requested(uint8_t **buf, size_t *size, size_t *max_records)
{
    *buf = aligned_alloc(8, BUF_BYTES);
    *size = *buf ? BUF_BYTES : 0;
    *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buf,
                                      size_t size, size_t valid)
{
    (void)ctx;
    (void)stream;
    (void)size;
    CUpti_Activity *r = NULL;
    pthread_mutex_lock(&lock);
    while (!reported && cuptiActivityGetNextRecord(buf, valid, &r) == CUPTI_SUCCESS) {
        if (r->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
            const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)r;
            add(k->start, k->end, k->name ? k->name : "(kernel without a name)");
        } else if (r->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
            const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)r;
            add(m->start, m->end, "(memcpy)");
        } else if (r->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
            const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)r;
            add(m->start, m->end, "(memset)");
        }
    }
    pthread_mutex_unlock(&lock);
    free(buf);
}

static int by_start(const void *a, const void *b)
{
    const interval *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

typedef struct {
    double ns;
    long calls;
    int name;
} row;

static int by_time(const void *a, const void *b)
{
    const row *x = a, *y = b;
    return x->ns > y->ns ? -1 : x->ns < y->ns;
}

static uint64_t clip_len(const interval *v, uint64_t w0, uint64_t w1)
{
    uint64_t s = v->start > w0 ? v->start : w0, e = v->end < w1 ? v->end : w1;
    return e > s ? e - s : 0;
}

static void report(void)
{
    cuptiActivityFlushAll(1);
    pthread_mutex_lock(&lock);
    if (reported) {                 /* the driver may call the injection twice */
        pthread_mutex_unlock(&lock);
        return;
    }
    reported = 1;                   /* a buffer delivered later is dropped */
    if (niv == 0) {
        fprintf(stderr, "gpu-trace: no GPU activity recorded\n");
        pthread_mutex_unlock(&lock);
        return;
    }
    qsort(ivs, niv, sizeof *ivs, by_start);
    uint64_t first = ivs[0].start, w1 = 0;
    for (size_t i = 0; i < niv; i++)
        if (ivs[i].end > w1)
            w1 = ivs[i].end;
    const char *e = getenv("GPU_TRACE_LAST_MS");
    uint64_t w0 = first;
    if (e && *e && atof(e) > 0 && (uint64_t)(atof(e) * 1e6) < w1 - first)
        w0 = w1 - (uint64_t)(atof(e) * 1e6);

    /* busy: the union of the intervals inside the window; gaps between */
    uint64_t busy = 0, cur_s = 0, cur_e = 0, gap_sum = 0, gap_max = 0;
    long ngaps = 0;
    int open = 0;
    for (size_t i = 0; i < niv; i++) {
        if (!clip_len(&ivs[i], w0, w1))
            continue;
        uint64_t s = ivs[i].start > w0 ? ivs[i].start : w0;
        uint64_t en = ivs[i].end < w1 ? ivs[i].end : w1;
        if (open && s <= cur_e) {
            if (en > cur_e)
                cur_e = en;
            continue;
        }
        if (open) {
            busy += cur_e - cur_s;
            uint64_t g = s - cur_e;
            if (g >= GAP_NS) {
                ngaps++;
                gap_sum += g;
                if (g > gap_max)
                    gap_max = g;
            }
        }
        cur_s = s;
        cur_e = en;
        open = 1;
    }
    if (open)
        busy += cur_e - cur_s;
    double win = (double)(w1 - w0);
    fprintf(stderr, "gpu-trace: window of %.3f ms (the last %s), busy %.3f ms (%.1f%%), "
            "idle %.3f ms; %ld gaps of %d us or more: %.3f ms, the longest %.3f ms\n",
            win / 1e6, w0 > first ? "part of the run" : "whole run", busy / 1e6,
            100.0 * busy / win, (win - busy) / 1e6, ngaps, GAP_NS / 1000, gap_sum / 1e6,
            gap_max / 1e6);

    row *rows = calloc((size_t)nnames, sizeof *rows);
    if (!rows)
        abort();
    for (int i = 0; i < nnames; i++)
        rows[i].name = i;
    for (size_t i = 0; i < niv; i++) {
        uint64_t c = clip_len(&ivs[i], w0, w1);
        if (c) {
            rows[ivs[i].name].ns += (double)c;
            rows[ivs[i].name].calls++;
        }
    }
    qsort(rows, (size_t)nnames, sizeof *rows, by_time);
    const char *t = getenv("GPU_TRACE_TOP");
    int top = t && atoi(t) > 0 ? atoi(t) : 30;
    fprintf(stderr, "gpu-trace: %8s %6s %5s %9s  kernel\n", "ms", "%", "calls", "mean us");
    for (int i = 0; i < nnames && i < top && rows[i].ns > 0; i++)
        fprintf(stderr, "gpu-trace: %8.3f %5.1f%% %5ld %9.1f  %.*s\n", rows[i].ns / 1e6,
                100.0 * rows[i].ns / win, rows[i].calls, rows[i].ns / 1e3 / rows[i].calls,
                NAME_MAX_SHOWN, names[rows[i].name]);
    free(rows);
    pthread_mutex_unlock(&lock);
}

/* Called by the CUDA driver (CUDA_INJECTION64_PATH) when it initializes. */
int InitializeInjection(void)
{
    if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET) != CUPTI_SUCCESS) {
        fprintf(stderr, "gpu-trace: CUPTI refused the activity records; no trace\n");
        return 1;
    }
    atexit(report);
    return 1;
}
