/*
 * test_gguf.c - the GGUF reader on files built byte by byte here: a valid
 * file with metadata of every type, then one bad-file case per validation
 * (every truncation, bad magic/version, counts and string lengths beyond the
 * file, tensor data beyond the file or misaligned or overlapping, unknown and
 * unsupported types, duplicates); a gemma3 file's layer kinds and local RoPE
 * base as llama.cpp reads them (sliding_window_pattern as a period or one bool
 * per layer, freq_base_swa, no window), and a malformed pattern refused.
 *
 *   test_gguf --compare FILE.gguf REFDIR   (used by tests/test_gguf_ref.sh)
 * checks FILE against tools/make_gguf.py --dump-ref output: our dequantizer
 * equals numpy's bit for bit, our Q8_0/Q4_0 quantizers reproduce the file's
 * bytes from the F32 source, and prints the mapped config ("cfg KEY VALUE")
 * and tokenizer for the script to compare with config.json.
 *
 *   test_gguf --dequant FILE.gguf REFDIR NAME   (tests/test_gguf_types.sh)
 * checks only the dequantization, of the leading elements names.txt gives
 * per tensor (any architecture, whole rows), against REFDIR's deq.bin
 * (tests/ref/gguf_py_ref.py: ggml's gguf.quants); prints "ok NAME" with the
 * types seen, or "FAIL NAME: ..." naming the first element that differs.
 */
#include <jansson.h>
/* checks: 10 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "harness.h"
#include "kernels/quant.h"
#include "model/gguf.h"
#include "tokenizer/tokenizer.h"

/* ---- a tiny GGUF builder ------------------------------------------------- */

typedef struct buf {
    uint8_t b[8192];
    size_t n;
} buf;

static void put(buf *b, const void *p, size_t n) { memcpy(b->b + b->n, p, n), b->n += n; }
static void u32(buf *b, uint32_t v) { put(b, &v, 4); }
static void u64(buf *b, uint64_t v) { put(b, &v, 8); }
static void str(buf *b, const char *s) { u64(b, strlen(s)), put(b, s, strlen(s)); }
static void pad(buf *b, size_t a) { while (b->n % a) b->b[b->n++] = 0; }

/* Knobs for the bad-file cases; zero = a valid file. */
typedef struct spec {
    uint32_t version;          /* 0 = 3 */
    uint64_t nkv_override, nt_override;
    uint64_t str_len_override; /* general.name's length */
    uint32_t type_override;    /* tensor 1's ggml type */
    uint64_t offset_override;  /* tensor 1's offset (+1 so 0 is "none") */
    uint32_t value_type;       /* key 0's type (+1) */
    uint32_t ndim;             /* tensor 0's ndim (+1) */
    uint32_t alignment;        /* general.alignment value, 0 = 32 */
    int dup_key, dup_tensor;
} spec;

/* Metadata: one key of every scalar type, a string, arrays of INT32 /
 * FLOAT32 / STRING. Tensors: "a" F32 (4), "b" Q8_0 (32, 2) = 68 bytes at 32. */
static size_t build(buf *b, spec s) {
    b->n = 0;
    put(b, "GGUF", 4);
    u32(b, s.version ? s.version : 3);
    u64(b, s.nt_override ? s.nt_override : 2);
    u64(b, s.nkv_override ? s.nkv_override : 15);
    str(b, "k.u8"), u32(b, s.value_type ? s.value_type - 1 : GGUF_TYPE_UINT8), put(b, "\xfe", 1);
    str(b, "k.i8"), u32(b, GGUF_TYPE_INT8), put(b, "\xfe", 1);
    str(b, "k.u16"), u32(b, GGUF_TYPE_UINT16), put(b, "\x34\x12", 2);
    str(b, "k.i16"), u32(b, GGUF_TYPE_INT16), put(b, "\xfe\xff", 2);
    str(b, "k.u32"), u32(b, GGUF_TYPE_UINT32), u32(b, 4000000000u);
    str(b, "k.i32"), u32(b, GGUF_TYPE_INT32), u32(b, (uint32_t)-7);
    str(b, "k.f32"), u32(b, GGUF_TYPE_FLOAT32), put(b, &(float){1.5f}, 4);
    str(b, "k.bool"), u32(b, GGUF_TYPE_BOOL), put(b, "\x01", 1);
    str(b, "k.u64"), u32(b, GGUF_TYPE_UINT64), u64(b, 1ull << 40);
    str(b, "k.i64"), u32(b, GGUF_TYPE_INT64), u64(b, (uint64_t)-5);
    str(b, "k.f64"), u32(b, GGUF_TYPE_FLOAT64), put(b, &(double){-0.25}, 8);
    str(b, s.dup_key ? "k.u8" : "general.name"), u32(b, GGUF_TYPE_STRING);
    if (s.str_len_override) u64(b, s.str_len_override), put(b, "tiny", 4);
    else str(b, "tiny");
    str(b, "k.ai32"), u32(b, GGUF_TYPE_ARRAY), u32(b, GGUF_TYPE_INT32), u64(b, 3);
    for (int i = 0; i < 3; i++) u32(b, (uint32_t)(i * 10 - 1));
    str(b, "k.astr"), u32(b, GGUF_TYPE_ARRAY), u32(b, GGUF_TYPE_STRING), u64(b, 2), str(b, "x"), str(b, "yz");
    str(b, "general.alignment"), u32(b, GGUF_TYPE_UINT32), u32(b, s.alignment ? s.alignment : 32);
    /* tensor infos */
    str(b, "a"), u32(b, s.ndim ? s.ndim - 1 : 1), u64(b, 4), u32(b, GGML_TYPE_F32), u64(b, 0);
    str(b, s.dup_tensor ? "a" : "b"), u32(b, 2), u64(b, 32), u64(b, 2);
    u32(b, s.type_override ? s.type_override : GGML_TYPE_Q8_0), u64(b, s.offset_override ? s.offset_override - 1 : 32);
    pad(b, 32);
    size_t data = b->n;
    for (int i = 0; i < 4; i++) put(b, &(float){(float)i + 0.5f}, 4);
    pad(b, 32);
    for (int blk = 0; blk < 2; blk++) { /* d = 0.5, q[j] = j - 16 (+blk) */
        put(b, "\x00\x38", 2);
        for (int j = 0; j < 32; j++) b->b[b->n++] = (uint8_t)(int8_t)(j - 16 + blk);
    }
    return data;
}

