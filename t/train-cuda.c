/*
 * train-cuda: the training loop on one GPU against the CPU reference.
 *
 * Trains the tiny model of issue 3, widened to head size 64 (the CUDA
 * attention kernels take 64 or 128), for 20 iterations on the CUDA device
 * (bf16 weights and activations, fp32 master weights, gradients and
 * moments) and on the CPU device (fp32), one rank each, through
 * gl_train_run() itself, and compares the logged loss of every iteration.
 * The loss of random tokens sits near log(512) = 6.24 and falls by about
 * 0.02 over the run, so two checks: every loss within 1e-3 relative
 * (0.006; bf16 rounding gave 1e-4 on an H200), and the fall over the run
 * within 10% of the CPU's (a wrong gradient changes it); and the
 * validation losses after iterations 10 and 20 (forward-only pipeline)
 * within 1e-3 of the CPU's.
 *
 * Then activation recomputation on the GPU (it was verified on the CPU
 * only, t/train-recompute.t): the same run with --recompute-granularity
 * full --recompute-method uniform --recompute-num-layers 1, with full
 * block 2 (layers 1-2 of the 4 recomputed), and with selective, each
 * against the GPU run without recomputation.  A recomputed forward runs
 * the same deterministic kernels on the same inputs, so it writes the
 * same bits as the first forward, and every loss, gradient norm and
 * validation loss must agree within 1e-6 relative (in practice exactly:
 * the logs print 9 digits; a diag line gives the largest difference).
 * These four runs use the native attention kernels (GRIDLM_ATTENTION=
 * native): cuDNN's fused attention backward adds dq in fp32 through
 * atomics in arrival order, so two runs of the same step may differ in
 * the last bits whether or not they recompute.  A second run with the
 * default attention, compared with the first, says in a diag line how
 * much (nothing is asserted there).
 *
 * Then the Qwen3 form (--qk-layernorm: an RMSNorm over each head of q and
 * k, head_rmsnorm's kernels) with a head size of 128, not hidden / heads
 * (--kv-channels 128), on the GPU against the CPU with the same bounds as
 * the first comparison.
 *
 * Then a mixture-of-experts form against the CPU, and the same through
 * the expert-parallel dispatcher's code at EP 1 (GRIDLM_MOE_DISPATCH=1,
 * moe.c), with native attention: the direct path's numbers within 1e-6
 * (the same kernels on the same rows: in practice exactly), and the
 * CPU's within 1e-3.
 *
 * Then FP8 against the CPU back end's exact emulation of the same
 * recipe: delayed, tensorwise and blockwise scaling on the dense model
 * (blockwise with an FFN width of 768, a multiple of its 128-wide
 * tiles), and delayed and blockwise scaling on the MoE form, whose
 * experts' products run in FP8 too.  The GPU quantizes bf16 values, the CPU fp32 ones, so
 * a value near a rounding boundary may take the neighbouring FP8 code
 * (and delayed or tensorwise scales differ in the last bits): every loss
 * and validation loss within 2e-3 relative (on an H200 up to 6.5e-4, an
 * absolute 0.004, a fifth of the run's fall), and the fall over the run,
 * from the mean of the first 5 losses to that of the last 5 so that
 * this noise averages out, within 10% of the CPU's (a wrong FP8 gradient
 * changes it; the single-iteration falls differed by up to 13%, the
 * 5-iteration ones by up to 7%).  The MoE form under each recipe on 1
 * and on 4 lanes (GRIDLM_MOE_LANES): the same bits.
 *
 * cuBLASLt tuning is off (GRIDLM_GEMM_TUNE=0) so that every run takes
 * the same algorithms.  Prints "1..0 # SKIP" without a GPU.  MPI is initialised (a world of
 * one) because the loop makes a few host-side MPI calls of its own
 * (validation sums, faults.h).
 *
 * With arguments, it instead trains whatever model they describe on the
 * GPU (gridlm-train's flags, world of one rank) and prints the log lines:
 * a quick throughput reading that needs no MPI launcher.
 */
#include <config.h>

#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "boot/boot.h"
#include "boot/groups.h"
#include "device/ops.h"
#include "tap.h"
#include "train/run_config.h"
#include "train/train.h"

