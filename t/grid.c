/*
 * grid.t: the process grid of src/grid (pure, no MPI).
 *
 * First the worked examples of reference/grid.md exactly, and of the
 * expert grid (Megatron's parallel folding) worked out by hand, then
 * properties over every layout of 1..64 ranks: coordinates of both grids
 * round-trip through the Megatron formulas written out here, both grids
 * give the same pipeline stage, every axis partitions the world into
 * groups of the right size whose members differ only in that axis and
 * are listed in index order, colours identify groups, and TP node-locality
 * agrees with a brute-force look at each group.  Last, bad layouts give
 * the message naming the flag.
 */
#include <config.h>
#include "grid/grid.h"
#include "tap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXW 64

/* "[a,b] [c,d] ..." of every group of the axis, each listed once, in
 * order of their lowest rank. */
static void list_groups(const gl_grid_spec *s, gl_axis axis, char *out, size_t len)
{
    int members[MAXW], seen[MAXW] = {0};
    size_t n = 0;
    out[0] = '\0';
    for (int r = 0; r < s->world; r++) {
        int color = gl_grid_group_color(s, axis, r);
        if (seen[color])
            continue;
        seen[color] = 1;
        int k = gl_grid_group(s, axis, r, members);
        n += snprintf(out + n, len - n, "%s[", n ? " " : "");
        for (int i = 0; i < k; i++)
            n += snprintf(out + n, len - n, "%s%d", i ? "," : "", members[i]);
        n += snprintf(out + n, len - n, "]");
    }
}

static gl_grid_spec layout(int world, int tp, int cp, int pp)
{
    gl_grid_spec s = { .world = world, .tp = tp, .cp = cp, .pp = pp };
    gl_error err;
    if (gl_grid_init(&s, &err) != 0)
        bail_out("layout W=%d TP=%d CP=%d PP=%d refused: %s", world, tp, cp, pp, err.text);
    return s;
}

/* The groups of the axis, as list_groups() writes them, are want. */
static void is_groups(const gl_grid_spec *s, gl_axis axis, const char *want, const char *name)
{
    char buf[1024];
    list_groups(s, axis, buf, sizeof buf);
    is_string(buf, want, "%s", name);
}

