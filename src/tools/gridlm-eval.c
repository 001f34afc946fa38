/*
 * gridlm-eval: the mean next-token loss and the perplexity of a model over
 * the documents of a Megatron dataset (see gridlm-eval(1)).
 *
 *   gridlm-eval --load CKPT --data-path PREFIX [--seq-length N] [--json]
 *               [layout and model flags of gridlm-train]
 *
 * Each document is its own sequence: its first S + 1 tokens at most (S =
 * --seq-length), never running into the next document; documents of
 * fewer than 2 tokens have nothing to predict and are skipped.  Every
 * predicted token counts once: loss = sum of -log p(next token) / tokens,
 * perplexity = exp(loss).
 *
 * Documents are dealt like training samples (batch.h): global step s,
 * micro-batch j of DP rank r, row b holds eligible document
 * s G + j B DP + r B + b (G = --global-batch-size, by default B x DP x PP
 * so that every pipeline stage has work), padded rows are masked.  The
 * pipeline runs forward only (train/pipeline.h) on a forward-only model
 * (model/model.h): no gradients, one set of layer activations.  A
 * mixture-of-experts model runs with its experts split over
 * --expert-model-parallel-size ranks as in training, and drops tokens
 * over --moe-expert-capacity-factor as training's forward does
 * (Megatron's router applies the capacity in evaluation too).
 *
 * The model's shape comes from the checkpoint's "config" attribute when
 * --load is given (flags that contradict it stop the run); without
 * --load the model is the freshly initialised one of --seed, which is
 * what t/eval-*.t checks the arithmetic with.
 */
#include <config.h>

#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/options.h"
#include "boot/boot.h"
#include "boot/groups.h"
#include "ckpt/ckpt.h"
#include "comm/comm.h"
#include "data/indexed.h"
#include "device/ops.h"
#include "grid/grid.h"
#include "model/model.h"
#include "train/batch.h"
#include "train/checkpoint.h"
#include "train/run_config.h"
#include "train/pipeline.h"

static void usage(FILE *f)
{
    fprintf(f,
        "Usage: gridlm-eval --load CKPT --data-path PREFIX [--seq-length N] [--json]\n"
        "                   [--tensor-model-parallel-size N] [--pipeline-model-parallel-size N]\n"
        "                   [--sequence-parallel] [--micro-batch-size N] [--device cpu|cuda] ...\n"
        "       gridlm-eval --data-path PREFIX --seed N MODEL-FLAGS... (a freshly\n"
        "                   initialised model: --num-layers, --hidden-size, ...)\n"
        "\n"
        "The mean next-token loss and the perplexity of the model over the documents\n"
        "of the Megatron dataset PREFIX (.bin/.idx), each document one sequence of at\n"
        "most --seq-length predicted tokens.  Model and layout flags are gridlm-train's\n"
        "(gridlm-train --help lists them); with --load the model's sizes come from the\n"
        "checkpoint.  --json prints one JSON object: loss, perplexity, tokens,\n"
        "documents.  See gridlm-eval(1).\n");
}

/* A flag given on the command line (as --name or --name=VALUE). */
static int has_flag(int argc, char **argv, const char *name)
{
    size_t n = strlen(name);
    for (int i = 1; i < argc; i++)
        if (!strncmp(argv[i], "--", 2) && !strncmp(argv[i] + 2, name, n) &&
            (argv[i][2 + n] == 0 || argv[i][2 + n] == '='))
            return 1;
    return 0;
}

/* The eligible documents (2 tokens or more) of the dataset. */
typedef struct {
    gl_idx *x;
    int64_t *doc;               /* eligible document numbers */
    int64_t n;
    int64_t skipped;
} doc_list;

static int64_t doc_tokens(const gl_idx *x, int64_t j)
{
    int64_t t = 0;
    for (int64_t i = gl_idx_doc_boundary(x, j); i < gl_idx_doc_boundary(x, j + 1); i++)
        t += gl_idx_seq_length(x, i);
    return t;
}

