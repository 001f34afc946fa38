/*
 * gridlm-bench: microbenchmarks of the ceilings of a training step (see
 * gridlm-bench(1) and src/bench/bench.h).
 *
 *     gridlm-bench gemm      [OPTIONS]   matrix products through ops.h
 *     gridlm-bench comm      [OPTIONS]   collectives through comm.h
 *     gridlm-bench attention [OPTIONS]   causal attention through ops.h
 *     gridlm-bench fp8       [OPTIONS]   FP8 products and quantization
 *
 * Thin by design: read the command line, start the job, open the device
 * (and for comm the grid's groups), run the benchmark, stop.
 */
#include <config.h>
#include "base/log.h"
#include "base/options.h"
#include "bench/bench.h"
#include "boot/boot.h"
#include "boot/groups.h"
#include "device/ops.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *name, *summary;
    void (*run)(gl_bench_ctx *);
    const gl_option *table;
} subcommand;

static const subcommand *current;

static const char *const devices[] = {"auto", "cpu", "cuda", NULL};
static const int device_values[] = {GL_DEVICE_AUTO, GL_DEVICE_CPU, GL_DEVICE_CUDA};
static const char *const layouts[] = {"NT", "NN", "TN", NULL};
static const int layout_values[] = {GL_BENCH_NT, GL_BENCH_NN, GL_BENCH_TN};
static const char *const out_dtypes[] = {"act", "f32", NULL};
static const char *const dtypes[] = {"f32", "bf16", NULL};
static const int dtype_values[] = {GL_DT_F32, GL_DT_BF16};

static void defaults(gl_bench_opts *o)
{
    memset(o, 0, sizeof *o);
    o->device = GL_DEVICE_AUTO;
    o->iters = 20;
    o->warmup = 5;
    o->check = 1;
    o->seed = 1234;
    o->layout = GL_BENCH_NT;
    o->hidden = 2048;             /* gemm --llama: a 1.5B Llama, 8192 tokens */
    o->ffn = 8192;
    o->vocab = 128256;
    o->tokens = 8192;
    o->ops = gl_strdup("all-reduce,reduce-scatter,all-gather");
    o->step_factor = 2;
    o->dtype = GL_DT_F32;
    o->tp = o->cp = o->pp = o->ep = 1;
    o->passes = gl_strdup("fwd,bwd");
}

static int opt_help(void *target, const gl_option *opt, const char *value, char **more,
                    int nmore)
{
    gl_bench_opts d;
    (void)target, (void)opt, (void)value, (void)more, (void)nmore;
    defaults(&d);
    printf("Usage: %s %s [OPTIONS]\n"
           "       mpiexec -n RANKS %s %s [OPTIONS]\n\n%s.\n", gl_log_program(), current->name,
           gl_log_program(), current->name, current->summary);
    gl_opt_help(stdout, current->table, &d);
    printf("\nSee gridlm-bench(1) for what is measured and how.\n");
    fflush(stdout);
    exit(0);
}

#define OFF(f) offsetof(gl_bench_opts, f)

/* Rows every subcommand has. */
#define COMMON_ROWS                                                                      \
    {.name = "device", .kind = GL_OPT_CHOICE, .offset = OFF(device), .metavar = "DEV",    \
     .group = "Run", .help = "cpu, cuda, or auto (the rank's GPU when there is one)",     \
     .choices = devices, .choice_values = device_values},                                 \
    {.name = "iters", .kind = GL_OPT_INT, .offset = OFF(iters), .metavar = "N",           \
     .group = "Run", .help = "timed calls per measurement", .check = GL_OPT_POSITIVE},    \
    {.name = "warmup", .kind = GL_OPT_INT, .offset = OFF(warmup), .metavar = "N",         \
     .group = "Run", .help = "untimed calls before them", .check = GL_OPT_NONNEG},        \
    {.name = "check", .kind = GL_OPT_INT, .offset = OFF(check), .metavar = "0|1",         \
     .group = "Run", .help = "verify results against an exact or host reference",        \
     .check = GL_OPT_MIN | GL_OPT_MAX, .min = 0, .max = 1},                               \
    {.name = "seed", .kind = GL_OPT_LONG, .offset = OFF(seed), .metavar = "N",            \
     .group = "Run", .help = "seed of the input data", .check = GL_OPT_NONNEG},           \
    {.name = "json", .kind = GL_OPT_FLAG, .offset = OFF(json), .group = "Output",         \
     .help = "one JSON object per measurement and line, instead of the table"},           \
    {.name = "help", .kind = GL_OPT_CALL, .offset = GL_OPT_NOWHERE, .group = "Output",    \
     .fn = opt_help, .exits = 1, .help = "print this help and exit"}

