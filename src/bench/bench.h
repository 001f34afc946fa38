/*
 * bench.h: the microbenchmarks of gridlm-bench(1).
 *
 * Each benchmark measures one ceiling of a training step through the same
 * interfaces the model uses, so a figure here is what gridlm can reach,
 * not what a vendor library can reach on its own:
 *   gemm       matrix products through ops->gemm (cuBLASLt bf16 on CUDA,
 *              CBLAS sgemm on the CPU), in TFLOP/s; with --llama, the
 *              products of one Llama layer and the LM head, with and
 *              without cuBLASLt algorithm tuning (GRIDLM_GEMM_TUNE);
 *   comm       all-reduce, reduce-scatter and all-gather through comm.h on
 *              the groups of the process grid (NCCL on GPUs, MPI on the
 *              CPU), as nccl-tests' algorithm and bus bandwidth;
 *   attention  causal attention forward and backward through
 *              ops->attn_fwd / attn_bwd, in TFLOP/s;
 *   fp8        FP8 products (ops->gemm_fp8, with and without fast
 *              accumulation) against the act-dtype product of the same
 *              layout, in TFLOP/s, and FP8 quantization (ops->fp8_quantize
 *              into both orientations) in GB/s.
 *
 * Timing: warm-up calls, ops->sync (and gl_comm_barrier for comm), then
 * gl_now() around `iters` back-to-back calls and a final sync, divided by
 * iters.  Every rank of the job runs the benchmark at once; rank 0 prints.
 *
 * Output: a table on stdout (lines starting with '#' describe the run),
 * or with --json one JSON object per measurement and line.
 */
#ifndef GL_BENCH_BENCH_H
#define GL_BENCH_BENCH_H

#include <stddef.h>

#include "boot/boot.h"
#include "boot/groups.h"
#include "device/ops.h"

