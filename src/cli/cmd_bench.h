/*
 * cmd_bench.h - what the `vllmc bench` subcommands share: value parsing with
 * messages naming the flag, and Python-style float printing so the figures
 * read as vLLM prints them (`Avg latency: 1.2345 seconds`).
 */
#ifndef VLLM_CLI_CMD_BENCH_H
#define VLLM_CLI_CMD_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

int cmd_bench_latency(int argc, char **argv);
int cmd_bench_throughput(int argc, char **argv);
int cmd_bench_serve(int argc, char **argv);
int cmd_bench_structured(int argc, char **argv); /* cmd_bench_structured.c: MaskBench */
int cmd_bench_tune(int argc, char **argv);       /* cmd_bench_tune.c: vLLM's auto_tune */

/* Takes the value of flag argv[*i] (inline "--flag=v" or the next argument),
 * advancing *i past it; NULL (and a message) if it is missing. */
const char *bench_flag_value(const char *cmd, const char *name, const char *inline_val, int argc,
                             char **argv, int *i);
bool bench_parse_i32(const char *cmd, const char *flag, const char *s, int32_t lo, int32_t hi, int32_t *out);
/* An integer flag of a command: its name, where its value goes, its least value. */
typedef struct {
    const char *flag;
    int32_t *dst;
    int32_t lo;
} bench_int_flag;
/* When `name` (argv[*i]'s flag name, inline value iv or NULL) is one of the
 * n flags: takes its value (advancing *i) into the flag's dst and returns 1,
 * or -1 after a message when the value is missing or out of range. 0 when
 * name is none of them (*i untouched). */
int bench_parse_int_flag(const char *cmd, const bench_int_flag *flags, size_t n, const char *name,
                         const char *iv, int argc, char **argv, int *i);
bool bench_parse_u64(const char *cmd, const char *flag, const char *s, uint64_t *out);
/* A finite number >= lo (or "inf" when allow_inf). */
bool bench_parse_f64(const char *cmd, const char *flag, const char *s, double lo, bool allow_inf, double *out);
/* Python's repr of a float (shortest round-trip digits: 0.1, 100.0, 1e-05). */
void bench_format_float(char *buf, size_t cap, double v);

#endif
