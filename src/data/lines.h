/*
 * lines.h: read a text corpus line by line, streaming, from a plain,
 * gzip (.gz) or zstd (.zst) file, or from standard input ("-").  The
 * compression is recognised by the file's magic bytes, not its name.
 * Memory is one buffer of the longest line plus the decompressor's.
 * Errors (unreadable, corrupt stream) stop the job naming the file.
 */
#ifndef GL_DATA_LINES_H
#define GL_DATA_LINES_H

#include <stddef.h>
#include <stdint.h>

typedef struct gl_lines gl_lines;

gl_lines *gl_lines_open(const char *path);
/* The next line without its "\n" (and "\r\n"'s "\r"); 0 at the end.
 * *line stays valid until the next call. */
int gl_lines_next(gl_lines *r, const char **line, size_t *len);
/* 1-based number of the line last returned. */
long gl_lines_number(const gl_lines *r);
/* Uncompressed bytes returned so far, newlines included. */
uint64_t gl_lines_bytes(const gl_lines *r);
const char *gl_lines_path(const gl_lines *r);
void gl_lines_close(gl_lines *r);

#endif
