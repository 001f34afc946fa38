/*
 * comm_impl.h: how comm.h's groups are made, and what a back end provides.
 *
 * A gl_comm is built from an MPI communicator (MPI back end) or from an
 * NCCL communicator plus the MPI communicator of the same ranks (NCCL
 * back end; the MPI one serves host-side needs such as HDF5 and the
 * member list).  src/boot/groups.c makes them for the process grid;
 * tests make them directly.
 *
 * NCCL types stay out of this header, so that C files of a build without
 * CUDA can include it: an ncclComm_t is passed as void *.
 */
#ifndef GL_COMM_COMM_IMPL_H
#define GL_COMM_COMM_IMPL_H

#include <mpi.h>
#include "comm/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A group over the ranks of c.  c is duplicated: the caller keeps (and
 * frees) its own handle. */
gl_comm *gl_comm_mpi(MPI_Comm c, const char *name);

/* A group over an NCCL communicator nc (an ncclComm_t, owned from now on:
 * gl_comm_free destroys it) whose ranks are those of c in the same order
 * (c is duplicated, as above).  Dies when they disagree.  NULL when this
 * build has no NCCL. */
gl_comm *gl_comm_nccl(void *nc, MPI_Comm c, const char *name);

/* The group's MPI communicator (both back ends have one). */
MPI_Comm gl_comm_mpi_handle(const gl_comm *c);

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
    void (*send)(gl_comm *c, const void *buf, size_t count, gl_dtype t,
                 int peer, void *stream);
    void (*recv)(gl_comm *c, void *buf, size_t count, gl_dtype t,
                 int peer, void *stream);
    void (*barrier)(gl_comm *c);
    void (*free_impl)(gl_comm *c);
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

/* Shared by the back ends (comm.c): allocate a gl_comm over a duplicate
 * of mc with its member table filled in. */
gl_comm *gl_comm_alloc(MPI_Comm mc, const char *name, gl_comm_kind kind,
                       const gl_comm_vt *vt);

/* Around a blocking wait of a back end: tells the wait hook (comm.h). */
void gl_comm_wait_begin(const gl_comm *c, const char *op, long seq, int peer_member);
void gl_comm_wait_end(void);

/* Group brackets of each back end, called by gl_comm_group_start/end. */
void gl_comm_mpi_group_start(void);
void gl_comm_mpi_group_end(void);
int gl_comm_mpi_in_group(void);
void gl_comm_nccl_group_start(void);
void gl_comm_nccl_group_end(void);

#ifdef __cplusplus
}
#endif
#endif
