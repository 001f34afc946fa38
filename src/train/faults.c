/* faults.c: clean stops, non-finite steps, the hang watchdog and the
 * straggler report (see faults.h). */
#include <config.h>
#include "train/faults.h"
#include "base/error.h"
#include "base/log.h"
#include "comm/peers.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define HOST_LEN 256

/* The signal handler may only touch a lock-free atomic (C11 7.14.1.1). */
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "the signal flag needs a lock-free int");
static atomic_int signal_bits;

typedef struct {
    char op[96];
    char group[32];
    const gl_comm *comm;        /* the group, when known: its members, its key */
    long seq;                   /* the collective's number on it; 0: not known */
    int peer;                   /* world rank of a point-to-point peer, else -1 */
    double t0;                  /* gl_now() at the begin, moved on by the time
                                 * this process itself did not run */
} watch;

/* How long a probe of the peers may take, seconds. */
#define PROBE_SECONDS 3.0
/* At most this many ranks named in one watchdog line. */
#define NAME_MAX_RANKS 8

struct gl_faults {
    MPI_Comm comm;              /* our duplicate of the world */
    int rank, size;
    char *hosts;                /* rank 0: size x HOST_LEN, else NULL */
    double t_start;

    /* what the configuration asks for */
    int signal_handler;
    double exit_minutes;        /* 0: none */
    long exit_interval;         /* 0: none */
    int max_nonfinite;
    double straggler_threshold;
    double lr, clip_grad;       /* quoted in the non-finite message */

    struct sigaction old_term, old_usr1;
    char why[192];
    unsigned last_agreed;       /* the reasons of the last decision */
    double agreed_elapsed;      /* rank 0's clock at the last decision, s */

    long skipped, streak, streak_first;

    /* the watchdog: a stack of open brackets, guarded by mu */
    double timeout, poll;       /* seconds; timeout 0: no thread */
    double wd_prev;             /* when the thread was made (gl_now()) */
    int timeout_from_env;
    pthread_t thread;
    int thread_up;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int quit;
    watch stack[GL_WATCH_DEPTH];
    int depth;
    watch last;                 /* the last bracket that closed */
    double t_last_end;          /* when (gl_now()) */

    gl_peers *peers;            /* the side channel (comm/peers.h), or NULL */
};

static void check_mpi(int rc, const char *call)
{
    if (rc == MPI_SUCCESS)
        return;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    gl_die("%s on group 'world' (faults) failed: %s", call, msg);
}

/* ---- signals ---------------------------------------------------------- */

/* Async-signal-safe: one lock-free atomic OR, nothing else. */
static void on_signal(int sig)
{
    atomic_fetch_or(&signal_bits, sig == SIGTERM ? GL_EXIT_SIGTERM : GL_EXIT_SIGUSR1);
}

/* SA_RESTART: a system call interrupted by the signal (inside MPI, a read
 * of the data) is restarted instead of failing with EINTR. */
static void install_handlers(gl_faults *f)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    atomic_store(&signal_bits, 0);
    if (sigaction(SIGTERM, &sa, &f->old_term) != 0 ||
        sigaction(SIGUSR1, &sa, &f->old_usr1) != 0)
        gl_die("--exit-signal-handler: cannot install the SIGTERM/SIGUSR1 handler: %s",
               strerror(errno));
}

/* ---- the watchdog ----------------------------------------------------- */

/* The timeout in seconds: GRIDLM_WATCHDOG_SECONDS when set, else
 * --distributed-timeout-minutes. */
static void pick_timeout(gl_faults *f, const gl_config *c)
{
    const char *e = getenv("GRIDLM_WATCHDOG_SECONDS");
    f->timeout = 60.0 * c->faults.distributed_timeout_minutes;
    if (e && *e) {
        char *end;
        double v = strtod(e, &end);
        if (*end || !(v >= 0) || isinf(v))
            gl_die("GRIDLM_WATCHDOG_SECONDS=%s: not a number of seconds; give e.g. 600, "
                   "or 0 to turn the watchdog off", e);
        f->timeout = v;
        f->timeout_from_env = 1;
    }
    if (!(f->timeout >= 0))
        f->timeout = 0;
    /* Look every second; four times per timeout when that is shorter. */
    f->poll = f->timeout / 4;
    if (f->poll > 1.0)
        f->poll = 1.0;
    if (f->poll < 0.05)
        f->poll = 0.05;
}

