/*
 * mapped.h: the files gridlm maps into memory, and what happens when one
 * of them shrinks while it is mapped.
 *
 * Reading a page of a file mapping that lies beyond the file's current
 * end -- the file was truncated, or rewritten in place, by someone else
 * while the job reads it -- raises SIGBUS, whose default action kills
 * the process without a word.  Every mapping of a data file (datasets,
 * sample indices, safetensors) is registered here.  The first
 * registration installs a SIGBUS handler that, for a fault at an address
 * inside a registered mapping, prints one line naming the file, the byte
 * offset, the file's size when it was mapped and now, and what to do,
 * and then stops the whole job as gl_die() does (gl_die_in_signal: the
 * abort hook, which gl_boot_init() sets to MPI_Abort).  Other SIGBUS
 * faults, and SIGBUS sent with kill(), go to the handler that was there
 * before (Open MPI installs one) or get the default action, as if
 * gridlm's handler were not there.
 *
 * Registration and removal are thread-safe.  The handler reads the
 * registry without locks, as a signal handler must: slots are published
 * with atomic stores, paths are kept inside the slots, and slots are
 * never freed.  A path longer than GL_MAPPED_PATH_MAX - 1 bytes is kept
 * cut short.
 */
#ifndef GL_BASE_MAPPED_H
#define GL_BASE_MAPPED_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GL_MAPPED_PATH_MAX 1024

/* Register [addr, addr + len), a mapping of path from its byte 0. */
void gl_mapped_add(const void *addr, size_t len, const char *path);
/* Forget the mapping that starts at addr (call it before munmap). */
void gl_mapped_remove(const void *addr);

#ifdef __cplusplus
}
#endif
#endif