static const char *tiny[] = {
    "train-cuda", "--mock-data", "--seed", "1234", "--num-layers", "4",
    "--hidden-size", "256", "--num-attention-heads", "4", "--num-query-groups", "2",
    "--ffn-hidden-size", "704", "--seq-length", "64", "--vocab-size", "512",
    "--micro-batch-size", "2", "--global-batch-size", "16", "--train-iters", "20",
    "--lr", "1e-3", "--lr-warmup-iters", "2", "--log-interval", "1",
    "--eval-interval", "10", "--eval-iters", "2",
    /* the Llama form (t/model-flags.sh) */
    "--swiglu", "--normalization", "RMSNorm", "--position-embedding-type", "rope",
    "--disable-bias-linear", "--attention-dropout", "0", "--hidden-dropout", "0",
};

/* One rank, no communicators: every group has size 1, which the loop
 * treats as "no communication". */
static void train(int argc, char **argv, gl_dev *d, const char *json)
{
    gl_config c;
    gl_boot b;
    gl_groups g;
    memset(&b, 0, sizeof b);
    memset(&g, 0, sizeof g);
    b.size = 1;
    b.local_size = 1;
    gl_config_defaults(&c);
    gl_config_parse(&c, argc, argv);
    gl_config_finish(&c, 1, 1);
    if (json)
        c.log.log_json = gl_strdup(json);
    gl_train_run(&c, &b, &g, d);
    gl_config_free(&c);
}

/* Flags added to tiny for the recomputation runs. */
static const char *const recompute_flags[][6] = {
    {"--recompute-granularity", "full", "--recompute-method", "uniform",
     "--recompute-num-layers", "1"},
    {"--recompute-granularity", "full", "--recompute-method", "block",
     "--recompute-num-layers", "2"},
    {"--recompute-granularity", "selective"},
};
static const char *const recompute_names[] = {
    "full uniform 1", "full block 2", "selective",
};

/* argv = tiny plus the flags of extra (at most 8; NULL entries end it);
 * returns its length. */
static int tiny_plus(const char **argv, const char *const *extra, int nextra)
{
    int n = (int)(sizeof tiny / sizeof tiny[0]);
    memcpy(argv, tiny, sizeof tiny);
    for (int i = 0; i < nextra && i < 8 && extra[i]; i++)
        argv[n++] = extra[i];
    return n;
}

/* tiny plus the flags of extra on a freshly opened GPU, logging to json;
 * native: with GRIDLM_ATTENTION=native (the variable is read when the
 * device opens). */
static void gpu_run(const char *const *extra, int nextra, int native,
                    const char *json)
{
    const char *argv[sizeof tiny / sizeof tiny[0] + 8];
    int n = tiny_plus(argv, extra, nextra);
    const char *env = getenv("GRIDLM_ATTENTION");
    char *old = env ? gl_strdup(env) : NULL;
    if (native)
        setenv("GRIDLM_ATTENTION", "native", 1);
    gl_dev *gpu = gl_dev_open_cuda(0);
    if (old)
        setenv("GRIDLM_ATTENTION", old, 1);
    else
        unsetenv("GRIDLM_ATTENTION");
    free(old);
    train(n, (char **)argv, gpu, json);
    gl_dev_close(gpu);
}

/* tiny plus the flags of extra on a fresh GPU (logging to jg) and on
 * the CPU device (to jc). */
static void both_devices(const char *const *extra, int nextra, const char *jg,
                         const char *jc)
{
    const char *argv[sizeof tiny / sizeof tiny[0] + 8];
    int n = tiny_plus(argv, extra, nextra);
    gpu_run(extra, nextra, 0, jg);
    gl_dev *cpu = gl_dev_open_cpu();
    train(n, (char **)argv, cpu, jc);
    gl_dev_close(cpu);
}

/* The value of key in each line of a JSON log that has it. */
static int read_key(const char *path, const char *key, double *loss, int max)
{
    FILE *f = fopen(path, "r");
    char line[2048];
    int n = 0;
    if (!f)
        return 0;
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    while (n < max && fgets(line, sizeof line, f)) {
        char *p = strstr(line, pat);
        if (p)
            loss[n++] = strtod(p + strlen(pat), NULL);
    }
    fclose(f);
    return n;
}

/* The largest relative difference between the values of key in two logs,
 * of which each must have want; INFINITY when one has another count or a
 * NaN. */
