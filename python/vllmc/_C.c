/*
 * _C.c - vllmc._C, the CPython extension under the vllmc package: the
 * engine, tokenizer and chat template of libvllm.a (include/vllm/ only, the
 * public C API) as three Python types. The vLLM-shaped API (LLM,
 * SamplingParams, RequestOutput, ...) is Python, in the package's .py files; this file
 * only moves values across.
 *
 *   Tokenizer(model)                     encode, decode, id_to_token, token_to_id
 *   ChatTemplate(model, override)        render(messages_json, tools_json, kwargs_json, agp)
 *   Engine(tokenizer, args)              generate(requests, progress, logprob_cls), info(),
 *                                        default_sampling_params(), reset_prefix_cache(),
 *                                        stats(); add(request), step(), abort(id) for AsyncLLM
 *
 * Engine.generate is LLM.generate's whole loop, in C: every request enters
 * the engine at once (as `vllmc generate` does), then each step runs with
 * the GIL released (vllm_engine_step, then the output processor: the CLI's
 * and the server's rules for text, stop strings and logprobs), and between
 * steps, with the GIL held, the step's deltas are appended to per-sequence
 * C buffers. Python objects are made only for logprobs (when asked) and for
 * the finished requests, so the per-step cost in Python is one signal check
 * and one progress call when something finished; this is what keeps
 * LLM.generate within a few percent of the C CLI (bench/python_overhead.sh).
 * Ctrl-C: PyErr_CheckSignals between steps; on an exception every request
 * is aborted in the engine and stepped out (so the engine is empty and
 * usable again), then the exception propagates.
 *
 * Errors: a failing vllm_* call raises with vllm_errmsg()'s text, the type
 * chosen by its status (INVALID -> ValueError, UNSUPPORTED ->
 * NotImplementedError, NOMEM -> MemoryError, IO/NOT_FOUND -> OSError,
 * else RuntimeError). One thread at a time may use an Engine: a second
 * caller while one is generating (the GIL is released) gets RuntimeError.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vllm/text.h"
#include "vllm/vllm.h"

static PyObject *raise_status(vllm_status rc) {
    PyObject *type;
    switch (rc) {
    case VLLM_ERR_INVALID: type = PyExc_ValueError; break;
    case VLLM_ERR_UNSUPPORTED: type = PyExc_NotImplementedError; break;
    case VLLM_ERR_NOMEM: return PyErr_NoMemory();
    case VLLM_ERR_IO:
    case VLLM_ERR_NOT_FOUND: type = PyExc_OSError; break;
    default: type = PyExc_RuntimeError; break;
    }
    PyErr_SetString(type, vllm_errmsg());
    return NULL;
}

/* A Python sequence of ints into a malloc'ed int32 array (*n entries). */
static int32_t *ids_from_seq(PyObject *seq, const char *what, int32_t *n) {
    PyObject *fast = PySequence_Fast(seq, what);
    if (!fast) return NULL;
    Py_ssize_t len = PySequence_Fast_GET_SIZE(fast);
    int32_t *ids = malloc(((size_t)len + 1) * sizeof *ids);
    if (!ids) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < len; i++) {
        long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, i));
        if (v == -1 && PyErr_Occurred()) goto bad;
        if (v < 0 || v > INT32_MAX) {
            PyErr_Format(PyExc_ValueError, "%s[%zd]: token id %ld is out of range", what, i, v);
            goto bad;
        }
        ids[i] = (int32_t)v;
    }
    Py_DECREF(fast);
    *n = (int32_t)len;
    return ids;
bad:
    Py_DECREF(fast);
    free(ids);
    return NULL;
}

static PyObject *ids_to_list(const int32_t *ids, size_t n) {
    PyObject *l = PyList_New((Py_ssize_t)n);
    if (!l) return NULL;
    for (size_t i = 0; i < n; i++) {
        PyObject *v = PyLong_FromLong(ids[i]);
        if (!v) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SET_ITEM(l, (Py_ssize_t)i, v);
    }
    return l;
}

static PyObject *str_from(const char *s, size_t len) { return PyUnicode_DecodeUTF8(s, (Py_ssize_t)len, "replace"); }

