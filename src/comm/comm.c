/*
 * comm.c: the calls of comm.h, checked and handed to the group's back end
 * (comm_mpi.c or comm_nccl.c), and what the back ends share.
 */
#include <config.h>
#include "comm/comm_impl.h"
#include "base/log.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the registry of live groups, and the wait hook -------------------- */

static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;
static gl_comm *live;
static gl_comm_wait_fn wait_hook;
static void *wait_ctx;

void gl_comm_set_wait_hook(gl_comm_wait_fn fn, void *ctx)
{
    wait_hook = fn;
    wait_ctx = ctx;
}

void gl_comm_wait_begin(const gl_comm *c, const char *op, long seq, int peer_member)
{
    if (!wait_hook)
        return;
    gl_comm_wait w = { op, c, seq,
                       peer_member >= 0 && peer_member < c->size ? c->world_ranks[peer_member] : -1 };
    wait_hook(wait_ctx, &w);
}

void gl_comm_wait_end(void)
{
    if (wait_hook)
        wait_hook(wait_ctx, NULL);
}

long gl_comm_seq(const gl_comm *c)
{
    return __atomic_load_n(&c->seq, __ATOMIC_RELAXED);
}

unsigned long long gl_comm_key(const gl_comm *c) { return c->key; }

long gl_comm_seq_of(const char *name, unsigned long long key)
{
    long seq = -1;
    pthread_mutex_lock(&live_mu);
    for (gl_comm *c = live; c; c = c->next_live)
        if (c->key == key && !strcmp(c->name, name)) {
            seq = gl_comm_seq(c);
            break;
        }
    pthread_mutex_unlock(&live_mu);
    return seq;
}

/* One more collective on c (the caller's thread is the only writer). */
static long arrive(gl_comm *c)
{
    return __atomic_add_fetch(&c->seq, 1, __ATOMIC_RELAXED);
}

