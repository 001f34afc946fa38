/*
 * peak.h: the dense bf16 peak of a GPU, the denominator of MFU.
 *
 * The table is ../shared/reference/flops.md's (no sparsity): H100 SXM
 * and H200 989.4 TFLOP/s, H100 PCIe 756, A100 312, GH200 989.4, B200
 * 2250.  Parts are recognised from the name CUDA reports
 * (cudaDeviceProp.name, kept in gl_dev.name): "NVIDIA H100 80GB HBM3" and
 * "NVIDIA H100 SXM5 ..." are the SXM part, "NVIDIA H100 PCIe" the PCIe
 * one.  Variants with other clocks and power limits (H100 NVL, H200 NVL,
 * GB200, H800, ...) and every other name are unknown: MFU is then
 * reported as n/a unless --peak-tflops gives the peak.
 */
#ifndef GL_TRAIN_PEAK_H
#define GL_TRAIN_PEAK_H

#ifdef __cplusplus
extern "C" {
#endif

/* Peak dense bf16 TFLOP/s of the device called name ("cpu", a CUDA
 * device name); 0 when unknown. */
double gl_peak_tflops_for(const char *name);

/* The peak MFU is measured against: --peak-tflops when given (> 0), else
 * the table's value for the device name; 0 when neither knows. */
double gl_peak_tflops(double peak_flag, const char *name);

#ifdef __cplusplus
}
#endif
#endif
