/*
 * metrics_link.h - one Prometheus registry for several API server processes
 * (--api-server-count N, dist/api_servers.h): vLLM's multi-process metrics
 * problem, solved by having one process own the registry.
 *
 *   API server i: metrics_link_connect -> a metrics object (metrics.h,
 *                 metrics_create_forward) whose every call is sent to the
 *                 owner over a ZeroMQ DEALER and waits for the owner's reply
 *   owner:        metrics_link_owner_* (the supervisor process): a ROUTER;
 *                 it builds the one real metrics object from the first
 *                 API server's config and applies every call to it, with
 *                 request ids prefixed "i/" (two API servers may use the
 *                 same id); GET /metrics on any API server is the owner's
 *                 metrics_render
 *
 * Exactness: every call is synchronous and one API server's calls travel in
 * order on one socket, so by the time a step's deltas reach a client (the
 * frontend's step observer runs before the sinks) the owner has counted
 * that step; a scrape answered by any process then includes everything
 * any client has seen. Engine-side per-step counters come to each API
 * server zeroed except at one (dist/dp_engine.h), so adding up what the
 * API servers forward counts them once.
 *
 * An owner that does not answer within METRICS_LINK_TIMEOUT_S is logged
 * and given up on for METRICS_LINK_RETRY_S (calls are no-ops, /metrics
 * fails; serving goes on), then tried again; what was dropped meanwhile is
 * lost, the only way the counts can fall short.
 */
#ifndef VLLM_DIST_METRICS_LINK_H
#define VLLM_DIST_METRICS_LINK_H

#include <stddef.h>
#include <stdint.h>

#include "metrics/metrics.h"

#define METRICS_LINK_TIMEOUT_S 10.0
#define METRICS_LINK_RETRY_S 30.0

/* API server server_index: connects to the owner at endpoint, sends it mc
 * (the owner builds its metrics from the first config it hears), and
 * returns a forwarding metrics object (metrics_free closes the link). */
vllm_status metrics_link_connect(const char *endpoint, int32_t server_index, const metrics_config *mc,
                                 metrics **out);

typedef struct metrics_link_owner metrics_link_owner;

/* Binds a ROUTER on a free loopback port; *endpoint_out gets its address. */
vllm_status metrics_link_owner_create(metrics_link_owner **out, char *endpoint_out, size_t cap);
/* Handles what arrives within timeout_ms (then every queued message). */
void metrics_link_owner_poll(metrics_link_owner *o, int timeout_ms);
void metrics_link_owner_free(metrics_link_owner *o);

#endif
