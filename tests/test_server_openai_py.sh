#!/usr/bin/env bash
# test_server_openai_py.sh - `vllmc serve` on stories260K driven by the
# official openai Python client from PyPI (tests/ref/openai_py_client.py; the
# Node client's tests are test_server_openai.sh and the feature tests):
# greedy ids against llama2.c, logprob tokens and text offsets, chat
# streaming, echo + logprobs, prompt_logprobs, beam search against the CLI's
# beams (themselves checked against transformers), the Responses API,
# response_format json_schema validated by jsonschema, a 400 naming its field.
# Skipped, never passed, without .venv's openai and jsonschema (scripts/setup.sh).
#
# checks: 9
cd "$(dirname "$0")/.." || exit 1
. tests/server_helpers.sh
py=.venv/bin/python
tmp=$(mktemp -d)
trap 'server_stop_all; rm -rf "$tmp"' EXIT
names=(py_greedy_is_llama2c py_logprob_tokens_and_offsets py_chat_stream py_echo_logprobs py_prompt_logprobs
       py_beam_search py_responses py_json_schema py_bad_request)
if ! "$py" -c 'import openai, jsonschema' 2>/dev/null; then
  for n in "${names[@]}"; do echo "skip $n: $py lacks openai/jsonschema (scripts/setup.sh installs tests/ref/requirements.txt)"; done
  exit 0
fi
echo '{"prompt_token_ids":[1,403]}' > "$tmp/p.jsonl"
"$VLLMC" generate --prompts-file "$tmp/p.jsonl" --beam-width 3 --max-tokens 10 --ignore-eos --json > "$tmp/beams.json" 2>/dev/null
server_start S --served-model-name tiny || exit 0
timeout 300 "$py" tests/ref/openai_py_client.py "$S_URL" models/stories260K/reference_bos_greedy200.json "$tmp/beams.json" 2>&1
exit 0
