/*
 * comm_impl.h: what a back end of comm.h provides, and what the back ends
 * share.  Private to src/comm: the rest of gridlm makes its groups with
 * comm.h's gl_comm_world, gl_comm_split and gl_comm_mpi.
 *
 * A group of the NCCL back end holds an NCCL communicator and the MPI
 * communicator of the same ranks (it serves host-side needs such as
 * HDF5 and the member list).  NCCL types stay out of this header, so
 * that comm.c builds without CUDA: only comm_nccl.c includes nccl.h.
 */
#ifndef GL_COMM_COMM_IMPL_H
#define GL_COMM_COMM_IMPL_H

#include <mpi.h>
#include "comm/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The back-end operations behind comm.h's calls. */
typedef struct {
    void (*all_reduce)(gl_comm *c, const void *send, void *recv, size_t count,
                       gl_dtype t, gl_redop op, void *stream);
    void (*reduce_scatter)(gl_comm *c, const void *send, void *recv,
                           size_t recv_count, gl_dtype t, gl_redop op, void *stream);
    void (*all_gather)(gl_comm *c, const void *send, void *recv,
                       size_t send_count, gl_dtype t, void *stream);
    void (*reduce)(gl_comm *c, const void *send, void *recv, size_t count,
                   gl_dtype t, gl_redop op, int root, void *stream);
    void (*broadcast)(gl_comm *c, void *buf, size_t count, gl_dtype t,
                      int root, void *stream);
    /* gl_all_to_allv (gl_all_to_all comes here with equal blocks) */
    void (*all_to_allv)(gl_comm *c, const void *send, const size_t *send_counts,
                        const size_t *send_displs, void *recv,
                        const size_t *recv_counts, const size_t *recv_displs,
                        gl_dtype t, void *stream);
    /* gl_all_to_allv_start's part: fills r (its group and seq are set) */
    void (*all_to_allv_start)(gl_comm *c, const void *send,
                              const size_t *send_counts, const size_t *send_displs,
                              void *recv, const size_t *recv_counts,
                              const size_t *recv_displs, gl_dtype t, void *stream,
                              gl_comm_req *r);
    /* gl_comm_req_wait's part: completes r (the caller frees it) */
    void (*req_wait)(gl_comm_req *r);
    void (*send)(gl_comm *c, const void *buf, size_t count, gl_dtype t,
                 int peer, void *stream);
    void (*recv)(gl_comm *c, void *buf, size_t count, gl_dtype t,
                 int peer, void *stream);
    void (*barrier)(gl_comm *c);
    void (*free_impl)(gl_comm *c);
    /* gl_comm_split's part for this back end: mc is the MPI split of the
     * parent (MPI_COMM_NULL where color < 0, still the caller's to free);
     * the new group over mc, or NULL where color < 0. */
    gl_comm *(*split)(gl_comm *parent, MPI_Comm mc, int color, int key,
                      const char *name);
} gl_comm_vt;

struct gl_comm {
    const gl_comm_vt *vt;
    gl_comm_kind kind;
    char name[32];
    int size, rank;
    int *world_ranks;      /* world rank of each member */
    MPI_Comm mpi;          /* our duplicate; MPI_ERRORS_RETURN */
    void *impl;            /* back-end state */
    unsigned long long key;   /* name and members, the same on every member */
    long seq;              /* collectives made (atomic access: gl_comm_seq) */
    gl_comm *next_live;    /* the registry of live groups (comm.c) */
};

/* A non-blocking exchange in flight (gl_all_to_allv_start). */
struct gl_comm_req {
    gl_comm *c;
    long seq;              /* its collective's number on the group */
    MPI_Request mpi;       /* MPI: the request */
    int *mpi_counts;       /* MPI: the int counts and displacements it reads */
    void *done;            /* NCCL: the event recorded after the transfer */
    void *stream;          /* NCCL: the stream that waits for it */
};

/* Shared by the back ends (comm.c): allocate a gl_comm over a duplicate
 * of mc with its member table filled in. */
gl_comm *gl_comm_alloc(MPI_Comm mc, const char *name, gl_comm_kind kind,
                       const gl_comm_vt *vt);

/* Around a blocking wait of a back end: tells the wait hook (comm.h). */
void gl_comm_wait_begin(const gl_comm *c, const char *op, long seq, int peer_member);
void gl_comm_wait_end(void);

/* The NCCL back end's gl_comm_world (comm.h); NULL in a build without
 * NCCL. */
gl_comm *gl_comm_nccl_world(gl_comm_share_fn share, void *ctx);

/* Group brackets of each back end, called by gl_comm_group_start/end. */
void gl_comm_mpi_group_start(void);
void gl_comm_mpi_group_end(void);
void gl_comm_mpi_group_post(void);      /* gl_comm_group_post's MPI part */
void gl_comm_mpi_wait_posted(void);     /* gl_comm_wait_posted's */
int gl_comm_mpi_in_group(void);
void gl_comm_nccl_group_start(void);
void gl_comm_nccl_group_end(void);

#ifdef __cplusplus
}
#endif
#endif