/* FNV-1a over the name and the world ranks of the members. */
static unsigned long long group_key(const gl_comm *c)
{
    unsigned long long h = 1469598103934665603ull;
    for (const char *p = c->name; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    for (int i = 0; i < c->size; i++)
        for (int b = 0; b < 4; b++)
            h = (h ^ (((unsigned)c->world_ranks[i] >> (8 * b)) & 0xffu)) * 1099511628211ull;
    return h;
}

size_t gl_dtype_size(gl_dtype t)
{
    switch (t) {
    case GL_DT_F32: return 4;
    case GL_DT_BF16: return 2;
    case GL_DT_F64: return 8;
    case GL_DT_I32: return 4;
    case GL_DT_I64: return 8;
    case GL_DT_U8: return 1;
    default: return 0;
    }
}

const char *gl_dtype_name(gl_dtype t)
{
    static const char *const names[GL_DT_COUNT] = {
        "f32", "bf16", "f64", "i32", "i64", "u8"
    };
    return (unsigned)t < GL_DT_COUNT ? names[t] : "?";
}

gl_comm *gl_comm_alloc(MPI_Comm mc, const char *name, gl_comm_kind kind,
                       const gl_comm_vt *vt)
{
    gl_comm *c = gl_calloc(1, sizeof *c);
    c->vt = vt;
    c->kind = kind;
    snprintf(c->name, sizeof c->name, "%s", name ? name : "?");
    int rc = MPI_Comm_dup(mc, &c->mpi);
    if (rc != MPI_SUCCESS)
        gl_die("MPI_Comm_dup of group '%s' failed (error %d)", c->name, rc);
    MPI_Comm_set_errhandler(c->mpi, MPI_ERRORS_RETURN);
    MPI_Comm_size(c->mpi, &c->size);
    MPI_Comm_rank(c->mpi, &c->rank);

    /* World rank of each member, through the groups of the two comms. */
    MPI_Group g, world;
    MPI_Comm_group(c->mpi, &g);
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    int *idx = gl_malloc(sizeof(int) * (size_t)c->size);
    c->world_ranks = gl_malloc(sizeof(int) * (size_t)c->size);
    for (int i = 0; i < c->size; i++)
        idx[i] = i;
    MPI_Group_translate_ranks(g, c->size, idx, world, c->world_ranks);
    free(idx);
    MPI_Group_free(&g);
    MPI_Group_free(&world);
    c->key = group_key(c);
    pthread_mutex_lock(&live_mu);
    c->next_live = live;
    live = c;
    pthread_mutex_unlock(&live_mu);
    return c;
}

const char *gl_comm_name(const gl_comm *c) { return c->name; }
int gl_comm_size(const gl_comm *c) { return c->size; }
int gl_comm_rank(const gl_comm *c) { return c->rank; }
gl_comm_kind gl_comm_kind_of(const gl_comm *c) { return c->kind; }
MPI_Comm gl_comm_mpi_handle(const gl_comm *c) { return c->mpi; }

int gl_comm_world_rank(const gl_comm *c, int member)
{
    if (member < 0 || member >= c->size)
        gl_die("gl_comm_world_rank: member %d of group '%s' out of range [0, %d)",
               member, c->name, c->size);
    return c->world_ranks[member];
}

/* Arguments every call shares: a group, a known dtype and op. */
static void check_args(const char *call, const gl_comm *c, gl_dtype t, gl_redop op)
{
    if (!c)
        gl_die("%s: no group (NULL gl_comm): this rank is not a member of the "
               "group it tried to use", call);
    if ((unsigned)t >= GL_DT_COUNT)
        gl_die("%s on group '%s': unknown dtype %d", call, c->name, (int)t);
    if ((unsigned)op > GL_OP_MIN)
        gl_die("%s on group '%s': unknown reduction %d", call, c->name, (int)op);
}

static void check_member(const char *call, const gl_comm *c, const char *what, int m)
{
    if (m < 0 || m >= c->size)
        gl_die("%s on group '%s': %s %d is not a member (group size %d)",
               call, c->name, what, m, c->size);
}

void gl_all_reduce(gl_comm *c, const void *send, void *recv, size_t count,
                   gl_dtype t, gl_redop op, void *stream)
{
    check_args("all_reduce", c, t, op);
    arrive(c);
    c->vt->all_reduce(c, send, recv, count, t, op, stream);
}

void gl_reduce_scatter(gl_comm *c, const void *send, void *recv,
                       size_t recv_count, gl_dtype t, gl_redop op, void *stream)
{
    check_args("reduce_scatter", c, t, op);
    arrive(c);
    c->vt->reduce_scatter(c, send, recv, recv_count, t, op, stream);
}

void gl_all_gather(gl_comm *c, const void *send, void *recv, size_t send_count,
                   gl_dtype t, void *stream)
{
    check_args("all_gather", c, t, GL_OP_SUM);
    arrive(c);
    c->vt->all_gather(c, send, recv, send_count, t, stream);
}

void gl_reduce(gl_comm *c, const void *send, void *recv, size_t count, gl_dtype t,
               gl_redop op, int root, void *stream)
{
    check_args("reduce", c, t, op);
    check_member("reduce", c, "root", root);
    arrive(c);
    c->vt->reduce(c, send, recv, count, t, op, root, stream);
}

void gl_broadcast(gl_comm *c, void *buf, size_t count, gl_dtype t, int root,
                  void *stream)
{
    check_args("broadcast", c, t, GL_OP_SUM);
    check_member("broadcast", c, "root", root);
    arrive(c);
    c->vt->broadcast(c, buf, count, t, root, stream);
}

void gl_all_to_allv(gl_comm *c, const void *send, const size_t *send_counts,
                    const size_t *send_displs, void *recv,
                    const size_t *recv_counts, const size_t *recv_displs,
                    gl_dtype t, void *stream)
{
    check_args("all_to_allv", c, t, GL_OP_SUM);
    if (!send_counts || !send_displs || !recv_counts || !recv_displs)
        gl_die("all_to_allv on group '%s': a count or displacement array is NULL",
               c->name);
    arrive(c);
    c->vt->all_to_allv(c, send, send_counts, send_displs, recv, recv_counts,
                       recv_displs, t, stream);
}

/* Groups nest (gl_comm_group_start): only the outermost bracket reaches
 * the back ends.  Both back ends are bracketed, since a group may mix
 * them. */
static int group_depth;

gl_comm_req *gl_all_to_allv_start(gl_comm *c, const void *send,
                                  const size_t *send_counts,
                                  const size_t *send_displs, void *recv,
                                  const size_t *recv_counts,
                                  const size_t *recv_displs, gl_dtype t,
                                  void *stream)
{
    check_args("all_to_allv_start", c, t, GL_OP_SUM);
    if (!send_counts || !send_displs || !recv_counts || !recv_displs)
        gl_die("all_to_allv_start on group '%s': a count or displacement array is "
               "NULL", c->name);
    if (group_depth > 0)
        gl_die("all_to_allv_start on group '%s' inside a gl_comm_group_start "
               "bracket: a non-blocking exchange is posted on its own", c->name);
    gl_comm_req *r = gl_calloc(1, sizeof *r);
    r->c = c;
    r->seq = arrive(c);
    c->vt->all_to_allv_start(c, send, send_counts, send_displs, recv, recv_counts,
                             recv_displs, t, stream, r);
    return r;
}

void gl_comm_req_wait(gl_comm_req *r)
{
    if (!r)
        gl_die("gl_comm_req_wait: no request (NULL)");
    r->c->vt->req_wait(r);
    free(r);
}

/* Equal blocks in member order: the counts and displacements of
 * gl_all_to_allv, made here so that each back end has one path. */
void gl_all_to_all(gl_comm *c, const void *send, void *recv, size_t count,
                   gl_dtype t, void *stream)
{
    check_args("all_to_all", c, t, GL_OP_SUM);
    size_t n = (size_t)c->size;
    size_t *counts = gl_malloc(2 * n * sizeof *counts), *displs = counts + n;
    for (size_t j = 0; j < n; j++) {
        counts[j] = count;
        displs[j] = j * count;
    }
    arrive(c);
    c->vt->all_to_allv(c, send, counts, displs, recv, counts, displs, t, stream);
    free(counts);
}

void gl_send(gl_comm *c, const void *buf, size_t count, gl_dtype t, int peer,
             void *stream)
{
    check_args("send", c, t, GL_OP_SUM);
    check_member("send", c, "peer", peer);
    c->vt->send(c, buf, count, t, peer, stream);
}

void gl_recv(gl_comm *c, void *buf, size_t count, gl_dtype t, int peer,
             void *stream)
{
    check_args("recv", c, t, GL_OP_SUM);
    check_member("recv", c, "peer", peer);
    c->vt->recv(c, buf, count, t, peer, stream);
}

void gl_comm_group_start(void)
{
    if (group_depth++ > 0)
        return;
    gl_comm_mpi_group_start();
#ifdef GL_HAVE_NCCL
    gl_comm_nccl_group_start();
#endif
}

void gl_comm_group_end(void)
{
    if (group_depth <= 0)
        gl_die("gl_comm_group_end without gl_comm_group_start");
    if (--group_depth > 0)
        return;
#ifdef GL_HAVE_NCCL
    gl_comm_nccl_group_end();
#endif
    gl_comm_mpi_group_end();
}

void gl_comm_group_post(void)
{
    if (group_depth <= 0)
        gl_die("gl_comm_group_post without gl_comm_group_start");
    if (--group_depth > 0)
        return;
#ifdef GL_HAVE_NCCL
    gl_comm_nccl_group_end();
#endif
    gl_comm_mpi_group_post();
}

void gl_comm_wait_posted(void)
{
    if (group_depth > 0)
        gl_die("gl_comm_wait_posted inside a gl_comm_group_start bracket");
    gl_comm_mpi_wait_posted();
}

void gl_comm_barrier(gl_comm *c)
{
    check_args("barrier", c, GL_DT_F32, GL_OP_SUM);
    c->vt->barrier(c);
}

void gl_comm_free(gl_comm *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&live_mu);
    for (gl_comm **pp = &live; *pp; pp = &(*pp)->next_live)
        if (*pp == c) {
            *pp = c->next_live;
            break;
        }
    pthread_mutex_unlock(&live_mu);
    c->vt->free_impl(c);
    MPI_Comm_free(&c->mpi);
    free(c->world_ranks);
    free(c);
}

/* ---- making groups ---------------------------------------------------- */

gl_comm *gl_comm_world(gl_comm_kind kind, gl_comm_share_fn share, void *ctx)
{
    if (kind == GL_COMM_NCCL)
        return gl_comm_nccl_world(share, ctx);
    return gl_comm_mpi(MPI_COMM_WORLD, "world");
}

gl_comm *gl_comm_split(gl_comm *parent, int color, int key, const char *name)
{
    check_args("split", parent, GL_DT_F32, GL_OP_SUM);
    MPI_Comm mc;
    int rc = MPI_Comm_split(parent->mpi, color >= 0 ? color : MPI_UNDEFINED,
                            key, &mc);
    if (rc != MPI_SUCCESS)
        gl_die("MPI_Comm_split for group '%s' failed (error %d)", name, rc);
    gl_comm *c = parent->vt->split(parent, mc, color, key, name);
    if (mc != MPI_COMM_NULL)
        MPI_Comm_free(&mc);
    return c;
}

#ifndef GL_HAVE_NCCL
gl_comm *gl_comm_nccl_world(gl_comm_share_fn share, void *ctx)
{
    (void)share; (void)ctx;
    return NULL;
}
#endif
