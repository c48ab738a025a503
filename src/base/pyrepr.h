/*
 * pyrepr.h - Python's repr() of a float, the text json.dumps writes for one.
 *
 * Shortest digits that read back to the same double, in fixed notation when
 * the decimal exponent is in -4..15 (0.0001, 100.0, 1e+16, 1e-05), else
 * d.ddde±XX. Two callers need Python's exact text: the JSON-Schema compiler
 * (a schema's numbers become literals the grammar matches as Python's
 * json.dumps would print them) and the MaskBench benchmark (which tokenizes
 * instances the way JSONSchemaBench serialized them).
 */
#ifndef VLLM_BASE_PYREPR_H
#define VLLM_BASE_PYREPR_H

#include <stddef.h>

/* repr(v) for a finite v into out (NUL-terminated, truncated to cap). */
void pyrepr_float(double v, char *out, size_t cap);

#endif
