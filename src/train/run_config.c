/*
 * run_config.c: gridlm-train's command line (see run_config.h).
 *
 * The options are one table (below) read by the generic parser in
 * base/options.c; this file adds what is particular to training: the
 * --model presets, --data-path's optional weights, and the checks that
 * tie values together (a layout the process grid cannot hold, a batch
 * that does not split into micro-batches, ...).
 *
 * Checks that need only the command line run at the end of
 * gl_config_parse(), before MPI starts, so a typo costs no allocation;
 * their errors are collected with the parser's (base/options.h) and
 * reported together, one line each, then the program stops, exit code 2.
 * Checks that need the world size run in gl_config_finish(), one at a
 * time: the first error stops the job.  Each line names the flags, the
 * values and a way out.  Every rank runs the same checks on the same
 * input, so every rank stops; only rank 0 prints.
 */
#include <config.h>
#include "train/run_config.h"
#include "base/log.h"
#include "base/options.h"
#include "device/fp8.h"
#include "grid/grid.h"
#include "train/checkpoint.h"

#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define OFF(f) offsetof(gl_config, f)

/* ------------------------------------------------------------------ */
/* Printing from rank 0 only.                                          */

/* The rank the launcher gave this process, or -1.  Before MPI_Init the
 * only way to know is the launcher's environment. */
static int launcher_rank(void)
{
    static const char *vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK",
                                 "SLURM_PROCID", NULL};
    if (gl_log_rank() >= 0)
        return gl_log_rank();
    for (int i = 0; vars[i]; i++) {
        const char *v = getenv(vars[i]);
        long r;
        if (v && !gl_opt_to_long(v, &r))
            return (int)r;
    }
    return -1;
}

/* On ranks other than 0, point stdout and stderr at /dev/null while the
 * command line is read: every rank reads the same line and reaches the
 * same verdict, and one copy of --help or of an error is enough. */
typedef struct { int out, err; } quiet_fds;

static quiet_fds quiet_begin(void)
{
    quiet_fds q = {-1, -1};
    if (launcher_rank() <= 0)
        return q;
    int null = open("/dev/null", O_WRONLY);
    if (null < 0)
        return q;
    fflush(stdout);
    fflush(stderr);
    q.out = dup(1);
    q.err = dup(2);
    dup2(null, 1);
    dup2(null, 2);
    close(null);
    return q;
}

static void quiet_end(quiet_fds q)
{
    if (q.out < 0)
        return;
    fflush(stdout);
    fflush(stderr);
    dup2(q.out, 1);
    dup2(q.err, 2);
    close(q.out);
    close(q.err);
}

/* A usage error found by a check.  In gl_config_parse() it is recorded
 * with the parser's errors and bad() returns: the check goes on, and
 * must not rely on what it refused.  In gl_config_finish() bad() does
 * not return: rank 0 prints the error and stops the job; once MPI is up,
 * the other ranks give rank 0 time to do so (its abort ends them) and
 * stop silently themselves if it somehow does not. */
GL_PRINTF(1, 2) static void bad(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (gl_opt_collecting()) {
        gl_opt_record(NULL, msg);
        return;
    }
    if (launcher_rank() > 0) {
        quiet_begin();
        if (gl_log_rank() > 0)
            sleep(10);
    }
    gl_die_code(2, "%s", msg);
}

/* 1 when the value of one of the options named in names (a list
 * separated by spaces, without "--") was refused: a check that reads
 * them is skipped, since what it would judge is the default that stood
 * in for the refused value, and its error would only echo the first. */
static int refused_any(const char *names)
{
    char name[128];
    for (const char *p = names; *p;) {
        size_t n = strcspn(p, " ");
        snprintf(name, sizeof name, "%.*s", (int)n, p);
        if (n && gl_opt_had_error(name))
            return 1;
        p += n;
        while (*p == ' ')
            p++;
    }
    return 0;
}

/* A warning, printed by rank 0 only. */
GL_PRINTF(1, 2) static void warn0(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    if (launcher_rank() > 0)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    gl_warn("%s", msg);
}

/* "1, 2, 4 or 8": the divisors of n up to limit, for messages that
 * suggest a parallel size. */
static const char *divisors(long n, long limit, char *buf, size_t size)
{
    long d[64];
    int k = 0;
    for (long i = 1; i <= n && i <= limit && k < 64; i++)
        if (n % i == 0)
            d[k++] = i;
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < k && len < size; i++)
        len += snprintf(buf + len, size - len, "%s%ld", i == 0 ? "" : i + 1 == k ? " or " : ", ",
                        d[i]);
    return buf;
}

/* ------------------------------------------------------------------ */
/* Handlers for options that are more than a value.                    */

static int opt_model(void *target, const gl_option *o, const char *value, char **more, int nmore)
{
    /* The preset itself was applied before parsing began (see
     * gl_config_parse); here the name is only checked. */
    gl_arch probe;
    if (gl_arch_preset(&probe, value) != 0)
        gl_opt_error(o, value, "is not a known model: use %s, or give the shape with "
                     "--num-layers, --hidden-size, ...", gl_arch_preset_names);
    return 0;
}

/* The model-form flags Megatron spells as switches that clear or set a
 * field: --disable-bias-linear, --no-position-embedding (Megatron's older
 * switch for "no learned absolute positions", which Llama scripts pass
 * beside RoPE: it leaves rotary positions alone),
 * --use-rotary-position-embeddings (the older spelling of
 * --position-embedding-type rope). */
static int opt_disable_bias_linear(void *target, const gl_option *o, const char *value,
                                   char **more, int nmore)
{
    (void)o, (void)value, (void)more, (void)nmore;
    ((gl_config *)target)->arch.add_bias_linear = 0;
    return 0;
}

static int opt_no_position_embedding(void *target, const gl_option *o, const char *value,
                                     char **more, int nmore)
{
    (void)o, (void)value, (void)more, (void)nmore;
    gl_arch *a = &((gl_config *)target)->arch;
    if (a->position_embedding_type == GL_POS_LEARNED_ABSOLUTE)
        a->position_embedding_type = GL_POS_NONE;
    return 0;
}

static int opt_rotary(void *target, const gl_option *o, const char *value, char **more,
                      int nmore)
{
    (void)o, (void)value, (void)more, (void)nmore;
    ((gl_config *)target)->arch.position_embedding_type = GL_POS_ROPE;
    return 0;
}

/* --data-path PREFIX | --data-path W1 PREFIX1 W2 PREFIX2 ...  (Megatron's
 * blend syntax).  Takes every following argument up to the next option.
 * Weights are normalised to sum to 1; without weights each data_weight is
 * 0 and data_weights_given is 0: Megatron then weights the datasets by
 * their size. */
/* What is wrong with the n items of a --data-path (item[0] its value),
 * recorded; 0 when they are a prefix list or a weighted blend.  *weighted
 * says which. */
static int data_path_error(const gl_option *o, const char **item, int n, int *weighted)
{
    double w;
    *weighted = n > 1 && !gl_opt_to_double(item[0], &w);
    int paths = *weighted ? n / 2 : n;
    if (*weighted && n % 2)
        return gl_opt_error(o, item[n - 1], "has no dataset after it: weighted blends are "
                            "--data-path W1 PREFIX1 W2 PREFIX2 ...");
    if (paths > GL_MAX_DATA_PATHS)
        return gl_opt_error(o, item[0], "... names %d datasets: at most %d can be blended",
                            paths, GL_MAX_DATA_PATHS);
    if (!*weighted)
        return 0;
    double sum = 0;
    for (int k = 0; k < paths; k++) {
        if (gl_opt_to_double(item[2 * k], &w) || w < 0)
            return gl_opt_error(o, item[2 * k], "is not a weight: weighted blends are "
                                "--data-path W1 PREFIX1 W2 PREFIX2 ... with each W >= 0");
        double dummy;
        if (!gl_opt_to_double(item[2 * k + 1], &dummy))
            return gl_opt_error(o, item[2 * k + 1], "is a number where a dataset prefix was "
                                "expected: weighted blends are --data-path W1 PREFIX1 W2 "
                                "PREFIX2 ...");
        sum += w;
    }
    if (!(sum > 0))
        return gl_opt_error(o, item[0], "...: the weights sum to 0: give at least one "
                            "positive weight");
    return 0;
}

/* --data-path PREFIX | --data-path W1 PREFIX1 W2 PREFIX2 ...  (Megatron's
 * blend syntax).  Takes every following argument up to the next option.
 * Weights are normalised to sum to 1; without weights each data_weight is
 * 0 and data_weights_given is 0: Megatron then weights the datasets by
 * their size.  A bad list is recorded and leaves the paths as they were. */
static int opt_data_path(void *target, const gl_option *o, const char *value, char **more,
                         int nmore)
{
    gl_config *c = target;
    int n = 0;
    while (n < nmore && strncmp(more[n], "--", 2))
        n++;
    int count = n + 1;
    const char **item = gl_malloc(count * sizeof *item);
    item[0] = value;
    for (int i = 0; i < n; i++)
        item[i + 1] = more[i];

    int weighted;
    if (data_path_error(o, item, count, &weighted)) {
        free(item);
        return n;
    }
    for (int i = 0; i < c->data.n_data_paths; i++)
        free(c->data.data_path[i]);
    int paths = weighted ? count / 2 : count;
    double sum = 0;
    for (int k = 0; k < paths; k++) {
        double weight = 0;
        if (weighted)
            gl_opt_to_double(item[2 * k], &weight);   /* data_path_error read it */
        c->data.data_path[k] = gl_strdup(weighted ? item[2 * k + 1] : item[k]);
        c->data.data_weight[k] = weight;
        sum += weight;
    }
    c->data.n_data_paths = paths;
    c->data.data_weights_given = weighted;
    for (int k = 0; weighted && k < paths; k++)
        c->data.data_weight[k] /= sum;
    if (paths == 1)
        c->data.data_weight[0] = 1.0;
    free(item);
    return n;
}

/* --rampup-batch-size START INCREMENT SAMPLES (Megatron's three values):
 * each a whole number, START and INCREMENT positive.  A bad one is
 * recorded and the ramp left as it was (off). */
static int opt_rampup(void *target, const gl_option *o, const char *value, char **more,
                      int nmore)
{
    gl_config *c = target;
    const char *item[3] = { value, nmore > 0 ? more[0] : NULL, nmore > 1 ? more[1] : NULL };
    long v[3];
    for (int k = 0; k < 3; k++) {
        if (!item[k] || !strncmp(item[k], "--", 2)) {
            gl_opt_error(o, value, "needs three numbers: --rampup-batch-size START INCREMENT "
                         "SAMPLES, e.g. 32 32 1000000");
            return k > 0 ? k - 1 : 0;
        }
        if (gl_opt_to_long(item[k], &v[k]) || v[k] < (k < 2 ? 1 : 0)) {
            gl_opt_error(o, item[k], "is not a %s: --rampup-batch-size START INCREMENT SAMPLES "
                         "takes a positive START and INCREMENT and SAMPLES >= 0",
                         k < 2 ? "positive whole number" : "whole number >= 0");
            return 2;
        }
    }
    for (int k = 0; k < 3; k++)
        c->rampup_batch_size[k] = v[k];
    return 2;
}

/* --help prints the option table, so it is defined after it. */
static int opt_help(void *target, const gl_option *o, const char *value, char **more,
                    int nmore);

/* --list-megatron-flags prints the option table, so it is defined after it. */
static int opt_list_flags(void *target, const gl_option *o, const char *value, char **more,
                          int nmore);

static int opt_version(void *target, const gl_option *o, const char *value, char **more,
                       int nmore)
{
    printf("%s (gridlm) %s\n", gl_log_program(), PACKAGE_VERSION);
    fflush(stdout);
    exit(0);
}

/* --wandb-*: gridlm does not talk to Weights & Biases.  An empty value
 * is Megatron's "no wandb" and is accepted; any other is refused with
 * the way to get the same charts. */
static int opt_wandb(void *target, const gl_option *o, const char *value, char **more,
                     int nmore)
{
    if (value && *value)
        gl_opt_error(o, value, "is not supported: gridlm does not talk to Weights & Biases; "
                     "write TensorBoard files with --tensorboard-dir DIR and upload them "
                     "with `wandb sync --sync-tensorboard DIR`");
    return 0;
}

/* ------------------------------------------------------------------ */
/* The option table.                                                   */

#define G_MODEL "Model"
#define G_PAR "Parallelism"
#define G_BATCH "Batch and schedule"
#define G_OPT "Optimizer"
#define G_LR "Learning rate"
#define G_PREC "Precision, device and memory"
#define G_MOE "Mixture of experts"
#define G_DATA "Data"
#define G_CKPT "Checkpoints"
#define G_LOG "Logging"
#define G_TB "TensorBoard"
#define G_FAULT "Faults"
#define G_PROG "Program"
#define G_COMPAT "Accepted for Megatron-LM scripts (gridlm always does this)"

/* Megatron-LM options gridlm accepts without effect or refuses: the
 * reasons, one string shared by every row it explains. */
#define R_FUSION "a kernel or loader speed setting: gridlm's kernels need none; results are the same"
#define R_COMM "a communication tuning setting: gridlm schedules its collectives itself; results are the same"
#define R_TORCH "a PyTorch memory or start-up setting: does not apply to gridlm"
#define R_INIT "gridlm initialises the same weights whatever the layout"
#define R_LAUNCH "set by torchrun: gridlm takes ranks from mpiexec or srun"
#define R_GRAPH "gridlm does not capture CUDA graphs; speed only, results are the same"
#define R_RNG_SAVE "checkpoints always hold the random state (as with --no-load-rng, the loader decides)"
#define R_FP32_GRADS "gridlm accumulates and reduces gradients in fp32 always"
#define R_CKPT "gridlm writes its own HDF5 checkpoints, loadable under any layout, whatever this says (gridlm-ckpt converts them)"
#define R_FP32_STATE "the optimizer keeps fp32 master weights, gradients and moments: use fp32 or leave it out"
#define R_FP16_ONLY "applies to --fp16 only, which gridlm refuses (bf16 needs no loss scale)"
#define R_OTHER_OPT "applies to --optimizer sgd or muon only; gridlm's optimizer is AdamW"
#define R_WSD_ONLY "applies to --lr-decay-style WSD only, which gridlm refuses"
#define R_OFFLOAD_ONLY "applies with --optimizer-cpu-offload only, which gridlm refuses"
#define R_OTHER_POS "applies to relative position embeddings only; gridlm uses learned absolute positions or RoPE"
#define R_TIKTOKEN "applies to TikTokenizer only, which --tokenizer-type refuses"
#define R_TOKENIZER "a Python tokenizer-loading setting: gridlm reads tokenizer.json or vocab.json + merges.txt itself"
#define R_FSDP_ONLY "applies to FSDP only, which gridlm refuses (--use-distributed-optimizer shards the optimizer)"
#define R_OTHER_MODEL "applies to BERT, T5, biencoder or vision models only, not to GPT-style pre-training"
#define R_MAMBA_ONLY "applies to hybrid Mamba models only, which gridlm refuses"
#define R_INFER "an inference setting: gridlm-train does not serve the model (gridlm-eval evaluates a checkpoint)"
#define R_SERVICE "an NVIDIA run-time service or tracker: gridlm has none; training is the same"
#define R_LOGGED "gridlm's log has fixed contents (loss, gradient norm, learning rate, TFLOP/s, MFU): this detail is not logged"
#define R_STRAGGLER "gridlm reports stragglers always: see --straggler-threshold"
#define R_INPROCESS "applies with --inprocess-restart only, which gridlm refuses"
#define R_MOE_ETP "the experts split over --tensor-model-parallel-size as the dense MLP does; a tensor parallelism of their own is not built: drop it"
#define R_MOE_EP "DeepEP and the overlap of expert-parallel communication are not built (gridlm's expert parallelism exchanges tokens with --moe-token-dispatcher-type allgather or alltoall): drop it"
#define R_MOE_RECOMPUTE "recomputing MoE layers alone is not built: use --recompute-granularity selective"
#define R_MOE_UPCYCLE "upcycling a dense checkpoint into experts is not built: train the MoE model from its own initialisation"
#define R_MOE_GROUPS "group-limited routing (DeepSeek's device-limited top-k) is not built: the router takes the top-k over all experts; drop it"
#define R_MOE_FORCE "forced (benchmark) routing is not built: the router routes by its scores"
#define R_MOE_JITTER "router input jitter is not built: drop it"
#define R_MOE_LOG "per-layer MoE values are not written (gridlm has no MoE TensorBoard scalars): the log line and --log-json give the MoE losses summed over the layers and the largest expert load: drop it"
#define R_MOE_PROBS_IN "weighting the experts' inputs (not their outputs) is not built: the routing weights scale the experts' outputs"
#define R_MLA "multi-latent attention is not supported: gridlm's attention is grouped-query (--num-query-groups)"
#define R_MTP "multi-token prediction is not supported: gridlm predicts the next token"
#define R_ACT "gridlm's MLP is GeLU (tanh approximation, Megatron's fused bias-GeLU) or SwiGLU (--swiglu); other activations are not built"
#define R_LAYER "gridlm's layer is Megatron's GPT one or the Llama one (pre-norm, no norm inside attention but --qk-layernorm's RMSNorm, the residual in the activations' dtype): this variant is not built"
#define R_ATTN "sliding-window attention is not supported: every layer attends causally over --seq-length"
#define R_ROPE "gridlm's RoPE rotates halves of every head in every layer (with --use-rope-scaling for Llama 3): this variant is not built"
#define R_ENCDEC "encoder-decoder models are not built: gridlm trains decoders; use --num-layers and --seq-length"
#define R_HETERO "heterogeneous layers are not built: every layer has the same shape"
#define R_MAMBA "hybrid Mamba models are not supported: gridlm's layers are attention and an MLP"
#define R_RETRO "Retro is not supported: gridlm trains plain decoders"
#define R_RL "reinforcement learning (GRPO) is not supported: gridlm-train pre-trains"
#define R_KITCHEN "NVIDIA Kitchen quantization is not supported: use --fp8-format for FP8 training"
#define R_EVEN_PP "gridlm gives every pipeline stage the same number of layers: --num-layers must divide by --pipeline-model-parallel-size"
#define R_FSDP "FSDP is not built: --use-distributed-optimizer shards the optimizer state (ZeRO-1)"
#define R_WD "weight decay is constant: use --weight-decay"
#define R_CHECKS "this check is not built; gridlm checks every loss and gradient norm for NaN/Inf (--max-nonfinite-iters)"
#define R_PROFILE "gridlm does not drive a profiler: run the job under nsys profile (or ncu) without a capture range"
#define R_TOKENIZER_FILE "give the tokenizer with --tokenizer-model tokenizer.json (or --vocab-file and --merge-file)"
#define R_SPLIT_DATA "one blend is split into train, validation and test: use --data-path with --split"
#define R_DOCS "samples run across document boundaries as in Megatron's default; per-document positions and masks are not built: drop it"
#define R_VALID "validation runs --eval-iters batches of the blend's validation split every --eval-interval"
#define R_CKPT_KEEP "gridlm keeps every checkpoint it writes, on the file system: use --save and --save-interval"
#define R_CONVERT "convert checkpoints with gridlm-ckpt"
#define R_RESUME "use --exit-signal-handler or --exit-duration-in-mins, then restart with --load"

static const char *const lr_styles[] = {"constant", "linear", "cosine", "inverse-square-root",
                                        NULL};
