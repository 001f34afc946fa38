/*
 * model.h: the Llama decoder of one rank -- its parameter table, its
 * weights and gradients, and the forward and backward pass of each of its
 * pipeline chunks, written once against device/ops.h and comm/comm.h.
 *
 * Parameters are LOGICAL tensors, named and shaped as in a Hugging Face
 * Llama checkpoint and independent of the parallel layout:
 *
 *   embedding.weight                     [Vpad, h]   rows split over TP
 *   layers.N.attention_norm.weight       [h]         replicated
 *   layers.N.attention.wq.weight         [Hq D, h]   rows split (column-parallel)
 *   layers.N.attention.wk.weight         [Hkv D, h]  rows split
 *   layers.N.attention.wv.weight         [Hkv D, h]  rows split
 *   layers.N.attention.wo.weight         [h, Hq D]   columns split (row-parallel)
 *   layers.N.mlp_norm.weight             [h]         replicated
 *   layers.N.mlp.w_gate.weight           [f, h]      rows split
 *   layers.N.mlp.w_up.weight             [f, h]      rows split
 *   layers.N.mlp.w_down.weight           [h, f]      columns split
 *   final_norm.weight                    [h]         replicated
 *   lm_head.weight                       [Vpad, h]   rows split (untied only)
 *
 * (and the rows of the GPT form and of --qk-layernorm: arch/tensors.h;
 * the QK-norm weights layers.N.attention.q_norm/k_norm.weight [D] are
 * replicated and placed last, see gl_model_tp_sum_range).
 *
 * Vpad is the vocabulary padded to a multiple of
 * --make-vocab-size-divisible-by x TP; padding rows are never predicted
 * (the cross-entropy ignores their logits) and never looked up.
 *
 * Local storage.  All of a rank's parameters live in ONE flat buffer of
 * plan->nflat elements: act dtype for the compute copy (gl_model.w), fp32
 * for the gradients (gl_model.g) and, in the optimizer, for the master
 * weights and moments.  Each logical tensor's local piece is one
 * contiguous range of it (gl_param.offset, .count).  The pieces are placed
 * so that the compute can fuse them:
 *   - QKV: [wq piece; wk piece; wv piece] are adjacent, one local matrix
 *     [(hq + 2 hkv) D, h], so each token's QKV output row is
 *     [q (hq heads) | k (hkv heads) | v (hkv heads)], the views attn_fwd
 *     takes with row stride (hq + 2 hkv) D.  Local query head j uses local
 *     kv head j / (Hq / Hkv), which is also the global GQA grouping.
 *   - MLP: [w_gate piece; w_up piece] adjacent, [2 f_l, h], so each row of
 *     the product is [gate | up], the layout swiglu_fwd takes.
 * The flat buffer holds first every TP-split tensor, then every
 * TP-replicated one (the norm weights), so the latter are one range
 * [rep_begin, rep_end) that a single all-reduce over TP sums (sequence
 * parallelism).  Ranges start on multiples of GL_MODEL_ALIGN elements and
 * nflat is a multiple of GL_MODEL_ALIGN x DP, so the distributed
 * optimizer's DP shards are equal and aligned.  A checkpoint writer finds
 * everything it needs in gl_param: the logical name and shape, and where
 * this rank's piece sits in the logical tensor (global_offset) and in the
 * flat buffer (offset).
 *
 * Tied embeddings.  Without --untie-embeddings-and-output-weights the LM
 * head uses the embedding matrix.  When one rank holds both, the head
 * reads the embedding's range (one tensor, one gradient).  Otherwise the
 * last pipeline stage holds a copy (gl_param.tied_copy, the same name and
 * initial values); the training loop all-reduces the two gradients over
 * the embedding group so both copies take the same steps, and the copy is
 * left out of the gradient norm.
 *
 * Mixture of experts.  On an MoE layer (gl_arch_is_moe_layer) the MLP's
 * tensors are the router [E, h] and the expert bias [E] (replicated; the
 * bias a buffer: gl_param.buffer), the stacked experts' w_gate, w_up
 * [E, F, h] and w_down [E, h, F], each one range of the flat buffer with
 * every expert's F split over TP as the dense MLP's f, and the shared
 * experts' matrices as a dense MLP's (gl_layer_offs; moe.h says how the
 * layer runs).  gl_param keeps the logical 3-D shape; gl_param_view gives
 * the 2-D matrix in which the rank's piece is one rectangle, which
 * initialisation and checkpoints use.
 *
 * Pipeline chunks.  With PP stages and V virtual chunks per stage, model
 * chunk mc = c PP + stage (c = 0..V-1 on each rank) holds layers
 * [mc Lc, (mc + 1) Lc), Lc = L / (PP V).  Model chunk 0 starts with the
 * embedding; the last model chunk ends with the final norm, the LM head
 * and the loss.
 *
 * Tokens.  A micro-batch is B sequences of S tokens, n = B S rows in
 * [B, S] order.  Under --sequence-parallel the per-token regions (norms,
 * residual stream, everything a stage sends to the next) hold a
 * contiguous block of nl = n / TP of those rows on each TP rank (rank r
 * holds rows [r nl, (r + 1) nl)); a column-parallel linear all-gathers
 * its input along the rows and a row-parallel one reduce-scatters its
 * output.  Without it nl = n and TP ranks repeat the per-token work.
 *
 * Loss.  The head computes each token's cross-entropy and, in the same
 * call, the gradient with respect to the last layer's output (so the
 * logits, the largest activation, are never kept between forward and
 * backward).  The loss is NOT divided by the number of tokens here: each
 * token's gradient is weighted by gscale, which the caller sets to the
 * loss mask (0 or 1), or to the mask rescaled by its micro-batch's
 * number of unmasked tokens, and divides the summed gradients
 * accordingly (the two loss normalisations of src/train/batch.h), so
 * that the loss is the same whatever the layout.
 *
 * Buffers.  gl_model_new() allocates everything once: weights, gradients,
 * the activations kept between forward and backward for `nslots[c]`
 * micro-batches in flight on chunk c, and the scratch of one layer.
 * Nothing is allocated, and nothing is read back to the host, while
 * training.  Every comm call is passed the device stream.
 *
 * Activation recomputation (--recompute-granularity, Megatron-LM's
 * semantics; the results are the same bits, only memory and time change):
 *   - full, --recompute-method uniform, N = --recompute-num-layers: the
 *     layers of each chunk form groups of N consecutive layers (the last
 *     one shorter when N does not divide Lc; N larger than Lc, possible
 *     with virtual stages, counts as Lc); a
 *     micro-batch keeps only each group's input (and the chunk's output,
 *     which goes to the next stage).  Its backward re-runs the group's
 *     forward from that input -- TP/SP communication included -- and then
 *     the group's backward.
 *   - full, --recompute-method block: the first min(N, Lc) layers of each
 *     chunk are recomputed one by one (each keeps only its input); the
 *     others keep all their activations.
 *   - selective: every layer keeps the outputs of its products and of
 *     attention (x, xm, qkv, o, gu, rstd, lse) but not the three
 *     activations that an elementwise pass gives back: the two RMSNorm
 *     outputs a and mg (recomputed from x / xm, all-gathered again under
 *     SP) and the SwiGLU output s (recomputed from gu).  That is 2 h + fl
 *     of the per-token elements of a layer (Megatron-LM recomputes the
 *     softmax and dropout of core attention instead; attn_fwd is flash
 *     attention and never stores an [S, S] matrix, so there is nothing of
 *     that kind to drop here).
 * What a recomputation rebuilds lives in buffers shared by every slot
 * (one group's worth of layer activations and intermediate residuals for
 * full, one a / mg / s for selective): they only hold data during one
 * gl_model_forward() or gl_model_backward() call, and every call runs on
 * the one compute stream, so a later call never overwrites what an
 * earlier one still reads.  The activation slots shrink accordingly;
 * act_slot_bytes and act_shared_bytes say by how much.
 */
