/*
 * comm_nccl.c: the NCCL back end of comm.h (built with CUDA only).
 *
 * Buffers are device memory of the GPU this rank chose; every call is
 * enqueued on the CUDA stream given (NULL: the default stream) and returns
 * without waiting.  gl_comm_group_start/end map to ncclGroupStart/End, so
 * sends and receives inside them are fused into one launch.
 *
 * Every NCCL and CUDA call is checked; a failure stops the job with a line
 * naming the call, the group, this rank's place in it and NCCL's own
 * explanation (gl_die adds world rank and host).  gl_comm_barrier waits
 * for the streams this group used while watching for asynchronous NCCL
 * errors, and gives up after GRIDLM_COMM_TIMEOUT seconds (default 600) so
 * that a dead or hung peer stops the job instead of hanging it.
 */
#include <config.h>
#include "comm/comm_impl.h"
#include "base/log.h"

#include "comm/nccl_inc.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_STREAMS 16

typedef struct {
    ncclComm_t nc;
    cudaStream_t streams[MAX_STREAMS];   /* used since the last barrier */
    int nstreams;
    cudaStream_t side;     /* gl_all_to_allv_start's, made at its first use */
} nccl_impl;

static int live_comms;     /* NCCL communicators alive in this process */
static int nccl_grouped;   /* ncclGroupStart was called by the bracket */

static ncclComm_t nc_of(const gl_comm *c) { return ((nccl_impl *)c->impl)->nc; }

static void check_nccl(ncclResult_t rc, const char *call, const gl_comm *c, int peer)
{
    if (rc == ncclSuccess || rc == ncclInProgress)
        return;
    const char *last = c ? ncclGetLastError(nc_of(c)) : ncclGetLastError(NULL);
    if (!c)
        gl_die("%s failed: %s%s%s", call, ncclGetErrorString(rc),
               last && *last ? ": " : "", last ? last : "");
    if (peer >= 0)
        gl_die("%s on group '%s' (member %d of %d, peer %d) failed: %s%s%s",
               call, c->name, c->rank, c->size, peer, ncclGetErrorString(rc),
               last && *last ? ": " : "", last ? last : "");
    gl_die("%s on group '%s' (member %d of %d) failed: %s%s%s",
           call, c->name, c->rank, c->size, ncclGetErrorString(rc),
           last && *last ? ": " : "", last ? last : "");
}

static void check_cuda(cudaError_t rc, const char *call, const gl_comm *c)
{
    if (rc != cudaSuccess)
        gl_die("%s for group '%s' (member %d of %d) failed: %s (%s)",
               call, c->name, c->rank, c->size, cudaGetErrorName(rc),
               cudaGetErrorString(rc));
}

static ncclDataType_t nccl_type(gl_dtype t)
{
    switch (t) {
    case GL_DT_F32:  return ncclFloat32;
    case GL_DT_BF16: return ncclBfloat16;
    case GL_DT_F64:  return ncclFloat64;
    case GL_DT_I32:  return ncclInt32;
    case GL_DT_I64:  return ncclInt64;
    default:         return ncclUint8;
    }
}

static ncclRedOp_t nccl_op(gl_redop op)
{
    return op == GL_OP_SUM ? ncclSum : op == GL_OP_MAX ? ncclMax : ncclMin;
}

/* Wait for one stream, polling so that an asynchronous NCCL error or a
 * peer that never arrives ends the job with a message. */
