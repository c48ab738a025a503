/*
 * model.h - a loaded Hugging Face model: its config, its weights (views into
 * mmapped safetensors files, never copied), and its generation defaults.
 *
 * Contract between the loader (model.c, safetensors.c, config.c) and the
 * forward pass (runner.c). The loader validates everything a file can get
 * wrong -- JSON syntax, architecture, every tensor's presence, dtype and shape,
 * every offset against its file -- so the forward pass can trust what it gets.
 *
 * Weight layout is Hugging Face's: a Linear weight is (out_features, in_features)
 * row-major, so y = W x is one dot product per row. q_proj/k_proj rows are in HF
 * "rotate_half" RoPE order (pair i with i + head_dim/2).
 *
 * Lifetime: model_load() creates, model_free() releases the mmaps; every
 * tensor.data pointer is borrowed from the model and valid until model_free.
 *
 * x16 copies, the one exception to "never copied": in a process whose Q8_0 /
 * Q4_0 dots use the block order (kernels/quant.h: quant_use_block()), or
 * whose Q4_K dots read x16 copies (quant_k_use_x16: AVX2 or AVX-512, no AMX),
 * model_load repacks each such matmul weight whose rows come in whole
 * 16-row groups (q/k/v/o, gate/up/down, lm_head) into the x16 layout, a
 * private anonymous mapping the same size as the rows (Q4_K: 148 bytes per
 * row and super-block instead of 144, quant_x16_row_bytes), and hangs it
 * on the tensor (tensor.x16). The model owns them: model_free unmaps them, so
 * tensor.x16 is borrowed exactly as tensor.data is. The forward pass passes
 * a weight's copy to the kernels with its rows (matmul_args.x16); the
 * kernels read it instead of the rows, with the same results bit for bit.
 * A copy that cannot be mapped is simply not made (x16 NULL, the rows are
 * read). BF16 copies are the other exception: --dtype bfloat16 replaces
 * F16 / F32 matmul weights by rounded copies (model_convert_bf16, below),
 * once, before any runner. After that the model is not written again, so
 * several runners may share it.
 */
#ifndef VLLM_MODEL_MODEL_H
#define VLLM_MODEL_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/dtype.h"
#include "vllm/status.h"

typedef enum model_arch {
    MODEL_ARCH_LLAMA = 0, /* LlamaForCausalLM */
    MODEL_ARCH_MISTRAL,   /* MistralForCausalLM (Llama math; see sliding_window) */
    MODEL_ARCH_QWEN2,     /* Qwen2ForCausalLM: q/k/v biases */
    MODEL_ARCH_QWEN3,     /* Qwen3ForCausalLM: per-head RMSNorm on q and k */
    MODEL_ARCH_GEMMA3,    /* Gemma3ForCausalLM: the Gemma fields below, q/k norms, GeGLU,
                           * interleaved sliding-window and global layers */
} model_arch;

/* The gate activation of the MLP: down(act(gate(x)) * up(x)). */
typedef enum model_act {
    MODEL_ACT_SILU = 0,   /* SwiGLU (Llama, Mistral, Qwen) */
    MODEL_ACT_GELU_TANH,  /* GeGLU with torch's gelu(approximate="tanh") (Gemma: gelu_pytorch_tanh) */
} model_act;

#define MODEL_MAX_LAYERS 1024

typedef enum rope_scaling_type {
    ROPE_SCALING_NONE = 0,
    ROPE_SCALING_LINEAR, /* positions divided by factor */
    ROPE_SCALING_LLAMA3, /* Llama 3.1 frequency-dependent scaling */
} rope_scaling_type;

