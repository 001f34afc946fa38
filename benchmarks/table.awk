# table.awk: the markdown table of a sweep, from summarize.awk's CSV.
#
#   awk -f table.awk [-v warmup=N] results.csv > results.md
#
# Columns: run, GPUs, tokens/s/GPU, TFLOP/s/GPU, MFU (percent), peak
# memory per GPU, scaling efficiency (percent, against the series' run
# with the fewest GPUs), mean iteration time +- its standard deviation,
# kept records and status.  An empty CSV field shows as "-".  Numbers
# are shown with 4 significant digits (whole above 1000), percentages
# with one decimal.
BEGIN { FS = "," }

function g4(x) {
    if (x == "") return "-"
    return x >= 1000 ? sprintf("%.0f", x) : sprintf("%.4g", x)
}
function pct(x) { return x == "" ? "-" : sprintf("%.1f%%", 100 * x) }
function ms(x, s) {
    if (x == "") return "-"
    return s == "" ? sprintf("%.1f", x) : sprintf("%.1f ± %.1f", x, s)
}

NR == 1 {
    # Column numbers by name, so the order of the CSV may change.
    for (i = 1; i <= NF; i++) col[$i] = i
    print "| Run | GPUs | Tokens/s/GPU | TFLOP/s/GPU | MFU | Memory/GPU (GiB) | Scaling eff. | Iteration (ms) | Records | Status |"
    print "|-----|-----:|-------------:|------------:|----:|-----------------:|-------------:|---------------:|--------:|--------|"
    next
}

{
    printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", \
        $col["name"], $col["gpus"], g4($col["tokens_per_sec_per_gpu"]), \
        g4($col["tflops_per_gpu"]), pct($col["mfu"]), g4($col["mem_gib"]), \
        pct($col["scaling_efficiency"]), ms($col["iter_ms"], $col["iter_ms_std"]), \
        $col["records"], $col["status"]
}

END {
    if (warmup != "")
        printf "\nRecords of iterations <= %d are dropped as warm-up.  Rates are harmonic means over the kept records; efficiency is tokens/s/GPU against the run with the fewest GPUs of the same series.\n", warmup
}
