/*
 * lora_args.c - vLLM's LoRA flags for `vllmc serve` and `vllmc generate`:
 *
 *   --enable-lora                 LoRA on (vllm_engine_args.enable_lora)
 *   --max-loras N                 distinct adapters in one step (1)
 *   --max-lora-rank N             the largest rank accepted (16)
 *   --max-cpu-loras N             adapters kept loaded at once (no limit)
 *   --lora-modules M [M ...]      adapters loaded at start-up: name=path, or
 *                                 JSON {"name": .., "path": .., "base_model_name": ..}
 *   --lora NAME=PATH              (generate) the same as one --lora-modules entry
 *
 * engine_args_parse calls lora_args_parse first; the modules are kept here
 * (the CLI runs one engine per process) until lora_args_load loads them
 * into the engine after it is created. vLLM's --lora-modules takes several
 * values: every following argument without a leading "--" is one more.
 */
#include "cli/lora_args.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "cli/engine_args.h"

static lora_args_module modules[LORA_ARGS_MAX];
static int num_modules;
static int default_module = -1;      /* the last --lora */

static int bad(const char *name, const char *v, const char *why) {
    fprintf(stderr, "vllmc: argument %s: invalid value '%s': %s\n", name, v, why);
    return -1;
}

/* One --lora-modules value into modules[]. */
static int add_module(const char *flag, const char *v) {
    if (num_modules >= LORA_ARGS_MAX) return bad(flag, v, "too many adapters (64 at most)");
    lora_args_module *m = &modules[num_modules];
    memset(m, 0, sizeof *m);
    if (v[0] == '{') {
        json_error_t err;
        json_t *o = json_loads(v, 0, &err);
        const char *name = json_string_value(json_object_get(o, "name"));
        const char *path = json_string_value(json_object_get(o, "path"));
        const char *base = json_string_value(json_object_get(o, "base_model_name"));
        if (!o || !json_is_object(o) || !name || !path) {
            json_decref(o);
            return bad(flag, v, "expected JSON {\"name\": ..., \"path\": ..., \"base_model_name\": ...}");
        }
        snprintf(m->name, sizeof m->name, "%s", name);
        snprintf(m->path, sizeof m->path, "%s", path);
        if (base) snprintf(m->base_model_name, sizeof m->base_model_name, "%s", base);
        json_decref(o);
    } else {
        const char *eq = strchr(v, '=');
        if (!eq || eq == v || !eq[1]) return bad(flag, v, "expected name=path or JSON");
        snprintf(m->name, sizeof m->name, "%.*s", (int)(eq - v), v);
        snprintf(m->path, sizeof m->path, "%s", eq + 1);
    }
    num_modules++;
    return 0;
}

static bool parse_pos(const char *v, int32_t *out, bool zero_ok) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < (zero_ok ? 0 : 1) || x > 1 << 20) return false;
    *out = (int32_t)x;
    return true;
}

int lora_args_parse(vllm_engine_args *a, int argc, char **argv, int *i) {
    char name[64];
    const char *inline_val = engine_args_flag_name(argv[*i], name, sizeof name);
    if (!strcmp(name, "--enable-lora")) {
        if (inline_val) return bad(name, inline_val, "takes no value");
        a->enable_lora = true;
        (*i)++;
        return 1;
    }
    if (strcmp(name, "--max-loras") && strcmp(name, "--max-lora-rank") && strcmp(name, "--max-cpu-loras") &&
        strcmp(name, "--lora-modules") && strcmp(name, "--lora"))
        return 0;
    const char *v = inline_val;
    int used = 1;
    if (!v) {
        if (*i + 1 >= argc) {
            fprintf(stderr, "vllmc: argument %s: expected %s\n", name,
                    strcmp(name, "--lora-modules") ? "one argument" : "at least one argument");
            return -1;
        }
        v = argv[*i + 1];
        used = 2;
    }
    if (!strcmp(name, "--max-loras")) {
        if (!parse_pos(v, &a->max_loras, false)) return bad(name, v, "expected a positive integer");
    } else if (!strcmp(name, "--max-lora-rank")) {
        if (!parse_pos(v, &a->max_lora_rank, false) || a->max_lora_rank > 1024)
            return bad(name, v, "expected an integer in 1..1024");
    } else if (!strcmp(name, "--max-cpu-loras")) {
        if (!parse_pos(v, &a->max_cpu_loras, false)) return bad(name, v, "expected a positive integer");
    } else {
        if (add_module(name, v) != 0) return -1;
        if (!inline_val && !strcmp(name, "--lora-modules")) /* nargs='+' */
            while (*i + used < argc && strncmp(argv[*i + used], "--", 2)) {
                if (add_module(name, argv[*i + used]) != 0) return -1;
                used++;
            }
        if (!strcmp(name, "--lora")) { /* generate's shorthand implies LoRA, and is the prompts' adapter */
            a->enable_lora = true;
            default_module = num_modules - 1;
        }
    }
    *i += used;
    return 1;
}

int lora_args_modules(const lora_args_module **out) {
    *out = modules;
    return num_modules;
}

vllm_status lora_args_load(vllm_engine *e, const vllm_engine_args *a) {
    if (num_modules && !a->enable_lora)
        return vllm_error(VLLM_ERR_INVALID, "--lora-modules needs --enable-lora");
    for (int i = 0; i < num_modules; i++) {
        vllm_status rc = vllm_engine_load_lora(e, modules[i].name, modules[i].path);
        if (rc != VLLM_OK) return rc;
    }
    return VLLM_OK;
}

const char *lora_args_default(void) { return default_module >= 0 ? modules[default_module].name : NULL; }

const char *lora_args_base_model_name(const char *name) {
    for (int i = 0; i < num_modules; i++)
        if (!strcmp(modules[i].name, name)) return modules[i].base_model_name[0] ? modules[i].base_model_name : NULL;
    return NULL;
}

void lora_args_usage(FILE *f) {
    fprintf(f, "  --enable-lora                   serve LoRA adapters (docs/lora.md)\n"
               "  --lora-modules M [M ...]        adapters to load at start: name=path or JSON\n"
               "                                  {\"name\":..,\"path\":..,\"base_model_name\":..}\n"
               "  --max-loras N                   distinct adapters in one step (1)\n"
               "  --max-lora-rank N               largest adapter rank accepted (16)\n"
               "  --max-cpu-loras N               adapters loaded at once (no limit)\n");
}
