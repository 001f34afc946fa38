/*
 * train.c: the training loop (train.h).
 *
 * One iteration, on every rank:
 *   1. load this DP rank's M micro-batches (batch.h) and upload them in
 *      one go (first and last pipeline stages only);
 *   2. run the pipeline schedule (pipeline.h): forwards and backwards of
 *      every micro-batch, gradients summed into the model's fp32 buffer,
 *      the head's masked token-loss sum into stats[1];
 *   3. finish the gradients: all-reduce the norm weights' over TP
 *      (sequence parallelism: each TP rank saw only its tokens), the tied
 *      embedding's over the embedding group (first and last stage), and
 *      reduce over DP (all-reduce, or reduce-scatter for the distributed
 *      optimizer);
 *   4. stats = [sum of squared gradients owned here, loss sum, unmasked
 *      tokens]: one all-reduce over the world and ONE download, the only
 *      host round trip of the iteration;
 *   5. N = tokens, loss = stats[1] / N, grad norm = sqrt(stats[0]) / N;
 *      clip to --clip-grad and step AdamW with grad_scale = clip / N
 *      (optim.h), unless loss or norm is not finite (then the step is
 *      skipped and counted, and --max-nonfinite-iters in a row stop the
 *      job);
 *   6. every --log-interval iterations rank 0 prints the Megatron-style
 *      line and appends the JSON record (trainlog.h).
 */
#include <config.h>

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "comm/comm_impl.h"
#include "data/loader.h"
#include "model/model.h"
#include "train/batch.h"
#include "train/lr.h"
#include "train/optim.h"
#include "train/pipeline.h"
#include "train/sched.h"
#include "train/train.h"
#include "train/trainlog.h"

/* A group of more than one rank, or NULL. */
static gl_comm *group(gl_comm *c)
{
    return c && gl_comm_size(c) > 1 ? c : NULL;
}

/* What this loop does not do (yet): say so before any work. */
static void check_supported(const gl_config *c, int rank)
{
    if (c->save || c->load)
        gl_die_code(2, "--%s: checkpoints are not wired into this gridlm-train's training "
                    "loop yet; drop --save/--load", c->save ? "save" : "load");
    if (rank == 0 && (c->overlap_grad_reduce || c->overlap_param_gather))
        gl_warn("--overlap-grad-reduce/--overlap-param-gather: not implemented yet; "
                "gradients are reduced after the backward pass and weights gathered "
                "after the step (same results, less overlap)");
    if (rank == 0 && c->recompute_granularity != GL_RECOMPUTE_NONE)
        gl_warn("--recompute-granularity: activation recomputation is not implemented "
                "yet; every activation is kept (same results, more memory)");
    if (c->context_parallel_size > 1)
        gl_die_code(2, "--context-parallel-size %d: context parallelism is not "
                    "implemented in gridlm's training loop yet; use 1",
                    c->context_parallel_size);
    if (c->train_iters <= 0)
        gl_die_code(2, "--train-iters %ld: give the number of iterations to train "
                    "(--train-samples is not supported by this loop yet)", c->train_iters);
}

/* --exit-signal-handler: SIGTERM asks for a clean stop after the
 * current iteration (every rank learns it through the iteration's
 * all-reduce, so all stop together). */
static volatile sig_atomic_t stop_signal;

static void on_sigterm(int sig)
{
    (void)sig;
    stop_signal = 1;
}

/* The device memory peak of this rank, in GiB. */
static double mem_gib(gl_dev *d)
{
    size_t in_use = 0, peak = 0, total = 0;
    if (d->ops->mem_info)
        d->ops->mem_info(d, &in_use, &peak, &total);
    return (double)peak / (1024.0 * 1024.0 * 1024.0);
}

/* The peak TFLOP/s MFU is measured against: --peak-tflops; 0 (MFU not
 * reported) when not given. */
static double peak_tflops(const gl_config *c)
{
    return c->peak_tflops > 0 ? c->peak_tflops : 0.0;
}

typedef struct {
    const gl_config *c;
    gl_dev *d;
    int M, n, S, B;
    int has_embed, has_head;
    int32_t *ids_h, *tg_h, *tok;
    float *mask_h, *mask_tmp;
    int32_t *ids, *tg;          /* device [M n] */
    float *gscale;              /* device [M n] */
    gl_mb *mbs;
} batch_buf;

