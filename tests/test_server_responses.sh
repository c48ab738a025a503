#!/usr/bin/env bash
# test_server_responses.sh - the Responses API (POST /v1/responses, GET
# /v1/responses/{id}, POST /v1/responses/{id}/cancel) on stories260K:
#   - every response object and every streamed event validates against
#     OpenAI's published OpenAPI schema (../shared/data/openai-openapi, with
#     Python's jsonschema: tests/ref/openapi_check.py; skipped without them);
#   - the text is the chat endpoint's for the same messages (greedy), which
#     test_server_openai checks against llama2.c: the Responses layer only maps;
#   - the stream's events come in OpenAI's order, numbered 0..n-1, and their
#     deltas add up to the final text;
#   - the official openai npm client's responses.create, streaming included;
#   - the store as vLLM has it (VLLM_ENABLE_RESPONSES_API_STORE=1): GET,
#     previous_response_id (the second turn sees the first: the chat endpoint
#     given the whole conversation says the same), background + poll, cancel;
#   - errors: store off, unknown id, cancelling a synchronous response, a
#     non-function tool, truncation auto, no input.
#
# checks: 35
# tags: tsan
cd "$(dirname "$0")/.." || exit 1
. tests/server_helpers.sh
R=/v1/responses
spec=../shared/data/openai-openapi/openapi.yaml
py=.venv/bin/python
tmp=$(mktemp -d)
trap 'server_stop_all; rm -rf "$tmp"' EXIT

# schema NAME COMPONENT FILE: validates FILE's JSON lines against the spec
schema() {
  local out rc
  out=$("$py" tests/ref/openapi_check.py "$spec" "$1" "$2" < "$3" 2>&1); rc=$?
  if [ $rc -eq 3 ] || [ ! -x "$py" ]; then echo "skip $1: needs $spec and .venv with jsonschema + pyyaml (scripts/setup.sh)"
  elif [ -n "$out" ]; then echo "$out"
  else echo "FAIL $1: openapi_check.py exited $rc"; fi
}
same() { [ "$2" = "$3" ] && echo "ok $1" || echo "FAIL $1: '$(head -c 200 <<<"$2")' != '$(head -c 200 <<<"$3")'"; }

server_start S --served-model-name tiny || exit 0
U=$S_URL

# ---- plain ------------------------------------------------------------------------------
req POST $U$R '{"model":"tiny","input":"Once upon a time","max_output_tokens":24,"temperature":0}'
check_status plain_200 200
printf '%s\n' "$BODY" > "$tmp/plain.json"
schema plain_schema Response "$tmp/plain.json"
check plain_shape '.object == "response" and (.id | startswith("resp_")) and .status == "incomplete" and .incomplete_details.reason == "max_output_tokens" and (.output | length) == 1 and .output[0].type == "message" and .output[0].role == "assistant" and .output[0].content[0].type == "output_text" and .usage.output_tokens == 24 and .usage.total_tokens == .usage.input_tokens + 24 and .store == false and .model == "tiny"'
rtext=$(jq -r '.output[0].content[0].text' <<<"$BODY")
rin=$(jq '.usage.input_tokens' <<<"$BODY")
req POST $U/v1/chat/completions '{"model":"tiny","messages":[{"role":"user","content":"Once upon a time"}],"max_tokens":24,"temperature":0}'
same plain_text_is_chat "$rtext" "$(jq -r '.choices[0].message.content' <<<"$BODY")"
same plain_input_tokens_are_chat "$rin" "$(jq '.usage.prompt_tokens' <<<"$BODY")"

# instructions + message items with parts = a system message + the user message
req POST $U$R '{"model":"tiny","instructions":"Tell a story.","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"Once"}]}],"max_output_tokens":16,"temperature":0}'
t1=$(jq -r '.output[0].content[0].text' <<<"$BODY")
check instructions_echoed '.instructions == "Tell a story."'
req POST $U/v1/chat/completions '{"model":"tiny","messages":[{"role":"system","content":"Tell a story."},{"role":"user","content":"Once"}],"max_tokens":16,"temperature":0}'
same instructions_text_is_chat "$t1" "$(jq -r '.choices[0].message.content' <<<"$BODY")"

