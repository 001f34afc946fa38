/* file.c: regular files only for reading, temporary files for writing,
 * and their removal when a writer fails (see file.h). */
#define _GNU_SOURCE             /* renameat2, RENAME_NOREPLACE */
#include <config.h>
#include "base/file.h"
#include "base/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------ */
/* Reading                                                             */

/* What a path is, for "PATH is a FIFO, not a regular file". */
static const char *kind_of(mode_t m)
{
    return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO (named pipe)"
         : S_ISCHR(m) ? "a character device" : S_ISBLK(m) ? "a block device"
         : S_ISSOCK(m) ? "a socket" : "not a file";
}

static int not_regular(const char *path, mode_t m, gl_error *err)
{
    return gl_errprintf(err, "%s is %s, not a regular file", path, kind_of(m));
}

int gl_file_open_read(const char *path, gl_error *err)
{
    /* The type first, so that a device is never even opened (opening a
     * tape rewinds it); then again on the descriptor, in case the name
     * changed in between.  O_NONBLOCK: opening a FIFO without a writer
     * would otherwise wait for one. */
    struct stat st;
    if (stat(path, &st) != 0)
        return gl_errprintf(err, "cannot open %s: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return not_regular(path, st.st_mode, err);
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return gl_errprintf(err, "cannot open %s: %s", path, strerror(errno));
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        int e = errno;
        close(fd);
        return S_ISREG(st.st_mode) ? gl_errprintf(err, "cannot open %s: %s", path, strerror(e))
                                   : not_regular(path, st.st_mode, err);
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        int e = errno;
        close(fd);
        return gl_errprintf(err, "cannot open %s: %s", path, strerror(e));
    }
    return fd;
}

FILE *gl_file_fopen_read(const char *path, gl_error *err)
{
    int fd = gl_file_open_read(path, err);
    if (fd < 0)
        return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        gl_errprintf(err, "cannot open %s: %s", path, strerror(errno));
        close(fd);
    }
    return f;
}

int gl_file_read_all(const char *path, char **buf, size_t *len, gl_error *err)
{
    *buf = NULL;
    int fd = gl_file_open_read(path, err);
    if (fd < 0)
        return -1;
    struct stat st;
    /* Room for the file, the NUL and one byte more, so that the read that
     * finds the end needs no second allocation. */
    size_t cap = fstat(fd, &st) == 0 && st.st_size > 0 ? (size_t)st.st_size + 2 : 4096;
    size_t n = 0;
    char *s = gl_malloc(cap);
    for (;;) {
        if (n + 1 >= cap)       /* the file grew since fstat: read on */
            s = gl_realloc(s, cap *= 2);
        ssize_t k = read(fd, s + n, cap - n - 1);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            int e = errno;
            close(fd);
            free(s);
            return gl_errprintf(err, "cannot read %s: %s", path, strerror(e));
        }
        if (k == 0)
            break;
        n += (size_t)k;
    }
    close(fd);
    s[n] = '\0';
    *buf = s;
    if (len)
        *len = n;
    return 0;
}

/* ------------------------------------------------------------------ */
/* Directories                                                         */

int gl_file_mkdirs(const char *dir, gl_error *err)
{
    char p[PATH_MAX];
    if (!dir || !*dir)
        return gl_errprintf(err, "an empty directory name");
    if (strlen(dir) >= sizeof p)
        return gl_errprintf(err, "directory name %.64s... is too long", dir);
    strcpy(p, dir);
    /* Each prefix ending before a '/', then the whole; an existing one is
     * fine as long as it is a directory (or a link to one). */
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s != '\0')
            continue;
        char c = *s;
        *s = '\0';
        if (mkdir(p, 0777) != 0 && errno != EEXIST) {
            int e = errno;
            struct stat st;
            /* EACCES on an existing parent we may not write: only fatal
             * when the prefix does not exist as a directory already. */
            if (!(stat(p, &st) == 0 && S_ISDIR(st.st_mode)))
                return gl_errprintf(err, "cannot create directory %s: %s", p, strerror(e));
        }
        struct stat st;
        if (stat(p, &st) != 0)
            return gl_errprintf(err, "cannot create directory %s: %s", p, strerror(errno));
        if (!S_ISDIR(st.st_mode))
            return gl_errprintf(err, "%s is %s, not a directory", p,
                                S_ISREG(st.st_mode) ? "a file" : kind_of(st.st_mode));
        *s = c;
        if (!c)
            break;
        while (s[1] == '/')     /* "a//b" */
            s++;
    }
    return 0;
}

