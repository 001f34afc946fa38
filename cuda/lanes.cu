/*
 * lanes.cu: ops.h's lanes, streams beside the compute stream for work
 * that is independent from item to item (the experts' products).
 *
 * One expert's product is often a fraction of the GPU (a down projection
 * of 1024 rows is 8 x 8 output tiles of 128 x 256 for 132 SMs; an
 * expert with few rows, fewer), and the experts' products are
 * independent, so several run at once.  Lane 0 is the compute stream;
 * the others wait for it when forked, and it waits for them when joined.
 * A lane is used by pointing the state's stream (and cuBLASLt workspace)
 * at it: every op enqueues on gl_cuda_st(d)->stream as it finds it, so
 * the ops need no stream argument.  Each lane has its own cuBLASLt
 * workspace (products running at once may not share one).
 *
 * GRIDLM_MOE_LANES=1 .. GL_LANES_MAX sets how many lanes a fork grants,
 * default GL_LANES_MAX; read at each fork.
 */
#include <config.h>

#include <stdlib.h>

#include "gl_cuda.h"

static int lanes_wanted(void)
{
    const char *e = getenv("GRIDLM_MOE_LANES");
    if (!e || !*e)
        return GL_LANES_MAX;
    char *end;
    long v = strtol(e, &end, 10);
    if (*end || v < 1 || v > GL_LANES_MAX)
        gl_die("GRIDLM_MOE_LANES=%s: give a number of streams for the "
               "experts' products from 1 to %d, or leave it unset", e,
               GL_LANES_MAX);
    return (int)v;
}

/* Lanes 1 .. n-1 (created on first use) wait for the compute stream. */
int gl_cuda_lanes_fork(gl_dev *d, int n)
{
    gl_cuda_state *st = gl_cuda_st(d);
    int w = lanes_wanted();
    if (n > w)
        n = w;
    if (n < 1)
        n = 1;
    st->lane_main = st->stream;
    st->lane_main_ws = st->lt_workspace;
    if (n < 2)
        return 1;
    if (!st->lane_ev[0])
        GL_CUDA_CHECK(cudaEventCreateWithFlags(&st->lane_ev[0],
                                               cudaEventDisableTiming));
    GL_CUDA_CHECK(cudaEventRecord(st->lane_ev[0], st->stream));
    for (int i = 1; i < n; i++) {
        if (!st->lane[i]) {
            GL_CUDA_CHECK(cudaStreamCreateWithFlags(&st->lane[i],
                                                    cudaStreamNonBlocking));
            GL_CUDA_CHECK(cudaEventCreateWithFlags(&st->lane_ev[i],
                                                   cudaEventDisableTiming));
            st->lane_ws[i] = gl_cuda_malloc_counted(
                    d, st->lt_workspace_bytes, "a cuBLASLt workspace of a lane");
        }
        GL_CUDA_CHECK(cudaStreamWaitEvent(st->lane[i], st->lane_ev[0], 0));
    }
    return n;
}

/* Ops enqueued from now on go to lane i. */
void gl_cuda_lane_use(gl_dev *d, int i)
{
    gl_cuda_state *st = gl_cuda_st(d);
    if (i < 0 || i >= GL_LANES_MAX || (i && !st->lane[i]))
        gl_die("internal error: lane %d used before lanes_fork granted it", i);
    st->stream = i ? st->lane[i] : st->lane_main;
    st->lt_workspace = i ? st->lane_ws[i] : st->lane_main_ws;
    st->lane_cur = i;
}

/* Back on the compute stream, which waits for lanes 1 .. n-1. */
void gl_cuda_lanes_join(gl_dev *d, int n)
{
    gl_cuda_state *st = gl_cuda_st(d);
    gl_cuda_lane_use(d, 0);
    for (int i = 1; i < n; i++) {
        GL_CUDA_CHECK(cudaEventRecord(st->lane_ev[i], st->lane[i]));
        GL_CUDA_CHECK(cudaStreamWaitEvent(st->stream, st->lane_ev[i], 0));
    }
}