static const gl_option gemm_table[] = {
    {.name = "shapes", .kind = GL_OPT_DUP, .offset = OFF(shapes), .metavar = "LIST",
     .group = "GEMM", .help = "MxNxK or N (square), comma-separated",
     .defstr = "cpu: 128,256,512; cuda: 1024..8192 and Llama-3-8B's layer at 8192 tokens"},
    {.name = "layout", .kind = GL_OPT_CHOICE, .offset = OFF(layout), .metavar = "L",
     .group = "GEMM", .help = "NT (forward X W^T), NN (input gradient), TN (weight gradient)",
     .choices = layouts, .choice_values = layout_values},
    {.name = "out-dtype", .kind = GL_OPT_CHOICE, .offset = OFF(out_f32), .metavar = "T",
     .group = "GEMM", .help = "act (the device's dtype) or f32 with beta 1 (gradient accumulation)",
     .choices = out_dtypes},
    {.name = "llama", .kind = GL_OPT_FLAG, .offset = OFF(llama), .group = "Llama",
     .help = "instead of --shapes: one Llama layer's products and the LM head, each timed "
             "with cuBLASLt's first heuristic algorithm and tuned (GRIDLM_GEMM_TUNE)"},
    {.name = "hidden-size", .kind = GL_OPT_INT, .offset = OFF(hidden), .metavar = "H",
     .group = "Llama", .help = "hidden size", .check = GL_OPT_POSITIVE},
    {.name = "ffn-hidden-size", .kind = GL_OPT_INT, .offset = OFF(ffn), .metavar = "F",
     .group = "Llama", .help = "MLP width (gate and up are one product of 2F)",
     .check = GL_OPT_POSITIVE},
    {.name = "num-attention-heads", .kind = GL_OPT_INT, .offset = OFF(heads), .metavar = "N",
     .group = "Llama", .help = "query heads", .check = GL_OPT_POSITIVE, .defstr = "32"},
    {.name = "num-query-groups", .kind = GL_OPT_INT, .offset = OFF(kv_heads), .metavar = "G",
     .group = "Llama", .help = "key/value heads (GQA)", .check = GL_OPT_POSITIVE,
     .defstr = "8; = heads when only heads are given"},
    {.name = "kv-channels", .kind = GL_OPT_INT, .offset = OFF(head_dim), .metavar = "D",
     .group = "Llama", .help = "head dimension", .check = GL_OPT_POSITIVE, .defstr = "64"},
    {.name = "vocab-size", .kind = GL_OPT_INT, .offset = OFF(vocab), .metavar = "V",
     .group = "Llama", .help = "vocabulary (this rank's part under TP)",
     .check = GL_OPT_POSITIVE},
    {.name = "tokens", .kind = GL_OPT_INT, .offset = OFF(tokens), .metavar = "N",
     .group = "Llama", .help = "tokens per micro-batch (micro-batch size x sequence length)",
     .check = GL_OPT_POSITIVE},
    COMMON_ROWS,
    {0},
};

