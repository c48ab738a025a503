/*
 * safetensors.h - read-only, zero-copy access to .safetensors files.
 *
 * The format: an 8-byte little-endian header length N, N bytes of JSON
 * ({"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
 * optionally "__metadata__": {..}}), then the data section; offsets are
 * relative to the data section's start.
 *
 * safetensors_open() maps the whole file read-only (MAP_SHARED, PROT_READ) and
 * points every tensor at its bytes inside the mapping: the weights live in the
 * page cache once, however many processes load them. Nothing is copied except
 * a tensor whose offset is misaligned for its dtype (no real writer produces
 * one; we copy it rather than hand the forward pass a misaligned float *).
 *
 * Every header entry is validated before anything is handed out: dtype is one
 * we compute in (F32, F16, BF16; others are named in the error), shape entries
 * are non-negative and their product does not overflow, data_offsets lie in the
 * data section, end - begin equals elements * dtype size, and no two tensors
 * overlap. safetensors_parse() does all of it on bytes in memory (the fuzz
 * entry point); safetensors_open() is that plus the mmap.
 */
#ifndef VLLM_MODEL_SAFETENSORS_H
#define VLLM_MODEL_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/dtype.h"
#include "vllm/status.h"

#define SAFETENSORS_MAX_DIMS 8
#define SAFETENSORS_MAX_HEADER (100u << 20) /* the reference implementation's limit */

typedef struct safetensors_tensor {
    char *name;                      /* owned by the file */
    dtype type;
    int32_t ndim;
    int64_t shape[SAFETENSORS_MAX_DIMS];
    uint64_t begin, end;             /* byte offsets in the data section */
    const void *data;                /* (shape) in type; NULL until bound to bytes */
    bool used;                       /* scratch for the model loader */
} safetensors_tensor;

typedef struct safetensors_file {
    char *path;                      /* owned; used in messages */
    safetensors_tensor *tensors;     /* (num_tensors), sorted by name */
    int32_t num_tensors;
    const uint8_t *data;             /* start of the data section (borrowed or mapped) */
    uint64_t data_size;
    /* private */
    void *map;                       /* mmap of the whole file, or NULL */
    size_t map_size;
    void **copies;                   /* aligned copies of misaligned tensors */
    int32_t num_copies;
} safetensors_file;

/* Parses and validates the JSON header text json[0..len) of a file whose data
 * section holds data_size bytes. Fills f->tensors (data pointers NULL); path is
 * used only in messages. On failure f is left empty (safetensors_deinit-safe). */
vllm_status safetensors_parse_header(const char *json, size_t len, uint64_t data_size,
                                     const char *path, safetensors_file *f);

/* Parses a whole file image bytes[0..size) (length prefix, header, data) and
 * binds every tensor's data pointer into it. bytes is borrowed and must outlive f. */
vllm_status safetensors_parse(const void *bytes, size_t size, const char *path, safetensors_file *f);

/* Opens and mmaps path read-only, then safetensors_parse. Errors name the
 * path. Release with safetensors_deinit. */
vllm_status safetensors_open(const char *path, safetensors_file *f);

/* Releases what parse/open acquired; f is zeroed. Safe on a zeroed f. */
void safetensors_deinit(safetensors_file *f);

/* The tensor called name, or NULL (binary search). */
safetensors_tensor *safetensors_find(const safetensors_file *f, const char *name);

#endif
