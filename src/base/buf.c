/*
 * buf.c - buf_grow (see buf.h).
 */
#include "base/buf.h"

#include <stdint.h>
#include <stdlib.h>

#include "base/error.h"

vllm_status buf_grow(void **data, size_t *cap, size_t need, size_t elem_size) {
    if (need <= *cap) return VLLM_OK;
    size_t n = *cap ? *cap : 16;
    while (n < need) {
        if (n > SIZE_MAX / 2) {
            n = need;
            break;
        }
        n *= 2;
    }
    if (elem_size && n > SIZE_MAX / elem_size)
        return vllm_error(VLLM_ERR_NOMEM, "out of memory: %zu elements of %zu bytes overflow", need, elem_size);
    size_t bytes = n * elem_size;
    void *p = realloc(*data, bytes ? bytes : 1);
    if (!p) return vllm_error(VLLM_ERR_NOMEM, "out of memory (%zu bytes)", bytes);
    *data = p;
    *cap = n;
    return VLLM_OK;
}