static const gl_option comm_table[] = {
    {.name = "ops", .kind = GL_OPT_DUP, .offset = OFF(ops), .metavar = "LIST", .group = "Comm",
     .help = "collectives: all-reduce, reduce-scatter, all-gather (comma-separated)"},
    {.name = "groups", .kind = GL_OPT_DUP, .offset = OFF(groups), .metavar = "LIST",
     .group = "Comm", .help = "world, tp, cp, dp, pp, dp_cp, mp, ep, edp (comma-separated)",
     .defstr = "world and every tp/cp/dp/pp group between 2 ranks and the world"},
    {.name = "min-bytes", .kind = GL_OPT_DUP, .offset = OFF(min_bytes), .metavar = "SIZE",
     .group = "Comm", .help = "smallest message (whole array; K, M, G binary)", .defstr = "1K"},
    {.name = "max-bytes", .kind = GL_OPT_DUP, .offset = OFF(max_bytes), .metavar = "SIZE",
     .group = "Comm", .help = "largest message", .defstr = "cpu: 4M; cuda: 1G"},
    {.name = "step-factor", .kind = GL_OPT_INT, .offset = OFF(step_factor), .metavar = "F",
     .group = "Comm", .help = "multiply the size by F each step", .check = GL_OPT_MIN, .min = 2},
    {.name = "dtype", .kind = GL_OPT_CHOICE, .offset = OFF(dtype), .metavar = "T",
     .group = "Comm", .help = "f32 (gradients) or bf16 (weights, activations)",
     .choices = dtypes, .choice_values = dtype_values},
    {.name = "tensor-model-parallel-size", .kind = GL_OPT_INT, .offset = OFF(tp), .metavar = "N",
     .group = "Grid", .help = "TP: ranks per tensor-parallel group", .check = GL_OPT_POSITIVE},
    {.name = "context-parallel-size", .kind = GL_OPT_INT, .offset = OFF(cp), .metavar = "N",
     .group = "Grid", .help = "CP: ranks per context-parallel group", .check = GL_OPT_POSITIVE},
    {.name = "pipeline-model-parallel-size", .kind = GL_OPT_INT, .offset = OFF(pp),
     .metavar = "N", .group = "Grid", .help = "PP: pipeline stages", .check = GL_OPT_POSITIVE},
    {.name = "expert-model-parallel-size", .kind = GL_OPT_INT, .offset = OFF(ep),
     .metavar = "N", .group = "Grid",
     .help = "EP: expert-parallel group size (EP x TP divides TP x CP x DP)",
     .check = GL_OPT_POSITIVE},
    COMMON_ROWS,
    {0},
};

static const gl_option attn_table[] = {
    {.name = "micro-batch-size", .kind = GL_OPT_INT, .offset = OFF(batch), .metavar = "B",
     .group = "Attention", .help = "sequences per call", .check = GL_OPT_POSITIVE,
     .defstr = "1"},
    {.name = "seq-lengths", .kind = GL_OPT_DUP, .offset = OFF(seqs), .metavar = "LIST",
     .group = "Attention", .help = "sequence lengths, comma-separated",
     .defstr = "cpu: 64,128; cuda: 1024,2048,4096,8192,16384"},
    {.name = "num-attention-heads", .kind = GL_OPT_INT, .offset = OFF(heads), .metavar = "H",
     .group = "Attention", .help = "query heads", .check = GL_OPT_POSITIVE,
     .defstr = "cpu: 4; cuda: 32"},
    {.name = "num-query-groups", .kind = GL_OPT_INT, .offset = OFF(kv_heads), .metavar = "G",
     .group = "Attention", .help = "key/value heads (GQA)", .check = GL_OPT_POSITIVE,
     .defstr = "cpu: 2; cuda: 8; = heads when only heads are given"},
    {.name = "kv-channels", .kind = GL_OPT_INT, .offset = OFF(head_dim), .metavar = "D",
     .group = "Attention", .help = "head dimension", .check = GL_OPT_POSITIVE,
     .defstr = "cpu: 32; cuda: 128"},
    {.name = "passes", .kind = GL_OPT_DUP, .offset = OFF(passes), .metavar = "LIST",
     .group = "Attention", .help = "fwd, bwd (comma-separated)"},
    COMMON_ROWS,
    {0},
};

static const gl_option fp8_table[] = {
    {.name = "shapes", .kind = GL_OPT_DUP, .offset = OFF(shapes), .metavar = "LIST",
     .group = "FP8", .help = "MxNxK or N (square), multiples of 16, comma-separated: "
     "C[m,n] = A[m,k] B[n,k]^T",
     .defstr = "cpu: 64,32x48x80; cuda: 8192 and the 1.5B model's QKV, gate+up and down "
     "products at 8192 tokens"},
    COMMON_ROWS,
    {0},
};

