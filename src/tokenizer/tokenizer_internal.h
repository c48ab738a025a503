/*
 * tokenizer_internal.h - the tokenizer's insides, shared by tokenizer.c
 * (loading, encode) and detokenizer.c (decode, streaming). Not a public header.
 *
 * Every pipeline stage of tokenizer.json is a small tagged struct chosen at
 * load time; a kind we do not implement fails the load with its name, so an
 * unsupported file never tokenizes silently wrong.
 */
#ifndef VLLM_TOKENIZER_INTERNAL_H
#define VLLM_TOKENIZER_INTERNAL_H

#include <jansson.h>

#include "tokenizer/bpe.h"
#include "tokenizer/jsregex.h"
#include "tokenizer/tokenizer.h"

typedef enum norm_kind {
    NORM_NFC,
    NORM_NFD,
    NORM_NFKC,
    NORM_NFKD,
    NORM_PREPEND, /* a = prepended string */
    NORM_REPLACE, /* a -> b, literal string pattern */
    NORM_STRIP,   /* JS trimStart/trimEnd */
} norm_kind;

typedef struct norm_step {
    norm_kind kind;
    char *a, *b;
    size_t a_len, b_len;
    bool left, right; /* NORM_STRIP */
} norm_step;

typedef enum pretok_kind {
    PRETOK_SPLIT,     /* regex split, behaviour Isolated or Removed, or invert (keep matches) */
    PRETOK_BYTELEVEL, /* optional prefix space, optional GPT-2 regex, bytes -> unicode chars */
    PRETOK_METASPACE, /* ' ' -> replacement, prepend per prepend_scheme */
} pretok_kind;

typedef enum prepend_scheme { PREPEND_ALWAYS, PREPEND_FIRST, PREPEND_NEVER } prepend_scheme;

typedef struct pretok_step {
    pretok_kind kind;
    pcre2_code *re;   /* SPLIT, BYTELEVEL with use_regex */
    bool invert, removed, add_prefix_space;
    char *repl;       /* METASPACE replacement (UTF-8) */
    size_t repl_len;
    prepend_scheme scheme;
} pretok_step;

typedef enum dec_kind {
    DEC_NONE,      /* no decoder: tokens joined with ' ' */
    DEC_BYTELEVEL, /* unicode chars -> bytes, added tokens verbatim */
    DEC_METASPACE, /* replacement -> ' ', leading space of token 0 dropped */
    DEC_CHAIN,     /* Sequence of Replace / ByteFallback / Fuse / Strip */
} dec_kind;

#define DEC_MAX_REPLACE 8
typedef struct dec_replace {
    char *pat, *content;
    size_t pat_len, content_len;
} dec_replace;

typedef struct decoder_cfg {
    dec_kind kind;
    char *repl; /* METASPACE */
    size_t repl_len;
    dec_replace pre[DEC_MAX_REPLACE];  /* Replace steps before ByteFallback (per token) */
    dec_replace post[DEC_MAX_REPLACE]; /* after ByteFallback, before Fuse (single-char patterns) */
    int n_pre, n_post;
    bool byte_fallback;
    /* ByteFallback as Rust's tokenizers (Python transformers, vLLM) does it:
     * a run of <0xNN> tokens that is not valid UTF-8 as a whole becomes one
     * U+FFFD per byte, and a leading U+FEFF stays. Otherwise transformers.js's
     * TextDecoder rules: U+FFFD per maximal invalid subpart, a leading BOM
     * dropped. Set for Gemma GGUF files, whose reference is Python
     * transformers (see tokenizer_gguf.c). */
    bool byte_fallback_per_byte;
    bool strip;                /* Strip after Fuse */
    uint32_t strip_char;       /* its content (one BMP code point) */
    int strip_start, strip_stop;
} decoder_cfg;

typedef struct added_token {
    char *content;
    size_t len;
    int32_t id;
    bool lstrip, rstrip, special;
} added_token;

/* TemplateProcessing "single" template: ids, with SEQ_A standing for the text. */
#define TEMPLATE_SEQ_A INT32_MIN
#define TEMPLATE_MAX 16

struct tokenizer {
    bpe model;
    int32_t vocab_size;   /* highest id + 1 */
    char **piece;         /* [vocab_size] id -> token string (NUL-terminated), NULL = hole */
    uint32_t *piece_len;  /* [vocab_size] */
    uint8_t *id_flags;    /* [vocab_size] ID_SPECIAL | ID_ADDED_STR */

    added_token *added;
    int n_added;
    int32_t *added_by_byte[256]; /* added token indices by first byte, -1 terminated */

    norm_step *norm;
    int n_norm;
    pretok_step *pretok;
    int n_pretok;
    int32_t tmpl[TEMPLATE_MAX]; /* post-processor with add_special_tokens */
    int n_tmpl;                 /* 0: no post-processor (text only) */
    decoder_cfg dec;

    bool llama_legacy_off;  /* LlamaTokenizer with legacy=false (transformers.js rewrite) */
    bool cleanup_spaces;    /* clean_up_tokenization_spaces */
    int32_t bos_id, eos_id;

    uint16_t cp_to_byte[324];  /* byte-level: unicode char (< 0x144) -> byte + 1, 0 = none */
    uint16_t byte_to_cp[256];
};

#define ID_SPECIAL 1u   /* skipped by skip_special_tokens */
#define ID_ADDED_STR 2u /* string is an added token's content (ByteLevel decoder passes it verbatim) */

/* Builds a tokenizer from a parsed tokenizer.json root and tokenizer_config
 * cfg (NULL = {}); takes ownership of both references. name is used in
 * messages. tokenizer_gguf.c synthesises root/cfg from GGUF metadata. */
vllm_status tokenizer_load_json(json_t *root, json_t *cfg, const char *name, tokenizer **out);
/* The tokenizer_config of a GGUF file (see tokenizer_gguf.c), *out new. */
vllm_status tokenizer_gguf_config(const char *path, json_t **out);
/* gguf_find_path (model/gguf.h): the GGUF file a model path names, or NULL. */
vllm_status tokenizer_gguf_path(const char *path, char **out);

#endif