/* ---- what a hang is blamed on ------------------------------------------ */

/* Append to buf (size n) what rank st->rank is doing, as one phrase. */
static void say_rank(gl_peers *peers, const watch *w, const gl_peer_status *st,
                     char *buf, size_t n)
{
    size_t len = strlen(buf);
    char what[512];
    switch (st->how) {
    case GL_PEER_SILENT:
        if (st->proc_state == 'T' || st->proc_state == 't')
            snprintf(what, sizeof what, "is stopped (process state %c: SIGSTOP, or a "
                     "debugger) and does not answer", st->proc_state);
        else if (st->proc_state == 'D')
            snprintf(what, sizeof what, "is blocked in the kernel (process state D: I/O "
                     "on a hung file system?) and does not answer");
        else if (st->proc_state == 'Z')
            snprintf(what, sizeof what, "has exited (a zombie) without finishing");
        else
            snprintf(what, sizeof what, "did not answer within %g s: it is stopped "
                     "(SIGSTOP, a debugger) or frozen", PROBE_SECONDS);
        break;
    case GL_PEER_GONE:
        snprintf(what, sizeof what, "is gone: its side channel refuses connections (the "
                 "process died)");
        break;
    case GL_PEER_UNREACHABLE:
        snprintf(what, sizeof what, "could not be reached over the network within %g s",
                 PROBE_SECONDS);
        break;
    case GL_PEER_NO_CHANNEL:
        snprintf(what, sizeof what, "could not be asked (no side channel to it)");
        break;
    default: {
        char at[64] = "";
        if (w->comm && w->seq > 0 && st->group_seq >= 0)
            snprintf(at, sizeof at, "has made %ld of the group's collectives and ",
                     st->group_seq);
        if (w->comm && w->seq > 0 && st->group_seq < 0)
            snprintf(what, sizeof what, "has no group '%s' with these members: the ranks "
                     "built different groups", w->group);
        else if (st->waiting && st->wait_seq > 0)
            snprintf(what, sizeof what, "%swaits in %s #%ld on group %s (for %.1f s)", at,
                     st->wait_op, st->wait_seq, st->wait_group, st->wait_open_s);
        else if (st->waiting && st->wait_peer >= 0)
            snprintf(what, sizeof what, "%swaits in %s with rank %d on group %s (for %.1f s)",
                     at, st->wait_op, st->wait_peer, st->wait_group, st->wait_open_s);
        else if (st->waiting)
            snprintf(what, sizeof what, "%swaits in %s on group %s (for %.1f s)", at,
                     st->wait_op, st->wait_group, st->wait_open_s);
        else if (st->last_op[0] && st->last_seq > 0)
            snprintf(what, sizeof what, "%scomputes: %.1f s since its last wait (%s #%ld "
                     "on group %s)", at, st->idle_s, st->last_op, st->last_seq,
                     st->last_group);
        else if (st->last_op[0])
            snprintf(what, sizeof what, "%scomputes: %.1f s since its last wait (%s on "
                     "group %s)", at, st->idle_s, st->last_op, st->last_group);
        else
            snprintf(what, sizeof what, "%scomputes: %.1f s since it started", at,
                     st->idle_s);
        break;
    }
    }
    snprintf(buf + len, n - len, "%srank %d on %s (pid %ld) %s", len ? "; " : "",
             st->rank, gl_peers_host(peers, st->rank), st->pid, what);
}

