#!/bin/sh
# sweep.sh: run a sweep of gridlm-train runs and summarise their
# throughput (see benchmarks/README.md).
#
#   sweep.sh [OPTIONS] SWEEP_FILE
#
# A sweep file has one run per line:  NAME GPUS FLAGS...
#   NAME   SERIES/RUN (letters, digits, . _ - /); scaling efficiency is
#          taken against the run with the fewest GPUs of the same SERIES
#          (names without '/' form one series, "default");
#   GPUS   ranks to start (one per GPU; on --device cpu, CPU ranks);
#   FLAGS  gridlm-train's flags, split at white space (no quoting).
# A line "defaults - FLAGS..." puts FLAGS before the flags of every run
# after it (a later defaults line replaces it).  '#' starts a comment.
#
# Each run is started as   LAUNCHER TRAIN COMMON-FLAGS FLAGS --log-json LOG
# with {n} in LAUNCHER replaced by GPUS and {nodes} by ceil(GPUS /
# --gpus-per-node).  Then the records of every log, warm-up iterations
# dropped, become OUT/results.csv, OUT/results.md and OUT/*.png.
#
# Exit status: 0 when every run succeeded, 1 when one failed (the others
# still run and are summarised), 2 on a usage error.
set -eu

prog=sweep.sh
here=$(cd "$(dirname "$0")" && pwd)

die() { echo "$prog: error: $*" >&2; exit 2; }
. "$here/find-train.sh"

usage() {
    cat <<EOF
Usage: $prog [OPTIONS] SWEEP_FILE

Run every line of SWEEP_FILE (NAME GPUS FLAGS...) through gridlm-train and
summarise the runs into CSV, a markdown table and PNG plots.

  -o, --out DIR            results directory (default: results/SWEEP-DATE)
  -l, --launcher CMD       launcher; {n}: the run's GPUs, {nodes}: its nodes
                           (default: \$GRIDLM_LAUNCHER or 'mpiexec -n {n}')
      --gpus-per-node G    GPUs per node, for {nodes} (default: 8)
  -t, --train PROG         gridlm-train to run (default: \$GRIDLM_TRAIN, or
                           ./src/tools/gridlm-train of a build directory, or
                           the one installed beside this script, or PATH's)
  -f, --flags FLAGS        flags for every run, before the run's own
  -w, --warmup N           drop records of iterations <= N (default: 3)
      --time-limit SEC     stop a run that takes longer (needs timeout(1))
      --summarize-only     run nothing; summarise the logs already in DIR
      --no-plots           skip the plot stage (plot.dat and the gnuplot PNGs)
  -n, --dry-run            print the commands, run nothing
  -h, --help               this help

Examples:
  $prog -l 'mpiexec -n {n}' benchmarks/cpu-tiny.sweep
  $prog -l 'srun --mpi=pmix -N {nodes} -n {n} --gpus-per-task=1' \\
        -o results/8b benchmarks/llama3-8b-h100.sweep
EOF
}

# ---- options ------------------------------------------------------------
out=
launcher=${GRIDLM_LAUNCHER:-'mpiexec -n {n}'}
gpus_per_node=8
train=${GRIDLM_TRAIN:-}
common=
warmup=3
time_limit=
summarize_only=0
plots=1
dry_run=0
sweep=

need() { [ $# -ge 2 ] || die "$1 needs a value (see --help)"; }
while [ $# -gt 0 ]; do
    case $1 in
    -o|--out) need "$@"; out=$2; shift 2 ;;
    -l|--launcher) need "$@"; launcher=$2; shift 2 ;;
    --gpus-per-node) need "$@"; gpus_per_node=$2; shift 2 ;;
    -t|--train) need "$@"; train=$2; shift 2 ;;
    -f|--flags) need "$@"; common=$2; shift 2 ;;
    -w|--warmup) need "$@"; warmup=$2; shift 2 ;;
    --time-limit) need "$@"; time_limit=$2; shift 2 ;;
    --summarize-only) summarize_only=1; shift ;;
    --no-plots) plots=0; shift ;;
    -n|--dry-run) dry_run=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) [ -z "$sweep" ] || die "two sweep files given ('$sweep' and '$1'): give one"
       sweep=$1; shift ;;
    esac
done
[ $# -eq 0 ] || { [ -z "$sweep" ] && [ $# -eq 1 ] && sweep=$1; } ||
    die "unexpected arguments after the sweep file: $*"
[ -n "$sweep" ] || die "no sweep file given: $prog [OPTIONS] SWEEP_FILE (see --help)"
[ -r "$sweep" ] || die "cannot read sweep file '$sweep': check the path"

is_count() { case $1 in ''|*[!0-9]*) return 1 ;; *) [ "$1" -gt 0 ] ;; esac; }
case $warmup in ''|*[!0-9]*) die "--warmup '$warmup' is not a whole number: give e.g. 3" ;; esac
is_count "$gpus_per_node" || die "--gpus-per-node '$gpus_per_node' is not a positive integer"
[ -z "$time_limit" ] || is_count "$time_limit" ||
    die "--time-limit '$time_limit' is not a positive number of seconds"
case $launcher in *'{n}'*) ;; *)
    die "--launcher '$launcher' has no {n}: say where the rank count goes, e.g. 'mpiexec -n {n}'" ;;
esac

if [ -z "$out" ]; then
    [ $summarize_only = 0 ] || die "--summarize-only needs --out DIR: the directory of the sweep's logs"
    base=$(basename "$sweep"); base=${base%.*}
    out=results/$base-$(date +%Y%m%d-%H%M%S)
fi

if [ $summarize_only = 0 ] && [ -z "$train" ]; then
    find_train
