/*
 * grid.h: the process grid, as data.
 *
 * The world of W ranks is a grid TP x CP x DP x PP in Megatron's order
 * tp-cp-ep-dp-pp, first axis fastest:
 *
 *     rank = tp + TP * (cp + CP * (dp + DP * pp))
 *
 * so a TP group is TP consecutive ranks (one node, NVLink, when TP divides
 * the ranks per node) and DP and PP groups stride across nodes.  Expert
 * parallelism (EP) does not add a dimension: it subdivides the DP ranks
 * for expert layers, the EP index being the fastest part of the DP index,
 *
 *     dp = ep + EP * edp,
 *
 * so an EP group is EP data-parallel neighbours and the expert-data-
 * parallel group (EDP) strides over them.  EP must divide DP.
 *
 * Everything here is pure arithmetic: no MPI, no CUDA, no allocation, no
 * printing.  src/boot turns these member lists into communicators.
 */
#ifndef GL_GRID_GRID_H
#define GL_GRID_GRID_H

#include <stddef.h>

#include "base/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The layout.  tp, cp, ep and pp of 0 mean 1; dp of 0 means "derive it"
 * (W / (TP CP PP)), a non-zero dp must equal that.  ranks_per_node is the
 * number of ranks on each node (ranks numbered node by node); 0 means
 * unknown, and then every TP group counts as node-local. */
typedef struct {
    int world, tp, cp, ep, dp, pp;
    int ranks_per_node;
} gl_grid_spec;

/* The groups a rank belongs to.  Every axis partitions the world: each
 * rank is in exactly one group of each axis.
 *   TP, CP, DP, PP  ranks that differ only in that coordinate;
 *   DP_CP           differ only in cp and dp (gradients of dense weights
 *                   are reduced over DP x CP), index cp + CP * dp;
 *   MP              differ only in tp and pp (model-parallel: one replica
 *                   of the model), index tp + TP * pp;
 *   EP              differ only in the EP part of dp (dp % EP);
 *   EDP             differ only in the rest of dp (dp / EP): the data-
 *                   parallel group of expert weights. */
typedef enum {
    GL_AXIS_TP = 0,
    GL_AXIS_CP,
    GL_AXIS_DP,
    GL_AXIS_PP,
    GL_AXIS_DP_CP,
    GL_AXIS_MP,
    GL_AXIS_EP,
    GL_AXIS_EDP,
    GL_AXIS_COUNT
} gl_axis;

typedef struct { int tp, cp, dp, pp; } gl_coord;

/* Fill in the defaults (see gl_grid_spec), derive dp and check the layout.
 * Returns 0, or -1 with one line in err naming the flag, its value and the
 * fix (e.g. "--pipeline-model-parallel-size 3 ... does not divide ...").
 * err may be NULL. */
int gl_grid_init(gl_grid_spec *s, gl_error *err);

/* rank -> coordinates and back.  rank in [0, world). */
gl_coord gl_grid_coord(const gl_grid_spec *s, int rank);
int gl_grid_rank(const gl_grid_spec *s, gl_coord c);

/* The EP index (dp % EP) and the expert-data-parallel index (dp / EP). */
int gl_grid_ep_index(const gl_grid_spec *s, int rank);
int gl_grid_edp_index(const gl_grid_spec *s, int rank);

/* Size of every group of the axis. */
int gl_grid_group_size(const gl_grid_spec *s, gl_axis axis);

/* The world ranks of rank's group on the axis, written to members (room
 * for gl_grid_group_size() entries), sorted by the axis index, so that
 * members[i] is the rank whose index is i.  Returns the group size. */
int gl_grid_group(const gl_grid_spec *s, gl_axis axis, int rank, int *members);

/* rank's index within its group on the axis (its position in members). */
int gl_grid_group_index(const gl_grid_spec *s, gl_axis axis, int rank);

/* A non-negative id shared by exactly the ranks of one group of the axis
 * (the lowest world rank of the group), for MPI_Comm_split/ncclCommSplit
 * colours; use gl_grid_group_index() as the key. */
int gl_grid_group_color(const gl_grid_spec *s, gl_axis axis, int rank);

/* The embedding group of tied input/output embeddings: the first and the
 * last stage of rank's pipeline group ([first, last], or [first] when
 * PP == 1).  Returns the size written to members (room for 2), or 0 when
 * rank is on a middle stage and belongs to no embedding group. */
int gl_grid_embd_group(const gl_grid_spec *s, int rank, int *members);
/* Its colour (as gl_grid_group_color), or -1 for middle stages. */
int gl_grid_embd_color(const gl_grid_spec *s, int rank);

/* 1 when every TP group lies on one node, ranks numbered node by node in
 * blocks of ranks_per_node (always 1 when ranks_per_node is unknown). */
int gl_grid_tp_node_local(const gl_grid_spec *s);

/* "tp", "cp", "dp", "pp", "dp_cp", "mp", "ep", "edp". */
const char *gl_axis_name(gl_axis axis);

#ifdef __cplusplus
}
#endif
#endif
