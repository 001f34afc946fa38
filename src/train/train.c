/*
 * train.c: the training loop (train.h).
 *
 * Before the first iteration: the model's weights from the counter-based
 * RNG, or from --load (checkpoint.h: resharded to this layout), and the
 * fault handling of faults.h.  One iteration, on every rank:
 *   1. this DP rank's M micro-batches (batch.h; M follows the global
 *      batch, which --rampup-batch-size grows), first and last pipeline
 *      stages only: read and uploaded (asynchronously, from page-locked
 *      memory) while the previous iteration was computing;
 *   2. run the pipeline schedule (pipeline.h): forwards and backwards of
 *      every micro-batch, gradients summed into the model's fp32 buffer,
 *      the head's masked token-loss sum into stats[1];
 *   3. finish the gradients: all-reduce the norm weights' over TP
 *      (sequence parallelism: each TP rank saw only its tokens), the tied
 *      embedding's over the embedding group (first and last stage), and
 *      reduce over DP (all-reduce, or reduce-scatter for the distributed
 *      optimizer; with --overlap-grad-reduce most buckets are already
 *      under way on the communication stream, see optim.h); meanwhile
 *      the host reads the next iteration's batch and enqueues its upload;
 *   4. stats = [sum of squared gradients owned here, loss sum, unmasked
 *      tokens, this rank's exit reasons]: one all-reduce over the world
 *      and ONE download, the only host round trip of the iteration;
 *   5. N = tokens, loss = stats[1] / N (the per-token mean, as Megatron
 *      reports it), D = M x DP micro-batches x B S positions (or N
 *      under --calculate-per-token-loss: batch.h's loss normalisations), grad
 *      norm = sqrt(stats[0]) / D; clip to --clip-grad and step AdamW at
 *      the schedule's rate (lr.h) with grad_scale = clip / D (optim.h);
 *      the schedule moves by the iteration's global batch; unless loss
 *      or norm is not finite (then the step is skipped and counted by
 *      gl_faults_nonfinite, which stops the job after too many in a row);
 *   6. every --log-interval iterations rank 0 prints the Megatron-style
 *      line and appends the JSON record (trainlog.h), and every rank
 *      compares step times (stragglers); with --tensorboard-dir the last
 *      rank, as in Megatron-LM, writes the TensorBoard scalars (every
 *      --tensorboard-log-interval iterations, and flushes them at each
 *      log): the loss and the grad norm come from step 4's all-reduce over
 *      the world, so the last rank has them whatever the layout; its own
 *      step time gives iteration-time and throughput;
 *   7. every --eval-interval iterations, and after the last, the
 *      validation loss (forward only, see validate());
 *   Nothing else waits for the device: the step is enqueued and the
 *   next iteration's work follows it on the stream.
 *   8. every --save-interval iterations, after the last, and when a
 *      signal, --exit-interval or --exit-duration-in-mins says stop
 *      (agreed through step 4), a checkpoint (checkpoint.h); then stop.
 */
#include <config.h>

#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "comm/comm.h"
#include "data/loader.h"
#include "model/model.h"
#include "train/batch.h"
#include "train/checkpoint.h"
#include "train/faults.h"
#include "train/lr.h"
#include "train/optim.h"
#include "train/peak.h"
#include "train/pipeline.h"
#include "train/sched.h"
#include "train/train.h"
#include "train/trainlog.h"

/* Test hook (t/train-nan.t): does GRIDLM_TEST_NONFINITE, a comma-separated
 * list of iterations ("3,5,6"), name iteration iter (1-based)? */
static int planted_nonfinite(long iter)
{
    const char *s = getenv("GRIDLM_TEST_NONFINITE");
    while (s && *s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s)
            return 0;
        if (v == iter)
            return 1;
        s = *end == ',' ? end + 1 : end;
    }
    return 0;
}

/* Test hook (t/slurm-preempt.t, t/fault-record.t): GRIDLM_TEST_HOLD_AFTER=K
 * makes every rank wait after iteration K, when it is not stopping, until
 * a stop signal (--exit-signal-handler) reached it, for at most 120 s.  A
 * test that signals the job once K is logged then knows the run stops
 * after iteration K + 1, however loaded the machine: the signal cannot
 * come too late. */
static void test_hold(gl_faults *F, long iter)
{
    const char *e = getenv("GRIDLM_TEST_HOLD_AFTER");
    if (!e || !*e || atol(e) != iter)
        return;
    gl_info0("holding after iteration %ld until a signal comes (GRIDLM_TEST_HOLD_AFTER)",
            iter);
    double t0 = gl_now();
    struct timespec pause = { 0, 10 * 1000 * 1000 };
    while (!gl_faults_exit_flags(F) && gl_now() - t0 < 120)
        nanosleep(&pause, NULL);
}

/* A group of more than one rank, or NULL. */
static gl_comm *group(gl_comm *c)
{
    return c && gl_comm_size(c) > 1 ? c : NULL;
}

