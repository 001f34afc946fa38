/*
 * checkpoint.c: --save and --load for the training loop, and the weights
 * and configuration a checkpoint gives gridlm-eval (checkpoint.h).
 */
#include <config.h>

#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "base/json.h"
#include "base/log.h"
#include "train/checkpoint.h"

/* The three kinds of per-parameter state a checkpoint holds. */
enum { K_MODEL = 0, K_EXP_AVG, K_EXP_AVG_SQ, K_COUNT };
static const char *const kind_prefix[K_COUNT] = { "model/", "optim/exp_avg/",
                                                  "optim/exp_avg_sq/" };

/* Delayed FP8 scaling's state (model.h: gl_model_fp8_state_get), in the
 * order of its host block: [len, nf], [1, nf] x 2, [len, nb], [1, nb] x 2. */
#define FP8_NT 6
static const char *const fp8_names[FP8_NT] = {
    "fp8/amax_history.forward", "fp8/scale.forward", "fp8/scale_inv.forward",
    "fp8/amax_history.backward", "fp8/scale.backward", "fp8/scale_inv.backward" };

/* ------------------------------------------------------------------ */
/* The logical tensors, in one order for every rank.                    */

typedef struct {
    char name[64];
    int ndim;
    long shape[2];
} logical;

/* Every logical tensor of the model that the architecture has, in the
 * parameter table's order (arch/tensors.h), which is a Hugging Face
 * checkpoint's: embedding (and learned positions), the layers, final norm,
 * LM head (untied only). */
static logical *logical_list(const gl_model_plan *p, int *n)
{
    const gl_arch *a = &p->arch;
    int L = p->dm.L, cap = GL_T_COUNT * (L + 1), k = 0;
    logical *t = gl_calloc((size_t)cap, sizeof *t);
    /* three passes over the table: what comes before the layers, the
     * layers one after the other, what comes after them */
    int first_layer_id = 0;
    while (!gl_tensor((gl_tensor_id)first_layer_id)->per_layer)
        first_layer_id++;
    for (int pass = 0; pass < 3; pass++)
        for (int l = 0; l < (pass == 1 ? L : 1); l++)
            for (int id = 0; id < GL_T_COUNT; id++) {
                const gl_tensor_info *ti = gl_tensor((gl_tensor_id)id);
                int here = pass == 1 ? ti->per_layer
                                     : !ti->per_layer && (id < first_layer_id) == (pass == 0);
                if (!here || !gl_tensor_present_at((gl_tensor_id)id, a, l))
                    continue;
                long shape[GL_TENSOR_MAXDIM];
                gl_tensor_name((gl_tensor_id)id, l, 0, t[k].name, sizeof t[k].name);
                int nd = gl_tensor_shape((gl_tensor_id)id, a, p->dm.Vpad, shape);
                gl_shape_view(nd, shape, ti->shard, t[k].shape);
                t[k].ndim = nd > 2 ? 2 : nd;
                k++;
            }
    *n = k;
    return t;
}

/* This rank's parameter called name: the original, not a tied copy,
 * unless copy_ok; NULL when it holds none. */
static const gl_param *find_param(const gl_model_plan *p, const char *name, int copy_ok)
{
    for (int i = 0; i < p->nparams; i++)
        if (!strcmp(p->param[i].name, name) && (copy_ok || !p->param[i].tied_copy))
            return &p->param[i];
    return NULL;
}

/* Vocabulary tensors: their padding depends on the layout. */
static int is_vocab(const gl_param *q)
{
    return !strcmp(q->name, "embedding.weight") || !strcmp(q->name, "lm_head.weight");
}

/* The slab of q's TP piece as a ckpt tensor (data left to the caller). */
static gl_ckpt_tensor piece_slab(const gl_param *q, const char *full)
{
    gl_ckpt_tensor t;
    memset(&t, 0, sizeof t);
    t.name = full;
    t.ndim = q->ndim > 2 ? 2 : q->ndim;     /* stacked experts: their 2-D view */
    gl_param_view(q, t.shape, t.count, t.offset);
    return t;
}

/* ------------------------------------------------------------------ */
/* The configuration as JSON.                                           */

