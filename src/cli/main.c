/* main.c - vllmc: the command-line front door (generate, tokenize, detokenize, ...). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: vllmc <command> [options]\n"
            "commands:\n"
            "  generate     offline generation (--model DIR --prompt TEXT ...)\n"
            "  tokenize     JSON strings on stdin -> JSON id arrays on stdout\n"
            "  detokenize   JSON id arrays on stdin -> JSON strings on stdout\n"
            "  serve        OpenAI-compatible API server (vllmc serve [MODEL] --port 8000 ...)\n"
            "  proxy        disaggregated prefill/decode front (vllmc proxy --prefill URL --decode URL)\n"
            "  bench        latency | throughput | serve benchmarks (vllm bench ...)\n"
            "  structured   check a constraint against texts (structured check --tokenizer DIR ...)\n"
            "Run 'vllmc <command> --help' for its options.\n");
}

const char *cli_default_model_dir(void) {
    static char dir[PATH_MAX];
    const char *env = getenv("VLLMC_MODEL_DIR");
    if (env && *env) return env;
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            if (snprintf(dir, sizeof dir, "%s/../models/stories260K", exe) < (int)sizeof dir &&
                access(dir, R_OK) == 0)
                return dir;
        }
    }
    return "models/stories260K";
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "generate")) return cmd_generate(argc - 1, argv + 1);
    if (!strcmp(cmd, "tokenize")) return cmd_tokenize(argc - 1, argv + 1);
    if (!strcmp(cmd, "detokenize")) return cmd_detokenize(argc - 1, argv + 1);
    if (!strcmp(cmd, "serve")) return cmd_serve(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) return cmd_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "structured")) return cmd_structured(argc - 1, argv + 1);
    if (!strcmp(cmd, "proxy")) return cmd_proxy(argc - 1, argv + 1);
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "vllmc: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
