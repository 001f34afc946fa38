/*
 * fault-test: drives src/train/faults.h on real MPI ranks for the
 * t/fault-*.t scripts.  One scenario per run:
 *
 *   fault-test signal [--raise R:I[:TERM]] [--pid-dir DIR]
 *       A loop of real collectives (a 64 Ki-int MPI_Allreduce checked
 *       against its exact sum, then gl_faults_should_exit).  Rank R raises
 *       SIGUSR1 (or SIGTERM) at iteration I, or the script kills one rank
 *       whose pid it finds in DIR/pid.RANK (written after the first
 *       iteration; the loop then runs until a signal stops it); then rank
 *       0 sleeps 5 ms before each all-reduce, so that the other ranks wait
 *       inside MPI when the signal comes.  Checks: every rank stops
 *       after the same iteration, with the signal as the reason, and every
 *       all-reduce gave the right sum (a signal inside MPI broke nothing).
 *   fault-test exit --interval N --start S
 *   fault-test exit --duration MIN --step-ms MS
 *       --exit-interval (resumed at iteration S) and
 *       --exit-duration-in-mins (rank 0's clock, odd ranks slower): the
 *       stop comes at the first check whose agreed clock reading is past
 *       the limit, and every rank decided on the same reading.
 *   fault-test nonfinite --max N --pattern 0110...
 *       iteration i is non-finite when pattern[i-1] is '1'; checks the
 *       skip count and the streak after every iteration.  A pattern with
 *       more than N ones in a row must stop the job (the script checks).
 *   fault-test watchdog --stall R:SEC | --stop R [--named] [--timeout-min M]
 *       first a compute phase longer than the timeout outside any bracket
 *       and many short bracketed collectives (the watchdog must stay
 *       quiet), then rank R computes (sleeps) SEC, or stops itself with
 *       SIGSTOP, before an all-reduce on a gl_comm group "dp" (the comm
 *       layer brackets it, with its number on the group) that the others
 *       wait in -- or, with --named, before an MPI_Barrier bracketed by
 *       name only ("dp"): the job must stop, naming rank R.  Every rank
 *       prints "# pid of rank R: P" first.
 *   fault-test selfstop [--timeout-min M]
 *       the rank stops itself (SIGSTOP) inside an open bracket and prints
 *       its pid; the script sends SIGCONT after more than the timeout;
 *       the watchdog must stay quiet (the time was its own stop).
 *   fault-test lost --victim R --how kill|drop
 *       rank R sends itself SIGKILL, or shuts its side-channel links as a
 *       death would, while the others wait in a barrier (the watchdog is
 *       2 minutes away): the job must stop, naming rank R where the
 *       launcher lets the survivors speak.
 *   fault-test straggler --base-ms B [--slow R:MS] --threshold X
 *       every rank "steps" B ms (rank R: B + MS) for 3 log intervals of 4
 *       steps; checks gl_faults_step_times' extremes and its verdict
 *       against the step times every rank measured, and that rank R is
 *       reported; rank 0 prints "# iteration I: verdict V".
 *
 * Rank 0 prints TAP; a run ends with exit status 0 only when it passed.
 */
#include <config.h>
#include "boot/boot.h"
#include "train/run_config.h"
#include "train/faults.h"
#include "base/log.h"
#include "comm/comm.h"
#include "comm/peers.h"
#include "tap.h"

#include <errno.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static gl_boot B;

/* Sleep ms milliseconds, through interruptions by signals. */
static void sleep_ms(double ms)
{
    struct timespec t = { (time_t)(ms / 1e3), (long)((ms - 1e3 * (time_t)(ms / 1e3)) * 1e6) };
    while (nanosleep(&t, &t) != 0 && errno == EINTR)
        ;
}

/* Every rank's value of x, so that rank 0 can check all of them. */
static void gather_long(long x, long *all)
{
    MPI_Allgather(&x, 1, MPI_LONG, all, 1, MPI_LONG, MPI_COMM_WORLD);
}

