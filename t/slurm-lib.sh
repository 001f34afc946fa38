# t/slurm-lib.sh: a private Slurm on localhost for the t/slurm*.t tests.
#
# Sourced by a test script.  It starts a munged, a slurmctld and a slurmd
# on this machine (one node, this machine's CPUs), each with its own key,
# socket, ports, state and spool directories in a temporary directory,
# so nothing of a system Slurm is used or disturbed and two tests at once
# do not collide.  The daemons are stopped when the script exits, and any
# left by an earlier run that was killed are stopped before starting.
#
#   slurm_start        check that we can (root, the Slurm programs; else
#                      "1..0 # SKIP"), start the daemons, wait (bounded)
#                      for the node to be idle: test 1 passes, or the
#                      script bails out with the daemons' logs
#   $slurm_dir         the temporary directory; scratch space for the test
#   $SLURM_CONF        exported: every Slurm command here uses this Slurm
#   $slurm_cpus        the node's CPUs
#   ok, skip, diag, skip_all, done_testing ...
#                      TAP, from t/tap.sh (sourced here)
#   slurm_wait_job JOBID STATES SECONDS
#                      poll (every 0.5 s) until the job's state is one of
#                      STATES (a regular expression, e.g.
#                      'COMPLETED|FAILED'); leaves its JobState, ExitCode
#                      and Restarts, from the same look, in $slurm_state,
#                      $slurm_exit and $slurm_restarts; 1 on time-out
#
# Two settings make a requeued job (t/slurm-preempt.t) start again in
# about 12 s rather than up to 3 minutes: AuthInfo's cred_expire is 10 s
# instead of Slurm's 120 (it is also how long a requeued job must wait
# before it may start again, slurm.conf(5); 10 s is ample for a step
# launch here), and the main scheduling loop runs every 2 s instead of
# 60 (sched_interval: nothing else wakes the scheduler when the requeued
# job's begin time passes).  MinJobAge=5 (a finished job's record is kept
# 5 s, not 300) makes `sbatch --wait` look every 2 s instead of after 2,
# 10, 42, 74... s (it backs off up to MinJobAge/2).
#
# Set GL_SKIP_SLURM=1 to skip every test that uses it.

: "${top_builddir:=.}"
: "${top_srcdir:=.}"
[ -n "$GL_MPI_FLAVOR" ] || . "$top_builddir/t/env.sh"
. "$(dirname "$0")/tap.sh"

