/*
 * gguf.c - GGUF parsing and validation, and the llama mapping (see gguf.h).
 *
 * Parsing is a cursor over the file image that refuses to move past the end:
 * every read checks the bytes left first, in uint64_t, and a count is checked
 * against the bytes left (each element needs at least its fixed size, a string
 * its 8-byte length) before anything is allocated for it. So a hostile header can
 * neither read outside the image nor make us allocate more than a small
 * multiple of the file size.
 *
 * Uniqueness of keys and tensor names is checked on sorted scratch indexes;
 * overlap of tensor data on a scratch index sorted by offset.
 */
#include "model/gguf.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"

typedef struct cursor {
    const uint8_t *base, *p, *end;
    const char *path;
} cursor;

static uint64_t left(const cursor *c) { return (uint64_t)(c->end - c->p); }

static vllm_status need(cursor *c, uint64_t n, const char *what) {
    if (n > left(c))
        return vllm_error(VLLM_ERR_FORMAT, "%s: truncated: %s needs %llu bytes at offset %llu, %llu left", c->path,
                          what, (unsigned long long)n, (unsigned long long)(c->p - c->base), (unsigned long long)left(c));
    return VLLM_OK;
}

static uint32_t rd_u32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t rd_u64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

static vllm_status read_u32(cursor *c, uint32_t *v, const char *what) {
    vllm_status rc = need(c, 4, what);
    if (rc) return rc;
    *v = rd_u32(c->p), c->p += 4;
    return VLLM_OK;
}

static vllm_status read_u64(cursor *c, uint64_t *v, const char *what) {
    vllm_status rc = need(c, 8, what);
    if (rc) return rc;
    *v = rd_u64(c->p), c->p += 8;
    return VLLM_OK;
}

static vllm_status read_str(cursor *c, gguf_str *s, const char *what) {
    uint64_t n;
    vllm_status rc = read_u64(c, &n, what);
    if (rc) return rc;
    if (n > left(c))
        return vllm_error(VLLM_ERR_FORMAT, "%s: %s: string length %llu exceeds the %llu bytes left in the file",
                          c->path, what, (unsigned long long)n, (unsigned long long)left(c));
    s->s = (const char *)c->p, s->len = n, c->p += n;
    return VLLM_OK;
}

