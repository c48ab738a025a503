/*
 * error.h - status codes and the per-thread error message.
 *
 * Errors are values: every fallible function returns a vllm_status (0 = ok)
 * and, on failure, leaves a human-readable message naming what was wrong
 * (the file, the field, the value) in a thread-local buffer, like
 * sqlite3_errmsg(). The caller either handles the error or passes the rc up;
 * only main() prints it and exits.
 *
 *     if ((rc = safetensors_open(path, &st)) != VLLM_OK) goto fail;
 *     ...
 *     fprintf(stderr, "error: %s\n", vllm_errmsg());
 */
#ifndef VLLM_BASE_ERROR_H
#define VLLM_BASE_ERROR_H

#include "vllm/status.h"

/* Sets the calling thread's error message and returns rc, so a failing path
 * reads `return vllm_error(VLLM_ERR_FORMAT, "%s: header length %llu exceeds file", path, n);` */
vllm_status vllm_error(vllm_status rc, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Prepends "prefix: " to the current message (adds context on the way up). */
void vllm_error_prefix(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
