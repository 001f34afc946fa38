/* data-sigbus: a dataset file that shrinks while it is mapped stops the
 * process with one line naming the file, not a silent SIGBUS.  Each case
 * runs in a child that maps a small dataset, truncates a file of it
 * itself, and reads the mapping (deterministic: the page lies wholly
 * beyond the new end).  Asserted: the .bin and the .idx are each named,
 * with their size then and now and what to do, in one line, and the
 * exit status is 1; the abort hook (MPI_Abort in a job) is what stops
 * the process; rank and host prefix the line; a SIGBUS outside gridlm's
 * mappings, or sent by kill(), keeps its default action (death by
 * SIGBUS, no message) or reaches the handler that was there before; a
 * mapping removed from the registry is no longer claimed.  Also: at open time a
 * .bin shorter than its .idx says is refused. */
#include <config.h>
#include "data/indexed.h"
#include "base/log.h"
#include "base/mapped.h"
#include "tap.h"
#include "child.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *DIR_ = "t/data-sigbus.dir";
static char prefix[256], bin[300], idx[300], other[300];

/* Run fn in a child with stderr into err; the raw wait status. */
static void call_void(void *fn)
{
    (*(void (**)(void))fn)();
}

static int child(void (*fn)(void), char *err, size_t errlen)
{
    return run_in_child_status(call_void, &fn, err, errlen);
}

/* 2000 tokens of uint16 in 4 documents: a 4000-byte .bin. */
static void make_dataset(void)
{
    gl_idx_writer *w = gl_idx_writer_open(prefix, GL_IDX_UINT16);
    int32_t tok[500];
    for (int d = 0; d < 4; d++) {
        for (int i = 0; i < 500; i++)
            tok[i] = (d * 500 + i) % 1000;
        gl_idx_writer_add_document(w, tok, 500);
    }
    gl_idx_writer_finish(w);
}

static int32_t sink;

/* Open, truncate `victim` to 0 bytes, read: never returns. */
static void truncate_and_read(const char *victim)
{
    gl_idx *x = gl_idx_open_or_die(prefix);
    if (truncate(victim, 0) != 0)
        _exit(90);
    int32_t out[8];
    gl_idx_read_tokens(x, 2, 0, 8, out, 0);
    sink = out[0] + (int32_t)gl_idx_seq_length(x, 3);
    _exit(91);                      /* no fault: the test fails */
}

static void cut_bin(void) { truncate_and_read(bin); }
static void cut_idx(void) { truncate_and_read(idx); }

static void hook(int code)
{
    char m[] = "test hook: abort(1)\n";
    m[sizeof m - 4] = (char)('0' + code);
    if (write(2, m, sizeof m - 1) < 0)
        _exit(98);
    _exit(7);
}

static void cut_bin_hooked(void)
{
    gl_log_set_abort(hook);
    gl_log_set_rank(3, "node-x");
    truncate_and_read(bin);
}

/* A mapping gridlm did not register: its fault is not ours. */
static void cut_other(void)
{
    gl_idx *x = gl_idx_open_or_die(prefix);   /* the handler is installed */
    (void)x;
    int fd = open(other, O_RDWR);
    if (fd < 0)
        _exit(92);
    volatile const char *m = mmap(NULL, 4000, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED || ftruncate(fd, 0) != 0)
        _exit(93);
    sink = m[100];
    _exit(94);
}

static void killed(void)
{
    gl_idx *x = gl_idx_open_or_die(prefix);
    (void)x;
    raise(SIGBUS);
    _exit(95);
}

static void earlier_handler(int sig, siginfo_t *si, void *uc)
{
    (void)sig;
    (void)si;
    (void)uc;
    static const char m[] = "earlier handler\n";
    if (write(2, m, sizeof m - 1) < 0)
        _exit(98);
    _exit(5);
}

static void cut_other_chained(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = earlier_handler;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGBUS, &sa, NULL);
    cut_other();
}

/* A mapping registered with gl_mapped_add(), then (unless `keep`)
 * removed, and truncated: only a registered one is reported. */