static void test_reference_example(void)
{
    gl_grid_spec s = layout(16, 2, 1, 4);
    is_int(s.dp, 2, "16 ranks, TP=2, PP=4: DP = 2");
    is_int(s.cp, 1, "CP defaults to 1");
    is_int(s.ep, 1, "EP defaults to 1");
    is_groups(&s, GL_AXIS_TP, "[0,1] [2,3] [4,5] [6,7] [8,9] [10,11] [12,13] [14,15]",
              "grid.md TP groups");
    is_groups(&s, GL_AXIS_DP, "[0,2] [1,3] [4,6] [5,7] [8,10] [9,11] [12,14] [13,15]",
              "grid.md DP groups");
    is_groups(&s, GL_AXIS_PP, "[0,4,8,12] [1,5,9,13] [2,6,10,14] [3,7,11,15]", "grid.md PP groups");
    is_groups(&s, GL_AXIS_MP, "[0,1,4,5,8,9,12,13] [2,3,6,7,10,11,14,15]",
              "model-parallel (TP x PP) groups");
    gl_coord c = gl_grid_coord(&s, 13);
    ok(c.tp == 1 && c.cp == 0 && c.dp == 0 && c.pp == 3,
       "rank 13 is tp 1, dp 0, pp 3 (got tp %d cp %d dp %d pp %d)", c.tp, c.cp, c.dp, c.pp);
    is_int(gl_grid_group_index(&s, GL_AXIS_PP, 9), 2, "rank 9 is stage 2");

    int m[2];
    int k = gl_grid_embd_group(&s, 0, m);
    ok(k == 2 && m[0] == 0 && m[1] == 12, "embedding group of rank 0 is [0,12]");
    k = gl_grid_embd_group(&s, 13, m);
    ok(k == 2 && m[0] == 1 && m[1] == 13, "embedding group of rank 13 is [1,13]");
    is_int(gl_grid_embd_group(&s, 5, m), 0, "a middle stage has no embedding group");
    is_int(gl_grid_embd_color(&s, 6), -1, "and no embedding colour");
    s = layout(4, 2, 1, 1);
    k = gl_grid_embd_group(&s, 3, m);
    ok(k == 1 && m[0] == 3, "PP=1: the embedding group is the rank itself");

    /* CP sits between TP and DP. */
    s = layout(16, 2, 2, 2);
    is_groups(&s, GL_AXIS_CP, "[0,2] [1,3] [4,6] [5,7] [8,10] [9,11] [12,14] [13,15]",
              "TP=2 CP=2 PP=2: CP groups");
    is_groups(&s, GL_AXIS_DP, "[0,4] [1,5] [2,6] [3,7] [8,12] [9,13] [10,14] [11,15]",
              "TP=2 CP=2 PP=2: DP groups");
    is_groups(&s, GL_AXIS_DP_CP, "[0,2,4,6] [1,3,5,7] [8,10,12,14] [9,11,13,15]",
              "TP=2 CP=2 PP=2: DP x CP groups");

    /* TP = ETP = CP = 1: EP subdivides DP, EP fastest. */
    s = (gl_grid_spec){ .world = 8, .ep = 2 };
    ok(gl_grid_init(&s, NULL) == 0 && s.dp == 8 && s.etp == 1 && s.edp == 4,
       "W=8 EP=2 gives DP=8, ETP=1, EDP=4");
    is_groups(&s, GL_AXIS_EP, "[0,1] [2,3] [4,5] [6,7]", "EP groups");
    is_groups(&s, GL_AXIS_EDP, "[0,2,4,6] [1,3,5,7]", "expert-data-parallel groups");
}

/* The expert grid: Megatron's RankGenerator(tp=ETP, ep=EP, dp=EDP, pp=PP,
 * cp=1), order etp-ep-edp-pp; a group of one axis is the ranks whose
 * other expert coordinates agree, rank = etp + ETP (ep + EP (edp + EDP
 * pp)).  The groups below are worked out by hand from that formula. */
