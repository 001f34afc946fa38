/* peers.c: the side channel between the ranks (see peers.h). */
#include <config.h>
#include "comm/peers.h"
#include "comm/comm.h"
#include "base/log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_ADDRS 4
#define HOST_LEN 256
#define MAX_PENDING 256          /* query connections served at once */
#define MAX_PROBE_FDS 512        /* probes in flight at once */

/* ---- what travels -------------------------------------------------------
 * Every rank runs the same build, so the structures go as they are. */

#define MAGIC 0x474c5043u        /* "GLPC" */
enum { M_HELLO = 1, M_BYE, M_STOP, M_QUERY, M_ANSWER };

typedef struct {
    uint32_t magic, type;
    uint64_t token;
    int32_t from, len;           /* sender's world rank; payload bytes */
} hdr;

typedef struct {
    char group[32];
    uint64_t key;
    int32_t has_group, pad;
} query;

typedef struct {
    int64_t pid, group_seq, wait_seq, last_seq;
    int32_t waiting, wait_peer;
    double wait_open_s, idle_s;
    char wait_op[96], wait_group[32], last_op[96], last_group[32];
} answer;

typedef struct {
    int32_t origin, pad;
} stop_note;

/* What each rank tells at gl_peers_open. */
typedef struct {
    uint32_t addr[MAX_ADDRS];    /* IPv4, network order */
    int32_t naddr;
    int32_t port;                /* 0: no listener */
    int64_t pid;
    uint64_t token;              /* rank 0's is the job's */
    char host[HOST_LEN];
} card;

#define BUF_MAX (sizeof(hdr) + sizeof(answer))

typedef struct {
    int fd;
    int ring;                    /* 1: the predecessor's ring link */
    size_t have;
    double t0;
    char buf[BUF_MAX];
} conn;

struct gl_peers {
    MPI_Comm comm;               /* our duplicate of the world */
    int rank, size;
    card *cards;
    uint64_t token;
    char self_comm[64];          /* /proc/self/comm, to trust a same-host pid */

    int listen_fd;
    int succ_fd, pred_fd;        /* ring links: to rank+1, from rank-1 */
    size_t succ_have;
    char succ_buf[BUF_MAX];
    int succ_bye, pred_bye;      /* the neighbour said goodbye */
    pthread_mutex_t send_mu;     /* sends on the ring links */

    gl_peers_describe_fn describe;
    void *describe_ctx;

    atomic_int stop_origin;      /* -1: nobody announced a stop */
    atomic_int dropped;          /* gl_peers_drop_links: say nothing */
    atomic_int closing;          /* gl_peers_close: every rank leaves now */
    atomic_int forwarded;        /* the stop notice went on already */

    int wake[2];                 /* a pipe: wakes the thread to quit */
    pthread_t thread;
    int thread_up;
    conn pending[MAX_PENDING];
    int npending;

    /* A ring neighbour's link ended without a goodbye (service thread
     * only): reported once LOST_GRACE has passed with no stop notice. */
    int lost_rank;               /* -1: none */
    double lost_at;
    char lost_how[64];
};

/* How long a death waits before it is reported.  A rank that stops the job
 * itself (gl_die, then MPI_Abort) sends a stop notice, but its sockets may
 * close before the notice is through, and the launcher then ends every
 * rank within this time: a survivor that spoke at once would add a second,
 * wrong error line ("rank R died") to the one that matters. */
#define LOST_GRACE 2.0

/* The one side channel of this process, for the abort hook. */
static gl_peers *the_peers;
static gl_abort_fn next_abort;

/* ---- small helpers ------------------------------------------------------ */

static int set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

/* Send all of a small message on a non-blocking socket, waiting at most
 * about a second for room; 0 on success. */
static int send_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    double t0 = gl_now();
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && (errno == EINTR))
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && gl_now() - t0 < 1.0) {
            struct pollfd pf = { fd, POLLOUT, 0 };
            poll(&pf, 1, 100);
            continue;
        }
        return -1;
    }
    return 0;
}