static const char *const lr_style_names[] = {
    [GL_LR_CONSTANT] = "constant", [GL_LR_LINEAR] = "linear", [GL_LR_COSINE] = "cosine",
    [GL_LR_INVERSE_SQRT] = "inverse-square-root",
};

static const char *lr_style_name(gl_lr_style s)
{
    return (unsigned)s < sizeof lr_style_names / sizeof *lr_style_names ? lr_style_names[s]
                                                                       : "unknown";
}

/* -1 when the name is none of them. */
static int lr_style_from_name(const char *name)
{
    for (int k = 0; k < (int)(sizeof lr_style_names / sizeof *lr_style_names); k++)
        if (!strcmp(name, lr_style_names[k]))
            return k;
    return -1;
}

char *gl_train_config_json(const gl_config *c)
{
    json_t *j = json_object();
#define I(k, v) json_object_set_new(j, k, json_integer((json_int_t)(v)))
#define F(k, v) json_object_set_new(j, k, json_real(v))
#define B(k, v) json_object_set_new(j, k, json_boolean(v))
#define S(k, v) json_object_set_new(j, k, json_string(v))
    gl_arch_to_json(&c->arch, j);
    I("tensor_model_parallel_size", c->layout.tensor_model_parallel_size);
    I("pipeline_model_parallel_size", c->layout.pipeline_model_parallel_size);
    I("data_parallel_size", c->data_parallel_size);
    I("num_layers_per_virtual_pipeline_stage", c->layout.num_layers_per_virtual_pipeline_stage);
    B("sequence_parallel", c->layout.sequence_parallel);
    B("use_distributed_optimizer", c->optim.use_distributed_optimizer);
    I("micro_batch_size", c->layout.micro_batch_size);
    I("global_batch_size", c->global_batch_size);
    I("train_iters", c->train_iters);
    I("seed", c->seed);
    F("lr", c->optim.lr);
    F("min_lr", c->optim.min_lr);
    I("lr_warmup_iters", c->optim.lr_warmup_iters);
    I("lr_decay_iters", c->optim.lr_decay_iters);
    S("lr_decay_style", lr_style_name(c->optim.lr_decay_style));
    F("weight_decay", c->optim.weight_decay);
    F("adam_beta1", c->optim.adam_beta1);
    F("adam_beta2", c->optim.adam_beta2);
    F("adam_eps", c->optim.adam_eps);
    F("clip_grad", c->optim.clip_grad);
#undef I
#undef F
#undef B
#undef S
    char *s = json_dumps(j, JSON_PRESERVE_ORDER | JSON_INDENT(1));
    json_decref(j);
    if (!s)
        gl_die("checkpoint: cannot format the configuration as JSON (out of memory?)");
    return s;
}

int gl_train_config_from_json(const char *text, gl_config *c, gl_error *err)
{
    json_error_t je;
    json_t *j = text ? json_loads(text, 0, &je) : NULL;
    int seq = c->arch.seq_length, padded = c->arch.padded_vocab_size;
    int rc = gl_arch_from_json(&c->arch, j, err);
    json_decref(j);
    /* The run's sequence length wins (it shapes no weight; learned
     * positions bound it by max_position_embeddings, which the checks
     * after compare); the padding follows this run's TP
     * (gl_config_finish). */
    if (seq)
        c->arch.seq_length = seq;
    c->arch.padded_vocab_size = padded;
    return rc;
}

/* An integer root attribute, or dflt when it is missing. */
static long long attr_i64(gl_ckpt *ck, const char *key, long long dflt)
{
    long long v;
    return gl_ckpt_get_i64(ck, key, &v, NULL) == GL_CKPT_OK ? v : dflt;
}

int gl_train_peek(const char *load, gl_train_peek_info *info, gl_error *err)
{
    gl_ckpt *ck;
    memset(info, 0, sizeof *info);
    int rc = gl_ckpt_open_alone(load, &ck, err);
    if (rc != GL_CKPT_OK)
        return rc;
    info->file = gl_strdup(gl_ckpt_path(ck));
    info->config = gl_ckpt_get_str(ck, "config");
    info->iteration = gl_ckpt_iteration(ck);
    info->has_optimizer_state = (int)attr_i64(ck, "has_optimizer_state", 0);
    gl_ckpt_close(ck);
    if (!info->config) {
        gl_errprintf(err, "%s has no \"config\" attribute (the model's shape): it was not "
                     "written by gridlm-train or gridlm-ckpt import-hf", info->file);
        gl_train_peek_free(info);
        return GL_CKPT_ERR;
    }
    return GL_CKPT_OK;
}