static double log_diff(const char *a, const char *b, const char *key, int want)
{
    double va[32], vb[32], worst = 0;
    int na = read_key(a, key, va, 32), nb = read_key(b, key, vb, 32);
    if (na != want || nb != want)
        return INFINITY;
    for (int i = 0; i < na; i++) {
        double r = va[i] == vb[i] ? 0 : fabs(va[i] - vb[i]) / fabs(vb[i]);
        if (!(r <= worst))
            worst = isnan(r) ? INFINITY : r;
    }
    return worst;
}

/* How much the loss of a 20-iteration log falls: the mean of its first
 * 5 losses less the mean of its last 5 (0 when the log is short). */
static double fall5(const char *path)
{
    double v[32], a = 0, b = 0;
    if (read_key(path, "loss", v, 32) != 20)
        return 0;
    for (int i = 0; i < 5; i++) {
        a += v[i];
        b += v[15 + i];
    }
    return (a - b) / 5;
}

/* The worst of log_diff over the logged loss, grad_norm (20 each) and
 * valid_loss (2). */
static double run_diff(const char *a, const char *b)
{
    double d = log_diff(a, b, "loss", 20), g = log_diff(a, b, "grad_norm", 20);
    double v = log_diff(a, b, "valid_loss", 2);
    return fmax(d, fmax(g, v));
}