void gl_file_dirname(const char *path, char *out, size_t n)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(out, n, ".");
    else if (slash == path)
        snprintf(out, n, "/");
    else
        snprintf(out, n, "%.*s", (int)(slash - path), path);
}

int gl_file_check_writable(const char *dir, gl_error *err)
{
    if (gl_file_mkdirs(dir, err) < 0)
        return -1;
    char probe[PATH_MAX];
    if (snprintf(probe, sizeof probe, "%s/.gridlm-write-test", dir) >= (int)sizeof probe)
        return gl_errprintf(err, "directory name %.64s... is too long", dir);
    gl_file_tmp *t = gl_file_tmp_create(probe, 0, err);
    if (!t)
        return -1;
    gl_file_tmp_discard(t);
    return 0;
}

int gl_file_check_creatable(const char *dir, gl_error *err)
{
    char p[PATH_MAX];
    if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p)
        return gl_errprintf(err, "directory name %.64s... is too long", dir);
    /* Walk the prefixes as gl_file_mkdirs does, creating none. */
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s != '\0')
            continue;
        char c = *s;
        *s = '\0';
        struct stat st;
        if (stat(p, &st) != 0) {
            /* The first missing prefix: its parent must take it. */
            char parent[PATH_MAX];
            gl_file_dirname(p, parent, sizeof parent);
            if (access(parent, W_OK | X_OK) != 0)
                return gl_errprintf(err, "cannot create directory %s: %s", p, strerror(errno));
            return 0;
        }
        if (!S_ISDIR(st.st_mode))
            return gl_errprintf(err, "%s is %s, not a directory", p,
                                S_ISREG(st.st_mode) ? "a file" : kind_of(st.st_mode));
        *s = c;
        if (!c)
            break;
        while (s[1] == '/')
            s++;
    }
    if (access(dir, W_OK | X_OK) != 0)
        return gl_errprintf(err, "cannot create a file beside %s/.gridlm-write-test: %s", dir,
                            strerror(errno));
    return 0;
}

/* ------------------------------------------------------------------ */
/* The registry of unpublished temporaries                             */

/* Fixed slots, so that the signal handler needs neither malloc nor a
 * lock: a slot is FREE, CLAIMED (its path being written) or LIVE.  Only
 * LIVE slots of this process (not of a forked child's parent) are
 * removed. */
enum { FREE = 0, CLAIMED, LIVE };
#define NSLOTS 128

static struct {
    atomic_int state;
    pid_t pid;
    char path[PATH_MAX];
} slot[NSLOTS];

void gl_file_remove_temps(void)
{
    pid_t me = getpid();
    for (int i = 0; i < NSLOTS; i++)
        if (atomic_load(&slot[i].state) == LIVE && slot[i].pid == me)
            unlink(slot[i].path);
}

static void on_exit_remove(void) { gl_file_remove_temps(); }

/* Remove, then die of the same signal as if nothing had caught it. */
static void on_signal(int sig)
{
    int saved = errno;
    gl_file_remove_temps();
    signal(sig, SIG_DFL);
    raise(sig);
    errno = saved;
}

/* Only where nobody handles the signal yet: a program's own handler
 * (--exit-signal-handler) decides what SIGTERM means there. */
static void catch_if_default(int sig)
{
    struct sigaction old, sa;
    if (sigaction(sig, NULL, &old) != 0 || old.sa_handler != SIG_DFL ||
        (old.sa_flags & SA_SIGINFO))
        return;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND;
    sigaction(sig, &sa, NULL);
}

static void install_once(void)
{
    atexit(on_exit_remove);
    gl_log_set_cleanup(gl_file_remove_temps);
    catch_if_default(SIGTERM);
    catch_if_default(SIGINT);
    catch_if_default(SIGHUP);
}

static int reg_add(const char *path)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, install_once);
    for (int i = 0; i < NSLOTS; i++) {
        int want = FREE;
        if (atomic_compare_exchange_strong(&slot[i].state, &want, CLAIMED)) {
            slot[i].pid = getpid();
            snprintf(slot[i].path, sizeof slot[i].path, "%s", path);
            atomic_store(&slot[i].state, LIVE);
            return i;
        }
    }
    return -1;
}

static void reg_drop(int i)
{
    if (i >= 0)
        atomic_store(&slot[i].state, FREE);
}

