/*
 * trainlog.c: the progress line and JSON record (trainlog.h).
 */
#include <config.h>

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "train/trainlog.h"

#define APPEND(...) do { \
        size_t used_ = strlen(buf); \
        if (used_ < len) snprintf(buf + used_, len - used_, __VA_ARGS__); \
    } while (0)

void gl_log_format_line(char *buf, size_t len, const gl_log_record *r)
{
    char stamp[32];
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &tm);
    buf[0] = 0;
    APPEND(" [%s] iteration %8ld/%8ld |", stamp, r->iteration, r->train_iters);
    APPEND(" consumed samples: %12ld |", r->consumed_samples);
    APPEND(" elapsed time per iteration (ms): %.1f |", r->elapsed_ms);
    if (r->on_cpu)
        APPEND(" throughput per rank (GFLOP/s/rank): %.2f |", 1e3 * r->tflops_per_gpu);
    else
        APPEND(" throughput per GPU (TFLOP/s/GPU): %.1f |", r->tflops_per_gpu);
    APPEND(" learning rate: %.6E |", r->lr);
    if (r->decoupled_lr >= 0)
        APPEND(" decoupled learning rate: %.6E |", r->decoupled_lr);
    APPEND(" global batch size: %5d |", r->global_batch_size);
    APPEND(" lm loss: %.6E |", r->loss);
    if (r->moe && r->moe_aux_loss >= 0)
        APPEND(" load balancing loss: %.6E |", r->moe_aux_loss);
    if (r->moe && r->moe_z_loss >= 0)
        APPEND(" z loss: %.6E |", r->moe_z_loss);
    if (r->moe)
        APPEND(" expert load max/mean: %.3f |", r->moe_load_max);
    if (r->moe && r->moe_dropped >= 0)
        APPEND(" dropped tokens: %.4f%% |", 100.0 * r->moe_dropped);
    APPEND(" grad norm: %.3f |", r->grad_norm);
    APPEND(" number of skipped iterations: %3ld |", r->skipped);
    APPEND(" number of nan iterations: %3ld |", r->nan_iters);
    APPEND(" tokens per second per %s: %.1f |", r->on_cpu ? "rank" : "GPU",
           r->tokens_per_sec_per_gpu);
    if (r->on_cpu)
        ;                       /* MFU is against a GPU's peak */
    else if (r->mfu >= 0)
        APPEND(" MFU: %.2f%% |", 100.0 * r->mfu);
    else
        APPEND(" MFU: n/a |");
    APPEND(" memory (GiB): %.2f |", r->mem_gib);
}

/* A JSON number, or null for what JSON cannot say (NaN, Inf) or what is
 * unknown. */
static void num(FILE *f, const char *key, double v, int known, int last)
{
    if (known && isfinite(v))
        fprintf(f, "\"%s\": %.9g%s", key, v, last ? "" : ", ");
    else
        fprintf(f, "\"%s\": null%s", key, last ? "" : ", ");
}

void gl_log_write_json(FILE *f, const gl_log_record *r)
{
    fprintf(f, "{\"iteration\": %ld, \"consumed_samples\": %ld, ", r->iteration,
            r->consumed_samples);
    num(f, "loss", r->loss, 1, 0);
    num(f, "grad_norm", r->grad_norm, 1, 0);
    if (r->moe && r->moe_aux_loss >= 0)
        num(f, "moe_aux_loss", r->moe_aux_loss, 1, 0);
    if (r->moe && r->moe_z_loss >= 0)
        num(f, "moe_z_loss", r->moe_z_loss, 1, 0);
    if (r->moe)
        num(f, "moe_load_max", r->moe_load_max, 1, 0);
    if (r->moe && r->moe_dropped >= 0)
        num(f, "moe_dropped", r->moe_dropped, 1, 0);
    num(f, "lr", r->lr, 1, 0);
    if (r->decoupled_lr >= 0)
        num(f, "decoupled_lr", r->decoupled_lr, 1, 0);
    num(f, "elapsed_ms", r->elapsed_ms, 1, 0);
    num(f, "tokens_per_sec_per_gpu", r->tokens_per_sec_per_gpu, 1, 0);
    num(f, "tflops_per_gpu", r->tflops_per_gpu, 1, 0);
    num(f, "mfu", r->mfu, r->mfu >= 0, 0);
    num(f, "mem_gib", r->mem_gib, 1, 0);
    fprintf(f, "\"skipped_iterations\": %ld, \"nan_iterations\": %ld, "
            "\"global_batch_size\": %d}\n", r->skipped, r->nan_iters, r->global_batch_size);
    fflush(f);
}

