# project.awk: an analytic model of one training iteration of a Llama
# shape under a TP/PP/DP layout, checked against measured runs and used
# to project to larger machines.  The method and every formula are in
# benchmarks/projection.md; run it through project.sh.
#
#   awk -f project.awk -v calib=results.csv -v sweeps="a.sweep b.sweep" \
#       -v achieved= -v peak=989.4 -v gpn=8 -v nvl=360 -v nvl_lat=50 \
#       -v ib=50 -v ib_lat=20 -v hbm=3000 -v dp_overlap=1 -v tp_overlap=0 \
#       -v calib_run= -v csv=0
#
# Everything happens in BEGIN: the measured CSV (sweep.sh's results.csv)
# and the sweep files (NAME GPUS FLAGS... per line, sweep.sh's syntax)
# are read with getline.  Each run's shape and layout come from its
# gridlm-train flags, parsed the way gridlm-train reads them (a --model
# preset first, then the explicit flags).  Units: seconds, bytes, bytes
# per second; bandwidth options are GB/s (1e9 bytes/s), latencies in us.
# Needs only POSIX awk (mawk and gawk both work).

function die(msg) {
    printf "project.sh: error: %s\n", msg > "/dev/stderr"
    exit 2
}

function note(msg) { printf "project.sh: %s\n", msg > "/dev/stderr" }

function min(a, b) { return a < b ? a : b }
function max(a, b) { return a > b ? a : b }

# ---- shapes and flags ------------------------------------------------------

# The presets of gridlm-train --model (src/train/config.c): layers,
# hidden, FFN, heads, query groups, vocabulary, sequence, untied.
function preset(C, name) {
    if (name == "llama3-8b")        set_shape(C, 32, 4096, 14336, 32, 8, 128256, 8192, 1)
    else if (name == "llama3-70b")  set_shape(C, 80, 8192, 28672, 64, 8, 128256, 8192, 1)
    else if (name == "llama3.2-1b") set_shape(C, 16, 2048, 8192, 32, 8, 128256, 8192, 0)
    else if (name == "tiny")        set_shape(C, 4, 64, 176, 8, 4, 512, 64, 1)
    else die("run " RUN ": --model '" name "' is not a known preset: use llama3-8b, " \
             "llama3-70b, llama3.2-1b or tiny, or give --num-layers, --hidden-size, ...")
}

function set_shape(C, L, h, F, a, g, V, s, untie) {
    C["layers"] = L; C["hidden"] = h; C["ffn"] = F; C["heads"] = a; C["groups"] = g
    C["vocab"] = V; C["seq"] = s; C["untie"] = untie; C["kvch"] = ""
}

# The flags of the model that matter here; the others (--lr, --mock-data,
# --train-iters, ...) are accepted and ignored.
function is_value_flag(f) {
    return f ~ /^(model|num-layers|hidden-size|ffn-hidden-size|num-attention-heads|num-query-groups|kv-channels|seq-length|vocab-size|make-vocab-size-divisible-by|tensor-model-parallel-size|pipeline-model-parallel-size|num-layers-per-virtual-pipeline-stage|context-parallel-size|expert-model-parallel-size|micro-batch-size|global-batch-size|device)$/
}

