# plotdata.awk: gnuplot's input for plot.gp, from summarize.awk's CSV.
#
#   awk -f plotdata.awk -v titles=FILE results.csv > plot.dat
#
# One data block per series (blocks separated by two blank lines, so
# gnuplot's `index i` selects series i), rows sorted by GPU count:
#   GPUS TOKENS_PER_SEC_PER_GPU TOKENS_PER_SEC SCALING_EFFICIENCY TFLOPS_PER_GPU
# Only runs with status ok and a throughput are plotted.  The series
# names go to FILE, one per line, in block order.
BEGIN { FS = "," }

NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }

$col["status"] == "ok" && $col["tokens_per_sec_per_gpu"] != "" {
    s = $col["series"]
    if (!(s in count)) { order[++ns] = s; count[s] = 0 }
    k = ++count[s]
    g[s, k] = $col["gpus"] + 0
    row[s, k] = $col["gpus"] " " $col["tokens_per_sec_per_gpu"] " " $col["tokens_per_sec"] " " \
                ($col["scaling_efficiency"] == "" ? "NaN" : $col["scaling_efficiency"]) " " \
                ($col["tflops_per_gpu"] == "" ? "NaN" : $col["tflops_per_gpu"])
}

END {
    for (j = 1; j <= ns; j++) {
        s = order[j]
        # insertion sort by GPU count (a sweep has few runs)
        for (a = 2; a <= count[s]; a++)
            for (b = a; b > 1 && g[s, b - 1] > g[s, b]; b--) {
                t = g[s, b]; g[s, b] = g[s, b - 1]; g[s, b - 1] = t
                t = row[s, b]; row[s, b] = row[s, b - 1]; row[s, b - 1] = t
            }
        if (j > 1) printf "\n\n"
        printf "# series %s\n", s
        for (k = 1; k <= count[s]; k++)
            print row[s, k]
        print s > titles
    }
    if (!ns) printf "" > titles
    close(titles)
}
