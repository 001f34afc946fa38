/*
 * boot.h: start the job: MPI, where this rank runs, and its GPU.
 *
 * gl_boot_init() starts MPI and learns the rank's place:
 *   - through PMIx, when the launcher runs a PMIx server (srun --mpi=pmix,
 *     Open MPI's mpiexec, prterun): local rank and size, node id and job
 *     size come from the launcher (PMIX_LOCAL_RANK, PMIX_LOCAL_SIZE,
 *     PMIX_NODEID, PMIX_JOB_SIZE);
 *   - otherwise through MPI alone: MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)
 *     for the local rank and size, and a gather of host names for the node
 *     ids (nodes numbered in order of their lowest rank).
 * GRIDLM_BOOTSTRAP=mpi forces the second path, GRIDLM_BOOTSTRAP=pmix
 * insists on the first.  With GRIDLM_BOOT_DEBUG set, every rank prints one
 * line "bootstrap: pmix|mpi: rank R of N, local rank L of S, node I of M
 * (HOST)" on stderr.
 *
 * When PMIx's job size differs from MPI's world size -- an MPI built
 * without PMIx started by `srun --mpi=pmix`, where every process believes
 * it is rank 0 of 1 -- the job stops with a message saying to use
 * `srun --mpi=pmi2` or an MPI built with PMIx.
 *
 * From gl_boot_init() on, error messages carry rank and host, and gl_die()
 * stops the whole job through MPI_Abort.
 */
#ifndef GL_BOOT_BOOT_H
#define GL_BOOT_BOOT_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int rank, size;               /* in MPI_COMM_WORLD */
    int local_rank, local_size;   /* on this node */
    int node_id, num_nodes;
    char host[256];
    int used_pmix;                /* 1: locality came from PMIx */
    int gpu;                      /* CUDA ordinal, -1: none (CPU) */
    char gpu_bus_id[32];          /* PCI bus id of gpu, "" when none */
    int gpu_picked;               /* gl_boot_pick_gpu has run */
} gl_boot;

/* Start MPI (argc/argv may be NULL) and fill b (gpu = -1).  Collective. */
void gl_boot_init(int *argc, char ***argv, gl_boot *b);

/* Choose this rank's GPU by local rank among the visible devices
 * (CUDA_VISIBLE_DEVICES is honoured by CUDA itself), make it current and
 * record its PCI bus id.  One visible GPU per rank with CUDA_VISIBLE_DEVICES
 * set is taken as per-rank binding (srun --gpu-bind).  More local ranks
 * than GPUs, or two ranks of a node on one GPU, stop the job with a message
 * naming the counts.  Without a CUDA build or any GPU: b->gpu = -1.
 * Returns b->gpu.  Collective over the ranks of each node. */
int gl_boot_pick_gpu(gl_boot *b);

/* The device this rank computes on, for --device `want`: the CPU for
 * GL_DEVICE_CPU, or for GL_DEVICE_AUTO when no GPU is visible; otherwise
 * the rank's GPU (picked with gl_boot_pick_gpu if not yet, collective over
 * the ranks of each node).  When CUDA is asked for and cannot be had (no
 * GPU visible, or a build without CUDA) the job stops (exit 2) with the
 * fix. */
struct gl_dev *gl_boot_open_device(gl_boot *b, int want);

/* Give every rank rank 0's len bytes at data: through PMIx put/commit/
 * fence/get when the bootstrap used PMIx (how the NCCL unique id travels),
 * else MPI_Bcast.  Collective. */
void gl_boot_share(const gl_boot *b, void *data, size_t len);

/* Finalize PMIx (when used) and MPI.  Free every gl_comm first. */
void gl_boot_finalize(gl_boot *b);

#ifdef __cplusplus
}
#endif
#endif