TEST(test_gguf_valid) {
    buf b;
    build(&b, (spec){0});
    gguf_file f;
    vllm_status rc = gguf_parse(b.b, b.n, "mem.gguf", &f);
    CHECK(rc == VLLM_OK, "%s", vllm_errmsg());
    CHECK(f.version == 3 && f.num_kvs == 15 && f.num_tensors == 2 && f.alignment == 32);
    int64_t i;
    double d;
    bool bo;
    gguf_str s;
    CHECK(gguf_get_int(&f, "k.u8", &i) == VLLM_OK && i == 254);
    CHECK(gguf_get_int(&f, "k.i8", &i) == VLLM_OK && i == -2);
    CHECK(gguf_get_int(&f, "k.u16", &i) == VLLM_OK && i == 0x1234);
    CHECK(gguf_get_int(&f, "k.i16", &i) == VLLM_OK && i == -2);
    CHECK(gguf_get_int(&f, "k.u32", &i) == VLLM_OK && i == 4000000000);
    CHECK(gguf_get_int(&f, "k.i32", &i) == VLLM_OK && i == -7);
    CHECK(gguf_get_int(&f, "k.u64", &i) == VLLM_OK && i == 1ll << 40);
    CHECK(gguf_get_int(&f, "k.i64", &i) == VLLM_OK && i == -5);
    CHECK(gguf_get_float(&f, "k.f32", &d) == VLLM_OK && d == 1.5);
    CHECK(gguf_get_float(&f, "k.f64", &d) == VLLM_OK && d == -0.25);
    CHECK(gguf_get_bool(&f, "k.bool", &bo) == VLLM_OK && bo);
    CHECK(gguf_get_string(&f, "general.name", &s) == VLLM_OK && s.len == 4 && !memcmp(s.s, "tiny", 4));
    CHECK(gguf_get_int(&f, "k.f32", &i) == VLLM_ERR_FORMAT && strstr(vllm_errmsg(), "k.f32"), "%s", vllm_errmsg());
    CHECK(gguf_get_int(&f, "nope", &i) == VLLM_ERR_NOT_FOUND && strstr(vllm_errmsg(), "nope"));
    const gguf_kv *kv = gguf_find_kv(&f, "k.ai32");
    CHECK(kv && kv->type == GGUF_TYPE_ARRAY && kv->elem_type == GGUF_TYPE_INT32 && kv->count == 3);
    CHECK(gguf_array_int(kv, 0) == -1 && gguf_array_int(kv, 2) == 19);
    kv = gguf_find_kv(&f, "k.astr");
    gguf_str ss[2];
    CHECK(kv && kv->count == 2);
    gguf_array_strings(kv, ss);
    CHECK(ss[0].len == 1 && ss[0].s[0] == 'x' && ss[1].len == 2 && !memcmp(ss[1].s, "yz", 2));
    const gguf_tensor *a = gguf_find_tensor(&f, "a"), *t = gguf_find_tensor(&f, "b");
    CHECK(a && a->type == DTYPE_F32 && a->ndim == 1 && a->ne[0] == 4 && a->size == 16);
    CHECK(((const float *)a->data)[3] == 3.5f);
    CHECK(t && t->type == DTYPE_Q8_0 && t->ndim == 2 && t->ne[0] == 32 && t->ne[1] == 2 && t->size == 68);
    float y[64];
    quant_dequantize_row(t->type, t->data, y, 64);
    CHECK(y[0] == -8.0f && y[63] == 0.5f * 16, "%g %g", y[0], y[63]);
    CHECK(!f.rope_interleaved, "no llama architecture key");
    gguf_deinit(&f);
    gguf_deinit(&f); /* idempotent on a zeroed file */
}

