# find-train.sh: sourced by sweep.sh and project.sh (not run).
#
# find_train: sets $train to the gridlm-train to run when the user gave
# none (--train, $GRIDLM_TRAIN), looking where a user of the scripts has
# it: the build directory the script runs from, the build tree the
# script sits in, the installation it was installed with
# (PREFIX/share/gridlm/benchmarks -> PREFIX/bin), then $PATH (a loaded
# environment module).  Needs $here (the script's directory) and die().
find_train() {
    if [ -x ./src/tools/gridlm-train ]; then
        train=$(pwd)/src/tools/gridlm-train          # run from a build directory
    elif [ -x "$here/../src/tools/gridlm-train" ]; then
        train=$here/../src/tools/gridlm-train
    elif [ -x "$here/../../../bin/gridlm-train" ]; then
        train=$here/../../../bin/gridlm-train        # installed: share/gridlm/benchmarks
    else
        train=$(command -v gridlm-train 2>/dev/null) ||
            die "gridlm-train not found: give --train PROG, set GRIDLM_TRAIN, run from a build directory or load the gridlm module"
    fi
}
