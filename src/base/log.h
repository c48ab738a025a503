/*
 * log.h - vLLM-style log lines on stderr:
 *     INFO 11-22 02:45:00 [engine.c:123] message
 * or "(APIServer pid=N) INFO ..." after log_set_prefix. The level is set
 * once at start-up (VLLM_LOGGING_LEVEL=DEBUG|INFO|WARNING|ERROR, default
 * INFO). Thread-safe: each line is written with one fprintf.
 */
#ifndef VLLM_BASE_LOG_H
#define VLLM_BASE_LOG_H

typedef enum log_level { LOG_DEBUG, LOG_INFO, LOG_WARNING, LOG_ERROR } log_level;

void log_write(log_level level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Put before every line of this process, as vLLM's "(APIServer pid=N) "
 * (several processes share one stderr); set once at start-up. */
void log_set_prefix(const char *prefix);

#define log_debug(...) log_write(LOG_DEBUG, __FILE__, __LINE__, __VA_ARGS__)
#define log_info(...) log_write(LOG_INFO, __FILE__, __LINE__, __VA_ARGS__)
#define log_warn(...) log_write(LOG_WARNING, __FILE__, __LINE__, __VA_ARGS__)
#define log_error(...) log_write(LOG_ERROR, __FILE__, __LINE__, __VA_ARGS__)

#endif
