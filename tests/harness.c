/* harness.c - see harness.h. */
#include "harness.h"

#include <stdarg.h>
#include <string.h>

static int num_passed, num_failed;
static bool current_failed, current_skipped;
static const char *current_name;

void harness_run(const char *name, void (*fn)(void)) {
    current_failed = current_skipped = false;
    current_name = name;
    fn();
    if (current_failed) num_failed++;
    else if (!current_skipped) {
        num_passed++;
        printf("ok %s\n", name);
    }
    fflush(stdout);
}

void harness_fail(const char *file, int line, const char *cond, const char *fmt, ...) {
    char msg[1024] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    printf("FAIL %s: %s:%d: %s%s%s\n", current_name ? current_name : "?", file, line, cond,
           msg[0] ? ": " : "", msg);
    fflush(stdout);
    current_failed = true;
}

void harness_skip(const char *fmt, ...) {
    char msg[1024] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (current_failed) return; /* failed before it knew it could not run: stays failed */
    printf("skip %s: %s\n", current_name ? current_name : "?", msg[0] ? msg : "not run here");
    fflush(stdout);
    current_skipped = true;
}

bool harness_failed(void) { return current_failed; }

int harness_done(void) { return num_failed ? 1 : 0; }