static const uint8_t scalar_size[GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

const char *gguf_type_name(gguf_type t) {
    static const char *const names[GGUF_TYPE_COUNT] = {"UINT8",  "INT8",   "UINT16", "INT16", "UINT32",
                                                       "INT32",  "FLOAT32", "BOOL",  "STRING", "ARRAY",
                                                       "UINT64", "INT64",  "FLOAT64"};
    return (unsigned)t < GGUF_TYPE_COUNT ? names[t] : "?";
}

static bool str_eq(gguf_str s, const char *z) { return strlen(z) == s.len && !memcmp(s.s, z, s.len); }

/* Skips one value of type t (not ARRAY) or checks its bytes are there. */
static vllm_status skip_value(cursor *c, gguf_type t, const char *key) {
    if (t == GGUF_TYPE_STRING) {
        gguf_str s;
        return read_str(c, &s, key);
    }
    vllm_status rc = need(c, scalar_size[t], key);
    if (rc == VLLM_OK) c->p += scalar_size[t];
    return rc;
}

static vllm_status parse_kv(cursor *c, int64_t index, gguf_kv *kv) {
    char what[64];
    snprintf(what, sizeof what, "metadata key %lld", (long long)index);
    vllm_status rc = read_str(c, &kv->key, what);
    if (rc) return rc;
    char key[96];
    snprintf(key, sizeof key, "%.*s", (int)(kv->key.len < 80 ? kv->key.len : 80), kv->key.s);
    uint32_t t;
    if ((rc = read_u32(c, &t, key))) return rc;
    if (t >= GGUF_TYPE_COUNT)
        return vllm_error(VLLM_ERR_FORMAT, "%s: key '%s': unknown value type %u", c->path, key, t);
    kv->type = kv->elem_type = (gguf_type)t;
    kv->count = 1;
    if (t != GGUF_TYPE_ARRAY) {
        kv->value = c->p;
        return skip_value(c, kv->type, key);
    }
    uint32_t et;
    uint64_t n;
    if ((rc = read_u32(c, &et, key)) || (rc = read_u64(c, &n, key))) return rc;
    if (et >= GGUF_TYPE_COUNT)
        return vllm_error(VLLM_ERR_FORMAT, "%s: key '%s': unknown array element type %u", c->path, key, et);
    if (et == GGUF_TYPE_ARRAY)
        return vllm_error(VLLM_ERR_UNSUPPORTED, "%s: key '%s': nested arrays are not supported", c->path, key);
    kv->elem_type = (gguf_type)et;
    kv->count = n;
    kv->value = c->p;
    uint64_t min = et == GGUF_TYPE_STRING ? 8 : scalar_size[et];
    if (n > left(c) / min)
        return vllm_error(VLLM_ERR_FORMAT, "%s: key '%s': array of %llu %s elements exceeds the %llu bytes left",
                          c->path, key, (unsigned long long)n, gguf_type_name(kv->elem_type), (unsigned long long)left(c));
    if (et != GGUF_TYPE_STRING) {
        c->p += n * min;
        return VLLM_OK;
    }
    for (uint64_t i = 0; i < n; i++) {
        gguf_str s;
        if ((rc = read_str(c, &s, key))) return rc;
    }
    return VLLM_OK;
}

static bool dtype_from_ggml(uint32_t g, dtype *t) {
    switch (g) {
    case GGML_TYPE_F32: *t = DTYPE_F32; return true;
    case GGML_TYPE_F16: *t = DTYPE_F16; return true;
    case GGML_TYPE_BF16: *t = DTYPE_BF16; return true;
    case GGML_TYPE_Q8_0: *t = DTYPE_Q8_0; return true;
    case GGML_TYPE_Q4_0: *t = DTYPE_Q4_0; return true;
    case GGML_TYPE_Q4_K: *t = DTYPE_Q4_K; return true;
    case GGML_TYPE_Q6_K: *t = DTYPE_Q6_K; return true;
    case GGML_TYPE_Q4_1: *t = DTYPE_Q4_1; return true;
    case GGML_TYPE_Q5_0: *t = DTYPE_Q5_0; return true;
    case GGML_TYPE_Q5_1: *t = DTYPE_Q5_1; return true;
    case GGML_TYPE_IQ4_NL: *t = DTYPE_IQ4_NL; return true;
    case GGML_TYPE_Q2_K: *t = DTYPE_Q2_K; return true;
    case GGML_TYPE_Q3_K: *t = DTYPE_Q3_K; return true;
    case GGML_TYPE_Q5_K: *t = DTYPE_Q5_K; return true;
    default: return false;
    }
}

static const char *ggml_type_name(uint32_t g) {
    static const char *const names[] = {"F32",  "F16",  "Q4_0", "Q4_1", "Q4_2", "Q4_3", "Q5_0", "Q5_1",
                                        "Q8_0", "Q8_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K",
                                        "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S",
                                        "IQ4_XS", "I8", "I16", "I32", "I64", "F64", "IQ1_M", "BF16"};
    return g < sizeof names / sizeof names[0] ? names[g] : NULL;
}

static vllm_status parse_tensor(cursor *c, int64_t index, gguf_tensor *t) {
    char what[64];
    snprintf(what, sizeof what, "tensor info %lld", (long long)index);
    vllm_status rc = read_str(c, &t->name, what);
    if (rc) return rc;
    char name[96];
    snprintf(name, sizeof name, "%.*s", (int)(t->name.len < 80 ? t->name.len : 80), t->name.s);
    uint32_t nd, g;
    if ((rc = read_u32(c, &nd, name))) return rc;
    if (nd < 1 || nd > GGUF_MAX_DIMS)
        return vllm_error(VLLM_ERR_FORMAT, "%s: tensor '%s': %u dimensions (1 to %d)", c->path, name, nd, GGUF_MAX_DIMS);
    t->ndim = (int32_t)nd;
    uint64_t nelem = 1;
    for (int i = 0; i < GGUF_MAX_DIMS; i++) t->ne[i] = 1;
    for (uint32_t i = 0; i < nd; i++) {
        uint64_t d;
        if ((rc = read_u64(c, &d, name))) return rc;
        if (d > (uint64_t)INT64_MAX || __builtin_mul_overflow(nelem, d, &nelem) || nelem > (uint64_t)INT64_MAX)
            return vllm_error(VLLM_ERR_FORMAT, "%s: tensor '%s': dimension %u = %llu overflows", c->path, name, i,
                              (unsigned long long)d);
        t->ne[i] = (int64_t)d;
    }
    if ((rc = read_u32(c, &g, name)) || (rc = read_u64(c, &t->offset, name))) return rc;
    t->ggml_type = g;
    if (!dtype_from_ggml(g, &t->type)) {
        const char *n = ggml_type_name(g);
        if (n)
            return vllm_error(VLLM_ERR_UNSUPPORTED,
                              "%s: tensor '%s': type %s is not supported (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, "
                              "Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)",
                              c->path, name, n);
        return vllm_error(VLLM_ERR_FORMAT, "%s: tensor '%s': unknown ggml type %u", c->path, name, g);
    }
    if (t->ne[0] % dtype_block_elems(t->type))
        return vllm_error(VLLM_ERR_FORMAT, "%s: tensor '%s': row length %lld is not a multiple of the %s block (%lld)",
                          c->path, name, (long long)t->ne[0], dtype_name(t->type), (long long)dtype_block_elems(t->type));
    /* size = rows * row bytes; nelem fits int64 so rows and row bytes do too */
    uint64_t rows = t->ne[0] ? nelem / (uint64_t)t->ne[0] : 0;
    if (__builtin_mul_overflow(rows, (uint64_t)dtype_row_bytes(t->type, t->ne[0]), &t->size))
        return vllm_error(VLLM_ERR_FORMAT, "%s: tensor '%s': size overflows", c->path, name);
    return VLLM_OK;
}

typedef struct ref {
    gguf_str s;
    uint64_t begin, end;
    int64_t index;
} ref;

static int cmp_str(gguf_str a, gguf_str b) {
    int r = memcmp(a.s, b.s, a.len < b.len ? a.len : b.len);
    return r ? r : (a.len > b.len) - (a.len < b.len);
}
static int compare_ref_name(const void *a, const void *b) { return cmp_str(((const ref *)a)->s, ((const ref *)b)->s); }
static int compare_ref_span(const void *a, const void *b) {
    const ref *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return (x->end > y->end) - (x->end < y->end);
}

/* Fails if two entries of refs[0..n) share a name; what = "key" / "tensor". */
static vllm_status check_unique(const char *path, ref *refs, int64_t n, const char *what) {
    qsort(refs, (size_t)n, sizeof *refs, compare_ref_name);
    for (int64_t i = 1; i < n; i++)
        if (!cmp_str(refs[i - 1].s, refs[i].s))
            return vllm_error(VLLM_ERR_FORMAT, "%s: %s '%.*s' appears twice", path, what,
                              (int)(refs[i].s.len < 80 ? refs[i].s.len : 80), refs[i].s.s);
    return VLLM_OK;
}

/* gguf_parse, or with tensors false only the header and the metadata: the
 * tensor infos are not read, so a file whose tensor types we cannot compute
 * in still gives its tokenizer and chat template. */
static vllm_status parse(const void *bytes, size_t size, const char *path, bool tensors, gguf_file *f) {
    memset(f, 0, sizeof *f);
    vllm_status rc = VLLM_OK;
    ref *refs = NULL;
    if (!(f->path = strdup(path))) return vllm_error(VLLM_ERR_NOMEM, "%s: out of memory", path);
    cursor c = {bytes, bytes, (const uint8_t *)bytes + size, f->path};
    uint32_t magic;
    uint64_t nt, nkv;
    if ((rc = read_u32(&c, &magic, "magic"))) goto fail;
    if (memcmp(bytes, "GGUF", 4)) {
        rc = vllm_error(VLLM_ERR_FORMAT, "%s: not a GGUF file (magic %02x %02x %02x %02x, want \"GGUF\")", path,
                        ((const uint8_t *)bytes)[0], ((const uint8_t *)bytes)[1], ((const uint8_t *)bytes)[2],
                        ((const uint8_t *)bytes)[3]);
        goto fail;
    }
    if ((rc = read_u32(&c, &f->version, "version"))) goto fail;
    if (f->version != 2 && f->version != 3) {
        rc = vllm_error(VLLM_ERR_UNSUPPORTED, "%s: GGUF version %u is not supported (2 and 3 are%s)", path,
                        f->version, f->version == 0x03000000 || f->version == 0x02000000 ? "; this file is big-endian" : "");
        goto fail;
    }
    if ((rc = read_u64(&c, &nt, "tensor count")) || (rc = read_u64(&c, &nkv, "metadata count"))) goto fail;
    /* a KV needs at least 8 + 4 + 1 bytes, a tensor info 8 + 4 + 8 + 4 + 8 */
    if (nkv > left(&c) / 13 || nt > left(&c) / 32) {
        rc = vllm_error(VLLM_ERR_FORMAT, "%s: %llu metadata keys and %llu tensors cannot fit in %zu bytes", path,
                        (unsigned long long)nkv, (unsigned long long)nt, size);
        goto fail;
    }
    f->kvs = calloc(nkv ? nkv : 1, sizeof *f->kvs);
    f->tensors = calloc(nt ? nt : 1, sizeof *f->tensors);
    refs = calloc((nkv > nt ? nkv : nt) + 1, sizeof *refs);
    if (!f->kvs || !f->tensors || !refs) {
        rc = vllm_error(VLLM_ERR_NOMEM, "%s: out of memory", path);
        goto fail;
    }
    for (f->num_kvs = 0; f->num_kvs < (int64_t)nkv; f->num_kvs++)
        if ((rc = parse_kv(&c, f->num_kvs, &f->kvs[f->num_kvs]))) goto fail;
    for (int64_t i = 0; i < f->num_kvs; i++) refs[i] = (ref){.s = f->kvs[i].key, .index = i};
    if ((rc = check_unique(path, refs, f->num_kvs, "metadata key"))) goto fail;

    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *al = gguf_find_kv(f, "general.alignment");
    if (al) {
        uint32_t a = al->type == GGUF_TYPE_UINT32 ? rd_u32(al->value) : 0;
        if (a == 0 || (a & (a - 1))) {
            rc = vllm_error(VLLM_ERR_FORMAT, "%s: general.alignment must be a power-of-two UINT32 (got %s %u)", path,
                            gguf_type_name(al->type), a);
            goto fail;
        }
        f->alignment = a;
    }

    if (!tensors) {
        free(refs);
        return VLLM_OK;
    }
    for (f->num_tensors = 0; f->num_tensors < (int64_t)nt; f->num_tensors++)
        if ((rc = parse_tensor(&c, f->num_tensors, &f->tensors[f->num_tensors]))) goto fail;
    for (int64_t i = 0; i < f->num_tensors; i++) refs[i] = (ref){.s = f->tensors[i].name, .index = i};
    if ((rc = check_unique(path, refs, f->num_tensors, "tensor"))) goto fail;

    uint64_t pos = (uint64_t)(c.p - (const uint8_t *)bytes);
    uint64_t start = (pos + f->alignment - 1) / f->alignment * f->alignment;
    if (start > size) {
        if (f->num_tensors) {
            rc = vllm_error(VLLM_ERR_FORMAT, "%s: truncated: data section starts at %llu, file has %zu bytes", path,
                            (unsigned long long)start, size);
            goto fail;
        }
        start = size;
    }
    f->data = (const uint8_t *)bytes + start;
    f->data_size = size - start;
    for (int64_t i = 0; i < f->num_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        uint64_t end;
        if (t->offset % f->alignment || __builtin_add_overflow(t->offset, t->size, &end) || end > f->data_size) {
            rc = vllm_error(VLLM_ERR_FORMAT, "%s: tensor '%.*s': data [%llu, +%llu) %s (data section %llu bytes, alignment %u)",
                            path, (int)(t->name.len < 80 ? t->name.len : 80), t->name.s, (unsigned long long)t->offset,
                            (unsigned long long)t->size, t->offset % f->alignment ? "is misaligned" : "lies beyond the end of the file",
                            (unsigned long long)f->data_size, f->alignment);
            goto fail;
        }
        t->data = f->data + t->offset;
        refs[i] = (ref){.s = t->name, .begin = t->offset, .end = end, .index = i};
    }
    qsort(refs, (size_t)f->num_tensors, sizeof *refs, compare_ref_span);
    for (int64_t i = 1; i < f->num_tensors; i++)
        if (refs[i].begin < refs[i - 1].end) {
            rc = vllm_error(VLLM_ERR_FORMAT, "%s: tensors '%.*s' and '%.*s' overlap", path,
                            (int)(refs[i - 1].s.len < 80 ? refs[i - 1].s.len : 80), refs[i - 1].s.s,
                            (int)(refs[i].s.len < 80 ? refs[i].s.len : 80), refs[i].s.s);
            goto fail;
        }
    /* llama.cpp's converter permutes q/k rows for llama (see gguf.h) */
    gguf_str arch;
    f->rope_interleaved = gguf_get_string(f, "general.architecture", &arch) == VLLM_OK && str_eq(arch, "llama");
    free(refs);
    return VLLM_OK;
fail:
    free(refs);
    gguf_deinit(f);
    return rc;
}

vllm_status gguf_parse(const void *bytes, size_t size, const char *path, gguf_file *f) {
    return parse(bytes, size, path, true, f);
}

static vllm_status open_file(const char *path, bool tensors, gguf_file *f) {
    memset(f, 0, sizeof *f);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return vllm_error(VLLM_ERR_IO, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return vllm_error(VLLM_ERR_IO, "%s: %s", path, strerror(e));
    }
    if (st.st_size == 0) {
        close(fd);
        return vllm_error(VLLM_ERR_FORMAT, "%s: empty file", path);
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    int e = errno;
    close(fd);
    if (map == MAP_FAILED) return vllm_error(VLLM_ERR_IO, "%s: mmap: %s", path, strerror(e));
    vllm_status rc = parse(map, (size_t)st.st_size, path, tensors, f);
    if (rc) {
        munmap(map, (size_t)st.st_size);
        return rc;
    }
    f->map = map, f->map_size = (size_t)st.st_size;
    return VLLM_OK;
}

vllm_status gguf_open(const char *path, gguf_file *f) { return open_file(path, true, f); }

vllm_status gguf_open_metadata(const char *path, gguf_file *f) { return open_file(path, false, f); }

void gguf_deinit(gguf_file *f) {
    if (!f) return;
    if (f->map) munmap(f->map, f->map_size);
    free(f->path);
    free(f->kvs);
    free(f->tensors);
    memset(f, 0, sizeof *f);
}

/* ---- lookup -------------------------------------------------------------- */

const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key) {
    for (int64_t i = 0; i < f->num_kvs; i++)
        if (str_eq(f->kvs[i].key, key)) return &f->kvs[i];
    return NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    for (int64_t i = 0; i < f->num_tensors; i++)
        if (str_eq(f->tensors[i].name, name)) return &f->tensors[i];
    return NULL;
}

static bool is_int_type(gguf_type t) {
    return t <= GGUF_TYPE_INT32 || t == GGUF_TYPE_UINT64 || t == GGUF_TYPE_INT64;
}

/* Integer element at p of type t; *ok false if a UINT64 exceeds INT64_MAX. */
static int64_t int_at(const uint8_t *p, gguf_type t, bool *ok) {
    *ok = true;
    switch (t) {
    case GGUF_TYPE_UINT8: return p[0];
    case GGUF_TYPE_INT8: return (int8_t)p[0];
    case GGUF_TYPE_UINT16: { uint16_t v; memcpy(&v, p, 2); return v; }
    case GGUF_TYPE_INT16: { int16_t v; memcpy(&v, p, 2); return v; }
    case GGUF_TYPE_UINT32: return rd_u32(p);
    case GGUF_TYPE_INT32: return (int32_t)rd_u32(p);
    case GGUF_TYPE_INT64: return (int64_t)rd_u64(p);
    default: { uint64_t v = rd_u64(p); *ok = v <= (uint64_t)INT64_MAX; return (int64_t)v; }
    }
}

static double float_at(const uint8_t *p, gguf_type t) {
    if (t == GGUF_TYPE_FLOAT32) { float v; memcpy(&v, p, 4); return v; }
    double v;
    memcpy(&v, p, 8);
    return v;
}

static vllm_status get_kv(const gguf_file *f, const char *key, const gguf_kv **kv) {
    if (!(*kv = gguf_find_kv(f, key))) return vllm_error(VLLM_ERR_NOT_FOUND, "%s: metadata key '%s' is missing", f->path, key);
    return VLLM_OK;
}

static vllm_status wrong_type(const gguf_file *f, const char *key, const gguf_kv *kv, const char *want) {
    return vllm_error(VLLM_ERR_FORMAT, "%s: metadata key '%s' is %s%s%s, expected %s", f->path, key,
                      gguf_type_name(kv->type), kv->type == GGUF_TYPE_ARRAY ? " of " : "",
                      kv->type == GGUF_TYPE_ARRAY ? gguf_type_name(kv->elem_type) : "", want);
}

vllm_status gguf_get_int(const gguf_file *f, const char *key, int64_t *out) {
    const gguf_kv *kv;
    vllm_status rc = get_kv(f, key, &kv);
    if (rc) return rc;
    bool ok;
    if (!is_int_type(kv->type)) return wrong_type(f, key, kv, "an integer");
    *out = int_at(kv->value, kv->type, &ok);
    if (!ok) return vllm_error(VLLM_ERR_FORMAT, "%s: metadata key '%s': value out of range", f->path, key);
    return VLLM_OK;
}

vllm_status gguf_get_float(const gguf_file *f, const char *key, double *out) {
    const gguf_kv *kv;
    vllm_status rc = get_kv(f, key, &kv);
    if (rc) return rc;
    if (kv->type != GGUF_TYPE_FLOAT32 && kv->type != GGUF_TYPE_FLOAT64) return wrong_type(f, key, kv, "a float");
    *out = float_at(kv->value, kv->type);
    return VLLM_OK;
}

vllm_status gguf_get_bool(const gguf_file *f, const char *key, bool *out) {
    const gguf_kv *kv;
    vllm_status rc = get_kv(f, key, &kv);
    if (rc) return rc;
    if (kv->type != GGUF_TYPE_BOOL) return wrong_type(f, key, kv, "a bool");
    *out = kv->value[0] != 0;
    return VLLM_OK;
}

vllm_status gguf_get_string(const gguf_file *f, const char *key, gguf_str *out) {
    const gguf_kv *kv;
    vllm_status rc = get_kv(f, key, &kv);
    if (rc) return rc;
    if (kv->type != GGUF_TYPE_STRING) return wrong_type(f, key, kv, "a string");
    out->len = rd_u64(kv->value);
    out->s = (const char *)kv->value + 8;
    return VLLM_OK;
}

int64_t gguf_array_int(const gguf_kv *kv, uint64_t i) {
    bool ok;
    return int_at(kv->value + i * scalar_size[kv->elem_type], kv->elem_type, &ok);
}

double gguf_array_float(const gguf_kv *kv, uint64_t i) {
    return float_at(kv->value + i * scalar_size[kv->elem_type], kv->elem_type);
}

void gguf_array_strings(const gguf_kv *kv, gguf_str *out) {
    const uint8_t *p = kv->value;
    for (uint64_t i = 0; i < kv->count; i++) {
        out[i].len = rd_u64(p);
        out[i].s = (const char *)p + 8;
        p += 8 + out[i].len;
    }
}

/* ---- llama mapping ------------------------------------------------------- */

/* An integer key into *out, in [lo, hi]; absent keys are an error unless
 * optional (then *out is left alone). */
static vllm_status get_i32(const gguf_file *f, const char *key, int32_t *out, int64_t lo, int64_t hi, bool optional) {
    int64_t v;
    vllm_status rc = gguf_get_int(f, key, &v);
    if (rc == VLLM_ERR_NOT_FOUND && optional) return VLLM_OK;
    if (rc) return rc;
    if (v < lo || v > hi)
        return vllm_error(VLLM_ERR_FORMAT, "%s: %s = %lld is out of range [%lld, %lld]", f->path, key, (long long)v,
                          (long long)lo, (long long)hi);
    *out = (int32_t)v;
    return VLLM_OK;
}

static vllm_status get_f32(const gguf_file *f, const char *key, float *out, bool optional) {
    double v;
    vllm_status rc = gguf_get_float(f, key, &v);
    if (rc == VLLM_ERR_NOT_FOUND && optional) return VLLM_OK;
    if (rc) return rc;
    if (!(v > 0) || v > 1e30)
        return vllm_error(VLLM_ERR_FORMAT, "%s: %s = %g must be positive and finite", f->path, key, v);
    *out = (float)v;
    return VLLM_OK;
}

/* "<arch>.<suffix>" into buf (arch: "llama" or "gemma3"). */
static const char *arch_key(char *buf, size_t size, const char *arch, const char *suffix) {
    snprintf(buf, size, "%s.%s", arch, suffix);
    return buf;
}

/* Gemma 3's settings as llama.cpp's loader reads them (llama_model_gemma3::
 * load_arch_hparams). Layer kinds: no (or a zero) attention.sliding_window
 * makes every layer global; otherwise attention.sliding_window_pattern names
 * the sliding layers, as one bool per layer (what newer converters write for
 * a config's layer_types) or as a period n (layer l global iff l % n == n - 1;
 * n = 0: every layer sliding), 6 when the key is absent (the original
 * converter writes none). The sliding layers' RoPE base is rope.freq_base_swa,
 * 10000 without it, never scaled. Attention scale 1/sqrt(head_dim), except
 * the 62-layer 27B model's 1/sqrt(hidden / heads) (HF's query_pre_attn_scalar
 * 168); norms stored as w + 1 (convert_hf_to_gguf adds Gemma's 1); embeddings
 * times sqrtf(hidden) in F32 (llama.cpp's ggml_scale). */
static vllm_status gemma3_config(const gguf_file *f, model_config *cfg) {
    cfg->arch = MODEL_ARCH_GEMMA3;
    snprintf(cfg->architecture, sizeof cfg->architecture, "Gemma3ForCausalLM");
    cfg->hidden_act = MODEL_ACT_GELU_TANH;
    cfg->post_norms = true;
    cfg->qk_norm = true;
    cfg->norm_weight_offset = 0.0f;
    cfg->embed_scale = sqrtf((float)cfg->hidden_size);
    cfg->rope_local_theta = 10000.0f;
    cfg->attn_scale = cfg->num_hidden_layers == 62
                          ? 1.0f / sqrtf((float)(cfg->hidden_size / cfg->num_attention_heads))
                          : 1.0f / sqrtf((float)cfg->head_dim);
    cfg->sliding_window = 0;
    vllm_status rc = get_i32(f, "gemma3.attention.sliding_window", &cfg->sliding_window, 0, INT32_MAX, true);
    if (rc) return rc;
    if (cfg->sliding_window > 0) {
        const char *pkey = "gemma3.attention.sliding_window_pattern";
        const gguf_kv *pattern = gguf_find_kv(f, pkey);
        int32_t n = cfg->num_hidden_layers, period = 6;
        if (pattern && pattern->type == GGUF_TYPE_ARRAY) {
            if (pattern->elem_type != GGUF_TYPE_BOOL || pattern->count != (uint64_t)n)
                return vllm_error(VLLM_ERR_FORMAT, "%s: %s must be %d bools (one per layer), not %llu of %s", f->path,
                                  pkey, n, (unsigned long long)pattern->count, gguf_type_name(pattern->elem_type));
            for (int32_t l = 0; l < n; l++)
                if (pattern->value[l]) cfg->sliding_layers[l >> 6] |= (uint64_t)1 << (l & 63);
        } else {
            if ((rc = get_i32(f, pkey, &period, 0, INT32_MAX, true))) return rc;
            for (int32_t l = 0; l < n; l++)
                if (period == 0 || l % period < period - 1) cfg->sliding_layers[l >> 6] |= (uint64_t)1 << (l & 63);
        }
        if ((rc = get_f32(f, "gemma3.rope.freq_base_swa", &cfg->rope_local_theta, true))) return rc;
    }
    double cap;
    if (gguf_get_float(f, "gemma3.final_logit_softcapping", &cap) == VLLM_OK && cap > 0)
        cfg->final_logit_softcapping = (float)cap;
    if (gguf_get_float(f, "gemma3.attn_logit_softcapping", &cap) == VLLM_OK && cap > 0)
        return vllm_error(VLLM_ERR_UNSUPPORTED, "%s: gemma3.attn_logit_softcapping %g is not supported", f->path, cap);
    return VLLM_OK;
}

/* Mixture of experts, as llama.cpp reads it: <arch>.expert_count experts
 * (absent or 0: dense), expert_used_count of them per token, each of
 * expert_feed_forward_length (qwen3moe; llama's Mixtral files: the
 * feed_forward_length), every layer sparse, the top-k weights renormalised
 * (llama.cpp's build_moe_ffn with norm_w true for both, unless the file says
 * expert_weights_norm false) and not scaled (expert_weights_scale 0 or 1 only).
 * A llama file with experts is Mixtral. */
static vllm_status moe_config(const gguf_file *f, const char *arch, model_config *cfg) {
    char k[96];
    vllm_status rc;
    int32_t n = 0;
    if ((rc = get_i32(f, arch_key(k, sizeof k, arch, "expert_count"), &n, 0, 4096, true))) return rc;
    if (!n) return VLLM_OK;
    cfg->num_experts = n;
    cfg->moe_intermediate_size = cfg->intermediate_size;
    if ((rc = get_i32(f, arch_key(k, sizeof k, arch, "expert_used_count"), &cfg->num_experts_per_tok, 1, n, false)) ||
        (rc = get_i32(f, arch_key(k, sizeof k, arch, "expert_feed_forward_length"), &cfg->moe_intermediate_size, 1,
                      1 << 30, true)))
        return rc;
    cfg->norm_topk_prob = true;
    bool norm;
    if (gguf_get_bool(f, arch_key(k, sizeof k, arch, "expert_weights_norm"), &norm) == VLLM_OK) cfg->norm_topk_prob = norm;
    double scale;
    if (gguf_get_float(f, arch_key(k, sizeof k, arch, "expert_weights_scale"), &scale) == VLLM_OK && scale != 0 &&
        scale != 1)
        return vllm_error(VLLM_ERR_UNSUPPORTED, "%s: %s = %g is not supported (0 or 1)", f->path, k, scale);
    if (gguf_find_kv(f, arch_key(k, sizeof k, arch, "expert_shared_count")) ||
        gguf_find_kv(f, arch_key(k, sizeof k, arch, "expert_shared_feed_forward_length")))
        return vllm_error(VLLM_ERR_UNSUPPORTED, "%s: shared experts (%s) are not supported", f->path, k);
    for (int32_t l = 0; l < cfg->num_hidden_layers; l++) cfg->moe_layers[l >> 6] |= (uint64_t)1 << (l & 63);
    if (!strcmp(arch, "llama")) {
        cfg->arch = MODEL_ARCH_MISTRAL;
        snprintf(cfg->architecture, sizeof cfg->architecture, "MixtralForCausalLM");
    }
    return VLLM_OK;
}

vllm_status gguf_model_config(const gguf_file *f, model_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    gguf_str arch_s;
    vllm_status rc = gguf_get_string(f, "general.architecture", &arch_s);
    if (rc) return rc;
    bool gemma3 = str_eq(arch_s, "gemma3"), qwen3moe = str_eq(arch_s, "qwen3moe");
    bool qwen3 = qwen3moe; /* the dense qwen3 form would bind the same way; not checked against a reference yet */
    if (!str_eq(arch_s, "llama") && !gemma3 && !qwen3)
        return vllm_error(VLLM_ERR_UNSUPPORTED,
                          "%s: general.architecture '%.*s' is not supported (llama, gemma3 and qwen3moe are)",
                          f->path, (int)(arch_s.len < 64 ? arch_s.len : 64), arch_s.s);
    const char *arch = gemma3 ? "gemma3" : qwen3moe ? "qwen3moe" : "llama";
    cfg->arch = qwen3 ? MODEL_ARCH_QWEN3 : MODEL_ARCH_LLAMA;
    cfg->qk_norm = qwen3; /* attn_q_norm / attn_k_norm; qwen3 q/k rows are HF's (not interleaved) */
    snprintf(cfg->architecture, sizeof cfg->architecture, "%s",
             qwen3moe ? "Qwen3MoeForCausalLM" : "LlamaForCausalLM");
    const int32_t big = 1 << 30;
    char k[96];
#define KEY(suffix) arch_key(k, sizeof k, arch, suffix)
    if ((rc = get_i32(f, KEY("embedding_length"), &cfg->hidden_size, 1, big, false)) ||
        (rc = get_i32(f, KEY("feed_forward_length"), &cfg->intermediate_size, 1, big, false)) ||
        (rc = get_i32(f, KEY("block_count"), &cfg->num_hidden_layers, 1, MODEL_MAX_LAYERS, false)) ||
        (rc = get_i32(f, KEY("attention.head_count"), &cfg->num_attention_heads, 1, 1 << 16, false)) ||
        (rc = get_i32(f, KEY("context_length"), &cfg->max_position_embeddings, 1, big, false)))
        return rc;
    cfg->num_key_value_heads = cfg->num_attention_heads;
    if ((rc = get_i32(f, KEY("attention.head_count_kv"), &cfg->num_key_value_heads, 1, cfg->num_attention_heads, true)))
        return rc;
    if (cfg->num_attention_heads % cfg->num_key_value_heads)
        return vllm_error(VLLM_ERR_FORMAT, "%s: head_count %d is not a multiple of head_count_kv %d", f->path,
                          cfg->num_attention_heads, cfg->num_key_value_heads);
    cfg->head_dim = cfg->hidden_size / cfg->num_attention_heads;
    if ((rc = get_i32(f, KEY("attention.key_length"), &cfg->head_dim, 1, big, true))) return rc;
    if (cfg->head_dim % 2)
        return vllm_error(VLLM_ERR_FORMAT, "%s: head dimension %d is odd", f->path, cfg->head_dim);
    int32_t rot = cfg->head_dim, vlen = cfg->head_dim;
    if ((rc = get_i32(f, KEY("rope.dimension_count"), &rot, 1, big, true)) ||
        (rc = get_i32(f, KEY("attention.value_length"), &vlen, 1, big, true)))
        return rc;
    if (rot != cfg->head_dim || vlen != cfg->head_dim)
        return vllm_error(VLLM_ERR_UNSUPPORTED, "%s: rope.dimension_count %d / value_length %d differ from head dim %d",
                          f->path, rot, vlen, cfg->head_dim);
    cfg->rms_norm_eps = 1e-5f;
    cfg->rope_theta = gemma3 ? 1e6f : 10000.0f;
    if ((rc = get_f32(f, KEY("attention.layer_norm_rms_epsilon"), &cfg->rms_norm_eps, false)) ||
        (rc = get_f32(f, KEY("rope.freq_base"), &cfg->rope_theta, true)))
        return rc;
    gguf_str st;
    if (gguf_get_string(f, KEY("rope.scaling.type"), &st) == VLLM_OK && !str_eq(st, "none")) {
        if (!str_eq(st, "linear"))
            return vllm_error(VLLM_ERR_UNSUPPORTED, "%s: %s '%.*s' is not supported", f->path, k,
                              (int)(st.len < 32 ? st.len : 32), st.s);
        cfg->rope_scaling = ROPE_SCALING_LINEAR;
        if ((rc = get_f32(f, KEY("rope.scaling.factor"), &cfg->rope_factor, false))) return rc;
    }
    if (gguf_find_tensor(f, "rope_freqs.weight"))
        return vllm_error(VLLM_ERR_UNSUPPORTED, "%s: rope_freqs.weight (Llama 3.1 RoPE scaling) is not supported yet", f->path);

    const gguf_tensor *emb = gguf_find_tensor(f, "token_embd.weight");
    const gguf_kv *toks = gguf_find_kv(f, "tokenizer.ggml.tokens");
    cfg->vocab_size = 0;
    if ((rc = get_i32(f, KEY("vocab_size"), &cfg->vocab_size, 1, big, true))) return rc;
#undef KEY
    if ((rc = moe_config(f, arch, cfg))) return rc;
    if (!cfg->vocab_size && toks && toks->count <= (uint64_t)big) cfg->vocab_size = (int32_t)toks->count;
    if (!cfg->vocab_size && emb && emb->ndim == 2 && emb->ne[1] <= big) cfg->vocab_size = (int32_t)emb->ne[1];
    if (cfg->vocab_size <= 0)
        return vllm_error(VLLM_ERR_FORMAT, "%s: vocabulary size unknown (no %s.vocab_size, token list or token_embd)",
                          f->path, arch);
    cfg->tie_word_embeddings = gguf_find_tensor(f, "output.weight") == NULL;
    cfg->attention_bias = gguf_find_tensor(f, "blk.0.attn_q.bias") != NULL;
    const gguf_tensor *q = gguf_find_tensor(f, "blk.0.attn_q.weight");
    cfg->torch_dtype = q ? q->type : DTYPE_F32;
    cfg->bos_token_id = -1;
    if ((rc = get_i32(f, "tokenizer.ggml.bos_token_id", &cfg->bos_token_id, 0, cfg->vocab_size - 1, true))) return rc;
    int32_t eos = -1;
    if ((rc = get_i32(f, "tokenizer.ggml.eos_token_id", &eos, 0, cfg->vocab_size - 1, true))) return rc;
    if (eos >= 0) cfg->eos_token_ids[cfg->num_eos_token_ids++] = eos;
    if ((rc = get_i32(f, "tokenizer.ggml.eot_token_id", &eos, 0, cfg->vocab_size - 1, true))) return rc;
    if (eos >= 0 && (cfg->num_eos_token_ids == 0 || cfg->eos_token_ids[0] != eos))
        cfg->eos_token_ids[cfg->num_eos_token_ids++] = eos;
    return gemma3 ? gemma3_config(f, cfg) : VLLM_OK;
}

/* Binds *out to tensor name with model.h shape (rows, cols) / (cols) if rows == 0. */
static vllm_status bind(const gguf_file *f, const char *name, int64_t rows, int64_t cols, tensor *out) {
    const gguf_tensor *t = gguf_find_tensor(f, name);
    if (!t) return vllm_error(VLLM_ERR_FORMAT, "%s: tensor '%s' is missing", f->path, name);
    bool ok = rows ? t->ndim == 2 && t->ne[0] == cols && t->ne[1] == rows : t->ndim == 1 && t->ne[0] == cols;
    if (!ok)
        return vllm_error(VLLM_ERR_FORMAT, "%s: tensor '%s' has ne [%lld, %lld] (%d dims), expected [%lld, %lld]", f->path,
                          name, (long long)t->ne[0], (long long)t->ne[1], t->ndim, (long long)cols, (long long)(rows ? rows : 1));
    if (!rows && t->type != DTYPE_F32 && t->type != DTYPE_F16 && t->type != DTYPE_BF16)
        return vllm_error(VLLM_ERR_UNSUPPORTED, "%s: vector tensor '%s' is %s (F32/F16/BF16 expected)", f->path, name,
                          dtype_name(t->type));
    out->type = t->type;
    out->ndim = rows ? 2 : 1;
    out->shape[0] = rows ? rows : cols;
    out->shape[1] = rows ? cols : 0;
    out->data = t->data;
    return VLLM_OK;
}

/* Binds out[e], e < n, to the experts of the 3-D tensor name (ne [cols,
 * rows, n]: expert e's (rows, cols) matrix is the e-th slab). */
static vllm_status bind_experts(const gguf_file *f, const char *name, int64_t rows, int64_t cols, int64_t n,
                                tensor *out) {
    const gguf_tensor *t = gguf_find_tensor(f, name);
    if (!t) return vllm_error(VLLM_ERR_FORMAT, "%s: tensor '%s' is missing", f->path, name);
    if (t->ndim != 3 || t->ne[0] != cols || t->ne[1] != rows || t->ne[2] != n)
        return vllm_error(VLLM_ERR_FORMAT, "%s: tensor '%s' has ne [%lld, %lld, %lld] (%d dims), expected [%lld, %lld, %lld]",
                          f->path, name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], t->ndim,
                          (long long)cols, (long long)rows, (long long)n);
    size_t slab = (size_t)rows * dtype_row_bytes(t->type, cols);
    for (int64_t e = 0; e < n; e++)
        out[e] = (tensor){.type = t->type, .ndim = 2, .shape = {rows, cols},
                          .data = (const uint8_t *)t->data + (size_t)e * slab};
    return VLLM_OK;
}

