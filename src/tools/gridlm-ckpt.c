/*
 * gridlm-ckpt: look into gridlm checkpoints and convert them to and from
 * Hugging Face Llama directories (doc/gridlm-ckpt.1).
 *
 *   gridlm-ckpt info [--no-verify] FILE|DIR
 *   gridlm-ckpt import-hf [--make-vocab-size-divisible-by N] HF_DIR OUT
 *   gridlm-ckpt export-hf [--dtype bf16|fp16|fp32] [--max-shard-size SIZE] FILE|DIR OUT_DIR
 *
 * One process; MPI is initialised because checkpoints are written through
 * MPI-IO (on MPI_COMM_SELF), so it runs as a singleton or under mpiexec -n 1.
 */
#include <config.h>
#include "base/log.h"
#include "ckpt/ckpt.h"
#include "ckpt/hf.h"
#include "ckpt/safetensors.h"

#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One process, and MPI is healthy when a file is bad: leave quietly
 * rather than through MPI_Abort's banner. */
static void finish_and_exit(int code)
{
    MPI_Finalize();
    exit(code);
}

static void usage(FILE *f)
{
    fprintf(f,
        "Usage: gridlm-ckpt info [--no-verify] FILE|DIR\n"
        "       gridlm-ckpt import-hf [--make-vocab-size-divisible-by N] [--quiet]\n"
        "                             HF_DIR OUT\n"
        "       gridlm-ckpt export-hf [--dtype bf16|fp16|fp32] [--max-shard-size SIZE]\n"
        "                             FILE|DIR OUT_DIR\n"
        "\n"
        "info       the iteration, attributes (configuration, counters) and the\n"
        "           tensor table of a checkpoint, each tensor's checksum verified\n"
        "import-hf  a Hugging Face LlamaForCausalLM, Qwen2ForCausalLM,\n"
        "           Qwen3ForCausalLM or GPT2LMHeadModel directory (config.json and\n"
        "           safetensors, one file or shards with their index) into a\n"
        "           gridlm checkpoint file OUT, or OUT/iter_0000000.h5 and its\n"
        "           tracker when OUT is a directory\n"
        "export-hf  a checkpoint's model weights into OUT_DIR as config.json and\n"
        "           safetensors that transformers loads (default bf16, 5GB shards)\n");
}

/* "5GB", "500MB", "123" (bytes); 0 on a bad value. */
static size_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || v <= 0)
        return 0;
    if (!strcasecmp(end, "GB") || !strcasecmp(end, "G"))
        v *= 1e9;
    else if (!strcasecmp(end, "MB") || !strcasecmp(end, "M"))
        v *= 1e6;
    else if (!strcasecmp(end, "KB") || !strcasecmp(end, "K"))
        v *= 1e3;
    else if (*end)
        return 0;
    return (size_t)v;
}

static const char *shape_text(const gl_ckpt_info *in, char *buf, size_t n)
{
    if (in->ndim == 2)
        snprintf(buf, n, "[%ld, %ld]", in->shape[0], in->shape[1]);
    else
        snprintf(buf, n, "[%ld]", in->shape[0]);
    return buf;
}

static int info(const char *path, int verify)
{
    gl_ckpt *ck;
    gl_error err;
    int rc = gl_ckpt_open(MPI_COMM_SELF, path, 0, &ck, &err);
    if (rc != GL_CKPT_OK)
        gl_die("%s", err.text);
    int n = gl_ckpt_ntensors(ck);
    int *bad = gl_calloc(n ? n : 1, sizeof *bad);
    int verified = verify && gl_ckpt_verify(ck, MPI_COMM_SELF, bad, &err) == GL_CKPT_OK;
    int nbad = 0;
    for (int i = 0; verify && i < n; i++)
        nbad += bad[i];

    printf("checkpoint: %s\n", gl_ckpt_path(ck));
    printf("iteration:  %ld\n", gl_ckpt_iteration(ck));
    int na = gl_ckpt_nattrs(ck);
    printf("attributes: %d\n", na);
    for (int i = 0; i < na; i++) {
        char *k, *v;
        if (gl_ckpt_attr_text(ck, i, &k, &v, NULL) != GL_CKPT_OK)
            continue;
        /* Multi-line values (JSON) are indented under their key. */
        printf("  %s = ", k);
        for (const char *p = v; *p; p++) {
            putchar(*p);
            if (*p == '\n' && p[1])
                fputs("      ", stdout);
        }
        putchar('\n');
        free(k);
        free(v);
    }
    double elems = 0;
    size_t w = 4;
    for (int i = 0; i < n; i++) {
        const gl_ckpt_info *in = gl_ckpt_tensor_info(ck, i);
        elems += in->ndim == 2 ? (double)in->shape[0] * in->shape[1] : (double)in->shape[0];
        if (strlen(in->name) > w)
            w = strlen(in->name);
    }
    printf("tensors:    %d, %.0f elements, %.3f GB as fp32\n", n, elems, elems * 4 / 1e9);
    printf("  %-*s  %-16s  %-5s  %-18s  %s\n", (int)w, "name", "shape", "dtype",
           "checksum", verify ? "verified" : "(not verified)");
    for (int i = 0; i < n; i++) {
        const gl_ckpt_info *in = gl_ckpt_tensor_info(ck, i);
        char sb[64];
        printf("  %-*s  %-16s  %-5s  %016llx    %s\n", (int)w, in->name,
               shape_text(in, sb, sizeof sb), "fp32", (unsigned long long)in->checksum,
               !verify ? "-" : bad[i] ? "BAD" : "ok");
    }
    if (verify && !verified)
        gl_warn("%s", err.text);
    else if (verify)
        printf("all %d checksums verified\n", n);
    free(bad);
    gl_ckpt_close(ck);
    return verify && nbad ? 1 : 0;
}

