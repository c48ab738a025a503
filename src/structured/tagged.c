/*
 * tagged.c - free text with tagged regions, on the GBNF engine: vLLM 0.11's
 * structural_tag (XGrammar's compile_structural_tag) and "the constraint
 * starts after the reasoning ends" (--reasoning-parser).
 *
 * Free text that stops at the first occurrence of any trigger string is a
 * regular language; its automaton is the trie of the triggers with
 * Aho-Corasick fallbacks (state = the longest suffix of the text that is a
 * prefix of some trigger), written as one GBNF rule per state:
 *
 *     F-q ::= ( "c1" F-a | "c2" F-b | ... | [^c1 c2 ...] F-0 )?
 *
 * with one alternative per character that leads somewhere other than the
 * start state, the negated class for every other character (back to F-0),
 * and `?` because the text may end in any state. A character that completes
 * a trigger goes to that trigger's continuation instead of a state:
 *
 *   structural_tag: the rest of each structure's begin that starts with the
 *     trigger, the structure's schema (st_schema_to_gbnf, rules prefixed
 *     sttagN), its end, then free text again (F-0);
 *   reasoning: the end-of-think string, then the request's own grammar
 *     (its `root` renamed), so the mask is free until the reasoning ends,
 *     as vLLM applies a grammar only after the reasoning parser's end token.
 *
 * A trigger is taken as soon as it is complete (a trigger that extends
 * another is never reached); a structure's begin must start with a trigger
 * (XGrammar's rule), the shortest one that prefixes it.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "structured/st_internal.h"
#include "structured/structured.h"

typedef struct cps {
    uint32_t *c;
    int n;
} cps;

/* UTF-8 -> code points (not NUL-terminated). */
static vllm_status to_cps(const char *s, size_t len, cps *out) {
    out->c = malloc((len + 1) * sizeof *out->c);
    out->n = 0;
    if (!out->c) return vllm_error(VLLM_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < len;) {
        unsigned char b = (unsigned char)s[i];
        int extra = b < 0x80 ? 0 : b >= 0xf0 ? 3 : b >= 0xe0 ? 2 : b >= 0xc0 ? 1 : -1;
        if (extra < 0 || i + (size_t)extra >= len + (extra ? 0 : 1)) goto bad;
        uint32_t c = extra ? b & (0x3f >> extra) : b;
        for (int k = 1; k <= extra; k++) {
            if (((unsigned char)s[i + k] & 0xc0) != 0x80) goto bad;
            c = (c << 6) | ((unsigned char)s[i + k] & 0x3f);
        }
        out->c[out->n++] = c;
        i += (size_t)extra + 1;
    }
    return VLLM_OK;
bad:
    free(out->c);
    out->c = NULL;
    return vllm_error(VLLM_ERR_INVALID, "text is not valid UTF-8");
}

/* The automaton's states: (trigger, length) pairs naming distinct prefixes. */
typedef struct fsm {
    const cps *trig;
    int ntrig;
    int nstates;
    int *st_trig, *st_len; /* state -> a trigger and a prefix length; state 0 = empty */
} fsm;

static bool same_prefix(const fsm *f, int t1, int l1, int t2, int l2) {
    return l1 == l2 && !memcmp(f->trig[t1].c, f->trig[t2].c, (size_t)l1 * sizeof(uint32_t));
}

static int state_of(const fsm *f, int t, int l) {
    for (int s = 0; s < f->nstates; s++)
        if (same_prefix(f, f->st_trig[s], f->st_len[s], t, l)) return s;
    return -1;
}

/* The text of state s followed by c: a completed trigger (*done >= 0), or
 * the state of its longest suffix that prefixes a trigger. */
static int step(const fsm *f, int s, uint32_t c, int *done) {
    int L = f->st_len[s];
    const uint32_t *q = f->trig[f->st_trig[s]].c;
    *done = -1;
    /* suffixes of q[0..L) + c, longest first */
    for (int k = L + 1; k >= 1; k--) {
        const uint32_t *suf = q + (L + 1 - k); /* k-1 chars of q, then c */
        for (int t = 0; t < f->ntrig; t++) {
            if (f->trig[t].n < k) continue;
            if (k > 1 && memcmp(f->trig[t].c, suf, (size_t)(k - 1) * sizeof(uint32_t))) continue;
            if (f->trig[t].c[k - 1] != c) continue;
            if (f->trig[t].n == k) {
                *done = t;
                return -1;
            }
        }
    }
    for (int k = L + 1; k >= 1; k--) {
        const uint32_t *suf = q + (L + 1 - k);
        for (int t = 0; t < f->ntrig; t++) {
            if (f->trig[t].n <= k) continue;
            if (k > 1 && memcmp(f->trig[t].c, suf, (size_t)(k - 1) * sizeof(uint32_t))) continue;
            if (f->trig[t].c[k - 1] != c) continue;
            return state_of(f, t, k);
        }
    }
    return 0;
}

static vllm_status add_char_lit(strbuf *out, uint32_t c) {
    uint8_t u[4];
    int n = st_utf8_encode(c, u);
    return st_gbnf_append_literal(out, (const char *)u, (size_t)n);
}

