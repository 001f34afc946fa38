/*
 * run_plan.c: a run's plan as key=value lines (run_plan.h).
 */
#include <config.h>

#include <stdlib.h>

#include "base/log.h"
#include "model/model.h"
#include "train/optim.h"
#include "train/run_plan.h"

/* The parameters one rank of pipeline stage pp_rank holds: the sum of
 * its pieces in the plan training builds (TP rank 0; every TP rank holds
 * as many), tied copies included, alignment padding not. */
static long rank_params(const gl_config *c, int pp_rank)
{
    gl_model_plan *p = gl_model_plan_new(&c->arch, &c->layout, 0, pp_rank, 0, c->data_parallel_size);
    long n = 0;
    for (int i = 0; i < p->nparams; i++)
        n += (long)p->param[i].count;
    gl_model_plan_free(p);
    return n;
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
    static const char *const vocab_from[] = {"tokenizer", "vocab-size", "checkpoint"};
    fprintf(out, "vocab_source=%s\n", vocab_from[c->vocab_source]);
    const char *impl = gl_config_attention_impl(c), *env = getenv("GRIDLM_ATTENTION");
    fprintf(out, "attention_backend=%s\n", gl_config_attention_backend_name(c->attention_backend));
    fprintf(out, "attention=%s\n", impl ? impl : env && *env ? env : "auto");

    fprintf(out, "flops_per_token=%.0f\n", gl_config_flops_per_token(c));
    fprintf(out, "layer_flops_per_token=%.0f\n", gl_arch_layer_flops(&c->arch));
    fprintf(out, "head_flops_per_token=%.0f\n", gl_arch_head_flops(&c->arch, tp));
    fprintf(out, "num_params=%ld\n", gl_arch_num_params(&c->arch));
    long max = 0;
    fprintf(out, "stage_rank_params=");
    for (int s = 0; s < pp; s++) {
        long p = rank_params(c, s);
        fprintf(out, "%s%ld", s ? " " : "", p);
        if (p > max)
            max = p;
    }
    fprintf(out, "\nmax_rank_params=%ld\n", max);
    fflush(out);
}
