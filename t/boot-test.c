/*
 * boot-test: the bootstrap, the grid's communicators, their health check
 * and the dry-run report, run by t/boot.t under mpiexec.
 *
 *   boot-test                 the checks below, TAP on rank 0
 *   boot-test --bad-layout    asks for TP=3 on any world not divisible by
 *                             3: must stop the job with one error line
 *
 * GL_EXPECT_BOOT=pmix|mpi names the bootstrap path the launcher must have
 * led to (t/boot.t knows which launcher it used).
 */
#include <config.h>
#include "boot/boot.h"
#include "boot/groups.h"
#include "comm/comm.h"
#include "device/ops.h"
#include "grid/grid.h"
#include "base/log.h"
#include "tap.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef GL_HAVE_CUDA
#include <cuda_runtime.h>
#endif

/* Host names gathered here, independently of boot.c: the number of
 * distinct ones, and this rank's index among ranks of its host. */
static void count_hosts(const gl_boot *b, int *nodes, int *local_rank, int *local_size)
{
    char *all = gl_malloc((size_t)b->size * 256);
    MPI_Allgather(b->host, 256, MPI_CHAR, all, 256, MPI_CHAR, MPI_COMM_WORLD);
    *nodes = 0;
    *local_rank = 0;
    *local_size = 0;
    for (int r = 0; r < b->size; r++) {
        int first = 1;
        for (int q = 0; q < r; q++)
            if (!strcmp(all + r * 256, all + q * 256))
                first = 0;
        *nodes += first;
        if (!strcmp(all + r * 256, b->host)) {
            *local_size += 1;
            if (r < b->rank)
                *local_rank += 1;
        }
    }
    free(all);
}

/* CUDA devices this rank sees, counted here without boot.c. */
static int visible_gpus(void)
{
    int n = 0;
#ifdef GL_HAVE_CUDA
    if (cudaGetDeviceCount(&n) != cudaSuccess)
        n = 0;
    cudaGetLastError();
#endif
    return n;
}

