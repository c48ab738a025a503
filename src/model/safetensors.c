/*
 * safetensors.c - header validation and the read-only mmap (see safetensors.h).
 *
 * Validation happens once, here, so that nothing downstream ever reads outside
 * a file: every size is computed in uint64_t with overflow checks, and every
 * tensor's [begin, end) is checked against the data section before a pointer
 * is formed. The header is parsed with jansson (JSON_REJECT_DUPLICATES: a name
 * given twice is a malformed file, not "last one wins").
 *
 * Tensors are sorted by name for safetensors_find; a second sort by offset,
 * on a scratch index, finds overlapping ranges.
 */
#include "model/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"

static bool dtype_from_safetensors(const char *s, dtype *out) {
    if (!strcmp(s, "F32")) *out = DTYPE_F32;
    else if (!strcmp(s, "F16")) *out = DTYPE_F16;
    else if (!strcmp(s, "BF16")) *out = DTYPE_BF16;
    else return false;
    return true;
}

static int compare_by_name(const void *a, const void *b) {
    return strcmp(((const safetensors_tensor *)a)->name, ((const safetensors_tensor *)b)->name);
}

typedef struct span {
    uint64_t begin, end;
    int32_t index;
} span;

static int compare_spans(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* Fills t from one header entry; the message names the tensor. */
static vllm_status parse_entry(const char *path, const char *name, json_t *v, uint64_t data_size,
                               safetensors_tensor *t) {
    if (!json_is_object(v))
        return vllm_error(VLLM_ERR_FORMAT, "%s: tensor '%s': header entry is not an object", path, name);
    json_t *jd = json_object_get(v, "dtype"), *js = json_object_get(v, "shape"),
           *jo = json_object_get(v, "data_offsets");
    if (!json_is_string(jd))
        return vllm_error(VLLM_ERR_FORMAT, "%s: tensor '%s': missing or non-string \"dtype\"", path, name);
    if (!dtype_from_safetensors(json_string_value(jd), &t->type))
        return vllm_error(VLLM_ERR_UNSUPPORTED,
                          "%s: tensor '%s': dtype %s is not supported (supported: F32, F16, BF16)", path,
                          name, json_string_value(jd));
    if (!json_is_array(js))
        return vllm_error(VLLM_ERR_FORMAT, "%s: tensor '%s': missing or non-array \"shape\"", path, name);
    size_t nd = json_array_size(js);
    if (nd > SAFETENSORS_MAX_DIMS)
        return vllm_error(VLLM_ERR_FORMAT, "%s: tensor '%s': %zu dimensions (at most %d)", path, name, nd,
                          SAFETENSORS_MAX_DIMS);
    uint64_t nelem = 1;
    t->ndim = (int32_t)nd;
    for (size_t i = 0; i < nd; i++) {
        json_t *d = json_array_get(js, i);
        if (!json_is_integer(d) || json_integer_value(d) < 0)
            return vllm_error(VLLM_ERR_FORMAT, "%s: tensor '%s': shape[%zu] is not a non-negative integer",
                              path, name, i);
        t->shape[i] = json_integer_value(d);
        if (__builtin_mul_overflow(nelem, (uint64_t)t->shape[i], &nelem))
            return vllm_error(VLLM_ERR_FORMAT, "%s: tensor '%s': shape overflows", path, name);
    }
    if (!json_is_array(jo) || json_array_size(jo) != 2 || !json_is_integer(json_array_get(jo, 0)) ||
        !json_is_integer(json_array_get(jo, 1)) || json_integer_value(json_array_get(jo, 0)) < 0 ||
        json_integer_value(json_array_get(jo, 1)) < 0)
        return vllm_error(VLLM_ERR_FORMAT,
                          "%s: tensor '%s': \"data_offsets\" must be [begin, end] non-negative integers", path,
                          name);
    t->begin = (uint64_t)json_integer_value(json_array_get(jo, 0));
    t->end = (uint64_t)json_integer_value(json_array_get(jo, 1));
    if (t->begin > t->end || t->end > data_size)
        return vllm_error(VLLM_ERR_FORMAT,
                          "%s: tensor '%s': data_offsets [%llu, %llu] outside the data section (%llu bytes)",
                          path, name, (unsigned long long)t->begin, (unsigned long long)t->end,
                          (unsigned long long)data_size);
    uint64_t nbytes;
    if (__builtin_mul_overflow(nelem, (uint64_t)dtype_size(t->type), &nbytes) || nbytes != t->end - t->begin)
        return vllm_error(VLLM_ERR_FORMAT,
                          "%s: tensor '%s': data_offsets span %llu bytes but shape and dtype %s need %llu",
                          path, name, (unsigned long long)(t->end - t->begin), dtype_name(t->type),
                          (unsigned long long)nbytes);
    return VLLM_OK;
}

static vllm_status check_overlaps(const safetensors_file *f) {
    if (f->num_tensors < 2) return VLLM_OK;
    span *spans = malloc((size_t)f->num_tensors * sizeof *spans);
    if (!spans) return vllm_error(VLLM_ERR_NOMEM, "%s: out of memory", f->path);
    int32_t n = 0;
    for (int32_t i = 0; i < f->num_tensors; i++) /* empty tensors overlap nothing */
        if (f->tensors[i].end > f->tensors[i].begin)
            spans[n++] = (span){f->tensors[i].begin, f->tensors[i].end, i};
    qsort(spans, (size_t)n, sizeof *spans, compare_spans);
    vllm_status rc = VLLM_OK;
    for (int32_t i = 1; i < n && rc == VLLM_OK; i++)
        if (spans[i - 1].end > spans[i].begin)
            rc = vllm_error(VLLM_ERR_FORMAT, "%s: tensors '%s' and '%s' overlap in the data section", f->path,
                            f->tensors[spans[i - 1].index].name, f->tensors[spans[i].index].name);
    free(spans);
    return rc;
}

vllm_status safetensors_parse_header(const char *json, size_t len, uint64_t data_size, const char *path,
                                     safetensors_file *f) {
    memset(f, 0, sizeof *f);
    vllm_status rc = VLLM_OK;
    json_error_t jerr;
    json_t *root = NULL;
    if (!(f->path = strdup(path))) return vllm_error(VLLM_ERR_NOMEM, "%s: out of memory", path);
    root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        rc = vllm_error(VLLM_ERR_FORMAT, "%s: header is not valid JSON: %s (line %d, column %d)", path,
                        jerr.text, jerr.line, jerr.column);
        goto fail;
    }
    if (!json_is_object(root)) {
        rc = vllm_error(VLLM_ERR_FORMAT, "%s: header is not a JSON object", path);
        goto fail;
    }
    size_t cap = json_object_size(root);
    if (cap > INT32_MAX) {
        rc = vllm_error(VLLM_ERR_FORMAT, "%s: too many tensors", path);
        goto fail;
    }
    if (cap && !(f->tensors = calloc(cap, sizeof *f->tensors))) {
        rc = vllm_error(VLLM_ERR_NOMEM, "%s: out of memory for %zu tensors", path, cap);
        goto fail;
    }
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (!strcmp(key, "__metadata__")) continue; /* free-form string map; we need nothing from it */
        safetensors_tensor *t = &f->tensors[f->num_tensors];
        if ((rc = parse_entry(path, key, v, data_size, t)) != VLLM_OK) goto fail;
        if (!(t->name = strdup(key))) {
            rc = vllm_error(VLLM_ERR_NOMEM, "%s: out of memory", path);
            goto fail;
        }
        f->num_tensors++;
    }
    json_decref(root);
    root = NULL;
    if ((rc = check_overlaps(f)) != VLLM_OK) goto fail;
    if (f->num_tensors) qsort(f->tensors, (size_t)f->num_tensors, sizeof *f->tensors, compare_by_name);
    f->data_size = data_size;
    return VLLM_OK;