static void docs_open(doc_list *dl, const char *prefix)
{
    memset(dl, 0, sizeof *dl);
    dl->x = gl_idx_open_or_die(prefix);
    int64_t nd = gl_idx_num_documents(dl->x);
    dl->doc = gl_malloc((size_t)(nd > 0 ? nd : 1) * sizeof *dl->doc);
    for (int64_t j = 0; j < nd; j++) {
        if (doc_tokens(dl->x, j) >= 2)
            dl->doc[dl->n++] = j;
        else
            dl->skipped++;
    }
}

/* The first `want` tokens at most of document j into out; returns how
 * many. */
static int64_t doc_read(const doc_list *dl, int64_t j, int64_t want, int32_t *out, long vocab)
{
    int64_t got = 0;
    for (int64_t i = gl_idx_doc_boundary(dl->x, j);
         i < gl_idx_doc_boundary(dl->x, j + 1) && got < want; i++) {
        int64_t len = gl_idx_seq_length(dl->x, i);
        int64_t take = len < want - got ? len : want - got;
        gl_idx_read_tokens(dl->x, i, 0, take, out + got, vocab);
        got += take;
    }
    return got;
}

/* Fill and upload the micro-batches of global step s for DP rank r:
 * returns the predicted tokens among them. */
static double fill_step(gl_batch_buf *bb, const doc_list *dl, const gl_config *c, long s,
                        int r, long vocab, double *docs)
{
    int S = bb->S;
    int32_t *tok = gl_malloc((size_t)(S + 1) * sizeof *tok);
    double count = 0;
    for (int j = 0; j < bb->M; j++)
        for (int b = 0; b < bb->B; b++) {
            long k = gl_batch_sample_index(c, s, j, r, b);
            size_t row = (size_t)j * bb->n + (size_t)b * S;
            int64_t got = 0;
            if (k < dl->n) {
                got = doc_read(dl, dl->doc[k], S + 1, tok, vocab);
                *docs += 1;
            }
            for (int t = 0; t < S; t++) {
                int real = t + 1 < got;
                bb->ids_h[row + t] = real ? tok[t] : 0;
                bb->tg_h[row + t] = real ? tok[t + 1] : 0;
                bb->mask_h[row + t] = real ? 1.0f : 0.0f;
                count += real;
            }
        }
    free(tok);
    size_t tot = (size_t)bb->M * bb->n;
    gl_dev *d = bb->d;
    d->ops->upload(d, bb->ids, bb->ids_h, tot * sizeof(int32_t));
    d->ops->upload(d, bb->tg, bb->tg_h, tot * sizeof(int32_t));
    d->ops->upload(d, bb->gscale, bb->mask_h, tot * sizeof(float));
    return count;
}