/* Layer l's sparse block: ffn_gate_inp (router), ffn_{gate,up,down}_exps. */
static vllm_status bind_moe(const gguf_file *f, const model_config *cfg, model_weights *w, int32_t l) {
    size_t E = (size_t)cfg->num_experts;
    if (!w->moe) {
        w->moe = calloc((size_t)cfg->num_hidden_layers, sizeof *w->moe);
        w->experts = calloc((size_t)cfg->num_hidden_layers * 3 * E, sizeof *w->experts);
        if (!w->moe || !w->experts) return vllm_error(VLLM_ERR_NOMEM, "%s: out of memory", f->path);
    }
    tensor *t = w->experts + (size_t)l * 3 * E;
    moe_weights *b = &w->moe[l];
    *b = (moe_weights){.gate = t, .up = t + E, .down = t + 2 * E};
    int64_t dim = cfg->hidden_size, ff = cfg->moe_intermediate_size;
    char name[64];
    vllm_status rc;
    snprintf(name, sizeof name, "blk.%d.ffn_gate_inp.weight", l);
    if ((rc = bind(f, name, cfg->num_experts, dim, &b->router))) return rc;
    snprintf(name, sizeof name, "blk.%d.ffn_gate_exps.weight", l);
    if ((rc = bind_experts(f, name, ff, dim, (int64_t)E, b->gate))) return rc;
    snprintf(name, sizeof name, "blk.%d.ffn_up_exps.weight", l);
    if ((rc = bind_experts(f, name, ff, dim, (int64_t)E, b->up))) return rc;
    snprintf(name, sizeof name, "blk.%d.ffn_down_exps.weight", l);
    if ((rc = bind_experts(f, name, dim, ff, (int64_t)E, b->down))) return rc;
    w->layers[l].moe = b;
    return VLLM_OK;
}

