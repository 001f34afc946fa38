/*
 * gridlm-train: pre-train a Llama-style model (see gridlm-train(1)).
 *
 * Thin by design: read the command line, start the job, build the
 * process grid's communicators, open the device, and hand everything to
 * the training loop.  Each step lives in its own room of src/.
 */
#include <config.h>
#include "base/log.h"
#include "boot/boot.h"
#include "boot/groups.h"
#include "device/ops.h"
#include "grid/grid.h"
#include "train/preflight.h"
#include "train/run_config.h"
#include "train/run_plan.h"
#include "train/train.h"

#include <stdlib.h>

/* --dry-run: what the run would be on device d, on rank 0. */
static void summary(const gl_config *c, const gl_dev *d)
{
    gl_info0("model: %s%s%d layers, hidden %d, ffn %d, heads %d/%d (head size %d), "
             "vocab %d (padded %d, from %s), seq %d",
             c->arch.model[0] ? c->arch.model : "", c->arch.model[0] ? ": " : "", c->arch.num_layers,
             c->arch.hidden_size, c->arch.ffn_hidden_size, c->arch.num_attention_heads, c->arch.num_query_groups,
             c->arch.kv_channels, c->arch.vocab_size, c->arch.padded_vocab_size,
             gl_config_vocab_source_text(c), c->arch.seq_length);
    gl_info0("layout: world %d = TP %d x CP %d x PP %d x DP %d%s%s", c->world_size,
             c->layout.tensor_model_parallel_size, c->layout.context_parallel_size,
             c->layout.pipeline_model_parallel_size, c->data_parallel_size,
             c->layout.virtual_pipeline_size > 1 ? ", interleaved" : "",
             c->layout.sequence_parallel ? ", sequence parallel" : "");
    int cp = c->layout.context_parallel_size, S = c->arch.seq_length, ch = S / (2 * cp);
    if (cp > 1) {
        gl_info0("context parallelism: CP %d (--cp-comm-type %s), each sequence of %d tokens "
                 "in %d chunks of %d; activations hold %d tokens of each sequence per rank",
                 cp, c->layout.cp_comm_type, S, 2 * cp, ch, S / cp);
        for (int r = 0; r < cp; r++)
            gl_info0("  CP rank %d: positions [%d, %d) and [%d, %d)", r, r * ch, (r + 1) * ch,
                     (2 * cp - 1 - r) * ch, (2 * cp - r) * ch);
    }
    gl_info0("batch: global %d = micro %d x DP %d x %d micro-batches; %.4g GFLOP per token",
             c->global_batch_size, c->layout.micro_batch_size, c->data_parallel_size,
             c->num_micro_batches, gl_config_flops_per_token(c) / 1e9);
    char attn[256];
    gl_info0("attention: %s",
             gl_config_attention_describe(c, d->index >= 0, attn, sizeof attn));
    /* What one rank of each stage holds (run_plan.h): of the experts,
     * only its own. */
    int ep = c->layout.expert_model_parallel_size, E = c->arch.num_experts;
    for (int s = 0; s < c->layout.pipeline_model_parallel_size; s++) {
        gl_rank_params p = gl_run_plan_rank_params(c, s);
        char experts[128] = "";
        if (E > 0)
            snprintf(experts, sizeof experts, ", %ld of them in its %d of %d experts of each "
                     "MoE layer", p.experts, E / ep, E);
        gl_info0("memory per rank of stage %d: %.3f GiB of weights, gradients and optimizer "
                 "state (%ld parameters%s; activations not counted)", s,
                 gl_run_plan_state_bytes(c, p, (int)d->act_bytes) / 1073741824.0,
                 p.dense + p.experts, experts);
    }
}

int main(int argc, char **argv)
{
    gl_config c;
    gl_boot b;

    gl_log_set_program(argv[0]);

    /* Before MPI: --help, --version and typos need no launcher, and every
     * rank reaches the same verdict on its own. */
    gl_config_defaults(&c);
    gl_config_parse(&c, argc, argv);

    /* --dry-run --world-size N: this one process stands for N ranks and
     * prints the plan; no launcher, no device, no communicators. */
    if (c.dry_run_world_size) {
        gl_train_preflight(&c, MPI_COMM_NULL);
        gl_config_finish(&c, c.dry_run_world_size, 0);
        gl_run_plan_print(&c, stdout);
        gl_config_free(&c);
        return 0;
    }

    gl_boot_init(&argc, &argv, &b);
    /* The files the run names, before anything is built (a dry run too). */
    gl_train_preflight(&c, MPI_COMM_WORLD);
    if (c.device != GL_DEVICE_CPU) /* --device cpu runs anywhere, GPUs or not */
        gl_boot_pick_gpu(&b);
    gl_config_finish(&c, b.size, b.local_size);
    /* --attention-backend speaks for GRIDLM_ATTENTION, which the CUDA
     * device reads when it opens (cuda/attn_cudnn.h). */
    if (gl_config_attention_impl(&c))
        setenv("GRIDLM_ATTENTION", gl_config_attention_impl(&c), 1);
    /* --deterministic-mode speaks for GRIDLM_DETERMINISTIC, which the
     * CUDA device reads too, and keeps NCCL off NVLink SHARP. */
    if (c.deterministic_mode)
        setenv("GRIDLM_DETERMINISTIC", "1", 1);
    if (gl_config_nccl_algo(&c))
        setenv("NCCL_ALGO", gl_config_nccl_algo(&c), 1);

    gl_grid_spec spec = {
        .world = b.size,
        .tp = c.layout.tensor_model_parallel_size,
        .cp = c.layout.context_parallel_size,
        .ep = c.layout.expert_model_parallel_size,
        .etp = c.layout.expert_tensor_parallel_size,
        .dp = c.data_parallel_size,
        .pp = c.layout.pipeline_model_parallel_size,
        .ranks_per_node = b.local_size,
    };
    gl_dev *d = gl_boot_open_device(&b, c.device);
    gl_groups *g = gl_groups_create(&b, &spec, d->comm);
    gl_groups_health_check(g, d);

    int status = 0;
    if (c.dry_run) {
        summary(&c, d);
        gl_dry_run_report(&b, g, c.arch.num_experts, stdout);
    } else {
        status = gl_train_run(&c, &b, g, d);
    }

    gl_groups_free(g);
    gl_dev_close(d);
    gl_config_free(&c);
    gl_boot_finalize(&b);
    return status;
}
