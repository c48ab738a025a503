/* status.h - status codes shared by every vllm_* function. */
#ifndef VLLM_STATUS_H
#define VLLM_STATUS_H

#pragma GCC visibility push(default) /* libvllm.a exports only what include/vllm/ declares */

typedef enum vllm_status {
    VLLM_OK = 0,
    VLLM_ERR_NOMEM,       /* allocation failed */
    VLLM_ERR_IO,          /* open/read/mmap failed */
    VLLM_ERR_FORMAT,      /* a file or message is malformed */
    VLLM_ERR_INVALID,     /* an argument or request field is out of range */
    VLLM_ERR_UNSUPPORTED, /* well-formed but not something we implement */
    VLLM_ERR_FULL,        /* a pool or queue has no room (not fatal) */
    VLLM_ERR_NOT_FOUND,   /* no such request / tensor / token */
} vllm_status;

/* The calling thread's message for the last error (never NULL). */
const char *vllm_errmsg(void);

/* A short constant name for a status ("format error", ...). */
const char *vllm_status_str(vllm_status rc);

#pragma GCC visibility pop
#endif