static void test_expert_examples(void)
{
    int m[4], first;

    /* 16 ranks, TP 2, CP 1, PP 2, EP 4, ETP 1: DP = 4, a stage holds 8
     * ranks, EDP = 16 / (1 x 4 x 2) = 2; rank = ep + 4 (edp + 2 pp). */
    gl_grid_spec s = { .world = 16, .tp = 2, .pp = 2, .ep = 4, .etp = 1 };
    is_int(gl_grid_init(&s, NULL), 0, "W=16 TP=2 PP=2 EP=4 ETP=1 is a layout");
    ok(s.dp == 4 && s.edp == 2 && s.etp == 1, "with DP 4, EDP 2 (got DP %d EDP %d)",
       s.dp, s.edp);
    is_groups(&s, GL_AXIS_EP, "[0,1,2,3] [4,5,6,7] [8,9,10,11] [12,13,14,15]",
              "EP=4 ETP=1: EP groups, 4 consecutive ranks");
    is_groups(&s, GL_AXIS_EDP, "[0,4] [1,5] [2,6] [3,7] [8,12] [9,13] [10,14] [11,15]",
              "EP=4 ETP=1: EDP groups, stride EP within a stage");
    is_groups(&s, GL_AXIS_ETP, "[0] [1] [2] [3] [4] [5] [6] [7] [8] [9] [10] [11] [12] "
              "[13] [14] [15]", "ETP=1: every rank its own ETP group");
    is_groups(&s, GL_AXIS_PP, "[0,8] [1,9] [2,10] [3,11] [4,12] [5,13] [6,14] [7,15]",
              "the PP groups, of both grids");
    is_groups(&s, GL_AXIS_DP, "[0,2,4,6] [1,3,5,7] [8,10,12,14] [9,11,13,15]",
              "the attention grid's DP groups are unchanged");
    gl_ecoord e = gl_grid_ecoord(&s, 13);
    ok(e.etp == 0 && e.ep == 1 && e.edp == 1 && e.pp == 1,
       "rank 13 is etp 0, ep 1, edp 1, pp 1 (got %d %d %d %d)", e.etp, e.ep, e.edp, e.pp);
    is_int(gl_grid_erank(&s, e), 13, "and back");
    is_int(gl_grid_ep_index(&s, 13), 1, "gl_grid_ep_index(13)");
    is_int(gl_grid_edp_index(&s, 13), 1, "gl_grid_edp_index(13)");
    is_int(gl_grid_etp_index(&s, 13), 0, "gl_grid_etp_index(13)");
    is_int(gl_grid_group_index(&s, GL_AXIS_EDP, 13), 1, "rank 13 is member 1 of its EDP group");
    is_int(gl_grid_group_color(&s, GL_AXIS_EDP, 13), 9, "whose colour is its lowest rank, 9");
    int k = gl_grid_experts(&s, 64, gl_grid_ep_index(&s, 13), &first);
    ok(k == 16 && first == 16, "64 experts over EP 4: rank 13 holds experts [16, 32) (got "
       "[%d, %d))", first, first + k);
    k = gl_grid_experts(&s, 64, 3, &first);
    ok(k == 16 && first == 48, "EP index 3 holds experts [48, 64)");
    is_int(gl_grid_expert_grid_differs(&s), 1, "EP 4: the expert grid is its own");

    /* 16 ranks, TP 2, CP 2, EP 2, ETP left out (= TP 2): EDP = 16 / 4 = 4;
     * rank = etp + 2 (ep + 2 edp).  The EP groups are the CP groups: the
     * expert grid folds CP into EP and EDP. */
    s = (gl_grid_spec){ .world = 16, .tp = 2, .cp = 2, .ep = 2 };
    ok(gl_grid_init(&s, NULL) == 0 && s.etp == 2 && s.edp == 4 && s.dp == 4,
       "W=16 TP=2 CP=2 EP=2: ETP defaults to TP 2, EDP 4");
    is_groups(&s, GL_AXIS_ETP, "[0,1] [2,3] [4,5] [6,7] [8,9] [10,11] [12,13] [14,15]",
              "ETP = TP: the ETP groups are the TP groups");
    is_groups(&s, GL_AXIS_EP, "[0,2] [1,3] [4,6] [5,7] [8,10] [9,11] [12,14] [13,15]",
              "CP=2 EP=2: EP groups stride over TP, as the CP groups");
    is_groups(&s, GL_AXIS_EDP, "[0,4,8,12] [1,5,9,13] [2,6,10,14] [3,7,11,15]",
              "CP=2 EP=2: EDP groups");

    /* 8 ranks, TP 2, EP 2, ETP 1: EDP = 4; rank = ep + 2 edp: the experts
     * are whole and an EP group is a TP group. */
    s = (gl_grid_spec){ .world = 8, .tp = 2, .ep = 2, .etp = 1 };
    ok(gl_grid_init(&s, NULL) == 0 && s.edp == 4, "W=8 TP=2 EP=2 ETP=1: EDP 4");
    is_groups(&s, GL_AXIS_EP, "[0,1] [2,3] [4,5] [6,7]", "ETP=1 under TP=2: EP groups");
    is_groups(&s, GL_AXIS_EDP, "[0,2,4,6] [1,3,5,7]", "ETP=1 under TP=2: EDP groups");
    is_int(gl_grid_group_size(&s, GL_AXIS_ETP), 1, "ETP groups of one");

    /* 8 ranks, TP 1, EP 2, ETP 4: EDP = 1; rank = etp + 4 ep. */
    s = (gl_grid_spec){ .world = 8, .ep = 2, .etp = 4 };
    ok(gl_grid_init(&s, NULL) == 0 && s.edp == 1, "W=8 EP=2 ETP=4: EDP 1");
    is_groups(&s, GL_AXIS_ETP, "[0,1,2,3] [4,5,6,7]", "ETP=4 over TP=1: ETP groups");
    is_groups(&s, GL_AXIS_EP, "[0,4] [1,5] [2,6] [3,7]", "ETP=4: EP groups stride 4");
    is_groups(&s, GL_AXIS_EDP, "[0] [1] [2] [3] [4] [5] [6] [7]", "EDP 1: groups of one");
    is_int(gl_grid_expert_grid_differs(&s), 1, "ETP != TP: the expert grid is its own");

    /* EP 1 and ETP = TP: the expert grid's groups are the attention
     * grid's TP and DP x CP groups. */
    s = (gl_grid_spec){ .world = 16, .tp = 2, .cp = 2, .pp = 2 };
    ok(gl_grid_init(&s, NULL) == 0 && s.edp == 4, "W=16 TP=2 CP=2 PP=2, EP 1: EDP = DP x CP");
    is_int(gl_grid_expert_grid_differs(&s), 0, "EP 1, ETP = TP: no grid of its own");
    char a[256], b[256];
    list_groups(&s, GL_AXIS_EDP, a, sizeof a);
    list_groups(&s, GL_AXIS_DP_CP, b, sizeof b);
    is_string(a, b, "EP 1: the EDP groups are the DP x CP groups");
    k = gl_grid_group(&s, GL_AXIS_EP, 5, m);
    ok(k == 1 && m[0] == 5, "EP 1: the EP group of rank 5 is [5]");
}

