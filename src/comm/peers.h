/*
 * peers.h: a side channel between the ranks, outside MPI and NCCL, for
 * what those two cannot tell: which peer has not arrived at a collective
 * that hangs, and which peer died.
 *
 * Every rank listens on a TCP port of its own (any free one) and runs one
 * service thread; gl_peers_open() gathers every rank's addresses, pid and
 * host over MPI once, with a random token of the job that every message
 * must carry (a stranger connecting to the port gets nothing).
 *
 * The ring: rank r keeps a connection open to rank r+1 (mod N) and one
 * from rank r-1.  A process that dies, however it dies (SIGKILL, a crash,
 * the out-of-memory killer), has its sockets closed by the kernel, so its
 * two ring neighbours see the connection end at once.  A rank that leaves
 * normally says goodbye first (gl_peers_close), and a rank that is about
 * to stop the job (gl_die, the watchdog) says so first: that notice goes
 * round the ring, and ranks that heard it stay quiet when their peers then
 * disappear.  gl_peers_close is collective for the same reason: no link
 * closes before every rank knows that all are leaving.  Otherwise a neighbour that sees the connection end without
 * either stops the job with one line:
 *   "rank 3 on node07 (pid 4242) died: its side-channel connection to this
 *    rank ended (closed) without a goodbye ..."
 * The launcher may kill the other ranks first (Open MPI's mpirun and
 * MPICH's hydra stop a job whose process died, within milliseconds, and
 * say which one themselves); under srun, whose default is to let the
 * other tasks run on, this line is what ends the job.
 *
 * Probes: gl_peers_probe() asks ranks, in parallel, where they are: how
 * many collectives they have made on a group (comm.h's gl_comm_seq_of),
 * and what they wait for or since when they compute (the describe
 * callback, installed by train/faults.c).  A process stopped by SIGSTOP
 * or frozen still has its connections accepted by the kernel but never
 * answers: GL_PEER_SILENT; one that is gone refuses: GL_PEER_GONE.  On the
 * same host the /proc state of the pid is read as well (T: stopped).
 *
 * GRIDLM_PEER_CHANNEL=0 turns the side channel off (gl_peers_open returns
 * NULL on every rank).  GRIDLM_SOCKET_IFNAME=PREFIX[,PREFIX...] (or
 * ^PREFIX,... to exclude) chooses the interfaces whose IPv4 addresses
 * the other hosts use, as NCCL_SOCKET_IFNAME does; by default every IPv4
 * interface but loopback and docker's.  Ranks on the same host connect
 * through 127.0.0.1.  A link that cannot be set up costs a warning, not
 * the job: stalls and deaths are then reported without the peer's name.
 */
#ifndef GL_COMM_PEERS_H
#define GL_COMM_PEERS_H

#include <mpi.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gl_peers gl_peers;

typedef enum {
    GL_PEER_ANSWERED = 0,   /* it answered: the fields below hold its state */
    GL_PEER_SILENT,         /* accepted but no answer in time: stopped or frozen */
    GL_PEER_GONE,           /* connection refused: its process is gone */
    GL_PEER_UNREACHABLE,    /* no connection in time: the network */
    GL_PEER_NO_CHANNEL      /* the side channel has no address for it */
} gl_peer_how;

/* One rank's state, as it answered (or as far as it could be learnt). */
typedef struct {
    int rank;                     /* world rank */
    gl_peer_how how;
    char proc_state;              /* same host: its /proc state letter (R, S, T,
                                   * D, Z...), else 0 */
    long pid;
    long group_seq;               /* its arrivals on the group asked about; -1:
                                   * it has no such group */
    int waiting;                  /* 1: it waits now (the wait_ fields) */
    char wait_op[96], wait_group[32];
    long wait_seq;                /* 0: point-to-point, or not known */
    int wait_peer;                /* world rank, -1: none */
    double wait_open_s;
    double idle_s;                /* not waiting: seconds since its last wait ended */
    char last_op[96], last_group[32];
    long last_seq;                /* its last wait that ended ("" if none) */
} gl_peer_status;

/* Fills what this rank answers about itself (every field from waiting on;
 * called from the service thread). */
typedef void (*gl_peers_describe_fn)(void *ctx, gl_peer_status *me);

/* Collective over world.  NULL on every rank when GRIDLM_PEER_CHANNEL=0.
 * Never fails the job: what cannot be set up is warned about and left
 * out. */
gl_peers *gl_peers_open(MPI_Comm world, const char *host, gl_peers_describe_fn fn,
                        void *ctx);

/* Say goodbye to the ring neighbours, stop the thread, free p (NULL
 * allowed).  Collective over the world given to gl_peers_open: every
 * rank has said it leaves before any rank's links close. */
void gl_peers_close(gl_peers *p);

/* Ask the n ranks in ranks[] (world ranks; this rank is answered
 * locally) where they are on the group (name, gl_comm_key; NULL: none),
 * waiting at most timeout_s for all of them together.  out[i] gets
 * rank ranks[i]'s state.  Returns how many answered.  Any thread. */
int gl_peers_probe(gl_peers *p, const int *ranks, int n, const char *group,
                   unsigned long long key, double timeout_s, gl_peer_status *out);

/* This rank is about to stop the job and says why itself: the notice
 * goes round the ring, and the ranks that hear it report no lost peers
 * and leave the explaining to this one. */
void gl_peers_announce_stop(gl_peers *p);

/* 1 when some rank (*origin, may be NULL) announced that it stops the
 * job, this one included. */
int gl_peers_stopping(const gl_peers *p, int *origin);

/* For tests: shut this rank's ring links down without a goodbye, as the
 * kernel does for a process that dies, and report nothing about them. */
void gl_peers_drop_links(gl_peers *p);

/* A rank's host as it told at gl_peers_open ("?" if unknown), this
 * rank's number and the job's size. */
const char *gl_peers_host(const gl_peers *p, int rank);
int gl_peers_rank(const gl_peers *p);
int gl_peers_size(const gl_peers *p);

#ifdef __cplusplus
}
#endif
#endif