/* ---- Tokenizer ---------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    vllm_tokenizer *tok;
} TokenizerObject;

static int Tokenizer_init(TokenizerObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"model", NULL};
    const char *model;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s", kwlist, &model)) return -1;
    if (self->tok) return 0;
    vllm_status rc;
    Py_BEGIN_ALLOW_THREADS
    rc = vllm_tokenizer_load(model, &self->tok);
    Py_END_ALLOW_THREADS
    if (rc != VLLM_OK) {
        raise_status(rc);
        return -1;
    }
    return 0;
}

static void Tokenizer_dealloc(TokenizerObject *self) {
    vllm_tokenizer_free(self->tok);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

#define NEED_TOK(self)                                                                   \
    if (!(self)->tok) {                                                                  \
        PyErr_SetString(PyExc_RuntimeError, "Tokenizer is not initialized");            \
        return NULL;                                                                     \
    }

static PyObject *Tokenizer_encode(TokenizerObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"text", "add_special_tokens", NULL};
    const char *text;
    Py_ssize_t len;
    int add_special = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s#|p", kwlist, &text, &len, &add_special)) return NULL;
    NEED_TOK(self);
    int32_t *ids, n;
    vllm_status rc = vllm_tokenizer_encode(self->tok, text, (size_t)len, add_special, &ids, &n);
    if (rc != VLLM_OK) return raise_status(rc);
    PyObject *l = ids_to_list(ids, (size_t)n);
    vllm_free(ids);
    return l;
}

static PyObject *Tokenizer_decode(TokenizerObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"token_ids", "skip_special_tokens", NULL};
    PyObject *seq;
    int skip = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|p", kwlist, &seq, &skip)) return NULL;
    NEED_TOK(self);
    int32_t n;
    int32_t *ids = ids_from_seq(seq, "token_ids", &n);
    if (!ids) return NULL;
    char *text;
    size_t len;
    vllm_status rc = vllm_tokenizer_decode(self->tok, ids, n, skip, &text, &len);
    free(ids);
    if (rc != VLLM_OK) return raise_status(rc);
    PyObject *s = str_from(text, len);
    vllm_free(text);
    return s;
}

static PyObject *Tokenizer_id_to_token(TokenizerObject *self, PyObject *arg) {
    NEED_TOK(self);
    long id = PyLong_AsLong(arg);
    if (id == -1 && PyErr_Occurred()) return NULL;
    const char *s = id >= 0 && id <= INT32_MAX ? vllm_tokenizer_id_to_token(self->tok, (int32_t)id) : NULL;
    if (!s) Py_RETURN_NONE;
    return str_from(s, strlen(s));
}

static PyObject *Tokenizer_token_to_id(TokenizerObject *self, PyObject *arg) {
    NEED_TOK(self);
    const char *s = PyUnicode_AsUTF8(arg);
    if (!s) return NULL;
    int32_t id = vllm_tokenizer_token_to_id(self->tok, s);
    if (id < 0) Py_RETURN_NONE;
    return PyLong_FromLong(id);
}

static PyObject *Tokenizer_get_int(TokenizerObject *self, void *which) {
    NEED_TOK(self);
    int32_t v = which == (void *)0 ? vllm_tokenizer_vocab_size(self->tok)
                : which == (void *)1 ? vllm_tokenizer_bos_token_id(self->tok)
                                     : vllm_tokenizer_eos_token_id(self->tok);
    if (which != (void *)0 && v < 0) Py_RETURN_NONE;
    return PyLong_FromLong(v);
}

static PyMethodDef Tokenizer_methods[] = {
    {"encode", (PyCFunction)(void (*)(void))Tokenizer_encode, METH_VARARGS | METH_KEYWORDS,
     "encode(text, add_special_tokens=True) -> list[int]"},
    {"decode", (PyCFunction)(void (*)(void))Tokenizer_decode, METH_VARARGS | METH_KEYWORDS,
     "decode(token_ids, skip_special_tokens=True) -> str"},
    {"id_to_token", (PyCFunction)Tokenizer_id_to_token, METH_O, "id_to_token(id) -> str | None"},
    {"token_to_id", (PyCFunction)Tokenizer_token_to_id, METH_O, "token_to_id(token) -> int | None"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Tokenizer_getset[] = {
    {"vocab_size", (getter)Tokenizer_get_int, NULL, "highest id + 1", (void *)0},
    {"bos_token_id", (getter)Tokenizer_get_int, NULL, "BOS id or None", (void *)1},
    {"eos_token_id", (getter)Tokenizer_get_int, NULL, "EOS id or None", (void *)2},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject TokenizerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "vllmc._C.Tokenizer",
    .tp_basicsize = sizeof(TokenizerObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Tokenizer(model): the model's tokenizer (libvllm.a's vllm_tokenizer)",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Tokenizer_init,
    .tp_dealloc = (destructor)Tokenizer_dealloc,
    .tp_methods = Tokenizer_methods,
    .tp_getset = Tokenizer_getset,
};

/* ---- ChatTemplate ------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    vllm_chat_template *ct;
} ChatTemplateObject;

static int ChatTemplate_init(ChatTemplateObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"model", "override", NULL};
    const char *model, *override = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "z|z", kwlist, &model, &override)) return -1;
    if (self->ct) return 0;
    vllm_status rc = vllm_chat_template_load(model, override, &self->ct);
    if (rc != VLLM_OK) {
        raise_status(rc);
        return -1;
    }
    return 0;
}

static void ChatTemplate_dealloc(ChatTemplateObject *self) {
    vllm_chat_template_free(self->ct);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *ChatTemplate_render(ChatTemplateObject *self, PyObject *args) {
    const char *messages, *tools, *kwargs;
    int agp;
    if (!PyArg_ParseTuple(args, "szzp", &messages, &tools, &kwargs, &agp)) return NULL;
    if (!self->ct) {
        PyErr_SetString(PyExc_RuntimeError, "ChatTemplate is not initialized");
        return NULL;
    }
    char *text;
    size_t len;
    vllm_status rc = vllm_chat_template_render(self->ct, messages, tools, kwargs, agp, &text, &len);
    if (rc != VLLM_OK) return raise_status(rc);
    PyObject *s = str_from(text, len);
    vllm_free(text);
    return s;
}

static PyMethodDef ChatTemplate_methods[] = {
    {"render", (PyCFunction)ChatTemplate_render, METH_VARARGS,
     "render(messages_json, tools_json, kwargs_json, add_generation_prompt) -> str"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ChatTemplateType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "vllmc._C.ChatTemplate",
    .tp_basicsize = sizeof(ChatTemplateObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "ChatTemplate(model, override=None): the model's chat template (vllm_chat_template)",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)ChatTemplate_init,
    .tp_dealloc = (destructor)ChatTemplate_dealloc,
    .tp_methods = ChatTemplate_methods,
};

/* ---- Engine ------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    vllm_engine *e;
    TokenizerObject *tok;            /* a reference: the output processor borrows its tokenizer */
    vllm_output_processor *op;
    int busy;                        /* generate is running (with the GIL released) */
    /* this engine's totals for get_metrics() */
    long long num_steps, num_preemptions, prefix_queries, prefix_hits, prompt_tokens, generation_tokens;
    long long spec_drafts, spec_draft_tokens, spec_accepted; /* speculative decoding, summed over steps */
    long long num_requests_finished;
    vllm_scheduler_stats last_stats;
} EngineObject;

/* dict value helpers: absent or None leaves *out alone */
static int get_long(PyObject *d, const char *key, long long lo, long long hi, long long *out) {
    PyObject *v = PyDict_GetItemString(d, key);
    if (!v || v == Py_None) return 0;
    long long x = PyLong_AsLongLong(v);
    if (x == -1 && PyErr_Occurred()) {
        PyErr_Format(PyExc_TypeError, "%s must be an integer", key);
        return -1;
    }
    if (x < lo || x > hi) {
        PyErr_Format(PyExc_ValueError, "%s must be in [%lld, %lld], got %lld", key, lo, hi, x);
        return -1;
    }
    *out = x;
    return 0;
}

static int get_i32(PyObject *d, const char *key, int32_t lo, int32_t hi, int32_t *out) {
    long long x = *out;
    if (get_long(d, key, lo, hi, &x) < 0) return -1;
    *out = (int32_t)x;
    return 0;
}

static int get_float(PyObject *d, const char *key, float *out) {
    PyObject *v = PyDict_GetItemString(d, key);
    if (!v || v == Py_None) return 0;
    double x = PyFloat_AsDouble(v);
    if (x == -1.0 && PyErr_Occurred()) {
        PyErr_Format(PyExc_TypeError, "%s must be a number", key);
        return -1;
    }
    *out = (float)x;
    return 0;
}

static int get_bool(PyObject *d, const char *key, bool *out) {
    PyObject *v = PyDict_GetItemString(d, key);
    if (!v || v == Py_None) return 0;
    int t = PyObject_IsTrue(v);
    if (t < 0) return -1;
    *out = t;
    return 0;
}

/* A str value (borrowed UTF-8, alive as long as d holds it). */
static int get_str(PyObject *d, const char *key, const char **out) {
    PyObject *v = PyDict_GetItemString(d, key);
    if (!v || v == Py_None) return 0;
    if (!(*out = PyUnicode_AsUTF8(v))) return -1;
    return 0;
}