static void wait_stream(gl_comm *c, cudaStream_t s)
{
    static double timeout = -1;
    if (timeout < 0) {
        const char *e = getenv("GRIDLM_COMM_TIMEOUT");
        timeout = e && atof(e) > 0 ? atof(e) : 600.0;
    }
    double start = gl_now();
    struct timespec pause = { 0, 50 * 1000 };
    for (;;) {
        cudaError_t q = cudaStreamQuery(s);
        if (q == cudaSuccess)
            return;
        if (q != cudaErrorNotReady)
            check_cuda(q, "cudaStreamQuery", c);
        ncclResult_t async;
        check_nccl(ncclCommGetAsyncError(nc_of(c), &async), "ncclCommGetAsyncError", c, -1);
        check_nccl(async, "an NCCL operation (asynchronous error)", c, -1);
        if (gl_now() - start > timeout) {
            ncclCommAbort(nc_of(c));
            ((nccl_impl *)c->impl)->nc = NULL;
            gl_die("group '%s' (member %d of %d): NCCL operations did not "
                   "finish in %.0f s: a peer has stopped or hangs; see the "
                   "other ranks' errors, or raise GRIDLM_COMM_TIMEOUT",
                   c->name, c->rank, c->size, timeout);
        }
        nanosleep(&pause, NULL);
    }
}

/* Remember the stream for gl_comm_barrier. */
static void used(gl_comm *c, void *stream)
{
    nccl_impl *im = c->impl;
    cudaStream_t s = (cudaStream_t)stream;
    for (int i = 0; i < im->nstreams; i++)
        if (im->streams[i] == s)
            return;
    if (im->nstreams == MAX_STREAMS) {
        /* Too many to track: drain them now, which keeps the promise. */
        gl_comm_wait_begin(c, "the group's NCCL operations (stream wait)", gl_comm_seq(c), -1);
        for (int i = 0; i < im->nstreams; i++)
            wait_stream(c, im->streams[i]);
        gl_comm_wait_end();
        im->nstreams = 0;
    }
    im->streams[im->nstreams++] = s;
}

static void nccl_all_reduce(gl_comm *c, const void *send, void *recv, size_t count,
                            gl_dtype t, gl_redop op, void *stream)
{
    check_nccl(ncclAllReduce(send, recv, count, nccl_type(t), nccl_op(op), nc_of(c),
                             (cudaStream_t)stream), "ncclAllReduce", c, -1);
    used(c, stream);
}

static void nccl_reduce_scatter(gl_comm *c, const void *send, void *recv,
                                size_t recv_count, gl_dtype t, gl_redop op,
                                void *stream)
{
    check_nccl(ncclReduceScatter(send, recv, recv_count, nccl_type(t), nccl_op(op),
                                 nc_of(c), (cudaStream_t)stream),
               "ncclReduceScatter", c, -1);
    used(c, stream);
}

static void nccl_all_gather(gl_comm *c, const void *send, void *recv,
                            size_t send_count, gl_dtype t, void *stream)
{
    check_nccl(ncclAllGather(send, recv, send_count, nccl_type(t), nc_of(c),
                             (cudaStream_t)stream), "ncclAllGather", c, -1);
    used(c, stream);
}

static void nccl_reduce(gl_comm *c, const void *send, void *recv, size_t count,
                        gl_dtype t, gl_redop op, int root, void *stream)
{
    /* ncclReduce ignores recvbuff off the root; pass the send buffer there,
     * never NULL, so no rank hands NCCL an invalid pointer */
    void *r = c->rank == root ? recv : (void *)send;
    check_nccl(ncclReduce(send, r, count, nccl_type(t), nccl_op(op), root, nc_of(c),
                          (cudaStream_t)stream), "ncclReduce", c, root);
    used(c, stream);
}

static void nccl_broadcast(gl_comm *c, void *buf, size_t count, gl_dtype t,
                           int root, void *stream)
{
    check_nccl(ncclBroadcast(buf, buf, count, nccl_type(t), root, nc_of(c),
                             (cudaStream_t)stream), "ncclBroadcast", c, root);
    used(c, stream);
}

/* One NCCL group of a send and a receive per member with a non-empty
 * block (NCCL has no all-to-all of its own).  Inside an open
 * gl_comm_group_start bracket NCCL nests the group into it. */
