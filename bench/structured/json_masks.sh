#!/usr/bin/env bash
# json_masks.sh - per-token mask times of a JSON grammar (tests/ref/structured_ref.py's)
# on 30 seeded random JSON texts, with the Llama 3 tokenizer: the first walk
# (cold mask cache) and three walks (warm). The indented texts deeper than
# the grammar's ws{0,3} allows are rejected where they break it ("rejected texts").
#   bench/structured/json_masks.sh [BUILD_DIR] [TOKENIZER_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build} tok=${2:-../shared/tokenizers/llama3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 - "$tmp" <<'PY'
import json, random, sys
sys.path.insert(0, "tests/ref")
from structured_ref import JSON_GBNF
d = sys.argv[1]
open(d + "/json.gbnf", "w").write(JSON_GBNF)
rng = random.Random(1)
words = ["alpha", "beta", "gamma", "Ünïcode ✓", "x y z", "hello, world", "42", "null", "tab\there", "quote\"d"]
def val(depth):
    r = rng.random()
    if depth > 3 or r < 0.3:
        return rng.choice([rng.randint(-1000, 100000), rng.random() * 100, True, False, None, rng.choice(words)])
    if r < 0.65:
        return {rng.choice(words) + str(rng.randint(0, 9)): val(depth + 1) for _ in range(rng.randint(1, 4))}
    return [val(depth + 1) for _ in range(rng.randint(0, 4))]
with open(d + "/texts.jsonl", "w") as f:
    for _ in range(30):
        f.write(json.dumps(json.dumps(val(0), ensure_ascii=False, indent=rng.choice([None, 2]))) + "\n")
PY
echo "cold (one walk per text):"
"$build/bench/structured_masks" "$tok" "$tmp/json.gbnf" "$tmp/texts.jsonl" 1
echo "warm (three walks per text):"
"$build/bench/structured_masks" "$tok" "$tmp/json.gbnf" "$tmp/texts.jsonl" 3
