#!/bin/sh
# project.sh: an analytic model of a training iteration (compute, TP, PP
# and DP traffic, pipeline bubble, optimizer step), checked against the
# runs of a measured sweep and used to project to larger machines.  The
# method and its formulas: benchmarks/projection.md.
#
#   project.sh --calibrate results.csv                  model vs measured
#   project.sh --calibrate results.csv project.sweep    ... and a projection
#   project.sh --achieved-tflops 450 project.sweep      projection at a given rate
#
# Each run's model, layout, FLOPs and parameters come from gridlm-train's
# own dry run (gridlm-train --dry-run --world-size GPUS FLAGS...), so the
# model here is the program's, not a copy of it.
#
# Exit status: 0 on success, 2 on a usage or input error.
set -eu

prog=project.sh
here=$(cd "$(dirname "$0")" && pwd)

die() { echo "$prog: error: $*" >&2; exit 2; }
. "$here/find-train.sh"

usage() {
    cat <<EOF
Usage: $prog [OPTIONS] [SWEEP_FILE...]

Model the time of one training iteration of every run of the SWEEP_FILEs
(NAME GPUS FLAGS... per line, as benchmarks/sweep.sh reads them) and print
a PROJECTION table; with --calibrate, first compare the model with every
run of a measured sweep (its results.csv), calibrated on 1-GPU runs only.

  -c, --calibrate CSV        results.csv of benchmarks/sweep.sh: calibrate
                             the achieved TFLOP/s on each series' 1-GPU run
                             and print model against measurement for all
      --calibrate-run NAME   calibrate on this run instead (its series and
                             every projection use it)
  -r, --achieved-tflops R    achieved TFLOP/s per GPU on the model's FLOPs,
                             instead of calibrating
      --peak-tflops P        peak for MFU (default: 989.4, H100/H200 bf16)
      --gpus-per-node G      GPUs (and InfiniBand NICs) per node (default: 8)
      --nvlink-gbps B        NVLink bus bandwidth, GB/s (default: 360)
      --nvlink-latency-us A  per NVLink collective or message (default: 50)
      --ib-gbps B            InfiniBand per GPU NIC, GB/s (default: 50,
                             400 Gb/s line rate)
      --ib-latency-us A      per inter-node phase or message (default: 20)
      --hbm-gbps B           memory bandwidth of the optimizer step, GB/s
                             (default: 3000)
      --dp-overlap F         fraction of the overlap window used by runs
                             with --overlap-grad-reduce/--overlap-param-gather
                             (0: none, 1: all; default: 1)
      --tp-overlap F         fraction of TP traffic hidden (default: 0)
      --csv                  CSV (every time in seconds) instead of markdown
  -t, --train PROG           gridlm-train whose dry run gives each run's
                             model, layout, FLOPs and parameters (default:
                             \$GRIDLM_TRAIN, or ./src/tools/gridlm-train of
                             a build directory, or the one installed
                             beside this script, or PATH's)
  -h, --help                 this help

Examples:
  $prog --calibrate results/h200-1-2-4/results.csv
  $prog --calibrate results/h200-1-2-4/results.csv benchmarks/project.sweep
  $prog --achieved-tflops 450 --ib-gbps 45 benchmarks/project.sweep
EOF
}

calib= calib_run= achieved= peak=989.4 gpn=8 nvl=360 nvl_lat=50 ib=50 ib_lat=20
hbm=3000 dp_overlap=1 tp_overlap=0 csv=0 sweeps=
train=${GRIDLM_TRAIN:-} train_from=GRIDLM_TRAIN

need() { [ $# -ge 2 ] || die "$1 needs a value (see --help)"; }
num() {   # num FLAG VALUE: a non-negative decimal number
    case $2 in
    ''|*[!0-9.eE+-]*|*.*.*) die "$1 '$2' is not a number: give e.g. $3" ;;
    esac
    awk -v x="$2" 'BEGIN { exit !(x + 0 == x + 0 && x + 0 >= 0) }' ||
        die "$1 '$2' is not a non-negative number: give e.g. $3"
}
pos() { num "$@"; awk -v x="$2" 'BEGIN { exit !(x + 0 > 0) }' || die "$1 '$2' must be above zero: give e.g. $3"; }
frac() { num "$@"; awk -v x="$2" 'BEGIN { exit !(x + 0 <= 1) }' || die "$1 '$2' is not in [0, 1]: give e.g. $3"; }

while [ $# -gt 0 ]; do
    case $1 in
    -c|--calibrate) need "$@"; calib=$2; shift 2 ;;
    --calibrate-run) need "$@"; calib_run=$2; shift 2 ;;
    -r|--achieved-tflops) need "$@"; pos "$1" "$2" 450; achieved=$2; shift 2 ;;
    --peak-tflops) need "$@"; pos "$1" "$2" 989.4; peak=$2; shift 2 ;;
    --gpus-per-node) need "$@"
        case $2 in ''|*[!0-9]*|0) die "--gpus-per-node '$2' is not a positive integer: give e.g. 8" ;; esac
        gpn=$2; shift 2 ;;
    --nvlink-gbps) need "$@"; pos "$1" "$2" 360; nvl=$2; shift 2 ;;
    --nvlink-latency-us) need "$@"; num "$1" "$2" 50; nvl_lat=$2; shift 2 ;;
    --ib-gbps) need "$@"; pos "$1" "$2" 50; ib=$2; shift 2 ;;
    --ib-latency-us) need "$@"; num "$1" "$2" 20; ib_lat=$2; shift 2 ;;
    --hbm-gbps) need "$@"; pos "$1" "$2" 3000; hbm=$2; shift 2 ;;
    --dp-overlap) need "$@"; frac "$1" "$2" 1; dp_overlap=$2; shift 2 ;;
    --tp-overlap) need "$@"; frac "$1" "$2" 0; tp_overlap=$2; shift 2 ;;
    --csv) csv=1; shift ;;
    -t|--train) need "$@"; train=$2; train_from=$1; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) [ -r "$1" ] || die "cannot read sweep file '$1': check the path"
       sweeps="$sweeps$1
"; shift ;;
    esac
done
for f in "$@"; do
    [ -r "$f" ] || die "cannot read sweep file '$f': check the path"
    sweeps="$sweeps$f
"
done
[ -n "$calib" ] || [ -n "$sweeps" ] ||
    die "nothing to do: give --calibrate results.csv and/or a sweep file (see --help)"
[ -z "$calib" ] || [ -r "$calib" ] || die "cannot read --calibrate '$calib': check the path"
[ -z "$calib_run" ] || [ -n "$calib" ] || die "--calibrate-run needs --calibrate results.csv"
[ -z "$achieved" ] || [ -z "$calib_run" ] ||
    die "--achieved-tflops and --calibrate-run both given: choose one"

# gridlm-train: --train, $GRIDLM_TRAIN, or find-train.sh's search.
if [ -z "$train" ]; then
    find_train
elif [ ! -f "$train" ] || [ ! -x "$train" ]; then
    die "$train_from '$train' is not an executable program: give the path of gridlm-train"
fi

exec awk -f "$here/project.awk" -v train="$train" -v calib="$calib" -v calib_run="$calib_run" \
    -v achieved="$achieved" -v peak="$peak" -v gpn="$gpn" -v nvl="$nvl" -v nvl_lat="$nvl_lat" \
    -v ib="$ib" -v ib_lat="$ib_lat" -v hbm="$hbm" -v dp_overlap="$dp_overlap" \
    -v tp_overlap="$tp_overlap" -v csv="$csv" -v sweeps="$sweeps"
