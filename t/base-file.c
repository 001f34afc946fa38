/*
 * base-file.c: src/base/file.h -- regular files only for reading (a FIFO,
 * a device or a directory refused without blocking), temporaries that
 * never write through a planted link and are removed when the writer
 * exits, dies or is killed by SIGTERM/SIGINT (unless the program handles
 * the signal itself), publishing with and without replacing, and the
 * cleaning of leftovers.
 *
 * The tests that need a fresh process (signal handlers are installed
 * with the first temporary) run first, each in a child.  alarm(60)
 * turns a read that blocks on a FIFO into a failure, not a hang.
 */
#include <config.h>
#include "base/file.h"
#include "base/log.h"
#include "child.h"
#include "tap.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[4096];

static void path_in(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", dir, name);
}

static void put(const char *name, const char *text)
{
    char p[4200];
    path_in(p, sizeof p, name);
    FILE *f = fopen(p, "w");
    if (!f)
        bail_out("cannot write %s", p);
    fputs(text, f);
    fclose(f);
}

static int same_text(const char *path, const char *want)
{
    char buf[256] = "";
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return !strcmp(buf, want);
}

/* Entries of dir whose name starts with prefix. */
static int count_prefix(const char *prefix)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += !strncmp(e->d_name, prefix, strlen(prefix));
    if (d)
        closedir(d);
    return n;
}

static int has(const char *s, const char *needle) { return s && strstr(s, needle) != NULL; }

/* ---- in a child: how an unpublished temporary goes away ---- */

static void make_temp(const char *name)
{
    char p[4200];
    path_in(p, sizeof p, name);
    gl_error e;
    if (!gl_file_tmp_create(p, 0, &e)) {
        fprintf(stderr, "create failed: %s\n", e.text);
        _exit(7);
    }
}

/* Like MPI_Abort: no atexit handlers. */
static void hard_abort(int code) { _exit(code + 10); }

static void child_die(void *arg)
{
    (void)arg;
    gl_log_set_abort(hard_abort);
    make_temp("die.out");
    gl_die("stopping on purpose");
}

static void child_exit(void *arg)
{
    (void)arg;
    make_temp("exit.out");
    exit(0);
}

static void child_signal(void *arg)
{
    int sig = *(int *)arg;
    /* A shell starts background jobs with SIGINT ignored, and the child
     * inherits that (CI, nohup): this test is about a program whose
     * signal is at its default, so put it there. */
    signal(sig, SIG_DFL);
    make_temp(sig == SIGTERM ? "term.out" : "int.out");
    raise(sig);
    fprintf(stderr, "survived the signal\n");
}

static volatile sig_atomic_t got_own;
static void own_handler(int sig) { (void)sig; got_own = 1; }

/* A program with its own SIGTERM handler keeps it: the temporary stays
 * until the program exits. */
static void child_own_handler(void *arg)
{
    (void)arg;
    signal(SIGTERM, own_handler);
    make_temp("own.out");
    raise(SIGTERM);
    struct sigaction now;
    sigaction(SIGTERM, NULL, &now);
    if (got_own && now.sa_handler == own_handler && count_prefix("own.out.tmp.") == 1)
        fprintf(stderr, "own handler ran, temporary kept\n");
    exit(0);
}

static void test_removal(void)
{
    char err[4096];
    int rc = run_in_child(child_die, NULL, err, sizeof err);
    ok(rc == 11 && has(err, "stopping on purpose") && count_prefix("die.out") == 0,
       "gl_die removes the unpublished temporary before the abort hook (exit %d)", rc);
    rc = run_in_child(child_exit, NULL, err, sizeof err);
    ok(rc == 0 && count_prefix("exit.out") == 0, "exit() removes it (atexit)");
    int sigs[2] = { SIGTERM, SIGINT };
    for (int i = 0; i < 2; i++) {
        rc = run_in_child(child_signal, &sigs[i], err, sizeof err);
        ok(rc == -1 && !has(err, "survived") &&
           count_prefix(i ? "int.out" : "term.out") == 0,
           "%s removes it and still kills the process", i ? "SIGINT" : "SIGTERM");
    }
    rc = run_in_child(child_own_handler, NULL, err, sizeof err);
    ok(rc == 0 && has(err, "own handler ran, temporary kept") && count_prefix("own.out") == 0,
       "a program's own SIGTERM handler is left in place; exit removes the file later");
}

/* ---- reading ---- */

