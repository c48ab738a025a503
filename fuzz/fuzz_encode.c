/*
 * fuzz_encode.c - tokenizer_encode on arbitrary bytes, then decode, with the
 * three real tokenizers (fuzz_tokenizers.h).
 *
 * Input: byte 0 picks the tokenizer (% 3) and flags (bit 2 add_special_tokens,
 * bit 3 skip_special_tokens in decode); the rest is the text. Checked:
 *   - encode accepts any bytes; every id is inside the vocabulary;
 *   - decode succeeds and is valid UTF-8 (with and without skipping specials);
 *   - round trip, without added specials: decode(encode(x)) is exactly the
 *     text the tokenizer sees, lossy(x) (each maximal invalid UTF-8 subpart ->
 *     U+FFFD, tokenizer.h), transformed as each pipeline is known to be lossy:
 *       llama3  byte-level BPE, lossless; but clean_up_tokenization_spaces is
 *               on, so texts with " ." " ?" " !" " ," " '" " n't" are not
 *               compared;
 *       qwen3   byte-level BPE behind an NFC normalizer: expect NFC(lossy(x))
 *               (utf8proc, which the loader may share: this checks the
 *               pipeline, not the NFC tables);
 *       stories SentencePiece-style: Prepend/Replace(" " -> "▁") and the
 *               decoder's Replace("▁" -> " ") + Strip(1 leading space) undo
 *               each other unless the text holds "▁" itself or added-token
 *               text (<unk> <s> </s>, encoded as one token, no "▁" prepended
 *               to what follows); those are not compared.
 */
#include "fuzz_tokenizers.h"

#include <utf8proc.h>

int fuzz_encode_init(void) { return fuzz_tokenizers_load(); }

/* The text decode(encode(x)) must give for tokenizer k, or NULL when the
 * round trip is not lossless for this text. Malloc'ed, *out_len bytes. */
static char *fuzz_encode_expect(int k, const char *x, size_t n, size_t *out_len) {
    size_t len;
    char *s = fuzz_utf8_lossy(x, n, &len);
    if (!s) return NULL;
    bool compare = true;
    if (k == FUZZ_TOK_LLAMA3) {
        for (size_t i = 0; i + 1 < len && compare; i++)
            if (s[i] == ' ' && s[i + 1] && strchr(".?!,'", s[i + 1])) compare = false;
        compare = compare && !fuzz_contains(s, len, " n't");
    } else if (k == FUZZ_TOK_STORIES) {
        compare = !fuzz_contains(s, len, "\xe2\x96\x81") && !fuzz_contains(s, len, "<unk>") &&
                  !fuzz_contains(s, len, "<s>") && !fuzz_contains(s, len, "</s>");
    } else if (k == FUZZ_TOK_QWEN3) {
        utf8proc_uint8_t *nfc = NULL;
        utf8proc_ssize_t m = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len, &nfc,
                                          UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        free(s);
        if (m < 0) return NULL;
        s = (char *)nfc;
        len = (size_t)m;
    }
    if (!compare) {
        free(s);
        return NULL;
    }
    *out_len = len;
    return s;
}

int fuzz_encode_one(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int k = data[0] % FUZZ_TOK_COUNT;
    bool add_special = data[0] & 4, skip_special = data[0] & 8;
    const tokenizer *t = fuzz_toks[k];
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    int32_t *ids = NULL, n = 0;
    char *dec = NULL, *skipped = NULL, *expect = NULL;
    size_t dec_len = 0, skipped_len = 0, expect_len = 0;

    FUZZ_CHECK(tokenizer_encode(t, text, len, add_special, &ids, &n) == VLLM_OK, "%s: encode failed: %s",
               fuzz_tok_names[k], vllm_errmsg());
    int32_t vocab = tokenizer_vocab_size(t);
    for (int32_t i = 0; i < n; i++)
        FUZZ_CHECK_GOTO(done, ids[i] >= 0 && ids[i] < vocab, "%s: id %d outside [0, %d)", fuzz_tok_names[k], ids[i],
                        vocab);
    FUZZ_CHECK_GOTO(done, tokenizer_decode(t, ids, n, false, &dec, &dec_len) == VLLM_OK, "%s: decode failed: %s",
                    fuzz_tok_names[k], vllm_errmsg());
    FUZZ_CHECK_GOTO(done, strlen(dec) <= dec_len && dec[dec_len] == 0, "%s: decode not NUL-terminated",
                    fuzz_tok_names[k]);
    FUZZ_CHECK_GOTO(done, fuzz_utf8_valid(dec, dec_len), "%s: decode is not valid UTF-8", fuzz_tok_names[k]);
    if (skip_special) {
        FUZZ_CHECK_GOTO(done, tokenizer_decode(t, ids, n, true, &skipped, &skipped_len) == VLLM_OK,
                        "%s: decode (skip specials) failed: %s", fuzz_tok_names[k], vllm_errmsg());
        FUZZ_CHECK_GOTO(done, fuzz_utf8_valid(skipped, skipped_len), "%s: decode (skip specials) is not valid UTF-8",
                        fuzz_tok_names[k]);
    }
    if (!add_special && (expect = fuzz_encode_expect(k, text, len, &expect_len)) != NULL)
        FUZZ_CHECK_GOTO(done, expect_len == dec_len && !memcmp(expect, dec, dec_len),
                        "%s: decode(encode(x)) != x: %zu bytes in, %zu expected, %zu decoded \"%.*s\"",
                        fuzz_tok_names[k], len, expect_len, dec_len, (int)(dec_len < 200 ? dec_len : 200), dec);
done:
    free(expect);
    free(skipped);
    free(dec);
    free(ids);
    return 0;
}

#ifndef FUZZ_NO_MAIN
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    if (fuzz_encode_init()) exit(1);
    return 0;
}
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return fuzz_encode_one(data, size); }
#endif
