/*
 * comm_mpi.c: the MPI back end of comm.h.  Buffers are host memory; every
 * call has completed when it returns, except sends and receives between
 * gl_comm_group_start() and gl_comm_group_end(), which are posted as
 * MPI_Isend/MPI_Irecv and waited for at the end (or, when the bracket
 * ends with gl_comm_group_post(), at gl_comm_wait_posted()).
 *
 * MPI has no bf16 type: bf16 travels as MPI_UINT16_T and is reduced by
 * user-defined operations that widen to fp32, combine, and round back to
 * nearest-even, as NCCL does.
 */
#include <config.h>
#include "comm/comm_impl.h"
#include "base/log.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* MPI counts are int: larger buffers go in pieces of this many elements. */
#define CHUNK ((size_t)1 << 30)

/* ---- bf16 ---------------------------------------------------------- */

/* bf16 is the top half of an IEEE fp32: widening is a shift. */
static float bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Narrowing rounds to nearest, ties to even: add 0x7fff plus the lowest
 * kept bit, then drop the low half.  NaN stays NaN (quiet bit set). */
static uint16_t f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static void bf16_sum(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    const uint16_t *a = in;
    uint16_t *b = inout;
    (void)dt;
    for (int i = 0; i < *len; i++)
        b[i] = f32_to_bf16(bf16_to_f32(a[i]) + bf16_to_f32(b[i]));
}

static void bf16_max(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    const uint16_t *a = in;
    uint16_t *b = inout;
    (void)dt;
    for (int i = 0; i < *len; i++)
        if (bf16_to_f32(a[i]) > bf16_to_f32(b[i]))
            b[i] = a[i];
}

static void bf16_min(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    const uint16_t *a = in;
    uint16_t *b = inout;
    (void)dt;
    for (int i = 0; i < *len; i++)
        if (bf16_to_f32(a[i]) < bf16_to_f32(b[i]))
            b[i] = a[i];
}

/* ---- types and checks ---------------------------------------------- */

static MPI_Datatype mpi_type(gl_dtype t)
{
    switch (t) {
    case GL_DT_F32:  return MPI_FLOAT;
    case GL_DT_BF16: return MPI_UINT16_T;
    case GL_DT_F64:  return MPI_DOUBLE;
    case GL_DT_I32:  return MPI_INT32_T;
    case GL_DT_I64:  return MPI_INT64_T;
    default:         return MPI_UINT8_T;
    }
}

static MPI_Op mpi_op(gl_dtype t, gl_redop op)
{
    static MPI_Op bf16_ops[3];
    static int created;
    if (t != GL_DT_BF16)
        return op == GL_OP_SUM ? MPI_SUM : op == GL_OP_MAX ? MPI_MAX : MPI_MIN;
    if (!created) {
        MPI_Op_create(bf16_sum, 1, &bf16_ops[GL_OP_SUM]);
        MPI_Op_create(bf16_max, 1, &bf16_ops[GL_OP_MAX]);
        MPI_Op_create(bf16_min, 1, &bf16_ops[GL_OP_MIN]);
        created = 1;
    }
    return bf16_ops[op];
}

/* Stop the job on a failed MPI call, naming the call, group and peer. */
static void check(int rc, const char *call, const gl_comm *c, int peer)
{
    if (rc == MPI_SUCCESS)
        return;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    if (peer >= 0)
        gl_die("%s on group '%s' (member %d of %d, peer %d) failed: %s",
               call, c->name, c->rank, c->size, peer, msg);
    gl_die("%s on group '%s' (member %d of %d) failed: %s",
           call, c->name, c->rank, c->size, msg);
}

static void check_count(size_t count, const char *call, const gl_comm *c)
{
    if (count > INT_MAX)
        gl_die("%s on group '%s': %zu elements per member exceed MPI's limit "
               "of %d; split the buffer", call, c->name, count, INT_MAX);
}

/* 1 when [a, a+na) and [b, b+nb) share a byte. */
static int overlap(const void *a, size_t na, const void *b, size_t nb)
{
    const char *pa = a, *pb = b;
    return pa < pb + nb && pb < pa + na;
}

/* ---- collectives ---------------------------------------------------- */

