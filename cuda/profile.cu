/*
 * profile.cu: time per operation of a CUDA device (GRIDLM_PROFILE=1).
 *
 * The profiled device's table wraps every op that enqueues GPU work: a
 * CUDA event is recorded on the compute stream before and after the real
 * op, into a ring of event pairs.  Nothing waits for the GPU there: the
 * pairs are read (cudaEventElapsedTime) when the program synchronises
 * anyway (ops->sync, ops->download), or when the ring is full.  Closing
 * the device prints, on rank 0, each op's calls, total time, share of the
 * profiled time and mean time per call, longest first.
 *
 * An op's time runs from its start event to its stop event on the stream:
 * its kernels, plus any time the GPU waited for the host to launch them.
 * Collectives run on other streams and are not in the table.  Without
 * GRIDLM_PROFILE the device's table is the plain one: no cost at all.
 */
#include <config.h>

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "gl_cuda.h"

/* The ops timed, in table order. */
#define TIMED_OPS(X)                                                          \
    X(upload) X(copy) X(zero) X(to_act) X(to_f32) X(gemm) X(add)              \
    X(rmsnorm_fwd) X(rmsnorm_bwd) X(rope_fwd) X(rope_bwd) X(attn_fwd)         \
    X(attn_bwd) X(swiglu_fwd) X(swiglu_bwd) X(embed_fwd) X(embed_bwd)         \
    X(ce_max) X(ce_sum) X(ce_bwd) X(scale_f32) X(sumsq_f32) X(nonfinite_f32)  \
    X(dot_f32) X(adamw) X(fp8_quantize) X(fp8_amax) X(fp8_amax_scale)         \
    X(fp8_scale_delayed) X(fp8_scale_current) X(gemm_fp8) X(gemm_fp8_ragged)  \
    X(layernorm_fwd) X(layernorm_bwd) X(gelu_fwd) X(gelu_bwd) X(bias_add)     \
    X(bias_grad) X(dropout) X(bias_dropout_add) X(pos_embed_fwd)             \
    X(moe_route) X(moe_route_bwd) X(moe_permute) X(moe_permute_bwd)          \
    X(moe_unpermute) X(moe_unpermute_bwd) X(moe_gemm) X(moe_gemm_dgrad)      \
    X(moe_gemm_wgrad) X(moe_aux_counts) X(moe_aux_loss) X(moe_z_loss)        \
    X(moe_bias_update) X(attn_block_fwd) X(attn_merge) X(attn_delta)         \
    X(attn_block_bwd) X(convert_2d) X(bda_layernorm) X(linear_gelu_fwd)      \
    X(linear_dgelu_bwd) X(rmsnorm_fwd_fp8) X(swiglu_fwd_fp8)                 \
    X(swiglu_bwd_fp8) X(head_rmsnorm_fwd) X(head_rmsnorm_bwd) X(add_f32)     \
    X(fp8_transpose) X(fp8_quantize_tiles) X(gemm_fp8_tiles)        \
    X(fp8_block_amax) X(fp8_block_sinv) X(fp8_quantize_block_range)         \
    X(fp8_quantize_pad)

#define AS_ENUM(op) OP_##op,
enum { TIMED_OPS(AS_ENUM) NOPS };
#define AS_NAME(op) #op,
static const char *const op_name[NOPS] = {TIMED_OPS(AS_NAME)};

/* Event pairs in flight before the ring forces a wait. */
#define RING 8192

struct gl_prof {
    const gl_ops *real;        /* the table wrapped */
    gl_ops table;              /* the wrappers */
    cudaEvent_t start[RING], stop[RING];
    int op[RING];
    int head, pending;         /* next slot; pairs not yet read */
    long calls[NOPS];
    double ms[NOPS];
};

/* Reads every pending pair; the stream has been synchronised. */
static void resolve(gl_prof *p)
{
    int i = (p->head - p->pending + RING) % RING;
    for (; p->pending > 0; p->pending--, i = (i + 1) % RING) {
        float ms = 0;
        GL_CUDA_CHECK(cudaEventElapsedTime(&ms, p->start[i], p->stop[i]));
        p->ms[p->op[i]] += ms;
        p->calls[p->op[i]]++;
    }
}

static int begin(gl_dev *d, gl_prof *p, int op)
{
    gl_cuda_state *st = gl_cuda_st(d);
    if (p->pending == RING) {
        GL_CUDA_CHECK(cudaStreamSynchronize(st->stream));
        resolve(p);
    }
    int slot = p->head;
    p->op[slot] = op;
    GL_CUDA_CHECK(cudaEventRecord(p->start[slot], st->stream));
    return slot;
}

static void end(gl_dev *d, gl_prof *p, int slot)
{
    GL_CUDA_CHECK(cudaEventRecord(p->stop[slot], gl_cuda_st(d)->stream));
    p->head = (slot + 1) % RING;
    p->pending++;
}

/* The wrapper of the op at byte offset OFF of gl_ops, for every op
 * signature void (gl_dev *, A...). */
