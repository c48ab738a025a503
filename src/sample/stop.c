/*
 * stop.c - stop strings over streamed text (rules in stop.h).
 *
 * The matcher keeps a small window of the output: the bytes not yet sent,
 * plus up to len(longest stop) - 1 bytes already sent, which is all the
 * context a stop string ending in new text can reach back into. Each feed
 * appends the piece and searches every stop string only from where a match
 * could end in the new piece (nothing, when it may not stop): memmem's first
 * hit is that string's earliest completion; the earliest over all strings
 * wins. Without a
 * match, everything is sent except the longest suffix that is a proper prefix
 * of a stop string (the only text a later piece could turn into a match) and
 * an unfinished UTF-8 sequence. Since a held suffix always starts at or after
 * what was sent, a match never begins in sent text, so nothing is retracted.
 * The window is compacted at the start of the next call, which keeps the
 * returned pointer valid until then; it only grows when a piece is larger
 * than any before.
 */
#include "sample/stop.h"

#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/error.h"

vllm_status stop_matcher_init(stop_matcher *m, const char *const *stops, int32_t num_stops,
                              bool include_stop_str_in_output) {
    memset(m, 0, sizeof *m);
    m->include_in_output = include_stop_str_in_output;
    if (num_stops < 0) return vllm_error(VLLM_ERR_INVALID, "stop: negative count %d", num_stops);
    for (int32_t i = 0; i < num_stops; i++)
        if (!stops[i] || !stops[i][0]) return vllm_error(VLLM_ERR_INVALID, "stop cannot contain an empty string.");
    if (num_stops == 0) return VLLM_OK;
    m->stops = calloc((size_t)num_stops, sizeof *m->stops);
    m->stop_lens = calloc((size_t)num_stops, sizeof *m->stop_lens);
    if (!m->stops || !m->stop_lens) goto nomem;
    m->num_stops = num_stops;
    for (int32_t i = 0; i < num_stops; i++) {
        if (!(m->stops[i] = strdup(stops[i]))) goto nomem;
        m->stop_lens[i] = strlen(stops[i]);
        if (m->stop_lens[i] > m->max_len) m->max_len = m->stop_lens[i];
    }
    return VLLM_OK;
nomem:
    stop_matcher_deinit(m);
    return vllm_error(VLLM_ERR_NOMEM, "stop: out of memory copying %d stop strings", num_stops);
}

void stop_matcher_deinit(stop_matcher *m) {
    if (m->stops)
        for (int32_t i = 0; i < m->num_stops; i++) free(m->stops[i]);
    free(m->stops);
    free(m->stop_lens);
    free(m->buf);
    memset(m, 0, sizeof *m);
}

/* The largest e' <= e such that buf[0, e') does not end inside a UTF-8
 * sequence that continues at or past e (an incomplete one at the end of the
 * text, or one the cut at e would split). */
static size_t utf8_cut(const char *buf, size_t e) {
    size_t q = e;
    for (int back = 0; back < 4 && q > 0; back++) {
        unsigned char b = (unsigned char)buf[--q];
        if ((b & 0xc0) == 0x80) continue; /* continuation byte: keep looking for the lead */
        size_t need = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 1;
        return q + need > e ? q : e;
    }
    return e; /* not UTF-8 we can reason about: cut where asked */
}

/* Length of the longest suffix of buf[0, len) that is a proper prefix of a stop string. */
static size_t held_suffix(const stop_matcher *m) {
    size_t hold = 0;
    for (int32_t i = 0; i < m->num_stops; i++) {
        size_t k = m->stop_lens[i] - 1;
        if (k > m->len) k = m->len;
        for (; k > hold; k--)
            if (!memcmp(m->buf + m->len - k, m->stops[i], k)) { hold = k; break; }
    }
    return hold;
}

/* Drops sent bytes the next match cannot reach back into. */
static void compact(stop_matcher *m) {
    size_t context = m->max_len ? m->max_len - 1 : 0;
    size_t drop = m->len > context ? m->len - context : 0;
    if (drop > m->emitted) drop = m->emitted;
    if (!drop) return;
    memmove(m->buf, m->buf + drop, m->len - drop);
    m->len -= drop;
    m->emitted -= drop;
}

vllm_status stop_matcher_feed(stop_matcher *m, const char *piece, size_t len, bool can_stop,
                              stop_update *out) {
    out->text = "";
    out->len = 0;
    out->stop_index = -1;
    if (m->stopped) return vllm_error(VLLM_ERR_INVALID, "stop: the output already ended at a stop string");
    compact(m);
    vllm_status rc = buf_grow((void **)&m->buf, &m->cap, m->len + len, 1);
    if (rc != VLLM_OK) {
        vllm_error_prefix("stop: the text window");
        return rc;
    }
    if (len) memcpy(m->buf + m->len, piece, len);
    size_t old_len = m->len;
    m->len += len;

    if (can_stop && len) {
        /* a match must end in the new piece: earlier text was searched when it
         * arrived, or arrived while stopping was not allowed */
        size_t min_end = old_len + 1;
        size_t best_end = SIZE_MAX, best_start = 0;
        int32_t best = -1;
        for (int32_t i = 0; i < m->num_stops; i++) {
            size_t sl = m->stop_lens[i], from = min_end > sl ? min_end - sl : 0;
            if (from + sl > m->len) continue;
            const char *hit = memmem(m->buf + from, m->len - from, m->stops[i], sl);
            if (hit && (size_t)(hit - m->buf) + sl < best_end) {
                best_start = (size_t)(hit - m->buf);
                best_end = best_start + sl;
                best = i;
            }
        }
        if (best >= 0) {
            size_t cut = m->include_in_output ? best_end : best_start;
            if (cut < m->emitted) cut = m->emitted; /* cannot happen: held text covers every partial match */
            out->text = m->buf + m->emitted;
            out->len = cut - m->emitted;
            out->stop_index = best;
            m->emitted = cut;
            m->stopped = true;
            return VLLM_OK;
        }
    }
    size_t e = m->len - (m->include_in_output ? 0 : held_suffix(m));
    e = m->buf ? utf8_cut(m->buf, e) : 0;
    if (e < m->emitted) e = m->emitted;
    out->text = m->buf ? m->buf + m->emitted : ""; /* no buffer yet after empty pieces */
    out->len = e - m->emitted;
    m->emitted = e;
    return VLLM_OK;
}

void stop_matcher_finish(stop_matcher *m, stop_update *out) {
    out->text = m->buf ? m->buf + m->emitted : "";
    out->len = m->len - m->emitted;
    out->stop_index = -1;
    m->emitted = m->len;
}
