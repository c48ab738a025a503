#!/usr/bin/env bash
# test_structured_side_by_side.sh - bench/structured/side_by_side.sh (the
# MaskBench report of issue 18) on 3 MaskBench files of three categories
# (--limit 3): the report parses (the engines' table, the targets line, the
# per-category table), and its counts add up for each engine (files =
# compiled + refused + timed out + unreadable; passing <= compiled; the
# instances walked equal those of the compiled files, counted here from the
# files themselves; the masks timed lie between what the valid instances
# need and what all instances could need, from the tokenizer itself), the
# percentiles are ordered, the per-category rows sum to the totals, and the
# table says what the --json-out results say.
# Needs ../shared (MaskBench files, the Llama 3 tokenizer) and .venv with
# xgrammar, llguidance and transformers (tests/ref/requirements.txt):
# without them every check reports itself skipped.
# checks: 8
set -uo pipefail
cd "$(dirname "$0")/.."
VLLMC=${VLLMC:-build/vllmc}
VPY=.venv/bin/python
DATA=../shared/data/maskbench
LLAMA3=../shared/tokenizers/llama3
NAMES="maskbench_sbs_runs maskbench_sbs_counts_ours maskbench_sbs_counts_llguidance maskbench_sbs_counts_xgrammar maskbench_sbs_masks maskbench_sbs_percentiles maskbench_sbs_categories maskbench_sbs_json_matches_table"
FILES="Github_trivial---o27841.json Glaiveai2K---calculate_discounted_total_8ebaa9f0.json Handwritten---pnmp10.json"
skip_all() { for n in $NAMES; do echo "skip $n: $1"; done; exit 0; }
[ -d "$DATA" ] && [ -d "$LLAMA3" ] || skip_all "no ../shared MaskBench data or Llama 3 tokenizer"
for f in $FILES; do [ -f "$DATA/$f" ] || skip_all "no $DATA/$f"; done
[ -x "$VPY" ] && "$VPY" -c 'import xgrammar, llguidance, transformers' 2>/dev/null ||
  skip_all "no .venv with xgrammar, llguidance and transformers (tests/ref/requirements.txt)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/d"
for f in $FILES; do ln -s "$PWD/$DATA/$f" "$tmp/d/$f"; done
# a fourth file, after the three in name order, that --limit 3 must leave out
ln -s "$PWD/$DATA/Github_trivial---o27825.json" "$tmp/d/Synthesized---zzz_not_selected.json"
VLLMC=$VLLMC bench/structured/side_by_side.sh --limit 3 --data "$tmp/d" --tokenizer "$LLAMA3" --xgr-budget 20 \
  --json-out "$tmp/r.json" > "$tmp/r.md" 2> "$tmp/err"
rc=$?
"$VPY" - "$tmp/r.md" "$tmp/r.json" "$tmp/d" "$LLAMA3" "$rc" "$tmp/err" <<'PY'
import json, os, re, sys
md_path, js_path, data, tokdir, rc, err_path = sys.argv[1:]
names = ["maskbench_sbs_runs", "maskbench_sbs_counts_ours", "maskbench_sbs_counts_llguidance", "maskbench_sbs_counts_xgrammar", "maskbench_sbs_masks",
         "maskbench_sbs_percentiles", "maskbench_sbs_categories", "maskbench_sbs_json_matches_table"]
def done(name, why):
    print("ok %s" % name if not why else "FAIL %s: %s" % (name, why))
md = open(md_path).read()
if rc != "0" or not md.strip():
    for n in names:
        done(n, "side_by_side.sh exit %s: %s" % (rc, open(err_path).read().strip()[-300:]))
    sys.exit()
# the markdown tables: lists of rows of cells
tables, cur = [], None
for line in md.splitlines():
    if line.startswith("|"):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cur is None:
            cur = []
            tables.append(cur)
        if not all(re.fullmatch(r"-+", c) for c in cells):
            cur.append(cells)
    else:
        cur = None
def num(s):
    s = s.replace("*", "").replace(",", "").strip()
    return float(s)
why = ""
engines = ["ours", "llguidance", "xgrammar"]
if len(tables) != 2:
    why = "want 2 tables (engines, categories), got %d" % len(tables)
elif [h.split()[0] for h in tables[0][0][1:]] != engines:
    why = "engines' columns %s" % tables[0][0][1:]
elif "Targets (issue 18) for ours:" not in md:
    why = "no targets line"
done("maskbench_sbs_runs", why)
if why:
    for n in names[1:]:
        done(n, "no report")
    sys.exit()
main = {r[0].replace("*", ""): r[1:] for r in tables[0][1:]}
def col(label, i):
    return main[label][i]
