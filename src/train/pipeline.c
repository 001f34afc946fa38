/*
 * pipeline.c: the schedule runner (pipeline.h).
 *
 * Per local chunk it counts forwards, backwards, inputs received and
 * output gradients received; since each of them takes the micro-batches
 * in order, the counts say which micro-batch (and so which activation
 * slot, j mod slots) every step and every message is about.
 *
 * The exchanges run on the device's point-to-point stream (ops.h), each
 * round after what the compute stream has enqueued before it, so the
 * compute stream goes on with the next forward or backward while a send
 * travels.  It waits (settle) only before a step on a (chunk, slot) whose
 * buffers an exchange in flight still reads or writes: a received input
 * or output gradient, or an output about to be overwritten.  On the CPU
 * every exchange completes at once and the waits cost nothing.
 */
#include <config.h>

#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "train/pipeline.h"

/* Which (chunk, slot) buffers an exchange still in flight on the
 * point-to-point stream may read (a send) or write (a receive). */
typedef struct {
    gl_dev *d;
    int maxslots, nchunks;
    unsigned char *busy;        /* [nchunks * maxslots] */
} p2p_track;

static void mark(p2p_track *t, int c, int slot)
{
    t->busy[c * t->maxslots + slot] = 1;
}

/* Before a forward or backward on (c, slot): if an exchange in flight
 * touches its buffers, the compute stream waits for it -- and so for
 * every exchange enqueued before it. */
static void settle(p2p_track *t, int c, int slot)
{
    if (!t->busy[c * t->maxslots + slot])
        return;
    t->d->ops->compute_wait_p2p(t->d);
    memset(t->busy, 0, (size_t)t->nchunks * (size_t)t->maxslots);
}

void gl_pipeline_run(const gl_sched *s, gl_model *m, gl_comm *pp, const gl_mb *mbs,
                     float *loss_acc)
{
    int V = s->vpp;
    int *fw = gl_calloc((size_t)V, sizeof(int)), *bw = gl_calloc((size_t)V, sizeof(int));
    int *rf = gl_calloc((size_t)V, sizeof(int)), *rb = gl_calloc((size_t)V, sizeof(int));
    const gl_model_dims *dm = &m->plan->dm;
    size_t count = (size_t)dm->nl * (size_t)dm->h;
    gl_dev *d = m->d;
    gl_dtype t = d->act;
    void *stream = d->p2p_stream;
    int next = (s->stage + 1) % s->pp, prev = (s->stage + s->pp - 1) % s->pp;
    p2p_track tr = { d, 1, V, NULL };
    for (int c = 0; c < V; c++)
        if (s->slots[c] > tr.maxslots)
            tr.maxslots = s->slots[c];
    tr.busy = gl_calloc((size_t)V * (size_t)tr.maxslots, 1);

    for (int i = 0; i < s->nsteps; i++) {
        const gl_step *st = &s->step[i];
        int c = st->chunk, j;
        switch (st->kind) {
        case GL_STEP_FWD:
            j = fw[c]++;
            settle(&tr, c, j % s->slots[c]);
            m->grad_final = j == s->M - 1;      /* the head's gradients (model.h) */
            gl_model_forward(m, c, j % s->slots[c], &mbs[j], loss_acc);
            m->grad_final = 0;
            break;
        case GL_STEP_BWD:
            j = bw[c]++;
            settle(&tr, c, j % s->slots[c]);
            m->grad_final = j == s->M - 1;
            gl_model_backward(m, c, j % s->slots[c], &mbs[j]);
            m->grad_final = 0;
            break;
        case GL_STEP_COMM:
            /* after what the compute stream has enqueued: the outputs
             * and gradients sent, the last reads of the buffers received */
            d->ops->p2p_wait_compute(d);
            gl_comm_group_start();
            if (st->send_fwd >= 0) {
                c = st->send_fwd;
                j = (fw[c] - 1) % s->slots[c];
                gl_send(pp, gl_model_output(m, c, j), count, t, next, stream);
                mark(&tr, c, j);
            }
            if (st->send_bwd >= 0) {
                c = st->send_bwd;
                j = (bw[c] - 1) % s->slots[c];
                gl_send(pp, gl_model_dgrad(m, c, j), count, t, prev, stream);
                mark(&tr, c, j);
            }
            if (st->recv_fwd >= 0) {
                c = st->recv_fwd;
                j = rf[c]++ % s->slots[c];
                gl_recv(pp, gl_model_input(m, c, j), count, t, prev, stream);
                mark(&tr, c, j);
            }
            if (st->recv_bwd >= 0) {
                c = st->recv_bwd;
                j = rb[c]++ % s->slots[c];
                gl_recv(pp, gl_model_dgrad(m, c, j), count, t, next, stream);
                mark(&tr, c, j);
            }
            gl_comm_group_end();
            break;
        }
    }
    d->ops->compute_wait_p2p(d);     /* nothing in flight past the schedule */
    free(tr.busy);
    free(fw);
    free(bw);
    free(rf);
    free(rb);
}

void gl_pipeline_forward_only(gl_model *m, gl_comm *pp, const gl_mb *mbs, int M,
                              float *loss_acc)
{
    const gl_model_plan *p = m->plan;
    const gl_model_dims *dm = &p->dm;
    size_t count = (size_t)dm->nl * (size_t)dm->h;
    gl_dtype t = m->d->act;
    void *stream = m->d->stream;
    int npp = dm->pp, stage = dm->pp_rank;
    int next = (stage + 1) % npp, prev = (stage + npp - 1) % npp;
    int last_mc = npp * p->nchunks - 1;

    for (int j = 0; j < M; j++)
        for (int c = 0; c < p->nchunks; c++) {
            int mc = p->chunk[c].mc;
            if (mc > 0) {
                gl_comm_group_start();
                gl_recv(pp, gl_model_input(m, c, 0), count, t, prev, stream);
                gl_comm_group_end();
            }
            gl_model_forward_only(m, c, 0, &mbs[j], loss_acc);
            if (mc < last_mc) {
                gl_comm_group_start();
                gl_send(pp, gl_model_output(m, c, 0), count, t, next, stream);
                gl_comm_group_end();
            }
        }
}