static int send_msg(gl_peers *p, int fd, int type, const void *payload, int len)
{
    char buf[BUF_MAX];
    hdr h = { MAGIC, (uint32_t)type, p->token, p->rank, len };
    memcpy(buf, &h, sizeof h);
    if (len > 0)
        memcpy(buf + sizeof h, payload, (size_t)len);
    return send_all(fd, buf, sizeof h + (size_t)len);
}

/* Send on a ring link under the send lock (several threads may).  With
 * only_try, give up rather than wait for the lock: the abort path may run
 * in a signal handler (base/log.h), which must not block on a lock its
 * own thread might hold. */
static void ring_send_how(gl_peers *p, int *fd, int type, const void *payload, int len,
                          int only_try)
{
    if (only_try) {
        if (pthread_mutex_trylock(&p->send_mu) != 0)
            return;
    } else {
        pthread_mutex_lock(&p->send_mu);
    }
    if (*fd >= 0)
        send_msg(p, *fd, type, payload, len);
    pthread_mutex_unlock(&p->send_mu);
}

static void ring_send(gl_peers *p, int *fd, int type, const void *payload, int len)
{
    ring_send_how(p, fd, type, payload, len, 0);
}

/* Does s name an interface chosen by GRIDLM_SOCKET_IFNAME (or the
 * default: every one but loopback and docker's)? */
static int iface_chosen(const char *name)
{
    const char *spec = getenv("GRIDLM_SOCKET_IFNAME");
    if (!spec || !*spec)
        return strncmp(name, "lo", 2) != 0 && strncmp(name, "docker", 6) != 0;
    int exclude = spec[0] == '^';
    const char *s = spec + exclude;
    while (*s) {
        const char *e = strchr(s, ',');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        if (n > 0 && !strncmp(name, s, n))
            return !exclude;
        s = e ? e + 1 : s + n;
    }
    return exclude;
}

/* This host's IPv4 addresses on the chosen interfaces (up, not
 * loopback), at most MAX_ADDRS. */
static int own_addrs(uint32_t *out)
{
    struct ifaddrs *ifa = NULL;
    int n = 0;
    if (getifaddrs(&ifa) != 0)
        return 0;
    for (struct ifaddrs *i = ifa; i && n < MAX_ADDRS; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP) ||
            (i->ifa_flags & IFF_LOOPBACK) || !iface_chosen(i->ifa_name))
            continue;
        out[n++] = ((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr.s_addr;
    }
    freeifaddrs(ifa);
    return n;
}

static uint64_t random_token(void)
{
    uint64_t t = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f || fread(&t, sizeof t, 1, f) != 1)
        t = (uint64_t)time(NULL) * 6364136223846793005ull ^ (uint64_t)getpid() << 20 ^
            (uint64_t)(gl_now() * 1e9);
    if (f)
        fclose(f);
    return t | 1;
}

static void read_small(const char *path, char *out, size_t n)
{
    out[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    if (!fgets(out, (int)n, f))
        out[0] = '\0';
    fclose(f);
    out[strcspn(out, "\n")] = '\0';
}

/* The /proc state of a pid on this host, when it is one of ours (same
 * command name: another pid namespace would have other processes). */
static char proc_state(const gl_peers *p, long pid)
{
    char path[64], comm[64], stat[512];
    snprintf(path, sizeof path, "/proc/%ld/comm", pid);
    read_small(path, comm, sizeof comm);
    if (!comm[0] || strcmp(comm, p->self_comm) != 0)
        return 0;
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    read_small(path, stat, sizeof stat);
    const char *r = strrchr(stat, ')');
    return r && r[1] == ' ' && r[2] ? r[2] : 0;
}

static int same_host(const gl_peers *p, int r)
{
    return !strcmp(p->cards[r].host, p->cards[p->rank].host);
}

/* Start a non-blocking connection to rank r's address number a (a = -1:
 * loopback); -1 on an immediate failure (errno set). */
static int start_connect(const gl_peers *p, int r, int a)
{
    const card *c = &p->cards[r];
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)c->port);
    sa.sin_addr.s_addr = a < 0 ? htonl(INADDR_LOOPBACK) : c->addr[a];
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (set_nonblock(fd) != 0 ||
        (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0 && errno != EINPROGRESS)) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

/* The addresses to try for rank r, in order: loopback on the same host,
 * then its advertised ones.  Returns how many (a = -1 means loopback). */
