/* groups.c: communicators of the grid, their health check and the dry-run
 * placement report (see groups.h). */
#include <config.h>
#include "boot/groups.h"
#include "base/log.h"

#include <mpi.h>

#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The axes that get a communicator, in creation order. */
static const gl_axis axes[] = {
    GL_AXIS_TP, GL_AXIS_CP, GL_AXIS_DP, GL_AXIS_PP, GL_AXIS_DP_CP, GL_AXIS_MP,
    GL_AXIS_EP, GL_AXIS_EDP, GL_AXIS_ETP
};
#define NAXES ((int)(sizeof axes / sizeof axes[0]))

static gl_comm **slot(gl_groups *g, gl_axis a)
{
    switch (a) {
    case GL_AXIS_TP: return &g->tp;
    case GL_AXIS_CP: return &g->cp;
    case GL_AXIS_DP: return &g->dp;
    case GL_AXIS_PP: return &g->pp;
    case GL_AXIS_DP_CP: return &g->dp_cp;
    case GL_AXIS_MP: return &g->mp;
    case GL_AXIS_EP: return &g->ep;
    case GL_AXIS_ETP: return &g->etp;
    default: return &g->edp;
    }
}

/* The expert groups exist only when the expert grid is not the
 * attention grid's (see groups.h). */
static int axis_wanted(const gl_grid_spec *s, gl_axis a)
{
    int expert = a == GL_AXIS_EP || a == GL_AXIS_EDP || a == GL_AXIS_ETP;
    return !expert || gl_grid_expert_grid_differs(s);
}

/* An error every rank would find alike: rank 0 says it and MPI_Abort
 * ends the others, so the user reads one line, not one per rank. */
static void die_once(int rank, const char *fmt, ...) GL_PRINTF(2, 3);
static void die_once(int rank, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (rank == 0)
        gl_vdie(fmt, ap);
    va_end(ap);
    MPI_Barrier(MPI_COMM_WORLD);
    gl_die("stopped: rank 0 reported the error");
}

/* gl_comm_world's way to carry the NCCL unique id: the bootstrap's
 * (PMIx when it was used, else MPI_Bcast).  ctx is the gl_boot. */
static void share_from_boot(void *ctx, void *data, size_t len)
{
    gl_boot_share(ctx, data, len);
}

/* Warn when some TP group has members on two nodes. */
static void warn_tp_span(const gl_boot *b, const gl_groups *g)
{
    int *node = gl_malloc(sizeof(int) * (size_t)b->size);
    int *m = gl_malloc(sizeof(int) * (size_t)g->spec.tp);
    MPI_Allgather(&b->node_id, 1, MPI_INT, node, 1, MPI_INT, MPI_COMM_WORLD);
    int spans = 0;
    for (int r = 0; r < b->size && !spans; r += g->spec.tp) {
        int k = gl_grid_group(&g->spec, GL_AXIS_TP, r, m);
        for (int i = 1; i < k; i++)
            spans |= node[m[i]] != node[m[0]];
    }
    if (spans && b->rank == 0)
        gl_warn("--tensor-model-parallel-size %d: some TP groups span nodes "
                "(%d ranks on this node): tensor-parallel traffic will cross "
                "the network; use a TP that divides the GPUs per node and "
                "place ranks node by node", g->spec.tp, b->local_size);
    free(m);
    free(node);
}

