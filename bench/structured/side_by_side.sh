#!/usr/bin/env bash
# side_by_side.sh - MaskBench (JSONSchemaBench) with our engine, llguidance and
# XGrammar on the same files and the same tokenizer, in one run, one table.
#
#   bench/structured/side_by_side.sh [--limit N] [--every K] [--data DIR] [--tokenizer DIR]
#
# Defaults: ../shared/data/maskbench, ../shared/tokenizers/llama3, every file.
# Ours is `vllmc bench structured`; the others are bench/structured/ref_bench.py
# in bench/structured/.venv (made here on first use: xgrammar, llguidance,
# jsonschema and transformers from PyPI; --system-site-packages so that Debian's
# python3-torch satisfies xgrammar's torch). One thread each, one after another.
# Mask times are per token (the mask after the last token included); compile
# times per schema; "passing": compiled, every valid instance accepted, every
# invalid one rejected.
set -euo pipefail
cd "$(dirname "$0")/../.."
limit=0 every=1 data=../shared/data/maskbench tok=../shared/tokenizers/llama3
while [ $# -gt 0 ]; do
  case $1 in
    --limit) limit=$2; shift 2 ;;
    --every) every=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --tokenizer) tok=$2; shift 2 ;;
    *) echo "usage: $0 [--limit N] [--every K] [--data DIR] [--tokenizer DIR]" >&2; exit 2 ;;
  esac
done
venv=bench/structured/.venv
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import xgrammar, llguidance, jsonschema, transformers' 2>/dev/null; then
  echo "side_by_side: making $venv (xgrammar, llguidance, jsonschema, transformers from PyPI)" >&2
  /usr/bin/python3 -m venv --system-site-packages "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check xgrammar==0.2.8 llguidance jsonschema==4.26.0 transformers >&2
fi
[ -x build/vllmc ] || make -j2 build/vllmc >&2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
args=(--tokenizer "$tok" --data "$data" --every "$every")
[ "$limit" -gt 0 ] && args+=(--limit "$limit")
build/vllmc bench structured "${args[@]}" --json > "$tmp/ours.json" 2> "$tmp/ours.err" || true
for e in llguidance xgrammar; do
  OMP_NUM_THREADS=1 "$venv/bin/python" bench/structured/ref_bench.py --engine $e "${args[@]}" --json > "$tmp/$e.json" 2> "$tmp/$e.err" || {
    echo "side_by_side: $e failed: $(tail -3 "$tmp/$e.err")" >&2; echo '{}' > "$tmp/$e.json"; }
done
/usr/bin/python3 - "$tmp" <<'PY'
import json, sys, os
d = sys.argv[1]
rows = []
for name in ("ours", "llguidance", "xgrammar"):
    try:
        rows.append((name, json.load(open(os.path.join(d, name + ".json")))))
    except Exception:
        rows.append((name, {}))
def f(r, *k):
    x = r
    for kk in k:
        x = x.get(kk, {}) if isinstance(x, dict) else {}
    return x if not isinstance(x, dict) else None
cols = [("files", ("files",), "%d"), ("compiled", ("compiled",), "%d"), ("refused", ("refused",), "%d"),
        ("passing", ("passing",), "%d"), ("valid acc", ("valid_accepted",), "%d"), ("valid", ("valid",), "%d"),
        ("INVALID acc", ("invalid_accepted",), "%d"), ("invalid", ("invalid",), "%d"),
        ("compile p50 ms", ("compile_ms", "p50"), "%.2f"), ("compile p99 ms", ("compile_ms", "p99"), "%.1f"),
        ("mask avg us", ("mask_us", "avg"), "%.1f"), ("mask p50 us", ("mask_us", "p50"), "%.1f"),
        ("mask p99 us", ("mask_us", "p99"), "%.1f"), ("mask max us", ("mask_us", "max"), "%.0f"),
        ("seconds", ("seconds",), "%.0f")]
print("%-16s" % "" + "".join("%14s" % n for n, _ in rows))
for label, key, fmt in cols:
    cells = []
    for _, r in rows:
        v = f(r, *key)
        cells.append("%14s" % (fmt % v if v is not None else "-"))
    print("%-16s" % label + "".join(cells))
PY