vllm_status gguf_model_weights(const gguf_file *f, const model_config *cfg, model_weights *w) {
    memset(w, 0, sizeof *w);
    int64_t dim = cfg->hidden_size, hd = cfg->head_dim, ff = cfg->intermediate_size, V = cfg->vocab_size;
    int64_t qd = cfg->num_attention_heads * hd, kvd = cfg->num_key_value_heads * hd;
    vllm_status rc;
    if ((rc = bind(f, "token_embd.weight", V, dim, &w->embed_tokens)) ||
        (rc = bind(f, "output_norm.weight", 0, dim, &w->norm)))
        return rc;
    if (cfg->tie_word_embeddings) w->lm_head = w->embed_tokens;
    else if ((rc = bind(f, "output.weight", V, dim, &w->lm_head))) return rc;
    if (!(w->layers = calloc((size_t)cfg->num_hidden_layers, sizeof *w->layers)))
        return vllm_error(VLLM_ERR_NOMEM, "%s: out of memory", f->path);
    for (int32_t l = 0; l < cfg->num_hidden_layers; l++) {
        layer_weights *L = &w->layers[l];
        struct { const char *suffix; int64_t rows, cols; tensor *t; } map[] = {
            {"attn_norm", 0, dim, &L->input_layernorm}, {"attn_q", qd, dim, &L->q_proj},
            {"attn_k", kvd, dim, &L->k_proj},           {"attn_v", kvd, dim, &L->v_proj},
            {"attn_output", dim, qd, &L->o_proj},       {"ffn_norm", 0, dim, &L->post_attention_layernorm},
            {"ffn_gate", ff, dim, &L->gate_proj},       {"ffn_up", ff, dim, &L->up_proj},
            {"ffn_down", dim, ff, &L->down_proj},
            /* Qwen3 (the q/k norms) and Gemma 3 only (the first 9 entries are every architecture's) */
            {"attn_q_norm", 0, hd, &L->q_norm},         {"attn_k_norm", 0, hd, &L->k_norm},
            {"post_attention_norm", 0, dim, &L->attn_post_norm},
            {"post_ffw_norm", 0, dim, &L->ffn_post_norm},
        };
        /* optional, each on its own, as llama.cpp loads them: llama.cpp's
         * converter writes a Llama checkpoint's attention_bias tensors here */
        struct { const char *suffix; int64_t len; tensor *t; } biases[] = {
            {"attn_q", qd, &L->q_bias}, {"attn_k", kvd, &L->k_bias},
            {"attn_v", kvd, &L->v_bias}, {"attn_output", dim, &L->o_bias},
        };
        size_t n_map = cfg->arch == MODEL_ARCH_GEMMA3 ? sizeof map / sizeof map[0] : cfg->qk_norm ? 11 : 9;
        bool moe = model_layer_is_moe(cfg, l);
        if (moe && (rc = bind_moe(f, cfg, w, l))) goto fail;
        for (size_t i = 0; i < n_map; i++) {
            char name[64];
            if (moe && i >= 6 && i <= 8) continue; /* ffn_gate/up/down: the experts' instead */
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, map[i].suffix);
            if ((rc = bind(f, name, map[i].rows, map[i].cols, map[i].t))) goto fail;
        }
        for (size_t i = 0; i < sizeof biases / sizeof biases[0]; i++) {
            char name[64];
            snprintf(name, sizeof name, "blk.%d.%s.bias", l, biases[i].suffix);
            if (gguf_find_tensor(f, name) && (rc = bind(f, name, 0, biases[i].len, biases[i].t))) goto fail;
        }
    }
    return VLLM_OK;