int main(int argc, char **argv)
{
    if (gl_cuda_device_count() < 1)
        skip_all("no CUDA device");
    MPI_Init(&argc, &argv);
    /* The comparisons need every run to take the same cuBLASLt algorithm
     * for a shape; tuning (GRIDLM_GEMM_TUNE, gemm.cu) picks by measured
     * time, so it is off for them (on for a throughput reading). */
    if (argc == 1)
        setenv("GRIDLM_GEMM_TUNE", "0", 1);
    gl_dev *gpu = gl_dev_open_cuda(0);
    if (argc > 1) {
        train(argc, argv, gpu, NULL);
        gl_dev_close(gpu);
        MPI_Finalize();
        return 0;
    }
    plan(21);
    char dir[] = "/tmp/train-cuda.XXXXXX", jg[64], jc[64];
    if (!mkdtemp(dir))
        bail_out("mkdtemp failed");
    snprintf(jg, sizeof jg, "%s/gpu.jsonl", dir);
    snprintf(jc, sizeof jc, "%s/cpu.jsonl", dir);
    int n = (int)(sizeof tiny / sizeof tiny[0]);
    train(n, (char **)tiny, gpu, jg);
    gl_dev_close(gpu);
    gl_dev *cpu = gl_dev_open_cpu();
    train(n, (char **)tiny, cpu, jc);
    gl_dev_close(cpu);

    double lg[32], lc[32], worst = 0;
    int ng = read_key(jg, "loss", lg, 32), nc = read_key(jc, "loss", lc, 32);
    ok(ng == 20 && nc == 20, "20 logged iterations on each device (%d, %d)", ng, nc);
    for (int i = 0; i < ng && i < nc; i++) {
        double r = fabs(lg[i] - lc[i]) / fabs(lc[i]);
        if (!(r <= worst))
            worst = isnan(r) ? INFINITY : r;
    }
    ok(worst < 1e-3, "bf16 GPU losses within %.2e of the fp32 CPU ones", worst);
    double fall_g = ng == 20 ? lg[0] - lg[19] : 0, fall_c = nc == 20 ? lc[0] - lc[19] : 0;
    ok(fall_c > 0 && fabs(fall_g - fall_c) < 0.1 * fall_c, "the loss falls by %.5f on the "
       "GPU, %.5f on the CPU", fall_g, fall_c);
    diag("first loss: gpu %.6f cpu %.6f; last: gpu %.6f cpu %.6f", lg[0], lc[0],
         ng ? lg[ng - 1] : 0, nc ? lc[nc - 1] : 0);
    double vg[4], vc[4];
    int nvg = read_key(jg, "valid_loss", vg, 4), nvc = read_key(jc, "valid_loss", vc, 4);
    ok(nvg == 2 && nvc == 2 && fabs(vg[0] - vc[0]) < 1e-3 * vc[0] &&
       fabs(vg[1] - vc[1]) < 1e-3 * vc[1], "validation losses: gpu %.6f %.6f, cpu %.6f %.6f",
       nvg > 0 ? vg[0] : 0, nvg > 1 ? vg[1] : 0, nvc > 0 ? vc[0] : 0, nvc > 1 ? vc[1] : 0);

    /* recomputation against the run without, native attention */
    char jn[64], jr[64];
    snprintf(jn, sizeof jn, "%s/native.jsonl", dir);
    gpu_run(NULL, 0, 1, jn);
    for (int k = 0; k < 3; k++) {
        snprintf(jr, sizeof jr, "%s/recompute%d.jsonl", dir, k);
        gpu_run(recompute_flags[k], 6, 1, jr);
        double r = run_diff(jr, jn);
        ok(r <= 1e-6, "GPU, %s: losses, grad norms and validation losses equal "
           "those without recomputation", recompute_names[k]);
        diag("%s: largest relative difference %.3e", recompute_names[k], r);
        unlink(jr);
    }
    /* the Qwen3 form, GPU against CPU */
    static const char *const qwen3[] = {"--qk-layernorm", "--kv-channels", "128"};
    char jqg[64], jqc[64];
    snprintf(jqg, sizeof jqg, "%s/qwen3-gpu.jsonl", dir);
    snprintf(jqc, sizeof jqc, "%s/qwen3-cpu.jsonl", dir);
    both_devices(qwen3, 3, jqg, jqc);
    double ql = log_diff(jqg, jqc, "loss", 20), qv = log_diff(jqg, jqc, "valid_loss", 2);
    ok(ql < 1e-3, "Qwen3 form (QK norm, head size 128): bf16 GPU losses within %.2e of the "
       "fp32 CPU ones", ql);
    ok(qv < 1e-3, "Qwen3 form: validation losses within %.2e of the CPU's", qv);
    unlink(jqg);
    unlink(jqc);

    /* a mixture-of-experts form (Mixtral-like, top-2 of 4 with the
     * load-balancing loss), GPU against CPU */
    static const char *const moe[] = {"--num-experts", "4", "--moe-router-topk", "2",
                                      "--moe-ffn-hidden-size", "256",
                                      "--moe-aux-loss-coeff", "0.01"};
    snprintf(jqg, sizeof jqg, "%s/moe-gpu.jsonl", dir);
    snprintf(jqc, sizeof jqc, "%s/moe-cpu.jsonl", dir);
    both_devices(moe, 8, jqg, jqc);
    double ml = log_diff(jqg, jqc, "loss", 20), ma = log_diff(jqg, jqc, "moe_aux_loss", 20);
    ok(ml < 1e-3, "MoE (4 experts, top 2): bf16 GPU losses within %.2e of the fp32 CPU "
       "ones", ml);
    ok(ma < 1e-2, "MoE: the load-balancing losses within %.2e of the CPU's", ma);

    /* the MoE layers through the expert-parallel dispatcher's code at
     * EP 1 (GRIDLM_MOE_DISPATCH=1, read when the model is made: the
     * counts and the exchanges as copies, the sort to the local experts
     * and back, moe.c), native attention, against the direct path */
    char jd[64], jdd[64];
    snprintf(jd, sizeof jd, "%s/moe-direct.jsonl", dir);
    snprintf(jdd, sizeof jdd, "%s/moe-dispatch.jsonl", dir);
    unsetenv("GRIDLM_MOE_DISPATCH");
    gpu_run(moe, 8, 1, jd);
    setenv("GRIDLM_MOE_DISPATCH", "1", 1);
    gpu_run(moe, 8, 1, jdd);
    unsetenv("GRIDLM_MOE_DISPATCH");
    double dd = fmax(run_diff(jdd, jd), log_diff(jdd, jd, "moe_aux_loss", 20));
    ok(dd <= 1e-6, "MoE, the dispatch path at EP 1: losses, grad norms, validation and "
       "load-balancing losses equal the direct path's (largest relative difference %.3e)",
       dd);
    double dc = log_diff(jdd, jqc, "loss", 20);
    ok(dc < 1e-3, "MoE, the dispatch path at EP 1: bf16 GPU losses within %.2e of the fp32 "
       "CPU ones", dc);
    unlink(jd);
    unlink(jdd);
    unlink(jqg);
    unlink(jqc);

    /* FP8 (issue 12): each recipe on the GPU (cuBLASLt's FP8 products,
     * the quantization kernels) against the CPU's exact emulation of the
     * same recipe, on the dense model and on the MoE one (the experts'
     * products in FP8 too) */
    static const char *const fp8_runs[][8] = {
        {"--bf16", "--fp8-format", "hybrid", "--fp8-recipe", "delayed",
         "--fp8-amax-history-len", "16"},
        {"--bf16", "--fp8-format", "hybrid", "--fp8-recipe", "tensorwise"},
        {"--bf16", "--fp8-format", "hybrid", "--fp8-recipe", "blockwise",
         "--ffn-hidden-size", "768"},
        {"--bf16", "--fp8-format", "hybrid", "--fp8-recipe", "delayed", "--num-experts", "4"},
        {"--bf16", "--fp8-format", "hybrid", "--fp8-recipe", "blockwise", "--num-experts", "4"},
    };
    static const char *const fp8_names[] = {
        "FP8 delayed", "FP8 tensorwise", "FP8 blockwise (ffn 768)", "MoE (4 experts) FP8 delayed",
        "MoE (4 experts) FP8 blockwise",
    };
    for (int k = 0; k < 5; k++) {
        int nx = 0;
        while (nx < 8 && fp8_runs[k][nx])
            nx++;
        snprintf(jqg, sizeof jqg, "%s/fp8-gpu.jsonl", dir);
        snprintf(jqc, sizeof jqc, "%s/fp8-cpu.jsonl", dir);
        both_devices(fp8_runs[k], nx, jqg, jqc);
        double fl = log_diff(jqg, jqc, "loss", 20), fv = log_diff(jqg, jqc, "valid_loss", 2);
        double fg = fall5(jqg), fc = fall5(jqc);
        ok(fl < 2e-3 && fv < 2e-3 && fc > 0 && fabs(fg - fc) < 0.1 * fc,
           "%s: GPU losses within %.2e of the CPU emulation's, validation within %.2e; "
           "the loss falls by %.5f on the GPU, %.5f on the CPU (means of the first and "
           "last 5)", fp8_names[k], fl, fv, fg, fc);
        unlink(jqg);
        unlink(jqc);
    }

    /* The FP8 experts' products on 1 lane and on 4 (ops.h's lanes): each
     * lane quantizes into its own scratch and every product picks its
     * algorithm by its shape, so the bits must not change */
    static const char *const lane_runs[][8] = {
        {"--bf16", "--fp8-format", "hybrid", "--fp8-recipe", "delayed", "--num-experts", "4"},
        {"--bf16", "--fp8-format", "hybrid", "--fp8-recipe", "tensorwise", "--num-experts", "4"},
        {"--bf16", "--fp8-format", "hybrid", "--fp8-recipe", "blockwise", "--num-experts", "4"},
    };
    static const char *const lane_names[] = {
        "MoE (4 experts) FP8 delayed", "MoE (4 experts) FP8 tensorwise",
        "MoE (4 experts) FP8 blockwise",
    };
    for (int k = 0; k < 3; k++) {
        int nx = 0;
        while (nx < 8 && lane_runs[k][nx])
            nx++;
        snprintf(jqg, sizeof jqg, "%s/lanes1.jsonl", dir);
        snprintf(jqc, sizeof jqc, "%s/lanes4.jsonl", dir);
        setenv("GRIDLM_MOE_LANES", "1", 1);
        gpu_run(lane_runs[k], nx, 0, jqg);
        setenv("GRIDLM_MOE_LANES", "4", 1);
        gpu_run(lane_runs[k], nx, 0, jqc);
        unsetenv("GRIDLM_MOE_LANES");
        double dl = run_diff(jqg, jqc);
        ok(dl == 0, "%s: the experts on 1 and on 4 lanes give the same losses, gradient "
           "norms and validation losses bit for bit (largest relative difference %.3e)",
           lane_names[k], dl);
        unlink(jqg);
        unlink(jqc);
    }

    /* the default attention twice: is it repeatable? */
    snprintf(jr, sizeof jr, "%s/repeat.jsonl", dir);
    gpu_run(NULL, 0, 0, jr);
    diag("default attention, the same run twice: largest relative difference "
         "%.3e", run_diff(jr, jg));
    unlink(jr);
    unlink(jn);
    unlink(jg);
    unlink(jc);
    rmdir(dir);
    int rc = done_testing();
    MPI_Finalize();
    return rc;
}