void gl_train_peek_free(gl_train_peek_info *info)
{
    free(info->config);
    free(info->file);
    memset(info, 0, sizeof *info);
}

void gl_train_check_optim_state(const gl_config *c, int has_optimizer_state,
                                const char *file)
{
    int load_optim = !c->ckpt.finetune && !c->ckpt.no_load_optim;
    if (load_optim && !has_optimizer_state)
        gl_die_code(2, "--load %s: the checkpoint has no optimizer state (saved with "
                    "--no-save-optim, or imported): add --no-load-optim to start AdamW "
                    "afresh, or --finetune", file);
}

void gl_train_check_model(const gl_config *c, const char *text, const char *file)
{
    gl_config k;
    gl_error err;
    gl_config_defaults(&k);
    if (gl_train_config_from_json(text, &k, &err) != 0)
        gl_die_code(2, "--load %s: %s", file, err.text);
    char diffs[2048];
    int n = gl_arch_diff(&k.arch, &c->arch, diffs, sizeof diffs);
    if (n)
        gl_die_code(2, "--load %s: the checkpoint's model differs from this run's in %d "
                    "setting%s: %s: give this run the checkpoint's values (gridlm-ckpt info "
                    "%s shows them)", file, n, n == 1 ? "" : "s", diffs, file);
}

/* ------------------------------------------------------------------ */
/* Saving.                                                              */

/* Host copies of this rank's DP shard [sb, se) of master weights and
 * moments: what it writes. */
static float *download_shard(gl_optim *o, const float *src, size_t sb, size_t se)
{
    float *h = gl_malloc((se > sb ? se - sb : 1) * sizeof(float));
    if (se > sb)
        o->d->ops->download(o->d, h, src + sb, (se - sb) * sizeof(float));
    return h;
}

void gl_train_save_prepare(const gl_config *c, MPI_Comm world)
{
    int rank;
    MPI_Comm_rank(world, &rank);
    if (rank != 0)
        return;
    gl_error e;
    if (gl_file_check_writable(c->ckpt.save, &e) < 0)
        gl_die_code(2, "--save %s: %s: give a directory this job can write", c->ckpt.save, e.text);
    if (gl_ckpt_clean_temps(c->ckpt.save, &e) < 0)
        gl_die("--save %s: %s", c->ckpt.save, e.text);
}

void gl_train_save_guard(const gl_config *c, MPI_Comm world, long start)
{
    int rank;
    MPI_Comm_rank(world, &rank);
    if (rank == 0)
        gl_train_check_save_dir(c, start);
}

void gl_train_check_save_dir(const gl_config *c, long start)
{
    long *its;
    int n = gl_ckpt_list(c->ckpt.save, &its), newer = 0;
    while (newer < n && its[newer] > start)
        newer++;
    if (newer) {
        char f[4200];
        gl_ckpt_file_name(f, sizeof f, c->ckpt.save, its[0]);
        char more[64] = "";
        if (newer > 1)
            snprintf(more, sizeof more, " (and %d more)", newer - 1);
        gl_die_code(2, "--save %s holds %s%s, beyond iteration %ld where this run starts%s: "
                    "this run would write over such files or move the tracker back to "
                    "older ones: resume from the newest with --load %s, give --save a new "
                    "directory, or move those files away", c->ckpt.save, f, more, start,
                    c->ckpt.finetune ? " (--finetune)" : "", f);
    }
    free(its);
}

/* Test hook (t/train-files.t): GRIDLM_TEST_SAVE_SIGNAL=ITER:SIG makes
 * every rank raise SIG (KILL, TERM or INT) after the first tensor of the
 * synchronous save of iteration ITER: a save stopped midway, at a point
 * the test can name, without racing a timer. */