fail:
    free(w->layers);
    free(w->moe);
    free(w->experts);
    memset(w, 0, sizeof *w);
    return rc;
}

/* ---- tokenizer ----------------------------------------------------------- */

static vllm_status tok_id(const gguf_file *f, const char *key, int64_t n, int32_t *out) {
    *out = -1;
    return get_i32(f, key, out, 0, n - 1, true);
}

vllm_status gguf_tokenizer_extract(const gguf_file *f, gguf_tokenizer *tok) {
    memset(tok, 0, sizeof *tok);
    vllm_status rc;
    const gguf_kv *kv;
    if ((rc = gguf_get_string(f, "tokenizer.ggml.model", &tok->model))) return rc;
    gguf_get_string(f, "tokenizer.ggml.pre", &tok->pre);
    gguf_get_string(f, "tokenizer.chat_template", &tok->chat_template);
    if ((rc = get_kv(f, "tokenizer.ggml.tokens", &kv))) return rc;
    if (kv->type != GGUF_TYPE_ARRAY || kv->elem_type != GGUF_TYPE_STRING || kv->count == 0 || kv->count > INT32_MAX)
        return wrong_type(f, "tokenizer.ggml.tokens", kv, "a non-empty array of strings");
    int64_t n = tok->num_tokens = (int64_t)kv->count;
    if (!(tok->tokens = malloc((size_t)n * sizeof *tok->tokens))) goto nomem;
    gguf_array_strings(kv, tok->tokens);
    if ((kv = gguf_find_kv(f, "tokenizer.ggml.scores"))) {
        if (kv->type != GGUF_TYPE_ARRAY || (kv->elem_type != GGUF_TYPE_FLOAT32 && kv->elem_type != GGUF_TYPE_FLOAT64) ||
            kv->count != (uint64_t)n) {
            rc = vllm_error(VLLM_ERR_FORMAT, "%s: tokenizer.ggml.scores must be %lld floats", f->path, (long long)n);
            goto fail;
        }
        if (!(tok->scores = malloc((size_t)n * sizeof *tok->scores))) goto nomem;
        for (int64_t i = 0; i < n; i++) tok->scores[i] = (float)gguf_array_float(kv, (uint64_t)i);
    }
    if ((kv = gguf_find_kv(f, "tokenizer.ggml.token_type"))) {
        if (kv->type != GGUF_TYPE_ARRAY || !is_int_type(kv->elem_type) || kv->count != (uint64_t)n) {
            rc = vllm_error(VLLM_ERR_FORMAT, "%s: tokenizer.ggml.token_type must be %lld integers", f->path, (long long)n);
            goto fail;
        }
        if (!(tok->token_types = malloc((size_t)n * sizeof *tok->token_types))) goto nomem;
        for (int64_t i = 0; i < n; i++) tok->token_types[i] = (int32_t)gguf_array_int(kv, (uint64_t)i);
    }
    if ((kv = gguf_find_kv(f, "tokenizer.ggml.merges"))) {
        if (kv->type != GGUF_TYPE_ARRAY || kv->elem_type != GGUF_TYPE_STRING) {
            rc = wrong_type(f, "tokenizer.ggml.merges", kv, "an array of strings");
            goto fail;
        }
        tok->num_merges = (int64_t)kv->count;
        if (!(tok->merges = malloc((size_t)(kv->count ? kv->count : 1) * sizeof *tok->merges))) goto nomem;
        gguf_array_strings(kv, tok->merges);
    }
    if ((rc = tok_id(f, "tokenizer.ggml.bos_token_id", n, &tok->bos_id)) ||
        (rc = tok_id(f, "tokenizer.ggml.eos_token_id", n, &tok->eos_id)) ||
        (rc = tok_id(f, "tokenizer.ggml.unknown_token_id", n, &tok->unk_id)) ||
        (rc = tok_id(f, "tokenizer.ggml.padding_token_id", n, &tok->pad_id)))
        goto fail;
    bool b;
    tok->add_bos = gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &b) == VLLM_OK ? b : -1;
    tok->add_eos = gguf_get_bool(f, "tokenizer.ggml.add_eos_token", &b) == VLLM_OK ? b : -1;
    return VLLM_OK;