static void mpi_all_reduce(gl_comm *c, const void *send, void *recv, size_t count,
                           gl_dtype t, gl_redop op, void *stream)
{
    size_t esz = gl_dtype_size(t);
    (void)stream;
    for (size_t off = 0; off < count; off += CHUNK) {
        int n = (int)(count - off < CHUNK ? count - off : CHUNK);
        char *r = (char *)recv + off * esz;
        const void *s = send == recv ? MPI_IN_PLACE : (const char *)send + off * esz;
        gl_comm_wait_begin(c, "MPI_Allreduce", gl_comm_seq(c), -1);
        int rc = MPI_Allreduce(s, r, n, mpi_type(t), mpi_op(t, op), c->mpi);
        gl_comm_wait_end();
        check(rc, "MPI_Allreduce", c, -1);
    }
}

static void mpi_reduce_scatter(gl_comm *c, const void *send, void *recv,
                               size_t recv_count, gl_dtype t, gl_redop op,
                               void *stream)
{
    size_t esz = gl_dtype_size(t), total = recv_count * (size_t)c->size * esz;
    void *tmp = NULL;
    (void)stream;
    check_count(recv_count, "reduce_scatter", c);
    /* An overlapping (in-place) layout goes through a copy of the input. */
    if (overlap(send, total, recv, recv_count * esz)) {
        tmp = gl_malloc(total ? total : 1);
        memcpy(tmp, send, total);
        send = tmp;
    }
    gl_comm_wait_begin(c, "MPI_Reduce_scatter_block", gl_comm_seq(c), -1);
    int rc = MPI_Reduce_scatter_block(send, recv, (int)recv_count, mpi_type(t),
                                      mpi_op(t, op), c->mpi);
    gl_comm_wait_end();
    check(rc, "MPI_Reduce_scatter_block", c, -1);
    free(tmp);
}

static void mpi_all_gather(gl_comm *c, const void *send, void *recv,
                           size_t send_count, gl_dtype t, void *stream)
{
    size_t esz = gl_dtype_size(t);
    (void)stream;
    check_count(send_count, "all_gather", c);
    const void *s = send;
    if ((const char *)send == (char *)recv + (size_t)c->rank * send_count * esz)
        s = MPI_IN_PLACE;
    gl_comm_wait_begin(c, "MPI_Allgather", gl_comm_seq(c), -1);
    int rc = MPI_Allgather(s, (int)send_count, mpi_type(t), recv, (int)send_count,
                           mpi_type(t), c->mpi);
    gl_comm_wait_end();
    check(rc, "MPI_Allgather", c, -1);
}

/* The extent in elements of the blocks at counts/displs: one past the
 * last element any of them touches. */
static size_t blocks_extent(const size_t *counts, const size_t *displs, int n)
{
    size_t end = 0;
    for (int j = 0; j < n; j++)
        if (counts[j] && displs[j] + counts[j] > end)
            end = displs[j] + counts[j];
    return end;
}

/* The int counts and displacements of MPI_Alltoallv and MPI_Ialltoallv
 * [4 n]: send counts, send displacements, receive counts, receive
 * displacements, each checked against MPI's limit; the buffers checked
 * apart. */
static int *a2av_ints(gl_comm *c, const void *send, const size_t *send_counts,
                      const size_t *send_displs, const void *recv,
                      const size_t *recv_counts, const size_t *recv_displs, gl_dtype t)
{
    size_t esz = gl_dtype_size(t);
    int n = c->size;
    if (overlap(send, blocks_extent(send_counts, send_displs, n) * esz,
                recv, blocks_extent(recv_counts, recv_displs, n) * esz))
        gl_die("all_to_all on group '%s': the send and receive buffers overlap; "
               "pass distinct buffers", c->name);
    int *iv = gl_malloc(4 * (size_t)n * sizeof *iv);
    for (int j = 0; j < n; j++) {
        check_count(send_counts[j], "all_to_all", c);
        check_count(send_displs[j], "all_to_all (send displacement)", c);
        check_count(recv_counts[j], "all_to_all", c);
        check_count(recv_displs[j], "all_to_all (receive displacement)", c);
        iv[j] = (int)send_counts[j];
        iv[n + j] = (int)send_displs[j];
        iv[2 * n + j] = (int)recv_counts[j];
        iv[3 * n + j] = (int)recv_displs[j];
    }
    return iv;
}