static void nccl_all_to_allv(gl_comm *c, const void *send, const size_t *send_counts,
                             const size_t *send_displs, void *recv,
                             const size_t *recv_counts, const size_t *recv_displs,
                             gl_dtype t, void *stream)
{
    size_t esz = gl_dtype_size(t);
    cudaStream_t s = (cudaStream_t)stream;
    check_nccl(ncclGroupStart(), "ncclGroupStart (all_to_all)", c, -1);
    for (int j = 0; j < c->size; j++) {
        if (send_counts[j])
            check_nccl(ncclSend((const char *)send + send_displs[j] * esz,
                                send_counts[j], nccl_type(t), j, nc_of(c), s),
                       "ncclSend (all_to_all)", c, j);
        if (recv_counts[j])
            check_nccl(ncclRecv((char *)recv + recv_displs[j] * esz,
                                recv_counts[j], nccl_type(t), j, nc_of(c), s),
                       "ncclRecv (all_to_all)", c, j);
    }
    check_nccl(ncclGroupEnd(), "ncclGroupEnd (all_to_all)", c, -1);
    used(c, stream);
}

/* The exchange on the group's side stream, after what `stream` holds so
 * far (an event); r->done is recorded after it, for the wait. */
static void nccl_all_to_allv_start(gl_comm *c, const void *send, const size_t *send_counts,
                                   const size_t *send_displs, void *recv,
                                   const size_t *recv_counts, const size_t *recv_displs,
                                   gl_dtype t, void *stream, gl_comm_req *r)
{
    nccl_impl *im = c->impl;
    if (!im->side)
        check_cuda(cudaStreamCreateWithFlags(&im->side, cudaStreamNonBlocking),
                   "cudaStreamCreateWithFlags (all_to_allv_start)", c);
    cudaEvent_t before, done;
    check_cuda(cudaEventCreateWithFlags(&before, cudaEventDisableTiming),
               "cudaEventCreateWithFlags (all_to_allv_start)", c);
    check_cuda(cudaEventCreateWithFlags(&done, cudaEventDisableTiming),
               "cudaEventCreateWithFlags (all_to_allv_start)", c);
    check_cuda(cudaEventRecord(before, (cudaStream_t)stream), "cudaEventRecord", c);
    check_cuda(cudaStreamWaitEvent(im->side, before, 0), "cudaStreamWaitEvent", c);
    check_cuda(cudaEventDestroy(before), "cudaEventDestroy", c);
    nccl_all_to_allv(c, send, send_counts, send_displs, recv, recv_counts, recv_displs, t,
                     im->side);
    check_cuda(cudaEventRecord(done, im->side), "cudaEventRecord", c);
    r->done = done;
    r->stream = stream;
}

/* The stream given to the start waits for the exchange (not the host). */
static void nccl_req_wait(gl_comm_req *r)
{
    cudaEvent_t done = (cudaEvent_t)r->done;
    check_cuda(cudaStreamWaitEvent((cudaStream_t)r->stream, done, 0), "cudaStreamWaitEvent",
               r->c);
    check_cuda(cudaEventDestroy(done), "cudaEventDestroy", r->c);
}

static void nccl_send(gl_comm *c, const void *buf, size_t count, gl_dtype t,
                      int peer, void *stream)
{
    check_nccl(ncclSend(buf, count, nccl_type(t), peer, nc_of(c), (cudaStream_t)stream),
               "ncclSend", c, peer);
    used(c, stream);
}

static void nccl_recv(gl_comm *c, void *buf, size_t count, gl_dtype t,
                      int peer, void *stream)
{
    check_nccl(ncclRecv(buf, count, nccl_type(t), peer, nc_of(c), (cudaStream_t)stream),
               "ncclRecv", c, peer);
    used(c, stream);
}

static void nccl_barrier(gl_comm *c)
{
    nccl_impl *im = c->impl;
    gl_comm_wait_begin(c, "the group's NCCL operations (stream wait)", gl_comm_seq(c), -1);
    for (int i = 0; i < im->nstreams; i++)
        wait_stream(c, im->streams[i]);
    gl_comm_wait_end();
    im->nstreams = 0;
}

static void nccl_free_impl(gl_comm *c)
{
    nccl_impl *im = c->impl;
    /* Finalize waits for what is still queued (the streams may be gone
     * already, so they are not waited on here); then the resources go. */
    if (im->nc) {
        check_nccl(ncclCommFinalize(im->nc), "ncclCommFinalize", c, -1);
        check_nccl(ncclCommDestroy(im->nc), "ncclCommDestroy", c, -1);
    }
    if (im->side)
        cudaStreamDestroy(im->side);
    free(im);
    live_comms--;
}