static int save_signal(long iteration)
{
    const char *s = getenv("GRIDLM_TEST_SAVE_SIGNAL");
    if (!s || !*s)
        return 0;
    char *end;
    long it = strtol(s, &end, 10);
    if (*end != ':' || it != iteration)
        return 0;
    return !strcmp(end + 1, "KILL") ? SIGKILL : !strcmp(end + 1, "TERM") ? SIGTERM
         : !strcmp(end + 1, "INT") ? SIGINT : 0;
}

static void raise_after_first(void *arg, int i, int n)
{
    (void)n;
    if (i == 0) {
        gl_info0("test hook: signal %d in the middle of the save (GRIDLM_TEST_SAVE_SIGNAL)",
                 *(int *)arg);
        raise(*(int *)arg);
    }
}

void gl_train_save_wait(gl_ckpt_async **pending)
{
    if (!pending || !*pending)
        return;
    gl_ckpt_save_stats st;
    gl_error err;
    int rc = gl_ckpt_async_wait(*pending, &st, &err);
    *pending = NULL;
    if (rc != GL_CKPT_OK)
        gl_die("--async-save: %s", err.text);
    gl_info0("  asynchronous save to %s done: %.3f GB in %.2f s", st.path, st.bytes / 1e9,
             st.seconds);
}

