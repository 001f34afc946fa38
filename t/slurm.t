#!/bin/sh
# t/slurm.t: gridlm under a real Slurm, started here for the test.
#
# Starts a private munged, slurmctld and slurmd on localhost (one node,
# this machine's CPUs), each with its own key, socket, ports, state and
# spool directories in a temporary directory, so nothing of a system
# Slurm is used or disturbed and two runs at once do not collide.  Then,
# for this build's MPI (GL_MPI_FLAVOR, from t/env.sh):
#
#   openmpi  srun --mpi=pmix -n 2: two ranks of one job; gridlm-train
#            --dry-run takes the PMIx bootstrap path ("bootstrap: pmix").
#   mpich    srun --mpi=pmi2 -n 2: two ranks of one job; gridlm-train
#            --dry-run takes the MPI fallback path ("bootstrap: mpi").
#            srun --mpi=pmix -n 2 starts two singletons; gridlm-train
#            must stop and say to use srun --mpi=pmi2 (or a PMIx MPI).
#
# and slurm/tiny.sbatch submitted with sbatch --wait runs gridlm-train.
# The daemons are stopped on exit, and any left by an earlier run that
# was killed are stopped before starting.  Skips without root or Slurm.
# Set GL_SKIP_SLURM=1 to skip it.

: "${top_builddir:=.}"
: "${top_srcdir:=.}"
[ -n "$GL_MPI_FLAVOR" ] || . "$top_builddir/t/env.sh"

