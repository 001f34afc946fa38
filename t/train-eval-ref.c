/*
 * train-eval-ref: the validation loss of a freshly initialised model,
 * computed directly: t/model-ref.h's double-precision forward over the
 * --mock-data valid split's samples, one micro-batch at a time, on one
 * process without the pipeline.  Used by t/train-eval.t.
 *
 *   train-eval-ref K GRIDLM-TRAIN-FLAGS...
 *
 * prints the mean loss over every target of evaluation K (the valid
 * split's global batches [K E, (K + 1) E), E = --eval-iters), as
 * gridlm-train's evaluation K should report it for the initial weights.
 */
#include <config.h>

#include <stdio.h>
#include <stdlib.h>

#include "base/log.h"
#include "device/ops.h"
#include "model-ref.h"
#include "model/model.h"
#include "train/batch.h"
#include "train/run_config.h"

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: train-eval-ref K GRIDLM-TRAIN-FLAGS...\n");
        return 2;
    }
    long k = atol(argv[1]);
    argv[1] = argv[0];
    argc--;
    argv++;

    gl_config c;
    gl_config_defaults(&c);
    gl_config_parse(&c, argc, argv);
    /* one process: TP = PP = DP = 1, one micro-batch at a time */
    c.layout.tensor_model_parallel_size = c.layout.pipeline_model_parallel_size = 1;
    c.layout.num_layers_per_virtual_pipeline_stage = 0;
    c.layout.sequence_parallel = 0;
    int gbs = c.global_batch_size;
    c.global_batch_size = 0;
    gl_config_finish(&c, 1, 1);
    if (!c.data.mock_data)
        gl_die("train-eval-ref: only --mock-data");

    gl_model_plan *p = gl_model_plan_new(&c.arch, &c.layout, 0, 0, 0, 1);
    gl_dev *d = gl_dev_open_cpu();
    int one = 1;
    gl_model *m = gl_model_new(p, d, NULL, &one);
    gl_model_init_weights(m, (uint64_t)(unsigned)c.seed, NULL);
    ref_model R = { p, m->w };

    gl_batch_source *src = gl_batch_mock(&c);
    int B = p->dm.B, S = p->dm.S, n = B * S;
    int32_t *tok = malloc((size_t)B * (S + 1) * sizeof *tok);
    int32_t *ids = malloc((size_t)n * sizeof *ids), *tg = malloc((size_t)n * sizeof *tg);
    float *mask = malloc((size_t)n * sizeof *mask);
    long first = k * c.eval_iters * gbs, total = c.eval_iters * gbs;
    if (total % B)
        gl_die("train-eval-ref: the global batch is not a multiple of the micro-batch");
    double sum = 0, count = 0;
    for (long s0 = first; s0 < first + total; s0 += B) {
        src->valid_batch(src, s0, B, tok, mask);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < S; t++) {
                ids[b * S + t] = tok[b * (S + 1) + t];
                tg[b * S + t] = tok[b * (S + 1) + t + 1];
            }
        double cnt;
        sum += ref_loss_sum(&c.arch, &R, ids, tg, mask, &cnt);
        count += cnt;
    }
    printf("%.9g\n", sum / count);
    gl_batch_close(src);
    free(tok); free(ids); free(tg); free(mask);
    gl_model_free(m);
    gl_model_plan_free(p);
    gl_dev_close(d);
    gl_config_free(&c);
    return 0;
}