static const subcommand subcommands[] = {
    {"gemm", "Matrix-product throughput through the device's gemm (TFLOP/s; GFLOP/s on the CPU)",
     gl_bench_gemm, gemm_table},
    {"comm", "All-reduce, reduce-scatter and all-gather bandwidth on the grid's groups "
     "(nccl-tests' algbw and busbw)", gl_bench_comm, comm_table},
    {"attention", "Causal attention forward and backward throughput (FlashAttention's FLOP "
     "count)", gl_bench_attention, attn_table},
    {"fp8", "FP8 products against the act-dtype product (TFLOP/s), and FP8 quantization "
     "(GB/s)", gl_bench_fp8, fp8_table},
};
#define NSUB ((int)(sizeof subcommands / sizeof subcommands[0]))

static void usage(FILE *f)
{
    fprintf(f, "Usage: %s SUBCOMMAND [OPTIONS]\n"
            "       mpiexec -n RANKS %s SUBCOMMAND [OPTIONS]\n\nSubcommands:\n",
            gl_log_program(), gl_log_program());
    for (int i = 0; i < NSUB; i++)
        fprintf(f, "  %-10s %s\n", subcommands[i].name, subcommands[i].summary);
    fprintf(f, "\n'%s SUBCOMMAND --help' lists its options; see gridlm-bench(1).\n",
            gl_log_program());
}

/* The device --device asks for (as gridlm-train chooses it). */
/* Checks that need no job: every rank reaches the same verdict. */
static void check_opts(const gl_bench_opts *o)
{
    static const char *const passes[] = {"fwd", "bwd", NULL};
    if (current->run == gl_bench_comm) {
        gl_bench_list_check("ops", o->ops, gl_bench_comm_ops());
        if (o->groups)
            gl_bench_list_check("groups", o->groups, gl_bench_comm_groups());
        gl_bench_parse_size("min-bytes", o->min_bytes ? o->min_bytes : "1K");
        if (o->max_bytes)
            gl_bench_parse_size("max-bytes", o->max_bytes);
    }
    if (current->run == gl_bench_gemm)
        gl_bench_gemm_validate(o);
    if (current->run == gl_bench_fp8)
        gl_bench_fp8_validate(o);
    if (current->run == gl_bench_attention) {
        gl_bench_list_check("passes", o->passes, passes);
        gl_bench_attention_validate(o);
    }
}

int main(int argc, char **argv)
{
    gl_bench_opts o;
    gl_boot b;

    gl_log_set_program("gridlm-bench");
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("gridlm-bench (gridlm) %s\n", PACKAGE_VERSION);
        return 0;
    }
    for (int i = 0; i < NSUB; i++)
        if (!strcmp(argv[1], subcommands[i].name))
            current = &subcommands[i];
    if (!current)
        gl_die_code(2, "unknown subcommand '%s': use gemm, comm, attention or fp8 (see --help)",
                    argv[1]);

    defaults(&o);
    gl_opt_parse(current->table, &o, argc - 1, argv + 1);
    check_opts(&o);

    gl_boot_init(&argc, &argv, &b);
    gl_dev *d = gl_boot_open_device(&b, o.device);
    gl_groups *g = NULL;
    if (current->run == gl_bench_comm) {
        gl_grid_spec spec = {.world = b.size, .tp = o.tp, .cp = o.cp, .ep = o.ep, .pp = o.pp,
                             .ranks_per_node = b.local_size};
        g = gl_groups_create(&b, &spec, d->comm);
    }
    gl_bench_ctx ctx = {.o = &o, .boot = &b, .dev = d, .groups = g};
    current->run(&ctx);

    if (g)
        gl_groups_free(g);
    gl_dev_close(d);
    free(o.shapes), free(o.ops), free(o.groups), free(o.min_bytes), free(o.max_bytes);
    free(o.seqs), free(o.passes);
    gl_boot_finalize(&b);
    return 0;
}