typedef struct model_config {
    model_arch arch;
    char architecture[64];           /* as written in config.json */
    int32_t hidden_size;             /* dim */
    int32_t intermediate_size;       /* MLP hidden */
    int32_t num_hidden_layers;
    int32_t num_attention_heads;
    int32_t num_key_value_heads;     /* GQA: heads share KV in groups */
    int32_t head_dim;                /* config head_dim, else hidden/heads */
    int32_t vocab_size;
    int32_t max_position_embeddings;
    float rms_norm_eps;
    float rope_theta;
    rope_scaling_type rope_scaling;
    float rope_factor;               /* linear and llama3 */
    float rope_low_freq_factor;      /* llama3 */
    float rope_high_freq_factor;     /* llama3 */
    int32_t rope_original_max_position_embeddings; /* llama3 */
    bool tie_word_embeddings;        /* lm_head = embed_tokens */
    bool attention_bias;             /* q/k/v biases (Qwen2; Llama attention_bias) */
    bool qk_norm;                    /* Qwen3 */
    dtype torch_dtype;               /* as declared; weights keep their file dtype */
    int32_t bos_token_id;            /* -1 if none */
    int32_t eos_token_ids[8];        /* config.json eos, merged with generation_config */
    int32_t num_eos_token_ids;
    /* Sliding-window attention span in tokens, 0 = none (full attention).
     * Gemma 3: the span of its sliding (local) layers, those set in
     * sliding_layers; the forward pass attends there to the last
     * sliding_window positions only and the KV cache frees what they can no
     * longer reach (model/kv_layout.h).
     * Mistral's sliding_window, or Qwen2/Qwen3's when use_sliding_window is
     * true: no layer is marked sliding and the forward pass attends to the
     * full context, so the engine caps max_model_len at sliding_window (what
     * vLLM's --disable-sliding-window does); within that cap full and sliding
     * attention are the same computation. */
    int32_t sliding_window;
    uint64_t sliding_layers[MODEL_MAX_LAYERS / 64]; /* bit l: layer l attends through the window */
    /* q/k rows in llama.cpp's interleaved RoPE order (llama GGUF files; see
     * model/gguf.h): RoPE turns adjacent pairs instead of halves. */
    bool rope_interleaved;

    /* What Gemma 3 changes; the defaults (zeros) are Llama's math. */
    model_act hidden_act;            /* SwiGLU or GeGLU */
    float norm_weight_offset;        /* every RMSNorm scales by (w + offset): Gemma's 1 in HF files
                                      * (GGUF files store w + 1 already: 0) */
    float embed_scale;               /* embeddings times this, 0 = not scaled. Gemma: sqrt(hidden)
                                      * rounded to torch_dtype, as HF multiplies in the weights' dtype */
    float attn_scale;                /* attention score scale, 0 = 1/sqrt(head_dim); Gemma:
                                      * query_pre_attn_scalar^-1/2 */
    bool post_norms;                 /* RMSNorm on the attention and the MLP outputs before each
                                      * residual add (layer_weights.attn_post_norm, ffn_post_norm) */
    float final_logit_softcapping;   /* 0 = none; else logits = cap * tanh(logits / cap) */
    float rope_local_theta;          /* RoPE base of the sliding layers (Gemma's rope_local_base_freq;
                                      * no scaling); the others use rope_theta and rope_scaling */

    /* Mixture of experts (Qwen3MoeForCausalLM on arch QWEN3, MixtralForCausalLM
     * on arch MISTRAL; model/moe.h). num_experts 0: every MLP is dense. */
    int32_t num_experts;             /* Qwen3 num_experts, Mixtral num_local_experts */
    int32_t num_experts_per_tok;     /* top-k */
    int32_t moe_intermediate_size;   /* each expert's hidden size (Mixtral: intermediate_size) */
    bool norm_topk_prob;             /* the top-k probabilities renormalised to sum 1 (Mixtral: always) */
    uint64_t moe_layers[MODEL_MAX_LAYERS / 64]; /* bit l: layer l's MLP is the sparse block */
} model_config;

/* True if layer l's MLP is a mixture of experts (layer_weights.moe). */
static inline bool model_layer_is_moe(const model_config *cfg, int32_t l) {
    return cfg->num_experts > 0 && ((cfg->moe_layers[l >> 6] >> (l & 63)) & 1);
}

/* True if layer l attends through cfg's sliding window (a Gemma 3 local layer). */
static inline bool model_layer_is_sliding(const model_config *cfg, int32_t l) {
    return (cfg->sliding_layers[l >> 6] >> (l & 63)) & 1;
}

/* True if any layer does: the model computes real sliding-window attention. */
static inline bool model_has_sliding_layers(const model_config *cfg) {
    for (int32_t l = 0; l < cfg->num_hidden_layers && l < MODEL_MAX_LAYERS; l++)
        if (model_layer_is_sliding(cfg, l)) return true;
    return false;
}

/* Sampling defaults from generation_config.json; has_* false when absent. */
typedef struct generation_defaults {
    bool has_temperature, has_top_p, has_top_k, has_min_p, has_repetition_penalty;
    float temperature, top_p, min_p, repetition_penalty;
    int32_t top_k;
    int32_t max_new_tokens;          /* 0 if absent */
} generation_defaults;

/* A borrowed view of one weight. shape[0] is the outermost dimension. */
typedef struct tensor {
    dtype type;
    int32_t ndim;
    int64_t shape[2];
    const void *data;                /* into an mmapped file; NULL if absent */
    void *x16;                       /* (x16_bytes) data in the x16 layout (kernels/quant.h), owned by the
                                      * model (model_make_x16 / model_free_x16); NULL if none */
    size_t x16_bytes;
    void *copy;                      /* (copy_bytes) the model's own BF16 copy that data points to
                                      * (model_convert_bf16), unmapped by model_free; NULL if none */
    size_t copy_bytes;
} tensor;

/* A layer's sparse MLP block: router logits = x router^T, then each chosen
 * expert e computes down[e](silu(gate[e] x) * up[e] x) (model/moe.h). The
 * expert arrays are the model's (model_weights.experts). */
typedef struct moe_weights {
    tensor router;                   /* (num_experts, dim): HF mlp.gate, GGUF ffn_gate_inp */
    tensor *gate, *up;               /* (num_experts) of (moe_intermediate, dim) */
    tensor *down;                    /* (num_experts) of (dim, moe_intermediate) */
} moe_weights;

