/*
 * groups.h: the communicators of the process grid.
 *
 * gl_groups_create() checks the layout (src/grid), then asks comm.h for
 * the world group (for NCCL, its unique id travels through PMIx when the
 * bootstrap used it, else MPI_Bcast) and splits it into one gl_comm per
 * axis for this rank with the grid's colours (gl_comm_split).  Member i
 * of every group is the rank whose index along the axis is i (its tp, cp,
 * dp or pp coordinate; for the expert axes its etp, ep or edp).
 *
 * It warns (rank 0) when a TP group spans nodes: tensor-parallel traffic
 * would then cross the network.
 */
#ifndef GL_BOOT_GROUPS_H
#define GL_BOOT_GROUPS_H

#include <stdio.h>
#include "boot/boot.h"
#include "comm/comm.h"
#include "device/ops.h"
#include "grid/grid.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    gl_grid_spec spec;     /* checked, dp derived */
    gl_coord me;
    gl_comm_kind kind;
    gl_comm *world;
    gl_comm *tp, *cp, *dp, *pp;
    gl_comm *dp_cp;        /* gradients of dense weights: DP x CP */
    gl_comm *mp;           /* model-parallel: TP x PP, one model replica */
    gl_comm *embd;         /* first and last stage of this pipeline (tied
                            * embeddings); NULL on middle stages; just this
                            * rank when PP = 1 */
    gl_ecoord eme;         /* this rank in the expert grid */
    gl_comm *ep, *edp;     /* expert-parallel (different experts) and
                            * expert-data-parallel (the same experts) */
    gl_comm *etp;          /* expert-tensor-parallel (one expert's matrices
                            * split); the three expert groups are NULL
                            * unless gl_grid_expert_grid_differs (EP > 1 or
                            * ETP != TP): else they are the rank alone, tp
                            * and dp_cp */
    int health_groups;     /* groups verified job-wide by the last
                            * gl_groups_health_check, -1 before */
} gl_groups;

/* spec->world of 0 means b->size; spec->ranks_per_node of 0 means
 * b->local_size.  A bad layout stops the job with gl_grid_init's message.
 * GL_COMM_NCCL needs a GPU on every rank (gl_boot_pick_gpu).  Collective. */
gl_groups *gl_groups_create(const gl_boot *b, const gl_grid_spec *spec,
                            gl_comm_kind kind);

/* Free every communicator.  Collective. */
void gl_groups_free(gl_groups *g);

/* One small all-reduce (int64, sum of world rank + 1) per group, in
 * memory of device d (d may be NULL for MPI groups: host memory); dies
 * naming the group when a sum is wrong.  Records the number of groups
 * checked job-wide in g->health_groups.  Collective. */
void gl_groups_health_check(gl_groups *g, gl_dev *d);

/* Rank 0 writes the placement table gathered from every rank (rank, host,
 * local rank, GPU ordinal and PCI bus id or "-", tp/cp/dp/pp; then, with
 * an expert grid of its own or num_experts > 0, etp/ep/edp and the
 * experts [first,end) each MoE layer holds there of num_experts), the
 * group lists per axis, "bootstrap: pmix|mpi" and "health check: N groups
 * OK" to out.  num_experts is 0 for a dense model.  Collective; out is
 * used on rank 0 only. */
void gl_dry_run_report(const gl_boot *b, const gl_groups *g, int num_experts, FILE *out);

#ifdef __cplusplus
}
#endif
#endif