# the files themselves: the first 3 in name order, their instances
sel = sorted(f for f in os.listdir(data) if f.endswith(".json"))[:3]
docs = {f: json.load(open(os.path.join(data, f))) for f in sel}
res = json.load(open(js_path))
if res["files"] != sel:
    for n in names[1:]:
        done(n, "selected %s, want %s" % (res["files"], sel))
    sys.exit()
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(tokdir)
ntok = {f: [(t["valid"], len(tok.encode(json.dumps(t["data"], ensure_ascii=False), add_special_tokens=False)))
            for t in d["tests"]] for f, d in docs.items()}
for i, e in enumerate(engines):
    why = ""
    n = {k: int(num(col(k, i))) for k in ("files", "compiled", "refused (compile error)", "timed out", "unreadable",
                                          "passing")}
    va, vn = (int(num(x)) for x in col("valid accepted / valid", i).split("/"))
    ia, inn = (int(num(x)) for x in col("invalid accepted / invalid", i).split("/"))
    if n["files"] != 3:
        why = "files %d, want 3" % n["files"]
    elif n["compiled"] + n["refused (compile error)"] + n["timed out"] + n["unreadable"] != 3:
        why = "compiled + refused + timed out + unreadable = %s, want 3" % n
    elif not n["passing"] <= n["compiled"] or not va <= vn or not ia <= inn:
        why = "passing %d > compiled %d, or accepted > walked (%d/%d, %d/%d)" % (n["passing"], n["compiled"], va, vn, ia, inn)
    else:
        # which files compiled is in the per-file-free JSON only as counts: the walked instances must be those
        # of some n["compiled"] of the 3 files
        import itertools
        fits = [c for c in itertools.combinations(sel, n["compiled"])
                if sum(v for f in c for v, _ in ntok[f]) == vn and sum(not v for f in c for v, _ in ntok[f]) == inn]
        if not fits:
            why = "valid %d / invalid %d walked: no %d of the files have that many" % (vn, inn, n["compiled"])
    done("maskbench_sbs_counts_" + e, why)
why = ""
for i, e in enumerate(engines):
    masks = int(num(col("masks timed", i)))
    r = res["engines"][e]
    va, vn = r["valid_accepted"], r["valid"]
    # every accepted valid instance took len+1 masks; no instance more than len+1; at least one mask per instance
    all_max = sum(k + 1 for f in sel for _, k in ntok[f])
    if not (r["invalid"] + vn <= masks <= all_max):
        why += "%s: %d masks outside [%d, %d]; " % (e, masks, r["invalid"] + vn, all_max)
    if va == vn and vn and r["compiled"] == 3 and masks < sum(k + 1 for f in sel for v, k in ntok[f] if v):
        why += "%s: %d masks, fewer than the valid instances need; " % (e, masks)
done("maskbench_sbs_masks", why)
why = ""
order = ["avg", "p50", "p75", "p90", "p95", "p99", "p99.9", "max"]
for i, e in enumerate(engines):
    for what in ("compile", "mask"):
        unit = "ms" if what == "compile" else "µs"
        v = [num(col("%s %s %s" % (what, p, unit), i)) for p in order]
        if any(x < 0 for x in v) or any(v[k] > v[k + 1] for k in range(1, 7)) or not v[0] <= v[7]:
            why += "%s %s percentiles out of order %s; " % (e, what, v)
done("maskbench_sbs_percentiles", why)
why = ""
cats = tables[1]
if [c for c in cats[0][:2]] != ["category", "files"]:
    why = "categories' header %s" % cats[0]
else:
    want = sorted({f.split("---")[0] for f in sel})
    got = [r[0] for r in cats[1:]]
    if got != want:
        why = "categories %s, want %s" % (got, want)
    elif sum(int(r[1]) for r in cats[1:]) != 3:
        why = "category files sum to %d" % sum(int(r[1]) for r in cats[1:])
    else:
        for i, e in enumerate(engines):
            p = sum(int(r[2].split("/")[i]) for r in cats[1:])
            if p != int(num(col("passing", i))):
                why += "%s: categories' passing sum %d != %s; " % (e, p, col("passing", i))
done("maskbench_sbs_categories", why)
why = ""
for i, e in enumerate(engines):
    r = res["engines"][e]
    if int(num(col("passing", i))) != r["passing"] or int(num(col("masks timed", i))) != r["mask_us"]["n"] or \
            int(num(col("compiled", i))) != r["compiled"]:
        why += "%s: table and JSON differ; " % e
    if abs(num(col("mask p50 µs", i)) - r["mask_us"]["p50"]) > 0.051 * max(1, r["mask_us"]["p50"]):
        why += "%s: mask p50 %s vs %g; " % (e, col("mask p50 µs", i), r["mask_us"]["p50"])
done("maskbench_sbs_json_matches_table", why)
PY