#ifndef GL_MODEL_MODEL_H
#define GL_MODEL_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include "comm/comm.h"
#include "arch/tensors.h"
#include "device/ops.h"
#include "model/layout.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Alignment of every tensor range in the flat buffer, in elements. */
#define GL_MODEL_ALIGN 64

/* One logical parameter and this rank's piece of it. */
typedef struct {
    char name[64];
    gl_tensor_id id;            /* which tensor of the table (arch/tensors.h) */
    int ndim;                   /* 1 (norm weights), 2, or 3 (stacked experts) */
    long shape[GL_TENSOR_MAXDIM];        /* full logical shape ([h, 1, 1] when
                                          * ndim 1, [r, c, 1] when 2) */
    gl_shard shard;             /* a stacked [E, out, in] tensor: ROWS splits
                                 * dim 1, COLS dim 2 (arch/tensors.h) */
    long local_shape[GL_TENSOR_MAXDIM];  /* this rank's piece */
    long global_offset[GL_TENSOR_MAXDIM];/* where it sits in the logical tensor */
    size_t offset, count;       /* its range of the flat buffer */
    int chunk;                  /* the local chunk it belongs to */
    int layer;                  /* global layer index, -1 outside layers */
    int no_weight_decay;        /* norm weights */
    int counted;                /* counted in the global gradient norm on
                                 * this rank (replicated pieces on TP rank
                                 * 0 only; tied copies never) */
    int tied_copy;              /* last stage's copy of a tied embedding */
    double init_std;            /* normal(0, init_std); 0 with init_ones */
    int init_ones;              /* norm weights start at 1 */
    int buffer;                 /* not trained (the expert bias): its gradient
                                 * stays zero, the optimizer leaves it alone,
                                 * the checkpoint holds it */
    int expert;                 /* a routed expert's stacked weights: with
                                 * expert parallelism this rank holds the
                                 * experts [global_offset[0], + local_shape[0])
                                 * of its EP index, and its gradient is summed
                                 * over the expert-data-parallel group (EDP),
                                 * not DP (optim.h); the other parameters
                                 * are replicated over EP and summed over DP */
} gl_param;

/* A parameter as a 2-D row-major matrix in which its local piece is one
 * rectangle: itself when ndim <= 2 ([h, 1] for a vector); a stacked
 * [E, A, B] tensor as [E, A B] when ROWS splits A, else as [E A, B].
 * The element at view (i, j) is the logical tensor's element i C + j in
 * row-major order (C the view's columns), so initialisation and
 * checkpoints see the same numbers under every layout.  view, and
 * local/offset (the piece's rectangle) when not NULL, get 2 longs. */
void gl_param_view(const gl_param *q, long view[2], long local[2], long offset[2]);

/* The same view of a logical shape (gl_tensor_shape's, ndim dims) split
 * as shard. */
void gl_shape_view(int ndim, const long shape[GL_TENSOR_MAXDIM], gl_shard shard, long view[2]);