static int Engine_init(EngineObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"tokenizer", "args", NULL};
    PyObject *tok, *d;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!O!", kwlist, &TokenizerType, &tok, &PyDict_Type, &d)) return -1;
    if (self->e) {
        PyErr_SetString(PyExc_RuntimeError, "Engine is already initialized");
        return -1;
    }
    if (!((TokenizerObject *)tok)->tok) {
        PyErr_SetString(PyExc_RuntimeError, "Tokenizer is not initialized");
        return -1;
    }
    vllm_engine_args a;
    vllm_engine_args_init(&a);
    long long seed = (long long)a.seed, kv_bytes = a.kv_cache_memory_bytes;
    const char *policy = NULL, *spec = NULL, *spec_model = NULL, *spec_accept = NULL;
    a.speculative_config.adaptive = true; /* the CLI's default (spec/spec_policy.h) */
    if (get_str(d, "model", &a.model) < 0 || get_str(d, "tokenizer", &a.tokenizer) < 0 ||
        get_i32(d, "max_model_len", 0, INT32_MAX, &a.max_model_len) < 0 ||
        get_i32(d, "block_size", 1, 1 << 20, &a.block_size) < 0 ||
        get_long(d, "kv_cache_memory_bytes", 0, INT64_MAX, &kv_bytes) < 0 ||
        get_i32(d, "num_gpu_blocks_override", 0, INT32_MAX, &a.num_gpu_blocks_override) < 0 ||
        get_bool(d, "enable_prefix_caching", &a.enable_prefix_caching) < 0 ||
        get_i32(d, "max_num_seqs", 1, INT32_MAX, &a.max_num_seqs) < 0 ||
        get_i32(d, "max_num_batched_tokens", 0, INT32_MAX, &a.max_num_batched_tokens) < 0 ||
        get_i32(d, "long_prefill_token_threshold", 0, INT32_MAX, &a.long_prefill_token_threshold) < 0 ||
        get_str(d, "scheduling_policy", &policy) < 0 ||
        get_long(d, "seed", INT64_MIN, INT64_MAX, &seed) < 0 ||
        get_i32(d, "num_threads", 0, 4096, &a.num_threads) < 0 ||
        get_str(d, "generation_config", &a.generation_config) < 0 ||
        get_str(d, "kv_cache_dtype", &a.kv_cache_dtype) < 0 ||
        get_str(d, "spec_method", &spec) < 0 ||
        get_i32(d, "num_speculative_tokens", 0, VLLM_MAX_SPEC_TOKENS, &a.speculative_config.num_speculative_tokens) < 0 ||
        get_i32(d, "prompt_lookup_min", 0, INT32_MAX, &a.speculative_config.prompt_lookup_min) < 0 ||
        get_i32(d, "prompt_lookup_max", 0, INT32_MAX, &a.speculative_config.prompt_lookup_max) < 0 ||
        get_i32(d, "disable_by_batch_size", 0, INT32_MAX, &a.speculative_config.disable_by_batch_size) < 0 ||
        get_bool(d, "enable_lora", &a.enable_lora) < 0 || get_i32(d, "max_loras", 1, 4096, &a.max_loras) < 0 ||
        get_i32(d, "max_lora_rank", 1, 4096, &a.max_lora_rank) < 0 ||
        get_i32(d, "max_cpu_loras", 0, INT32_MAX, &a.max_cpu_loras) < 0 ||
        get_str(d, "spec_model", &spec_model) < 0 ||
        get_str(d, "draft_token_acceptance_method", &spec_accept) < 0 ||
        get_bool(d, "spec_adaptive", &a.speculative_config.adaptive) < 0)
        return -1;
    a.seed = (uint64_t)seed;
    a.kv_cache_memory_bytes = kv_bytes;
    if (!a.model) {
        PyErr_SetString(PyExc_ValueError, "model: none given");
        return -1;
    }
    if (policy) {
        if (!strcmp(policy, "fcfs")) a.scheduling_policy = VLLM_SCHEDULING_FCFS;
        else if (!strcmp(policy, "priority")) a.scheduling_policy = VLLM_SCHEDULING_PRIORITY;
        else {
            PyErr_Format(PyExc_ValueError, "scheduling_policy must be 'fcfs' or 'priority', got '%s'", policy);
            return -1;
        }
    }
    if (spec) {
        if (!strcmp(spec, "ngram")) a.speculative_config.method = VLLM_SPEC_METHOD_NGRAM;
        else if (!strcmp(spec, "draft_model")) a.speculative_config.method = VLLM_SPEC_METHOD_DRAFT_MODEL;
        else {
            PyErr_Format(PyExc_NotImplementedError, "speculative_config method '%s' is not implemented in "
                         "vllm.c (only 'ngram' and 'draft_model')", spec);
            return -1;
        }
    }
    if (spec_model) {
        size_t n = strlen(spec_model);
        if (n >= sizeof a.speculative_config.model) {
            PyErr_Format(PyExc_ValueError, "speculative_config model: the path is %zu bytes, at most %zu", n,
                         sizeof a.speculative_config.model - 1);
            return -1;
        }
        memcpy(a.speculative_config.model, spec_model, n + 1);
    }
    if (spec_accept) {
        if (!strcmp(spec_accept, "exact")) a.speculative_config.exact_acceptance = true;
        else if (strcmp(spec_accept, "rejection_sampler")) {
            PyErr_Format(PyExc_ValueError, "speculative_config draft_token_acceptance_method must be "
                         "'rejection_sampler' (vLLM's) or 'exact', got '%s'", spec_accept);
            return -1;
        }
    }
    vllm_status rc;
    vllm_engine *e = NULL;
    vllm_output_processor *op = NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = vllm_engine_create(&a, &e);
    if (rc == VLLM_OK) rc = vllm_output_processor_create(((TokenizerObject *)tok)->tok, &op);
    Py_END_ALLOW_THREADS
    if (rc != VLLM_OK) {
        raise_status(rc);
        vllm_engine_free(e);
        return -1;
    }
    self->e = e;
    self->op = op;
    Py_INCREF(tok);
    self->tok = (TokenizerObject *)tok;
    return 0;
}

