/* mapped.c: registry of mapped files and the SIGBUS handler (see mapped.h). */
#include <config.h>
#include "base/mapped.h"
#include "base/log.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

enum { SLOT_FREE, SLOT_BUSY, SLOT_LIVE };
#define CHUNK_SLOTS 256

typedef struct {
    atomic_int state;
    uintptr_t lo, hi;                   /* the mapping: [lo, hi) */
    char path[GL_MAPPED_PATH_MAX];
} slot;

/* Slots come in chunks linked from `head`; a chunk, once linked, stays. */
typedef struct chunk {
    slot s[CHUNK_SLOTS];
    struct chunk *_Atomic next;
} chunk;

static chunk *_Atomic head;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;    /* writers only */
static struct sigaction prev_bus;       /* the action before ours */
static int installed;

/* ---- the handler (async-signal-safe from here to the next line) ---- */

static const slot *find(uintptr_t a)
{
    for (chunk *c = atomic_load(&head); c; c = atomic_load(&c->next))
        for (int i = 0; i < CHUNK_SLOTS; i++) {
            const slot *s = &c->s[i];
            if (atomic_load_explicit(&s->state, memory_order_acquire) == SLOT_LIVE &&
                a >= s->lo && a < s->hi)
                return s;
        }
    return NULL;
}

static void put(char *t, size_t cap, size_t *n, const char *s)
{
    while (*s && *n + 1 < cap)
        t[(*n)++] = *s++;
    t[*n] = '\0';
}

/* One line: where, the file's size then and now, what to do. */
GL_NORETURN static void report(const slot *s, uintptr_t a)
{
    char t[3072], num[24];
    size_t n = 0;
    unsigned long long mapped = s->hi - s->lo;
    struct stat st;
    int gone = stat(s->path, &st) != 0;
    put(t, sizeof t, &n, "SIGBUS reading ");
    put(t, sizeof t, &n, s->path);
    put(t, sizeof t, &n, " at byte ");
    put(t, sizeof t, &n, gl_sig_utoa(num, (unsigned long long)(a - s->lo)));
    if (gone) {
        put(t, sizeof t, &n, ": the file is gone (it was removed or truncated while this job"
            " read it)");
    } else if ((unsigned long long)st.st_size < mapped) {
        put(t, sizeof t, &n, ": the file is now ");
        put(t, sizeof t, &n, gl_sig_utoa(num, (unsigned long long)st.st_size));
        put(t, sizeof t, &n, " bytes, shorter than the ");
        put(t, sizeof t, &n, gl_sig_utoa(num, mapped));
        put(t, sizeof t, &n, " it had when it was opened: it changed size while in use (was"
            " it rewritten in place?)");
    } else {
        put(t, sizeof t, &n, ": the storage could not deliver the page (an I/O error, or the"
            " file shrank and grew again while in use); check the file system");
    }
    put(t, sizeof t, &n, "; restore the file and restart the job (from its last checkpoint),"
        " and never rewrite a file a job is reading: write a new one and rename it over the"
        " old");
    gl_die_in_signal(t);
}

/* Not ours: act as if this handler were not installed. */
static void pass_on(int sig, siginfo_t *si, void *uc)
{
    if ((prev_bus.sa_flags & SA_SIGINFO) && prev_bus.sa_sigaction) {
        prev_bus.sa_sigaction(sig, si, uc);
        return;
    }
    if (prev_bus.sa_handler == SIG_IGN && si->si_code <= 0)
        return;                         /* a kill() that was ignored before */
    if (prev_bus.sa_handler != SIG_DFL && prev_bus.sa_handler != SIG_IGN) {
        prev_bus.sa_handler(sig);
        return;
    }
    /* The default action: put it back.  A fault returns to the faulting
     * instruction, which faults again; a kill() is raised again and
     * delivered as soon as this handler returns. */
    sigaction(SIGBUS, &prev_bus, NULL);
    if (si->si_code <= 0)
        raise(sig);
}

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
    /* si_code > 0: raised by the kernel for a fault at si_addr. */
    const slot *s = si->si_code > 0 ? find((uintptr_t)si->si_addr) : NULL;
    if (s)
        report(s, (uintptr_t)si->si_addr);
    pass_on(sig, si, uc);
}

/* ---- registration (normal code, under mu) ---------------------------- */

static void install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGBUS, &sa, &prev_bus) != 0)
        gl_die("cannot install the SIGBUS handler for mapped files");
    installed = 1;
}

static slot *free_slot(void)
{
    chunk *last = NULL;
    for (chunk *c = atomic_load(&head); c; c = atomic_load(&c->next)) {
        for (int i = 0; i < CHUNK_SLOTS; i++)
            if (atomic_load(&c->s[i].state) == SLOT_FREE)
                return &c->s[i];
        last = c;
    }
    chunk *c = gl_calloc(1, sizeof *c);
    if (last)
        atomic_store(&last->next, c);
    else
        atomic_store(&head, c);
    return &c->s[0];
}

void gl_mapped_add(const void *addr, size_t len, const char *path)
{
    if (!addr || !len)
        return;
    pthread_mutex_lock(&mu);
    if (!installed)
        install();
    slot *s = free_slot();
    atomic_store(&s->state, SLOT_BUSY);
    s->lo = (uintptr_t)addr;
    s->hi = (uintptr_t)addr + len;
    snprintf(s->path, sizeof s->path, "%s", path);
    atomic_store_explicit(&s->state, SLOT_LIVE, memory_order_release);
    pthread_mutex_unlock(&mu);
}

void gl_mapped_remove(const void *addr)
{
    if (!addr)
        return;
    pthread_mutex_lock(&mu);
    for (chunk *c = atomic_load(&head); c; c = atomic_load(&c->next))
        for (int i = 0; i < CHUNK_SLOTS; i++) {
            slot *s = &c->s[i];
            if (atomic_load(&s->state) == SLOT_LIVE && s->lo == (uintptr_t)addr) {
                atomic_store_explicit(&s->state, SLOT_FREE, memory_order_release);
                pthread_mutex_unlock(&mu);
                return;
            }
        }
    pthread_mutex_unlock(&mu);
}
