/* ckpt_dir.c: checkpoint file names, the tracker file, and finding the
 * previous checkpoint in a directory (see ckpt.h). */
#include <config.h>
#include "ckpt/ckpt.h"
#include "base/log.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void gl_ckpt_file_name(char *buf, size_t n, const char *dir, long iteration)
{
    snprintf(buf, n, "%s/iter_%07ld.h5", dir, iteration);
}

/* Megatron's tracker holds the iteration as text, maybe with a newline. */
int gl_ckpt_read_tracker(const char *dir, long *iteration)
{
    char path[4096], text[64];
    snprintf(path, sizeof path, "%s/%s", dir, GL_CKPT_TRACKER);
    FILE *f = fopen(path, "r");
    if (!f)
        return errno == ENOENT || errno == ENOTDIR ? GL_CKPT_NONE : GL_CKPT_ERR;
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    char *end;
    errno = 0;
    long it = strtol(text, &end, 10);
    while (isspace((unsigned char)*end))
        end++;
    if (end == text || *end || errno || it < 0)
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

char *gl_ckpt_previous(const char *dir, long below)
{
    DIR *d = opendir(dir);
    if (!d)
        return NULL;
    long best = -1, it;
    struct dirent *e;
    while ((e = readdir(d)))
        if (parse_name(e->d_name, &it) && it < below && it > best)
            best = it;
    closedir(d);
    if (best < 0)
        return NULL;
    char path[4096];
    gl_ckpt_file_name(path, sizeof path, dir, best);
    return gl_strdup(path);
}
