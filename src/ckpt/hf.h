/*
 * hf.h: Hugging Face Llama checkpoints <-> gridlm checkpoints (and
 * Qwen2's, Qwen3's and GPT-2's: arch/hf_config.h names the forms).
 *
 * A Hugging Face LlamaForCausalLM directory holds config.json and the
 * weights in safetensors (model.safetensors, or shards listed by
 * model.safetensors.index.json).  gridlm's parameters are the same
 * logical tensors under other names, stored in a checkpoint as
 * "model/<name>": the one table of both names and the shapes is
 * src/arch/tensors.h, and config.json is read and written by
 * src/arch/hf_config.h.
 *
 * Every matrix is [out, in] in both (PyTorch's Linear layout), and gridlm
 * rotates with the rotate-half convention Hugging Face uses, so q and k
 * need no permutation: the conversion copies values and pads or drops
 * vocabulary rows, nothing else.  Vpad is the vocabulary rounded up to a
 * multiple of --make-vocab-size-divisible-by; the padding rows are zero.
 *
 * The run's configuration travels in the checkpoint's "config" attribute,
 * a JSON object with Megatron's argument names (arch/arch.h's codec).
 * An import also keeps the original config.json text in "hf_config", so
 * that an export gives back the fields gridlm does not use (token ids,
 * ...) unchanged.
 */
#ifndef GL_CKPT_HF_H
#define GL_CKPT_HF_H

#include <stddef.h>

#include "base/error.h"
#include "ckpt/safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

/* HF_DIR (config.json and safetensors) -> a gridlm checkpoint: OUT is a
 * file (OUT.h5) or, when it is a directory, OUT/iter_0000000.h5 with the
 * tracker file.  Vocabulary rows are padded to a multiple of divisible_by.
 * Needs MPI initialised (the file is written through MPI-IO on
 * MPI_COMM_SELF).  Returns 0, or -1 with err filled. */
int gl_hf_import(const char *hf_dir, const char *out, int divisible_by, int quiet,
                 gl_error *err);

/* A gridlm checkpoint (file or directory) -> OUT_DIR with config.json and
 * safetensors in dtype (F32, BF16 or F16), shards of at most max_shard
 * bytes.  Only the model's weights are exported. */
int gl_hf_export(const char *ckpt, const char *out_dir, gl_st_dtype dtype,
                 size_t max_shard, int quiet, gl_error *err);

#ifdef __cplusplus
}
#endif
#endif