fi

# ---- the sweep file -----------------------------------------------------
# Normalised to "NAME<TAB>GPUS<TAB>FLAGS" with defaults applied, checked
# line by line so a mistake is reported before anything runs.
mkdir -p "$out/logs"
runs=$out/runs.txt
set -f                          # flags are split at blanks, never globbed
defaults=
lineno=0
: >"$runs"
while IFS= read -r line || [ -n "$line" ]; do
    lineno=$((lineno + 1))
    line=${line%%#*}
    set -- $line
    [ $# -gt 0 ] || continue
    name=$1
    [ $# -ge 2 ] || die "$sweep:$lineno: '$name' has no GPU count: write NAME GPUS FLAGS..."
    gpus=$2
    shift 2
    if [ "$name" = defaults ]; then
        [ "$gpus" = - ] || die "$sweep:$lineno: write 'defaults - FLAGS...' (a '-' for the GPU count)"
        defaults=$*
        continue
    fi
    case $name in
    *[!A-Za-z0-9._/-]*|/*|*/) die "$sweep:$lineno: run name '$name' may hold only letters, digits and . _ - / (not at the ends)" ;;
    esac
    is_count "$gpus" || die "$sweep:$lineno: GPU count '$gpus' of '$name' is not a positive integer"
    if awk -F '\t' -v n="$name" '$1 == n { found = 1 } END { exit !found }' "$runs"; then
        die "$sweep:$lineno: run name '$name' is used twice: names must be unique"
    fi
    set -- $defaults $common "$@"
    printf '%s\t%s\t%s\n' "$name" "$gpus" "$*" >>"$runs"
done <"$sweep"
[ -s "$runs" ] || die "$sweep lists no runs: write one 'NAME GPUS FLAGS...' per line"
cp "$sweep" "$out/sweep.txt" 2>/dev/null || :

# The files of run number i (1-based): logs/NNN-NAME.{jsonl,out,status}
logbase() { printf '%s/logs/%03d-%s' "$out" "$1" "$(echo "$2" | tr '/' '_')"; }

# ---- run ----------------------------------------------------------------
failed=0
if [ $summarize_only = 0 ]; then
    i=0
    while IFS="$(printf '\t')" read -r name gpus flags; do
        i=$((i + 1))
        lb=$(logbase $i "$name")
        nodes=$(( (gpus + gpus_per_node - 1) / gpus_per_node ))
        cmd=$(echo "$launcher" | sed -e "s/{n}/$gpus/g" -e "s/{nodes}/$nodes/g")
        [ -z "$time_limit" ] || cmd="timeout $time_limit $cmd"
        cmd="$cmd $train $flags --log-json $lb.jsonl"
        if [ $dry_run = 1 ]; then
            echo "$cmd"
            continue
        fi
        echo "$prog: [$i] $name on $gpus GPU(s)" >&2
        rm -f "$lb.jsonl" "$lb.status"
        echo "$cmd" >"$lb.cmd"
        rc=0
        $cmd </dev/null >"$lb.out" 2>&1 || rc=$?
        echo $rc >"$lb.status"
        if [ $rc != 0 ]; then
            failed=1
            echo "$prog: [$i] $name failed (exit $rc); its output: $lb.out" >&2
            tail -n 3 "$lb.out" | sed 's/^/    /' >&2
        fi
    done <"$runs"
    [ $dry_run = 0 ] || exit 0
fi
set +f

# ---- summarise ----------------------------------------------------------
# runs.tsv: NAME GPUS STATUS LOG FLAGS, the input of summarize.awk.
tsv=$out/runs.tsv
: >"$tsv"
i=0
while IFS="$(printf '\t')" read -r name gpus flags; do
    i=$((i + 1))
    lb=$(logbase $i "$name")
    if [ -f "$lb.status" ]; then
        rc=$(cat "$lb.status")
        if [ "$rc" = 0 ]; then status=ok; else status=failed; failed=1; fi
    elif [ -f "$lb.jsonl" ]; then
        status=ok               # a log written by hand or by another harness
    else
        status=missing
    fi
    printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$gpus" "$status" "$lb.jsonl" "$flags" >>"$tsv"
done <"$runs"

awk -F '\t' -v warmup="$warmup" -f "$here/summarize.awk" "$tsv" >"$out/results.csv"
awk -f "$here/table.awk" -v warmup="$warmup" "$out/results.csv" >"$out/results.md"
echo "$prog: wrote $out/results.csv and $out/results.md" >&2

if [ $plots = 1 ]; then
    # The plot data is text and always written; only the PNGs need gnuplot.
    awk -f "$here/plotdata.awk" -v titles="$out/plot.titles" "$out/results.csv" >"$out/plot.dat"
    echo "$prog: wrote $out/plot.dat" >&2
    nseries=$(wc -l <"$out/plot.titles" | tr -d ' ')
    if ! command -v gnuplot >/dev/null 2>&1; then
        echo "$prog: warning: gnuplot not found (apt-get install gnuplot-nox); no PNG plots" >&2
    elif [ "$nseries" -eq 0 ]; then
        echo "$prog: no successful run to plot" >&2
    else
        titles=$(tr '\n' ' ' <"$out/plot.titles")
        if gnuplot -e "datafile='$out/plot.dat'; outdir='$out'; nseries=$nseries; titles='$titles'" \
            "$here/plot.gp" >"$out/plot.log" 2>&1; then
            echo "$prog: wrote $out/throughput.png and $out/efficiency.png" >&2
        else
            echo "$prog: warning: gnuplot failed (see $out/plot.log); no plots" >&2
        fi
    fi
fi
exit $failed