static int route(const gl_peers *p, int r, int *a)
{
    int n = 0;
    if (same_host(p, r))
        a[n++] = -1;
    for (int i = 0; i < p->cards[r].naddr && n < MAX_ADDRS + 1; i++)
        a[n++] = i;
    return n;
}

/* ---- the ring ----------------------------------------------------------- */

/* Connect to the successor, trying each address for up to 5 s; send
 * HELLO.  0 on success. */
static int connect_succ(gl_peers *p)
{
    int succ = (p->rank + 1) % p->size;
    int a[MAX_ADDRS + 1], na = route(p, succ, a);
    if (p->cards[succ].port <= 0)
        return -1;
    for (int i = 0; i < na; i++) {
        int fd = start_connect(p, succ, a[i]);
        if (fd < 0)
            continue;
        struct pollfd pf = { fd, POLLOUT, 0 };
        int err = 0;
        socklen_t len = sizeof err;
        if (poll(&pf, 1, 5000) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 &&
            err == 0 && send_msg(p, fd, M_HELLO, NULL, 0) == 0) {
            p->succ_fd = fd;
            return 0;
        }
        close(fd);
    }
    return -1;
}

/* Whether the job is stopping already (then a neighbour's end is expected). */
static int stopping(gl_peers *p)
{
    return atomic_load(&p->stop_origin) >= 0 || atomic_load(&p->dropped) ||
           atomic_load(&p->closing);
}

/* A ring neighbour's connection ended without a goodbye: it died, unless
 * the job is stopping.  Noted now, reported by lost_check after
 * LOST_GRACE. */
static void lost(gl_peers *p, int r, const char *how)
{
    if (stopping(p) || p->lost_rank >= 0)
        return;
    p->lost_rank = r;
    p->lost_at = gl_now();
    snprintf(p->lost_how, sizeof p->lost_how, "%s", how);
}

/* The service loop's check of a noted death: forgotten when a stop notice
 * came meanwhile, reported (stopping the job) once LOST_GRACE is over. */
static void lost_check(gl_peers *p)
{
    if (p->lost_rank < 0)
        return;
    if (stopping(p)) {
        p->lost_rank = -1;
        return;
    }
    if (gl_now() - p->lost_at < LOST_GRACE)
        return;
    int r = p->lost_rank;
    const char *how = p->lost_how;
    const card *c = &p->cards[r];
    gl_die("rank %d on %s (pid %lld) died: its side-channel connection to this rank "
           "ended (%s) without a goodbye, so the process ended abnormally (killed by a "
           "signal, crashed, or ended by the out-of-memory killer: see the launcher's "
           "message about it, or `dmesg` on %s); stopping the job",
           r, c->host, (long long)c->pid, how, c->host);
}

/* A stop notice from a neighbour: remember it, pass it on once to the
 * other neighbour (the notice goes both ways round the ring). */
static void on_stop(gl_peers *p, int origin, int from_succ)
{
    int none = -1;
    atomic_compare_exchange_strong(&p->stop_origin, &none, origin);
    if (atomic_exchange(&p->forwarded, 1))
        return;
    stop_note s = { origin, 0 };
    if (from_succ)
        ring_send(p, &p->pred_fd, M_STOP, &s, sizeof s);
    else
        ring_send(p, &p->succ_fd, M_STOP, &s, sizeof s);
}

/* Whole messages in buf[0..*have): handle them, keep the rest.  Returns
 * -1 on garbage. */
static int ring_messages(gl_peers *p, char *buf, size_t *have, int from_succ)
{
    while (*have >= sizeof(hdr)) {
        hdr h;
        memcpy(&h, buf, sizeof h);
        if (h.magic != MAGIC || h.token != p->token || h.len < 0 ||
            (size_t)h.len > BUF_MAX - sizeof h)
            return -1;
        size_t whole = sizeof h + (size_t)h.len;
        if (*have < whole)
            break;
        if (h.type == M_BYE) {
            if (from_succ)
                p->succ_bye = 1;
            else
                p->pred_bye = 1;
        } else if (h.type == M_STOP && (size_t)h.len >= sizeof(stop_note)) {
            stop_note s;
            memcpy(&s, buf + sizeof h, sizeof s);
            on_stop(p, s.origin, from_succ);
        }
        memmove(buf, buf + whole, *have - whole);
        *have -= whole;
    }
    return 0;
}

