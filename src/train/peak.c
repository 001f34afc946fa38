/*
 * peak.c: the peak-FLOP table behind MFU (peak.h).
 */
#include <config.h>

#include <string.h>

#include "train/peak.h"

/* Whether the name mentions word w (case-sensitive, as CUDA spells its
 * parts) and not as the tail of a longer part number (so "GH200" is not
 * "H200" and "GB200" is not "B200"). */
static int mentions(const char *name, const char *w)
{
    size_t n = strlen(w);
    for (const char *p = strstr(name, w); p; p = strstr(p + 1, w)) {
        int starts = p == name || !((p[-1] >= 'A' && p[-1] <= 'Z') ||
                                    (p[-1] >= 'a' && p[-1] <= 'z') ||
                                    (p[-1] >= '0' && p[-1] <= '9'));
        char after = p[n];
        int ends = !((after >= '0' && after <= '9') || (after >= 'A' && after <= 'Z') ||
                     (after >= 'a' && after <= 'z'));
        if (starts && ends)
            return 1;
    }
    return 0;
}

double gl_peak_tflops_for(const char *name)
{
    if (!name || !*name)
        return 0;
    /* parts that share a family name but not its clocks: unknown */
    if (mentions(name, "NVL"))
        return 0;
    if (mentions(name, "GH200"))
        return 989.4;
    if (mentions(name, "H200"))
        return 989.4;
    if (mentions(name, "H100"))
        return (mentions(name, "PCIe") || mentions(name, "PCIE")) ? 756.0 : 989.4;
    if (mentions(name, "A100"))
        return 312.0;
    if (mentions(name, "B200"))
        return 2250.0;
    return 0;
}

double gl_peak_tflops(double peak_flag, const char *name)
{
    return peak_flag > 0 ? peak_flag : gl_peak_tflops_for(name);
}