/* The coordinates that must agree between two members of a group of the
 * axis, packed into one number; written from the definitions in grid.h,
 * independently of grid.c: the attention grid's coordinates for its
 * axes, the expert grid's (from the formula in expert_coord) for EP, EDP
 * and ETP. */
static gl_ecoord expert_coord(const gl_grid_spec *s, int r)
{
    gl_ecoord e;
    e.etp = r % s->etp;
    e.ep = r / s->etp % s->ep;
    e.edp = r / (s->etp * s->ep) % s->edp;
    e.pp = r / (s->etp * s->ep * s->edp);
    return e;
}

static long fixed_key(const gl_grid_spec *s, gl_axis axis, int r)
{
    gl_coord c = gl_grid_coord(s, r);
    gl_ecoord e = expert_coord(s, r);
    int tp = c.tp, cp = c.cp, dp = c.dp, pp = c.pp;
    switch (axis) {
    case GL_AXIS_TP:    tp = -1; break;
    case GL_AXIS_CP:    cp = -1; break;
    case GL_AXIS_DP:    dp = -1; break;
    case GL_AXIS_PP:    pp = -1; break;
    case GL_AXIS_DP_CP: cp = -1; dp = -1; break;
    case GL_AXIS_MP:    tp = -1; pp = -1; break;
    case GL_AXIS_EP:    tp = e.etp; cp = -1; dp = e.edp; break;
    case GL_AXIS_EDP:   tp = e.etp; cp = e.ep; dp = -1; break;
    case GL_AXIS_ETP:   tp = -1; cp = e.ep; dp = e.edp; break;
    default: break;
    }
    return (((long)(tp + 1) * 100 + (cp + 1)) * 100 + (dp + 1)) * 100 + (pp + 1);
}

/* Check one layout; returns the number of violations and describes the
 * first in why. */