/* Read what a ring link has; a closed link without a goodbye is a death. */
static void ring_read(gl_peers *p, int from_succ)
{
    int *fd = from_succ ? &p->succ_fd : &p->pred_fd;
    int r = from_succ ? (p->rank + 1) % p->size : (p->rank + p->size - 1) % p->size;
    char *buf = from_succ ? p->succ_buf : NULL;
    size_t *have = from_succ ? &p->succ_have : NULL;
    conn *pc = NULL;
    if (!from_succ) {
        for (int i = 0; i < p->npending; i++)
            if (p->pending[i].fd == *fd)
                pc = &p->pending[i];
        if (!pc)
            return;
        buf = pc->buf;
        have = &pc->have;
    }
    for (;;) {
        ssize_t n = recv(*fd, buf + *have, BUF_MAX - *have, 0);
        if (n > 0) {
            *have += (size_t)n;
            if (ring_messages(p, buf, have, from_succ) != 0) {
                *have = 0;
                return;
            }
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        /* end of stream or an error */
        int bye = from_succ ? p->succ_bye : p->pred_bye;
        char how[64];
        snprintf(how, sizeof how, "%s", n == 0 ? "closed" : strerror(errno));
        pthread_mutex_lock(&p->send_mu);
        close_fd(fd);
        pthread_mutex_unlock(&p->send_mu);
        if (pc)
            pc->fd = -1;
        if (!bye)
            lost(p, r, how);
        return;
    }
}

/* ---- the service thread ------------------------------------------------- */

static void answer_query(gl_peers *p, int fd, const query *q)
{
    gl_peer_status me;
    memset(&me, 0, sizeof me);
    me.wait_peer = -1;
    if (p->describe)
        p->describe(p->describe_ctx, &me);
    answer a;
    memset(&a, 0, sizeof a);
    a.pid = (int64_t)getpid();
    a.group_seq = q->has_group ? gl_comm_seq_of(q->group, q->key) : -1;
    a.waiting = me.waiting;
    a.wait_peer = me.wait_peer;
    a.wait_seq = me.wait_seq;
    a.wait_open_s = me.wait_open_s;
    a.idle_s = me.idle_s;
    a.last_seq = me.last_seq;
    snprintf(a.wait_op, sizeof a.wait_op, "%s", me.wait_op);
    snprintf(a.wait_group, sizeof a.wait_group, "%s", me.wait_group);
    snprintf(a.last_op, sizeof a.last_op, "%s", me.last_op);
    snprintf(a.last_group, sizeof a.last_group, "%s", me.last_group);
    send_msg(p, fd, M_ANSWER, &a, sizeof a);
}

static void drop_pending(gl_peers *p, int i)
{
    if (p->pending[i].fd >= 0 && p->pending[i].fd != p->pred_fd)
        close(p->pending[i].fd);
    p->pending[i] = p->pending[--p->npending];
}

/* A pending connection has data: HELLO from the predecessor makes it the
 * ring link, QUERY gets its answer; anything else is dropped.  Returns 1
 * when the connection is finished with. */
static int serve_pending(gl_peers *p, conn *c)
{
    ssize_t n = recv(c->fd, c->buf + c->have, BUF_MAX - c->have, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return 0;
    if (n <= 0)
        return 1;
    c->have += (size_t)n;
    if (c->have < sizeof(hdr))
        return 0;
    hdr h;
    memcpy(&h, c->buf, sizeof h);
    if (h.magic != MAGIC || h.token != p->token || h.len < 0 ||
        (size_t)h.len > BUF_MAX - sizeof h)
        return 1;
    if (c->have < sizeof h + (size_t)h.len)
        return 0;
    int pred = (p->rank + p->size - 1) % p->size;
    if (h.type == M_HELLO && h.from == pred && p->pred_fd < 0) {
        pthread_mutex_lock(&p->send_mu);
        p->pred_fd = c->fd;
        pthread_mutex_unlock(&p->send_mu);
        c->ring = 1;
        size_t whole = sizeof h + (size_t)h.len;
        memmove(c->buf, c->buf + whole, c->have - whole);
        c->have -= whole;
        if (ring_messages(p, c->buf, &c->have, 0) != 0)
            c->have = 0;
        return 0;
    }
    if (h.type == M_QUERY && (size_t)h.len >= sizeof(query)) {
        query q;
        memcpy(&q, c->buf + sizeof h, sizeof q);
        q.group[sizeof q.group - 1] = '\0';
        answer_query(p, c->fd, &q);
    }
    return 1;
}

static void *service_main(void *arg)
{
    gl_peers *p = arg;
    struct pollfd pf[3 + MAX_PENDING];
    for (;;) {
        int n = 0;
        pf[n++] = (struct pollfd){ p->wake[0], POLLIN, 0 };
        /* when full, new connections wait in the listen backlog */
        pf[n++] = (struct pollfd){ p->npending < MAX_PENDING ? p->listen_fd : -1, POLLIN, 0 };
        pf[n++] = (struct pollfd){ p->succ_fd, POLLIN, 0 };   /* -1 is ignored */
        for (int i = 0; i < p->npending; i++)
            pf[n++] = (struct pollfd){ p->pending[i].fd, POLLIN, 0 };
        int rc = poll(pf, (nfds_t)n, p->lost_rank >= 0 ? 50 : 1000);
        if (rc < 0 && errno != EINTR)
            break;
        if (pf[0].revents)
            break;
        lost_check(p);
        if (pf[2].revents && p->succ_fd >= 0)
            ring_read(p, 1);
        /* the pending connections, the predecessor's ring link among them */
        double now = gl_now();
        for (int i = p->npending - 1, k = n - 1; i >= 0; i--, k--) {
            conn *c = &p->pending[i];
            if (c->fd < 0) {
                drop_pending(p, i);
                continue;
            }
            if (c->ring) {
                if (pf[k].revents)
                    ring_read(p, 0);
                if (c->fd < 0)
                    drop_pending(p, i);
                continue;
            }
            if ((pf[k].revents && serve_pending(p, c)) || now - c->t0 > 10.0)
                drop_pending(p, i);
        }
        if (pf[1].revents && p->npending < MAX_PENDING) {
            int fd = accept(p->listen_fd, NULL, NULL);
            if (fd >= 0) {
                if (set_nonblock(fd) != 0) {
                    close(fd);
                } else {
                    conn *c = &p->pending[p->npending++];
                    memset(c, 0, sizeof *c);
                    c->fd = fd;
                    c->t0 = now;
                }
            }
        }
    }
    return NULL;
}

static void announce(gl_peers *p, int only_try);

/* gl_die's last words pass through here: the stop notice first. */
static void abort_hook(int code)
{
    if (the_peers)
        announce(the_peers, 1);
    if (next_abort)
        next_abort(code);
    _exit(code ? code : 1);
}

/* ---- life --------------------------------------------------------------- */

static int open_listener(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_ANY);
    socklen_t len = sizeof sa;
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 128) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) != 0 || set_nonblock(fd) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    *port = ntohs(sa.sin_port);
    return fd;
}