static void test_reading(void)
{
    char p[4200], link[4200];
    gl_error e;
    put("plain.txt", "hello\nworld");
    path_in(p, sizeof p, "plain.txt");
    char *buf = NULL;
    size_t len = 0;
    ok(gl_file_read_all(p, &buf, &len, &e) == 0 && len == 11 && !strcmp(buf, "hello\nworld"),
       "read_all gives the bytes and a NUL");
    free(buf);
    path_in(link, sizeof link, "plain.link");
    symlink("plain.txt", link);
    int fd = gl_file_open_read(link, &e);
    ok(fd >= 0, "a link to a regular file is followed for reading");
    if (fd >= 0)
        close(fd);

    path_in(p, sizeof p, "fifo");
    if (mkfifo(p, 0600) != 0) {
        skip(2, "mkfifo failed here");
    } else {
        ok(gl_file_open_read(p, &e) < 0 && has(e.text, "is a FIFO") &&
           has(e.text, "not a regular file"), "a FIFO is refused without blocking: %s", e.text);
        ok(gl_file_read_all(p, &buf, NULL, &e) < 0 && !buf && has(e.text, p),
           "read_all refuses it too, naming it");
    }
    ok(gl_file_open_read(dir, &e) < 0 && has(e.text, "is a directory"), "a directory: %s",
       e.text);
    ok(gl_file_fopen_read("/dev/null", &e) == NULL && has(e.text, "character device"),
       "a device is refused: %s", e.text);
    path_in(link, sizeof link, "dangling");
    symlink("nowhere", link);
    ok(gl_file_open_read(link, &e) < 0 && has(e.text, "No such file"),
       "a dangling link: %s", e.text);
}

/* ---- directories ---- */

static void test_dirs(void)
{
    char p[4200];
    gl_error e;
    path_in(p, sizeof p, "a/b//c/");
    ok(gl_file_mkdirs(p, &e) == 0 && gl_file_mkdirs(p, &e) == 0, "mkdirs makes a/b/c, twice");
    path_in(p, sizeof p, "a/b/c");
    struct stat st;
    ok(stat(p, &st) == 0 && S_ISDIR(st.st_mode), "and it is a directory");
    put("afile", "x");
    path_in(p, sizeof p, "afile/sub");
    ok(gl_file_mkdirs(p, &e) < 0 && has(e.text, "afile is a file, not a directory"),
       "a file in the way is named: %s", e.text);
    ok(gl_file_check_writable(p, &e) < 0, "check_writable fails there too");
    path_in(p, sizeof p, "w/x");
    ok(gl_file_check_writable(p, &e) == 0 && rmdir(p) == 0,
       "check_writable creates the directory and leaves nothing in it");
    char d[64];
    gl_file_dirname("x/y/z.h5", d, sizeof d);
    ok(!strcmp(d, "x/y"), "dirname x/y/z.h5 = %s", d);
    gl_file_dirname("z.h5", d, sizeof d);
    ok(!strcmp(d, "."), "dirname z.h5 = %s", d);
}

/* ---- writing ---- */