/* Has rank st arrived at the wait w (so it is not the one to blame)? */
static int arrived(const watch *w, const gl_peer_status *st)
{
    if (st->how != GL_PEER_ANSWERED)
        return 0;
    if (w->comm && w->seq > 0)      /* it entered it (and may be past it: a root) */
        return st->group_seq >= w->seq;
    return st->waiting && !strcmp(st->wait_op, w->op) && !strcmp(st->wait_group, w->group);
}

/* Ask the ranks the wait depends on where they are, and say who has not
 * arrived, into buf.  members: world ranks (this one among them or not). */
static void blame(gl_faults *f, gl_peers *peers, const watch *w, const int *members,
                  int nm, char *buf, size_t n)
{
    buf[0] = '\0';
    int *ask = gl_malloc(sizeof(int) * (size_t)(nm ? nm : 1));
    int na = 0;
    for (int i = 0; i < nm; i++)
        if (members[i] != f->rank)
            ask[na++] = members[i];
    gl_peer_status *st = gl_calloc((size_t)(na ? na : 1), sizeof *st);
    int answered = gl_peers_probe(peers, ask, na, w->comm ? w->group : NULL,
                                  w->comm ? gl_comm_key(w->comm) : 0, PROBE_SECONDS, st);
    int missing = 0, named = 0, waiting = 0;
    for (int i = 0; i < na; i++) {
        if (w->peer < 0 && arrived(w, &st[i])) {
            waiting++;
            continue;
        }
        missing++;
        if (named < NAME_MAX_RANKS) {
            say_rank(peers, w, &st[i], buf, n);
            named++;
        }
    }
    size_t len = strlen(buf);
    if (w->peer >= 0)
        ;   /* the one peer, as it is */
    else if (na == 0)
        snprintf(buf, n, "this rank is the only one it waits for: the wait itself is stuck "
                 "(the device, or MPI)");
    else if (missing == 0 && answered == na)
        snprintf(buf, n, "every other rank of the group (%d) has arrived: the collective "
                 "itself is stuck (the network, NCCL or MPI)", na);
    else {
        if (missing > named)
            snprintf(buf + len, n - len, "; and %d more", missing - named);
        len = strlen(buf);
        char head[64];
        snprintf(head, sizeof head, "not arrived: ");
        if (len + strlen(head) < n) {
            memmove(buf + strlen(head), buf, len + 1);
            memcpy(buf, head, strlen(head));
        }
        len = strlen(buf);
        if (waiting)
            snprintf(buf + len, n - len, " (%d other rank%s of the group wait%s in it too)",
                     waiting, waiting == 1 ? "" : "s", waiting == 1 ? "s" : "");
    }
    free(ask);
    free(st);
}

/* One line naming the wait and, asked through the side channel, the
 * ranks it waits for; then the whole job stops.  SIGALRM's default action
 * is a backstop: should the abort itself hang, the process dies and the
 * launcher ends the job. */
GL_NORETURN static void watchdog_fire(gl_faults *f, gl_peers *peers, const watch *w,
                                      const int *members, int nm, double open_s)
{
    alarm(30);
    char limit[96];
    if (f->timeout_from_env)
        snprintf(limit, sizeof limit, "GRIDLM_WATCHDOG_SECONDS=%g", f->timeout);
    else
        snprintf(limit, sizeof limit, "--distributed-timeout-minutes %g",
                 f->timeout / 60.0);
    char what[256];
    if (w->peer >= 0)
        snprintf(what, sizeof what, "%s with rank %d on group %s", w->op, w->peer, w->group);
    else if (w->comm && w->seq > 0)
        snprintf(what, sizeof what, "collective %s #%ld on group %s (%d ranks)", w->op,
                 w->seq, w->group, nm);
    else
        snprintf(what, sizeof what, "collective %s on group %s", w->op, w->group);

    int origin = -1;
    if (gl_peers_stopping(peers, &origin) && origin != f->rank) {
        /* Another rank is stopping the job and says why: give its abort
         * time to arrive, then go down all the same. */
        struct timespec pause = { 10, 0 };
        nanosleep(&pause, NULL);
        gl_die("%s did not finish within %g s (open %.1f s); rank %d is stopping the job "
               "and said why (%s)", what, f->timeout, open_s, origin, limit);
    }
    if (!peers)
        gl_die("%s did not finish within %g s (open %.1f s); the peer ranks may have died "
               "or stalled: look for the first error of the other ranks; stopping the job "
               "(%s)", what, f->timeout, open_s, limit);
    gl_peers_announce_stop(peers);
    char who[2048];
    blame(f, peers, w, members, nm, who, sizeof who);
    gl_die("%s did not finish within %g s (open %.1f s): %s; stopping the job (%s)",
           what, f->timeout, open_s, who, limit);
}

