/*
 * tfevents.h: TensorBoard event files, written without TensorFlow,
 * Python or a protobuf library.
 *
 * An event file is a sequence of TFRecords, each holding one serialized
 * tensorflow.Event protocol buffer (tensorboard/compat/proto/event.proto
 * and summary.proto):
 *
 *     message Event   { double wall_time = 1; int64 step = 2;
 *                       oneof what { string file_version = 3;
 *                                    Summary summary = 5; ... } }
 *     message Summary { repeated Value value = 1; }
 *     message Value   { string tag = 1; oneof value { float simple_value = 2; ... } }
 *
 * and a TFRecord is
 *
 *     uint64 length (little-endian)
 *     uint32 masked CRC-32C of those 8 bytes
 *     byte   data[length]
 *     uint32 masked CRC-32C of the data
 *
 * with CRC-32C the Castagnoli CRC (reflected polynomial 0x82F63B78) and
 * mask(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8 (32-bit).  The
 * first record of a file is an Event with file_version "brain.Event:2";
 * every other record here is one scalar: an Event with wall_time, step
 * and a Summary of one Value (tag, simple_value), as TensorBoard's own
 * writers (torch.utils.tensorboard's add_scalar) write them.
 *
 * Files are named as TensorFlow names them,
 * DIR/events.out.tfevents.<unix seconds, 10 digits>.<hostname>, and created
 * with O_CREAT|O_EXCL|O_NOFOLLOW: an existing file or a planted symbolic
 * link is never opened, never overwritten.  Should that name be taken (a
 * second writer in the same second on the same host), ".1", ".2", ... up
 * to ".99" is appended.  DIR and its parents are created when missing.
 *
 * Events are buffered in memory: gl_tfevents_flush() writes them out, and
 * gl_tfevents_scalar() does so itself once queue_size events wait (as
 * TensorFlow's max_queue).  gl_tfevents_close() flushes.  TensorBoard
 * reads a file while it grows, so what is flushed is visible at once.
 *
 * Every function that can fail fills err (base/error.h) and returns -1
 * (NULL for pointers).  No MPI and no CUDA here.
 */
#ifndef GL_BASE_TFEVENTS_H
#define GL_BASE_TFEVENTS_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the writer ---- */

typedef struct gl_tfevents gl_tfevents;

/* Create a new event file in dir (made when missing), write its
 * file_version record and flush it.  queue_size (>= 1) is how many
 * events may wait in memory before they are written. */
gl_tfevents *gl_tfevents_open(const char *dir, int queue_size, gl_error *err);

/* The path of the file. */
const char *gl_tfevents_path(const gl_tfevents *w);

/* Queue one scalar event (now as wall time); writes the queue out when it
 * holds queue_size events. */
int gl_tfevents_scalar(gl_tfevents *w, const char *tag, int64_t step, double value,
                       gl_error *err);

/* Write the queued events to the file. */
int gl_tfevents_flush(gl_tfevents *w, gl_error *err);

/* Flush, close and free (w may be NULL).  Returns -1 when the flush or
 * the close failed; w is freed either way. */
int gl_tfevents_close(gl_tfevents *w, gl_error *err);

/* ---- the encoding (pure; for the writer and its tests) ---- */

/* CRC-32C of n bytes (initial value and final xor 0xFFFFFFFF, so
 * gl_crc32c("123456789", 9) = 0xE3069283). */
uint32_t gl_crc32c(const void *buf, size_t n);

/* The TFRecord mask of a CRC. */
uint32_t gl_tfrecord_mask(uint32_t crc);

/* Bytes a TFRecord adds around its data: 8 + 4 before, 4 after. */
#define GL_TFRECORD_OVERHEAD 16

/* Frame n bytes of data as one TFRecord into out, which must hold
 * n + GL_TFRECORD_OVERHEAD bytes; returns the bytes written. */
size_t gl_tfrecord_frame(unsigned char *out, const void *data, size_t n);

/* Serialize an Event into out (cap bytes).  A scalar event when tag is
 * not NULL (step, Summary{Value{tag, simple_value = value}}), else the
 * file_version event ("brain.Event:2", no step).  A zero step is left
 * out, as proto3 leaves out default values.  Returns the length, or 0
 * when it would not fit in cap. */
size_t gl_tfevents_encode(unsigned char *out, size_t cap, double wall_time, int64_t step,
                          const char *tag, float value);

#ifdef __cplusplus
}
#endif
#endif