static const int lr_style_values[] = {GL_LR_CONSTANT, GL_LR_LINEAR, GL_LR_COSINE,
                                      GL_LR_INVERSE_SQRT};
static const char *const recompute_names[] = {"selective", "full", NULL};
static const int recompute_values[] = {GL_RECOMPUTE_SELECTIVE, GL_RECOMPUTE_FULL};
static const char *const recompute_methods[] = {"uniform", "block", NULL};
static const char *const cp_comm_types[] = {"p2p", "all_gather", "a2a", "a2a+p2p", NULL};
static const char *const devices[] = {"auto", "cpu", "cuda", NULL};
static const int device_values[] = {GL_DEVICE_AUTO, GL_DEVICE_CPU, GL_DEVICE_CUDA};
static const char *const fp8_formats[] = {"e4m3", "hybrid", NULL};
static const int fp8_format_values[] = {GL_FP8_FMT_E4M3, GL_FP8_FMT_HYBRID};
static const char *const fp8_recipes[] = {"delayed", "tensorwise", "blockwise", "mxfp8", NULL};
static const int fp8_recipe_values[] = {GL_FP8_DELAYED, GL_FP8_TENSORWISE, GL_FP8_BLOCKWISE,
                                        GL_FP8_MXFP8};
static const char *const fp8_algos[] = {"max", "most_recent", NULL};
static const int fp8_algo_values[] = {GL_FP8_ALGO_MAX, GL_FP8_ALGO_MOST_RECENT};
static const char *const optimizers[] = {"adam", NULL};
static const char *const tokenizers[] = {"HuggingFaceTokenizer", "GPT2BPETokenizer",
                                         "NullTokenizer", NULL};
static const char *const impls[] = {"local", "transformer_engine", NULL};
static const char *const backends[] = {"nccl", NULL};
static const char *const single_loader[] = {"single", NULL};
static const char *const rope_types[] = {"rope", NULL};
static const char *const softmax_types[] = {"vanilla", NULL};
static const char *const fp32_only[] = {"fp32", NULL};
static const char *const moe_dtypes[] = {"fp32", "fp64", NULL};
static const int moe_dtype_values[] = {GL_MOE_DTYPE_FP32, GL_MOE_DTYPE_FP64};
static const char *const moe_drop_policies[] = {"probs", "position", NULL};
static const int moe_drop_values[] = {GL_DROP_BY_PROBS, GL_DROP_BY_POSITION};
static const char *const moe_dispatchers[] = {"allgather", "alltoall", NULL};
static const int moe_dispatcher_values[] = {GL_DISPATCH_ALLGATHER, GL_DISPATCH_ALLTOALL};
static const char *const attn_backends[] = {"flash", "fused", "unfused", "local", "auto", NULL};
static const int attn_backend_values[] = {GL_ATTN_BACKEND_FLASH, GL_ATTN_BACKEND_FUSED,
                                          GL_ATTN_BACKEND_UNFUSED, GL_ATTN_BACKEND_LOCAL,
                                          GL_ATTN_BACKEND_AUTO};

/* Row builders: name, field, group, checks, help, then any further
 * designated initialisers (.defstr, .hint, .min, ...). */
#define FLAG(nm, fld, grp, hlp, ...) \
    {.name = nm, .kind = GL_OPT_FLAG, .offset = OFF(fld), .group = grp, .help = hlp, __VA_ARGS__}
#define INT(nm, fld, grp, chk, hlp, ...)                                                     \
    {.name = nm, .kind = GL_OPT_INT, .offset = OFF(fld), .metavar = "N", .group = grp,     \
     .check = chk, .help = hlp, __VA_ARGS__}
#define LONG(nm, fld, grp, chk, hlp, ...)                                                    \
    {.name = nm, .kind = GL_OPT_LONG, .offset = OFF(fld), .metavar = "N", .group = grp,    \
     .check = chk, .help = hlp, __VA_ARGS__}
#define DBL(nm, fld, grp, chk, hlp, ...)                                                     \
    {.name = nm, .kind = GL_OPT_DOUBLE, .offset = OFF(fld), .metavar = "X", .group = grp,  \
     .check = chk, .help = hlp, __VA_ARGS__}
#define STR(nm, fld, mv, grp, hlp, ...)                                                      \
    {.name = nm, .kind = GL_OPT_STR, .offset = OFF(fld), .size = sizeof(((gl_config *)0)->fld), \
     .metavar = mv, .group = grp, .help = hlp, __VA_ARGS__}
#define DUP(nm, fld, mv, grp, hlp, ...)                                                      \
    {.name = nm, .kind = GL_OPT_DUP, .offset = OFF(fld), .metavar = mv, .group = grp,      \
     .help = hlp, __VA_ARGS__}
#define CHOICE(nm, fld, mv, grp, ch, vals, hlp, ...)                                         \
    {.name = nm, .kind = GL_OPT_CHOICE, .offset = OFF(fld), .metavar = mv, .group = grp,   \
     .choices = ch, .choice_values = vals, .help = hlp, __VA_ARGS__}
/* Accepted and ignored: a flag, or a value that must be one of ch. */
#define SAME_IN(nm, grp, hlp) \
    {.name = nm, .kind = GL_OPT_FLAG, .offset = GL_OPT_NOWHERE, .group = grp, .help = hlp}
#define SAME(nm, hlp) SAME_IN(nm, G_COMPAT, hlp)
#define SAME_AS_IN(nm, grp, ch, hlp, hnt)                                                    \
    {.name = nm, .kind = GL_OPT_STR, .offset = GL_OPT_NOWHERE, .metavar = "NAME",          \
     .group = grp, .choices = ch, .help = hlp, .hint = hnt}
#define SAME_AS(nm, ch, hlp, hnt) SAME_AS_IN(nm, G_COMPAT, ch, hlp, hnt)
#define WANDB(nm)                                                                        \
    {.name = nm, .kind = GL_OPT_CALL, .offset = GL_OPT_NOWHERE, .metavar = "NAME",         \
     .group = G_TB, .fn = opt_wandb,                                                      \
     .help = "refused unless empty: use --tensorboard-dir and `wandb sync --sync-tensorboard`"}
/* The rest of Megatron-LM's options, outside --help: accepted without
 * effect (a flag, or an option whose values, a list for some, are not
 * read), accepted with one value only, or refused.  Why is the row's hint
 * (which --list-megatron-flags prints) or its refusal. */
#define ACCEPT(nm, why) \
    {.name = nm, .kind = GL_OPT_FLAG, .offset = GL_OPT_NOWHERE, .hint = why}
#define ACCEPT_V(nm, why) \
    {.name = nm, .kind = GL_OPT_IGNORE, .offset = GL_OPT_NOWHERE, .metavar = "X", .hint = why}
#define ONLY(nm, v, why)                                                                     \
    {.name = nm, .kind = GL_OPT_DOUBLE, .offset = GL_OPT_NOWHERE, .metavar = "X",          \
     .check = GL_OPT_MIN | GL_OPT_MAX, .min = v, .max = v, .hint = why}
#define REFUSE(nm, why) \
    {.name = nm, .kind = GL_OPT_FLAG, .offset = GL_OPT_NOWHERE, .refused = why}

#define POS GL_OPT_POSITIVE
#define NONNEG GL_OPT_NONNEG
#define UNIT (GL_OPT_MIN | GL_OPT_MAX) /* with .min = 0, .max = 1 */

