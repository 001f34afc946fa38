/* ckpt_dir.c: checkpoint file names, the tracker file, the checkpoints a
 * directory holds, and the leftovers of killed saves (see ckpt.h). */
#include <config.h>
#include "ckpt/ckpt.h"
#include "base/file.h"
#include "base/log.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void gl_ckpt_file_name(char *buf, size_t n, const char *dir, long iteration)
{
    snprintf(buf, n, "%s/iter_%07ld.h5", dir, iteration);
}

/* Why the tracker cannot be read, when its name is there: a link to
 * nothing says so (the directory it pointed into may be unmounted). */
static int tracker_unreadable(const char *path, const char *why, gl_error *err)
{
    char target[PATH_MAX];
    struct stat st;
    ssize_t n = readlink(path, target, sizeof target - 1);
    if (n > 0 && stat(path, &st) != 0) {
        target[n] = '\0';
        return gl_errprintf(err, "%s is a link to %s, which does not exist", path, target);
    }
    return gl_errprintf(err, "%s", why);
}

/* Megatron's tracker holds the iteration as text, maybe with a newline. */
int gl_ckpt_read_tracker(const char *dir, long *iteration, gl_error *err)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, GL_CKPT_TRACKER);
    struct stat st;
    if (lstat(path, &st) != 0 && (errno == ENOENT || errno == ENOTDIR))
        return GL_CKPT_NONE;
    char *text;
    size_t len;
    gl_error fe;
    if (gl_file_read_all(path, &text, &len, &fe) < 0) {
        tracker_unreadable(path, fe.text, err);
        return GL_CKPT_ERR;
    }
    char *end;
    errno = 0;
    long it = strtol(text, &end, 10);
    while (isspace((unsigned char)*end))
        end++;
    int bad = end == text || *end || errno || it < 0 || strlen(text) != len;
    if (bad) {
        int shown = (int)strcspn(text, "\r\n");
        const char *rest = text + shown;
        while (isspace((unsigned char)*rest))
            rest++;
        gl_errprintf(err, "%s does not hold an iteration number (\"%.*s%s\")", path,
                     shown > 20 ? 20 : shown, text, shown > 20 || *rest ? "..." : "");
    }
    free(text);
    if (bad)
        return GL_CKPT_ERR;
    *iteration = it;
    return GL_CKPT_OK;
}

/* "iter_" followed by digits and ".h5", nothing else (no .tmp suffix). */
static int parse_name(const char *name, long *it)
{
    if (strncmp(name, "iter_", 5) != 0)
        return 0;
    const char *p = name + 5;
    if (!isdigit((unsigned char)*p))
        return 0;
    char *end;
    long v = strtol(p, &end, 10);
    if (strcmp(end, ".h5") != 0)
        return 0;
    *it = v;
    return 1;
}

static int descending(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

int gl_ckpt_list(const char *dir, long **iterations)
{
    *iterations = NULL;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0, cap = 0;
    long it;
    struct dirent *e;
    while ((e = readdir(d)))
        if (parse_name(e->d_name, &it)) {
            if (n == cap)
                *iterations = gl_realloc(*iterations, (size_t)(cap = cap ? 2 * cap : 16) *
                                         sizeof **iterations);
            (*iterations)[n++] = it;
        }
    closedir(d);
    if (n)
        qsort(*iterations, (size_t)n, sizeof **iterations, descending);
    return n;
}

/* The kind of Megatron-LM files the directory SUB holds: ".distcp"
 * (torch_dist) or "mp_rank_*" (legacy torch), or NULL. */
static const char *megatron_files(const char *sub)
{
    DIR *d = opendir(sub);
    if (!d)
        return NULL;
    const char *kind = NULL;
    struct dirent *e;
    while (!kind && (e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len > 7 && !strcmp(e->d_name + len - 7, ".distcp"))
            kind = ".distcp";
        else if (!strncmp(e->d_name, "mp_rank_", 8))
            kind = "mp_rank_*";
    }
    closedir(d);
    return kind;
}

int gl_ckpt_is_megatron(const char *dir, char *what, size_t n)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int found = 0;
    struct dirent *e;
    while (!found && (e = readdir(d))) {
        if (strncmp(e->d_name, "iter_", 5) && strcmp(e->d_name, "release"))
            continue;
        char sub[PATH_MAX];
        snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name);
        const char *kind = megatron_files(sub);
        if (kind) {
            snprintf(what, n, "%s/ holds %s files", e->d_name, kind);
            found = 1;
        }
    }
    closedir(d);
    return found;
}

char *gl_ckpt_previous(const char *dir, long below)
{
    long *its;
    int n = gl_ckpt_list(dir, &its);
    char path[PATH_MAX], *out = NULL;
    for (int i = 0; i < n && !out; i++)
        if (its[i] < below) {
            gl_ckpt_file_name(path, sizeof path, dir, its[i]);
            out = gl_strdup(path);
        }
    free(its);
    return out;
}

/* The names a save writes in its directory: the checkpoints, the
 * tracker, and the probe of gl_file_check_writable. */
static int save_name(const char *final, void *arg)
{
    long it;
    (void)arg;
    return parse_name(final, &it) || !strcmp(final, GL_CKPT_TRACKER) ||
           !strcmp(final, ".gridlm-write-test");
}

int gl_ckpt_clean_temps(const char *dir, gl_error *err)
{
    return gl_file_clean_temps(dir, save_name, NULL, "save", err);
}
