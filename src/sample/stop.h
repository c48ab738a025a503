/*
 * stop.h - stop strings over streamed output text (the front end's side of
 * vLLM's stop / include_stop_str_in_output / stop_reason).
 *
 * The front end feeds each detokenized piece of a sequence's output as it
 * arrives and gets back the text that is safe to send now:
 *
 *     stop_matcher m;
 *     if ((rc = stop_matcher_init(&m, stops, num_stops, include_stop)) != VLLM_OK) ...
 *     for each new piece:
 *         stop_update u;
 *         stop_matcher_feed(&m, piece, len, num_output_tokens > min_tokens, &u);
 *         send(u.text, u.len);
 *         if (u.stop_index >= 0) { finish: reason "stop", stop_reason = stops[u.stop_index]; break; }
 *     at a finish for any other reason: stop_matcher_finish(&m, &u); send(u.text, u.len);
 *     stop_matcher_deinit(&m);
 *
 * Rules:
 * - A stop string ends the output at its earliest completion: the first byte
 *   position at which some stop string is complete (ties: the one listed
 *   first). The result does not depend on how the text is cut into pieces.
 *   (vLLM checks after each token and takes the first listed stop string
 *   found in the new text; the two agree whenever a token completes at most
 *   one stop string.)
 * - The output is cut before the stop string, or after it with
 *   include_stop_str_in_output.
 * - Streamed text is never retracted: text that could still be the start of a
 *   stop string is held back (only the longest suffix that is a proper prefix
 *   of some stop string, at most len(longest) - 1 bytes, vLLM's bound), and so
 *   is an incomplete UTF-8 sequence at the end, so a character is never split.
 *   Nothing is held back for stop strings with include_stop_str_in_output.
 * - can_stop = false (the sequence has not yet produced more than min_tokens
 *   tokens, as vLLM's detokenizer) lets text through without stopping; a stop
 *   string must then end in text fed with can_stop = true.
 * Matching is on bytes; stop strings and text are UTF-8.
 */
#ifndef VLLM_SAMPLE_STOP_H
#define VLLM_SAMPLE_STOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vllm/status.h"

typedef struct stop_matcher {
    /* private */
    char **stops;             /* copies, NUL-terminated */
    size_t *stop_lens;
    int32_t num_stops;
    size_t max_len;           /* longest stop string */
    bool include_in_output;
    bool stopped;
    char *buf;                /* recent text: [0, emitted) already sent, [emitted, len) held */
    size_t len, cap, emitted;
} stop_matcher;

typedef struct stop_update {
    const char *text;         /* send these bytes now; borrowed until the next call */
    size_t len;
    int32_t stop_index;       /* -1, or the index of the stop string that ended the output */
} stop_update;

/* Copies the stop strings. Fails (VLLM_ERR_INVALID, vLLM's message) on an
 * empty one; VLLM_ERR_NOMEM. stops may be NULL when num_stops is 0. */
vllm_status stop_matcher_init(stop_matcher *m, const char *const *stops, int32_t num_stops,
                              bool include_stop_str_in_output);
void stop_matcher_deinit(stop_matcher *m);

/* Adds piece (len bytes, need not be NUL-terminated) to the output. Fails
 * after a stop was reported (VLLM_ERR_INVALID) or on VLLM_ERR_NOMEM. */
vllm_status stop_matcher_feed(stop_matcher *m, const char *piece, size_t len, bool can_stop,
                              stop_update *out);
/* The sequence finished for another reason: releases everything held back. */
void stop_matcher_finish(stop_matcher *m, stop_update *out);

#endif