static void Engine_dealloc(EngineObject *self) {
    vllm_output_processor_free(self->op);
    vllm_engine_free(self->e);
    Py_XDECREF(self->tok);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

#define NEED_ENGINE(self)                                                                \
    if (!(self)->e) {                                                                    \
        PyErr_SetString(PyExc_RuntimeError, "Engine is not initialized");               \
        return NULL;                                                                     \
    }                                                                                    \
    if ((self)->busy) {                                                                  \
        PyErr_SetString(PyExc_RuntimeError, "Engine is busy: another thread is generating"); \
        return NULL;                                                                     \
    }

static PyObject *sp_to_dict(const vllm_sampling_params *sp) {
    PyObject *mt = sp->max_tokens < 0 ? (Py_INCREF(Py_None), Py_None) : PyLong_FromLong(sp->max_tokens);
    if (!mt) return NULL;
    return Py_BuildValue("{s:i,s:d,s:d,s:i,s:d,s:d,s:d,s:d,s:N}", "n", sp->n, "temperature", (double)sp->temperature,
                         "top_p", (double)sp->top_p, "top_k", sp->top_k, "min_p", (double)sp->min_p,
                         "presence_penalty", (double)sp->presence_penalty, "frequency_penalty",
                         (double)sp->frequency_penalty, "repetition_penalty", (double)sp->repetition_penalty,
                         "max_tokens", mt);
}

static PyObject *Engine_default_sampling_params(EngineObject *self, PyObject *unused) {
    NEED_ENGINE(self);
    vllm_sampling_params sp;
    vllm_engine_default_sampling_params(self->e, &sp);
    return sp_to_dict(&sp);
}

#define NEED_ENGINE_IDLE_OR_NOT(self)                                                    \
    if (!(self)->e) {                                                                    \
        PyErr_SetString(PyExc_RuntimeError, "Engine is not initialized");               \
        return NULL;                                                                     \
    }

/* info and stats only read (with the GIL held), so a progress callback may call them */
static PyObject *Engine_info(EngineObject *self, PyObject *unused) {
    NEED_ENGINE_IDLE_OR_NOT(self);
    vllm_engine_info i;
    vllm_engine_get_info(self->e, &i);
    PyObject *eos = ids_to_list(i.eos_token_ids, (size_t)i.num_eos_token_ids);
    if (!eos) return NULL;
    return Py_BuildValue("{s:i,s:i,s:i,s:L,s:s,s:s,s:L,s:O,s:i,s:i,s:i,s:i,s:N,s:i}", "max_model_len",
                         i.max_model_len, "block_size", i.block_size, "num_gpu_blocks", i.num_gpu_blocks,
                         "kv_cache_memory_bytes", (long long)i.kv_cache_memory_bytes, "kv_cache_dtype",
                         i.kv_cache_dtype ? i.kv_cache_dtype : "auto", "kv_cache_storage_dtype",
                         i.kv_cache_storage_dtype, "kv_cache_bytes_per_token",
                         (long long)i.kv_cache_bytes_per_token, "enable_prefix_caching",
                         i.enable_prefix_caching ? Py_True : Py_False, "max_num_seqs", i.max_num_seqs,
                         "max_num_batched_tokens", i.max_num_batched_tokens, "vocab_size", i.vocab_size,
                         "bos_token_id", i.bos_token_id, "eos_token_ids", eos, "num_threads", i.num_threads);
}

/* beam_search(prompt_ids, beam_width, max_tokens, ignore_eos, temperature,
 * length_penalty) -> [(generated ids, cumulative logprob, score,
 * finish_reason, stop token id or None)], best first (vllm_engine_beam_search,
 * the GIL released while it steps). */
static PyObject *Engine_beam_search(EngineObject *self, PyObject *args) {
    NEED_ENGINE(self);
    PyObject *ids_obj;
    vllm_beam_search_params p;
    vllm_beam_search_params_init(&p);
    int ignore_eos = 0;
    if (!PyArg_ParseTuple(args, "Oiipff", &ids_obj, &p.beam_width, &p.max_tokens, &ignore_eos, &p.temperature,
                          &p.length_penalty))
        return NULL;
    p.ignore_eos = ignore_eos;
    int32_t n = 0;
    int32_t *ids = ids_from_seq(ids_obj, "prompt_token_ids must be a sequence of ints", &n);
    if (!ids) return NULL;
    vllm_beam *beams = NULL;
    int32_t nb = 0;
    vllm_status rc;
    char id[32];
    snprintf(id, sizeof id, "beam-%lld", self->num_requests_finished++);
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    rc = vllm_engine_beam_search(self->e, id, ids, n, &p, &beams, &nb);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    free(ids);
    if (rc) return raise_status(rc);
    PyObject *out = PyList_New(nb);
    for (int32_t i = 0; out && i < nb; i++) {
        PyObject *toks = PyList_New(beams[i].num_tokens);
        for (int32_t t = 0; toks && t < beams[i].num_tokens; t++)
            PyList_SET_ITEM(toks, t, PyLong_FromLong(beams[i].token_ids[t]));
        PyObject *stop = beams[i].stop_token_id >= 0 ? PyLong_FromLong(beams[i].stop_token_id) : Py_NewRef(Py_None);
        PyObject *item = toks ? Py_BuildValue("(NddsN)", toks, beams[i].cumulative_logprob, beams[i].score,
                                              vllm_finish_reason_str(beams[i].finish_reason), stop)
                              : NULL;
        if (!item) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, item);
    }
    vllm_beams_free(beams, nb);
    return out;
}

static PyObject *Engine_reset_prefix_cache(EngineObject *self, PyObject *unused) {
    NEED_ENGINE(self);
    vllm_engine_reset_prefix_cache(self->e);
    Py_RETURN_TRUE;
}

static PyObject *Engine_stats(EngineObject *self, PyObject *unused) {
    NEED_ENGINE_IDLE_OR_NOT(self);
    const vllm_scheduler_stats *s = &self->last_stats;
    return Py_BuildValue("{s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:i,s:i,s:d,s:i,s:i,s:L,s:L,s:L}", "num_steps", self->num_steps,
                         "num_preemptions", self->num_preemptions, "prefix_cache_queries", self->prefix_queries,
                         "prefix_cache_hits", self->prefix_hits, "prompt_tokens", self->prompt_tokens,
                         "generation_tokens", self->generation_tokens, "num_requests_finished",
                         self->num_requests_finished, "num_running", s->num_running, "num_waiting",
                         s->num_waiting, "kv_cache_usage", (double)s->kv_cache_usage, "num_blocks_total",
                         s->num_blocks_total, "num_blocks_free", s->num_blocks_free, "spec_decode_num_drafts",
                         self->spec_drafts, "spec_decode_num_draft_tokens", self->spec_draft_tokens,
                         "spec_decode_num_accepted_tokens", self->spec_accepted);
}

/* One sequence's output as it accumulates. */
typedef struct gen_seq {
    char *text;
    size_t len, cap;
    int32_t *ids;
    size_t num_ids, cap_ids;
    PyObject *logprobs;              /* list of dicts, or NULL */
    double cumulative_logprob;
    vllm_finish_reason finish_reason;
    PyObject *stop_reason;           /* str, int or NULL (None) */
} gen_seq;

typedef struct gen_req {
    char id[64];
    int32_t *prompt;
    int32_t num_prompt;
    vllm_sampling_params sp;
    const char **stops;              /* borrowed from the request's Python strings */
    int32_t num_stops;
    bool include_stop, skip_special, detokenize;
    vllm_request_opts opts;
    bool added, done;
    int32_t num_cached_tokens;
    double arrival, first_token, last_token;
    gen_seq *seqs;                   /* (sp.n) */
} gen_req;

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