/* Sizes of the model and of this rank's share. */
typedef struct {
    int L, h, Hq, Hkv, D, f, V, Vpad, S, B;   /* S: tokens of a sequence on
                                 * this rank (Sfull / cp) */
    int Sfull;                  /* --seq-length */
    int cp;                     /* --context-parallel-size */
    int cp_all_gather;          /* --cp-comm-type all_gather, else p2p */
    int cp_a2a;                 /* --cp-comm-type a2a (Ulysses: heads for sequence) */
    double eps;
    int tied;
    int tp, tp_rank, pp, pp_rank, vpp, sp;
    int hq, hkv, fl, vl;        /* local heads, query groups, ffn, vocab */
    long vocab_start;           /* first vocabulary id of the local shard */
    int valid;                  /* real (unpadded) ids in the local shard */
    int qkvw;                   /* (hq + 2 hkv) D: width of a QKV row */
    int n, nl;                  /* tokens of a micro-batch; per rank in
                                 * per-token regions */
    int Lc;                     /* layers per chunk */
    /* The model's form (arch.h): Megatron's GPT, or the Llama form. */
    int layernorm;              /* LayerNorm (weight and bias), else RMSNorm */
    int one_p;                  /* --apply-layernorm-1p */
    int swiglu;                 /* SwiGLU, else GeLU (tanh) */
    int guw;                    /* width of the fc1 output: 2 fl (SwiGLU) or fl */
    int lin_bias;               /* --add-bias-linear: every linear has a bias */
    int qkv_bias;               /* the QKV linear has a bias (either flag) */
    int learned_pos;            /* learned absolute positions [P, h] */
    int rope;                   /* rotary positions */
    int qk_norm;                /* --qk-layernorm: RMSNorm over each head of q
                                 * and k, after the bias, before RoPE */
    int qkw;                    /* (hq + hkv) D: a token's q and k heads */
    int P;                      /* their rows: --max-position-embeddings */
    float hidden_dropout;       /* --hidden-dropout */
    float attention_dropout;    /* --attention-dropout */
    /* Mixture of experts (all 0 in a dense model). */
    int E, topk;                /* experts, experts per token */
    int ep, ep_rank;            /* --expert-model-parallel-size, this rank's EP
                                 * index (1, 0 without expert parallelism) */
    int El, e0;                 /* local experts: [e0, e0 + El) of E */
    int etp, etp_rank;          /* --expert-tensor-parallel-size (TP when
                                 * unset), this rank's ETP index: tp_rank mod
                                 * ETP (the ETP ranks are the fastest of the
                                 * expert grid, the TP ranks of the other's) */
    int fe, fel;                /* an expert's FFN width; its ETP-local part */
    int fs, fsl;                /* the shared experts' width; local (0: none) */
} gl_model_dims;

/* Offsets in the flat buffer of one layer's tensors.  The biases and the
 * norm biases are there only as the dims say (layernorm, qkv_bias,
 * lin_bias); bqkv is [bq | bk | bv] of the local rows, as qkv's rows;
 * bgu [b_gate | b_up] (SwiGLU) or b_up. */
typedef struct {
    size_t attn_norm, qkv, wo, mlp_norm, gate_up, down;
    size_t attn_norm_b, mlp_norm_b, bqkv, bo, bgu, bdown;
    size_t qk_norm;             /* q_norm [D] then k_norm [D] (qk_norm dims) */
    /* A mixture-of-experts layer (moe set) has no gate_up/down (nor their
     * biases) but: the router [E, h] and the expert bias [E] (replicated),
     * the experts' w_gate [E, fel, h] (SwiGLU) followed by w_up
     * [E, fel, h] (egu; w_up at egu + E fel h), w_down [E, h, fel]
     * (edown), and the shared experts fused as the dense MLP's
     * [w_gate; w_up] [2 fsl, h] (sgu) and w_down [h, fsl] (sdown). */
    int moe;
    size_t router, ebias, egu, edown, sgu, sdown;
} gl_layer_offs;

typedef struct {
    int mc;                     /* model chunk index c PP + stage */
    int first_layer;            /* global index of its first layer */
    int has_embed, has_head;
    size_t embed, final_norm, head;
    size_t final_norm_b, pos;   /* LayerNorm's bias, learned positions */
    gl_layer_offs *layer;       /* [Lc] */
} gl_chunk_plan;

typedef struct {
    gl_arch arch;               /* the model (a copy) */
    gl_layout layout;           /* and how it is laid out (a copy) */
    gl_model_dims dm;
    int nchunks;                /* V */
    gl_chunk_plan *chunk;
    int nparams;
    gl_param *param;            /* in order of offset, without overlap */
    size_t nflat;
    size_t rep_begin, rep_end;  /* the TP-replicated range */
    size_t qk_norm_begin;       /* [qk_norm_begin, rep_end): its QK-norm
                                 * weights (empty without --qk-layernorm) */
    size_t exp_begin;           /* [exp_begin, nflat): the routed experts
                                 * under expert parallelism (region 3, on a
                                 * DP shard boundary; its size a multiple of
                                 * GL_MODEL_ALIGN x dp); empty (nflat)
                                 * without, the experts then in region 1 */
    int embed_param, head_param;/* indexes into param, -1 when absent here
                                 * (head_param is -1 when the head shares
                                 * the embedding's range) */
} gl_model_plan;

/* The parameter table and flat layout of the rank at (tp_rank, pp_rank)
 * and EP index ep_rank (0 without expert parallelism; the rank's place in
 * its EP group) for a data-parallel group of dp ranks.  Pure: no device,
 * no MPI.  Dies naming the flag when the model does not split evenly. */
gl_model_plan *gl_model_plan_new(const gl_arch *a, const gl_layout *l, int tp_rank, int pp_rank,
                                 int ep_rank, int dp);
void gl_model_plan_free(gl_model_plan *p);

/* The index in p->param of the first parameter whose offset is off or
 * more (p->nparams when none is). */
int gl_model_plan_first_at(const gl_model_plan *p, size_t off);

/* The flat range [*begin, *end) whose gradients the backward leaves as
 * partial sums over the TP group, for the caller to all-reduce over TP
 * before the DP reduction: under sequence parallelism every replicated
 * weight (each rank saw its own rows of tokens), otherwise only the
 * QK-norm weights (each rank saw its own heads); empty (begin = end)
 * when TP is 1. */
void gl_model_tp_sum_range(const gl_model_plan *p, size_t *begin, size_t *end);

/* The initial value of element e (row-major in the FULL logical tensor)
 * of parameter p: normal(seed, key(name), e) x init_std, or 1. */
double gl_param_init_value(const gl_param *p, uint64_t seed, long e);

/* The activations one micro-batch leaves in one layer for its backward.
 * Under recomputation some of these point into shared buffers (see the
 * top of this file): all of them for a layer that full recomputation
 * re-runs, a, mg and s under selective. */