/* Parses the spec'd file and expects rc and a message containing want. */
static void expect_bad(const char *label, spec s, vllm_status want_rc, const char *want) {
    buf b;
    build(&b, s);
    gguf_file f;
    vllm_status rc = gguf_parse(b.b, b.n, "bad.gguf", &f);
    CHECK_OR(, rc == want_rc, "%s: rc %d (want %d): %s", label, rc, want_rc, rc ? vllm_errmsg() : "accepted");
    CHECK_OR(, strstr(vllm_errmsg(), "bad.gguf") && strstr(vllm_errmsg(), want), "%s: message '%s' lacks '%s'", label,
             vllm_errmsg(), want);
    CHECK_OR(, f.kvs == NULL && f.tensors == NULL && f.path == NULL, "%s: not cleaned up", label);
}

TEST(test_gguf_bad_files) {
    expect_bad("version 1", (spec){.version = 1}, VLLM_ERR_UNSUPPORTED, "version 1");
    expect_bad("version 4", (spec){.version = 4}, VLLM_ERR_UNSUPPORTED, "version 4");
    expect_bad("big-endian", (spec){.version = 0x03000000}, VLLM_ERR_UNSUPPORTED, "big-endian");
    expect_bad("kv count", (spec){.nkv_override = 1ull << 60}, VLLM_ERR_FORMAT, "cannot fit");
    expect_bad("tensor count", (spec){.nt_override = 1ull << 40}, VLLM_ERR_FORMAT, "cannot fit");
    expect_bad("kv count + 1", (spec){.nkv_override = 16}, VLLM_ERR_FORMAT, "");
    expect_bad("string length", (spec){.str_len_override = 1ull << 62}, VLLM_ERR_FORMAT, "string length");
    expect_bad("string length +1", (spec){.str_len_override = 100000}, VLLM_ERR_FORMAT, "exceeds");
    expect_bad("unknown value type", (spec){.value_type = 13 + 1}, VLLM_ERR_FORMAT, "unknown value type 13");
    expect_bad("unknown ggml type", (spec){.type_override = 99}, VLLM_ERR_FORMAT, "unknown ggml type 99");
    expect_bad("unsupported ggml type", (spec){.type_override = 23}, VLLM_ERR_UNSUPPORTED,
               "tensor 'b': type IQ4_XS is not supported");
    expect_bad("unsupported ggml type Q8_1", (spec){.type_override = 9}, VLLM_ERR_UNSUPPORTED,
               "tensor 'b': type Q8_1 is not supported");
    expect_bad("unsupported ggml type IQ2_XXS", (spec){.type_override = 16}, VLLM_ERR_UNSUPPORTED,
               "tensor 'b': type IQ2_XXS is not supported");
    expect_bad("offset beyond", (spec){.offset_override = 1 + 4096}, VLLM_ERR_FORMAT, "beyond the end");
    expect_bad("offset wraps", (spec){.offset_override = 1 + (UINT64_MAX - 31)}, VLLM_ERR_FORMAT, "'b'");
    expect_bad("offset misaligned", (spec){.offset_override = 1 + 16}, VLLM_ERR_FORMAT, "misaligned");
    expect_bad("overlap", (spec){.offset_override = 1 + 0}, VLLM_ERR_FORMAT, "overlap");
    expect_bad("ndim 0", (spec){.ndim = 1 + 0}, VLLM_ERR_FORMAT, "0 dimensions");
    expect_bad("ndim 5", (spec){.ndim = 1 + 5}, VLLM_ERR_FORMAT, "5 dimensions");
    expect_bad("alignment", (spec){.alignment = 24}, VLLM_ERR_FORMAT, "general.alignment");
    expect_bad("duplicate key", (spec){.dup_key = 1}, VLLM_ERR_FORMAT, "'k.u8' appears twice");
    expect_bad("duplicate tensor", (spec){.dup_tensor = 1}, VLLM_ERR_FORMAT, "'a' appears twice");
    expect_bad("row not whole blocks", (spec){.type_override = GGML_TYPE_Q4_K}, VLLM_ERR_FORMAT, "multiple of the Q4_K block");
    expect_bad("row not whole blocks Q3_K", (spec){.type_override = GGML_TYPE_Q3_K}, VLLM_ERR_FORMAT,
               "multiple of the Q3_K block");
    buf b;
    build(&b, (spec){0});
    b.b[0] = 'G', b.b[3] = 'X';
    gguf_file f;
    CHECK(gguf_parse(b.b, b.n, "bad.gguf", &f) == VLLM_ERR_FORMAT && strstr(vllm_errmsg(), "not a GGUF file"));
}

/* Tensor "b" (2 rows of 32) as each 32-element type we compute in: read
 * with its dtype and its size from the block layout. */
TEST(test_gguf_types) {
    const struct { uint32_t ggml; dtype t; size_t bytes; } cases[] = {
        {GGML_TYPE_Q4_0, DTYPE_Q4_0, 36},   {GGML_TYPE_Q4_1, DTYPE_Q4_1, 40}, {GGML_TYPE_Q5_0, DTYPE_Q5_0, 44},
        {GGML_TYPE_Q5_1, DTYPE_Q5_1, 48},   {GGML_TYPE_IQ4_NL, DTYPE_IQ4_NL, 36},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        buf b;
        build(&b, (spec){.type_override = cases[i].ggml});
        gguf_file f;
        CHECK(gguf_parse(b.b, b.n, "t.gguf", &f) == VLLM_OK, "ggml type %u: %s", cases[i].ggml, vllm_errmsg());
        const gguf_tensor *t = gguf_find_tensor(&f, "b");
        CHECK(t && t->type == cases[i].t && t->size == cases[i].bytes, "ggml type %u: %s, %zu bytes", cases[i].ggml,
              t ? dtype_name(t->type) : "missing", t ? (size_t)t->size : 0);
        gguf_deinit(&f);
    }
}

