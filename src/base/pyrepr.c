/*
 * pyrepr.c - Python's float repr (see pyrepr.h).
 *
 * The shortest round-trip digits come from trying %.*e at 1..17 significant
 * digits until strtod gives v back (what Python's 'r' format computes with
 * David Gay's algorithm); the digits are then laid out as Python does.
 */
#include <stdio.h>
#include <stdlib.h>

#include "base/pyrepr.h"

void pyrepr_float(double v, char *out, size_t cap) {
    char buf[64];
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, sizeof buf, "%.*e", p - 1, v);
        if (strtod(buf, NULL) == v) break;
    }
    /* buf: [-]d[.ddd]e[+-]XX */
    char digits[32], res[96];
    int nd = 0;
    size_t o = 0;
    const char *q = buf;
    if (*q == '-') { res[o++] = '-'; q++; }
    for (; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9') digits[nd++] = *q;
    int exp = atoi(q + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;

    if (exp >= -4 && exp < 16) {            /* fixed notation */
        if (exp < 0) {
            res[o++] = '0';
            res[o++] = '.';
            for (int i = 0; i < -exp - 1; i++) res[o++] = '0';
            for (int i = 0; i < nd; i++) res[o++] = digits[i];
        } else {
            for (int i = 0; i <= exp; i++) res[o++] = i < nd ? digits[i] : '0';
            res[o++] = '.';
            if (nd > exp + 1)
                for (int i = exp + 1; i < nd; i++) res[o++] = digits[i];
            else
                res[o++] = '0';
        }
        res[o] = 0;
        snprintf(out, cap, "%s", res);
        return;
    }
    res[o++] = digits[0];                   /* scientific: d[.ddd]e±XX */
    if (nd > 1) {
        res[o++] = '.';
        for (int i = 1; i < nd; i++) res[o++] = digits[i];
    }
    res[o] = 0;
    snprintf(out, cap, "%se%c%02d", res, exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
}