typedef struct {
    void *xm;                   /* [nl, h] residual after attention */
    void *a;                    /* [n, h] attention-norm output (gathered) */
    void *qkv;                  /* [n, qkvw] q, k after RoPE, v; with QK
                                 * norm, q and k before the norm (the
                                 * product, and its bias) */
    void *qkn;                  /* QK norm: [n, qkw] q and k normalised,
                                 * then turned by RoPE (what attention
                                 * reads); NULL without it */
    float *rstd_qk;             /* QK norm: [n, hq + hkv] per head */
    void *o;                    /* [n, hq D] attention output */
    void *mg;                   /* [n, h] mlp-norm output (gathered) */
    void *gu;                   /* [n, 2 fl] gate | up */
    void *s;                    /* [n, fl] silu(gate) * up */
    float *rstd1, *rstd2;       /* [nl] */
    float *mean1, *mean2;       /* [nl], LayerNorm's */
    float *lse;                 /* [B, hq, S] */
    /* FP8 layers only (fp8.c; NULL otherwise): the input X of each of the
     * four linears, quantized and transposed by the forward ([in, n]
     * bytes) for the weight gradient, and under tensorwise scaling the
     * four inputs' scale records (their scales are this micro-batch's);
     * under blockwise scaling xts[lin], the block factors of xt[lin]
     * (device/fp8.h: 1 x 128 tiles along the tokens). */
    uint8_t *xt[4];
    float *xrec;
    float *xts[4];
    /* A mixture-of-experts layer's (moe.c; allocated at its first
     * forward, never shared by recomputation): the router's logits,
     * the routing, the experts' fc1 outputs and partial outputs, the
     * shared experts' fc1 output, the load-balancing counts. */
    struct gl_moe_acts *moe;
} gl_layer_acts;

/* One micro-batch in flight on one chunk. */
typedef struct {
    void **x;                   /* [Lc + 1] residual stream [nl, h]: x[0]
                                 * is the chunk's input, x[Lc] its output */
    void *dy;                   /* [nl, h]: gradient w.r.t. the chunk's
                                 * output, turned by backward into the
                                 * gradient w.r.t. its input */
    gl_layer_acts *layer;       /* [Lc] */
} gl_slot;

/* A micro-batch's data on the device: n token ids, n targets, n gradient
 * weights (gscale: the loss mask, possibly scaled by the caller's loss
 * normalisation) and, when the reported loss is weighted differently
 * from the gradient, n reporting weights (lmask, the plain loss mask;
 * NULL: gscale serves both); and row0, the index of its first token
 * among the tokens of the iteration's global batch (its first sample's
 * index in the global batch x S, S the rank's rows of a sample: Sfull /
 * CP), which places its rows in the full tensors that dropout masks are
 * drawn over (gl_dropout; layer.c maps CP's chunks to their rows). */
typedef struct {
    const int32_t *ids, *targets;
    const float *gscale;
    const float *lmask;
    long row0;
} gl_mb;

