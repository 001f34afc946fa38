# cuda: the CUDA back end of src/device/ops.h (see DESIGN.md): the device,
# cuBLASLt matrix products and one .cu file per kernel family.
if HAVE_CUDA
libgridlm_a_SOURCES += \
	%reldir%/gl_cuda.h %reldir%/fp8_tile.cuh %reldir%/vec.cuh %reldir%/warp.cuh %reldir%/attn_common.cuh \
	%reldir%/norm_common.cuh \
	%reldir%/layernorm.cuh \
	%reldir%/attn_cudnn.h \
	%reldir%/dev_cuda.cu \
	%reldir%/profile.cu \
	%reldir%/gemm.cu \
	%reldir%/elementwise.cu \
	%reldir%/reduce.cu \
	%reldir%/rmsnorm.cu \
	%reldir%/rope.cu \
	%reldir%/swiglu.cu \
	%reldir%/embed.cu \
	%reldir%/crossentropy.cu \
	%reldir%/attention_fwd.cu \
	%reldir%/attention_bwd.cu \
	%reldir%/attn_block.cu \
	%reldir%/attn_cudnn.cu \
	%reldir%/adamw.cu \
	%reldir%/layernorm.cu \
	%reldir%/gelu.cu \
	%reldir%/bias.cu \
	%reldir%/dropout.cu \
	%reldir%/fp8.cu \
	%reldir%/moe.cu \
	%reldir%/lanes.cu

# Every operation against the CPU reference back end, on a GPU (skips
# where there is none).
check_PROGRAMS += t/ops-cuda.t
t_ops_cuda_t_SOURCES = t/ops-cuda.c t/gpu-util.c t/gpu-util.h
t_ops_cuda_t_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/cuda
t_ops_cuda_t_LDADD = $(TAP_LIBS)
TESTS += t/ops-cuda.t

# cuDNN's fused attention against the kernels here and the CPU reference,
# and the op profiler (skips without a GPU or without cuDNN).
check_PROGRAMS += t/attn-cudnn.t
t_attn_cudnn_t_SOURCES = t/attn-cudnn.c t/gpu-util.c t/gpu-util.h
t_attn_cudnn_t_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/cuda
t_attn_cudnn_t_LDADD = $(TAP_LIBS)
TESTS += t/attn-cudnn.t
endif
