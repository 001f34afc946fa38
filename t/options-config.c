/* t/options-config.c: gridlm-train's configuration (src/train/run_config.c):
 * defaults, presets, --data-path, derived values, the layout checks and
 * the FLOP count of ../shared/reference/flops.md. */
#include <config.h>
#include "base/log.h"
#include "arch/tensors.h"
#include "train/run_config.h"
#include "tap.h"
#include "child.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAXARGS 64

/* Split a command line on spaces into argv (with a program name). */
static int split_args(char *line, char **argv)
{
    int n = 0;
    argv[n++] = (char *)"gridlm-train";
    for (char *save = NULL, *t = strtok_r(line, " ", &save); t && n < MAXARGS - 1;
         t = strtok_r(NULL, " ", &save))
        argv[n++] = t;
    argv[n] = NULL;
    return n;
}

/* Parse a command line in this process (it must be valid). */
static void parse(gl_config *c, const char *cmdline)
{
    static char line[4096];
    char *argv[MAXARGS];
    snprintf(line, sizeof line, "%s", cmdline);
    gl_config_defaults(c);
    gl_config_parse(c, split_args(line, argv), argv);
}

/* What run_child's child parses, and for which world. */
typedef struct {
    const char *cmdline;
    int world, per_node;
} child_args;

static void parse_and_finish(void *arg)
{
    const child_args *a = arg;
    gl_config c;
    parse(&c, a->cmdline);
    if (a->world > 0)
        gl_config_finish(&c, a->world, a->per_node);
}

/* Parse (and, when world > 0, finish) in a child; return its exit status
 * and what it wrote on stderr. */
static int run_child(const char *cmdline, int world, int per_node, char *err, size_t errlen)
{
    child_args a = { cmdline, world, per_node };
    return run_in_child(parse_and_finish, &a, err, errlen);
}

#define BASE "--model tiny --mock-data --train-iters 10 --lr 1e-3 "
/* The Llama form's flags (t/model-flags.sh's), for shapes given by hand. */
#define LLAMA "--swiglu --normalization RMSNorm --position-embedding-type rope " \
              "--disable-bias-linear --attention-dropout 0 --hidden-dropout 0 "

/* The command line stops with exit 2 and one error line containing the
 * needles (NULL-terminated). */
/* The command line is refused (exit 2) with `lines` lines on stderr, each
 * "gridlm-train: error: ...", that contain every needle. */
static void refused_lines(const char *cmdline, int world, int lines, const char *const *needles)
{
    char err[4096];
    int code = run_child(cmdline, world, 8, err, sizeof err);
    int good = code == 2 && strncmp(err, "gridlm-train: error: ", 21) == 0;
    int n = 0;
    for (const char *p = err; *p; p++)
        if (*p == '\n') {
            n++;
            if (p[1] && strncmp(p + 1, "gridlm-train: error: ", 21))
                good = 0;
        }
    good = good && n == lines;
    for (const char *const *nd = needles; *nd; nd++)
        good = good && strstr(err, *nd);
    ok(good, "refused: %s%s%.0d", cmdline, world ? " on world " : "", world);
    if (!good)
        diag("exit %d, stderr: %s", code, err);
}
#define REFUSED(cmd, world, ...) \
    refused_lines(cmd, world, 1, (const char *const[]){__VA_ARGS__, NULL})
/* Several errors: one line each, then their count. */
#define REFUSED_N(cmd, world, lines, ...) \
    refused_lines(cmd, world, lines, (const char *const[]){__VA_ARGS__, NULL})

static void test_defaults(void)
{
    gl_config c;
    gl_config_defaults(&c);
    ok(c.layout.tensor_model_parallel_size == 1 && c.layout.pipeline_model_parallel_size == 1 &&
       c.layout.context_parallel_size == 1 && c.layout.expert_model_parallel_size == 1,
       "parallel sizes default to 1");
    ok(c.seed == 1234 && c.arch.make_vocab_size_divisible_by == 128 && c.layout.micro_batch_size == 1,
       "seed 1234, vocab divisible by 128, micro batch 1");
    ok(c.optim.adam_beta1 == 0.9 && c.optim.adam_beta2 == 0.999 && c.optim.adam_eps == 1e-8 &&
       c.optim.weight_decay == 0.01 && c.optim.clip_grad == 1.0 && c.arch.init_method_std == 0.02,
       "Megatron's optimizer and init defaults");
    ok(c.optim.lr_decay_style == GL_LR_LINEAR && !strcmp(c.optim.optimizer, "adam") &&
       !strcmp(c.data.split, "969,30,1") && c.log.log_interval == 100 && c.eval_interval == 1000 &&
       c.eval_iters == 100 && c.faults.distributed_timeout_minutes == 10,
       "Megatron's schedule, data and logging defaults");
    ok(c.arch.rotary_base == 10000 && c.arch.norm_epsilon == 1e-5 && c.arch.rope_scaling_factor == 8,
       "rotary base 10000, epsilon 1e-5, scaling factor 8");
    ok(c.arch.rope_scaling_low_freq_factor == 1 && c.arch.rope_scaling_high_freq_factor == 4 &&
       c.arch.rope_scaling_original_max_position_embeddings == 8192,
       "Llama 3.1's rope scaling: low 1, high 4, original context 8192");
    ok(c.log.straggler_threshold == 1.2 && c.faults.max_nonfinite_iters == 5 && c.device == GL_DEVICE_AUTO,
       "gridlm's own defaults");
    ok(c.arch.normalization == GL_NORM_LAYERNORM && !c.arch.apply_layernorm_1p &&
       !c.arch.swiglu && c.arch.position_embedding_type == GL_POS_LEARNED_ABSOLUTE &&
       c.arch.add_bias_linear && !c.arch.add_qkv_bias && c.arch.rotary_percent == 1 &&
       c.arch.attention_dropout == 0.1 && c.arch.hidden_dropout == 0.1 &&
       !c.arch.untie_embeddings_and_output_weights,
       "Megatron's GPT: LayerNorm, GeLU, learned positions, linear biases, dropout 0.1, tied");
}

