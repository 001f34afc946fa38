/*
 * lines.h: read a text corpus line by line, streaming, from a plain,
 * gzip or zstd file, or from standard input ("-").  The compression is
 * recognised by the first bytes of the stream, not by the file's name,
 * so compressed standard input works too.  Memory is one buffer of the
 * longest line plus the decompressor's.
 *
 * Compressed input is read to its verified end, or not at all:
 *   gzip  every member, one after another (concatenated .gz files), each
 *         to its trailer, whose CRC-32 and length must match the data;
 *   zstd  every frame, one after another, skippable frames skipped; each
 *         frame must be complete (its last block, and its checksum when
 *         the frame has one, which must match; a frame without checksum
 *         can only be checked for completeness and for its declared
 *         content size, when it declares one).
 * A stream that ends inside a member or frame (a file cut short, a
 * download that stopped), fails a check, or carries bytes after its last
 * member or frame (gzip's zero padding included: it cannot be told from a
 * member that was lost) is an error that names the file and the byte
 * offset in it where the stream broke.  The lines returned before an
 * error must then be thrown away: callers write nothing final.
 */
#ifndef GL_DATA_LINES_H
#define GL_DATA_LINES_H

#include <stddef.h>
#include <stdint.h>
#include "base/error.h"

typedef struct gl_lines gl_lines;

/* Open a file, or "-" for standard input.  A file that cannot be opened
 * or read stops the job, naming it. */
gl_lines *gl_lines_open(const char *path);
/* The next line without its "\n" (and "\r\n"'s "\r"): 1 with a line;
 * 0 at the verified end of the input; -1 when the input is broken, with
 * err filled (the file, the byte offset, what is wrong, what to do).
 * *line stays valid until the next call.  After -1, every later call
 * returns -1 again with the same error. */
int gl_lines_next(gl_lines *r, const char **line, size_t *len, gl_error *err);
/* 1-based number of the line last returned. */
long gl_lines_number(const gl_lines *r);
/* Uncompressed bytes returned so far, newlines included. */
uint64_t gl_lines_bytes(const gl_lines *r);
const char *gl_lines_path(const gl_lines *r);
void gl_lines_close(gl_lines *r);

#endif
