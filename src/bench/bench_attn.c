/*
 * bench_attn.c: causal attention throughput through ops->attn_fwd and
 * ops->attn_bwd, with q, k and v as views into one fused QKV buffer per
 * token [q (Hq D) | k (Hkv D) | v (Hkv D)], as the model lays them out.
 *
 * FLOPs follow FlashAttention's benchmark (benchmarks/benchmark_flash_
 * attention.py in Dao-AILab/flash-attention), so figures compare with its
 * published ones:
 *
 *     fwd = 4 B S^2 Hq D / 2     two products (Q K^T and P V) of 2 S^2 D
 *                                 each per head, halved by the causal mask
 *     bwd = 2.5 fwd              five products of that size (S = Q K^T
 *                                 recomputed, dV = P^T dO, dP = dO V^T,
 *                                 dQ = dS K, dK = dS^T Q) against two
 * Grouped-query attention does not change the count (it is set by Hq).
 * Megatron's model FLOPs (reference/flops.md), and so gridlm-train's
 * MFU, count the backward as 2 x forward instead: a kernel at X TFLOP/s
 * here moves the training MFU by less than X suggests.
 *
 * With --check 1 (the default) 16 sampled output rows of the forward are
 * compared with a double-precision softmax(q k^T scale) v on the host.
 */
#include <config.h>
#include "bench/bench.h"
#include "base/log.h"

#include <jansson.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEQS_CPU "64,128"
#define SEQS_GPU "1024,2048,4096,8192,16384"

/* Everything one call needs. */
typedef struct {
    gl_dev *d;
    int B, S, Hq, Hkv, D, W;        /* W = (Hq + 2 Hkv) D, the token stride */
    float scale;
    char *qkv, *dqkv, *o, *dout;    /* act buffers */
    float *lse;
} attn_call;

static void *q_of(const attn_call *a, char *base)
{
    (void)a;
    return base;
}
static void *k_of(const attn_call *a, char *base)
{
    return base + (size_t)a->Hq * a->D * a->d->act_bytes;
}
static void *v_of(const attn_call *a, char *base)
{
    return base + (size_t)(a->Hq + a->Hkv) * a->D * a->d->act_bytes;
}

static void run_fwd(void *arg)
{
    attn_call *a = arg;
    int ldo = a->Hq * a->D;
    a->d->ops->attn_fwd(a->d, a->o, ldo, a->lse, q_of(a, a->qkv), a->W, k_of(a, a->qkv), a->W,
                        v_of(a, a->qkv), a->W, a->B, a->S, a->Hq, a->Hkv, a->D, a->scale, NULL);
}

static void run_bwd(void *arg)
{
    attn_call *a = arg;
    int ldo = a->Hq * a->D;
    a->d->ops->attn_bwd(a->d, q_of(a, a->dqkv), k_of(a, a->dqkv), v_of(a, a->dqkv), a->W,
                        a->dout, ldo, a->o, ldo, a->lse, q_of(a, a->qkv), a->W,
                        k_of(a, a->qkv), a->W, v_of(a, a->qkv), a->W, a->B, a->S, a->Hq,
                        a->Hkv, a->D, a->scale, NULL);
}

/* Element col of token (b, t) of the fused QKV buffer, as the device
 * holds it. */
static double qkv_value(const attn_call *a, long seed, int b, int t, int col, int bf16)
{
    float v = gl_bench_value(seed, 3, ((size_t)b * a->S + t) * a->W + col);
    return bf16 ? gl_bench_round_bf16(v) : v;
}

/* Output row (b, t, head h) against softmax(q k^T scale) v in double.
 * The error allowed, 2^-6 of the largest |v| for bf16 (1e-4 for fp32),
 * covers bf16 rounding of P and of the output; a wrong mask or a wrong
 * kv head moves the row by a sizeable fraction of |v|. */
static void check_fwd(const attn_call *a, long seed)
{
    gl_dev *d = a->d;
    int bf16 = d->act == GL_DT_BF16, D = a->D;
    double *s = gl_malloc(a->S * sizeof *s), *ref = gl_malloc(D * sizeof *ref);
    float *got = gl_malloc(D * sizeof *got);
    double tol = bf16 ? 1.0 / 64 : 1e-4;
    for (int n = 0; n < 16; n++) {
        int b = (int)((0.5 + 0.5 * gl_bench_value(seed, 200, n)) * a->B) % a->B;
        int t = (int)((0.5 + 0.5 * gl_bench_value(seed, 201, n)) * a->S) % a->S;
        int h = (int)((0.5 + 0.5 * gl_bench_value(seed, 202, n)) * a->Hq) % a->Hq;
        int g = h / (a->Hq / a->Hkv);
        int kcol = (a->Hq + g) * D, vcol = (a->Hq + a->Hkv + g) * D;
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j <= t; j++) {
            double dot = 0;
            for (int e = 0; e < D; e++)
                dot += qkv_value(a, seed, b, t, h * D + e, bf16) *
                       qkv_value(a, seed, b, j, kcol + e, bf16);
            s[j] = dot * a->scale;
            mx = fmax(mx, s[j]);
        }
        memset(ref, 0, D * sizeof *ref);
        for (int j = 0; j <= t; j++) {
            double p = exp(s[j] - mx);
            sum += p;
            for (int e = 0; e < D; e++)
                ref[e] += p * qkv_value(a, seed, b, j, vcol + e, bf16);
        }
        gl_bench_download_act(d, got, a->o + (((size_t)b * a->S + t) * a->Hq + h) * D *
                                               d->act_bytes, D);
        for (int e = 0; e < D; e++)
            if (!(fabs(got[e] - ref[e] / sum) <= tol))
                gl_die("attention check failed: output (batch %d, token %d, head %d)[%d] = "
                       "%.6g, the host reference gives %.6g: the device's attn_fwd is wrong",
                       b, t, h, e, got[e], ref[e] / sum);
    }
    free(s);
    free(ref);
    free(got);
}

