/*
 * process.h - the process_* metrics Python's prometheus_client exports by
 * default (and vLLM's /metrics therefore carries), read from /proc/self at
 * scrape time: virtual and resident memory, start time, CPU seconds, open
 * and maximum file descriptors. Same names, HELP texts and order.
 */
#ifndef VLLM_METRICS_PROCESS_H
#define VLLM_METRICS_PROCESS_H

#include "metrics/prom.h"

/* Appends the process metrics. A value that cannot be read (no /proc) is
 * left out with its family, as prometheus_client does. */
void process_write_metrics(prom_buf *b);

#endif
