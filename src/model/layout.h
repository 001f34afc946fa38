/*
 * layout.h: how one model is laid out over devices and run: its parallel
 * sizes, sequence parallelism, the micro-batch, and what is recomputed.
 *
 * Field names are Megatron-LM's argument names.  gl_layout_defaults()
 * fills Megatron's defaults; gridlm-train's options fill the rest and
 * train/ checks every combination against the world (virtual_pipeline_size
 * is derived there).  The model (model.h) is built from a gl_arch and a
 * gl_layout and nothing else; the data-parallel size is an argument of
 * its own, since it does not change what one model replica computes.
 */
#ifndef GL_MODEL_LAYOUT_H
#define GL_MODEL_LAYOUT_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { GL_RECOMPUTE_NONE = 0, GL_RECOMPUTE_SELECTIVE, GL_RECOMPUTE_FULL } gl_recompute;

typedef struct gl_layout {
    int tensor_model_parallel_size;  /* --tensor-model-parallel-size (1) */
    int pipeline_model_parallel_size;/* --pipeline-model-parallel-size (1) */
    int context_parallel_size;       /* --context-parallel-size (1) */
    int expert_model_parallel_size;  /* --expert-model-parallel-size (1) */
    int expert_tensor_parallel_size; /* --expert-tensor-parallel-size (0: TP,
                                      * Megatron's default, which
                                      * gl_config_parse fills in) */
    int num_layers_per_virtual_pipeline_stage; /* 0: no interleaving */
    int virtual_pipeline_size;       /* derived: chunks per pipeline rank (1: none) */
    int sequence_parallel;           /* --sequence-parallel */
    int micro_batch_size;            /* --micro-batch-size (1) */
    gl_recompute recompute_granularity; /* --recompute-granularity */
    char recompute_method[16];       /* --recompute-method uniform|block */
    int recompute_num_layers;        /* --recompute-num-layers */
    char cp_comm_type[16];           /* --cp-comm-type p2p|all_gather (p2p) */
} gl_layout;

/* Megatron's defaults: one of everything, no recomputation. */
static inline void gl_layout_defaults(gl_layout *l)
{
    *l = (gl_layout){
        .tensor_model_parallel_size = 1,
        .pipeline_model_parallel_size = 1,
        .context_parallel_size = 1,
        .expert_model_parallel_size = 1,
        .virtual_pipeline_size = 1,
        .micro_batch_size = 1,
        .cp_comm_type = "p2p",
    };
}

#ifdef __cplusplus
}
#endif
#endif
