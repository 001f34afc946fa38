# project.awk: an analytic model of one training iteration of a Llama
# shape under a TP/PP/DP layout, checked against measured runs and used
# to project to larger machines.  The method and every formula are in
# benchmarks/projection.md; run it through project.sh.
#
#   awk -f project.awk -v train=gridlm-train -v calib=results.csv -v sweeps="a.sweep b.sweep" \
#       -v achieved= -v peak=989.4 -v gpn=8 -v nvl=360 -v nvl_lat=50 \
#       -v ib=50 -v ib_lat=20 -v hbm=3000 -v dp_overlap=1 -v tp_overlap=0 \
#       -v calib_run= -v csv=0
#
# Everything happens in BEGIN: the measured CSV (sweep.sh's results.csv)
# and the sweep files (NAME GPUS FLAGS... per line, sweep.sh's syntax)
# are read with getline.  Each run's model, layout, FLOPs and parameters
# come from gridlm-train itself (-v train=PROG): its dry run for the run's
# GPU count, `gridlm-train --dry-run --world-size GPUS FLAGS...`, prints
# them as key=value lines (src/train/run_plan.h), so the presets,
# defaults, checks and counts are the program's, not copies.  Units:
# seconds, bytes, bytes per second; bandwidth options are GB/s (1e9
# bytes/s), latencies in us.  Needs only POSIX awk (mawk and gawk both
# work).

function die(msg) {
    printf "project.sh: error: %s\n", msg > "/dev/stderr"
    exit 2
}

function note(msg) { printf "project.sh: %s\n", msg > "/dev/stderr" }

function min(a, b) { return a < b ? a : b }
function max(a, b) { return a > b ? a : b }

# ---- the run, from gridlm-train --------------------------------------------