static void *watchdog_main(void *arg)
{
    gl_faults *f = arg;
    pthread_mutex_lock(&f->mu);
    /* from before the thread was made: a stop that comes before this
     * thread first runs is seen too */
    double prev = f->wd_prev;
    while (!f->quit) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        long ns = until.tv_nsec + (long)(f->poll * 1e9);
        until.tv_sec += ns / 1000000000L;
        until.tv_nsec = ns % 1000000000L;
        pthread_cond_timedwait(&f->cv, &f->mu, &until);
        if (f->quit)
            break;
        double now = gl_now();
        /* Woken much later than asked: this process did not run (SIGSTOP,
         * a suspended job, a starved machine).  That time is nobody's
         * wait: move the open brackets' starts on by it, so that a rank
         * that was stopped does not blame its peers, or itself, for it. */
        double lost = now - prev - f->poll;
        if (lost > 1.0)
            for (int i = 0; i < f->depth; i++)
                f->stack[i].t0 += lost;
        prev = now;
        for (int i = f->depth - 1; i >= 0; i--) {
            if (now - f->stack[i].t0 > f->timeout) {
                watch w = f->stack[i];
                /* the members, while the group is surely alive (its wait is open) */
                int nm = w.peer >= 0 ? 1 : w.comm ? gl_comm_size(w.comm) : f->size;
                int *members = gl_malloc(sizeof(int) * (size_t)nm);
                for (int k = 0; k < nm; k++)
                    members[k] = w.peer >= 0 ? w.peer
                                 : w.comm ? gl_comm_world_rank(w.comm, k) : k;
                gl_peers *peers = f->peers;   /* taken under mu: see gl_faults_free */
                pthread_mutex_unlock(&f->mu);
                watchdog_fire(f, peers, &w, members, nm, now - w.t0);
            }
        }
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

/* The thread blocks every signal, so that SIGTERM/SIGUSR1 (and any other)
 * go to the threads that do the work. */
static void start_watchdog(gl_faults *f)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&f->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&f->mu, NULL);
    if (f->timeout <= 0)
        return;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    f->wd_prev = gl_now();
    int rc = pthread_create(&f->thread, NULL, watchdog_main, f);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0)
        gl_die("cannot start the watchdog thread: %s; set GRIDLM_WATCHDOG_SECONDS=0 "
               "to run without it", strerror(rc));
    f->thread_up = 1;
}

static void push(gl_faults *f, const char *op, const char *group, const gl_comm *comm,
                 long seq, int peer)
{
    pthread_mutex_lock(&f->mu);
    if (f->depth == GL_WATCH_DEPTH)
        gl_die("gl_watch_begin(%s, %s): more than %d nested watches; a "
               "gl_watch_end is missing", op, group, GL_WATCH_DEPTH);
    watch *w = &f->stack[f->depth];
    snprintf(w->op, sizeof w->op, "%s", op ? op : "?");
    snprintf(w->group, sizeof w->group, "%s", group ? group : "?");
    w->comm = comm;
    w->seq = seq;
    w->peer = peer;
    w->t0 = gl_now();
    f->depth++;
    pthread_mutex_unlock(&f->mu);
}

void gl_watch_begin(gl_faults *f, const char *op, const char *group)
{
    if (f)
        push(f, op, group, NULL, 0, -1);
}