static int check_layout(const gl_grid_spec *s, char *why, size_t len)
{
    int bad = 0;
#define BAD(...) do { if (!bad++) snprintf(why, len, __VA_ARGS__); } while (0)
    int W = s->world;
    for (int r = 0; r < W; r++) {
        gl_coord c = gl_grid_coord(s, r);
        if (c.tp < 0 || c.tp >= s->tp || c.cp < 0 || c.cp >= s->cp ||
            c.dp < 0 || c.dp >= s->dp || c.pp < 0 || c.pp >= s->pp)
            BAD("rank %d: coordinate out of range", r);
        if (c.tp + s->tp * (c.cp + s->cp * (c.dp + s->dp * c.pp)) != r)
            BAD("rank %d: Megatron formula gives another rank", r);
        if (gl_grid_rank(s, c) != r)
            BAD("rank %d: gl_grid_rank(coord) != rank", r);
        gl_ecoord e = expert_coord(s, r), g = gl_grid_ecoord(s, r);
        if (e.etp + s->etp * (e.ep + s->ep * (e.edp + s->edp * e.pp)) != r)
            BAD("rank %d: the expert formula gives another rank", r);
        if (g.etp != e.etp || g.ep != e.ep || g.edp != e.edp || g.pp != e.pp ||
            gl_grid_erank(s, g) != r)
            BAD("rank %d: expert coordinates", r);
        if (e.pp != c.pp)
            BAD("rank %d: stage %d in the attention grid, %d in the expert grid", r, c.pp, e.pp);
        if (gl_grid_ep_index(s, r) != e.ep || gl_grid_edp_index(s, r) != e.edp ||
            gl_grid_etp_index(s, r) != e.etp)
            BAD("rank %d: EP/EDP/ETP index", r);
    }
    for (int a = 0; a < GL_AXIS_COUNT; a++) {
        int size = gl_grid_group_size(s, a), members[MAXW], count[MAXW] = {0};
        int ngroups = 0, colors[MAXW] = {0};
        for (int r = 0; r < W; r++) {
            int k = gl_grid_group(s, a, r, members);
            int idx = gl_grid_group_index(s, a, r);
            int color = gl_grid_group_color(s, a, r);
            if (k != size || W % size != 0)
                BAD("%s: group of rank %d has %d members, want %d", gl_axis_name(a), r, k, size);
            if (idx < 0 || idx >= k || members[idx] != r)
                BAD("%s: rank %d not at its index %d in its group", gl_axis_name(a), r, idx);
            if (color < 0 || color >= W || color != members[0])
                BAD("%s: rank %d colour %d", gl_axis_name(a), r, color);
            if (color >= 0 && color < W)
                colors[color] = 1;
            long key = fixed_key(s, a, r);
            for (int i = 0; i < k; i++) {
                int m = members[i];
                if (m < 0 || m >= W) {
                    BAD("%s: member %d out of range", gl_axis_name(a), m);
                    continue;
                }
                if (i > 0 && members[i - 1] >= m)
                    BAD("%s: members of rank %d's group not ascending", gl_axis_name(a), r);
                if (fixed_key(s, a, m) != key)
                    BAD("%s: rank %d and %d differ off the axis", gl_axis_name(a), r, m);
                if (gl_grid_group_index(s, a, m) != i)
                    BAD("%s: member %d of rank %d's group has index %d",
                        gl_axis_name(a), i, r, gl_grid_group_index(s, a, m));
                if (gl_grid_group_color(s, a, m) != color)
                    BAD("%s: ranks %d and %d share a group but not a colour", gl_axis_name(a), r, m);
                if (color == r)
                    count[m]++;   /* count memberships once per group */
            }
        }
        for (int r = 0; r < W; r++) {
            if (count[r] != 1)
                BAD("%s: rank %d is in %d groups", gl_axis_name(a), r, count[r]);
            ngroups += colors[r];
        }
        if (ngroups * size != W)
            BAD("%s: %d groups of %d for %d ranks", gl_axis_name(a), ngroups, size, W);
    }
    /* Embedding groups: first and last stage of each pipeline, nobody else. */
    for (int r = 0; r < W; r++) {
        int m[2], k = gl_grid_embd_group(s, r, m), pp = gl_grid_coord(s, r).pp;
        int want = (pp == 0 || pp == s->pp - 1) ? (s->pp == 1 ? 1 : 2) : 0;
        if (k != want)
            BAD("embd: rank %d (stage %d) group size %d, want %d", r, pp, k, want);
        if (k > 0 && (m[0] != gl_grid_group_color(s, GL_AXIS_PP, r) ||
                      (k == 2 && gl_grid_coord(s, m[1]).pp != s->pp - 1) ||
                      (m[0] != r && m[k - 1] != r)))
            BAD("embd: rank %d group [%d,%d]", r, m[0], m[k - 1]);
    }
    /* TP node-locality against a brute-force look at every group. */
    for (int per = 1; per <= W; per++) {
        gl_grid_spec t = *s;
        t.ranks_per_node = per;
        int local = 1, members[MAXW];
        for (int r = 0; r < W; r++) {
            int k = gl_grid_group(&t, GL_AXIS_TP, r, members);
            for (int i = 0; i < k; i++)
                if (members[i] / per != r / per)
                    local = 0;
        }
        if (gl_grid_tp_node_local(&t) != local)
            BAD("tp_node_local(ranks_per_node %d) = %d, brute force %d",
                per, gl_grid_tp_node_local(&t), local);
        if (per % s->tp == 0 && !local)
            BAD("TP %d divides %d ranks per node but groups are not node-local", s->tp, per);
    }
#undef BAD
    return bad;
}

