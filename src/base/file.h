/*
 * file.h: the one way gridlm opens a file it is given to read, and the
 * one way it writes a file that someone will read later.
 *
 * Reading.  Whatever gridlm expects to read (a dataset's .idx and .bin,
 * a safetensors file, a tracker, tokenizer.json, a config JSON, an input
 * corpus) must be a regular file.  gl_file_open_read() refuses anything
 * else -- a FIFO, a device, a socket, a directory -- at once, with a
 * message that says what the path is, and never blocks on it: the type
 * is checked before the open, the open is O_NONBLOCK, and the type is
 * checked again on the descriptor.  Symbolic links ARE followed: data,
 * tokenizers and checkpoints legitimately live behind links.
 *
 * Writing.  A file appears under its final name whole or not at all:
 *
 *     gl_file_tmp *t = gl_file_tmp_create("dir/out.bin", 0, &err);
 *     ... write to gl_file_tmp_fd(t) or gl_file_tmp_stream(t) ...
 *     if (gl_file_tmp_publish(t, 0, &err) < 0) ...   (t is freed either way)
 *
 * The temporary is "FINAL.tmp.XXXXXX" (six random letters and digits)
 * beside the final name, created with O_CREAT|O_EXCL|O_NOFOLLOW: a file
 * or a symbolic link planted at that name is never opened, so a link's
 * target is never written.  Publishing fsyncs the file, renames it over
 * the final name (rename replaces a link there, it does not follow it)
 * and fsyncs the directory.  GL_FILE_NOREPLACE publishes only when no
 * file has the final name (for files that must never be overwritten).
 *
 * A temporary not yet published is removed when the process exits
 * (atexit), when it stops through gl_die() (before MPI_Abort), and on
 * SIGTERM, SIGINT and SIGHUP -- unless the program handles that signal
 * itself (train/faults.c's --exit-signal-handler): the handler is
 * installed, with the first temporary, only where the signal's action is
 * still the default, and it removes the files, restores the default and
 * raises the signal again.  Nothing survives a SIGKILL; so a writer that
 * starts calls gl_file_clean_temps() on the directory it writes, which
 * removes its own kind of leftovers and says so in one line.
 *
 * Every function that can fail fills err (base/error.h) and returns -1
 * (NULL for pointers).  No MPI and no CUDA here.
 */
#ifndef GL_BASE_FILE_H
#define GL_BASE_FILE_H

#include <stddef.h>
#include <stdio.h>

#include "base/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- reading ---- */

/* A descriptor (O_RDONLY, O_CLOEXEC, blocking) of regular file PATH. */
int gl_file_open_read(const char *path, gl_error *err);

/* The same as a stdio stream ("rb"). */
FILE *gl_file_fopen_read(const char *path, gl_error *err);

/* The whole of regular file PATH in a malloc'd buffer with a NUL after
 * the last byte (len, which may be NULL, does not count it). */
int gl_file_read_all(const char *path, char **buf, size_t *len, gl_error *err);

/* ---- directories ---- */

/* mkdir -p: DIR and its missing parents (mode 0777 less the umask).  An
 * existing directory, or a link to one, is fine; a component that exists
 * and is not a directory is an error naming it. */
int gl_file_mkdirs(const char *dir, gl_error *err);

/* The directory part of PATH ("." when it has none) into out. */
void gl_file_dirname(const char *path, char *out, size_t n);

/* Can this process create files in DIR?  Creates DIR (and parents) when
 * missing, then creates and removes one temporary file there: the error
 * is the one the first real write would get (read-only file system,
 * permission denied, no space, ...). */
int gl_file_check_writable(const char *dir, gl_error *err);

/* What gl_file_check_writable would find, with nothing created (a dry
 * run): every existing prefix of DIR must be a directory, the first
 * missing one must be creatable in its parent, and DIR, when it exists,
 * must accept a new file; the messages are gl_file_check_writable's.
 * Permission is judged by access(2), so it may pass where the real
 * check then fails (a full disk, a quota). */
int gl_file_check_creatable(const char *dir, gl_error *err);

/* ---- writing through a temporary file ---- */

typedef struct gl_file_tmp gl_file_tmp;

enum {
    /* gl_file_tmp_create: take no flock(2) on the temporary.  For a file
     * other processes write through descriptors of their own (MPI-IO):
     * on NFS a flock becomes a whole-file byte-range lock that would
     * block their writes.  Without the lock, gl_file_clean_temps cannot
     * tell that the temporary is in use. */
    GL_FILE_TMP_NOLOCK = 1,
    /* gl_file_tmp_publish: fail (EEXIST) rather than replace FINAL. */
    GL_FILE_NOREPLACE = 2
};

/* Create FINAL.tmp.XXXXXX, open for reading and writing, registered for
 * removal until it is published or discarded.  Unless GL_FILE_TMP_NOLOCK,
 * the temporary holds an exclusive flock while it is open, which tells a
 * concurrent gl_file_clean_temps that it is in use. */
gl_file_tmp *gl_file_tmp_create(const char *final, int flags, gl_error *err);

int gl_file_tmp_fd(const gl_file_tmp *t);
const char *gl_file_tmp_path(const gl_file_tmp *t);
const char *gl_file_tmp_final(const gl_file_tmp *t);

/* A stdio stream on the descriptor (made once, "w+"; fclose is the
 * publish's or the discard's job). */
FILE *gl_file_tmp_stream(gl_file_tmp *t);

/* Flush, fsync, rename to the final name (GL_FILE_NOREPLACE: only when
 * it is free), fsync the directory; frees t.  On failure the temporary
 * is removed, and err names the path and the cause ("No space left on
 * device", "... exists"). */
int gl_file_tmp_publish(gl_file_tmp *t, int flags, gl_error *err);

/* Close and remove the temporary; frees t (NULL allowed). */
void gl_file_tmp_discard(gl_file_tmp *t);

/* FINAL gets exactly len bytes of buf, through a temporary. */
int gl_file_write_all(const char *final, const void *buf, size_t len, int flags,
                      gl_error *err);

/* ---- leftovers ---- */

/* Remove the temporaries an earlier, killed writer left in DIR: regular
 * files of this user named FINAL.tmp, FINAL.tmp.SUFFIX or FINAL.tmp-SUFFIX
 * (SUFFIX letters, digits and '_'; the older gridlm spellings too) for
 * which ours(FINAL, arg) is true, except those a live writer holds
 * locked.  Links, directories and other names are left alone.  When it
 * removed any, prints one line on stdout naming DIR, what (e.g. "save"),
 * the count and the first names.  Returns the count. */
int gl_file_clean_temps(const char *dir, int (*ours)(const char *final, void *arg),
                        void *arg, const char *what, gl_error *err);

/* A predicate for gl_file_clean_temps: is final one of the names in the
 * NULL-terminated array of strings arg? */
int gl_file_name_in(const char *final, void *names);

/* For a line that names what was removed: append the count-th name
 * (counting from 0) to the list in buf, "a, b, c", then ", ..." once
 * after the third. */
void gl_file_list_name(char *buf, size_t n, int count, const char *name);

/* Remove every registered temporary of this process now (the atexit,
 * gl_die and signal paths call this; async-signal-safe). */
void gl_file_remove_temps(void);

#ifdef __cplusplus
}
#endif
#endif
