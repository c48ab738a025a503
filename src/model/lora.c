/*
 * lora.c - PEFT adapters, the adapter table, and the grouped low-rank update
 * (see lora.h for the design).
 *
 * Loading: adapter_config.json through jansson, adapter_model.safetensors
 * through safetensors_open (validated there), then every tensor name is
 * matched against base_model.model.model.layers.N.{self_attn,mlp}.P.lora_{A,B}.weight;
 * a name that is neither that nor something we ignore (PEFT's embedding or
 * lm_head adapters) is an error, as is a module the config targets that the
 * file does not hold for a layer, or holds with the wrong shape.
 */
#include "model/lora.h"

#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "model/safetensors.h"

static const char *const module_names[LORA_NUM_MODULES] = {"q_proj", "k_proj", "v_proj", "o_proj",
                                                           "gate_proj", "up_proj", "down_proj"};
static const char *const module_parent[LORA_NUM_MODULES] = {"self_attn", "self_attn", "self_attn", "self_attn",
                                                            "mlp", "mlp", "mlp"};

const char *lora_module_name(lora_module m) { return (unsigned)m < LORA_NUM_MODULES ? module_names[m] : "?"; }

static int module_from_name(const char *s, size_t n) {
    for (int m = 0; m < LORA_NUM_MODULES; m++)
        if (strlen(module_names[m]) == n && !strncmp(s, module_names[m], n)) return m;
    return -1;
}

/* The base projection's (out, in) of module mod. */
static void module_shape(const model_config *c, lora_module mod, int32_t *out, int32_t *in) {
    int32_t q = c->num_attention_heads * c->head_dim, kv = c->num_key_value_heads * c->head_dim;
    int32_t d = c->hidden_size, f = c->intermediate_size;
    switch (mod) {
    case LORA_Q: *out = q, *in = d; break;
    case LORA_K: case LORA_V: *out = kv, *in = d; break;
    case LORA_O: *out = d, *in = q; break;
    case LORA_GATE: case LORA_UP: *out = f, *in = d; break;
    default: *out = d, *in = f; break;
    }
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        if (n >= 0 && n < (64 << 20) && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1))) {
            if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
                free(buf);
                buf = NULL;
            } else {
                buf[n] = 0;
                *len = (size_t)n;
            }
        }
    }
    fclose(f);
    return buf;
}

void lora_adapter_free(lora_adapter *a) {
    if (!a) return;
    if (a->w)
        for (int64_t i = 0; i < (int64_t)a->num_layers * LORA_NUM_MODULES; i++) {
            free(a->w[i].a);
            free(a->w[i].b);
        }
    free(a->w);
    free(a->name);
    free(a->path);
    free(a);
}

/* Parses adapter_config.json into a; targets gets bit m for each module it names. */
static vllm_status parse_config(lora_adapter *a, const char *dir, int32_t max_rank, uint32_t *targets) {
    char path[4096];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    size_t len = 0;
    char *text = read_file(path, &len);
    if (!text) return vllm_error(VLLM_ERR_IO, "LoRA adapter '%s': cannot read %s", a->name, path);
    json_error_t jerr;
    json_t *root = json_loadb(text, len, 0, &jerr);
    free(text);
    vllm_status rc = VLLM_OK;
    if (!root || !json_is_object(root)) {
        rc = vllm_error(VLLM_ERR_FORMAT, "LoRA adapter '%s': %s: %s", a->name, path,
                        root ? "not a JSON object" : jerr.text);
        goto done;
    }
    json_t *r = json_object_get(root, "r"), *alpha = json_object_get(root, "lora_alpha");
    json_t *rs = json_object_get(root, "use_rslora"), *tm = json_object_get(root, "target_modules");
    if (!json_is_integer(r) || json_integer_value(r) < 1 || json_integer_value(r) > 1 << 16) {
        rc = vllm_error(VLLM_ERR_FORMAT, "LoRA adapter '%s': %s: \"r\" must be a positive integer", a->name, path);
        goto done;
    }
    a->rank = (int32_t)json_integer_value(r);
    if (a->rank > max_rank) {
        rc = vllm_error(VLLM_ERR_INVALID,
                        "LoRA adapter '%s': rank %d is greater than max_lora_rank %d (raise --max-lora-rank)",
                        a->name, a->rank, max_rank);
        goto done;
    }
    a->alpha = json_is_number(alpha) ? (float)json_number_value(alpha) : 8.0f; /* PEFT's default */
    a->use_rslora = json_is_true(rs);
    a->scale = a->use_rslora ? (float)(a->alpha / sqrt((double)a->rank)) : a->alpha / (float)a->rank;
    *targets = 0;
    if (json_is_string(tm) && !strcmp(json_string_value(tm), "all-linear")) {
        *targets = (1u << LORA_NUM_MODULES) - 1;
    } else if (json_is_string(tm) || json_is_array(tm)) {
        size_t n = json_is_array(tm) ? json_array_size(tm) : 1;
        for (size_t i = 0; i < n; i++) {
            json_t *v = json_is_array(tm) ? json_array_get(tm, i) : tm;
            const char *s = json_string_value(v);
            int m = s ? module_from_name(s, strlen(s)) : -1;
            if (m < 0) {
                rc = vllm_error(VLLM_ERR_UNSUPPORTED,
                                "LoRA adapter '%s': target module '%s' is not one of the model's projections "
                                "(q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)",
                                a->name, s ? s : "(not a string)");
                goto done;
            }
            *targets |= 1u << m;
        }
    } else {
        rc = vllm_error(VLLM_ERR_FORMAT, "LoRA adapter '%s': %s: \"target_modules\" missing", a->name, path);
    }
done:
    json_decref(root);
    return rc;
}