typedef struct {
    const gl_model_plan *plan;
    gl_dev *d;
    gl_comm *tp;                /* NULL when TP = 1 */
    void *w;                    /* weights, act dtype [nflat] */
    float *g;                   /* gradients, fp32 [nflat] */
    float *cos, *sin;           /* RoPE tables [S, D/2] */
    int *nslots;                /* per chunk */
    gl_slot **slot;             /* [chunk][slot] */
    /* scratch of one layer / head (see model.c) */
    void *y, *dfull, *tmp, *dqkv, *d_o, *dgu, *ds, *hf, *logits;
    float *rowmax, *stats, *loss, *rstd_f, *mean_f;
    int32_t *positions;         /* [nl] position of each own row (learned
                                 * positions): (row0 + j) mod S */
    void *arena;                /* every buffer above, one allocation */
    size_t arena_bytes;
    /* Recomputation (see the top of this file). */
    gl_recompute recompute;     /* the granularity */
    int *rc_first;              /* [Lc] full: the first layer of layer i's
                                 * recomputed group, -1 when layer i keeps
                                 * its activations (always -1 unless full) */
    int rc_group;               /* full: layers in the largest group */
    size_t act_slot_bytes;      /* activations of one slot (one micro-batch
                                 * in flight on one chunk) */
    size_t act_shared_bytes;    /* the buffers recomputation shares */
    int fwd_only;               /* made by gl_model_new_forward_only() */
    /* Gradient writes (grads.c), set up by the first
     * gl_model_grads_begin(): per parameter, 1 while its gradient awaits
     * the iteration's first product; the flat ranges each begin zeroes,
     * as [begin, end) pairs. */
    uint8_t *gfresh;
    size_t *gzero;
    int ngzero;
    /* Gradient readiness (--overlap-grad-reduce, src/train/optim.c): while
     * grad_final is set (the caller sets it around the last micro-batch
     * of each chunk), the passes call grad_ready(grad_ready_arg, begin,
     * end) as soon as every parameter whose flat range starts in
     * [begin, end) has received its last gradient contribution -- after
     * the product or norm backward that writes it, before the following
     * ops are enqueued.  Ranges are reported once per micro-batch; the
     * embedding's only after its backward when the head shares it. */
    void (*grad_ready)(void *arg, size_t begin, size_t end);
    void *grad_ready_arg;
    int grad_final;
    /* Weight readiness (--overlap-param-gather, src/train/optim.c): the
     * forward passes call weights_needed(weights_needed_arg, begin, end)
     * before they enqueue the first op that reads a weight whose flat
     * range lies in [begin, end): a layer's matrices, each of its norm
     * weights, the embedding, the final norm, the head.  The callee makes
     * the compute stream wait until those weights are in place. */
    void (*weights_needed)(void *arg, size_t begin, size_t end);
    void *weights_needed_arg;
    /* FP8 (fp8.c; NULL when off): the amax histories, scales and
     * quantized weights; fp8_eval is set while a forward-only pass runs
     * (its activations' amaxes stay out of the delayed histories, and it
     * keeps no X^T); fp8_nokeep while a forward runs a layer that full
     * recomputation will run again before its backward (that run keeps
     * X^T: this one need not write it). */
    struct gl_fp8_state *fp8;
    int fp8_eval, fp8_nokeep;
    /* Dropout (--hidden-dropout): the masks' key is (dropout_seed,
     * iteration, layer, site, element), so the caller sets the iteration
     * before each one's forwards and backwards.  Forward-only passes
     * (evaluation) drop nothing. */
    uint64_t dropout_seed;
    uint32_t iteration;
    int no_dropout;             /* set while a forward-only pass runs */
    /* Context parallelism (cp.c), set by gl_model_set_cp(): the CP group
     * (NULL for CP = 1), this rank's place in it, and the scratch of the
     * block attention: K/V chunks (act) and their gradients (f32) as they
     * travel round the ring, [n, 2 hkv D] each (all_gather: kv[0] and
     * dkv[0] hold every rank's, [cp n, 2 hkv D]), the running output,
     * a block's output and lse, dq and attn_delta's rows (f32).
     * dkv_blk: the ring's dK/dV of one block, added to the accumulator
     * that arrived meanwhile.  cp_ring_serial: the ring waits for each
     * exchange before it computes (GRIDLM_CP_RING_OVERLAP=0), the same
     * arithmetic without the overlap, for tests and timings. */
    gl_comm *cp;
    int cp_rank;
    int cp_ring_serial;
    /* Expert parallelism (moe.c): the EP group (NULL for EP = 1), whose
     * member i holds the experts of EP index i (dims: e0, El); set by the
     * caller after gl_model_new, with a plan made for this rank's index. */
    gl_comm *ep;
    void *kv[2];
    float *dkv[2], *dkv_blk;
    float *o_acc, *o_blk, *lse_blk, *dq_acc, *delta;
    /* The GeLU MLP through ops->linear_gelu_fwd / linear_dgelu_bwd (one
     * product with its epilogue on a GPU; layer.c: gelu_fused): 0 (the
     * separate kernels) unless GRIDLM_GEMM_EPILOGUE=1 asks for it, until
     * the epilogues have been checked on a GPU. */
    int gelu_epilogue;
    /* Mixture of experts (moe.c).  moe_opts: the training-time settings
     * (gl_moe_defaults until the caller sets them).  moe_loss_gscale:
     * the backward scale of the auxiliary and z losses of one micro-
     * batch, in the units of the token weights gscale (gl_mb): B S by
     * default, so that the caller's division of the summed gradients by
     * micro-batches x DP x B S averages the per-micro-batch losses as
     * Megatron does.  moe_stats: per global layer l, at l (3 + E): the
     * auxiliary loss, the z-loss, the dropped slots, then the tokens per
     * expert [E], summed over the training forwards since the caller
     * last zeroed it (device f32, NULL in a dense model; the losses are
     * this rank's shares: under sequence parallelism the TP ranks' sum,
     * else each TP rank's is the whole).  in_recompute: set while
     * full recomputation re-runs a forward (nothing is counted twice).
     * moe_dp: the data-parallel group that global_aux_loss's counts are
     * summed over (NULL: DP 1; set by the caller, as Megatron's TP x CP
     * x DP group less the TP and CP the model holds). */
    gl_moe_opts moe_opts;
    double moe_loss_gscale;
    float *moe_stats;
    struct gl_moe_scratch *moe_scratch;
    int in_recompute;
    gl_comm *moe_dp;
    /* moe_dispatch: 1 when the MoE layers run the expert-parallel
     * dispatch (moe.c: counts, exchange, sort to the local experts,
     * unsort, exchange back) at EP 1 too, its exchanges then copies on
     * the device, so that one GPU runs that code; the numbers are the
     * direct path's bit for bit.  EP > 1 always dispatches.  0 unless
     * GRIDLM_MOE_DISPATCH=1 asks for it (t/train-cuda.c); set before the
     * first forward. */
    int moe_dispatch;
} gl_model;

/* Elements of moe_stats per layer: GL_MOE_STATS + E. */
#define GL_MOE_STATS 3

/* The end of a training step (after its last backward): the running
 * counts of --moe-router-load-balancing-type global_aux_loss start again
 * (Megatron's reset_model_temporary_tensors in finalize_model_grads).
 * Every training forward of an MoE layer adds its micro-batch's counts
 * to them; nothing else does. */
void gl_model_moe_step_end(gl_model *m);

/* The device bytes the MoE layers allocate at their first forward,
 * beside the arena (act_slot_bytes, act_shared_bytes) and moe_stats:
 * per MoE layer and micro-batch slot, per_layer (the router's logits
 * [n, E] f32; the routing map: experts, weights and rows [n, k], the
 * permuted rows' tokens and the offsets; the experts' fc1 outputs and
 * partial outputs over the routed rows -- n k, k copies of each token,
 * or the capacity's rows -- the shared experts' fc1 outputs; the
 * balancing counts; under expert parallelism the rows received for the
 * local experts, EP times the routed rows at most, and their maps), and
 * once, shared (the permuted rows' activations and gradients the layers
 * rebuild, the shared experts' and the router's gradients,
 * global_aux_loss's running counts; under expert parallelism the rows
 * as they travel and the exchanged counts).  moe.c allocates the
 * buffers from the same sizes.  Both 0 for a dense model.  The weights, gradients and optimizer state of the
 * router and the experts are the parameter plan's (plan->param). */
void gl_model_moe_bytes(const gl_model *m, size_t *per_layer, size_t *shared);

typedef struct gl_fp8_state gl_fp8_state;

/* Allocate the rank's model on d: weights (zero until initialised),
 * gradients, RoPE tables and nslots[c] activation slots for chunk c,
 * laid out for c's recomputation settings (--recompute-*).  tp may be
 * NULL for TP = 1. */
gl_model *gl_model_new(const gl_model_plan *p, gl_dev *d,
                       gl_comm *tp, const int *nslots);
void gl_model_free(gl_model *m);

/* A model for evaluation only (gridlm-eval): no gradient buffer, one slot
 * per chunk, and one set of layer activations shared by every layer (the
 * forward of layer i + 1 overwrites layer i's, which nothing reads again);
 * the residual stream alternates between two buffers.  Only
 * gl_model_forward_only() may run on it. */
