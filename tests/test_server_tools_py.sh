#!/usr/bin/env bash
# test_server_tools_py.sh - tool calling (tool_choice auto with
# --tool-call-parser hermes and llama3_json, required and named, each
# streamed and not),
# reasoning_content (--reasoning-parser deepseek_r1, and a constraint that
# waits for the reasoning's end) and response_format structural_tag through
# `vllmc serve` on stories260K, driven by the official openai Python client
# (tests/ref/openai_tools_client.py says how each is checked). The parsers'
# own cases are tests/test_tool_parser.c; structural_tag's language is
# tests/test_structured_tagged.c. Skipped, never passed, without .venv's
# openai and jsonschema.
#
# checks: 12
# tags: tsan
cd "$(dirname "$0")/.." || exit 1
. tests/server_helpers.sh
py=.venv/bin/python
# start-up refusals, vLLM's messages (no Python needed)
out=""
for a in "--enable-auto-tool-choice" "--tool-call-parser mistral" "--reasoning-parser granite"; do
  # shellcheck disable=SC2086
  msg=$(timeout 120 "$VLLMC" serve --port 0 $a 2>&1 >/dev/null); rc=$?
  out+="$msg rc=$rc"$'\n'
done
if grep -q "Error: --enable-auto-tool-choice requires --tool-call-parser rc=2" <<<"$out" &&
   grep -q "invalid tool call parser: mistral (chose from { hermes,llama3_json,llama4_json }) rc=2" <<<"$out" &&
   grep -q "argument --reasoning-parser: invalid choice: 'granite' (choose from 'deepseek_r1', 'qwen3') rc=2" <<<"$out"; then
  echo "ok serve_parser_flags_refused"
else
  echo "FAIL serve_parser_flags_refused: $out"
fi
names=(py_tools_auto_hermes py_tools_auto_hermes_stream py_tools_auto_llama3_json py_tools_auto_no_call py_tools_required_stream
       py_tools_named_stream py_tools_auto_needs_flags py_reasoning_deepseek_r1 py_reasoning_constraint_after
       py_structural_tag py_structural_tag_bad)
if ! "$py" -c 'import openai, jsonschema' 2>/dev/null; then
  for n in "${names[@]}"; do echo "skip $n: $py lacks openai/jsonschema (scripts/setup.sh installs tests/ref/requirements.txt)"; done
  exit 0
fi
server_start T --served-model-name tiny --enable-auto-tool-choice --tool-call-parser hermes || exit 0
server_start R --served-model-name tiny --reasoning-parser deepseek_r1 || exit 0
server_start L --served-model-name tiny --enable-auto-tool-choice --tool-call-parser llama3_json || exit 0
timeout 300 "$py" tests/ref/openai_tools_client.py "$T_URL" "$R_URL" "$L_URL" 2>&1
exit 0
