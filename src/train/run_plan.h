/*
 * run_plan.h: a run's plan as key=value lines, for scripts.
 *
 * gridlm-train --dry-run --world-size N prints it, in one process and
 * without a launcher: the model as gl_arch_resolve() completes it, the
 * layout gl_config_finish() derives for N ranks, and the counts the
 * program itself uses -- FLOPs per token (the model, one layer and the LM
 * head: arch/arch.h) and parameters (the model's, and those one rank of
 * each pipeline stage holds, from the parameter plan training builds:
 * model/model.h).  benchmarks/project.sh reads it, so that its projection
 * takes the model from the program rather than from copies of it.
 *
 * One "key=value" a line; a key is [a-z0-9_]+ and its value runs to the
 * end of the line.  Switches are 1 or 0; numbers are exact (FLOPs and
 * parameters are whole numbers, written in full).  The keys:
 *
 *   world_size                  N
 *   model, num_layers, ...      every field of gl_arch under its config
 *                               key (gl_arch_print_keys), sizes resolved
 *   model_flags                 the gridlm-train flags that give the same
 *                               model (gl_arch_to_flags)
 *   tensor_model_parallel_size, context_parallel_size,
 *   pipeline_model_parallel_size, virtual_pipeline_size,
 *   data_parallel_size, sequence_parallel (as the run applies it),
 *   micro_batch_size, global_batch_size, num_micro_batches
 *   use_distributed_optimizer   as asked
 *   distributed_optimizer       as it runs (gl_optim_is_distributed)
 *   overlap_grad_reduce, overlap_param_gather, bf16   as asked
 *   vocab_source                tokenizer, vocab-size or checkpoint: where
 *                               vocab_size came from (preflight.h)
 *   attention_backend           --attention-backend as given (empty: not)
 *   attention                   what GRIDLM_ATTENTION will be on a CUDA
 *                               device: cudnn, native or auto (run_config.h:
 *                               gl_config_attention_impl)
 *   flops_per_token             gl_arch_flops_per_token
 *   layer_flops_per_token       gl_arch_layer_flops
 *   head_flops_per_token        gl_arch_head_flops
 *   num_params                  gl_arch_num_params
 *   expert_model_parallel_size, expert_tensor_parallel_size,
 *   expert_data_parallel_size   the expert grid (grid/grid.h)
 *   experts_per_rank            experts of each MoE layer a rank holds,
 *                               num_experts / EP (0: a dense model)
 *   expert_placement            "ep:[first,end)" for each EP index, the
 *                               experts its ranks hold, separated by
 *                               spaces (empty for a dense model)
 *   stage_rank_params           the parameters one rank of each pipeline
 *                               stage holds, first stage first, separated
 *                               by spaces (TP ranks hold equal shares; of
 *                               the experts, only its own: E/EP experts,
 *                               each's FFN split over ETP)
 *   max_rank_params             the largest of them
 *   stage_rank_expert_params    the part of stage_rank_params in experts
 *   stage_rank_state_bytes      the bytes of one rank's weights (bf16,
 *                               fp32 with --device cpu), fp32 gradients
 *                               and optimizer state (fp32 master weights
 *                               and moments, sharded over DP x CP, and
 *                               the experts' over EDP, with the
 *                               distributed optimizer), for each stage:
 *                               gl_run_plan_state_bytes
 *   max_rank_state_bytes        the largest of them
 */
#ifndef GL_TRAIN_RUN_PLAN_H
#define GL_TRAIN_RUN_PLAN_H

#include <stdio.h>

#include "train/run_config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Print the plan of c, finished (gl_config_finish), to out. */
void gl_run_plan_print(const gl_config *c, FILE *out);

/* The parameters one rank of pipeline stage pp_rank holds, from the
 * parameter plan training builds (TP rank 0; every TP rank holds as
 * many), tied copies included, alignment padding not: experts, its share
 * of the stacked experts (its num_experts / EP experts of each MoE layer,
 * each's FFN width split over ETP), and dense, everything else (the
 * routers and the shared experts among them). */
typedef struct {
    long dense, experts;
} gl_rank_params;
gl_rank_params gl_run_plan_rank_params(const gl_config *c, int pp_rank);

/* The bytes of p's weights (act_bytes each: 2 for bf16, 4 for fp32),
 * fp32 gradients and AdamW state as the optimizer allocates them: fp32
 * moments and master weights (none apart from fp32 weights with the
 * plain optimizer), over the rank's shard with the distributed optimizer
 * (DP x CP ranks share the dense parameters, EDP the experts), plus the
 * fp32 gradient shard without --overlap-grad-reduce.  Activations,
 * scratch buffers and workspaces not counted. */
double gl_run_plan_state_bytes(const gl_config *c, gl_rank_params p, int act_bytes);

#ifdef __cplusplus
}
#endif
#endif