#ifdef __cplusplus
extern "C" {
#endif


/* The command line of every subcommand (each reads its own fields). */
typedef struct {
    /* all */
    int device;            /* gl_device_kind (device/ops.h) */
    int iters, warmup;
    int json;              /* one JSON object per line instead of the table */
    int check;             /* verify results outside the timed loop */
    long seed;

    /* gemm, fp8 */
    char *shapes;          /* "MxNxK,..." or "N,..." (square); NULL: default */
    int layout;            /* GL_BENCH_NT, NN or TN */
    int out_f32;           /* C in fp32 with beta = 1 (weight gradients) */
    int llama;             /* the products of one Llama layer + LM head */
    int hidden, ffn, vocab, tokens;   /* --llama's model (heads below) */

    /* comm */
    char *ops;             /* "all-reduce,reduce-scatter,all-gather" */
    char *groups;          /* "world,tp,dp,..."; NULL: every group > 1 */
    char *min_bytes, *max_bytes;   /* sizes with K/M/G suffixes */
    int step_factor;
    int dtype;             /* GL_DT_F32 or GL_DT_BF16 */
    int tp, cp, pp, ep;    /* the grid, Megatron's flags */

    /* attention (heads, kv_heads, head_dim also gemm --llama; 0: the
     * subcommand's default) */
    int batch;
    char *seqs;            /* "1024,2048,..." */
    int heads, kv_heads, head_dim;
    char *passes;          /* "fwd,bwd" */
} gl_bench_opts;

enum { GL_BENCH_NT = 0, GL_BENCH_NN, GL_BENCH_TN };

/* What a benchmark needs from the job: its place, its device, the grid's
 * groups (comm only; NULL otherwise). */
typedef struct {
    const gl_bench_opts *o;
    gl_boot *boot;
    gl_dev *dev;
    gl_groups *groups;
} gl_bench_ctx;

void gl_bench_gemm(gl_bench_ctx *ctx);
void gl_bench_comm(gl_bench_ctx *ctx);
void gl_bench_attention(gl_bench_ctx *ctx);
void gl_bench_fp8(gl_bench_ctx *ctx);

/* Checks of the command line that need no job (exit 2 on a mistake). */
void gl_bench_gemm_validate(const gl_bench_opts *o);
void gl_bench_attention_validate(const gl_bench_opts *o);
void gl_bench_fp8_validate(const gl_bench_opts *o);

/* The words --ops and --groups of comm accept (NULL-terminated). */
const char *const *gl_bench_comm_ops(void);
const char *const *gl_bench_comm_groups(void);

/* ---- helpers (bench_util.c) ------------------------------------------ */

/* Parse "64,1K,4M,1G" style sizes (binary suffixes K, M, G).  Dies naming
 * the option on a bad item.  Returns the count; *out is gl_malloc'd. */
int gl_bench_parse_sizes(const char *opt, const char *list, long **out);

/* One product's shape, m x n x k. */
typedef struct { long m, n, k; } gl_bench_shape;

/* --shapes LIST: "MxNxK" or "N" (N x N x N), comma-separated, each size
 * a multiple of `multiple` and at most `limit`; *out (malloc'd) gets the
 * shapes, the count is returned.  Dies (exit 2) naming the item; kind
 * ("" or " of FP8 products") says what the shapes are for. */
int gl_bench_parse_shapes(const char *list, long multiple, long limit, const char *kind,
                          gl_bench_shape **out);

/* One size with a binary suffix; dies naming opt when it is not one. */
long gl_bench_parse_size(const char *opt, const char *s);

/* Is item one of the comma-separated words of list? */
int gl_bench_list_has(const char *list, const char *item);

/* Die (exit 2) naming opt when list has a word not in allowed (NULL-
 * terminated). */
void gl_bench_list_check(const char *opt, const char *list,
                         const char *const *allowed);

/* Copy count fp32 host values into a device act buffer (converted on the
 * device, so bf16 rounding is the back end's own). */
void gl_bench_upload_act(gl_dev *d, void *act, const float *host, size_t count);

/* Read count act elements back as fp32 into host. */
void gl_bench_download_act(gl_dev *d, float *host, const void *act, size_t count);

/* The uniform value in [-1, 1) of element i of stream `stream`, the
 * numbers gl_bench_fill() uses. */
float gl_bench_value(long seed, int stream, size_t i);

/* Round to bf16 (nearest, ties to even) and back: what the CUDA back end
 * does to its inputs, for host references. */
float gl_bench_round_bf16(float x);

/* Fill a device act buffer of count elements with scale *
 * gl_bench_value(seed, stream, i): the same numbers on every back end. */
void gl_bench_fill(gl_dev *d, void *act, size_t count, long seed, int stream,
                   float scale);

/* Is this rank 0 of the job (the one that prints)? */
int gl_bench_rank0(void);

/* Print one measurement as a JSON line on rank 0 and release it. */
struct json_t;
void gl_bench_emit(struct json_t *obj);

/* Seconds per call of fn(arg), timed as bench.h describes. */
double gl_bench_time(gl_dev *d, int warmup, int iters,
                     void (*fn)(void *arg), void *arg);

/* Mean, min and max of x over every rank of the job (MPI_COMM_WORLD). */
void gl_bench_rank_stats(double x, double *mean, double *min, double *max);

/* One measurement of a compute benchmark (gemm, attention): the time per
 * call in ms (mean over ranks) and each rank's rate in TFLOP/s as the
 * mean, slowest and fastest over ranks. */
typedef struct {
    double ms, tflops, tflops_min, tflops_max;
} gl_bench_flops;

/* Time fn(arg), `flops` floating-point operations a call, on every rank
 * at once (a barrier first) with o->warmup and o->iters calls. */
gl_bench_flops gl_bench_measure_flops(gl_dev *d, const gl_bench_opts *o, double flops,
                                      void (*fn)(void *arg), void *arg);

/* A new JSON measurement starting with "bench", "device" and "dtype"
 * (the act dtype); the caller adds the fields that name its case. */
struct json_t *gl_bench_flops_record(const char *bench, const gl_dev *d);

/* Close a record from gl_bench_flops_record() with "ms", "tflops",
 * "tflops_min", "tflops_max" and "checked", and emit it. */
void gl_bench_emit_flops(struct json_t *rec, const gl_bench_flops *r, int checked);

/* Finish a table row on rank 0 (the caller has printed the columns
 * naming the case): ms, then the rate mean, min and max in GFLOP/s on the
 * CPU and TFLOP/s on GPUs. */
void gl_bench_print_flops(const gl_dev *d, const gl_bench_flops *r);

/* "cpu" or "cuda:N" */
const char *gl_bench_dev_name(const gl_dev *d, char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif
