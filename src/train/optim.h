/*
 * optim.h: what happens to the gradients between the last backward and
 * the next forward -- data-parallel reduction, the global gradient norm,
 * clipping and AdamW -- plain (every DP rank updates everything) or
 * distributed (--use-distributed-optimizer, ZeRO-1).
 *
 * The model's gradients are fp32 sums over the rank's micro-batches of
 * the UNNORMALISED token losses (model.h); grad_scale folds the division
 * by the global token count into clipping and AdamW, so no pass over the
 * gradients is spent on it.
 *
 * Plain: the flat gradient buffer is all-reduced over DP; each DP rank
 * keeps fp32 master weights (on the CPU device, where the compute dtype
 * is fp32 too, the weights themselves) and moments for everything.
 *
 * Distributed: the flat buffer (nflat elements, a multiple of DP) is one
 * bucket split into DP equal contiguous shards; a reduce-scatter leaves
 * DP rank r the summed shard r, AdamW updates the fp32 master weights and
 * moments of that shard only (12/DP bytes per parameter), writes the new
 * compute weights into its shard of the weight buffer, and an all-gather
 * over DP gives every rank all of them.
 *
 * Overlapped reduction (--overlap-grad-reduce, DP > 1): the flat buffer
 * is cut into buckets of about --ddp-bucket-size elements (default
 * max(40M, 1M x DP), Megatron's) on parameter boundaries, plus cuts at
 * the start of the TP-replicated range and, for the distributed
 * optimizer, at the DP shard boundaries, so each bucket lies inside one
 * rank's shard.  During the last micro-batch the model reports each
 * parameter whose gradient is complete (model.h: grad_ready); when a
 * bucket's last parameter is reported, its reduction is enqueued on the
 * device's communication stream after an event of the compute stream
 * (ops->comm_wait_compute), so it runs while the backward goes on.
 * gl_optim_reduce() then enqueues the buckets still waiting -- those
 * that must first be summed over TP (the norm weights under sequence
 * parallelism) or over the embedding group (tied copies), reduced in
 * bucket order -- and makes the compute stream wait for the
 * communication stream.  Every DP rank reports the same parameters in
 * the same order, so the buckets' collectives match.  The plain
 * optimizer all-reduces each bucket in place; the distributed one
 * reduces it in place to the one DP rank whose shard holds it (the
 * bucket's owner: half the traffic of an all-reduce), which then reads
 * its shard of the summed buffer directly, with no separate shard
 * buffer (the other ranks' copies of the range are left partial and
 * never read).  The sums are the same as without overlap up to the order
 * of the DP additions.
 *
 * Overlapped weight gathering (--overlap-param-gather, which needs the
 * distributed optimizer and --overlap-grad-reduce): after AdamW the new
 * compute weights are not all-gathered at once.  Each bucket is
 * broadcast from its owner on the communication stream (after the
 * AdamW, through ops->comm_wait_compute) when the next forward first
 * asks for a weight in it (model.h: weights_needed), and then the
 * compute stream waits for it; right after that wait the next buckets in
 * the order of use, as many elements as were asked for, are dispatched,
 * so that the next layer's weights travel during this layer's forward.  The order of use is fixed: the buckets
 * of the TP-replicated norm weights (every layer reads them), then the
 * rest in flat order (embedding, layers, head), the order of the
 * forward; every DP rank dispatches the same buckets in the same order.
 * gl_optim_weights_ready() completes the gathering where something else
 * reads the weights (validation, checkpoints) and gl_optim_reduce() does
 * before the gradient reduction, so no weight is ever read stale.
 *
 * FP8 weights gathered in FP8 (--fp8-param-gather, with the distributed
 * optimizer and FP8 layers): the elements of the FP8 layers' linear
 * weights, routed experts' included (model.h: gl_model_fp8_wranges),
 * travel as one byte each, the
 * rest in the compute dtype.  After AdamW each DP rank makes the next
 * forward's scales (gl_model_fp8_shard_scales: under tensorwise scaling
 * the weights' amaxes are reduced over DP), quantizes its shard's FP8
 * elements with them and packs a range of its shard into a packet: the
 * range's FP8 bytes in flat order, then from a multiple of 16 bytes its
 * other elements.  Without --overlap-param-gather the range is the whole
 * shard, every packet as long as the longest rank's (the shards hold the
 * same number of elements, not of FP8 ones), and one all-gather of the
 * packets follows (under expert parallelism a second one over EDP for
 * the experts' region; with EDP 1 the rank packs and unpacks its own);
 * with it each bucket is a packet, quantized by its owner after AdamW
 * and broadcast bucket by bucket as above.  Every rank
 * unpacks each packet it receives: the bytes into the FP8 weights
 * (gl_model_fp8_place, which writes a weight's transpose once it is
 * whole), the rest into the flat weights.  The FP8 weights'
 * compute-dtype copies outside the rank's own shard are then stale and
 * never read: the forward uses the gathered bytes, and checkpoints write
 * the master weights.  The bytes are those the forward would have made
 * from the gathered compute weights (quantization is elementwise, the
 * scales the same), so training is bit for bit the same as without the
 * flag.
 *
 * Gradient norm: sum of squares over the elements this rank "owns": the
 * shard range [r N/DP, (r+1) N/DP) in both modes (so DP replicas count
 * once), of parameters counted on this rank (model.h: TP-replicated norm
 * weights on TP rank 0 only, tied copies never).  The sum over the world
 * is then the squared norm of the whole model's gradient.
 *
 * Expert parallelism (EP > 1): the plan puts the routed experts in a
 * region of their own at the end of the flat buffer, [xbegin, nflat)
 * (model.h: exp_begin); the ranks of one EP group hold different experts
 * there and the same everything else.  Everything above then applies to
 * [0, xbegin) over DP, N = xbegin, and to the experts' region over the
 * expert-data-parallel group EDP (the ranks holding the same experts):
 * its gradients summed over EDP, sharded over EDP by the distributed
 * optimizer (a second update range: gl_master's two ranges) and
 * all-gathered over EDP after the step, its buckets reduced and
 * broadcast over EDP, its norm counted on its EDP shard, so that each
 * expert counts once in the world's sum.  Without expert parallelism
 * the region is empty and nothing changes.
 */
#ifndef GL_TRAIN_OPTIM_H
#define GL_TRAIN_OPTIM_H

#include <stddef.h>
#include "comm/comm.h"
#include "device/ops.h"
#include "model/model.h"
#include "train/run_config.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    size_t begin, end;
    int flag;
} gl_range;

/* One bucket of the overlapped reduction. */
typedef struct {
    size_t begin, end;          /* range of the flat buffer */
    int total;                  /* parameters that start in it or reach into it */
    int pending;                /* of those, not yet complete this iteration */
    int deferred;               /* reduced only by gl_optim_reduce() */
    int launched;               /* reduction enqueued this iteration */
    int owner;                  /* DP rank whose shard holds it (distributed) */
    int gather;                 /* --overlap-param-gather: GL_GATHER_* */
    /* with --fp8-param-gather: its packet in fp8_recv */
    size_t pk_at, pk_rest, pk_len;
} gl_bucket;

/* --fp8-param-gather without --overlap-param-gather: one region's
 * packets, [0, xbegin) over DP and the routed experts' [xbegin, nflat)
 * over EDP under expert parallelism (optim.c). */
typedef struct {
    size_t base, shard;         /* the shards: [base + r shard, + shard) */
    gl_comm *group;             /* they are gathered over (NULL: one shard) */
    int n, me;                  /* shards; this rank's */
    size_t packet;              /* bytes a packet, the longest shard's */
    size_t *rest_at;            /* [n]: where shard r's other elements
                                 * start in its packet */
    uint8_t *send, *recv;       /* [packet], [n packet] (group only) */
} gl_fp8_region;

/* A bucket's weights after a step (--overlap-param-gather). */
enum { GL_GATHER_DONE = 0, GL_GATHER_STALE, GL_GATHER_SENT };

typedef struct {
    gl_model *m;
    gl_dev *d;
    gl_comm *dp;                /* NULL when DP = 1 */
    int dp_size, dp_rank, dist;
    gl_comm *edp;               /* expert-data-parallel; NULL when EDP = 1 */
    int edp_size, edp_rank;
    size_t xbegin;              /* the plan's exp_begin: [xbegin, nflat) is
                                 * summed and sharded over EDP (empty
                                 * without expert parallelism) */
    size_t shard_begin, shard_end;     /* this rank's DP shard of [0, xbegin) */
    size_t xshard_begin, xshard_end;   /* its EDP shard of [xbegin, nflat) */
    gl_master mr;               /* what AdamW updates here: [0, nflat), or
                                 * (distributed) the DP shard then the EDP
                                 * shard, their fp32 weights in master */
    size_t nu;                  /* the elements of mr's ranges */
    float *master;              /* [nu] fp32 weights of mr's ranges in turn */
    int master_is_w;            /* master aliases the model's weights */
    float *mom1, *mom2;         /* [nu] AdamW moments, the same elements */
    float *gshard;              /* [nu] reduced gradient shards (distributed) */
    gl_range *norm;             /* counted ranges within the shard */
    int nnorm;
    gl_adamw_seg *seg;          /* AdamW segments (weight decay or not) */
    int nseg;
    int nseg_main;              /* the first nseg_main take lr; the rest,
                                 * the embedding's and output layer's with
                                 * --decoupled-lr, take lr_decoupled */
    double beta1, beta2, eps;
    long steps;                 /* successful optimizer steps */
    /* --overlap-grad-reduce (DP > 1 only) */
    int overlap;
    gl_bucket *bucket;
    int nbucket;
    unsigned char *pdone;       /* [nparams]: reported this iteration */
    /* --overlap-param-gather (distributed, with overlap) */
    int gather;
    int *gorder;                /* [nbucket] bucket indexes in order of use */
    int gnext;                  /* next position of gorder to dispatch */
    int gleft;                  /* buckets not GL_GATHER_DONE */
    /* --fp8-param-gather (distributed, FP8 layers here).  Without
     * gather: the regions' packets, shard r's holding its FP8 weights as
     * bytes, then its other weights in the compute dtype.  With gather:
     * the buckets' packets (gl_bucket's pk_*) one after another in
     * fp8_recv.  fp8_packet: the most bytes one rank sends a step. */
    int fp8g;
    gl_fp8_region fr[2];
    int nfr;
    size_t fp8_packet;
    uint8_t *fp8_recv;
} gl_optim;

/* Is the optimizer distributed: --use-distributed-optimizer (asked) and
 * more than one data-parallel rank to shard the state over.  With one,
 * the run asked for it in vain and the plain optimizer runs. */
static inline int gl_optim_is_distributed(int asked, int dp_size)
{
    return asked && dp_size > 1;
}

/* Allocate the optimizer state of m.  dp may be NULL (DP = 1); dist:
 * --use-distributed-optimizer (gl_optim_is_distributed decides). */
gl_optim *gl_optim_new(const gl_config *c, gl_model *m, gl_comm *dp, gl_comm *edp, int dist);

/* The part [*a, *b) of q's range of the flat buffer this rank owns: the
 * one it counts in the gradient norm and writes to a checkpoint.  Its DP
 * shard's part; under expert parallelism an expert parameter's (in
 * [xbegin, nflat)) its EDP shard's (the rank's experts are replicated
 * over EDP only).  Empty: *a == *b. */
void gl_optim_owned(const gl_optim *o, const gl_param *q, size_t *a, size_t *b);
void gl_optim_free(gl_optim *o);

/* Where gl_model_init_weights() should put master weights: returns
 * NULL when they are the model's weights themselves. */
const gl_master *gl_optim_master_target(gl_optim *o);

/* Index into master, mom1, mom2 and gshard of flat element a, which must
 * lie in one of mr's ranges (dies otherwise). */
size_t gl_optim_index(const gl_optim *o, size_t a);

/* The indexes [*i0, *i1) of master, mom1 and mom2 that hold every element
 * gl_optim_owned gives this rank (what a checkpoint writer downloads). */
void gl_optim_owned_span(const gl_optim *o, size_t *i0, size_t *i1);

/* Sum the gradients over DP (all-reduce, or reduce-scatter into the
 * shard); with overlap, the buckets not yet under way, then the compute
 * stream waits for every bucket. */
void gl_optim_reduce(gl_optim *o);

/* *out += sum of squares of the counted gradients of this rank's shard. */
void gl_optim_sumsq(gl_optim *o, float *out);

/* --fp8-param-gather (o->fp8g): after an iteration whose step was
 * skipped (non-finite loss or gradients), the FP8 weights quantized and
 * gathered again with the scales step_end has just changed; the weights
 * themselves are unchanged.  Nothing otherwise. */
void gl_optim_no_step(gl_optim *o);

/* One AdamW step with learning rate lr (lr_decoupled for the embedding
 * and output layer under --decoupled-lr) on gradients x grad_scale, then
 * (distributed) the all-gather of the new weights -- or, with
 * --overlap-param-gather, their bucket-by-bucket broadcasts during the
 * next forward. */
void gl_optim_step(gl_optim *o, double lr, double lr_decoupled, double grad_scale);

/* Every weight of this rank in place before the compute stream's next
 * op (--overlap-param-gather: the broadcasts not yet done are enqueued
 * and waited for; otherwise nothing to do). */
void gl_optim_weights_ready(gl_optim *o);

#ifdef __cplusplus
}
#endif
#endif
