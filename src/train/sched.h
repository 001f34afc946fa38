/*
 * sched.h: pipeline schedules as data.
 *
 * A schedule is the list of steps one pipeline stage runs for one
 * iteration of M micro-batches: forward or backward of one of its V local
 * chunks, and communication rounds with its neighbours.  Building it is
 * pure arithmetic (unit-tested by simulating every stage together,
 * t/train-sched.c); src/train/pipeline.c runs it.
 *
 * Chunk c of stage p is model chunk c PP + p.  Within a chunk, forwards
 * and backwards both take the micro-batches in order 0, 1, ..., M-1, so a
 * step need not name the micro-batch: the runner counts.  A chunk keeps a
 * micro-batch's activations from its forward (or from the moment its
 * input is received) until its backward; `slots[c]` is the most it ever
 * holds at once, so micro-batch j lives in slot j mod slots[c].
 *
 * Communication rounds follow Megatron-LM's schedules exactly, so that
 * every send meets its receive in the same order on both sides:
 *   - 1F1B (V = 1): min(PP - p - 1, M) warm-up forwards, then one forward
 *     and one backward at a time, then the remaining backwards;
 *   - interleaved (V > 1, M a multiple of PP): 2 (PP - p - 1) + (V - 1) PP
 *     warm-up forwards (all M V when M = PP), micro-batches taken in
 *     groups of PP per chunk, activations going round the ring of stages
 *     (stage PP-1's chunk c feeds stage 0's chunk c + 1).
 * Within a round the operations are posted in the order: send forward
 * (to the next stage), send backward (to the previous), receive forward
 * (from the previous), receive backward (from the next); both sides of a
 * pair therefore list the messages between them in the same order, even
 * when the previous and the next stage are the same rank (PP = 2).
 */
#ifndef GL_TRAIN_SCHED_H
#define GL_TRAIN_SCHED_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { GL_STEP_FWD = 0, GL_STEP_BWD, GL_STEP_COMM } gl_step_kind;

typedef struct {
    gl_step_kind kind;
    int chunk;          /* FWD/BWD: the local chunk */
    /* COMM: a local chunk for each direction, or -1 for none:
     *   send_fwd  the output of that chunk's latest forward -> next stage
     *   send_bwd  the input gradient of its latest backward -> previous
     *   recv_fwd  the input of that chunk's next micro-batch <- previous
     *   recv_bwd  the output gradient of its next micro-batch <- next */
    int send_fwd, send_bwd, recv_fwd, recv_bwd;
} gl_step;

typedef struct {
    int pp, stage, vpp, M;
    int nsteps;
    gl_step *step;
    int *slots;         /* [vpp] activation slots each chunk needs */
} gl_sched;

/* The schedule of stage `stage` of pp, with vpp chunks per stage and M
 * micro-batches.  Dies when V > 1 and M is not a multiple of PP. */
gl_sched *gl_sched_build(int pp, int stage, int vpp, int M);
void gl_sched_free(gl_sched *s);

#ifdef __cplusplus
}
#endif
#endif
