/*
 * json.h: typed reads of a JSON object's members (jansson), for the
 * configuration texts gridlm writes itself, such as a checkpoint's
 * "config" attribute.
 *
 * A member that is absent or null gives the caller's default.  One of
 * the wrong type (a string where a number belongs, a real number where
 * an integer does, an integer too large for an int) gives the default
 * too, and records the first such problem in the reader's err, naming
 * the key and what it holds:
 *
 *     "num_layers" is a string, not an integer
 *
 * so a caller reads every field in a row and checks err[0] once, adding
 * which file it was.
 *
 * Also the one way to parse a JSON file (gl_json_load): config.json,
 * tokenizer.json, a safetensors index.
 *
 * No MPI and no CUDA here.
 */
#ifndef GL_BASE_JSON_H
#define GL_BASE_JSON_H

#include <jansson.h>

#include "base/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gl_json_reader {
    json_t *obj;                /* the object read (borrowed) */
    char err[160];              /* the first problem; "" while there is none */
} gl_json_reader;

/* A reader of obj (which may be any JSON value, or NULL: a non-object
 * has no members, so every read gives its default). */
void gl_json_reader_init(gl_json_reader *r, json_t *obj);

/* An integer member. */
long gl_json_long(gl_json_reader *r, const char *key, long dflt);

/* An integer member that must fit an int. */
int gl_json_int(gl_json_reader *r, const char *key, int dflt);

/* A number member: an integer or a real. */
double gl_json_num(gl_json_reader *r, const char *key, double dflt);

/* A flag member: true or false, or an integer (nonzero is true). */
int gl_json_bool(gl_json_reader *r, const char *key, int dflt);

/* Parse regular file PATH (read through base/file.h: a FIFO or a device
 * is refused, never waited on) with jansson's flags.  NULL with err on
 * failure: the file's problem, or "PATH is not valid JSON (WHAT at line
 * L, column C)". */
json_t *gl_json_load(const char *path, size_t flags, gl_error *err);

#ifdef __cplusplus
}
#endif
#endif
