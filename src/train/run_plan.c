/*
 * run_plan.c: a run's plan as key=value lines (run_plan.h).
 */
#include <config.h>

#include <stdlib.h>

#include "base/log.h"
#include "grid/grid.h"
#include "model/model.h"
#include "train/optim.h"
#include "train/run_plan.h"

/* A stacked experts tensor [E, out, in] (the only 3-D parameters) is
 * counted from its logical shape, whatever share of it the plan gives a
 * rank: E / EP experts, each's FFN width (out or in) over ETP. */
gl_rank_params gl_run_plan_rank_params(const gl_config *c, int pp_rank)
{
    gl_model_plan *p = gl_model_plan_new(&c->arch, &c->layout, 0, pp_rank, 0, c->data_parallel_size);
    long split = (long)c->layout.expert_model_parallel_size *
                 (c->layout.expert_tensor_parallel_size ? c->layout.expert_tensor_parallel_size
                                                        : c->layout.tensor_model_parallel_size);
    gl_rank_params n = {0, 0};
    for (int i = 0; i < p->nparams; i++) {
        const gl_param *q = &p->param[i];
        if (q->ndim == 3)
            n.experts += q->shape[0] * q->shape[1] * q->shape[2] / split;
        else
            n.dense += (long)q->count;
    }
    gl_model_plan_free(p);
    return n;
}

/* The bytes of n parameters whose optimizer state shards over `shard`
 * ranks (see gl_run_plan_state_bytes). */
static double state_bytes(const gl_config *c, long n, int shard, int act_bytes)
{
    int dist = gl_optim_is_distributed(c->optim.use_distributed_optimizer, shard);
    double owned = dist ? (double)n / shard : (double)n;
    double bytes = (double)n * (act_bytes + 4);          /* weights, fp32 gradients */
    bytes += owned * 8;                                  /* the two moments */
    if (dist || act_bytes != 4)
        bytes += owned * 4;                              /* fp32 master weights */
    if (dist && !c->optim.overlap_grad_reduce)
        bytes += owned * 4;                              /* the gradient shard */
    return bytes;
}

double gl_run_plan_state_bytes(const gl_config *c, gl_rank_params p, int act_bytes)
{
    int dp_cp = c->data_parallel_size * c->layout.context_parallel_size;
    int edp = c->expert_data_parallel_size ? c->expert_data_parallel_size : dp_cp;
    return state_bytes(c, p.dense, dp_cp, act_bytes) + state_bytes(c, p.experts, edp, act_bytes);
}