typedef struct layer_weights {
    tensor input_layernorm;          /* (dim) before attention */
    tensor q_proj;                   /* (n_heads * head_dim, dim) */
    tensor k_proj;                   /* (n_kv_heads * head_dim, dim) */
    tensor v_proj;                   /* (n_kv_heads * head_dim, dim) */
    tensor o_proj;                   /* (dim, n_heads * head_dim) */
    tensor q_bias, k_bias, v_bias;   /* (out) Qwen2 / attention_bias, else data NULL */
    tensor o_bias;                   /* (dim) Llama/Qwen3/Gemma3 with attention_bias, else data NULL */
    tensor q_norm, k_norm;           /* (head_dim) Qwen3, Gemma3, else data NULL */
    tensor attn_post_norm;           /* (dim) Gemma3: on the attention output before the residual
                                      * add (HF post_attention_layernorm, GGUF post_attention_norm) */
    tensor post_attention_layernorm; /* (dim) before the MLP: HF Llama's post_attention_layernorm,
                                      * Gemma3's pre_feedforward_layernorm (GGUF ffn_norm) */
    tensor gate_proj;                /* (intermediate, dim) */
    tensor up_proj;                  /* (intermediate, dim) */
    tensor down_proj;                /* (dim, intermediate) */
    tensor ffn_post_norm;            /* (dim) Gemma3: on the MLP output before the residual add
                                      * (HF post_feedforward_layernorm, GGUF post_ffw_norm) */
    const moe_weights *moe;          /* the sparse MLP block of a MoE layer (gate/up/down_proj unbound),
                                      * else NULL */
    float k_scale, v_scale;          /* FP8 KV cache scales from the checkpoint (vLLM's per-tensor
                                      * self_attn.k_scale / v_scale, see model.c); 0 = none (1.0) */
} layer_weights;

typedef struct model_weights {
    tensor embed_tokens;             /* (vocab, dim) */
    layer_weights *layers;           /* (num_hidden_layers) */
    tensor norm;                     /* (dim) final RMSNorm */
    tensor lm_head;                  /* (vocab, dim); == embed_tokens when tied */
    moe_weights *moe;                /* (num_hidden_layers) the sparse blocks layers[l].moe point into,
                                      * or NULL for a dense model; owned */
    tensor *experts;                 /* (num_hidden_layers * 3 * num_experts) the arrays of moe[l]; owned */
} model_weights;

typedef struct model model;
struct model {
    char *dir;                       /* model directory, or the .gguf file (owned) */
    model_config config;
    generation_defaults gen;
    model_weights w;
    /* private: the mmapped safetensors files */
    struct safetensors_file **files;
    int32_t num_files;
    struct gguf_file *gguf;          /* the mmapped GGUF file, or NULL */
};

/* Loads config.json, generation_config.json (optional) and the safetensors
 * weights (model.safetensors, or model.safetensors.index.json and its shards)
 * from dir; or, when path is a .gguf file or a directory without config.json
 * holding exactly one .gguf file (gguf_find_path), that GGUF file (model/gguf.h; weights stay
 * in the file's dtypes, quantized ones included). On failure returns an error
 * whose message names the file and the problem, and *out is NULL. Caller frees
 * with model_free. */
vllm_status model_load(const char *path, model **out);
void model_free(model *m);

/* Makes the x16 copies of m's matmul weights (see the top) that do not have
 * one yet, on a thread pool of its own (one thread per online CPU) for the
 * call; does nothing unless quant_use_block(). A weight that gets no copy
 * keeps x16 NULL. model_load calls it; a caller that fills a model by hand
 * (tests) calls it itself and releases with model_free_x16. */
void model_make_x16(model *m);
/* Unmaps every x16 copy of m and sets the tensors' x16 to NULL (model_free
 * does this). */
void model_free_x16(model *m);

/* --dtype bfloat16 for F16 / F32 weights (docs/dtype.md): each F16 or F32
 * matmul weight (q/k/v/o, gate/up/down, lm_head; not the embedding rows,
 * norms, biases, MoE routers or experts) becomes a BF16 copy the model owns
 * (tensor.copy, a private anonymous mapping; data and type point to it),
 * every element rounded to nearest even (F16 widened to F32 first, exactly:
 * torch's .to(torch.bfloat16)), so the runner's BF16 path takes it. The
 * second exception to "never copied"; call it before any runner uses m.
 * *converted (may be NULL) = the number of weights converted. On a failed
 * mapping returns VLLM_ERR_NOMEM naming the weight; those converted so far
 * stay converted (model_free releases them). */
vllm_status model_convert_bf16(model *m, int *converted);

/* Parses config.json text (path used only in messages). Exposed for tests and
 * fuzzing. Validates every value (positive dims, heads divisible by KV heads,
 * known architecture and RoPE scaling, token ids inside the vocabulary). */
vllm_status model_config_parse(const char *json, size_t len, const char *path, model_config *cfg);

/* Parses generation_config.json text into *gen and merges its eos_token_id
 * (int or list) into cfg's eos ids; cfg must already be parsed (ids are
 * checked against its vocabulary). Absent or null fields leave has_* false. */
vllm_status model_generation_config_parse(const char *json, size_t len, const char *path,
                                          model_config *cfg, generation_defaults *gen);

#endif