/* MPI_Alltoallv, whose counts and displacements are ints. */
static void mpi_all_to_allv(gl_comm *c, const void *send, const size_t *send_counts,
                            const size_t *send_displs, void *recv,
                            const size_t *recv_counts, const size_t *recv_displs,
                            gl_dtype t, void *stream)
{
    int n = c->size;
    (void)stream;
    int *iv = a2av_ints(c, send, send_counts, send_displs, recv, recv_counts, recv_displs, t);
    int *sc = iv, *sd = iv + n, *rc_ = iv + 2 * n, *rd = iv + 3 * n;
    gl_comm_wait_begin(c, "MPI_Alltoallv", gl_comm_seq(c), -1);
    int rc = MPI_Alltoallv(send, sc, sd, mpi_type(t), recv, rc_, rd, mpi_type(t),
                           c->mpi);
    gl_comm_wait_end();
    check(rc, "MPI_Alltoallv", c, -1);
    free(iv);
}

/* MPI_Ialltoallv: the int arrays live in r until the wait. */
static void mpi_all_to_allv_start(gl_comm *c, const void *send, const size_t *send_counts,
                                  const size_t *send_displs, void *recv,
                                  const size_t *recv_counts, const size_t *recv_displs,
                                  gl_dtype t, void *stream, gl_comm_req *r)
{
    int n = c->size;
    (void)stream;
    int *iv = a2av_ints(c, send, send_counts, send_displs, recv, recv_counts, recv_displs, t);
    r->mpi_counts = iv;
    int rc = MPI_Ialltoallv(send, iv, iv + n, mpi_type(t), recv, iv + 2 * n, iv + 3 * n,
                            mpi_type(t), c->mpi, &r->mpi);
    check(rc, "MPI_Ialltoallv", c, -1);
}

static void mpi_req_wait(gl_comm_req *r)
{
    gl_comm_wait_begin(r->c, "MPI_Ialltoallv (wait)", r->seq, -1);
    int rc = MPI_Wait(&r->mpi, MPI_STATUS_IGNORE);
    gl_comm_wait_end();
    check(rc, "MPI_Wait (Ialltoallv)", r->c, -1);
    free(r->mpi_counts);
}

/* MPI_Reduce.  In place at the root the input goes through a bounded
 * staging copy instead of MPI_IN_PLACE, which MPICH 4.0's reduce
 * dereferences when the root is not member 0 (a segfault seen with
 * Debian 12's libmpich12 4.0.2 from 1031 floats up).  The other members
 * pass their send buffer as the (insignificant) receive buffer. */
static void mpi_reduce(gl_comm *c, const void *send, void *recv, size_t count,
                       gl_dtype t, gl_redop op, int root, void *stream)
{
    size_t esz = gl_dtype_size(t);
    int me = c->rank == root, staged = me && send == recv;
    size_t step = staged ? ((size_t)4 << 20) / esz : CHUNK;
    void *stage = staged ? gl_malloc(step * esz) : NULL;
    (void)stream;
    for (size_t off = 0; off < count; off += step) {
        int n = (int)(count - off < step ? count - off : step);
        const char *s = (const char *)send + off * esz;
        char *r = me ? (char *)recv + off * esz : (char *)s;
        if (staged)
            s = memcpy(stage, r, (size_t)n * esz);
        gl_comm_wait_begin(c, "MPI_Reduce", gl_comm_seq(c), -1);
        int rc = MPI_Reduce(s, r, n, mpi_type(t), mpi_op(t, op), root, c->mpi);
        gl_comm_wait_end();
        check(rc, "MPI_Reduce", c, root);
    }
    free(stage);
}

static void mpi_broadcast(gl_comm *c, void *buf, size_t count, gl_dtype t,
                          int root, void *stream)
{
    size_t esz = gl_dtype_size(t);
    (void)stream;
    for (size_t off = 0; off < count; off += CHUNK) {
        int n = (int)(count - off < CHUNK ? count - off : CHUNK);
        gl_comm_wait_begin(c, "MPI_Bcast", gl_comm_seq(c), -1);
        int rc = MPI_Bcast((char *)buf + off * esz, n, mpi_type(t), root, c->mpi);
        gl_comm_wait_end();
        check(rc, "MPI_Bcast", c, root);
    }
}

/* ---- point-to-point and groups -------------------------------------- */

/* Requests posted inside a group, with what to say if one fails. */
typedef struct {
    MPI_Request req;
    const gl_comm *comm;
    int peer;
    const char *call, *wait_op;
} pending;

static int in_group;
static pending *posted;
static int nposted, capposted;

