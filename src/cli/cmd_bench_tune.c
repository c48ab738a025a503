/*
 * cmd_bench_tune.c - `vllmc bench tune`: vLLM's benchmarks/auto_tune as one
 * command. For each candidate server configuration (every combination of
 * the --max-num-seqs, --max-num-batched-tokens and --threads lists) it
 * starts `vllmc serve` on a free local port, runs `vllmc bench serve`
 * against it (the same random dataset, request rate and seed for every
 * candidate), stops the server, and reads the benchmark's saved JSON. The
 * candidate kept is the one with the highest request throughput (vLLM's
 * choice) among those that completed every request and meet every SLO;
 * the table prints every candidate's measurements, then the best flags, or
 * "no configuration met the SLO" (exit status 1).
 *
 *   vllmc bench tune --model M --slo "e2el_p99_ms=2000,ttft_p99_ms=500"
 *       [--request-rate inf] [--num-prompts 32] [--input-len 128] [--output-len 32]
 *       [--max-num-seqs 16,64,256] [--max-num-batched-tokens 512,2048,8192]
 *       [--threads 1,2] [--result-dir DIR]
 *
 * SLOs are the p99 of a latency in milliseconds, as bench serve reports it
 * (p99_ttft_ms, ...): ttft_p99_ms, tpot_p99_ms, itl_p99_ms, e2el_p99_ms;
 * "NAME=MS" items separated by commas or spaces; a candidate meets an SLO
 * when its p99 is at most MS. Each candidate's server log, bench output and
 * result JSON stay in --result-dir (default a new /tmp/vllmc-tune-XXXXXX).
 *
 * The children are this executable (/proc/self/exe), so the tuner measures
 * the build it belongs to. A server that exits before the benchmark ends
 * fails its candidate (the table says so) and the search goes on; SIGINT
 * or SIGTERM stops the running server before the tuner exits.
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/cmd_bench.h"

#define CMD "bench tune"

enum { TUNE_MAX_LIST = 16, TUNE_NUM_SLO = 4 };

/* The SLO names, the bench serve JSON key of each. */
static const char *const slo_names[TUNE_NUM_SLO] = {"ttft_p99_ms", "tpot_p99_ms", "itl_p99_ms", "e2el_p99_ms"};
static const char *const slo_keys[TUNE_NUM_SLO] = {"p99_ttft_ms", "p99_tpot_ms", "p99_itl_ms", "p99_e2el_ms"};

typedef struct tune_list {
    int32_t v[TUNE_MAX_LIST];
    int32_t n;
} tune_list;

typedef struct tune_opts {
    const char *model, *slo_text, *result_dir, *rate;
    double slo[TUNE_NUM_SLO]; /* ms; < 0 = none */
    int32_t num_prompts, input_len, output_len;
    tune_list seqs, tokens, threads; /* threads.n == 0: the server's default */
} tune_opts;

typedef struct tune_result {
    bool ran;                    /* the benchmark produced its JSON */
    char why[96];                /* why not, or what failed */
    int64_t completed;
    double req_s, out_tok_s, p99[TUNE_NUM_SLO];
    bool meets;
} tune_result;

static volatile sig_atomic_t server_pid_live;

static void on_signal(int sig) {
    if (server_pid_live > 0) kill((pid_t)server_pid_live, SIGTERM);
    _exit(128 + sig);
}

