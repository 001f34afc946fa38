/*
 * ckpt_async.c: --async-save, a checkpoint written by a background thread
 * while training goes on (ckpt.h).
 *
 * The caller's slabs are copied into host buffers owned here, so training
 * may change its weights at once; a thread then runs gl_ckpt_save() on a
 * duplicate of the communicator.  The training thread keeps calling MPI
 * (on its own communicators) meanwhile, which MPI allows only at
 * MPI_THREAD_MULTIPLE; at a lower thread level the save happens at once,
 * in the caller's thread, and the handle reports it as finished.
 */
#include <config.h>
#include "ckpt/ckpt.h"
#include "base/log.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct gl_ckpt_async {
    MPI_Comm comm;           /* the duplicate the writer uses */
    char *dir;
    long iteration;
    int n, nattrs;
    gl_ckpt_tensor *t;       /* copies: names, compact slabs */
    gl_ckpt_attr *a;         /* copies: keys, strings, arrays */
    pthread_t thread;
    int threaded;
    int status;
    gl_error error;          /* the save's message, for gl_ckpt_async_wait */
    gl_ckpt_save_stats stats;
};

static void *writer(void *arg)
{
    gl_ckpt_async *s = arg;
    s->status = gl_ckpt_save(s->comm, s->dir, s->iteration, s->t, s->n, s->a,
                             s->nattrs, NULL, &s->stats, &s->error);
    return NULL;
}

/* A compact copy of this rank's slab (only what it writes). */
static void copy_tensor(gl_ckpt_tensor *d, const gl_ckpt_tensor *t)
{
    *d = *t;
    d->name = gl_strdup(t->name);
    d->data = NULL;
    d->ld = 0;
    if (!t->writes)
        return;
    if (t->nelem > 0) {
        d->data = gl_malloc((size_t)t->nelem * sizeof *d->data);
        memcpy(d->data, t->data, (size_t)t->nelem * sizeof *d->data);
        return;
    }
    long rows = t->count[0], cols = t->ndim == 2 ? t->count[1] : 1;
    long ld = t->ndim == 2 ? (t->ld ? t->ld : t->count[1]) : 1;
    d->data = gl_malloc((size_t)(rows * cols > 0 ? rows * cols : 1) * sizeof *d->data);
    if (t->ndim == 1)
        memcpy(d->data, t->data, (size_t)rows * sizeof *d->data);
    else
        for (long r = 0; r < rows; r++)
            memcpy(d->data + r * cols, t->data + r * ld, (size_t)cols * sizeof *d->data);
}

static void copy_attr(gl_ckpt_attr *d, const gl_ckpt_attr *a)
{
    *d = *a;
    d->key = a->key ? gl_strdup(a->key) : NULL;
    if (a->type == GL_CKPT_STR && a->s)
        d->s = gl_strdup(a->s);
    if (a->n > 1 && a->type == GL_CKPT_I64) {
        long long *v = gl_malloc((size_t)a->n * sizeof *v);
        memcpy(v, a->iv, (size_t)a->n * sizeof *v);
        d->iv = v;
    }
    if (a->n > 1 && a->type == GL_CKPT_F64) {
        double *v = gl_malloc((size_t)a->n * sizeof *v);
        memcpy(v, a->fv, (size_t)a->n * sizeof *v);
        d->fv = v;
    }
}

static void free_copy(gl_ckpt_async *s)
{
    for (int i = 0; i < s->n; i++) {
        free((char *)s->t[i].name);
        free(s->t[i].data);
    }
    for (int i = 0; i < s->nattrs; i++) {
        free((char *)s->a[i].key);
        if (s->a[i].type == GL_CKPT_STR)
            free((char *)s->a[i].s);
        if (s->a[i].n > 1) {
            free((void *)s->a[i].iv);
            free((void *)s->a[i].fv);
        }
    }
    free(s->t);
    free(s->a);
    free(s->dir);
    s->t = NULL;
    s->a = NULL;
    s->dir = NULL;
}

int gl_ckpt_save_async(MPI_Comm comm, const char *dir, long iteration,
                       const gl_ckpt_tensor *ts, int n,
                       const gl_ckpt_attr *attrs, int nattrs,
                       gl_ckpt_async **out, gl_error *err)
{
    gl_ckpt_async *s = gl_calloc(1, sizeof *s);
    s->dir = gl_strdup(dir);
    s->iteration = iteration;
    s->n = n;
    s->nattrs = nattrs;
    s->t = gl_calloc(n ? n : 1, sizeof *s->t);
    s->a = gl_calloc(nattrs ? nattrs : 1, sizeof *s->a);
    for (int i = 0; i < n; i++)
        copy_tensor(&s->t[i], &ts[i]);
    for (int i = 0; i < nattrs; i++)
        copy_attr(&s->a[i], &attrs[i]);
    MPI_Comm_dup(comm, &s->comm);
    /* Whichever thread runs it, every rank runs the same collective save
     * on the duplicate, so ranks need not agree on threading. */
    int level;
    MPI_Query_thread(&level);
    s->threaded = level == MPI_THREAD_MULTIPLE &&
                  pthread_create(&s->thread, NULL, writer, s) == 0;
    if (!s->threaded)
        writer(s);
    *out = s;
    return GL_CKPT_OK;
}

int gl_ckpt_async_threaded(const gl_ckpt_async *s) { return s->threaded; }

int gl_ckpt_async_wait(gl_ckpt_async *s, gl_ckpt_save_stats *stats, gl_error *err)
{
    if (s->threaded)
        pthread_join(s->thread, NULL);
    int rc = s->status;
    if (rc != GL_CKPT_OK && err)
        *err = s->error;
    if (stats)
        *stats = s->stats;
    MPI_Comm_free(&s->comm);
    free_copy(s);
    free(s);
    return rc;
}