gl_peers *gl_peers_open(MPI_Comm world, const char *host, gl_peers_describe_fn fn,
                        void *ctx)
{
    const char *env = getenv("GRIDLM_PEER_CHANNEL");
    if (env && !strcmp(env, "0"))
        return NULL;
    gl_peers *p = gl_calloc(1, sizeof *p);
    if (MPI_Comm_dup(world, &p->comm) != MPI_SUCCESS)
        gl_die("MPI_Comm_dup for the side channel failed");
    MPI_Comm_rank(p->comm, &p->rank);
    MPI_Comm_size(p->comm, &p->size);
    p->listen_fd = p->succ_fd = p->pred_fd = -1;
    p->wake[0] = p->wake[1] = -1;
    p->describe = fn;
    p->describe_ctx = ctx;
    atomic_init(&p->stop_origin, -1);
    p->lost_rank = -1;
    atomic_init(&p->forwarded, 0);
    atomic_init(&p->dropped, 0);
    atomic_init(&p->closing, 0);
    pthread_mutex_init(&p->send_mu, NULL);
    read_small("/proc/self/comm", p->self_comm, sizeof p->self_comm);

    card me;
    memset(&me, 0, sizeof me);
    int port = 0;
    p->listen_fd = open_listener(&port);
    const char *why = p->listen_fd < 0 ? strerror(errno) : NULL;
    me.port = p->listen_fd >= 0 ? port : 0;
    me.naddr = own_addrs(me.addr);
    me.pid = (int64_t)getpid();
    me.token = p->rank == 0 ? random_token() : 0;
    snprintf(me.host, sizeof me.host, "%s", host ? host : "?");
    p->cards = gl_calloc((size_t)p->size, sizeof *p->cards);
    if (MPI_Allgather(&me, (int)sizeof me, MPI_BYTE, p->cards, (int)sizeof me, MPI_BYTE,
                      p->comm) != MPI_SUCCESS)
        gl_die("MPI_Allgather of the side channel's addresses failed");
    p->token = p->cards[0].token;

    if (pipe(p->wake) != 0) {
        gl_warn("the side channel cannot start (pipe: %s): stalled or dead peers will "
                "not be named", strerror(errno));
        close_fd(&p->listen_fd);
    }
    if (p->listen_fd >= 0) {
        /* the thread takes no signal: they go to the threads that work */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        int rc = pthread_create(&p->thread, NULL, service_main, p);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (rc != 0)
            gl_warn("the side channel cannot start its thread (%s): stalled or dead peers "
                    "will not be named", strerror(rc));
        else
            p->thread_up = 1;
    }
    int linked = p->size < 2 || connect_succ(p) == 0;
    /* One warning for the job, from rank 0, not one per rank: how many
     * ranks could not reach their successor, and the first of them. */
    int bad[2] = { !linked, linked ? p->size : p->rank }, sum[2];
    MPI_Allreduce(&bad[0], &sum[0], 1, MPI_INT, MPI_SUM, p->comm);
    MPI_Allreduce(&bad[1], &sum[1], 1, MPI_INT, MPI_MIN, p->comm);
    if (why)
        gl_warn("the side channel cannot listen (%s): if this rank stalls or dies, its "
                "peers will not name it", why);
    if (p->rank == 0 && sum[0] > 0) {
        int r = sum[1], s = (r + 1) % p->size;
        gl_warn("the side channel could not link %d of %d ranks to the next one (first: rank "
                "%d on %s to rank %d on %s, port %d): a rank that dies there is not "
                "named by its neighbour; set GRIDLM_SOCKET_IFNAME to the interface the "
                "hosts reach each other on", sum[0], p->size, r, p->cards[r].host, s,
                p->cards[s].host, (int)p->cards[s].port);
    }
    the_peers = p;
    next_abort = gl_log_get_abort();
    gl_log_set_abort(abort_hook);
    return p;
}

