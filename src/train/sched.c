/*
 * sched.c: the 1F1B and interleaved pipeline schedules (sched.h).
 */
#include <config.h>

#include <stdlib.h>

#include "base/log.h"
#include "train/sched.h"

typedef struct {
    gl_sched *s;
    int cap;
} builder;

static void push(builder *b, gl_step st)
{
    gl_sched *s = b->s;
    if (s->nsteps == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 64;
        s->step = gl_realloc(s->step, (size_t)b->cap * sizeof *s->step);
    }
    s->step[s->nsteps++] = st;
}

static void fwd(builder *b, int c)
{
    push(b, (gl_step){ GL_STEP_FWD, c, -1, -1, -1, -1 });
}

static void bwd(builder *b, int c)
{
    push(b, (gl_step){ GL_STEP_BWD, c, -1, -1, -1, -1 });
}

/* A round; empty ones are dropped. */
static void comm(builder *b, int send_fwd, int send_bwd, int recv_fwd, int recv_bwd)
{
    if (send_fwd < 0 && send_bwd < 0 && recv_fwd < 0 && recv_bwd < 0)
        return;
    push(b, (gl_step){ GL_STEP_COMM, -1, send_fwd, send_bwd, recv_fwd, recv_bwd });
}

/* Megatron's forward_backward_pipelining_without_interleaving. */
static void build_1f1b(builder *b)
{
    int pp = b->s->pp, p = b->s->stage, M = b->s->M;
    int first = p == 0, last = p == pp - 1;
    int warmup = pp - p - 1 < M ? pp - p - 1 : M;
    int remaining = M - warmup;

    for (int i = 0; i < warmup; i++) {
        comm(b, -1, -1, first ? -1 : 0, -1);
        fwd(b, 0);
        comm(b, last ? -1 : 0, -1, -1, -1);
    }
    if (remaining > 0)
        comm(b, -1, -1, first ? -1 : 0, -1);
    for (int i = 0; i < remaining; i++) {
        fwd(b, 0);
        comm(b, last ? -1 : 0, -1, -1, last ? -1 : 0);      /* send fwd, recv bwd */
        bwd(b, 0);
        if (i == remaining - 1)
            comm(b, -1, first ? -1 : 0, -1, -1);
        else
            comm(b, -1, first ? -1 : 0, first ? -1 : 0, -1); /* send bwd, recv fwd */
    }
    for (int i = 0; i < warmup; i++) {
        comm(b, -1, -1, -1, last ? -1 : 0);
        bwd(b, 0);
        comm(b, -1, first ? -1 : 0, -1, -1);
    }
}

/* The local chunk of the k-th forward (or backward) of the interleaved
 * schedule: micro-batches go in groups of PP through chunk 0, then the
 * same group through chunk 1, ...; backwards visit the chunks in reverse. */
static int chunk_of(const gl_sched *s, int k, int forward)
{
    int g = s->pp * s->vpp;
    int in_group = ((k % g) + g) % g;     /* k may be negative: Python's % */
    int c = in_group / s->pp;
    return forward ? c : s->vpp - 1 - c;
}