void gl_train_save(const gl_config *c, MPI_Comm world, gl_model *m, gl_optim *o,
                   const gl_train_progress *pr, gl_ckpt_async **pending)
{
    const gl_model_plan *p = m->plan;
    const gl_model_dims *dm = &p->dm;
    int with_optim = !c->ckpt.no_save_optim;
    int nkinds = with_optim ? K_COUNT : 1;
    size_t sb, se;              /* the indexes of the owned elements (optim.h) */
    gl_optim_owned_span(o, &sb, &se);

    gl_train_save_wait(pending);
    o->d->ops->sync(o->d);
    float *host[K_COUNT] = { NULL, NULL, NULL };
    host[K_MODEL] = download_shard(o, o->master, sb, se);
    if (with_optim) {
        host[K_EXP_AVG] = download_shard(o, o->mom1, sb, se);
        host[K_EXP_AVG_SQ] = download_shard(o, o->mom2, sb, se);
    }

    int nlog;
    logical *lg = logical_list(p, &nlog);
    int nt = nlog * nkinds;
    gl_ckpt_tensor *ts = gl_calloc((size_t)nt, sizeof *ts);
    char (*names)[GL_CKPT_MAXNAME] = gl_calloc((size_t)nt, sizeof *names);
    for (int k = 0; k < nkinds; k++)
        for (int i = 0; i < nlog; i++) {
            int ti = k * nlog + i;
            gl_ckpt_tensor *t = &ts[ti];
            snprintf(names[ti], sizeof names[ti], "%s%s", kind_prefix[k], lg[i].name);
            const gl_param *q = find_param(p, lg[i].name, 0);
            if (q) {
                *t = piece_slab(q, names[ti]);
            } else {
                t->name = names[ti];
                t->ndim = lg[i].ndim;
                t->shape[0] = lg[i].shape[0];
                t->shape[1] = lg[i].shape[1];
            }
            /* the part of the piece this rank owns (its DP shard's, an
             * expert's its EDP shard's: optim.h), written by TP rank 0
             * alone for replicated tensors */
            size_t a = 0, b = 0;
            if (q && (q->shard != GL_SHARD_NONE || dm->tp_rank == 0))
                gl_optim_owned(o, q, &a, &b);
            if (b > a) {
                t->writes = 1;
                t->first = (long)(a - q->offset);
                t->nelem = (long)(b - a);
                t->data = host[k] + (gl_optim_index(o, a) - sb);
                if (t->nelem == (long)q->count) {
                    t->first = 0;
                    t->nelem = 0;          /* the whole slab */
                }
            } else {
                t->writes = 0;
                t->count[0] = t->count[1] = 0;
                t->offset[0] = t->offset[1] = 0;
                t->data = NULL;
            }
        }

    /* delayed FP8 scaling's state: logical tensors assembled over every
     * rank (each holds its layers' columns, zeros elsewhere), written by
     * rank 0 */
    int flen, fnf, fnb;
    float *fp8 = NULL;
    if (gl_model_fp8_state_dims(m, &flen, &fnf, &fnb)) {
        size_t nfl = (size_t)(flen + 2) * (fnf + fnb);
        fp8 = gl_model_fp8_state_get(m);
        MPI_Allreduce(MPI_IN_PLACE, fp8, (int)nfl, MPI_FLOAT, MPI_MAX, world);
        int rank;
        MPI_Comm_rank(world, &rank);
        ts = gl_realloc(ts, (size_t)(nt + FP8_NT) * sizeof *ts);
        float *p8 = fp8;
        for (int i = 0; i < FP8_NT; i++) {
            gl_ckpt_tensor *t = &ts[nt + i];
            int n = i < 3 ? fnf : fnb;
            memset(t, 0, sizeof *t);
            t->name = fp8_names[i];
            t->ndim = 2;
            t->shape[0] = i % 3 == 0 ? flen : 1;
            t->shape[1] = n;
            t->writes = rank == 0;
            if (t->writes) {
                t->count[0] = t->shape[0];
                t->count[1] = n;
                t->data = p8;
            }
            p8 += t->shape[0] * n;
        }
        nt += FP8_NT;
    }

    char *cfg = gl_train_config_json(c);
    char layout[160];
    snprintf(layout, sizeof layout, "TP %d PP %d (x%d virtual) DP %d%s%s",
             c->layout.tensor_model_parallel_size, c->layout.pipeline_model_parallel_size,
             c->layout.virtual_pipeline_size, c->data_parallel_size,
             c->layout.sequence_parallel ? ", sequence parallel" : "",
             c->optim.use_distributed_optimizer ? ", distributed optimizer" : "");
    gl_ckpt_attr attrs[] = {
        { .key = "config", .type = GL_CKPT_STR, .s = cfg },
        { .key = "consumed_train_samples", .type = GL_CKPT_I64, .i = pr->consumed_samples },
        { .key = "optimizer_steps", .type = GL_CKPT_I64, .i = o->steps },
        { .key = "skipped_iterations", .type = GL_CKPT_I64, .i = pr->skipped },
        { .key = "nan_iterations", .type = GL_CKPT_I64, .i = pr->nan_iters },
        { .key = "rng_seed", .type = GL_CKPT_I64, .i = c->seed },
        { .key = "has_optimizer_state", .type = GL_CKPT_I64, .i = with_optim },
        { .key = "saved_layout", .type = GL_CKPT_STR, .s = layout },
        { .key = "opt_param_scheduler_num_steps", .type = GL_CKPT_I64, .i = pr->lr_samples },
        { .key = "opt_param_scheduler_max_lr", .type = GL_CKPT_F64, .f = pr->sched.max_lr },
        { .key = "opt_param_scheduler_min_lr", .type = GL_CKPT_F64, .f = pr->sched.min_lr },
        { .key = "opt_param_scheduler_lr_warmup_steps", .type = GL_CKPT_F64,
          .f = pr->sched.warmup },
        { .key = "opt_param_scheduler_lr_decay_steps", .type = GL_CKPT_I64,
          .i = pr->sched.decay },
        { .key = "opt_param_scheduler_lr_decay_style", .type = GL_CKPT_STR,
          .s = lr_style_name(pr->sched.style) },
        { .key = "opt_param_scheduler_weight_decay", .type = GL_CKPT_F64,
          .f = c->optim.weight_decay },
    };
    int na = (int)(sizeof attrs / sizeof attrs[0]);

    int rc;
    gl_error err;
    if (c->ckpt.async_save) {
        rc = gl_ckpt_save_async(world, c->ckpt.save, pr->iteration, ts, nt, attrs, na, pending,
                                &err);
        if (rc != GL_CKPT_OK)
            gl_die("--save %s: %s", c->ckpt.save, err.text);
        gl_info0("saving checkpoint at iteration %7ld to %s (asynchronously%s)",
                 pr->iteration, c->ckpt.save,
                 gl_ckpt_async_threaded(*pending) ? "" : ": MPI lacks MPI_THREAD_MULTIPLE, "
                 "so it ran in this thread");
    } else {
        gl_ckpt_save_stats st;
        int sig = save_signal(pr->iteration);
        gl_ckpt_save_opts hook = { .after_tensor = raise_after_first, .arg = &sig };
        rc = gl_ckpt_save(world, c->ckpt.save, pr->iteration, ts, nt, attrs, na,
                          sig ? &hook : NULL, &st, &err);
        if (rc != GL_CKPT_OK)
            gl_die("--save %s: %s", c->ckpt.save, err.text);
        gl_info0("successfully saved checkpoint from iteration %7ld to %s (%.3f GB in %.2f s)",
                 pr->iteration, st.path, st.bytes / 1e9, st.seconds);
    }
    free(cfg);
    free(fp8);
    free(names);
    free(ts);
    free(lg);
    for (int k = 0; k < K_COUNT; k++)
        free(host[k]);
}

