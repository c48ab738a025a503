/*
 * prom.h - a small Prometheus registry: counters, gauges, histograms and
 * summaries with label sets, written in the text exposition format 0.0.4
 * exactly as Python's prometheus_client writes it (vLLM's /metrics is
 * prometheus_client output, and dashboards, recording rules and diff-based
 * tests see the bytes):
 *
 *   # HELP vllm:prompt_tokens_total Number of prefill tokens processed.
 *   # TYPE vllm:prompt_tokens_total counter
 *   vllm:prompt_tokens_total{engine="0",model_name="m"} 1234.0
 *   # HELP vllm:prompt_tokens_created Number of prefill tokens processed.
 *   # TYPE vllm:prompt_tokens_created gauge
 *   vllm:prompt_tokens_created{engine="0",model_name="m"} 1.7e+09
 *
 * That is: counters are named without `_total` and exported with it; labels
 * are sorted by name (`le` included); histograms write cumulative `_bucket`
 * lines ending in le="+Inf", then `_count`, then `_sum`; counters, histograms
 * and summaries are followed by a `_created` gauge family (the series'
 * creation time, unix seconds); numbers are Python's repr() of the float with
 * Go's earlier switch to exponents (1234567.0 -> 1.234567e+06); label values
 * escape \ " and newline, HELP escapes \ and newline.
 *
 * Concurrency: one mutex guards every value. Writers (the front end's output
 * thread, HTTP threads) take it for a handful of additions with prom_lock();
 * the scraper takes it only to copy the values into its own buffer and
 * formats after unlocking, so a scrape never holds up a step for longer than
 * a memcpy of a few kilobytes. Families and series are append-only: their
 * names and label values never move once published, which is what lets the
 * formatter read them unlocked.
 */
#ifndef VLLM_METRICS_PROM_H
#define VLLM_METRICS_PROM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vllm/status.h"

#define PROM_MAX_LABELS 24
#define PROM_MAX_BUCKETS 64

typedef enum prom_type {
    PROM_COUNTER = 0,
    PROM_GAUGE,
    PROM_HISTOGRAM,
    PROM_SUMMARY,                    /* _count and _sum only, no quantiles */
} prom_type;

typedef struct prom_registry prom_registry;
typedef struct prom_family prom_family;
typedef struct prom_series prom_series;

/* A growable text buffer. Appends never fail loudly: on out-of-memory they
 * set oom and drop the text; check it once at the end. */
typedef struct prom_buf {
    char *data;                      /* NUL-terminated; owned, free() it */
    size_t len, cap;
    bool oom;
} prom_buf;

void prom_buf_printf(prom_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void prom_buf_append(prom_buf *b, const char *s, size_t n);

/* Python prometheus_client's floatToGoString: repr(float(v)), "+Inf",
 * "-Inf", "NaN", and for v > 0 with more than six integer digits Go's
 * exponent form ("1.234567e+06"). buf must hold 32 bytes; returns buf. */
char *prom_format_double(char buf[32], double v);

vllm_status prom_registry_create(prom_registry **out);
/* Frees the registry, its families and series. NULL is a no-op. */
void prom_registry_free(prom_registry *r);

/* Registers a family (strings are copied). name: [a-zA-Z_:][a-zA-Z0-9_:]*;
 * a counter's name is given without `_total` (a trailing `_total` is
 * stripped, as prometheus_client does). label names: [a-zA-Z_][a-zA-Z0-9_]*,
 * not starting with "__", and not "le" on a histogram. buckets: histograms
 * only, ascending finite upper bounds (+Inf is implicit). Families are written
 * in registration order. Not thread-safe with respect to other registrations;
 * register everything at start-up. A name registered again (with the same
 * type and label count) returns the first family: several engines' series
 * share one family (metrics_add_engine). */
vllm_status prom_family_add(prom_registry *r, const char *name, const char *help, prom_type type,
                            const char *const *label_names, int32_t num_labels,
                            const double *buckets, int32_t num_buckets, prom_family **out);

/* Finds the series with these label values (num_labels of the family, in
 * the family's label order) or creates it at zero. Takes the lock itself:
 * call it without holding prom_lock. Linear in the family's series, so meant
 * for families with a handful of series (cache the pointer for hot ones). */
vllm_status prom_series_get(prom_registry *r, prom_family *f, const char *const *label_values,
                            prom_series **out);

/* Value updates: the caller holds prom_lock. */
void prom_lock(prom_registry *r);
void prom_unlock(prom_registry *r);
void prom_counter_add(prom_series *s, double v); /* v < 0 or NaN is ignored */
void prom_gauge_set(prom_series *s, double v);
/* Histogram: counts v in the first bucket with v <= le; summary: count and sum. */
void prom_observe(prom_series *s, double v);

/* Appends every family in the exposition format. Takes the lock only to
 * copy the values. */
vllm_status prom_registry_write(prom_registry *r, prom_buf *b);

/* HELP/TYPE and one unlabelled sample, for values gathered at scrape time
 * (process metrics). type is "gauge" or "counter"; name is written as given. */
void prom_write_simple(prom_buf *b, const char *name, const char *help, const char *type,
                       double value);

#endif