/* Copies tensor t (expected shape (d0, d1)) into a new F32 array. */
static vllm_status take_tensor(const lora_adapter *a, const safetensors_tensor *t, int64_t d0, int64_t d1,
                               float **out) {
    if (t->ndim != 2 || t->shape[0] != d0 || t->shape[1] != d1)
        return vllm_error(VLLM_ERR_FORMAT, "LoRA adapter '%s': %s has shape [%lld, %lld], the base model needs [%lld, %lld]",
                          a->name, t->name, (long long)(t->ndim > 0 ? t->shape[0] : 0),
                          (long long)(t->ndim > 1 ? t->shape[1] : 0), (long long)d0, (long long)d1);
    float *p = malloc((size_t)(d0 * d1) * sizeof(float) + 1);
    if (!p) return vllm_error(VLLM_ERR_NOMEM, "LoRA adapter '%s': out of memory", a->name);
    size_t row = dtype_size(t->type) * (size_t)d1;
    for (int64_t i = 0; i < d0; i++) quant_dequantize_row(t->type, (const char *)t->data + i * row, p + i * d1, d1);
    *out = p;
    return VLLM_OK;
}

vllm_status lora_adapter_load(const model *m, const char *name, const char *path, int32_t max_lora_rank,
                              lora_adapter **out) {
    *out = NULL;
    const model_config *c = &m->config;
    lora_adapter *a = calloc(1, sizeof *a);
    if (!a) return vllm_error(VLLM_ERR_NOMEM, "LoRA: out of memory");
    a->name = strdup(name);
    a->path = strdup(path);
    a->num_layers = c->num_hidden_layers;
    a->w = calloc((size_t)a->num_layers * LORA_NUM_MODULES, sizeof *a->w);
    if (!a->name || !a->path || !a->w) {
        lora_adapter_free(a);
        return vllm_error(VLLM_ERR_NOMEM, "LoRA: out of memory");
    }
    uint32_t targets = 0;
    vllm_status rc = parse_config(a, path, max_lora_rank, &targets);
    if (rc != VLLM_OK) {
        lora_adapter_free(a);
        return rc;
    }
    char file[4096];
    snprintf(file, sizeof file, "%s/adapter_model.safetensors", path);
    safetensors_file st = {0};
    if ((rc = safetensors_open(file, &st)) != VLLM_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", vllm_errmsg());
        vllm_error(rc, "LoRA adapter '%s': %s", name, msg);
        lora_adapter_free(a);
        return rc;
    }
    static const char prefix[] = "base_model.model.model.layers.";
    for (int32_t i = 0; i < st.num_tensors && rc == VLLM_OK; i++) {
        safetensors_tensor *t = &st.tensors[i];
        const char *s = t->name;
        if (strncmp(s, prefix, sizeof prefix - 1)) {
            rc = vllm_error(VLLM_ERR_UNSUPPORTED, "LoRA adapter '%s': tensor %s is not a layer projection's "
                            "lora_A/lora_B (only q/k/v/o/gate/up/down are supported)", name, s);
            break;
        }
        s += sizeof prefix - 1;
        char *end;
        long layer = strtol(s, &end, 10);
        if (end == s || *end != '.' || layer < 0) {
            rc = vllm_error(VLLM_ERR_FORMAT, "LoRA adapter '%s': tensor %s: no layer number", name, t->name);
            break;
        }
        if (layer >= c->num_hidden_layers) {
            rc = vllm_error(VLLM_ERR_FORMAT, "LoRA adapter '%s': tensor %s: layer %ld, the model has %d",
                            name, t->name, layer, c->num_hidden_layers);
            break;
        }
        s = end + 1;
        const char *dot = strchr(s, '.');
        const char *mod_s = dot ? dot + 1 : s, *mod_e = dot ? strchr(dot + 1, '.') : NULL;
        int mod = mod_e ? module_from_name(mod_s, (size_t)(mod_e - mod_s)) : -1;
        if (mod < 0 || strncmp(s, module_parent[mod], strlen(module_parent[mod])) ||
            s[strlen(module_parent[mod])] != '.') {
            rc = vllm_error(VLLM_ERR_UNSUPPORTED, "LoRA adapter '%s': tensor %s: target module '%.*s' is not one "
                            "of the model's projections", name, t->name,
                            mod_e ? (int)(mod_e - mod_s) : (int)strlen(mod_s), mod_s);
            break;
        }
        bool is_a = !strcmp(mod_e, ".lora_A.weight"), is_b = !strcmp(mod_e, ".lora_B.weight");
        if (!is_a && !is_b) {
            rc = vllm_error(VLLM_ERR_UNSUPPORTED, "LoRA adapter '%s': tensor %s: expected lora_A.weight or "
                            "lora_B.weight (DoRA and biases are not supported)", name, t->name);
            break;
        }
        if (t->type != DTYPE_F32 && t->type != DTYPE_F16 && t->type != DTYPE_BF16) {
            rc = vllm_error(VLLM_ERR_UNSUPPORTED, "LoRA adapter '%s': tensor %s: dtype not F32/F16/BF16", name, t->name);
            break;
        }
        lora_weights *w = &a->w[layer * LORA_NUM_MODULES + mod];
        module_shape(c, (lora_module)mod, &w->out, &w->in);
        float **dst = is_a ? &w->a : &w->b;
        if (*dst) {
            rc = vllm_error(VLLM_ERR_FORMAT, "LoRA adapter '%s': tensor %s twice", name, t->name);
            break;
        }
        rc = is_a ? take_tensor(a, t, a->rank, w->in, dst) : take_tensor(a, t, w->out, a->rank, dst);
        a->modules |= 1u << mod;
    }
    safetensors_deinit(&st);
    for (int64_t i = 0; rc == VLLM_OK && i < (int64_t)a->num_layers * LORA_NUM_MODULES; i++) {
        lora_weights *w = &a->w[i];
        int mod = (int)(i % LORA_NUM_MODULES);
        if (!w->a != !w->b)
            rc = vllm_error(VLLM_ERR_FORMAT, "LoRA adapter '%s': layer %lld %s has lora_%s but not lora_%s", name,
                            (long long)(i / LORA_NUM_MODULES), module_names[mod], w->a ? "A" : "B", w->a ? "B" : "A");
        else if (w->a && !(targets & (1u << mod)))
            rc = vllm_error(VLLM_ERR_FORMAT, "LoRA adapter '%s': %s has weights but is not in target_modules",
                            name, module_names[mod]);
    }
    if (rc == VLLM_OK && !a->modules)
        rc = vllm_error(VLLM_ERR_FORMAT, "LoRA adapter '%s': %s holds no lora_A/lora_B weights", name, file);
    if (rc != VLLM_OK) {
        lora_adapter_free(a);
        return rc;
    }
    *out = a;
    return VLLM_OK;
}

