/*
 * preflight.h: what a run checks before it builds anything.
 *
 * gl_config_parse() checks the command line and gl_config_finish() the
 * layout; the preflight checks what the files say, so that --dry-run
 * refuses whatever the real run would refuse before its first iteration,
 * and the real run refuses it before the model, the optimizer or the
 * device memory exist:
 *   - each --data-path prefix: its .idx and .bin exist, are readable and
 *     valid (data/indexed.h's checks);
 *   - the tokenizer: it loads, and it sets the vocabulary size, as in
 *     Megatron: --vocab-size given with a tokenizer must equal the
 *     tokenizer's size (it is the NullTokenizer's flag), a --model
 *     preset's vocabulary gives way to the tokenizer's, and under
 *     --use-checkpoint-args the checkpoint's vocabulary must hold every
 *     token id;
 *   - --eod-mask-loss: the tokenizer has an end-of-document token;
 *   - --load: a Megatron-LM checkpoint is refused with the way to convert
 *     it; a gridlm checkpoint must be readable and fit this model, by the
 *     same comparison the load makes (gl_train_check_model), and hold
 *     optimizer state unless --finetune or --no-load-optim;
 *   - --save, in a dry run (the real run checks it itself, creating the
 *     directory): one this process can write or create, without another
 *     run's checkpoints beyond where the run starts; nothing is created.
 * Each refusal is one line naming the flag, the value and the fix, exit
 * code 2.
 */
#ifndef GL_TRAIN_PREFLIGHT_H
#define GL_TRAIN_PREFLIGHT_H

#include <mpi.h>

#include "train/run_config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Run the checks on c, parsed (gl_config_parse) but not yet finished
 * (gl_config_finish).  Collective over world: rank 0 reads the files and
 * refuses (one message for the job), the others learn the vocabulary size
 * from it; MPI_COMM_NULL: this
 * process alone, without MPI (--dry-run --world-size).  Sets
 * c->arch.vocab_size when the tokenizer gives it.  Dies (exit 2) on the
 * first problem. */
void gl_train_preflight(gl_config *c, MPI_Comm world);

#ifdef __cplusplus
}
#endif
#endif
