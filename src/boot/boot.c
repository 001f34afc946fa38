/* boot.c: MPI start, locality through PMIx or MPI, GPU choice (see boot.h). */
#include <config.h>
#include "boot/boot.h"
#include "base/log.h"
#include "device/ops.h"

#include <mpi.h>
#ifdef GL_HAVE_PMIX
#include <pmix.h>
#endif
#ifdef GL_HAVE_CUDA
#include <cuda_runtime.h>
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The ranks of this node, in world-rank order (both paths make one). */
static MPI_Comm node_comm = MPI_COMM_NULL;

#ifdef GL_HAVE_PMIX
static pmix_proc_t pmix_me;
static int pmix_up;
#endif

static void abort_job(int code)
{
    /* The launcher kills every rank as soon as the abort reaches it, and
     * MPICH's hydra can drop what this rank wrote just before: give the
     * error line a moment to be forwarded first. */
    struct timespec pause = { 0, 300 * 1000 * 1000 };
    fflush(stdout);
    fflush(stderr);
    nanosleep(&pause, NULL);
    MPI_Abort(MPI_COMM_WORLD, code ? code : 1);
    _exit(code ? code : 1);
}

/* ---- PMIx ------------------------------------------------------------ */

#ifdef GL_HAVE_PMIX
/* An unsigned integer value of key for proc (PMIX_RANK_WILDCARD for job
 * values), or -1 when the server does not know it. */
static long pmix_get_uint(pmix_rank_t rank, const char *key)
{
    pmix_proc_t p;
    pmix_value_t *v = NULL;
    pmix_info_t info;
    bool optional = true;
    long out = -1;

    PMIX_LOAD_PROCID(&p, pmix_me.nspace, rank);
    PMIX_INFO_LOAD(&info, PMIX_OPTIONAL, &optional, PMIX_BOOL);
    if (PMIx_Get(&p, key, &info, 1, &v) == PMIX_SUCCESS && v) {
        switch (v->type) {
        case PMIX_UINT8:  out = v->data.uint8; break;
        case PMIX_UINT16: out = v->data.uint16; break;
        case PMIX_UINT32: out = v->data.uint32; break;
        case PMIX_UINT64: out = (long)v->data.uint64; break;
        case PMIX_INT:    out = v->data.integer; break;
        case PMIX_UINT:   out = v->data.uint; break;
        case PMIX_SIZE:   out = (long)v->data.size; break;
        default: break;
        }
        PMIX_VALUE_RELEASE(v);
    }
    PMIX_INFO_DESTRUCT(&info);
    return out;
}

/* Connect to the launcher's PMIx server, when the environment names one
 * (a PMIx client outside any launcher would start as a singleton of size
 * 1, which is not the job).  Fills b's locality; returns 1 on success. */
static int pmix_locality(gl_boot *b, int mpi_rank, int mpi_size)
{
    if (!getenv("PMIX_NAMESPACE") && !getenv("PMIX_SERVER_URI41") &&
        !getenv("PMIX_SERVER_URI4") && !getenv("PMIX_SERVER_URI3") &&
        !getenv("PMIX_SERVER_URI2"))
        return 0;
    if (PMIx_Init(&pmix_me, NULL, 0) != PMIX_SUCCESS)
        return 0;
    pmix_up = 1;

    long job_size = pmix_get_uint(PMIX_RANK_WILDCARD, PMIX_JOB_SIZE);
    if (job_size > 0 && job_size != mpi_size) {
        /* Each process may be alone in its own MPI world: nothing
         * collective is possible, so PMIx rank 0 speaks and all leave. */
        if (pmix_me.rank == 0)
            fprintf(stderr, "%s: error: the launcher started %ld processes "
                    "but MPI sees a world of %d (rank %d): this MPI was built "
                    "without PMIx support; launch with `srun --mpi=pmi2` "
                    "(or the PMI your MPI supports) or use an MPI built with "
                    "PMIx\n", gl_log_program(), job_size, mpi_size, mpi_rank);
        fflush(stderr);
        /* Nobody leaves before rank 0 has said why: a launcher ends the
         * whole job at the first exit, which could otherwise come before
         * the message (the fence is the launcher's, so it spans the
         * separate MPI worlds; bounded, as this is the way out). */
        pmix_info_t info;
        int timeout = 10;
        PMIX_INFO_LOAD(&info, PMIX_TIMEOUT, &timeout, PMIX_INT);
        PMIx_Fence(NULL, 0, &info, 1);
        PMIx_Finalize(NULL, 0);
        exit(1);
    }
    if (job_size > 0 && (int)pmix_me.rank != mpi_rank)
        gl_die("PMIx rank %u differs from MPI rank %d: the launcher and MPI "
               "disagree on the job; set GRIDLM_BOOTSTRAP=mpi",
               pmix_me.rank, mpi_rank);

    long lrank = pmix_get_uint(pmix_me.rank, PMIX_LOCAL_RANK);
    long lsize = pmix_get_uint(PMIX_RANK_WILDCARD, PMIX_LOCAL_SIZE);
    long node = pmix_get_uint(pmix_me.rank, PMIX_NODEID);
    if (job_size < 0 || lrank < 0 || lsize < 1 || node < 0)
        return 0;   /* a server that lacks the keys: fall back to MPI */
    b->local_rank = (int)lrank;
    b->local_size = (int)lsize;
    b->node_id = (int)node;
    return 1;
}
#endif