/* A request tuple from Python: (request_id, prompt_ids, sp dict, stop list,
 * include_stop_str_in_output, skip_special_tokens, detokenize, priority, cache_salt).
 * The request id is LLM's (vLLM's str(counter)): it also seeds a request that gives no seed. */
static int parse_request(PyObject *t, gen_req *r, Py_ssize_t idx) {
    PyObject *prompt, *d, *stop, *salt;
    const char *id;
    int inc, skip, detok, prio;
    if (!PyArg_ParseTuple(t, "sOO!OpppiO", &id, &prompt, &PyDict_Type, &d, &stop, &inc, &skip, &detok, &prio,
                          &salt))
        return -1;
    if (strlen(id) >= sizeof r->id) {
        PyErr_Format(PyExc_ValueError, "request id '%s' is longer than %zu bytes", id, sizeof r->id - 1);
        return -1;
    }
    strcpy(r->id, id);
    if (!(r->prompt = ids_from_seq(prompt, "prompt_token_ids", &r->num_prompt))) return -1;
    vllm_sampling_params *sp = &r->sp;
    vllm_sampling_params_init(sp);
    long long seed = 0;
    int has_seed = PyDict_GetItemString(d, "seed") && PyDict_GetItemString(d, "seed") != Py_None;
    PyObject *mt = PyDict_GetItemString(d, "max_tokens");
    if (get_i32(d, "n", INT32_MIN, INT32_MAX, &sp->n) < 0 || get_float(d, "temperature", &sp->temperature) < 0 ||
        get_float(d, "top_p", &sp->top_p) < 0 || get_i32(d, "top_k", INT32_MIN, INT32_MAX, &sp->top_k) < 0 ||
        get_float(d, "min_p", &sp->min_p) < 0 || get_float(d, "presence_penalty", &sp->presence_penalty) < 0 ||
        get_float(d, "frequency_penalty", &sp->frequency_penalty) < 0 ||
        get_float(d, "repetition_penalty", &sp->repetition_penalty) < 0 ||
        get_long(d, "seed", INT64_MIN, INT64_MAX, &seed) < 0 ||
        get_i32(d, "max_tokens", INT32_MIN, INT32_MAX, &sp->max_tokens) < 0 ||
        get_i32(d, "min_tokens", INT32_MIN, INT32_MAX, &sp->min_tokens) < 0 ||
        get_bool(d, "ignore_eos", &sp->ignore_eos) < 0 ||
        get_i32(d, "logprobs", INT32_MIN, INT32_MAX, &sp->logprobs) < 0)
        return -1;
    if (mt == Py_None) sp->max_tokens = -1;
    sp->has_seed = has_seed;
    sp->seed = (uint64_t)seed;
    PyObject *v = PyDict_GetItemString(d, "stop_token_ids");
    if (v && v != Py_None) {
        int32_t n;
        int32_t *ids = ids_from_seq(v, "stop_token_ids", &n);
        if (!ids) return -1;
        if (n > VLLM_MAX_STOP_TOKEN_IDS) {
            free(ids);
            PyErr_Format(PyExc_ValueError, "stop_token_ids: at most %d ids are supported, got %d.",
                         VLLM_MAX_STOP_TOKEN_IDS, n);
            return -1;
        }
        memcpy(sp->stop_token_ids, ids, (size_t)n * sizeof *ids);
        sp->num_stop_token_ids = n;
        free(ids);
    }
    v = PyDict_GetItemString(d, "logit_bias");
    if (v && v != Py_None) {
        if (!PyDict_Check(v)) {
            PyErr_SetString(PyExc_TypeError, "logit_bias must be a dict of token id to bias");
            return -1;
        }
        if (PyDict_Size(v) > VLLM_MAX_LOGIT_BIAS) {
            PyErr_Format(PyExc_ValueError, "logit_bias: at most %d entries are supported, got %zd.",
                         VLLM_MAX_LOGIT_BIAS, PyDict_Size(v));
            return -1;
        }
        Py_ssize_t pos = 0;
        PyObject *k, *x;
        while (PyDict_Next(v, &pos, &k, &x)) {
            long tid = PyLong_AsLong(k);
            double b = PyFloat_AsDouble(x);
            if (PyErr_Occurred()) return -1;
            if (tid < 0 || tid > INT32_MAX) {
                PyErr_Format(PyExc_ValueError, "logit_bias: token id %ld is out of range", tid);
                return -1;
            }
            sp->logit_bias_ids[sp->num_logit_bias] = (int32_t)tid;
            sp->logit_bias_values[sp->num_logit_bias++] = (float)b;
        }
    }
    if (stop != Py_None) {
        if (!PyList_Check(stop)) {
            PyErr_SetString(PyExc_TypeError, "stop must be a list of strings");
            return -1;
        }
        r->num_stops = (int32_t)PyList_GET_SIZE(stop);
        if (!(r->stops = calloc((size_t)r->num_stops + 1, sizeof *r->stops))) {
            PyErr_NoMemory();
            return -1;
        }
        for (int32_t i = 0; i < r->num_stops; i++)
            if (!(r->stops[i] = PyUnicode_AsUTF8(PyList_GET_ITEM(stop, i)))) return -1;
    }
    r->include_stop = inc;
    r->skip_special = skip;
    r->detokenize = detok;
    r->opts.priority = prio;
    if (salt != Py_None && !(r->opts.cache_salt = PyUnicode_AsUTF8(salt))) return -1;
    if (get_str(d, "lora_name", &r->opts.lora_name) < 0) return -1; /* the adapter, loaded by load_lora */
    vllm_status rc = vllm_sampling_params_validate(sp);
    if (rc != VLLM_OK) {
        raise_status(rc);
        return -1;
    }
    (void)idx;
    /* structured outputs: (kind, text, disable_any_whitespace, whitespace_pattern); the
     * strings are borrowed from the request's dict (alive for the call), the engine copies them */
    PyObject *so = PyDict_GetItemString(d, "structured");
    if (so && so != Py_None) {
        int kind = 0, daw = 0;
        const char *text = NULL, *wsp = NULL;
        Py_ssize_t len = 0;
        if (!PyArg_ParseTuple(so, "is#pz", &kind, &text, &len, &daw, &wsp)) return -1;
        r->opts.structured_outputs = (vllm_structured_outputs){.kind = (vllm_structured_kind)kind,
                                                              .text = text,
                                                              .len = (size_t)len,
                                                              .disable_any_whitespace = daw,
                                                              .whitespace_pattern = wsp};
        if (len == 0) r->opts.structured_outputs.text = "";
    }
    return 0;
}

static void free_requests(gen_req *reqs, Py_ssize_t n) {
    if (!reqs) return;
    for (Py_ssize_t i = 0; i < n; i++) {
        gen_req *r = &reqs[i];
        if (r->seqs)
            for (int32_t k = 0; k < r->sp.n; k++) {
                free(r->seqs[k].text);
                free(r->seqs[k].ids);
                Py_XDECREF(r->seqs[k].logprobs);
                Py_XDECREF(r->seqs[k].stop_reason);
            }
        free(r->seqs);
        free(r->prompt);
        free(r->stops);
    }
    free(reqs);
}