/* Every proper prefix of the valid file is rejected (the last tensor ends
 * at the end of the file), without reading past it (ASan build checks). */
TEST(test_gguf_truncated) {
    buf b;
    build(&b, (spec){0});
    for (size_t n = 0; n < b.n; n++) {
        uint8_t *copy = malloc(n ? n : 1); /* exact size: ASan catches any overread */
        memcpy(copy, b.b, n);
        gguf_file f;
        vllm_status rc = gguf_parse(copy, n, "cut.gguf", &f);
        free(copy);
        CHECK(rc == VLLM_ERR_FORMAT, "prefix %zu of %zu: rc %d %s", n, b.n, rc, rc ? vllm_errmsg() : "accepted");
        CHECK(strstr(vllm_errmsg(), "cut.gguf"), "%s", vllm_errmsg());
    }
}

TEST(test_gguf_open_errors) {
    gguf_file f;
    CHECK(gguf_open("/nonexistent/x.gguf", &f) == VLLM_ERR_IO && strstr(vllm_errmsg(), "/nonexistent/x.gguf"));
    CHECK(gguf_open("/dev/null", &f) != VLLM_OK);
}

/* The buffer as a file in a temporary directory; *dir and *path are the
 * names to remove (path is dir/name). */
static bool write_temp(const buf *b, const char *name, char dir[32], char path[64]) {
    snprintf(dir, 32, "/tmp/vllmc-gguf-XXXXXX");
    if (!mkdtemp(dir)) return false;
    snprintf(path, 64, "%s/%s", dir, name);
    FILE *fp = fopen(path, "wb");
    bool ok = fp && fwrite(b->b, 1, b->n, fp) == b->n;
    if (fp) fclose(fp);
    return ok;
}

/* A tensor type we cannot compute in does not keep the metadata (the
 * tokenizer, the chat template) from being read. */
TEST(test_gguf_open_metadata) {
    buf b;
    build(&b, (spec){.type_override = 99});
    char dir[32], path[64];
    CHECK(write_temp(&b, "x.gguf", dir, path));
    gguf_file f;
    CHECK(gguf_open(path, &f) == VLLM_ERR_FORMAT && strstr(vllm_errmsg(), "ggml type 99"), "%s", vllm_errmsg());
    vllm_status rc = gguf_open_metadata(path, &f);
    remove(path), remove(dir);
    CHECK(rc == VLLM_OK, "%s", vllm_errmsg());
    gguf_str s;
    CHECK(f.num_kvs == 15 && f.num_tensors == 0 && gguf_get_string(&f, "general.name", &s) == VLLM_OK);
    gguf_deinit(&f);
}

/* ---- tokenizer metadata ----------------------------------------------------- */

typedef struct tok_spec {
    const char *model, *pre; /* NULL: key absent */
    const char *token_1;     /* the second token ("a") */
    bool named_templates;
    int add_bos, add_eos;    /* tokenizer.ggml.add_bos/eos_token: 0 absent, 1 false, 2 true */
} tok_spec;

static void kv_str(buf *b, const char *key, const char *v) { str(b, key), u32(b, GGUF_TYPE_STRING), str(b, v); }

/* A byte-level tokenizer: tokens <s> a b ab 1 Ġ Ġ1 </s>, merges "a b" and "Ġ 1",
 * a chat template (and a tool_use one), no tensors. */
static void build_tokenizer(buf *b, tok_spec s) {
    static const char *tokens[] = {"<s>", "a", "b", "ab", "1", "\xc4\xa0", "\xc4\xa0" "1", "</s>"};
    b->n = 0;
    put(b, "GGUF", 4);
    u32(b, 3);
    u64(b, 0);
    u64(b, 7 + (s.model != NULL) + (s.pre != NULL) + s.named_templates + (s.add_bos != 0) + (s.add_eos != 0));
    kv_str(b, "general.architecture", "llama");
    if (s.model) kv_str(b, "tokenizer.ggml.model", s.model);
    if (s.pre) kv_str(b, "tokenizer.ggml.pre", s.pre);
    str(b, "tokenizer.ggml.tokens"), u32(b, GGUF_TYPE_ARRAY), u32(b, GGUF_TYPE_STRING), u64(b, 8);
    for (int i = 0; i < 8; i++) str(b, i == 1 && s.token_1 ? s.token_1 : tokens[i]);
    str(b, "tokenizer.ggml.token_type"), u32(b, GGUF_TYPE_ARRAY), u32(b, GGUF_TYPE_INT32), u64(b, 8);
    for (int i = 0; i < 8; i++) u32(b, i == 0 || i == 7 ? 3 : 1);
    str(b, "tokenizer.ggml.merges"), u32(b, GGUF_TYPE_ARRAY), u32(b, GGUF_TYPE_STRING), u64(b, 2), str(b, "a b");
    str(b, "\xc4\xa0 1");
    str(b, "tokenizer.ggml.bos_token_id"), u32(b, GGUF_TYPE_UINT32), u32(b, 0);
    str(b, "tokenizer.ggml.eos_token_id"), u32(b, GGUF_TYPE_UINT32), u32(b, 7);
    kv_str(b, "tokenizer.chat_template", "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}");
    if (s.named_templates) kv_str(b, "tokenizer.chat_template.tool_use", "T{{ bos_token }}");
    if (s.add_bos) str(b, "tokenizer.ggml.add_bos_token"), u32(b, GGUF_TYPE_BOOL), put(b, s.add_bos == 2 ? "\1" : "\0", 1);
    if (s.add_eos) str(b, "tokenizer.ggml.add_eos_token"), u32(b, GGUF_TYPE_BOOL), put(b, s.add_eos == 2 ? "\1" : "\0", 1);
}