static void test_presets(void)
{
    gl_config c;
    parse(&c, "--model llama3-8b --mock-data --train-iters 1 --lr 1e-4");
    ok(c.arch.num_layers == 32 && c.arch.hidden_size == 4096 && c.arch.ffn_hidden_size == 14336 &&
       c.arch.num_attention_heads == 32 && c.arch.num_query_groups == 8 && c.arch.vocab_size == 128256 &&
       c.arch.seq_length == 8192 && c.arch.rotary_base == 500000 && c.arch.norm_epsilon == 1e-5 &&
       c.arch.untie_embeddings_and_output_weights && !c.arch.use_rope_scaling && c.arch.kv_channels == 128,
       "llama3-8b: 32 x 4096, ffn 14336, 32/8 heads, vocab 128256, base 5e5, untied");
    is_string(c.arch.model, "llama3-8b", "model name recorded");
    gl_config_free(&c);

    parse(&c, "--model llama3-70b --mock-data --train-iters 1 --lr 1e-4");
    ok(c.arch.num_layers == 80 && c.arch.hidden_size == 8192 && c.arch.ffn_hidden_size == 28672 &&
       c.arch.num_attention_heads == 64 && c.arch.num_query_groups == 8,
       "llama3-70b: 80 x 8192, ffn 28672, 64/8 heads");
    gl_config_free(&c);

    parse(&c, "--model llama3.2-1b --mock-data --train-iters 1 --lr 1e-4");
    ok(c.arch.num_layers == 16 && c.arch.hidden_size == 2048 && c.arch.ffn_hidden_size == 8192 &&
       c.arch.num_attention_heads == 32 && c.arch.num_query_groups == 8 &&
       !c.arch.untie_embeddings_and_output_weights && c.arch.use_rope_scaling &&
       c.arch.rope_scaling_factor == 32,
       "llama3.2-1b: 16 x 2048, ffn 8192, 32/8, tied, rope scaling 32");
    gl_config_free(&c);

    parse(&c, "--model qwen2.5-1.5b --mock-data --train-iters 1 --lr 1e-4");
    ok(c.arch.num_layers == 28 && c.arch.hidden_size == 1536 && c.arch.ffn_hidden_size == 8960 &&
       c.arch.num_attention_heads == 12 && c.arch.num_query_groups == 2 &&
       c.arch.vocab_size == 151936 && c.arch.rotary_base == 1e6 && c.arch.norm_epsilon == 1e-6 &&
       !c.arch.untie_embeddings_and_output_weights && gl_arch_is_qwen2(&c.arch),
       "qwen2.5-1.5b: 28 x 1536, ffn 8960, 12/2, vocab 151936, base 1e6, eps 1e-6, tied, QKV bias");
    gl_config_free(&c);

    parse(&c, "--model gpt2 --mock-data --train-iters 1 --lr 1e-4");
    ok(c.arch.num_layers == 12 && c.arch.hidden_size == 768 && c.arch.ffn_hidden_size == 3072 &&
       c.arch.num_attention_heads == 12 && c.arch.num_query_groups == 12 &&
       c.arch.vocab_size == 50257 && c.arch.max_position_embeddings == 1024 &&
       c.arch.seq_length == 1024 && !c.arch.untie_embeddings_and_output_weights &&
       gl_arch_is_gpt2(&c.arch) && c.arch.hidden_dropout == 0,
       "gpt2: 12 x 768, ffn 3072, 12 heads, vocab 50257, 1024 positions, GPT form, tied");
    gl_config_free(&c);

    parse(&c, "--model gpt2-medium --mock-data --train-iters 1 --lr 1e-4");
    ok(c.arch.num_layers == 24 && c.arch.hidden_size == 1024 && c.arch.num_attention_heads == 16 &&
       c.arch.ffn_hidden_size == 4096 && gl_arch_is_gpt2(&c.arch),
       "gpt2-medium: 24 x 1024, 16 heads");
    gl_config_free(&c);

    parse(&c, "--model gpt2-xl --mock-data --train-iters 1 --lr 1e-4");
    ok(c.arch.num_layers == 48 && c.arch.hidden_size == 1600 && c.arch.num_attention_heads == 25 &&
       c.arch.ffn_hidden_size == 6400 && c.arch.kv_channels == 64 && gl_arch_is_gpt2(&c.arch),
       "gpt2-xl: 48 x 1600, 25 heads of 64");
    gl_config_free(&c);

    parse(&c, "--model mixtral-8x7b --mock-data --train-iters 1 --lr 1e-4");
    ok(c.arch.num_layers == 32 && c.arch.hidden_size == 4096 && c.arch.num_query_groups == 8 &&
       c.arch.num_experts == 8 && c.arch.moe_router_topk == 2 &&
       gl_arch_moe_ffn(&c.arch) == 14336 && gl_arch_num_moe_layers(&c.arch) == 32 &&
       c.arch.vocab_size == 32000 && c.arch.rotary_base == 1e6 &&
       gl_arch_is_llama(&c.arch) && !c.arch.moe_router_pre_softmax,
       "mixtral-8x7b: 32 x 4096, 8 experts of 14336, top 2, every layer MoE");
    gl_config_free(&c);

    parse(&c, BASE);
    ok(c.arch.num_layers == 4 && c.arch.hidden_size == 64 && c.arch.num_attention_heads == 8 &&
       c.arch.num_query_groups == 4 && c.arch.ffn_hidden_size == 176 && c.arch.vocab_size == 512 &&
       c.arch.seq_length == 64 && c.arch.kv_channels == 8,
       "tiny: 4 x 64, 8/4 heads, ffn 176, vocab 512, seq 64");
    gl_config_free(&c);

    /* Explicit options win wherever --model stands. */
    parse(&c, "--num-layers 2 --seq-length 32 " BASE "--hidden-size 128");
    ok(c.arch.num_layers == 2 && c.arch.seq_length == 32 && c.arch.hidden_size == 128 &&
       c.arch.num_attention_heads == 8 && c.arch.max_position_embeddings == 64,
       "options before and after --model override the preset");
    gl_config_free(&c);
}

static void test_derived(void)
{
    gl_config c;
    /* Megatron's GPT: an FFN of 4h. */
    parse(&c, "--num-layers 2 --hidden-size 1000 --num-attention-heads 10 --seq-length 16 "
              "--vocab-size 100 --mock-data --train-iters 5 --lr 1e-3 --attention-dropout 0");
    is_int(c.arch.ffn_hidden_size, 4000, "GeLU: ffn default 4h");
    gl_config_free(&c);

    /* Without a preset: Megatron's SwiGLU width 8h/3 rounded down to 64,
     * MHA, head size h / heads, positions = seq. */
    parse(&c, "--num-layers 2 --hidden-size 1000 --num-attention-heads 10 --seq-length 16 "
              "--vocab-size 100 --mock-data --train-iters 5 --lr 1e-3 " LLAMA);
    is_int(c.arch.ffn_hidden_size, 2624, "ffn default int((4h*2/3)/64)*64 for h=1000");
    is_int(c.arch.num_query_groups, 10, "query groups default to the heads");
    is_int(c.arch.kv_channels, 100, "head size default h / heads");
    is_int(c.arch.max_position_embeddings, 16, "max positions default to seq length");
    gl_config_finish(&c, 4, 4);
    is_int(c.arch.padded_vocab_size, 128, "vocab 100 padded to 128");
    is_int(c.data_parallel_size, 4, "DP = world at TP = PP = 1");
    is_int(c.global_batch_size, 4, "global batch defaults to micro batch x DP");
    is_int(c.num_micro_batches, 1, "one micro-batch");
    ok(c.optim.lr_decay_iters == 5 && c.optim.lr_warmup_iters == 0, "decay over the training iterations");
    gl_config_free(&c);

}

static void test_derived_layout(void)
{
    gl_config c;
    parse(&c, BASE "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 "
                   "--num-layers-per-virtual-pipeline-stage 1 --micro-batch-size 2 "
                   "--global-batch-size 32 --vocab-size 1000");
    is_int(c.layout.virtual_pipeline_size, 2, "4 layers / PP 2 / 1 per chunk = 2 chunks");
    gl_config_finish(&c, 8, 4);
    is_int(c.data_parallel_size, 2, "8 ranks / (TP 2 x PP 2) = DP 2");
    is_int(c.num_micro_batches, 8, "32 / (2 x 2) = 8 micro-batches");
    is_int(c.arch.padded_vocab_size, 1024, "vocab 1000 padded to a multiple of 128 x TP 2");
    gl_config_free(&c);

    /* --train-samples becomes iterations; the warm-up fraction applies to
     * the decay. */
    char line[] = BASE "--train-samples 3200 --global-batch-size 32 --lr-warmup-fraction 0.1";
    char *argv[MAXARGS];
    gl_config_defaults(&c);
    /* BASE carries --train-iters; replace it: samples and iters exclude
     * each other. */
    char *p = strstr(line, "--train-iters 10");
    memcpy(p, "                ", 16);
    gl_config_parse(&c, split_args(line, argv), argv);
    gl_config_finish(&c, 4, 4);
    ok(c.train_iters == 100 && c.optim.lr_decay_iters == 100 && c.optim.lr_warmup_iters == 10,
       "3200 samples / batch 32 = 100 iterations, warm-up 10%% = 10 (got %ld, %ld, %ld)",
       c.train_iters, c.optim.lr_decay_iters, c.optim.lr_warmup_iters);
    gl_config_free(&c);
}

static void test_data_path(void)
{
    gl_config c;
    parse(&c, BASE "--tokenizer-type GPT2BPETokenizer --vocab-file v.json --merge-file m.txt");
    is_string(c.data.tokenizer_model, "v.json:m.txt",
              "GPT-2 vocab and merges files become the tokenizer model VOCAB:MERGES");
    gl_config_free(&c);
    parse(&c, BASE "--tokenizer-model /t/tokenizer.json");
    is_string(c.data.tokenizer_type, "HuggingFaceTokenizer",
              "a tokenizer model alone means a Hugging Face tokenizer.json");
    gl_config_free(&c);

    parse(&c, "--model tiny --train-iters 1 --lr 1 --data-path corpus_text_document");
    ok(c.data.n_data_paths == 1 && !strcmp(c.data.data_path[0], "corpus_text_document") &&
       c.data.data_weight[0] == 1.0 && !c.data.data_weights_given, "one prefix, weight 1");
    gl_config_free(&c);

    parse(&c, "--model tiny --data-path 3 A 1 B --train-iters 1 --lr 1");
    ok(c.data.n_data_paths == 2 && !strcmp(c.data.data_path[0], "A") && !strcmp(c.data.data_path[1], "B") &&
       c.data.data_weight[0] == 0.75 && c.data.data_weight[1] == 0.25 && c.data.data_weights_given,
       "weights 3 A 1 B normalised to 0.75 / 0.25, and parsing resumes after the list");
    gl_config_free(&c);

    parse(&c, "--model tiny --train-iters 1 --lr 1 --data-path A B C");
    ok(c.data.n_data_paths == 3 && !c.data.data_weights_given && c.data.data_weight[2] == 0 &&
       !strcmp(c.data.data_path[2], "C"), "unweighted blend: weights left to the dataset sizes");
    gl_config_free(&c);

    parse(&c, "--model tiny --train-iters 1 --lr 1 --data-path=0.5 X 0.5 Y");
    ok(c.data.n_data_paths == 2 && c.data.data_weight[1] == 0.5, "--data-path=W form");
    gl_config_free(&c);
}

