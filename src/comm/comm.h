/*
 * comm.h: collectives and point-to-point on one group of ranks.
 *
 * A gl_comm is one group (the world, or one TP/CP/DP/PP group of the grid)
 * with one back end:
 *   - MPI:  buffers are host memory; calls complete before they return.
 *   - NCCL: buffers are device memory; calls are enqueued on the CUDA
 *           stream given (a cudaStream_t passed as void *) and never block
 *           the host.  The caller orders them with events.
 * The model and the schedules are written once against this header.
 *
 * Counts are in elements of the given dtype.  Every call is collective
 * over the group except send/recv.  A failure stops the job through
 * gl_die(), naming the call, the group and the peer.
 */
#ifndef GL_COMM_COMM_H
#define GL_COMM_COMM_H

#include <stddef.h>
#ifndef __CUDACC__
#include <mpi.h>     /* the MPI side of a group, at the end; nvcc compiles
                      * the CUDA sources without MPI's headers */
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    GL_DT_F32 = 0,
    GL_DT_BF16,
    GL_DT_F64,
    GL_DT_I32,
    GL_DT_I64,
    GL_DT_U8,
    GL_DT_COUNT
} gl_dtype;

size_t gl_dtype_size(gl_dtype t);
const char *gl_dtype_name(gl_dtype t);

typedef enum { GL_OP_SUM = 0, GL_OP_MAX, GL_OP_MIN } gl_redop;

typedef enum { GL_COMM_MPI = 0, GL_COMM_NCCL } gl_comm_kind;

typedef struct gl_comm gl_comm;

/* The name given at creation ("tp", "dp", ...), its size, this rank's
 * index in it, its back end, and the world rank of member i. */
const char *gl_comm_name(const gl_comm *c);
int gl_comm_size(const gl_comm *c);
int gl_comm_rank(const gl_comm *c);
gl_comm_kind gl_comm_kind_of(const gl_comm *c);
int gl_comm_world_rank(const gl_comm *c, int member);

/* recv = reduce(send) over the group; send == recv is in place. */
void gl_all_reduce(gl_comm *c, const void *send, void *recv, size_t count,
                   gl_dtype t, gl_redop op, void *stream);

/* recv on member root = reduce(send) over the group; the other members'
 * recv is not written (may be NULL).  send == recv is in place (the root's
 * buffer then holds the result; the others' are only read). */
void gl_reduce(gl_comm *c, const void *send, void *recv, size_t count, gl_dtype t,
               gl_redop op, int root, void *stream);

/* send holds size * recv_count elements; member i receives the reduced
 * i-th block of recv_count.  send == recv + i*recv_count ... is allowed
 * only where the back end allows in-place (pass distinct buffers). */
void gl_reduce_scatter(gl_comm *c, const void *send, void *recv,
                       size_t recv_count, gl_dtype t, gl_redop op, void *stream);

/* recv (size * send_count elements) = concatenation of every member's
 * send, in member order.  In place when send == recv + rank*send_count. */
void gl_all_gather(gl_comm *c, const void *send, void *recv, size_t send_count,
                   gl_dtype t, void *stream);

void gl_broadcast(gl_comm *c, void *buf, size_t count, gl_dtype t, int root,
                  void *stream);

/* All-to-all: member i's send block j lands as member j's recv block i.
 * gl_all_to_all: every block is count elements, in member order
 * (send and recv hold size * count).  gl_all_to_allv: this rank sends
 * send_counts[j] elements from send + send_displs[j] to member j and
 * receives recv_counts[j] elements from member j at recv + recv_displs[j]
 * (arrays of size entries, counts and displacements in elements); each
 * send_counts[j] must equal member j's recv_counts for this rank.  Not in
 * place: send and recv must not overlap.  NCCL: grouped ncclSend/ncclRecv
 * (inside a gl_comm_group_start/end bracket they join it). */
void gl_all_to_all(gl_comm *c, const void *send, void *recv, size_t count,
                   gl_dtype t, void *stream);
void gl_all_to_allv(gl_comm *c, const void *send, const size_t *send_counts,
                    const size_t *send_displs, void *recv,
                    const size_t *recv_counts, const size_t *recv_displs,
                    gl_dtype t, void *stream);

/* Non-blocking all-to-allv: gl_all_to_allv_start posts gl_all_to_allv's
 * exchange (the same arguments and rules; it counts as the group's
 * collective at the start) and returns at once; gl_comm_req_wait
 * completes it and frees the request.  The count and displacement
 * arrays may be freed when the start returns.  Until the wait, this rank
 * must not write send nor touch recv (NCCL: no work enqueued before the
 * wait may); it may compute and use other groups meanwhile, and makes no
 * other call on this group.  Not inside a gl_comm_group_start bracket.
 *   MPI:  MPI_Ialltoallv; the wait is MPI_Wait (told to the wait hook).
 *   NCCL: the sends and receives go on a side stream of the group, after
 *         the work enqueued on `stream` so far; the wait makes `stream`
 *         wait for them (the host does not), so that the work enqueued
 *         on `stream` between the two runs beside the transfer. */
typedef struct gl_comm_req gl_comm_req;
gl_comm_req *gl_all_to_allv_start(gl_comm *c, const void *send,
                                  const size_t *send_counts,
                                  const size_t *send_displs, void *recv,
                                  const size_t *recv_counts,
                                  const size_t *recv_displs, gl_dtype t,
                                  void *stream);
void gl_comm_req_wait(gl_comm_req *r);