static const gl_option table[] = {
    /* --- model --- */
    {.name = "model", .kind = GL_OPT_CALL, .offset = GL_OPT_NOWHERE, .metavar = "NAME",
     .group = G_MODEL, .fn = opt_model,
     .help = "preset shape: llama3-8b, llama3-70b, llama3.2-1b, qwen2.5-1.5b, qwen3-8b, gpt2, gpt2-medium, gpt2-xl, mixtral-8x7b, qwen3-30b-a3b or tiny (applied first)"},
    INT("num-layers", arch.num_layers, G_MODEL, POS, "transformer layers", .defstr = "required"),
    INT("hidden-size", arch.hidden_size, G_MODEL, POS, "model width h", .defstr = "required"),
    INT("ffn-hidden-size", arch.ffn_hidden_size, G_MODEL, POS, "MLP inner width",
        .defstr = "4h; with --swiglu 8h/3 rounded down to a multiple of 64"),
    INT("num-attention-heads", arch.num_attention_heads, G_MODEL, POS, "query heads",
        .defstr = "required"),
    SAME_IN("group-query-attention", G_MODEL,
            "accepted: --num-query-groups alone sets the groups"),
    INT("num-query-groups", arch.num_query_groups, G_MODEL, POS, "key/value heads (GQA)",
        .defstr = "= heads"),
    INT("kv-channels", arch.kv_channels, G_MODEL, POS, "head dimension",
        .defstr = "hidden / heads"),
    INT("seq-length", arch.seq_length, G_MODEL, POS, "tokens per sample", .defstr = "required"),
    INT("max-position-embeddings", arch.max_position_embeddings, G_MODEL, POS,
        "longest sequence the positions allow", .defstr = "= seq length"),
    INT("vocab-size", arch.vocab_size, G_MODEL, POS, "vocabulary size before padding",
        .defstr = "from the tokenizer"),
    INT("make-vocab-size-divisible-by", arch.make_vocab_size_divisible_by, G_MODEL, POS,
        "pad the vocabulary to a multiple of this x TP"),
    DBL("norm-epsilon", arch.norm_epsilon, G_MODEL, GL_OPT_POSITIVE | GL_OPT_MAX_OPEN,
        "LayerNorm or RMSNorm epsilon", .max = 1),
    DBL("rotary-base", arch.rotary_base, G_MODEL, POS, "RoPE base period"),
    FLAG("use-rope-scaling", arch.use_rope_scaling, G_MODEL,
         "Llama 3 (\"llama3\") RoPE frequency scaling"),
    DBL("rope-scaling-factor", arch.rope_scaling_factor, G_MODEL, GL_OPT_MIN,
        "RoPE scaling: slow frequencies are divided by this", .min = 1),
    DBL("rope-scaling-low-freq-factor", arch.rope_scaling_low_freq_factor, G_MODEL, POS,
        "RoPE scaling: wavelengths above original / this are scaled fully"),
    DBL("rope-scaling-high-freq-factor", arch.rope_scaling_high_freq_factor, G_MODEL, POS,
        "RoPE scaling: wavelengths below original / this are kept"),
    INT("rope-scaling-original-max-position-embeddings",
        arch.rope_scaling_original_max_position_embeddings, G_MODEL, POS,
        "RoPE scaling: the context length the model was first trained for"),
    FLAG("untie-embeddings-and-output-weights", arch.untie_embeddings_and_output_weights, G_MODEL,
         "separate input embedding and output layer"),
    /* The model's form (arch.h): Megatron's GPT or the Llama form. */
    CHOICE("normalization", arch.normalization, "NAME", G_MODEL, gl_arch_norm_names, NULL,
           "LayerNorm (with a bias) or RMSNorm"),
    FLAG("apply-layernorm-1p", arch.apply_layernorm_1p, G_MODEL,
         "LayerNorm weights stored as w - 1 (zero-centred)"),
    FLAG("swiglu", arch.swiglu, G_MODEL, "SwiGLU MLP (else GeLU, tanh approximation)"),
    FLAG("openai-gelu", openai_gelu, G_MODEL,
         "GeLU's tanh approximation: what gridlm's GeLU computes anyway"),
    FLAG("no-bias-gelu-fusion", no_bias_gelu_fusion, G_MODEL,
         "with the GeLU MLP, refused unless with --openai-gelu (Megatron's GeLU is then "
         "the exact erf form, which gridlm does not build)"),
    CHOICE("position-embedding-type", arch.position_embedding_type, "NAME", G_MODEL,
           gl_arch_position_names, NULL, "learned_absolute, rope or none"),
    {.name = "use-rotary-position-embeddings", .kind = GL_OPT_CALL, .offset = GL_OPT_NOWHERE,
     .group = G_MODEL, .fn = opt_rotary, .help = "= --position-embedding-type rope"},
    {.name = "no-position-embedding", .kind = GL_OPT_CALL, .offset = GL_OPT_NOWHERE,
     .group = G_MODEL, .fn = opt_no_position_embedding,
     .help = "no learned absolute positions (RoPE, when chosen, stays)"},
    DBL("rotary-percent", arch.rotary_percent, G_MODEL, GL_OPT_MIN | GL_OPT_MAX,
        "share of each head's channels RoPE rotates (only 1 is built)", .min = 0, .max = 1),
    FLAG("add-bias-linear", arch.add_bias_linear, G_MODEL, "biases on the linear layers",
         .defstr = "on"),
    {.name = "disable-bias-linear", .kind = GL_OPT_CALL, .offset = GL_OPT_NOWHERE,
     .group = G_MODEL, .fn = opt_disable_bias_linear,
     .help = "no biases on the linear layers"},
    FLAG("add-qkv-bias", arch.add_qkv_bias, G_MODEL, "biases on Q, K and V only (Qwen2)"),
    FLAG("qk-layernorm", arch.qk_layernorm, G_MODEL,
         "RMSNorm over each head of Q and of K before RoPE (Qwen3; with --normalization "
         "RMSNorm)"),
    DBL("attention-dropout", arch.attention_dropout, G_MODEL, GL_OPT_MIN | GL_OPT_MAX_OPEN,
        "dropout on the attention probabilities (on CUDA it runs gridlm's attention "
        "kernels, not cuDNN's)", .min = 0, .max = 1,
        .hint = "1 would drop every probability"),
    DBL("hidden-dropout", arch.hidden_dropout, G_MODEL, GL_OPT_MIN | GL_OPT_MAX_OPEN,
        "dropout on the embedding, attention and MLP outputs", .min = 0, .max = 1,
        .hint = "1 would drop every activation"),
    DBL("init-method-std", arch.init_method_std, G_MODEL, POS,
        "standard deviation of the initial weights"),

    /* --- parallelism --- */
    INT("tensor-model-parallel-size", layout.tensor_model_parallel_size, G_PAR, POS,
        "TP: ranks that split each layer's matrices"),
    INT("pipeline-model-parallel-size", layout.pipeline_model_parallel_size, G_PAR, POS,
        "PP: ranks that split the layers into stages"),
    INT("context-parallel-size", layout.context_parallel_size, G_PAR, POS,
        "CP: ranks that split each sequence"),
    STR("cp-comm-type", layout.cp_comm_type, "TYPE", G_PAR,
        "with CP > 1, how attention sees the other ranks' keys: p2p (a ring that passes "
        "them on), all_gather, or a2a (Ulysses: an all-to-all trades sequence for heads; "
        "CP must divide each TP rank's query heads and groups)",
        .choices = cp_comm_types, .defstr = "p2p"),
    INT("expert-model-parallel-size", layout.expert_model_parallel_size, G_PAR, POS,
        "EP: ranks that split the experts of mixture-of-experts layers"),
    INT("expert-tensor-parallel-size", layout.expert_tensor_parallel_size, G_PAR, POS,
        "ETP: ranks that split each expert's matrices (TP, or 1 with EP > 1; others "
        "--dry-run only)",
        .defstr = "--tensor-model-parallel-size"),
    INT("num-layers-per-virtual-pipeline-stage", layout.num_layers_per_virtual_pipeline_stage, G_PAR,
        POS, "layers per chunk of the interleaved 1F1B schedule", .defstr = "no interleaving"),
    FLAG("sequence-parallel", layout.sequence_parallel, G_PAR,
         "split norms and residuals along the sequence over TP"),
    FLAG("use-distributed-optimizer", optim.use_distributed_optimizer, G_PAR,
         "shard optimizer state over data-parallel ranks (ZeRO-1)"),
    FLAG("overlap-grad-reduce", optim.overlap_grad_reduce, G_PAR,
         "overlap gradient reduction with the backward pass"),
    FLAG("overlap-param-gather", optim.overlap_param_gather, G_PAR,
         "gather the updated weights bucket by bucket during the next forward "
         "(needs --use-distributed-optimizer and --overlap-grad-reduce)"),
    LONG("ddp-bucket-size", optim.ddp_bucket_size, G_PAR, POS, "gradient bucket, in elements",
         .defstr = "max(40M, 1M x DP)"),
    SAME_AS_IN("distributed-backend", G_PAR, backends, "nccl (accepted: NCCL on GPUs, MPI "
               "on the CPU)", NULL),

    /* --- batch --- */
    INT("micro-batch-size", layout.micro_batch_size, G_BATCH, POS, "samples per rank per micro-step"),
    INT("global-batch-size", global_batch_size, G_BATCH, POS, "samples per iteration",
        .defstr = "micro batch x DP"),
    LONG("train-iters", train_iters, G_BATCH, POS, "iterations to train",
         .defstr = "required, or --train-samples"),
    LONG("train-samples", train_samples, G_BATCH, POS, "samples to train (instead of iterations)",
         .defstr = "unused"),
    {.name = "rampup-batch-size", .kind = GL_OPT_CALL, .offset = GL_OPT_NOWHERE,
     .metavar = "START INC SAMPLES", .group = G_BATCH, .fn = opt_rampup,
     .help = "grow the global batch from START by INC over SAMPLES samples (needs "
             "--train-samples)", .defstr = "none"},
    FLAG("calculate-per-token-loss", calculate_per_token_loss, G_BATCH,
         "normalise the loss by the global batch's unmasked tokens (default: each "
         "micro-batch's token mean, averaged over micro-batches and DP)"),
    INT("seed", seed, G_BATCH, NONNEG, "seed of the weights and the data order"),

    /* --- optimizer --- */
    STR("optimizer", optim.optimizer, "NAME", G_OPT, "adam (AdamW: decoupled weight decay)",
        .choices = optimizers),
    DBL("weight-decay", optim.weight_decay, G_OPT, NONNEG, "AdamW weight decay"),
    DBL("adam-beta1", optim.adam_beta1, G_OPT, GL_OPT_MIN | GL_OPT_MAX_OPEN, "first-moment decay",
        .min = 0, .max = 1),
    DBL("adam-beta2", optim.adam_beta2, G_OPT, GL_OPT_MIN | GL_OPT_MAX_OPEN, "second-moment decay",
        .min = 0, .max = 1),
    DBL("adam-eps", optim.adam_eps, G_OPT, POS, "AdamW epsilon"),
    DBL("clip-grad", optim.clip_grad, G_OPT, NONNEG, "clip the global gradient norm (0: off)"),

    /* --- learning rate --- */
    DBL("lr", optim.lr, G_LR, POS, "peak learning rate", .defstr = "required"),
    DBL("min-lr", optim.min_lr, G_LR, NONNEG, "learning rate at the end of the decay"),
    LONG("lr-warmup-iters", optim.lr_warmup_iters, G_LR, NONNEG, "iterations of linear warm-up"),
    DBL("lr-warmup-fraction", optim.lr_warmup_fraction, G_LR, UNIT,
        "warm-up as a fraction of the decay iterations", .min = 0, .max = 1, .defstr = "unused"),
    LONG("lr-decay-iters", optim.lr_decay_iters, G_LR, POS, "iterations over which the rate decays",
         .defstr = "train iters"),
    CHOICE("lr-decay-style", optim.lr_decay_style, "STYLE", G_LR, lr_styles, lr_style_values,
           "constant, linear, cosine or inverse-square-root (WSD is refused)"),
    LONG("lr-warmup-samples", optim.lr_warmup_samples, G_LR, NONNEG,
         "samples of linear warm-up (with --train-samples)"),
    LONG("lr-decay-samples", optim.lr_decay_samples, G_LR, POS,
         "samples over which the rate decays (with --train-samples)", .defstr = "train samples"),
    DBL("decoupled-lr", optim.decoupled_lr, G_LR, POS,
        "peak learning rate of the embedding and the output layer", .defstr = "--lr"),
    DBL("decoupled-min-lr", optim.decoupled_min_lr, G_LR, NONNEG,
        "their rate at the end of the decay", .defstr = "--min-lr"),
    FLAG("use-checkpoint-opt_param-scheduler", optim.use_checkpoint_opt_param_scheduler, G_LR,
         "--load: take the schedule (rates, warm-up, decay, style) from the checkpoint"),
    FLAG("override-opt_param-scheduler", optim.override_opt_param_scheduler, G_LR,
         "--load: take the schedule from the command line, whatever the checkpoint says"),
    FLAG("use-checkpoint-opt-param-scheduler", optim.use_checkpoint_opt_param_scheduler, G_LR,
         "the same (Megatron's other spelling)"),
    FLAG("override-opt-param-scheduler", optim.override_opt_param_scheduler, G_LR,
         "the same (Megatron's other spelling)"),

    /* --- precision, device, memory --- */
    CHOICE("device", device, "DEV", G_PREC, devices, device_values,
           "cpu (fp32 reference), cuda, or auto (cuda when a GPU is visible)"),
    FLAG("bf16", bf16, G_PREC, "bf16 weights and activations, fp32 master weights"),
    CHOICE("attention-backend", attention_backend, "NAME", G_PREC, attn_backends,
           attn_backend_values, "attention on CUDA, as GRIDLM_ATTENTION (which it overrides): "
           "fused = cuDNN's fused flash attention (cudnn); flash, unfused and local = "
           "gridlm's own flash-attention kernels (native); auto = cuDNN when it has a plan; "
           "with --attention-dropout above 0 fused is refused and auto runs gridlm's kernels",
           .defstr = "GRIDLM_ATTENTION, else auto"),
    FLAG("deterministic-mode", deterministic_mode, G_PREC,
         "the same bits from every run of the same command on the same GPUs: attention's "
         "backward takes cuDNN's deterministic form (it keeps dS, batch x heads x seq^2 "
         "bf16, in a workspace, cut into tiles of fewer samples and heads past 4 GiB; "
         "gridlm's kernels where even one sample's one key head passes it), and NCCL's NVLink SHARP "
         "algorithms are left out (NCCL_ALGO=^NVLS,NVLSTree unless NCCL_ALGO is set); "
         "about 1% slower on an H200"),
    CHOICE("fp8-format", fp8.format, "FMT", G_PREC, fp8_formats, fp8_format_values,
           "FP8 products in the decoder layers' linears (needs --bf16): e4m3 everywhere, or "
           "hybrid (E4M3 activations and weights, E5M2 gradients); MFU stays against the "
           "bf16 dense peak", .defstr = "off"),
    CHOICE("fp8-recipe", fp8.recipe, "RECIPE", G_PREC, fp8_recipes, fp8_recipe_values,
           "FP8 scaling: delayed (amax history), tensorwise (each tensor's own amax) or "
           "blockwise (power-of-two scales of 1x128 tiles, 128x128 weight blocks); "
           "mxfp8 is refused"),
    INT("fp8-margin", fp8.margin, G_PREC, NONNEG,
        "delayed: scale = FP8 max / amax / 2^margin"),
    INT("fp8-amax-history-len", fp8.amax_history_len, G_PREC, POS,
        "delayed: steps of amax history"),
    CHOICE("fp8-amax-compute-algo", fp8.amax_compute_algo, "ALGO", G_PREC, fp8_algos,
           fp8_algo_values, "delayed: max of the history, or most_recent"),
    FLAG("fp8-param-gather", optim.fp8_param_gather, G_PREC,
         "the distributed optimizer quantizes its shard of the FP8 layers' weights and "
         "all-gathers them in FP8, 1 byte per weight instead of 2; with "
         "--overlap-param-gather bucket by bucket during the next forward (needs "
         "--use-distributed-optimizer and --fp8-format)"),
    FLAG("first-last-layers-bf16", fp8.first_last_layers_bf16, G_PREC,
         "with FP8, keep the first and last decoder layers in bf16"),
    INT("num-layers-at-start-in-bf16", fp8.num_layers_at_start_in_bf16, G_PREC, NONNEG,
        "with --first-last-layers-bf16: layers at the start kept in bf16"),
    INT("num-layers-at-end-in-bf16", fp8.num_layers_at_end_in_bf16, G_PREC, NONNEG,
        "with --first-last-layers-bf16: layers at the end kept in bf16"),
    CHOICE("recompute-granularity", layout.recompute_granularity, "KIND", G_PREC, recompute_names,
           recompute_values,
           "recompute in the backward: selective (norm and activation outputs) or full (layers)",
           .defstr = "none"),
    STR("recompute-method", layout.recompute_method, "METHOD", G_PREC,
        "with full: uniform or block", .choices = recompute_methods),
    INT("recompute-num-layers", layout.recompute_num_layers, G_PREC, POS,
        "layers per recomputed group (uniform) or per stage (block)", .defstr = "none"),

    /* --- data --- */
    FLAG("mock-data", data.mock_data, G_DATA, "synthetic tokens instead of a dataset"),
    {.name = "data-path", .kind = GL_OPT_CALL, .offset = GL_OPT_NOWHERE,
     .metavar = "[W] PREFIX ...", .group = G_DATA, .fn = opt_data_path,
     .help = "Megatron .bin/.idx prefix(es), optionally weighted: 0.3 A 0.7 B"},
    STR("split", data.split, "A,B,C", G_DATA, "train,valid,test weights of the documents"),
    DUP("data-cache-path", data.data_cache_path, "DIR", G_DATA, "where the sample indices are cached",
        .defstr = "beside the data"),
    STR("tokenizer-type", data.tokenizer_type, "TYPE", G_DATA,
        "HuggingFaceTokenizer, GPT2BPETokenizer or NullTokenizer", .choices = tokenizers,
        .defstr = "HuggingFaceTokenizer with --tokenizer-model",
        .hint = "gridlm reads byte-level BPE tokenizers: Hugging Face tokenizer.json or "
                "GPT-2 vocab.json + merges.txt; SentencePiece, WordPiece and tiktoken files "
                "are not supported"),
    DUP("tokenizer-model", data.tokenizer_model, "FILE", G_DATA,
        "tokenizer.json, or a directory holding it"),
    DUP("vocab-file", data.vocab_file, "FILE", G_DATA, "GPT2BPETokenizer: vocab.json"),
    DUP("merge-file", data.merge_file, "FILE", G_DATA, "GPT2BPETokenizer: merges.txt"),
    FLAG("eod-mask-loss", data.eod_mask_loss, G_DATA, "no loss on end-of-document tokens"),
    INT("num-workers", data.num_workers, G_DATA, NONNEG, "data loader threads"),
    LONG("eval-interval", eval_interval, G_DATA, POS, "iterations between validations"),
    LONG("eval-iters", eval_iters, G_DATA, NONNEG, "iterations per validation (0: none)"),

    /* --- checkpoints --- */
    DUP("save", ckpt.save, "DIR", G_CKPT, "save checkpoints here", .defstr = "no saving"),
    DUP("load", ckpt.load, "DIR", G_CKPT, "resume from the latest checkpoint here",
        .defstr = "start afresh"),
    LONG("save-interval", ckpt.save_interval, G_CKPT, NONNEG, "iterations between checkpoints",
         .defstr = "at the end only"),
    LONG("persistent-save-interval", ckpt.save_interval, NULL, NONNEG, NULL), /* Megatron's alias */
    FLAG("no-save-optim", ckpt.no_save_optim, G_CKPT, "leave the optimizer state out of checkpoints"),
    FLAG("no-load-optim", ckpt.no_load_optim, G_CKPT, "do not load the optimizer state"),
    FLAG("no-load-rng", ckpt.no_load_rng, G_CKPT, "do not load the random state"),
    FLAG("finetune", ckpt.finetune, G_CKPT, "load weights only; start at iteration 0"),
    FLAG("use-checkpoint-args", ckpt.use_checkpoint_args, G_CKPT,
         "take the model's shape (and vocabulary) from the checkpoint --load names; shape "
         "flags must agree with it"),
    FLAG("async-save", ckpt.async_save, G_CKPT, "write checkpoints in the background"),

    /* --- logging --- */
    LONG("log-interval", log.log_interval, G_LOG, POS, "iterations between progress lines"),
    DUP("log-json", log.log_json, "FILE", G_LOG, "also write one JSON record per logged iteration",
        .defstr = "none"),
    DBL("peak-tflops", log.peak_tflops, G_LOG, POS, "bf16 dense peak per GPU for MFU",
        .defstr = "from the GPU model"),
    DBL("straggler-threshold", log.straggler_threshold, G_LOG, GL_OPT_MIN,
        "report the slowest and fastest ranks when their step times differ by more than this factor", .min = 1),
    SAME_IN("log-throughput", G_LOG, "accepted: TFLOP/s/GPU and MFU are always logged"),
    /* TensorBoard, with Megatron-LM's flags (trainlog.h lists the scalars) */
    DUP("tensorboard-dir", log.tensorboard_dir, "DIR", G_TB,
        "write TensorBoard event files here (the last rank writes them)", .defstr = "none"),
    LONG("tensorboard-log-interval", log.tensorboard_log_interval, G_TB, POS,
         "iterations between the per-iteration scalars (loss, learning rate, ...)"),
    INT("tensorboard-queue-size", log.tensorboard_queue_size, G_TB, POS,
        "events held in memory before they are written (and at each --log-interval)"),
    FLAG("log-timers-to-tensorboard", log.log_timers_to_tensorboard, G_TB,
         "also write iteration-time and throughput (gridlm has no per-phase timers)"),
    FLAG("no-log-learnig-rate-to-tensorboard", log.no_log_learning_rate_to_tensorboard, G_TB,
         "leave out learning-rate (Megatron's spelling)"),
    FLAG("no-log-learning-rate-to-tensorboard", log.no_log_learning_rate_to_tensorboard, G_TB,
         "the same"),
    SAME_IN("log-batch-size-to-tensorboard", G_TB,
            "accepted: batch-size is always written (as by Megatron-LM now)"),
    FLAG("no-log-loss-scale-to-tensorboard", log.no_log_loss_scale_to_tensorboard, G_TB,
         "leave out loss-scale (always 1: gridlm does not scale the loss)"),
    FLAG("log-validation-ppl-to-tensorboard", log.log_validation_ppl_to_tensorboard, G_TB,
         "also write the validation perplexity"),
    FLAG("log-memory-to-tensorboard", log.log_memory_to_tensorboard, G_TB,
         "also write the writing rank's device memory (mem-*-bytes)"),
    FLAG("log-world-size-to-tensorboard", log.log_world_size_to_tensorboard, G_TB,
         "also write world-size"),
    WANDB("wandb-project"),
    WANDB("wandb-entity"),
    WANDB("wandb-exp-name"),
    WANDB("wandb-save-dir"),

    /* --- faults --- */
    FLAG("exit-signal-handler", faults.exit_signal_handler, G_FAULT,
         "on SIGTERM or SIGUSR1, save a checkpoint and exit 0"),
    DBL("exit-duration-in-mins", faults.exit_duration_in_mins, G_FAULT, POS,
        "save and exit after this many minutes", .defstr = "none"),
    LONG("exit-interval", faults.exit_interval, G_FAULT, POS, "save and exit at a multiple of this iteration",
         .defstr = "none"),
    DBL("distributed-timeout-minutes", faults.distributed_timeout_minutes, G_FAULT, POS,
        "a collective that takes longer stops the job"),
    INT("max-nonfinite-iters", faults.max_nonfinite_iters, G_FAULT, NONNEG,
        "consecutive NaN/Inf iterations skipped before stopping"),

    /* --- program --- */
    FLAG("dry-run", dry_run, G_PROG, "start, check the layout and the groups, report placement, exit"),
    INT("world-size", dry_run_world_size, G_PROG, POS,
        "with --dry-run: plan for N ranks in this one process (no launcher, GPU or "
        "communicators) and print the plan as key=value lines", .defstr = "the launcher's"),
    {.name = "help", .kind = GL_OPT_CALL, .offset = GL_OPT_NOWHERE, .group = G_PROG,
     .fn = opt_help, .exits = 1, .help = "print this help and exit"},
    {.name = "version", .kind = GL_OPT_CALL, .offset = GL_OPT_NOWHERE, .group = G_PROG,
     .fn = opt_version, .exits = 1, .help = "print the version and exit"},
    {.name = "list-megatron-flags", .kind = GL_OPT_CALL, .offset = GL_OPT_NOWHERE,
     .group = G_PROG, .fn = opt_list_flags, .exits = 1,
     .help = "print every option, Megatron-LM's included, as NAME<TAB>STATUS<TAB>WHY "
             "(honoured, accepted without effect, or refused) and exit"},

    /* --- Megatron flags naming what gridlm always does --- */
    SAME("no-masked-softmax-fusion", "causal softmax inside the attention kernel"),
    SAME("use-flash-attn", "fused (flash) attention on GPUs"),
    SAME("attention-softmax-in-fp32", "softmax accumulates in fp32"),
    SAME("use-mcore-models", "one model implementation"),
    SAME_AS("transformer-impl", impls, "local or transformer_engine: gridlm's own kernels",
            NULL),
    SAME("no-gradient-accumulation-fusion", "gradients accumulate in fp32"),
    SAME("no-bias-swiglu-fusion", "fusion is gridlm's choice"),
    SAME("no-bias-dropout-fusion", "fusion is gridlm's choice"),
    SAME("no-rope-fusion", "RoPE kernel"),

    /* --- The rest of Megatron-LM's options (megatron/training/arguments.py),
     * each accepted without effect or refused, with the reason.  Rows
     * without help stay out of --help; --list-megatron-flags prints them
     * all, and doc/megatron-flags.md is that list with the reasons. --- */

    /* Accepted: speed, memory or housekeeping only; what is trained is the same. */
    ACCEPT("no-persist-layer-norm", R_FUSION),
    ACCEPT("cross-entropy-loss-fusion", R_FUSION), ACCEPT_V("cross-entropy-fusion-impl", R_FUSION),
    ACCEPT("use-te-activation-func", R_FUSION), ACCEPT("no-gradient-reduce-div-fusion", R_FUSION),
    ACCEPT("no-async-tensor-model-parallel-allreduce", R_FUSION),
    ACCEPT("disable-bf16-reduced-precision-matmul", R_FUSION),
    ACCEPT("tp-comm-overlap", R_COMM), ACCEPT_V("tp-comm-overlap-cfg", R_COMM),
    ACCEPT("disable-tp-comm-overlap-ag", R_COMM), ACCEPT("disable-tp-comm-overlap-rs", R_COMM),
    ACCEPT("tp-comm-overlap-rs-dgrad", R_COMM), ACCEPT("disable-tp-comm-bulk-dgrad", R_COMM),
    ACCEPT("disable-tp-comm-bulk-wgrad", R_COMM), ACCEPT_V("tp-comm-bootstrap-backend", R_COMM),
    ACCEPT("disable-tp-comm-split-ag", R_COMM), ACCEPT("disable-tp-comm-split-rs", R_COMM),
    ACCEPT_V("pipeline-model-parallel-comm-backend", R_COMM),
    ACCEPT_V("high-priority-stream-groups", R_COMM), ACCEPT("no-overlap-p2p-communication", R_COMM),
    ACCEPT("overlap-p2p-communication-warmup-flush", R_COMM),
    ACCEPT("defer-embedding-wgrad-compute", R_COMM), ACCEPT_V("wgrad-deferral-limit", R_COMM),
    ACCEPT("no-align-grad-reduce", R_COMM), ACCEPT_V("ddp-num-buckets", R_COMM),
    ACCEPT("ddp-pad-buckets-for-high-nccl-busbw", R_COMM),
    ACCEPT("ddp-reduce-scatter-with-fp32-accumulation", R_COMM),
    ACCEPT("ddp-average-in-collective", R_COMM),
    ACCEPT("overlap-param-gather-with-optimizer-step", R_COMM),
    ACCEPT("no-align-param-gather", R_COMM), ACCEPT("no-scatter-gather-tensors-in-pipeline", R_COMM),
    ACCEPT("use-ring-exchange-p2p", R_COMM), ACCEPT("use-nccl-ub", R_COMM),
    ACCEPT("disable-symmetric-registration", R_COMM), ACCEPT("use-sharp", R_COMM),
    ACCEPT_V("sharp-enabled-group", R_COMM), ACCEPT_V("nccl-communicator-config-path", R_COMM),
    ACCEPT("use-tp-pp-dp-mapping", R_COMM), ACCEPT("delay-wgrad-compute", R_COMM),
    ACCEPT_V("train-sync-interval", R_COMM), ACCEPT("disable-gloo-process-groups", R_TORCH),
    ACCEPT("manual-gc", R_TORCH), ACCEPT_V("manual-gc-interval", R_TORCH),
    ACCEPT("no-manual-gc-eval", R_TORCH), ACCEPT_V("empty-unused-memory-level", R_TORCH),
    ACCEPT("no-clone-scatter-output-in-embedding", R_TORCH), ACCEPT("use-cpu-initialization", R_INIT),
    ACCEPT("init-model-with-meta-device", R_TORCH), ACCEPT("no-initialization", R_TORCH),
    ACCEPT_V("local-rank", R_LAUNCH), ACCEPT_V("lazy-mpu-init", R_LAUNCH),
    ACCEPT("te-rng-tracker", R_TORCH), ACCEPT("inference-rng-tracker", R_TORCH),
    ACCEPT("enable-cuda-graph", R_GRAPH), ACCEPT_V("cuda-graph-warmup-steps", R_GRAPH),
    ACCEPT("external-cuda-graph", R_GRAPH), ACCEPT_V("cuda-graph-impl", R_GRAPH),
    ACCEPT_V("cuda-graph-scope", R_GRAPH), ACCEPT("distribute-saved-activations", R_TORCH),
    ACCEPT_V("hierarchical-context-parallel-sizes", "context parallelism's groups for "
             "--cp-comm-type a2a+p2p, which gridlm refuses"),

    /* Accepted: gridlm always does this. */
    ACCEPT("no-save-rng", R_RNG_SAVE),
    ACCEPT("apply-query-key-layer-scaling", "attention's softmax runs in fp32 already"),
    ACCEPT("grad-reduce-in-bf16", R_FP32_GRADS), ACCEPT("accumulate-allreduce-grads-in-fp32", R_FP32_GRADS),
    ACCEPT("no-check-for-nan-in-loss-and-grad", "gridlm always checks the loss and gradients "
           "for NaN/Inf: --max-nonfinite-iters sets how many such iterations are skipped"),
    ACCEPT("no-create-attention-mask-in-dataloader", "the causal mask is built inside the "
           "attention kernel, never by the data loader"),
    ACCEPT("no-mmap-bin-files", "gridlm maps the .bin files read-only; the flag changes "
           "only how they are read"),
    ACCEPT_V("num-dataset-builder-threads", R_FUSION), ACCEPT_V("mid-level-dataset-surplus", R_FUSION),
    ACCEPT("allow-ambiguous-pad-tokens", "gridlm's samples have no pad tokens"),
    ACCEPT_V("fp8-interval", "deprecated and ignored by Megatron-LM too"),
    ACCEPT("keep-fp8-transpose-cache", R_FSDP_ONLY),
    ACCEPT("reuse-grad-buf-for-mxfp8-param-ag", "applies to --fp8-recipe mxfp8, which needs "
           "Blackwell and is refused"),
    ACCEPT_V("ckpt-format", R_CKPT), ACCEPT("use-dist-ckpt", R_CKPT), ACCEPT_V("dist-ckpt-format", R_CKPT),
    ACCEPT("auto-detect-ckpt-format", R_CKPT), ACCEPT("ckpt-fully-parallel-save", R_CKPT),
    ACCEPT("no-ckpt-fully-parallel-save", R_CKPT), ACCEPT("ckpt-fully-parallel-load", R_CKPT),
    ACCEPT("ckpt-assume-constant-structure", R_CKPT), ACCEPT_V("dist-ckpt-strictness", R_CKPT),
    ACCEPT("dist-ckpt-save-pre-mcore-014", R_CKPT), ACCEPT("dist-ckpt-optim-fully-reshardable", R_CKPT),
    ACCEPT("distrib-optim-fully-reshardable-mem-efficient", R_CKPT),
    ACCEPT("use-persistent-ckpt-worker", R_CKPT), ACCEPT("no-strict-fsdp-dtensor-load", R_CKPT),
    ACCEPT("no-use-tokenizer-model-from-checkpoint-args", "gridlm takes the tokenizer from "
           "the command line, never from a checkpoint"),
    SAME_AS_IN("dataloader-type", NULL, single_loader, NULL, "gridlm's loader reads the "
               "samples in Megatron's single-pass order: use single or leave it out"),
    SAME_AS_IN("rope-type", NULL, rope_types, NULL, "gridlm's rotary embedding is plain RoPE "
               "(yarn is for multi-latent attention): use rope or leave it out"),
    SAME_AS_IN("softmax-type", NULL, softmax_types, NULL, "gridlm's attention has the plain "
               "softmax: use vanilla or leave it out"),
    SAME_AS_IN("main-grads-dtype", NULL, fp32_only, NULL, R_FP32_STATE),
    SAME_AS_IN("main-params-dtype", NULL, fp32_only, NULL, R_FP32_STATE),
    SAME_AS_IN("exp-avg-dtype", NULL, fp32_only, NULL, R_FP32_STATE),
    SAME_AS_IN("exp-avg-sq-dtype", NULL, fp32_only, NULL, R_FP32_STATE),
    ONLY("lr-warmup-init", 0, "the warm-up starts from 0 as in Megatron's default: use 0 or "
         "leave it out"),
    ONLY("error-injection-rate", 0, "gridlm injects no errors: use 0 or leave it out"),
    ACCEPT_V("error-injection-type", "applies with --error-injection-rate above 0 only"),
    ACCEPT_V("rerun-mode", "gridlm does not re-run iterations to validate them; "
             "--max-nonfinite-iters handles NaN/Inf steps"),

    /* Accepted: they apply only with an option or a program gridlm refuses. */
    ACCEPT_V("loss-scale", R_FP16_ONLY), ACCEPT_V("initial-loss-scale", R_FP16_ONLY),
    ACCEPT_V("min-loss-scale", R_FP16_ONLY), ACCEPT_V("loss-scale-window", R_FP16_ONLY),
    ACCEPT_V("hysteresis", R_FP16_ONLY), ACCEPT("fp16-lm-cross-entropy", R_FP16_ONLY),
    ACCEPT_V("sgd-momentum", R_OTHER_OPT), ACCEPT_V("muon-momentum", R_OTHER_OPT),
    ACCEPT("muon-no-split-qkv", R_OTHER_OPT), ACCEPT("muon-use-nesterov", R_OTHER_OPT),
    ACCEPT_V("muon-scale-mode", R_OTHER_OPT), ACCEPT_V("muon-fp32-matmul-prec", R_OTHER_OPT),
    ACCEPT_V("muon-num-ns-steps", R_OTHER_OPT), ACCEPT_V("muon-tp-mode", R_OTHER_OPT),
    ACCEPT_V("muon-extra-scale-factor", R_OTHER_OPT),
    ACCEPT_V("lr-wsd-decay-style", R_WSD_ONLY), ACCEPT_V("lr-wsd-decay-samples", R_WSD_ONLY),
    ACCEPT_V("lr-wsd-decay-iters", R_WSD_ONLY),
    ACCEPT_V("optimizer-offload-fraction", R_OFFLOAD_ONLY),
    ACCEPT("use-torch-optimizer-for-cpu-offload", R_OFFLOAD_ONLY),
    ACCEPT("overlap-cpu-optimizer-d2h-h2d", R_OFFLOAD_ONLY),
    ACCEPT("no-pin-cpu-grads", R_OFFLOAD_ONLY), ACCEPT("no-pin-cpu-params", R_OFFLOAD_ONLY),
    ACCEPT_V("relative-attention-num-buckets", R_OTHER_POS),
    ACCEPT_V("relative-attention-max-distance", R_OTHER_POS),
    ACCEPT_V("tiktoken-pattern", R_TIKTOKEN), ACCEPT_V("tiktoken-num-special-tokens", R_TIKTOKEN),
    ACCEPT_V("tiktoken-special-tokens", R_TIKTOKEN), ACCEPT("legacy-tokenizer", R_TOKENIZER),
    ACCEPT("trust-remote-code", R_TOKENIZER),
    ACCEPT("fsdp-double-buffer", R_FSDP_ONLY), ACCEPT_V("suggested-communication-unit-size", R_FSDP_ONLY),
    ACCEPT_V("mask-prob", R_OTHER_MODEL), ACCEPT_V("short-seq-prob", R_OTHER_MODEL),
    ACCEPT_V("retriever-seq-length", R_OTHER_MODEL), ACCEPT("bert-no-binary-head", R_OTHER_MODEL),
    ACCEPT_V("onnx-safe", R_OTHER_MODEL), ACCEPT_V("ict-head-size", R_OTHER_MODEL),
    ACCEPT_V("biencoder-projection-dim", R_OTHER_MODEL),
    ACCEPT("biencoder-shared-query-context-model", R_OTHER_MODEL), ACCEPT_V("ict-load", R_OTHER_MODEL),
    ACCEPT_V("bert-load", R_OTHER_MODEL), ACCEPT_V("titles-data-path", R_OTHER_MODEL),
    ACCEPT_V("query-in-block-prob", R_OTHER_MODEL), ACCEPT("use-one-sent-docs", R_OTHER_MODEL),
    ACCEPT_V("evidence-data-path", R_OTHER_MODEL),
    ACCEPT_V("retriever-report-topk-accuracies", R_OTHER_MODEL),
    ACCEPT("retriever-score-scaling", R_OTHER_MODEL), ACCEPT_V("block-data-path", R_OTHER_MODEL),
    ACCEPT_V("embedding-path", R_OTHER_MODEL), ACCEPT_V("indexer-batch-size", R_OTHER_MODEL),
    ACCEPT_V("indexer-log-interval", R_OTHER_MODEL), ACCEPT_V("num-classes", R_OTHER_MODEL),
    ACCEPT_V("img-h", R_OTHER_MODEL), ACCEPT_V("img-w", R_OTHER_MODEL),
    ACCEPT_V("num-channels", R_OTHER_MODEL), ACCEPT_V("patch-dim", R_OTHER_MODEL),
    ACCEPT_V("classes-fraction", R_OTHER_MODEL), ACCEPT_V("data-per-class-fraction", R_OTHER_MODEL),
    ACCEPT("no-data-sharding", R_OTHER_MODEL), ACCEPT_V("head-lr-mult", R_OTHER_MODEL),
    ACCEPT("vision-pretraining", R_OTHER_MODEL), ACCEPT_V("vision-pretraining-type", R_OTHER_MODEL),
    ACCEPT_V("vision-backbone-type", R_OTHER_MODEL), ACCEPT_V("swin-backbone-type", R_OTHER_MODEL),
    ACCEPT_V("mask-type", R_OTHER_MODEL), ACCEPT_V("mask-factor", R_OTHER_MODEL),
    ACCEPT_V("iter-per-epoch", R_OTHER_MODEL), ACCEPT_V("dino-local-img-size", R_OTHER_MODEL),
    ACCEPT_V("dino-local-crops-number", R_OTHER_MODEL), ACCEPT_V("dino-head-hidden-size", R_OTHER_MODEL),
    ACCEPT_V("dino-bottleneck-size", R_OTHER_MODEL), ACCEPT_V("dino-freeze-last-layer", R_OTHER_MODEL),
    ACCEPT("dino-norm-last-layer", R_OTHER_MODEL), ACCEPT_V("dino-warmup-teacher-temp", R_OTHER_MODEL),
    ACCEPT_V("dino-teacher-temp", R_OTHER_MODEL),
    ACCEPT_V("dino-warmup-teacher-temp-epochs", R_OTHER_MODEL),
    ACCEPT_V("sft-tokenizer-prompt-format", "applies with --sft only, which is refused"),
    ACCEPT("disable-mamba-mem-eff-path", R_MAMBA_ONLY),

    /* Accepted: inference, run-time services and logging details gridlm does not have. */
    ACCEPT_V("inference-batch-times-seqlen-threshold", R_INFER),
    ACCEPT_V("max-tokens-to-oom", R_INFER), ACCEPT("output-bert-embeddings", R_INFER),
    ACCEPT_V("bert-embedder-type", R_INFER), ACCEPT("flash-decode", R_INFER),
    ACCEPT("use-legacy-static-engine", R_INFER), ACCEPT_V("inference-max-requests", R_INFER),
    ACCEPT_V("inference-max-seq-length", R_INFER), ACCEPT_V("inference-max-batch-size", R_INFER),
    ACCEPT("inference-dynamic-batching", R_INFER),
    ACCEPT_V("inference-dynamic-batching-buffer-size-gb", R_INFER),
    ACCEPT_V("inference-dynamic-batching-block-size", R_INFER),
    ACCEPT_V("inference-dynamic-batching-buffer-guaranteed-fraction", R_INFER),
    ACCEPT_V("inference-dynamic-batching-buffer-overflow-factor", R_INFER),
    ACCEPT_V("inference-dynamic-batching-max-requests-override", R_INFER),
    ACCEPT_V("inference-dynamic-batching-max-tokens-override", R_INFER),
    ACCEPT_V("inference-dynamic-batching-num-cuda-graphs", R_INFER),
    ACCEPT("inference-dynamic-batching-track-paused-request-events", R_INFER),
    ACCEPT("decode-only-cuda-graphs", R_INFER),
    ACCEPT_V("inference-dynamic-batching-unified-memory-level", R_INFER),
    ACCEPT_V("symmetric-ar-type", R_INFER), ACCEPT("nccl-all-reduce-for-prefill", R_INFER),
    ACCEPT_V("mlp-chunks-for-prefill", R_INFER), ACCEPT("disable-chunked-prefill", R_INFER),
    ACCEPT_V("inference-wandb-logging-step-interval", R_INFER),
    ACCEPT("moe-pad-experts-for-cuda-graph-inference", R_INFER), ACCEPT("cache-mla-latents", R_INFER),
    ACCEPT("no-one-logger", R_SERVICE), ACCEPT_V("one-logger-project", R_SERVICE),
    ACCEPT_V("one-logger-run-name", R_SERVICE), ACCEPT("one-logger-async", R_SERVICE),
    ACCEPT_V("app-tag-run-name", R_SERVICE), ACCEPT_V("app-tag-run-version", R_SERVICE),
    ACCEPT("enable-ft-package", R_SERVICE), ACCEPT("calc-ft-timeouts", R_SERVICE),
    ACCEPT_V("config-logger-dir", R_SERVICE), ACCEPT("run-workload-inspector-server", R_SERVICE),
    ACCEPT("disable-msc", R_SERVICE), ACCEPT("enable-experimental", R_SERVICE),
    ACCEPT("test-mode", R_SERVICE),
    ACCEPT("log-params-norm", R_LOGGED), ACCEPT("log-num-zeros-in-grad", R_LOGGED),
    ACCEPT("log-progress", R_LOGGED), ACCEPT_V("timing-log-level", R_LOGGED),
    ACCEPT("log-energy", R_LOGGED), ACCEPT("no-barrier-with-level-1-timing", R_LOGGED),
    ACCEPT_V("timing-log-option", R_LOGGED), ACCEPT_V("logging-level", R_LOGGED),
    ACCEPT("log-straggler", R_STRAGGLER), ACCEPT("disable-straggler-on-startup", R_STRAGGLER),
    ACCEPT_V("straggler-ctrlr-port", R_STRAGGLER), ACCEPT_V("straggler-minmax-count", R_STRAGGLER),
    ACCEPT_V("inprocess-max-iterations", R_INPROCESS),
    ACCEPT_V("inprocess-monitor-thread-interval", R_INPROCESS),
    ACCEPT_V("inprocess-monitor-process-interval", R_INPROCESS),
    ACCEPT_V("inprocess-progress-watchdog-interval", R_INPROCESS),
    ACCEPT_V("inprocess-heartbeat-interval", R_INPROCESS),
    ACCEPT_V("inprocess-soft-timeout", R_INPROCESS), ACCEPT_V("inprocess-hard-timeout", R_INPROCESS),
    ACCEPT_V("inprocess-heartbeat-timeout", R_INPROCESS),
    ACCEPT_V("inprocess-barrier-timeout", R_INPROCESS),
    ACCEPT_V("inprocess-completion-timeout", R_INPROCESS),
    ACCEPT_V("inprocess-last-call-wait", R_INPROCESS),
    ACCEPT_V("inprocess-termination-grace-time", R_INPROCESS),
    ACCEPT_V("inprocess-granularity", R_INPROCESS),
    ACCEPT_V("inprocess-active-world-size", R_INPROCESS),
    ACCEPT("inprocess-empty-cuda-cache", R_INPROCESS),

    /* Refused: another model than gridlm's dense decoder (GPT or Llama form). */
    /* Mixture of experts (issue 13): the model's form (arch.h: gl_arch)
     * and the training-time settings (gl_moe_opts); check_moe checks them
     * together.  gridlm routes, permutes and multiplies the experts in
     * grouped products always (--moe-grouped-gemm, --moe-permute-fusion,
     * --moe-router-fusion: accepted). */
    INT("num-experts", arch.num_experts, G_MOE, POS,
        "experts of each MoE layer (a mixture-of-experts model)", .defstr = "none: dense"),
    INT("moe-ffn-hidden-size", arch.moe_ffn_hidden_size, G_MOE, POS,
        "each expert's FFN width", .defstr = "--ffn-hidden-size"),
    INT("moe-router-topk", arch.moe_router_topk, G_MOE, POS,
        "experts each token is routed to"),
    STR("moe-layer-freq", arch.moe_layer_freq, "N|LIST", G_MOE,
        "MoE layers: every N-th (N), or a list of 0 (dense) and 1 (MoE) per layer, "
        "e.g. [0,1,1,1] or ([0]+[1]*23)"),
    INT("moe-shared-expert-intermediate-size", arch.moe_shared_expert_intermediate_size,
        G_MOE, POS, "width of the shared experts every token passes through",
        .defstr = "none"),
    CHOICE("moe-router-score-function", arch.moe_router_score_function, "NAME", G_MOE,
           gl_arch_moe_score_names, NULL, "the router's scores: softmax or sigmoid"),
    FLAG("moe-router-pre-softmax", arch.moe_router_pre_softmax, G_MOE,
         "softmax over all experts before the top-k (Mixtral), not over the k chosen"),
    DBL("moe-router-topk-scaling-factor", arch.moe_router_topk_scaling_factor, G_MOE, POS,
        "multiply the top-k routing weights by this", .defstr = "none"),
    FLAG("moe-router-enable-expert-bias", arch.moe_router_enable_expert_bias, G_MOE,
         "a per-expert bias on the scores for the choice only, updated from the load "
         "(DeepSeek-V3's balancing without an auxiliary loss)"),
    DBL("moe-router-bias-update-rate", moe.router_bias_update_rate, G_MOE, NONNEG,
        "step of the expert bias's update"),
    CHOICE("moe-router-load-balancing-type", moe.load_balancing_type, "NAME", G_MOE,
           gl_moe_lb_names, NULL,
           "auxiliary balancing loss: aux_loss (per micro-batch), seq_aux_loss (per "
           "sequence), global_aux_loss (running over the step's micro-batches and the "
           "data-parallel ranks) or none (sinkhorn is not built)"),
    DBL("moe-aux-loss-coeff", moe.aux_loss_coeff, G_MOE, NONNEG,
        "weight of the balancing loss"),
    DBL("moe-z-loss-coeff", moe.z_loss_coeff, G_MOE, NONNEG, "weight of the router's z-loss",
        .defstr = "none"),
    CHOICE("moe-router-dtype", moe.router_dtype, "TYPE", G_MOE, moe_dtypes, moe_dtype_values,
           "the router's precision: fp32 or fp64", .defstr = "the activations'"),
    DBL("moe-expert-capacity-factor", moe.capacity_factor, G_MOE, POS,
        "each expert takes at most this x its even share of the tokens; the rest are "
        "dropped", .defstr = "none: no dropping"),
    CHOICE("moe-token-drop-policy", moe.token_drop_policy, "NAME", G_MOE, moe_drop_policies,
           moe_drop_values, "over capacity, drop the lowest routing weights (probs) or the "
           "latest tokens (position)"),
    FLAG("moe-pad-expert-input-to-capacity", moe.pad_expert_input_to_capacity, G_MOE,
         "pad each expert's tokens to the capacity (needs --moe-expert-capacity-factor)"),
    SAME_IN("moe-grouped-gemm", G_MOE, "accepted: gridlm multiplies all experts in grouped "
            "products always"),
    SAME_IN("moe-permute-fusion", G_MOE, "accepted: gridlm permutes tokens in fused kernels "
            "always"),
    ACCEPT("moe-router-fusion", "gridlm's router (scores, top-k, losses) is its own fused op"),
    ACCEPT("moe-use-legacy-grouped-gemm", "gridlm's grouped expert products are its own"),
    FLAG("moe-shared-expert-overlap", moe.shared_expert_overlap, G_MOE,
         "run the shared experts while the tokens travel to the experts of other EP ranks "
         "(needs --moe-token-dispatcher-type alltoall; the same numbers)"),
    CHOICE("moe-token-dispatcher-type", moe.token_dispatcher, "NAME", G_MOE, moe_dispatchers,
           moe_dispatcher_values, "how tokens travel to the experts of other EP ranks: "
           "allgather (every token to every EP rank, the outputs reduce-scattered back) or "
           "alltoall (each token to its experts' ranks and back); the same products either "
           "way", .defstr = "allgather",
           .hint = "flex (DeepEP, HybridEP) is not built: use alltoall"),
    REFUSE("moe-extended-tp", R_MOE_ETP),
    REFUSE("overlap-moe-expert-parallel-comm", R_MOE_EP),
    REFUSE("moe-enable-deepep", R_MOE_EP), REFUSE("moe-deepep-num-sms", R_MOE_EP),
    REFUSE("moe-layer-recompute", R_MOE_RECOMPUTE),
    REFUSE("moe-use-upcycling", R_MOE_UPCYCLE), REFUSE("moe-upcycling-granularity", R_MOE_UPCYCLE),
    REFUSE("moe-router-num-groups", R_MOE_GROUPS), REFUSE("moe-router-group-topk", R_MOE_GROUPS),
    REFUSE("moe-router-force-load-balancing", R_MOE_FORCE),
    ACCEPT("moe-router-padding-for-fp8", "gridlm pads each expert's rows for its FP8 "
           "products with zero rows itself, the routing unchanged"),
    REFUSE("moe-input-jitter-eps", R_MOE_JITTER),
    REFUSE("moe-per-layer-logging", R_MOE_LOG),
    REFUSE("moe-apply-probs-on-input", R_MOE_PROBS_IN),
    REFUSE("use-fused-weighted-squared-relu", R_ACT),
    REFUSE("multi-latent-attention", R_MLA), REFUSE("q-lora-rank", R_MLA),
    REFUSE("kv-lora-rank", R_MLA), REFUSE("qk-head-dim", R_MLA), REFUSE("qk-pos-emb-head-dim", R_MLA),
    REFUSE("v-head-dim", R_MLA), REFUSE("rotary-scaling-factor", R_MLA), REFUSE("mscale", R_MLA),
    REFUSE("mscale-all-dim", R_MLA),
    REFUSE("mtp-num-layers", R_MTP), REFUSE("mtp-loss-scaling-factor", R_MTP),
    REFUSE("squared-relu", R_ACT), REFUSE("quick-geglu", R_ACT),
    REFUSE("activation-func-clamp-value", R_ACT), REFUSE("glu-linear-offset", R_ACT),
    REFUSE("apply-residual-connection-post-layernorm", R_LAYER),
    REFUSE("qk-l2-norm", R_LAYER),
    REFUSE("fp32-residual-connection", R_LAYER),
    REFUSE("window-size", R_ATTN), REFUSE("window-attn-skip-freq", R_ATTN),
    REFUSE("rotary-interleaved", R_ROPE), REFUSE("rotary-seq-len-interpolation-factor", R_ROPE),
    REFUSE("no-rope-freq", R_ROPE), REFUSE("mrope-section", R_ROPE),
    REFUSE("encoder-num-layers", R_ENCDEC), REFUSE("decoder-num-layers", R_ENCDEC),
    REFUSE("encoder-seq-length", R_ENCDEC), REFUSE("decoder-seq-length", R_ENCDEC),
    REFUSE("vocab-extra-ids", R_ENCDEC),
    REFUSE("heterogeneous-layers-config-path", R_HETERO),
    REFUSE("heterogeneous-layers-config-encoded-json", R_HETERO),
    REFUSE("spec", "gridlm builds its layer from the model-form flags (--normalization, "
           "--swiglu, --position-embedding-type, --add-bias-linear, ...): there is no spec "
           "to choose"),
    REFUSE("hybrid-attention-ratio", R_MAMBA), REFUSE("hybrid-mlp-ratio", R_MAMBA),
    REFUSE("hybrid-override-pattern", R_MAMBA), REFUSE("mamba-state-dim", R_MAMBA),
    REFUSE("mamba-head-dim", R_MAMBA), REFUSE("mamba-num-groups", R_MAMBA),
    REFUSE("mamba-num-heads", R_MAMBA), REFUSE("is-hybrid-model", R_MAMBA),
    REFUSE("retro-project-dir", R_RETRO), REFUSE("retro-add-retriever", R_RETRO),
    REFUSE("retro-cyclic-train-iters", R_RETRO), REFUSE("retro-encoder-layers", R_RETRO),
    REFUSE("retro-encoder-hidden-dropout", R_RETRO), REFUSE("retro-encoder-attention-dropout", R_RETRO),
    REFUSE("retro-num-neighbors", R_RETRO), REFUSE("retro-num-retrieved-chunks", R_RETRO),
    REFUSE("retro-attention-gate", R_RETRO), REFUSE("retro-no-verify-neighbor-count", R_RETRO),
    REFUSE("perform-rl-step", R_RL), REFUSE("rl-prompts-per-eval", R_RL),
    REFUSE("grpo-prompts-per-step", R_RL), REFUSE("grpo-group-size", R_RL),
    REFUSE("grpo-iterations", R_RL), REFUSE("grpo-clamp-eps-lower", R_RL),
    REFUSE("grpo-clamp-eps-upper", R_RL), REFUSE("grpo-kl-beta", R_RL),
    REFUSE("grpo-entropy-term-weight", R_RL), REFUSE("grpo-filter-groups-with-same-reward", R_RL),
    REFUSE("grpo-default-temperature", R_RL), REFUSE("grpo-default-top-p", R_RL),
    REFUSE("langrl-inference-server-type", R_RL),
    REFUSE("langrl-inference-server-conversation-template", R_RL),
    REFUSE("langrl-external-server", R_RL), REFUSE("no-langrl-external-server", R_RL),
    REFUSE("langrl-env-config", R_RL), REFUSE("rl-offload-optimizer-during-inference", R_RL),
    REFUSE("rl-offload-kv-cache-during-training", R_RL),
    REFUSE("no-rl-offload-kv-cache-during-training", R_RL),
    REFUSE("rl-remove-kv-cache-during-training", R_RL),
    REFUSE("no-rl-remove-kv-cache-during-training", R_RL),
    REFUSE("rl-reset-cuda-graphs", R_RL), REFUSE("no-rl-reset-cuda-graphs", R_RL),
    REFUSE("rl-partial-rollouts", R_RL), REFUSE("no-rl-partial-rollouts", R_RL),
    REFUSE("rl-inference-logprobs-is-correction", R_RL),
    REFUSE("no-rl-inference-logprobs-is-correction", R_RL),
    REFUSE("rl-importance-sampling-truncation-coef", R_RL),
    REFUSE("rl-calculate-intra-group-similarity", R_RL),
    REFUSE("no-rl-calculate-intra-group-similarity", R_RL),
    REFUSE("rl-use-sequence-packing", R_RL), REFUSE("rl-sequence-packing-bin-size", R_RL),
    REFUSE("rl-sequence-packing-algo", R_RL),
    REFUSE("sft", "supervised fine-tuning (prompt formats, answer-only loss) is not built: "
           "gridlm-train pre-trains; continue a model with --load DIR --finetune"),
    REFUSE("kitchen-config-file", R_KITCHEN), REFUSE("kitchen-recipe-number", R_KITCHEN),
    REFUSE("fp4-format", "FP4 is not supported (it needs Blackwell): use --fp8-format"),
    REFUSE("fp4-recipe", "FP4 is not supported (it needs Blackwell): use --fp8-format"),
    REFUSE("fp4-quantizer-factory", "FP4 is not supported (it needs Blackwell): use --fp8-format"),
    REFUSE("fp4-param-gather", "FP4 is not supported (it needs Blackwell): use --fp8-format"),
    REFUSE("fp8-quantizer-factory", "gridlm's FP8 recipes are built in: use --fp8-recipe "
           "delayed or tensorwise"),
    REFUSE("no-fp8-wgrad", "gridlm's FP8 runs the weight-gradient products in FP8 as well; "
           "higher-precision weight gradients are not built: drop it"),

    /* Refused: gridlm trains otherwise; each says what to use. */
    REFUSE("fp16", "gridlm trains in bf16 (--bf16) or fp32; fp16 and its loss scaling are "
           "not implemented: use --bf16"),
    REFUSE("batch-size", "Megatron-LM's old name: use --micro-batch-size"),
    REFUSE("model-parallel-size", "Megatron-LM's old name: use --tensor-model-parallel-size"),
    REFUSE("warmup", "Megatron-LM's old name: use --lr-warmup-iters or --lr-warmup-fraction"),
    REFUSE("checkpoint-activations", "Megatron-LM's old name: use --recompute-granularity full "
           "--recompute-method uniform --recompute-num-layers 1"),
    REFUSE("recompute-activations", "gridlm's selective recomputation keeps other tensors "
           "than Megatron's (norm and activation outputs, not the attention core): use "
           "--recompute-granularity selective, or full"),
    REFUSE("recompute-modules", "gridlm's selective recomputation is fixed (norm and activation "
           "outputs): use --recompute-granularity selective or full"),
    REFUSE("use-legacy-models", "gridlm has one model implementation: drop it"),
    REFUSE("num-virtual-stages-per-pipeline-rank", "give the chunk size instead: "
           "--num-layers-per-virtual-pipeline-stage = layers / PP / this number"),
    REFUSE("virtual-pipeline-model-parallel-size", "Megatron-Core's name of the chunks per "
           "rank: give the chunk size instead, --num-layers-per-virtual-pipeline-stage = "
           "layers / PP / this number"),
    REFUSE("microbatch-group-size-per-virtual-pipeline-stage", "gridlm's interleaved "
           "schedule runs micro-batches in groups of --pipeline-model-parallel-size: drop it"),
    REFUSE("decoder-first-pipeline-num-layers", R_EVEN_PP),
    REFUSE("decoder-last-pipeline-num-layers", R_EVEN_PP),
    REFUSE("pipeline-model-parallel-layout", R_EVEN_PP),
    REFUSE("account-for-embedding-in-pipeline-split", R_EVEN_PP),
    REFUSE("account-for-loss-in-pipeline-split", R_EVEN_PP),
    REFUSE("use-megatron-fsdp", R_FSDP), REFUSE("use-torch-fsdp2", R_FSDP),
    REFUSE("torch-fsdp2-no-reshard-after-forward", R_FSDP),
    REFUSE("data-parallel-sharding-strategy", R_FSDP), REFUSE("enable-full-sharding-in-hsdp", R_FSDP),
    REFUSE("num-distributed-optimizer-instances", "one distributed optimizer spans all "
           "data-parallel ranks (--use-distributed-optimizer): drop it"),
    REFUSE("distributed-timeout-seconds-after-init", "use --distributed-timeout-minutes"),
    REFUSE("cpu-offloading-num-layers", "activations stay on the GPU: use "
           "--recompute-granularity to save memory"),
    REFUSE("optimizer-cpu-offload", "the optimizer state stays on the GPU: shard it with "
           "--use-distributed-optimizer"),
    REFUSE("use-precision-aware-optimizer", R_FP32_STATE),
    REFUSE("dump-param-to-param-group-map", "gridlm has two parameter groups (with and without "
           "weight decay) and no map to dump"),
    REFUSE("start-weight-decay", R_WD), REFUSE("end-weight-decay", R_WD),
    REFUSE("weight-decay-incr-style", R_WD),
    REFUSE("data-parallel-random-init", "every data-parallel rank starts from the same "
           "weights, set by --seed: drop it"),
    REFUSE("embedding-init-method-std", "the embeddings are initialised with "
           "--init-method-std like the other weights"),
    REFUSE("init-method-xavier-uniform", "weights are initialised from a normal "
           "distribution: use --init-method-std"),
    REFUSE("decrease-batch-size-if-needed", "the global batch is fixed: choose "
           "--global-batch-size for the ranks launched"),
    REFUSE("check-for-spiky-loss", R_CHECKS), REFUSE("check-for-large-grads", R_CHECKS),
    REFUSE("check-weight-hash-across-dp-replicas-interval", R_CHECKS),
    REFUSE("iterations-to-skip", "iterations are not skipped by number: "
           "--max-nonfinite-iters skips those with NaN/Inf"),
    REFUSE("result-rejected-tracker-filename", "iterations are not skipped by number: "
           "--max-nonfinite-iters skips those with NaN/Inf"),
    REFUSE("profile", R_PROFILE), REFUSE("profile-step-start", R_PROFILE),
    REFUSE("profile-step-end", R_PROFILE), REFUSE("profile-ranks", R_PROFILE),
    REFUSE("use-pytorch-profiler", R_PROFILE), REFUSE("record-memory-history", R_PROFILE),
    REFUSE("memory-snapshot-path", R_PROFILE),
    REFUSE("padded-vocab-size", "gridlm pads the vocabulary itself: use "
           "--make-vocab-size-divisible-by"),
    REFUSE("tokenizer-metadata", R_TOKENIZER_FILE), 
    REFUSE("train-data-path", R_SPLIT_DATA), REFUSE("valid-data-path", R_SPLIT_DATA),
    REFUSE("test-data-path", R_SPLIT_DATA), REFUSE("per-split-data-args-path", R_SPLIT_DATA),
    REFUSE("data-args-path", "give the blend on the command line: --data-path W1 PREFIX1 "
           "W2 PREFIX2 ..."),
    REFUSE("object-storage-cache-path", "gridlm reads datasets from files: use --data-path "
           "and --data-cache-path"),
    REFUSE("sample-rate", "the data loader reads every sample: drop it"),
    REFUSE("reset-position-ids", R_DOCS), REFUSE("reset-attention-mask", R_DOCS),
    REFUSE("full-validation", R_VALID), REFUSE("multiple-validation-sets", R_VALID),
    REFUSE("skip-train", "gridlm-train trains: evaluate a checkpoint with gridlm-eval"),
    REFUSE("save-retain-interval", R_CKPT_KEEP),
    REFUSE("non-persistent-save-interval", R_CKPT_KEEP),
    REFUSE("non-persistent-ckpt-type", R_CKPT_KEEP),
    REFUSE("non-persistent-global-ckpt-dir", R_CKPT_KEEP),
    REFUSE("non-persistent-local-ckpt-dir", R_CKPT_KEEP),
    REFUSE("non-persistent-local-ckpt-algo", R_CKPT_KEEP),
    REFUSE("replication", R_CKPT_KEEP), REFUSE("replication-jump", R_CKPT_KEEP),
    REFUSE("replication-factor", R_CKPT_KEEP),
    REFUSE("load-main-params-from-ckpt", "the fp32 master weights are always loaded with the "
           "optimizer state: use --no-load-optim to start the optimizer afresh"),
    REFUSE("pretrained-checkpoint", "use --load DIR --finetune"),
    REFUSE("ckpt-step", "gridlm loads the latest checkpoint in --load DIR"),
    REFUSE("use-mp-args-from-checkpoint-args", "give the layout on the command line: gridlm's "
           "checkpoints load under any layout"),
    REFUSE("exit-on-missing-checkpoint", "not built: check that --load DIR holds a "
           "checkpoint before the run"),
    REFUSE("ckpt-convert-format", R_CONVERT), REFUSE("ckpt-convert-save", R_CONVERT),
    REFUSE("ckpt-convert-update-legacy-dist-opt-format", R_CONVERT),
    REFUSE("adlr-autoresume", R_RESUME), REFUSE("adlr-autoresume-interval", R_RESUME),
    REFUSE("inprocess-restart", "in-process restart is not built: restart the job with "
           "--load DIR (and --exit-signal-handler to save first)"),
    REFUSE("yaml-cfg", "give the options on the command line"),
    {.name = NULL},
};