/* hand-counted FLOPs per token, term by term (flops.md) */
static double count(double L, double h, double ffn, double heads, double groups, double hd,
                    double s, double V)
{
    double q = heads * hd, kv = groups * hd;
    return 6 * h * 3 * ffn * L + 6 * L * (h * (q + 2 * kv) + q * h) + 6 * h * V + 6 * s * L * q;
}

static void test_flops(void)
{
    gl_config c;
    gl_config_defaults(&c);
    gl_arch_llama(&c.arch);                 /* SwiGLU's three matrices */
    c.arch.num_layers = 16;
    c.arch.hidden_size = 2048;
    c.arch.ffn_hidden_size = 8192;
    c.arch.num_attention_heads = 32;
    c.arch.num_query_groups = 8;
    c.arch.seq_length = 4096;
    c.arch.vocab_size = 128256;
    /* 4,831,838,208 (MLP) + 1,006,632,960 (projections) + 1,576,009,728
     * (LM head) + 805,306,368 (attention) */
    double f = gl_config_flops_per_token(&c);
    is_double(f, 8219787264.0, 0.5, "flops.md example: 16 x 2048, 32/8, s 4096 = 8.22 GFLOP");
    is_int((long long)(f / 1e7 + 0.5), 822, "rounds to 8.22 GFLOP");

    /* tiny: 811,008 + 294,912 + 196,608 + 98,304 */
    gl_config_defaults(&c);
    gl_arch_llama(&c.arch);                 /* SwiGLU's three matrices */
    c.arch.num_layers = 4;
    c.arch.hidden_size = 64;
    c.arch.ffn_hidden_size = 176;
    c.arch.num_attention_heads = 8;
    c.arch.num_query_groups = 4;
    c.arch.seq_length = 64;
    c.arch.vocab_size = 512;
    is_double(gl_config_flops_per_token(&c), 1400832.0, 0, "tiny model: 1,400,832 FLOPs/token");
    /* its terms: a layer, (811,008 + 294,912 + 98,304) / 4, and the head */
    is_double(gl_arch_layer_flops(&c.arch), 301056.0, 0, "tiny model: 301,056 a layer");
    is_double(gl_arch_head_flops(&c.arch, 1), 196608.0, 0, "tiny model: 196,608 the LM head");

    /* MHA with a head size other than h / heads, and an unpadded
     * vocabulary that TP = 4 pads to 128 x 4 = 512. */
    gl_config_defaults(&c);
    gl_arch_llama(&c.arch);                 /* SwiGLU's three matrices */
    c.arch.num_layers = 3;
    c.arch.hidden_size = 96;
    c.arch.ffn_hidden_size = 256;
    c.arch.num_attention_heads = 4;
    c.arch.kv_channels = 32;
    c.arch.seq_length = 10;
    c.arch.vocab_size = 300;
    c.layout.tensor_model_parallel_size = 4;
    is_double(gl_config_flops_per_token(&c), count(3, 96, 256, 4, 4, 32, 10, 512), 0,
              "MHA, head size 32 != h/heads, vocab 300 padded to 512 under TP 4");
    is_double(gl_arch_head_flops(&c.arch, 4), 6.0 * 96 * 512, 0,
              "the LM head over the vocabulary padded for TP 4");
    is_double(gl_arch_layer_flops(&c.arch), count(3, 96, 256, 4, 4, 32, 10, 0) / 3, 0,
              "a layer: the model less the head, over the layers");

    /* After finish, the padded size of the run is used. */
    parse(&c, "--model llama3-8b --mock-data --train-iters 1 --lr 1e-4 "
              "--tensor-model-parallel-size 8 --seq-length 4096");
    gl_config_finish(&c, 8, 8);
    is_int(c.arch.padded_vocab_size, 129024, "128256 padded to 126 x 1024 at TP 8");
    is_double(gl_config_flops_per_token(&c), count(32, 4096, 14336, 32, 8, 128, 4096, 129024),
              0, "llama3-8b at TP 8, seq 4096 (%.4g FLOPs/token)",
              gl_config_flops_per_token(&c));
    gl_config_free(&c);
}

/* The flags that spell out an architecture read back as the same one;
 * its fields as key=value lines. */
static void test_arch_text(void)
{
    gl_config c, d;
    parse(&c, "--model llama3.2-1b --mock-data --train-iters 1 --lr 1 --seq-length 4096 "
              "--norm-epsilon 1e-6 --init-method-std 0.0173 --make-vocab-size-divisible-by 64");
    char flags[2048], cmd[4096];
    size_t n = gl_arch_to_flags(&c.arch, flags, sizeof flags);
    is_int((long long)n, (long long)strlen(flags), "gl_arch_to_flags returns its length");
    const char *shape = "--num-layers 16 --hidden-size 2048 --ffn-hidden-size 8192 ";
    ok(strncmp(flags, shape, strlen(shape)) == 0,
       "the shape first, resolved: %s", flags);
    ok(strstr(flags, "--use-rope-scaling --") && !strstr(flags, "--untie") &&
       !strstr(flags, "--model") && !strstr(flags, "padded"),
       "switches when on only; neither the preset nor the padded vocabulary");
    ok(strstr(flags, "--rotary-base 500000 ") && strstr(flags, "--norm-epsilon 1e-06 ") &&
       strstr(flags, "--init-method-std 0.0173") && strstr(flags, "--seq-length 4096 "),
       "numbers in their fewest digits");
    snprintf(cmd, sizeof cmd, "--mock-data --train-iters 1 --lr 1 %s", flags);
    parse(&d, cmd);
    memset(c.arch.model, 0, sizeof c.arch.model);
    ok(memcmp(&c.arch, &d.arch, sizeof c.arch) == 0, "the flags read back as the same model");
    char small[16];
    is_int((long long)gl_arch_to_flags(&c.arch, small, sizeof small), (long long)n,
           "a short buffer: the whole length returned");
    is_int((long long)strlen(small), (long long)sizeof small - 1, "... the text cut and ended");

    FILE *f = tmpfile();
    char text[4096];
    gl_arch_print_keys(&d.arch, f);
    rewind(f);
    size_t len = fread(text, 1, sizeof text - 1, f);
    text[len] = '\0';
    fclose(f);
    const char *head = "model=\nnum_layers=16\nhidden_size=2048\n";
    ok(strncmp(text, head, strlen(head)) == 0 &&
       strstr(text, "\nuse_rope_scaling=1\n") && strstr(text, "\nrotary_base=500000\n") &&
       strstr(text, "\nnorm_epsilon=1e-06\n") && strstr(text, "\npadded_vocab_size=0\n") &&
       strstr(text, "\nuntie_embeddings_and_output_weights=0\n"),
       "gl_arch_print_keys: every field under its key, switches 1 or 0");
    gl_config_free(&c);
    gl_config_free(&d);
}

/* The model-form fields (issue 16): Megatron's flags set them, the text,
 * JSON and comparison carry them, a checkpoint's config without them is
 * the Llama model it was written as, and the forms the model does not
 * build yet are refused by name. */