# s as one word of a sh command line.
function shq(s) {
    gsub(/'/, "'\\''", s)
    return "'" s "'"
}

# The plan of `gridlm-train --dry-run --world-size GPUS FLAGS` into K
# (key -> value; the keys are in src/train/run_plan.h).  Each command line
# runs once; when gridlm-train refuses the run, its message stops here.
function dry_run(K, gpus, flags,    id, cmd, n, w, i, at, line, status, err, other, text) {
    split("", K)
    id = gpus " " flags
    if (!(id in plans)) {
        cmd = shq(train) " --dry-run --world-size " gpus
        n = split(flags, w, /[ \t]+/)
        for (i = 1; i <= n; i++) if (w[i] != "") cmd = cmd " " shq(w[i])
        cmd = cmd " 2>&1; echo \"#exit $?\""
        status = ""; err = ""; other = ""; text = ""
        while ((cmd | getline line) > 0) {
            if (line ~ /^#exit [0-9]+$/) status = substr(line, 7) + 0
            else if (line ~ /^[a-z0-9_]+=/) text = text line "\n"
            else if (err == "" && (at = index(line, ": error: ")) > 0) err = substr(line, at + 9)
            else if (other == "") other = line
        }
        close(cmd)
        if (status != 0)
            die("run " RUN ": " (err != "" ? err : other != "" ? other : \
                "gridlm-train (" train ") did not run"))
        plans[id] = text
    }
    n = split(plans[id], w, "\n")
    for (i = 1; i <= n; i++)
        if ((at = index(w[i], "=")) > 0) K[substr(w[i], 1, at - 1)] = substr(w[i], at + 1)
}

# Run RUN on GPUS GPUs with gridlm-train flags FLAGS, into C: the shape,
# the layout and the counts as gridlm-train's dry run gives them (its
# presets, defaults and checks; its FLOP and parameter counts).
function parse_run(C, flags, gpus,    K) {
    dry_run(K, gpus, flags)
    if (!("max_rank_params" in K))
        die("run " RUN ": gridlm-train (" train ") printed no plan for '" flags "': drop " \
            "--help or --version from the run's flags, or give --train a gridlm-train as " \
            "new as this project.sh")
    split("", C)
    C["gpus"] = gpus
    C["layers"] = K["num_layers"] + 0; C["hidden"] = K["hidden_size"] + 0
    C["ffn"] = K["ffn_hidden_size"] + 0; C["heads"] = K["num_attention_heads"] + 0
    C["groups"] = K["num_query_groups"] + 0; C["kvch"] = K["kv_channels"] + 0
    C["seq"] = K["seq_length"] + 0; C["vpad"] = K["padded_vocab_size"] + 0
    C["untie"] = K["untie_embeddings_and_output_weights"] + 0
    C["model_flags"] = K["model_flags"]
    C["tp"] = K["tensor_model_parallel_size"] + 0; C["cp"] = K["context_parallel_size"] + 0
    C["pp"] = K["pipeline_model_parallel_size"] + 0; C["vp"] = K["virtual_pipeline_size"] + 0
    C["dp"] = K["data_parallel_size"] + 0; C["sp"] = K["sequence_parallel"] + 0
    C["mbs"] = K["micro_batch_size"] + 0; C["gbs"] = K["global_batch_size"] + 0
    C["M"] = K["num_micro_batches"] + 0; C["dist"] = K["distributed_optimizer"] + 0
    C["ogr"] = K["overlap_grad_reduce"] + 0; C["opg"] = K["overlap_param_gather"] + 0
    C["bf16"] = K["bf16"] + 0
    C["ab"] = C["bf16"] ? 2 : 4       # bytes of an activation / compute weight
    # FLOPs per token (the model, a layer, the LM head over the vocabulary
    # padded for TP), and the parameters of one GPU of the fullest stage
    C["flops_token"] = K["flops_per_token"] + 0; C["flops_layer"] = K["layer_flops_per_token"] + 0
    C["flops_head"] = K["head_flops_per_token"] + 0; C["params_local"] = K["max_rank_params"] + 0
    if (C["cp"] != 1)
        die("run " RUN ": --context-parallel-size " C["cp"] " is not modelled (gridlm's loop " \
            "does not run it): use 1")
}

# ---- communication ---------------------------------------------------------

# Time of one collective of nccl-tests size S bytes (the whole array) over
# `ranks` ranks whose global ranks are `stride` apart, G GPUs a node, one
# NIC per GPU.  Ring costs: all-reduce 2(n-1)/n S / busbw, reduce-scatter
# and all-gather (n-1)/n S / busbw.  A group that spans nodes is taken as
# hierarchical: within each node k members (NVLink), across the n = ranks/k
# nodes each member moves S/k through its own NIC; an all-reduce is then
# reduce-scatter in the node, all-reduce across, all-gather in the node.
function coll(kind, S, ranks, stride,    k, n, fk, fn, tin, tout) {
    if (ranks <= 1 || S <= 0) return 0
    k = stride >= gpn ? 1 : min(ranks, int(gpn / stride))
    if (k < 1) k = 1
    n = ranks / k
    fk = (k - 1) / k; fn = (n - 1) / n
    if (kind == "ar") { fk *= 2; fn *= 2 }
    tin = 0; tout = 0
    if (k > 1) tin = (kind == "ar" && n > 1 ? 2 : 1) * nvl_lat * 1e-6 + fk * S / (nvl * 1e9)
    if (n > 1) tout = ib_lat * 1e-6 + fn * (S / k) / (ib * 1e9)
    return tin + tout
}

# One point-to-point message of S bytes, within a node or across.
function p2p(S, same_node) {
    if (same_node) return nvl_lat * 1e-6 + S / (nvl * 1e9)
    return ib_lat * 1e-6 + S / (ib * 1e9)
}

# ---- the iteration ---------------------------------------------------------

# Model one iteration of run C at an achieved rate of R TFLOP/s per GPU
# (R <= 0: infinitely fast compute) into O.  See projection.md.
function model(C, R, O,    t, p, v, D, M, n, nl, h, ab, Lp, rate, tc_avg, tc_max, S, col, \
               ends, ttp, titer, tpp, msg, tmb, P, tg, tag, wb, wf, fb, ff, owned, ce) {
    t = C["tp"]; p = C["pp"]; v = C["vp"]; D = C["dp"]; M = C["M"]
    h = C["hidden"]; ab = C["ab"]
    n = C["mbs"] * C["seq"]                 # tokens of a micro-batch
    nl = C["sp"] ? n / t : n                # rows of the per-token regions
    Lp = C["layers"] / p
    rate = R > 0 ? R * 1e12 : 0

    # compute of one micro-batch: the average GPU, and the slowest stage
    # (the last, which also runs the LM head)
    O["flops_token"] = C["flops_token"]
    tc_avg = rate ? n * O["flops_token"] / (t * p) / rate : 0
    tc_max = rate ? n * (Lp * C["flops_layer"] + C["flops_head"]) / t / rate : 0

    # TP per micro-batch on the last stage.  Each block (attention, MLP)
    # of a layer communicates once per direction an [n, h] array: with SP
    # an all-gather and a reduce-scatter, without an all-reduce -- so 4
    # per layer forward + backward.  The embedding and the LM head add one
    # each (p = 1: both), and the cross-entropy its max and sums (n and 2n
    # floats).
    ttp = 0; titer = 0
    if (t > 1) {
        S = n * h * ab
        col = C["sp"] ? coll("ag", S, t, 1) + coll("rs", S, t, 1) : coll("ar", S, t, 1)
        ends = p == 1 ? 2 : 1
        ce = coll("ar", 4 * n, t, 1) + coll("ar", 8 * n, t, 1)
        ttp = (4 * Lp + ends) * col + ce
        # once per iteration: the norm weights' gradients (SP)
        if (C["sp"]) titer = coll("ar", 4 * (2 * Lp + 1) * h, t, 1)
        ttp *= 1 - tp_overlap; titer *= 1 - tp_overlap
    }

    # PP per micro-batch: per chunk, two exchanges (forward activation,
    # backward gradient), each a send and a receive at once.  Neighbour
    # stages are t x D ranks apart: the group stays in one node only when
    # t x D x p <= G.
    tpp = 0
    if (p > 1) {
        msg = nl * h * ab
        tpp = 2 * v * p2p(msg, t * D * p <= gpn)
    }

    tmb = tc_max + ttp + tpp
    O["compute"] = M * tc_avg
    O["imbalance"] = M * (tc_max - tc_avg)
    O["tp"] = M * ttp + titer
    O["pp"] = M * tpp
    O["bubble"] = (p - 1) / v * tmb
    O["bubble_frac"] = (p - 1) / (v * M)

    # DP: gradients (fp32) then weights (act dtype), over D ranks t apart.
    P = C["params_local"]
    O["params_local"] = P
    tg = 0; tag = 0
    if (D > 1) {
        if (C["ogr"] || !C["dist"]) tg = coll("ar", 4 * P, D, t)   # overlap: buckets all-reduced
        else tg = coll("rs", 4 * P, D, t)
        if (C["dist"]) tag = coll("ag", ab * P, D, t)
    }
    # tied copies of the embedding across the first and last stages
    if (!C["untie"] && p > 1)
        tg += coll("ar", 4 * C["vpad"] * h / t, 2, t * D * (p - 1))
    # overlap windows: the last micro-batch's backward, the first's forward
    wb = 2 / 3 * tc_max; wf = 1 / 3 * tc_max
    fb = C["ogr"] ? dp_overlap : 0
    ff = C["opg"] ? dp_overlap : 0
    O["dp_total"] = tg + tag
    O["dp"] = max(0, tg - fb * wb) + max(0, tag - ff * wf)

    # the optimizer step, memory-bound: 34 bytes per owned parameter
    # (AdamW reads grad, master, m, v; writes master, m, v and the compute
    # weights; the norm reads the grad) and 4 per local one (zeroing)
    owned = C["dist"] ? P / D : P
    O["optim"] = (34 * owned + 4 * P) / (hbm * 1e9)

    O["step"] = O["compute"] + O["imbalance"] + O["tp"] + O["pp"] + O["bubble"] + \
                O["dp"] + O["optim"]
    O["tokens"] = C["gbs"] * C["seq"]
    O["tpg"] = O["tokens"] / (C["gpus"] * O["step"])
    O["tflops"] = O["flops_token"] * O["tpg"] / 1e12
    O["mfu"] = O["tflops"] / peak
    memory(C, O, P)
}

# Device memory of the fullest GPU, estimated from what gridlm allocates:
# weights (act dtype), fp32 gradients, optimizer state (fp32 master and
# two moments, plus the fp32 shard of the gradient when distributed), the
# activations each micro-batch in flight keeps (model.h gl_layer_acts and
# the residual stream), and one set of scratch buffers with the logits.
# Not counted: CUDA context, library workspaces, NCCL buffers,
# fragmentation.
function memory(C, O, P,    t, p, v, M, n, nl, h, q, kv, F, ab, a, per_layer, Lc, inflight, \
                states, acts, scratch) {
    t = C["tp"]; p = C["pp"]; v = C["vp"]; M = C["M"]; ab = C["ab"]
    h = C["hidden"]; q = C["heads"] * C["kvch"]; kv = C["groups"] * C["kvch"]; F = C["ffn"]
    a = C["heads"] / t
    n = C["mbs"] * C["seq"]; nl = C["sp"] ? n / t : n
    states = P * (ab + 4)
    if (C["dist"]) states += 16 * P / C["dp"]
    else states += (ab == 4 ? 8 : 12) * P
    per_layer = ab * (2 * nl * h + 2 * n * h + n * (q + 2 * kv) / t + n * q / t + 3 * n * F / t) + \
                4 * (2 * nl + n * a)
    Lc = C["layers"] / (p * v)
    # micro-batch chunks the first stage holds at most (1F1B: its warm-up
    # forwards and one more)
    if (v == 1) inflight = min(p, M)
    else inflight = min(2 * (p - 1) + (v - 1) * p + 1, M * v)
    acts = inflight * (Lc * per_layer + 2 * nl * h * ab)
    scratch = ab * (3 * n * h + nl * h + n * (q + 2 * kv) / t + n * q / t + 3 * n * F / t + \
                    n * C["vpad"] / t) + 4 * (4 * n + nl)
    O["mem_states"] = states / 1073741824
    O["mem"] = (states + acts + scratch) / 1073741824
}

# The same shape on one GPU, same micro-batch and micro-batches per
# iteration, no parallelism: the reference of the scaling efficiency.
# gridlm-train plans the run's model (the flags that give it) on one GPU;
# the batch is the run's.
function single_gpu(C, S) {
    parse_run(S, C["model_flags"], 1)
    S["mbs"] = C["mbs"]; S["M"] = C["M"]; S["gbs"] = C["mbs"] * C["M"]
    S["bf16"] = C["bf16"]; S["ab"] = C["ab"]
}

function efficiency(C, R, O,    S, O1) {
    single_gpu(C, S)
    model(S, R, O1)
    return O["tpg"] / O1["tpg"]
}

# The rate R at which the model's step time of run C equals T seconds:
# the step time falls as R grows, so bisect on 1/R.
function calibrate(C, T,    O, lo, hi, mid, i) {
    model(C, 0, O)
    if (O["step"] >= T)
        die("run " RUN ": the measured iteration (" T " s) is shorter than the modelled " \
            "communication and optimizer alone (" O["step"] " s): raise --nvlink-gbps, " \
            "--ib-gbps or --hbm-gbps")
    lo = 0; hi = 1e-12
    for (i = 0; i < 200; i++) {
        model(C, 1 / hi, O)
        if (O["step"] >= T) break
        hi *= 2
    }
    for (i = 0; i < 200; i++) {
        mid = (lo + hi) / 2
        if (mid == lo || mid == hi) break
        model(C, 1 / mid, O)
        if (O["step"] < T) lo = mid; else hi = mid
    }
    return 1 / ((lo + hi) / 2)
}

# ---- input -----------------------------------------------------------------

# Split one CSV line into F[1..n] (RFC 4180 quoting, as summarize.awk
# writes it); returns n.
function csv_split(line, F,    n, c, i, field, q) {
    n = 0; field = ""; q = 0
    for (i = 1; i <= length(line); i++) {
        c = substr(line, i, 1)
        if (q) {
            if (c == "\"") {
                if (substr(line, i + 1, 1) == "\"") { field = field "\""; i++ }
                else q = 0
            } else field = field c
        } else if (c == "\"") q = 1
        else if (c == ",") { F[++n] = field; field = "" }
        else field = field c
    }
    F[++n] = field
    return n
}

# Read sweep.sh's results.csv: the ok runs with a throughput.
function read_csv(file,    line, F, H, n, i, nm, r, col) {
    if ((getline line < file) <= 0)
        die("cannot read --calibrate '" file "': give the results.csv a sweep wrote")
    n = csv_split(line, H)
    for (i = 1; i <= n; i++) col[H[i]] = i
    if (!("name" in col) || !("gpus" in col) || !("tokens_per_sec_per_gpu" in col) || \
        !("flags" in col) || !("status" in col))
        die("--calibrate '" file "' has no name, gpus, status, tokens_per_sec_per_gpu and " \
            "flags columns: give the results.csv of benchmarks/sweep.sh")
    while ((getline line < file) > 0) {
        if (line == "") continue
        csv_split(line, F)
        if (F[col["status"]] != "ok" || F[col["tokens_per_sec_per_gpu"]] == "") continue
        r = ++nmeas
        mname[r] = F[col["name"]]
        mseries[r] = ("series" in col) ? F[col["series"]] : \
                     (index(mname[r], "/") ? substr(mname[r], 1, index(mname[r], "/") - 1) : "default")
        mgpus[r] = F[col["gpus"]] + 0
        mtpg[r] = F[col["tokens_per_sec_per_gpu"]] + 0
        mmem[r] = ("mem_gib" in col) ? F[col["mem_gib"]] : ""
        meff[r] = ("scaling_efficiency" in col) ? F[col["scaling_efficiency"]] : ""
        mflags[r] = F[col["flags"]]
    }
    close(file)
    if (!nmeas) note("warning: " file " holds no successful run with a throughput")
}

# Read a sweep file (NAME GPUS FLAGS..., "defaults - FLAGS...", '#').
function read_sweep(file,    line, w, n, i, defaults, fl, lineno) {
    defaults = ""; lineno = 0
    if ((getline line < file) < 0)
        die("cannot read sweep file '" file "': check the path")
    do {
        lineno++
        sub(/#.*/, "", line)
        n = split(line, w, /[ \t]+/)
        if (w[1] == "") { for (i = 1; i < n; i++) w[i] = w[i + 1]; n-- }
        if (n < 1) continue
        if (n < 2) die(file ":" lineno ": '" w[1] "' has no GPU count: write NAME GPUS FLAGS...")
        fl = ""
        for (i = 3; i <= n; i++) fl = fl (fl == "" ? "" : " ") w[i]
        if (w[1] == "defaults") { defaults = fl; continue }
        if (w[2] !~ /^[0-9]+$/ || w[2] + 0 < 1)
            die(file ":" lineno ": GPU count '" w[2] "' of '" w[1] "' is not a positive integer")
        nproj++
        pname[nproj] = w[1]; pgpus[nproj] = w[2] + 0
        pflags[nproj] = defaults (defaults != "" && fl != "" ? " " : "") fl
    } while ((getline line < file) > 0)
    close(file)
}

# ---- output ----------------------------------------------------------------

function pct(x, T) { return sprintf("%.1f%%", 100 * x / T) }
function g(x) { return sprintf("%.10g", x) }

function layout(C) {
    return "TP" C["tp"] (C["sp"] ? "+SP" : "") " PP" C["pp"] (C["vp"] > 1 ? "x" C["vp"] : "") \
           " DP" C["dp"] (C["dist"] ? "+DO" : "") " M" C["M"]
}

function assumptions(Rtxt) {
    print "Assumptions: " Rtxt "; peak " peak " TFLOP/s (MFU); " gpn " GPUs per node; " \
          "NVLink " nvl " GB/s bus bandwidth + " nvl_lat " us per collective; InfiniBand " \
          ib " GB/s per GPU NIC + " ib_lat " us; HBM " hbm " GB/s for the optimizer step; " \
          "DP overlap " dp_overlap " of the window where the run asks for it " \
          "(--overlap-grad-reduce, --overlap-param-gather); TP overlap " tp_overlap "."
}

function check_table(    r, C, O, R, base, s, err, RUN_SAVE, eff, O1, T, tag, rs, bR, i, Cb, Ob) {
    # the calibration of each series: its 1-GPU run (or --calibrate-run)
    for (r = 1; r <= nmeas; r++) {
        RUN = mname[r]
        parse_run(C, mflags[r], mgpus[r])
        T = C["gbs"] * C["seq"] / (mgpus[r] * mtpg[r])
        if (calib_run != "" ? mname[r] == calib_run : mgpus[r] == 1) {
            if (!(mseries[r] in sR)) { sR[mseries[r]] = calibrate(C, T); sRun[mseries[r]] = r }
            if (globalR == "") { globalR = sR[mseries[r]]; globalRun = mname[r] }
        }
    }
    if (calib_run != "" && globalR == "")
        die("--calibrate-run '" calib_run "' is not an ok run of " calib)
    if (achieved == "" && globalR == "")
        die(calib " has no successful 1-GPU run to calibrate on: give --calibrate-run NAME " \
            "or --achieved-tflops R")
    if (csv)
        print "name,gpus,layout,calibrated_on,achieved_tflops,measured_tokens_per_sec_per_gpu," \
              "model_tokens_per_sec_per_gpu,error,measured_scaling_efficiency," \
              "model_scaling_efficiency,measured_mem_gib,model_mem_gib"
    else {
        print "## Model against measurement"
        print ""
        assumptions(achieved != "" ? "achieved " achieved " TFLOP/s per GPU (--achieved-tflops)" : \
                    "achieved TFLOP/s per GPU calibrated on each series' " \
                    (calib_run != "" ? "run " calib_run : "1-GPU run") " alone")
        print ""
        print "| Run | GPUs | Layout | Calibrated on | R (TFLOP/s) | Measured tok/s/GPU | Model tok/s/GPU | Error | Measured eff. | Model eff. | Measured GiB | Model GiB (est.) |"
        print "| --- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    }
    for (r = 1; r <= nmeas; r++) {
        RUN = mname[r]
        parse_run(C, mflags[r], mgpus[r])
        if (achieved != "") { R = achieved; tag = "(given)"; base = "" }
        else if (mseries[r] in sR) { R = sR[mseries[r]]; base = sRun[mseries[r]]; tag = mname[base] }
        else { R = globalR; base = ""; tag = globalRun }
        model(C, R, O)
        err = O["tpg"] / mtpg[r] - 1
        # model efficiency: against the model of the series' base run, as
        # summarize.awk takes the measured one against the measured base
        eff = ""
        bR = ""
        for (i = 1; i <= nmeas; i++)
            if (mseries[i] == mseries[r] && (bR == "" || mgpus[i] < mgpus[bR])) bR = i
        if (bR != "") {
            RUN = mname[bR]; parse_run(Cb, mflags[bR], mgpus[bR]); model(Cb, R, Ob)
            eff = O["tpg"] / Ob["tpg"]
            RUN = mname[r]
        }
        if (csv)
            print mname[r] "," mgpus[r] "," layout(C) "," tag "," g(R) "," g(mtpg[r]) "," \
                  g(O["tpg"]) "," g(err) "," meff[r] "," (eff == "" ? "" : g(eff)) "," \
                  mmem[r] "," g(O["mem"])
        else
            printf "| %s | %d | %s | %s | %.4g | %.0f | %.0f | %+.1f%% | %s | %s | %s | %.1f |\n", \
                   mname[r], mgpus[r], layout(C), (r == base ? "itself" : tag), R, mtpg[r], O["tpg"], \
                   100 * err, (meff[r] == "" ? "" : sprintf("%.3f", meff[r])), \
                   (eff == "" ? "" : sprintf("%.3f", eff)), \
                   (mmem[r] == "" ? "" : sprintf("%.1f", mmem[r])), O["mem"]
    }
}

function projection_table(    R, Rtxt, r, C, O, eff, nodes) {
    if (achieved != "") { R = achieved; Rtxt = "achieved " R " TFLOP/s per GPU (--achieved-tflops)" }
    else if (globalR != "") {
        R = globalR
        Rtxt = sprintf("achieved %.1f TFLOP/s per GPU, calibrated on the measured run %s of %s", \
                       R, globalRun, calib)
    } else die("a projection needs the achieved rate: give --calibrate results.csv or " \
               "--achieved-tflops R")
    if (csv)
        print "name,gpus,nodes,tp,sp,pp,vp,dp,dist_opt,micro_batches,global_batch,seq," \
              "flops_per_token,achieved_tflops,step_s,tokens_per_sec_per_gpu,tflops_per_gpu,mfu," \
              "scaling_efficiency,compute_s,imbalance_s,tp_s,pp_s,bubble_s,dp_s,optim_s," \
              "dp_total_s,bubble_fraction,params_per_gpu,mem_states_gib,mem_gib"
    else {
        print "## PROJECTION (a model, not a measurement)"
        print ""
        assumptions(Rtxt)
        print ""
        print "| Run | GPUs | Layout | Batch | Step (s) | tok/s/GPU | TFLOP/s/GPU | MFU | Eff. vs 1 GPU | Compute | Imbal. | TP | PP | Bubble | DP | Optim. | GiB/GPU (est.) |"
        print "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    }
    for (r = 1; r <= nproj; r++) {
        RUN = pname[r]
        parse_run(C, pflags[r], pgpus[r])
        model(C, R, O)
        eff = efficiency(C, R, O)
        nodes = int((pgpus[r] + gpn - 1) / gpn)
        if (csv)
            print pname[r] "," pgpus[r] "," nodes "," C["tp"] "," C["sp"] "," C["pp"] "," C["vp"] \
                  "," C["dp"] "," C["dist"] "," C["M"] "," C["gbs"] "," C["seq"] "," \
                  sprintf("%.0f", O["flops_token"]) "," g(R) "," g(O["step"]) "," g(O["tpg"]) "," \
                  g(O["tflops"]) "," g(O["mfu"]) "," g(eff) "," g(O["compute"]) "," \
                  g(O["imbalance"]) "," g(O["tp"]) "," g(O["pp"]) "," g(O["bubble"]) "," \
                  g(O["dp"]) "," g(O["optim"]) "," g(O["dp_total"]) "," g(O["bubble_frac"]) "," \
                  g(O["params_local"]) "," g(O["mem_states"]) "," g(O["mem"])
        else
            printf "| %s | %d | %s | %d x %d | %.3f | %.0f | %.0f | %.1f%% | %.3f | %s | %s | %s | %s | %s | %s | %s | %.0f |\n", \
                   pname[r], pgpus[r], layout(C), C["gbs"], C["seq"], O["step"], O["tpg"], \
                   O["tflops"], 100 * O["mfu"], eff, pct(O["compute"], O["step"]), \
                   pct(O["imbalance"], O["step"]), pct(O["tp"], O["step"]), pct(O["pp"], O["step"]), \
                   pct(O["bubble"], O["step"]), pct(O["dp"], O["step"]), pct(O["optim"], O["step"]), \
                   O["mem"]
    }
}

BEGIN {
    if (achieved != "" && achieved + 0 <= 0) die("--achieved-tflops '" achieved "' must be positive")
    nmeas = 0; nproj = 0; globalR = ""
    if (calib != "") read_csv(calib)
    ns = split(sweeps, sw, "\n")
    for (i = 1; i <= ns; i++) if (sw[i] != "") read_sweep(sw[i])
    if (calib != "" && nmeas) check_table()
    if (calib != "" && nmeas && nproj && !csv) print ""
    if (nproj) projection_table()
    exit 0
}