/* What this loop does not do (yet): say so before any work (the
 * settings a dry run refuses too are preflight.h's). */
static void check_supported(const gl_config *c)
{
    if (c->train_iters <= 0)
        gl_die_code(2, "--train-iters %ld: give the number of iterations to train "
                    "(--train-samples is not supported by this loop yet)", c->train_iters);
}

/* The iteration's all-reduced statistics: sum of squared gradients,
 * loss sum, unmasked tokens, one slot per signal bit of faults.h
 * (SIGTERM, SIGUSR1), then rank 0's clock for --exit-duration-in-mins
 * (the other ranks add 0). */
#define NEXITBITS 2
#define CLOCK_SLOT (3 + NEXITBITS)
#define NSTATS (4 + NEXITBITS)

/* Mixture of experts: the step's statistics and the expert bias.
 *
 * m->moe_stats holds, per global layer, what the rank's training
 * forwards added (model.h): every TP rank routes the whole micro-batch,
 * so its tokens per expert and dropped slots are the whole micro-batch's
 * on each TP rank, and so are the losses without sequence parallelism
 * (under it each TP rank holds its rows' share); pipeline stages hold
 * their own layers.  One all-reduce over the world sums them, and the
 * TP repetitions are divided out; the division by the step's micro-
 * batches of every DP rank makes each loss what the objective adds (a
 * global_aux_loss share is a part of the loss of the DP ranks'
 * micro-batches together, which the gradient's average over DP divides
 * by DP as Megatron's does).  The expert bias (DeepSeek-V3's
 * aux-loss-free balancing) then moves by the rate against the sign of
 * each expert's excess over the step's mean, the same on every rank: in
 * the weights and, where this rank holds them, the master weights (the
 * optimizer leaves the buffer alone: its gradient is zero and, a vector,
 * it has no weight decay).  A skipped step (NaN/Inf) moves nothing.
 * Last, global_aux_loss's running counts start again. */
typedef struct {
    double aux, z, load_max, dropped;   /* this step's (log record's units) */
} moe_step_stats;

static void moe_step(const gl_config *c, gl_groups *g, gl_model *m, gl_optim *o, int Mi,
                     int update, moe_step_stats *out)
{
    const gl_model_plan *p = m->plan;
    const gl_model_dims *dm = &p->dm;
    gl_dev *d = m->d;
    int E = dm->E, L = dm->L, per = GL_MOE_STATS + E;
    size_t ns = (size_t)L * per;
    if (g->world && gl_comm_size(g->world) > 1)
        gl_all_reduce(g->world, m->moe_stats, m->moe_stats, ns, GL_DT_F32, GL_OP_SUM,
                      d->stream);
    float *h = gl_malloc(ns * sizeof(float));
    d->ops->download(d, h, m->moe_stats, ns * sizeof(float));
    double tp = dm->tp, mbs = (double)Mi * c->data_parallel_size;
    memset(out, 0, sizeof *out);
    double routed = 0;
    for (int l = 0; l < L; l++) {
        if (!gl_arch_is_moe_layer(&p->arch, l))
            continue;
        const float *st = h + (size_t)l * per;
        out->aux += st[0] / (dm->sp ? 1.0 : tp) / mbs;
        out->z += st[1] / (dm->sp ? 1.0 : tp) / mbs;
        out->dropped += st[2] / tp;
        double sum = 0, mx = 0;
        for (int e = 0; e < E; e++) {
            sum += st[GL_MOE_STATS + e];
            if (st[GL_MOE_STATS + e] > mx)
                mx = st[GL_MOE_STATS + e];
        }
        if (sum > 0 && mx * E / sum > out->load_max)
            out->load_max = mx * E / sum;
        routed += mbs * dm->n * dm->cp * dm->topk;     /* every CP rank's part */
    }
    out->dropped = routed > 0 ? out->dropped / routed : 0;
    free(h);

    if (update && p->arch.moe_router_enable_expert_bias) {
        const gl_master *mr = gl_optim_master_target(o);
        float *tmp = d->ops->alloc(d, (size_t)E * sizeof(float));
        float rate = (float)c->moe.router_bias_update_rate;
        for (int ci = 0; ci < p->nchunks; ci++)
            for (int i = 0; i < dm->Lc; i++) {
                const gl_layer_offs *lo = &p->chunk[ci].layer[i];
                int l = p->chunk[ci].first_layer + i;
                if (!lo->moe || !gl_tensor_present_at(GL_T_EXPERT_BIAS, &p->arch, l))
                    continue;
                const float *counts = m->moe_stats + (size_t)l * per + GL_MOE_STATS;
                d->ops->to_f32(d, tmp, gl_model_weight(m, lo->ebias), (size_t)E);
                d->ops->moe_bias_update(d, tmp, counts, E, rate);
                d->ops->to_act(d, gl_model_weight(m, lo->ebias), tmp, (size_t)E);
                /* the part of the master weights this rank holds (a DP
                 * shard may cut the bias) */
                gl_master_put(d, mr, lo->ebias, tmp, (size_t)E);
            }
        d->ops->sync(d);
        d->ops->free(d, tmp);
    }
    d->ops->zero(d, m->moe_stats, ns * sizeof(float));
    gl_model_moe_step_end(m);
}