static void test_arch_form(void)
{
    gl_config c;
    char flags[2048], diff[1024];

    parse(&c, BASE);
    ok(gl_arch_is_llama(&c.arch) && c.arch.swiglu && c.arch.normalization == GL_NORM_RMSNORM &&
       c.arch.position_embedding_type == GL_POS_ROPE && !c.arch.add_bias_linear &&
       c.arch.hidden_dropout == 0 && c.arch.rotary_percent == 1,
       "the tiny preset is the Llama form");
    gl_config_free(&c);

    /* The GPT form from Megatron's flags. */
    parse(&c, "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 "
              "--vocab-size 512 --mock-data --train-iters 1 --lr 1 --normalization LayerNorm "
              "--apply-layernorm-1p --position-embedding-type learned_absolute "
              "--add-bias-linear --add-qkv-bias --hidden-dropout 0.2 --attention-dropout 0");
    is_int(c.arch.ffn_hidden_size, 256, "a GeLU MLP is 4h wide by default");
    ok(c.arch.normalization == GL_NORM_LAYERNORM && c.arch.apply_layernorm_1p &&
       c.arch.position_embedding_type == GL_POS_LEARNED_ABSOLUTE && c.arch.add_bias_linear &&
       c.arch.add_qkv_bias && c.arch.hidden_dropout == 0.2 && !c.arch.swiglu,
       "Megatron's GPT flags set the model's form");
    ok(!gl_arch_is_llama(&c.arch), "... which is not the Llama form");
    char form[256];
    gl_arch_describe(&c.arch, form, sizeof form);
    ok(strstr(form, "GPT-style") && strstr(form, "LayerNorm 1p") && strstr(form, "GeLU") &&
       strstr(form, "learned absolute positions") && strstr(form, "linear biases") &&
       strstr(form, "hidden dropout 0.2"), "described: %s", form);

    /* Parameters: LayerNorm biases, linear biases, learned positions. */
    long h = 64, f = 256, P = 32, V = 512;
    c.arch.vocab_size = (int)V;
    c.arch.padded_vocab_size = (int)V;
    long layer = 4 * h * h + 2 * f * h + 4 * h + (3 * h + h + f + h);
    is_int(gl_arch_num_params(&c.arch), 2 * layer + V * h + 2 * h + P * h,
           "parameters: two matrices of the MLP, every bias, the positions");
    is_double(gl_arch_layer_flops(&c.arch), 6.0 * (2 * f * h + 4 * h * h) + 6.0 * 32 * h, 0,
              "FLOPs of a GeLU layer: two MLP matrices, as Megatron counts them");

    /* The flags and the JSON read back as the same model. */
    gl_arch_to_flags(&c.arch, flags, sizeof flags);
    ok(strstr(flags, "--normalization LayerNorm ") && strstr(flags, "--apply-layernorm-1p") &&
       !strstr(flags, "--swiglu") && strstr(flags, "--add-bias-linear") &&
       strstr(flags, "--position-embedding-type learned_absolute"), "flags: %s", flags);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "--mock-data --train-iters 1 --lr 1 --attention-dropout 0 %s",
             flags);
    gl_config d;
    parse(&d, cmd);
    d.arch.padded_vocab_size = c.arch.padded_vocab_size;
    memset(c.arch.model, 0, sizeof c.arch.model);
    ok(memcmp(&c.arch, &d.arch, sizeof c.arch) == 0, "the flags read back as the same model");
    gl_config_free(&d);
    c.arch.attention_dropout = 0.1;     /* (as a checkpoint of Megatron's defaults says) */

    json_t *j = json_object();
    gl_arch_to_json(&c.arch, j);
    ok(json_is_string(json_object_get(j, "normalization")) &&
       !strcmp(json_string_value(json_object_get(j, "normalization")), "LayerNorm"),
       "JSON: the normalisation by name");
    gl_arch back;
    gl_arch_defaults(&back);
    gl_error err;
    ok(gl_arch_from_json(&back, j, &err) == 0 && memcmp(&back, &c.arch, sizeof back) == 0,
       "JSON: read back as the same model");
    is_int(gl_arch_diff(&back, &c.arch, diff, sizeof diff), 0, "no difference");

    /* A checkpoint of before: none of the form's keys.  Read over a GPT
     * arch, it is still the Llama model it was written as. */
    const char *const keys[] = {"normalization", "apply_layernorm_1p", "swiglu",
                                "position_embedding_type", "rotary_percent", "add_bias_linear",
                                "add_qkv_bias", "attention_dropout", "hidden_dropout", NULL};
    for (int i = 0; keys[i]; i++)
        json_object_del(j, keys[i]);
    back = c.arch;
    ok(gl_arch_from_json(&back, j, &err) == 0 && gl_arch_is_llama(&back) &&
       back.hidden_dropout == 0 && back.attention_dropout == 0 && back.rotary_percent == 1,
       "a config without the form's keys reads as the Llama form");
    int n = gl_arch_diff(&back, &c.arch, diff, sizeof diff);
    ok(n == 6 && strstr(diff, "--normalization RMSNorm there, LayerNorm here") &&
       strstr(diff, "--swiglu on there, off here") && !strstr(diff, "dropout"),
       "compared with the GPT run: %d differences: %s", n, diff);
    json_object_set_new(j, "normalization", json_string("BatchNorm"));
    ok(gl_arch_from_json(&back, j, &err) == -1 && strstr(err.text, "normalization"),
       "an unknown normalisation is an error: %s", err.text);
    json_decref(j);
    gl_config_free(&c);

    REFUSED(BASE "--rotary-percent 0.5", 0, "--rotary-percent 0.5 is not built");
    REFUSED(BASE "--attention-dropout 1", 0, "--attention-dropout 1 is out of range",
            "[0, 1)");
    REFUSED(BASE "--hidden-dropout 1", 0, "--hidden-dropout 1 is out of range", "[0, 1)");
    REFUSED(BASE "--attention-dropout 0.1 --attention-backend fused --device cuda", 0,
            "--attention-backend fused is cuDNN's fused attention, which cannot apply "
            "--attention-dropout 0.1", "use --attention-backend auto or local");
    REFUSED(BASE "--normalization BatchNorm", 0, "BatchNorm");
    parse(&c, BASE "--position-embedding-type learned_absolute --use-rotary-position-embeddings "
                   "--no-position-embedding --add-bias-linear --disable-bias-linear --swiglu "
                   "--normalization RMSNorm --attention-dropout 0 --hidden-dropout 0");
    ok(gl_arch_is_llama(&c.arch), "the Llama flag set (the last of each wins; "
       "--no-position-embedding leaves RoPE alone) is the Llama form");
    gl_config_free(&c);
}

/* What the run asks of the loader, as Megatron counts it. */
static void test_loader_want(void)
{
    gl_config c;
    gl_loader_want w;
    parse(&c, "--model tiny --mock-data --train-iters 10 --lr 1e-4 --global-batch-size 8 "
              "--micro-batch-size 2 --eval-interval 3 --eval-iters 2 --seed 7");
    gl_config_finish(&c, 2, 2);
    gl_config_loader_want(&c, &w);
    is_int(w.train_samples, 80, "train samples: --train-iters 10 x global batch 8");
    is_int(w.valid_samples, (10 / 3 + 1) * 2 * 8,
           "valid samples: (iters 10 / interval 3 + 1) x eval-iters 2 x global batch 8");
    is_int(w.seq_length, 64, "sequence length of the tiny preset");
    is_int((long)w.seed, 7, "--seed 7");
    gl_config_free(&c);

    parse(&c, "--model tiny --mock-data --train-samples 100 --lr 1e-4 --global-batch-size 8 "
              "--eval-iters 0");
    gl_config_finish(&c, 1, 1);
    gl_config_loader_want(&c, &w);
    is_int(w.train_samples, 100, "--train-samples 100 asks for 100");
    is_int(w.valid_samples, 0, "--eval-iters 0: no validation samples");
    gl_config_free(&c);
}