gl_model *gl_model_new_forward_only(const gl_model_plan *p, gl_dev *d,
                                    gl_comm *tp);

/* Where fp32 master weights live: n (0 to 2) ranges of the flat buffer,
 * range i's values in the device array at[i] (at[i][0] is element
 * begin[i]).  The optimizer's (optim.h): everything, or its DP shard and,
 * under expert parallelism, the experts' EDP shard. */
typedef struct {
    int n;
    float *at[2];
    size_t begin[2], end[2];
} gl_master;

/* Copy the fp32 device values src of flat elements [off, off + count)
 * into the parts of mr's ranges they meet (mr may be NULL). */
void gl_master_put(gl_dev *d, const gl_master *mr, size_t off, const float *src, size_t count);

/* Fill the weights from the counter-based RNG (gl_param_init_value).  When
 * mr is not NULL its ranges receive the fp32 values. */
void gl_model_init_weights(gl_model *m, uint64_t seed, const gl_master *mr);

/* Set every parameter's weights from fp32 values on the host: for each
 * parameter q in turn, fill(arg, q, host) writes the rank's q->count
 * values into host, which go to the weights (rounded to the compute
 * dtype) and, when mr is not NULL, to the master weights of its ranges.
 * The initialisation and checkpoint loading both come through here. */
typedef void gl_weights_fill(void *arg, const gl_param *q, float *host);
void gl_model_set_weights(gl_model *m, gl_weights_fill *fill, void *arg, const gl_master *mr);

/* Pointers into the flat buffers. */
void *gl_model_weight(const gl_model *m, size_t offset);
float *gl_model_grad(const gl_model *m, size_t offset);

/*
 * Gradient writes (grads.c).  Most of the gradient buffer belongs to
 * tensors whose gradient only ever comes from whole products -- the
 * linear layers' weights, the experts', the router's, an untied head's
 * -- and the first such product of an iteration can write the buffer
 * (beta 0) rather than add to zeros: no pass zeroing the buffer, no read
 * of the zeros by the product.
 *
 * gl_model_grads_begin() starts an iteration's gradients: it zeroes the
 * gradients of every other tensor (norm weights, biases, embeddings,
 * which kernels add into) and the padding between tensors, and marks the
 * product-written ones as awaiting their first product.  Without it the
 * buffer is the caller's: every product adds (beta 1), so a caller that
 * zeroes the buffer itself (the tests) gets the sums as before.
 *
 * gl_model_grad_beta(m, off, count) is what a product that writes the
 * whole gradient of the tensors in [off, off + count) passes as beta: 0
 * the first time in the iteration (the tensors are then marked written),
 * else 1.  Dies (an internal error) when the range mixes written and
 * unwritten tensors.
 *
 * gl_model_grads_end(), after the iteration's last backward, dies (an
 * internal error) naming a product-written tensor that no product wrote:
 * its gradient would be the last iteration's.
 */
void gl_model_grads_begin(gl_model *m);
float gl_model_grad_beta(gl_model *m, size_t off, size_t count);
void gl_model_grads_end(const gl_model *m);

/* Forward of local chunk c for one micro-batch into slot s.  The input
 * x[0] must already be there unless the chunk holds the embedding (then
 * mb->ids are looked up).  A chunk with the head also computes the
 * cross-entropy, adds sum(loss x lmask) (lmask NULL: gscale) to *loss_acc
 * (device fp32, when not NULL), adds the head's weight gradients and leaves the gradient
 * w.r.t. its output in dy. */
void gl_model_forward(gl_model *m, int c, int s, const gl_mb *mb,
                      float *loss_acc);

/* Evaluation: the forward of local chunk c for one micro-batch into slot
 * s, as gl_model_forward but computing no gradient at all (the head writes
 * each token's loss and nothing else).  A chunk with the head adds
 * sum(loss x gscale) to *loss_acc (device fp32, when not NULL): gscale is
 * the loss mask here.  On a training model it uses slot s's buffers as
 * scratch, so it must not run while a micro-batch is in flight there. */
void gl_model_forward_only(gl_model *m, int c, int s, const gl_mb *mb, float *loss_acc);

/* Backward of local chunk c, slot s: dy holds the gradient w.r.t. the
 * chunk's output; afterwards it holds the gradient w.r.t. its input (and,
 * for the embedding chunk, the embedding's gradient has been added).
 * Weight gradients go to m->g (written or added: gl_model_grad_beta).
 * Recomputed layers run their forward again first (see the top of this
 * file). */
void gl_model_backward(gl_model *m, int c, int s, const gl_mb *mb);

/* The slot's chunk input, chunk output and gradient buffers ([nl, h] act),
 * what pipeline stages exchange. */
void *gl_model_input(const gl_model *m, int c, int s);
void *gl_model_output(const gl_model *m, int c, int s);
void *gl_model_dgrad(const gl_model *m, int c, int s);

/* FP8 (--fp8-format; fp8.c).  gl_model_fp8_enable() switches a training
 * model's decoder linears to FP8 products (every layer that
 * gl_fp8_layer_on() names; nothing when o->format is off): allocates the
 * amax histories, scales (1 to start with) and the quantized weights of
 * this rank's FP8 layers.  gl_model_fp8_free() is called by
 * gl_model_free().
 *
 * Each FP8 linear runs its forward Y = X W^T, data gradient dX = dY W
 * and weight gradient dW (+)= dY^T X (fp32) through gemm_fp8:
 * gl_model_fp8_fwd() and gl_model_fp8_bwd(), which layer.c calls for
 * linear lin (0 QKV, 1 output projection, 2 gate/up, 3 down) of global
 * layer `layer` whenever gl_model_fp8_layer() says so, after
 * gl_model_fp8_weights() with the layer's four weights (QKV, output,
 * gate/up, down) at the start of its forward (it quantizes them the first
 * time in a step, and does nothing after).  The forward
 * quantizes X once, into both orientations: its rows for the forward
 * product, and its transpose into A->xt[lin], which the backward's
 * weight gradient reads (the backward needs no X: selective
 * recomputation rebuilds nothing for an FP8 linear).  A forward that
 * stops before a linear (the last layer of a fully recomputed group,
 * before its down projection) calls gl_model_fp8_keep_x() for it, which
 * writes A->xt[lin] alone.  Forward-only passes (fp8_eval) keep nothing.
 *
 * gl_model_fp8_step_end() closes a step, after the last backward and
 * before the optimizer changes the weights: the weights are quantized
 * again by the next forward; under delayed scaling the step's amaxes are
 * reduced with MAX over TP and over dp (the data-parallel group, NULL
 * for one rank) and the next step's scales computed (fp8_scale_delayed,
 * one call per group of tensors). */
