/*
 * gguf.h - read-only, zero-copy access to GGUF files (llama.cpp's format),
 * and the mapping of a llama-, gemma3- or qwen3moe-architecture GGUF onto
 * model_config / model_weights (mixtures of experts: a llama file with
 * <arch>.expert_count is Mixtral; qwen3moe keeps HF's q/k row order).
 *
 * The format (v2 and v3; little-endian; v1 had 32-bit counts and is refused):
 *     "GGUF" u32 version; u64 n_tensors; u64 n_kv;
 *     n_kv x  { string key; u32 type; value }
 *     n_tensors x { string name; u32 n_dims; u64 ne[n_dims]; u32 ggml_type; u64 offset }
 *     padding to general.alignment (u32, default 32); the data section.
 * string = u64 length + bytes (no NUL); an array value = u32 element type,
 * u64 count, elements. ne[0] is the innermost (contiguous) dimension, so a
 * Linear weight (out, in) is stored with ne = {in, out}. Offsets are relative
 * to the data section and multiples of the alignment.
 *
 * gguf_parse() validates everything before handing anything out: every count
 * against the bytes left (no allocation sized by an unchecked count), every
 * string length, every value type, unique keys and tensor names, tensor rank
 * (1..4), dims and their product (overflow), the ggml type (ours: F32, F16,
 * BF16, Q8_0, Q4_0, Q4_K, Q6_K; others are named in the error), rows a whole
 * number of blocks, offsets aligned, [offset, offset + size) inside the data
 * section and not overlapping another tensor. A bad file is an error naming
 * the file and the problem; it never reads outside the mapping.
 *
 * Q/K row order. convert_hf_to_gguf.py permutes the rows of attn_q and attn_k
 * within each head for llama: GGUF row 2i is HF row i and GGUF row 2i+1 is HF
 * row i + head_dim/2 (llama.cpp rotates adjacent pairs, "GPT-J"/interleaved
 * RoPE; HF rotates halves). gguf_model_weights() hands the rows over as
 * stored, so a runner must EITHER apply RoPE to adjacent pairs (x[2i],
 * x[2i+1]) with frequency index i for these models (q.k is unchanged by the
 * same permutation of q and k; v and attn_output are not permuted), OR
 * un-permute the rows at load time (a copy). gguf_file.rope_interleaved says
 * which order the file is in (true for every llama GGUF from llama.cpp's
 * converter and from tools/make_gguf.py; gemma3 files keep HF's order, which
 * llama.cpp rotates as NEOX).
 *
 * Lifetime: gguf_open() maps, gguf_deinit() unmaps; every pointer into the
 * file (tensor data, string values) is borrowed until gguf_deinit.
 */
#ifndef VLLM_MODEL_GGUF_H
#define VLLM_MODEL_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/dtype.h"
#include "model/model.h"
#include "vllm/status.h"

#define GGUF_MAX_DIMS 4
#define GGUF_DEFAULT_ALIGNMENT 32

typedef enum gguf_type {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
    GGUF_TYPE_COUNT
} gguf_type;

/* ggml_type numbers of the tensor types we compute in. */
enum {
    GGML_TYPE_F32 = 0,
    GGML_TYPE_F16 = 1,
    GGML_TYPE_Q4_0 = 2,
    GGML_TYPE_Q4_1 = 3,
    GGML_TYPE_Q5_0 = 6,
    GGML_TYPE_Q5_1 = 7,
    GGML_TYPE_Q8_0 = 8,
    GGML_TYPE_Q2_K = 10,
    GGML_TYPE_Q3_K = 11,
    GGML_TYPE_Q4_K = 12,
    GGML_TYPE_Q5_K = 13,
    GGML_TYPE_Q6_K = 14,
    GGML_TYPE_IQ4_NL = 20,
    GGML_TYPE_BF16 = 30,
};

/* A string inside the file: len bytes at s, not NUL-terminated. */
typedef struct gguf_str {
    const char *s;
    uint64_t len;
} gguf_str;

typedef struct gguf_kv {
    gguf_str key;
    gguf_type type;
    gguf_type elem_type;             /* arrays: element type; else == type */
    uint64_t count;                  /* arrays: element count; else 1 */
    const uint8_t *value;            /* the value bytes (arrays: the first element) */
} gguf_kv;

typedef struct gguf_tensor {
    gguf_str name;
    int32_t ndim;
    int64_t ne[GGUF_MAX_DIMS];       /* ne[0] innermost; unused dims are 1 */
    uint32_t ggml_type;
    dtype type;
    uint64_t offset, size;           /* bytes, relative to the data section */
    const void *data;
} gguf_tensor;

typedef struct gguf_file {
    char *path;                      /* owned; used in messages */
    uint32_t version;
    uint32_t alignment;
    gguf_kv *kvs;                    /* (num_kvs), file order */
    int64_t num_kvs;
    gguf_tensor *tensors;            /* (num_tensors), file order */
    int64_t num_tensors;
    const uint8_t *data;             /* the data section */
    uint64_t data_size;
    bool rope_interleaved;           /* q/k rows in llama.cpp's order (see above) */
    /* private */
    void *map;
    size_t map_size;
} gguf_file;

/* Parses and validates the file image bytes[0..size) (borrowed; must outlive
 * f). path is used only in messages. On failure f is left deinit-safe. */