template <typename F> struct timed;
template <typename... A> struct timed<void (*)(gl_dev *, A...)> {
    typedef void (*fn)(gl_dev *, A...);
    template <size_t OFF, int OP> static void call(gl_dev *d, A... a)
    {
        gl_prof *p = gl_cuda_st(d)->prof;
        fn real = *(const fn *)((const char *)p->real + OFF);
        int slot = begin(d, p, OP);
        real(d, a...);
        end(d, p, slot);
    }
};

static void prof_sync(gl_dev *d)
{
    gl_prof *p = gl_cuda_st(d)->prof;
    p->real->sync(d);
    resolve(p);
}

static void prof_download(gl_dev *d, void *host, const void *src, size_t bytes)
{
    gl_prof *p = gl_cuda_st(d)->prof;
    p->real->download(d, host, src, bytes);    /* waits for the stream */
    resolve(p);
}

static void report(gl_dev *d, gl_prof *p)
{
    gl_cuda_state *st = gl_cuda_st(d);
    int order[NOPS], n = 0;
    double total = 0;
    for (int i = 0; i < NOPS; i++) {
        total += p->ms[i];
        if (p->calls[i])
            order[n++] = i;
    }
    for (int j = 1; j < n; j++)           /* longest first */
        for (int i = j; i > 0 && p->ms[order[i]] > p->ms[order[i - 1]]; i--) {
            int t = order[i];
            order[i] = order[i - 1];
            order[i - 1] = t;
        }
    gl_info0("op profile of GPU %d (%s), CUDA events around each op:",
             st->ordinal, st->prop.name);
    gl_info0("  %-14s %9s %12s %8s %11s", "op", "calls", "total ms",
             "% total", "mean us");
    for (int j = 0; j < n; j++) {
        int i = order[j];
        gl_info0("  %-14s %9ld %12.3f %7.1f%% %11.1f", op_name[i], p->calls[i],
                 p->ms[i], total > 0 ? 100 * p->ms[i] / total : 0,
                 1e3 * p->ms[i] / p->calls[i]);
    }
    gl_info0("  %-14s %9s %12.3f %7.1f%%", "total", "", total, 100.0);
    const gl_attn_counts *c = &st->attn_counts;
    if (c->fwd_cudnn + c->bwd_cudnn + c->fwd_native + c->bwd_native)
        gl_info0("  attention calls: cuDNN %ld forward %ld backward, gridlm "
                 "kernels %ld forward %ld backward", c->fwd_cudnn, c->bwd_cudnn,
                 c->fwd_native, c->bwd_native);
    if (c->blk_fwd_cudnn + c->blk_bwd_cudnn + c->blk_fwd_native +
        c->blk_bwd_native)
        gl_info0("  block attention calls: cuDNN %ld forward %ld backward, "
                 "gridlm kernels %ld forward %ld backward", c->blk_fwd_cudnn,
                 c->blk_bwd_cudnn, c->blk_fwd_native, c->blk_bwd_native);
    if (c->det_tiled)
        gl_info0("  deterministic attention backwards cut into tiles: %ld",
                 c->det_tiled);
}

static void prof_close(gl_dev *d)
{
    gl_cuda_state *st = gl_cuda_st(d);
    gl_prof *p = st->prof;
    GL_CUDA_CHECK(cudaStreamSynchronize(st->stream));
    resolve(p);
    report(d, p);
    for (int i = 0; i < RING; i++) {
        GL_CUDA_CHECK(cudaEventDestroy(p->start[i]));
        GL_CUDA_CHECK(cudaEventDestroy(p->stop[i]));
    }
    const gl_ops *real = p->real;
    st->prof = NULL;
    free(p);
    real->close(d);
}

const gl_ops *gl_cuda_profile_wrap(gl_dev *d, const gl_ops *real)
{
    gl_cuda_state *st = gl_cuda_st(d);
    gl_prof *p = (gl_prof *)gl_calloc(1, sizeof *p);
    p->real = real;
    p->table = *real;
    for (int i = 0; i < RING; i++) {
        GL_CUDA_CHECK(cudaEventCreate(&p->start[i]));
        GL_CUDA_CHECK(cudaEventCreate(&p->stop[i]));
    }
#define WRAP(op)                                                              \
    p->table.op = timed<decltype(p->table.op)>::template call<                \
        offsetof(gl_ops, op), OP_##op>;
    TIMED_OPS(WRAP)
#undef WRAP
    p->table.sync = prof_sync;
    p->table.download = prof_download;
    p->table.close = prof_close;
    st->prof = p;
    return &p->table;
}

extern "C" int gl_cuda_profile_get(gl_dev *d, const char *op, long *calls,
                                   double *ms)
{
    gl_prof *p = gl_cuda_st(d)->prof;
    *calls = 0;
    *ms = 0;
    for (int i = 0; p && i < NOPS; i++)
        if (!strcmp(op, op_name[i]) && p->calls[i]) {
            *calls = p->calls[i];
            *ms = p->ms[i];
            return 1;
        }
    return 0;
}
