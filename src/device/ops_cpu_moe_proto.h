/*
 * ops_cpu_moe_proto.h: prototypes of the CPU mixture-of-experts kernels,
 * generic over the element type.  No include guard: ops_cpu_moe.h
 * includes it twice, with `real` defined as float and as double and
 * GL_K(name) naming the function of that type.
 *
 * The arguments mean what they mean in ops.h, with the arrays of a
 * gl_moe_map passed one by one, every act or f32 buffer an array of
 * `real`, and rows_max the permuted buffers' rows.  The definitions are
 * in ops_cpu_moe_impl.h.
 */

void GL_K(moe_route)(int32_t *expert, real *weight, int32_t *rows,
                     int32_t *row_tok, int32_t *offsets,
                     real *tokens_per_expert, real *dropped,
                     const real *logits, const real *bias, int n,
                     int rows_max, const gl_moe_route_cfg *cfg);
void GL_K(moe_route_bwd)(real *dlogits, const real *dweight,
                         const real *logits, const int32_t *expert,
                         const int32_t *rows, int n,
                         const gl_moe_route_cfg *cfg);

void GL_K(moe_permute)(real *xp, const real *x, int h,
                       const int32_t *row_tok, const int32_t *offsets, int E,
                       int rows_max);
void GL_K(moe_permute_bwd)(real *dx, const real *dxp, int h,
                           const int32_t *rows, int n, int k,
                           int accumulate_dx);

void GL_K(moe_unpermute)(real *out, const real *yp, int h,
                         const real *weight, const int32_t *rows, int n,
                         int k);
void GL_K(moe_unpermute_bwd)(real *dyp, real *dweight, const real *dout,
                             const real *yp, int h, const real *weight,
                             const int32_t *rows, const int32_t *row_tok,
                             const int32_t *offsets, int n, int k, int E,
                             int rows_max);

void GL_K(moe_gemm)(real *Y, int ldY, const real *X, const real *W, int in,
                    int out, const int32_t *offsets, int E, int rows_max);
void GL_K(moe_gemm_dgrad)(real *dX, const real *dY, int ldY, const real *W,
                          int in, int out, const int32_t *offsets, int E,
                          int rows_max, int accumulate_dx);
void GL_K(moe_gemm_wgrad)(real *dW, const real *dY, int ldY, const real *X,
                          int in, int out, const int32_t *offsets, int E,
                          int accumulate_dw);

void GL_K(moe_aux_counts)(real *counts, const real *logits, int n,
                          long row0, int seq_len,
                          const gl_moe_route_cfg *cfg);
void GL_K(moe_aux_loss)(real *loss, real *dlogits, const real *logits,
                        const real *counts, int n, long row0, int seq_len,
                        real scale, real gscale, const gl_moe_route_cfg *cfg);
void GL_K(moe_z_loss)(real *loss, real *dlogits, const real *logits, int n,
                      int E, real scale, real gscale);
void GL_K(moe_bias_update)(real *bias, const real *counts, int E, real rate);