/* ------------------------------------------------------------------ */
/* Loading.                                                             */

/* Delayed FP8 scaling's state from ck when it has one of the run's
 * shape; otherwise the fresh state stays (a bf16 checkpoint, another
 * recipe or history length), said once. */
static void load_fp8(gl_ckpt *ck, gl_model *m, const char *file)
{
    int flen, fnf, fnb;
    if (!gl_model_fp8_state_dims(m, &flen, &fnf, &fnb))
        return;
    int i0 = gl_ckpt_find(ck, fp8_names[0]);
    const gl_ckpt_info *in = i0 >= 0 ? gl_ckpt_tensor_info(ck, i0) : NULL;
    if (!in || in->ndim != 2 || in->shape[0] != flen || in->shape[1] != fnf) {
        gl_info0("--load %s: no FP8 state of this run's shape (--fp8-amax-history-len %d, "
                 "%d layers) in the checkpoint: the amax histories start empty and the "
                 "scales at 1", file, flen, m->plan->dm.L);
        return;
    }
    size_t nfl = (size_t)(flen + 2) * (fnf + fnb);
    float *host = gl_malloc(nfl * sizeof(float)), *p8 = host;
    for (int i = 0; i < FP8_NT; i++) {
        gl_ckpt_tensor t;
        memset(&t, 0, sizeof t);
        t.name = fp8_names[i];
        t.ndim = 2;
        t.shape[0] = t.count[0] = i % 3 == 0 ? flen : 1;
        t.shape[1] = t.count[1] = i < 3 ? fnf : fnb;
        t.data = p8;
        gl_error err;
        if (gl_ckpt_read(ck, &t, &err) != GL_CKPT_OK)
            gl_die("--load: %s", err.text);
        p8 += t.shape[0] * t.shape[1];
    }
    gl_model_fp8_state_set(m, host);
    free(host);
}

/* Read q's whole TP piece of prefix+name into host (count elements). */
static void read_piece(gl_ckpt *ck, const gl_param *q, const char *prefix, float *host)
{
    char full[GL_CKPT_MAXNAME];
    snprintf(full, sizeof full, "%s%s", prefix, q->name);
    gl_ckpt_tensor t = piece_slab(q, full);
    t.data = host;
    gl_error err;
    int rc = is_vocab(q) ? gl_ckpt_read_padded(ck, &t, &err) : gl_ckpt_read(ck, &t, &err);
    if (rc != GL_CKPT_OK)
        gl_die("--load: %s", err.text);
}

/* Read elements [a, b) of q's piece (flat-buffer offsets) into host. */
static void read_part(gl_ckpt *ck, const gl_param *q, const char *prefix, size_t a,
                      size_t b, float *host, float *piece_tmp)
{
    if (is_vocab(q) || (a == q->offset && b == q->offset + q->count)) {
        /* padded tensors are read whole (ckpt.h), then cut */
        float *dst = (a == q->offset && b == q->offset + q->count) ? host : piece_tmp;
        read_piece(ck, q, prefix, dst);
        if (dst != host)
            memcpy(host, piece_tmp + (a - q->offset), (b - a) * sizeof(float));
        return;
    }
    char full[GL_CKPT_MAXNAME];
    snprintf(full, sizeof full, "%s%s", prefix, q->name);
    gl_ckpt_tensor t = piece_slab(q, full);
    t.first = (long)(a - q->offset);
    t.nelem = (long)(b - a);
    t.data = host;
    gl_error err;
    if (gl_ckpt_read(ck, &t, &err) != GL_CKPT_OK)
        gl_die("--load: %s", err.text);
}