static int opt_list_flags(void *target, const gl_option *o, const char *value, char **more,
                          int nmore)
{
    for (const gl_option *r = table; r->name; r++) {
        gl_opt_status st = gl_opt_status_of(r);
        const char *why = st == GL_OPT_REFUSED ? r->refused : st == GL_OPT_ACCEPTED
                                                                  ? (r->hint ? r->hint : r->help)
                                                                  : NULL;
        printf("%s\t%s\t%s\n", r->name, gl_opt_status_name(st), why ? why : "");
    }
    fflush(stdout);
    exit(0);
}

static int opt_help(void *target, const gl_option *o, const char *value, char **more,
                    int nmore)
{
    gl_config d;
    gl_config_defaults(&d);
    const char *p = gl_log_program();
    printf("Usage: %s [OPTIONS]\n"
           "       srun --mpi=pmix %s [OPTIONS]\n"
           "       mpiexec -n RANKS %s [OPTIONS]\n"
           "\n"
           "Pre-train a decoder language model -- Megatron-LM's GPT by default, or the\n"
           "Llama form (see Model) -- on one process per GPU, with\n"
           "tensor, context, pipeline and data parallelism.  Options follow Megatron-LM's\n"
           "names; both --name VALUE and --name=VALUE work; flags are off unless given\n"
           "(but --add-bias-linear, which --disable-bias-linear turns off).\n"
           "A --model preset sets the model's shape and form (Llama, Qwen2, GPT-2)\n"
           "first; explicit options override it.\n",
           p, p, p);
    gl_opt_help(stdout, table, &d);
    printf("\nExit status: 0 on success, 1 on a run-time error, 2 on a usage error.\n"
           "See gridlm-train(1) for examples.\n");
    fflush(stdout);
    exit(0);
}

