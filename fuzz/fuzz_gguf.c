/*
 * fuzz_gguf.c - gguf_parse on a whole GGUF file image in memory, then
 * everything that reads a parsed file: typed getters, array accessors,
 * gguf_model_config, gguf_model_weights, gguf_tokenizer_extract.
 *
 * gguf.h promises a parsed file never leads to a read outside it; the target
 * reads every byte it was handed (tensor data, string values, array elements)
 * so ASan would see a pointer past the input. Also checked: tensor spans
 * aligned, inside the data section, findable by name; keys findable; a config
 * that maps satisfies model.h's invariants.
 */
#include "fuzz.h"

#include "model/gguf.h"

int fuzz_gguf_init(void) { return 0; }

/* Reads n bytes at p (ASan checks each); returns a value the compiler keeps. */
static uint8_t fuzz_gguf_touch(const void *p, uint64_t n) {
    volatile uint8_t x = 0;
    for (uint64_t i = 0; i < n; i++) x ^= ((const uint8_t *)p)[i];
    return x;
}

/* name as a C string in buf, or false if it has a NUL or does not fit */
static bool fuzz_gguf_cstr(gguf_str s, char *buf, size_t cap) {
    if (s.len >= cap || memchr(s.s, 0, s.len)) return false;
    memcpy(buf, s.s, s.len);
    buf[s.len] = 0;
    return true;
}

static int fuzz_gguf_kvs(const gguf_file *f) {
    char key[512];
    for (int64_t i = 0; i < f->num_kvs; i++) {
        const gguf_kv *kv = &f->kvs[i];
        fuzz_gguf_touch(kv->key.s, kv->key.len);
        if (fuzz_gguf_cstr(kv->key, key, sizeof key))
            FUZZ_CHECK(gguf_find_kv(f, key) == kv, "kv \"%s\" not found by name", key);
        if (kv->type == GGUF_TYPE_ARRAY) {
            if (kv->elem_type == GGUF_TYPE_STRING) {
                gguf_str *strs = malloc((size_t)(kv->count ? kv->count : 1) * sizeof *strs);
                if (!strs) return 0;
                gguf_array_strings(kv, strs);
                for (uint64_t j = 0; j < kv->count; j++) fuzz_gguf_touch(strs[j].s, strs[j].len);
                free(strs);
            } else if (kv->elem_type == GGUF_TYPE_FLOAT32 || kv->elem_type == GGUF_TYPE_FLOAT64) {
                for (uint64_t j = 0; j < kv->count; j++) (void)gguf_array_float(kv, j);
            } else if (kv->elem_type != GGUF_TYPE_BOOL && kv->elem_type != GGUF_TYPE_ARRAY) {
                for (uint64_t j = 0; j < kv->count; j++) (void)gguf_array_int(kv, j);
            }
        } else if (fuzz_gguf_cstr(kv->key, key, sizeof key)) {
            int64_t iv;
            double fv;
            bool bv;
            gguf_str sv;
            gguf_get_int(f, key, &iv);
            gguf_get_float(f, key, &fv);
            gguf_get_bool(f, key, &bv);
            if (gguf_get_string(f, key, &sv) == VLLM_OK) fuzz_gguf_touch(sv.s, sv.len);
        }
        (void)gguf_type_name(kv->type);
    }
    return 1;
}

int fuzz_gguf_one(const uint8_t *data, size_t size) {
    gguf_file f;
    if (gguf_parse(data, size, "fuzz.gguf", &f) != VLLM_OK) {
        gguf_deinit(&f); /* documented deinit-safe on failure */
        return 0;
    }
    char name[512];
    FUZZ_CHECK_GOTO(done, f.alignment > 0 && f.data >= data && f.data + f.data_size <= data + size,
                    "data section outside the input");
    for (int64_t i = 0; i < f.num_tensors; i++) {
        const gguf_tensor *t = &f.tensors[i];
        FUZZ_CHECK_GOTO(done, t->ndim >= 1 && t->ndim <= GGUF_MAX_DIMS, "tensor %lld: ndim %d", (long long)i,
                        t->ndim);
        FUZZ_CHECK_GOTO(done, t->offset % f.alignment == 0, "tensor %lld: offset %llu not aligned to %u",
                        (long long)i, (unsigned long long)t->offset, f.alignment);
        FUZZ_CHECK_GOTO(done, t->offset <= f.data_size && t->size <= f.data_size - t->offset,
                        "tensor %lld: [%llu, +%llu) outside %llu", (long long)i, (unsigned long long)t->offset,
                        (unsigned long long)t->size, (unsigned long long)f.data_size);
        FUZZ_CHECK_GOTO(done, (const uint8_t *)t->data == f.data + t->offset, "tensor %lld: data pointer", (long long)i);
        fuzz_gguf_touch(t->data, t->size);
        fuzz_gguf_touch(t->name.s, t->name.len);
        if (fuzz_gguf_cstr(t->name, name, sizeof name))
            FUZZ_CHECK_GOTO(done, gguf_find_tensor(&f, name) == t, "tensor \"%s\" not found by name", name);
    }
    if (!fuzz_gguf_kvs(&f)) goto done;

    model_config cfg;
    if (gguf_model_config(&f, &cfg) == VLLM_OK) {
        FUZZ_CHECK_GOTO(done, cfg.hidden_size > 0 && cfg.num_hidden_layers > 0 && cfg.vocab_size > 0 &&
                                  cfg.num_attention_heads > 0 && cfg.num_key_value_heads > 0 &&
                                  cfg.num_attention_heads % cfg.num_key_value_heads == 0 && cfg.head_dim > 0,
                        "gguf_model_config accepted bad dimensions");
        FUZZ_CHECK_GOTO(done, cfg.bos_token_id >= -1 && cfg.bos_token_id < cfg.vocab_size, "bos %d",
                        cfg.bos_token_id);
        model_weights w;
        if (gguf_model_weights(&f, &cfg, &w) == VLLM_OK) {
            FUZZ_CHECK_GOTO(done, w.embed_tokens.data && w.layers, "weights bound without data");
            free(w.layers);
        }
    }
    gguf_tokenizer tok;
    if (gguf_tokenizer_extract(&f, &tok) == VLLM_OK) {
        for (int64_t i = 0; i < tok.num_tokens; i++) fuzz_gguf_touch(tok.tokens[i].s, tok.tokens[i].len);
        for (int64_t i = 0; i < tok.num_merges; i++) fuzz_gguf_touch(tok.merges[i].s, tok.merges[i].len);
        if (tok.scores) fuzz_gguf_touch(tok.scores, (uint64_t)tok.num_tokens * sizeof *tok.scores);
        if (tok.token_types) fuzz_gguf_touch(tok.token_types, (uint64_t)tok.num_tokens * sizeof *tok.token_types);
        fuzz_gguf_touch(tok.chat_template.s, tok.chat_template.len);
        FUZZ_CHECK_GOTO(tokdone, tok.bos_id >= -1 && tok.bos_id < tok.num_tokens && tok.eos_id >= -1 &&
                                     tok.eos_id < tok.num_tokens,
                        "tokenizer ids bos %d eos %d outside %lld tokens", tok.bos_id, tok.eos_id,
                        (long long)tok.num_tokens);
    tokdone:
        gguf_tokenizer_deinit(&tok);
    }
done:
    gguf_deinit(&f);
    return 0;
}

#ifndef FUZZ_NO_MAIN
int LLVMFuzzerInitialize(int *argc, char ***argv) { return fuzz_gguf_init(); }
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return fuzz_gguf_one(data, size); }
#endif