static void test_refusals(void)
{
    REFUSED(BASE "--use-rope-scaling --rope-scaling-low-freq-factor 4 "
                 "--rope-scaling-high-freq-factor 2", 0,
            "--rope-scaling-high-freq-factor 2 is not larger than --rope-scaling-low-freq-factor 4");
    REFUSED(BASE "--tensor-model-parallel-size 3", 0,
            "--tensor-model-parallel-size 3 does not divide --num-attention-heads 8",
            "choose a TP size that divides 8 (1, 2, 4 or 8)");
    REFUSED(BASE "--tensor-model-parallel-size 8", 0,
            "--tensor-model-parallel-size 8 does not divide --num-query-groups 4", "(1, 2 or 4)");
    REFUSED(BASE "--tensor-model-parallel-size 4 --ffn-hidden-size 170", 0,
            "does not divide --ffn-hidden-size 170", "(1, 2, 5, 10, 17 or 34)");
    REFUSED(BASE "--pipeline-model-parallel-size 3", 0,
            "--pipeline-model-parallel-size 3 does not divide --num-layers 4", "(1, 2 or 4)");
    REFUSED(BASE "--num-query-groups 3", 0, "--num-query-groups 3 does not divide "
            "--num-attention-heads 8", "(1, 2, 4 or 8)");
    REFUSED(BASE "--num-layers-per-virtual-pipeline-stage 1", 0,
            "--num-layers-per-virtual-pipeline-stage 1 needs a pipeline",
            "--pipeline-model-parallel-size 2 or more");
    REFUSED(BASE "--num-layers 12 --pipeline-model-parallel-size 2 "
                 "--num-layers-per-virtual-pipeline-stage 4", 0,
            "--num-layers-per-virtual-pipeline-stage 4 does not divide the 6 layers",
            "one of 1, 2, 3 or 6");
    REFUSED(BASE "--sequence-parallel --tensor-model-parallel-size 4 --seq-length 30", 0,
            "--seq-length 30", "--tensor-model-parallel-size 4", "multiple of 4");
    REFUSED(BASE "--context-parallel-size 3 --seq-length 64", 0,
            "--seq-length 64 is not divisible by 2 x --context-parallel-size = 6");
    REFUSED(BASE "--expert-model-parallel-size 2", 0, "--expert-model-parallel-size 2",
            "dense");
    REFUSED_N(BASE "--overlap-param-gather", 0, 3, "--overlap-param-gather needs "
              "--use-distributed-optimizer", "--overlap-param-gather needs "
              "--overlap-grad-reduce", "2 usage errors above");
    REFUSED(BASE "--recompute-granularity full", 0, "--recompute-granularity full needs "
            "--recompute-method");
    REFUSED(BASE "--recompute-method block", 0, "--recompute-method block needs "
            "--recompute-granularity full");
    REFUSED(BASE "--recompute-granularity full --recompute-method uniform "
                 "--recompute-num-layers 5", 0, "--recompute-num-layers 5", "choose 1 to 4");
    REFUSED(BASE "--min-lr 1e-2", 0, "--min-lr 0.01 is larger than --lr 0.001");
    REFUSED(BASE "--lr-warmup-iters 5 --lr-warmup-fraction 0.1", 0,
            "--lr-warmup-iters 5 and --lr-warmup-fraction 0.1 both given");
    REFUSED(BASE "--train-samples 100", 0, "--train-iters 10 and --train-samples 100");
    REFUSED("--model tiny --mock-data --train-iters 10", 0, "--lr is required");
    REFUSED("--model tiny --mock-data --lr 1", 0, "--train-iters is required");
    REFUSED("--model tiny --lr 1 --train-iters 3", 0, "no training data", "--mock-data");
    REFUSED(BASE "--data-path A", 0, "--mock-data and --data-path A both given");
    REFUSED("--model tiny --lr 1 --train-iters 3 --data-path 0.3 A 0.7", 0,
            "--data-path 0.7 has no dataset after it");
    REFUSED("--model tiny --lr 1 --train-iters 3 --data-path 0 A 0 B", 0, "weights sum to 0");
    REFUSED(BASE "--split 90,a", 0, "--split 90,a is not a split");
    REFUSED_N("--hidden-size 64 --num-attention-heads 8 --seq-length 8 --mock-data", 0, 5,
              "--num-layers is required", "--model", "--train-iters is required",
              "--lr is required", "the vocabulary size is unknown", "4 usage errors above");
    /* Bad values and the checks across options, all in one message;
     * a check whose input was refused is skipped, not echoed. */
    REFUSED_N(BASE "--expert-model-parallel-size 2 --tokenizer-type Llama2Tokenizer "
                   "--hidden-size abc", 0, 4,
              "error: --tokenizer-type Llama2Tokenizer is not supported",
              "error: --hidden-size abc is not an integer",
              "error: --expert-model-parallel-size 2 needs a mixture-of-experts model",
              "error: 3 usage errors above");
    REFUSED(BASE "--recompute-granularity fully --recompute-method uniform", 0,
            "--recompute-granularity fully is not supported: use one of selective or full");
    REFUSED("--num-layers x --hidden-size 64 --num-attention-heads 8 --seq-length 8 "
            "--mock-data --train-iters 1 --lr 1 --vocab-size 64", 0,
            "--num-layers x is not an integer");
    REFUSED("--model tiny --mock-data --train-iters 10 --lr 0", 0,
            "--lr 0 must be a positive number");
    REFUSED(BASE "--fp8-format e5m2 --first-last-layers-bf16", 0, "--fp8-format e5m2");
    REFUSED(BASE "--max-position-embeddings 32", 0, "--max-position-embeddings 32 is smaller "
            "than --seq-length 64");
    REFUSED(BASE "--hidden-size 60", 0, "--hidden-size 60 is not divisible by "
            "--num-attention-heads 8", "--kv-channels");
    REFUSED(BASE "--kv-channels 7", 0, "--kv-channels 7 is odd");
    REFUSED(BASE "--model llama4", 0, "--model llama4 is not a known model",
            "llama3-8b, llama3-70b, llama3.2-1b, qwen2.5-1.5b, qwen3-8b, gpt2, gpt2-medium, gpt2-xl, "
            "mixtral-8x7b, qwen3-30b-a3b or tiny");
    REFUSED(BASE "--fp16", 0, "--fp16 is not supported", "--bf16");
    REFUSED(BASE "--tokenizer-type SentencePieceTokenizer", 0,
            "--tokenizer-type SentencePieceTokenizer is not supported",
            "HuggingFaceTokenizer, GPT2BPETokenizer or NullTokenizer");
    REFUSED(BASE "--tokenizer-type GPT2BPETokenizer --vocab-file v.json", 0,
            "--tokenizer-type GPT2BPETokenizer needs --vocab-file vocab.json and --merge-file");
    REFUSED(BASE "--merge-file m.txt", 0, "--merge-file is for --tokenizer-type "
            "GPT2BPETokenizer");
    REFUSED(BASE "--tokenizer-type HuggingFaceTokenizer", 0,
            "--tokenizer-type HuggingFaceTokenizer needs --tokenizer-model");
    REFUSED(BASE "--async-save", 0, "--async-save needs --save");
    REFUSED(BASE "--adam-beta2 1", 0, "--adam-beta2 1 is out of range", "[0, 1)");
    REFUSED(BASE "--lr-decay-style exponential", 0,
            "use one of constant, linear, cosine or inverse-square-root");
    REFUSED(BASE "--lr-decay-style WSD", 0, "--lr-decay-style WSD is not supported");
    REFUSED(BASE "--device tpu", 0, "--device tpu", "auto, cpu or cuda");

    /* Layout checks that need the world size. */
    REFUSED(BASE "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2", 6,
            "6 ranks are not divisible by TP x CP x PP = 2 x 1 x 2 = 4", "launch 4 or 8 ranks");
    REFUSED(BASE "--micro-batch-size 2 --global-batch-size 10", 4,
            "--global-batch-size 10 is not divisible by --micro-batch-size 2 x data-parallel "
            "size 4 = 8", "use 8 or 16");
    REFUSED(BASE "--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 "
                 "--global-batch-size 3", 2,
            "needs the micro-batches per iteration (3", "multiple of "
            "--pipeline-model-parallel-size 2", "--global-batch-size 4");
    REFUSED(BASE "--train-iters-x", 0, "unknown option --train-iters-x",
            "did you mean --train-iters?");
    REFUSED(BASE "--world-size 4", 0, "--world-size 4 needs --dry-run",
            "add --dry-run, or drop --world-size");
    /* --dry-run --world-size reads the tokenizer for the vocabulary
     * (src/train/preflight.h): t/train-load.t. */
}

static void test_warnings(void)
{
    char err[4096];
    int code = run_child(BASE "--sequence-parallel", 1, 1, err, sizeof err);
    ok(code == 0 && strstr(err, "warning: --sequence-parallel has no effect with "
                                "--tensor-model-parallel-size 1: turned off"),
       "sequence parallelism at TP 1: a warning, not an error");
    gl_config c;
    parse(&c, BASE "--sequence-parallel");
    ok(!c.layout.sequence_parallel, "... and it is turned off");

    code = run_child(BASE "--tensor-model-parallel-size 4", 4, 2, err, sizeof err);
    ok(code == 0 && strstr(err, "warning: --tensor-model-parallel-size 4 is larger than the 2 "
                                "ranks of a node"), "TP across nodes: a warning");

    code = run_child(BASE "--swiglu --normalization RMSNorm --position-embedding-type rope "
                          "--disable-bias-linear --no-masked-softmax-fusion --use-flash-attn "
                          "--attention-softmax-in-fp32 --no-position-embedding "
                          "--use-mcore-models --transformer-impl transformer_engine "
                          "--log-throughput --group-query-attention --attention-dropout 0.0 "
                          "--hidden-dropout 0 --distributed-backend nccl "
                          "--tokenizer-type NullTokenizer",
                     1, 1, err, sizeof err);
    ok(code == 0 && !err[0], "Megatron's fixed Llama choices are accepted silently");
    if (code || err[0])
        diag("exit %d: %s", code, err);
}

/* The start-up summary's attention line (gl_config_attention_describe):
 * what runs on a GPU, and what chose it.  --device cpu in the command
 * lines only keeps a build without cuDNN from refusing fused; on_gpu is
 * the argument. */