# ---- streamed --------------------------------------------------------------------------------
curl -sN --max-time 60 $U$R -H 'Content-Type: application/json' \
  -d '{"model":"tiny","input":"Once upon a time","max_output_tokens":24,"temperature":0,"stream":true,"top_logprobs":2}' > "$tmp/sse"
sed -n 's/^data: //p' "$tmp/sse" > "$tmp/events.jsonl"
schema stream_schema ResponseStreamEvent "$tmp/events.jsonl"
# every "event:" line names the type of the data line after it
paste -d' ' <(sed -n 's/^event: //p' "$tmp/sse") <(jq -r '.type' "$tmp/events.jsonl") | awk '$1 != $2 {bad=1} END {exit bad}' &&
  echo "ok stream_event_lines_match" || echo "FAIL stream_event_lines_match: $(head -c 300 "$tmp/sse")"
types=$(jq -r '.type' "$tmp/events.jsonl" | uniq | tr '\n' ' ')
same stream_order "$types" "response.created response.in_progress response.output_item.added response.content_part.added response.output_text.delta response.output_text.done response.content_part.done response.output_item.done response.completed "
jq -s '[.[].sequence_number] == [range(0; length)]' "$tmp/events.jsonl" | grep -q true && echo "ok stream_sequence_numbers" ||
  echo "FAIL stream_sequence_numbers: $(jq -c '.sequence_number' "$tmp/events.jsonl" | tr '\n' ' ')"
deltas=$(jq -j 'select(.type == "response.output_text.delta") | .delta' "$tmp/events.jsonl")
same stream_deltas_are_text "$deltas" "$rtext"
same stream_done_is_text "$(jq -r 'select(.type == "response.output_text.done") | .text' "$tmp/events.jsonl")" "$rtext"
jq -s '[.[] | select(.type == "response.output_text.delta") | .logprobs | length] | add == 24' "$tmp/events.jsonl" | grep -q true &&
  echo "ok stream_logprob_per_token" || echo "FAIL stream_logprob_per_token"
final=$(jq -c 'select(.type == "response.completed") | .response' "$tmp/events.jsonl")
check stream_completed_response '.status == "incomplete" and .usage.output_tokens == 24 and (.output[0].content[0].logprobs | length) == 24 and (.output[0].content[0].logprobs[0].top_logprobs | length) == 2' "$final"