static size_t max_count(const gl_model_plan *p)
{
    size_t mx = 1;
    for (int i = 0; i < p->nparams; i++)
        if (p->param[i].count > mx)
            mx = p->param[i].count;
    return mx;
}

static void piece_fill(void *arg, const gl_param *q, float *host)
{
    read_piece(arg, q, kind_prefix[K_MODEL], host);
}

void gl_ckpt_load_weights(gl_ckpt *ck, gl_model *m, const gl_master *mr)
{
    gl_model_set_weights(m, piece_fill, ck, mr);
}

/* The moments of the update ranges (optim.h: mr). */
static void load_moments(gl_ckpt *ck, gl_optim *o)
{
    const gl_model_plan *p = o->m->plan;
    gl_dev *d = o->d;
    size_t mx = max_count(p);
    float *host = gl_malloc(mx * sizeof(float)), *tmp = gl_malloc(mx * sizeof(float));
    for (int i = 0; i < p->nparams; i++)
        for (int u = 0; u < o->mr.n; u++) {
            const gl_param *q = &p->param[i];
            size_t a = q->offset > o->mr.begin[u] ? q->offset : o->mr.begin[u];
            size_t b = q->offset + q->count < o->mr.end[u] ? q->offset + q->count
                                                             : o->mr.end[u];
            if (b <= a)
                continue;
            size_t ix = gl_optim_index(o, a);
            read_part(ck, q, kind_prefix[K_EXP_AVG], a, b, host, tmp);
            d->ops->upload(d, o->mom1 + ix, host, (b - a) * sizeof(float));
            read_part(ck, q, kind_prefix[K_EXP_AVG_SQ], a, b, host, tmp);
            d->ops->upload(d, o->mom2 + ix, host, (b - a) * sizeof(float));
            d->ops->sync(d);
        }
    free(host);
    free(tmp);
}

/* Megatron's _check_and_set for one scheduler value: the command line's
 * (--override-opt_param-scheduler), the checkpoint's
 * (--use-checkpoint-opt_param-scheduler), or, by default, both must be
 * equal.  Returns the value to use. */
static double sched_value(const gl_config *c, const char *file, const char *what,
                          double mine, double saved)
{
    if (c->optim.override_opt_param_scheduler || mine == saved)
        return mine;
    if (c->optim.use_checkpoint_opt_param_scheduler) {
        gl_info0("--load: using the checkpoint's %s %.9g (this run's is %.9g)", what, saved,
                 mine);
        return saved;
    }
    gl_die_code(2, "--load %s: the learning-rate schedule differs from the checkpoint's: "
                "%s %.9g here, %.9g there%s; add --use-checkpoint-opt_param-scheduler to "
                "take the checkpoint's, or --override-opt_param-scheduler to take this "
                "command line's", file, what, mine, saved,
                strstr(what, "decay (") ? " (the decay defaults to --train-iters or "
                "--train-samples: a run resumed to train longer keeps it with "
                "--lr-decay-iters or --lr-decay-samples)" : "");
    return mine;
}

/* The schedule's state from the checkpoint (lr.h, checkpoint.h).  Older
 * checkpoints lack it: the command line's schedule, with the count from
 * the optimizer steps at the current global batch. */
