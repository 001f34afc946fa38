/*
 * safetensors.h: reading and writing Hugging Face safetensors files.
 *
 * The format: an 8-byte little-endian header length N, N bytes of JSON
 * ({"name": {"dtype": "BF16", "shape": [..], "data_offsets": [b, e]}, ...,
 * "__metadata__": {"key": "text"}}), then the data, each tensor's bytes at
 * [b, e) counted from the end of the header, row-major, little-endian.
 * Files are checked on opening as the reference implementation checks
 * them: the header length lies within the file, the JSON is an object of
 * known dtypes and well-formed shapes, each tensor's byte range matches
 * its shape and lies within the data, and the ranges tile the data with
 * no overlap and no hole.  A bad file gets one message naming the file,
 * the tensor and the problem.
 *
 * A model directory holds model.safetensors, or shards listed by
 * model.safetensors.index.json ({"metadata": {"total_size": ...},
 * "weight_map": {"tensor": "model-00001-of-00002.safetensors", ...}}).
 *
 * Values convert to and from fp32: F32, BF16 and F16 read exactly; on
 * writing, fp32 narrows to BF16 or F16 with round-to-nearest-even (half.h).
 *
 * Errors: functions return 0, or -1 with the message in err (base/error.h).
 */
#ifndef GL_CKPT_SAFETENSORS_H
#define GL_CKPT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    GL_ST_BOOL = 0, GL_ST_U8, GL_ST_I8, GL_ST_F8_E5M2, GL_ST_F8_E4M3,
    GL_ST_I16, GL_ST_U16, GL_ST_F16, GL_ST_BF16,
    GL_ST_I32, GL_ST_U32, GL_ST_F32,
    GL_ST_I64, GL_ST_U64, GL_ST_F64,
    GL_ST_NDTYPES
} gl_st_dtype;

#define GL_ST_MAXDIM 8

/* "F32" etc., and back (-1 when unknown). */
const char *gl_st_dtype_name(gl_st_dtype t);
int gl_st_dtype_parse(const char *s);
size_t gl_st_dtype_size(gl_st_dtype t);

typedef struct gl_st_tensor {
    char *name;
    gl_st_dtype dtype;
    int ndim;
    long shape[GL_ST_MAXDIM];
    size_t nbytes;
    const unsigned char *data;   /* in the mapped file */
} gl_st_tensor;

typedef struct gl_st_file {
    char *path;
    void *map;
    size_t size;
    int n;                       /* tensors, in header order */
    gl_st_tensor *t;
    int nmeta;                   /* __metadata__ entries */
    char **meta_key, **meta_value;
} gl_st_file;

/* Map and check one file. */
int gl_st_open(const char *path, gl_st_file **out, gl_error *err);
void gl_st_close(gl_st_file *f);
const gl_st_tensor *gl_st_find(const gl_st_file *f, const char *name);
const char *gl_st_meta(const gl_st_file *f, const char *key);

/* Number of elements of a tensor. */
long gl_st_numel(const gl_st_tensor *t);

/* The values of an F32, BF16 or F16 tensor as fp32 into out (numel
 * floats); other dtypes are refused with a message naming the tensor. */
int gl_st_to_f32(const gl_st_tensor *t, float *out, gl_error *err);

/* One tensor to write: fp32 values stored as dtype (F32, BF16 or F16). */
typedef struct gl_st_out {
    const char *name;
    gl_st_dtype dtype;
    int ndim;
    long shape[GL_ST_MAXDIM];
    const float *data;
} gl_st_out;

/* Write one file (through PATH.tmp.XXXXXX and a rename, base/file.h);
 * meta is nmeta pairs of key, value (may be NULL). */
int gl_st_write(const char *path, const gl_st_out *t, int n,
                const char *const *meta, int nmeta, gl_error *err);

/* ---- model directories ---- */

/* Is name one of the weight files of a model directory
 * (model.safetensors, model-K-of-N.safetensors, the index)? */
int gl_st_is_model_file(const char *name);

typedef struct gl_st_model {
    char *dir;
    int nfiles;
    gl_st_file **files;
} gl_st_model;

/* Open DIR/model.safetensors, or every shard DIR/model.safetensors.index.json
 * names (checking that each tensor the index names is in its shard). */
int gl_st_model_open(const char *dir, gl_st_model **out, gl_error *err);
void gl_st_model_close(gl_st_model *m);
const gl_st_tensor *gl_st_model_find(const gl_st_model *m, const char *name);

/* Write tensors into DIR (created with its parents if missing): one
 * model.safetensors when they fit in max_shard_bytes (0: no limit), else
 * model-0000K-of-0000N.safetensors shards plus
 * model.safetensors.index.json.  Tensors stay in the order given; a
 * tensor larger than the limit gets a shard of its own.  DIR then holds
 * exactly this model's weight files: an older index is removed first (a
 * directory caught halfway never pairs it with new shards), and the
 * weight files of an earlier write that this one did not replace are
 * removed last, with one line saying which. */
int gl_st_model_write(const char *dir, const gl_st_out *t, int n,
                      size_t max_shard_bytes, const char *const *meta, int nmeta,
                      gl_error *err);

#ifdef __cplusplus
}
#endif
#endif