/* Loads the tokenizer of s; expects rc and, on failure, a message with want
 * and the file's name. */
static void expect_tokenizer(const char *label, tok_spec s, vllm_status want_rc, const char *want) {
    buf b;
    build_tokenizer(&b, s);
    char dir[32], path[64];
    CHECK_OR(, write_temp(&b, "tok.gguf", dir, path), "%s: cannot write %s", label, path);
    tokenizer *t = NULL;
    vllm_status rc = tokenizer_load_gguf(path, &t);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", rc ? vllm_errmsg() : "");
    remove(path), remove(dir);
    CHECK_OR(, rc == want_rc, "%s: rc %d (want %d): %s", label, rc, want_rc, rc ? msg : "loaded");
    if (rc) CHECK_OR(, strstr(msg, want) && strstr(msg, "tok.gguf"), "%s: message '%s' lacks '%s'", label, msg, want);
    tokenizer_free(t);
}

TEST(test_gguf_tokenizer_errors) {
    expect_tokenizer("no model", (tok_spec){.pre = "gpt2"}, VLLM_ERR_NOT_FOUND, "'tokenizer.ggml.model' is missing");
    expect_tokenizer("unknown model", (tok_spec){.model = "bert", .pre = "gpt2"}, VLLM_ERR_UNSUPPORTED,
                     "tokenizer.ggml.model 'bert' is not supported");
    expect_tokenizer("unknown pre", (tok_spec){.model = "gpt2", .pre = "deepseek-v3"}, VLLM_ERR_UNSUPPORTED,
                     "tokenizer.ggml.pre 'deepseek-v3'");
    expect_tokenizer("bad UTF-8", (tok_spec){.model = "gpt2", .pre = "gpt2", .token_1 = "\xff"}, VLLM_ERR_FORMAT,
                     "tokenizer.ggml.tokens[1] is not valid UTF-8");
    expect_tokenizer("no pre", (tok_spec){.model = "gpt2"}, VLLM_OK, "");
}

/* smollm splits digits one by one, gpt2 does not; the config carries the
 * special tokens and the templates (a list when there are named ones). */
TEST(test_gguf_tokenizer_pre_and_config) {
    const char *pres[] = {"smollm", "gpt2"};
    for (int k = 0; k < 2; k++) {
        buf b;
        build_tokenizer(&b, (tok_spec){.model = "gpt2", .pre = pres[k], .named_templates = k == 0});
        char dir[32], path[64];
        CHECK(write_temp(&b, "tok.gguf", dir, path));
        tokenizer *t = NULL;
        json_t *cfg = NULL;
        vllm_status rc = tokenizer_load_gguf(path, &t);
        if (!rc) rc = tokenizer_load_config(path, &cfg);
        remove(path), remove(dir);
        CHECK(rc == VLLM_OK, "%s: %s", pres[k], vllm_errmsg());
        int32_t *ids, n;
        CHECK(tokenizer_encode(t, "ab 1<s>", 7, true, &ids, &n) == VLLM_OK);
        /* smollm: ab Ġ 1 <s>; gpt2: ab Ġ1 <s> */
        bool want = k == 0 ? n == 4 && ids[0] == 3 && ids[1] == 5 && ids[2] == 4 && ids[3] == 0
                           : n == 3 && ids[0] == 3 && ids[1] == 6 && ids[2] == 0;
        free(ids);
        CHECK(want, "%s: 'ab 1<s>' gave %d ids", pres[k], n);
        CHECK(json_is_string(json_object_get(cfg, "bos_token")) &&
              !strcmp(json_string_value(json_object_get(cfg, "bos_token")), "<s>"));
        json_t *tmpl = json_object_get(cfg, "chat_template");
        if (k == 0) {
            CHECK(json_array_size(tmpl) == 2, "named templates: %zu", json_array_size(tmpl));
            CHECK(!strcmp(json_string_value(json_object_get(json_array_get(tmpl, 0), "name")), "default"));
            CHECK(!strcmp(json_string_value(json_object_get(json_array_get(tmpl, 1), "name")), "tool_use"));
        } else {
            CHECK(json_is_string(tmpl));
        }
        json_decref(cfg);
        tokenizer_free(t);
    }
}

/* What encode adds: add_bos_token / add_eos_token as the file says; without
 * them BOS for the Llama 3 pre-tokenizer (as llama.cpp), nothing otherwise. */
