#!/usr/bin/env bash
# test_structured_schema_ref.sh - st_schema_to_gbnf's grammars against
# independent tools: every case of tests/data/schema_cases.json (hand-written
# per JSON Schema keyword) is checked twice by tests/ref/schema_ref.py:
# its labels against jsonschema (Python, with format checking), so a case
# cannot encode our misreading of the spec, and our GBNF
# (build/tools/schema_gbnf) compiled by XGrammar and matched with its
# GrammarMatcher, so the grammar is judged by an engine that is not ours
# (test_structured_schema.c walks the same cases through our matcher).
# Needs .venv with xgrammar, jsonschema, rfc3339-validator, rfc3987, fqdn
# (tests/ref/requirements.txt); without them every case reports skipped.
# checks: 129
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build}
VPY=.venv/bin/python
cases=tests/data/schema_cases.json
names() { /usr/bin/python3 -c 'import json,sys; [print(c["name"]) for c in json.load(open(sys.argv[1]))]' "$cases"; }
if ! "$VPY" -c 'import xgrammar, jsonschema, rfc3339_validator, rfc3987, fqdn' 2>/dev/null; then
  names | while read -r n; do echo "skip $n: .venv lacks xgrammar/jsonschema/rfc3339-validator/rfc3987/fqdn (scripts/setup.sh)"; done
  exit 0
fi
if [ ! -x "$BUILD/tools/schema_gbnf" ]; then
  names | while read -r n; do echo "FAIL $n: $BUILD/tools/schema_gbnf not built"; done
  exit 0
fi
"$VPY" tests/ref/schema_ref.py cases "$cases" --tool "$BUILD/tools/schema_gbnf"
exit 0