static void usage(FILE *f) {
    fputs("usage: vllmc bench tune --model M --slo \"e2el_p99_ms=MS[,ttft_p99_ms=MS,...]\" [options]\n"
          "  finds the server flags with the highest request throughput that meets the SLOs\n"
          "  (vLLM's benchmarks/auto_tune): starts `vllmc serve` with each candidate and runs\n"
          "  `vllmc bench serve` against it\n"
          "  --slo LIST                     NAME=MS items (commas or spaces); NAME one of ttft_p99_ms,\n"
          "                                 tpot_p99_ms, itl_p99_ms, e2el_p99_ms: p99 at most MS ms\n"
          "  --request-rate R               requests/s of the benchmark, or inf (default inf)\n"
          "  --num-prompts N                requests per candidate (default 32)\n"
          "  --input-len N                  random prompt tokens (default 128)\n"
          "  --output-len N                 generated tokens per request (default 32)\n"
          "  --max-num-seqs LIST            candidates, comma-separated (default 16,64,256)\n"
          "  --max-num-batched-tokens LIST  candidates (default 512,2048,8192)\n"
          "  --threads LIST                 candidates (default: the server's default only)\n"
          "  --result-dir DIR               keep each candidate's logs and JSON here\n"
          "                                 (default a new /tmp/vllmc-tune-XXXXXX)\n",
          f);
}

/* "a,b,c" of integers >= 1 into l. */
static bool parse_list(const char *flag, const char *s, tune_list *l) {
    l->n = 0;
    const char *p = s;
    for (;;) {
        char item[32];
        size_t len = strcspn(p, ",");
        if (len == 0 || len >= sizeof item || l->n == TUNE_MAX_LIST) {
            fprintf(stderr, "vllmc " CMD ": argument %s: '%s' is not a list of at most %d integers >= 1 "
                    "separated by commas\n", flag, s, TUNE_MAX_LIST);
            return false;
        }
        memcpy(item, p, len);
        item[len] = 0;
        if (!bench_parse_i32(CMD, flag, item, 1, INT32_MAX, &l->v[l->n++])) return false;
        if (!p[len]) return true;
        p += len + 1;
    }
}

/* --slo "NAME=MS,NAME=MS" (commas or spaces) into o->slo. */
static bool parse_slo(tune_opts *o, const char *s) {
    for (int k = 0; k < TUNE_NUM_SLO; k++) o->slo[k] = -1;
    int count = 0;
    const char *p = s;
    while (*p) {
        size_t len = strcspn(p, ", ");
        if (len == 0) {
            p++;
            continue;
        }
        char item[96];
        if (len >= sizeof item) len = sizeof item - 1;
        memcpy(item, p, len);
        item[len] = 0;
        p += strcspn(p, ", ");
        char *eq = strchr(item, '=');
        int k = -1;
        if (eq) {
            *eq = 0;
            for (int j = 0; j < TUNE_NUM_SLO; j++)
                if (!strcmp(item, slo_names[j])) k = j;
        }
        char *end = NULL;
        double v = eq ? strtod(eq + 1, &end) : NAN;
        if (k < 0 || !end || end == eq + 1 || *end || !(v > 0) || isinf(v)) {
            if (eq) *eq = '=';
            fprintf(stderr, "vllmc " CMD ": argument --slo: '%s' is not NAME=MS (NAME one of ttft_p99_ms, "
                    "tpot_p99_ms, itl_p99_ms, e2el_p99_ms; MS a number of milliseconds > 0)\n", item);
            return false;
        }
        o->slo[k] = v;
        count++;
    }
    if (!count) {
        fprintf(stderr, "vllmc " CMD ": argument --slo: '%s' names no SLO (e.g. \"e2el_p99_ms=2000\")\n", s);
        return false;
    }
    return true;
}