/* One token's logprobs as vLLM's {token_id: Logprob(logprob, rank, decoded_token)}, sampled first. */
static PyObject *logprob_dict(const vllm_output_token_logprobs *lp, PyObject *logprob_cls) {
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    for (int32_t k = 0; k < lp->num_entries; k++) {
        const vllm_output_logprob *en = &lp->entries[k];
        PyObject *key = PyLong_FromLong(en->token_id);
        PyObject *txt = en->text ? str_from(en->text, en->text_len) : (Py_INCREF(Py_None), Py_None);
        PyObject *val = key && txt ? PyObject_CallFunction(logprob_cls, "diO", (double)en->logprob, en->rank, txt)
                                   : NULL;
        int bad = !val || PyDict_SetItem(d, key, val) < 0;
        Py_XDECREF(key);
        Py_XDECREF(txt);
        Py_XDECREF(val);
        if (bad) {
            Py_DECREF(d);
            return NULL;
        }
    }
    return d;
}

/* Appends one delta to its sequence. -1 with a Python error set. */
static int apply_delta(const vllm_output_delta *dl, gen_req *r, PyObject *logprob_cls, double now) {
    gen_seq *s = &r->seqs[dl->index];
    if (dl->text_len) {
        if (grow((void **)&s->text, &s->cap, s->len + dl->text_len + 1, 1) < 0) goto nomem;
        memcpy(s->text + s->len, dl->text, dl->text_len);
        s->len += dl->text_len;
    }
    if (dl->num_tokens) {
        if (grow((void **)&s->ids, &s->cap_ids, s->num_ids + (size_t)dl->num_tokens, sizeof *s->ids) < 0) goto nomem;
        memcpy(s->ids + s->num_ids, dl->token_ids, (size_t)dl->num_tokens * sizeof *s->ids);
        s->num_ids += (size_t)dl->num_tokens;
        if (r->first_token == 0) r->first_token = now;
        r->last_token = now;
    }
    if (dl->logprobs && s->logprobs) {
        for (int32_t t = 0; t < dl->num_tokens; t++) {
            PyObject *d = logprob_dict(&dl->logprobs[t], logprob_cls);
            int bad = !d || PyList_Append(s->logprobs, d) < 0;
            Py_XDECREF(d);
            if (bad) return -1;
            if (dl->logprobs[t].num_entries > 0) s->cumulative_logprob += dl->logprobs[t].entries[0].logprob;
        }
    }
    if (dl->num_cached_tokens > r->num_cached_tokens) r->num_cached_tokens = dl->num_cached_tokens;
    if (dl->finish_reason != VLLM_FINISH_NONE) {
        s->finish_reason = dl->finish_reason;
        Py_CLEAR(s->stop_reason);
        if (dl->stop_str) {
            if (!(s->stop_reason = PyUnicode_FromString(dl->stop_str))) return -1;
        } else if (dl->stop_token_id >= 0) {
            if (!(s->stop_reason = PyLong_FromLong(dl->stop_token_id))) return -1;
        }
    }
    return 0;
nomem:
    PyErr_NoMemory();
    return -1;
}

/* The finished request as (num_cached_tokens, [(text, token_ids, cumulative_logprob,
 * logprobs, finish_reason, stop_reason)...], (arrival, first_token, last_token)). */
static PyObject *request_result(const gen_req *r) {
    PyObject *outs = PyList_New(r->sp.n);
    if (!outs) return NULL;
    for (int32_t k = 0; k < r->sp.n; k++) {
        const gen_seq *s = &r->seqs[k];
        const char *fr = vllm_finish_reason_str(s->finish_reason);
        PyObject *text = str_from(s->text ? s->text : "", s->len), *ids = ids_to_list(s->ids, s->num_ids);
        PyObject *cum = s->logprobs ? PyFloat_FromDouble(s->cumulative_logprob) : (Py_INCREF(Py_None), Py_None);
        PyObject *o = text && ids && cum
                          ? Py_BuildValue("(OOOOzO)", text, ids, cum, s->logprobs ? s->logprobs : Py_None, fr,
                                          s->stop_reason ? s->stop_reason : Py_None)
                          : NULL;
        Py_XDECREF(text);
        Py_XDECREF(ids);
        Py_XDECREF(cum);
        if (!o) {
            Py_DECREF(outs);
            return NULL;
        }
        PyList_SET_ITEM(outs, k, o);
    }
    return Py_BuildValue("(iN(ddd))", r->num_cached_tokens, outs, r->arrival, r->first_token, r->last_token);
}

/* Aborts what is still running and steps until the engine is empty, so the
 * Engine can be used again after an exception. Keeps the pending exception. */
static void drain(EngineObject *self, gen_req *reqs, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++)
        if (reqs[i].added && !reqs[i].done) vllm_engine_abort_request(self->e, reqs[i].id);
    const vllm_output_result *res;
    Py_BEGIN_ALLOW_THREADS
    while (vllm_engine_has_unfinished(self->e)) {
        const vllm_step_output *so;
        if (vllm_engine_step(self->e, &so) != VLLM_OK) break;
        if (vllm_output_processor_process(self->op, so, &res) != VLLM_OK) break;
    }
    vllm_output_processor_abort_all(self->op, &res);
    Py_END_ALLOW_THREADS
}

