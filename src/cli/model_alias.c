/*
 * model_alias.c - see model_alias.h. The table is the one place that knows
 * the file names scripts/fetch_models.sh writes; the template file is found
 * next to the binary (../examples/, as the bundled model is found in
 * ../models/) or, failing that, relative to the working directory.
 */
#include "cli/model_alias.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"

typedef struct model_alias {
    const char *name;
    const char *file;          /* in the model cache */
    const char *chat_template; /* under examples/, for a file without one; or NULL */
} model_alias;

static const model_alias aliases[] = {
    {"smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", NULL},
    {"gemma3", "gemma-3-270m-q4_k_m.gguf", "template_gemma.jinja"},
};

/* examples/NAME next to the binary, else relative to the working directory. */
static const char *examples_file(const char *name, char *buf, size_t n) {
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            if ((size_t)snprintf(buf, n, "%s/../examples/%s", exe, name) < n && access(buf, R_OK) == 0) return buf;
        }
    }
    snprintf(buf, n, "examples/%s", name);
    return buf;
}

vllm_status model_alias_resolve(const char **model, const char **chat_template) {
    static char path[PATH_MAX], tmpl[PATH_MAX];
    struct stat st;
    if (!*model || stat(*model, &st) == 0) return VLLM_OK;
    const model_alias *a = NULL;
    for (size_t i = 0; i < sizeof aliases / sizeof *aliases; i++)
        if (!strcmp(*model, aliases[i].name)) a = &aliases[i];
    if (!a) return VLLM_OK;
    const char *cache = getenv("VLLMC_MODEL_CACHE"), *home = getenv("HOME");
    int w = cache && *cache ? snprintf(path, sizeof path, "%s/%s", cache, a->file)
                            : snprintf(path, sizeof path, "%s/.cache/vllmc/models/%s", home ? home : "", a->file);
    if (w < 0 || (size_t)w >= sizeof path) return vllm_error(VLLM_ERR_INVALID, "model %s: cache path too long", a->name);
    if (stat(path, &st) != 0)
        return vllm_error(VLLM_ERR_NOT_FOUND, "model %s: %s is not fetched yet; run scripts/fetch_models.sh %s "
                                              "(or make serve MODEL=%s)", a->name, path, a->name, a->name);
    *model = path;
    if (chat_template && !*chat_template && a->chat_template)
        *chat_template = examples_file(a->chat_template, tmpl, sizeof tmpl);
    return VLLM_OK;
}
