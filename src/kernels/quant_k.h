/*
 * quant_k.h - the K-quant (Q4_K / Q6_K) integer matmul paths beyond quant.h's
 * portable and AVX2 ones: the dispatching entry quant.c calls, and the
 * AMX-INT8 kernel (quant_k_amx.c). Every path computes the one reduction
 * order documented in quant_k.c, bit for bit.
 */
#ifndef VLLM_KERNELS_QUANT_K_H
#define VLLM_KERNELS_QUANT_K_H

#include "kernels/quant.h"

/* quant_matmul_act_range for a K type on this process's path: AMX tiles for
 * groups of 4+ tokens when quant_use_amx(), the AVX2 kernel for the rest (and
 * on the AVX2 / AVX-512 levels), portable C below AVX2. */
void quant_matmul_act_range_k(dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq, float *y,
                              int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1);

/* The AMX kernel on its own, any token count (for tests and benchmarks).
 * Aborts unless quant_amx_available() and quant_is_k(type). */
void quant_matmul_act_range_k_amx(dtype type, const void *w, int64_t k, const void *xq, int64_t ldxq, float *y,
                                  int64_t ldy, int64_t r0, int64_t r1, int64_t t0, int64_t t1);

#endif