static int parse_args(tune_opts *o, int argc, char **argv) {
    *o = (tune_opts){.rate = "inf", .num_prompts = 32, .input_len = 128, .output_len = 32,
                     .seqs = {{16, 64, 256}, 3}, .tokens = {{512, 2048, 8192}, 3}};
    for (int i = 1; i < argc;) {
        char name[64];
        const char *arg = argv[i], *iv = NULL, *eq = strchr(arg, '=');
        size_t nl = eq ? (size_t)(eq - arg) : strlen(arg);
        if (nl >= sizeof name) nl = sizeof name - 1;
        memcpy(name, arg, nl);
        name[nl] = 0;
        if (eq) iv = eq + 1;
        if (!strcmp(name, "-h") || !strcmp(name, "--help")) {
            usage(stdout);
            return 0;
        }
        const bench_int_flag ints[] = {{"--num-prompts", &o->num_prompts, 1},
                                       {"--input-len", &o->input_len, 1},
                                       {"--output-len", &o->output_len, 1}};
        int r = bench_parse_int_flag(CMD, ints, sizeof ints / sizeof *ints, name, iv, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        const char *v;
        if (!strcmp(name, "--model") || !strcmp(name, "--slo") || !strcmp(name, "--result-dir") ||
            !strcmp(name, "--request-rate") || !strcmp(name, "--max-num-seqs") ||
            !strcmp(name, "--max-num-batched-tokens") || !strcmp(name, "--threads")) {
            if (!(v = bench_flag_value(CMD, name, iv, argc, argv, &i))) return 2;
        } else {
            fprintf(stderr, "vllmc " CMD ": unknown option '%s'\n", arg);
            usage(stderr);
            return 2;
        }
        double rate = 1;
        if (!strcmp(name, "--model")) o->model = v;
        else if (!strcmp(name, "--result-dir")) o->result_dir = v;
        else if (!strcmp(name, "--slo")) o->slo_text = v;
        else if (!strcmp(name, "--request-rate")) {
            if (!bench_parse_f64(CMD, name, v, 0, true, &rate) || !(rate > 0)) {
                if (rate <= 0) fprintf(stderr, "vllmc " CMD ": argument --request-rate: must be > 0\n");
                return 2;
            }
            o->rate = v;
        } else if (!strcmp(name, "--max-num-seqs") && !parse_list(name, v, &o->seqs)) return 2;
        else if (!strcmp(name, "--max-num-batched-tokens") && !parse_list(name, v, &o->tokens)) return 2;
        else if (!strcmp(name, "--threads") && !parse_list(name, v, &o->threads)) return 2;
    }
    if (!o->model || !o->slo_text) {
        fprintf(stderr, "vllmc " CMD ": the following arguments are required: %s\n",
                !o->model && !o->slo_text ? "--model, --slo" : !o->model ? "--model" : "--slo");
        return 2;
    }
    return parse_slo(o, o->slo_text) ? -1 : 2;
}

/* A TCP port free on 127.0.0.1 just now (the kernel's pick). */
static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int port = -1;
    if (!bind(fd, (struct sockaddr *)&a, sizeof a) && !getsockname(fd, (struct sockaddr *)&a, &len))
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

/* Starts exe with argv, stdout and stderr to log; the pid, or -1. */
static pid_t spawn(const char *exe, char *const *args, const char *log) {
    pid_t pid = fork();
    if (pid != 0) return pid;
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
    }
    execv(exe, args);
    _exit(127);
}

