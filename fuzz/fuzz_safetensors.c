/*
 * fuzz_safetensors.c - safetensors_parse on a whole file image in memory.
 *
 * The input is the file: 8-byte little-endian header length, JSON header,
 * data section. Beyond memory safety, a file that parses must keep every
 * promise safetensors.h makes: tensors sorted by name and findable, each
 * tensor's byte span equal to elements * dtype size and inside the data
 * section, spans disjoint, and every data pointer readable for that many bytes
 * (ASan checks the read; a misaligned tensor is read from its aligned copy).
 */
#include "fuzz.h"

#include "model/safetensors.h"

int fuzz_safetensors_init(void) { return 0; }

int fuzz_safetensors_one(const uint8_t *data, size_t size) {
    safetensors_file f;
    if (safetensors_parse(data, size, "fuzz.safetensors", &f) != VLLM_OK) {
        safetensors_deinit(&f); /* documented safe on the failure path */
        return 0;
    }
    FUZZ_CHECK_GOTO(done, f.data >= data && f.data + f.data_size == data + size,
                    "data section [%p, +%llu) is not the tail of the input", (const void *)f.data,
                    (unsigned long long)f.data_size);
    for (int32_t i = 0; i < f.num_tensors; i++) {
        const safetensors_tensor *t = &f.tensors[i];
        FUZZ_CHECK_GOTO(done, i == 0 || strcmp(f.tensors[i - 1].name, t->name) < 0,
                        "tensors not strictly sorted at %d (\"%s\")", i, t->name);
        FUZZ_CHECK_GOTO(done, safetensors_find(&f, t->name) == t, "safetensors_find(\"%s\") misses", t->name);
        FUZZ_CHECK_GOTO(done, t->ndim >= 0 && t->ndim <= SAFETENSORS_MAX_DIMS, "%s: ndim %d", t->name, t->ndim);
        uint64_t elems = 1;
        for (int32_t d = 0; d < t->ndim; d++) {
            FUZZ_CHECK_GOTO(done, t->shape[d] >= 0, "%s: shape[%d] = %lld", t->name, d, (long long)t->shape[d]);
            FUZZ_CHECK_GOTO(done, t->shape[d] == 0 || elems <= UINT64_MAX / (uint64_t)t->shape[d],
                            "%s: element count overflows", t->name);
            elems *= (uint64_t)t->shape[d];
        }
        FUZZ_CHECK_GOTO(done, t->begin <= t->end && t->end <= f.data_size, "%s: span [%llu, %llu) outside %llu",
                        t->name, (unsigned long long)t->begin, (unsigned long long)t->end,
                        (unsigned long long)f.data_size);
        FUZZ_CHECK_GOTO(done, elems <= UINT64_MAX / dtype_size(t->type) &&
                                  t->end - t->begin == elems * dtype_size(t->type),
                        "%s: span of %llu bytes for %llu elements", t->name,
                        (unsigned long long)(t->end - t->begin), (unsigned long long)elems);
        FUZZ_CHECK_GOTO(done, t->data != NULL && (uintptr_t)t->data % dtype_size(t->type) == 0,
                        "%s: data %p unbound or misaligned", t->name, t->data);
        /* every byte readable: ASan traps a pointer outside the input or a copy */
        volatile uint8_t sink = 0;
        for (uint64_t b = 0; b < t->end - t->begin; b++) sink ^= ((const uint8_t *)t->data)[b];
        (void)sink;
    }
    /* pairwise disjoint (quadratic, so only for small files) */
    for (int32_t i = 0; i < f.num_tensors; i++)
        for (int32_t j = i + 1; j < f.num_tensors && f.num_tensors <= 256; j++) {
            const safetensors_tensor *a = &f.tensors[i], *b = &f.tensors[j];
            bool empty = a->begin == a->end || b->begin == b->end;
            FUZZ_CHECK_GOTO(done, empty || a->end <= b->begin || b->end <= a->begin,
                            "%s and %s overlap", a->name, b->name);
        }
done:
    safetensors_deinit(&f);
    return 0;
}

#ifndef FUZZ_NO_MAIN
int LLVMFuzzerInitialize(int *argc, char ***argv) { return fuzz_safetensors_init(); }
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return fuzz_safetensors_one(data, size); }
#endif