void gl_watch_begin_comm(gl_faults *f, const char *op, const gl_comm *group)
{
    if (f && group)
        push(f, op, gl_comm_name(group), group, gl_comm_seq(group), -1);
    else if (f)
        push(f, op, "this rank", NULL, 0, -1);
}

void gl_watch_end(gl_faults *f)
{
    if (!f)
        return;
    pthread_mutex_lock(&f->mu);
    if (f->depth == 0)
        gl_die("gl_watch_end without gl_watch_begin");
    f->depth--;
    f->last = f->stack[f->depth];
    f->t_last_end = gl_now();
    pthread_mutex_unlock(&f->mu);
}

/* The comm layer's blocking waits (comm.h's wait hook). */
static void comm_wait(void *ctx, const gl_comm_wait *w)
{
    gl_faults *f = ctx;
    if (w)
        push(f, w->op, gl_comm_name(w->group), w->group, w->seq, w->peer);
    else
        gl_watch_end(f);
}

/* What this rank answers its peers' probes (comm/peers.h). */
static void describe(void *ctx, gl_peer_status *me)
{
    gl_faults *f = ctx;
    pthread_mutex_lock(&f->mu);
    double now = gl_now();
    if (f->depth > 0) {
        const watch *w = &f->stack[f->depth - 1];
        me->waiting = 1;
        snprintf(me->wait_op, sizeof me->wait_op, "%s", w->op);
        snprintf(me->wait_group, sizeof me->wait_group, "%s", w->group);
        me->wait_seq = w->seq;
        me->wait_peer = w->peer;
        me->wait_open_s = now - w->t0;
    } else {
        me->idle_s = now - f->t_last_end;
    }
    snprintf(me->last_op, sizeof me->last_op, "%s", f->last.op);
    snprintf(me->last_group, sizeof me->last_group, "%s", f->last.group);
    me->last_seq = f->last.seq;
    pthread_mutex_unlock(&f->mu);
}

double gl_watch_timeout(const gl_faults *f) { return f ? f->timeout : 0; }
gl_peers *gl_faults_peers(gl_faults *f) { return f ? f->peers : NULL; }

/* ---- life ------------------------------------------------------------- */

