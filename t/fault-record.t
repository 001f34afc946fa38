#!/bin/sh
# fault-record.t: gridlm-train's exit record, DIR/gridlm_exit.txt under
# --save DIR, which job scripts read instead of the launcher's status:
#   - SIGTERM to the launcher (mpiexec) while the ranks hold after
#     iteration 3 (GRIDLM_TEST_HOLD_AFTER, so the signal cannot come too
#     late): the ranks save iteration 4 and the record says reason=signal,
#     iteration=4, saved_iteration=4, "SIGTERM received", the tracker says
#     4.  The launcher's own status is shown, not judged: Open MPI's
#     mpirun exits 1 here although every rank exited 0, which is why the
#     record exists.
#   - a run to --train-iters 3: reason=done, iteration=3;
#   - --exit-interval 2: reason=interval, iteration=2;
#   - --exit-duration-in-mins 0.0001: reason=duration, at the iteration
#     the log names;
#   - a run that fails in training (a NaN with --max-nonfinite-iters 0)
#     over a directory holding an earlier run's record: no record is left
#     (the failing run removed it when training started), exit non-zero.
. "$(dirname "$0")/tap.sh"
test -n "$MPIEXEC" || skip_all "no MPI launcher (MPIEXEC)"
. "$(dirname "$0")/fault-lib.sh"
. "$(dirname "$0")/model-flags.sh"
train=$top_builddir/src/tools/gridlm-train
test -x "$train" || skip_all "src/tools/gridlm-train not built"
tiny="$llama_form --device cpu --mock-data --seed 1234 --num-layers 2 --hidden-size 64
 --num-attention-heads 8 --num-query-groups 4 --ffn-hidden-size 176
 --seq-length 64 --vocab-size 512 --micro-batch-size 2 --global-batch-size 16
 --lr 1e-3 --log-interval 1 --eval-iters 0"

# rec DIR KEY: KEY's value in DIR's exit record
rec() { sed -n "s/^$2=//p" "$1/gridlm_exit.txt" 2>/dev/null; }
# rec_is DIR REASON ITERATION: the record has them, saved_iteration and
# the tracker equal ITERATION
rec_is() {
    test "$(rec "$1" reason)" = "$2" && test "$(rec "$1" iteration)" = "$3" &&
        test "$(rec "$1" saved_iteration)" = "$3" &&
        test "$(cat "$1/latest_checkpointed_iteration.txt" 2>/dev/null)" = "$3"
}
show_rec() { sed 's/^/# record: /' "$1/gridlm_exit.txt" 2>/dev/null || echo "# no record in $1"; }

# --- SIGTERM to the launcher ---
# The launcher's pid is that of the shell that execs it (written first):
# no process is looked up by name.  Open MPI's mpirun sends SIGKILL 1 s
# after the SIGTERM it forwards (odls_base_sigkill_timeout): a loaded
# machine may need longer to save, as a real checkpoint does
# (gridlm-train(1), EXIT RECORD), so the test gives the ranks 10 s (a
# save here takes 0.1 s).  mpirun waits out that time whatever the ranks
# do, twice; timeout(1) allows for it.
ck=$fault_dir/sig
# shellcheck disable=SC2086,SC2016
OMPI_MCA_odls_base_sigkill_timeout=10 GRIDLM_TEST_HOLD_AFTER=3 \
    timeout 120 sh -c 'echo $$ >"$0"; exec "$@"' "$fault_dir/launcher.pid" \
    $MPIEXEC $MPIEXEC_FLAGS -n 2 "$train" $tiny --train-iters 50 \
    --exit-signal-handler --save "$ck" >"$fault_out" 2>"$fault_err" &
job=$!
i=0
while ! grep -q '^holding after iteration 3' "$fault_out" 2>/dev/null && test $i -lt 1200; do
    kill -0 $job 2>/dev/null || break
    sleep 0.1
    i=$((i + 1))
done
held=no
grep -q '^holding after iteration 3' "$fault_out" && held=yes
test $held = yes && kill -TERM "$(cat "$fault_dir/launcher.pid")"
wait $job
rc=$?
fault_show
echo "# the launcher ($GL_MPI_FLAVOR) exited with status $rc after forwarding SIGTERM"
show_rec "$ck"
fault_ok "SIGTERM to the launcher while the ranks hold after iteration 3: not a hang ($rc)" \
    test $held = yes -a $rc -ne 124 -a $rc -ne 137
fault_ok "... the ranks saved iteration 4 and said so" \
    grep -q 'exiting program after iteration 4 (SIGTERM received)' "$fault_out"
fault_ok "... the record says reason=signal, iteration 4, saved 4 (the tracker too)" \
    rec_is "$ck" signal 4
fault_ok "... and names the signal" test "$(rec "$ck" detail)" = "SIGTERM received"

# --- done, interval, duration ---
ck=$fault_dir/done
fault_run "a run to --train-iters 3" \
    $MPIEXEC $MPIEXEC_FLAGS -n 2 "$train" $tiny --train-iters 3 --save "$ck"
show_rec "$ck"
fault_ok "... record: reason=done, iteration 3" rec_is "$ck" done 3
fault_ok "... detail names --train-iters" test "$(rec "$ck" detail)" = "--train-iters 3 reached"

ck=$fault_dir/interval
fault_run "--exit-interval 2" \
    $MPIEXEC $MPIEXEC_FLAGS -n 2 "$train" $tiny --train-iters 50 --exit-interval 2 --save "$ck"
show_rec "$ck"
fault_ok "... record: reason=interval, iteration 2" rec_is "$ck" interval 2

ck=$fault_dir/duration
fault_run "--exit-duration-in-mins 0.0001" \
    $MPIEXEC $MPIEXEC_FLAGS -n 2 "$train" $tiny --train-iters 5000 \
    --exit-duration-in-mins 0.0001 --save "$ck"
show_rec "$ck"
at=$(sed -n 's/^exiting program after iteration \([0-9]*\) (--exit-duration-in-mins.*/\1/p' "$fault_out")
fault_ok "... record: reason=duration, at the iteration the log names (${at:-none})" \
    rec_is "$ck" duration "${at:-none}"

# --- a failing run leaves no record ---
ck=$fault_dir/fail
mkdir -p "$ck"
cp "$fault_dir/done/gridlm_exit.txt" "$ck/"
fault_exec env GRIDLM_TEST_NONFINITE=2 $MPIEXEC $MPIEXEC_FLAGS -n 2 "$train" $tiny \
    --train-iters 10 --max-nonfinite-iters 0 --save "$ck"
fault_show
fault_ok "a run that fails in training exits non-zero ($fault_rc)" \
    test $fault_rc -ne 0 -a $fault_rc -ne 124
fault_ok "... and leaves no exit record (the earlier run's was removed)" \
    test ! -e "$ck/gridlm_exit.txt"
done_testing