/* ------------------------------------------------------------------ */
/* Defaults.                                                           */

void gl_config_defaults(gl_config *c)
{
    memset(c, 0, sizeof *c);
    gl_arch_defaults(&c->arch);
    gl_fp8_defaults(&c->fp8);
    gl_moe_defaults(&c->moe);

    c->layout.tensor_model_parallel_size = 1;
    c->layout.pipeline_model_parallel_size = 1;
    c->layout.context_parallel_size = 1;
    c->layout.expert_model_parallel_size = 1;
    snprintf(c->layout.cp_comm_type, sizeof c->layout.cp_comm_type, "p2p");

    c->layout.micro_batch_size = 1;
    c->seed = 1234;

    snprintf(c->optim.optimizer, sizeof c->optim.optimizer, "adam");
    c->optim.lr_decay_style = GL_LR_LINEAR;
    c->optim.decoupled_min_lr = -1;
    c->optim.weight_decay = 0.01;
    c->optim.adam_beta1 = 0.9;
    c->optim.adam_beta2 = 0.999;
    c->optim.adam_eps = 1e-8;
    c->optim.clip_grad = 1.0;

    c->device = GL_DEVICE_AUTO;
    c->layout.recompute_granularity = GL_RECOMPUTE_NONE;

    snprintf(c->data.split, sizeof c->data.split, "969,30,1");
    c->data.num_workers = 2;
    c->eval_interval = 1000;
    c->eval_iters = 100;

    c->log.log_interval = 100;
    c->log.straggler_threshold = 1.2;
    c->log.tensorboard_log_interval = 1;
    c->log.tensorboard_queue_size = 1000;

    c->faults.distributed_timeout_minutes = 10;
    c->faults.max_nonfinite_iters = 5;

    c->layout.virtual_pipeline_size = 1;
}

/* ------------------------------------------------------------------ */
/* Checks on the command line alone.                                   */

/* n must be divisible by the parallel size p; the message names both
 * flags and lists the sizes that would work.  1 when it is not. */
static int must_divide(const char *pflag, const char *pname, int p, const char *nflag, long n)
{
    char list[256];
    if (n % p == 0)
        return 0;
    bad("--%s %d does not divide %s %ld: choose a %s size that divides %ld (%s)", pflag, p,
        nflag, n, pname, n, divisors(n, 64, list, sizeof list));
    return 1;
}

/* --use-checkpoint-args without --load: that has its own line, and no
 * checkpoint was read to give the shape and the vocabulary, so their
 * absence is not worth another. */
static int checkpoint_unread(const gl_config *c)
{
    return c->ckpt.use_checkpoint_args && !c->ckpt.load;
}

/* The model's shape is known: the options every model needs are given,
 * here or by --model.  Reports those missing, but not one whose value
 * was refused (nor any after a refused --model, which was to give them):
 * that has its own line already. */
