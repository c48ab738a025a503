/*
 * tokenizer.h - Hugging Face tokenizer.json tokenizers, in C.
 *
 * Two model families, chosen from tokenizer.json:
 *   - byte-level BPE with a regex Split pre-tokenizer (Llama 3, Qwen2/3; PCRE2
 *     with Unicode properties for the split regex);
 *   - SentencePiece-style BPE with byte fallback (Llama 2, TinyLlama, Mistral,
 *     stories260K): normalizer Prepend("▁")/Replace(" ","▁"), <0xNN> pieces.
 * Added tokens (special or not) are matched in the text before the model runs.
 * add_bos_token/add_eos_token (tokenizer_config.json) and the TemplateProcessing
 * post-processor decide what encode adds when add_special_tokens is true.
 *
 * The reference is transformers.js (tests compare ids and text exactly), so:
 *   - the post-processor in tokenizer.json alone decides what encode adds
 *     (TemplateProcessing, Bert/Roberta, Sequence; ByteLevel adds nothing):
 *     add_bos_token/add_eos_token are not consulted, as in transformers.js. For
 *     the supported files they agree (stories260K/Llama 2: template with <s>
 *     and add_bos_token true; the Llama 3 file bundled for tests has a
 *     ByteLevel-only post-processor, so no <|begin_of_text|> is added).
 *   - LlamaTokenizer with "legacy": false (TinyLlama, Llama 2) is encoded the
 *     way transformers.js rewrites it: Metaspace(prepend_scheme "first").
 *   - decode applies clean_up_tokenization_spaces from tokenizer_config.json
 *     (default true when absent, as transformers.js): " ." -> "." etc.
 *   - added tokens' lstrip/rstrip are honoured; normalized and single_word
 *     are ignored (transformers.js ignores them too).
 * Anything in tokenizer.json outside what is implemented (Unigram/WordPiece,
 * Lowercase, Precompiled, regex Replace, Split behaviours other than
 * Isolated/Removed, ...) fails tokenizer_load with VLLM_ERR_UNSUPPORTED and a
 * message naming the field; see tokenizer.c.
 *
 * Lifetime: tokenizer_load creates, tokenizer_free releases. A tokenizer is
 * immutable after load and safe to use from several threads at once.
 */
#ifndef VLLM_TOKENIZER_TOKENIZER_H
#define VLLM_TOKENIZER_TOKENIZER_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/strbuf.h"
#include "vllm/status.h"

typedef struct tokenizer tokenizer;

/* Loads dir/tokenizer.json and, if present, dir/tokenizer_config.json; or,
 * when dir is a GGUF model (gguf_find_path: a .gguf file, or the only one in
 * a directory without config.json), tokenizer_load_gguf. */
vllm_status tokenizer_load(const char *dir, tokenizer **out);
/* The tokenizer embedded in a GGUF file (tokenizer.ggml.*), see
 * tokenizer_gguf.c: model "llama" (SentencePiece BPE with byte fallback;
 * merges ranked by the scores, or in file order for Gemma) and "gpt2"
 * (byte-level BPE from the merges, split regex chosen by tokenizer.ggml.pre);
 * other models and unknown pre-tokenizers are VLLM_ERR_UNSUPPORTED naming them.
 * Only the metadata is read, whatever the tensors' types. */
vllm_status tokenizer_load_gguf(const char *path, tokenizer **out);
/* The model's tokenizer_config (*out, caller json_decref's; NULL when it has
 * none, which is not an error): dir/tokenizer_config.json, or for a GGUF
 * model the one its metadata describes (special tokens, add_bos_token, the
 * chat template(s); see tokenizer_gguf.c). The chat template and the
 * request's special-token strings come from here. */
vllm_status tokenizer_load_config(const char *dir, json_t **out);
/* Same from explicit paths (config_path may be NULL). */
vllm_status tokenizer_load_files(const char *tokenizer_json_path, const char *config_path,
                                 tokenizer **out);
void tokenizer_free(tokenizer *t);

int32_t tokenizer_vocab_size(const tokenizer *t);  /* highest id + 1, added tokens included */
int32_t tokenizer_bos_id(const tokenizer *t);      /* -1 if none */
int32_t tokenizer_eos_id(const tokenizer *t);      /* -1 if none */
bool tokenizer_is_special(const tokenizer *t, int32_t id);
/* The raw token string of an id (e.g. "▁the", "Ġthe", "<s>"), or NULL. Borrowed. */
const char *tokenizer_id_to_piece(const tokenizer *t, int32_t id);
/* The id of an exact piece/added token, or -1. */
int32_t tokenizer_piece_to_id(const tokenizer *t, const char *piece);

