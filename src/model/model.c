/*
 * model.c - model_load / model_free: a Hugging Face directory into a model.
 *
 *   config.json                   required; model_config_parse
 *   generation_config.json        optional; sampling defaults and extra eos ids
 *   model.safetensors             the weights, or
 *   model.safetensors.index.json  {"weight_map": {tensor: shard file}} + the shards
 *
 * Every safetensors file is mmapped read-only and stays mapped for the model's
 * lifetime; model_weights holds borrowed views into the mappings, so loading a
 * 2 GB checkpoint costs a few page-table entries, and pages are read from the
 * page cache only when the forward pass first touches them.
 *
 * Binding is driven by what the config says must exist: for each expected HF
 * tensor name we look it up (binary search in each file), demand the exact
 * shape the config implies, and mark it used. Whatever remains unused
 * (rotary_emb.inv_freq, an lm_head.weight shadowed by tied embeddings, ...)
 * is ignored with a debug line. A name found in two files is an error, since
 * "which copy wins" would depend on shard order.
 *
 * A GGUF file (a .gguf path, or the only one in a directory without
 * config.json; gguf_find_path) is mapped instead: gguf_model_config and
 * gguf_model_weights validate it the same way and the weights stay views into
 * the mapping in their file dtypes (quantized blocks included). Its q/k rows
 * are in llama.cpp's interleaved RoPE order; rather than un-permute them (a
 * copy of every q/k matrix, i.e. a private dequantized-or-shuffled duplicate
 * of ~10% of the model) the config says rope_interleaved and the runner turns
 * adjacent pairs, which costs nothing (q.k is invariant under the same row
 * permutation of q and k).
 *
 * Last, model_make_x16 gives the Q8_0 / Q4_0 / Q4_K matmul weights their x16
 * copies when the process's kernels want them (model.h, quant_x16_wanted):
 * the one place the loader copies weights, because the x16 kernels read 16
 * rows per vector lane group ~1.5-3x faster than GGUF rows. It runs on a thread pool of its
 * own (every online CPU, for the seconds it takes on a large model) since
 * the loader knows nothing of the runner's; the copies touch every page of
 * those weights, so a quantized model is read in full at load.
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "base/threadpool.h"
#include "kernels/quant.h"
#include "model/gguf.h"
#include "model/model.h"
#include "model/safetensors.h"

#define MAX_JSON_FILE (64u << 20)

/* Reads a whole (JSON) file into a NUL-terminated heap buffer. A missing file is
 * VLLM_ERR_NOT_FOUND so callers can treat optional files as optional. */