static int shape_known(const gl_config *c)
{
    static const struct { const char *flag; size_t off; } req[] = {
        {"num-layers", OFF(arch.num_layers)},
        {"hidden-size", OFF(arch.hidden_size)},
        {"num-attention-heads", OFF(arch.num_attention_heads)},
        {"seq-length", OFF(arch.seq_length)},
    };
    int known = 1;
    for (size_t i = 0; i < sizeof req / sizeof req[0]; i++) {
        if (*(const int *)((const char *)c + req[i].off) > 0)
            continue;
        known = 0;
        if (refused_any("model") || refused_any(req[i].flag))
            continue;
        if (checkpoint_unread(c))
            continue;
        /* A Hugging Face import gives every size but the run's length. */
        if (c->ckpt.use_checkpoint_args)
            bad("--%s is required: the checkpoint --load %s names does not give it (an "
                "import from Hugging Face has no training length): give it, e.g. --%s %d",
                req[i].flag, c->ckpt.load, req[i].flag,
                c->arch.max_position_embeddings > 0 && c->arch.max_position_embeddings < 4096
                    ? c->arch.max_position_embeddings : 4096);
        else
            bad("--%s is required: give it, or choose a model with --model (%s)", req[i].flag,
                gl_arch_preset_names);
    }
    return known;
}

/* Whether argv holds the switch --name (looked at before parsing). */
static int argv_has(int argc, char **argv, const char *name)
{
    for (int i = 1; i < argc; i++)
        if (!strncmp(argv[i], "--", 2) && !strcmp(argv[i] + 2, name))
            return 1;
    return 0;
}

/* A usage error after which nothing more can be checked: it is recorded
 * with those found so far, and gl_opt_collect_end() reports them all and
 * stops (exit 2).  Does not return. */
GL_NORETURN GL_PRINTF(1, 2) static void bad_stop(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    bad("%s", msg);
    gl_opt_collect_end();
    gl_die_code(2, "%s", msg);   /* not reached: gl_opt_collect_end() stopped */
}

/* --use-checkpoint-args, before the flags are read: the shape in the
 * "config" of the checkpoint --load names becomes the model, as a preset
 * would (the run's --seq-length may still differ: RoPE has no position
 * weights).  *there keeps it for check_checkpoint_args; returns the
 * checkpoint's path (malloc'd).  A checkpoint that cannot be read stops
 * the parse at once (bad_stop): without its shape, every check after
 * would judge an empty model and only add noise. */
static char *checkpoint_shape(gl_config *c, const char *load, gl_arch *there)
{
    gl_train_peek_info k;
    gl_error err;
    int rc = gl_train_peek(load, &k, &err);
    if (rc == GL_CKPT_NONE)
        bad_stop("--use-checkpoint-args: --load %s holds no checkpoint yet, so there is no "
                 "shape to take: give --load a checkpoint (gridlm-ckpt import-hf HF_DIR OUT "
                 "writes one), or drop --use-checkpoint-args and give the shape "
                 "(--num-layers, --hidden-size, ...)", load);
    if (rc != GL_CKPT_OK)
        bad_stop("--load %s: %s", load, err.text);
    if (gl_train_config_from_json(k.config, c, &err) != 0)
        bad_stop("--load %s: %s", k.file, err.text);
    *there = c->arch;
    char *file = gl_strdup(k.file);
    gl_train_peek_free(&k);
    return file;
}

/* --use-checkpoint-args, after the flags: a shape flag that disagrees
 * with the checkpoint is refused, naming both values (the fields
 * gl_arch_diff compares are those the load itself checks). */
static void check_checkpoint_args(const gl_config *c, const gl_arch *there, const char *file)
{
    char diffs[2048];
    int n = gl_arch_diff(there, &c->arch, diffs, sizeof diffs);
    if (n)
        bad("--use-checkpoint-args: %d flag%s disagree%s with the checkpoint %s (there) and "
            "the command line (here): %s: drop %s, the checkpoint gives the model's shape",
            n, n == 1 ? "" : "s", n == 1 ? "s" : "", file, diffs, n == 1 ? "it" : "them");
}

/* What the model does not build yet, refused by name rather than trained
 * as something else. */
static void check_model_form(const gl_config *c)
{
    const gl_arch *a = &c->arch;
    if (a->rotary_percent != 1 && a->position_embedding_type == GL_POS_ROPE)
        bad("--rotary-percent %g is not built: RoPE rotates every channel of a head; pass "
            "--rotary-percent 1", a->rotary_percent);
    /* The option table refuses 1 and above on the command line; these
     * catch a value read elsewhere (--use-checkpoint-args). */
    if (a->attention_dropout >= 1)
        bad("--attention-dropout %g is out of range: give a number in [0, 1) (1 would drop "
            "every probability)", a->attention_dropout);
    if (a->hidden_dropout >= 1)
        bad("--hidden-dropout %g is out of range: give a number in [0, 1) (1 would drop "
            "every activation)", a->hidden_dropout);
    if (a->qk_layernorm && (a->normalization != GL_NORM_RMSNORM || a->apply_layernorm_1p))
        bad("--qk-layernorm with --normalization %s%s is not built: gridlm's QK norm is "
            "RMSNorm over each head (Qwen3's); pass --normalization RMSNorm",
            gl_arch_norm_names[a->normalization], a->apply_layernorm_1p ?
            " --apply-layernorm-1p" : "");
}

static void check_model(const gl_config *c)
{
    check_model_form(c);
    if (c->arch.hidden_size % c->arch.num_attention_heads && !c->arch.kv_channels)
        bad("--hidden-size %d is not divisible by --num-attention-heads %d: choose heads that "
            "divide %d, or give the head size with --kv-channels", c->arch.hidden_size,
            c->arch.num_attention_heads, c->arch.hidden_size);
    if (c->arch.num_query_groups > c->arch.num_attention_heads ||
        c->arch.num_attention_heads % c->arch.num_query_groups) {
        char list[256];
        bad("--num-query-groups %d does not divide --num-attention-heads %d: choose a number "
            "of groups that divides %d (%s)", c->arch.num_query_groups, c->arch.num_attention_heads,
            c->arch.num_attention_heads, divisors(c->arch.num_attention_heads, 1024, list, sizeof list));
    }
    if (c->arch.kv_channels % 2)
        bad("--kv-channels %d is odd: rotary embeddings rotate pairs of channels, so the head "
            "size must be even", c->arch.kv_channels);
    if (c->arch.max_position_embeddings < c->arch.seq_length)
        bad("--max-position-embeddings %d is smaller than --seq-length %d: raise it to at "
            "least %d or shorten the sequences", c->arch.max_position_embeddings, c->arch.seq_length,
            c->arch.seq_length);
    /* The llama3 rule blends between the wavelengths original / high and
     * original / low, dividing by high - low: high must exceed low. */
    if (!(c->arch.rope_scaling_high_freq_factor > c->arch.rope_scaling_low_freq_factor))
        bad("--rope-scaling-high-freq-factor %g is not larger than "
            "--rope-scaling-low-freq-factor %g: RoPE scaling blends between the wavelengths "
            "original / high and original / low, so high must exceed low (Llama 3.1 uses 4 "
            "and 1)", c->arch.rope_scaling_high_freq_factor, c->arch.rope_scaling_low_freq_factor);
}

/* The MoE flags given to a dense model (num_experts 0): those that
 * differ from Megatron's defaults, as "--a, --b" into out. */
static int moe_flags_without_experts(const gl_config *c, char *out, size_t n)
{
    gl_config d;
    gl_config_defaults(&d);
    const gl_arch *a = &c->arch, *da = &d.arch;
    const gl_moe_opts *m = &c->moe, *dm = &d.moe;
    struct { int differs; const char *flag; } f[] = {
        {a->moe_ffn_hidden_size != da->moe_ffn_hidden_size, "moe-ffn-hidden-size"},
        {a->moe_router_topk != da->moe_router_topk, "moe-router-topk"},
        {strcmp(a->moe_layer_freq, da->moe_layer_freq) != 0, "moe-layer-freq"},
        {a->moe_shared_expert_intermediate_size != 0, "moe-shared-expert-intermediate-size"},
        {a->moe_router_score_function != da->moe_router_score_function,
         "moe-router-score-function"},
        {a->moe_router_pre_softmax, "moe-router-pre-softmax"},
        {a->moe_router_topk_scaling_factor != 0, "moe-router-topk-scaling-factor"},
        {a->moe_router_enable_expert_bias, "moe-router-enable-expert-bias"},
        {m->router_bias_update_rate != dm->router_bias_update_rate,
         "moe-router-bias-update-rate"},
        {m->load_balancing_type != dm->load_balancing_type, "moe-router-load-balancing-type"},
        {m->aux_loss_coeff != 0, "moe-aux-loss-coeff"},
        {m->z_loss_coeff != 0, "moe-z-loss-coeff"},
        {m->router_dtype != dm->router_dtype, "moe-router-dtype"},
        {m->capacity_factor != 0, "moe-expert-capacity-factor"},
        {m->token_drop_policy != dm->token_drop_policy, "moe-token-drop-policy"},
        {m->pad_expert_input_to_capacity, "moe-pad-expert-input-to-capacity"},
    };
    int k = 0;
    size_t len = 0;
    out[0] = '\0';
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].differs && len < n)
            len += (size_t)snprintf(out + len, n - len, "%s--%s", k++ ? ", " : "", f[i].flag);
    return k;
}

/* Mixture of experts: the flags against each other and the layout, and
 * what gridlm does not train yet (some FP8 experts; expert parallelism with
 * CP > 1, or with the allgather dispatcher and TP > 1; an ETP other than
 * TP, or 1 without EP). */
/* Expert parallelism: what is built (moe.c, optim.h) is EP with CP = 1:
 * the alltoall dispatcher with the experts split over ETP = TP or whole
 * (ETP 1), with or without sequence parallelism, and the allgather
 * dispatcher with TP = 1; the rest is refused by name.  A capacity
 * factor is allowed: each rank drops on its own micro-batch's routing
 * before the dispatch, as Megatron's router does, the decision of EP 1
 * for the same micro-batch. */
static void check_ep(const gl_config *c)
{
    int ep = c->layout.expert_model_parallel_size;
    if (ep == 1)
        return;
    if (c->layout.context_parallel_size > 1)
        bad("--expert-model-parallel-size %d with --context-parallel-size %d: expert "
            "parallelism is built with CP = 1 only; use CP 1, or --expert-model-parallel-size 1",
            ep, c->layout.context_parallel_size);
    if (c->moe.token_dispatcher == GL_DISPATCH_ALLGATHER &&
        c->layout.tensor_model_parallel_size > 1)
        bad("--expert-model-parallel-size %d with --tensor-model-parallel-size %d and "
            "--moe-token-dispatcher-type allgather (the default): the allgather dispatcher is "
            "built with TP 1 only; add --moe-token-dispatcher-type alltoall (the same tokens "
            "reach the same experts), or use TP 1", ep, c->layout.tensor_model_parallel_size);
}

static void check_moe(gl_config *c)
{
    gl_arch *a = &c->arch;
    const gl_moe_opts *m = &c->moe;
    int tp = c->layout.tensor_model_parallel_size;
    int ep = c->layout.expert_model_parallel_size, etp = c->layout.expert_tensor_parallel_size;
    if (refused_any("num-experts moe-router-topk moe-layer-freq moe-ffn-hidden-size "
                    "moe-shared-expert-intermediate-size"))
        return;
    if (a->num_experts <= 0) {
        char given[1024];
        int n = moe_flags_without_experts(c, given, sizeof given);
        if (n)
            bad("%s set%s the experts of a dense model: add --num-experts N for a "
                "mixture-of-experts model, or drop %s", given, n == 1 ? "s" : "",
                n == 1 ? "it" : "them");
        if (c->layout.expert_model_parallel_size != 1)
            bad("--expert-model-parallel-size %d needs a mixture-of-experts model "
                "(--num-experts): a dense model has no experts to split; use "
                "--expert-model-parallel-size 1", c->layout.expert_model_parallel_size);
        if (etp != tp)
            bad("--expert-tensor-parallel-size %d needs a mixture-of-experts model "
                "(--num-experts): a dense model has no experts to split; drop it", etp);
        return;
    }
    int E = a->num_experts, F = gl_arch_moe_ffn(a), S = a->moe_shared_expert_intermediate_size;
    if (a->moe_router_topk > E)
        bad("--moe-router-topk %d is more than --num-experts %d: a token is routed to at most "
            "every expert; choose a top-k of 1 to %d", a->moe_router_topk, E, E);
    char canon[GL_MOE_FREQ_MAX];
    gl_error err;
    if (gl_moe_layer_freq_parse(a->moe_layer_freq, a->num_layers, canon, sizeof canon, &err))
        bad("%s", err.text);
    else
        snprintf(a->moe_layer_freq, sizeof a->moe_layer_freq, "%s", canon);
    /* The experts: E / EP of them on each rank, each split over ETP. */
    char list[256];
    if (E % ep)
        bad("--num-experts %d is not divisible by --expert-model-parallel-size %d: each EP "
            "rank holds the same number of experts; choose an EP of %s", E, ep,
            divisors(E, E, list, sizeof list));
    if (F % etp && etp != tp)
        bad("--expert-tensor-parallel-size %d must divide the experts' FFN width %d "
            "(--moe-ffn-hidden-size, else --ffn-hidden-size): ETP splits each expert's "
            "matrices; choose one of %s", etp, F, divisors(F, 64, list, sizeof list));
    if (F % tp)
        bad("--tensor-model-parallel-size %d must divide the experts' FFN width %d "
            "(--moe-ffn-hidden-size, else --ffn-hidden-size): TP splits each expert as "
            "the dense MLP", tp, F);
    if (S % tp)
        bad("--tensor-model-parallel-size %d must divide "
            "--moe-shared-expert-intermediate-size %d: TP splits the shared experts as the "
            "dense MLP", tp, S);
    if (!a->swiglu)
        bad("--num-experts %d: gridlm's experts are SwiGLU MLPs (Mixtral's, Qwen3-MoE's): "
            "add --swiglu", E);
    if (a->add_bias_linear)
        bad("--num-experts %d: gridlm's experts have no biases (Mixtral's and Qwen3-MoE's "
            "have none): add --disable-bias-linear", E);
    if (a->moe_router_enable_expert_bias && a->moe_router_score_function != GL_ROUTER_SIGMOID)
        bad("--moe-router-enable-expert-bias needs --moe-router-score-function sigmoid (the "
            "expert bias is DeepSeek-V3's, on sigmoid scores; Megatron refuses it with "
            "softmax): add it, or drop the expert bias");
    if (m->pad_expert_input_to_capacity && m->capacity_factor <= 0)
        bad("--moe-pad-expert-input-to-capacity pads to the experts' capacity, which "
            "--moe-expert-capacity-factor sets: add it, or drop the padding");
    if (m->shared_expert_overlap && S > 0 && m->token_dispatcher != GL_DISPATCH_ALLTOALL)
        bad("--moe-shared-expert-overlap with --moe-token-dispatcher-type allgather (the "
            "default): the shared experts overlap the alltoall dispatcher's exchange only, "
            "as in Megatron; add --moe-token-dispatcher-type alltoall, or drop the overlap");
    /* A dry run plans the expert grid of any EP and ETP that fit (the
     * groups, which experts each rank holds, the memory per rank: with a
     * warning from gl_config_finish); training checks what is built. */
    if (!c->dry_run)
        check_ep(c);
    if (etp != tp && !(etp == 1 && ep > 1) && !c->dry_run)
        bad("--expert-tensor-parallel-size %d differs from --tensor-model-parallel-size %d: "
            "the experts split over TP as the dense MLP, or (with "
            "--expert-model-parallel-size above 1) not at all; another tensor parallelism "
            "of their own is not built: drop it, or set it to %d%s", etp, tp, tp,
            ep > 1 ? " or 1" : "");
    if (c->calculate_per_token_loss && (m->aux_loss_coeff > 0 || m->z_loss_coeff > 0))
        bad("--calculate-per-token-loss with --moe-aux-loss-coeff or --moe-z-loss-coeff: "
            "gridlm scales the MoE losses for the per-micro-batch normalisation only: drop "
            "--calculate-per-token-loss, or the MoE losses");
}

static void check_layout(gl_config *c)
{
    int tp = c->layout.tensor_model_parallel_size, pp = c->layout.pipeline_model_parallel_size;
    int cp = c->layout.context_parallel_size;
    /* One line for a TP size: the first width it does not divide names
     * it, and the others would only refuse the same value again. */
    if (!must_divide("tensor-model-parallel-size", "TP", tp, "--num-attention-heads",
                     c->arch.num_attention_heads) &&
        !must_divide("tensor-model-parallel-size", "TP", tp, "--num-query-groups",
                     c->arch.num_query_groups))
        must_divide("tensor-model-parallel-size", "TP", tp, "--ffn-hidden-size",
                    c->arch.ffn_hidden_size);
    int uneven = must_divide("pipeline-model-parallel-size", "PP", pp, "--num-layers",
                             c->arch.num_layers);

    /* Interleaving: each pipeline rank holds V = (layers / PP) / n chunks
     * of n layers.  As in Megatron, it needs a pipeline (PP > 1). */
    int n = c->layout.num_layers_per_virtual_pipeline_stage;
    if (n && !uneven) {   /* (uneven stages: refused above) */
        int per_stage = c->arch.num_layers / pp;
        if (pp < 2)
            bad("--num-layers-per-virtual-pipeline-stage %d needs a pipeline: the interleaved "
                "schedule needs --pipeline-model-parallel-size 2 or more", n);
        if (per_stage % n) {
            char list[256];
            bad("--num-layers-per-virtual-pipeline-stage %d does not divide the %d layers of "
                "each pipeline stage (--num-layers %d / --pipeline-model-parallel-size %d): "
                "choose one of %s", n, per_stage, c->arch.num_layers, pp,
                divisors(per_stage, per_stage, list, sizeof list));
        }
        c->layout.virtual_pipeline_size = per_stage / n;
    } else {
        c->layout.virtual_pipeline_size = 1;
    }

    /* Sequence parallelism splits along the sequence over TP; Megatron
     * turns it off without a word at TP = 1: here with one. */
    if (c->layout.sequence_parallel && tp == 1) {
        warn0("--sequence-parallel has no effect with --tensor-model-parallel-size 1: "
              "turned off");
        c->layout.sequence_parallel = 0;
    }
    /* Context parallelism cuts each sequence into 2 x CP chunks (rank r
     * takes chunks r and 2CP-1-r, balancing the causal mask's work). */
    if (cp > 1 && c->arch.seq_length % (2 * cp))
        bad("--seq-length %d is not divisible by 2 x --context-parallel-size = %d: context "
            "parallelism cuts each sequence into 2 x CP equal chunks; choose a sequence "
            "length that is a multiple of %d", c->arch.seq_length, 2 * cp, 2 * cp);
    if (cp > 1 && !strcmp(c->layout.cp_comm_type, "a2a+p2p"))
        bad("--cp-comm-type a2a+p2p: gridlm has no hierarchical (all-to-all within, ring "
            "across) context parallelism; use --cp-comm-type p2p, all_gather or a2a");
    /* Ulysses splits each rank's (TP-local) heads over the CP ranks. */
    if (cp > 1 && tp > 0 && !strcmp(c->layout.cp_comm_type, "a2a") &&
        c->arch.num_attention_heads % tp == 0 && c->arch.num_query_groups % tp == 0 &&
        ((c->arch.num_attention_heads / tp) % cp || (c->arch.num_query_groups / tp) % cp))
        bad("--cp-comm-type a2a splits each rank's heads over the --context-parallel-size %d "
            "ranks: the %d query heads (--num-attention-heads %d / --tensor-model-parallel-size "
            "%d) and the %d key/value heads (--num-query-groups %d / TP %d) must both be "
            "multiples of %d; use --cp-comm-type p2p or all_gather, or another CP or TP size",
            cp, c->arch.num_attention_heads / tp, c->arch.num_attention_heads, tp,
            c->arch.num_query_groups / tp, c->arch.num_query_groups, tp, cp);
    if (c->layout.sequence_parallel && (c->arch.seq_length / cp) % tp)
        bad("--seq-length %d%s is not divisible by --tensor-model-parallel-size %d under "
            "--sequence-parallel: choose a sequence length that is a multiple of %d",
            c->arch.seq_length / cp, cp > 1 ? " (per context-parallel rank)" : "", tp, tp * cp);
    if (c->optim.overlap_param_gather && !c->optim.use_distributed_optimizer)
        bad("--overlap-param-gather needs --use-distributed-optimizer: add it, or drop "
            "--overlap-param-gather");
    if (c->optim.overlap_param_gather && !c->optim.overlap_grad_reduce)
        bad("--overlap-param-gather needs --overlap-grad-reduce (the weights travel in "
            "its buckets): add it, or drop --overlap-param-gather");
}