/* Load and upload iteration it's micro-batches; returns the number of
 * unmasked target tokens among them. */
static double load_batch(batch_buf *bb, gl_batch_source *src, long it, int dp_rank)
{
    gl_dev *d = bb->d;
    double count = 0;
    if (!bb->has_embed && !bb->has_head)
        return 0;
    for (int j = 0; j < bb->M; j++) {
        src->batch(src, gl_batch_sample_index(bb->c, it, j, dp_rank, 0), bb->B, bb->tok,
                   bb->mask_tmp);
        for (int b = 0; b < bb->B; b++) {
            const int32_t *tok = bb->tok + (size_t)b * (bb->S + 1);
            const float *mk = bb->mask_tmp + (size_t)b * bb->S;
            size_t row = (size_t)j * bb->n + (size_t)b * bb->S;
            for (int t = 0; t < bb->S; t++) {
                bb->ids_h[row + t] = tok[t];
                bb->tg_h[row + t] = tok[t + 1];
                bb->mask_h[row + t] = mk[t];
                count += mk[t];
            }
        }
    }
    size_t tot = (size_t)bb->M * bb->n;
    d->ops->upload(d, bb->ids, bb->ids_h, tot * sizeof(int32_t));
    d->ops->upload(d, bb->tg, bb->tg_h, tot * sizeof(int32_t));
    d->ops->upload(d, bb->gscale, bb->mask_h, tot * sizeof(float));
    return count;
}

static void batch_buf_init(batch_buf *bb, const gl_config *c, gl_dev *d,
                           const gl_model_plan *p)
{
    memset(bb, 0, sizeof *bb);
    bb->c = c;
    bb->d = d;
    bb->M = c->num_micro_batches;
    bb->n = p->dm.n;
    bb->S = p->dm.S;
    bb->B = p->dm.B;
    for (int i = 0; i < p->nchunks; i++) {
        bb->has_embed |= p->chunk[i].has_embed;
        bb->has_head |= p->chunk[i].has_head;
    }
    bb->mbs = gl_calloc((size_t)bb->M, sizeof *bb->mbs);
    if (!bb->has_embed && !bb->has_head)
        return;
    size_t tot = (size_t)bb->M * bb->n;
    bb->ids_h = gl_malloc(tot * sizeof(int32_t));
    bb->tg_h = gl_malloc(tot * sizeof(int32_t));
    bb->mask_h = gl_malloc(tot * sizeof(float));
    bb->tok = gl_malloc((size_t)bb->B * ((size_t)bb->S + 1) * sizeof(int32_t));
    bb->mask_tmp = gl_malloc((size_t)bb->B * (size_t)bb->S * sizeof(float));
    bb->ids = d->ops->alloc(d, tot * sizeof(int32_t));
    bb->tg = d->ops->alloc(d, tot * sizeof(int32_t));
    bb->gscale = d->ops->alloc(d, tot * sizeof(float));
    for (int j = 0; j < bb->M; j++)
        bb->mbs[j] = (gl_mb){ bb->ids + (size_t)j * bb->n, bb->tg + (size_t)j * bb->n,
                              bb->gscale + (size_t)j * bb->n };
}

static void batch_buf_free(batch_buf *bb)
{
    gl_dev *d = bb->d;
    if (bb->ids) {
        d->ops->free(d, bb->ids);
        d->ops->free(d, bb->tg);
        d->ops->free(d, bb->gscale);
    }
    free(bb->ids_h);
    free(bb->tg_h);
    free(bb->mask_h);
    free(bb->tok);
    free(bb->mask_tmp);
    free(bb->mbs);
}

/* Step 3: gradients of replicated parameters and the DP reduction. */
static void finish_grads(const gl_config *c, gl_groups *g, gl_model *m, gl_optim *o)
{
    const gl_model_plan *p = m->plan;
    gl_dev *d = m->d;
    if (p->dm.sp && group(g->tp) && p->rep_end > p->rep_begin)
        gl_all_reduce(g->tp, m->g + p->rep_begin, m->g + p->rep_begin,
                      p->rep_end - p->rep_begin, GL_DT_F32, GL_OP_SUM, d->stream);
    if (p->dm.tied && p->dm.pp > 1 && group(g->embd)) {
        int i = p->embed_param >= 0 ? p->embed_param : p->head_param;
        if (i >= 0) {
            const gl_param *q = &p->param[i];
            gl_all_reduce(g->embd, m->g + q->offset, m->g + q->offset, q->count,
                          GL_DT_F32, GL_OP_SUM, d->stream);
        }
    }
    (void)c;
    gl_optim_reduce(o);
}