static PyObject *Engine_generate(EngineObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"requests", "progress", "logprob_cls", NULL};
    PyObject *list, *progress = Py_None, *logprob_cls = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!|OO", kwlist, &PyList_Type, &list, &progress, &logprob_cls))
        return NULL;
    NEED_ENGINE(self);
    if (vllm_engine_has_unfinished(self->e)) {
        PyErr_SetString(PyExc_RuntimeError, "Engine has unfinished requests");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(list);
    gen_req *reqs = calloc((size_t)n + 1, sizeof *reqs);
    PyObject *results = NULL;
    if (!reqs) return PyErr_NoMemory();
    Py_INCREF(list); /* the stop strings and cache salts are borrowed from it */
    for (Py_ssize_t i = 0; i < n; i++)
        if (parse_request(PyList_GET_ITEM(list, i), &reqs[i], i) < 0) {
            free_requests(reqs, n);
            Py_DECREF(list);
            return NULL;
        }
    self->busy = 1;
    double t0 = vllm_monotonic_time();
    for (Py_ssize_t i = 0; i < n; i++) {
        gen_req *r = &reqs[i];
        if (!(r->seqs = calloc((size_t)r->sp.n, sizeof *r->seqs))) {
            PyErr_NoMemory();
            goto fail;
        }
        for (int32_t k = 0; k < r->sp.n; k++)
            if (r->sp.logprobs >= 0 && !(r->seqs[k].logprobs = PyList_New(0))) goto fail;
        r->arrival = t0;
        vllm_status rc = vllm_engine_add_request(self->e, r->id, r->prompt, r->num_prompt, &r->sp, &r->opts);
        if (rc != VLLM_OK) {
            raise_status(rc);
            goto fail;
        }
        r->added = true;
        vllm_output_request q = {
            .request_id = r->id,
            .prompt_ids = r->prompt,
            .num_prompt_ids = r->num_prompt,
            .sp = &r->sp,
            .stop = r->stops,
            .num_stop = r->num_stops,
            .include_stop_str_in_output = r->include_stop,
            .skip_special_tokens = r->skip_special,
            .detokenize = r->detokenize,
            .ud = r,
        };
        if ((rc = vllm_output_processor_add_request(self->op, &q)) != VLLM_OK) {
            raise_status(rc);
            goto fail;
        }
        self->prompt_tokens += r->num_prompt;
    }
    while (vllm_engine_has_unfinished(self->e)) {
        const vllm_step_output *so = NULL;
        const vllm_output_result *res = NULL;
        vllm_status rc;
        Py_BEGIN_ALLOW_THREADS
        rc = vllm_engine_step(self->e, &so);
        if (rc == VLLM_OK) rc = vllm_output_processor_process(self->op, so, &res);
        if (rc == VLLM_OK)
            for (int32_t j = 0; j < res->num_stops; j++)
                vllm_engine_stop_sequence(self->e, res->stops[j].request_id, res->stops[j].index);
        Py_END_ALLOW_THREADS
        if (rc != VLLM_OK) {
            raise_status(rc);
            goto fail;
        }
        const vllm_scheduler_stats *st = &so->stats;
        if (st->num_scheduled_tokens > 0) self->num_steps++;
        self->num_preemptions += st->num_preemptions;
        self->prefix_queries += st->prefix_cache_queries;
        self->prefix_hits += st->prefix_cache_hits;
        self->spec_drafts += st->spec_num_drafts;
        self->spec_draft_tokens += st->spec_num_draft_tokens;
        self->spec_accepted += st->spec_num_accepted_tokens;
        self->last_stats = *st;
        for (int32_t j = 0; j < res->num_deltas; j++) {
            self->generation_tokens += res->deltas[j].num_tokens;
            if (apply_delta(&res->deltas[j], res->deltas[j].ud, logprob_cls, so->timestamp) < 0) goto fail;
        }
        for (int32_t j = 0; j < res->num_done; j++) ((gen_req *)res->done[j].ud)->done = true;
        self->num_requests_finished += res->num_done;
        if (res->num_done && progress != Py_None) {
            PyObject *x = PyObject_CallFunction(progress, "i", res->num_done);
            if (!x) goto fail;
            Py_DECREF(x);
        }
        if (PyErr_CheckSignals() < 0) goto fail;
    }
    if (!(results = PyList_New(n))) goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = request_result(&reqs[i]);
        if (!x) goto fail;
        PyList_SET_ITEM(results, i, x);
    }
    self->busy = 0;
    free_requests(reqs, n);
    Py_DECREF(list);
    return results;
fail:
    Py_XDECREF(results);
    drain(self, reqs, n);
    self->busy = 0;
    free_requests(reqs, n);
    Py_DECREF(list);
    return NULL;
}

/* ---- one step at a time (AsyncLLM) ----------------------------------------
 * add() puts one request in the engine and the processor (everything is
 * copied there, so nothing of ours stays behind), step() runs one step
 * with the GIL released and returns its deltas as tuples, abort() aborts.
 * The caller keeps the outputs; it must not mix these with generate()
 * while requests are live, nor call them from two threads at once. */

static PyObject *Engine_add(EngineObject *self, PyObject *req) {
    NEED_ENGINE(self);
    gen_req r = {0};
    PyObject *ret = NULL;
    if (parse_request(req, &r, 0) < 0) goto done;
    vllm_status rc = vllm_engine_add_request(self->e, r.id, r.prompt, r.num_prompt, &r.sp, &r.opts);
    if (rc != VLLM_OK) {
        raise_status(rc);
        goto done;
    }
    vllm_output_request q = {
        .request_id = r.id,
        .prompt_ids = r.prompt,
        .num_prompt_ids = r.num_prompt,
        .sp = &r.sp,
        .stop = r.stops,
        .num_stop = r.num_stops,
        .include_stop_str_in_output = r.include_stop,
        .skip_special_tokens = r.skip_special,
        .detokenize = r.detokenize,
    };
    if ((rc = vllm_output_processor_add_request(self->op, &q)) != VLLM_OK) {
        vllm_engine_abort_request(self->e, r.id);
        raise_status(rc);
        goto done;
    }
    self->prompt_tokens += r.num_prompt;
    ret = Py_None;
    Py_INCREF(ret);
done:
    free(r.prompt);
    free(r.stops);
    return ret;
}

static PyObject *Engine_abort(EngineObject *self, PyObject *arg) {
    NEED_ENGINE(self);
    const char *id = PyUnicode_AsUTF8(arg);
    if (!id) return NULL;
    if (vllm_engine_abort_request(self->e, id) != VLLM_OK) Py_RETURN_FALSE;
    Py_RETURN_TRUE;
}

static PyObject *Engine_has_unfinished(EngineObject *self, PyObject *unused) {
    NEED_ENGINE_IDLE_OR_NOT(self);
    return PyBool_FromLong(vllm_engine_has_unfinished(self->e));
}

/* One step: [(request_id, index, text, token_ids, logprobs or None, finish_reason or None,
 * stop_reason, num_cached_tokens, timestamp)...] for the sequences with news. */