gl_groups *gl_groups_create(const gl_boot *b, const gl_grid_spec *spec,
                            gl_comm_kind kind)
{
    gl_groups *g = gl_calloc(1, sizeof *g);
    gl_error err;
    g->spec = *spec;
    g->kind = kind;
    g->health_groups = -1;
    if (g->spec.world == 0)
        g->spec.world = b->size;
    if (g->spec.ranks_per_node == 0)
        g->spec.ranks_per_node = b->local_size;
    if (g->spec.world != b->size)
        die_once(b->rank, "the layout is for %d ranks but the job has %d: "
                 "start %d ranks or change the parallel sizes",
                 g->spec.world, b->size, g->spec.world);
    if (gl_grid_init(&g->spec, &err) != 0)
        die_once(b->rank, "%s", err.text);
    g->me = gl_grid_coord(&g->spec, b->rank);
    g->eme = gl_grid_ecoord(&g->spec, b->rank);

    if (kind == GL_COMM_NCCL) {
#ifdef GL_HAVE_NCCL
        int have = b->gpu >= 0, all = 0;
        MPI_Allreduce(&have, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        if (!have)
            gl_die("NCCL groups need one GPU per rank, but this rank has none "
                   "(call gl_boot_pick_gpu first; run on GPU nodes, or use the "
                   "CPU back end)");
        if (!all)
            die_once(b->rank, "NCCL groups need one GPU per rank and some ranks "
                     "have none: run on GPU nodes, or use the CPU back end");
#else
        die_once(b->rank, "NCCL communicators were asked for but this build "
                 "has no CUDA/NCCL: rebuild with CUDA, or use the CPU back end");
#endif
    }
    /* The world, then each axis's groups split from it with the grid's
     * colours; the member index is the rank's index along the axis. */
    g->world = gl_comm_world(kind, share_from_boot, (void *)b);

    for (int i = 0; i < NAXES; i++) {
        gl_axis a = axes[i];
        if (!axis_wanted(&g->spec, a))
            continue;
        *slot(g, a) = gl_comm_split(g->world,
                                    gl_grid_group_color(&g->spec, a, b->rank),
                                    gl_grid_group_index(&g->spec, a, b->rank),
                                    gl_axis_name(a));
    }
    g->embd = gl_comm_split(g->world, gl_grid_embd_color(&g->spec, b->rank),
                            g->me.pp, "embd");
    warn_tp_span(b, g);
    return g;
}

void gl_groups_free(gl_groups *g)
{
    if (!g)
        return;
    gl_comm_free(g->embd);
    for (int i = NAXES - 1; i >= 0; i--)
        gl_comm_free(*slot(g, axes[i]));
    gl_comm_free(g->world);
    free(g);
}

/* ---- health check -------------------------------------------------- */

/* All-reduce {world rank + 1, 1} over c and compare with the sums the
 * member list predicts. */
static void check_one(gl_comm *c, gl_dev *d)
{
    int64_t v[2] = { gl_comm_world_rank(c, gl_comm_rank(c)) + 1, 1 }, want[2] = { 0, 0 };
    for (int i = 0; i < gl_comm_size(c); i++)
        want[0] += gl_comm_world_rank(c, i) + 1;
    want[1] = gl_comm_size(c);
    if (d) {
        void *buf = d->ops->alloc(d, sizeof v);
        d->ops->upload(d, buf, v, sizeof v);
        gl_all_reduce(c, buf, buf, 2, GL_DT_I64, GL_OP_SUM, d->stream);
        gl_comm_barrier(c);
        d->ops->download(d, v, buf, sizeof v);
        d->ops->free(d, buf);
    } else {
        gl_all_reduce(c, v, v, 2, GL_DT_I64, GL_OP_SUM, NULL);
    }
    if (v[0] != want[0] || v[1] != want[1])
        gl_die("health check of group '%s' (member %d of %d, first world rank "
               "%d) failed: the all-reduce gave (%lld, %lld), expected (%lld, "
               "%lld): the links between these ranks are broken; rerun with "
               "NCCL_DEBUG=INFO", gl_comm_name(c), gl_comm_rank(c),
               gl_comm_size(c), gl_comm_world_rank(c, 0), (long long)v[0],
               (long long)v[1], (long long)want[0], (long long)want[1]);
}

void gl_groups_health_check(gl_groups *g, gl_dev *d)
{
    if (g->kind == GL_COMM_NCCL && (!d || d->comm != GL_COMM_NCCL))
        gl_die("health check: NCCL groups need a CUDA device (got %s)",
               d ? d->ops->name : "host memory");
    if (g->kind == GL_COMM_MPI && d && d->comm != GL_COMM_MPI)
        gl_die("health check: MPI groups need host memory (got device %s)",
               d->ops->name);
    const gl_grid_spec *s = &g->spec;
    int total = 1;
    check_one(g->world, d);
    for (int i = 0; i < NAXES; i++) {
        gl_comm *c = *slot(g, axes[i]);
        if (!c)
            continue;
        check_one(c, d);
        total += s->world / gl_grid_group_size(s, axes[i]);
    }
    /* The embedding groups come last: only end stages are in them. */
    if (g->embd)
        check_one(g->embd, d);
    total += s->world / s->pp;
    /* Every rank has passed once the world agrees. */
    int one = 1, all = 0;
    MPI_Allreduce(&one, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (all != s->world)
        gl_die("health check: %d of %d ranks answered", all, s->world);
    g->health_groups = total;
}

/* ---- dry-run report ---------------------------------------------- */

typedef struct {
    int rank, local_rank, local_size, node_id, gpu;
    gl_coord c;
    gl_ecoord e;
    char host[256];
    char bus[32];
} place_row;

/* "tp (8 groups of 2): [0,1] [2,3] ..." for one axis, all groups listed
 * up to a limit. */
static void print_axis(FILE *out, const gl_grid_spec *s, const char *name,
                       int size, int ngroups, int (*members)(const gl_grid_spec *, int, int, int *),
                       int which)
{
    enum { MAX_LISTED = 64 };
    int *m = gl_malloc(sizeof(int) * (size_t)(size > 2 ? size : 2));
    char *seen = gl_calloc((size_t)s->world, 1);
    int listed = 0;
    fprintf(out, "  %-6s %d group%s of %d:", name, ngroups, ngroups == 1 ? "" : "s", size);
    for (int r = 0; r < s->world; r++) {
        int k = members(s, which, r, m);
        if (k == 0 || seen[m[0]])
            continue;
        seen[m[0]] = 1;
        if (listed++ == MAX_LISTED) {
            fprintf(out, " ... (%d more)", ngroups - MAX_LISTED);
            break;
        }
        fputs(" [", out);
        for (int i = 0; i < k; i++)
            fprintf(out, "%s%d", i ? "," : "", m[i]);
        fputc(']', out);
    }
    fputc('\n', out);
    free(seen);
    free(m);
}

static int axis_members(const gl_grid_spec *s, int axis, int r, int *m)
{
    return gl_grid_group(s, (gl_axis)axis, r, m);
}

static int embd_members(const gl_grid_spec *s, int unused, int r, int *m)
{
    (void)unused;
    return gl_grid_embd_group(s, r, m);
}

/* The placement table's expert columns: " etp ep edp experts" or, with
 * row, that rank's values (the experts "[first,end)", or "-" for a
 * dense model). */
static void expert_columns(FILE *out, const gl_grid_spec *s, int num_experts,
                           const place_row *row)
{
    if (!row) {
        fprintf(out, " %4s %4s %4s  %s", "etp", "ep", "edp", "experts");
        return;
    }
    char experts[48] = "-";
    if (num_experts > 0) {
        int first, n = gl_grid_experts(s, num_experts, row->e.ep, &first);
        snprintf(experts, sizeof experts, "[%d,%d)", first, first + n);
    }
    fprintf(out, " %4d %4d %4d  %s", row->e.etp, row->e.ep, row->e.edp, experts);
}

void gl_dry_run_report(const gl_boot *b, const gl_groups *g, int num_experts, FILE *out)
{
    place_row me, *rows = NULL;
    memset(&me, 0, sizeof me);
    me.rank = b->rank;
    me.local_rank = b->local_rank;
    me.local_size = b->local_size;
    me.node_id = b->node_id;
    me.gpu = b->gpu;
    me.c = g->me;
    me.e = g->eme;
    snprintf(me.host, sizeof me.host, "%s", b->host);
    snprintf(me.bus, sizeof me.bus, "%s", b->gpu >= 0 && b->gpu_bus_id[0] ? b->gpu_bus_id : "-");
    if (b->rank == 0)
        rows = gl_malloc(sizeof *rows * (size_t)b->size);
    MPI_Gather(&me, sizeof me, MPI_BYTE, rows, sizeof me, MPI_BYTE, 0, MPI_COMM_WORLD);
    if (b->rank != 0)
        return;

    const gl_grid_spec *s = &g->spec;
    int experts = gl_grid_expert_grid_differs(s) || num_experts > 0;
    fprintf(out, "gridlm dry run: %d ranks on %d node%s, TP=%d CP=%d PP=%d DP=%d EP=%d, "
            "%s communicators\n", b->size, b->num_nodes, b->num_nodes == 1 ? "" : "s",
            s->tp, s->cp, s->pp, s->dp, s->ep, g->kind == GL_COMM_NCCL ? "NCCL" : "MPI");
    if (experts)
        fprintf(out, "expert grid: ETP=%d EP=%d EDP=%d PP=%d (order etp-ep-edp-pp)\n",
                s->etp, s->ep, s->edp, s->pp);
    if (num_experts > 0)
        fprintf(out, "experts: %d per MoE layer, %d per rank: EP index i holds [%d i, "
                "%d (i + 1))\n", num_experts, num_experts / s->ep, num_experts / s->ep,
                num_experts / s->ep);
    fprintf(out, "%6s  %-20s %5s %6s %4s  %-14s %4s %4s %4s %4s", "rank", "host",
            "node", "local", "gpu", "pci bus id", "tp", "cp", "dp", "pp");
    if (experts)
        expert_columns(out, s, num_experts, NULL);
    fputc('\n', out);
    for (int r = 0; r < b->size; r++) {
        const place_row *p = &rows[r];
        char local[24], gpu[16];
        snprintf(local, sizeof local, "%d/%d", p->local_rank, p->local_size);
        if (p->gpu >= 0)
            snprintf(gpu, sizeof gpu, "%d", p->gpu);
        else
            snprintf(gpu, sizeof gpu, "-");
        fprintf(out, "%6d  %-20s %5d %6s %4s  %-14s %4d %4d %4d %4d", p->rank,
                p->host, p->node_id, local, gpu, p->bus, p->c.tp, p->c.cp,
                p->c.dp, p->c.pp);
        if (experts)
            expert_columns(out, s, num_experts, p);
        fputc('\n', out);
    }
    free(rows);

    fprintf(out, "groups:\n");
    for (int i = 0; i < NAXES; i++) {
        if (!axis_wanted(s, axes[i]))
            continue;
        int size = gl_grid_group_size(s, axes[i]);
        print_axis(out, s, gl_axis_name(axes[i]), size, s->world / size,
                   axis_members, axes[i]);
    }
    print_axis(out, s, "embd", s->pp == 1 ? 1 : 2, s->world / s->pp, embd_members, 0);
    fprintf(out, "bootstrap: %s\n", b->used_pmix ? "pmix" : "mpi");
    if (g->health_groups >= 0)
        fprintf(out, "health check: %d groups OK\n", g->health_groups);
    else
        fprintf(out, "health check: not run\n");
    fflush(out);
}
