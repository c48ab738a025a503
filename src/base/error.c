/* error.c - the thread-local error message behind vllm_errmsg(). */
#include "base/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char errbuf[1024];

vllm_status vllm_error(vllm_status rc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errbuf, sizeof errbuf, fmt, ap);
    va_end(ap);
    return rc;
}

void vllm_error_prefix(const char *fmt, ...) {
    char prefix[512], joined[sizeof prefix + 2 + sizeof errbuf];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    snprintf(joined, sizeof joined, "%s: %s", prefix, errbuf);
    size_t n = strlen(joined); /* keep the prefix; a long message loses its tail */
    if (n >= sizeof errbuf) n = sizeof errbuf - 1;
    memcpy(errbuf, joined, n);
    errbuf[n] = 0;
}

const char *vllm_errmsg(void) { return errbuf[0] ? errbuf : "no error"; }

const char *vllm_status_str(vllm_status rc) {
    switch (rc) {
    case VLLM_OK: return "ok";
    case VLLM_ERR_NOMEM: return "out of memory";
    case VLLM_ERR_IO: return "i/o error";
    case VLLM_ERR_FORMAT: return "format error";
    case VLLM_ERR_INVALID: return "invalid argument";
    case VLLM_ERR_UNSUPPORTED: return "unsupported";
    case VLLM_ERR_FULL: return "full";
    case VLLM_ERR_NOT_FOUND: return "not found";
    }
    return "unknown status";
}