int main(int argc, char **argv)
{
    gl_log_set_program(argv[0]);
    if (has_flag(argc, argv, "help") || argc < 2) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (has_flag(argc, argv, "version")) {
        printf("gridlm-eval (gridlm) %s\n", PACKAGE_VERSION);
        return 0;
    }

    /* Our own flag (--json) out, and what the training flags insist on
     * (--train-iters, --lr) in: they mean nothing here. */
    int json = 0, pargc = 0;
    char **pargv = gl_calloc((size_t)argc + 8, sizeof *pargv);
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = 1;
        else
            pargv[pargc++] = argv[i];
    }
    int gave_gbs = has_flag(argc, argv, "global-batch-size");
    int gave_seq = has_flag(argc, argv, "seq-length");
    const char *load = gl_opt_find(argc, argv, "load");
    pargv[pargc++] = "--train-iters";
    pargv[pargc++] = "1";
    pargv[pargc++] = "--lr";
    pargv[pargc++] = "1";

    gl_boot b;
    gl_boot_init(&argc, &argv, &b);
    if (!has_flag(argc, argv, "data-path")) {
        if (b.rank == 0)            /* one line; the abort stops the others */
            gl_die_code(2, "--data-path PREFIX is required: the Megatron dataset "
                        "(.bin/.idx) to evaluate on");
        MPI_Barrier(MPI_COMM_WORLD);
    }
    gl_config c;
    gl_config_defaults(&c);

    /* The checkpoint first: it gives the model's shape. */
    gl_ckpt *ck = NULL;
    char *ck_config = NULL;
    if (load) {
        gl_error why;
        int rc = gl_ckpt_open(MPI_COMM_WORLD, load, GL_CKPT_VERIFY, &ck, &why);
        if (rc == GL_CKPT_NONE)
            gl_die_code(2, "--load %s: no checkpoint there (no %s): give a checkpoint "
                        "file or a directory gridlm-train saved into", load, GL_CKPT_TRACKER);
        if (rc != GL_CKPT_OK)
            gl_die("--load %s: %s", load, why.text);
        ck_config = gl_ckpt_get_str(ck, "config");
        gl_error err;
        if (gl_train_config_from_json(ck_config, &c, &err) != 0)
            gl_die_code(2, "--load %s: %s", gl_ckpt_path(ck), err.text);
        if (!c.arch.seq_length && !gave_seq)
            gl_die_code(2, "--load %s: the checkpoint does not say its sequence length: "
                        "give --seq-length N", gl_ckpt_path(ck));
    }
    gl_config_parse(&c, pargc, pargv);
    if (ck)
        gl_train_check_model(&c, ck_config, gl_ckpt_path(ck));
    if (c.data.mock_data)
        gl_die_code(2, "--mock-data: gridlm-eval reads documents; give --data-path PREFIX");
    if (c.data.n_data_paths != 1 || c.data.data_weights_given)
        gl_die_code(2, "--data-path: gridlm-eval takes one dataset prefix (no weights, no "
                    "blend); evaluate each dataset on its own");
    if (c.arch.max_position_embeddings < c.arch.seq_length &&
        c.arch.position_embedding_type == GL_POS_LEARNED_ABSOLUTE)
        gl_die_code(2, "--seq-length %d is longer than the model's %d learned positions "
                    "(--max-position-embeddings): evaluate with --seq-length %d or less",
                    c.arch.seq_length, c.arch.max_position_embeddings,
                    c.arch.max_position_embeddings);
    if (c.arch.max_position_embeddings < c.arch.seq_length)
        c.arch.max_position_embeddings = c.arch.seq_length;   /* RoPE: no table */

    if (c.device != GL_DEVICE_CPU)
        gl_boot_pick_gpu(&b);
    int tp = c.layout.tensor_model_parallel_size, pp = c.layout.pipeline_model_parallel_size;
    int cp = c.layout.context_parallel_size;
    if (cp > 1)
        gl_die_code(2, "--context-parallel-size %d: gridlm's model has no context "
                    "parallelism yet; use 1", cp);
    if (!gave_gbs && b.size % (tp * pp) == 0)
        c.global_batch_size = c.layout.micro_batch_size * (b.size / (tp * pp)) * pp;
    gl_config_finish(&c, b.size, b.local_size);

    gl_grid_spec spec = {
        .world = b.size, .tp = tp, .cp = cp, .ep = c.layout.expert_model_parallel_size,
        .etp = c.layout.expert_tensor_parallel_size, .dp = c.data_parallel_size, .pp = pp,
        .ranks_per_node = b.local_size,
    };
    gl_dev *d = gl_boot_open_device(&b, c.device);
    gl_groups *g = gl_groups_create(&b, &spec, d->comm);
    gl_comm *tpc = g->tp && gl_comm_size(g->tp) > 1 ? g->tp : NULL;
    gl_comm *ppc = g->pp && gl_comm_size(g->pp) > 1 ? g->pp : NULL;
    MPI_Comm world = g->world ? gl_comm_mpi_handle(g->world) : MPI_COMM_WORLD;

    /* expert parallelism: the rank holds the experts of its EP index,
     * and the tokens travel to them (moe.c) */
    gl_comm *epc = g->ep && gl_comm_size(g->ep) > 1 ? g->ep : NULL;
    int ep_rank = epc ? gl_comm_rank(epc) : 0;
    gl_model_plan *plan = gl_model_plan_new(&c.arch, &c.layout, g->me.tp, g->me.pp, ep_rank,
                                            c.data_parallel_size);
    gl_model *m = gl_model_new_forward_only(plan, d, tpc);
    m->ep = epc;
    /* the MoE options as in training's validation: Megatron's router
     * drops over a capacity (--moe-expert-capacity-factor) whatever the
     * mode, so evaluation drops as training does; the auxiliary and z
     * losses are training's alone (a forward-only pass has none) */
    m->moe_opts = c.moe;
    if (ck) {
        gl_ckpt_load_weights(ck, m, NULL);
        gl_ckpt_close(ck);
        ck = NULL;
    } else {
        gl_model_init_weights(m, (uint64_t)(unsigned)c.seed, NULL);
    }

    gl_batch_buf bb;
    gl_batch_buf_init(&bb, &c, d, plan, g->me.dp);
    int reads = bb.has_embed || bb.has_head;
    int head_here = bb.has_head && g->me.tp == 0;
    doc_list dl;
    docs_open(&dl, c.data.data_path[0]);
    long G = c.global_batch_size;
    long steps = (long)((dl.n + G - 1) / G);
    float *acc = d->ops->alloc(d, sizeof(float));
    double sum[3] = { 0, 0, 0 };        /* loss sum, tokens, documents */
    double t0 = gl_now();
    for (long s = 0; s < steps; s++) {
        double docs = 0, count = 0;
        if (reads)
            count = fill_step(&bb, &dl, &c, s, g->me.dp, c.arch.vocab_size, &docs);
        float zero = 0, got = 0;
        if (head_here)
            d->ops->upload(d, acc, &zero, sizeof zero);
        gl_pipeline_forward_only(m, ppc, bb.mbs, bb.M, head_here ? acc : NULL);
        if (head_here) {
            d->ops->download(d, &got, acc, sizeof got);
            sum[0] += got;
            sum[1] += count;
            sum[2] += docs;
        }
    }
    d->ops->sync(d);
    MPI_Allreduce(MPI_IN_PLACE, sum, 3, MPI_DOUBLE, MPI_SUM, world);
    double secs = gl_now() - t0;

    double loss = sum[1] > 0 ? sum[0] / sum[1] : NAN, ppl = exp(loss);
    if (b.rank == 0) {
        if (json) {
            printf("{\"loss\": ");
            printf(isfinite(loss) ? "%.9g" : "null", loss);
            printf(", \"perplexity\": ");
            printf(isfinite(ppl) ? "%.9g" : "null", ppl);
            printf(", \"tokens\": %.0f, \"documents\": %.0f}\n", sum[1], sum[2]);
        } else {
            printf("%s: %.0f documents (%lld shorter than 2 tokens skipped), %.0f predicted "
                   "tokens at most %d per document: loss %.6f, perplexity %.4f (%.1f s)\n",
                   c.data.data_path[0], sum[2], (long long)dl.skipped, sum[1], c.arch.seq_length,
                   loss, ppl, secs);
        }
        fflush(stdout);
    }
    if (sum[1] == 0 && b.rank == 0)
        gl_warn("%s: no document has 2 tokens or more: nothing to evaluate", c.data.data_path[0]);

    d->ops->free(d, acc);
    gl_idx_close(dl.x);
    free(dl.doc);
    gl_batch_buf_free(&bb);
    gl_model_free(m);
    gl_model_plan_free(plan);
    gl_groups_free(g);
    gl_dev_close(d);
    free(ck_config);
    free(pargv);
    gl_config_free(&c);
    gl_boot_finalize(&b);
    return 0;
}
