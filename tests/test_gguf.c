/*
 * test_gguf.c - the GGUF reader on files built byte by byte here: a valid
 * file with metadata of every type, then one bad-file case per validation
 * (every truncation, bad magic/version, counts and string lengths beyond the
 * file, tensor data beyond the file or misaligned or overlapping, unknown and
 * unsupported types, duplicates).
 *
 *   test_gguf --compare FILE.gguf REFDIR   (used by tests/test_gguf_ref.sh)
 * checks FILE against tools/make_gguf.py --dump-ref output: our dequantizer
 * equals numpy's bit for bit, our Q8_0/Q4_0 quantizers reproduce the file's
 * bytes from the F32 source, and prints the mapped config ("cfg KEY VALUE")
 * and tokenizer for the script to compare with config.json.
 */
/* checks: 4 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "harness.h"
#include "kernels/quant.h"
#include "model/gguf.h"

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
    expect_bad("unsupported ggml type", (spec){.type_override = 3}, VLLM_ERR_UNSUPPORTED, "Q4_1");
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
    buf b;
    build(&b, (spec){0});
    b.b[0] = 'G', b.b[3] = 'X';
    gguf_file f;
    CHECK(gguf_parse(b.b, b.n, "bad.gguf", &f) == VLLM_ERR_FORMAT && strstr(vllm_errmsg(), "not a GGUF file"));
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

/* ---- --compare mode -------------------------------------------------------- */

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

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "--compare")) return compare(argv[2], argv[3]);
    RUN(test_gguf_valid);
    RUN(test_gguf_bad_files);
    RUN(test_gguf_truncated);
    RUN(test_gguf_open_errors);
    return harness_done();
}