void gl_comm_nccl_group_start(void)
{
    nccl_grouped = live_comms > 0;
    if (nccl_grouped)
        check_nccl(ncclGroupStart(), "ncclGroupStart", NULL, -1);
}

void gl_comm_nccl_group_end(void)
{
    if (nccl_grouped)
        check_nccl(ncclGroupEnd(),
                   "ncclGroupEnd (the sends and receives of one group)", NULL, -1);
    nccl_grouped = 0;
}

static gl_comm *nccl_split(gl_comm *parent, MPI_Comm mc, int color, int key,
                           const char *name);

static const gl_comm_vt nccl_vt = {
    .all_reduce = nccl_all_reduce,
    .reduce_scatter = nccl_reduce_scatter,
    .all_gather = nccl_all_gather,
    .reduce = nccl_reduce,
    .broadcast = nccl_broadcast,
    .all_to_allv = nccl_all_to_allv,
    .all_to_allv_start = nccl_all_to_allv_start,
    .req_wait = nccl_req_wait,
    .send = nccl_send,
    .recv = nccl_recv,
    .barrier = nccl_barrier,
    .free_impl = nccl_free_impl,
    .split = nccl_split,
};

/* A group over the NCCL communicator nc (owned from now on: freeing the
 * group destroys it) whose ranks are those of mc in the same order (mc is
 * duplicated).  Dies when they disagree. */
static gl_comm *nccl_group(ncclComm_t nc, MPI_Comm mc, const char *name)
{
    gl_comm *c = gl_comm_alloc(mc, name, GL_COMM_NCCL, &nccl_vt);
    nccl_impl *im = gl_calloc(1, sizeof *im);
    im->nc = nc;
    c->impl = im;
    live_comms++;
    int n = 0, r = -1;
    check_nccl(ncclCommCount(im->nc, &n), "ncclCommCount", c, -1);
    check_nccl(ncclCommUserRank(im->nc, &r), "ncclCommUserRank", c, -1);
    if (n != c->size || r != c->rank)
        gl_die("group '%s': the NCCL communicator has rank %d of %d but the MPI "
               "one rank %d of %d: they must be split with the same colours "
               "and keys", c->name, r, n, c->rank, c->size);
    return c;
}

/* A failure while a group is being made (no gl_comm to name yet). */
static void check_make(ncclResult_t rc, const char *call, const char *group)
{
    if (rc != ncclSuccess)
        gl_die("%s for group '%s' failed: %s: %s", call, group,
               ncclGetErrorString(rc), ncclGetLastError(NULL));
}

/* World rank 0 makes the unique id, share carries it, every rank joins. */
gl_comm *gl_comm_nccl_world(gl_comm_share_fn share, void *ctx)
{
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    ncclUniqueId id;
    ncclComm_t nc = NULL;
    memset(&id, 0, sizeof id);
    if (rank == 0)
        check_make(ncclGetUniqueId(&id), "ncclGetUniqueId", "world");
    if (share)
        share(ctx, &id, sizeof id);
    else
        MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    check_make(ncclCommInitRank(&nc, size, id, rank), "ncclCommInitRank", "world");
    return nccl_group(nc, MPI_COMM_WORLD, "world");
}

/* ncclCommSplit with the colour and key of the MPI split (every member of
 * the parent calls it, members of no group with NCCL_SPLIT_NOCOLOR). */
static gl_comm *nccl_split(gl_comm *parent, MPI_Comm mc, int color, int key,
                           const char *name)
{
    ncclComm_t sub = NULL;
    check_make(ncclCommSplit(nc_of(parent), color >= 0 ? color : NCCL_SPLIT_NOCOLOR,
                             key, &sub, NULL), "ncclCommSplit", name);
    return color >= 0 ? nccl_group(sub, mc, name) : NULL;
}
