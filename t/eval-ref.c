/*
 * eval-ref: fixtures and the direct computation behind t/eval-loss.t.
 *
 *   eval-ref make PREFIX
 *       writes a Megatron dataset (uint16) of documents with awkward
 *       lengths: empty, 1 token (both skipped), 2 tokens, around the
 *       sequence length (64: 64, 65, 66 tokens), long ones, documents of
 *       several sequences, and 40 ordinary ones; tokens in [0, 512).
 *
 *   eval-ref loss [--load CKPT] GRIDLM-FLAGS...
 *       prints "LOSS TOKENS DOCUMENTS": the mean next-token loss over the
 *       documents of --data-path, each document its own sequence of at
 *       most --seq-length + 1 tokens, computed by t/model-ref.h's double-
 *       precision forward one document at a time, for the model of --seed
 *       (or the weights of CKPT, read on one process).
 */
#include <config.h>

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/rng.h"
#include "ckpt/ckpt.h"
#include "data/indexed.h"
#include "device/ops.h"
#include "model-ref.h"
#include "model/model.h"
#include "train/checkpoint.h"
#include "train/run_config.h"

static void make(const char *prefix)
{
    static const int lens[] = { 0, 1, 2, 3, 64, 65, 66, 130, 1, 7, 200 };
    gl_idx_writer *w = gl_idx_writer_open(prefix, GL_IDX_UINT16);
    int32_t tok[512];
    uint64_t key = gl_rng_key("eval-ref"), ctr = 0;
    int nl = (int)(sizeof lens / sizeof lens[0]);
    for (int d = 0; d < nl + 40; d++) {
        int n = d < nl ? lens[d] : 5 + (d * 37) % 90;
        for (int i = 0; i < n; i++)
            tok[i] = (int32_t)(gl_rng_u64(9, key, ctr++) % 512);
        gl_idx_writer_add_document(w, tok, n);
    }
    /* documents of several sequences: 30 + 50 (crosses 65), 1 + 1 (2
     * tokens in all), 0 + 0 + 1 (skipped) */
    static const int parts[][3] = { { 30, 50, -1 }, { 1, 1, -1 }, { 0, 0, 1 } };
    for (int d = 0; d < 3; d++) {
        for (int p = 0; p < 3 && parts[d][p] >= 0; p++) {
            for (int i = 0; i < parts[d][p]; i++)
                tok[i] = (int32_t)(gl_rng_u64(9, key, ctr++) % 512);
            gl_idx_writer_add_sequence(w, tok, parts[d][p]);
        }
        gl_idx_writer_end_document(w);
    }
    gl_idx_writer_finish(w);
}

static int loss(int argc, char **argv)
{
    gl_config c;
    gl_config_defaults(&c);
    gl_config_parse(&c, argc, argv);
    c.layout.tensor_model_parallel_size = c.layout.pipeline_model_parallel_size = 1;
    c.layout.num_layers_per_virtual_pipeline_stage = 0;
    c.layout.sequence_parallel = 0;
    c.layout.micro_batch_size = 1;
    c.global_batch_size = 0;
    gl_config_finish(&c, 1, 1);

    gl_model_plan *p = gl_model_plan_new(&c.arch, &c.layout, 0, 0, 0, 1);
    gl_dev *d = gl_dev_open_cpu();
    int one = 1;
    gl_model *m = gl_model_new(p, d, NULL, &one);
    if (c.ckpt.load) {
        gl_ckpt *ck;
        gl_error err;
        if (gl_ckpt_open(MPI_COMM_SELF, c.ckpt.load, 0, &ck, &err) != GL_CKPT_OK)
            gl_die("eval-ref: %s", err.text);
        gl_ckpt_load_weights(ck, m, NULL);
        gl_ckpt_close(ck);
    } else {
        gl_model_init_weights(m, (uint64_t)(unsigned)c.seed, NULL);
    }
    ref_model R = { p, m->w };

    gl_idx *x = gl_idx_open_or_die(c.data.data_path[0]);
    int S = c.arch.seq_length;
    int32_t *tok = malloc((size_t)(S + 1) * sizeof *tok);
    int32_t *ids = malloc((size_t)S * sizeof *ids), *tg = malloc((size_t)S * sizeof *tg);
    float *mask = malloc((size_t)S * sizeof *mask);
    double sum = 0, count = 0, docs = 0;
    for (int64_t j = 0; j < gl_idx_num_documents(x); j++) {
        int64_t got = 0;
        for (int64_t i = gl_idx_doc_boundary(x, j); i < gl_idx_doc_boundary(x, j + 1); i++) {
            int64_t len = gl_idx_seq_length(x, i), take = S + 1 - got;
            take = len < take ? len : take;
            gl_idx_read_tokens(x, i, 0, take, tok + got, c.arch.vocab_size);
            got += take;
        }
        if (got < 2)
            continue;
        for (int t = 0; t < S; t++) {
            ids[t] = t + 1 < got ? tok[t] : 0;
            tg[t] = t + 1 < got ? tok[t + 1] : 0;
            mask[t] = t + 1 < got ? 1.0f : 0.0f;
        }
        double cnt;
        sum += ref_loss_sum(&c.arch, &R, ids, tg, mask, &cnt);
        count += cnt;
        docs++;
    }
    printf("%.9g %.0f %.0f\n", sum / count, count, docs);
    gl_idx_close(x);
    free(tok); free(ids); free(tg); free(mask);
    gl_model_free(m);
    gl_model_plan_free(p);
    gl_dev_close(d);
    gl_config_free(&c);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && !strcmp(argv[1], "make")) {
        make(argv[2]);
        return 0;
    }
    if (argc >= 2 && !strcmp(argv[1], "loss")) {
        MPI_Init(&argc, &argv);
        argv[1] = argv[0];
        int rc = loss(argc - 1, argv + 1);
        MPI_Finalize();
        return rc;
    }
    fprintf(stderr, "usage: eval-ref make PREFIX | eval-ref loss [--load CKPT] FLAGS...\n");
    return 2;
}
