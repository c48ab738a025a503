/*
 * schema_gbnf.c - print the GBNF st_schema_to_gbnf writes for a JSON schema,
 * for tests and for reading a translation (tests/ref/schema_ref.py feeds it
 * to XGrammar as an independent matcher).
 *
 *   build/tools/schema_gbnf [--disable-any-whitespace] [--whitespace-pattern RE]
 *       [--json-object] [FILE]          (FILE or stdin: the schema)
 *   build/tools/schema_gbnf --batch     (stdin: one schema per line, JSON;
 *       stdout: one JSON line per schema, {"gbnf": TEXT} or {"error": MSG})
 *
 * Exit 0 with the grammar on stdout, or 2 with the error on stderr.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "structured/structured.h"

static char *read_all(FILE *f, size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    size_t k;
    while (b && (k = fread(b + n, 1, cap - n, f)) > 0) {
        n += k;
        if (n == cap) {
            char *nb = realloc(b, cap *= 2);
            if (!nb) { free(b); return NULL; }
            b = nb;
        }
    }
    *len = n;
    return b;
}

int main(int argc, char **argv) {
    st_spec opts = {.kind = ST_JSON_SCHEMA};
    const char *path = NULL;
    bool batch = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--disable-any-whitespace")) opts.disable_any_whitespace = true;
        else if (!strcmp(argv[i], "--whitespace-pattern") && i + 1 < argc) opts.whitespace_pattern = argv[++i];
        else if (!strcmp(argv[i], "--json-object")) opts.kind = ST_JSON_OBJECT;
        else if (!strcmp(argv[i], "--batch")) batch = true;
        else path = argv[i];
    }
    if (batch) {
        char *line = NULL;
        size_t cap = 0;
        ssize_t n;
        while ((n = getline(&line, &cap, stdin)) > 0) {
            strbuf g = {0};
            vllm_status rc = st_schema_to_gbnf(line, (size_t)n, &opts, "root", &g);
            json_t *o = rc ? json_pack("{s:s}", "error", vllm_errmsg()) : json_pack("{s:s}", "gbnf", g.s ? g.s : "");
            char *t = json_dumps(o, JSON_COMPACT);
            puts(t);
            fflush(stdout);
            free(t);
            json_decref(o);
            free(g.s);
        }
        free(line);
        return 0;
    }
    FILE *f = path ? fopen(path, "rb") : stdin;
    if (!f) { fprintf(stderr, "error: cannot open %s\n", path); return 2; }
    size_t len;
    char *text = read_all(f, &len);
    if (path) fclose(f);
    if (!text) { fprintf(stderr, "error: out of memory\n"); return 2; }
    strbuf g = {0};
    vllm_status rc = st_schema_to_gbnf(text, len, &opts, "root", &g);
    free(text);
    if (rc) { fprintf(stderr, "error: %s\n", vllm_errmsg()); free(g.s); return 2; }
    fputs(g.s, stdout);
    free(g.s);
    return 0;
}