# Parse the gridlm-train flags of run RUN on GPUS GPUs into C, resolve
# the defaults and check the layout as gridlm-train would.
function parse_run(C, flags, gpus,    n, w, i, f, v, eq, t, p, lpv, D) {
    split("", C)
    C["gpus"] = gpus
    C["layers"] = ""; C["hidden"] = ""; C["ffn"] = ""; C["heads"] = ""; C["groups"] = ""
    C["kvch"] = ""; C["seq"] = ""; C["vocab"] = ""; C["untie"] = 0
    C["div"] = 128; C["tp"] = 1; C["pp"] = 1; C["lpv"] = ""; C["cp"] = 1; C["ep"] = 1
    C["mbs"] = 1; C["gbs"] = ""; C["sp"] = 0; C["dist"] = 0; C["ogr"] = 0; C["opg"] = 0
    C["bf16"] = 0; C["device"] = "auto"
    n = split(flags, w, /[ \t]+/)
    # the preset first, wherever it stands (as gridlm-train applies it)
    for (i = 1; i <= n; i++) {
        if (w[i] == "--model" && i < n) preset(C, w[i + 1])
        else if (w[i] ~ /^--model=/) preset(C, substr(w[i], 9))
    }
    for (i = 1; i <= n; i++) {
        if (w[i] !~ /^--/) continue
        f = substr(w[i], 3); v = ""
        if ((eq = index(f, "=")) > 0) { v = substr(f, eq + 1); f = substr(f, 1, eq - 1) }
        else if (is_value_flag(f)) {
            if (i == n) die("run " RUN ": --" f " needs a value")
            v = w[++i]
        }
        if (f == "model") continue
        if (f == "sequence-parallel") C["sp"] = 1
        else if (f == "use-distributed-optimizer") C["dist"] = 1
        else if (f == "overlap-grad-reduce") C["ogr"] = 1
        else if (f == "overlap-param-gather") C["opg"] = 1
        else if (f == "untie-embeddings-and-output-weights") C["untie"] = 1
        else if (f == "bf16") C["bf16"] = 1
        else if (f == "device") C["device"] = v
        else if (is_value_flag(f)) {
            if (v !~ /^[0-9]+$/ || v + 0 < 1)
                die("run " RUN ": --" f " '" v "' is not a positive integer")
            set_flag(C, f, v + 0)
        }
    }
    if (C["layers"] == "" || C["hidden"] == "" || C["heads"] == "" || C["seq"] == "")
        die("run " RUN ": the shape is incomplete: give --model or --num-layers, " \
            "--hidden-size, --num-attention-heads and --seq-length")
    if (C["vocab"] == "")
        die("run " RUN ": no vocabulary size: give --vocab-size (or --model)")
    if (C["ffn"] == "") C["ffn"] = int(8 * C["hidden"] / 3 / 64) * 64
    if (C["groups"] == "") C["groups"] = C["heads"]
    if (C["kvch"] == "") C["kvch"] = C["hidden"] / C["heads"]
    if (C["cp"] != 1)
        die("run " RUN ": --context-parallel-size " C["cp"] " is not modelled (gridlm's loop " \
            "does not run it): use 1")
    if (C["ep"] != 1)
        die("run " RUN ": --expert-model-parallel-size " C["ep"] " needs experts: use 1")
    t = C["tp"]; p = C["pp"]
    if (gpus % (t * p))
        die("run " RUN ": " gpus " GPUs are not divisible by TP x PP = " t * p \
            ": change the GPU count or the layout")
    D = gpus / (t * p); C["dp"] = D
    if (C["heads"] % t || C["groups"] % t || C["ffn"] % t)
        die("run " RUN ": --tensor-model-parallel-size " t " does not divide the heads (" \
            C["heads"] "), query groups (" C["groups"] ") and FFN size (" C["ffn"] ")")
    if (C["layers"] % p)
        die("run " RUN ": --pipeline-model-parallel-size " p " does not divide the " \
            C["layers"] " layers")
    C["vp"] = 1
    if (C["lpv"] != "") {
        lpv = C["lpv"]
        if (p == 1)
            die("run " RUN ": --num-layers-per-virtual-pipeline-stage needs " \
                "--pipeline-model-parallel-size > 1")
        if ((C["layers"] / p) % lpv)
            die("run " RUN ": --num-layers-per-virtual-pipeline-stage " lpv \
                " does not divide the " C["layers"] / p " layers of a stage")
        C["vp"] = C["layers"] / p / lpv
    }
    if (t == 1) C["sp"] = 0
    if (C["gbs"] == "") C["gbs"] = C["mbs"] * D
    if (C["gbs"] % (C["mbs"] * D))
        die("run " RUN ": --global-batch-size " C["gbs"] " is not divisible by " \
            "--micro-batch-size " C["mbs"] " x DP " D)
    C["M"] = C["gbs"] / (C["mbs"] * D)
    if (C["vp"] > 1 && C["M"] % p)
        die("run " RUN ": the interleaved schedule needs the micro-batches per iteration (" \
            C["M"] ") to be a multiple of PP " p)
    if (D == 1) C["dist"] = 0         # gridlm: distributed only with DP > 1
    C["ab"] = C["bf16"] ? 2 : 4       # bytes of an activation / compute weight
    # Megatron pads the vocabulary to a multiple of divisible-by x TP.
    C["vpad"] = int((C["vocab"] + C["div"] * t - 1) / (C["div"] * t)) * C["div"] * t
}

