/*
 * dp_wire.h - the messages between the data-parallel front end and its
 * engine processes (over ZeroMQ, dp_client.h / dp_engine.h).
 *
 * Framing: one ZeroMQ message per record, compact binary: a one-byte type,
 * then fields in the machine's byte order (int32/int64/double as in memory,
 * strings and arrays as a u32 length then the bytes). Structs of plain
 * numbers (vllm_scheduler_stats, most of vllm_sampling_params) travel as
 * their bytes, so both ends must be the same vllmc build: the HELLO carries
 * DP_WIRE_VERSION and the struct sizes, and a mismatch is refused by name.
 *
 *   HELLO   engine -> front end   engine index, pid, engine info, default
 *                                 sampling params (once, after the engine
 *                                 is built)
 *   ADD     front end -> engine   request id, prompt token ids, sampling
 *                                 params (with their arrays), priority,
 *                                 cache salt, structured outputs, LoRA
 *                                 adapter name, kv_transfer_params' remote
 *                                 host and port
 *   ABORT   front end -> engine   request id
 *   STOP    front end -> engine   request id, sequence index
 *   PING    front end -> engine   nothing (liveness probe; ignored)
 *   LORA    front end -> engine   sequence number, load or unload, adapter
 *                                 name and path (runtime LoRA updates, sent
 *                                 to every engine)
 *   REPLY   engine -> front end   the LORA's sequence number, its status
 *                                 and error message
 *   OUTPUT  engine -> front end   the number of ADDs received so far, one
 *                                 vllm_step_output (every pointer field
 *                                 serialized), whether a step ran
 *
 * Readers check every length against what is left of the message: a short
 * or corrupt message is an error naming the field, never a read past the end.
 */
#ifndef VLLM_DIST_DP_WIRE_H
#define VLLM_DIST_DP_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vllm/vllm.h"

#define DP_WIRE_VERSION 2            /* 2: ADD carries lora_name and kv_remote_host/port */

typedef enum dp_msg_type {
    DP_MSG_HELLO = 'H',
    DP_MSG_ADD = 'A',
    DP_MSG_ABORT = 'X',
    DP_MSG_STOP = 'S',
    DP_MSG_PING = 'P',
    DP_MSG_OUTPUT = 'O',
    DP_MSG_LORA = 'L',
    DP_MSG_REPLY = 'R',
} dp_msg_type;

/* A message being written: a growable byte buffer. oom latches. */
typedef struct dp_wire_writer {
    uint8_t *data;
    size_t len, cap;
    bool oom;
} dp_wire_writer;

/* A message being read. bad latches (the first field that did not fit). */
typedef struct dp_wire_reader {
    const uint8_t *p;
    size_t left;
    const char *bad;
} dp_wire_reader;

void dp_wire_reset(dp_wire_writer *w);
void dp_wire_free(dp_wire_writer *w);
void dp_wire_put(dp_wire_writer *w, const void *src, size_t n);
void dp_wire_i32(dp_wire_writer *w, int32_t v);
void dp_wire_str(dp_wire_writer *w, const char *s); /* NULL travels as absent */

bool dp_wire_get(dp_wire_reader *r, void *dst, size_t n, const char *what);
int32_t dp_wire_get_i32(dp_wire_reader *r, const char *what);
/* A string as written by dp_wire_str: points into the message (NUL included); NULL if absent. */
const char *dp_wire_get_str(dp_wire_reader *r, const char *what);
/* n elements of size bytes, in place (the message's bytes; may be unaligned: memcpy them). */
const void *dp_wire_get_array(dp_wire_reader *r, size_t size, int32_t *n, const char *what);

/* The engine info and defaults an engine announces. */
typedef struct dp_hello {
    int32_t engine_index;
    int32_t pid;
    vllm_engine_info info;           /* its string fields point into storage below */
    vllm_sampling_params defaults;   /* array pointers NULL */
    char kv_cache_dtype[32], kv_cache_storage_dtype[32];
} dp_hello;

void dp_wire_hello(dp_wire_writer *w, int32_t engine_index, const vllm_engine_info *info,
                   const vllm_sampling_params *defaults);
vllm_status dp_wire_read_hello(const void *msg, size_t len, dp_hello *out);

/* One request's ADD. */
typedef struct dp_add {
    const char *request_id;
    const int32_t *prompt_ids;
    int32_t num_prompt_ids;
    const vllm_sampling_params *sp;
    vllm_request_opts opts;          /* structured_outputs strings NUL-terminated */
} dp_add;

void dp_wire_add(dp_wire_writer *w, const dp_add *a);
/* Decodes into *out; arrays are copied into scratch (owned by the caller,
 * reused across calls) so they are aligned. */
typedef struct dp_add_scratch {
    vllm_sampling_params sp;
    int32_t *ints;
    size_t cap_ints;
} dp_add_scratch;
vllm_status dp_wire_read_add(const void *msg, size_t len, dp_add_scratch *s, dp_add *out);

void dp_wire_id(dp_wire_writer *w, dp_msg_type type, const char *request_id, int32_t index);
vllm_status dp_wire_read_id(const void *msg, size_t len, const char **request_id, int32_t *index);

/* LORA and its REPLY. Strings point into the message. */
void dp_wire_lora(dp_wire_writer *w, uint64_t seq, bool load, const char *name, const char *path);
vllm_status dp_wire_read_lora(const void *msg, size_t len, uint64_t *seq, bool *load, const char **name,
                              const char **path);
void dp_wire_reply(dp_wire_writer *w, uint64_t seq, vllm_status status, const char *error);
vllm_status dp_wire_read_reply(const void *msg, size_t len, uint64_t *seq, vllm_status *status, const char **error);

/* OUTPUT: num_adds = ADDs the engine has received; stepped = a step ran
 * (else the stats' per-step counters are zero). */
void dp_wire_output(dp_wire_writer *w, int64_t num_adds, bool stepped, const vllm_step_output *out);

/* A decoded OUTPUT, its pointers into the decoder's own arrays (valid until
 * the next dp_wire_read_output on the same decoder). */
typedef struct dp_output_decoder {
    vllm_step_output out;
    int64_t num_adds;
    bool stepped;
    vllm_seq_output *seqs;
    size_t cap_seqs;
    uint8_t *bytes;                  /* aligned copies of the arrays */
    size_t cap_bytes;
} dp_output_decoder;
vllm_status dp_wire_read_output(const void *msg, size_t len, dp_output_decoder *d);
void dp_wire_output_decoder_free(dp_output_decoder *d);

#endif