# --- daemons -------------------------------------------------------------
# Every process started here has SLURM_CONF=$conf in its environment
# (slurmstepd and the ranks inherit it from slurmd), so that is how they
# are found again: no name matching, only this run's processes.
slurm_kill_by_conf() {    # slurm_kill_by_conf CONF SIGNAL
    for e in /proc/[0-9]*/environ; do
        pid=${e#/proc/}; pid=${pid%/environ}
        [ "$pid" = $$ ] && continue
        if tr '\0' '\n' 2>/dev/null <"$e" | grep -qx "SLURM_CONF=$1"; then
            kill "-$2" "$pid" 2>/dev/null
        fi
    done
}
slurm_any_by_conf() {     # slurm_any_by_conf CONF: 0 if a process has it
    for e in /proc/[0-9]*/environ; do
        pid=${e#/proc/}; pid=${pid%/environ}
        [ "$pid" = $$ ] && continue
        tr '\0' '\n' 2>/dev/null <"$e" | grep -qx "SLURM_CONF=$1" && return 0
    done
    return 1
}
slurm_stop_all() {        # slurm_stop_all DIR
    sconf=$1/slurm.conf
    SLURM_CONF=$sconf timeout 10 scancel --quiet --user=root >/dev/null 2>&1
    slurm_kill_by_conf "$sconf" TERM
    [ -f "$1/munged.pid" ] && kill "$(cat "$1/munged.pid")" 2>/dev/null
    i=0
    while slurm_any_by_conf "$sconf" && [ $i -lt 20 ]; do sleep 0.5; i=$((i + 1)); done
    slurm_kill_by_conf "$sconf" KILL
    [ -f "$1/munged.pid" ] && kill -KILL "$(cat "$1/munged.pid")" 2>/dev/null
    rm -rf "$1"
}

# Two free TCP ports, from a place that depends on this process.
slurm_port_free() {
    hex=$(printf ':%04X ' "$1")
    ! cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | grep -q "$hex"
}

slurm_wait_job() {        # slurm_wait_job JOBID STATES SECONDS
    i=0
    while [ $i -lt $(($3 * 2)) ]; do
        info=$(timeout 5 scontrol -o show job "$1" 2>/dev/null | tr ' ' '\n')
        slurm_state=$(echo "$info" | sed -n 's/^JobState=//p')
        slurm_exit=$(echo "$info" | sed -n 's/^ExitCode=//p')
        slurm_restarts=$(echo "$info" | sed -n 's/^Restarts=//p')
        echo "$slurm_state" | grep -Eqx "$2" && return 0
        sleep 0.5; i=$((i + 1))
    done
    return 1
}

slurm_start() {
    [ "${GL_SKIP_SLURM:-0}" = 1 ] && skip_all "GL_SKIP_SLURM=1"
    [ "$(id -u)" -eq 0 ] || skip_all "needs root to start slurmctld and slurmd"
    PATH=$PATH:/usr/sbin:/sbin
    for p in munged slurmctld slurmd srun sbatch sinfo squeue scontrol scancel; do
        command -v $p >/dev/null 2>&1 ||
            skip_all "no $p (apt-get install slurmctld slurmd slurm-client munge)"
    done
    command -v timeout >/dev/null 2>&1 || skip_all "no timeout(1)"

    # A Slurm job around us (make check under salloc) must not leak in.
    for v in $(env | sed -n 's/^\(SLURM_[A-Za-z0-9_]*\)=.*/\1/p; s/^\(PMIX_[A-Za-z0-9_]*\)=.*/\1/p; s/^\(PMI_[A-Za-z0-9_]*\)=.*/\1/p'); do
        unset "$v"
    done

    tmpbase=${TMPDIR:-/tmp}
    # Runs that were killed before their trap ran left their directory
    # (and maybe daemons) behind; their owner process is gone.
    for d in "$tmpbase"/gl-slurm.*; do
        [ -f "$d/owner" ] || continue
        owner=$(cat "$d/owner")
        [ -d "/proc/$owner" ] && continue
        slurm_stop_all "$d"
    done

    slurm_dir=$(mktemp -d "$tmpbase/gl-slurm.XXXXXX") || skip_all "mktemp failed"
    echo $$ >"$slurm_dir/owner"
    trap 'slurm_stop_all "$slurm_dir"' EXIT
    trap 'exit 1' INT TERM HUP PIPE

    port=$((20000 + ($$ * 37) % 30000))
    while ! { slurm_port_free $port && slurm_port_free $((port + 1)); }; do
        port=$((port + 2))
    done

    # This node's CPUs, as slurmd counts them; memory kept small on purpose.
    slurm_cpus=$(slurmd -C 2>/dev/null | sed -n 's/.* CPUs=\([0-9]*\).*/\1/p')
    : "${slurm_cpus:=2}"
    [ "$slurm_cpus" -ge 2 ] || skip_all "needs 2 CPUs, slurmd sees $slurm_cpus"

    d=$slurm_dir
    mkdir -p "$d/state" "$d/spool" "$d/log"
    cat >"$d/slurm.conf" <<EOF
# Written by t/slurm-lib.sh: one node, this machine, everything private.
ClusterName=gltest
SlurmctldHost=localhost
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$d/munge.sock,cred_expire=10
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd.pid
SlurmctldLogFile=$d/log/slurmctld.log
SlurmdLogFile=$d/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=2
MinJobAge=5
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$slurm_cpus RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
    SLURM_CONF=$d/slurm.conf
    export SLURM_CONF

    dd if=/dev/urandom of="$d/munge.key" bs=1024 count=1 2>/dev/null
    chmod 600 "$d/munge.key"
    munged --force --socket="$d/munge.sock" --key-file="$d/munge.key" \
        --pid-file="$d/munged.pid" --log-file="$d/log/munged.log" \
        --seed-file="$d/munge.seed" >"$d/log/munged.out" 2>&1
    slurmctld -i >"$d/log/slurmctld.out" 2>&1
    slurmd -N localhost >"$d/log/slurmd.out" 2>&1

    i=0 state=
    while [ $i -lt 60 ]; do
        state=$(timeout 5 sinfo -h -n localhost -o %T 2>/dev/null)
        [ "$state" = idle ] && break
        sleep 0.5; i=$((i + 1))
    done
    if [ "$state" != idle ]; then
        fail "slurmctld and slurmd start (node state '$state')"
        for f in "$d"/log/*; do echo "== $f"; tail -n 20 "$f"; done | diag
        done_testing
    fi
    ok 0 "slurmctld and slurmd start, node localhost idle (ports $port-$((port + 1)))"
}