/* ------------------------------------------------------------------ */
/* Temporaries                                                         */

struct gl_file_tmp {
    int fd, slot;
    FILE *stream;
    char *path, *final;
};

/* Six letters and digits from the kernel's generator (or, should that
 * fail, from the clock, the pid and a counter: O_EXCL still protects). */
static void random_suffix(char out[7])
{
    static const char abc[] =
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    unsigned char r[6];
    if (getrandom(r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
        static atomic_uint counter;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32) ^
                     (atomic_fetch_add(&counter, 1) * 0x9e3779b97f4a7c15ULL);
        for (int i = 0; i < 6; i++, x >>= 8)
            r[i] = (unsigned char)x;
    }
    for (int i = 0; i < 6; i++)
        out[i] = abc[r[i] % (sizeof abc - 1)];
    out[6] = '\0';
}

gl_file_tmp *gl_file_tmp_create(const char *final, int flags, gl_error *err)
{
    size_t n = strlen(final) + 16;
    char *path = gl_malloc(n);
    int fd = -1, e = 0;
    for (int tries = 0; tries < 100 && fd < 0; tries++) {
        char sfx[7];
        random_suffix(sfx);
        snprintf(path, n, "%s.tmp.%s", final, sfx);
        fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
        e = errno;
        if (fd < 0 && e != EEXIST)
            break;
    }
    if (fd < 0) {
        gl_errprintf(err, "cannot create a file beside %s (%s): %s", final, path, strerror(e));
        free(path);
        return NULL;
    }
    gl_file_tmp *t = gl_calloc(1, sizeof *t);
    t->fd = fd;
    t->path = path;
    t->final = gl_strdup(final);
    t->slot = reg_add(path);
    if (t->slot < 0) {
        gl_file_tmp_discard(t);
        gl_errprintf(err, "cannot create a file beside %s: more than %d temporary files "
                     "open at once (a bug: report it)", final, NSLOTS);
        return NULL;
    }
    /* Failure to lock (a file system without flock) only costs the
     * cleaner's ability to tell that the file is in use. */
    if (!(flags & GL_FILE_TMP_NOLOCK))
        (void)flock(fd, LOCK_EX | LOCK_NB);
    return t;
}

int gl_file_tmp_fd(const gl_file_tmp *t) { return t->fd; }
const char *gl_file_tmp_path(const gl_file_tmp *t) { return t->path; }
const char *gl_file_tmp_final(const gl_file_tmp *t) { return t->final; }

FILE *gl_file_tmp_stream(gl_file_tmp *t)
{
    if (!t->stream)
        t->stream = fdopen(t->fd, "w+");
    if (!t->stream)
        gl_die("cannot open a stream on %s: %s", t->path, strerror(errno));
    return t->stream;
}

/* Close the descriptor (through the stream when there is one). */
static int tmp_close(gl_file_tmp *t)
{
    int rc = t->stream ? fclose(t->stream) : close(t->fd);
    t->stream = NULL;
    t->fd = -1;
    return rc;
}

static void tmp_free(gl_file_tmp *t)
{
    reg_drop(t->slot);
    free(t->path);
    free(t->final);
    free(t);
}

void gl_file_tmp_discard(gl_file_tmp *t)
{
    if (!t)
        return;
    tmp_close(t);
    unlink(t->path);
    tmp_free(t);
}

/* rename() that never replaces `to`: renameat2's flag where the file
 * system has it, else link(2) (which fails when `to` exists), else a
 * check just before the rename. */
static int rename_noreplace(const char *from, const char *to)
{
#ifdef RENAME_NOREPLACE
    if (renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) == 0)
        return 0;
    if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
        return -1;
#endif
    if (link(from, to) == 0) {
        unlink(from);
        return 0;
    }
    if (errno == EEXIST)
        return -1;
    struct stat st;
    if (lstat(to, &st) == 0) {
        errno = EEXIST;
        return -1;
    }
    return rename(from, to);
}

/* fsync a directory, so that a rename in it survives a crash; file
 * systems that cannot sync directories say EINVAL, which is no error. */
static int sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd) != 0 && errno != EINVAL ? -1 : 0;
    int e = errno;
    close(fd);
    errno = e;
    return rc;
}

