/*
 * fuzz_tokenizer_json.c - tokenizer_load_files on arbitrary tokenizer.json
 * (and tokenizer_config.json) bytes, then a little use of what loaded.
 *
 * Input: tokenizer.json text, optionally followed by FUZZ_TOKJSON_SPLIT and a
 * tokenizer_config.json text. The loader takes paths, so each part is written
 * to a memfd and loaded through /proc/self/fd/N (no change to the loader, no
 * temp files). A tokenizer that loads is used: encode a fixed sentence and the
 * input's first bytes, decode, stream the same ids through a detokenizer.
 * Checked: ids inside the vocabulary, decoded text valid UTF-8, the streamed
 * pieces valid UTF-8 and concatenating to the decode (tokenizer.h's promise).
 */
#include "fuzz.h"

#include "tokenizer/tokenizer.h"

#define FUZZ_TOKJSON_SPLIT "\n--- tokenizer_config.json\n"

int fuzz_tokenizer_json_init(void) { return 0; }

/* Encodes text, decodes it and streams it; checks what tokenizer.h promises. */
static int fuzz_tokjson_use(const tokenizer *t, const char *text, size_t len) {
    int32_t *ids = NULL, n = 0;
    char *dec = NULL, *cat = NULL;
    size_t dec_len = 0, cat_len = 0;
    detokenizer *d = NULL;
    if (tokenizer_encode(t, text, len, true, &ids, &n) != VLLM_OK) return 0;
    int32_t vocab = tokenizer_vocab_size(t);
    for (int32_t i = 0; i < n; i++) FUZZ_CHECK_GOTO(done, ids[i] >= 0 && ids[i] < vocab, "id %d of %d", ids[i], vocab);
    if (tokenizer_decode(t, ids, n, false, &dec, &dec_len) != VLLM_OK) goto done;
    FUZZ_CHECK_GOTO(done, fuzz_utf8_valid(dec, dec_len), "decode is not valid UTF-8");
    if (detokenizer_create(t, NULL, 0, false, &d) != VLLM_OK) goto done;
    cat = malloc(dec_len + 1);
    if (!cat) goto done;
    for (int32_t i = 0; i <= n; i++) {
        const char *piece;
        size_t piece_len;
        vllm_status rc = i < n ? detokenizer_push(d, ids[i], &piece, &piece_len) : detokenizer_flush(d, &piece, &piece_len);
        FUZZ_CHECK_GOTO(done, rc == VLLM_OK, "detokenizer failed on id %d that decode accepted", i < n ? ids[i] : -1);
        FUZZ_CHECK_GOTO(done, fuzz_utf8_valid(piece, piece_len), "streamed piece %d is not valid UTF-8", i);
        FUZZ_CHECK_GOTO(done, cat_len + piece_len <= dec_len && !memcmp(dec + cat_len, piece, piece_len),
                        "streamed pieces diverge from decode at byte %zu", cat_len);
        cat_len += piece_len;
    }
    FUZZ_CHECK_GOTO(done, cat_len == dec_len, "streamed %zu bytes, decode %zu", cat_len, dec_len);
done:
    detokenizer_free(d);
    free(cat);
    free(dec);
    free(ids);
    return 0;
}

int fuzz_tokenizer_json_one(const uint8_t *data, size_t size) {
    const char *text = (const char *)data;
    size_t len = size;
    const char *split = memmem(text, size, FUZZ_TOKJSON_SPLIT, strlen(FUZZ_TOKJSON_SPLIT));
    char tok_path[64], cfg_path[64];
    int cfg_fd = -1;
    if (split) {
        len = (size_t)(split - text);
        size_t off = len + strlen(FUZZ_TOKJSON_SPLIT);
        cfg_fd = fuzz_memfd("tokenizer_config.json", text + off, size - off, cfg_path);
        if (cfg_fd < 0) return 0;
    }
    int tok_fd = fuzz_memfd("tokenizer.json", text, len, tok_path);
    if (tok_fd < 0) {
        if (cfg_fd >= 0) close(cfg_fd);
        return 0;
    }
    tokenizer *t = NULL;
    vllm_status rc = tokenizer_load_files(tok_path, cfg_fd >= 0 ? cfg_path : NULL, &t);
    close(tok_fd);
    if (cfg_fd >= 0) close(cfg_fd);
    if (rc != VLLM_OK) {
        FUZZ_CHECK(t == NULL, "failed load left a tokenizer");
        return 0;
    }
    int32_t vocab = tokenizer_vocab_size(t);
    FUZZ_CHECK_GOTO(done, vocab >= 0, "vocab size %d", vocab);
    FUZZ_CHECK_GOTO(done, tokenizer_bos_id(t) >= -1 && tokenizer_bos_id(t) < vocab, "bos %d", tokenizer_bos_id(t));
    FUZZ_CHECK_GOTO(done, tokenizer_eos_id(t) >= -1 && tokenizer_eos_id(t) < vocab, "eos %d", tokenizer_eos_id(t));
    for (int32_t id = 0; id < vocab && id < 1024; id++) {
        const char *p = tokenizer_id_to_piece(t, id);
        if (p) FUZZ_CHECK_GOTO(done, tokenizer_piece_to_id(t, p) >= 0, "piece of id %d has no id", id);
    }
    static const char sentence[] = "Hello, world! It's 2024 -- naïve café, 日本語 \xf0\x9f\x98\x80 <s>  end.\n";
    fuzz_tokjson_use(t, sentence, strlen(sentence));
    fuzz_tokjson_use(t, text, len < 256 ? len : 256);
done:
    tokenizer_free(t);
    return 0;
}

#ifndef FUZZ_NO_MAIN
int LLVMFuzzerInitialize(int *argc, char ***argv) { return fuzz_tokenizer_json_init(); }
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return fuzz_tokenizer_json_one(data, size); }
#endif
