/* grid.c: rank <-> coordinates and group member lists (see grid.h). */
#include <config.h>
#include "grid/grid.h"
#include "base/error.h"

/* A size flag left at 0 means 1; a negative one is an error. */
static int default_one(int *v, const char *flag, gl_error *err)
{
    if (*v == 0)
        *v = 1;
    if (*v < 0)
        return gl_errprintf(err, "%s %d: a parallel size must be a positive "
                            "integer (1 disables that kind of parallelism)", flag, *v);
    return 0;
}

static long long gcd(long long a, long long b)
{
    while (b) {
        long long t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* The expert grid of a spec whose attention grid is checked: ETP x EP
 * must divide the TP x CP x DP ranks of each pipeline stage. */
static int expert_init(gl_grid_spec *s, gl_error *err)
{
    int etp_given = s->etp != 0;
    if (!etp_given)
        s->etp = s->tp;   /* Megatron's default: the experts split as the MLP */
    if (s->etp < 0)
        return gl_errprintf(err, "--expert-tensor-parallel-size %d: a parallel size must be "
                            "a positive integer (1 keeps every expert whole; left out, it "
                            "is --tensor-model-parallel-size)", s->etp);
    if (s->edp < 0)
        return gl_errprintf(err, "expert data-parallel size %d: must be positive, or 0 to "
                            "be derived from the world size", s->edp);
    int stage = s->tp * s->cp * s->dp;   /* = world / PP */
    long long expert = (long long)s->ep * s->etp;
    if (expert > stage || stage % expert != 0) {
        /* The smallest world both grids fit: a multiple of both products. */
        long long a = (long long)s->tp * s->cp * s->pp, b = expert * s->pp;
        return gl_errprintf(err,
                            "--expert-model-parallel-size %d x --expert-tensor-parallel-size "
                            "%d%s = %lld does not divide the %d ranks of a pipeline stage "
                            "(world %d / --pipeline-model-parallel-size %d): choose sizes "
                            "whose product divides %d, or start a multiple of %lld ranks",
                            s->ep, s->etp, etp_given ? "" : " (left out: TP)", expert, stage,
                            s->world, s->pp, stage, a / gcd(a, b) * b);
    }
    int edp = (int)(stage / expert);
    if (s->edp != 0 && s->edp != edp)
        return gl_errprintf(err, "expert data-parallel size %d: the world size %d and "
                            "EP x ETP x PP = %lld give %d; leave it 0 or set it to %d",
                            s->edp, s->world, expert * s->pp, edp, edp);
    s->edp = edp;
    return 0;
}

int gl_grid_init(gl_grid_spec *s, gl_error *err)
{
    if (s->world < 1)
        return gl_errprintf(err, "world size %d: start at least one rank "
                            "(mpiexec -n N, srun -n N)", s->world);
    if (default_one(&s->tp, "--tensor-model-parallel-size", err) ||
        default_one(&s->cp, "--context-parallel-size", err) ||
        default_one(&s->ep, "--expert-model-parallel-size", err) ||
        default_one(&s->pp, "--pipeline-model-parallel-size", err))
        return -1;
    if (s->dp < 0)
        return gl_errprintf(err, "--data-parallel-size %d: must be positive, "
                            "or left out to be derived from the world size", s->dp);
    if (s->ranks_per_node < 0)
        return gl_errprintf(err, "ranks per node %d: must be positive (or 0 "
                            "for unknown)", s->ranks_per_node);

    long long model = (long long)s->tp * s->cp * s->pp;
    if (model > s->world || s->world % model != 0)
        return gl_errprintf(err,
                            "--tensor-model-parallel-size %d x --context-parallel-size %d "
                            "x --pipeline-model-parallel-size %d = %lld does not divide "
                            "the world size %d: choose sizes whose product divides %d, "
                            "or start a multiple of %lld ranks",
                            s->tp, s->cp, s->pp, model, s->world, s->world, model);
    int dp = (int)(s->world / model);
    if (s->dp != 0 && s->dp != dp)
        return gl_errprintf(err, "--data-parallel-size %d: the world size %d "
                            "and TP x CP x PP = %lld give %d; leave it out or set it "
                            "to %d", s->dp, s->world, model, dp, dp);
    s->dp = dp;
    return expert_init(s, err);
}

gl_coord gl_grid_coord(const gl_grid_spec *s, int rank)
{
    gl_coord c;
    c.tp = rank % s->tp;
    rank /= s->tp;
    c.cp = rank % s->cp;
    rank /= s->cp;
    c.dp = rank % s->dp;
    c.pp = rank / s->dp;
    return c;
}

int gl_grid_rank(const gl_grid_spec *s, gl_coord c)
{
    return c.tp + s->tp * (c.cp + s->cp * (c.dp + s->dp * c.pp));
}

gl_ecoord gl_grid_ecoord(const gl_grid_spec *s, int rank)
{
    gl_ecoord c;
    c.etp = rank % s->etp;
    rank /= s->etp;
    c.ep = rank % s->ep;
    rank /= s->ep;
    c.edp = rank % s->edp;
    c.pp = rank / s->edp;
    return c;
}

int gl_grid_erank(const gl_grid_spec *s, gl_ecoord c)
{
    return c.etp + s->etp * (c.ep + s->ep * (c.edp + s->edp * c.pp));
}

int gl_grid_ep_index(const gl_grid_spec *s, int rank)
{
    return gl_grid_ecoord(s, rank).ep;
}

int gl_grid_edp_index(const gl_grid_spec *s, int rank)
{
    return gl_grid_ecoord(s, rank).edp;
}

int gl_grid_etp_index(const gl_grid_spec *s, int rank)
{
    return gl_grid_ecoord(s, rank).etp;
}

int gl_grid_experts(const gl_grid_spec *s, int num_experts, int ep, int *first)
{
    int count = num_experts / s->ep;
    *first = ep * count;
    return count;
}

int gl_grid_expert_grid_differs(const gl_grid_spec *s)
{
    return s->ep > 1 || s->etp != s->tp;
}

int gl_grid_group_size(const gl_grid_spec *s, gl_axis axis)
{
    switch (axis) {
    case GL_AXIS_TP:    return s->tp;
    case GL_AXIS_CP:    return s->cp;
    case GL_AXIS_DP:    return s->dp;
    case GL_AXIS_PP:    return s->pp;
    case GL_AXIS_DP_CP: return s->dp * s->cp;
    case GL_AXIS_MP:    return s->tp * s->pp;
    case GL_AXIS_EP:    return s->ep;
    case GL_AXIS_EDP:   return s->edp;
    case GL_AXIS_ETP:   return s->etp;
    default:            return 0;
    }
}

/* The index of coordinate c along the axis (see grid.h for each). */
static int axis_index(const gl_grid_spec *s, gl_axis axis, gl_coord c)
{
    switch (axis) {
    case GL_AXIS_TP:    return c.tp;
    case GL_AXIS_CP:    return c.cp;
    case GL_AXIS_DP:    return c.dp;
    case GL_AXIS_PP:    return c.pp;
    case GL_AXIS_DP_CP: return c.cp + s->cp * c.dp;
    case GL_AXIS_MP:    return c.tp + s->tp * c.pp;
    default:            return -1;
    }
}

/* c with its index along the axis replaced by i: the i-th member of c's
 * group.  The inverse of axis_index() on the coordinates it covers. */
static gl_coord with_index(const gl_grid_spec *s, gl_axis axis, gl_coord c, int i)
{
    switch (axis) {
    case GL_AXIS_TP:    c.tp = i; break;
    case GL_AXIS_CP:    c.cp = i; break;
    case GL_AXIS_DP:    c.dp = i; break;
    case GL_AXIS_PP:    c.pp = i; break;
    case GL_AXIS_DP_CP: c.cp = i % s->cp; c.dp = i / s->cp; break;
    case GL_AXIS_MP:    c.tp = i % s->tp; c.pp = i / s->tp; break;
    default: break;
    }
    return c;
}

/* The axes of the expert grid. */
static int is_expert_axis(gl_axis axis)
{
    return axis == GL_AXIS_EP || axis == GL_AXIS_EDP || axis == GL_AXIS_ETP;
}

/* axis_index() and with_index() of the expert axes, on expert-grid
 * coordinates. */
static int eaxis_index(gl_axis axis, gl_ecoord c)
{
    switch (axis) {
    case GL_AXIS_EP:    return c.ep;
    case GL_AXIS_EDP:   return c.edp;
    case GL_AXIS_ETP:   return c.etp;
    default:            return -1;
    }
}

static gl_ecoord ewith_index(gl_axis axis, gl_ecoord c, int i)
{
    switch (axis) {
    case GL_AXIS_EP:    c.ep = i; break;
    case GL_AXIS_EDP:   c.edp = i; break;
    case GL_AXIS_ETP:   c.etp = i; break;
    default: break;
    }
    return c;
}

/* The world rank of the i-th member of rank's group on the axis. */
static int member(const gl_grid_spec *s, gl_axis axis, int rank, int i)
{
    if (is_expert_axis(axis))
        return gl_grid_erank(s, ewith_index(axis, gl_grid_ecoord(s, rank), i));
    return gl_grid_rank(s, with_index(s, axis, gl_grid_coord(s, rank), i));
}

int gl_grid_group(const gl_grid_spec *s, gl_axis axis, int rank, int *members)
{
    int n = gl_grid_group_size(s, axis);
    for (int i = 0; i < n; i++)
        members[i] = member(s, axis, rank, i);
    return n;
}

int gl_grid_group_index(const gl_grid_spec *s, gl_axis axis, int rank)
{
    if (is_expert_axis(axis))
        return eaxis_index(axis, gl_grid_ecoord(s, rank));
    return axis_index(s, axis, gl_grid_coord(s, rank));
}

/* Every rank formula above grows with the index, so member 0 is the
 * group's lowest rank: a colour unique to the group. */
int gl_grid_group_color(const gl_grid_spec *s, gl_axis axis, int rank)
{
    return member(s, axis, rank, 0);
}

int gl_grid_embd_group(const gl_grid_spec *s, int rank, int *members)
{
    gl_coord c = gl_grid_coord(s, rank);
    if (c.pp != 0 && c.pp != s->pp - 1)
        return 0;
    c.pp = 0;
    members[0] = gl_grid_rank(s, c);
    if (s->pp == 1)
        return 1;
    c.pp = s->pp - 1;
    members[1] = gl_grid_rank(s, c);
    return 2;
}

int gl_grid_embd_color(const gl_grid_spec *s, int rank)
{
    int m[2];
    return gl_grid_embd_group(s, rank, m) ? m[0] : -1;
}

/* A TP group is the TP consecutive ranks starting at a multiple of TP; it
 * is node-local when its first and last rank fall in the same block of
 * ranks_per_node. */
int gl_grid_tp_node_local(const gl_grid_spec *s)
{
    int per = s->ranks_per_node;
    if (per <= 0)
        return 1;
    for (int first = 0; first < s->world; first += s->tp)
        if (first / per != (first + s->tp - 1) / per)
            return 0;
    return 1;
}

const char *gl_axis_name(gl_axis axis)
{
    static const char *const names[GL_AXIS_COUNT] = {
        "tp", "cp", "dp", "pp", "dp_cp", "mp", "ep", "edp", "etp"
    };
    return (unsigned)axis < GL_AXIS_COUNT ? names[axis] : "?";
}
