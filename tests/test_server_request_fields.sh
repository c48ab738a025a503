#!/usr/bin/env bash
# test_server_request_fields.sh - request fields and server flags that used to
# be refused or ignored, on `vllmc serve` (stories260K):
#   - allowed_token_ids and bad_words against transformers' greedy decoding
#     with vLLM's masking rules (tests/ref/request_fields_check.py; skipped
#     without .venv);
#   - truncate_prompt_tokens -1 (= max_model_len);
#   - --enable-prompt-tokens-details: usage.prompt_tokens_details only with it;
#   - --enable-force-include-usage: a usage chunk on every stream;
#   - --enable-log-requests / --enable-log-outputs / --max-log-len: what the
#     log says about a request, its prompt cut to N characters or ids;
#   - an unknown field is still accepted and logged, an unsupported one a 400.
# checks: 15
cd "$(dirname "$0")/.." || exit 1
. tests/server_helpers.sh
py=.venv/bin/python
names="allowed_token_ids_reference allowed_token_ids_chat_reference bad_words_reference bad_words_chat_reference request_fields_errors"
server_start S --kv-cache-dtype float32 || exit 1
if ! [ -x "$py" ] || ! "$py" -c 'import torch, transformers, numpy' 2>/dev/null; then
  for n in $names; do echo "skip $n: .venv with torch and transformers missing (scripts/setup.sh)"; done
else
  timeout 600 "$py" tests/ref/request_fields_check.py "$S_URL" models/stories260K
fi
C=$S_URL/v1/completions

# truncate_prompt_tokens -1 keeps max_model_len (512) tokens: a 600-token prompt fits
long=$(printf '5,%.0s' $(seq 599))5
req POST $C "{\"prompt\":[$long],\"max_tokens\":1,\"truncate_prompt_tokens\":-1}"
check truncate_prompt_tokens_max_model_len '.usage.prompt_tokens == 512 or (.error.message | test("maximum context length"))'

server_start D --enable-prompt-tokens-details --enable-force-include-usage || exit 1
P='{"prompt":"Once upon a time there was a big dog who liked to run in the park with his friends every day","max_tokens":2,"temperature":0}'
req POST $S_URL/v1/completions "$P"; req POST $S_URL/v1/completions "$P"
check prompt_tokens_details_off_by_default '.usage.prompt_tokens_details == null'
req POST $D_URL/v1/completions "$P"; req POST $D_URL/v1/completions "$P"
check prompt_tokens_details_flag '.usage.prompt_tokens_details.cached_tokens > 0'
req POST $D_URL/v1/completions '{"prompt":"Once","max_tokens":3,"stream":true}'
last=$(grep '^data: {' <<< "$BODY" | tail -1 | cut -c7-)
check force_include_usage '.choices == [] and .usage.completion_tokens == 3' "$last"
# vLLM's should_include_usage: the flag turns include_usage on, so continuous_usage_stats counts
req POST $D_URL/v1/chat/completions '{"messages":[{"role":"user","content":"hi"}],"max_tokens":3,"stream":true,"stream_options":{"include_usage":false,"continuous_usage_stats":true}}'
chunks=$(grep '^data: {' <<< "$BODY" | cut -c7- | jq -s -c .)
check force_include_usage_continuous 'length >= 4 and all(.[]; .usage.total_tokens > 0) and .[-1].choices == []' "$chunks"

server_start L --enable-log-requests --enable-log-outputs --max-log-len 10 || exit 1
req POST $L_URL/v1/completions '{"prompt":"Once upon a time there was a dog named Max","max_tokens":3,"temperature":0,"return_token_ids":true}'
rid=$(jq -r .id <<< "$BODY")
ids10=$(jq -r '.choices[0].prompt_token_ids[:10] | map(tostring) | join(", ")' <<< "$BODY")
sleep 0.3
line=$(grep "Received request $rid" "$L_LOG")
if grep -q "prompt: 'Once upon ', params:" <<< "$line" && grep -qF "prompt_token_ids: [$ids10], " <<< "$line"; then
  echo "ok log_requests_max_log_len"
else
  echo "FAIL log_requests_max_log_len: $(grep -m1 'Received request' "$L_LOG" || echo 'no Received request line')"
fi
text=$(jq -r ".choices[0].text" <<< "$BODY"); text=${text:0:10}
if grep -F "Generated response $rid" "$L_LOG" | grep -qF "output: '$text'"; then echo "ok log_outputs"
else echo "FAIL log_outputs: $(grep -m1 'Generated response' "$L_LOG" || echo 'no Generated response line') (text '$text')"; fi
if ! grep -q "Generated response" "$S_LOG"; then echo "ok log_outputs_off_by_default"
else echo "FAIL log_outputs_off_by_default: $(grep -m1 'Generated response' "$S_LOG")"; fi

req POST $C '{"prompt":"a","max_tokens":1,"no_such_field":1}'
if [ "$STATUS" = 200 ] && grep -q "The following fields were present in the request but ignored: {'no_such_field'}" "$S_LOG"; then
  echo "ok unknown_field_logged"; else echo "FAIL unknown_field_logged: status $STATUS"; fi
req POST $C '{"prompt":"a","max_tokens":1,"logits_processors":["x"]}'
check unsupported_field_400 '.error.code == 400 and .error.param == "logits_processors" and (.error.message | test("not supported"))'