/* The device memory peak of this rank, in GiB. */
static double mem_gib(gl_dev *d)
{
    size_t in_use = 0, peak = 0, total = 0;
    if (d->ops->mem_info)
        d->ops->mem_info(d, &in_use, &peak, &total);
    return (double)peak / (1024.0 * 1024.0 * 1024.0);
}


/* What the activations of this rank take, and what recomputation
 * (--recompute-granularity, model.h) does to them: one info line. */
static void report_activations(const gl_config *c, const gl_model *m, const gl_sched *s)
{
    const double mib = 1024.0 * 1024.0;
    int inflight = 0;
    for (int k = 0; k < s->vpp; k++)
        inflight += s->slots[k];
    char how[160];
    if (m->recompute == GL_RECOMPUTE_FULL) {
        int block = strcmp(c->layout.recompute_method, "block") == 0;
        snprintf(how, sizeof how, "full recomputation, %s %d: %s", block ? "block" : "uniform",
                 c->layout.recompute_num_layers, block ? "the first layers of each chunk keep only "
                 "their input" : "each group of layers keeps only its input");
    } else if (m->recompute == GL_RECOMPUTE_SELECTIVE) {
        snprintf(how, sizeof how, "selective recomputation: the norm and SwiGLU outputs "
                 "are rebuilt in the backward");
    } else {
        snprintf(how, sizeof how, "every activation kept; --recompute-granularity "
                 "reduces it");
    }
    char cpnote[96] = "";
    if (m->plan->dm.cp > 1)
        snprintf(cpnote, sizeof cpnote, "; %d of each sequence's %d tokens (CP %d)",
                 m->plan->dm.S, m->plan->dm.Sfull, m->plan->dm.cp);
    gl_info0("activations (rank 0): %.2f MiB per micro-batch in flight x %d in flight, "
             "%.2f MiB shared (%s%s)", m->act_slot_bytes / mib, inflight,
             m->act_shared_bytes / mib, how, cpnote);

    /* the MoE layers' buffers, beside those (model.h: gl_model_moe_bytes):
     * every MoE layer of every slot keeps its own, whatever the
     * recomputation */
    const gl_model_dims *dm = &m->plan->dm;
    if (!dm->E)
        return;
    size_t per_layer, shared;
    gl_model_moe_bytes(m, &per_layer, &shared);
    long kept = 0;
    int layers = 0;
    for (int k = 0; k < m->plan->nchunks; k++)
        for (int i = 0; i < dm->Lc; i++)
            if (m->plan->chunk[k].layer[i].moe) {
                kept += m->nslots[k];
                layers++;
            }
    gl_info0("MoE layers (rank 0): %d, %.2f MiB each per micro-batch in flight (the routed "
             "rows: %d tokens x top %d%s), %.2f MiB shared; %.2f MiB in all", layers,
             per_layer / mib, dm->n, dm->topk,
             c->moe.capacity_factor > 0 ? ", or the capacity's" : "", shared / mib,
             ((double)per_layer * kept + shared) / mib);
}

