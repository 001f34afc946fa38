# cuda: the CUDA back end of src/device/ops.h (see DESIGN.md): the device,
# cuBLASLt matrix products and one .cu file per kernel family.
if HAVE_CUDA
libgridlm_a_SOURCES += \
	%reldir%/gl_cuda.h %reldir%/vec.cuh %reldir%/attn_common.cuh \
	%reldir%/dev_cuda.cu \
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
	%reldir%/adamw.cu

# Every operation against the CPU reference back end, on a GPU (skips
# where there is none).
check_PROGRAMS += t/ops-cuda.t
t_ops_cuda_t_SOURCES = t/ops-cuda.c
t_ops_cuda_t_LDADD = $(TAP_LIBS)
TESTS += t/ops-cuda.t
endif
