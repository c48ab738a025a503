#!/usr/bin/env bash
# side_by_side.sh - MaskBench (JSONSchemaBench) with our engine, llguidance and
# XGrammar on the same files and the same tokenizer, in one run; prints a
# markdown report (the engines' table, the targets, a per-category table).
#
#   bench/structured/side_by_side.sh [--engines ours,llguidance,xgrammar]
#       [--every K] [--limit N] [--xgr-budget S] [--wall] [--data DIR]
#       [--tokenizer DIR] [--vllmc PATH] [--json-out FILE] [--progress] [--report-from FILE]
#
# Defaults: ../shared/data/maskbench, ../shared/tokenizers/llama3, every file,
# thread CPU clocks, XGrammar's compile budget 10 CPU s per schema; see
# bench/structured/side_by_side.py for the method. Python: .venv (the
# project's, tests/ref/requirements.txt) if it has xgrammar and llguidance,
# else bench/structured/.venv, made here on first use from
# bench/structured/requirements.txt (pinned, PyPI; --system-site-packages so
# that Debian's python3-torch satisfies xgrammar's torch). vllmc: $VLLMC or
# build/vllmc (built if missing). Progress on stderr, the report on stdout.
set -euo pipefail
cd "$(dirname "$0")/../.."
has() { [ -x "$1/bin/python" ] && "$1/bin/python" -c 'import xgrammar, llguidance, transformers' 2>/dev/null; }
venv=.venv
if ! has "$venv"; then
  venv=bench/structured/.venv
  if ! has "$venv"; then
    echo "side_by_side: making $venv from bench/structured/requirements.txt (PyPI)" >&2
    /usr/bin/python3 -m venv --system-site-packages "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check -r bench/structured/requirements.txt >&2
  fi
fi
VLLMC=${VLLMC:-build/vllmc}
[ -x "$VLLMC" ] || make -j2 build/vllmc >&2
export VLLMC
exec "$venv/bin/python" bench/structured/side_by_side.py "$@"