/* The command line alone (before the job starts); the defaults that
 * depend on the device are always consistent. */
void gl_bench_attention_validate(const gl_bench_opts *o)
{
    long *seqs;
    if (o->heads && o->kv_heads && o->heads % o->kv_heads)
        gl_die_code(2, "--num-query-groups %d does not divide --num-attention-heads %d: "
                    "give a divisor (e.g. %d)", o->kv_heads, o->heads, o->heads);
    if (o->seqs) {
        gl_bench_parse_sizes("seq-lengths", o->seqs, &seqs);
        free(seqs);
    }
}

void gl_bench_attention(gl_bench_ctx *ctx)
{
    const gl_bench_opts *o = ctx->o;
    gl_dev *d = ctx->dev;
    int cpu = d->index < 0;
    int B = o->batch ? o->batch : 1;
    int Hq = o->heads ? o->heads : cpu ? 4 : 32;
    /* Given heads without groups: plain multi-head attention. */
    int Hkv = o->kv_heads ? o->kv_heads : o->heads ? Hq : cpu ? 2 : 8;
    int D = o->head_dim ? o->head_dim : cpu ? 32 : 128;
    /* Still possible: groups given, heads left at the device default. */
    if (Hq % Hkv)
        gl_die_code(2, "--num-query-groups %d does not divide --num-attention-heads %d: "
                    "give a divisor (e.g. %d)", Hkv, Hq, Hq);
    long *seqs;
    int nseq = gl_bench_parse_sizes("seq-lengths", o->seqs ? o->seqs : cpu ? SEQS_CPU : SEQS_GPU,
                                    &seqs);
    char dn[32];

    if (gl_bench_rank0() && !o->json) {
        int size;
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        printf("# gridlm-bench attention: device %s, %s, causal, batch %d, %d query heads, "
               "%d kv heads, head dim %d, %d rank(s), %d warm-up + %d timed calls\n",
               gl_bench_dev_name(d, dn, sizeof dn), gl_dtype_name(d->act), B, Hq, Hkv, D, size,
               o->warmup, o->iters);
        printf("# FLOPs as FlashAttention's benchmark: fwd 4*B*S^2*Hq*D/2, bwd 2.5 x fwd; "
               "%s: mean over ranks\n", cpu ? "GFLOP/s" : "TFLOP/s");
        printf("%8s %4s %10s %10s %10s %10s\n", "seq", "pass", "ms", cpu ? "gflops" : "tflops",
               "min", "max");
    }

    for (int si = 0; si < nseq; si++) {
        int S = (int)seqs[si];
        attn_call a = {.d = d, .B = B, .S = S, .Hq = Hq, .Hkv = Hkv, .D = D,
                       .W = (Hq + 2 * Hkv) * D, .scale = 1.0f / sqrtf((float)D)};
        size_t tok = (size_t)B * S;
        a.qkv = d->ops->alloc(d, tok * a.W * d->act_bytes);
        a.dqkv = d->ops->alloc(d, tok * a.W * d->act_bytes);
        a.o = d->ops->alloc(d, tok * Hq * D * d->act_bytes);
        a.dout = d->ops->alloc(d, tok * Hq * D * d->act_bytes);
        a.lse = d->ops->alloc(d, tok * Hq * sizeof(float));
        gl_bench_fill(d, a.qkv, tok * a.W, o->seed, 3, 1.0f);
        gl_bench_fill(d, a.dout, tok * Hq * D, o->seed, 4, 1.0f);

        run_fwd(&a);
        d->ops->sync(d);
        if (o->check)
            check_fwd(&a, o->seed);

        double fwd_flops = 4.0 * B * (double)S * S * Hq * D / 2;
        for (int pass = 0; pass < 2; pass++) {
            const char *pname = pass ? "bwd" : "fwd";
            if (!gl_bench_list_has(o->passes, pname))
                continue;
            double flops = pass ? 2.5 * fwd_flops : fwd_flops;
            gl_bench_flops r = gl_bench_measure_flops(d, o, flops, pass ? run_bwd : run_fwd, &a);
            if (o->json) {
                json_t *j = gl_bench_flops_record("attention", d);
                json_object_set_new(j, "pass", json_string(pname));
                json_object_set_new(j, "batch", json_integer(B));
                json_object_set_new(j, "seq", json_integer(S));
                json_object_set_new(j, "heads", json_integer(Hq));
                json_object_set_new(j, "kv_heads", json_integer(Hkv));
                json_object_set_new(j, "head_dim", json_integer(D));
                json_object_set_new(j, "flops", json_real(flops));
                gl_bench_emit_flops(j, &r, o->check);
            } else {
                if (gl_bench_rank0())
                    printf("%8d %4s", S, pname);
                gl_bench_print_flops(d, &r);
            }
        }
        d->ops->free(d, a.qkv);
        d->ops->free(d, a.dqkv);
        d->ops->free(d, a.o);
        d->ops->free(d, a.dout);
        d->ops->free(d, a.lse);
    }
    free(seqs);
}