static void test_attention_text(void)
{
    char buf[256];
    gl_config c;
    unsetenv("GRIDLM_ATTENTION");
    parse(&c, BASE "--device cpu");
    ok(!strcmp(gl_config_attention_describe(&c, 0, buf, sizeof buf),
               "the CPU back end's reference attention"), "attention on a CPU: %s", buf);
    gl_config_attention_describe(&c, 1, buf, sizeof buf);
#ifdef GL_HAVE_CUDNN
    ok(strstr(buf, "cuDNN's fused flash attention where it builds a plan for the shape, else "
                   "gridlm's flash-attention kernels (auto, the default)") != NULL,
       "auto on a GPU: %s", buf);
#else
    ok(!strcmp(buf, "gridlm's flash-attention kernels (auto, the default; this gridlm was "
                    "built without cuDNN)"), "auto on a GPU, no cuDNN: %s", buf);
#endif
    gl_config_free(&c);
    parse(&c, BASE "--device cpu --attention-backend fused");
    ok(!strcmp(gl_config_attention_describe(&c, 1, buf, sizeof buf),
               "cuDNN's fused flash attention (--attention-backend fused)"),
       "--attention-backend fused: %s", buf);
    gl_config_free(&c);
    parse(&c, BASE "--device cpu --attention-backend local");
    ok(!strcmp(gl_config_attention_describe(&c, 1, buf, sizeof buf),
               "gridlm's flash-attention kernels (--attention-backend local)"),
       "--attention-backend local: %s", buf);
    gl_config_free(&c);
    setenv("GRIDLM_ATTENTION", "native", 1);
    parse(&c, BASE "--device cpu");
    ok(!strcmp(gl_config_attention_describe(&c, 1, buf, sizeof buf),
               "gridlm's flash-attention kernels (GRIDLM_ATTENTION=native)"),
       "GRIDLM_ATTENTION=native: %s", buf);
    gl_config_free(&c);
    unsetenv("GRIDLM_ATTENTION");
    parse(&c, BASE "--device cpu --attention-dropout 0.1");
    gl_config_attention_describe(&c, 1, buf, sizeof buf);
    ok(!strncmp(buf, "gridlm's flash-attention kernels (auto, the default; ", 52),
       "auto with attention dropout: gridlm's kernels: %s", buf);
    gl_config_free(&c);
}

/* Sample-based schedules and the batch-size ramp-up: Megatron's rules on
 * which options go together (arguments.py), and the iterations of a
 * ramp-up worked out by hand. */
#define SBASE "--model tiny --mock-data --lr 1e-3 "
static void test_samples(void)
{
    REFUSED(BASE "--lr-decay-samples 100", 0, "--lr-decay-samples with --train-iters");
    REFUSED(BASE "--lr-warmup-samples 10", 0, "--lr-warmup-samples with --train-iters");
    REFUSED(BASE "--rampup-batch-size 4 4 100 --global-batch-size 8", 0,
            "--rampup-batch-size with --train-iters", "--train-samples");
    REFUSED(SBASE "--train-samples 100 --lr-decay-iters 10", 0,
            "--lr-decay-iters with --train-samples", "--lr-decay-samples");
    REFUSED(SBASE "--train-samples 100 --lr-warmup-iters 10", 0,
            "--lr-warmup-iters with --train-samples");
    REFUSED(SBASE "--train-samples 100 --lr-warmup-samples 10 --lr-warmup-fraction 0.1", 0,
            "--lr-warmup-samples 10 and --lr-warmup-fraction 0.1 both given");
    REFUSED(SBASE "--train-samples 100 --lr-warmup-samples 100", 1,
            "--lr-warmup-samples 100 is not shorter than the decay (100 samples)");
    REFUSED(BASE "--use-checkpoint-opt_param-scheduler --override-opt_param-scheduler", 0,
            "both given");
    REFUSED(BASE "--decoupled-min-lr 1e-5", 0, "--decoupled-min-lr without --decoupled-lr");
    REFUSED(SBASE "--train-samples 100 --rampup-batch-size 4 4", 0,
            "needs three numbers: --rampup-batch-size START INCREMENT SAMPLES");
    REFUSED(SBASE "--train-samples 100 --rampup-batch-size 0 4 10", 0, "0", "positive");
    /* Megatron's calculator's errors */
    REFUSED(SBASE "--train-samples 100 --global-batch-size 8 --rampup-batch-size 16 4 10", 1,
            "expected global batch size to be greater than or equal to start batch size, "
            "got 8 and 16");
    REFUSED(SBASE "--train-samples 100 --global-batch-size 16 --rampup-batch-size 4 5 10", 1,
            "expected global batch size interval (12) to be divisible by global batch size "
            "increment (5)");
    REFUSED(SBASE "--train-samples 100 --global-batch-size 16 --rampup-batch-size 4 4 0", 1,
            "a ramp over 0 samples");
    REFUSED(SBASE "--train-samples 100 --global-batch-size 16 --rampup-batch-size 16 4 10", 1,
            "nothing to ramp");
    REFUSED(SBASE "--train-samples 100 --global-batch-size 16 --rampup-batch-size 4 6 10", 4,
            "current global batch size (10) is not divisible by micro-batch-size (1) times "
            "data parallel size (4)");

    /* global 16 from 4 by 4 over 24 samples: 3 increments, 8 samples each.
     * Batches: consumed 0 -> 4, 4 -> 4 (4/8 = 0 increments), 8 -> 8,
     * 16 -> 12, 28 > 24 -> 16: 4 ramp iterations (28 samples), then
     * (100 - 28) / 16 = 4 whole batches: 8 iterations. */
    gl_config c;
    parse(&c, SBASE "--train-samples 100 --global-batch-size 16 --rampup-batch-size 4 4 24");
    gl_config_finish(&c, 1, 1);
    is_int(c.train_iters, 8, "ramp-up: 4 ramp iterations and 4 of the full batch");
    int want[] = { 4, 4, 8, 12, 16 };
    long at[] = { 0, 4, 8, 16, 28 };
    for (int k = 0; k < 5; k++)
        is_int(gl_config_global_batch(&c, at[k]), want[k], "ramp-up: batch %d after %ld samples",
               want[k], at[k]);
    is_int(gl_config_global_batch(&c, 24), 16, "ramp-up: 24 samples = 3 increments: the full batch");
    is_int(c.num_micro_batches, 16, "buffers for the full batch's 16 micro-batches");
    gl_config_free(&c);

    parse(&c, SBASE "--train-samples 100 --global-batch-size 16");
    gl_config_finish(&c, 1, 1);
    is_int(gl_config_global_batch(&c, 0), 16, "no ramp-up: the global batch");
    is_int(c.train_iters, 6, "no ramp-up: 100 / 16 = 6 iterations");
    gl_config_free(&c);
}

/* Mixture of experts (issue 13): --moe-layer-freq's forms, which layers
 * are MoE layers, the parameter table, the counts on active parameters,
 * the JSON codec and the comparison, and the checks of the flags: what
 * gridlm does not train yet refused by name, the rest accepted. */
#define MOE_OK "--num-experts 4 --moe-router-topk 2 "

/* The command line parses (exit 0, nothing on stderr). */
static void accepted(const char *cmdline)
{
    char err[4096];
    int code = run_child(cmdline, 0, 8, err, sizeof err);
    ok(code == 0 && !err[0], "accepted: %s", cmdline);
    if (code || err[0])
        diag("exit %d, stderr: %s", code, err);
}