/* Megatron's forward_backward_pipelining_with_interleaving. */
static void build_interleaved(builder *b)
{
    gl_sched *s = b->s;
    int pp = s->pp, p = s->stage, V = s->vpp, M = s->M;
    int first = p == 0, last = p == pp - 1;
    int total = M * V, warmup, all_warmup = 0;

    if (M == pp) {
        warmup = total;
        all_warmup = 1;
    } else {
        warmup = (pp - p - 1) * 2 + (V - 1) * pp;
        if (warmup > total)
            warmup = total;
    }
    int remaining = total - warmup;

    comm(b, -1, -1, first ? -1 : 0, -1);
    for (int k = 0; k < warmup; k++) {
        int c = chunk_of(s, k, 1);
        fwd(b, c);
        int next_c = chunk_of(s, k + 1, 1);
        int recv_prev = !(first && next_c == 0) && k != total - 1;
        int send = !(last && c == V - 1);
        if (k == warmup - 1 && !all_warmup) {
            int recv_next = !last;
            comm(b, send ? c : -1, -1, recv_prev ? next_c : -1, recv_next ? V - 1 : -1);
        } else {
            comm(b, send ? c : -1, -1, recv_prev ? next_c : -1, -1);
        }
    }
    for (int k = 0; k < remaining; k++) {
        int fk = k + warmup, bk = k;
        int cf = chunk_of(s, fk, 1), cb = chunk_of(s, bk, 0);
        fwd(b, cf);
        bwd(b, cb);
        int send_f = !(last && cf == V - 1);
        int send_b = !(first && cb == 0);
        int recv_prev = 1, next_f, recv_next = 1, next_b;
        if (first) {
            next_f = chunk_of(s, fk - (pp - 1), 1);
            if (next_f == V - 1)
                recv_prev = 0;
            next_f++;
        } else {
            next_f = chunk_of(s, fk + 1, 1);
        }
        if (last) {
            next_b = chunk_of(s, bk - (pp - 1), 0);
            if (next_b == 0)
                recv_next = 0;
            next_b--;
        } else {
            next_b = chunk_of(s, bk + 1, 0);
        }
        if (k == remaining - 1)
            recv_prev = 0;
        comm(b, send_f ? cf : -1, send_b ? cb : -1, recv_prev ? next_f : -1,
             recv_next ? next_b : -1);
    }
    if (all_warmup)
        comm(b, -1, -1, -1, last ? -1 : V - 1);
    for (int k = remaining; k < total; k++) {
        int cb = chunk_of(s, k, 0);
        bwd(b, cb);
        int next_b = chunk_of(s, k + 1, 0);
        int recv_next = !(last && next_b == V - 1) && k != total - 1;
        int send_b = !(first && cb == 0);
        comm(b, -1, send_b ? cb : -1, -1, recv_next ? next_b : -1);
    }
}

/* Walk the steps counting, per chunk, micro-batches whose activations are
 * held: from the receipt of their input (or their forward, when nothing
 * is received) to their backward. */
static void count_slots(gl_sched *s)
{
    int V = s->vpp;
    int *held = calloc((size_t)V, sizeof(int)), *fw = calloc((size_t)V, sizeof(int));
    int *rf = calloc((size_t)V, sizeof(int)), *bw = calloc((size_t)V, sizeof(int));
    s->slots = gl_calloc((size_t)V, sizeof(int));
    for (int i = 0; i < s->nsteps; i++) {
        const gl_step *st = &s->step[i];
        if (st->kind == GL_STEP_FWD)
            fw[st->chunk]++;
        else if (st->kind == GL_STEP_BWD)
            bw[st->chunk]++;
        else if (st->recv_fwd >= 0)
            rf[st->recv_fwd]++;
        for (int c = 0; c < V; c++) {
            held[c] = (rf[c] > fw[c] ? rf[c] : fw[c]) - bw[c];
            if (held[c] > s->slots[c])
                s->slots[c] = held[c];
        }
    }
    for (int c = 0; c < V; c++)
        if (s->slots[c] < 1)
            s->slots[c] = 1;
    free(held);
    free(fw);
    free(rf);
    free(bw);
}

gl_sched *gl_sched_build(int pp, int stage, int vpp, int M)
{
    if (pp < 1 || stage < 0 || stage >= pp || vpp < 1 || M < 1)
        gl_die("pipeline schedule: bad arguments pp %d stage %d vpp %d M %d",
               pp, stage, vpp, M);
    if (vpp > 1 && M % pp)
        gl_die_code(2, "the interleaved pipeline schedule needs the number of "
                    "micro-batches (%d) to be a multiple of "
                    "--pipeline-model-parallel-size %d: change --global-batch-size", M, pp);
    gl_sched *s = gl_calloc(1, sizeof *s);
    s->pp = pp;
    s->stage = stage;
    s->vpp = vpp;
    s->M = M;
    builder b = { s, 0 };
    if (pp == 1 && vpp == 1) {
        for (int i = 0; i < M; i++) {
            fwd(&b, 0);
            bwd(&b, 0);
        }
    } else if (vpp == 1) {
        build_1f1b(&b);
    } else {
        build_interleaved(&b);
    }
    count_slots(s);
    return s;
}

void gl_sched_free(gl_sched *s)
{
    if (!s)
        return;
    free(s->step);
    free(s->slots);
    free(s);
}
