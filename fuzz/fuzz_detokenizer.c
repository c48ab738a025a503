/*
 * fuzz_detokenizer.c - the incremental detokenizer on arbitrary id sequences,
 * with the three real tokenizers (fuzz_tokenizers.h).
 *
 * Input: byte 0 picks the tokenizer (% 3), bit 2 skip_special_tokens, bits
 * 3..7 how many of the ids form the prompt; then 3 bytes per id (little
 * endian, taken modulo vocab + 4 so a few are out of range; a third byte of
 * 0xFF makes a negative id). Checked against tokenizer.h's contract, with
 * tokenizer_decode as the reference and V the in-vocabulary ids:
 *   - every piece (and the flush) is valid UTF-8;
 *   - out-of-vocabulary ids are VLLM_ERR_INVALID and change nothing;
 *   - without a prompt: pieces ++ flush == decode(V);
 *   - with prompt P (the first ids): E ++ pieces ++ flush == decode(P ++ G),
 *     where E is what pushing P one by one emits;
 *   - a push after flush is VLLM_ERR_INVALID.
 */
#include "fuzz_tokenizers.h"

int fuzz_detokenizer_init(void) { return fuzz_tokenizers_load(); }

/* Streams ids[0..n) (prompt ids[0..n_prompt)) and appends the pieces to
 * out (room for cap bytes). Returns 1 if the contract held, 0 after a report. */
static int fuzz_detok_stream(const tokenizer *t, const int32_t *ids, int32_t n, int32_t n_prompt, bool skip,
                             bool flush, char *out, size_t cap, size_t *out_len) {
    detokenizer *d = NULL;
    int ok = 0;
    FUZZ_CHECK(detokenizer_create(t, ids, n_prompt, skip, &d) == VLLM_OK, "detokenizer_create: %s", vllm_errmsg());
    int32_t vocab = tokenizer_vocab_size(t);
    for (int32_t i = n_prompt; i <= n; i++) {
        const char *piece;
        size_t piece_len;
        vllm_status rc;
        if (i < n) {
            rc = detokenizer_push(d, ids[i], &piece, &piece_len);
            bool in_vocab = ids[i] >= 0 && ids[i] < vocab;
            FUZZ_CHECK_GOTO(done, in_vocab ? rc == VLLM_OK : rc == VLLM_ERR_INVALID, "push(%d) gave %d", ids[i], rc);
            if (!in_vocab) continue;
        } else {
            if (!flush) break;
            rc = detokenizer_flush(d, &piece, &piece_len);
            FUZZ_CHECK_GOTO(done, rc == VLLM_OK, "flush: %s", vllm_errmsg());
        }
        FUZZ_CHECK_GOTO(done, fuzz_utf8_valid(piece, piece_len), "piece after id %d is not valid UTF-8", i);
        FUZZ_CHECK_GOTO(done, *out_len + piece_len <= cap, "pieces longer than the decode (%zu + %zu > %zu)",
                        *out_len, piece_len, cap);
        memcpy(out + *out_len, piece, piece_len);
        *out_len += piece_len;
    }
    if (flush) {
        const char *piece;
        size_t piece_len;
        FUZZ_CHECK_GOTO(done, detokenizer_push(d, 0, &piece, &piece_len) == VLLM_ERR_INVALID,
                        "push after flush accepted");
    }
    ok = 1;
done:
    detokenizer_free(d);
    return ok;
}

int fuzz_detokenizer_one(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int k = data[0] % FUZZ_TOK_COUNT;
    bool skip = data[0] & 4;
    const tokenizer *t = fuzz_toks[k];
    int32_t vocab = tokenizer_vocab_size(t), n = (int32_t)((size - 1) / 3), nv = 0;
    int32_t *ids = malloc(((size_t)n + 1) * sizeof *ids), *valid = malloc(((size_t)n + 1) * sizeof *valid);
    char *dec = NULL, *got = NULL;
    size_t dec_len = 0, got_len = 0;
    if (!ids || !valid) goto done;
    for (int32_t i = 0; i < n; i++) {
        const uint8_t *b = data + 1 + 3 * i;
        uint32_t v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16;
        ids[i] = b[2] == 0xFF ? -1 - b[0] : (int32_t)(v % (uint32_t)(vocab + 4));
        if (ids[i] >= 0 && ids[i] < vocab) valid[nv++] = ids[i];
    }
    /* the prompt: the first ids, all of them in the vocabulary */
    int32_t n_prompt = data[0] >> 3;
    if (n_prompt > n) n_prompt = n;
    for (int32_t i = 0; i < n_prompt; i++)
        if (ids[i] < 0 || ids[i] >= vocab) n_prompt = i;

    FUZZ_CHECK_GOTO(done, tokenizer_decode(t, valid, nv, skip, &dec, &dec_len) == VLLM_OK, "%s: decode: %s",
                    fuzz_tok_names[k], vllm_errmsg());
    FUZZ_CHECK_GOTO(done, fuzz_utf8_valid(dec, dec_len), "%s: decode is not valid UTF-8", fuzz_tok_names[k]);
    if ((got = malloc(dec_len + 1)) == NULL) goto done;
    /* E: the prompt pushed one by one, not flushed */
    if (n_prompt > 0 && !fuzz_detok_stream(t, ids, n_prompt, 0, skip, false, got, dec_len, &got_len)) goto done;
    if (!fuzz_detok_stream(t, ids, n, n_prompt, skip, true, got, dec_len, &got_len)) goto done;
    FUZZ_CHECK_GOTO(done, got_len == dec_len && !memcmp(got, dec, dec_len),
                    "%s: streamed %zu bytes (prompt %d ids) != decode %zu bytes \"%.*s\"", fuzz_tok_names[k],
                    got_len, n_prompt, dec_len, (int)(dec_len < 200 ? dec_len : 200), dec);
done:
    free(got);
    free(dec);
    free(valid);
    free(ids);
    return 0;
}

#ifndef FUZZ_NO_MAIN
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    if (fuzz_detokenizer_init()) exit(1);
    return 0;
}
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return fuzz_detokenizer_one(data, size); }
#endif