/* ---- the table ------------------------------------------------------------ */

struct lora_table {
    pthread_mutex_t mu;
    lora_adapter **items;            /* (cap) every adapter still referenced */
    int32_t num, cap;
    int32_t max_registered;
    int32_t next_id;
    int32_t *removed;                /* (cap_removed) ids unregistered, not yet taken */
    int32_t num_removed, cap_removed;
};

vllm_status lora_table_create(int32_t max_cpu_loras, lora_table **out) {
    lora_table *t = calloc(1, sizeof *t);
    if (!t) return vllm_error(VLLM_ERR_NOMEM, "LoRA table: out of memory");
    pthread_mutex_init(&t->mu, NULL);
    t->max_registered = max_cpu_loras > 0 ? max_cpu_loras : INT32_MAX;
    t->next_id = 1;
    *out = t;
    return VLLM_OK;
}

void lora_table_free(lora_table *t) {
    if (!t) return;
    for (int32_t i = 0; i < t->num; i++) lora_adapter_free(t->items[i]);
    free(t->items);
    free(t->removed);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

static lora_adapter *find_name(lora_table *t, const char *name) {
    for (int32_t i = 0; i < t->num; i++)
        if (t->items[i]->registered && !strcmp(t->items[i]->name, name)) return t->items[i];
    return NULL;
}

/* Drops one reference of a (mutex held); frees it at zero. */
static void unref(lora_table *t, lora_adapter *a) {
    if (--a->refs > 0) return;
    for (int32_t i = 0; i < t->num; i++)
        if (t->items[i] == a) {
            t->items[i] = t->items[--t->num];
            break;
        }
    lora_adapter_free(a);
}

vllm_status lora_table_add(lora_table *t, lora_adapter *a) {
    pthread_mutex_lock(&t->mu);
    vllm_status rc = VLLM_OK;
    int32_t registered = 0;
    for (int32_t i = 0; i < t->num; i++) registered += t->items[i]->registered;
    if (find_name(t, a->name)) {
        rc = vllm_error(VLLM_ERR_INVALID, "The lora adapter '%s' has already been loaded.", a->name);
    } else if (registered >= t->max_registered) {
        rc = vllm_error(VLLM_ERR_FULL, "cannot load LoRA adapter '%s': %d adapters are loaded (--max-cpu-loras)",
                        a->name, registered);
    } else if (t->num == t->cap) {
        int32_t cap = t->cap ? 2 * t->cap : 8;
        lora_adapter **p = realloc(t->items, (size_t)cap * sizeof *p);
        if (!p) rc = vllm_error(VLLM_ERR_NOMEM, "LoRA table: out of memory");
        else t->items = p, t->cap = cap;
    }
    if (rc == VLLM_OK) {
        a->id = t->next_id++;
        a->refs = 1;
        a->registered = true;
        t->items[t->num++] = a;
    }
    pthread_mutex_unlock(&t->mu);
    if (rc != VLLM_OK) lora_adapter_free(a);
    return rc;
}

vllm_status lora_table_remove(lora_table *t, const char *name, int32_t *id) {
    pthread_mutex_lock(&t->mu);
    lora_adapter *a = find_name(t, name);
    if (a) {
        if (id) *id = a->id;
        if (t->num_removed == t->cap_removed) {
            int32_t cap = t->cap_removed ? 2 * t->cap_removed : 8;
            int32_t *p = realloc(t->removed, (size_t)cap * sizeof *p);
            if (p) t->removed = p, t->cap_removed = cap;
        }
        /* out of memory: its blocks stay cached but unreachable (the id is never reused) */
        if (t->num_removed < t->cap_removed) t->removed[t->num_removed++] = a->id;
        a->registered = false;
        unref(t, a);
    }
    pthread_mutex_unlock(&t->mu);
    return a ? VLLM_OK : vllm_error(VLLM_ERR_NOT_FOUND, "The lora adapter '%s' cannot be found.", name);
}

lora_adapter *lora_table_acquire(lora_table *t, const char *name) {
    pthread_mutex_lock(&t->mu);
    lora_adapter *a = find_name(t, name);
    if (a) a->refs++;
    pthread_mutex_unlock(&t->mu);
    return a;
}

void lora_table_release(lora_table *t, lora_adapter *a) {
    if (!a) return;
    pthread_mutex_lock(&t->mu);
    unref(t, a);
    pthread_mutex_unlock(&t->mu);
}

int32_t lora_table_take_removed(lora_table *t, int32_t *ids, int32_t cap) {
    pthread_mutex_lock(&t->mu);
    int32_t n = t->num_removed < cap ? t->num_removed : cap;
    if (n > 0) { /* removed is NULL until the first unload */
        memcpy(ids, t->removed, (size_t)n * sizeof *ids);
        memmove(t->removed, t->removed + n, (size_t)(t->num_removed - n) * sizeof *ids);
        t->num_removed -= n;
    }
    pthread_mutex_unlock(&t->mu);
    return n;
}

bool lora_table_name(lora_table *t, int32_t id, char *buf, size_t cap) {
    pthread_mutex_lock(&t->mu);
    bool found = false;
    for (int32_t i = 0; i < t->num && !found; i++)
        if (t->items[i]->id == id) {
            snprintf(buf, cap, "%s", t->items[i]->name);
            found = true;
        }
    pthread_mutex_unlock(&t->mu);
    return found;
}

bool lora_table_has(lora_table *t, const char *name) {
    pthread_mutex_lock(&t->mu);
    bool has = find_name(t, name) != NULL;
    pthread_mutex_unlock(&t->mu);
    return has;
}

int32_t lora_table_list(lora_table *t, lora_info *out, int32_t cap) {
    pthread_mutex_lock(&t->mu);
    int32_t n = 0;
    /* in id order (registration order) */
    for (int32_t id = 1, left = t->num; id < t->next_id && left > 0; id++)
        for (int32_t i = 0; i < t->num; i++)
            if (t->items[i]->id == id) {
                left--;
                if (!t->items[i]->registered) break;
                if (n < cap) {
                    snprintf(out[n].name, sizeof out[n].name, "%s", t->items[i]->name);
                    snprintf(out[n].path, sizeof out[n].path, "%s", t->items[i]->path);
                    out[n].id = id;
                    out[n].rank = t->items[i]->rank;
                }
                n++;
                break;
            }
    pthread_mutex_unlock(&t->mu);
    return n;
}

/* ---- the grouped update ---------------------------------------------------- */

vllm_status lora_batch_init(lora_batch *lb, const model *m, int32_t max_tokens, int32_t max_rank, int nth) {
    memset(lb, 0, sizeof *lb);
    const model_config *c = &m->config;
    int64_t q = (int64_t)c->num_attention_heads * c->head_dim;
    int64_t big = c->hidden_size;
    if (q > big) big = q;
    if (c->intermediate_size > big) big = c->intermediate_size;
    lb->max_rank = max_rank;
    lb->cap_tokens = max_tokens;
    lb->scratch_stride = (int64_t)LORA_ROWS * (2 * big + max_rank);
    lb->runs = malloc((size_t)max_tokens * sizeof *lb->runs);
    lb->order = malloc((size_t)max_tokens * sizeof *lb->order);
    lb->scratch = aligned_alloc(64, ((size_t)nth * (size_t)lb->scratch_stride * sizeof(float) + 63) & ~(size_t)63);
    if (!lb->runs || !lb->order || !lb->scratch) {
        lora_batch_deinit(lb);
        return vllm_error(VLLM_ERR_NOMEM, "LoRA: cannot allocate scratch for %d tokens", max_tokens);
    }
    return VLLM_OK;
}

void lora_batch_deinit(lora_batch *lb) {
    free(lb->runs);
    free(lb->order);
    free(lb->scratch);
    memset(lb, 0, sizeof *lb);
}

vllm_status lora_batch_build(lora_batch *lb, lora_table *t, const int32_t *lora_ids, int32_t num_seqs,
                             const int32_t *token_seq, int32_t num_tokens) {
    lb->num_runs = 0;
    lb->num_rows = 0;
    lb->token_seq = token_seq;
    if (!lora_ids || !t) return VLLM_OK;
    vllm_status rc = VLLM_OK;
    pthread_mutex_lock(&t->mu);
    /* distinct ids in order of first appearance; rows of each in token order */
    for (int32_t s = 0; s < num_seqs && rc == VLLM_OK; s++) {
        int32_t id = lora_ids[s];
        if (id == 0) continue;
        bool seen = false;
        for (int32_t p = 0; p < s && !seen; p++) seen = lora_ids[p] == id;
        if (seen) continue;
        const lora_adapter *a = NULL;
        for (int32_t i = 0; i < t->num && !a; i++)
            if (t->items[i]->id == id) a = t->items[i];
        if (!a) {
            rc = vllm_error(VLLM_ERR_NOT_FOUND, "LoRA: no adapter has id %d", id);
            break;
        }
        if (a->rank > lb->max_rank) {
            rc = vllm_error(VLLM_ERR_INVALID, "LoRA: adapter '%s' rank %d above %d", a->name, a->rank, lb->max_rank);
            break;
        }
        int32_t first = lb->num_rows;
        for (int32_t tk = 0; tk < num_tokens; tk++)
            if (lora_ids[token_seq[tk]] == id) lb->order[lb->num_rows++] = tk;
        for (int32_t r = first; r < lb->num_rows; r += LORA_ROWS)
            lb->runs[lb->num_runs++] = (lora_run){a, r, lb->num_rows - r < LORA_ROWS ? lb->num_rows - r : LORA_ROWS};
    }
    pthread_mutex_unlock(&t->mu);
    if (rc != VLLM_OK) lb->num_runs = lb->num_rows = 0;
    return rc;
}

bool lora_batch_has(const lora_batch *lb, int32_t layer, lora_module mod) {
    for (int32_t i = 0; i < lb->num_runs; i++)
        if (lb->runs[i].a->w[(int64_t)layer * LORA_NUM_MODULES + mod].a) return true;
    return false;
}

typedef struct apply_ctx {
    lora_batch *lb;
    int32_t layer;
    lora_module mod;
    const float *x;
    int64_t ldx;
    float *y;
    int64_t ldy;
} apply_ctx;

/* One run: gather its rows of x, xa = x A^T (rank), d = xa B^T (out), y += scale d. */
static void apply_runs(void *arg, int64_t lo, int64_t hi, int ith) {
    apply_ctx *c = arg;
    lora_batch *lb = c->lb;
    for (int64_t i = lo; i < hi; i++) {
        const lora_run *run = &lb->runs[i];
        const lora_weights *w = &run->a->w[(int64_t)c->layer * LORA_NUM_MODULES + c->mod];
        if (!w->a) continue;
        int32_t r = run->a->rank;
        float *xs = lb->scratch + (int64_t)ith * lb->scratch_stride;
        float *xa = xs + (int64_t)LORA_ROWS * w->in;
        float *d = xa + (int64_t)LORA_ROWS * r;
        for (int32_t j = 0; j < run->count; j++)
            memcpy(xs + (int64_t)j * w->in, c->x + lb->order[run->first + j] * c->ldx, (size_t)w->in * sizeof(float));
        matmul_args shrink = {.y = xa, .ldy = r, .x = xs, .ldx = w->in, .w = w->a, .wtype = DTYPE_F32,
                              .n = r, .k = w->in};
        matmul_range(&shrink, 0, r, 0, run->count);
        matmul_args expand = {.y = d, .ldy = w->out, .x = xa, .ldx = r, .w = w->b, .wtype = DTYPE_F32,
                              .n = w->out, .k = r};
        matmul_range(&expand, 0, w->out, 0, run->count);
        float scale = run->a->scale;
        for (int32_t j = 0; j < run->count; j++) {
            float *y = c->y + lb->order[run->first + j] * c->ldy;
            const float *dj = d + (int64_t)j * w->out;
            for (int32_t o = 0; o < w->out; o++) y[o] += scale * dj[o];
        }
    }
}

void lora_apply(lora_batch *lb, int32_t layer, lora_module mod, const float *x, int64_t ldx, float *y,
                int64_t ldy, threadpool *pool) {
    if (!lb->num_runs) return;
    apply_ctx c = {lb, layer, mod, x, ldx, y, ldy};
    if (pool) threadpool_run(pool, apply_runs, &c, lb->num_runs, 1);
    else apply_runs(&c, 0, lb->num_runs, 0);
}

void lora_apply_portable(const lora_batch *lb, int32_t layer, lora_module mod, const float *x, int64_t ldx,
                         float *y, int64_t ldy) {
    for (int32_t i = 0; i < lb->num_runs; i++) {
        const lora_run *run = &lb->runs[i];
        const lora_weights *w = &run->a->w[(int64_t)layer * LORA_NUM_MODULES + mod];
        if (!w->a) continue;
        int32_t r = run->a->rank;
        for (int32_t j = 0; j < run->count; j++) {
            int32_t t = lb->order[run->first + j];
            const float *xt = x + t * ldx;
            float xa[1024];
            for (int32_t k = 0; k < r && k < 1024; k++) {
                float s = 0;
                for (int32_t e = 0; e < w->in; e++) s += w->a[(int64_t)k * w->in + e] * xt[e];
                xa[k] = s;
            }
            for (int32_t o = 0; o < w->out; o++) {
                float s = 0;
                for (int32_t k = 0; k < r && k < 1024; k++) s += w->b[(int64_t)o * r + k] * xa[k];
                y[t * ldy + o] += run->a->scale * s;
            }
        }
    }
}