static void stop(pid_t pid) {
    if (pid <= 0) return;
    kill(pid, SIGTERM);
    for (int i = 0; i < 200; i++) { /* 10 s, then SIGKILL */
        if (waitpid(pid, NULL, WNOHANG) == pid) return;
        usleep(50000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

static double json_num(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

/* One candidate: server up, benchmark, server down, JSON read. */
static void run_candidate(const tune_opts *o, const char *exe, const char *dir, int idx, int32_t seqs,
                          int32_t tokens, int32_t threads, tune_result *res) {
    *res = (tune_result){0};
    char port_s[16], seqs_s[16], tok_s[16], thr_s[16], np_s[16], in_s[16], out_s[16], url[64];
    char slog[4200], blog[4200], json[4200];
    int port = free_port();
    if (port < 0) {
        snprintf(res->why, sizeof res->why, "no free port: %s", strerror(errno));
        return;
    }
    snprintf(port_s, sizeof port_s, "%d", port);
    snprintf(seqs_s, sizeof seqs_s, "%d", seqs);
    snprintf(tok_s, sizeof tok_s, "%d", tokens);
    snprintf(thr_s, sizeof thr_s, "%d", threads);
    snprintf(np_s, sizeof np_s, "%d", o->num_prompts);
    snprintf(in_s, sizeof in_s, "%d", o->input_len);
    snprintf(out_s, sizeof out_s, "%d", o->output_len);
    snprintf(url, sizeof url, "http://127.0.0.1:%d", port);
    snprintf(slog, sizeof slog, "%s/candidate-%d.server.log", dir, idx);
    snprintf(blog, sizeof blog, "%s/candidate-%d.bench.log", dir, idx);
    snprintf(json, sizeof json, "%s/candidate-%d.json", dir, idx);
    char *sargs[] = {(char *)exe, "serve", (char *)o->model, "--host", "127.0.0.1", "--port", port_s,
                     "--max-num-seqs", seqs_s, "--max-num-batched-tokens", tok_s, "--disable-uvicorn-access-log",
                     threads > 0 ? "--threads" : NULL, thr_s, NULL};
    char *bargs[] = {(char *)exe, "bench", "serve", "--base-url", url, "--model", (char *)o->model,
                     "--tokenizer", (char *)o->model, "--num-prompts", np_s, "--random-input-len", in_s,
                     "--random-output-len", out_s, "--request-rate", (char *)o->rate, "--ignore-eos", "--seed", "0",
                     "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "99",
                     "--ready-check-timeout-sec", "600", "--save-result", "--result-filename", json, NULL};
    unlink(json);
    pid_t server = spawn(exe, sargs, slog);
    if (server < 0) {
        snprintf(res->why, sizeof res->why, "fork: %s", strerror(errno));
        return;
    }
    server_pid_live = server;
    pid_t bench = spawn(exe, bargs, blog);
    int bst = -1;
    bool server_died = false;
    while (bench > 0) {
        if (waitpid(bench, &bst, WNOHANG) == bench) break;
        int sst;
        if (waitpid(server, &sst, WNOHANG) == server) {
            server_died = true;
            stop(bench);
            break;
        }
        usleep(50000);
    }
    if (!server_died) stop(server);
    server_pid_live = 0;
    if (server_died) {
        snprintf(res->why, sizeof res->why, "server exited (candidate-%d.server.log)", idx);
        return;
    }
    json_error_t err;
    json_t *j = json_load_file(json, 0, &err);
    if (!j) {
        snprintf(res->why, sizeof res->why, "bench serve failed (candidate-%d.bench.log)", idx);
        return;
    }
    res->ran = true;
    res->completed = (int64_t)json_num(j, "completed");
    res->req_s = json_num(j, "request_throughput");
    res->out_tok_s = json_num(j, "output_throughput");
    res->meets = res->completed == o->num_prompts;
    if (!res->meets) snprintf(res->why, sizeof res->why, "%lld of %d requests failed",
                              (long long)(o->num_prompts - res->completed), o->num_prompts);
    for (int k = 0; k < TUNE_NUM_SLO; k++) {
        res->p99[k] = json_num(j, slo_keys[k]);
        if (o->slo[k] >= 0 && !(res->p99[k] <= o->slo[k])) res->meets = false; /* NaN fails too */
    }
    json_decref(j);
}

static void print_ms(double v) {
    if (isnan(v)) printf(" %11s", "n/a");
    else printf(" %11.1f", v);
}

int cmd_bench_tune(int argc, char **argv) {
    tune_opts o;
    int rc = parse_args(&o, argc, argv);
    if (rc >= 0) return rc;
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        fprintf(stderr, "vllmc " CMD ": cannot find this executable (/proc/self/exe): %s\n", strerror(errno));
        return 1;
    }
    exe[n] = 0;
    char dir[4000];
    if (o.result_dir) {
        snprintf(dir, sizeof dir, "%s", o.result_dir);
        if (mkdir(dir, 0755) && errno != EEXIST) {
            fprintf(stderr, "vllmc " CMD ": cannot create --result-dir '%s': %s\n", dir, strerror(errno));
            return 1;
        }
    } else {
        snprintf(dir, sizeof dir, "/tmp/vllmc-tune-XXXXXX");
        if (!mkdtemp(dir)) {
            fprintf(stderr, "vllmc " CMD ": cannot create a directory in /tmp: %s\n", strerror(errno));
            return 1;
        }
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);

    int32_t nthr = o.threads.n ? o.threads.n : 1;
    int total = nthr * o.seqs.n * o.tokens.n;
    tune_result *res = calloc((size_t)total, sizeof *res);
    if (!res) {
        fprintf(stderr, "vllmc " CMD ": out of memory\n");
        return 1;
    }
    printf("bench tune: %s, %d candidates, %d prompts x (%d in, %d out) at request rate %s; SLO %s\n", o.model,
           total, o.num_prompts, o.input_len, o.output_len, o.rate, o.slo_text);
    printf("logs and results: %s\n", dir);
    fflush(stdout);
    int best = -1;
    for (int c = 0; c < total; c++) {
        int32_t thr = o.threads.n ? o.threads.v[c / (o.seqs.n * o.tokens.n)] : 0;
        int32_t seqs = o.seqs.v[c / o.tokens.n % o.seqs.n], tok = o.tokens.v[c % o.tokens.n];
        fprintf(stderr, "bench tune: candidate %d/%d: --max-num-seqs %d --max-num-batched-tokens %d", c + 1, total,
                seqs, tok);
        if (thr) fprintf(stderr, " --threads %d", thr);
        fputc('\n', stderr);
        run_candidate(&o, exe, dir, c, seqs, tok, thr, &res[c]);
        if (res[c].meets && (best < 0 || res[c].req_s > res[best].req_s)) best = c;
    }

    printf("\n%9s %7s %12s %22s %9s %12s %11s %11s %11s %11s  %s\n", "candidate", "threads", "max_num_seqs",
           "max_num_batched_tokens", "req/s", "output tok/s", "p99 TTFT ms", "p99 TPOT ms", "p99 ITL ms",
           "p99 E2EL ms", "meets SLO");
    for (int c = 0; c < total; c++) {
        int32_t thr = o.threads.n ? o.threads.v[c / (o.seqs.n * o.tokens.n)] : 0;
        char thr_s[16];
        snprintf(thr_s, sizeof thr_s, thr ? "%d" : "default", thr);
        printf("%9d %7s %12d %22d", c + 1, thr_s, o.seqs.v[c / o.tokens.n % o.seqs.n], o.tokens.v[c % o.tokens.n]);
        const tune_result *r = &res[c];
        if (r->ran) {
            printf(" %9.3f %12.2f", r->req_s, r->out_tok_s);
            for (int k = 0; k < TUNE_NUM_SLO; k++) print_ms(r->p99[k]);
        } else {
            printf(" %9s %12s %11s %11s %11s %11s", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a");
        }
        printf("  %s%s%s%s\n", r->meets ? "yes" : "no", c == best ? " (best)" : "", r->why[0] ? ": " : "", r->why);
    }
    if (best < 0) {
        printf("\nno configuration met the SLO (%s)\n", o.slo_text);
        free(res);
        return 1;
    }
    int32_t thr = o.threads.n ? o.threads.v[best / (o.seqs.n * o.tokens.n)] : 0;
    printf("\nbest: --max-num-seqs %d --max-num-batched-tokens %d", o.seqs.v[best / o.tokens.n % o.seqs.n],
           o.tokens.v[best % o.tokens.n]);
    if (thr) printf(" --threads %d", thr);
    printf("  (%.3f req/s, %.2f output tok/s, candidate %d)\n", res[best].req_s, res[best].out_tok_s, best + 1);
    free(res);
    return 0;
}