static void post(MPI_Request req, const gl_comm *c, int peer, const char *call)
{
    if (nposted == capposted) {
        capposted = capposted ? 2 * capposted : 16;
        posted = gl_realloc(posted, sizeof *posted * (size_t)capposted);
    }
    posted[nposted++] = (pending){ req, c, peer, call,
                                   !strcmp(call, "MPI_Isend") ? "MPI_Wait (send)"
                                                              : "MPI_Wait (receive)" };
}

static void mpi_send(gl_comm *c, const void *buf, size_t count, gl_dtype t,
                     int peer, void *stream)
{
    size_t esz = gl_dtype_size(t);
    (void)stream;
    for (size_t off = 0; off == 0 || off < count; off += CHUNK) {
        int n = (int)(count - off < CHUNK ? count - off : CHUNK);
        const char *p = (const char *)buf + off * esz;
        if (in_group) {
            MPI_Request r;
            check(MPI_Isend(p, n, mpi_type(t), peer, 0, c->mpi, &r), "MPI_Isend", c, peer);
            post(r, c, peer, "MPI_Isend");
        } else {
            gl_comm_wait_begin(c, "MPI_Send", 0, peer);
            int rc = MPI_Send(p, n, mpi_type(t), peer, 0, c->mpi);
            gl_comm_wait_end();
            check(rc, "MPI_Send", c, peer);
        }
    }
}

static void mpi_recv(gl_comm *c, void *buf, size_t count, gl_dtype t,
                     int peer, void *stream)
{
    size_t esz = gl_dtype_size(t);
    (void)stream;
    for (size_t off = 0; off == 0 || off < count; off += CHUNK) {
        int n = (int)(count - off < CHUNK ? count - off : CHUNK);
        char *p = (char *)buf + off * esz;
        if (in_group) {
            MPI_Request r;
            check(MPI_Irecv(p, n, mpi_type(t), peer, 0, c->mpi, &r), "MPI_Irecv", c, peer);
            post(r, c, peer, "MPI_Irecv");
        } else {
            gl_comm_wait_begin(c, "MPI_Recv", 0, peer);
            int rc = MPI_Recv(p, n, mpi_type(t), peer, 0, c->mpi, MPI_STATUS_IGNORE);
            gl_comm_wait_end();
            check(rc, "MPI_Recv", c, peer);
        }
    }
}

void gl_comm_mpi_group_start(void) { in_group = 1; }
int gl_comm_mpi_in_group(void) { return in_group; }

/* Close the bracket, its requests left in flight. */
void gl_comm_mpi_group_post(void) { in_group = 0; }

/* Close the bracket and wait for every request posted. */
void gl_comm_mpi_group_end(void)
{
    in_group = 0;
    gl_comm_mpi_wait_posted();
}

/* Wait for every request posted; the first that failed is named. */
void gl_comm_mpi_wait_posted(void)
{
    for (int i = 0; i < nposted; i++) {
        MPI_Status st;
        gl_comm_wait_begin(posted[i].comm, posted[i].wait_op, 0, posted[i].peer);
        int rc = MPI_Wait(&posted[i].req, &st);
        gl_comm_wait_end();
        check(rc, posted[i].call, posted[i].comm, posted[i].peer);
    }
    nposted = 0;
}

static void mpi_barrier(gl_comm *c) { (void)c; }
static void mpi_free_impl(gl_comm *c) { (void)c; }

static gl_comm *mpi_split(gl_comm *parent, MPI_Comm mc, int color, int key,
                          const char *name)
{
    (void)parent; (void)key;
    return color >= 0 ? gl_comm_mpi(mc, name) : NULL;
}

static const gl_comm_vt mpi_vt = {
    .all_reduce = mpi_all_reduce,
    .reduce_scatter = mpi_reduce_scatter,
    .all_gather = mpi_all_gather,
    .reduce = mpi_reduce,
    .broadcast = mpi_broadcast,
    .all_to_allv = mpi_all_to_allv,
    .all_to_allv_start = mpi_all_to_allv_start,
    .req_wait = mpi_req_wait,
    .send = mpi_send,
    .recv = mpi_recv,
    .barrier = mpi_barrier,
    .free_impl = mpi_free_impl,
    .split = mpi_split,
};

gl_comm *gl_comm_mpi(MPI_Comm c, const char *name)
{
    return gl_comm_alloc(c, name, GL_COMM_MPI, &mpi_vt);
}
