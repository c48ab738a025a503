/*
 * buf.h - the one growable array of the tree.
 *
 * Any array that grows at run time (step outputs, response text, token
 * lists) is a pointer plus a capacity in elements, grown by buf_grow:
 *
 *     int32_t *ids = NULL; size_t num_ids = 0, cap_ids = 0;
 *     if ((rc = buf_grow((void **)&ids, &cap_ids, num_ids + 1, sizeof *ids)) != VLLM_OK) return rc;
 *     ids[num_ids++] = id;
 *     ...
 *     free(ids);
 *
 * Capacity doubles (from 16 elements), so n appends cost O(n) copies in
 * all; a hot loop that reaches its high-water mark stops allocating. Out of
 * memory and size overflow are error values (VLLM_ERR_NOMEM, message set),
 * never an abort; on failure *data and *cap are unchanged, so the old
 * contents stay valid and owned by the caller.
 */
#ifndef VLLM_BASE_BUF_H
#define VLLM_BASE_BUF_H

#include <stddef.h>

#include "vllm/status.h"

/* Makes room for at least `need` elements of elem_size bytes. */
vllm_status buf_grow(void **data, size_t *cap, size_t need, size_t elem_size);

#endif
