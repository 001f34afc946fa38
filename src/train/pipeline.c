/*
 * pipeline.c: the schedule runner (pipeline.h).
 *
 * Per local chunk it counts forwards, backwards, inputs received and
 * output gradients received; since each of them takes the micro-batches
 * in order, the counts say which micro-batch (and so which activation
 * slot, j mod slots) every step and every message is about.
 */
#include <config.h>

#include <stdlib.h>

#include "base/log.h"
#include "train/pipeline.h"

void gl_pipeline_run(const gl_sched *s, gl_model *m, gl_comm *pp, const gl_mb *mbs,
                     float *loss_acc)
{
    int V = s->vpp;
    int *fw = gl_calloc((size_t)V, sizeof(int)), *bw = gl_calloc((size_t)V, sizeof(int));
    int *rf = gl_calloc((size_t)V, sizeof(int)), *rb = gl_calloc((size_t)V, sizeof(int));
    const gl_model_dims *dm = &m->plan->dm;
    size_t count = (size_t)dm->nl * (size_t)dm->h;
    gl_dtype t = m->d->act;
    void *stream = m->d->stream;
    int next = (s->stage + 1) % s->pp, prev = (s->stage + s->pp - 1) % s->pp;

    for (int i = 0; i < s->nsteps; i++) {
        const gl_step *st = &s->step[i];
        int c = st->chunk, j;
        switch (st->kind) {
        case GL_STEP_FWD:
            j = fw[c]++;
            m->grad_final = j == s->M - 1;      /* the head's gradients (model.h) */
            gl_model_forward(m, c, j % s->slots[c], &mbs[j], loss_acc);
            m->grad_final = 0;
            break;
        case GL_STEP_BWD:
            j = bw[c]++;
            m->grad_final = j == s->M - 1;
            gl_model_backward(m, c, j % s->slots[c], &mbs[j]);
            m->grad_final = 0;
            break;
        case GL_STEP_COMM:
            gl_comm_group_start();
            if (st->send_fwd >= 0) {
                c = st->send_fwd;
                gl_send(pp, gl_model_output(m, c, (fw[c] - 1) % s->slots[c]), count, t,
                        next, stream);
            }
            if (st->send_bwd >= 0) {
                c = st->send_bwd;
                gl_send(pp, gl_model_dgrad(m, c, (bw[c] - 1) % s->slots[c]), count, t,
                        prev, stream);
            }
            if (st->recv_fwd >= 0) {
                c = st->recv_fwd;
                j = rf[c]++;
                gl_recv(pp, gl_model_input(m, c, j % s->slots[c]), count, t, prev, stream);
            }
            if (st->recv_bwd >= 0) {
                c = st->recv_bwd;
                j = rb[c]++;
                gl_recv(pp, gl_model_dgrad(m, c, j % s->slots[c]), count, t, next, stream);
            }
            gl_comm_group_end();
            break;
        }
    }
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