void gl_peers_close(gl_peers *p)
{
    if (!p)
        return;
    if (the_peers == p) {
        gl_log_set_abort(next_abort);
        the_peers = NULL;
    }
    /* Every rank says it is leaving before any rank closes a link: when
     * the first link ends, every neighbour is in the barrier already, or
     * past it, and takes no end for a death.  (A goodbye message alone
     * is not enough: a socket closed with unread data ends with a reset,
     * which may overtake it.) */
    ring_send(p, &p->succ_fd, M_BYE, NULL, 0);
    ring_send(p, &p->pred_fd, M_BYE, NULL, 0);
    atomic_store(&p->closing, 1);
    MPI_Barrier(p->comm);
    if (p->thread_up) {
        char c = 1;
        if (write(p->wake[1], &c, 1) < 0)
            gl_warn("the side channel: cannot wake its thread: %s", strerror(errno));
        pthread_join(p->thread, NULL);
    }
    for (int i = 0; i < p->npending; i++)
        if (p->pending[i].fd >= 0 && p->pending[i].fd != p->pred_fd)
            close(p->pending[i].fd);
    close_fd(&p->succ_fd);
    close_fd(&p->pred_fd);
    close_fd(&p->listen_fd);
    close_fd(&p->wake[0]);
    close_fd(&p->wake[1]);
    pthread_mutex_destroy(&p->send_mu);
    MPI_Comm_free(&p->comm);
    free(p->cards);
    free(p);
}