vllm_status gguf_parse(const void *bytes, size_t size, const char *path, gguf_file *f);
/* Opens and mmaps path read-only, then gguf_parse. */
vllm_status gguf_open(const char *path, gguf_file *f);
/* The same for the header and metadata only (num_tensors 0, data NULL): what
 * the tokenizer and the chat template need, whatever the tensors' types. */
vllm_status gguf_open_metadata(const char *path, gguf_file *f);
/* Releases what parse/open acquired; f is zeroed. Safe on a zeroed f. */
void gguf_deinit(gguf_file *f);

/* The GGUF file a model path names: path itself if it ends in ".gguf", or
 * the only *.gguf file in directory path when it has no config.json; *out
 * (malloc'ed, caller frees) is NULL for anything else (a Hugging Face
 * directory). A directory without config.json and with several .gguf files
 * is VLLM_ERR_INVALID listing two of them. model_load and tokenizer_load
 * both decide through this one function. */
vllm_status gguf_find_path(const char *path, char **out);

/* Lookup by exact name; NULL if absent. */
const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);

/* Typed getters: VLLM_ERR_NOT_FOUND when the key is absent, VLLM_ERR_FORMAT
 * when it has an incompatible type (the message names the key).
 * get_int accepts any integer type (and checks the value fits int64);
 * get_float accepts FLOAT32/FLOAT64; get_string returns a borrowed view. */
vllm_status gguf_get_int(const gguf_file *f, const char *key, int64_t *out);
vllm_status gguf_get_float(const gguf_file *f, const char *key, double *out);
vllm_status gguf_get_bool(const gguf_file *f, const char *key, bool *out);
vllm_status gguf_get_string(const gguf_file *f, const char *key, gguf_str *out);
/* Element i of an array of scalars, as int64 / double (the element type must
 * be an integer / float type); i < kv->count. */
int64_t gguf_array_int(const gguf_kv *kv, uint64_t i);
double gguf_array_float(const gguf_kv *kv, uint64_t i);
/* The strings of a string array into out[0..kv->count) (validated by parse). */
void gguf_array_strings(const gguf_kv *kv, gguf_str *out);

const char *gguf_type_name(gguf_type t);

/* Fills cfg from the metadata of a file whose general.architecture is
 * "llama" or "gemma3": <arch>.{context_length, embedding_length, block_count,
 * feed_forward_length, attention.head_count, attention.head_count_kv,
 * attention.key_length, attention.value_length,
 * attention.layer_norm_rms_epsilon, rope.freq_base, rope.dimension_count,
 * vocab_size, rope.scaling.*}, vocabulary size from <arch>.vocab_size or the
 * token list or token_embd, bos/eos from tokenizer.ggml.*, tie from the
 * absence of output.weight. gemma3 adds attention.sliding_window and what
 * llama.cpp's loader fixes for it (gguf.c: gemma3_config). Experts
 * (llama, "qwen3moe"): <arch>.{expert_count, expert_used_count,
 * expert_feed_forward_length}, the top-k renormalised as llama.cpp does
 * (gguf.c: moe_config). Errors name the key. */
vllm_status gguf_model_config(const gguf_file *f, model_config *cfg);

/* Points w at the tensors of a llama GGUF (token_embd, blk.N.{attn_norm,
 * attn_q, attn_k, attn_v, attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down},
 * output_norm, output; gemma3 adds blk.N.{attn_q_norm, attn_k_norm,
 * post_attention_norm, post_ffw_norm}, qwen3moe blk.N.{attn_q_norm,
 * attn_k_norm}; a MoE layer has blk.N.{ffn_gate_inp, ffn_gate_exps,
 * ffn_up_exps, ffn_down_exps} (3-D, one slab per expert) instead of
 * ffn_gate/up/down) after checking each one's presence and shape against
 * cfg. Shapes are given in model.h's order (out, in). w->layers (and w->moe,
 * w->experts) are allocated (model_free frees them); tensor data is borrowed
 * from f. */
vllm_status gguf_model_weights(const gguf_file *f, const model_config *cfg, model_weights *w);

/* The tokenizer embedded in the file (tokenizer.ggml.*). tokens, merges
 * borrow from the file; scores and token_types are owned copies (NULL if the
 * file has none). Ids are -1 when absent. */
typedef struct gguf_tokenizer {
    gguf_str model;                  /* "llama" (SentencePiece), "gpt2" (byte-level BPE), ... */
    gguf_str pre;                    /* pre-tokenizer name, len 0 if absent */
    int64_t num_tokens;
    gguf_str *tokens;                /* (num_tokens) */
    float *scores;                   /* (num_tokens) or NULL */
    int32_t *token_types;            /* (num_tokens) or NULL: 1 normal, 2 unknown, 3 control, 4 user, 5 unused, 6 byte */
    int64_t num_merges;
    gguf_str *merges;                /* (num_merges) "a b", or NULL */
    int32_t bos_id, eos_id, unk_id, pad_id;
    int32_t add_bos, add_eos;        /* 1/0, or -1 if absent */
    gguf_str chat_template;          /* len 0 if absent */
} gguf_tokenizer;

vllm_status gguf_tokenizer_extract(const gguf_file *f, gguf_tokenizer *tok);
void gguf_tokenizer_deinit(gguf_tokenizer *tok);

#endif