static PyObject *Engine_step(EngineObject *self, PyObject *args) {
    PyObject *logprob_cls = Py_None;
    if (!PyArg_ParseTuple(args, "|O", &logprob_cls)) return NULL;
    NEED_ENGINE(self);
    const vllm_step_output *so = NULL;
    const vllm_output_result *res = NULL;
    vllm_status rc = VLLM_OK;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    if (vllm_engine_has_unfinished(self->e)) {
        rc = vllm_engine_step(self->e, &so);
        if (rc == VLLM_OK) rc = vllm_output_processor_process(self->op, so, &res);
        if (rc == VLLM_OK)
            for (int32_t j = 0; j < res->num_stops; j++)
                vllm_engine_stop_sequence(self->e, res->stops[j].request_id, res->stops[j].index);
    }
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (rc != VLLM_OK) return raise_status(rc);
    PyObject *out = PyList_New(0);
    if (!out || !res) return out;
    const vllm_scheduler_stats *st = &so->stats;
    if (st->num_scheduled_tokens > 0) self->num_steps++;
    self->num_preemptions += st->num_preemptions;
    self->prefix_queries += st->prefix_cache_queries;
    self->prefix_hits += st->prefix_cache_hits;
    self->spec_drafts += st->spec_num_drafts;
    self->spec_draft_tokens += st->spec_num_draft_tokens;
    self->spec_accepted += st->spec_num_accepted_tokens;
    self->last_stats = *st;
    self->num_requests_finished += res->num_done;
    for (int32_t j = 0; j < res->num_deltas; j++) {
        const vllm_output_delta *dl = &res->deltas[j];
        self->generation_tokens += dl->num_tokens;
        PyObject *lps = NULL, *stop = NULL, *x = NULL;
        if (dl->logprobs && logprob_cls != Py_None) {
            if (!(lps = PyList_New(dl->num_tokens))) goto fail;
            for (int32_t t = 0; t < dl->num_tokens; t++) {
                PyObject *d = logprob_dict(&dl->logprobs[t], logprob_cls);
                if (!d) goto fail;
                PyList_SET_ITEM(lps, t, d);
            }
        }
        stop = dl->stop_str ? PyUnicode_FromString(dl->stop_str)
               : dl->stop_token_id >= 0 ? PyLong_FromLong(dl->stop_token_id) : (Py_INCREF(Py_None), Py_None);
        if (!stop) goto fail;
        x = Py_BuildValue("(siNNOzNid)", dl->request_id, dl->index, str_from(dl->text, dl->text_len),
                          ids_to_list(dl->token_ids, (size_t)dl->num_tokens), lps ? lps : Py_None,
                          vllm_finish_reason_str(dl->finish_reason), stop, dl->num_cached_tokens, so->timestamp);
        stop = NULL; /* stolen by N, even on failure */
        Py_CLEAR(lps);
        if (!x || PyList_Append(out, x) < 0) goto fail;
        Py_DECREF(x);
        continue;
    fail:
        Py_XDECREF(lps);
        Py_XDECREF(stop);
        Py_XDECREF(x);
        Py_DECREF(out);
        return NULL;
    }
    return out;
}

/* LoRA adapters: load_lora(name, path) / unload_lora(name) / has_lora(name), the engine's own
 * calls (the adapter table has its own lock; loading reads the files with the GIL released). */
static PyObject *Engine_load_lora(EngineObject *self, PyObject *args) {
    const char *name, *path;
    if (!PyArg_ParseTuple(args, "ss", &name, &path)) return NULL;
    NEED_ENGINE_IDLE_OR_NOT(self);
    vllm_status rc;
    Py_BEGIN_ALLOW_THREADS
    rc = vllm_engine_load_lora(self->e, name, path);
    Py_END_ALLOW_THREADS
    if (rc != VLLM_OK) return raise_status(rc);
    Py_RETURN_NONE;
}

static PyObject *Engine_unload_lora(EngineObject *self, PyObject *arg) {
    NEED_ENGINE_IDLE_OR_NOT(self);
    const char *name = PyUnicode_AsUTF8(arg);
    if (!name) return NULL;
    vllm_status rc = vllm_engine_unload_lora(self->e, name);
    if (rc != VLLM_OK) return raise_status(rc);
    Py_RETURN_NONE;
}

static PyObject *Engine_has_lora(EngineObject *self, PyObject *arg) {
    NEED_ENGINE_IDLE_OR_NOT(self);
    const char *name = PyUnicode_AsUTF8(arg);
    if (!name) return NULL;
    return PyBool_FromLong(vllm_engine_has_lora(self->e, name));
}

static PyMethodDef Engine_methods[] = {
    {"load_lora", (PyCFunction)Engine_load_lora, METH_VARARGS, "load_lora(name, path): a PEFT adapter directory"},
    {"unload_lora", (PyCFunction)Engine_unload_lora, METH_O, "unload_lora(name)"},
    {"has_lora", (PyCFunction)Engine_has_lora, METH_O, "has_lora(name) -> an adapter of that name is loaded"},
    {"add", (PyCFunction)Engine_add, METH_O, "add(request): one request, as generate's tuples"},
    {"step", (PyCFunction)Engine_step, METH_VARARGS, "step(logprob_cls=None) -> this step's deltas"},
    {"abort", (PyCFunction)Engine_abort, METH_O, "abort(request_id) -> False if unknown or finished"},
    {"has_unfinished", (PyCFunction)Engine_has_unfinished, METH_NOARGS, "a request is unfinished"},
    {"generate", (PyCFunction)(void (*)(void))Engine_generate, METH_VARARGS | METH_KEYWORDS,
     "generate(requests, progress=None, logprob_cls=None) -> list of results"},
    {"info", (PyCFunction)Engine_info, METH_NOARGS, "what the engine was built with"},
    {"default_sampling_params", (PyCFunction)Engine_default_sampling_params, METH_NOARGS,
     "vLLM's defaults overridden by the model's generation_config.json"},
    {"reset_prefix_cache", (PyCFunction)Engine_reset_prefix_cache, METH_NOARGS, "drop every cached prefix"},
    {"beam_search", (PyCFunction)Engine_beam_search, METH_VARARGS,
     "beam_search(prompt_ids, beam_width, max_tokens, ignore_eos, temperature, length_penalty)"},
    {"stats", (PyCFunction)Engine_stats, METH_NOARGS, "this engine's totals and last scheduler stats"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject EngineType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "vllmc._C.Engine",
    .tp_basicsize = sizeof(EngineObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Engine(tokenizer, args): libvllm.a's vllm_engine with an output processor",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Engine_init,
    .tp_dealloc = (destructor)Engine_dealloc,
    .tp_methods = Engine_methods,
};

static PyObject *mod_validate(PyObject *m, PyObject *d) {
    if (!PyDict_Check(d)) {
        PyErr_SetString(PyExc_TypeError, "validate_sampling_params takes a dict");
        return NULL;
    }
    PyObject *t = Py_BuildValue("(s[]OOiiiiO)", "validate", d, Py_None, 0, 1, 1, 0, Py_None);
    if (!t) return NULL;
    gen_req r = {0};
    int bad = parse_request(t, &r, 0);
    free(r.prompt);
    free(r.stops);
    Py_DECREF(t);
    if (bad) return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"validate_sampling_params", (PyCFunction)mod_validate, METH_O,
     "vllm_sampling_params_validate over a dict of SamplingParams fields (ValueError with its message)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "vllmc._C", "libvllm.a's engine, tokenizer and chat template", -1, module_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__C(void) {
    if (PyType_Ready(&TokenizerType) < 0 || PyType_Ready(&ChatTemplateType) < 0 || PyType_Ready(&EngineType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&TokenizerType);
    Py_INCREF(&ChatTemplateType);
    Py_INCREF(&EngineType);
    if (PyModule_AddObject(m, "Tokenizer", (PyObject *)&TokenizerType) < 0 ||
        PyModule_AddObject(m, "ChatTemplate", (PyObject *)&ChatTemplateType) < 0 ||
        PyModule_AddObject(m, "Engine", (PyObject *)&EngineType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
