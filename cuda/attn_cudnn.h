/*
 * attn_cudnn.h: the CUDA back end's attention implementations and its
 * per-op profiler, as seen from C (tests, benchmarks, tools).
 *
 * Attention.  ops->attn_fwd / attn_bwd of a CUDA device run one of two
 * implementations of the same contract (src/device/ops.h):
 *   - cudnn:  cuDNN 9's fused flash attention (attn_cudnn.cu), built from
 *             the backend graph API and cached per shape; only in builds
 *             configured with cuDNN (GL_HAVE_CUDNN);
 *   - native: the tensor-core kernels of attention_fwd.cu/attention_bwd.cu,
 *             always built, the reference the cudnn path is tested against.
 * The environment variable GRIDLM_ATTENTION picks one when the device is
 * opened:
 *   unset or "auto"  cudnn when a plan builds for the shape, else native
 *                    (the first refusal prints one warning line);
 *   "cudnn"          cudnn or die naming the shape and cuDNN's reason;
 *   "native"         the kernels written here.
 * Context parallelism's ops->attn_block_fwd / attn_block_bwd follow the
 * same choice for the blocks cuDNN's graphs describe (full, and the
 * causal diagonal, without dropout); every other block runs the kernels
 * of attn_block.cu whatever the choice.
 *
 * Profiler.  GRIDLM_PROFILE=1 when the device is opened wraps every
 * enqueuing op of the table with a pair of CUDA events; the times are
 * read at sync/download (no extra host synchronisation in the hot path)
 * and a table of time per op is printed on rank 0 when the device closes.
 */
#ifndef GL_CUDA_ATTN_CUDNN_H
#define GL_CUDA_ATTN_CUDNN_H

#include "device/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { GL_ATTN_AUTO = 0, GL_ATTN_CUDNN = 1, GL_ATTN_NATIVE = 2 };

/* Sets the attention implementation of CUDA device d (GL_ATTN_*) and
 * returns the previous one; impl < 0 only returns the current one.  Dies
 * for GL_ATTN_CUDNN in a build without cuDNN. */
int gl_cuda_attn_impl(gl_dev *d, int impl);

/* Sets whether CUDA device d runs deterministically (GRIDLM_DETERMINISTIC=1
 * when it opens; --deterministic-mode) and returns the previous setting;
 * on < 0 only returns it.  Deterministic: attention's backward (and
 * context parallelism's block backward) runs cuDNN's deterministic graph
 * (dq = dS K straight into the bf16 output, the dS kept in a workspace of
 * B Hq S Sk bf16: the form cudnn-frontend builds for Hopper's
 * set_deterministic_algorithm), or, where cuDNN builds no plan for it or
 * its workspace would pass 4 GiB, the kernels here, whose every sum has a
 * fixed order.  Not the usual graph: its fp32 dq accumulator makes cuDNN
 * add dq in an order that varies from run to run without declaring it
 * (the same 8-expert MoE step on an H200 twice gave gradient norms
 * 11.0013791 and 11.0011620; benchmarks/RESULTS.md, session 14).
 * Forward plans are built only from engines that do not declare
 * themselves nondeterministic. */
int gl_cuda_deterministic(gl_dev *d, int on);

/* cudnnGetVersion() of the loaded cuDNN (e.g. 91900), 0 in a build
 * without cuDNN. */
long gl_cuda_cudnn_version(void);

/* How the attention calls of device d ran since it was opened: attn_fwd
 * and attn_bwd, and context parallelism's attn_block_fwd and
 * attn_block_bwd (blk_*).  The same choice rules hold for the blocks:
 * cuDNN runs every block without dropout that gl_attn_block_split cuts
 * into parts (under "cudnn" it must), the kernels every other block. */
typedef struct {
    long fwd_cudnn, bwd_cudnn;     /* calls run by cuDNN */
    long fwd_native, bwd_native;   /* calls run by the kernels here */
    long plans;                    /* cuDNN execution plans built */
    long refused;                  /* shapes cuDNN built no plan for */
    long blk_fwd_cudnn, blk_bwd_cudnn;   /* block calls run by cuDNN */
    long blk_fwd_native, blk_bwd_native; /* and by attn_block.cu */
    long det_tiled;                /* deterministic backwards (whole or a
                                    * block's part) run in tiles of fewer
                                    * samples or heads, their workspace
                                    * being too large at once */
} gl_attn_counts;
void gl_cuda_attn_counts(gl_dev *d, gl_attn_counts *c);

/* The profiler's totals of one op ("gemm", "attn_fwd", ...) of device d
 * (opened with GRIDLM_PROFILE=1), up to its last sync or download: 0 and
 * zeros when the op never ran or the device is not profiled. */
int gl_cuda_profile_get(gl_dev *d, const char *op, long *calls, double *ms);

#ifdef __cplusplus
}
#endif
#endif