# --- TAP -----------------------------------------------------------------
n=0 failed=0
ok() {      # ok STATUS NAME: STATUS 0 passes
    n=$((n + 1))
    if [ "$1" -eq 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; failed=1; fi
}
skip() {    # skip NAME REASON
    n=$((n + 1)); echo "ok $n - $1 # SKIP $2"
}
diag() { sed 's/^/# /'; }
skip_all() { echo "1..0 # SKIP $1"; exit 0; }

# --- can we? -------------------------------------------------------------
[ "${GL_SKIP_SLURM:-0}" = 1 ] && skip_all "GL_SKIP_SLURM=1"
[ "$(id -u)" -eq 0 ] || skip_all "needs root to start slurmctld and slurmd"
PATH=$PATH:/usr/sbin:/sbin
for p in munged slurmctld slurmd srun sbatch sinfo scontrol scancel; do
    command -v $p >/dev/null 2>&1 ||
        skip_all "no $p (apt-get install slurmctld slurmd slurm-client munge)"
done
command -v timeout >/dev/null 2>&1 || skip_all "no timeout(1)"

hello=$top_builddir/t/slurm-hello
train=$top_builddir/src/tools/gridlm-train
sbatch_tiny=$top_srcdir/slurm/tiny.sbatch
[ -x "$hello" ] || skip_all "t/slurm-hello not built"
have_pmix=no
grep -q '^#define GL_HAVE_PMIX 1' "$top_builddir/config.h" 2>/dev/null && have_pmix=yes

# A Slurm job around us (make check under salloc) must not leak in.
for v in $(env | sed -n 's/^\(SLURM_[A-Za-z0-9_]*\)=.*/\1/p; s/^\(PMIX_[A-Za-z0-9_]*\)=.*/\1/p; s/^\(PMI_[A-Za-z0-9_]*\)=.*/\1/p'); do
    unset "$v"
done

# --- daemons -------------------------------------------------------------
# Every process started here has SLURM_CONF=$conf in its environment
# (slurmstepd and the ranks inherit it from slurmd), so that is how they
# are found again: no name matching, only this run's processes.
kill_by_conf() {    # kill_by_conf CONF SIGNAL
    for e in /proc/[0-9]*/environ; do
        pid=${e#/proc/}; pid=${pid%/environ}
        [ "$pid" = $$ ] && continue
        if tr '\0' '\n' 2>/dev/null <"$e" | grep -qx "SLURM_CONF=$1"; then
            kill "-$2" "$pid" 2>/dev/null
        fi
    done
}
any_by_conf() {
    for e in /proc/[0-9]*/environ; do
        pid=${e#/proc/}; pid=${pid%/environ}
        [ "$pid" = $$ ] && continue
        tr '\0' '\n' 2>/dev/null <"$e" | grep -qx "SLURM_CONF=$1" && return 0
    done
    return 1
}
stop_all() {        # stop_all DIR
    conf=$1/slurm.conf
    SLURM_CONF=$conf timeout 10 scancel --quiet --user=root >/dev/null 2>&1
    kill_by_conf "$conf" TERM
    [ -f "$1/munged.pid" ] && kill "$(cat "$1/munged.pid")" 2>/dev/null
    i=0
    while any_by_conf "$conf" && [ $i -lt 20 ]; do sleep 0.5; i=$((i + 1)); done
    kill_by_conf "$conf" KILL
    [ -f "$1/munged.pid" ] && kill -KILL "$(cat "$1/munged.pid")" 2>/dev/null
    rm -rf "$1"
}

tmpbase=${TMPDIR:-/tmp}
# Runs that were killed before their trap ran left their directory (and
# maybe daemons) behind; their owner process is gone.
for d in "$tmpbase"/gl-slurm.*; do
    [ -f "$d/owner" ] || continue
    owner=$(cat "$d/owner")
    [ -d "/proc/$owner" ] && continue
    stop_all "$d"
done

dir=$(mktemp -d "$tmpbase/gl-slurm.XXXXXX") || skip_all "mktemp failed"
echo $$ >"$dir/owner"
trap 'stop_all "$dir"' EXIT
trap 'exit 1' INT TERM HUP

# Two free TCP ports, from a place that depends on this process.
port_free() {
    hex=$(printf ':%04X ' "$1")
    ! cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | grep -q "$hex"
}
port=$((20000 + ($$ * 37) % 30000))
while ! { port_free $port && port_free $((port + 1)); }; do port=$((port + 2)); done

# This node's CPUs, as slurmd counts them; memory kept small on purpose.
cpus=$(slurmd -C 2>/dev/null | sed -n 's/.* CPUs=\([0-9]*\).*/\1/p')
: "${cpus:=2}"
[ "$cpus" -ge 2 ] || skip_all "needs 2 CPUs, slurmd sees $cpus"

mkdir -p "$dir/state" "$dir/spool" "$dir/log"
conf=$dir/slurm.conf
cat >"$conf" <<EOF
# Written by t/slurm.t: one node, this machine, everything private.
ClusterName=gltest
SlurmctldHost=localhost
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge.sock
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
SLURM_CONF=$conf
export SLURM_CONF

dd if=/dev/urandom of="$dir/munge.key" bs=1024 count=1 2>/dev/null
chmod 600 "$dir/munge.key"
munged --force --socket="$dir/munge.sock" --key-file="$dir/munge.key" \
    --pid-file="$dir/munged.pid" --log-file="$dir/log/munged.log" \
    --seed-file="$dir/munge.seed" >"$dir/log/munged.out" 2>&1
slurmctld -i >"$dir/log/slurmctld.out" 2>&1
slurmd -N localhost >"$dir/log/slurmd.out" 2>&1

i=0 state=
while [ $i -lt 60 ]; do
    state=$(timeout 5 sinfo -h -n localhost -o %T 2>/dev/null)
    [ "$state" = idle ] && break
    sleep 0.5; i=$((i + 1))
done
if [ "$state" != idle ]; then
    echo "not ok 1 - slurmctld and slurmd start (node state '$state')"
    for f in "$dir"/log/*; do echo "== $f"; tail -n 20 "$f"; done | diag
    echo "1..1"
    exit 1
fi
ok 0 "slurmctld and slurmd start, node localhost idle (ports $port-$((port + 1)))"

# --- run -----------------------------------------------------------------
out=$dir/out
run() {             # run CMD...: output in $out, status in $rc
    timeout 120 "$@" >"$out" 2>&1
    rc=$?
}
show() { diag <"$out"; }

run srun -n 2 hostname
[ $rc -eq 0 ] && [ "$(wc -l <"$out")" -eq 2 ]
ok $? "srun -n 2 hostname runs two tasks"; [ $rc -eq 0 ] || show

# The tiny model, and a layout that two ranks can hold.
dry="--dry-run --model tiny --device cpu"

case $GL_MPI_FLAVOR in
openmpi)
    run srun --mpi=pmix -n 2 "$hello"
    grep -q '^rank 0 of 2 ' "$out" && grep -q '^rank 1 of 2 ' "$out"
    st=$?; ok $st "Open MPI under srun --mpi=pmix: one job of two ranks"; [ $st -eq 0 ] || show

    if [ -x "$train" ]; then
        want=mpi; [ $have_pmix = yes ] && want=pmix
        run srun --mpi=pmix -n 2 "$train" $dry
        [ $rc -eq 0 ]
        ok $? "srun --mpi=pmix -n 2 gridlm-train $dry exits 0"
        grep -q "bootstrap: $want" "$out"
        ok $? "gridlm-train reports 'bootstrap: $want' (PMIx found: $have_pmix)"
        grep -q "bootstrap: $want" "$out" && [ $rc -eq 0 ] || show
    else
        skip "gridlm-train under srun --mpi=pmix" "src/tools/gridlm-train not built"
    fi
    ;;
mpich)
    run srun --mpi=pmi2 -n 2 "$hello"
    grep -q '^rank 0 of 2 ' "$out" && grep -q '^rank 1 of 2 ' "$out"
    st=$?; ok $st "MPICH under srun --mpi=pmi2: one job of two ranks"; [ $st -eq 0 ] || show

    run srun --mpi=pmix -n 2 "$hello"
    [ "$(grep -c '^rank 0 of 1 ' "$out")" -eq 2 ]
    st=$?; ok $st "MPICH under srun --mpi=pmix: two singletons (what gridlm-train must catch)"
    [ $st -eq 0 ] || show

    if [ -x "$train" ]; then
        run srun --mpi=pmi2 -n 2 "$train" $dry
        [ $rc -eq 0 ]
        ok $? "srun --mpi=pmi2 -n 2 gridlm-train $dry exits 0"
        grep -q 'bootstrap: mpi' "$out"
        ok $? "gridlm-train reports 'bootstrap: mpi'"
        grep -q 'bootstrap: mpi' "$out" && [ $rc -eq 0 ] || show

        if [ $have_pmix = yes ]; then
            run srun --mpi=pmix -n 2 "$train" $dry
            [ $rc -ne 0 ] && [ $rc -ne 124 ]
            ok $? "srun --mpi=pmix with MPICH: gridlm-train stops (status $rc, 124 is a hang)"
            grep -q -- '--mpi=pmi2' "$out"
            ok $? "... and its message says to use srun --mpi=pmi2"
            if grep -q -- '--mpi=pmi2' "$out" && [ $rc -ne 0 ]; then
                grep -- '--mpi=pmi2' "$out" | sort -u | diag
            else
                show
            fi
        else
            skip "MPICH under srun --mpi=pmix" "built without PMIx: it cannot see the mismatch"
        fi
    else
        skip "gridlm-train under srun" "src/tools/gridlm-train not built"
    fi
    ;;
*)
    skip "MPI under srun" "unknown MPI flavour '$GL_MPI_FLAVOR'"
    ;;
esac

# --- sbatch --------------------------------------------------------------
# slurm/tiny.sbatch, as shipped, with this build's program and the
# --mpi= that suits its MPI; --wait returns the job's exit status.
if [ -x "$train" ] && [ -f "$sbatch_tiny" ]; then
    mpi=pmix; [ "$GL_MPI_FLAVOR" = mpich ] && mpi=pmi2
    (cd "$dir" && GRIDLM_TRAIN=$train GRIDLM_SRUN_MPI=$mpi GRIDLM_EXTRA_ARGS=--dry-run \
        timeout 180 sbatch --wait --time=5 "$sbatch_tiny" >"$out" 2>&1)
    rc=$?
    log=$(ls "$dir"/gridlm-tiny-*.out 2>/dev/null | head -n 1)
    [ $rc -eq 0 ] && [ -n "$log" ] && grep -q 'bootstrap: ' "$log"
    st=$?
    ok $st "sbatch --wait slurm/tiny.sbatch (--dry-run, --mpi=$mpi) runs gridlm-train"
    if [ $st -ne 0 ]; then show; [ -n "$log" ] && diag <"$log"; fi
else
    skip "sbatch slurm/tiny.sbatch" "no gridlm-train or no slurm/tiny.sbatch"
fi

echo "1..$n"
exit $failed