/* Every rank's value agrees; ok() on rank 0. */
static int all_true(int v)
{
    int all;
    MPI_Allreduce(&v, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    return all;
}

static void test_boot(const gl_boot *b)
{
    int size, rank, nodes, lrank, lsize;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    count_hosts(b, &nodes, &lrank, &lsize);
    ok(all_true(b->rank == rank && b->size == size), "rank and size are MPI's (%d ranks)", size);
    ok(all_true(b->local_rank == lrank && b->local_size == lsize),
       "local rank and size match the host names (rank 0: %d of %d)", b->local_rank, b->local_size);
    ok(all_true(b->num_nodes == nodes && b->node_id >= 0),
       "%d node(s), as many as distinct host names", b->num_nodes);
    const char *want = getenv("GL_EXPECT_BOOT");
    if (want) {
        int pmix = !strcmp(want, "pmix");
        ok(all_true(b->used_pmix == pmix), "bootstrap path is %s", want);
    } else {
        skip(1, "GL_EXPECT_BOOT not set");
    }

    int ngpu = visible_gpus(), fewer = ngpu > 0 && ngpu < b->local_size;
    if (!all_true(!fewer)) {
        skip(1, "fewer GPUs than ranks on a node: gl_boot_pick_gpu would refuse");
    } else {
        int gpu = gl_boot_pick_gpu((gl_boot *)b);
        if (ngpu == 0)
            ok(all_true(gpu == -1 && b->gpu == -1 && b->gpu_bus_id[0] == '\0'),
               "no GPU: gpu = -1 and no bus id");
        else
            ok(all_true(gpu == b->local_rank && strlen(b->gpu_bus_id) > 0),
               "GPU = local rank, bus id %s", b->gpu_bus_id);
    }

    /* gl_boot_share twice: the second must not see the first's bytes. */
    for (int round = 0; round < 2; round++) {
        unsigned char buf[300];
        int good = 1;
        for (int i = 0; i < (int)sizeof buf; i++)
            buf[i] = b->rank == 0 ? (unsigned char)(i * 7 + round * 31) : 0xee;
        gl_boot_share(b, buf, sizeof buf);
        for (int i = 0; i < (int)sizeof buf; i++)
            good &= buf[i] == (unsigned char)(i * 7 + round * 31);
        ok(all_true(good), "gl_boot_share round %d carries rank 0's bytes (%s)",
           round, b->used_pmix ? "pmix" : "mpi");
    }
}

/* ": [a,b,...]": how the report starts the list of rank 0's group. */
static void first_group(const gl_grid_spec *s, gl_axis a, char *out, size_t len)
{
    int m[64], k = gl_grid_group(s, a, 0, m);
    size_t n = (size_t)snprintf(out, len, ": [");
    for (int i = 0; i < k && n < len; i++)
        n += (size_t)snprintf(out + n, len - n, "%s%d", i ? "," : "", m[i]);
    if (n < len)
        snprintf(out + n, len - n, "]");
}

/* After a failed check, the report file f as diagnostics, line by line. */
static void diag_report_if_failed(FILE *f)
{
    char line[4096];
    if (!tap_failed())
        return;
    rewind(f);
    while (fgets(line, sizeof line, f))
        diag("%s", strtok(line, "\n"));
}

/* Groups of one layout: members as the grid says, health check on host
 * memory and through the CPU device, and the dry-run report. */
static void test_layout(const gl_boot *b, gl_dev *cpu, int tp, int cp, int pp)
{
    gl_grid_spec spec = { .tp = tp, .cp = cp, .pp = pp };
    gl_groups *g = gl_groups_create(b, &spec, GL_COMM_MPI);
    const gl_grid_spec *s = &g->spec;
    char lay[64];
    snprintf(lay, sizeof lay, "TP=%d CP=%d PP=%d DP=%d", s->tp, s->cp, s->pp, s->dp);

    int *m = gl_malloc(sizeof(int) * (size_t)b->size), good = 1;
    gl_comm *comms[] = { g->tp, g->cp, g->dp, g->pp, g->dp_cp, g->mp };
    gl_axis axes[] = { GL_AXIS_TP, GL_AXIS_CP, GL_AXIS_DP, GL_AXIS_PP, GL_AXIS_DP_CP, GL_AXIS_MP };
    gl_coord me = gl_grid_coord(s, b->rank);
    good &= me.tp == g->me.tp && me.cp == g->me.cp && me.dp == g->me.dp && me.pp == g->me.pp;
    for (int i = 0; i < 6; i++) {
        int k = gl_grid_group(s, axes[i], b->rank, m);
        good &= comms[i] != NULL && gl_comm_size(comms[i]) == k &&
                gl_comm_rank(comms[i]) == gl_grid_group_index(s, axes[i], b->rank) &&
                !strcmp(gl_comm_name(comms[i]), gl_axis_name(axes[i]));
        for (int j = 0; good && j < k; j++)
            good &= gl_comm_world_rank(comms[i], j) == m[j];
    }
    int k = gl_grid_embd_group(s, b->rank, m);
    good &= (k == 0) == (g->embd == NULL);
    if (g->embd)
        for (int j = 0; j < k; j++)
            good &= gl_comm_world_rank(g->embd, j) == m[j];
    good &= gl_comm_size(g->world) == b->size && g->ep == NULL && g->edp == NULL;
    ok(all_true(good), "%s: every group's members are the grid's, in index order", lay);

    /* Job-wide group count: world + W/size per axis + one embd group per
     * pipeline. */
    int want = 1 + s->world / s->tp + s->world / s->cp + s->world / s->dp +
               s->world / s->pp + s->world / (s->dp * s->cp) +
               s->world / (s->tp * s->pp) + s->world / s->pp;
    ok(g->health_groups == -1, "%s: no health check yet", lay);
    gl_groups_health_check(g, NULL);
    ok(all_true(g->health_groups == want), "%s: health check on host memory: %d groups",
       lay, g->health_groups);
    g->health_groups = -1;
    gl_groups_health_check(g, cpu);
    ok(all_true(g->health_groups == want), "%s: health check through the CPU device", lay);

    /* The report: rank 0 writes it to a file and reads it back. */
    char path[] = "/tmp/gridlm-boot-test.XXXXXX";
    FILE *f = NULL;
    if (b->rank == 0) {
        int fd = mkstemp(path);
        f = fd >= 0 ? fdopen(fd, "w+") : NULL;
        if (!f)
            bail_out("cannot create a temporary file");
    }
    gl_dry_run_report(b, g, 0, f);
    if (b->rank == 0) {
        char line[4096], expect_boot[64], expect_health[64];
        char first_tp[256], first_pp[256];
        int rows = 0, saw_boot = 0, saw_health = 0, saw_tp = 0, saw_pp = 0;
        snprintf(expect_boot, sizeof expect_boot, "bootstrap: %s\n", b->used_pmix ? "pmix" : "mpi");
        snprintf(expect_health, sizeof expect_health, "health check: %d groups OK\n", want);
        first_group(s, GL_AXIS_TP, first_tp, sizeof first_tp);
        first_group(s, GL_AXIS_PP, first_pp, sizeof first_pp);
        rewind(f);
        while (fgets(line, sizeof line, f)) {
            int r, node;
            char host[256], local[32], gpu[16], bus[64];
            int tpc, cpc, dpc, ppc;
            if (sscanf(line, "%d %255s %d %31s %15s %63s %d %d %d %d", &r, host, &node,
                       local, gpu, bus, &tpc, &cpc, &dpc, &ppc) == 10) {
                gl_coord c = gl_grid_coord(s, r);
                if (r == rows && c.tp == tpc && c.cp == cpc && c.dp == dpc && c.pp == ppc &&
                    !strcmp(host, b->host) && (strcmp(gpu, "-") || !strcmp(bus, "-")))
                    rows++;
            }
            saw_boot |= !strcmp(line, expect_boot);
            saw_health |= !strcmp(line, expect_health);
            if (!strncmp(line, "  tp ", 5))
                saw_tp = strstr(line, first_tp) != NULL;
            if (!strncmp(line, "  pp ", 5))
                saw_pp = strstr(line, first_pp) != NULL;
        }
        ok(rows == b->size, "%s: report has one placement row per rank, coordinates right (%d)",
           lay, rows);
        ok(saw_boot, "%s: report says '%.*s'", lay, (int)strlen(expect_boot) - 1, expect_boot);
        ok(saw_health, "%s: report says '%.*s'", lay, (int)strlen(expect_health) - 1,
           expect_health);
        ok(saw_tp && saw_pp, "%s: report lists the tp and pp groups", lay);
        diag_report_if_failed(f);
        fclose(f);
        remove(path);
    }
    free(m);
    gl_groups_free(g);
}

/* The expert grid's groups (grid.h): EP, EDP and ETP communicators with
 * the grid's members, in the health check's count, and the report's
 * expert columns: etp, ep, edp and the experts of each rank. */
static void test_experts(const gl_boot *b, int tp, int ep, int etp, int num_experts)
{
    gl_grid_spec spec = { .tp = tp, .ep = ep, .etp = etp };
    gl_groups *g = gl_groups_create(b, &spec, GL_COMM_MPI);
    const gl_grid_spec *s = &g->spec;
    char lay[64];
    snprintf(lay, sizeof lay, "TP=%d EP=%d ETP=%d EDP=%d", s->tp, s->ep, s->etp, s->edp);

    int *m = gl_malloc(sizeof(int) * (size_t)b->size), good = 1;
    gl_comm *comms[] = { g->ep, g->edp, g->etp };
    gl_axis axes[] = { GL_AXIS_EP, GL_AXIS_EDP, GL_AXIS_ETP };
    gl_ecoord e = gl_grid_ecoord(s, b->rank);
    good &= e.etp == g->eme.etp && e.ep == g->eme.ep && e.edp == g->eme.edp && e.pp == g->eme.pp;
    for (int i = 0; i < 3; i++) {
        int k = gl_grid_group(s, axes[i], b->rank, m);
        good &= comms[i] != NULL && gl_comm_size(comms[i]) == k &&
                gl_comm_rank(comms[i]) == gl_grid_group_index(s, axes[i], b->rank) &&
                !strcmp(gl_comm_name(comms[i]), gl_axis_name(axes[i]));
        for (int j = 0; good && j < k; j++)
            good &= gl_comm_world_rank(comms[i], j) == m[j];
    }
    ok(all_true(good), "%s: the ep, edp and etp groups are the expert grid's", lay);

    int want = 1 + s->world / s->tp + s->world / s->cp + s->world / s->dp +
               s->world / s->pp + s->world / (s->dp * s->cp) +
               s->world / (s->tp * s->pp) + s->world / s->pp +
               s->world / s->ep + s->world / s->edp + s->world / s->etp;
    gl_groups_health_check(g, NULL);
    ok(all_true(g->health_groups == want), "%s: health check counts the expert groups: %d",
       lay, g->health_groups);

    char path[] = "/tmp/gridlm-boot-test.XXXXXX";
    FILE *f = NULL;
    if (b->rank == 0) {
        int fd = mkstemp(path);
        f = fd >= 0 ? fdopen(fd, "w+") : NULL;
        if (!f)
            bail_out("cannot create a temporary file");
    }
    gl_dry_run_report(b, g, num_experts, f);
    if (b->rank == 0) {
        char line[4096], grid[128], first_ep[256];
        int rows = 0, saw_grid = 0, saw_ep = 0;
        snprintf(grid, sizeof grid, "expert grid: ETP=%d EP=%d EDP=%d PP=%d", s->etp, s->ep,
                 s->edp, s->pp);
        first_group(s, GL_AXIS_EP, first_ep, sizeof first_ep);
        rewind(f);
        while (fgets(line, sizeof line, f)) {
            int r, node, c[7];
            char host[256], local[32], gpu[16], bus[64], experts[64], want_x[64];
            if (sscanf(line, "%d %255s %d %31s %15s %63s %d %d %d %d %d %d %d %63s", &r, host,
                       &node, local, gpu, bus, &c[0], &c[1], &c[2], &c[3], &c[4], &c[5],
                       &c[6], experts) == 14) {
                gl_ecoord x = gl_grid_ecoord(s, r);
                int n = num_experts / s->ep;
                snprintf(want_x, sizeof want_x, "[%d,%d)", x.ep * n, (x.ep + 1) * n);
                if (r == rows && x.etp == c[4] && x.ep == c[5] && x.edp == c[6] &&
                    !strcmp(experts, want_x))
                    rows++;
            }
            saw_grid |= !strncmp(line, grid, strlen(grid));
            if (!strncmp(line, "  ep ", 5))
                saw_ep = strstr(line, first_ep) != NULL;
        }
        ok(rows == b->size, "%s: report rows give etp, ep, edp and the experts of %d (%d rows)",
           lay, num_experts, rows);
        ok(saw_grid && saw_ep, "%s: report says '%s' and lists the ep groups", lay, grid);
        diag_report_if_failed(f);
        fclose(f);
        remove(path);
    }
    free(m);
    gl_groups_free(g);
}

int main(int argc, char **argv)
{
    gl_boot b;
    gl_log_set_program("boot-test");
    gl_boot_init(&argc, &argv, &b);

    if (argc > 1 && !strcmp(argv[1], "--bad-layout")) {
        gl_grid_spec spec = { .tp = 3 };
        gl_groups_create(&b, &spec, GL_COMM_MPI);
        fprintf(stderr, "boot-test: a bad layout was accepted\n");
        gl_boot_finalize(&b);
        return 0;
    }

    tap_quiet(b.rank != 0);
    plan(NO_PLAN);
    test_boot(&b);

    gl_dev *cpu = gl_dev_open_cpu();
    int W = b.size;
    test_layout(&b, cpu, 1, 1, 1);
    if (W % 2 == 0) {
        test_layout(&b, cpu, 2, 1, 1);
        test_layout(&b, cpu, 1, 1, 2);
    }
    if (W % 4 == 0) {
        test_layout(&b, cpu, 2, 1, 2);
        test_layout(&b, cpu, 1, 2, 2);
        test_layout(&b, cpu, 1, 1, 4);
    }
    if (W % 2 == 0)
        test_experts(&b, 1, 2, 1, 8);
    if (W % 4 == 0) {
        test_experts(&b, 2, 2, 1, 4);
        test_experts(&b, 1, 2, 2, 6);
    }
    gl_dev_close(cpu);

    int rc = done_testing();
    gl_boot_finalize(&b);
    return rc;
}