TEST(test_gguf_tokenizer_special_flags) {
    static const struct {
        const char *pre;
        int add_bos, add_eos;
        int32_t first, last, n;
    } cases[] = {{"llama-bpe", 0, 0, 0, 3, 2}, {"llama-bpe", 1, 2, 3, 7, 2}, {"gpt2", 0, 0, 3, 3, 1},
                 {"gpt2", 2, 2, 0, 7, 3},      {"gpt2", 0, 1, 3, 3, 1}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        buf b;
        build_tokenizer(&b, (tok_spec){.model = "gpt2", .pre = cases[k].pre, .add_bos = cases[k].add_bos,
                                       .add_eos = cases[k].add_eos});
        char dir[32], path[64];
        CHECK(write_temp(&b, "tok.gguf", dir, path));
        tokenizer *t = NULL;
        vllm_status rc = tokenizer_load_gguf(path, &t);
        remove(path), remove(dir);
        CHECK(rc == VLLM_OK, "%s: %s", cases[k].pre, vllm_errmsg());
        int32_t *ids, n;
        CHECK(tokenizer_encode(t, "ab", 2, true, &ids, &n) == VLLM_OK);
        bool ok = n == cases[k].n && ids[0] == cases[k].first && ids[n - 1] == cases[k].last;
        free(ids);
        tokenizer_free(t);
        CHECK(ok, "case %zu (%s, add_bos %d, add_eos %d): %d ids", k, cases[k].pre, cases[k].add_bos,
              cases[k].add_eos, n);
    }
}

/* ---- --compare mode -------------------------------------------------------- */

/* ---- gemma3 layer kinds ------------------------------------------------------ */

typedef struct g3_spec {
    int32_t window;        /* attention.sliding_window; -1: absent */
    int32_t period;        /* attention.sliding_window_pattern as a UINT32; -1: absent */
    const char *kinds;     /* ... or as an array, one '1' (sliding) / '0' per element; NULL: absent */
    uint32_t kinds_type;   /* the array's element type, 0 = BOOL */
    float base_swa;        /* rope.freq_base_swa; 0: absent */
} g3_spec;

/* A gemma3 GGUF's metadata (8 layers, hidden 64, 4 heads), no tensors. */
static void build_gemma3(buf *b, g3_spec s) {
    b->n = 0;
    put(b, "GGUF", 4);
    u32(b, 3);
    u64(b, 0);
    u64(b, 8 + (s.window >= 0) + (s.period >= 0) + (s.kinds != NULL) + (s.base_swa > 0));
    kv_str(b, "general.architecture", "gemma3");
    str(b, "gemma3.attention.layer_norm_rms_epsilon"), u32(b, GGUF_TYPE_FLOAT32), put(b, &(float){1e-6f}, 4);
    const char *keys[] = {"embedding_length", "feed_forward_length", "block_count", "attention.head_count",
                          "context_length", "vocab_size"};
    const uint32_t vals[] = {64, 128, 8, 4, 256, 16};
    for (int i = 0; i < 6; i++) {
        char k[64];
        snprintf(k, sizeof k, "gemma3.%s", keys[i]);
        str(b, k), u32(b, GGUF_TYPE_UINT32), u32(b, vals[i]);
    }
    if (s.window >= 0) str(b, "gemma3.attention.sliding_window"), u32(b, GGUF_TYPE_UINT32), u32(b, (uint32_t)s.window);
    if (s.period >= 0)
        str(b, "gemma3.attention.sliding_window_pattern"), u32(b, GGUF_TYPE_UINT32), u32(b, (uint32_t)s.period);
    if (s.kinds) {
        uint32_t t = s.kinds_type ? s.kinds_type : GGUF_TYPE_BOOL;
        str(b, "gemma3.attention.sliding_window_pattern"), u32(b, GGUF_TYPE_ARRAY), u32(b, t), u64(b, strlen(s.kinds));
        for (const char *c = s.kinds; *c; c++) {
            if (t == GGUF_TYPE_BOOL) b->b[b->n++] = *c == '1';
            else u32(b, *c == '1');
        }
    }
    if (s.base_swa > 0) str(b, "gemma3.rope.freq_base_swa"), u32(b, GGUF_TYPE_FLOAT32), put(b, &s.base_swa, 4);
}

/* The config of s: rc, and on success the layers' kinds as '1' (sliding) / '0'
 * in kinds[9], the window and the local RoPE base. */
static vllm_status gemma3_kinds(g3_spec s, char kinds[9], int32_t *window, float *base) {
    buf b;
    build_gemma3(&b, s);
    gguf_file f;
    vllm_status rc = gguf_parse(b.b, b.n, "g3.gguf", &f);
    if (rc) return rc;
    model_config c;
    rc = gguf_model_config(&f, &c);
    gguf_deinit(&f);
    if (rc) return rc;
    for (int l = 0; l < 8; l++) kinds[l] = model_layer_is_sliding(&c, l) ? '1' : '0';
    kinds[8] = 0;
    *window = c.sliding_window, *base = c.rope_local_theta;
    return VLLM_OK;
}