static void check_recompute(const gl_config *c)
{
    if (refused_any("recompute-granularity recompute-method recompute-num-layers"))
        return;
    int full = c->layout.recompute_granularity == GL_RECOMPUTE_FULL;
    int per_stage = c->arch.num_layers / c->layout.pipeline_model_parallel_size;
    /* else-if: the first line says what the three need together. */
    if (full && !c->layout.recompute_method[0])
        bad("--recompute-granularity full needs --recompute-method uniform or block "
            "(and --recompute-num-layers N)");
    else if (!full && c->layout.recompute_method[0])
        bad("--recompute-method %s needs --recompute-granularity full: add it, or drop "
            "--recompute-method", c->layout.recompute_method);
    else if (!full && c->layout.recompute_num_layers)
        bad("--recompute-num-layers %d needs --recompute-granularity full and "
            "--recompute-method: add them, or drop --recompute-num-layers",
            c->layout.recompute_num_layers);
    else if (full && !c->layout.recompute_num_layers)
        bad("--recompute-method %s needs --recompute-num-layers N: the number of layers per "
            "recomputed group (uniform) or per stage (block), 1 to %d", c->layout.recompute_method,
            per_stage);
    if (full && c->layout.recompute_num_layers > per_stage)
        bad("--recompute-num-layers %d is more than the %d layers of a pipeline stage: choose "
            "1 to %d", c->layout.recompute_num_layers, per_stage, per_stage);
}

static void check_schedule(gl_config *c)
{
    if (c->train_iters && c->train_samples)
        bad("--train-iters %ld and --train-samples %ld both given: choose one", c->train_iters,
            c->train_samples);
    if (c->optim.lr_warmup_iters && c->optim.lr_warmup_fraction > 0)
        bad("--lr-warmup-iters %ld and --lr-warmup-fraction %g both given: choose one",
            c->optim.lr_warmup_iters, c->optim.lr_warmup_fraction);
    if (c->optim.lr_warmup_samples && c->optim.lr_warmup_fraction > 0)
        bad("--lr-warmup-samples %ld and --lr-warmup-fraction %g both given: choose one",
            c->optim.lr_warmup_samples, c->optim.lr_warmup_fraction);
    /* Megatron's rules: a run counts in iterations or in samples, and
     * its schedule in the same unit. */
    if (c->train_iters && (c->optim.lr_decay_samples || c->optim.lr_warmup_samples))
        bad("--lr-%s-samples with --train-iters: iteration-based training takes "
            "--lr-decay-iters and --lr-warmup-iters (or give --train-samples)",
            c->optim.lr_decay_samples ? "decay" : "warmup");
    if (c->train_iters && c->rampup_batch_size[0])
        bad("--rampup-batch-size with --train-iters: a batch-size ramp-up needs sample-based "
            "training, give --train-samples instead");
    if (c->train_samples && (c->optim.lr_decay_iters || c->optim.lr_warmup_iters))
        bad("--lr-%s-iters with --train-samples: sample-based training takes "
            "--lr-decay-samples and --lr-warmup-samples (or --lr-warmup-fraction)",
            c->optim.lr_decay_iters ? "decay" : "warmup");
    if (c->optim.use_checkpoint_opt_param_scheduler && c->optim.override_opt_param_scheduler)
        bad("--use-checkpoint-opt_param-scheduler and --override-opt_param-scheduler both "
            "given: choose one (the checkpoint's schedule, or the command line's)");
    if (c->optim.decoupled_min_lr >= 0 && !(c->optim.decoupled_lr > 0))
        bad("--decoupled-min-lr without --decoupled-lr: give the embedding and output "
            "layer's peak rate too");
    if (c->optim.min_lr > c->optim.lr && c->optim.lr > 0)
        bad("--min-lr %g is larger than --lr %g: the rate decays from --lr down to --min-lr",
            c->optim.min_lr, c->optim.lr);
    if (c->dry_run || refused_any("dry-run"))
        return;
    if (!c->train_iters && !c->train_samples && !refused_any("train-iters train-samples"))
        bad("--train-iters is required: say how long to train (or give --train-samples)");
    if (!(c->optim.lr > 0) && !refused_any("lr"))
        bad("--lr is required: give the peak learning rate, e.g. --lr 3e-4");
}

/* --split: one to three non-negative weights separated by ',' or '/'. */
static void check_split(const gl_config *c)
{
    const gl_option *o = gl_opt_lookup(table, "split");
    char buf[sizeof c->data.split];
    memcpy(buf, c->data.split, sizeof buf);
    int n = 0;
    double sum = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",/", &save); tok;
         tok = strtok_r(NULL, ",/", &save)) {
        while (*tok == ' ')
            tok++;
        double w;
        if (gl_opt_to_double(tok, &w) || w < 0 || ++n > 3) {
            gl_opt_error(o, c->data.split, "is not a split: give up to three weights for "
                         "train,valid,test, e.g. --split 969,30,1");
            return;
        }
        sum += w;
    }
    if (n == 0 || !(sum > 0))
        gl_opt_error(o, c->data.split, "gives no documents to any split: e.g. --split 969,30,1");
}

/* The tokenizer options together.  1 when they are refused (or were
 * refused by the parse): then the tokenizer is unknown, and so may the
 * vocabulary be, for that reason alone. */
static int check_tokenizer(gl_config *c)
{
    if (refused_any("tokenizer-type vocab-file merge-file tokenizer-model vocab-size"))
        return 1;
    const char *type = c->data.tokenizer_type;
    int gpt2 = !strcmp(type, "GPT2BPETokenizer");
    if ((c->data.vocab_file || c->data.merge_file) && !gpt2) {
        bad("--%s is for --tokenizer-type GPT2BPETokenizer: add it, or give a tokenizer.json "
            "with --tokenizer-model", c->data.vocab_file ? "vocab-file" : "merge-file");
        return 1;
    }
    if (gpt2 && !c->data.tokenizer_model) {
        /* Megatron's --vocab-file/--merge-file become the data room's
         * "VOCAB:MERGES" model name. */
        if (!c->data.vocab_file || !c->data.merge_file) {
            bad("--tokenizer-type GPT2BPETokenizer needs --vocab-file vocab.json and "
                "--merge-file merges.txt (or --tokenizer-model DIR holding both)");
            return 1;
        }
        size_t n = strlen(c->data.vocab_file) + strlen(c->data.merge_file) + 2;
        c->data.tokenizer_model = gl_malloc(n);
        snprintf(c->data.tokenizer_model, n, "%s:%s", c->data.vocab_file, c->data.merge_file);
    }
    if (!strcmp(type, "HuggingFaceTokenizer") && !c->data.tokenizer_model) {
        bad("--tokenizer-type HuggingFaceTokenizer needs --tokenizer-model FILE");
        return 1;
    }
    if (c->data.tokenizer_model && !type[0])
        snprintf(c->data.tokenizer_type, sizeof c->data.tokenizer_type, "HuggingFaceTokenizer");
    if (!strcmp(type, "NullTokenizer") && !c->arch.vocab_size) {
        bad("--tokenizer-type NullTokenizer needs --vocab-size N");
        return 1;
    }
    /* As in Megatron, a tokenizer sets the vocabulary (--vocab-size is
     * the NullTokenizer's); the preflight (preflight.h) reads it and
     * holds --vocab-size and the checkpoint to it. */
    int reads_tokenizer = c->data.tokenizer_model && strcmp(c->data.tokenizer_type, "NullTokenizer");
    c->vocab_source = c->ckpt.use_checkpoint_args ? GL_VOCAB_FROM_CHECKPOINT
                      : reads_tokenizer ? GL_VOCAB_FROM_TOKENIZER : GL_VOCAB_FROM_FLAG;
    return 0;
}

static void check_data(gl_config *c)
{
    check_split(c);
    if (c->data.mock_data && c->data.n_data_paths)
        bad("--mock-data and --data-path %s both given: choose one", c->data.data_path[0]);
    if (!c->dry_run && !c->data.mock_data && !c->data.n_data_paths &&
        !refused_any("dry-run mock-data data-path"))
        bad("no training data: give --data-path PREFIX (a Megatron .bin/.idx pair) or "
            "--mock-data");
    /* The vocabulary's size comes from --vocab-size, the preset, the
     * checkpoint or the tokenizer (a --world-size plan reads it too); not
     * from a tokenizer refused above (its line says enough). */
    int tokenizer_bad = check_tokenizer(c);
    if (!c->arch.vocab_size && !c->data.tokenizer_model && !tokenizer_bad &&
        !checkpoint_unread(c) && !refused_any("model vocab-size"))
        bad("the vocabulary size is unknown: give --vocab-size N, or --tokenizer-model FILE");
}

/* The FP8 options that need no world: recipes built here, --bf16, and
 * the bf16 layers within the model. */
static void check_fp8(const gl_config *c)
{
    const gl_fp8_opts *f = &c->fp8;
    if (refused_any("fp8-format fp8-recipe bf16 first-last-layers-bf16 "
                    "num-layers-at-start-in-bf16 num-layers-at-end-in-bf16"))
        return;
    if (c->optim.fp8_param_gather && !c->optim.use_distributed_optimizer)
        bad("--fp8-param-gather needs --use-distributed-optimizer (the weights it gathers "
            "in FP8 are the distributed optimizer's shards): add it, or drop "
            "--fp8-param-gather");
    if (c->optim.fp8_param_gather && f->format == GL_FP8_OFF)
        bad("--fp8-param-gather needs --fp8-format e4m3|hybrid (it gathers the FP8 layers' "
            "weights in FP8): add it, or drop --fp8-param-gather");
    if (f->format == GL_FP8_OFF) {
        if (f->first_last_layers_bf16)
            bad("--first-last-layers-bf16 needs --fp8-format e4m3|hybrid: add it, or drop "
                "--first-last-layers-bf16");
        return;
    }
    if (f->recipe == GL_FP8_MXFP8)
        bad("--fp8-recipe mxfp8 needs Blackwell's block-scaled tensor cores (MXFP8 "
            "scales each block of 32 values in hardware); Hopper has none: use "
            "--fp8-recipe delayed or tensorwise");
    if (!c->bf16)
        bad("--fp8-format %s needs --bf16 (FP8 products take bf16 activations and weights, "
            "as in Megatron): add --bf16", f->format == GL_FP8_FMT_HYBRID ? "hybrid" : "e4m3");
    if (f->first_last_layers_bf16 &&
        f->num_layers_at_start_in_bf16 + f->num_layers_at_end_in_bf16 > c->arch.num_layers)
        bad("--num-layers-at-start-in-bf16 %d plus --num-layers-at-end-in-bf16 %d is more "
            "than the model's %d layers (--num-layers): lower them",
            f->num_layers_at_start_in_bf16, f->num_layers_at_end_in_bf16, c->arch.num_layers);
}

/* Blockwise scaling reduces no amax: a TP rank's tiles must be the tiles
 * of the whole tensor, so that TP = 2 trains what TP = 1 does.  Each
 * rank's pieces of the split tensors (the query, key and value rows of
 * QKV, the gate and up rows, and the row-parallel inputs) must then be
 * whole 128-wide tiles (device/fp8.h: GL_FP8_TILE). */
static void check_fp8_tiles(const gl_config *c)
{
    const gl_arch *a = &c->arch;
    int tp = c->layout.tensor_model_parallel_size, T = GL_FP8_TILE;
    if (c->fp8.recipe != GL_FP8_BLOCKWISE || tp == 1)
        return;
    int D = gl_arch_head_dim(a), groups = gl_arch_groups(a);
    int q = a->num_attention_heads / tp * D, kv = groups / tp * D, f = a->ffn_hidden_size / tp;
    if (q % T || kv % T || f % T)
        bad("--fp8-recipe blockwise with --tensor-model-parallel-size %d: each rank's query "
            "width %d, key/value width %d and FFN width %d must be multiples of %d, so that "
            "its 1x128 tiles and 128x128 blocks are those of the whole tensors (blockwise "
            "scales are not reduced over TP): change the sizes or the TP size, or use "
            "--fp8-recipe tensorwise", tp, q, kv, f, T);
    int etp = c->layout.expert_tensor_parallel_size;
    if (a->num_experts && etp > 1 && gl_arch_moe_ffn(a) / etp % T)
        bad("--fp8-recipe blockwise with --expert-tensor-parallel-size %d: each rank's part "
            "%d of the experts' width (--moe-ffn-hidden-size, else --ffn-hidden-size) must "
            "be a multiple of %d, for the same reason: change the sizes, use "
            "--expert-tensor-parallel-size 1 with expert parallelism, or use --fp8-recipe "
            "tensorwise", etp, gl_arch_moe_ffn(a) / etp, T);
}

/* FP8 products need every size a multiple of 16 (ops.h: gemm_fp8): the
 * tokens of a micro-batch and each TP rank's widths of the four linears. */
static void check_fp8_shapes(const gl_config *c)
{
    const gl_arch *a = &c->arch;
    int tp = c->layout.tensor_model_parallel_size;
    if (c->fp8.format == GL_FP8_OFF)
        return;
    long tokens = (long)c->layout.micro_batch_size * a->seq_length;
    int D = gl_arch_head_dim(a), groups = gl_arch_groups(a);
    if (tokens % 16)
        bad("--fp8-format: --micro-batch-size %d x --seq-length %d = %ld tokens is not a "
            "multiple of 16, which FP8 products need: change either", c->layout.micro_batch_size,
            a->seq_length, tokens);
    if (a->hidden_size % 16)
        bad("--fp8-format: --hidden-size %d is not a multiple of 16, which FP8 products "
            "need", a->hidden_size);
    if (a->ffn_hidden_size / tp % 16)
        bad("--fp8-format: --ffn-hidden-size %d / --tensor-model-parallel-size %d = %d is "
            "not a multiple of 16, which FP8 products need", a->ffn_hidden_size, tp,
            a->ffn_hidden_size / tp);
    if (a->num_experts && gl_arch_moe_ffn(a) / tp % 16)
        bad("--fp8-format: the experts' width %d (--moe-ffn-hidden-size, else "
            "--ffn-hidden-size) / --tensor-model-parallel-size %d = %d is not a multiple of "
            "16, which FP8 products need", gl_arch_moe_ffn(a), tp, gl_arch_moe_ffn(a) / tp);
    if (a->num_attention_heads / tp * D % 16 || groups / tp * D % 16)
        bad("--fp8-format: the attention widths per TP rank (--num-attention-heads %d and "
            "--num-query-groups %d over --tensor-model-parallel-size %d, times the head size "
            "%d) are not multiples of 16, which FP8 products need", a->num_attention_heads,
            groups, tp, D);
    check_fp8_tiles(c);
}

static void check_misc(const gl_config *c)
{
    /* Megatron's GeLU MLP computes the tanh approximation in its fused
     * bias-GeLU (the default) or with --openai-gelu; without either it
     * is torch's exact erf GeLU. */
    if (c->no_bias_gelu_fusion && !c->openai_gelu && !c->arch.swiglu)
        bad("--no-bias-gelu-fusion makes Megatron's GeLU the exact erf form, which gridlm "
            "does not build: drop it (gridlm's GeLU is the tanh approximation of Megatron's "
            "fused bias-GeLU), or add --openai-gelu (the same tanh approximation)");
    int save_refused = refused_any("save");
    if (c->ckpt.async_save && !c->ckpt.save && !save_refused)
        bad("--async-save needs --save DIR: add it, or drop --async-save");
    if (c->faults.exit_signal_handler && !c->ckpt.save && !save_refused)
        bad("--exit-signal-handler needs --save DIR (it saves a checkpoint before "
            "exiting): add --save DIR, or drop --exit-signal-handler");
    if (c->ckpt.save_interval && !c->ckpt.save)
        warn0("--save-interval %ld without --save: no checkpoints will be written",
              c->ckpt.save_interval);
    if (c->ckpt.finetune && !c->ckpt.load)
        warn0("--finetune without --load: there is nothing to fine-tune from");
    if (c->bf16 && c->device == GL_DEVICE_CPU)
        warn0("--bf16 with --device cpu: the CPU back end computes in fp32");
    /* --world-size stands for a launcher in a dry run only. */
    if (c->dry_run_world_size && !c->dry_run && !refused_any("dry-run"))
        bad("--world-size %d needs --dry-run: a run takes its world size from the launcher "
            "(mpiexec -n, srun -n); add --dry-run, or drop --world-size",
            c->dry_run_world_size);
}

const char *gl_config_attention_backend_name(gl_attn_backend b)
{
    for (int i = 0; attn_backends[i]; i++)
        if (attn_backend_values[i] == (int)b)
            return attn_backends[i];
    return "";
}

const char *gl_config_attention_impl(const gl_config *c)
{
    switch (c->attention_backend) {
    case GL_ATTN_BACKEND_FUSED:
        return "cudnn";
    case GL_ATTN_BACKEND_FLASH:
    case GL_ATTN_BACKEND_UNFUSED:
    case GL_ATTN_BACKEND_LOCAL:
        return "native";
    case GL_ATTN_BACKEND_AUTO:
        return "auto";
    default:
        return NULL;
    }
}

/* The attention asked for: --attention-backend's ("cudnn", "native" or
 * "auto"), else a non-empty GRIDLM_ATTENTION's value, else NULL (auto,
 * the default); *by_flag says whether the flag asked. */
static const char *attention_wanted(const gl_config *c, int *by_flag)
{
    const char *impl = gl_config_attention_impl(c), *env = getenv("GRIDLM_ATTENTION");
    *by_flag = impl != NULL;
    return impl ? impl : env && *env ? env : NULL;
}

char *gl_config_attention_describe(const gl_config *c, int on_gpu, char *buf, size_t n)
{
    static const char cudnn[] = "cuDNN's fused flash attention";
    static const char native[] = "gridlm's flash-attention kernels";
    int by_flag;
    const char *wanted = attention_wanted(c, &by_flag);
    char why[96];
    if (by_flag)
        snprintf(why, sizeof why, "--attention-backend %s",
                 gl_config_attention_backend_name(c->attention_backend));
    else if (wanted)
        snprintf(why, sizeof why, "GRIDLM_ATTENTION=%s", wanted);
    else
        snprintf(why, sizeof why, "auto, the default");
    if (!wanted)
        wanted = "auto";
#ifdef GL_HAVE_CUDNN
    const int have_cudnn = 1;
#else
    const int have_cudnn = 0;
#endif

    if (!on_gpu)
        snprintf(buf, n, "the CPU back end's reference attention");
    else if (!strcmp(wanted, "cudnn"))
        snprintf(buf, n, "%s (%s)", cudnn, why);
    else if (!strcmp(wanted, "native"))
        snprintf(buf, n, "%s (%s)", native, why);
    else if (!have_cudnn)
        snprintf(buf, n, "%s (%s; this gridlm was built without cuDNN)", native, why);
    else if (c->arch.attention_dropout > 0)
        snprintf(buf, n, "%s (%s; cuDNN cannot apply gridlm's attention dropout)", native,
                 why);
    else if (c->deterministic_mode)
        snprintf(buf, n, "%s where it builds a plan for the shape, its backward in the "
                 "deterministic form, else %s (%s; --deterministic-mode)", cudnn, native, why);
    else
        snprintf(buf, n, "%s where it builds a plan for the shape, else %s (%s)", cudnn,
                 native, why);
    return buf;
}

