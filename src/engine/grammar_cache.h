/*
 * grammar_cache.h - structured outputs' compiled grammars, compiled off the
 * engine thread and shared by every request with the same constraint
 * (vLLM's StructuredOutputManager: its compile executor and grammar cache).
 *
 * An entry is keyed by the whole st_spec (kind, text, whitespace options).
 * grammar_cache_get never waits: it finds the entry or creates one and
 * queues it for the compile threads; the entry goes PENDING -> READY (the
 * st_grammar) or FAILED (the compile's error message, kept: the same spec
 * fails the same way, so it is not compiled again). The vocabulary
 * (st_vocab: the tokenizer's token bytes and their trie) is built by the
 * first compile, on a compile thread too, from the tokenizer the cache was
 * created with.
 *
 * Entries are reference counted: a request holds one for its lifetime, so
 * its st_grammar stays valid; an entry nobody references stays cached
 * (READY or FAILED) until more than max_entries are cached, when the oldest
 * such entries are dropped. A PENDING entry is never dropped.
 *
 * Time budget: a compile cannot be interrupted (structured.h has no cancel),
 * so the budget is enforced by whoever waits: a request whose grammar is not
 * READY by its deadline fails (the engine: WAITING_FOR_FSM past
 * structured_outputs_compile_timeout; the server: before admission). The
 * compile itself runs to its end on its thread and its result is cached;
 * with num_threads threads, that many runaway compiles at once delay the
 * compiles queued behind them, which then fail by their own deadlines:
 * the engine and the server never stall.
 *
 * Testing hook: VLLMC_DEBUG_COMPILE_DELAY_MS=N in the environment (read at
 * create) makes every compile sleep N ms first, so tests can watch a request
 * wait in WAITING_FOR_FSM and time out.
 *
 * Thread-safety: every function may be called from any thread (one mutex;
 * compiles run outside it). An entry's state is read without the lock
 * (acquire); its grammar / error never change once published.
 */
#ifndef VLLM_ENGINE_GRAMMAR_CACHE_H
#define VLLM_ENGINE_GRAMMAR_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "structured/structured.h"
#include "vllm/status.h"
#include "vllm/vllm.h"

typedef enum grammar_state {
    GRAMMAR_PENDING = 0,             /* queued or compiling */
    GRAMMAR_READY,
    GRAMMAR_FAILED,
} grammar_state;

#define GRAMMAR_CACHE_MAX_EOS 8

typedef struct grammar_cache_config {
    const char *tokenizer;           /* what tokenizer_load reads (model dir, tokenizer dir, .gguf); copied */
    int32_t eos_ids[GRAMMAR_CACHE_MAX_EOS]; /* the model's EOS ids: allowed where the grammar can end */
    int32_t num_eos;
    int32_t num_threads;             /* compile threads; 0 = 1 */
    int32_t max_entries;             /* unreferenced entries kept; 0 = 256 */
} grammar_cache_config;

typedef struct grammar_cache grammar_cache;
typedef struct grammar_cache_entry grammar_cache_entry;

/* The st_spec of a request's public constraint (borrowing its strings);
 * VLLM_ERR_INVALID for kind NONE or unknown, or a kind that needs text
 * without it. The engine and the server key the cache through this alone. */
vllm_status grammar_cache_spec(const vllm_structured_outputs *so, st_spec *out);

/* Starts nothing yet: the threads start with the first get. */
vllm_status grammar_cache_create(const grammar_cache_config *cfg, grammar_cache **out);
/* Waits for the compiles running now (queued ones are dropped), joins the
 * threads, frees every entry. No reference may be held any more. NULL: no-op. */
void grammar_cache_free(grammar_cache *c);

/* The entry of spec, with a reference for the caller (release with
 * grammar_cache_entry_unref). Fails only on out of memory or a spec whose
 * kind is unknown. */
vllm_status grammar_cache_get(grammar_cache *c, const st_spec *spec, grammar_cache_entry **out);
void grammar_cache_entry_unref(grammar_cache *c, grammar_cache_entry *e);

grammar_state grammar_cache_entry_state(const grammar_cache_entry *e);
/* READY: the compiled grammar, valid while the reference is held. */
st_grammar *grammar_cache_entry_grammar(const grammar_cache_entry *e);
/* FAILED: what the compile said (e.g. "json_schema: ... at line 1"). */
const char *grammar_cache_entry_error(const grammar_cache_entry *e);
/* Waits until e is not PENDING or the monotonic clock reaches deadline
 * (vllm_monotonic_time seconds); returns the state then. */
grammar_state grammar_cache_entry_wait(grammar_cache *c, const grammar_cache_entry *e, double deadline);

/* Waits until any compile finishes or deadline. */
void grammar_cache_wait_any(grammar_cache *c, double deadline);

/* The vocabulary the grammars were compiled for; NULL until the first
 * compile built it (so always set once an entry is READY). */
const st_vocab *grammar_cache_vocab(grammar_cache *c);

/* Calls fn(ud) on a compile thread after each compile finishes (e.g. to wake
 * an engine loop that sleeps while only grammars are pending). Set before
 * the first get. */
void grammar_cache_set_notify(grammar_cache *c, void (*fn)(void *ud), void *ud);

#endif