static void load_sched(gl_ckpt *ck, const gl_config *c, const char *file, long steps,
                       gl_train_progress *pr)
{
    gl_lr_sched *s = &pr->sched;
    double f;
    pr->lr_samples = attr_i64(ck, "opt_param_scheduler_num_steps",
                              steps * (long long)c->global_batch_size);
    if (gl_ckpt_get_f64(ck, "opt_param_scheduler_max_lr", &f, NULL) != GL_CKPT_OK)
        return;
    s->max_lr = sched_value(c, file, "learning rate", s->max_lr, f);
    if (gl_ckpt_get_f64(ck, "opt_param_scheduler_min_lr", &f, NULL) == GL_CKPT_OK)
        s->min_lr = sched_value(c, file, "minimum learning rate", s->min_lr, f);
    if (gl_ckpt_get_f64(ck, "opt_param_scheduler_lr_warmup_steps", &f, NULL) == GL_CKPT_OK)
        s->warmup = sched_value(c, file, "warm-up (samples)", s->warmup, f);
    long long n = attr_i64(ck, "opt_param_scheduler_lr_decay_steps", s->decay);
    s->decay = (long)sched_value(c, file, "decay (samples)", (double)s->decay, (double)n);
    char *style = gl_ckpt_get_str(ck, "opt_param_scheduler_lr_decay_style");
    if (style && strcmp(style, lr_style_name(s->style))) {
        int k = lr_style_from_name(style);
        if (k < 0)
            gl_die_code(2, "--load %s: unknown learning-rate decay style '%s' in the "
                        "checkpoint", file, style);
        s->style = (gl_lr_style)sched_value(c, file, "decay style (0 constant, 1 linear, "
                                            "2 cosine, 3 inverse-square-root)",
                                            (double)s->style, (double)k);
    }
    free(style);
    if (gl_ckpt_get_f64(ck, "opt_param_scheduler_weight_decay", &f, NULL) == GL_CKPT_OK &&
        sched_value(c, file, "weight decay", c->optim.weight_decay, f) != c->optim.weight_decay)
        gl_die_code(2, "--load %s: --use-checkpoint-opt_param-scheduler: the checkpoint's "
                    "weight decay %g differs from --weight-decay %g, and gridlm takes the "
                    "weight decay from the command line only: give --weight-decay %g",
                    file, f, c->optim.weight_decay, f);
}

int gl_train_load(const gl_config *c, MPI_Comm world, gl_model *m, gl_optim *o,
                  gl_train_progress *pr)
{
    memset(pr, 0, sizeof *pr);
    gl_lr_init(&pr->sched, c);
    gl_ckpt *ck = NULL;
    gl_error err;
    int rc = gl_ckpt_open(world, c->ckpt.load, GL_CKPT_VERIFY, &ck, &err);
    if (rc == GL_CKPT_NONE) {
        gl_info0("--load %s: no checkpoint there yet; training from the start", c->ckpt.load);
        return 0;
    }
    if (rc != GL_CKPT_OK)
        gl_die("--load %s: %s", c->ckpt.load, err.text);
    const char *file = gl_ckpt_path(ck);
    char *cfg = gl_ckpt_get_str(ck, "config");
    gl_train_check_model(c, cfg, file);
    free(cfg);

    int load_optim = !c->ckpt.finetune && !c->ckpt.no_load_optim;
    gl_train_check_optim_state(c, (int)attr_i64(ck, "has_optimizer_state", 0), file);

    gl_ckpt_load_weights(ck, m, gl_optim_master_target(o));
    load_fp8(ck, m, file);
    if (load_optim) {
        load_moments(ck, o);
        o->steps = attr_i64(ck, "optimizer_steps", 0);
        load_sched(ck, c, file, o->steps, pr);
    }
    if (!c->ckpt.finetune) {
        pr->iteration = gl_ckpt_iteration(ck);
        pr->consumed_samples = attr_i64(ck, "consumed_train_samples",
                                        pr->iteration * c->global_batch_size);
        pr->skipped = attr_i64(ck, "skipped_iterations", 0);
        pr->nan_iters = attr_i64(ck, "nan_iterations", 0);
    }
    long long seed = attr_i64(ck, "rng_seed", c->seed);
    if (seed != c->seed && !c->ckpt.no_load_rng && !c->ckpt.finetune && gl_log_rank() <= 0)
        gl_warn("--load %s: the checkpoint was trained with --seed %lld, this run has "
                 "--seed %d: data order and --mock-data samples follow --seed (gridlm's "
                 "randomness is keyed by the seed, there is no generator state to "
                 "restore); resume with --seed %lld to continue the same stream, or add "
                 "--no-load-rng to silence this", file, seed, c->seed, seed);
    gl_info0("loaded checkpoint %s: iteration %ld%s%s", file, gl_ckpt_iteration(ck),
             load_optim ? "" : ", optimizer state not loaded",
             c->ckpt.finetune ? " (--finetune: starting at iteration 0)" : "");
    gl_ckpt_close(ck);
    return 1;
}