static void registered(int keep)
{
    int fd = open(other, O_RDWR);
    if (fd < 0)
        _exit(92);
    volatile const char *m = mmap(NULL, 4000, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED)
        _exit(93);
    gl_mapped_add((const void *)m, 4000, "the-registered-file");
    if (!keep)
        gl_mapped_remove((const void *)m);
    if (ftruncate(fd, 0) != 0)
        _exit(93);
    sink = m[100];
    _exit(94);
}

static void registered_kept(void) { registered(1); }
static void registered_removed(void) { registered(0); }

static int is_sigbus(int status) { return WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS; }
static int exit_code(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }

static int one_line(const char *s)
{
    const char *nl = strchr(s, '\n');
    return nl && nl[1] == '\0';
}

static void fresh(void)
{
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s' && head -c 4000 /dev/zero > '%s'",
             DIR_, DIR_, other);
    if (system(cmd) != 0)
        bail_out("cannot make %s", DIR_);
    make_dataset();
}

int main(void)
{
    gl_log_set_program("data-sigbus");
    snprintf(prefix, sizeof prefix, "%s/ds", DIR_);
    snprintf(bin, sizeof bin, "%s.bin", prefix);
    snprintf(idx, sizeof idx, "%s.idx", prefix);
    snprintf(other, sizeof other, "%s/other", DIR_);
    plan(NO_PLAN);
    char err[8192];

    fresh();
    int st = child(cut_bin, err, sizeof err);
    ok(exit_code(st) == 1, "a .bin truncated while mapped: exit 1 (status 0x%x)", st);
    ok(strstr(err, "data-sigbus: error: SIGBUS reading ") && strstr(err, bin),
       "... the message names the .bin");
    ok(strstr(err, "now 0 bytes, shorter than the 4000") && strstr(err, "changed size while in use")
       && strstr(err, "restore the file"), "... says it shrank from 4000 bytes and what to do");
    ok(one_line(err), "... in one line");
    diag("%s", err);

    fresh();
    st = child(cut_idx, err, sizeof err);
    ok(exit_code(st) == 1 && strstr(err, idx) && strstr(err, "SIGBUS reading"),
       "a truncated .idx is named too");

    fresh();
    st = child(cut_bin_hooked, err, sizeof err);
    ok(exit_code(st) == 7 && strstr(err, "test hook: abort(1)"),
       "the abort hook stops the job (MPI_Abort in gridlm-train)");
    ok(strstr(err, "data-sigbus: error: rank 3 on node-x: SIGBUS reading") != NULL,
       "... after the line, with rank and host");

    fresh();
    st = child(cut_other, err, sizeof err);
    ok(is_sigbus(st) && !strstr(err, "SIGBUS reading"),
       "a fault in a mapping gridlm did not make keeps the default action");
    st = child(killed, err, sizeof err);
    ok(is_sigbus(st) && !strstr(err, "SIGBUS reading"), "so does SIGBUS sent by kill()");
    st = child(cut_other_chained, err, sizeof err);
    ok(exit_code(st) == 5 && strstr(err, "earlier handler"),
       "a fault that is not ours reaches the handler installed before");
    fresh();
    st = child(registered_kept, err, sizeof err);
    ok(exit_code(st) == 1 && strstr(err, "SIGBUS reading the-registered-file at byte 100"),
       "gl_mapped_add: a registered mapping is reported, with the byte offset");
    fresh();
    st = child(registered_removed, err, sizeof err);
    ok(is_sigbus(st) && !strstr(err, "SIGBUS reading"),
       "gl_mapped_remove: a removed mapping is no longer claimed");

    fresh();
    if (truncate(bin, 3998) != 0)
        bail_out("truncate");
    gl_error why = { "" };
    gl_idx *x = gl_idx_open(prefix, &why);
    ok(!x && strstr(why.text, "truncated .bin") && strstr(why.text, "3998"),
       "at open, a .bin shorter than its .idx says is refused");
    gl_idx_close(x);

    if (!tap_failed()) {
        snprintf(err, sizeof err, "rm -rf '%s'", DIR_);
        if (system(err) != 0)
            diag("cannot remove %s", DIR_);
    }
    return done_testing();
}