/* Step 3: gradients of replicated parameters and the DP reduction. */
static void finish_grads(const gl_config *c, gl_groups *g, gl_model *m, gl_optim *o)
{
    const gl_model_plan *p = m->plan;
    gl_dev *d = m->d;
    size_t tb, te;
    gl_model_tp_sum_range(p, &tb, &te);
    if (group(g->tp) && te > tb)
        gl_all_reduce(g->tp, m->g + tb, m->g + tb, te - tb, GL_DT_F32, GL_OP_SUM, d->stream);
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

/* Validation (--eval-interval, --eval-iters): the mean loss over every
 * unmasked target of --eval-iters global batches of the valid split,
 * forward only (pipeline.h).  Evaluation k (0, 1, ...) reads the valid
 * split's global batches [k E, (k + 1) E), E = --eval-iters, so a
 * resumed run sees the batches an uninterrupted one would; the periodic
 * evaluation after iteration i is k = i / --eval-interval - 1 and the one
 * at the end of training k = train_iters / --eval-interval (this is the
 * number of valid samples data/loader.h prepares).  The loss sums of the
 * micro-batches accumulate on the device and are read back once per
 * global batch, then summed in double with the token counts over the
 * world.  Returns the mean on every rank (NaN when no target counted). */
static double validate(const gl_config *c, gl_groups *g, gl_model *m, gl_batch_buf *bb,
                       gl_batch_source *src, long k, float *acc, int head_here)
{
    gl_dev *d = m->d;
    double sum[2] = { 0, 0 };          /* loss sum, tokens */
    for (long e = 0; e < c->eval_iters; e++) {
        double count = gl_batch_buf_load_valid(bb, src, k * c->eval_iters + e, g->me.dp);
        float zero = 0, got = 0;
        if (head_here)
            d->ops->upload(d, acc, &zero, sizeof zero);
        gl_pipeline_forward_only(m, group(g->pp), bb->mbs, bb->M, head_here ? acc : NULL);
        if (head_here) {
            d->ops->download(d, &got, acc, sizeof got);
            sum[0] += got;
            sum[1] += count;
        }
    }
    d->ops->sync(d);
    MPI_Comm world = g->world ? gl_comm_mpi_handle(g->world) : MPI_COMM_WORLD;
    MPI_Allreduce(MPI_IN_PLACE, sum, 2, MPI_DOUBLE, MPI_SUM, world);
    return sum[1] > 0 ? sum[0] / sum[1] : NAN;
}

/* Print the validation line (rank 0) and append the JSON record. */
static void report_valid(const char *where, long iteration, double loss, FILE *json)
{
    char line[512], rule[512];
    gl_log_format_valid(line, sizeof line, where, loss);
    size_t n = strlen(line) + 1;
    if (n >= sizeof rule)
        n = sizeof rule - 1;
    memset(rule, '-', n);
    rule[n] = 0;
    gl_info0("%s", rule);
    gl_info0("%s", line);
    gl_info0("%s", rule);
    if (json)
        gl_log_write_valid_json(json, iteration, loss);
}

/* Whether validation runs: --eval-iters and --eval-interval positive and
 * a valid split (every rank learns it, middle stages read no data). */
static int eval_enabled(const gl_config *c, gl_groups *g, gl_batch_source *src, int reads)
{
    int on = c->eval_iters > 0 && c->eval_interval > 0 && (!reads || src->valid_batch);
    int any = reads ? on : 0, all = reads ? on : 1;
    MPI_Comm world = g->world ? gl_comm_mpi_handle(g->world) : MPI_COMM_WORLD;
    MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, world);
    MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_MIN, world);
    if (any && !all)
        gl_die("validation: some pipeline stages have a valid split and others do not");
    return c->eval_iters > 0 && c->eval_interval > 0 && any;
}

/* --tensorboard-dir: the event file, on the last rank only (as Megatron-LM
 * sets its writer); NULL elsewhere and without the flag. */
static gl_tfevents *open_tensorboard(const gl_config *c, int rank, int world)
{
    gl_error err;
    if (!c->log.tensorboard_dir || rank != world - 1)
        return NULL;
    gl_tfevents *tb = gl_tfevents_open(c->log.tensorboard_dir, c->log.tensorboard_queue_size,
                                       &err);
    if (!tb)
        gl_die("--tensorboard-dir %s: %s; give a writable directory",
               c->log.tensorboard_dir, err.text);
    gl_info("TensorBoard: rank %d writes %s", rank, gl_tfevents_path(tb));
    return tb;
}

/* A TensorBoard write that failed stops the job, as --log-json's does. */
static void tensorboard_check(int rc, const gl_error *err)
{
    if (rc < 0)
        gl_die("--tensorboard-dir: %s", err->text);
}

/* The batch source: mock, or the loader (which may fix the vocabulary
 * size from the tokenizer: cc is the loop's own copy of the config). */
static gl_batch_source *open_source(gl_config *cc, gl_groups *g, int pp_rank)
{
    if (cc->data.mock_data)
        return gl_batch_mock(cc);
    int pp = cc->layout.pipeline_model_parallel_size;
    int needs_tokens = pp_rank == 0 || pp_rank == pp - 1;
    MPI_Comm world = g->world ? gl_comm_mpi_handle(g->world) : MPI_COMM_WORLD;
    gl_loader_want want;
    gl_config_loader_want(cc, &want);
    gl_loader *L = gl_loader_open(&cc->data, &want, g->me.dp, cc->data_parallel_size,
                                  needs_tokens, world);
    long V = gl_loader_vocab_size(L);
    if (V != cc->arch.vocab_size)
        gl_config_set_vocab_size(cc, (int)V);
    return gl_batch_loader(cc, L);
}

/* The pipeline schedules of every batch the run trains on, by_m[Mi] for
 * Mi micro-batches (M, the full batch's, and those of a ramp-up's
 * smaller batches), and in slots[c] the most activation slots any of
 * them needs in chunk c: the model is sized for all of them. */
static void build_scheds(const gl_config *c, int stage, gl_sched **by_m, int *slots)
{
    int pp = c->layout.pipeline_model_parallel_size, V = c->layout.virtual_pipeline_size;
    long step = (long)c->layout.micro_batch_size * c->data_parallel_size;
    long start = c->rampup_batch_size[0] ? c->rampup_batch_size[0] : c->global_batch_size;
    long inc = c->rampup_batch_size[0] ? c->rampup_batch_size[1] : 1;
    for (long b = start; b <= c->global_batch_size; b += inc) {
        int Mi = (int)(b / step);
        if (b % step || by_m[Mi])
            continue;
        by_m[Mi] = gl_sched_build(pp, stage, V, Mi);
        for (int k = 0; k < V; k++)
            if (by_m[Mi]->slots[k] > slots[k])
                slots[k] = by_m[Mi]->slots[k];
    }
}