/* --attention-backend against the build and against GRIDLM_ATTENTION,
 * which the flag overrides (gridlm-train sets it before the device
 * opens); a disagreement is reported.  cuDNN asked for by name cannot
 * apply attention dropout (it draws its own masks, not gridlm's
 * layout-independent ones): refused; auto falls back to gridlm's kernels
 * for it (dev_cuda.c says so in the log). */
static void check_attention(const gl_config *c)
{
    int by_flag;
    const char *wanted = attention_wanted(c, &by_flag);
    if (wanted && !strcmp(wanted, "cudnn") && c->arch.attention_dropout > 0 &&
        c->device != GL_DEVICE_CPU)
        bad("%s is cuDNN's fused attention, which cannot apply --attention-dropout %g (cuDNN "
            "draws its own masks, not gridlm's layout-independent ones): use "
            "--attention-backend auto or local (gridlm's kernels), or --attention-dropout 0",
            by_flag ? "--attention-backend fused" : "GRIDLM_ATTENTION=cudnn",
            c->arch.attention_dropout);
    if (!by_flag)
        return;
    const char *impl = wanted, *env = getenv("GRIDLM_ATTENTION");
    const char *name = gl_config_attention_backend_name(c->attention_backend);
#if defined(GL_HAVE_CUDA) && !defined(GL_HAVE_CUDNN)
    if (!strcmp(impl, "cudnn") && c->device != GL_DEVICE_CPU)
        bad("--attention-backend %s is cuDNN's fused attention, but this gridlm was built "
            "without cuDNN: reconfigure with --with-cudnn=DIR, or use --attention-backend "
            "local (gridlm's own kernels)", name);
#endif
    if (env && *env && strcmp(env, impl))
        warn0("--attention-backend %s (gridlm's %s attention) overrides GRIDLM_ATTENTION=%s",
              name, impl, env);
}

/* 1 when the NCCL_ALGO list (names separated by commas, after an
 * optional '^') holds the algorithm `name`, in any case, as NCCL reads it. */
static int names_algo(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list + (*list == '^'); *p; p += strcspn(p, ","), p += *p == ',')
        if (!strncasecmp(p, name, n) && (p[n] == ',' || !p[n]))
            return 1;
    return 0;
}

/* --deterministic-mode against NCCL's algorithms.  NVLink SHARP reduces
 * in the switches, in no fixed order, so it has to be left out, as
 * Megatron-LM requires: an NCCL_ALGO that allows it is refused, and an
 * unset one is set by gridlm-train (gl_config_nccl_algo).  Attention
 * needs nothing here: the device runs its deterministic backward
 * (cuda/attn_cudnn.h, gl_cuda_deterministic), cuDNN's included. */
static void check_deterministic(const gl_config *c)
{
    if (!c->deterministic_mode)
        return;
    const char *algo = getenv("NCCL_ALGO");
    if (!algo || !*algo)
        return;
    int excluding = algo[0] == '^';
    int nvls = names_algo(algo, "NVLS"), tree = names_algo(algo, "NVLSTree");
    if (excluding ? !nvls : nvls || tree)
        bad("--deterministic-mode with NCCL_ALGO=%s: NCCL's NVLink SHARP algorithms "
            "(NVLS, NVLSTree) reduce in no fixed order, so the same run would not repeat "
            "its bits; set NCCL_ALGO to Ring or Tree, or to ^NVLS,NVLSTree, or unset it "
            "(gridlm then sets ^NVLS,NVLSTree)", algo);
    else if (excluding && !tree)
        warn0("--deterministic-mode with NCCL_ALGO=%s (as Megatron-LM asks) leaves NVLSTree, "
              "NVLink SHARP within nodes under a tree across them, to NCCL; "
              "NCCL_ALGO=^NVLS,NVLSTree leaves both out", algo);
}

const char *gl_config_nccl_algo(const gl_config *c)
{
    const char *algo = getenv("NCCL_ALGO");
    return c->deterministic_mode && (!algo || !*algo) ? "^NVLS,NVLSTree" : NULL;
}

const char *gl_config_vocab_source_text(const gl_config *c)
{
    switch (c->vocab_source) {
    case GL_VOCAB_FROM_CHECKPOINT:
        return "the checkpoint (--use-checkpoint-args)";
    case GL_VOCAB_FROM_FLAG:
        return "--vocab-size";
    default:
        return "the tokenizer";
    }
}

/* Before MPI, a rank other than 0 that finds a usage error waits a
 * moment before exiting, so that the launcher does not kill rank 0 (for
 * an early non-zero exit) before rank 0 has printed the message. */
static void quiet_exit(int code)
{
    sleep(2);
    exit(code);
}

void gl_config_parse(gl_config *c, int argc, char **argv)
{
    quiet_fds q = quiet_begin();
    int hooked = gl_log_rank() < 0 && launcher_rank() > 0;
    if (hooked)
        gl_log_set_abort(quiet_exit);

    /* Every usage error of the command line, the parser's and the
     * checks', is reported together at the end.  A refused value leaves
     * its field at the default (or the preset's value), and the checks
     * run on what was read.  Checks whose inputs were refused are
     * skipped where the default would draw a confusing second error
     * (refused_any); the rest run: the defaults of the parallel sizes and
     * of the model's options are valid values, so what a check says of
     * them is true of the command line as read, at worst redundant.  Only
     * a checkpoint that --use-checkpoint-args cannot read stops at once
     * (checkpoint_shape). */
    gl_opt_collect_begin();

    /* The model's shape goes first, wherever --model stands, so that
     * explicit options override it: the preset's, or with
     * --use-checkpoint-args the checkpoint's, whose shape the flags must
     * then agree with.  An unknown preset name leaves the shape as it
     * is; the parse reports it, at --model. */
    const char *name = gl_opt_find(argc, argv, "model");
    int from_ckpt = argv_has(argc, argv, "use-checkpoint-args");
    const char *load = gl_opt_find(argc, argv, "load");
    char *ckpt_file = NULL;
    gl_arch there;
    if (from_ckpt && name)
        bad("--model %s and --use-checkpoint-args both give the model's shape: drop --model "
            "(the checkpoint --load names gives it)", name);
    if (from_ckpt && !load)
        bad("--use-checkpoint-args needs --load DIR: the model's shape is read from that "
            "checkpoint");
    if (from_ckpt && load)
        ckpt_file = checkpoint_shape(c, load, &there);
    else if (name && !from_ckpt)
        gl_arch_preset(&c->arch, name);

    gl_opt_parse(table, c, argc, argv);
    c->vocab_size_flag = gl_opt_find(argc, argv, "vocab-size") != NULL;
    if (ckpt_file) {
        check_checkpoint_args(c, &there, ckpt_file);
        free(ckpt_file);
    }

    /* Megatron's default: the experts split over TP as the dense MLP. */
    if (!c->layout.expert_tensor_parallel_size)
        c->layout.expert_tensor_parallel_size = c->layout.tensor_model_parallel_size;
    if (shape_known(c)) {   /* the checks below divide by the shape */
        gl_arch_resolve(&c->arch);
        check_model(c);
        check_layout(c);
        check_recompute(c);
        check_fp8(c);
        check_moe(c);
    }
    check_schedule(c);
    check_data(c);
    check_misc(c);
    check_attention(c);
    check_deterministic(c);
    gl_opt_collect_end();
    if (hooked)
        gl_log_set_abort(NULL);
    quiet_end(q);
}

/* ------------------------------------------------------------------ */
/* Checks that need the world.                                         */

void gl_config_set_vocab_size(gl_config *c, int vocab_size)
{
    gl_arch_set_vocab(&c->arch, vocab_size, c->layout.tensor_model_parallel_size);
}

/* The global batch must split into micro-batches of micro_batch x DP;
 * suggest the nearest global batches that do. */
static void check_batch(gl_config *c)
{
    long step = (long)c->layout.micro_batch_size * c->data_parallel_size;
    if (!c->global_batch_size)
        c->global_batch_size = (int)step;
    if (c->global_batch_size % step) {
        long lo = c->global_batch_size / step * step, hi = lo + step;
        char lower[64] = "";
        if (lo > 0)
            snprintf(lower, sizeof lower, "%ld or ", lo);
        bad("--global-batch-size %d is not divisible by --micro-batch-size %d x data-parallel "
            "size %d = %ld: use %s%ld, or change --micro-batch-size", c->global_batch_size,
            c->layout.micro_batch_size, c->data_parallel_size, step, lower, hi);
    }
    c->num_micro_batches = (int)(c->global_batch_size / step);

    /* The interleaved schedule runs micro-batches in groups of PP, one
     * group per model chunk in turn.  gridlm requires whole groups (as
     * Megatron-LM did before core 0.8), so every chunk sees the same
     * number of micro-batches in the same pattern. */
    int pp = c->layout.pipeline_model_parallel_size;
    if (c->layout.virtual_pipeline_size > 1 && c->num_micro_batches % pp)
        bad("the interleaved schedule (--num-layers-per-virtual-pipeline-stage %d) needs the "
            "micro-batches per iteration (%d = --global-batch-size %d / (%d x DP %d)) to be a "
            "multiple of --pipeline-model-parallel-size %d: use --global-batch-size %ld",
            c->layout.num_layers_per_virtual_pipeline_stage, c->num_micro_batches,
            c->global_batch_size, c->layout.micro_batch_size, c->data_parallel_size, pp,
            (c->num_micro_batches + pp - 1) / pp * pp * step);
}

/* --rampup-batch-size: Megatron's checks of the ramp, then every batch
 * it passes through must split into micro-batches of micro_batch x DP
 * (Megatron checks each when it reaches it; gridlm before the first). */
static void check_rampup(gl_config *c)
{
    long start = c->rampup_batch_size[0], inc = c->rampup_batch_size[1];
    long step = (long)c->layout.micro_batch_size * c->data_parallel_size;
    if (!start)
        return;
    long diff = c->global_batch_size - start;
    if (diff < 0)
        bad("--rampup-batch-size: expected global batch size to be greater than or equal "
            "to start batch size, got %d and %ld", c->global_batch_size, start);
    if (diff % inc)
        bad("--rampup-batch-size: expected global batch size interval (%ld) to be divisible "
            "by global batch size increment (%ld)", diff, inc);
    if (!diff)
        bad("--rampup-batch-size: the start batch %ld is already --global-batch-size: "
            "nothing to ramp, drop --rampup-batch-size", start);
    if (!c->rampup_batch_size[2])      /* Megatron divides by it */
        bad("--rampup-batch-size %ld %ld 0: a ramp over 0 samples; give the samples to "
            "ramp over, or drop --rampup-batch-size", start, inc);
    int pp = c->layout.pipeline_model_parallel_size;
    for (long b = start; b <= c->global_batch_size; b += inc) {
        if (b % step)
            bad("--rampup-batch-size: current global batch size (%ld) is not divisible by "
                "micro-batch-size (%d) times data parallel size (%d): choose START and "
                "INCREMENT multiples of %ld", b, c->layout.micro_batch_size,
                c->data_parallel_size, step);
        if (c->layout.virtual_pipeline_size > 1 && (b / step) % pp)
            bad("--rampup-batch-size: the interleaved schedule needs every batch's "
                "micro-batches to be a multiple of --pipeline-model-parallel-size %d, and "
                "batch %ld has %ld: choose START and INCREMENT multiples of %ld", pp, b,
                b / step, pp * step);
    }
}

int gl_config_global_batch(const gl_config *c, long consumed)
{
    long start = c->rampup_batch_size[0], inc = c->rampup_batch_size[1];
    long samples = c->rampup_batch_size[2];
    if (!start || consumed > samples)
        return c->global_batch_size;
    /* Megatron: samples per increment is a real number, the step count
     * its integer part */
    double per_inc = (double)samples / (double)((c->global_batch_size - start) / inc);
    long steps = (long)((double)consumed / per_inc);
    return (int)(start + steps * inc);
}

/* Iterations from samples (walking the ramp-up as Megatron does: the
 * iterations that start at or before its last sample, then whole global
 * batches; a partial last batch is dropped), and the checks of the
 * learning-rate schedule's lengths, which lr.h counts in samples. */
static void finish_schedule(gl_config *c)
{
    check_rampup(c);
    if (c->train_samples) {
        long iters = 0, consumed = 0;
        if (c->rampup_batch_size[0]) {
            while (consumed <= c->rampup_batch_size[2] && consumed <= c->train_samples) {
                consumed += gl_config_global_batch(c, consumed);
                iters++;
            }
        }
        if (c->train_samples > consumed)
            iters += (c->train_samples - consumed) / c->global_batch_size;
        c->train_iters = iters;
        if (c->train_iters < 1)
            bad("--train-samples %ld is less than one global batch (%d samples): train for "
                "at least %d samples", c->train_samples, c->global_batch_size,
                c->global_batch_size);
    }
    if (!c->optim.lr_decay_iters)
        c->optim.lr_decay_iters = c->train_iters;
    if (c->optim.lr_warmup_fraction > 0)
        c->optim.lr_warmup_iters = (long)(c->optim.lr_warmup_fraction * c->optim.lr_decay_iters);
    if (!c->dry_run && c->optim.lr_warmup_iters > c->optim.lr_decay_iters)
        bad("--lr-warmup-iters %ld is longer than the decay (%ld iterations): shorten the "
            "warm-up or raise --lr-decay-iters", c->optim.lr_warmup_iters, c->optim.lr_decay_iters);
    long decay = c->optim.lr_decay_samples ? c->optim.lr_decay_samples : c->train_samples;
    if (!c->dry_run && c->train_samples && c->optim.lr_warmup_samples >= decay)
        bad("--lr-warmup-samples %ld is not shorter than the decay (%ld samples): shorten the "
            "warm-up or raise --lr-decay-samples", c->optim.lr_warmup_samples, decay);
}

/* The expert grid over the world (grid/grid.h): ETP x EP must divide the
 * ranks of a pipeline stage; its EDP. */
static void finish_expert_grid(gl_config *c)
{
    const gl_layout *l = &c->layout;
    gl_grid_spec s = {
        .world = c->world_size, .tp = l->tensor_model_parallel_size,
        .cp = l->context_parallel_size, .pp = l->pipeline_model_parallel_size,
        .ep = l->expert_model_parallel_size, .etp = l->expert_tensor_parallel_size,
    };
    gl_error err;
    if (gl_grid_init(&s, &err))
        bad("%s", err.text);
    else
        c->expert_data_parallel_size = s.edp;
}

void gl_config_finish(gl_config *c, int world_size, int ranks_per_node)
{
    int tp = c->layout.tensor_model_parallel_size, pp = c->layout.pipeline_model_parallel_size;
    int cp = c->layout.context_parallel_size;
    int model = tp * cp * pp;

    gl_arch_resolve(&c->arch);
    c->world_size = world_size;
    if (world_size % model) {
        int below = world_size / model * model;
        char alt[64] = "";
        if (below > 0)
            snprintf(alt, sizeof alt, "%d or ", below);
        bad("%d rank%s not divisible by TP x CP x PP = %d x %d x %d = %d: launch %s%d "
            "ranks, or change --tensor-model-parallel-size, --context-parallel-size or "
            "--pipeline-model-parallel-size", world_size, world_size == 1 ? " is" : "s are",
            tp, cp, pp, model, alt, below + model);
    }
    c->data_parallel_size = world_size / model;
    if (world_size % model == 0)
        finish_expert_grid(c);
    if (ranks_per_node > 0 && tp > ranks_per_node)
        warn0("--tensor-model-parallel-size %d is larger than the %d ranks of a node: tensor-"
              "parallel traffic will cross the network; keep TP within a node (e.g. TP %d) "
              "and use pipeline parallelism across nodes", tp, ranks_per_node, ranks_per_node);

    if (c->arch.vocab_size > 0)
        gl_config_set_vocab_size(c, c->arch.vocab_size);
    /* Padding to a multiple of divisible_by x TP makes TP divide the
     * padded vocabulary by construction. */

    check_batch(c);
    check_fp8_shapes(c);
    finish_schedule(c);

    /* Said once the plan stands: what check_moe refuses outside a dry run. */
    int ep = c->layout.expert_model_parallel_size, etp = c->layout.expert_tensor_parallel_size;
    int ep_built = ep == 1 || (c->layout.context_parallel_size == 1 &&
                               (tp == 1 || c->moe.token_dispatcher == GL_DISPATCH_ALLTOALL));
    if (c->dry_run && (!ep_built || (etp != tp && !(etp == 1 && ep > 1))))
        warn0("--expert-model-parallel-size %d --expert-tensor-parallel-size %d: planned by "
              "this dry run, but training needs ETP = TP (%d), or 1 with EP > 1, and, with "
              "EP > 1, CP 1 and, with TP > 1, --moe-token-dispatcher-type alltoall", ep, etp,
              tp);
}

/* ------------------------------------------------------------------ */
/* FLOPs (../shared/reference/flops.md).                               */

void gl_config_loader_want(const gl_config *c, gl_loader_want *w)
{
    long dp = c->data_parallel_size > 0 ? c->data_parallel_size : 1;
    long gbs = c->global_batch_size > 0 ? c->global_batch_size
                                        : (long)c->layout.micro_batch_size * dp;
    long train_iters = c->train_iters > 0 ? c->train_iters : (gbs ? c->train_samples / gbs : 0);
    w->seq_length = c->arch.seq_length;
    w->vocab_size = c->arch.vocab_size;
    w->seed = (uint64_t)c->seed;
    w->train_samples = c->train_samples > 0 ? c->train_samples : c->train_iters * gbs;
    /* Megatron evaluates every eval_interval iterations and once at the
     * end, eval_iters global batches each time. */
    w->valid_samples = (c->eval_iters > 0 && c->eval_interval > 0)
                           ? (train_iters / c->eval_interval + 1) * c->eval_iters * gbs : 0;
}

double gl_config_flops_per_token(const gl_config *c)
{
    return gl_arch_flops_per_token(&c->arch, c->layout.tensor_model_parallel_size);
}

void gl_config_free(gl_config *c)
{
    for (int i = 0; i < c->data.n_data_paths; i++)
        free(c->data.data_path[i]);
    c->data.n_data_paths = 0;
    free(c->data.data_cache_path);
    free(c->data.tokenizer_model);
    free(c->ckpt.save);
    free(c->ckpt.load);
    free(c->log.log_json);
    free(c->data.vocab_file);
    free(c->data.merge_file);
    c->data.data_cache_path = c->data.tokenizer_model = c->ckpt.save = c->ckpt.load = c->log.log_json = NULL;
    c->data.vocab_file = c->data.merge_file = NULL;
    free(c->log.tensorboard_dir);
    c->log.tensorboard_dir = NULL;
}
