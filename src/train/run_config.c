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
 * gl_config_parse(), before MPI starts, so a typo costs no allocation.
 * Checks that need the world size run in gl_config_finish().  Each one
 * stops the program with one line, exit code 2, that names the flags, the
 * values and a way out.  Every rank runs the same checks on the same
 * input, so every rank stops; only rank 0 prints.
 */
#include <config.h>
#include "train/run_config.h"
#include "base/log.h"
#include "base/options.h"

#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* A usage error found by a check.  Rank 0 prints it and stops the job;
 * once MPI is up, the other ranks give rank 0 time to do so (its abort
 * ends them) and stop silently themselves if it somehow does not. */
GL_NORETURN GL_PRINTF(1, 2) static void bad(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (launcher_rank() > 0) {
        quiet_begin();
        if (gl_log_rank() > 0)
            sleep(10);
    }
    gl_die_code(2, "%s", msg);
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
/* Presets.                                                            */

static const char *const preset_names = gl_arch_preset_names;

/* ------------------------------------------------------------------ */
/* Handlers for options that are more than a value.                    */

static int opt_model(void *target, const gl_option *o, const char *value, char **more, int nmore)
{
    /* The preset itself was applied before parsing began (see
     * gl_config_parse); here the name is only checked. */
    gl_arch probe;
    if (gl_arch_preset(&probe, value) != 0)
        gl_opt_die(o, value, "is not a known model: use %s, or give the shape with "
                   "--num-layers, --hidden-size, ...", preset_names);
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

    for (int i = 0; i < c->data.n_data_paths; i++)
        free(c->data.data_path[i]);
    c->data.n_data_paths = 0;

    double w;
    int weighted = count > 1 && !gl_opt_to_double(item[0], &w);
    int paths = weighted ? count / 2 : count;
    if (weighted && count % 2)
        gl_opt_die(o, item[count - 1], "has no dataset after it: weighted blends are "
                   "--data-path W1 PREFIX1 W2 PREFIX2 ...");
    if (paths > GL_MAX_DATA_PATHS)
        gl_opt_die(o, item[0], "... names %d datasets: at most %d can be blended", paths,
                   GL_MAX_DATA_PATHS);
    double sum = 0;
    for (int k = 0; k < paths; k++) {
        const char *path = weighted ? item[2 * k + 1] : item[k];
        double weight = 0;
        if (weighted) {
            if (gl_opt_to_double(item[2 * k], &weight) || weight < 0)
                gl_opt_die(o, item[2 * k], "is not a weight: weighted blends are "
                           "--data-path W1 PREFIX1 W2 PREFIX2 ... with each W >= 0");
            double dummy;
            if (!gl_opt_to_double(path, &dummy))
                gl_opt_die(o, path, "is a number where a dataset prefix was expected: "
                           "weighted blends are --data-path W1 PREFIX1 W2 PREFIX2 ...");
        }
        c->data.data_path[k] = gl_strdup(path);
        c->data.data_weight[k] = weight;
        sum += weight;
    }
    c->data.n_data_paths = paths;
    c->data.data_weights_given = weighted;
    if (weighted && !(sum > 0))
        gl_opt_die(o, item[0], "...: the weights sum to 0: give at least one positive weight");
    for (int k = 0; weighted && k < paths; k++)
        c->data.data_weight[k] /= sum;
    if (paths == 1)
        c->data.data_weight[0] = 1.0;
    free(item);
    return n;
}

/* --help prints the option table, so it is defined after it. */
static int opt_help(void *target, const gl_option *o, const char *value, char **more,
                    int nmore);

static int opt_version(void *target, const gl_option *o, const char *value, char **more,
                       int nmore)
{
    printf("%s (gridlm) %s\n", gl_log_program(), PACKAGE_VERSION);
    fflush(stdout);
    exit(0);
}

/* Megatron options whose effect gridlm cannot give: refused, with why. */
static int opt_refuse(void *target, const gl_option *o, const char *value, char **more,
                      int nmore)
{
    gl_opt_die(o, value, "is not supported");
}

/* --wandb-*: gridlm does not talk to Weights & Biases.  An empty value
 * is Megatron's "no wandb" and is accepted; any other is refused with
 * the way to get the same charts. */
static int opt_wandb(void *target, const gl_option *o, const char *value, char **more,
                     int nmore)
{
    if (value && *value)
        gl_opt_die(o, value, "is not supported: gridlm does not talk to Weights & Biases; "
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
#define G_DATA "Data"
#define G_CKPT "Checkpoints"
#define G_LOG "Logging"
#define G_TB "TensorBoard"
#define G_FAULT "Faults"
#define G_PROG "Program"
#define G_COMPAT "Accepted for Megatron-LM scripts (gridlm always does this)"

static const char *const lr_styles[] = {"constant", "linear", "cosine", NULL};
static const int lr_style_values[] = {GL_LR_CONSTANT, GL_LR_LINEAR, GL_LR_COSINE};
static const char *const recompute_names[] = {"selective", "full", NULL};
static const int recompute_values[] = {GL_RECOMPUTE_SELECTIVE, GL_RECOMPUTE_FULL};
static const char *const recompute_methods[] = {"uniform", "block", NULL};
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
#define REFUSE(nm, mv, hnt) \
    {.name = nm, .kind = GL_OPT_CALL, .offset = GL_OPT_NOWHERE, .metavar = mv, .fn = opt_refuse, .hint = hnt}

#define POS GL_OPT_POSITIVE
#define NONNEG GL_OPT_NONNEG
#define UNIT (GL_OPT_MIN | GL_OPT_MAX) /* with .min = 0, .max = 1 */

static const gl_option table[] = {
    /* --- model --- */
    {.name = "model", .kind = GL_OPT_CALL, .offset = GL_OPT_NOWHERE, .metavar = "NAME",
     .group = G_MODEL, .fn = opt_model,
     .help = "preset shape: llama3-8b, llama3-70b, llama3.2-1b or tiny (applied first)"},
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
     .group = G_MODEL, .fn = opt_disable_bias_linear, .help = "no biases on the linear layers"},
    FLAG("add-qkv-bias", arch.add_qkv_bias, G_MODEL, "biases on Q, K and V only (Qwen2)"),
    DBL("attention-dropout", arch.attention_dropout, G_MODEL, UNIT,
        "dropout on the attention probabilities (on CUDA it runs gridlm's attention "
        "kernels, not cuDNN's)", .min = 0, .max = 1),
    DBL("hidden-dropout", arch.hidden_dropout, G_MODEL, UNIT,
        "dropout on the embedding, attention and MLP outputs", .min = 0, .max = 1),
    DBL("init-method-std", arch.init_method_std, G_MODEL, POS,
        "standard deviation of the initial weights"),

    /* --- parallelism --- */
    INT("tensor-model-parallel-size", layout.tensor_model_parallel_size, G_PAR, POS,
        "TP: ranks that split each layer's matrices"),
    INT("pipeline-model-parallel-size", layout.pipeline_model_parallel_size, G_PAR, POS,
        "PP: ranks that split the layers into stages"),
    INT("context-parallel-size", layout.context_parallel_size, G_PAR, POS,
        "CP: ranks that split each sequence"),
    INT("expert-model-parallel-size", layout.expert_model_parallel_size, G_PAR, POS,
        "EP: for mixture-of-experts models; must be 1"),
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
           "constant, linear or cosine"),

    /* --- precision, device, memory --- */
    CHOICE("device", device, "DEV", G_PREC, devices, device_values,
           "cpu (fp32 reference), cuda, or auto (cuda when a GPU is visible)"),
    FLAG("bf16", bf16, G_PREC, "bf16 weights and activations, fp32 master weights"),
    CHOICE("fp8-format", fp8.format, "FMT", G_PREC, fp8_formats, fp8_format_values,
           "FP8 products in the decoder layers' linears (needs --bf16): e4m3 everywhere, or "
           "hybrid (E4M3 activations and weights, E5M2 gradients); MFU stays against the "
           "bf16 dense peak", .defstr = "off"),
    CHOICE("fp8-recipe", fp8.recipe, "RECIPE", G_PREC, fp8_recipes, fp8_recipe_values,
           "FP8 scaling: delayed (amax history) or tensorwise (each tensor's own amax); "
           "blockwise and mxfp8 are refused"),
    INT("fp8-margin", fp8.margin, G_PREC, NONNEG,
        "delayed: scale = FP8 max / amax / 2^margin"),
    INT("fp8-amax-history-len", fp8.amax_history_len, G_PREC, POS,
        "delayed: steps of amax history"),
    CHOICE("fp8-amax-compute-algo", fp8.amax_compute_algo, "ALGO", G_PREC, fp8_algos,
           fp8_algo_values, "delayed: max of the history, or most_recent"),
    FLAG("first-last-layers-bf16", fp8.first_last_layers_bf16, G_PREC,
         "with FP8, keep the first and last decoder layers in bf16"),
    INT("num-layers-at-start-in-bf16", fp8.num_layers_at_start_in_bf16, G_PREC, NONNEG,
        "with --first-last-layers-bf16: layers at the start kept in bf16"),
    INT("num-layers-at-end-in-bf16", fp8.num_layers_at_end_in_bf16, G_PREC, NONNEG,
        "with --first-last-layers-bf16: layers at the end kept in bf16"),
    CHOICE("recompute-granularity", layout.recompute_granularity, "KIND", G_PREC, recompute_names,
           recompute_values,
           "recompute in the backward: selective (norm and SwiGLU outputs) or full (layers)",
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
    FLAG("no-save-optim", ckpt.no_save_optim, G_CKPT, "leave the optimizer state out of checkpoints"),
    FLAG("no-load-optim", ckpt.no_load_optim, G_CKPT, "do not load the optimizer state"),
    FLAG("no-load-rng", ckpt.no_load_rng, G_CKPT, "do not load the random state"),
    FLAG("finetune", ckpt.finetune, G_CKPT, "load weights only; start at iteration 0"),
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
     .fn = opt_help, .help = "print this help and exit"},
    {.name = "version", .kind = GL_OPT_CALL, .offset = GL_OPT_NOWHERE, .group = G_PROG,
     .fn = opt_version, .help = "print the version and exit"},

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

    /* --- Megatron options gridlm refuses, with the reason --- */
    REFUSE("fp16", NULL, "gridlm trains in bf16 (--bf16) or fp32; fp16 loss scaling is not "
           "implemented"),
    REFUSE("num-experts", "N", "gridlm's Llama models are dense; mixture-of-experts layers are "
           "not implemented"),
    {.name = NULL},
};

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
           "A --model preset sets the model's shape and the Llama form first; explicit\n"
           "options override it.\n",
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

    c->layout.tensor_model_parallel_size = 1;
    c->layout.pipeline_model_parallel_size = 1;
    c->layout.context_parallel_size = 1;
    c->layout.expert_model_parallel_size = 1;

    c->layout.micro_batch_size = 1;
    c->seed = 1234;

    snprintf(c->optim.optimizer, sizeof c->optim.optimizer, "adam");
    c->optim.lr_decay_style = GL_LR_LINEAR;
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
 * flags and lists the sizes that would work. */
static void must_divide(const char *pflag, const char *pname, int p, const char *nflag, long n)
{
    char list[256];
    if (n % p)
        bad("--%s %d does not divide %s %ld: choose a %s size that divides %ld (%s)", pflag, p,
            nflag, n, pname, n, divisors(n, 64, list, sizeof list));
}

static void check_required(const gl_config *c)
{
    static const struct { const char *flag; size_t off; } req[] = {
        {"num-layers", OFF(arch.num_layers)},
        {"hidden-size", OFF(arch.hidden_size)},
        {"num-attention-heads", OFF(arch.num_attention_heads)},
        {"seq-length", OFF(arch.seq_length)},
    };
    for (size_t i = 0; i < sizeof req / sizeof req[0]; i++)
        if (*(const int *)((const char *)c + req[i].off) <= 0)
            bad("--%s is required: give it, or choose a model with --model (%s)", req[i].flag,
                preset_names);
}

/* What the model does not build yet, refused by name rather than trained
 * as something else. */
static void check_model_form(const gl_config *c)
{
    const gl_arch *a = &c->arch;
    if (a->rotary_percent != 1 && a->position_embedding_type == GL_POS_ROPE)
        bad("--rotary-percent %g is not built: RoPE rotates every channel of a head; pass "
            "--rotary-percent 1", a->rotary_percent);
    if (a->attention_dropout >= 1)
        bad("--attention-dropout %g must be below 1 (it would drop every probability)",
            a->attention_dropout);
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

static void check_layout(gl_config *c)
{
    int tp = c->layout.tensor_model_parallel_size, pp = c->layout.pipeline_model_parallel_size;
    int cp = c->layout.context_parallel_size;
    if (c->layout.expert_model_parallel_size != 1)
        bad("--expert-model-parallel-size %d needs a mixture-of-experts model: gridlm's Llama "
            "models are dense, use --expert-model-parallel-size 1",
            c->layout.expert_model_parallel_size);
    must_divide("tensor-model-parallel-size", "TP", tp, "--num-attention-heads",
                c->arch.num_attention_heads);
    must_divide("tensor-model-parallel-size", "TP", tp, "--num-query-groups",
                c->arch.num_query_groups);
    must_divide("tensor-model-parallel-size", "TP", tp, "--ffn-hidden-size", c->arch.ffn_hidden_size);
    must_divide("pipeline-model-parallel-size", "PP", pp, "--num-layers", c->arch.num_layers);

    /* Interleaving: each pipeline rank holds V = (layers / PP) / n chunks
     * of n layers.  As in Megatron, it needs a pipeline (PP > 1). */
    int n = c->layout.num_layers_per_virtual_pipeline_stage;
    if (n) {
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
    int full = c->layout.recompute_granularity == GL_RECOMPUTE_FULL;
    int per_stage = c->arch.num_layers / c->layout.pipeline_model_parallel_size;
    if (full && !c->layout.recompute_method[0])
        bad("--recompute-granularity full needs --recompute-method uniform or block "
            "(and --recompute-num-layers N)");
    if (!full && c->layout.recompute_method[0])
        bad("--recompute-method %s needs --recompute-granularity full: add it, or drop "
            "--recompute-method", c->layout.recompute_method);
    if (!full && c->layout.recompute_num_layers)
        bad("--recompute-num-layers %d needs --recompute-granularity full and "
            "--recompute-method: add them, or drop --recompute-num-layers",
            c->layout.recompute_num_layers);
    if (full && !c->layout.recompute_num_layers)
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
    if (c->optim.min_lr > c->optim.lr && c->optim.lr > 0)
        bad("--min-lr %g is larger than --lr %g: the rate decays from --lr down to --min-lr",
            c->optim.min_lr, c->optim.lr);
    if (c->dry_run)
        return;
    if (!c->train_iters && !c->train_samples)
        bad("--train-iters is required: say how long to train (or give --train-samples)");
    if (!(c->optim.lr > 0))
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
        if (gl_opt_to_double(tok, &w) || w < 0 || ++n > 3)
            gl_opt_die(o, c->data.split, "is not a split: give up to three weights for "
                       "train,valid,test, e.g. --split 969,30,1");
        sum += w;
    }
    if (n == 0 || !(sum > 0))
        gl_opt_die(o, c->data.split, "gives no documents to any split: e.g. --split 969,30,1");
}

static void check_tokenizer(gl_config *c)
{
    const char *type = c->data.tokenizer_type;
    int gpt2 = !strcmp(type, "GPT2BPETokenizer");
    if ((c->data.vocab_file || c->data.merge_file) && !gpt2)
        bad("--%s is for --tokenizer-type GPT2BPETokenizer: add it, or give a tokenizer.json "
            "with --tokenizer-model", c->data.vocab_file ? "vocab-file" : "merge-file");
    if (gpt2 && !c->data.tokenizer_model) {
        /* Megatron's --vocab-file/--merge-file become the data room's
         * "VOCAB:MERGES" model name. */
        if (!c->data.vocab_file || !c->data.merge_file)
            bad("--tokenizer-type GPT2BPETokenizer needs --vocab-file vocab.json and "
                "--merge-file merges.txt (or --tokenizer-model DIR holding both)");
        size_t n = strlen(c->data.vocab_file) + strlen(c->data.merge_file) + 2;
        c->data.tokenizer_model = gl_malloc(n);
        snprintf(c->data.tokenizer_model, n, "%s:%s", c->data.vocab_file, c->data.merge_file);
    }
    if (!strcmp(type, "HuggingFaceTokenizer") && !c->data.tokenizer_model)
        bad("--tokenizer-type HuggingFaceTokenizer needs --tokenizer-model FILE");
    if (c->data.tokenizer_model && !type[0])
        snprintf(c->data.tokenizer_type, sizeof c->data.tokenizer_type, "HuggingFaceTokenizer");
    if (!strcmp(type, "NullTokenizer") && !c->arch.vocab_size)
        bad("--tokenizer-type NullTokenizer needs --vocab-size N");
}

static void check_data(gl_config *c)
{
    check_split(c);
    if (c->data.mock_data && c->data.n_data_paths)
        bad("--mock-data and --data-path %s both given: choose one", c->data.data_path[0]);
    if (!c->dry_run && !c->data.mock_data && !c->data.n_data_paths)
        bad("no training data: give --data-path PREFIX (a Megatron .bin/.idx pair) or "
            "--mock-data");
    check_tokenizer(c);
    if (!c->arch.vocab_size && !c->data.tokenizer_model)
        bad("the vocabulary size is unknown: give --vocab-size N, or --tokenizer-model FILE");
}

/* The FP8 options that need no world: recipes built here, --bf16, and
 * the bf16 layers within the model. */
static void check_fp8(const gl_config *c)
{
    const gl_fp8_opts *f = &c->fp8;
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
    if (f->recipe == GL_FP8_BLOCKWISE)
        bad("--fp8-recipe blockwise (1x128 and 128x128 block scales) is not built in gridlm "
            "yet: use --fp8-recipe delayed or tensorwise");
    if (!c->bf16)
        bad("--fp8-format %s needs --bf16 (FP8 products take bf16 activations and weights, "
            "as in Megatron): add --bf16", f->format == GL_FP8_FMT_HYBRID ? "hybrid" : "e4m3");
    if (f->first_last_layers_bf16 &&
        f->num_layers_at_start_in_bf16 + f->num_layers_at_end_in_bf16 > c->arch.num_layers)
        bad("--num-layers-at-start-in-bf16 %d plus --num-layers-at-end-in-bf16 %d is more "
            "than the model's %d layers (--num-layers): lower them",
            f->num_layers_at_start_in_bf16, f->num_layers_at_end_in_bf16, c->arch.num_layers);
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
    if (a->num_attention_heads / tp * D % 16 || groups / tp * D % 16)
        bad("--fp8-format: the attention widths per TP rank (--num-attention-heads %d and "
            "--num-query-groups %d over --tensor-model-parallel-size %d, times the head size "
            "%d) are not multiples of 16, which FP8 products need", a->num_attention_heads,
            groups, tp, D);
}

static void check_misc(const gl_config *c)
{
    if (c->ckpt.async_save && !c->ckpt.save)
        bad("--async-save needs --save DIR: add it, or drop --async-save");
    if (c->faults.exit_signal_handler && !c->ckpt.save)
        bad("--exit-signal-handler needs --save DIR (it saves a checkpoint before "
            "exiting): add --save DIR, or drop --exit-signal-handler");
    if (c->ckpt.save_interval && !c->ckpt.save)
        warn0("--save-interval %ld without --save: no checkpoints will be written",
              c->ckpt.save_interval);
    if (c->ckpt.finetune && !c->ckpt.load)
        warn0("--finetune without --load: there is nothing to fine-tune from");
    if (c->bf16 && c->device == GL_DEVICE_CPU)
        warn0("--bf16 with --device cpu: the CPU back end computes in fp32");
    /* --world-size stands for a launcher in a dry run only, and the plan
     * it prints counts the vocabulary without reading the tokenizer. */
    if (c->dry_run_world_size && !c->dry_run)
        bad("--world-size %d needs --dry-run: a run takes its world size from the launcher "
            "(mpiexec -n, srun -n); add --dry-run, or drop --world-size",
            c->dry_run_world_size);
    if (c->dry_run_world_size && !c->arch.vocab_size)
        bad("--world-size %d plans without reading the tokenizer, so the vocabulary size is "
            "unknown: give it with --vocab-size N", c->dry_run_world_size);
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

    /* The preset goes first, wherever --model stands, so that explicit
     * options override it. */
    const char *name = gl_opt_find(argc, argv, "model");
    if (name) {
        if (gl_arch_preset(&c->arch, name) != 0)
            opt_model(c, gl_opt_lookup(table, "model"), name, NULL, 0); /* dies */
    }
    gl_opt_parse(table, c, argc, argv);

    check_required(c);
    gl_arch_resolve(&c->arch);
    check_model(c);
    check_layout(c);
    check_recompute(c);
    check_fp8(c);
    check_schedule(c);
    check_data(c);
    check_misc(c);
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

/* Iterations from samples, and the learning-rate schedule's lengths. */
static void finish_schedule(gl_config *c)
{
    if (c->train_samples) {
        c->train_iters = c->train_samples / c->global_batch_size;
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