/* Rules `<prefix>-<state>` for free text over the triggers; a completed
 * trigger t continues with the GBNF sequence after[t]. The start rule is
 * `<prefix>-0`. */
static vllm_status free_text_rules(const cps *trig, int ntrig, const char *prefix, char *const *after, strbuf *out) {
    fsm f = {trig, ntrig, 1, NULL, NULL};
    int cap = 1;
    for (int t = 0; t < ntrig; t++) cap += trig[t].n;
    f.st_trig = calloc((size_t)cap, sizeof(int));
    f.st_len = calloc((size_t)cap, sizeof(int));
    vllm_status rc = VLLM_OK;
    if (!f.st_trig || !f.st_len) {
        rc = vllm_error(VLLM_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int t = 0; t < ntrig; t++)
        for (int l = 1; l < trig[t].n; l++)
            if (state_of(&f, t, l) < 0) {
                f.st_trig[f.nstates] = t;
                f.st_len[f.nstates++] = l;
            }
    for (int s = 0; s < f.nstates && !rc; s++) {
        char head[96];
        snprintf(head, sizeof head, "%s-%d ::= (", prefix, s);
        rc = sb_add(out, head, strlen(head));
        strbuf cls = {0};
        /* every distinct character of the triggers */
        for (int t = 0; t < ntrig && !rc; t++) {
            for (int i = 0; i < trig[t].n && !rc; i++) {
                uint32_t c = trig[t].c[i];
                bool seen = false;
                for (int t2 = 0; t2 <= t && !seen; t2++)
                    for (int i2 = 0; i2 < (t2 == t ? i : trig[t2].n) && !seen; i2++) seen = trig[t2].c[i2] == c;
                if (seen) continue;
                int done, to = step(&f, s, c, &done);
                if (done < 0 && to == 0) continue;
                char esc[16];
                snprintf(esc, sizeof esc, "\\U%08X", (unsigned)c);
                rc = sb_add(&cls, esc, strlen(esc));
                if (!rc) rc = sb_add(out, " ", 1);
                if (!rc) rc = add_char_lit(out, c);
                char tail[96];
                if (done >= 0) snprintf(tail, sizeof tail, " %s |", after[done]);
                else snprintf(tail, sizeof tail, " %s-%d |", prefix, to);
                if (!rc) rc = sb_add(out, tail, strlen(tail));
            }
        }
        char tail[96];
        snprintf(tail, sizeof tail, "] %s-0 )?\n", prefix);
        if (!rc) rc = sb_add(out, " [^", 3);
        if (!rc && cls.len) rc = sb_add(out, cls.s, cls.len);
        if (!rc) rc = sb_add(out, tail, strlen(tail));
        free(cls.s);
    }
done:
    free(f.st_trig);
    free(f.st_len);
    return rc;
}

/* ---- structural_tag ------------------------------------------------------------ */

vllm_status st_structural_tag_to_gbnf(const char *text, size_t len, const st_spec *opts, strbuf *out) {
    json_error_t je;
    json_t *j = json_loadb(text ? text : "", text ? len : 0, 0, &je);
    json_t *structs = json_object_get(j, "structures"), *triggers = json_object_get(j, "triggers");
    vllm_status rc = VLLM_OK;
    int nt = (int)json_array_size(triggers), ns = (int)json_array_size(structs);
    cps *trig = calloc((size_t)nt + 1, sizeof *trig);
    char **after = calloc((size_t)nt + 1, sizeof *after);
    strbuf *alts = calloc((size_t)nt + 1, sizeof *alts);
    strbuf schemas = {0};
    if (!json_is_object(j)) {
        rc = vllm_error(VLLM_ERR_INVALID, "structural_tag: not a JSON object%s%s", j ? "" : ": ", j ? "" : je.text);
        goto done;
    }
    if (!json_is_array(structs) || !json_is_array(triggers) || !nt) {
        rc = vllm_error(VLLM_ERR_INVALID, "structural_tag: expected \"structures\" (a list of {begin, schema, end}) "
                                          "and \"triggers\" (a non-empty list of strings)");
        goto done;
    }
    if (!trig || !after || !alts) {
        rc = vllm_error(VLLM_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int t = 0; t < nt && !rc; t++) {
        json_t *s = json_array_get(triggers, (size_t)t);
        if (!json_is_string(s) || !json_string_length(s)) {
            rc = vllm_error(VLLM_ERR_INVALID, "structural_tag: triggers[%d]: expected a non-empty string", t);
            break;
        }
        if ((rc = to_cps(json_string_value(s), json_string_length(s), &trig[t])))
            vllm_error_prefix("structural_tag: triggers[%d]", t);
        char name[32];
        snprintf(name, sizeof name, "sttrig%d", t);
        after[t] = strdup(name);
    }
    for (int i = 0; i < ns && !rc; i++) {
        json_t *s = json_array_get(structs, (size_t)i);
        json_t *begin = json_object_get(s, "begin"), *end = json_object_get(s, "end");
        json_t *schema = json_object_get(s, "schema");
        if (!json_is_string(begin) || !json_is_string(end) || !schema) {
            rc = vllm_error(VLLM_ERR_INVALID, "structural_tag: structures[%d]: expected {begin, schema, end} with "
                                              "begin and end strings", i);
            break;
        }
        const char *b = json_string_value(begin);
        size_t bl = json_string_length(begin);
        int best = -1; /* the shortest trigger that prefixes begin */
        for (int t = 0; t < nt; t++) {
            size_t tl = json_string_length(json_array_get(triggers, (size_t)t));
            if (tl <= bl && !memcmp(b, json_string_value(json_array_get(triggers, (size_t)t)), tl) &&
                (best < 0 || tl < json_string_length(json_array_get(triggers, (size_t)best))))
                best = t;
        }
        if (best < 0) {
            rc = vllm_error(VLLM_ERR_INVALID, "structural_tag: structures[%d].begin \"%s\" does not start with any "
                                              "of the triggers", i, b);
            break;
        }
        char root[32];
        snprintf(root, sizeof root, "sttag%d", i);
        char *sj = json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY);
        rc = sj ? st_schema_to_gbnf(sj, strlen(sj), opts, root, &schemas) : vllm_error(VLLM_ERR_NOMEM, "out of memory");
        free(sj);
        if (rc) {
            vllm_error_prefix("structural_tag: structures[%d].schema", i);
            break;
        }
        strbuf *a = &alts[best];
        size_t tl = json_string_length(json_array_get(triggers, (size_t)best));
        if (a->len) rc = sb_add(a, " | ", 3);
        if (!rc && bl > tl) rc = st_gbnf_append_literal(a, b + tl, bl - tl);
        if (!rc) rc = sb_add(a, " ", 1);
        if (!rc) rc = sb_add(a, root, strlen(root));
        if (!rc) rc = sb_add(a, " ", 1);
        if (!rc && json_string_length(end)) rc = st_gbnf_append_literal(a, json_string_value(end), json_string_length(end));
    }
    if (rc) goto done;
    rc = sb_add(out, "root ::= stfree-0\n", 18);
    for (int t = 0; t < nt && !rc; t++) {
        /* a trigger no structure begins with: the text goes on freely */
        char line[64];
        snprintf(line, sizeof line, "%s ::= ", after[t]);
        rc = sb_add(out, line, strlen(line));
        if (!rc && alts[t].len) rc = sb_add(out, "( ", 2);
        if (!rc && alts[t].len) rc = sb_add(out, alts[t].s, alts[t].len);
        if (!rc && alts[t].len) rc = sb_add(out, " ) ", 3);
        if (!rc) rc = sb_add(out, "stfree-0\n", 9);
    }
    if (!rc) rc = free_text_rules(trig, nt, "stfree", after, out);
    if (!rc && schemas.len) rc = sb_add(out, schemas.s, schemas.len);
done:
    for (int t = 0; t < nt; t++) {
        if (trig) free(trig[t].c);
        if (after) free(after[t]);
        if (alts) free(alts[t].s);
    }
    free(trig);
    free(after);
    free(alts);
    free(schemas.s);
    json_decref(j);
    return rc;
}

/* ---- after reasoning ---------------------------------------------------------------- */

/* gbnf with every identifier `root` (outside literals, classes and comments)
 * renamed to `to`. */
static vllm_status rename_root(const char *g, size_t n, const char *to, strbuf *out) {
    vllm_status rc = VLLM_OK;
    size_t i = 0;
    while (i < n && !rc) {
        char ch = g[i];
        size_t j = i + 1;
        if (ch == '"' || ch == '[') {
            char close = ch == '"' ? '"' : ']';
            while (j < n && g[j] != close) j += g[j] == '\\' && j + 1 < n ? 2 : 1;
            if (j < n) j++;
        } else if (ch == '#') {
            while (j < n && g[j] != '\n') j++;
        } else if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' ||
                   ch == '-') {
            while (j < n && ((g[j] >= 'a' && g[j] <= 'z') || (g[j] >= 'A' && g[j] <= 'Z') ||
                             (g[j] >= '0' && g[j] <= '9') || g[j] == '_' || g[j] == '-'))
                j++;
            if (j - i == 4 && !memcmp(g + i, "root", 4)) {
                rc = sb_add(out, to, strlen(to));
                i = j;
                continue;
            }
        }
        rc = sb_add(out, g + i, j - i);
        i = j;
    }
    return rc;
}

vllm_status st_gbnf_after_text(const char *gbnf, size_t len, const char *end, strbuf *out) {
    cps t = {0};
    vllm_status rc = to_cps(end, strlen(end), &t);
    if (rc) return rc;
    char *after[1] = {"stthought-body"};
    rc = sb_add(out, "root ::= stthought-0\n", 21);
    if (!rc) rc = free_text_rules(&t, 1, "stthought", after, out);
    if (!rc) rc = rename_root(gbnf, len, "stthought-body", out);
    if (!rc) rc = sb_add(out, "\n", 1);
    free(t.c);
    return rc;
}