int gl_file_tmp_publish(gl_file_tmp *t, int flags, gl_error *err)
{
    const char *step = "write";
    int bad = t->stream && fflush(t->stream) != 0;
    if (!bad && fsync(t->fd) != 0 && errno != EINVAL)
        bad = 1;
    if (!bad) {
        step = "publish";
        bad = (flags & GL_FILE_NOREPLACE) ? rename_noreplace(t->path, t->final) != 0
                                          : rename(t->path, t->final) != 0;
    }
    if (bad) {
        int e = errno;
        if (e == EEXIST && !strcmp(step, "publish"))
            gl_errprintf(err, "%s already exists, and gridlm never writes over it", t->final);
        else
            gl_errprintf(err, "cannot %s %s (through %s): %s", step, t->final, t->path,
                         strerror(e));
        gl_file_tmp_discard(t);
        return -1;
    }
    /* Published: the name is gone from the registry's point of view. */
    reg_drop(t->slot);
    t->slot = -1;
    int rc = 0;
    char dir[PATH_MAX];
    gl_file_dirname(t->final, dir, sizeof dir);
    if (tmp_close(t) != 0)
        rc = gl_errprintf(err, "cannot write %s: %s", t->final, strerror(errno));
    else if (sync_dir(dir) != 0)
        rc = gl_errprintf(err, "cannot sync directory %s after writing %s: %s", dir,
                          t->final, strerror(errno));
    tmp_free(t);
    return rc;
}

static int write_fd(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t k = write(fd, p, n > (1u << 30) ? (1u << 30) : n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

int gl_file_write_all(const char *final, const void *buf, size_t len, int flags,
                      gl_error *err)
{
    gl_file_tmp *t = gl_file_tmp_create(final, flags, err);
    if (!t)
        return -1;
    if (write_fd(t->fd, buf, len) != 0) {
        gl_errprintf(err, "cannot write %s (through %s): %s", final, t->path, strerror(errno));
        gl_file_tmp_discard(t);
        return -1;
    }
    return gl_file_tmp_publish(t, flags, err);
}

/* ------------------------------------------------------------------ */
/* Leftovers                                                           */

int gl_file_name_in(const char *final, void *names)
{
    for (const char *const *p = names; *p; p++)
        if (!strcmp(*p, final))
            return 1;
    return 0;
}

/* Is name FINAL.tmp[.-]SUFFIX (or FINAL.tmp)?  Puts FINAL into out. */
static int temp_of(const char *name, char *out, size_t n)
{
    const char *t = NULL;
    for (const char *p = strstr(name, ".tmp"); p; p = strstr(p + 1, ".tmp"))
        t = p;                 /* the last ".tmp" */
    if (!t || t == name)
        return 0;
    const char *s = t + 4;
    if (*s) {
        if (*s != '.' && *s != '-')
            return 0;
        if (!*++s)
            return 0;
        for (; *s; s++)
            if (!(*s >= 'a' && *s <= 'z') && !(*s >= 'A' && *s <= 'Z') &&
                !(*s >= '0' && *s <= '9') && *s != '_')
                return 0;
    }
    if ((size_t)(t - name) >= n)
        return 0;
    snprintf(out, n, "%.*s", (int)(t - name), name);
    return 1;
}

/* A leftover: a regular file of ours that no live writer holds. */
static int stale(int dfd, const char *name)
{
    struct stat st;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) ||
        st.st_uid != geteuid())
        return 0;
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return 0;
    int busy = flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    close(fd);
    return !busy;
}

int gl_file_clean_temps(const char *dir, int (*ours)(const char *final, void *arg),
                        void *arg, const char *what, gl_error *err)
{
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT)
            return 0;
        return gl_errprintf(err, "cannot list %s: %s", dir, strerror(errno));
    }
    int removed = 0;
    char names[400] = "", final[NAME_MAX + 1];
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!temp_of(e->d_name, final, sizeof final) || !ours(final, arg) ||
            !stale(dirfd(d), e->d_name) || unlinkat(dirfd(d), e->d_name, 0) != 0)
            continue;
        gl_file_list_name(names, sizeof names, removed++, e->d_name);
    }
    closedir(d);
    if (removed)
        gl_info("%s: removed %d leftover temporary file%s of an interrupted earlier %s: %s",
                dir, removed, removed == 1 ? "" : "s", what, names);
    return removed;
}

void gl_file_list_name(char *buf, size_t n, int count, const char *name)
{
    size_t k = strlen(buf);
    if (count < 3)
        snprintf(buf + k, n - k, "%s%s", count ? ", " : "", name);
    else if (count == 3)
        snprintf(buf + k, n - k, ", ...");
}