/* The bytes token id stands for in the middle of a text, appended to out:
 * what it adds to the decoded string when other tokens come before it,
 * before any clean-up. Byte-level BPE: its characters mapped back to bytes
 * ("Ġthe" -> " the"); Metaspace / SentencePiece: the replacement as a space
 * ("▁the" -> " the"); a byte-fallback token "<0x0A>" -> the one byte 0x0A;
 * added and special tokens: their content verbatim. A byte-level token may
 * be part of a UTF-8 sequence, so the bytes need not be valid UTF-8. What a
 * grammar matches tokens against, and what a logprob's `bytes` report.
 * VLLM_ERR_INVALID names an id outside the vocabulary or a hole. */
vllm_status tokenizer_token_bytes(const tokenizer *t, int32_t id, strbuf *out);

/* Encodes len bytes of text. Any bytes are accepted: each maximal invalid
 * UTF-8 subpart is replaced by U+FFFD first (WHATWG TextDecoder and Rust's
 * String::from_utf8_lossy agree on this), then the text is tokenized like any
 * other. NUL bytes are ordinary characters. add_special_tokens applies the
 * post-processor's template (e.g. BOS). *ids is malloc'ed (never NULL on
 * success, even for 0 ids), caller frees. */
vllm_status tokenizer_encode(const tokenizer *t, const char *text, size_t len,
                             bool add_special_tokens, int32_t **ids, int32_t *n_ids);

/* Decodes ids to a malloc'ed NUL-terminated string (*len bytes, excl. NUL);
 * 0 ids give "". Byte sequences that do not form valid UTF-8 (a byte-level
 * token cut from its neighbours) become U+FFFD as in TextDecoder. Ids outside
 * the vocabulary are VLLM_ERR_INVALID naming the id. */
vllm_status tokenizer_decode(const tokenizer *t, const int32_t *ids, int32_t n_ids,
                             bool skip_special_tokens, char **text, size_t *len);

/*
 * Incremental detokenizer for streaming (vLLM's detokenize_incrementally):
 * push one id at a time; each push yields the new text that is now final.
 * Never emits a partial UTF-8 sequence; the concatenation of all pieces equals
 * tokenizer_decode() of all ids pushed so far once the sequence is complete
 * (detokenizer_flush returns whatever is held back).
 *
 * It is the same streaming decoder tokenizer_decode runs, so this holds by
 * construction; a push costs O(bytes of that token), independent of the
 * sequence length. Held back at any time: at most an unfinished UTF-8
 * sequence (for a Gemma GGUF tokenizer, whose byte-fallback runs decode as
 * Rust's tokenizers decodes them, all or nothing: the current run of <0xNN>
 * tokens), a few trailing bytes that clean-up could still rewrite (" n'"),
 * and trailing Strip characters.
 *
 * With prompt ids, the decoder state is primed with the prompt and the
 * prompt's own text is not emitted: if E is what pushing the prompt ids one
 * by one would have emitted, E followed by the pieces equals
 * tokenizer_decode(prompt ++ pushed). (E.g. a generated token's leading space
 * is kept after a prompt, and a character split across the prompt/output
 * boundary is emitted whole in the first piece that completes it.)
 * Not thread-safe: one detokenizer per sequence. Pushing after flush is
 * VLLM_ERR_INVALID; ids outside the vocabulary are VLLM_ERR_INVALID and leave
 * the detokenizer unchanged.
 */
typedef struct detokenizer detokenizer;
vllm_status detokenizer_create(const tokenizer *t, const int32_t *prompt_ids, int32_t n_prompt,
                               bool skip_special_tokens, detokenizer **out);
void detokenizer_free(detokenizer *d);
/* Appends id; *piece (borrowed until the next call) gets the new text, maybe "". */
vllm_status detokenizer_push(detokenizer *d, int32_t id, const char **piece, size_t *piece_len);
/* Ends the stream: returns text held back (e.g. an incomplete UTF-8 tail as U+FFFD). */
vllm_status detokenizer_flush(detokenizer *d, const char **piece, size_t *piece_len);

#endif
