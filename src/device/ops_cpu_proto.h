/*
 * ops_cpu_proto.h: prototypes of the CPU kernels, generic over the
 * element type.  No include guard: ops_cpu.h includes it twice, with
 * `real` defined as float and as double and GL_K(name) naming the
 * function of that type (gl_cpu_NAME_f32, gl_cpu_NAME_f64).
 *
 * The arguments mean what they mean in ops.h, with every buffer (act or
 * f32 there) an array of `real` here.  The definitions, with the math of
 * each kernel, are in ops_cpu_impl.h.
 */

void GL_K(gemm)(int transa, int transb, int m, int n, int k, real alpha,
                const real *A, int lda, const real *B, int ldb, real beta,
                real *C, int ldc);

void GL_K(add)(real *y, const real *x, const real *r, size_t count);

void GL_K(rmsnorm_fwd)(real *y, real *rstd, const real *x, const real *w,
                       int n, int h, real eps);
void GL_K(rmsnorm_bwd)(real *dx, real *dw, const real *dy, const real *x,
                       const real *w, const real *rstd, int n, int h,
                       int accumulate_dx);

void GL_K(rope_fwd)(real *x, int ld, int B, int S, int H, int D,
                    const real *cos, const real *sin);
void GL_K(rope_bwd)(real *x, int ld, int B, int S, int H, int D,
                    const real *cos, const real *sin);

void GL_K(attn_fwd)(real *o, int ldo, real *lse, const real *q, int ldq,
                    const real *k, int ldk, const real *v, int ldv,
                    int B, int S, int Hq, int Hkv, int D, real scale,
                    const gl_attn_dropout *drop);
void GL_K(attn_bwd)(real *dq, real *dk, real *dv, int ldg,
                    const real *dout, int lddo, const real *o, int ldo,
                    const real *lse, const real *q, int ldq,
                    const real *k, int ldk, const real *v, int ldv,
                    int B, int S, int Hq, int Hkv, int D, real scale,
                    const gl_attn_dropout *drop);

/* Context parallelism's block attention (ops.h: attn_block_fwd ...). */
void GL_K(attn_block_fwd)(real *o, int ldo, real *lse, const real *q, int ldq,
                          const real *k, int ldk, const real *v, int ldv,
                          int B, int Sq, int Sk, int Hq, int Hkv, int D,
                          real scale, const gl_attn_pos *qpos,
                          const gl_attn_pos *kpos, gl_attn_mask mask,
                          const gl_attn_dropout *drop);
void GL_K(attn_merge)(real *o, real *lse, const real *o_b, const real *lse_b,
                      int B, int S, int Hq, int D, int first);
void GL_K(attn_delta)(real *delta, const real *dout, int lddo, const real *o,
                      int ldo, int B, int S, int Hq, int D);
void GL_K(attn_block_bwd)(real *dq, int lddq, real *dk, real *dv, int lddkv,
                          const real *dout, int lddo, const real *lse,
                          const real *delta, const real *q, int ldq,
                          const real *k, int ldk, const real *v, int ldv,
                          int B, int Sq, int Sk, int Hq, int Hkv, int D,
                          real scale, const gl_attn_pos *qpos,
                          const gl_attn_pos *kpos, gl_attn_mask mask,
                          const gl_attn_dropout *drop);

void GL_K(swiglu_fwd)(real *y, const real *gu, int n, int f);
void GL_K(swiglu_bwd)(real *dgu, const real *dy, const real *gu, int n, int f);

void GL_K(embed_fwd)(real *y, const real *table, const int32_t *ids, int n,
                     int h, long vocab_start, int vl);
void GL_K(embed_bwd)(real *dtable, const real *dy, const int32_t *ids, int n,
                     int h, long vocab_start, int vl);

void GL_K(ce_max)(real *rowmax, const real *logits, int ld, int n, int valid);
void GL_K(ce_sum)(real *stats, const real *logits, int ld,
                  const int32_t *targets, const real *rowmax, int n,
                  int valid, long vocab_start);
void GL_K(ce_bwd)(real *loss, real *logits, int ld, const int32_t *targets,
                  const real *rowmax, const real *stats, const real *gscale,
                  int n, int vl, int valid, long vocab_start);

void GL_K(scale)(real *x, real s, size_t count);
void GL_K(sumsq)(real *out, const real *x, size_t count);
void GL_K(nonfinite)(real *out, const real *x, size_t count);
void GL_K(dot)(real *out, const real *x, const real *w, size_t count);

/* One AdamW segment (see gl_adamw_hyper); out (may be NULL) receives the
 * updated weights. */
void GL_K(adamw)(real *master, const real *grad, real *m, real *v, real *out,
                 size_t count, real weight_decay, real lr, real beta1,
                 real beta2, real eps, real grad_scale, long step);

/* Megatron's GPT model: LayerNorm, GeLU, biases, dropout, positions. */
void GL_K(layernorm_fwd)(real *y, real *mean, real *rstd, const real *x,
                         const real *w, const real *b, int n, int h, real eps,
                         int one_plus);
void GL_K(layernorm_bwd)(real *dx, real *dw, real *db, const real *dy,
                         const real *x, const real *w, const real *mean,
                         const real *rstd, int n, int h, int one_plus,
                         int accumulate_dx);

void GL_K(gelu_fwd)(real *y, const real *x, const real *bias, int n, int f);
void GL_K(gelu_bwd)(real *dx, real *dbias, const real *dy, const real *x,
                    const real *bias, int n, int f);

void GL_K(bias_add)(real *y, const real *bias, int n, int w);
void GL_K(bias_grad)(real *dbias, const real *dy, int n, int w);

void GL_K(dropout)(real *y, const real *x, int n, int w,
                   const gl_dropout *dp);
void GL_K(bias_dropout_add)(real *out, const real *residual, const real *y,
                            const real *bias, int n, int w,
                            const gl_dropout *dp);

void GL_K(pos_embed_fwd)(real *y, const real *pos, const int32_t *positions,
                         int n, int h, int max_pos);

void GL_K(head_rmsnorm_fwd)(real *y, int ldy, real *rstd, const real *x,
                            int ldx, const real *w, int n, int heads, int D,
                            real eps);
void GL_K(head_rmsnorm_bwd)(real *dx, int ldg, real *dw, const real *dy,
                            const real *x, int ldx, const real *w,
                            const real *rstd, int n, int heads, int D);