static int all_true(int x)
{
    int all;
    MPI_Allreduce(&x, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    return all;
}

static const char *opt(int argc, char **argv, const char *name)
{
    for (int i = 2; i + 1 < argc; i++)
        if (!strcmp(argv[i], name))
            return argv[i + 1];
    return NULL;
}

/* ---- signal ----------------------------------------------------------- */

static int run_signal(int argc, char **argv)
{
    gl_config c;
    gl_config_defaults(&c);
    c.faults.exit_signal_handler = 1;
    gl_faults *f = gl_faults_init(&c, &B, MPI_COMM_WORLD);

    int raise_rank = -1, raise_sig = SIGUSR1;
    long raise_iter = -1;
    const char *r = opt(argc, argv, "--raise");
    if (r) {
        char sig[8] = "";
        if (sscanf(r, "%d:%ld:%7s", &raise_rank, &raise_iter, sig) < 2)
            gl_die("--raise %s: give RANK:ITER[:TERM]", r);
        if (!strcmp(sig, "TERM"))
            raise_sig = SIGTERM;
    }
    const char *dir = opt(argc, argv, "--pid-dir");
    const char *want = raise_sig == SIGTERM ? "SIGTERM received" : "SIGUSR1 received";

    enum { N = 65536 };
    int *buf = gl_malloc(N * sizeof *buf), *sum = gl_malloc(N * sizeof *sum);
    int sums_ok = 1;
    long stop = -1;
    const char *why = "";
    /* Until the signal stops it: the script's timeout(1) bounds a run
     * whose signal never comes. */
    for (long it = 1; stop < 0; it++) {
        for (int i = 0; i < N; i++)
            buf[i] = (int)((it + i) % 1000) * (B.rank + 1);
        /* Rank 0 comes late, so the others spend most of their time
         * waiting inside MPI_Allreduce: that is where a kill lands. */
        if (dir && B.rank == 0)
            sleep_ms(5);
        MPI_Allreduce(buf, sum, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        for (int i = 0; i < N; i++)
            if (sum[i] != (int)((it + i) % 1000) * B.size * (B.size + 1) / 2)
                sums_ok = 0;
        if (B.rank == raise_rank && it == raise_iter)
            raise(raise_sig);
        if (dir && it == 1) {
            char path[512], tmp[520];
            snprintf(path, sizeof path, "%s/pid.%d", dir, B.rank);
            snprintf(tmp, sizeof tmp, "%s.tmp", path);
            FILE *p = fopen(tmp, "w");
            if (!p || fprintf(p, "%ld\n", (long)getpid()) < 0 || fclose(p) != 0 ||
                rename(tmp, path) != 0)
                gl_die("cannot write %s", path);
        }
        if (gl_faults_should_exit(f, it, &why))
            stop = it;
    }
    long *stops = gl_malloc(B.size * sizeof *stops);
    gather_long(stop, stops);
    int why_ok = all_true(strcmp(why, want) == 0);
    int all_ok = all_true(sums_ok);

    plan(4);
    ok(stop > 0, "rank 0 stopped (after iteration %ld)", stop);
    int same = 1;
    for (int i = 0; i < B.size; i++)
        same &= stops[i] == stops[0];
    ok(same, "all %d ranks stopped after the same iteration", B.size);
    if (raise_iter > 0)
        is_int(stop, raise_iter, "the stop came right after the iteration of the signal");
    else
        ok(stop >= 1, "the stop came at a check after the pids were written "
           "(iteration %ld)", stop);
    ok(why_ok && all_ok, "every rank says '%s' (rank 0: '%s'); every all-reduce sum was exact",
       want, why);
    gl_faults_free(f);
    free(buf);
    free(sum);
    free(stops);
    gl_config_free(&c);
    return done_testing();
}

/* ---- exit interval and duration --------------------------------------- */

static int run_exit(int argc, char **argv)
{
    gl_config c;
    gl_config_defaults(&c);
    const char *iv = opt(argc, argv, "--interval"), *st = opt(argc, argv, "--start");
    const char *du = opt(argc, argv, "--duration"), *ms = opt(argc, argv, "--step-ms");
    long start = st ? atol(st) : 0;
    double step_ms = ms ? atof(ms) : 0;
    if (iv)
        c.faults.exit_interval = atol(iv);
    if (du)
        c.faults.exit_duration_in_mins = atof(du);
    gl_faults *f = gl_faults_init(&c, &B, MPI_COMM_WORLD);

    /* The clock the decision used (rank 0's, agreed) at the stop and at
     * the check before it: the test asserts on what the program measured,
     * never on a clock of its own. */
    long stop = -1;
    const char *why = "";
    double at_stop = -1, before = -1;
    for (long it = start + 1; it <= start + 100000 && stop < 0; it++) {
        sleep_ms(step_ms * (1 + B.rank % 2));
        before = at_stop;
        if (gl_faults_should_exit(f, it, &why))
            stop = it;
        at_stop = gl_faults_exit_elapsed(f);
    }
    long *stops = gl_malloc(B.size * sizeof *stops);
    gather_long(stop, stops);
    int same = 1;
    for (int i = 0; i < B.size; i++)
        same &= stops[i] == stops[0];
    /* every rank must have decided from the same reading */
    double clocks[2] = { at_stop, -at_stop }, ext[2];
    MPI_Allreduce(clocks, ext, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);

    plan(iv ? 3 : 4);
    ok(same && stop > 0, "all %d ranks stopped after iteration %ld", B.size, stop);
    if (iv) {
        long want = (start / c.faults.exit_interval + 1) * c.faults.exit_interval;
        is_int(stop, want, "--exit-interval %ld from iteration %ld: the first multiple",
               c.faults.exit_interval, start);
        char w[64];
        snprintf(w, sizeof w, "--exit-interval %ld", c.faults.exit_interval);
        is_string(why, w, "the reason names the flag");
    } else {
        double lim = 60 * c.faults.exit_duration_in_mins;
        ok(ext[0] == -ext[1], "every rank decided on the same clock reading (%.3f s)",
           at_stop);
        ok(at_stop >= lim && (stop == start + 1 || (before >= 0 && before < lim)),
           "stopped at the first check past the limit of %.2f s (%.3f s; the check "
           "before: %.3f s)", lim, at_stop, before);
        char w[64];
        snprintf(w, sizeof w, "--exit-duration-in-mins %g reached after ", c.faults.exit_duration_in_mins);
        ok(all_true(strncmp(why, w, strlen(w)) == 0), "every rank's reason: '%s' (want '%s...')",
           why, w);
    }
    gl_faults_free(f);
    free(stops);
    gl_config_free(&c);
    return done_testing();
}

/* ---- non-finite steps ------------------------------------------------- */

static int run_nonfinite(int argc, char **argv)
{
    gl_config c;
    gl_config_defaults(&c);
    const char *mx = opt(argc, argv, "--max"), *pat = opt(argc, argv, "--pattern");
    if (!mx || !pat)
        gl_die("nonfinite: give --max N --pattern 0110...");
    c.faults.max_nonfinite_iters = atoi(mx);
    c.optim.lr = 3e-4;
    gl_faults *f = gl_faults_init(&c, &B, MPI_COMM_WORLD);

    plan(NO_PLAN);
    long want_skipped = 0, want_streak = 0;
    int good = 1;
    for (long it = 1; pat[it - 1]; it++) {
        int bad = pat[it - 1] == '1';
        want_skipped += bad;
        want_streak = bad ? want_streak + 1 : 0;
        if (B.rank == 0)
            printf("# iteration %ld: %s\n", it, bad ? "non-finite" : "finite");
        fflush(stdout);
        long got = gl_faults_nonfinite(f, it, bad);
        good &= got == want_skipped && gl_faults_skipped(f) == want_skipped &&
                gl_faults_nonfinite_streak(f) == want_streak;
    }
    ok(all_true(good), "every iteration: skipped count and streak as expected on every rank");
    is_int(gl_faults_skipped(f), want_skipped, "%ld iterations skipped in all", want_skipped);
    gl_faults_free(f);
    gl_config_free(&c);
    return done_testing();
}

/* ---- watchdog --------------------------------------------------------- */

/* Every rank's pid, for the script to match the names in the lines. */
static void say_pid(void)
{
    printf("# pid of rank %d: %ld\n", B.rank, (long)getpid());
    fflush(stdout);
    MPI_Barrier(MPI_COMM_WORLD);
}

static int run_watchdog(int argc, char **argv)
{
    gl_config c;
    gl_config_defaults(&c);
    const char *st = opt(argc, argv, "--stall"), *sp = opt(argc, argv, "--stop"),
               *tm = opt(argc, argv, "--timeout-min");
    int named = 0;
    for (int i = 2; i < argc; i++)
        named |= !strcmp(argv[i], "--named");
    int stall_rank = -1, stop_rank = -1;
    double stall_s = 0;
    if (st && sscanf(st, "%d:%lf", &stall_rank, &stall_s) != 2)
        gl_die("watchdog: give --stall RANK:SECONDS");
    if (sp)
        stop_rank = atoi(sp);
    if (!st && !sp)
        gl_die("watchdog: give --stall RANK:SECONDS or --stop RANK");
    if (tm)
        c.faults.distributed_timeout_minutes = atof(tm);
    gl_faults *f = gl_faults_init(&c, &B, MPI_COMM_WORLD);
    double T = gl_watch_timeout(f);
    gl_comm *dp = gl_comm_mpi(MPI_COMM_WORLD, "dp");
    say_pid();

    /* Quiet phase: compute longer than the timeout outside any bracket,
     * then bracketed collectives that finish (nested once, and the comm
     * layer's own), for longer than the timeout in all.  The number of
     * collectives is fixed: a loop run until each rank's own clock says
     * so would make the ranks disagree on it under load. */
    sleep_ms(1e3 * T * 1.3);
    int x = 1, y;
    for (int i = 0; i < 13; i++) {
        gl_watch_begin(f, "step", "world");
        gl_watch_begin(f, "MPI_Allreduce", "world");
        MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        gl_watch_end(f);
        gl_all_reduce(dp, &x, &y, 1, GL_DT_I32, GL_OP_SUM, NULL);
        gl_watch_end(f);
        sleep_ms(T * 100);
    }
    if (B.rank == 0)
        printf("# quiet phase done: the watchdog (%g s) stayed silent; %ld collectives on dp\n",
               T, gl_comm_seq(dp));
    fflush(stdout);
    MPI_Barrier(MPI_COMM_WORLD);

    /* The stall: one rank computes for long, or stops itself. */
    if (B.rank == stall_rank)
        sleep_ms(1e3 * stall_s);
    if (B.rank == stop_rank)
        raise(SIGSTOP);
    if (named) {
        gl_watch_begin(f, "MPI_Barrier", "dp");
        MPI_Barrier(MPI_COMM_WORLD);
        gl_watch_end(f);
    } else {
        gl_all_reduce(dp, &x, &y, 1, GL_DT_I32, GL_OP_SUM, NULL);
    }
    printf("# rank %d: passed the stalled collective (the watchdog did not stop the job)\n",
           B.rank);
    gl_comm_free(dp);
    gl_faults_free(f);
    gl_config_free(&c);
    return 0;
}

/* One rank stops itself (SIGSTOP) inside an open bracket; the script
 * sends SIGCONT well after the timeout.  The watchdog must not fire: that
 * time was this process's own stop, nobody's wait. */
static int run_selfstop(int argc, char **argv)
{
    gl_config c;
    gl_config_defaults(&c);
    const char *tm = opt(argc, argv, "--timeout-min");
    if (tm)
        c.faults.distributed_timeout_minutes = atof(tm);
    gl_faults *f = gl_faults_init(&c, &B, MPI_COMM_WORLD);
    double T = gl_watch_timeout(f);
    plan(2);
    gl_watch_begin(f, "MPI_Barrier (self-stop test)", "world");
    printf("# rank %d pid %ld: stopping itself inside an open bracket\n", B.rank,
           (long)getpid());
    fflush(stdout);
    double t = gl_now();
    raise(SIGSTOP);
    double stopped = gl_now() - t;
    /* Stay in the bracket a while: the watchdog, woken long after it
     * asked, looks at it at once, then once more (it polls every T/4).
     * The bracket was open up to T/4 before the stop: stay 3T/8 more, so
     * that what is left of T covers a late wake-up. */
    sleep_ms(1e3 * 3 * T / 8);
    gl_watch_end(f);
    ok(stopped > T, "the stop lasted %.1f s, longer than the timeout (%g s)", stopped, T);
    ok(1, "the watchdog stayed quiet after the stop");
    gl_faults_free(f);
    gl_config_free(&c);
    return done_testing();
}

/* ---- lost peers ------------------------------------------------------- */

/* Rank R dies (SIGKILL) or drops its side channel's links as a death
 * would, while the others wait in a barrier; the watchdog is far off, so
 * only the side channel (or the launcher) can end the job. */
static int run_lost(int argc, char **argv)
{
    gl_config c;
    gl_config_defaults(&c);
    const char *vr = opt(argc, argv, "--victim"), *how = opt(argc, argv, "--how");
    if (!vr || !how || (strcmp(how, "kill") && strcmp(how, "drop")))
        gl_die("lost: give --victim RANK --how kill|drop");
    int victim = atoi(vr);
    c.faults.distributed_timeout_minutes = 2;
    gl_faults *f = gl_faults_init(&c, &B, MPI_COMM_WORLD);
    say_pid();
    if (B.rank == victim) {
        printf("# rank %d: %s\n", B.rank, !strcmp(how, "kill") ? "SIGKILL to itself"
               : "dropping its side-channel links");
        fflush(stdout);
        if (!strcmp(how, "kill"))
            raise(SIGKILL);
        /* as good as dead: it never reaches the barrier */
        gl_peers_drop_links(gl_faults_peers(f));
        sleep_ms(100e3);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    printf("# rank %d: passed the barrier (nothing stopped the job)\n", B.rank);
    gl_faults_free(f);
    gl_config_free(&c);
    return 1;
}

/* ---- stragglers ------------------------------------------------------- */

static int run_straggler(int argc, char **argv)
{
    gl_config c;
    gl_config_defaults(&c);
    const char *bm = opt(argc, argv, "--base-ms"), *sl = opt(argc, argv, "--slow"),
               *th = opt(argc, argv, "--threshold");
    double base = bm ? atof(bm) : 10, extra = 0;
    int slow_rank = -1;
    if (sl && sscanf(sl, "%d:%lf", &slow_rank, &extra) != 2)
        gl_die("--slow %s: give RANK:MS", sl);
    c.log.straggler_threshold = th ? atof(th) : 1.2;
    c.log.log_interval = 4;
    gl_faults *f = gl_faults_init(&c, &B, MPI_COMM_WORLD);
    if (B.rank == 0)
        printf("# host of rank 0: %s\n", B.host);

    plan(NO_PLAN);
    double sum = 0;
    for (long it = 1; it <= 3 * c.log.log_interval; it++) {
        double t = gl_now();
        sleep_ms(base + (B.rank == slow_rank ? extra : 0));
        sum += gl_now() - t;
        MPI_Barrier(MPI_COMM_WORLD);     /* a step ends together */
        if (it % c.log.log_interval)
            continue;
        gl_straggler s;
        double mine = sum / c.log.log_interval;
        int rep = gl_faults_step_times(f, mine, it, &s);
        sum = 0;
        /* What every rank measured: the extremes and the verdict must
         * follow from these numbers, whatever the machine's load made of
         * the sleeps. */
        double times[64];
        long reps[64] = { 0 };
        if (B.size > 64)
            gl_die("straggler: at most 64 ranks");
        MPI_Allgather(&mine, 1, MPI_DOUBLE, times, 1, MPI_DOUBLE, MPI_COMM_WORLD);
        gather_long(rep, reps);
        int hi = 0, lo = 0, same = 1;
        for (int i = 0; i < B.size; i++) {
            same &= reps[i] == rep;
            if (times[i] > times[hi])
                hi = i;
            if (times[i] < times[lo])
                lo = i;
        }
        if (B.rank == 0)
            printf("# iteration %ld: verdict %d\n", it, rep);
        ok(same, "iteration %ld: every rank has the same verdict (%d)", it, rep);
        ok(s.slow_rank == hi && s.slow_s == times[hi] && s.fast_rank == lo &&
           s.fast_s == times[lo],
           "iteration %ld: slowest rank %d (%.1f ms) and fastest rank %d (%.1f ms), as "
           "measured", it, s.slow_rank, 1e3 * s.slow_s, s.fast_rank, 1e3 * s.fast_s);
        ok(rep == (s.ratio > c.log.straggler_threshold),
           "iteration %ld: the verdict follows the measured ratio (%.2f against %g)", it,
           s.ratio, c.log.straggler_threshold);
        if (slow_rank >= 0)
            ok(rep && s.slow_rank == slow_rank,
               "iteration %ld: rank %d, %g ms slower, is reported (ratio %.2f)", it,
               slow_rank, extra, s.ratio);
    }
    gl_faults_free(f);
    gl_config_free(&c);
    return done_testing();
}

int main(int argc, char **argv)
{
    gl_log_set_program("fault-test");
    gl_boot_init(&argc, &argv, &B);
    tap_quiet(B.rank != 0);
    if (argc < 2)
        gl_die("usage: fault-test signal|exit|nonfinite|watchdog|selfstop|lost|straggler [options]");
    int rc;
    if (!strcmp(argv[1], "signal"))
        rc = run_signal(argc, argv);
    else if (!strcmp(argv[1], "exit"))
        rc = run_exit(argc, argv);
    else if (!strcmp(argv[1], "nonfinite"))
        rc = run_nonfinite(argc, argv);
    else if (!strcmp(argv[1], "watchdog"))
        rc = run_watchdog(argc, argv);
    else if (!strcmp(argv[1], "selfstop"))
        rc = run_selfstop(argc, argv);
    else if (!strcmp(argv[1], "lost"))
        rc = run_lost(argc, argv);
    else if (!strcmp(argv[1], "straggler"))
        rc = run_straggler(argc, argv);
    else
        gl_die("unknown scenario '%s'", argv[1]);
    /* Every rank's verdict: the job passes only when all passed. */
    int all = all_true(rc == 0);
    gl_boot_finalize(&B);
    return all ? rc : 1;
}