nomem:
    rc = vllm_error(VLLM_ERR_NOMEM, "%s: out of memory", f->path);
fail:
    gguf_tokenizer_deinit(tok);
    return rc;
}

void gguf_tokenizer_deinit(gguf_tokenizer *tok) {
    if (!tok) return;
    free(tok->tokens);
    free(tok->scores);
    free(tok->token_types);
    free(tok->merges);
    memset(tok, 0, sizeof *tok);
}

/* ---- locating the file ------------------------------------------------------ */

static bool ends_with_gguf(const char *s) {
    size_t n = strlen(s);
    return n >= 5 && !strcmp(s + n - 5, ".gguf");
}

vllm_status gguf_find_path(const char *path, char **out) {
    *out = NULL;
    struct stat st;
    if (ends_with_gguf(path) && (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))) {
        if (!(*out = strdup(path))) return vllm_error(VLLM_ERR_NOMEM, "out of memory");
        return VLLM_OK;
    }
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) return VLLM_OK;
    char *cfg = NULL;
    if (asprintf(&cfg, "%s/config.json", path) < 0) return vllm_error(VLLM_ERR_NOMEM, "out of memory");
    bool has_config = access(cfg, F_OK) == 0;
    free(cfg);
    if (has_config) return VLLM_OK;
    DIR *d = opendir(path);
    if (!d) return VLLM_OK;
    char first[256] = "";
    vllm_status rc = VLLM_OK;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!ends_with_gguf(e->d_name)) continue;
        if (first[0]) {
            rc = vllm_error(VLLM_ERR_INVALID, "%s: several .gguf files (%s, %s, ...); name the file", path, first,
                            e->d_name);
            break;
        }
        snprintf(first, sizeof first, "%s", e->d_name);
    }
    closedir(d);
    if (rc == VLLM_OK && first[0] && asprintf(out, "%s/%s", path, first) < 0) {
        *out = NULL;
        rc = vllm_error(VLLM_ERR_NOMEM, "out of memory");
    }
    return rc;
}