static void announce(gl_peers *p, int only_try)
{
    int none = -1;
    atomic_compare_exchange_strong(&p->stop_origin, &none, p->rank);
    if (atomic_exchange(&p->forwarded, 1))
        return;
    stop_note s = { p->rank, 0 };
    ring_send_how(p, &p->succ_fd, M_STOP, &s, sizeof s, only_try);
    ring_send_how(p, &p->pred_fd, M_STOP, &s, sizeof s, only_try);
}

void gl_peers_announce_stop(gl_peers *p)
{
    if (p)
        announce(p, 0);
}

void gl_peers_drop_links(gl_peers *p)
{
    if (!p)
        return;
    atomic_store(&p->dropped, 1);
    pthread_mutex_lock(&p->send_mu);
    if (p->succ_fd >= 0)
        shutdown(p->succ_fd, SHUT_RDWR);
    if (p->pred_fd >= 0)
        shutdown(p->pred_fd, SHUT_RDWR);
    pthread_mutex_unlock(&p->send_mu);
}

int gl_peers_stopping(const gl_peers *p, int *origin)
{
    int o = p ? atomic_load(&p->stop_origin) : -1;
    if (origin)
        *origin = o;
    return o >= 0;
}

const char *gl_peers_host(const gl_peers *p, int rank)
{
    return p && rank >= 0 && rank < p->size ? p->cards[rank].host : "?";
}

int gl_peers_rank(const gl_peers *p) { return p ? p->rank : -1; }
int gl_peers_size(const gl_peers *p) { return p ? p->size : 0; }

/* ---- probes ------------------------------------------------------------- */

typedef struct {
    int fd;
    int route[MAX_ADDRS + 1], nroute, at;   /* addresses to try, the one tried */
    int state;                  /* 0 connecting, 1 waiting for the answer, 2 done */
    int refused;                /* every address refused */
    size_t have;
    char buf[BUF_MAX];
} probe;

static void fill_answer(gl_peer_status *o, const answer *a)
{
    o->how = GL_PEER_ANSWERED;
    o->pid = (long)a->pid;
    o->group_seq = (long)a->group_seq;
    o->waiting = a->waiting;
    o->wait_seq = (long)a->wait_seq;
    o->wait_peer = a->wait_peer;
    o->wait_open_s = a->wait_open_s;
    o->idle_s = a->idle_s;
    o->last_seq = (long)a->last_seq;
    snprintf(o->wait_op, sizeof o->wait_op, "%.*s", (int)sizeof a->wait_op - 1, a->wait_op);
    snprintf(o->wait_group, sizeof o->wait_group, "%.*s", (int)sizeof a->wait_group - 1,
             a->wait_group);
    snprintf(o->last_op, sizeof o->last_op, "%.*s", (int)sizeof a->last_op - 1, a->last_op);
    snprintf(o->last_group, sizeof o->last_group, "%.*s", (int)sizeof a->last_group - 1,
             a->last_group);
}

/* Connect probe q to its next address; 0 when under way. */
static int probe_next(const gl_peers *p, int r, probe *q)
{
    while (q->at < q->nroute) {
        q->fd = start_connect(p, r, q->route[q->at++]);
        if (q->fd >= 0)
            return 0;
        if (errno != ECONNREFUSED)
            q->refused = 0;
    }
    return -1;
}