/* The batch source: mock, or the loader (which may fix the vocabulary
 * size from the tokenizer: cc is the loop's own copy of the config). */
static gl_batch_source *open_source(gl_config *cc, gl_groups *g, int pp_rank)
{
    if (cc->mock_data)
        return gl_batch_mock(cc);
    int pp = cc->pipeline_model_parallel_size;
    int needs_tokens = pp_rank == 0 || pp_rank == pp - 1;
    MPI_Comm world = g->world ? gl_comm_mpi_handle(g->world) : MPI_COMM_WORLD;
    gl_loader *L = gl_loader_open(cc, g->me.dp, cc->data_parallel_size, needs_tokens, world);
    long V = gl_loader_vocab_size(L);
    if (V != cc->vocab_size)
        gl_config_set_vocab_size(cc, (int)V);
    return gl_batch_loader(cc, L);
}

int gl_train_run(const gl_config *c0, const gl_boot *b, gl_groups *g, gl_dev *d)
{
    gl_config cc = *c0;             /* shallow: the loader may set the vocabulary */
    const gl_config *c = &cc;
    check_supported(c, b->rank);
    int tp_rank = g->me.tp, pp_rank = g->me.pp, dp_rank = g->me.dp;
    int world = b->size, rank = b->rank;
    int pp = c->pipeline_model_parallel_size, V = c->virtual_pipeline_size;
    int M = c->num_micro_batches;
    if (pp > 1 && (!g->pp || gl_comm_size(g->pp) != pp))
        gl_die("pipeline group of size %d, expected %d", g->pp ? gl_comm_size(g->pp) : 0, pp);

    gl_batch_source *src = open_source(&cc, g, pp_rank);
    gl_model_plan *plan = gl_model_plan_new(c, tp_rank, pp_rank, c->data_parallel_size);
    gl_sched *sched = gl_sched_build(pp, pp_rank, V, M);
    gl_model *m = gl_model_new(plan, c, d, group(g->tp), sched->slots);
    gl_optim *o = gl_optim_new(c, m, group(g->dp), c->use_distributed_optimizer);
    size_t mb0, mb1;
    float *master = gl_optim_master_target(o, &mb0, &mb1);
    gl_model_init_weights(m, (uint64_t)(unsigned)c->seed, master, mb0, mb1);

    batch_buf bb;
    batch_buf_init(&bb, c, d, plan);
    gl_lr_sched lrs;
    gl_lr_init(&lrs, c);

    float *stats = d->ops->alloc(d, 4 * sizeof(float));
    float *memv = d->ops->alloc(d, sizeof(float));
    int head_here = bb.has_head && tp_rank == 0;
    float *loss_acc = head_here ? stats + 1 : NULL;

    double tokens_per_iter = (double)c->global_batch_size * c->seq_length;
    double flops_per_iter = gl_config_flops_per_token(c) * tokens_per_iter;
    double peak = peak_tflops(c);
    long nparams = gl_model_num_params(c);
    gl_info0("training: %ld parameters (%.2f M), %d layers, TP %d PP %d (x%d virtual) "
             "DP %d, %d micro-batches of %d x %d tokens per iteration%s%s", nparams,
             nparams / 1e6, c->num_layers, c->tensor_model_parallel_size, pp, V,
             c->data_parallel_size, M, c->micro_batch_size, c->seq_length,
             plan->dm.sp ? ", sequence parallel" : "",
             o->dist ? ", distributed optimizer" : "");

    FILE *json = NULL;
    if (rank == 0 && c->log_json) {
        json = fopen(c->log_json, "w");
        if (!json)
            gl_die("--log-json %s: cannot open for writing; give a writable path",
                   c->log_json);
    }

    if (c->exit_signal_handler)
        signal(SIGTERM, on_sigterm);
    double t_start = gl_now();
    long consumed = 0, skipped = 0, nan_iters = 0, in_a_row = 0;
    double int_loss = 0, int_norm = 0, int_ms = 0;
    int int_n = 0, int_ok = 0;
    for (long it = 0; it < c->train_iters; it++) {
        double t0 = gl_now();
        double count = load_batch(&bb, src, it, dp_rank);
        /* stats[3] > 0 after the all-reduce: some rank asks to stop */
        int stop = stop_signal || (rank == 0 && c->exit_duration_in_mins > 0 &&
                                   gl_now() - t_start > 60.0 * c->exit_duration_in_mins);
        float init[4] = { 0, 0, head_here ? (float)count : 0.0f, stop ? 1.0f : 0.0f };
        d->ops->upload(d, stats, init, sizeof init);
        d->ops->zero(d, m->g, plan->nflat * sizeof(float));

        gl_pipeline_run(sched, m, group(g->pp), bb.mbs, loss_acc);
        finish_grads(c, g, m, o);
        gl_optim_sumsq(o, stats);
        if (world > 1)
            gl_all_reduce(g->world, stats, stats, 4, GL_DT_F32, GL_OP_SUM, d->stream);
        float h[4];
        d->ops->download(d, h, stats, sizeof h);

        double N = h[2];
        double loss = N > 0 ? h[1] / N : NAN;
        double norm = N > 0 ? sqrt(h[0]) / N : NAN;
        if (!isfinite(loss) || !isfinite(norm)) {
            skipped++;
            nan_iters++;
            if (++in_a_row >= c->max_nonfinite_iters && c->max_nonfinite_iters > 0)
                gl_die("the loss or the gradient norm was not finite for %ld iterations "
                       "in a row (last: iteration %ld, loss %g, grad norm %g): lower --lr "
                       "or raise --clip-grad's strictness, or check the data",
                       in_a_row, it + 1, loss, norm);
        } else {
            in_a_row = 0;
            double clip = 1.0;
            if (c->clip_grad > 0 && norm > c->clip_grad)
                clip = c->clip_grad / (norm + 1e-6);
            gl_optim_step(o, gl_lr_at(&lrs, o->steps), clip / N);
            int_loss += loss;
            int_norm += norm;
            int_ok++;
        }
        consumed += c->global_batch_size;
        d->ops->sync(d);
        int_ms += 1e3 * (gl_now() - t0);
        int_n++;

        long iter = it + 1;
        int stopping = h[3] > 0 || (c->exit_interval > 0 && iter % c->exit_interval == 0);
        if (iter % c->log_interval == 0 || iter == c->train_iters || stopping) {
            float mem = (float)mem_gib(d);
            d->ops->upload(d, memv, &mem, sizeof mem);
            if (world > 1)
                gl_all_reduce(g->world, memv, memv, 1, GL_DT_F32, GL_OP_MAX, d->stream);
            d->ops->download(d, &mem, memv, sizeof mem);
            if (rank == 0) {
                gl_log_record r = {
                    .iteration = iter, .train_iters = c->train_iters,
                    .consumed_samples = consumed, .elapsed_ms = int_ms / int_n,
                    .lr = gl_lr_at(&lrs, o->steps), .global_batch_size = c->global_batch_size,
                    .loss = int_ok ? int_loss / int_ok : NAN,
                    .grad_norm = int_ok ? int_norm / int_ok : NAN,
                    .skipped = skipped, .nan_iters = nan_iters, .mem_gib = mem,
                };
                double sec = r.elapsed_ms / 1e3;
                r.tokens_per_sec_per_gpu = tokens_per_iter / (sec * world);
                r.tflops_per_gpu = flops_per_iter / (sec * world * 1e12);
                r.mfu = peak > 0 ? r.tflops_per_gpu / peak : -1;
                char line[1024];
                gl_log_format_line(line, sizeof line, &r);
                gl_info0("%s", line);
                if (json)
                    gl_log_write_json(json, &r);
            }
            int_loss = int_norm = int_ms = 0;
            int_n = int_ok = 0;
        }
        if (stopping) {
            gl_info0("stopping after iteration %ld (%s)", iter,
                     h[3] > 0 ? "signal or --exit-duration-in-mins" : "--exit-interval");
            break;
        }
    }

    if (json && fclose(json) != 0)
        gl_die("--log-json %s: write failed", c->log_json);
    d->ops->free(d, stats);
    d->ops->free(d, memv);
    gl_batch_close(src);
    batch_buf_free(&bb);
    gl_optim_free(o);
    gl_model_free(m);
    gl_sched_free(sched);
    gl_model_plan_free(plan);
    return 0;
}
