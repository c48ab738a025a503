/*
 * clock.c - clock_now (see clock.h).
 */
#include "base/clock.h"

#include <time.h>

struct timespec clock_deadline(double seconds) {
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    double t = (double)dl.tv_sec + (double)dl.tv_nsec * 1e-9 + seconds;
    dl.tv_sec = (time_t)t;
    dl.tv_nsec = (long)((t - (double)dl.tv_sec) * 1e9);
    return dl;
}

double clock_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