static void test_moe(void)
{
    char out[GL_MOE_FREQ_MAX];
    gl_error err;
    static const struct { const char *in; int layers; const char *want; } forms[] = {
        {"1", 4, "1"}, {"2", 0, "2"}, {"[0,1,1,1]", 4, "[0,1,1,1]"},
        {"([0]+[1]*3)", 4, "[0,1,1,1]"}, {"[0]*1+[1]*3", 4, "[0,1,1,1]"},
        {"([1]*2+[0]*1)*2", 6, "[1,1,0,1,1,0]"}, {" [ 1 , 0 ] * 2 ", 4, "[1,0,1,0]"},
    };
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        int rc = gl_moe_layer_freq_parse(forms[i].in, forms[i].layers, out, sizeof out, &err);
        ok(rc == 0 && !strcmp(out, forms[i].want), "--moe-layer-freq '%s' reads as %s",
           forms[i].in, forms[i].want);
        if (rc)
            diag("%s", err.text);
    }
    static const struct { const char *in; const char *why; } bad_forms[] = {
        {"0", "positive integer"}, {"x", "positive integer"}, {"[0,2]", "0 (dense) or 1"},
        {"[0,1", "expected ',' or ']'"}, {"([0]", "')' is missing"}, {"[1]*", "needs a count"},
        {"[1,1,1]", "3 entries for --num-layers 4"}, {"[1]+", "expected '[' or '('"},
    };
    for (size_t i = 0; i < sizeof bad_forms / sizeof bad_forms[0]; i++) {
        int rc = gl_moe_layer_freq_parse(bad_forms[i].in, 4, out, sizeof out, &err);
        ok(rc == -1 && strstr(err.text, bad_forms[i].why) &&
           strstr(err.text, "--moe-layer-freq"), "--moe-layer-freq '%s' refused: %s",
           bad_forms[i].in, rc ? err.text : "(accepted)");
    }

    /* A Mixtral-like model: 4 layers, 8 experts of width 96, top-2, MoE
     * on layers 1..3 (layer 0 dense), a shared expert of width 32. */
    gl_arch a;
    gl_arch_defaults(&a);
    gl_arch_llama(&a);
    a.num_layers = 4;
    a.hidden_size = 64;
    a.ffn_hidden_size = 176;
    a.num_attention_heads = 8;
    a.num_query_groups = 4;
    a.seq_length = 64;
    a.vocab_size = 512;
    a.padded_vocab_size = 512;
    a.untie_embeddings_and_output_weights = 1;
    gl_arch_resolve(&a);
    long dense_params = gl_arch_num_params(&a);
    double dense_flops = gl_arch_flops_per_token(&a, 1);
    ok(!gl_arch_is_moe_layer(&a, 0) && gl_arch_num_moe_layers(&a) == 0,
       "a dense model has no MoE layer");
    is_int(gl_arch_num_active_params(&a), dense_params, "dense: active = all parameters");
    a.num_experts = 8;
    a.moe_ffn_hidden_size = 96;
    a.moe_shared_expert_intermediate_size = 32;
    snprintf(a.moe_layer_freq, sizeof a.moe_layer_freq, "[0,1,1,1]");
    ok(!gl_arch_is_moe_layer(&a, 0) && gl_arch_is_moe_layer(&a, 1) &&
       gl_arch_is_moe_layer(&a, 3) && gl_arch_num_moe_layers(&a) == 3,
       "[0,1,1,1]: layers 1, 2 and 3 are MoE layers");
    long h = 64, F = 96, S = 32, E = 8, f = 176;
    long moe_block = E * h + E * 3 * F * h + 3 * S * h, dense_mlp = 3 * f * h;
    is_int(gl_arch_num_params(&a), dense_params + 3 * (moe_block - dense_mlp),
           "parameters: router, 8 experts and the shared expert in place of the dense MLP");
    is_int(gl_arch_num_active_params(&a),
           dense_params + 3 * (E * h + 2 * 3 * F * h + 3 * S * h - dense_mlp),
           "active parameters: the top-2 experts (Megatron's count)");
    double moe_layer = gl_arch_layer_flops(&a) - 6.0 * h * 3 * f + 6.0 * h * 3 * F * 2 +
                       6.0 * h * 3 * S + 6.0 * h * E;
    is_double(gl_arch_moe_layer_flops(&a), moe_layer, 0,
              "an MoE layer's FLOPs: top-k routed and shared experts, the router "
              "(flops.md's 6 h E)");
    is_double(gl_arch_flops_per_token(&a, 1), dense_flops - 3 * gl_arch_layer_flops(&a) +
              3 * moe_layer, 0, "FLOPs/token: 1 dense and 3 MoE layers");
    snprintf(a.moe_layer_freq, sizeof a.moe_layer_freq, "2");
    ok(gl_arch_is_moe_layer(&a, 0) && !gl_arch_is_moe_layer(&a, 1) &&
       gl_arch_is_moe_layer(&a, 2) && gl_arch_num_moe_layers(&a) == 2,
       "--moe-layer-freq 2: layers 0 and 2 (i %% 2 == 0, as Megatron)");

    /* The parameter table. */
    long shape[GL_TENSOR_MAXDIM];
    char name[128];
    is_int(gl_tensor_shape(GL_T_EXPERT_W_GATE, &a, 512, shape), 3, "experts: stacked, 3-D");
    ok(shape[0] == E && shape[1] == F && shape[2] == h, "experts.w_gate [E, F, h]");
    gl_tensor_shape(GL_T_EXPERT_W_DOWN, &a, 512, shape);
    ok(shape[0] == E && shape[1] == h && shape[2] == F, "experts.w_down [E, h, F]");
    gl_tensor_shape(GL_T_ROUTER, &a, 512, shape);
    ok(shape[0] == E && shape[1] == h && gl_tensor(GL_T_ROUTER)->shard == GL_SHARD_NONE,
       "router [E, h], replicated over TP");
    gl_tensor_shape(GL_T_SHARED_W_DOWN, &a, 512, shape);
    ok(shape[0] == h && shape[1] == S, "shared_experts.w_down [h, S]");
    gl_tensor_name(GL_T_EXPERT_W_UP, 3, 0, name, sizeof name);
    is_string(name, "layers.3.mlp.experts.w_up.weight", "the experts' name");
    ok(gl_tensor_present_at(GL_T_EXPERT_W_UP, &a, 0) &&
       !gl_tensor_present_at(GL_T_EXPERT_W_UP, &a, 1) &&
       !gl_tensor_present_at(GL_T_W_UP, &a, 0) && gl_tensor_present_at(GL_T_W_UP, &a, 1),
       "experts on MoE layers only, the dense MLP on dense layers only");
    ok(!gl_tensor_present(GL_T_EXPERT_BIAS, &a), "no expert bias unless enabled");
    a.moe_router_enable_expert_bias = 1;
    ok(gl_tensor_present_at(GL_T_EXPERT_BIAS, &a, 2) && gl_tensor(GL_T_EXPERT_BIAS)->buffer,
       "the expert bias: present when enabled, a buffer");
    gl_arch dense;
    gl_arch_defaults(&dense);
    ok(!gl_tensor_present(GL_T_ROUTER, &dense) && gl_tensor_present_at(GL_T_W_UP, &dense, 0),
       "a dense model: no MoE tensor");
    ok(!gl_tensor_translate("layers.1.mlp.router.weight", 1, name, sizeof name, NULL, NULL),
       "no Hugging Face name for the stacked MoE tensors yet");

    /* JSON: a dense model's config has no MoE key; an MoE one reads back
     * the same; a config without the keys reads as a dense model. */
    json_t *j = json_object();
    gl_arch_to_json(&dense, j);
    ok(!json_object_get(j, "num_experts") && !json_object_get(j, "moe_router_topk"),
       "a dense model's config JSON has no MoE key");
    gl_arch back = a;
    ok(gl_arch_from_json(&back, j, &err) == 0 && back.num_experts == 0 &&
       back.moe_router_topk == 2 && !strcmp(back.moe_layer_freq, "1") &&
       !back.moe_router_enable_expert_bias, "a config without MoE keys reads as dense");
    json_decref(j);
    j = json_object();
    a.moe_router_score_function = GL_ROUTER_SIGMOID;
    a.moe_router_topk_scaling_factor = 2.5;
    gl_arch_to_json(&a, j);
    gl_arch_defaults(&back);
    ok(gl_arch_from_json(&back, j, &err) == 0 && back.num_experts == 8 &&
       back.moe_ffn_hidden_size == 96 && back.moe_shared_expert_intermediate_size == 32 &&
       !strcmp(back.moe_layer_freq, "2") && back.moe_router_enable_expert_bias &&
       back.moe_router_score_function == GL_ROUTER_SIGMOID &&
       back.moe_router_topk_scaling_factor == 2.5, "an MoE model's config JSON reads back");
    json_decref(j);
    char diff[1024];
    back.moe_router_topk = 4;
    ok(gl_arch_diff(&a, &back, diff, sizeof diff) == 1 &&
       !strcmp(diff, "--moe-router-topk 2 there, 4 here"), "the top-k compared: %s", diff);
    ok(gl_arch_diff(&a, &dense, diff, sizeof diff) >= 1 &&
       strstr(diff, "--num-experts 8 there, 0 here") && !strstr(diff, "topk"),
       "dense against MoE: the experts' count, not their settings: %s", diff);
    back = a;
    snprintf(back.moe_layer_freq, sizeof back.moe_layer_freq, "[1,0,1,0]");
    is_int(gl_arch_diff(&a, &back, diff, sizeof diff), 0,
           "--moe-layer-freq 2 and [1,0,1,0] are the same layers");
    snprintf(back.moe_layer_freq, sizeof back.moe_layer_freq, "[0,1,1,1]");
    ok(gl_arch_diff(&a, &back, diff, sizeof diff) == 1 &&
       !strcmp(diff, "--moe-layer-freq [1,0,1,0] there, [0,1,1,1] here"),
       "other layers: named as lists: %s", diff);
    char form[256];
    gl_arch_describe(&back, form, sizeof form);
    ok(strstr(form, "SwiGLU experts: 8, top-2, on 3 of 4 layers, with a shared expert") != NULL,
       "the summary names the experts: %s", form);
    char flags[4096];
    gl_arch_to_flags(&a, flags, sizeof flags);
    ok(strstr(flags, "--num-experts 8 --moe-ffn-hidden-size 96 --moe-router-topk 2 "
                     "--moe-layer-freq 2 --moe-shared-expert-intermediate-size 32 "
                     "--moe-router-score-function sigmoid --moe-router-topk-scaling-factor 2.5 "
                     "--moe-router-enable-expert-bias") != NULL,
       "the MoE flags spelt out: %s", flags);
    gl_arch_to_flags(&dense, flags, sizeof flags);
    ok(!strstr(flags, "moe") && !strstr(flags, "experts"), "none for a dense model");

    /* The flags: checked; what is not built refused by name. */
    accepted(BASE MOE_OK);
    REFUSED(BASE MOE_OK "--moe-router-enable-expert-bias", 0,
            "--moe-router-enable-expert-bias needs --moe-router-score-function sigmoid");
    accepted(BASE MOE_OK "--moe-router-enable-expert-bias --moe-router-score-function sigmoid "
             "--moe-router-topk-scaling-factor 2.5 --moe-layer-freq ([0]+[1]*3) "
             "--moe-shared-expert-intermediate-size 64 --moe-expert-capacity-factor 1.5 "
             "--moe-token-drop-policy position --moe-pad-expert-input-to-capacity "
             "--moe-router-load-balancing-type seq_aux_loss --moe-aux-loss-coeff 1e-2 "
             "--moe-z-loss-coeff 1e-3 --moe-router-dtype fp32 --moe-grouped-gemm "
             "--moe-permute-fusion --moe-token-dispatcher-type alltoall "
             "--moe-shared-expert-overlap");
    REFUSED_N(BASE "--num-experts 4 --moe-router-topk 6 --moe-layer-freq [0,1]", 0, 3,
              "--moe-router-topk 6 is more than --num-experts 4",
              "--moe-layer-freq [0,1]: the list has 2 entries for --num-layers 4",
              "2 usage errors above");
    REFUSED_N(BASE MOE_OK "--moe-ffn-hidden-size 90 --tensor-model-parallel-size 4 "
              "--moe-pad-expert-input-to-capacity --expert-model-parallel-size 2", 0, 4,
              "--tensor-model-parallel-size 4 must divide the experts' FFN width 90",
              "--moe-pad-expert-input-to-capacity pads to the experts' capacity",
              "the allgather dispatcher is built with TP 1 only",
              "3 usage errors above");
    REFUSED_N("--mock-data --train-iters 1 --lr 1 --num-layers 2 --hidden-size 64 "
              "--num-attention-heads 8 --seq-length 8 --vocab-size 64 " MOE_OK, 0, 3,
              "--num-experts 4: gridlm's experts are SwiGLU MLPs", "add --swiglu",
              "--num-experts 4: gridlm's experts have no biases", "2 usage errors above");
    REFUSED(BASE "--moe-router-topk 4 --moe-aux-loss-coeff 0.01", 0,
            "--moe-router-topk, --moe-aux-loss-coeff set the experts of a dense model",
            "add --num-experts N");
    REFUSED_N(BASE MOE_OK "--moe-router-load-balancing-type sinkhorn "
              "--moe-token-dispatcher-type flex", 0, 3,
              "--moe-router-load-balancing-type sinkhorn is not supported",
              "--moe-token-dispatcher-type flex", "2 usage errors above");
    REFUSED(BASE MOE_OK "--moe-router-num-groups 2", 0,
            "--moe-router-num-groups is not supported: group-limited routing");
    /* --expert-tensor-parallel-size: Megatron's default, TP's (t/train-args.t
     * checks the refusals of the others) */
    accepted(BASE MOE_OK "--tensor-model-parallel-size 2 --expert-tensor-parallel-size 2");
    /* global_aux_loss, with TP, SP, PP and DP (t/train-moe.t trains it) */
    accepted(BASE MOE_OK "--moe-router-load-balancing-type global_aux_loss "
             "--moe-aux-loss-coeff 0.01 --tensor-model-parallel-size 2 --sequence-parallel "
             "--pipeline-model-parallel-size 2");
    /* not built yet: the per-token normalisation of the MoE losses */
    REFUSED(BASE MOE_OK "--calculate-per-token-loss --moe-z-loss-coeff 0.001", 0,
            "--calculate-per-token-loss with --moe-aux-loss-coeff or --moe-z-loss-coeff");
}