/* Which layers slide, as llama.cpp's gemma3 loader reads them
 * (load_swa_pattern, llama_hparams::set_swa_pattern): the expected kinds are
 * written out by hand from its rules (period n: layer l global iff
 * l % n == n - 1; no pattern key: n = 6; n = 0: all sliding; no window: none). */
TEST(test_gguf_gemma3_layer_kinds) {
    const struct { const char *label; g3_spec s; const char *kinds; int32_t window; float base; } ok[] = {
        {"implicit pattern 6", {.window = 512, .period = -1}, "11111011", 512, 10000.0f},
        {"period 3, local base", {.window = 4, .period = 3, .base_swa = 5000.0f}, "11011011", 4, 5000.0f},
        {"period 0", {.window = 4, .period = 0}, "11111111", 4, 10000.0f},
        {"bool per layer", {.window = 7, .period = -1, .kinds = "10011100"}, "10011100", 7, 10000.0f},
        {"no window", {.window = -1, .period = 2, .base_swa = 5000.0f}, "00000000", 0, 10000.0f},
        {"window 0", {.window = 0, .period = -1}, "00000000", 0, 10000.0f},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        char kinds[9];
        int32_t window;
        float base;
        vllm_status rc = gemma3_kinds(ok[i].s, kinds, &window, &base);
        CHECK(rc == VLLM_OK, "%s: %s", ok[i].label, vllm_errmsg());
        CHECK(!strcmp(kinds, ok[i].kinds) && window == ok[i].window && base == ok[i].base,
              "%s: kinds %s window %d base %g, want %s %d %g", ok[i].label, kinds, window, base, ok[i].kinds,
              ok[i].window, ok[i].base);
    }
    const struct { const char *label; g3_spec s; const char *want; } bad[] = {
        {"7 bools for 8 layers", {.window = 4, .period = -1, .kinds = "1111110"},
         "gemma3.attention.sliding_window_pattern must be 8 bools (one per layer), not 7 of BOOL"},
        {"int32 array", {.window = 4, .period = -1, .kinds = "11111110", .kinds_type = GGUF_TYPE_INT32},
         "not 8 of INT32"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char kinds[9];
        int32_t window;
        float base;
        vllm_status rc = gemma3_kinds(bad[i].s, kinds, &window, &base);
        CHECK(rc == VLLM_ERR_FORMAT && strstr(vllm_errmsg(), bad[i].want) && strstr(vllm_errmsg(), "g3.gguf"),
              "%s: rc %d: %s", bad[i].label, rc, rc ? vllm_errmsg() : "accepted");
    }
}

static void *read_all(const char *path, size_t *n) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    long sz = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    void *p = malloc(sz > 0 ? (size_t)sz : 1);
    *n = fread(p, 1, (size_t)sz, fp);
    fclose(fp);
    return p;
}

static int compare(const char *path, const char *dir) {
    char p[4096];
    size_t nsrc = 0, ndeq = 0;
    snprintf(p, sizeof p, "%s/src.bin", dir);
    float *src = read_all(p, &nsrc);
    snprintf(p, sizeof p, "%s/deq.bin", dir);
    float *deq = read_all(p, &ndeq);
    snprintf(p, sizeof p, "%s/names.txt", dir);
    FILE *names = fopen(p, "r");
    gguf_file f;
    if (!src || !deq || !names || gguf_open(path, &f) != VLLM_OK) {
        printf("FAIL gguf_compare_open: %s\n", vllm_errmsg());
        return 1;
    }
    int fails = 0;
    char name[256], kind[16];
    long long n;
    size_t pos = 0;
    int ntensors = 0, nquant = 0;
    float *y = NULL;
    uint8_t *q = NULL;
    while (fscanf(names, "%255s %15s %lld", name, kind, &n) == 3) {
        const gguf_tensor *t = gguf_find_tensor(&f, name);
        if (!t || (pos + (size_t)n) * 4 > ndeq) {
            printf("FAIL gguf_compare_%s: missing from the file or the reference\n", name);
            fails++;
            break;
        }
        y = realloc(y, (size_t)n * 4), q = realloc(q, t->size);
        quant_dequantize_row(t->type, t->data, y, n);
        if (memcmp(y, deq + pos, (size_t)n * 4)) {
            long long k = 0;
            while (!memcmp(&y[k], &deq[pos + k], 4)) k++;
            printf("FAIL gguf_compare_dequant: %s (%s) element %lld: ours %.9g numpy %.9g\n", name, kind, k, y[k], deq[pos + k]);
            fails++;
        }
        if (t->type == DTYPE_Q8_0 || t->type == DTYPE_Q4_0) {
            if (t->type == DTYPE_Q8_0) quant_quantize_row_q8_0(src + pos, q, n);
            else quant_quantize_row_q4_0(src + pos, q, n);
            if (memcmp(q, t->data, t->size)) {
                size_t k = 0;
                while (q[k] == ((const uint8_t *)t->data)[k]) k++;
                printf("FAIL gguf_compare_quantize: %s (%s) byte %zu: ours %02x numpy %02x\n", name, kind, k, q[k],
                       ((const uint8_t *)t->data)[k]);
                fails++;
            }
            nquant++;
        }
        pos += (size_t)n, ntensors++;
    }
    if (!fails) printf("ok gguf_compare_tensors (%d tensors, %d re-quantized)\n", ntensors, nquant);
    model_config cfg;
    model_weights w;
    gguf_tokenizer tok;
    if (gguf_model_config(&f, &cfg) || gguf_model_weights(&f, &cfg, &w) || gguf_tokenizer_extract(&f, &tok)) {
        printf("FAIL gguf_compare_model: %s\n", vllm_errmsg());
        fails++;
    } else {
        printf("cfg hidden_size %d\ncfg intermediate_size %d\ncfg num_hidden_layers %d\n", cfg.hidden_size,
               cfg.intermediate_size, cfg.num_hidden_layers);
        printf("cfg num_attention_heads %d\ncfg num_key_value_heads %d\ncfg vocab_size %d\n", cfg.num_attention_heads,
               cfg.num_key_value_heads, cfg.vocab_size);
        printf("cfg max_position_embeddings %d\ncfg rms_norm_eps %.9g\ncfg rope_theta %.9g\n", cfg.max_position_embeddings,
               cfg.rms_norm_eps, cfg.rope_theta);
        printf("cfg tie_word_embeddings %d\ncfg bos_token_id %d\ncfg head_dim %d\n", cfg.tie_word_embeddings,
               cfg.bos_token_id, cfg.head_dim);
        printf("cfg rope_interleaved %d\n", f.rope_interleaved);
        printf("tok model %.*s\ntok num_tokens %lld\ntok bos %d\ntok eos %d\ntok add_bos %d\n", (int)tok.model.len,
               tok.model.s, (long long)tok.num_tokens, tok.bos_id, tok.eos_id, tok.add_bos);
        printf("tok token_5 %.*s\ntok score_5 %g\ntok type_5 %d\n", (int)tok.tokens[5].len, tok.tokens[5].s,
               tok.scores ? tok.scores[5] : NAN, tok.token_types ? tok.token_types[5] : -1);
        printf("w q_proj %s %lld %lld\n", dtype_name(w.layers[0].q_proj.type), (long long)w.layers[0].q_proj.shape[0],
               (long long)w.layers[0].q_proj.shape[1]);
        free(w.layers);
        gguf_tokenizer_deinit(&tok);
    }
    free(y), free(q), free(src), free(deq);
    fclose(names);
    gguf_deinit(&f);
    return fails != 0;
}