/* Point-to-point with member `peer` of the group.  Between
 * gl_comm_group_start() and gl_comm_group_end() sends and receives are
 * posted together and complete (or, for NCCL, are enqueued) at the end,
 * so a pair of ranks may both send first without deadlock.  Pipeline
 * code always brackets its exchanges this way. */
void gl_send(gl_comm *c, const void *buf, size_t count, gl_dtype t, int peer,
             void *stream);
void gl_recv(gl_comm *c, void *buf, size_t count, gl_dtype t, int peer,
             void *stream);
void gl_comm_group_start(void);
void gl_comm_group_end(void);

/* The bracket's end without the wait, so that a rank computes while its
 * exchange travels (context parallelism's ring).  gl_comm_group_post()
 * ends the bracket as gl_comm_group_end() does, except that on the MPI
 * back end its sends and receives are left in flight (MPI_Isend/Irecv
 * posted, not waited for); on NCCL it is gl_comm_group_end(), the
 * operations enqueued on their stream.  gl_comm_wait_posted() then waits
 * on the host until every send and receive posted so far is done (MPI:
 * MPI_Wait on each, through the wait hook; NCCL: returns at once -- the
 * caller makes its compute stream wait for the exchange's stream with
 * events, ops.h's compute_wait_p2p).  Until that wait, a posted send's
 * buffer must not be written, nor a posted receive's read or written.
 * A later gl_comm_group_end() completes these too.  Inside an outer
 * bracket it only closes the inner one, as gl_comm_group_end(). */
void gl_comm_group_post(void);
void gl_comm_wait_posted(void);

/* Wait on the host until every operation this rank enqueued on the
 * group's back end is done (NCCL: the stream; MPI: no-op). */
void gl_comm_barrier(gl_comm *c);

/* Release the group (NULL is allowed).  Collective over the group: every
 * member frees it, after its last use. */
void gl_comm_free(gl_comm *c);

/* ---- making groups ----------------------------------------------------
 *
 * The world is made first; every other group is split from one that
 * exists (the process grid's groups from the world: boot/groups.h).  An
 * NCCL group needs this rank's GPU chosen before (boot/boot.h). */

/* Gives rank 0's len bytes at data to every rank of the world (boot's
 * gl_boot_share: PMIx or MPI).  Collective. */
typedef void (*gl_comm_share_fn)(void *ctx, void *data, size_t len);

/* The group "world": every rank of MPI_COMM_WORLD, member i being world
 * rank i, with back end kind.  For NCCL, world rank 0 makes the NCCL
 * unique id and share(ctx, ...) carries it to the others (share NULL:
 * MPI_Bcast); NULL when this build has no NCCL.  Collective. */
gl_comm *gl_comm_world(gl_comm_kind kind, gl_comm_share_fn share, void *ctx);

/* The group `name` of the members of parent that give the same color,
 * ordered by key (ties by their order in parent), with parent's back end:
 * MPI_Comm_split of parent's MPI communicator and, for NCCL, ncclCommSplit
 * of its NCCL communicator with the same color and key.  color < 0: this
 * rank joins no group and gets NULL; the call is collective over parent
 * all the same.  A failure stops the job, naming the group. */
gl_comm *gl_comm_split(gl_comm *parent, int color, int key, const char *name);

/* ---- arrivals and waits, for the hang watchdog ------------------------
 *
 * Every collective call on a group (all_reduce, reduce, reduce_scatter,
 * all_gather, broadcast, all_to_all(v)) counts as one arrival: gl_comm_seq() is how many
 * this rank has made on the group, so the k-th collective of the group is
 * number k on every member (MPI and NCCL require the members to call them
 * in the same order).  gl_comm_key() identifies the group the same way on
 * every member (its name and member list), so that a peer can be asked
 * "how far are you on this group?" (comm/peers.h).
 *
 * Where a call blocks the host -- an MPI collective, the wait for the
 * sends and receives of a group bracket, a blocking send or receive, the
 * NCCL back end's stream waits -- the back end tells the wait hook
 * (process-wide, NULL when none): first with the wait, then with NULL
 * when it ends.  train/faults.h's watchdog installs it. */
typedef struct {
    const char *op;          /* "MPI_Allreduce", "MPI_Irecv (wait)", ... */
    const gl_comm *group;    /* the group waited on */
    long seq;                /* the collective's number on the group; 0: point-to-point */
    int peer;                /* world rank of the point-to-point peer, else -1 */
} gl_comm_wait;
typedef void (*gl_comm_wait_fn)(void *ctx, const gl_comm_wait *w);
void gl_comm_set_wait_hook(gl_comm_wait_fn fn, void *ctx);

long gl_comm_seq(const gl_comm *c);
unsigned long long gl_comm_key(const gl_comm *c);

/* The arrivals of this rank's live group named `name` with key `key`;
 * -1 when it has none.  Safe from any thread. */
long gl_comm_seq_of(const char *name, unsigned long long key);

/* ---- the MPI side, for host code --------------------------------------
 *
 * Every group, whatever its back end, also has an MPI communicator over
 * the same members in the same order, for work in host memory (a few
 * sums of host values, the data loader, HDF5 checkpoints).  The CUDA
 * sources do not see this part. */
#ifndef __CUDACC__
/* A group with the MPI back end over the ranks of c, in c's order (c is
 * duplicated: the caller keeps, and frees, its own handle).  Collective
 * over c. */
gl_comm *gl_comm_mpi(MPI_Comm c, const char *name);

/* The group's MPI communicator: the group's own, valid until
 * gl_comm_free; not to be freed by the caller. */
MPI_Comm gl_comm_mpi_handle(const gl_comm *c);
#endif

#ifdef __cplusplus
}
#endif
#endif