function set_flag(C, f, v) {
    if (f == "num-layers") C["layers"] = v
    else if (f == "hidden-size") C["hidden"] = v
    else if (f == "ffn-hidden-size") C["ffn"] = v
    else if (f == "num-attention-heads") C["heads"] = v
    else if (f == "num-query-groups") C["groups"] = v
    else if (f == "kv-channels") C["kvch"] = v
    else if (f == "seq-length") C["seq"] = v
    else if (f == "vocab-size") C["vocab"] = v
    else if (f == "make-vocab-size-divisible-by") C["div"] = v
    else if (f == "tensor-model-parallel-size") C["tp"] = v
    else if (f == "pipeline-model-parallel-size") C["pp"] = v
    else if (f == "num-layers-per-virtual-pipeline-stage") C["lpv"] = v
    else if (f == "context-parallel-size") C["cp"] = v
    else if (f == "expert-model-parallel-size") C["ep"] = v
    else if (f == "micro-batch-size") C["mbs"] = v
    else if (f == "global-batch-size") C["gbs"] = v
}

# ---- FLOPs and parameters --------------------------------------------------

# Model FLOPs of one layer per token (reference/flops.md, forward +
# backward), and of the LM head per token.
function layer_flops(C,    h, q, kv) {
    h = C["hidden"]; q = C["heads"] * C["kvch"]; kv = C["groups"] * C["kvch"]
    return 6 * (h * (q + 2 * kv) + q * h + 3 * h * C["ffn"]) + 6 * C["seq"] * q
}
function head_flops(C) { return 6 * C["hidden"] * C["vpad"] }
function flops_per_token(C) { return C["layers"] * layer_flops(C) + head_flops(C) }

# Parameters one GPU of the largest stage holds: its layers' matrices
# split over TP, the norm weights whole, the embedding and/or LM head
# (V/TP rows each) and the final norm.
function local_params(C,    h, q, kv, t, per_layer, ends) {
    h = C["hidden"]; q = C["heads"] * C["kvch"]; kv = C["groups"] * C["kvch"]; t = C["tp"]
    per_layer = (h * (q + 2 * kv) + q * h + 3 * h * C["ffn"]) / t + 2 * h
    ends = (C["pp"] == 1 && C["untie"]) ? 2 : 1
    return C["layers"] / C["pp"] * per_layer + ends * C["vpad"] * h / t + h
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
    O["flops_token"] = flops_per_token(C)
    tc_avg = rate ? n * O["flops_token"] / (t * p) / rate : 0
    tc_max = rate ? n * (Lp * layer_flops(C) + head_flops(C)) / t / rate : 0

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
    P = local_params(C)
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
function single_gpu(C, S,    k) {
    split("", S)
    for (k in C) S[k] = C[k]
    S["gpus"] = 1; S["tp"] = 1; S["pp"] = 1; S["vp"] = 1; S["dp"] = 1; S["sp"] = 0
    S["dist"] = 0; S["ogr"] = 0; S["opg"] = 0; S["lpv"] = ""
    S["gbs"] = C["mbs"] * C["M"]
    S["vpad"] = int((C["vocab"] + C["div"] - 1) / C["div"]) * C["div"]
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