void gl_model_fp8_enable(gl_model *m, const gl_fp8_opts *o);
void gl_model_fp8_free(gl_model *m);
int gl_model_fp8_layer(const gl_model *m, int layer);
void gl_model_fp8_weights(gl_model *m, int layer, const void *const W[4]);
void gl_model_fp8_fwd(gl_model *m, gl_layer_acts *A, int layer, int lin, void *Y,
                      const void *X, int n, int out, int in);
void gl_model_fp8_keep_x(gl_model *m, gl_layer_acts *A, int layer, int lin, const void *X,
                         int n, int in);
void gl_model_fp8_bwd(gl_model *m, gl_layer_acts *A, int layer, int lin, void *dX, float *dW,
                      float beta, const void *dY, int n, int out, int in);
void gl_model_fp8_step_end(gl_model *m, gl_comm *dp);

/* --fp8-param-gather (src/train/optim.c): the distributed optimizer
 * gathers this rank's FP8 weights as FP8 bytes, one per element, rather
 * than in the compute dtype.  After gl_model_fp8_step_end() and the
 * update of the rank's shard [begin, end) of the flat weights:
 *   gl_model_fp8_shard_scales() (collective: every rank of dp, edp and
 *     TP calls it, with its own shards: [begin, end) of the flat buffer
 *     over dp, and under expert parallelism [xbegin, xend) of the routed
 *     experts' region over edp, else empty) makes the scales the weights
 *     are quantized with: tensorwise, each weight's scale from the whole
 *     weight's amax, its pieces' amaxes reduced with MAX over its group
 *     and TP; blockwise, the factors of each weight's 128 x 128 blocks
 *     (both orientations) from the blocks' amaxes, its pieces' reduced
 *     with MAX over its group (not TP: a TP rank's blocks are its own);
 *     delayed, nothing to do (the step's scale, from the amax history).
 *   gl_model_fp8_quantize_range() writes into q (device memory), in flat
 *     order, the bytes of every FP8 weight element inside [begin, end) of
 *     the shard, quantized with those scales (delayed: the pieces' amaxes
 *     folded into the history's row 0, reduced over TP and DP at the next
 *     step's end, as the forward's would be: the same amax), and returns
 *     their count (q NULL: only counts).  The bytes are those the forward
 *     would have made from the whole weight: quantization is
 *     elementwise, once the scales are known.  A shard may be quantized in several ranges.
 *   gl_model_fp8_place() takes such bytes of any rank's range [begin,
 *     end) into the weights' forward orientation.  Once a weight is whole
 *     (every element placed since the step's end, in any order of
 *     ranges) it writes its transpose (fp8_transpose), and once a layer's
 *     are, marks them quantized for this step: its forward does not
 *     quantize them again (nor read their compute-dtype copies, which the
 *     optimizer no longer gathers).  An element placed twice in a step
 *     dies (internal error).
 * gl_model_fp8_wranges() lists the FP8 weights' flat ranges, by offset
 * (*n of them; none when FP8 is off). */
typedef struct {
    size_t begin, end;          /* range of the flat buffer */
    int layer, lin;             /* global layer; QKV, output, gate/up, down */
} gl_fp8_wrange;
const gl_fp8_wrange *gl_model_fp8_wranges(const gl_model *m, int *n);
void gl_model_fp8_shard_scales(gl_model *m, size_t begin, size_t end, gl_comm *dp,
                               size_t xbegin, size_t xend, gl_comm *edp);
size_t gl_model_fp8_quantize_range(gl_model *m, size_t begin, size_t end, uint8_t *q);
void gl_model_fp8_place(gl_model *m, size_t begin, size_t end, const uint8_t *q);

/* FP8 experts of MoE layers (fp8.c's last section): gl_model_fp8_moe()
 * says whether layer `layer`'s experts run in FP8 here (an FP8 layer of
 * an MoE model).  moe.c calls gl_model_fp8_moe_weights() at the start of
 * the layer's forward with its local experts' stacked weights (gate NULL
 * without SwiGLU; it quantizes them the first time in a step), then, in
 * place of moe_gemm / moe_gemm_dgrad / moe_gemm_wgrad of linear j (0
 * fc1: [w_gate; w_up] h -> guw; 1 fc2: w_down fel -> h) on the permuted
 * rows grouped by map (its offsets_host read):
 *   gl_model_fp8_moe_fwd: Y [R, out] = X_e W_e^T per expert
 *   gl_model_fp8_moe_bwd: dX [R, in] = dY_e W_e (written, not added) and
 *                         dW_e = dY_e^T X_e + beta dW_e (beta 0 or 1; 0
 *                         writes zeros for an expert without rows), dW
 *                         given in pieces of the weight's rows (fc1 with
 *                         SwiGLU: dW0 the gates' [El, fel, h], dW1 the
 *                         ups'; else dW1 NULL), with X the forward's input
 *                         rebuilt bit for bit.
 * Every expert has scales of its own for its X, W and dY. */
int gl_model_fp8_moe(const gl_model *m, int layer);
void gl_model_fp8_moe_weights(gl_model *m, int layer, const void *gate, const void *up,
                              const void *down);