void gl_run_plan_print(const gl_config *c, FILE *out)
{
    const gl_layout *l = &c->layout;
    int tp = l->tensor_model_parallel_size, pp = l->pipeline_model_parallel_size;

    fprintf(out, "world_size=%d\n", c->world_size);
    gl_arch_print_keys(&c->arch, out);
    size_t n = gl_arch_to_flags(&c->arch, NULL, 0) + 1;
    char *flags = gl_malloc(n);
    gl_arch_to_flags(&c->arch, flags, n);
    fprintf(out, "model_flags=%s\n", flags);
    free(flags);

    fprintf(out, "tensor_model_parallel_size=%d\n", tp);
    fprintf(out, "context_parallel_size=%d\n", l->context_parallel_size);
    /* context parallelism: how attention reaches the other chunks, the
     * positions [a, b) each CP rank holds (model.h's layout), and the
     * tokens of a sequence each rank's activations hold */
    int cp = l->context_parallel_size, S = c->arch.seq_length;
    fprintf(out, "cp_comm_type=%s\n", l->cp_comm_type);
    fprintf(out, "cp_sequence_chunks=");
    for (int r = 0; r < cp; r++) {
        int ch = S / (2 * cp);
        if (cp > 1)
            fprintf(out, "%s%d:[%d,%d)+[%d,%d)", r ? " " : "", r, r * ch, (r + 1) * ch,
                    (2 * cp - 1 - r) * ch, (2 * cp - r) * ch);
        else
            fprintf(out, "0:[0,%d)", S);
    }
    fprintf(out, "\nsequence_tokens_per_rank=%d\n", S / (cp > 0 ? cp : 1));
    fprintf(out, "pipeline_model_parallel_size=%d\n", pp);
    fprintf(out, "virtual_pipeline_size=%d\n", l->virtual_pipeline_size);
    fprintf(out, "data_parallel_size=%d\n", c->data_parallel_size);
    fprintf(out, "sequence_parallel=%d\n", l->sequence_parallel);
    fprintf(out, "micro_batch_size=%d\n", l->micro_batch_size);
    fprintf(out, "global_batch_size=%d\n", c->global_batch_size);
    fprintf(out, "num_micro_batches=%d\n", c->num_micro_batches);
    fprintf(out, "use_distributed_optimizer=%d\n", c->optim.use_distributed_optimizer);
    fprintf(out, "distributed_optimizer=%d\n",
            gl_optim_is_distributed(c->optim.use_distributed_optimizer, c->data_parallel_size));
    fprintf(out, "overlap_grad_reduce=%d\n", c->optim.overlap_grad_reduce);
    fprintf(out, "overlap_param_gather=%d\n", c->optim.overlap_param_gather);
    fprintf(out, "bf16=%d\n", c->bf16);
    char fp8[160];
    fprintf(out, "fp8=%s\n", gl_fp8_describe(&c->fp8, fp8, sizeof fp8));
    fprintf(out, "fp8_param_gather=%d\n", c->optim.fp8_param_gather);
    static const char *const vocab_from[] = {"tokenizer", "vocab-size", "checkpoint"};
    fprintf(out, "vocab_source=%s\n", vocab_from[c->vocab_source]);
    const char *impl = gl_config_attention_impl(c), *env = getenv("GRIDLM_ATTENTION");
    fprintf(out, "attention_backend=%s\n", gl_config_attention_backend_name(c->attention_backend));
    fprintf(out, "attention=%s\n", impl ? impl : env && *env ? env : "auto");

    fprintf(out, "flops_per_token=%.0f\n", gl_config_flops_per_token(c));
    fprintf(out, "layer_flops_per_token=%.0f\n", gl_arch_layer_flops(&c->arch));
    fprintf(out, "head_flops_per_token=%.0f\n", gl_arch_head_flops(&c->arch, tp));
    fprintf(out, "num_params=%ld\n", gl_arch_num_params(&c->arch));

    /* The expert grid and where the experts live. */
    int ep = l->expert_model_parallel_size, E = c->arch.num_experts > 0 ? c->arch.num_experts : 0;
    fprintf(out, "expert_model_parallel_size=%d\n", ep);
    fprintf(out, "expert_tensor_parallel_size=%d\n", l->expert_tensor_parallel_size);
    fprintf(out, "expert_data_parallel_size=%d\n", c->expert_data_parallel_size);
    fprintf(out, "experts_per_rank=%d\n", E / ep);
    fprintf(out, "expert_placement=");
    gl_grid_spec grid = {.ep = ep};   /* all gl_grid_experts reads */
    for (int i = 0, first; E && i < ep; i++) {
        int count = gl_grid_experts(&grid, E, i, &first);
        fprintf(out, "%s%d:[%d,%d)", i ? " " : "", i, first, first + count);
    }

    /* What one rank of each stage holds. */
    int ab = c->device == GL_DEVICE_CPU ? 4 : 2;
    long max = 0;
    double max_bytes = 0;
    char *experts = gl_malloc((size_t)pp * 24 + 1), *bytes = gl_malloc((size_t)pp * 24 + 1);
    size_t ne = 0, nb = 0;
    fprintf(out, "\nstage_rank_params=");
    for (int s = 0; s < pp; s++) {
        gl_rank_params p = gl_run_plan_rank_params(c, s);
        double b = gl_run_plan_state_bytes(c, p, ab);
        fprintf(out, "%s%ld", s ? " " : "", p.dense + p.experts);
        ne += (size_t)sprintf(experts + ne, "%s%ld", s ? " " : "", p.experts);
        nb += (size_t)sprintf(bytes + nb, "%s%.0f", s ? " " : "", b);
        if (p.dense + p.experts > max)
            max = p.dense + p.experts;
        if (b > max_bytes)
            max_bytes = b;
    }
    fprintf(out, "\nmax_rank_params=%ld\n", max);
    fprintf(out, "stage_rank_expert_params=%s\n", experts);
    fprintf(out, "stage_rank_state_bytes=%s\n", bytes);
    fprintf(out, "max_rank_state_bytes=%.0f\n", max_bytes);
    free(experts);
    free(bytes);
    fflush(out);
}