void gl_boot_share(const gl_boot *b, void *data, size_t len)
{
#ifdef GL_HAVE_PMIX
    if (b->used_pmix) {
        static int serial;
        char key[64];
        pmix_status_t rc;
        snprintf(key, sizeof key, "gridlm.share.%d", serial++);
        if (b->rank == 0) {
            pmix_value_t v;
            PMIX_VALUE_CONSTRUCT(&v);
            v.type = PMIX_BYTE_OBJECT;
            v.data.bo.bytes = data;
            v.data.bo.size = len;
            if ((rc = PMIx_Put(PMIX_GLOBAL, key, &v)) != PMIX_SUCCESS)
                gl_die("PMIx_Put of %s failed: %s", key, PMIx_Error_string(rc));
            if ((rc = PMIx_Commit()) != PMIX_SUCCESS)
                gl_die("PMIx_Commit failed: %s", PMIx_Error_string(rc));
        }
        pmix_info_t info;
        bool collect = true;
        PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
        rc = PMIx_Fence(NULL, 0, &info, 1);
        PMIX_INFO_DESTRUCT(&info);
        if (rc != PMIX_SUCCESS)
            gl_die("PMIx_Fence failed: %s", PMIx_Error_string(rc));
        if (b->rank != 0) {
            pmix_proc_t root;
            pmix_value_t *v = NULL;
            PMIX_LOAD_PROCID(&root, pmix_me.nspace, 0);
            if ((rc = PMIx_Get(&root, key, NULL, 0, &v)) != PMIX_SUCCESS || !v)
                gl_die("PMIx_Get of %s from rank 0 failed: %s", key,
                       PMIx_Error_string(rc));
            if (v->type != PMIX_BYTE_OBJECT || v->data.bo.size != len)
                gl_die("PMIx_Get of %s: got %zu bytes of type %d, want %zu",
                       key, v->data.bo.size, (int)v->type, len);
            memcpy(data, v->data.bo.bytes, len);
            PMIX_VALUE_RELEASE(v);
        }
        return;
    }
#endif
    (void)b;
    if (MPI_Bcast(data, (int)len, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
        gl_die("MPI_Bcast of %zu bytes from rank 0 failed", len);
}

/* ---- MPI --------------------------------------------------------------- */

/* Node ids from host names: node i is the i-th distinct host in order of
 * the lowest rank on it, so ranks placed node by node get nodes 0, 1, ... */
static void mpi_node_ids(gl_boot *b)
{
    char *hosts = gl_malloc((size_t)b->size * sizeof b->host);
    MPI_Allgather(b->host, sizeof b->host, MPI_CHAR, hosts, sizeof b->host,
                  MPI_CHAR, MPI_COMM_WORLD);
    int nodes = 0;
    b->node_id = -1;
    for (int r = 0; r < b->size; r++) {
        const char *h = hosts + (size_t)r * sizeof b->host;
        int first = 1;
        for (int q = 0; q < r && first; q++)
            if (!strcmp(h, hosts + (size_t)q * sizeof b->host))
                first = 0;
        if (first) {
            if (!strcmp(h, b->host))
                b->node_id = nodes;
            nodes++;
        }
    }
    free(hosts);
}

void gl_boot_init(int *argc, char ***argv, gl_boot *b)
{
    int provided, inited = 0;
    memset(b, 0, sizeof *b);
    b->gpu = -1;
    MPI_Initialized(&inited);
    /* MULTIPLE: the asynchronous checkpoint writer and the watchdog make
     * MPI calls from their own threads.  An MPI that provides less still
     * runs; those two then fall back to the main thread (see ckpt.h). */
    if (!inited && MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
        fprintf(stderr, "%s: error: MPI_Init failed: check the MPI installation "
                "and the launcher (mpiexec, srun --mpi=...)\n", gl_log_program());
        exit(1);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &b->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &b->size);
    if (gethostname(b->host, sizeof b->host - 1) != 0)
        snprintf(b->host, sizeof b->host, "unknown");
    gl_log_set_rank(b->rank, b->host);
    gl_log_set_abort(abort_job);

    const char *mode = getenv("GRIDLM_BOOTSTRAP");
    if (mode && *mode && strcmp(mode, "mpi") && strcmp(mode, "pmix") && strcmp(mode, "auto"))
        gl_die("GRIDLM_BOOTSTRAP=%s: use pmix, mpi or auto", mode);
#ifdef GL_HAVE_PMIX
    /* Before anything collective: the size check may find that each
     * process is alone in its MPI world. */
    if (!mode || strcmp(mode, "mpi"))
        b->used_pmix = pmix_locality(b, b->rank, b->size);
#endif
    if (mode && !strcmp(mode, "pmix") && !b->used_pmix)
        gl_die("GRIDLM_BOOTSTRAP=pmix but no PMIx server answered%s: launch "
               "with srun --mpi=pmix or Open MPI's mpiexec, or unset it",
#ifdef GL_HAVE_PMIX
               ""
#else
               " (this build has no PMIx)"
#endif
               );

    if (b->used_pmix) {
        MPI_Comm_split(MPI_COMM_WORLD, b->node_id, b->rank, &node_comm);
        int r, n;
        MPI_Comm_rank(node_comm, &r);
        MPI_Comm_size(node_comm, &n);
        if (r != b->local_rank || n != b->local_size)
            gl_die("PMIx gives local rank %d of %d on node %d but MPI finds "
                   "rank %d of %d there; set GRIDLM_BOOTSTRAP=mpi",
                   b->local_rank, b->local_size, b->node_id, r, n);
    } else {
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, b->rank,
                            MPI_INFO_NULL, &node_comm);
        MPI_Comm_rank(node_comm, &b->local_rank);
        MPI_Comm_size(node_comm, &b->local_size);
        mpi_node_ids(b);
    }

    /* Number of nodes: count the distinct node ids. */
    int *ids = gl_malloc(sizeof(int) * (size_t)b->size);
    MPI_Allgather(&b->node_id, 1, MPI_INT, ids, 1, MPI_INT, MPI_COMM_WORLD);
    b->num_nodes = 0;
    for (int r = 0; r < b->size; r++) {
        int seen = 0;
        for (int q = 0; q < r && !seen; q++)
            seen = ids[q] == ids[r];
        b->num_nodes += !seen;
    }
    free(ids);

    if (getenv("GRIDLM_BOOT_DEBUG"))
        fprintf(stderr, "bootstrap: %s: rank %d of %d, local rank %d of %d, "
                "node %d of %d (%s)\n", b->used_pmix ? "pmix" : "mpi", b->rank,
                b->size, b->local_rank, b->local_size, b->node_id,
                b->num_nodes, b->host);
}

/* ---- GPU --------------------------------------------------------------- */

/* Visible CUDA devices; 0 without CUDA, driver or GPU. */
static int visible_gpus(const gl_boot *b)
{
#ifdef GL_HAVE_CUDA
    int n = 0;
    cudaError_t rc = cudaGetDeviceCount(&n);
    if (rc == cudaSuccess)
        return n;
    if (rc != cudaErrorNoDevice && rc != cudaErrorInsufficientDriver && b->local_rank == 0)
        gl_warn("cudaGetDeviceCount: %s (%s): running without a GPU",
                cudaGetErrorName(rc), cudaGetErrorString(rc));
    cudaGetLastError();
    return 0;
#else
    (void)b;
    return 0;
#endif
}

int gl_boot_pick_gpu(gl_boot *b)
{
    int n = visible_gpus(b), ordinal = -1;
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    b->gpu = -1;
    b->gpu_bus_id[0] = '\0';
    b->gpu_picked = 1;
    if (n > 0) {
        if (b->local_rank < n)
            ordinal = b->local_rank;
        else if (n == 1 && cvd && *cvd)
            ordinal = 0;   /* one GPU bound to each rank by the launcher */
        else
            gl_die("%d ranks on node %s but only %d GPUs visible "
                   "(CUDA_VISIBLE_DEVICES=%s): start at most %d ranks per node "
                   "(srun --ntasks-per-node=%d, mpiexec --map-by ppr:%d:node)",
                   b->local_size, b->host, n, cvd ? cvd : "unset", n, n, n);
    }
#ifdef GL_HAVE_CUDA
    if (ordinal >= 0) {
        cudaError_t rc = cudaSetDevice(ordinal);
        if (rc == cudaSuccess)
            rc = cudaDeviceGetPCIBusId(b->gpu_bus_id, sizeof b->gpu_bus_id, ordinal);
        if (rc != cudaSuccess)
            gl_die("cannot use GPU %d (local rank %d): %s (%s)", ordinal,
                   b->local_rank, cudaGetErrorName(rc), cudaGetErrorString(rc));
        b->gpu = ordinal;
    }
#else
    (void)ordinal;   /* no GPU can be opened without the CUDA back end */
#endif

    /* Two ranks of a node on one GPU would share its memory and serialise
     * their kernels: refuse. */
    int lsize;
    MPI_Comm_size(node_comm, &lsize);
    char *ids = gl_malloc((size_t)lsize * sizeof b->gpu_bus_id);
    MPI_Allgather(b->gpu_bus_id, sizeof b->gpu_bus_id, MPI_CHAR, ids,
                  sizeof b->gpu_bus_id, MPI_CHAR, node_comm);
    int lrank;
    MPI_Comm_rank(node_comm, &lrank);
    for (int q = 0; q < lsize; q++) {
        const char *other = ids + (size_t)q * sizeof b->gpu_bus_id;
        if (q != lrank && b->gpu_bus_id[0] && !strcmp(other, b->gpu_bus_id) && q < lrank)
            gl_die("local ranks %d and %d on %s both use GPU %s: give each "
                   "rank its own GPU (CUDA_VISIBLE_DEVICES, srun --gpu-bind)",
                   q, lrank, b->host, b->gpu_bus_id);
    }
    free(ids);
    return b->gpu;
}

void gl_boot_finalize(gl_boot *b)
{
    (void)b;
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) {
        if (node_comm != MPI_COMM_NULL)
            MPI_Comm_free(&node_comm);
        MPI_Finalize();
    }
#ifdef GL_HAVE_PMIX
    /* PMIx counts its users: this drops ours, MPI dropped its own. */
    if (pmix_up) {
        PMIx_Finalize(NULL, 0);
        pmix_up = 0;
    }
#endif
}

gl_dev *gl_boot_open_device(gl_boot *b, int want)
{
    if (want == GL_DEVICE_CPU)
        return gl_dev_open_cpu();
    if (!b->gpu_picked)
        gl_boot_pick_gpu(b);
    if (b->gpu < 0) {
        if (want == GL_DEVICE_AUTO)
            return gl_dev_open_cpu();
        gl_die_code(2, "--device cuda: no GPU is visible to this rank (check "
                    "CUDA_VISIBLE_DEVICES and the job's GPU request), or use --device cpu");
    }
    gl_dev *d = gl_dev_open_cuda(b->gpu);
    if (!d)
        gl_die_code(2, "--device cuda: this gridlm was built without CUDA (configure "
                    "--disable-cuda, or no CUDA found): use --device cpu, or rebuild with CUDA");
    return d;
}