void gl_model_fp8_moe_fwd(gl_model *m, int layer, int j, void *Y, const void *X,
                          const gl_moe_map *map);
void gl_model_fp8_moe_bwd(gl_model *m, int layer, int j, void *dX, float *dW0, float *dW1,
                          float beta, const void *dY, const void *X, const gl_moe_map *map);

/* FP8 operands made by the kernels that produce them (ops.h: "FP8
 * operands out of the kernels that produce them"), under delayed scaling
 * only, where the scale is known before the producer runs:
 * gl_model_fp8_fused() says whether layer `layer` takes them.  Then, in
 * place of gl_model_fp8_fwd (or gl_model_fp8_keep_x: keep_only), the
 * caller fills o with gl_model_fp8_x_out(), runs the producer of X with
 * it, and calls gl_model_fp8_fwd_made() (not after keep_only); in place
 * of gl_model_fp8_bwd, gl_model_fp8_dy_out() for the producer of dY, then
 * gl_model_fp8_bwd_made().  The FP8 operands land in the same places with
 * the same bits, so the products are the same. */
int gl_model_fp8_fused(const gl_model *m, int layer);
void gl_model_fp8_x_out(gl_model *m, gl_layer_acts *A, int layer, int lin, int keep_only,
                        gl_fp8_out *o);
void gl_model_fp8_fwd_made(gl_model *m, gl_layer_acts *A, int layer, int lin, void *Y, int n,
                           int out, int in);
void gl_model_fp8_dy_out(gl_model *m, int layer, int lin, gl_fp8_out *o);
void gl_model_fp8_bwd_made(gl_model *m, gl_layer_acts *A, int layer, int lin, void *dX,
                           float *dW, float beta, int n, int out, int in);

/* The state a checkpoint keeps: delayed scaling's amax histories, scales
 * and inverse scales (tensorwise scaling has none: 0).  They are numbered
 * by global layer (fp8.c), so they are logical tensors whatever the
 * layout: gl_model_fp8_state_dims() gives the history length and the
 * tensors of the forward (8 per layer) and backward (4 per layer) groups;
 * gl_model_fp8_state_get() returns a malloc'd host copy of
 *     hist_fwd [len, nf] scale_fwd [nf] scale_inv_fwd [nf]
 *     hist_bwd [len, nb] scale_bwd [nb] scale_inv_bwd [nb]
 * in that order, with 0 for the tensors of layers this rank does not
 * hold in FP8 (so that a MAX over all ranks assembles the whole);
 * gl_model_fp8_state_set() loads such a block (0 scales taken as 1). */
int gl_model_fp8_state_dims(const gl_model *m, int *len, int *nf, int *nb);
float *gl_model_fp8_state_get(gl_model *m);
void gl_model_fp8_state_set(gl_model *m, const float *host);

/* Context parallelism (cp.c).  gl_model_set_cp() makes the model run
 * its share of each sequence as rank cp_rank of the group cp (size
 * dm.cp; NULL and rank 0 for CP = 1), under Megatron's layout: the
 * sequence cut into 2 CP chunks of Sfull / (2 CP) tokens, rank r holding
 * chunks r and 2 CP - 1 - r (the causal mask's work balanced), in that
 * order, as its S = Sfull / CP rows of each sample.  It sets the RoPE
 * tables and learned positions of those rows and allocates the block
 * attention's scratch; the caller gives each rank the tokens, targets
 * and loss mask of its rows (gl_model_cp_position).  Attention then sees
 * the whole sequence: with --cp-comm-type p2p the K/V chunks travel round
 * the ring (CP steps, each block merged by its log-sum-exp; the backward
 * sends dK/dV round after them back to their owners); with all_gather
 * every rank's K/V is gathered first and dK/dV reduce-scattered back.
 * Dies when the device lacks the block attention ops (ops.h's
 * attn_block_fwd ...; the CPU and CUDA back ends have them).  Dropout
 * masks stay those of the whole sequence (layer.c's hidden_dp and
 * attn_dp: keyed by full-sequence positions).  Call once, after
 * gl_model_new(). */
void gl_model_set_cp(gl_model *m, gl_comm *cp, int cp_rank);

/* The position in the full sequence of row t (0 <= t < S) of a sample on
 * context-parallel rank cp_rank of cp ranks, for a sequence of Sfull. */
int gl_model_cp_position(int Sfull, int cp, int cp_rank, int t);

/* Attention's inputs in one layer's [n, ...] rows: the hq query heads
 * then the hkv key heads side by side in rows of stride ldqk (the fused
 * QKV rows, or the QK norm's qkn), the hkv value heads in rows of stride
 * ldv (the fused rows' last hkv D columns). */
typedef struct {
    const void *qk;
    int ldqk;
    const void *v;
    int ldv;
} gl_attn_in;

/* The attention of one layer under CP > 1, in place of attn_fwd /
 * attn_bwd (layer.c): o, lse from in; dqkv (the fused layout, q then k
 * then v heads in rows of qkvw) from d_o, o, lse and in.  dp (NULL: no
 * attention dropout) is the one attn_fwd would take for the rank's heads
 * of whole sequences, with seq the full sequence's length: the block ops
 * key each probability by its query's and key's positions there, and
 * Ulysses moves h0 to the rank's head group. */
void gl_model_cp_attn_fwd(gl_model *m, void *o, float *lse, const gl_attn_in *in,
                          const gl_attn_dropout *dp);
void gl_model_cp_attn_bwd(gl_model *m, void *dqkv, const void *d_o, const void *o,
                          const float *lse, const gl_attn_in *in,
                          const gl_attn_dropout *dp);

/* RoPE inverse frequencies (D/2 of them) with optional Llama 3.1 scaling,
 * and the cos/sin tables [S, D/2] they give (host). */
void gl_rope_inv_freq(const gl_arch *a, int D, double *inv_freq);
void gl_rope_tables(const gl_arch *a, int D, int S, float *cosv, float *sinv);

#ifdef __cplusplus
}
#endif
#endif