static int dequant_only(const char *path, const char *dir, const char *label) {
    char p[4096];
    size_t ndeq = 0;
    snprintf(p, sizeof p, "%s/deq.bin", dir);
    float *deq = read_all(p, &ndeq), *y = NULL;
    snprintf(p, sizeof p, "%s/names.txt", dir);
    FILE *names = fopen(p, "r");
    gguf_file f;
    if (!deq || !names || gguf_open(path, &f) != VLLM_OK) {
        printf("FAIL %s: cannot read %s or %s: %s\n", label, path, dir, vllm_errmsg());
        free(deq);
        if (names) fclose(names);
        return 1;
    }
    char name[256], kind[16], seen[256] = " "; /* " T1 T2 ... " */
    long long n;
    size_t pos = 0;
    int ntensors = 0, fails = 0;
    while (!fails && fscanf(names, "%255s %15s %lld", name, kind, &n) == 3) {
        const gguf_tensor *t = gguf_find_tensor(&f, name);
        if (!t || n % t->ne[0] || (pos + (size_t)n) * 4 > ndeq) {
            printf("FAIL %s: %s missing from the file or the reference\n", label, name);
            fails++;
            break;
        }
        y = realloc(y, (size_t)n * 4);
        quant_dequantize_row(t->type, t->data, y, n);
        if (memcmp(y, deq + pos, (size_t)n * 4)) {
            long long k = 0;
            while (!memcmp(&y[k], &deq[pos + k], 4)) k++;
            printf("FAIL %s: %s (%s) element %lld: ours %.9g gguf-py %.9g\n", label, name, dtype_name(t->type), k, y[k],
                   deq[pos + k]);
            fails++;
        }
        char word[16];
        snprintf(word, sizeof word, " %s ", dtype_name(t->type));
        if (!strstr(seen, word) && strlen(seen) < 200) strcat(seen, word + 1);
        pos += (size_t)n, ntensors++;
    }
    if (!fails) printf("ok %s  # %d tensors bit-exact (%.*s)\n", label, ntensors, (int)strlen(seen) - 2, seen + 1);
    free(y), free(deq);
    fclose(names);
    gguf_deinit(&f);
    return fails != 0;
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "--compare")) return compare(argv[2], argv[3]);
    if (argc == 5 && !strcmp(argv[1], "--dequant")) return dequant_only(argv[2], argv[3], argv[4]);
    RUN(test_gguf_valid);
    RUN(test_gguf_bad_files);
    RUN(test_gguf_types);
    RUN(test_gguf_truncated);
    RUN(test_gguf_open_errors);
    RUN(test_gguf_open_metadata);
    RUN(test_gguf_tokenizer_errors);
    RUN(test_gguf_tokenizer_pre_and_config);
    RUN(test_gguf_tokenizer_special_flags);
    RUN(test_gguf_gemma3_layer_kinds);
    return harness_done();
}
