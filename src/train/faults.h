/*
 * faults.h: surviving faults -- clean stops, NaN/Inf steps, hangs and
 * stragglers -- for the training loop.
 *
 * One gl_faults per process, made by gl_faults_init() after gl_boot_init()
 * and freed before gl_boot_finalize().  It works on its own duplicate of
 * the world communicator, so its few small collectives never mix with the
 * caller's traffic.
 *
 * Clean stops (--exit-signal-handler, --exit-duration-in-mins,
 * --exit-interval).  With --exit-signal-handler, SIGTERM and SIGUSR1
 * (Slurm's `--signal=USR1@SECONDS`, or `scancel --signal=USR1`) only set a
 * flag: the handler is async-signal-safe and installed with SA_RESTART, so
 * a signal that lands inside an MPI call or a read does not break it.
 * gl_faults_should_exit() is called once per iteration, at the same point
 * on every rank; it agrees the flags of all ranks with one 4-byte
 * MPI_Allreduce, so every rank stops after the same iteration even when
 * only one rank got the signal.  The caller then saves a checkpoint and
 * exits 0; the next job with the same --load resumes.
 * --exit-duration-in-mins runs on one clock, rank 0's, counted from its
 * gl_faults_init: rank 0's reading travels with the flags in the same
 * reduction, and every rank decides from that agreed reading, so no rank
 * judges the limit by its own start (which may be later than rank 0's).
 *
 * Non-finite steps (--max-nonfinite-iters N).  When the loss or the
 * gradient norm of an iteration is NaN or Inf the caller skips the update
 * and tells gl_faults_nonfinite(), which counts the skips (for the log)
 * and the current streak.  N consecutive skips are tolerated; the next
 * one stops the job with one line naming the iterations and what to try
 * (lower --lr, keep --clip-grad on, check the data).  N = 0: the first
 * non-finite iteration stops the job.  A finite iteration resets the
 * streak.
 *
 * Hangs (--distributed-timeout-minutes T, fractions allowed; the
 * environment variable GRIDLM_WATCHDOG_SECONDS, when set, overrides it in
 * seconds, 0 turning the watchdog off).  Brackets mark the waits that
 * block the host: every blocking wait of the comm layer opens one by
 * itself (comm.h's wait hook: an MPI collective with its group and its
 * number on the group, a wait for a point-to-point peer, an NCCL stream
 * wait), and gl_watch_begin()/gl_watch_begin_comm()/gl_watch_end()
 * bracket the others (faults' own collectives, a device sync or download
 * that waits for queued NCCL work).  Computation is never bracketed: a
 * bracket is a wait for other ranks.  A background thread looks at the
 * open brackets every second (more often for timeouts under 4 s); when
 * one has been open longer than T it asks the ranks the wait depends on,
 * through the side channel (comm/peers.h), where they are, and prints
 *   "gridlm: error: rank R on HOST: collective MPI_Allreduce #57 on group
 *    dp (2 ranks) did not finish within T s (open X s): not arrived: rank
 *    1 on HOST2 (pid P) is stopped (process state T: SIGSTOP, or a
 *    debugger) and does not answer; stopping the job (...)"
 * -- naming, for a collective, the members that have not made it yet
 * (fewer collectives on the group, a silent or gone process) with what
 * they do instead -- and stops the whole job through gl_die()
 * (MPI_Abort), instead of hanging until Slurm's time limit.  The rank
 * that fires first tells the others through the side channel, so one
 * rank explains and the others wait for its abort.  Without the side
 * channel (GRIDLM_PEER_CHANNEL=0) the line says the peers "may have died
 * or stalled".  Brackets nest (up to GL_WATCH_DEPTH); each is timed from
 * its own begin, less any time this process itself did not run (the
 * watchdog thread woke far later than it asked: SIGSTOP, a suspended
 * job), so a rank that was stopped blames neither itself nor its peers
 * for its own stop.  The NCCL back end also polls ncclCommGetAsyncError
 * in its own waits (comm_nccl.c).
 *
 * Lost peers: the side channel's ring (comm/peers.h) notices a peer
 * process that died (SIGKILL, a crash, the OOM killer) at once, and its
 * neighbours stop the job naming it, where the launcher has not already
 * stopped it.
 *
 * Note: the abort is the one MPI call made from the watchdog thread.  The
 * job boots with MPI_THREAD_FUNNELED; Open MPI and MPICH both stop the job
 * from a second thread in practice (t/fault-watchdog.t checks it), and
 * the process is going down either way.
 *
 * Stragglers (--straggler-threshold X, every --log-interval).
 * gl_faults_step_times() finds the slowest and the fastest rank's step
 * time with one MPI_Allreduce (MPI_MINLOC over (-t, rank) and (t, rank));
 * when slowest / fastest > X rank 0 prints
 *   "stragglers: slowest rank R (HOST) X ms, fastest rank Q (HOST) Y ms
 *    (ratio Z) at iteration I"
 * with the host names gathered once by gl_faults_init().
 *
 * How the training loop (train.c) uses this:
 *   1. after setup: F = gl_faults_init(c, b, MPI_COMM_WORLD); before
 *      returning: gl_faults_free(F).
 *   2. once per iteration, after the step and the log block:
 *      if (gl_faults_should_exit(F, iter, &why)) { save; log why; break; }
 *   3. bad = !isfinite(loss) || !isfinite(norm) (the same on every rank);
 *      skipped = gl_faults_nonfinite(F, iter, bad); update only if !bad.
 *   4. watch brackets: the comm layer's waits bracket themselves; the
 *      loop brackets the download of the iteration's statistics and the
 *      last device sync with gl_watch_begin_comm(F, ..., world group):
 *      on a GPU those wait for the NCCL collectives queued before them.
 *   5. at each log point, on every rank:
 *      gl_faults_step_times(F, mean_step_seconds, iter, NULL).
 *
 * Thread use: every call but gl_watch_begin/end is made from the thread
 * that makes the caller's MPI calls; gl_watch_begin/end may be called from
 * any one thread at a time.
 */