# ---- the official openai client ---------------------------------------------------------------
out=$(timeout 120 node --input-type=module -e '
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";
const require = createRequire(process.cwd() + "/tests/ref/package.json");
const { default: OpenAI } = await import(pathToFileURL(require.resolve("openai")).href);
const c = new OpenAI({ baseURL: process.argv[1] + "/v1", apiKey: "x", maxRetries: 0 });
const r = await c.responses.create({ model: "tiny", input: "Once upon a time", max_output_tokens: 24, temperature: 0 });
console.log(JSON.stringify({ plain: r.output_text }));
const s = await c.responses.create({ model: "tiny", input: "Once upon a time", max_output_tokens: 24, temperature: 0, stream: true });
let text = "", last = null;
for await (const ev of s) { if (ev.type === "response.output_text.delta") text += ev.delta; last = ev.type; }
console.log(JSON.stringify({ stream: text, last }));' "$U" 2>&1)
same openai_client_output_text "$(jq -r 'select(.plain) | .plain' <<<"$out" 2>/dev/null)" "$rtext"
same openai_client_stream "$(jq -r 'select(.stream) | .stream + "|" + .last' <<<"$out" 2>/dev/null)" "$rtext|response.completed"

# ---- errors with the store off -------------------------------------------------------------
req GET $U$R/resp_nope; check_status store_off_get_400 400
check store_off_message '.error.message | contains("VLLM_ENABLE_RESPONSES_API_STORE=1")'
req POST $U$R '{"model":"tiny","input":"x","background":true}'; check_status store_off_background_400 400
req POST $U$R '{"model":"tiny","input":"x","tools":[{"type":"web_search"}]}'
check non_function_tool_400 '.error.code == 400 and (.error.message | contains("web_search"))'
req POST $U$R '{"model":"tiny","input":"x","truncation":"auto"}'
check truncation_auto_400 '.error.code == 400 and .error.param == "truncation"'
req POST $U$R '{"model":"tiny"}'; check no_input_400 '.error.code == 400 and .error.param == "input"'
server_stop_all

# ---- the store -------------------------------------------------------------------------------
# one sequence at a time, so a background request can be made to wait behind a long one
VLLM_ENABLE_RESPONSES_API_STORE=1 server_start T --served-model-name tiny --max-num-seqs 1 || exit 0
U=$T_URL
req POST $U$R '{"model":"tiny","input":"Once upon a time","max_output_tokens":24,"temperature":0}'
id=$(jq -r '.id' <<<"$BODY"); first=$BODY
check store_stored '.store == true'
req GET $U$R/$id
same store_get_same "$(jq -S -c 'del(.completed_at)' <<<"$BODY")" "$(jq -S -c 'del(.completed_at)' <<<"$first")"
req GET $U$R/resp_unknown; check_status store_unknown_404 404
check store_unknown_message ".error.message == \"Response with id 'resp_unknown' not found.\""
req POST $U$R/$id/cancel; check_status store_cancel_synchronous_400 400
# the second turn continues the first conversation
req POST $U$R "{\"model\":\"tiny\",\"input\":\"And then\",\"previous_response_id\":\"$id\",\"max_output_tokens\":16,\"temperature\":0}"
t2=$(jq -r '.output[0].content[0].text' <<<"$BODY")
conv=$(jq -c --arg a "$rtext" '[{"role":"user","content":"Once upon a time"},{"role":"assistant","content":$a},{"role":"user","content":"And then"}]' <<<'{}')
req POST $U/v1/chat/completions "{\"model\":\"tiny\",\"messages\":$conv,\"max_tokens\":16,\"temperature\":0}"
same previous_response_is_conversation "$t2" "$(jq -r '.choices[0].message.content' <<<"$BODY")"
# background: answered at once, then polled to the end
req POST $U$R '{"model":"tiny","input":"Once upon a time","max_output_tokens":24,"temperature":0,"background":true}'
bid=$(jq -r '.id' <<<"$BODY")
check background_queued '.status == "queued" and .background == true and (.output | length) == 0'
printf '%s\n' "$BODY" > "$tmp/queued.json"
for _ in $(seq 1200); do req GET $U$R/$bid; [ "$(jq -r .status <<<"$BODY")" = queued ] || break; sleep 0.05; done
same background_polled_text "$(jq -r '.output[0].content[0].text' <<<"$BODY")" "$rtext"
printf '%s\n' "$BODY" >> "$tmp/queued.json"
schema background_schema Response "$tmp/queued.json"
# cancel one that waits behind 64 prompts x 480 tokens of another request (seconds of work, one
# sequence at a time)
curl -s --max-time 120 -o /dev/null $U/v1/completions -H 'Content-Type: application/json' \
  -d "{\"model\":\"tiny\",\"prompt\":$(jq -c -n '[range(64) | "Once"]'),\"max_tokens\":480,\"ignore_eos\":true}" &
blocker=$!
for _ in $(seq 500); do req GET $U/load; [ "$(jq -r .server_load <<<"$BODY")" -ge 1 ] 2>/dev/null && break; sleep 0.02; done
req POST $U$R '{"model":"tiny","input":"Once upon a time","max_output_tokens":400,"temperature":0,"ignore_eos":true,"background":true}'
cid=$(jq -r '.id' <<<"$BODY")
req POST $U$R/$cid/cancel; check cancel_answer '.status == "cancelled"'
for _ in $(seq 1200); do req GET $U$R/$cid; [ "$(jq -r .status <<<"$BODY")" = queued ] || break; sleep 0.05; done
check cancel_final '.status == "cancelled" and .usage.output_tokens < 400'
kill $blocker 2>/dev/null; wait $blocker 2>/dev/null
req GET $U/health; check_status healthy_at_end 200
exit 0