double gl_log_ppl(double loss)
{
    return exp(loss < 20.0 ? loss : 20.0);
}

void gl_log_format_valid(char *buf, size_t len, const char *where, double loss)
{
    buf[0] = 0;
    APPEND(" validation loss at %s |", where);
    APPEND(" lm loss value: %.6E |", loss);
    APPEND(" lm loss PPL: %.6E |", gl_log_ppl(loss));
}

void gl_log_write_valid_json(FILE *f, long iteration, double loss)
{
    fprintf(f, "{\"iteration\": %ld, ", iteration);
    num(f, "valid_loss", loss, 1, 0);
    num(f, "valid_ppl", gl_log_ppl(loss), 1, 1);
    fprintf(f, "}\n");
    fflush(f);
}

/* One scalar at the iteration and, when vs_samples, "TAG vs samples" at
 * the consumed samples, as Megatron-LM writes its pairs. */
static int tb_pair(gl_tfevents *w, const char *tag, double v, long iteration, long samples,
                   int vs_samples, gl_error *err)
{
    char vs[160];
    if (gl_tfevents_scalar(w, tag, iteration, v, err) < 0)
        return -1;
    if (!vs_samples)
        return 0;
    snprintf(vs, sizeof vs, "%s vs samples", tag);
    return gl_tfevents_scalar(w, vs, samples, v, err);
}

int gl_log_tb_iteration(gl_tfevents *w, const gl_log_opts *o, const gl_tb_iteration *s,
                        gl_error *err)
{
    long i = s->iteration, n = s->consumed_samples;
    int rc = 0;
    if (!o->no_log_learning_rate_to_tensorboard)
        rc |= tb_pair(w, "learning-rate", s->lr, i, n, 1, err);
    rc |= tb_pair(w, "batch-size", s->global_batch_size, i, n, 1, err);
    rc |= tb_pair(w, "lm loss", s->loss, i, n, 1, err);
    if (!o->no_log_loss_scale_to_tensorboard)
        rc |= tb_pair(w, "loss-scale", 1.0, i, n, 1, err);
    if (o->log_world_size_to_tensorboard)
        rc |= tb_pair(w, "world-size", s->world_size, i, n, 1, err);
    if (isfinite(s->grad_norm))
        rc |= tb_pair(w, "grad-norm", s->grad_norm, i, n, 1, err);
    if (o->log_memory_to_tensorboard) {
        rc |= tb_pair(w, "mem-reserved-bytes", s->mem_in_use, i, n, 0, err);
        rc |= tb_pair(w, "mem-allocated-bytes", s->mem_in_use, i, n, 0, err);
        rc |= tb_pair(w, "mem-max-allocated-bytes", s->mem_peak, i, n, 0, err);
    }
    return rc ? -1 : 0;
}

int gl_log_tb_timers(gl_tfevents *w, const gl_log_opts *o, const gl_log_record *r,
                     gl_error *err)
{
    int rc = 0;
    if (!o->log_timers_to_tensorboard)
        return 0;
    rc |= tb_pair(w, "iteration-time", r->elapsed_ms / 1e3, r->iteration, 0, 0, err);
    rc |= tb_pair(w, "throughput", r->tflops_per_gpu, r->iteration, 0, 0, err);
    return rc ? -1 : 0;
}

int gl_log_tb_valid(gl_tfevents *w, const gl_log_opts *o, long iteration,
                    long consumed_samples, double loss, gl_error *err)
{
    int rc = tb_pair(w, "lm loss validation", loss, iteration, consumed_samples, 1, err);
    if (o->log_validation_ppl_to_tensorboard)
        rc |= tb_pair(w, "lm loss validation ppl", gl_log_ppl(loss), iteration,
                      consumed_samples, 1, err);
    return rc ? -1 : 0;
}