fail:
    json_decref(root);
    safetensors_deinit(f);
    return rc;
}

/* Points t at its bytes, copying into aligned memory if the file misaligns it. */
static vllm_status bind_tensor(safetensors_file *f, safetensors_tensor *t) {
    const uint8_t *p = f->data + t->begin;
    size_t align = dtype_size(t->type), n = (size_t)(t->end - t->begin);
    if ((uintptr_t)p % align == 0) {
        t->data = p;
        return VLLM_OK;
    }
    void **grown = realloc(f->copies, (size_t)(f->num_copies + 1) * sizeof *grown);
    if (!grown) return vllm_error(VLLM_ERR_NOMEM, "%s: out of memory", f->path);
    f->copies = grown;
    void *copy = aligned_alloc(64, (n + 63) / 64 * 64);
    if (!copy) return vllm_error(VLLM_ERR_NOMEM, "%s: out of memory copying '%s'", f->path, t->name);
    memcpy(copy, p, n);
    f->copies[f->num_copies++] = copy;
    t->data = copy;
    return VLLM_OK;
}

vllm_status safetensors_parse(const void *bytes, size_t size, const char *path, safetensors_file *f) {
    memset(f, 0, sizeof *f);
    const uint8_t *b = bytes;
    if (size < 8)
        return vllm_error(VLLM_ERR_FORMAT, "%s: truncated: %zu bytes, too short for the 8-byte header length",
                          path, size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | b[i];
    if (n > size - 8)
        return vllm_error(VLLM_ERR_FORMAT, "%s: header length %llu exceeds the file size (%zu bytes)", path,
                          (unsigned long long)n, size);
    if (n > SAFETENSORS_MAX_HEADER)
        return vllm_error(VLLM_ERR_FORMAT, "%s: header length %llu is larger than the %u-byte limit", path,
                          (unsigned long long)n, SAFETENSORS_MAX_HEADER);
    vllm_status rc = safetensors_parse_header((const char *)b + 8, (size_t)n, size - 8 - n, path, f);
    if (rc != VLLM_OK) return rc;
    f->data = b + 8 + n;
    for (int32_t i = 0; i < f->num_tensors; i++)
        if ((rc = bind_tensor(f, &f->tensors[i])) != VLLM_OK) {
            safetensors_deinit(f);
            return rc;
        }
    return VLLM_OK;
}

vllm_status safetensors_open(const char *path, safetensors_file *f) {
    memset(f, 0, sizeof *f);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return vllm_error(VLLM_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return vllm_error(VLLM_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return vllm_error(VLLM_ERR_IO, "%s: not a regular file", path);
    }
    size_t size = (size_t)st.st_size;
    if (size < 8) {
        close(fd);
        return vllm_error(VLLM_ERR_FORMAT, "%s: truncated: %zu bytes, too short for the 8-byte header length",
                          path, size);
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    int e = errno;
    close(fd);
    if (map == MAP_FAILED) return vllm_error(VLLM_ERR_IO, "%s: cannot mmap %zu bytes: %s", path, size, strerror(e));
    vllm_status rc = safetensors_parse(map, size, path, f);
    if (rc != VLLM_OK) {
        munmap(map, size);
        return rc;
    }
    f->map = map;
    f->map_size = size;
    return VLLM_OK;
}

void safetensors_deinit(safetensors_file *f) {
    if (!f) return;
    for (int32_t i = 0; i < f->num_tensors; i++) free(f->tensors[i].name);
    free(f->tensors);
    for (int32_t i = 0; i < f->num_copies; i++) free(f->copies[i]);
    free(f->copies);
    if (f->map) munmap(f->map, f->map_size);
    free(f->path);
    memset(f, 0, sizeof *f);
}

safetensors_tensor *safetensors_find(const safetensors_file *f, const char *name) {
    if (!f->num_tensors) return NULL;
    safetensors_tensor key = {.name = (char *)name};
    return bsearch(&key, f->tensors, (size_t)f->num_tensors, sizeof *f->tensors, compare_by_name);
}
