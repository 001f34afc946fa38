/*
 * train-peak: the peak-FLOP table behind MFU (src/train/peak.h) against
 * ../shared/reference/flops.md, on the names CUDA reports for each part,
 * and the rules around it: --peak-tflops wins, unknown parts and the CPU
 * have no peak (MFU n/a).
 */
#include <config.h>

#include <stdio.h>

#include "tap.h"
#include "train/peak.h"

static void is_peak(const char *name, double want)
{
    double got = gl_peak_tflops_for(name);
    ok(got == want, "\"%s\": %g TFLOP/s (want %g)", name, got, want);
}

int main(void)
{
    plan(NO_PLAN);
    is_peak("NVIDIA H100 80GB HBM3", 989.4);       /* SXM5 */
    is_peak("NVIDIA H100 SXM5 80GB", 989.4);
    is_peak("NVIDIA H100 PCIe", 756.0);
    is_peak("NVIDIA H100", 989.4);
    is_peak("NVIDIA H200", 989.4);
    is_peak("NVIDIA GH200 480GB", 989.4);
    is_peak("NVIDIA A100-SXM4-80GB", 312.0);
    is_peak("NVIDIA A100-SXM4-40GB", 312.0);
    is_peak("NVIDIA A100 80GB PCIe", 312.0);
    is_peak("NVIDIA B200", 2250.0);
    /* other clocks and power limits, other parts, the CPU: unknown */
    is_peak("NVIDIA H100 NVL", 0);
    is_peak("NVIDIA H200 NVL", 0);
    is_peak("NVIDIA GB200", 0);
    is_peak("NVIDIA H800", 0);
    is_peak("NVIDIA L40S", 0);
    is_peak("NVIDIA A10", 0);
    is_peak("NVIDIA A1000", 0);
    is_peak("cpu", 0);
    is_peak("", 0);
    is_peak(NULL, 0);
    ok(gl_peak_tflops(500, "NVIDIA H100 80GB HBM3") == 500, "--peak-tflops overrides the table");
    ok(gl_peak_tflops(0, "NVIDIA H200") == 989.4, "no --peak-tflops: the table");
    ok(gl_peak_tflops(0, "cpu") == 0, "cpu without --peak-tflops: no peak (MFU n/a)");
    ok(gl_peak_tflops(123.5, "cpu") == 123.5, "cpu with --peak-tflops: that peak");
    return done_testing();
}