static void test_all_layouts(void)
{
    int layouts = 0;
    for (int W = 1; W <= MAXW; W++) {
        int nlay = 0, nbad = 0;
        char why[sizeof(gl_error) + 64] = "";
        for (int tp = 1; tp <= W; tp++)
        for (int cp = 1; tp * cp <= W; cp++)
        for (int pp = 1; tp * cp * pp <= W; pp++) {
            if (W % (tp * cp * pp))
                continue;
            int dp = W / (tp * cp * pp), stage = W / pp;
            for (int ep = 1; ep <= stage; ep++)
            for (int etp = 1; ep * etp <= stage; etp++) {
                if (stage % (ep * etp))
                    continue;
                gl_grid_spec s = { .world = W, .tp = tp, .cp = cp, .ep = ep, .pp = pp,
                                   .etp = etp };
                gl_error err;
                char w[256];
                if (gl_grid_init(&s, &err) != 0) {
                    if (!nbad++)
                        snprintf(why, sizeof why, "TP=%d CP=%d PP=%d EP=%d ETP=%d refused: "
                                 "%s", tp, cp, pp, ep, etp, err.text);
                    continue;
                }
                nlay++;
                if (s.dp != dp || s.edp != stage / (ep * etp))
                    snprintf(w, sizeof w, "dp %d edp %d, want %d %d", s.dp, s.edp, dp,
                             stage / (ep * etp));
                else if (!check_layout(&s, w, sizeof w))
                    continue;
                if (!nbad++)
                    snprintf(why, sizeof why, "TP=%d CP=%d PP=%d EP=%d ETP=%d: %s", tp, cp, pp,
                             ep, etp, w);
            }
        }
        layouts += nlay;
        ok(nbad == 0, "W=%d: all %d layouts consistent%s%s", W, nlay,
           nbad ? ": " : "", why);
    }
    diag("%d layouts checked", layouts);
}

/* gl_grid_tp_node_local() of W ranks at TP tp, per_node ranks a node
 * (0: unknown). */
static int tp_node_local(int world, int tp, int per_node)
{
    gl_grid_spec s = { .world = world, .tp = tp, .ranks_per_node = per_node };
    gl_error err;
    if (gl_grid_init(&s, &err) != 0)
        bail_out("layout W=%d TP=%d refused: %s", world, tp, err.text);
    return gl_grid_tp_node_local(&s);
}

/* err holds every needle. */
static void check_error(gl_grid_spec s, const char *what, const char *n1, const char *n2)
{
    gl_error err = { "" };
    int rc = gl_grid_init(&s, &err);
    ok(rc == -1 && strstr(err.text, n1) && strstr(err.text, n2) && !strchr(err.text, '\n'),
       "%s: one line naming '%s' and '%s' (got: %s)", what, n1, n2, err.text);
}

