/*
 * batch.c: the mock batch source and the sampler's arithmetic (batch.h).
 */
#include <config.h>

#include <stdlib.h>

#include "base/log.h"
#include "train/batch.h"

typedef struct {
    uint64_t seed;
    long vocab;
} mock_state;

static void mock_batch(gl_batch_source *s, long first, int count, int32_t *tokens,
                       float *mask)
{
    mock_state *m = s->impl;
    int S = s->seq_length;
    for (int i = 0; i < count; i++) {
        gl_mock_sample(m->seed, first + i, S + 1, m->vocab, tokens + (size_t)i * (S + 1));
        for (int t = 0; t < S; t++)
            mask[(size_t)i * S + t] = 1.0f;
    }
}

static void mock_close(gl_batch_source *s)
{
    free(s->impl);
    free(s);
}

gl_batch_source *gl_batch_mock(const gl_config *c)
{
    if (c->vocab_size <= 0)
        gl_die_code(2, "--mock-data needs --vocab-size (or a --model preset) to draw tokens from");
    gl_batch_source *s = gl_calloc(1, sizeof *s);
    mock_state *m = gl_calloc(1, sizeof *m);
    m->seed = (uint64_t)(unsigned)c->seed;
    m->vocab = c->vocab_size;
    s->name = "mock";
    s->seq_length = c->seq_length;
    s->batch = mock_batch;
    s->close = mock_close;
    s->impl = m;
    return s;
}

static void loader_batch(gl_batch_source *s, long first, int count, int32_t *tokens,
                         float *mask)
{
    gl_loader_batch(s->impl, first, count, tokens, mask);
}

static void loader_close(gl_batch_source *s)
{
    gl_loader_close(s->impl);
    free(s);
}

gl_batch_source *gl_batch_loader(const gl_config *c, gl_loader *L)
{
    gl_batch_source *s = gl_calloc(1, sizeof *s);
    s->name = "loader";
    s->seq_length = c->seq_length;
    s->batch = loader_batch;
    s->close = loader_close;
    s->impl = L;
    return s;
}

long gl_batch_sample_index(const gl_config *c, long it, int j, int r, int b)
{
    long B = c->micro_batch_size, dp = c->data_parallel_size > 0 ? c->data_parallel_size : 1;
    return it * (long)c->global_batch_size + (long)j * B * dp + (long)r * B + b;
}

void gl_batch_close(gl_batch_source *s)
{
    if (s)
        s->close(s);
}
