#!/usr/bin/env bash
# test_server_openapi.sh - live responses of `vllmc serve` (stories260K)
# validated against OpenAI's published OpenAPI schema
# (../shared/data/openai-openapi/openapi.yaml, with Python's jsonschema:
# tests/ref/openapi_check.py), except where vLLM 0.11 deliberately differs and
# vllm.c keeps vLLM's behaviour: openapi_check.py --vllm-differences takes out
# exactly those (docs/openai_compat.md lists them), nothing else. The Responses
# API's objects and events are checked by test_server_responses.sh.
# Skipped, never passed, without ../shared or .venv's jsonschema + pyyaml.
#
# checks: 12
cd "$(dirname "$0")/.." || exit 1
. tests/server_helpers.sh
spec=../shared/data/openai-openapi/openapi.yaml
py=.venv/bin/python
tmp=$(mktemp -d)
trap 'server_stop_all; rm -rf "$tmp"' EXIT

# validate NAME COMPONENT FILE [--strict]
validate() {
  local name=$1 comp=$2 file=$3 flag=--vllm-differences out rc
  [ "${4:-}" = --strict ] && flag=
  if [ ! -x "$py" ] || [ ! -f "$spec" ]; then echo "skip $name: needs $spec and .venv (scripts/setup.sh)"; return; fi
  out=$("$py" tests/ref/openapi_check.py $flag "$spec" "$name" "$comp" < "$file" 2>&1); rc=$?
  if [ $rc -eq 3 ]; then echo "skip $name: .venv lacks jsonschema or pyyaml (scripts/setup.sh)"
  elif [ -n "$out" ]; then echo "$out"
  else echo "FAIL $name: openapi_check.py exited $rc"; fi
}
post() { curl -s --max-time 60 "$U$1" -H 'Content-Type: application/json' -d "$2"; echo; }
stream() { curl -sN --max-time 60 "$U$1" -H 'Content-Type: application/json' -d "$2" | sed -n 's/^data: //p' | grep -v '^\[DONE\]$'; }

server_start S --served-model-name tiny || exit 0
U=$S_URL
C=/v1/completions H=/v1/chat/completions

post $C '{"model":"tiny","prompt":["Once","One day"],"max_tokens":8,"n":2,"logprobs":2,"temperature":0.8,"seed":1}' > "$tmp/c.json"
validate completion CreateCompletionResponse "$tmp/c.json"
post $C '{"model":"tiny","prompt":"Once","max_tokens":8,"echo":true,"stop":[" the"],"return_token_ids":true}' > "$tmp/c2.json"
validate completion_echo_stop CreateCompletionResponse "$tmp/c2.json"
stream $C '{"model":"tiny","prompt":"Once","max_tokens":8,"stream":true,"logprobs":1,"stream_options":{"include_usage":true,"continuous_usage_stats":true}}' > "$tmp/cs.jsonl"
validate completion_stream CreateCompletionResponse "$tmp/cs.jsonl"

msgs='[{"role":"system","content":"Tell a story."},{"role":"user","content":"Once"}]'
post $H "{\"model\":\"tiny\",\"messages\":$msgs,\"max_tokens\":8,\"logprobs\":true,\"top_logprobs\":3,\"n\":2}" > "$tmp/h.json"
validate chat_logprobs CreateChatCompletionResponse "$tmp/h.json"
post $H "{\"model\":\"tiny\",\"messages\":$msgs,\"max_tokens\":8,\"stop\":[\"girl\"]}" > "$tmp/h2.json"
validate chat_stop CreateChatCompletionResponse "$tmp/h2.json"
stream $H "{\"model\":\"tiny\",\"messages\":$msgs,\"max_tokens\":8,\"stream\":true,\"logprobs\":true,\"top_logprobs\":2,\"stream_options\":{\"include_usage\":true}}" > "$tmp/hs.jsonl"
validate chat_stream CreateChatCompletionStreamResponse "$tmp/hs.jsonl"

curl -s "$U/v1/models" > "$tmp/m.json"
validate models ListModelsResponse "$tmp/m.json"
post $C '{"model":"nope","prompt":"x"}' > "$tmp/e1.json"
post $C '{"model":"tiny","prompt":"x","temperature":-1}' >> "$tmp/e1.json"
post $H '{"model":"tiny","messages":"x"}' >> "$tmp/e1.json"
validate errors ErrorResponse "$tmp/e1.json"

# the checker can fail: without the differences vLLM's shapes do not validate,
# and a document broken outside them fails with them
validate strict_chat_differs CreateChatCompletionResponse "$tmp/h.json" --strict | sed -E 's/^FAIL strict_chat_differs: (.*)$/ok strict_chat_differs  # \1/; t; s/^ok (.*)$/FAIL \1 (expected vLLM'"'"'s differences to show)/'
jq -c '.choices[0].index = "0"' "$tmp/h.json" > "$tmp/bad1.json"
validate bad_index_caught CreateChatCompletionResponse "$tmp/bad1.json" | sed -E 's/^FAIL bad_index_caught: (.*)$/ok bad_index_caught  # \1/; t; s/^ok (.*)$/FAIL \1 (a string index passed)/'
jq -c 'del(.choices[0].message.role)' "$tmp/h.json" > "$tmp/bad2.json"
validate bad_role_caught CreateChatCompletionResponse "$tmp/bad2.json" | sed -E 's/^FAIL bad_role_caught: (.*)$/ok bad_role_caught  # \1/; t; s/^ok (.*)$/FAIL \1 (a message without its role passed)/'
jq -c '.usage.total_tokens = "many"' "$tmp/c.json" > "$tmp/bad3.json"
validate bad_usage_caught CreateCompletionResponse "$tmp/bad3.json" | sed -E 's/^FAIL bad_usage_caught: (.*)$/ok bad_usage_caught  # \1/; t; s/^ok (.*)$/FAIL \1 (a string token count passed)/'
exit 0
