/*
 * prom.c - see prom.h.
 *
 * Storage: each series owns a small array of doubles (1 for a counter or
 * gauge; num_buckets + 1 non-cumulative bucket counts, then sum and count for
 * a histogram; sum and count for a summary). Buckets are kept
 * non-cumulative so an observation touches one slot; the writer cumulates.
 *
 * A scrape copies every series' values into a private buffer under the lock
 * (series are linked append-only, so the copy walks the first num_series of
 * each family), unlocks, and only then formats. Registries hold a few
 * hundred values, so the critical section is a few microseconds.
 */
#include "metrics/prom.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/buf.h"
#include "base/error.h"

struct prom_series {
    prom_series *next;
    const prom_family *fam;
    double *vals;                    /* (fam->num_vals) */
    double created;                  /* unix seconds */
    char *labels[];                  /* (fam->num_labels) values, family order */
};

struct prom_family {
    prom_family *next;
    char *name;                      /* without _total for counters */
    char *help;
    prom_type type;
    int32_t num_labels;
    char *label_names[PROM_MAX_LABELS];
    /* label indices in name order; -1 stands for "le" (histogram buckets) */
    int32_t sorted[PROM_MAX_LABELS + 1];
    int32_t num_sorted;
    double buckets[PROM_MAX_BUCKETS];
    int32_t num_buckets;
    int32_t num_vals;                /* doubles per series */
    prom_series *head, *tail;
    int32_t num_series;              /* published (read under the lock) */
};

struct prom_registry {
    pthread_mutex_t mu;
    prom_family *head, *tail;
    int32_t num_families;
    int64_t num_values;              /* sum over series of num_vals */
};

/* ---- text buffer -------------------------------------------------------- */

static bool buf_reserve(prom_buf *b, size_t extra) {
    if (b->oom) return false;
    if (buf_grow((void **)&b->data, &b->cap, b->len + extra + 1, 1) != VLLM_OK) b->oom = true;
    return !b->oom;
}

void prom_buf_append(prom_buf *b, const char *s, size_t n) {
    if (!buf_reserve(b, n)) return;
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = 0;
}