static vllm_status read_text_file(const char *path, char **out, size_t *len) {
    *out = NULL;
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return vllm_error(errno == ENOENT ? VLLM_ERR_NOT_FOUND : VLLM_ERR_IO, "%s: cannot open: %s", path,
                          strerror(errno));
    vllm_status rc = VLLM_OK;
    char *buf = NULL;
    long size = -1;
    if (fseek(fp, 0, SEEK_END) == 0) size = ftell(fp);
    if (size < 0 || fseek(fp, 0, SEEK_SET) != 0) {
        rc = vllm_error(VLLM_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
        goto done;
    }
    if ((unsigned long)size > MAX_JSON_FILE) {
        rc = vllm_error(VLLM_ERR_FORMAT, "%s: %ld bytes is too large for a JSON file here", path, size);
        goto done;
    }
    if (!(buf = malloc((size_t)size + 1))) {
        rc = vllm_error(VLLM_ERR_NOMEM, "%s: out of memory", path);
        goto done;
    }
    if (fread(buf, 1, (size_t)size, fp) != (size_t)size) {
        rc = vllm_error(VLLM_ERR_IO, "%s: short read", path);
        free(buf);
        buf = NULL;
        goto done;
    }
    buf[size] = 0;
    *out = buf;
    *len = (size_t)size;
done:
    fclose(fp);
    return rc;
}

static char *path_join(const char *dir, const char *name) {
    char *p = NULL;
    return asprintf(&p, "%s/%s", dir, name) < 0 ? NULL : p;
}

static vllm_status load_configs(model *m) {
    char *path = path_join(m->dir, "config.json"), *text = NULL;
    size_t len = 0;
    vllm_status rc = VLLM_OK;
    if (!path) return vllm_error(VLLM_ERR_NOMEM, "out of memory");
    if ((rc = read_text_file(path, &text, &len))) goto done;
    if ((rc = model_config_parse(text, len, path, &m->config))) goto done;
    free(path);
    free(text);
    text = NULL;
    if (!(path = path_join(m->dir, "generation_config.json"))) return vllm_error(VLLM_ERR_NOMEM, "out of memory");
    rc = read_text_file(path, &text, &len);
    if (rc == VLLM_ERR_NOT_FOUND) {
        rc = VLLM_OK;
        goto done;
    }
    if (rc) goto done;
    rc = model_generation_config_parse(text, len, path, &m->config, &m->gen);
done:
    free(path);
    free(text);
    return rc;
}

static vllm_status open_file(model *m, const char *name) {
    char *path = path_join(m->dir, name);
    if (!path) return vllm_error(VLLM_ERR_NOMEM, "out of memory");
    safetensors_file *f = calloc(1, sizeof *f);
    vllm_status rc = f ? safetensors_open(path, f) : vllm_error(VLLM_ERR_NOMEM, "out of memory");
    free(path);
    if (rc) {
        free(f);
        return rc;
    }
    m->files[m->num_files++] = f;
    return VLLM_OK;
}

/* A shard name from an index must stay inside the model directory. */
static bool shard_name_ok(const char *s) {
    if (!*s || *s == '/') return false;
    for (const char *p = s; *p; p = strchr(p, '/') ? strchr(p, '/') + 1 : p + strlen(p))
        if (!strncmp(p, "..", 2) && (p[2] == '/' || !p[2])) return false;
    return true;
}

/* The open file called name inside the model directory, or NULL. */
static safetensors_file *find_shard(const model *m, const char *name) {
    size_t dl = strlen(m->dir); /* every path is dir + "/" + name (path_join) */
    for (int32_t i = 0; i < m->num_files; i++)
        if (!strcmp(m->files[i]->path + dl + 1, name)) return m->files[i];
    return NULL;
}

/* Opens each shard named by the index once, then checks that every weight_map
 * entry is really in the shard it names. */
static vllm_status open_sharded(model *m, const char *index_path, const char *text, size_t len) {
    json_error_t jerr;
    json_t *root = json_loadb(text, len, 0, &jerr), *map;
    vllm_status rc = VLLM_OK;
    const char *name;
    json_t *v;
    if (!root) return vllm_error(VLLM_ERR_FORMAT, "%s: not valid JSON: %s (line %d)", index_path, jerr.text, jerr.line);
    if (!json_is_object(root) || !json_is_object(map = json_object_get(root, "weight_map")) ||
        json_object_size(map) == 0) {
        rc = vllm_error(VLLM_ERR_FORMAT, "%s: no \"weight_map\" object", index_path);
        goto done;
    }
    size_t cap = json_object_size(map);
    if (!(m->files = calloc(cap, sizeof *m->files))) {
        rc = vllm_error(VLLM_ERR_NOMEM, "out of memory");
        goto done;
    }
    json_object_foreach(map, name, v) {
        const char *shard = json_string_value(v);
        if (!shard || !shard_name_ok(shard)) {
            rc = vllm_error(VLLM_ERR_FORMAT, "%s: weight_map entry '%s' must name a file in the model directory",
                            index_path, name);
            goto done;
        }
        if (!find_shard(m, shard) && (rc = open_file(m, shard))) {
            vllm_error_prefix("%s names shard %s", index_path, shard);
            goto done;
        }
    }
    json_object_foreach(map, name, v) {
        const safetensors_file *f = find_shard(m, json_string_value(v));
        if (!f || !safetensors_find(f, name)) {
            rc = vllm_error(VLLM_ERR_FORMAT, "%s: weight_map puts '%s' in %s, which has no such tensor", index_path,
                            name, json_string_value(v));
            goto done;
        }
    }
done:
    json_decref(root);
    return rc;
}

static vllm_status open_weights(model *m) {
    char *index_path = path_join(m->dir, "model.safetensors.index.json"), *text = NULL;
    char *single_path = path_join(m->dir, "model.safetensors");
    size_t len = 0;
    vllm_status rc = VLLM_OK;
    if (!index_path || !single_path) {
        rc = vllm_error(VLLM_ERR_NOMEM, "out of memory");
        goto done;
    }
    rc = read_text_file(index_path, &text, &len);
    if (rc == VLLM_OK) rc = open_sharded(m, index_path, text, len);
    else if (rc == VLLM_ERR_NOT_FOUND) {
        if (access(single_path, F_OK) != 0)
            rc = vllm_error(VLLM_ERR_NOT_FOUND, "%s: no model.safetensors or model.safetensors.index.json",
                            m->dir);
        else if (!(m->files = calloc(1, sizeof *m->files)))
            rc = vllm_error(VLLM_ERR_NOMEM, "out of memory");
        else
            rc = open_file(m, "model.safetensors");
    }
done:
    free(index_path);
    free(single_path);
    free(text);
    return rc;
}

/* The one element of a scalar tensor as F32. */
static float kv_scale_value(const void *data, dtype t) {
    uint16_t h;
    float f;
    switch (t) {
    case DTYPE_BF16: return memcpy(&h, data, 2), bf16_to_f32(h);
    case DTYPE_F16: return memcpy(&h, data, 2), f16_to_f32(h);
    case DTYPE_F32: return memcpy(&f, data, 4), f;
    default: return NAN;
    }
}

/* Finds name in exactly one file; *file gets the file (for messages). */
static vllm_status find_tensor(model *m, const char *name, safetensors_tensor **out, safetensors_file **file) {
    *out = NULL;
    for (int32_t i = 0; i < m->num_files; i++) {
        safetensors_tensor *t = safetensors_find(m->files[i], name);
        if (!t) continue;
        if (*out)
            return vllm_error(VLLM_ERR_FORMAT, "tensor '%s' is in both %s and %s", name, (*file)->path,
                              m->files[i]->path);
        *out = t;
        *file = m->files[i];
    }
    return VLLM_OK;
}

static void format_shape(char *buf, size_t size, int32_t ndim, const int64_t *shape) {
    int n = snprintf(buf, size, "[");
    for (int32_t i = 0; i < ndim && n > 0 && (size_t)n < size; i++)
        n += snprintf(buf + n, size - (size_t)n, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (n > 0 && (size_t)n < size) snprintf(buf + n, size - (size_t)n, "]");
}

/* Binds the tensor called name (printf-style) with the given shape (d1 < 0: 1-D)
 * into *out. A missing tensor is an error only if required. */
static vllm_status bind_tensor(model *m, tensor *out, bool required, int64_t d0, int64_t d1, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static vllm_status bind_tensor(model *m, tensor *out, bool required, int64_t d0, int64_t d1, const char *fmt, ...) {
    char name[256], want[64], got[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    int64_t shape[2] = {d0, d1};
    int32_t ndim = d1 < 0 ? 1 : 2;
    format_shape(want, sizeof want, ndim, shape);
    safetensors_tensor *t;
    safetensors_file *f = NULL;
    vllm_status rc = find_tensor(m, name, &t, &f);
    if (rc) return rc;
    if (!t) {
        if (!required) return VLLM_OK;
        return vllm_error(VLLM_ERR_FORMAT, "%s: missing tensor '%s' (expected shape %s)",
                          m->num_files == 1 ? m->files[0]->path : m->dir, name, want);
    }
    if (t->ndim != ndim || t->shape[0] != d0 || (ndim == 2 && t->shape[1] != d1)) {
        format_shape(got, sizeof got, t->ndim, t->shape);
        return vllm_error(VLLM_ERR_FORMAT, "%s: tensor '%s' has shape %s, expected %s from config.json", f->path,
                          name, got, want);
    }
    t->used = true;
    *out = (tensor){.type = t->type, .ndim = ndim, .shape = {d0, ndim == 2 ? d1 : 0}, .data = t->data};
    return VLLM_OK;
}

/* One FP8 KV cache scale of layer i: the first of the checkpoint names
 * vLLM loads for it (maybe_remap_kv_scale_name: self_attn.k_scale /
 * v_scale from compressed-tensors and Quark, self_attn.k_proj.k_scale /
 * v_proj.v_scale from ModelOpt, the deprecated self_attn.kv_scale for
 * both), one element (shape [] or [1]) that must be finite and positive.
 * *out stays 0 (no scale: 1.0) when none is there. */
static vllm_status bind_kv_scale(model *m, float *out, int32_t i, const char *const *names, int32_t num_names) {
    for (int32_t n = 0; n < num_names; n++) {
        char name[256];
        snprintf(name, sizeof name, "model.layers.%d.self_attn.%s", i, names[n]);
        safetensors_tensor *t;
        safetensors_file *f = NULL;
        vllm_status rc = find_tensor(m, name, &t, &f);
        if (rc) return rc;
        if (!t) continue;
        int64_t numel = 1;
        for (int32_t d = 0; d < t->ndim; d++) numel *= t->shape[d];
        float v = numel == 1 ? kv_scale_value(t->data, t->type) : NAN;
        if (!(v > 0) || !isfinite(v))
            return vllm_error(VLLM_ERR_FORMAT, "%s: tensor '%s': a KV cache scale must be one finite positive value",
                              f->path, name);
        t->used = true;
        *out = v;
        return VLLM_OK;
    }
    return VLLM_OK;
}

/* The arrays of a MoE model's sparse blocks (model_weights.moe, .experts):
 * layer l's gate, up and down arrays of num_experts tensors each. */
static vllm_status alloc_moe(model *m) {
    const model_config *c = &m->config;
    model_weights *w = &m->w;
    if (!c->num_experts || w->moe) return VLLM_OK;
    size_t e = (size_t)c->num_experts;
    w->moe = calloc((size_t)c->num_hidden_layers, sizeof *w->moe);
    w->experts = calloc((size_t)c->num_hidden_layers * 3 * e, sizeof *w->experts);
    if (!w->moe || !w->experts) return vllm_error(VLLM_ERR_NOMEM, "out of memory");
    for (int32_t l = 0; l < c->num_hidden_layers; l++) {
        tensor *t = w->experts + (size_t)l * 3 * e;
        w->moe[l] = (moe_weights){.gate = t, .up = t + e, .down = t + 2 * e};
    }
    return VLLM_OK;
}

/* Layer i's sparse block from a Hugging Face checkpoint: Qwen3-MoE's
 * mlp.gate (router) and mlp.experts.E.{gate,up,down}_proj, Mixtral's
 * block_sparse_moe.gate and block_sparse_moe.experts.E.{w1,w3,w2}
 * (w1 = gate, w3 = up, w2 = down). */
static vllm_status bind_moe(model *m, int32_t i) {
    const model_config *c = &m->config;
    vllm_status rc = alloc_moe(m);
    if (rc) return rc;
    moe_weights *b = &m->w.moe[i];
    const int64_t dim = c->hidden_size, ff = c->moe_intermediate_size;
    bool mixtral = c->arch == MODEL_ARCH_MISTRAL;
    const char *blk = mixtral ? "block_sparse_moe" : "mlp";
    const char *g = mixtral ? "w1" : "gate_proj", *u = mixtral ? "w3" : "up_proj", *d = mixtral ? "w2" : "down_proj";
    if ((rc = bind_tensor(m, &b->router, true, c->num_experts, dim, "model.layers.%d.%s.gate.weight", i, blk)))
        return rc;
    for (int32_t e = 0; e < c->num_experts; e++)
        if ((rc = bind_tensor(m, &b->gate[e], true, ff, dim, "model.layers.%d.%s.experts.%d.%s.weight", i, blk, e, g)) ||
            (rc = bind_tensor(m, &b->up[e], true, ff, dim, "model.layers.%d.%s.experts.%d.%s.weight", i, blk, e, u)) ||
            (rc = bind_tensor(m, &b->down[e], true, dim, ff, "model.layers.%d.%s.experts.%d.%s.weight", i, blk, e, d)))
            return rc;
    m->w.layers[i].moe = b;
    return VLLM_OK;
}

static vllm_status bind_weights(model *m) {
    const model_config *c = &m->config;
    model_weights *w = &m->w;
    const int64_t dim = c->hidden_size, q_dim = (int64_t)c->num_attention_heads * c->head_dim,
                  kv_dim = (int64_t)c->num_key_value_heads * c->head_dim, ff = c->intermediate_size;
    bool o_bias = c->attention_bias &&
                  (c->arch == MODEL_ARCH_LLAMA || c->arch == MODEL_ARCH_QWEN3 || c->arch == MODEL_ARCH_GEMMA3);
    bool gemma3 = c->arch == MODEL_ARCH_GEMMA3;
    /* HF Gemma 3's post_attention_layernorm follows attention; its
     * pre_feedforward_layernorm is what Llama calls post_attention_layernorm */
    const char *pre_mlp = gemma3 ? "pre_feedforward_layernorm" : "post_attention_layernorm";
    vllm_status rc;
    if (!(w->layers = calloc((size_t)c->num_hidden_layers, sizeof *w->layers)))
        return vllm_error(VLLM_ERR_NOMEM, "out of memory");
    if ((rc = bind_tensor(m, &w->embed_tokens, true, c->vocab_size, dim, "model.embed_tokens.weight")) ||
        (rc = bind_tensor(m, &w->norm, true, dim, -1, "model.norm.weight")))
        return rc;
    for (int32_t i = 0; i < c->num_hidden_layers; i++) {
        layer_weights *l = &w->layers[i];
        const char *p = "model.layers";
        bool b = c->attention_bias;
        if ((rc = bind_tensor(m, &l->input_layernorm, true, dim, -1, "%s.%d.input_layernorm.weight", p, i)) ||
            (rc = bind_tensor(m, &l->q_proj, true, q_dim, dim, "%s.%d.self_attn.q_proj.weight", p, i)) ||
            (rc = bind_tensor(m, &l->k_proj, true, kv_dim, dim, "%s.%d.self_attn.k_proj.weight", p, i)) ||
            (rc = bind_tensor(m, &l->v_proj, true, kv_dim, dim, "%s.%d.self_attn.v_proj.weight", p, i)) ||
            (rc = bind_tensor(m, &l->o_proj, true, dim, q_dim, "%s.%d.self_attn.o_proj.weight", p, i)) ||
            (b && (rc = bind_tensor(m, &l->q_bias, true, q_dim, -1, "%s.%d.self_attn.q_proj.bias", p, i))) ||
            (b && (rc = bind_tensor(m, &l->k_bias, true, kv_dim, -1, "%s.%d.self_attn.k_proj.bias", p, i))) ||
            (b && (rc = bind_tensor(m, &l->v_bias, true, kv_dim, -1, "%s.%d.self_attn.v_proj.bias", p, i))) ||
            (o_bias && (rc = bind_tensor(m, &l->o_bias, true, dim, -1, "%s.%d.self_attn.o_proj.bias", p, i))) ||
            (c->qk_norm &&
             (rc = bind_tensor(m, &l->q_norm, true, c->head_dim, -1, "%s.%d.self_attn.q_norm.weight", p, i))) ||
            (c->qk_norm &&
             (rc = bind_tensor(m, &l->k_norm, true, c->head_dim, -1, "%s.%d.self_attn.k_norm.weight", p, i))) ||
            (gemma3 && (rc = bind_tensor(m, &l->attn_post_norm, true, dim, -1,
                                         "%s.%d.post_attention_layernorm.weight", p, i))) ||
            (gemma3 && (rc = bind_tensor(m, &l->ffn_post_norm, true, dim, -1,
                                         "%s.%d.post_feedforward_layernorm.weight", p, i))) ||
            (rc = bind_tensor(m, &l->post_attention_layernorm, true, dim, -1, "%s.%d.%s.weight", p, i, pre_mlp)))
            return rc;
        if (model_layer_is_moe(c, i)) {
            if ((rc = bind_moe(m, i))) return rc;
        } else if ((rc = bind_tensor(m, &l->gate_proj, true, ff, dim, "%s.%d.mlp.gate_proj.weight", p, i)) ||
                   (rc = bind_tensor(m, &l->up_proj, true, ff, dim, "%s.%d.mlp.up_proj.weight", p, i)) ||
                   (rc = bind_tensor(m, &l->down_proj, true, dim, ff, "%s.%d.mlp.down_proj.weight", p, i)))
            return rc;
        static const char *const k_names[] = {"k_scale", "k_proj.k_scale", "kv_scale"};
        static const char *const v_names[] = {"v_scale", "v_proj.v_scale", "kv_scale"};
        if ((rc = bind_kv_scale(m, &l->k_scale, i, k_names, 3)) || (rc = bind_kv_scale(m, &l->v_scale, i, v_names, 3)))
            return rc;
    }
    if (c->tie_word_embeddings) w->lm_head = w->embed_tokens;
    else if ((rc = bind_tensor(m, &w->lm_head, true, c->vocab_size, dim, "lm_head.weight"))) {
        vllm_error_prefix("tie_word_embeddings is false");
        return rc;
    }
    int64_t unused = 0;
    for (int32_t i = 0; i < m->num_files; i++)
        for (int32_t j = 0; j < m->files[i]->num_tensors; j++) {
            const safetensors_tensor *t = &m->files[i]->tensors[j];
            if (t->used) continue;
            log_debug("%s: ignoring tensor '%s' (not used by %s)", m->files[i]->path, t->name, c->architecture);
            unused += !strstr(t->name, "rotary_emb.inv_freq") && strcmp(t->name, "lm_head.weight");
        }
    if (unused)
        log_warn("%s: %lld tensors in the checkpoint are not used by %s with this config.json "
                 "(VLLM_LOGGING_LEVEL=DEBUG lists them)",
                 m->dir, (long long)unused, c->architecture);
    return VLLM_OK;
}

static size_t weight_bytes(const model *m) {
    size_t n = 0;
    if (m->gguf) return (size_t)m->gguf->data_size;
    for (int32_t i = 0; i < m->num_files; i++)
        for (int32_t j = 0; j < m->files[i]->num_tensors; j++)
            if (m->files[i]->tensors[j].used) n += m->files[i]->tensors[j].end - m->files[i]->tensors[j].begin;
    return n;
}

/* ---- x16 copies (model.h) ------------------------------------------------- */

/* The matmul weights, i in [0, 7 * layers + 1): each layer's seven
 * projections, then lm_head (tied or not, a tensor of its own whose copy is
 * its own; embed_tokens is read as rows only and gets none). */
static tensor *matmul_weight(model *m, int64_t i) {
    if (i == 7 * (int64_t)m->config.num_hidden_layers) return &m->w.lm_head;
    layer_weights *l = &m->w.layers[i / 7];
    tensor *all[7] = {&l->q_proj, &l->k_proj, &l->v_proj, &l->o_proj, &l->gate_proj, &l->up_proj, &l->down_proj};
    return all[i % 7];
}

typedef struct {
    dtype type;
    const void *src;
    void *dst;
    int64_t k;
} repack_job;

/* Groups [lo, hi) of a job's matrix into its copy. */
static void repack_groups(void *arg, int64_t lo, int64_t hi, int ith) {
    (void)ith;
    const repack_job *j = arg;
    quant_repack_x16(j->type, j->src, j->dst, lo, hi, j->k);
}

/* t's x16 copy, if it qualifies (a type quant_x16_wanted, whole 16-row groups); counts it. */
static void make_x16(tensor *t, threadpool **pool, int *made, size_t *total) {
    if (t->x16 || !quant_x16_wanted(t->type) || !t->data || t->ndim != 2 || t->shape[0] % 16 ||
        t->shape[1] % dtype_block_elems(t->type))
        return;
    size_t bytes = (size_t)t->shape[0] * quant_x16_row_bytes(t->type, t->shape[1]);
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return;
    repack_job job = {t->type, t->data, p, t->shape[1]};
    if (!*pool && threadpool_create(0, pool) != VLLM_OK) *pool = NULL;
    if (*pool) threadpool_run(*pool, repack_groups, &job, t->shape[0] / 16, 8);
    else repack_groups(&job, 0, t->shape[0] / 16, 0);
    t->x16 = p, t->x16_bytes = bytes;
    (*made)++, *total += bytes;
}

/* The number of expert tensors of m (model_weights.experts), 0 if dense. */
static size_t num_expert_tensors(const model *m) {
    return m->w.experts ? (size_t)m->config.num_hidden_layers * 3 * (size_t)m->config.num_experts : 0;
}

void model_make_x16(model *m) {
    if (!(quant_x16_wanted(DTYPE_Q8_0) || quant_x16_wanted(DTYPE_Q4_K)) || !m->w.layers) return;
    threadpool *pool = NULL;
    int made = 0;
    size_t total = 0;
    for (int64_t i = 0; i <= 7 * (int64_t)m->config.num_hidden_layers; i++)
        make_x16(matmul_weight(m, i), &pool, &made, &total);
    for (size_t i = 0; i < num_expert_tensors(m); i++) make_x16(&m->w.experts[i], &pool, &made, &total);
    threadpool_free(pool);
    if (made) log_debug("x16 copies of %d weights for the block-order kernels, %.2f GiB", made,
                        (double)total / (1 << 30));
}

void model_free_x16(model *m) {
    if (!m->w.layers) return;
    for (int64_t i = 0; i <= 7 * (int64_t)m->config.num_hidden_layers; i++) {
        tensor *t = matmul_weight(m, i);
        if (t->x16) munmap(t->x16, t->x16_bytes);
        t->x16 = NULL, t->x16_bytes = 0;
    }
    for (size_t i = 0; i < num_expert_tensors(m); i++) {
        tensor *t = &m->w.experts[i];
        if (t->x16) munmap(t->x16, t->x16_bytes);
        t->x16 = NULL, t->x16_bytes = 0;
    }
}

/* ---- BF16 copies (model.h, model_convert_bf16) ----------------------------- */

typedef struct {
    const tensor *src;
    uint16_t *dst;
} bf16_job;

/* Rows [lo, hi) of a job's F16 / F32 matrix rounded to BF16 into its copy. */
static void convert_rows(void *arg, int64_t lo, int64_t hi, int ith) {
    (void)ith;
    const bf16_job *j = arg;
    const int64_t k = j->src->shape[1];
    for (int64_t i = lo * k; i < hi * k; i++)
        j->dst[i] = f32_to_bf16(j->src->type == DTYPE_F16 ? f16_to_f32(((const uint16_t *)j->src->data)[i])
                                                            : ((const float *)j->src->data)[i]);
}

/* t converted (see model_convert_bf16) if it is an F16 / F32 matrix. */
static vllm_status convert_bf16(tensor *t, const char *name, threadpool **pool, int *made, size_t *total) {
    if ((t->type != DTYPE_F16 && t->type != DTYPE_F32) || !t->data || t->ndim != 2) return VLLM_OK;
    size_t bytes = (size_t)t->shape[0] * (size_t)t->shape[1] * 2;
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return vllm_error(VLLM_ERR_NOMEM, "--dtype bfloat16: no memory for the BF16 copy of %s (%.1f MiB)", name,
                          (double)bytes / (1 << 20));
    bf16_job job = {t, p};
    if (!*pool && threadpool_create(0, pool) != VLLM_OK) *pool = NULL;
    if (*pool) threadpool_run(*pool, convert_rows, &job, t->shape[0], 64);
    else convert_rows(&job, 0, t->shape[0], 0);
    t->copy = p, t->copy_bytes = bytes;
    t->data = p, t->type = DTYPE_BF16;
    (*made)++, *total += bytes;
    return VLLM_OK;
}

vllm_status model_convert_bf16(model *m, int *converted) {
    if (converted) *converted = 0;
    if (!m->w.layers) return VLLM_OK;
    static const char *const names[7] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
    threadpool *pool = NULL;
    int made = 0;
    size_t total = 0;
    vllm_status rc = VLLM_OK;
    for (int64_t i = 0; rc == VLLM_OK && i <= 7 * (int64_t)m->config.num_hidden_layers; i++) {
        char name[64];
        if (i == 7 * (int64_t)m->config.num_hidden_layers) snprintf(name, sizeof name, "lm_head");
        else snprintf(name, sizeof name, "layer %lld %s", (long long)(i / 7), names[i % 7]);
        rc = convert_bf16(matmul_weight(m, i), name, &pool, &made, &total);
    }
    threadpool_free(pool);
    if (made) log_info("--dtype bfloat16: %d F16/F32 weights rounded to BF16 copies, %.2f GiB", made,
                       (double)total / (1 << 30));
    if (converted) *converted = made;
    return rc;
}

static void free_copies(model *m) {
    if (!m->w.layers) return;
    for (int64_t i = 0; i <= 7 * (int64_t)m->config.num_hidden_layers; i++) {
        tensor *t = matmul_weight(m, i);
        if (t->copy) munmap(t->copy, t->copy_bytes);
        t->copy = NULL, t->copy_bytes = 0;
    }
}

/* Maps path and binds its llama metadata and tensors (see the top). */
static vllm_status load_gguf(model *m, const char *path) {
    if (!(m->gguf = calloc(1, sizeof *m->gguf))) return vllm_error(VLLM_ERR_NOMEM, "out of memory");
    vllm_status rc = gguf_open(path, m->gguf);
    if (!rc) rc = gguf_model_config(m->gguf, &m->config);
    if (!rc) rc = gguf_model_weights(m->gguf, &m->config, &m->w);
    if (rc) return rc;
    m->config.rope_interleaved = m->gguf->rope_interleaved;
    free(m->dir);
    if (!(m->dir = strdup(path))) return vllm_error(VLLM_ERR_NOMEM, "out of memory");
    return VLLM_OK;
}

vllm_status model_load(const char *dir, model **out) {
    double t0 = clock_now();
    *out = NULL;
    vllm_status rc;
    model *m = calloc(1, sizeof *m);
    if (!m || !(m->dir = strdup(dir))) {
        free(m);
        return vllm_error(VLLM_ERR_NOMEM, "out of memory");
    }
    char *gguf_path = NULL;
    if ((rc = gguf_find_path(dir, &gguf_path))) {
        model_free(m);
        return rc;
    }
    if (gguf_path) {
        rc = load_gguf(m, gguf_path);
        free(gguf_path);
    } else {
        rc = load_configs(m);
        if (!rc) rc = open_weights(m);
        if (!rc) rc = bind_weights(m);
    }
    if (rc) {
        model_free(m);
        return rc;
    }
    model_make_x16(m);
    const model_config *c = &m->config;
    log_info("Loaded %s (%s): %d layers, hidden %d, %d heads / %d KV heads x %d, vocab %d, "
             "%.2f GiB of %s weights in %d file%s, %.3f s",
             dir, c->architecture, c->num_hidden_layers, c->hidden_size, c->num_attention_heads,
             c->num_key_value_heads, c->head_dim, c->vocab_size, (double)weight_bytes(m) / (1 << 30),
             dtype_name(m->w.layers[0].q_proj.type), m->num_files + (m->gguf != NULL),
             m->num_files + (m->gguf != NULL) == 1 ? "" : "s",
             clock_now() - t0);
    *out = m;
    return VLLM_OK;
}

void model_free(model *m) {
    if (!m) return;
    model_free_x16(m);
    free_copies(m);
    for (int32_t i = 0; i < m->num_files; i++) {
        safetensors_deinit(m->files[i]);
        free(m->files[i]);
    }
    free(m->files);
    if (m->gguf) gguf_deinit(m->gguf);
    free(m->gguf);
    free(m->w.layers);
    free(m->w.moe);
    free(m->w.experts);
    free(m->dir);
    free(m);
}