/* --deterministic-mode: the NCCL_ALGO it sets, the ones it accepts and
 * refuses (NVLink SHARP, NVLS and NVLSTree, must stay out), cuDNN's
 * attention asked for by name accepted (its backward has a deterministic
 * form), and the attention line. */
static void test_deterministic(void)
{
    gl_config c;
    char buf[256];
    unsetenv("GRIDLM_ATTENTION");
    unsetenv("NCCL_ALGO");
    parse(&c, BASE "--device cpu");
    ok(!c.deterministic_mode && !gl_config_nccl_algo(&c),
       "without --deterministic-mode NCCL_ALGO is left alone");
    gl_config_free(&c);
    parse(&c, BASE "--device cpu --deterministic-mode");
    ok(c.deterministic_mode && gl_config_nccl_algo(&c) &&
       !strcmp(gl_config_nccl_algo(&c), "^NVLS,NVLSTree"),
       "--deterministic-mode with NCCL_ALGO unset sets ^NVLS,NVLSTree");
    gl_config_attention_describe(&c, 1, buf, sizeof buf);
#ifdef GL_HAVE_CUDNN
    ok(strstr(buf, "cuDNN's fused flash attention") &&
       strstr(buf, "deterministic form") &&
       strstr(buf, "--deterministic-mode"), "deterministic attention on a GPU: %s", buf);
#else
    ok(strstr(buf, "gridlm's flash-attention kernels") && !strstr(buf, "cuDNN's"),
       "deterministic attention on a GPU, no cuDNN: %s", buf);
#endif
    gl_config_free(&c);
    accepted(BASE "--deterministic-mode");
    static const char *const good[] = {"Ring", "Tree,Ring", "^nvls,NVLSTree", "^NVLSTree,NVLS"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        setenv("NCCL_ALGO", good[i], 1);
        parse(&c, BASE "--deterministic-mode");
        ok(!gl_config_nccl_algo(&c), "NCCL_ALGO=%s is kept", good[i]);
        gl_config_free(&c);
        accepted(BASE "--deterministic-mode");
    }
    setenv("NCCL_ALGO", "^NVLS", 1);         /* Megatron-LM's own advice */
    char err[4096];
    int code = run_child(BASE "--deterministic-mode", 0, 1, err, sizeof err);
    ok(code == 0 && strstr(err, "warning: --deterministic-mode with NCCL_ALGO=^NVLS") &&
       strstr(err, "leaves NVLSTree"), "NCCL_ALGO=^NVLS is accepted with a warning: %s", err);
    static const char *const bad[] = {"NVLS", "Ring,NVLSTree", "nvls", "^Ring", "^NVLSTree"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        setenv("NCCL_ALGO", bad[i], 1);
        char want[64];
        snprintf(want, sizeof want, "--deterministic-mode with NCCL_ALGO=%s:", bad[i]);
        REFUSED(BASE "--deterministic-mode", 0, want, "set NCCL_ALGO to Ring or Tree");
    }
    setenv("NCCL_ALGO", "NVLS", 1);
    accepted(BASE);
    unsetenv("NCCL_ALGO");
#ifdef GL_HAVE_CUDNN
    /* cuDNN's backward has a deterministic form: asked for by name, taken */
    accepted(BASE "--deterministic-mode --attention-backend fused --device cuda");
    setenv("GRIDLM_ATTENTION", "cudnn", 1);
    accepted(BASE "--deterministic-mode --device cuda");
    unsetenv("GRIDLM_ATTENTION");
#endif
    accepted(BASE "--deterministic-mode --attention-backend local");
}

int main(void)
{
    gl_log_set_program("gridlm-train");
    plan(NO_PLAN);
    test_defaults();
    test_presets();
    test_derived();
    test_derived_layout();
    test_data_path();
    test_flops();
    test_arch_text();
    test_arch_form();
    test_loader_want();
    test_refusals();
    test_moe();
    test_samples();
    test_warnings();
    test_attention_text();
    test_deterministic();
    return done_testing();
}
