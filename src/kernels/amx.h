/*
 * amx.h - what the AMX tile kernels share (matmul_amx.c for BF16/F16
 * weights, quant_amx.c for Q8_0/Q4_0): the tile configuration block
 * (palette 1) and the process's permission for the tile state.
 */
#ifndef VLLM_KERNELS_AMX_H
#define VLLM_KERNELS_AMX_H

#include <stdbool.h>
#include <stdint.h>

enum { AMX_ARCH_REQ_XCOMP_PERM = 0x1023, AMX_XFEATURE_XTILEDATA = 18 };

/* The 64-byte operand of ldtilecfg: tile i has rows[i] rows of colsb[i] bytes. */
typedef struct amx_tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_tile_config;

/* True when the CPU has AMX-TILE (and the AVX-512 level) and Linux granted
 * this process the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM, asked
 * once, on the first call). Says nothing about AMX-BF16 / AMX-INT8. */
bool kernels_amx_tiles_permitted(void);

#endif