#ifndef GL_TRAIN_FAULTS_H
#define GL_TRAIN_FAULTS_H

#include <mpi.h>
#include "base/error.h"
#include "boot/boot.h"
#include "comm/comm.h"
#include "train/run_config.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GL_WATCH_DEPTH 8

typedef struct gl_faults gl_faults;

/* Reasons to stop, as bits (gl_faults_exit_flags, gl_faults_exit_decide). */
enum {
    GL_EXIT_SIGTERM  = 1,   /* SIGTERM reached some rank */
    GL_EXIT_SIGUSR1  = 2,   /* SIGUSR1 reached some rank */
    GL_EXIT_DURATION = 4,   /* --exit-duration-in-mins passed (the agreed clock) */
    GL_EXIT_INTERVAL = 8    /* the iteration is a multiple of --exit-interval */
};

/* Start: record the start time, gather the host names on rank 0, install
 * the SIGTERM/SIGUSR1 handlers when c->faults.exit_signal_handler is set, and
 * start the watchdog thread (unless its timeout is 0).  b gives the rank
 * and host.  Collective over world. */
gl_faults *gl_faults_init(const gl_config *c, const gl_boot *b, MPI_Comm world);

/* Stop the watchdog, restore the previous signal handlers, free f (NULL
 * allowed).  Collective over the world given to gl_faults_init. */
void gl_faults_free(gl_faults *f);

/* ---- clean stops ----------------------------------------------------- */

/* Should the job save and exit after `iteration` (the number of
 * iterations completed, counted from the start of training, resumed ones
 * included, as Megatron counts it)?  1 on every rank or 0 on every rank.
 * *why (may be NULL) gets a phrase for the log, e.g. "SIGUSR1 received"
 * or "--exit-interval 1000"; it stays valid until the next call.
 * Collective over the world: call it once per iteration on every rank. */
int gl_faults_should_exit(gl_faults *f, long iteration, const char **why);

/* The same in two halves, for a loop that already reduces something every
 * iteration: gl_faults_exit_flags() is this rank's signal bits
 * (GL_EXIT_SIGTERM, GL_EXIT_SIGUSR1) and gl_faults_exit_clock() rank 0's
 * seconds since gl_faults_init (0 on the other ranks); the caller agrees
 * them (bitwise OR of the flags, sum or maximum of the clocks), and
 * gl_faults_exit_decide() adds --exit-duration-in-mins (agreed_clock
 * against the limit) and --exit-interval.  None is collective. */
