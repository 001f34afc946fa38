/*
 * grid.h: the process grid, as data.
 *
 * The world of W ranks is a grid TP x CP x DP x PP in Megatron's order
 * tp-cp-ep-dp-pp (EP is 1 in this grid), first axis fastest:
 *
 *     rank = tp + TP * (cp + CP * (dp + DP * pp))
 *
 * so a TP group is TP consecutive ranks (one node, NVLink, when TP divides
 * the ranks per node) and DP and PP groups stride across nodes.  This is
 * the grid of the attention layers and of every dense weight.
 *
 * Mixture-of-experts layers lay the same ranks out again, in a grid of
 * their own ("parallel folding", Megatron's expert RankGenerator): expert
 * tensor parallelism ETP, expert parallelism EP (the ranks holding
 * different experts of one layer), expert data parallelism EDP (the ranks
 * holding the same experts) and the same PP, order etp-ep-edp-pp:
 *
 *     rank = etp + ETP * (ep + EP * (edp + EDP * pp)),
 *     EDP  = W / (ETP x EP x PP).
 *
 * Both grids put PP outermost over blocks of TP x CP x DP = ETP x EP x EDP
 * ranks, so a rank's pipeline stage, and every PP group, is the same in
 * both; within a stage the expert grid ignores CP and DP and cuts the
 * stage's ranks anew.  With ETP = TP and CP = 1 this is EP subdividing DP
 * (dp = ep + EP edp); with CP > 1 an EP group may span CP ranks.
 * ETP of 0 means TP, Megatron's default.
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

/* The layout.  tp, cp, ep and pp of 0 mean 1; etp of 0 means tp; dp
 * and edp of 0 mean "derive it" (W / (TP CP PP), W / (ETP EP PP)), a
 * non-zero one must equal that.  ranks_per_node is the number of ranks on
 * each node (ranks numbered node by node); 0 means unknown, and then
 * every TP group counts as node-local. */
typedef struct {
    int world, tp, cp, ep, dp, pp;
    int etp, edp;
    int ranks_per_node;
} gl_grid_spec;

/* The groups a rank belongs to.  Every axis partitions the world: each
 * rank is in exactly one group of each axis.
 *   TP, CP, DP, PP  ranks that differ only in that coordinate (of the
 *                   attention grid; PP is the same in both grids);
 *   DP_CP           differ only in cp and dp (gradients of dense weights
 *                   are reduced over DP x CP), index cp + CP * dp;
 *   MP              differ only in tp and pp (model-parallel: one replica
 *                   of the model), index tp + TP * pp;
 * and in the expert grid:
 *   EP              differ only in ep: the ranks that hold different
 *                   experts of one MoE layer (the tokens' all-to-all);
 *   EDP             differ only in edp: the ranks that hold the same
 *                   experts (expert gradients are reduced over it);
 *   ETP             differ only in etp: the ranks that split each of
 *                   the same experts' matrices. */
typedef enum {
    GL_AXIS_TP = 0,
    GL_AXIS_CP,
    GL_AXIS_DP,
    GL_AXIS_PP,
    GL_AXIS_DP_CP,
    GL_AXIS_MP,
    GL_AXIS_EP,
    GL_AXIS_EDP,
    GL_AXIS_ETP,
    GL_AXIS_COUNT
} gl_axis;

/* A rank's coordinates in the attention grid, and in the expert grid. */
typedef struct { int tp, cp, dp, pp; } gl_coord;
typedef struct { int etp, ep, edp, pp; } gl_ecoord;

/* Fill in the defaults (see gl_grid_spec), derive dp and edp and check
 * the layout: TP x CP x PP divides the world, and ETP x EP divides the
 * ranks of a pipeline stage (TP x CP x DP), that is ETP x EP x PP divides
 * the world.  Returns 0, or -1 with one line in err naming the flag, its
 * value and the fix (e.g. "--pipeline-model-parallel-size 3 ... does not
 * divide ...").  err may be NULL. */
int gl_grid_init(gl_grid_spec *s, gl_error *err);

/* rank -> coordinates and back.  rank in [0, world). */
gl_coord gl_grid_coord(const gl_grid_spec *s, int rank);
int gl_grid_rank(const gl_grid_spec *s, gl_coord c);

/* rank -> expert-grid coordinates and back. */
gl_ecoord gl_grid_ecoord(const gl_grid_spec *s, int rank);
int gl_grid_erank(const gl_grid_spec *s, gl_ecoord c);

/* rank's expert-grid coordinates one by one: its EP index (which block of
 * experts it holds: gl_grid_experts), its expert-data-parallel index and
 * its expert-tensor-parallel index. */
int gl_grid_ep_index(const gl_grid_spec *s, int rank);
int gl_grid_edp_index(const gl_grid_spec *s, int rank);
int gl_grid_etp_index(const gl_grid_spec *s, int rank);

/* The experts [*first, *first + count) of one MoE layer that the ranks of
 * EP index ep hold, of num_experts in all (a multiple of EP): count =
 * num_experts / EP, first = ep x count.  Returns count. */
int gl_grid_experts(const gl_grid_spec *s, int num_experts, int ep, int *first);

/* 1 when the expert grid differs from the attention grid (EP > 1 or
 * ETP != TP).  Otherwise its groups are ones the attention grid has:
 * ETP = TP, EP = the rank alone, EDP = DP_CP. */
int gl_grid_expert_grid_differs(const gl_grid_spec *s);

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

/* "tp", "cp", "dp", "pp", "dp_cp", "mp", "ep", "edp", "etp". */
const char *gl_axis_name(gl_axis axis);

#ifdef __cplusplus
}
#endif
#endif
