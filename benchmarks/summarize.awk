# summarize.awk: one CSV row per run of a sweep, from gridlm-train's
# --log-json records (see benchmarks/README.md).
#
#   awk -F '\t' -v warmup=N -f summarize.awk runs.tsv > results.csv
#
# runs.tsv has one line per run: NAME GPUS STATUS LOG FLAGS (tab-separated;
# STATUS is ok, failed or missing).  Each LOG holds one flat JSON object
# per logged iteration, as gridlm-train --log-json writes them.
#
# Per run, records with iteration <= warmup are dropped, and of the rest:
#   iter_ms                  mean of elapsed_ms;  iter_ms_std its sample
#                            standard deviation (n - 1)
#   tokens_per_sec_per_gpu,  harmonic means: each record covers the same
#   tflops_per_gpu, mfu      work, so this is the rate over the whole
#                            measured window (total work / total time)
#   tokens_per_sec           tokens_per_sec_per_gpu x GPUS
#   mem_gib                  maximum (peak memory per GPU)
#   loss                     the last record's
#   scaling_efficiency       tokens_per_sec_per_gpu / that of the run with
#                            the fewest GPUs in the same series (the part
#                            of NAME before '/'; the first such run when
#                            several tie): 1 is perfect linear scaling
# A value a record gives as null (mfu on CPUs) or 0 is left out of its mean;
# a column no record gives is empty.  A run that succeeded but kept no
# record has status no-data.  Numbers are written with 10 significant
# digits.  Needs only POSIX awk (mawk and gawk both work).

# The number under "key" in a flat JSON object, or "" when the key is
# absent or its value is not a number (null).
function jnum(line, key,    rest) {
    if (!match(line, "\"" key "\"[ \t]*:[ \t]*"))
        return ""
    rest = substr(line, RSTART + RLENGTH)
    if (!match(rest, /^-?[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?/))
        return ""
    return substr(rest, 1, RLENGTH) + 0
}

function fmt(x) { return x == "" ? "" : sprintf("%.10g", x) }

function csvq(s) {
    if (s ~ /[",]/) {
        gsub(/"/, "\"\"", s)
        s = "\"" s "\""
    }
    return s
}

function series_of(name) { return index(name, "/") ? substr(name, 1, index(name, "/") - 1) : "default" }

# Read one run's log into the per-run arrays (index r).
function read_log(r, file,    line, it, v, n, s1, i, inv_t, inv_f, inv_m, nt, nf, nm, mem, loss, sumsq) {
    n = 0; s1 = 0; sumsq = 0
    inv_t = 0; inv_f = 0; inv_m = 0; nt = 0; nf = 0; nm = 0
    mem = ""; loss = ""
    while ((getline line < file) > 0) {
        it = jnum(line, "iteration")
        # Training records only: validation records carry no elapsed_ms.
        if (it == "" || it <= warmup || jnum(line, "elapsed_ms") == "")
            continue
        v = jnum(line, "elapsed_ms")
        if (v != "") { n++; s1 += v; sumsq += v * v; ms[r, n] = v }
        v = jnum(line, "tokens_per_sec_per_gpu"); if (v != "" && v > 0) { nt++; inv_t += 1 / v }
        v = jnum(line, "tflops_per_gpu"); if (v != "" && v > 0) { nf++; inv_f += 1 / v }
        v = jnum(line, "mfu"); if (v != "" && v > 0) { nm++; inv_m += 1 / v }
        v = jnum(line, "mem_gib"); if (v != "" && (mem == "" || v > mem)) mem = v
        v = jnum(line, "loss"); if (v != "") loss = v
        kept[r]++
    }
    close(file)
    iter_ms[r] = n ? s1 / n : ""
    iter_std[r] = ""
    if (n > 1) {
        # two-pass variance, stable for iteration times of similar size
        sumsq = 0
        for (i = 1; i <= n; i++)
            sumsq += (ms[r, i] - iter_ms[r]) ^ 2
        iter_std[r] = sqrt(sumsq / (n - 1))
    }
    tpg[r] = nt ? nt / inv_t : ""
    tfl[r] = nf ? nf / inv_f : ""
    mfu[r] = nm ? nm / inv_m : ""
    memg[r] = mem
    lastloss[r] = loss
}

{
    nr++
    name[nr] = $1; gpus[nr] = $2 + 0; status[nr] = $3; logf[nr] = $4; flags[nr] = $5
    ser[nr] = series_of($1)
    kept[nr] = 0
    if (status[nr] == "ok") {
        read_log(nr, logf[nr])
        if (!kept[nr])
            status[nr] = "no-data"
    }
}

END {
    # The base of each series: its ok run with the fewest GPUs.
    for (r = 1; r <= nr; r++)
        if (status[r] == "ok" && tpg[r] != "" &&
            (!(ser[r] in base) || gpus[r] < gpus[base[ser[r]]]))
            base[ser[r]] = r

    print "name,series,gpus,status,records,iter_ms,iter_ms_std,tokens_per_sec_per_gpu," \
          "tokens_per_sec,tflops_per_gpu,mfu,mem_gib,loss,scaling_efficiency,flags"
    for (r = 1; r <= nr; r++) {
        eff = ""
        if (status[r] == "ok" && tpg[r] != "" && (ser[r] in base))
            eff = tpg[r] / tpg[base[ser[r]]]
        tot = tpg[r] == "" ? "" : tpg[r] * gpus[r]
        print csvq(name[r]) "," csvq(ser[r]) "," gpus[r] "," status[r] "," kept[r] "," \
              fmt(iter_ms[r]) "," fmt(iter_std[r]) "," fmt(tpg[r]) "," fmt(tot) "," \
              fmt(tfl[r]) "," fmt(mfu[r]) "," fmt(memg[r]) "," fmt(lastloss[r]) "," \
              fmt(eff) "," csvq(flags[r])
    }
}
