#!/bin/sh
# fault-nonfinite.t: NaN/Inf iterations (--max-nonfinite-iters N).
#   - streaks of at most N are skipped and counted, a finite iteration
#     resets the streak, and the run goes on (exit status 0);
#   - N + 1 in a row stop the job: exit status non-zero, exactly one error
#     line (from rank 0) naming the iterations, the count, the flag and
#     what to try, and no iteration after the one that stopped it.
. "$(dirname "$0")/tap.sh"
test -n "$MPIEXEC" || skip_all "no MPI launcher (MPIEXEC)"
. "$(dirname "$0")/fault-lib.sh"
n=$fault_n

fault_run "$n ranks, --max-nonfinite-iters 2, streaks of 1 and 2" \
    $MPIEXEC $MPIEXEC_FLAGS -n $n ./t/fault-test nonfinite --max 2 --pattern 0110100110
fault_run "1 rank, --max-nonfinite-iters 0, all finite" \
    $MPIEXEC $MPIEXEC_FLAGS -n 1 ./t/fault-test nonfinite --max 0 --pattern 0000

# stops: N = 2, iterations 5, 6 and 7 non-finite (2 and 3 were too)
fault_exec $MPIEXEC $MPIEXEC_FLAGS -n $n ./t/fault-test nonfinite --max 2 --pattern 0110111000
fault_show
fault_ok "3 in a row with --max-nonfinite-iters 2: exit status non-zero ($fault_rc)" \
    test "$fault_rc" -ne 0 -a "$fault_rc" -ne 124
msg='rank 0 on [^:]*: the loss or the gradients were NaN or Inf in 3 iterations in a row (iterations 5 to 7; 5 non-finite in all), more than --max-nonfinite-iters 2: lower --lr (now 0.0003), keep --clip-grad on (now 1), or check the data'
fault_ok "the message names the iterations, the count, the flag and the fixes" \
    grep -q "$msg" "$fault_err"
fault_ok "exactly one error line" \
    test "$(grep -c 'error:' "$fault_err")" -eq 1
fault_ok "no iteration after 7 ran" \
    sh -c "grep -q '# iteration 7:' '$fault_out' && ! grep -q '# iteration 8:' '$fault_out'"

# N = 0: the first non-finite iteration stops the job
fault_exec $MPIEXEC $MPIEXEC_FLAGS -n 2 ./t/fault-test nonfinite --max 0 --pattern 0010
fault_show
fault_ok "--max-nonfinite-iters 0: the first one stops the job ($fault_rc)" \
    sh -c "test $fault_rc -ne 0 && grep -q 'NaN or Inf in 1 iteration in a row (iteration 3; 1 non-finite in all), more than --max-nonfinite-iters 0' '$fault_err'"
done_testing