static void test_errors(void)
{
    check_error((gl_grid_spec){ .world = 16, .tp = 3 }, "TP=3 on 16 ranks",
                "--tensor-model-parallel-size 3", "world size 16");
    check_error((gl_grid_spec){ .world = 12, .tp = 2, .pp = 4 }, "TP=2 PP=4 on 12 ranks",
                "--pipeline-model-parallel-size 4", "= 8 does not divide");
    check_error((gl_grid_spec){ .world = 4, .tp = 8 }, "TP=8 on 4 ranks",
                "--tensor-model-parallel-size 8", "world size 4");
    check_error((gl_grid_spec){ .world = 16, .cp = 32 }, "CP=32 on 16 ranks",
                "--context-parallel-size 32", "divides 16");
    check_error((gl_grid_spec){ .world = 16, .tp = 2, .ep = 3 }, "EP=3 with ETP=TP=2 on 16 ranks",
                "--expert-model-parallel-size 3 x --expert-tensor-parallel-size 2 (left out: TP) "
                "= 6 does not divide the 16 ranks", "choose sizes whose product divides 16");
    check_error((gl_grid_spec){ .world = 16, .tp = 2, .pp = 2, .ep = 16, .etp = 1 },
                "EP=16 with PP=2 on 16 ranks", "--expert-model-parallel-size 16",
                "does not divide the 8 ranks of a pipeline stage (world 16 / "
                "--pipeline-model-parallel-size 2)");
    check_error((gl_grid_spec){ .world = 8, .ep = 2, .etp = 3 }, "ETP=3 on 8 ranks",
                "--expert-tensor-parallel-size 3 = 6", "or start a multiple of 6 ranks");
    check_error((gl_grid_spec){ .world = 12, .tp = 2, .ep = 8 }, "EP=8 ETP=2 on 12 ranks",
                "= 16 does not divide the 12 ranks", "or start a multiple of 16 ranks");
    check_error((gl_grid_spec){ .world = 8, .etp = -1 }, "negative ETP",
                "--expert-tensor-parallel-size -1", "positive integer");
    check_error((gl_grid_spec){ .world = 8, .ep = 2, .edp = 2 }, "EDP=2 where 4 follows",
                "expert data-parallel size 2", "set it to 4");
    check_error((gl_grid_spec){ .world = 16, .tp = 2, .dp = 4 }, "DP=4 where 8 follows",
                "--data-parallel-size 4", "set it to 8");
    check_error((gl_grid_spec){ .world = 8, .pp = -2 }, "negative PP",
                "--pipeline-model-parallel-size -2", "positive integer");
    check_error((gl_grid_spec){ .world = 0 }, "empty world", "world size 0", "mpiexec -n");
    gl_grid_spec s = { .world = 16, .tp = 2, .dp = 8 };
    ok(gl_grid_init(&s, NULL) == 0, "a consistent explicit --data-parallel-size is accepted");
    s = (gl_grid_spec){ .world = 16, .tp = 16 };
    ok(gl_grid_init(&s, NULL) == 0, "a NULL error buffer is allowed");

    /* node-locality: TP=8 on 8-GPU nodes yes, TP=16 no, TP=4 on 6-rank nodes no,
     * ranks per node unknown yes. */
    is_int(tp_node_local(32, 8, 8), 1, "TP=8 with 8 ranks per node is node-local");
    is_int(tp_node_local(32, 16, 8), 0, "TP=16 with 8 ranks per node crosses nodes");
    is_int(tp_node_local(12, 4, 6), 0, "TP=4 with 6 ranks per node: group [4..7] crosses");
    is_int(tp_node_local(12, 4, 0), 1, "unknown ranks per node counts as node-local");
}

int main(void)
{
    plan(NO_PLAN);
    test_reference_example();
    test_expert_examples();
    test_all_layouts();
    test_errors();
    return done_testing();
}