/* One batch of at most MAX_PROBE_FDS ranks, until the deadline. */
static void probe_batch(gl_peers *p, const int *ranks, int n, const query *qq,
                        double deadline, gl_peer_status *out)
{
    probe *q = gl_calloc((size_t)n, sizeof *q);
    struct pollfd *pf = gl_calloc((size_t)n, sizeof *pf);
    for (int i = 0; i < n; i++) {
        int r = ranks[i];
        q[i].fd = -1;
        q[i].refused = 1;
        if (r < 0 || r >= p->size || p->cards[r].port <= 0) {
            out[i].how = GL_PEER_NO_CHANNEL;
            q[i].state = 2;
            continue;
        }
        q[i].nroute = route(p, r, q[i].route);
        if (probe_next(p, r, &q[i]) != 0) {
            out[i].how = q[i].refused ? GL_PEER_GONE : GL_PEER_UNREACHABLE;
            q[i].state = 2;
        }
    }
    for (;;) {
        int live = 0;
        for (int i = 0; i < n; i++) {
            pf[i].fd = q[i].state == 2 ? -1 : q[i].fd;
            pf[i].events = q[i].state == 0 ? POLLOUT : POLLIN;
            pf[i].revents = 0;
            live += q[i].state != 2;
        }
        double left = deadline - gl_now();
        if (!live || left <= 0)
            break;
        int rc = poll(pf, (nfds_t)n, (int)(left * 1000) + 1);
        if (rc < 0 && errno != EINTR)
            break;
        for (int i = 0; i < n; i++) {
            if (q[i].state == 2 || !pf[i].revents)
                continue;
            int r = ranks[i];
            if (q[i].state == 0) {
                int err = 0;
                socklen_t len = sizeof err;
                getsockopt(q[i].fd, SOL_SOCKET, SO_ERROR, &err, &len);
                if (err == 0 && send_msg(p, q[i].fd, M_QUERY, qq, sizeof *qq) == 0) {
                    q[i].state = 1;
                    continue;
                }
                if (err != ECONNREFUSED)
                    q[i].refused = 0;
                close_fd(&q[i].fd);
                if (probe_next(p, r, &q[i]) != 0) {
                    out[i].how = q[i].refused ? GL_PEER_GONE : GL_PEER_UNREACHABLE;
                    q[i].state = 2;
                }
                continue;
            }
            ssize_t got = recv(q[i].fd, q[i].buf + q[i].have, BUF_MAX - q[i].have, 0);
            if (got < 0 && (errno == EAGAIN || errno == EINTR))
                continue;
            if (got > 0)
                q[i].have += (size_t)got;
            if (q[i].have >= sizeof(hdr) + sizeof(answer)) {
                hdr h;
                answer a;
                memcpy(&h, q[i].buf, sizeof h);
                memcpy(&a, q[i].buf + sizeof h, sizeof a);
                if (h.magic == MAGIC && h.token == p->token && h.type == M_ANSWER)
                    fill_answer(&out[i], &a);
                else
                    out[i].how = GL_PEER_SILENT;
                q[i].state = 2;
                close_fd(&q[i].fd);
            } else if (got <= 0) {
                /* it closed without answering: it is going down */
                out[i].how = GL_PEER_GONE;
                q[i].state = 2;
                close_fd(&q[i].fd);
            }
        }
    }
    for (int i = 0; i < n; i++) {
        if (q[i].state == 0)
            out[i].how = GL_PEER_UNREACHABLE;
        else if (q[i].state == 1)
            out[i].how = GL_PEER_SILENT;
        close_fd(&q[i].fd);
    }
    free(q);
    free(pf);
}

int gl_peers_probe(gl_peers *p, const int *ranks, int n, const char *group,
                   unsigned long long key, double timeout_s, gl_peer_status *out)
{
    query qq;
    memset(&qq, 0, sizeof qq);
    if (group) {
        snprintf(qq.group, sizeof qq.group, "%s", group);
        qq.key = key;
        qq.has_group = 1;
    }
    for (int i = 0; i < n; i++) {
        memset(&out[i], 0, sizeof out[i]);
        out[i].rank = ranks[i];
        out[i].how = GL_PEER_NO_CHANNEL;
        out[i].group_seq = -1;
        out[i].wait_peer = -1;
        if (p && ranks[i] >= 0 && ranks[i] < p->size)
            out[i].pid = (long)p->cards[ranks[i]].pid;
    }
    if (!p)
        return 0;
    double deadline = gl_now() + timeout_s;
    for (int b = 0; b < n; b += MAX_PROBE_FDS) {
        int m = n - b < MAX_PROBE_FDS ? n - b : MAX_PROBE_FDS;
        probe_batch(p, ranks + b, m, &qq, deadline, out + b);
    }
    int answered = 0;
    for (int i = 0; i < n; i++) {
        answered += out[i].how == GL_PEER_ANSWERED;
        if (ranks[i] >= 0 && ranks[i] < p->size && same_host(p, ranks[i]) && out[i].pid > 0)
            out[i].proc_state = proc_state(p, out[i].pid);
    }
    return answered;
}