int main(int argc, char **argv)
{
    gl_log_set_program(argv[0]);
    MPI_Init(&argc, &argv);
    gl_log_set_abort(finish_and_exit);
    int rc = 0;
    const char *cmd = argc > 1 ? argv[1] : "";
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        usage(stdout);
    } else if (!strcmp(cmd, "--version")) {
        printf("gridlm-ckpt %s\n", PACKAGE_VERSION);
    } else if (!strcmp(cmd, "info")) {
        int verify = 1, i = 2;
        if (i < argc && !strcmp(argv[i], "--no-verify"))
            verify = 0, i++;
        if (argc - i != 1)
            gl_die_code(2, "info takes one checkpoint file or directory (see --help)");
        rc = info(argv[i], verify);
    } else if (!strcmp(cmd, "import-hf")) {
        int div = 128, quiet = 0, i = 2;
        for (; i < argc && !strncmp(argv[i], "--", 2); i++) {
            if (!strcmp(argv[i], "--make-vocab-size-divisible-by") && i + 1 < argc) {
                div = atoi(argv[++i]);
                if (div < 1)
                    gl_die_code(2, "--make-vocab-size-divisible-by %s: give a positive "
                                "integer", argv[i]);
            } else if (!strcmp(argv[i], "--quiet")) {
                quiet = 1;
            } else {
                gl_die_code(2, "import-hf: unknown option %s (see --help)", argv[i]);
            }
        }
        if (argc - i != 2)
            gl_die_code(2, "import-hf takes HF_DIR and OUT (see --help)");
        gl_error err;
        if (gl_hf_import(argv[i], argv[i + 1], div, quiet, &err) != 0)
            gl_die("%s", err.text);
    } else if (!strcmp(cmd, "export-hf")) {
        gl_st_dtype dt = GL_ST_BF16;
        size_t shard = 5000000000UL;
        int i = 2;
        for (; i < argc && !strncmp(argv[i], "--", 2); i++) {
            if (!strcmp(argv[i], "--dtype") && i + 1 < argc) {
                const char *d = argv[++i];
                dt = !strcmp(d, "bf16") ? GL_ST_BF16 : !strcmp(d, "fp16") ? GL_ST_F16
                   : !strcmp(d, "fp32") ? GL_ST_F32 : GL_ST_NDTYPES;
                if (dt == GL_ST_NDTYPES)
                    gl_die_code(2, "--dtype %s: give bf16, fp16 or fp32", d);
            } else if (!strcmp(argv[i], "--max-shard-size") && i + 1 < argc) {
                shard = parse_size(argv[++i]);
                if (!shard)
                    gl_die_code(2, "--max-shard-size %s: give a size such as 5GB, "
                                "500MB or a byte count", argv[i]);
            } else {
                gl_die_code(2, "export-hf: unknown option %s (see --help)", argv[i]);
            }
        }
        if (argc - i != 2)
            gl_die_code(2, "export-hf takes a checkpoint and OUT_DIR (see --help)");
        gl_error err;
        if (gl_hf_export(argv[i], argv[i + 1], dt, shard, 0, &err) != 0)
            gl_die("%s", err.text);
    } else {
        usage(stderr);
        gl_die_code(2, "%s%s: give info, import-hf or export-hf", *cmd ? "unknown command " : "no command", cmd);
    }
    MPI_Finalize();
    return rc;
}
