#!/usr/bin/env bash
# test_structured_cli.sh - `vllmc structured check` (the acceptance checks'
# tool): its output format and errors, regexes against Python's re.fullmatch
# (tests/ref/structured_ref.py regex, an independent regex engine) on the
# bundled stories260K and on Llama 3 (../shared), and whole token masks
# against xgrammar's (tests/ref/structured_ref.py xgrammar; .venv with
# xgrammar and transformers, tests/ref/requirements.txt) on Llama 3.
# What needs ../shared or the .venv reports itself skipped.
# Prints "ok NAME" / "FAIL NAME: reason" lines for tests/run.sh.
# checks: 37
set -uo pipefail
cd "$(dirname "$0")/.."
VLLMC=${VLLMC:-build/vllmc}
PY=/usr/bin/python3
VPY=.venv/bin/python
STORIES=models/stories260K
LLAMA3=../shared/tokenizers/llama3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

ok() { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; }
skip() { echo "skip $1: $2"; }

# 1. the output: one compile line, one line per candidate, exact keys
# (stories260K's Metaspace prepends "▁" to a text: its first token's bytes start with a space)
printf '%s\n' '"yes"' '"ye"' '"nope"' |
  "$VLLMC" structured check --tokenizer "$STORIES" --choice " yes" " no" > "$tmp/out" 2> "$tmp/err"
rc=$?
why=$($PY - "$tmp/out" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
keys = ["accepted", "complete", "tokens", "rejected_at", "mask_us_max", "mask_us_total"]
if len(lines) != 4 or list(lines[0]) != ["compile_us"] or not isinstance(lines[0]["compile_us"], (int, float)):
    print("want {compile_us} then 3 lines, got", lines); sys.exit()
for l in lines[1:]:
    if list(l) != keys: print("keys", list(l)); sys.exit()
a, b, c = lines[1:]
# "yes" whole; "ye" a prefix (accepted, not complete); "nope" rejected at some token
if not (a["accepted"] and a["complete"] and a["rejected_at"] is None and a["tokens"] >= 1):
    print("yes:", a)
elif not (b["accepted"] and not b["complete"] and b["rejected_at"] is None):
    print("ye:", b)
elif c["accepted"] or c["complete"] or c["rejected_at"] is None or c["rejected_at"] >= c["tokens"]:
    print("nope:", c)
elif any(l["mask_us_total"] < l["mask_us_max"] or l["mask_us_max"] <= 0 for l in lines[1:]):
    print("timings", lines[1:])
PY
)
if [ $rc -ne 0 ]; then fail cli_output "exit $rc: $(head -2 "$tmp/err")"
elif [ -n "$why" ]; then fail cli_output "$why"
else ok cli_output; fi

# 2. a constraint that does not compile: exit 2, the message on stderr, nothing on stdout
bad_case() { # NAME WANT_IN_MESSAGE ARGS...
  local name=$1 want=$2; shift 2
  echo '"x"' | "$VLLMC" structured check --tokenizer "$STORIES" "$@" > "$tmp/out" 2> "$tmp/err"
  local rc=$?
  if [ $rc -ne 2 ]; then fail "$name" "exit $rc, want 2"
  elif [ -s "$tmp/out" ]; then fail "$name" "stdout: $(head -c 200 "$tmp/out")"
  elif ! grep -qF -- "$want" "$tmp/err"; then fail "$name" "stderr '$(head -c 300 "$tmp/err")' lacks '$want'"
  else ok "$name"; fi
}
bad_case cli_regex_lookahead "lookahead (?= is not supported at offset 3" --regex 'abc(?=d)'
printf 'root ::= "a" | ( "b"\n' > "$tmp/bad.gbnf"
bad_case cli_grammar_unbalanced "line 1 column 16: unbalanced parentheses" --grammar "$tmp/bad.gbnf"
printf 'root ::= item+\n' > "$tmp/undef.gbnf"
bad_case cli_grammar_undefined "line 1 column 10: undefined rule 'item'" --grammar "$tmp/undef.gbnf"
echo '{"properties": {"tags": {"type": "array", "uniqueItems": true}}}' > "$tmp/schema.json"
bad_case cli_schema_unsupported "properties.tags: uniqueItems is not supported" --json-schema "$tmp/schema.json"

# 3. a grammar file, stdin lines that are not JSON strings: exit 1 naming the line
printf 'root ::= [a-z]+\n' > "$tmp/ok.gbnf"
printf '%s\n' '"abc"' '42' | "$VLLMC" structured check --tokenizer "$STORIES" --grammar "$tmp/ok.gbnf" \
  > "$tmp/out" 2> "$tmp/err"
rc=$?
if [ $rc -eq 1 ] && grep -q "stdin line 2" "$tmp/err" && [ "$(wc -l < "$tmp/out")" -eq 2 ]; then ok cli_bad_line
else fail cli_bad_line "exit $rc, stderr $(head -c 200 "$tmp/err")"; fi

# 4. regexes against Python's re (stories260K: always; Llama 3: when ../shared is here)
$PY tests/ref/structured_ref.py regex "$VLLMC" "$STORIES" spm
if [ -d "$LLAMA3" ]; then
  $PY tests/ref/structured_ref.py regex "$VLLMC" "$LLAMA3" bpe
else
  for k in $(seq 0 11); do skip "regex_bpe_$k" "$LLAMA3 is not here"; done
fi

# 5. whole masks against xgrammar on Llama 3
xg_names="json arith_left_recursive utf8_classes repetition nullable right_recursive dates_regexlike"
if [ ! -d "$LLAMA3" ]; then
  for n in $xg_names; do skip "xgrammar_$n" "$LLAMA3 is not here"; done
elif ! $VPY -c 'import xgrammar, transformers' 2> /dev/null; then
  for n in $xg_names; do skip "xgrammar_$n" "$VPY lacks xgrammar/transformers (scripts/setup.sh installs them from PyPI)"; done
else
  $VPY tests/ref/structured_ref.py xgrammar "$VLLMC" "$LLAMA3"
fi