void prom_buf_printf(prom_buf *b, const char *fmt, ...) {
    char small[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof small) {
        prom_buf_append(b, small, (size_t)n);
        return;
    }
    if (!buf_reserve(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

static void buf_escape(prom_buf *b, const char *s, bool quote) {
    for (const char *p = s; *p; p++) {
        if (*p == '\\') prom_buf_append(b, "\\\\", 2);
        else if (*p == '\n') prom_buf_append(b, "\\n", 2);
        else if (*p == '"' && quote) prom_buf_append(b, "\\\"", 2);
        else prom_buf_append(b, p, 1);
    }
}


/* ---- numbers -------------------------------------------------------------- */

char *prom_format_double(char buf[32], double v) {
    if (isnan(v)) return strcpy(buf, "NaN");
    if (isinf(v)) return strcpy(buf, v > 0 ? "+Inf" : "-Inf");
    /* Shortest digits that read back as v (what Python's repr prints). */
    char e[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, v);
        if (strtod(e, NULL) == v) break;
    }
    const char *s = e;
    bool neg = *s == '-';
    if (neg) s++;
    char digits[24];
    int nd = 0;
    for (; *s && *s != 'e'; s++)
        if (*s != '.') digits[nd++] = *s;
    int exp10 = atoi(s + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;

    char out[48];
    int o = 0;
    if (neg) out[o++] = '-';
    if (exp10 >= -4 && exp10 < 16) { /* repr's fixed notation, always with a '.' */
        if (exp10 >= 0) {
            for (int i = 0; i <= exp10; i++) out[o++] = i < nd ? digits[i] : '0';
            out[o++] = '.';
            if (nd > exp10 + 1)
                for (int i = exp10 + 1; i < nd; i++) out[o++] = digits[i];
            else out[o++] = '0';
        } else {
            out[o++] = '0';
            out[o++] = '.';
            for (int i = 0; i < -exp10 - 1; i++) out[o++] = '0';
            for (int i = 0; i < nd; i++) out[o++] = digits[i];
        }
        out[o] = 0;
    } else { /* repr's exponent notation: 1e+16, 1.5e-05 */
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            for (int i = 1; i < nd; i++) out[o++] = digits[i];
        }
        snprintf(out + o, sizeof out - (size_t)o, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
    }

    /* Go switches to exponents sooner: more than six integer digits. */
    const char *dot = strchr(out, '.');
    int d = dot ? (int)(dot - out) : -1;
    if (v > 0 && d > 6) {
        char m[48];
        int k = 0;
        m[k++] = out[0];
        m[k++] = '.';
        for (int i = 1; i < d; i++) m[k++] = out[i];
        for (int i = d + 1; out[i]; i++) m[k++] = out[i];
        while (k > 0 && (m[k - 1] == '0' || m[k - 1] == '.')) k--; /* rstrip('0.') */
        k += snprintf(m + k, sizeof m - (size_t)k, "e+0%d", d - 1);
        memcpy(buf, m, (size_t)k + 1); /* at most 17 digits, '.', "e+015": fits */
        return buf;
    }
    memcpy(buf, out, strlen(out) + 1); /* at most 24 characters */
    return buf;
}

/* ---- registry ------------------------------------------------------------ */

static bool valid_name(const char *s, bool colon) {
    if (!s || !*s) return false;
    for (const char *p = s; *p; p++) {
        char c = *p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                  (colon && c == ':') || (p != s && c >= '0' && c <= '9');
        if (!ok) return false;
    }
    return true;
}

vllm_status prom_registry_create(prom_registry **out) {
    prom_registry *r = calloc(1, sizeof *r);
    if (!r) return vllm_error(VLLM_ERR_NOMEM, "prom: registry");
    pthread_mutex_init(&r->mu, NULL);
    *out = r;
    return VLLM_OK;
}

static void series_free(prom_series *s, int32_t num_labels) {
    for (int32_t i = 0; i < num_labels; i++) free(s->labels[i]);
    free(s->vals);
    free(s);
}

static void family_free(prom_family *f) {
    for (prom_series *s = f->head, *next; s; s = next) {
        next = s->next;
        series_free(s, f->num_labels);
    }
    for (int32_t i = 0; i < f->num_labels; i++) free(f->label_names[i]);
    free(f->name);
    free(f->help);
    free(f);
}

void prom_registry_free(prom_registry *r) {
    if (!r) return;
    for (prom_family *f = r->head, *next; f; f = next) {
        next = f->next;
        family_free(f);
    }
    pthread_mutex_destroy(&r->mu);
    free(r);
}

/* Sorts the family's label indices by name, with "le" (-1) among them. */
static void family_sort_labels(prom_family *f) {
    int32_t n = 0;
    for (int32_t i = 0; i < f->num_labels; i++) f->sorted[n++] = i;
    if (f->type == PROM_HISTOGRAM) f->sorted[n++] = -1;
    for (int32_t i = 1; i < n; i++) { /* insertion sort: a handful of labels */
        int32_t x = f->sorted[i], j = i;
        const char *xs = x < 0 ? "le" : f->label_names[x];
        while (j > 0) {
            int32_t y = f->sorted[j - 1];
            if (strcmp(y < 0 ? "le" : f->label_names[y], xs) <= 0) break;
            f->sorted[j] = y;
            j--;
        }
        f->sorted[j] = x;
    }
    f->num_sorted = n;
}

vllm_status prom_family_add(prom_registry *r, const char *name, const char *help, prom_type type,
                            const char *const *label_names, int32_t num_labels,
                            const double *buckets, int32_t num_buckets, prom_family **out) {
    if (!valid_name(name, true))
        return vllm_error(VLLM_ERR_INVALID, "prom: invalid metric name '%s'", name ? name : "(null)");
    if (num_labels < 0 || num_labels > PROM_MAX_LABELS)
        return vllm_error(VLLM_ERR_INVALID, "prom: %s: %d labels (max %d)", name, num_labels,
                          PROM_MAX_LABELS);
    for (int32_t i = 0; i < num_labels; i++) {
        const char *l = label_names[i];
        if (!valid_name(l, false) || !strncmp(l, "__", 2) ||
            (type == PROM_HISTOGRAM && !strcmp(l, "le")))
            return vllm_error(VLLM_ERR_INVALID, "prom: %s: invalid label name '%s'", name,
                              l ? l : "(null)");
        for (int32_t j = 0; j < i; j++)
            if (!strcmp(label_names[j], l))
                return vllm_error(VLLM_ERR_INVALID, "prom: %s: duplicate label '%s'", name, l);
    }
    if (type == PROM_HISTOGRAM) {
        if (num_buckets < 0 || num_buckets > PROM_MAX_BUCKETS)
            return vllm_error(VLLM_ERR_INVALID, "prom: %s: %d buckets (max %d)", name, num_buckets,
                              PROM_MAX_BUCKETS);
        for (int32_t i = 0; i < num_buckets; i++)
            if (!isfinite(buckets[i]) || (i > 0 && buckets[i] <= buckets[i - 1]))
                return vllm_error(VLLM_ERR_INVALID,
                                  "prom: %s: bucket %d (%g) is not finite and ascending", name, i,
                                  buckets[i]);
    } else num_buckets = 0;

    size_t base = strlen(name);
    if (type == PROM_COUNTER && base > 6 && !strcmp(name + base - 6, "_total")) base -= 6;
    pthread_mutex_lock(&r->mu);
    for (prom_family *g = r->head; g; g = g->next) /* registered before: the same family */
        if (strlen(g->name) == base && !strncmp(g->name, name, base)) {
            pthread_mutex_unlock(&r->mu);
            if (g->type != type || g->num_labels != num_labels)
                return vllm_error(VLLM_ERR_INVALID, "prom: %s registered twice with different types or labels", name);
            *out = g;
            return VLLM_OK;
        }
    pthread_mutex_unlock(&r->mu);

    prom_family *f = calloc(1, sizeof *f);
    if (!f) return vllm_error(VLLM_ERR_NOMEM, "prom: family %s", name);
    size_t nlen = strlen(name);
    if (type == PROM_COUNTER && nlen > 6 && !strcmp(name + nlen - 6, "_total")) nlen -= 6;
    f->name = strndup(name, nlen);
    f->help = strdup(help ? help : "");
    f->type = type;
    f->num_labels = num_labels;
    bool ok = f->name && f->help;
    for (int32_t i = 0; i < num_labels; i++) ok = (f->label_names[i] = strdup(label_names[i])) && ok;
    if (!ok) {
        family_free(f);
        return vllm_error(VLLM_ERR_NOMEM, "prom: family %s", name);
    }
    if (num_buckets) memcpy(f->buckets, buckets, (size_t)num_buckets * sizeof *buckets);
    f->num_buckets = num_buckets;
    f->num_vals = type == PROM_HISTOGRAM ? num_buckets + 3 : type == PROM_SUMMARY ? 2 : 1;
    family_sort_labels(f);

    pthread_mutex_lock(&r->mu);
    if (r->tail) r->tail->next = f;
    else r->head = f;
    r->tail = f;
    r->num_families++;
    pthread_mutex_unlock(&r->mu);
    *out = f;
    return VLLM_OK;
}

static double unix_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static prom_series *series_find(prom_family *f, int32_t n, const char *const *values) {
    prom_series *s = f->head;
    for (int32_t k = 0; k < n; k++, s = s->next) {
        int32_t i = 0;
        while (i < f->num_labels && !strcmp(s->labels[i], values[i])) i++;
        if (i == f->num_labels) return s;
    }
    return NULL;
}

vllm_status prom_series_get(prom_registry *r, prom_family *f, const char *const *label_values,
                            prom_series **out) {
    for (int32_t i = 0; i < f->num_labels; i++)
        if (!label_values || !label_values[i])
            return vllm_error(VLLM_ERR_INVALID, "prom: %s: label '%s' has no value", f->name,
                              f->label_names[i]);
    pthread_mutex_lock(&r->mu);
    prom_series *s = series_find(f, f->num_series, label_values);
    pthread_mutex_unlock(&r->mu);
    if (s) {
        *out = s;
        return VLLM_OK;
    }
    /* Build it unlocked, then publish (or take a racing twin). */
    s = calloc(1, sizeof *s + (size_t)f->num_labels * sizeof(char *));
    if (!s) return vllm_error(VLLM_ERR_NOMEM, "prom: series of %s", f->name);
    s->vals = calloc((size_t)f->num_vals, sizeof *s->vals);
    bool ok = s->vals != NULL;
    for (int32_t i = 0; i < f->num_labels; i++) ok = (s->labels[i] = strdup(label_values[i])) && ok;
    if (!ok) {
        series_free(s, f->num_labels);
        return vllm_error(VLLM_ERR_NOMEM, "prom: series of %s", f->name);
    }
    s->fam = f;
    s->created = unix_now();
    pthread_mutex_lock(&r->mu);
    prom_series *twin = series_find(f, f->num_series, label_values);
    if (!twin) {
        if (f->tail) f->tail->next = s;
        else f->head = s;
        f->tail = s;
        f->num_series++;
        r->num_values += f->num_vals;
    }
    pthread_mutex_unlock(&r->mu);
    if (twin) {
        series_free(s, f->num_labels);
        s = twin;
    }
    *out = s;
    return VLLM_OK;
}

void prom_lock(prom_registry *r) { pthread_mutex_lock(&r->mu); }
void prom_unlock(prom_registry *r) { pthread_mutex_unlock(&r->mu); }

void prom_counter_add(prom_series *s, double v) {
    if (v > 0) s->vals[0] += v;
}

void prom_gauge_set(prom_series *s, double v) { s->vals[0] = v; }

void prom_observe(prom_series *s, double v) {
    const prom_family *f = s->fam;
    if (f->type == PROM_HISTOGRAM) {
        int32_t i = 0;
        while (i < f->num_buckets && !(v <= f->buckets[i])) i++;
        s->vals[i] += 1;
    }
    s->vals[f->num_vals - 2] += v;
    s->vals[f->num_vals - 1] += 1;
}

/* ---- exposition ---------------------------------------------------------- */

static const char *type_name(prom_type t) {
    switch (t) {
    case PROM_COUNTER: return "counter";
    case PROM_GAUGE: return "gauge";
    case PROM_HISTOGRAM: return "histogram";
    case PROM_SUMMARY: return "summary";
    }
    return "untyped";
}

static void write_help_type(prom_buf *b, const char *name, const char *suffix, const char *help,
                            const char *type) {
    prom_buf_printf(b, "# HELP %s%s ", name, suffix);
    buf_escape(b, help, false);
    prom_buf_printf(b, "\n# TYPE %s%s %s\n", name, suffix, type);
}

/* name+suffix{sorted labels[,le]} value */
static void write_sample(prom_buf *b, const prom_family *f, const prom_series *s,
                         const char *suffix, const char *le, double v) {
    char num[32];
    prom_buf_printf(b, "%s%s", f->name, suffix);
    bool any = false;
    for (int32_t k = 0; k < f->num_sorted; k++) {
        int32_t i = f->sorted[k];
        if (i < 0 && !le) continue;
        prom_buf_append(b, any ? "," : "{", 1);
        any = true;
        if (i < 0) prom_buf_printf(b, "le=\"%s\"", le);
        else {
            prom_buf_printf(b, "%s=\"", f->label_names[i]);
            buf_escape(b, s->labels[i], true);
            prom_buf_append(b, "\"", 1);
        }
    }
    if (any) prom_buf_append(b, "}", 1);
    prom_buf_printf(b, " %s\n", prom_format_double(num, v));
}

/* vals: this family's copied values, num_series series of num_vals each. */
static void write_family(prom_buf *b, const prom_family *f, int32_t num_series, const double *vals) {
    bool counter = f->type == PROM_COUNTER;
    write_help_type(b, f->name, counter ? "_total" : "", f->help, type_name(f->type));
    /* Unlocked: the first num_series series and their links were published before the copy;
     * the last one's next may be being written by prom_series_get, so it is never read. */
    const prom_series *s = f->head;
    for (int32_t k = 0; k < num_series; s = ++k < num_series ? s->next : NULL) {
        const double *v = vals + (size_t)k * (size_t)f->num_vals;
        switch (f->type) {
        case PROM_COUNTER: write_sample(b, f, s, "_total", NULL, v[0]); break;
        case PROM_GAUGE: write_sample(b, f, s, "", NULL, v[0]); break;
        case PROM_HISTOGRAM: {
            double cum = 0;
            char le[32];
            for (int32_t i = 0; i < f->num_buckets; i++) {
                cum += v[i];
                write_sample(b, f, s, "_bucket", prom_format_double(le, f->buckets[i]), cum);
            }
            cum += v[f->num_buckets];
            write_sample(b, f, s, "_bucket", "+Inf", cum);
            write_sample(b, f, s, "_count", NULL, v[f->num_vals - 1]);
            write_sample(b, f, s, "_sum", NULL, v[f->num_vals - 2]);
            break;
        }
        case PROM_SUMMARY:
            write_sample(b, f, s, "_count", NULL, v[1]);
            write_sample(b, f, s, "_sum", NULL, v[0]);
            break;
        }
    }
    if (counter || f->type == PROM_HISTOGRAM || f->type == PROM_SUMMARY) {
        if (num_series == 0) return; /* prometheus_client writes no empty _created family */
        write_help_type(b, f->name, "_created", f->help, "gauge");
        s = f->head;
        for (int32_t k = 0; k < num_series; s = ++k < num_series ? s->next : NULL)
            write_sample(b, f, s, "_created", NULL, s->created);
    }
}

vllm_status prom_registry_write(prom_registry *r, prom_buf *b) {
    double *vals = NULL;
    int32_t *counts = NULL;
    size_t cap = 0;
    int32_t num_families = 0, copied = 0;
    /* Size the copy outside the lock; retry if series were added meanwhile. */
    for (;;) {
        pthread_mutex_lock(&r->mu);
        size_t need = (size_t)r->num_values;
        int32_t nf = r->num_families;
        if (need <= cap && nf <= num_families) {
            size_t o = 0;
            int32_t k = 0;
            for (const prom_family *f = r->head; f; f = f->next, k++) {
                counts[k] = f->num_series;
                const prom_series *s = f->head;
                for (int32_t i = 0; i < f->num_series; i++, s = s->next) {
                    memcpy(vals + o, s->vals, (size_t)f->num_vals * sizeof *vals);
                    o += (size_t)f->num_vals;
                }
            }
            copied = k;
            pthread_mutex_unlock(&r->mu);
            break;
        }
        pthread_mutex_unlock(&r->mu);
        free(vals);
        free(counts);
        cap = need + 64;
        num_families = nf + 8;
        vals = malloc(cap * sizeof *vals);
        counts = malloc((size_t)num_families * sizeof *counts);
        if (!vals || !counts) {
            free(vals);
            free(counts);
            return vllm_error(VLLM_ERR_NOMEM, "prom: scrape copy of %zu values", cap);
        }
    }
    size_t o = 0;
    int32_t k = 0;
    for (const prom_family *f = r->head; f && k < copied; f = f->next, k++) {
        write_family(b, f, counts[k], vals + o);
        o += (size_t)counts[k] * (size_t)f->num_vals;
    }
    free(vals);
    free(counts);
    if (b->oom) return vllm_error(VLLM_ERR_NOMEM, "prom: exposition text");
    return VLLM_OK;
}

void prom_write_simple(prom_buf *b, const char *name, const char *help, const char *type,
                       double value) {
    char num[32];
    write_help_type(b, name, "", help, type);
    prom_buf_printf(b, "%s %s\n", name, prom_format_double(num, value));
}