int gl_train_run(const gl_config *c0, const gl_boot *b, gl_groups *g, gl_dev *d)
{
    gl_config cc = *c0;             /* shallow: the loader may set the vocabulary */
    const gl_config *c = &cc;
    check_supported(c);
    int tp_rank = g->me.tp, pp_rank = g->me.pp, dp_rank = g->me.dp;
    int world = b->size, rank = b->rank;
    int pp = c->layout.pipeline_model_parallel_size, V = c->layout.virtual_pipeline_size;
    int M = c->num_micro_batches;
    if (pp > 1 && (!g->pp || gl_comm_size(g->pp) != pp))
        gl_die("pipeline group of size %d, expected %d", g->pp ? gl_comm_size(g->pp) : 0, pp);

    gl_batch_source *src = open_source(&cc, g, pp_rank);
    /* gradients are reduced, and the distributed optimizer shards, over
     * DP x CP: context-parallel ranks hold the same weights and each
     * the gradient of its part of the sequences */
    int cp = c->layout.context_parallel_size;
    gl_comm *gradg = group(cp > 1 ? g->dp_cp : g->dp);
    /* expert parallelism: the rank's experts are those of its index in
     * the EP group; their gradients are summed over EDP (optim.h) */
    int ep_rank = group(g->ep) ? gl_comm_rank(g->ep) : 0;
    gl_model_plan *plan = gl_model_plan_new(&c->arch, &c->layout, tp_rank, pp_rank, ep_rank,
                                            c->data_parallel_size * cp);
    /* one schedule per batch size (a ramp-up's several) */
    gl_sched **by_m = gl_calloc((size_t)M + 1, sizeof *by_m);
    int *slots = gl_calloc((size_t)V, sizeof *slots);
    build_scheds(c, pp_rank, by_m, slots);
    gl_sched *sched = by_m[M];
    gl_model *m = gl_model_new(plan, d, group(g->tp), slots);
    m->ep = group(g->ep);               /* its index is ep_rank's */
    gl_model_set_cp(m, group(g->cp), g->me.cp);
    m->dropout_seed = (uint64_t)(unsigned)c->seed;
    m->moe_opts = c->moe;       /* the MoE losses' scale: model.h's default */
    m->moe_dp = group(g->dp);   /* global_aux_loss's counts */
    gl_model_fp8_enable(m, &c->fp8);
    gl_optim *o = gl_optim_new(c, m, gradg, group(g->edp), c->optim.use_distributed_optimizer);
    gl_model_init_weights(m, (uint64_t)(unsigned)c->seed, gl_optim_master_target(o));
    MPI_Comm mpi_world = g->world ? gl_comm_mpi_handle(g->world) : MPI_COMM_WORLD;
    gl_train_progress pr;
    memset(&pr, 0, sizeof pr);
    gl_lr_init(&pr.sched, c);          /* the command line's; --load may change it */
    if (c->ckpt.save)
        gl_train_save_prepare(c, mpi_world);
    if (c->ckpt.load)
        gl_train_load(c, mpi_world, m, o, &pr);
    if (c->ckpt.save)
        gl_train_save_guard(c, mpi_world, pr.iteration);
    gl_ckpt_async *pending = NULL;

    gl_batch_buf bb;
    gl_batch_buf_init(&bb, c, d, plan, dp_rank);
    bb.cp_rank = g->me.cp;
    gl_lr_sched lrs = pr.sched;
    long lr_samples = pr.lr_samples;   /* the scheduler's count (lr.h) */
    long step_mb = (long)c->layout.micro_batch_size * c->data_parallel_size;

    float *stats = d->ops->alloc(d, NSTATS * sizeof(float));
    float *vacc = d->ops->alloc(d, sizeof(float));
    int do_eval = eval_enabled(c, g, src, bb.has_embed || bb.has_head);
    if (rank == 0 && !do_eval && c->eval_iters > 0 && c->eval_interval > 0)
        gl_info0("validation: off (the valid split is empty: --split gives it no share)");
    float *memv = d->ops->alloc(d, sizeof(float));
    /* page-locked: the statistics' initial values upload without a wait
     * (rewritten only after the iteration's download has passed them) */
    float *init = d->ops->alloc_host(d, NSTATS * sizeof(float));
    int head_here = bb.has_head && tp_rank == 0;
    float *loss_acc = head_here ? stats + 1 : NULL;

    double flops_per_token = gl_config_flops_per_token(c);
    double peak = gl_peak_tflops(c->log.peak_tflops, d->name);
    long nparams = gl_arch_num_params(&c->arch);
    gl_info0("training: %ld parameters (%.2f M), %d layers, TP %d CP %d PP %d (x%d virtual) "
             "DP %d, %d micro-batches of %d x %d tokens per iteration%s%s", nparams,
             nparams / 1e6, c->arch.num_layers, c->layout.tensor_model_parallel_size, cp, pp, V,
             c->data_parallel_size, M, c->layout.micro_batch_size, c->arch.seq_length,
             plan->dm.sp ? ", sequence parallel" : "",
             o->dist ? ", distributed optimizer" : "");
    char form[256];
    gl_info0("model: %s", gl_arch_describe(&c->arch, form, sizeof form));
    gl_info0("vocabulary: %d from %s, padded to %d", c->arch.vocab_size,
             gl_config_vocab_source_text(c), c->arch.padded_vocab_size);
    char attn[256];
    gl_info0("attention: %s",
             gl_config_attention_describe(c, d->index >= 0, attn, sizeof attn));

    if (c->fp8.format != GL_FP8_OFF) {
        char how[160];
        gl_info0("FP8: %s in the decoder layers' linear products; MFU is reported against "
                 "the bf16 dense peak", gl_fp8_describe(&c->fp8, how, sizeof how));
    }
    report_activations(c, m, sched);
    if (o->overlap) {
        size_t big = 0;
        for (int j = 0; j < o->nbucket; j++)
            if (o->bucket[j].end - o->bucket[j].begin > big)
                big = o->bucket[j].end - o->bucket[j].begin;
        gl_info0("--overlap-grad-reduce: %d gradient buckets (largest %zu elements) "
                 "reduced over DP on the communication stream during the backward",
                 o->nbucket, big);
        if (o->gather)
            gl_info0("--overlap-param-gather: the updated weights are broadcast bucket "
                     "by bucket during the next forward");
    }
    if (o->fp8g)
        gl_info0("--fp8-param-gather: the weights' all-gather sends %zu bytes per DP rank, "
                 "not %zu: the FP8 weights as FP8 bytes, the rest in the compute dtype",
                 o->fp8_packet,
                 (o->shard_end - o->shard_begin + o->xshard_end - o->xshard_begin) *
                     d->act_bytes);

    FILE *json = NULL;
    if (rank == 0 && c->log.log_json) {
        json = fopen(c->log.log_json, "w");
        if (!json)
            gl_die("--log-json %s: cannot open for writing; give a writable path",
                   c->log.log_json);
    }

    /* clean stops, NaN/Inf steps, the hang watchdog, stragglers */
    gl_faults *F = gl_faults_init(c, b, mpi_world);
    gl_error err;
    gl_tfevents *tb = open_tensorboard(c, rank, world);
    if (c->ckpt.save && rank == 0 && gl_faults_exit_record_clear(c->ckpt.save, &err) < 0)
        gl_warn("%s: a job script may take it for this run's; remove it", err.text);
    long last_iter = pr.iteration;
    long consumed = pr.consumed_samples, skipped = pr.skipped, nan_iters = pr.nan_iters;
    if (pr.iteration >= c->train_iters)
        gl_info0("--load: the checkpoint is at iteration %ld, --train-iters is %ld: "
                 "nothing to train", pr.iteration, c->train_iters);
    double int_loss = 0, int_norm = 0, int_ms = 0, int_samples = 0;
    int int_n = 0, int_ok = 0;
    moe_step_stats int_moe = { 0, 0, 0, 0 };
    if (c->rampup_batch_size[0] && consumed <= c->rampup_batch_size[2])
        gl_info0("--rampup-batch-size: global batch %d at %ld consumed samples, growing by "
                 "%ld up to %d over the first %ld samples", gl_config_global_batch(c, consumed),
                 consumed, c->rampup_batch_size[1], c->global_batch_size,
                 c->rampup_batch_size[2]);
    for (long it = pr.iteration; it < c->train_iters; it++) {
        double t0 = gl_now();
        /* this iteration's batch: constant, or the ramp-up's */
        int G = gl_config_global_batch(c, consumed);
        int Mi = (int)(G / step_mb);
        gl_sched *si = by_m[Mi];
        if (!si)
            gl_die("internal error: no pipeline schedule for %d micro-batches", Mi);
        double count = gl_batch_buf_load(&bb, src, consumed, Mi, dp_rank);
        /* stats[3 + k] > 0 after the all-reduce: some rank has exit
         * reason bit k (faults.h), so the reasons ride on the iteration's
         * one all-reduce */
        unsigned mine = gl_faults_exit_flags(F);
        init[0] = init[1] = 0;
        init[2] = head_here ? (float)count : 0.0f;
        for (int k = 0; k < NEXITBITS; k++)
            init[3 + k] = (mine >> k) & 1u ? 1.0f : 0.0f;
        init[CLOCK_SLOT] = (float)gl_faults_exit_clock(F);
        d->ops->upload(d, stats, init, NSTATS * sizeof(float));
        gl_model_grads_begin(m);

        /* the schedule's blocking waits (MPI sends and receives, TP
         * collectives) bracket themselves in the comm layer */
        m->iteration = (uint32_t)it;     /* the dropout masks' key */
        gl_pipeline_run(si, m, group(g->pp), bb.mbs, loss_acc);
        gl_model_grads_end(m);
        if (rank == 0 && planted_nonfinite(it + 1)) {
            /* before the reduction: every rank's norm sees it */
            float nan = NAN;
            d->ops->upload(d, m->g, &nan, sizeof nan);
            gl_info("planted a NaN in the gradients at iteration %ld "
                    "(GRIDLM_TEST_NONFINITE)", it + 1);
        }
        finish_grads(c, g, m, o);
        gl_model_fp8_step_end(m, gradg);
        gl_optim_sumsq(o, stats);
        if (world > 1)
            gl_all_reduce(g->world, stats, stats, NSTATS, GL_DT_F32, GL_OP_SUM, d->stream);
        if (it + 1 < c->train_iters) {        /* while the device works */
            long next = consumed + G;
            gl_batch_buf_prefetch(&bb, src, next, (int)(gl_config_global_batch(c, next) / step_mb),
                                  dp_rank);
        }
        float h[NSTATS];
        /* on a GPU the download waits for every collective queued so far,
         * the world's all-reduce of the statistics last */
        gl_watch_begin_comm(F, "download of the iteration's statistics",
                            world > 1 ? g->world : NULL);
        d->ops->download(d, h, stats, sizeof h);
        gl_watch_end(F);
        unsigned agreed = 0;
        for (int k = 0; k < NEXITBITS; k++)
            agreed |= h[3 + k] > 0 ? 1u << k : 0u;

        /* the loss reported is the per-token mean (batch.h); the
         * gradients are divided by the normalisation's count: the
         * tokens, or the micro-batches of every DP rank times the B S
         * positions their weights carry */
        double N = h[2];
        double Dn = c->calculate_per_token_loss ? N
                  : (double)Mi * c->data_parallel_size * c->layout.micro_batch_size *
                    c->arch.seq_length;
        double loss = N > 0 ? h[1] / N : NAN;
        double norm = N > 0 ? sqrt(h[0]) / Dn : NAN;
        int bad = !isfinite(loss) || !isfinite(norm);
        skipped = pr.skipped + gl_faults_nonfinite(F, it + 1, bad);   /* may stop the job */
        nan_iters = pr.nan_iters + gl_faults_skipped(F);
        if (!bad) {
            double clip = 1.0;
            if (c->optim.clip_grad > 0 && norm > c->optim.clip_grad)
                clip = c->optim.clip_grad / (norm + 1e-6);
            gl_optim_step(o, gl_lr_at(&lrs, lr_samples), gl_lr_decoupled_at(&lrs, lr_samples),
                          clip / Dn);
            lr_samples += G;               /* Megatron: step(increment=batch) */
            int_loss += loss;
            int_norm += norm;
            int_ok++;
        } else {
            gl_optim_no_step(o);
        }
        if (plan->dm.E) {
            moe_step_stats ms;
            moe_step(c, g, m, o, Mi, !bad, &ms);
            int_moe.aux += ms.aux;
            int_moe.z += ms.z;
            int_moe.dropped += ms.dropped;
            if (ms.load_max > int_moe.load_max)
                int_moe.load_max = ms.load_max;
        }
        consumed += G;
        if (it + 1 == c->train_iters) {        /* the last step, timed in full */
            gl_watch_begin_comm(F, "device sync", world > 1 ? g->world : NULL);
            d->ops->sync(d);
            gl_watch_end(F);
        }
        int_ms += 1e3 * (gl_now() - t0);
        int_samples += G;
        int_n++;

        long iter = it + 1;
        last_iter = iter;
        const char *why = NULL;
        int stopping = gl_faults_exit_decide(F, iter, agreed, h[CLOCK_SLOT], &why);
        if (tb && iter % c->log.tensorboard_log_interval == 0) {
            size_t in_use = 0, mpeak = 0;
            if (d->ops->mem_info)
                d->ops->mem_info(d, &in_use, &mpeak, NULL);
            gl_tb_iteration s = {
                .iteration = iter, .consumed_samples = consumed,
                .lr = gl_lr_at(&lrs, o->steps), .loss = loss, .grad_norm = bad ? NAN : norm,
                .global_batch_size = c->global_batch_size, .world_size = world,
                .mem_in_use = (double)in_use, .mem_peak = (double)mpeak,
            };
            tensorboard_check(gl_log_tb_iteration(tb, &c->log, &s, &err), &err);
        }
        if (iter % c->log.log_interval == 0 || iter == c->train_iters || stopping) {
            gl_faults_step_times(F, int_ms / int_n / 1e3, iter, NULL);
            float mem = (float)mem_gib(d);
            d->ops->upload(d, memv, &mem, sizeof mem);
            if (world > 1)
                gl_all_reduce(g->world, memv, memv, 1, GL_DT_F32, GL_OP_MAX, d->stream);
            gl_watch_begin_comm(F, "download of the memory peak", world > 1 ? g->world : NULL);
            d->ops->download(d, &mem, memv, sizeof mem);
            gl_watch_end(F);
            if (rank == 0 || tb) {
                gl_log_record r = {
                    .iteration = iter, .train_iters = c->train_iters,
                    .consumed_samples = consumed, .elapsed_ms = int_ms / int_n,
                    .lr = gl_lr_at(&lrs, lr_samples), .global_batch_size = G,
                    .decoupled_lr = c->optim.decoupled_lr > 0
                                  ? gl_lr_decoupled_at(&lrs, lr_samples) : -1,
                    .loss = int_ok ? int_loss / int_ok : NAN,
                    .grad_norm = int_ok ? int_norm / int_ok : NAN,
                    .skipped = skipped, .nan_iters = nan_iters, .mem_gib = mem,
                    .on_cpu = d->index < 0,
                    .moe = plan->dm.E > 0,
                    .moe_aux_loss = c->moe.aux_loss_coeff > 0 &&
                                    c->moe.load_balancing_type != GL_MOE_LB_NONE
                                  ? int_moe.aux / int_n : -1,
                    .moe_z_loss = c->moe.z_loss_coeff > 0 ? int_moe.z / int_n : -1,
                    .moe_load_max = int_moe.load_max,
                    .moe_dropped = c->moe.capacity_factor > 0 ? int_moe.dropped / int_n : -1,
                };
                double sec = r.elapsed_ms / 1e3;
                /* the interval's mean batch: a ramp-up changes it */
                double tokens_per_iter = int_samples / int_n * c->arch.seq_length;
                r.tokens_per_sec_per_gpu = tokens_per_iter / (sec * world);
                r.tflops_per_gpu = flops_per_token * tokens_per_iter / (sec * world * 1e12);
                r.mfu = peak > 0 ? r.tflops_per_gpu / peak : -1;
                if (rank == 0) {
                    char line[1024];
                    gl_log_format_line(line, sizeof line, &r);
                    gl_info0("%s", line);
                    if (json)
                        gl_log_write_json(json, &r);
                }
                if (tb) {       /* this rank's own step time */
                    tensorboard_check(gl_log_tb_timers(tb, &c->log, &r, &err), &err);
                    tensorboard_check(gl_tfevents_flush(tb, &err), &err);
                }
            }
            int_loss = int_norm = int_ms = int_samples = 0;
            int_n = int_ok = 0;
            memset(&int_moe, 0, sizeof int_moe);
        }
        if (do_eval && (iter % c->eval_interval == 0 || iter == c->train_iters) && !stopping) {
            int periodic = iter % c->eval_interval == 0;
            long k = periodic ? iter / c->eval_interval - 1 : c->train_iters / c->eval_interval;
            gl_optim_weights_ready(o);
            double vl = validate(c, g, m, &bb, src, k, vacc, head_here);
            if (rank == 0) {
                char where[96];
                snprintf(where, sizeof where, periodic ? "iteration %ld"
                         : "iteration %ld on validation set", iter);
                report_valid(where, iter, vl, json);
            }
            if (tb)
                tensorboard_check(gl_log_tb_valid(tb, &c->log, iter, consumed, vl, &err), &err);
        }
        if (c->ckpt.save && ((c->ckpt.save_interval > 0 && iter % c->ckpt.save_interval == 0) ||
                        stopping || iter == c->train_iters)) {
            gl_train_progress now = { iter, consumed, skipped, nan_iters, lr_samples, lrs };
            gl_optim_weights_ready(o);
            gl_train_save(c, mpi_world, m, o, &now, &pending);
        }
        if (stopping) {
            gl_info0("exiting program after iteration %ld (%s)", iter, why ? why : "");
            break;
        }
        test_hold(F, iter);
    }

    gl_optim_weights_ready(o);
    gl_train_save_wait(&pending);
    /* a clean stop: the checkpoint is complete, say so for job scripts */
    if (c->ckpt.save && rank == 0 &&
        gl_faults_exit_record_write(F, c->ckpt.save, last_iter, c->train_iters, last_iter,
                                    &err) < 0)
        gl_warn("%s; a job script will go by the launcher's exit status", err.text);
    gl_faults_free(F);
    if (json && fclose(json) != 0)
        gl_die("--log-json %s: write failed", c->log.log_json);
    tensorboard_check(gl_tfevents_close(tb, &err), &err);
    d->ops->free(d, stats);
    d->ops->free(d, vacc);
    d->ops->free(d, memv);
    d->ops->sync(d);
    d->ops->free_host(d, init);
    gl_batch_close(src);
    gl_batch_buf_free(&bb);
    gl_optim_free(o);
    gl_model_free(m);
    for (int k = 0; k <= M; k++)
        gl_sched_free(by_m[k]);
    free(by_m);
    free(slots);
    gl_model_plan_free(plan);
    return 0;
}
