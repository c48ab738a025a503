/*
 * utf8.h - UTF-8 decoding the way the WHATWG Encoding Standard does it.
 *
 * The tokenizer has to turn arbitrary bytes into text in three places: invalid
 * UTF-8 given to encode, byte-level BPE tokens decoded back to bytes, and
 * SentencePiece <0xNN> byte-fallback runs. transformers.js does all three with
 * TextDecoder (and Rust's String::from_utf8_lossy agrees): every maximal
 * invalid subpart becomes one U+FFFD. utf8_decoder is that algorithm as a
 * byte-at-a-time state machine, so a stream can be decoded incrementally and a
 * prefix of the output never changes once emitted: only an incomplete but so
 * far valid sequence is held back (at most 3 bytes of state).
 */
#ifndef VLLM_TOKENIZER_UTF8_H
#define VLLM_TOKENIZER_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct utf8_decoder {
    uint32_t cp;          /* code point being assembled */
    uint8_t needed, seen; /* continuation bytes needed / seen so far */
    uint8_t lower, upper; /* allowed range of the next continuation byte */
} utf8_decoder;

#define UTF8_REPLACEMENT 0xFFFDu

void utf8_decoder_init(utf8_decoder *d);
/* True while a multi-byte sequence is in progress (bytes held back). */
static inline bool utf8_decoder_pending(const utf8_decoder *d) { return d->needed != 0; }
/* Feeds one byte; writes 0, 1 or 2 code points to out[] and returns how many
 * (2 when an invalid continuation byte ends a sequence: U+FFFD, then the byte
 * itself is decoded afresh). */
int utf8_decoder_push(utf8_decoder *d, uint8_t byte, uint32_t out[2]);
/* End of input: returns true (and *cp = U+FFFD) if a sequence was cut short. */
bool utf8_decoder_finish(utf8_decoder *d, uint32_t *cp);

/* Encodes cp (< 0x110000) into out[4]; returns the length. */
int utf8_encode(uint32_t cp, char out[4]);
/* Length of the code point starting at s[0] in valid UTF-8 (1..4). */
static inline int utf8_len(uint8_t lead) {
    return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}
/* Decodes the code point at s (valid UTF-8, n >= its length). */
uint32_t utf8_get(const char *s);
/* Length of the longest valid UTF-8 prefix of s[0..n). */
size_t utf8_valid_prefix(const char *s, size_t n);

#endif
