/*
 * kernels_probe.c - which kernel paths this machine can run, for tests/run.sh
 * and the test scripts (not a test: it prints no results).
 *
 *     build/tests/kernels_probe            prints e.g. "avx2 avx512 amx-bf16 amx-int8"
 *     build/tests/kernels_probe F [F...]   exit 0 if the machine has every F
 *
 * Features: avx2 (AVX2+FMA+F16C), avx512 (F/BW/VL/DQ/VNNI), amx-bf16 and
 * amx-int8 (the CPU has them and the OS granted the tile state), amx (either).
 * What the CPU and the OS allow, whatever VLLM_KERNELS / VLLM_AMX say: a test
 * run with VLLM_KERNELS=avx2 on a machine without AVX2 would silently run the
 * portable kernels, so run.sh asks here first and reports such a run as
 * skipped.
 */
#include <stdio.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/quant.h"

static bool has(const char *f) {
    if (!strcmp(f, "avx2")) return kernels_cpu_has_avx2();
    if (!strcmp(f, "avx512")) return kernels_cpu_has_avx512();
    if (!strcmp(f, "amx-bf16")) return matmul_amx_available();
    if (!strcmp(f, "amx-int8")) return quant_amx_available();
    if (!strcmp(f, "amx")) return matmul_amx_available() || quant_amx_available();
    fprintf(stderr, "kernels_probe: unknown feature '%s' (avx2, avx512, amx-bf16, amx-int8, amx)\n", f);
    return false;
}

int main(int argc, char **argv) {
    if (argc > 1) {
        for (int i = 1; i < argc; i++)
            if (!has(argv[i])) return 1;
        return 0;
    }
    const char *all[] = {"avx2", "avx512", "amx-bf16", "amx-int8"};
    const char *sep = "";
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (has(all[i])) printf("%s%s", sep, all[i]), sep = " ";
    printf("\n");
    return 0;
}
