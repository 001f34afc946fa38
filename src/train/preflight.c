/*
 * preflight.c: the checks a run makes before it builds anything
 * (preflight.h).
 */
#include <config.h>

#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "base/log.h"
#include "data/indexed.h"
#include "data/tokenizer.h"
#include "train/checkpoint.h"
#include "train/preflight.h"

/* Each --data-path prefix opens as the loader will open it. */
static void check_data_files(const gl_config *c)
{
    for (int i = 0; i < c->data.n_data_paths; i++) {
        gl_error err;
        gl_idx *x = gl_idx_open(c->data.data_path[i], &err);
        if (!x)
            gl_die_code(2, "--data-path %s: %s: give the prefix of a .bin/.idx pair "
                        "(gridlm-prep or Megatron's preprocess_data.py writes them)",
                        c->data.data_path[i], err.text);
        gl_idx_close(x);
    }
}

/* The tokenizer the run reads, or NULL (--mock-data with --vocab-size,
 * the NullTokenizer).  Dies (exit 2) when it does not load. */
static gl_tokenizer *open_tokenizer(const gl_config *c)
{
    const gl_data_opts *o = &c->data;
    if (!o->tokenizer_model || !*o->tokenizer_model ||
        !strcmp(o->tokenizer_type, "NullTokenizer"))
        return NULL;
    return gl_tokenizer_open(o->tokenizer_type, o->tokenizer_model);
}

/* The vocabulary size, from the tokenizer (size V > 0) as in Megatron;
 * see preflight.h. */
static void settle_vocab(gl_config *c, long V)
{
    int *vocab = &c->arch.vocab_size;
    const char *tok = c->data.tokenizer_model;
    if (!V)
        return;
    if (c->vocab_source == GL_VOCAB_FROM_CHECKPOINT) {
        if (V > *vocab)
            gl_die_code(2, "--tokenizer-model %s has %ld entries, more than the %d of the "
                        "checkpoint's vocabulary (--use-checkpoint-args): give the tokenizer "
                        "the checkpoint was trained with", tok, V, *vocab);
        return;
    }
    /* A --model preset's vocabulary gives way to the tokenizer's; an
     * explicit --vocab-size must agree with it. */
    if (c->vocab_size_flag && *vocab != V)
        gl_die_code(2, "--vocab-size %d disagrees with the tokenizer (--tokenizer-model %s: %ld "
                    "entries): drop --vocab-size, the tokenizer sets the vocabulary as in "
                    "Megatron (--vocab-size is for --tokenizer-type NullTokenizer), or load a "
                    "checkpoint's larger vocabulary with --use-checkpoint-args",
                    *vocab, tok, V);
    *vocab = (int)V;
}

/* --load: refuse what the load would refuse (Megatron-LM checkpoints,
 * unreadable files, another model, missing optimizer state), without
 * reading the tensors.  Returns the iteration the run starts from. */
static long check_load(const gl_config *c)
{
    gl_train_peek_info k;
    gl_error err;
    if (!c->ckpt.load)
        return 0;
    int rc = gl_train_peek(c->ckpt.load, &k, &err);
    if (rc == GL_CKPT_NONE)
        return 0;                /* the run starts afresh, as Megatron's */
    if (rc != GL_CKPT_OK)
        gl_die_code(2, "--load %s: %s", c->ckpt.load, err.text);
    /* The loader gives the NullTokenizer one more id, its end of document
     * (data/loader.h), and the run's model that vocabulary. */
    gl_config here = *c;
    if (!strcmp(c->data.tokenizer_type, "NullTokenizer"))
        here.arch.vocab_size++;
    gl_train_check_model(&here, k.config, k.file);
    gl_train_check_optim_state(c, k.has_optimizer_state, k.file);
    long start = c->ckpt.finetune ? 0 : k.iteration;
    gl_train_peek_free(&k);
    return start;
}

/* --save under --dry-run: what gl_train_save_prepare and
 * gl_train_save_guard would refuse, with nothing created (the real run
 * makes those checks itself, before its first iteration). */
static void check_save(const gl_config *c, long start)
{
    gl_error e;
    if (!c->ckpt.save || !c->dry_run)
        return;
    if (gl_file_check_creatable(c->ckpt.save, &e) < 0)
        gl_die_code(2, "--save %s: %s: give a directory this job can write", c->ckpt.save,
                    e.text);
    gl_train_check_save_dir(c, start);
}

/* --eod-mask-loss needs the tokenizer's end of document. */
static void check_eod(const gl_config *c, gl_tokenizer *t)
{
    if (t && c->data.eod_mask_loss && gl_tokenizer_eod(t) < 0)
        gl_die_code(2, "--eod-mask-loss: the tokenizer (--tokenizer-model %s) has no "
                    "end-of-document token: drop --eod-mask-loss, or give a tokenizer with "
                    "an eos_token", c->data.tokenizer_model);
}

void gl_train_preflight(gl_config *c, MPI_Comm world)
{
    /* Rank 0 checks and prints; its gl_die_code stops the job (the
     * others wait in the broadcast), so one copy of a refusal is shown. */
    int rank = 0;
    if (world != MPI_COMM_NULL)
        MPI_Comm_rank(world, &rank);
    int vocab = c->arch.vocab_size;
    if (rank == 0) {
        check_data_files(c);
        gl_tokenizer *t = open_tokenizer(c);
        check_eod(c, t);
        settle_vocab(c, t ? gl_tokenizer_vocab_size(t) : 0);
        gl_tokenizer_free(t);
        check_save(c, check_load(c));
        vocab = c->arch.vocab_size;
    }
    if (world != MPI_COMM_NULL)
        MPI_Bcast(&vocab, 1, MPI_INT, 0, world);
    c->arch.vocab_size = vocab;
}