gl_faults *gl_faults_init(const gl_config *c, const gl_boot *b, MPI_Comm world)
{
    gl_faults *f = gl_calloc(1, sizeof *f);
    f->t_start = gl_now();
    check_mpi(MPI_Comm_dup(world, &f->comm), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(f->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(f->comm, &f->rank);
    MPI_Comm_size(f->comm, &f->size);

    f->signal_handler = c->faults.exit_signal_handler;
    f->exit_minutes = c->faults.exit_duration_in_mins > 0 ? c->faults.exit_duration_in_mins : 0;
    f->exit_interval = c->faults.exit_interval > 0 ? c->faults.exit_interval : 0;
    f->max_nonfinite = c->faults.max_nonfinite_iters;
    f->straggler_threshold = c->log.straggler_threshold;
    f->lr = c->optim.lr;
    f->clip_grad = c->optim.clip_grad;

    /* Host names, for the straggler line; only rank 0 prints it. */
    char me[HOST_LEN];
    snprintf(me, sizeof me, "%s", b->host);
    if (f->rank == 0)
        f->hosts = gl_calloc((size_t)f->size, HOST_LEN);
    check_mpi(MPI_Gather(me, HOST_LEN, MPI_CHAR, f->hosts, HOST_LEN, MPI_CHAR, 0, f->comm),
              "MPI_Gather (host names)");

    if (f->signal_handler)
        install_handlers(f);
    pick_timeout(f, c);
    f->t_last_end = gl_now();
    start_watchdog(f);
    gl_peers *peers = gl_peers_open(f->comm, b->host, describe, f);
    pthread_mutex_lock(&f->mu);
    f->peers = peers;
    pthread_mutex_unlock(&f->mu);
    gl_comm_set_wait_hook(comm_wait, f);
    return f;
}

void gl_faults_free(gl_faults *f)
{
    if (!f)
        return;
    gl_comm_set_wait_hook(NULL, NULL);
    /* The watchdog takes f->peers under mu: once it is NULL there, the
     * side channel is closed without a thread probing through it. */
    pthread_mutex_lock(&f->mu);
    gl_peers *peers = f->peers;
    f->peers = NULL;
    pthread_mutex_unlock(&f->mu);
    /* collective: watched, in case a rank does not come */
    gl_watch_begin(f, "MPI_Barrier (closing the side channel)", "world");
    gl_peers_close(peers);
    gl_watch_end(f);
    if (f->thread_up) {
        pthread_mutex_lock(&f->mu);
        f->quit = 1;
        pthread_cond_signal(&f->cv);
        pthread_mutex_unlock(&f->mu);
        pthread_join(f->thread, NULL);
    }
    pthread_cond_destroy(&f->cv);
    pthread_mutex_destroy(&f->mu);
    if (f->signal_handler) {
        sigaction(SIGTERM, &f->old_term, NULL);
        sigaction(SIGUSR1, &f->old_usr1, NULL);
    }
    MPI_Comm_free(&f->comm);
    free(f->hosts);
    free(f);
}

/* ---- clean stops ------------------------------------------------------ */

double gl_faults_elapsed_minutes(const gl_faults *f)
{
    return (gl_now() - f->t_start) / 60.0;
}

unsigned gl_faults_exit_flags(gl_faults *f)
{
    (void)f;
    return (unsigned)atomic_load(&signal_bits);
}

double gl_faults_exit_clock(const gl_faults *f)
{
    return f->rank == 0 ? gl_now() - f->t_start : 0.0;
}

double gl_faults_exit_elapsed(const gl_faults *f)
{
    return f->agreed_elapsed;
}

/* Append one reason to f->why, comma-separated. */
static void add_why(gl_faults *f, const char *fmt, ...) GL_PRINTF(2, 3);
static void add_why(gl_faults *f, const char *fmt, ...)
{
    size_t n = strlen(f->why);
    if (n && n + 2 < sizeof f->why) {
        strcat(f->why, ", ");
        n += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->why + n, sizeof f->why - n, fmt, ap);
    va_end(ap);
}

int gl_faults_exit_decide(gl_faults *f, long iteration, unsigned agreed,
                          double agreed_clock, const char **why)
{
    agreed &= GL_EXIT_SIGTERM | GL_EXIT_SIGUSR1;
    f->agreed_elapsed = agreed_clock;
    if (f->exit_minutes > 0 && agreed_clock >= 60.0 * f->exit_minutes)
        agreed |= GL_EXIT_DURATION;
    if (f->exit_interval > 0 && iteration > 0 && iteration % f->exit_interval == 0)
        agreed |= GL_EXIT_INTERVAL;
    f->why[0] = '\0';
    if (agreed & GL_EXIT_SIGTERM)
        add_why(f, "SIGTERM received");
    if (agreed & GL_EXIT_SIGUSR1)
        add_why(f, "SIGUSR1 received");
    if (agreed & GL_EXIT_DURATION)
        add_why(f, "--exit-duration-in-mins %g reached after %.2f s on rank 0's clock",
                f->exit_minutes, agreed_clock);
    if (agreed & GL_EXIT_INTERVAL)
        add_why(f, "--exit-interval %ld", f->exit_interval);
    f->last_agreed = agreed;
    if (why)
        *why = f->why;
    return agreed != 0;
}

/* One reduction: the signal bits (as 0/1 under MPI_MAX) and rank 0's
 * clock (the others give 0). */
int gl_faults_should_exit(gl_faults *f, long iteration, const char **why)
{
    unsigned mine = gl_faults_exit_flags(f), all = 0;
    double v[3] = { mine & GL_EXIT_SIGTERM ? 1 : 0, mine & GL_EXIT_SIGUSR1 ? 1 : 0,
                    gl_faults_exit_clock(f) }, w[3];
    gl_watch_begin(f, "MPI_Allreduce (exit flags)", "world");
    check_mpi(MPI_Allreduce(v, w, 3, MPI_DOUBLE, MPI_MAX, f->comm),
              "MPI_Allreduce (exit flags)");
    gl_watch_end(f);
    all = (w[0] > 0 ? GL_EXIT_SIGTERM : 0u) | (w[1] > 0 ? GL_EXIT_SIGUSR1 : 0u);
    return gl_faults_exit_decide(f, iteration, all, w[2], why);
}

/* ---- non-finite steps ------------------------------------------------- */

long gl_faults_nonfinite(gl_faults *f, long iteration, int step_nonfinite)
{
    if (!step_nonfinite) {
        f->streak = 0;
        return f->skipped;
    }
    f->skipped++;
    if (f->streak++ == 0)
        f->streak_first = iteration;
    if (f->streak <= f->max_nonfinite)
        return f->skipped;

    /* Every rank sees the same flags, so every rank gets here at once:
     * rank 0 says why and aborts; the others wait for that abort rather
     * than print the same line again. */
    if (f->rank != 0) {
        gl_watch_begin(f, "MPI_Barrier (waiting for rank 0 to stop the job)", "world");
        MPI_Barrier(f->comm);
        gl_watch_end(f);
    }
    char clip[64];
    if (f->clip_grad > 0)
        snprintf(clip, sizeof clip, "keep --clip-grad on (now %g)", f->clip_grad);
    else
        snprintf(clip, sizeof clip, "turn --clip-grad on (e.g. 1.0)");
    char span[64];
    if (f->streak == 1)
        snprintf(span, sizeof span, "iteration %ld", iteration);
    else
        snprintf(span, sizeof span, "iterations %ld to %ld", f->streak_first, iteration);
    gl_die("the loss or the gradients were NaN or Inf in %ld iteration%s in a row "
           "(%s; %ld non-finite in all), more than --max-nonfinite-iters %d: lower "
           "--lr (now %g), %s, or check the data these iterations read",
           f->streak, f->streak == 1 ? "" : "s", span, f->skipped, f->max_nonfinite,
           f->lr, clip);
}

long gl_faults_skipped(const gl_faults *f) { return f->skipped; }
long gl_faults_nonfinite_streak(const gl_faults *f) { return f->streak; }

/* ---- stragglers ------------------------------------------------------- */

/* MPI_MINLOC over (-t, rank) gives the largest t, over (t, rank) the
 * smallest; ties go to the lowest rank.  One reduction of two pairs. */
int gl_faults_step_times(gl_faults *f, double my_step_seconds, long iteration,
                         gl_straggler *out)
{
    struct { double v; int rank; } in[2], ext[2];
    in[0].v = -my_step_seconds;
    in[0].rank = f->rank;
    in[1].v = my_step_seconds;
    in[1].rank = f->rank;
    gl_watch_begin(f, "MPI_Allreduce (step times)", "world");
    check_mpi(MPI_Allreduce(in, ext, 2, MPI_DOUBLE_INT, MPI_MINLOC, f->comm),
              "MPI_Allreduce (step times)");
    gl_watch_end(f);

    gl_straggler s = {
        .slow_rank = ext[0].rank, .slow_s = -ext[0].v,
        .fast_rank = ext[1].rank, .fast_s = ext[1].v,
    };
    s.ratio = s.fast_s > 0 ? s.slow_s / s.fast_s : (s.slow_s > 0 ? INFINITY : 1.0);
    if (out)
        *out = s;
    int report = f->straggler_threshold > 0 && s.ratio > f->straggler_threshold;
    if (report && f->rank == 0)
        gl_info0("stragglers: slowest rank %d (%s) %.1f ms, fastest rank %d (%s) "
                 "%.1f ms (ratio %.2f) at iteration %ld",
                 s.slow_rank, f->hosts + (size_t)s.slow_rank * HOST_LEN, 1e3 * s.slow_s,
                 s.fast_rank, f->hosts + (size_t)s.fast_rank * HOST_LEN, 1e3 * s.fast_s,
                 s.ratio, iteration);
    return report;
}

/* ---- the exit record -------------------------------------------------- */

static void record_path(char *out, size_t n, const char *dir)
{
    snprintf(out, n, "%s/%s", dir, GL_EXIT_RECORD);
}

int gl_faults_exit_record_clear(const char *dir, gl_error *err)
{
    char path[4096];
    record_path(path, sizeof path, dir);
    if (unlink(path) != 0 && errno != ENOENT && errno != ENOTDIR)
        return gl_errprintf(err, "cannot remove the previous run's exit record %s: %s",
                            path, strerror(errno));
    return 0;
}

/* The record's text: key=value lines, for shell scripts (sed), in the
 * order documented in gridlm-train(1). */
static int record_text(gl_faults *f, char *buf, size_t n, long iteration,
                       long train_iters, long saved)
{
    const char *reason = "done", *detail = f->why;
    char done[64];
    unsigned a = f->last_agreed;
    if (iteration >= train_iters) {
        snprintf(done, sizeof done, "--train-iters %ld reached", train_iters);
        detail = done;
    } else if (a & (GL_EXIT_SIGTERM | GL_EXIT_SIGUSR1)) {
        reason = "signal";
    } else if (a & GL_EXIT_DURATION) {
        reason = "duration";
    } else if (a & GL_EXIT_INTERVAL) {
        reason = "interval";
    }
    time_t now = time(NULL);
    struct tm tm;
    char when[32] = "";
    if (gmtime_r(&now, &tm))
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    const char *job = getenv("SLURM_JOB_ID"), *restart = getenv("SLURM_RESTART_COUNT");
    return snprintf(buf, n,
                    "# gridlm-train stopped cleanly: every rank finished the iteration below,\n"
                    "# the checkpoint of saved_iteration is complete, and the ranks exit 0.\n"
                    "# Job scripts read this rather than the launcher's exit status\n"
                    "# (see EXIT RECORD in gridlm-train(1)).\n"
                    "reason=%s\n"
                    "iteration=%ld\n"
                    "saved_iteration=%ld\n"
                    "train_iters=%ld\n"
                    "detail=%s\n"
                    "ranks=%d\n"
                    "time=%s\n"
                    "slurm_job_id=%s\n"
                    "slurm_restart_count=%s\n",
                    reason, iteration, saved, train_iters, detail, f->size, when,
                    job ? job : "", restart ? restart : "");
}

int gl_faults_exit_record_write(gl_faults *f, const char *dir, long iteration,
                                long train_iters, long saved_iteration, gl_error *err)
{
    char path[4096], tmp[4200], text[2048];
    record_path(path, sizeof path, dir);
    int len = record_text(f, text, sizeof text, iteration, train_iters, saved_iteration);
    if (len < 0 || (size_t)len >= sizeof text)
        return gl_errprintf(err, "exit record %s: text too long", path);
    /* A fresh temporary beside it (mkstemp: O_EXCL, never through a
     * link), then one rename: a reader sees the old record or the new,
     * whole. */
    snprintf(tmp, sizeof tmp, "%s.XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0)
        return gl_errprintf(err, "cannot create a temporary for the exit record in %s: %s",
                            dir, strerror(errno));
    const char *p = text;
    size_t left = (size_t)len;
    int bad = fchmod(fd, 0644) != 0;
    while (!bad && left > 0) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            bad = 1;
            break;
        }
        p += w;
        left -= (size_t)w;
    }
    if (!bad && fsync(fd) != 0)
        bad = 1;
    int saved_errno = errno;
    if (close(fd) != 0 && !bad) {
        bad = 1;
        saved_errno = errno;
    }
    if (!bad && rename(tmp, path) != 0) {
        bad = 1;
        saved_errno = errno;
    }
    if (bad) {
        unlink(tmp);
        return gl_errprintf(err, "cannot write the exit record %s: %s", path,
                            strerror(saved_errno));
    }
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return 0;
}