unsigned gl_faults_exit_flags(gl_faults *f);
double gl_faults_exit_clock(const gl_faults *f);
int gl_faults_exit_decide(gl_faults *f, long iteration, unsigned agreed_flags,
                          double agreed_clock, const char **why);

/* The agreed clock of the last decision: rank 0's seconds since its
 * gl_faults_init, the same value on every rank. */
double gl_faults_exit_elapsed(const gl_faults *f);

/* Minutes since gl_faults_init (this rank's clock). */
double gl_faults_elapsed_minutes(const gl_faults *f);

/* ---- the exit record ------------------------------------------------- */

/* At a clean stop (a signal, --exit-duration-in-mins, --exit-interval, or
 * --train-iters reached) with --save DIR, rank 0 writes DIR/gridlm_exit.txt
 * once the last checkpoint is complete: key=value lines
 *   reason=signal|duration|interval|done   iteration=N   saved_iteration=N
 *   train_iters=N   detail=TEXT   ranks=N   time=UTC   slurm_job_id=
 *   slurm_restart_count=
 * so that a job script can tell a clean stop from a failure whatever the
 * launcher's own exit status (Open MPI's mpirun exits 1 after forwarding a
 * SIGTERM even when every rank saved and exited 0).  Rank 0 removes the
 * record of an earlier run when training starts, so a record present
 * after a run is that run's.  The file is written to a fresh temporary
 * beside it and renamed into place.  Both return 0, or -1 and err. */
#define GL_EXIT_RECORD "gridlm_exit.txt"
int gl_faults_exit_record_clear(const char *dir, gl_error *err);
int gl_faults_exit_record_write(gl_faults *f, const char *dir, long iteration,
                                long train_iters, long saved_iteration, gl_error *err);

/* ---- non-finite steps ------------------------------------------------- */

/* Record whether iteration `iteration` (1-based) had a non-finite loss or
 * gradient norm; the flag must be the same on every rank (derive it from
 * the reduced loss and norm).  Returns the number of iterations skipped
 * so far.  Stops the job (rank 0 prints the line, the others wait for
 * its abort) when more than --max-nonfinite-iters come in a row. */
long gl_faults_nonfinite(gl_faults *f, long iteration, int step_nonfinite);

/* Skipped iterations so far, and the current streak. */
long gl_faults_skipped(const gl_faults *f);
long gl_faults_nonfinite_streak(const gl_faults *f);

/* ---- hangs ------------------------------------------------------------ */

/* Open a bracket around a blocking wait: op names the operation
 * ("MPI_Allreduce", "stream sync after grad all-reduce"), group the group
 * ("world", "dp", ...).  Both are copied.  f == NULL is a no-op.  The
 * members are not known: a hang is blamed on the ranks that are not in a
 * bracket of the same op and group. */
void gl_watch_begin(gl_faults *f, const char *op, const char *group);

/* The same for a wait on the collectives made so far on a group (a
 * device sync or download that waits for queued NCCL work): a hang is
 * blamed on the members that have made fewer collectives on it.  group
 * NULL: a wait of this rank alone ("this rank"). */
void gl_watch_begin_comm(gl_faults *f, const char *op, const gl_comm *group);

/* Close the innermost bracket.  f == NULL is a no-op. */
void gl_watch_end(gl_faults *f);

/* The watchdog's timeout in seconds (0: off). */
double gl_watch_timeout(const gl_faults *f);

/* The side channel (comm/peers.h) f opened, or NULL (for tests). */
struct gl_peers *gl_faults_peers(gl_faults *f);

/* ---- stragglers ------------------------------------------------------- */

typedef struct {
    int slow_rank, fast_rank;     /* world ranks */
    double slow_s, fast_s;        /* their step times, seconds */
    double ratio;                 /* slow_s / fast_s */
} gl_straggler;

/* Compare this rank's step time (seconds; pass the mean over the log
 * interval) with every other rank's.  Returns 1 on every rank when
 * slowest / fastest > --straggler-threshold (rank 0 then prints the
 * "stragglers:" line), else 0.  out (may be NULL) gets the extremes on
 * every rank.  Collective over the world: call it every --log-interval. */
int gl_faults_step_times(gl_faults *f, double my_step_seconds, long iteration,
                         gl_straggler *out);

#ifdef __cplusplus
}
#endif
#endif