/* "FINAL.tmp." and six letters or digits. */
static int temp_name_ok(const char *tmp, const char *final)
{
    size_t n = strlen(final);
    if (strncmp(tmp, final, n) || strncmp(tmp + n, ".tmp.", 5) || strlen(tmp + n + 5) != 6)
        return 0;
    for (const char *s = tmp + n + 5; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9')))
            return 0;
    return 1;
}

static void test_writing(void)
{
    char final[4200], victim[4200];
    gl_error e;
    path_in(final, sizeof final, "out.bin");
    gl_file_tmp *t1 = gl_file_tmp_create(final, 0, &e);
    gl_file_tmp *t2 = gl_file_tmp_create(final, 0, &e);
    ok(t1 && t2 && temp_name_ok(gl_file_tmp_path(t1), final) &&
       strcmp(gl_file_tmp_path(t1), gl_file_tmp_path(t2)) != 0,
       "temporaries are FINAL.tmp.XXXXXX, a new name each time (%s)",
       t1 ? gl_file_tmp_path(t1) : e.text);
    char p2[4200];
    snprintf(p2, sizeof p2, "%s", t2 ? gl_file_tmp_path(t2) : "");
    gl_file_tmp_discard(t2);
    ok(access(p2, F_OK) != 0, "discard removes the temporary");

    /* A link planted at the final name: replaced, its target untouched. */
    put("victim", "precious");
    path_in(victim, sizeof victim, "victim");
    symlink(victim, final);
    fprintf(gl_file_tmp_stream(t1), "new contents");
    ok(gl_file_tmp_publish(t1, 0, &e) == 0 && same_text(final, "new contents") &&
       same_text(victim, "precious") && count_prefix("out.bin.tmp") == 0,
       "publish replaces a link at the final name, never writes its target");
    struct stat st;
    ok(lstat(final, &st) == 0 && S_ISREG(st.st_mode), "the final name is a regular file now");

    /* GL_FILE_NOREPLACE: an existing file, or a link, stays as it is. */
    ok(gl_file_write_all(final, "other", 5, GL_FILE_NOREPLACE, &e) < 0 &&
       has(e.text, "already exists") && same_text(final, "new contents") &&
       count_prefix("out.bin.tmp") == 0,
       "NOREPLACE refuses an existing file and removes its temporary: %s", e.text);
    char dangling[4200], target[4200];
    path_in(dangling, sizeof dangling, "ck.h5");
    path_in(target, sizeof target, "ck-target");
    symlink(target, dangling);
    ok(gl_file_write_all(dangling, "x", 1, GL_FILE_NOREPLACE, &e) < 0 &&
       access(target, F_OK) != 0, "NOREPLACE refuses a dangling link too, creating nothing");
    path_in(final, sizeof final, "fresh.txt");
    ok(gl_file_write_all(final, "abc", 3, GL_FILE_NOREPLACE, &e) == 0 &&
       same_text(final, "abc"), "NOREPLACE writes a free name");
    path_in(final, sizeof final, "nodir/x.txt");
    ok(gl_file_write_all(final, "abc", 3, 0, &e) < 0 && has(e.text, "nodir/x.txt") &&
       has(e.text, "No such file"), "a missing directory is named: %s", e.text);
}

/* ---- leftovers ---- */

static int clean_quietly(char *out, size_t n, const char *const *names)
{
    /* gl_file_clean_temps prints on stdout: keep it out of the TAP stream. */
    char cap[4200];
    path_in(cap, sizeof cap, "stdout.txt");
    fflush(stdout);
    int saved = dup(1), fd = open(cap, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 1);
    close(fd);
    gl_error e;
    int removed = gl_file_clean_temps(dir, gl_file_name_in, (void *)names, "test", &e);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    FILE *f = fopen(cap, "r");
    size_t k = f ? fread(out, 1, n - 1, f) : 0;
    out[k] = '\0';
    if (f)
        fclose(f);
    unlink(cap);
    return removed;
}

static void test_leftovers(void)
{
    char p[4200], victim[4200], live_final[4200];
    put("a.bin.tmp.Ab12Cd", "old");
    put("a.bin.tmp-4242", "old");
    put("a.idx.tmp", "old");
    put("b.bin.tmp.Zz9", "not ours");
    put("a.bin.tmp.x y", "odd suffix");
    put("victim2", "keep me");
    path_in(victim, sizeof victim, "victim2");
    path_in(p, sizeof p, "a.bin.tmp.link");
    symlink(victim, p);
    path_in(p, sizeof p, "a.bin.tmp.adir");
    mkdir(p, 0700);
    path_in(live_final, sizeof live_final, "a.bin");
    gl_error e;
    gl_file_tmp *live = gl_file_tmp_create(live_final, 0, &e);
    const char *names[] = { "a.bin", "a.idx", NULL };
    char out[1024];
    int removed = clean_quietly(out, sizeof out, names);
    ok(removed == 3, "three leftovers removed (%d)", removed);
    ok(count_prefix("a.bin.tmp.Ab12Cd") == 0 && count_prefix("a.bin.tmp-4242") == 0 &&
       count_prefix("a.idx.tmp") == 0, "FINAL.tmp.X, FINAL.tmp-PID and FINAL.tmp all go");
    ok(count_prefix("b.bin.tmp.Zz9") == 1 && count_prefix("a.bin.tmp.x y") == 1 &&
       count_prefix("a.bin.tmp.adir") == 1, "other names and directories stay");
    ok(count_prefix("a.bin.tmp.link") == 1 && same_text(victim, "keep me"),
       "a link with a temporary's name stays, and so does its target");
    ok(live && access(gl_file_tmp_path(live), F_OK) == 0,
       "a temporary a live writer holds (locked) stays");
    ok(has(out, dir) && has(out, "removed 3 leftover temporary files of an interrupted "
                                 "earlier test") && strchr(out, '\n') == strrchr(out, '\n'),
       "one line says so: %.*s", (int)strcspn(out, "\n"), out);
    gl_file_tmp_discard(live);
    removed = clean_quietly(out, sizeof out, names);
    ok(removed == 0 && out[0] == '\0', "nothing left: no line");
}

int main(void)
{
    gl_log_set_program("base-file");
    alarm(60);
    snprintf(dir, sizeof dir, "%s/base-file.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir))
        bail_out("mkdtemp failed");
    plan(NO_PLAN);
    test_removal();
    test_reading();
    test_dirs();
    test_writing();
    test_leftovers();
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (!tap_failed())
        system(cmd);
    else
        diag("left %s for a look", dir);
    return done_testing();
}
