/* log.c - see log.h. */
#include "base/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

static log_level min_level = (log_level)-1;
static char prefix[64];

void log_set_prefix(const char *p) { snprintf(prefix, sizeof prefix, "%s", p ? p : ""); }


static log_level level_from_env(void) {
    const char *s = getenv("VLLM_LOGGING_LEVEL");
    if (!s) return LOG_INFO;
    if (!strcasecmp(s, "DEBUG")) return LOG_DEBUG;
    if (!strcasecmp(s, "WARNING") || !strcasecmp(s, "WARN")) return LOG_WARNING;
    if (!strcasecmp(s, "ERROR")) return LOG_ERROR;
    return LOG_INFO;
}

void log_write(log_level level, const char *file, int line, const char *fmt, ...) {
    static const char *names[] = {"DEBUG", "INFO", "WARNING", "ERROR"};
    if (min_level == (log_level)-1) min_level = level_from_env();
    if (level < min_level) return;
    char msg[2048], when[32];
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(when, sizeof when, "%m-%d %H:%M:%S", &tm);
    const char *base = strrchr(file, '/');
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s%s %s [%s:%d] %s\n", prefix, names[level], when, base ? base + 1 : file, line, msg);
}
