#!/usr/bin/env bash
# test_structured_server.sh - structured outputs through `vllmc serve` on
# stories260K, driven by curl, then by the official openai npm client
# (tests/test_structured_server.mjs). The model's unconstrained text is
# story garbage, so an output that matches its constraint is the mask at
# work. Every output is checked by independent code: Python's re.fullmatch
# for regexes and grammars (rewritten as the same language's regex), json
# and jsonschema (.venv, tests/ref/requirements.txt) for JSON.
#   - structured_outputs {choice, regex, grammar}, the guided_* aliases,
#     response_format json_object / json_schema, tool_choice required and
#     named (their arguments validated against the tool's parameters; these
#     JSON rows skip while the schema translator is missing), completions and
#     chat, n > 1, streaming, logprobs;
#   - bad input: two kinds (vLLM 0.11's two messages), a grammar that does
#     not parse, a regex with a lookaround, a schema that is not JSON, an
#     unsupported keyword (named with its path), a 10 MB schema,
#     response_format json_schema without its schema, an unknown
#     response_format type -> 400 naming the field; the server healthy after;
#   - a compile past --structured-outputs-compile-timeout (a second server
#     whose compiles sleep: VLLMC_DEBUG_COMPILE_DELAY_MS) -> 400 naming the
#     timeout, while unconstrained requests keep being served.
# checks: 65
# tags: tsan
cd "$(dirname "$0")/.." || exit 1
. tests/server_helpers.sh
C=/v1/completions
CH=/v1/chat/completions
PY=/usr/bin/python3
VPY=.venv/bin/python

server_start S --served-model-name tiny || exit 1
U=$S_URL

# fullmatch NAME REGEX JQ: every string the jq filter yields from $BODY fully matches REGEX
fullmatch() {
  local name=$1 re=$2 filter=$3
  local out
  out=$(printf '%s' "$BODY" | jq -c "[$filter]" | $PY -c '
import json, re, sys
xs = json.load(sys.stdin); r = re.compile(sys.argv[1], re.S)
bad = [x for x in xs if not isinstance(x, str) or not r.fullmatch(x)]
print("ok" if xs and not bad else "bad %d of %d: %r" % (len(bad), len(xs), bad[:3]))' "$re")
  [ "$out" = ok ] && echo "ok $name" || echo "FAIL $name: $out; body: $(printf '%s' "$BODY" | head -c 400)"
}

# ---- choice, regex, grammar -------------------------------------------------
req POST $U$C '{"prompt":"Once upon","max_tokens":30,"temperature":1,"seed":5,"n":4,"guided_choice":["yes","no","maybe later"]}'
check_status guided_choice_200 200
fullmatch guided_choice_texts '(yes|no|maybe later)' '.choices[].text'
check guided_choice_finish '[.choices[].finish_reason] == ["stop","stop","stop","stop"]'

req POST $U$C '{"prompt":"Once upon","max_tokens":40,"temperature":0.9,"seed":11,"n":3,"structured_outputs":{"regex":"[0-9]{3}-[a-z]{2,5}( ok)?"}}'
check_status regex_n3_200 200
fullmatch regex_n3_texts '[0-9]{3}-[a-z]{2,5}( ok)?' '.choices[].text'
check regex_n3_finish '[.choices[].finish_reason] == ["stop","stop","stop"] and (.choices | length) == 3'

req POST $U$C '{"prompt":"Lily","max_tokens":40,"temperature":1,"seed":3,"guided_regex":"(cat|dog)s? [A-Z][a-z]{0,5}!"}'
fullmatch guided_regex_text '(cat|dog)s? [A-Z][a-z]{0,5}!' '.choices[].text'

GBNF='root ::= \"(\" item (\",\" item){0,3} \")\"\nitem ::= [a-c]{1,3}\n'
req POST $U$CH '{"messages":[{"role":"user","content":"list"}],"max_tokens":40,"temperature":1,"seed":9,"n":2,"structured_outputs":{"grammar":"'"$GBNF"'"}}'
check_status chat_grammar_200 200
fullmatch chat_grammar_content '\([a-c]{1,3}(,[a-c]{1,3}){0,3}\)' '.choices[].message.content'
check chat_grammar_finish '[.choices[].finish_reason] == ["stop","stop"]'

req POST $U$C '{"prompt":"x","max_tokens":30,"temperature":0,"guided_grammar":"root ::= expr\nexpr ::= expr \"+\" num | num\nnum ::= [1-9]\n"}'
fullmatch guided_grammar_left_recursive '[1-9](\+[1-9])*' '.choices[].text'

# streaming: the deltas concatenated match, the last chunk says stop
STREAM=$(curl -s -N --max-time 60 $U$C -H 'Content-Type: application/json' \
  -d '{"prompt":"Once","max_tokens":40,"temperature":1,"seed":21,"n":2,"stream":true,"guided_regex":"[a-e]{2,8}\\.[0-9]"}')
BODY=$(printf '%s' "$STREAM" | sed -n 's/^data: //p' | grep -v '^\[DONE\]' | jq -s -c '
  [group_by(.choices[0].index)[] | {text: (map(.choices[0].text) | add), finish: (map(.choices[0].finish_reason) | map(select(. != null)) | last)}]')
fullmatch stream_regex_texts '[a-e]{2,8}\.[0-9]' '.[].text'
check stream_regex_finish '(length == 2) and all(.[]; .finish == "stop")'
printf '%s' "$STREAM" | tail -3 | grep -q '^data: \[DONE\]' && echo "ok stream_done" || echo "FAIL stream_done: $(printf '%s' "$STREAM" | tail -c 200)"

STREAM=$(curl -s -N --max-time 60 $U$CH -H 'Content-Type: application/json' \
  -d '{"messages":[{"role":"user","content":"hi"}],"max_tokens":30,"temperature":0,"stream":true,"structured_outputs":{"choice":["alpha beta","gamma"]}}')
BODY=$(printf '%s' "$STREAM" | sed -n 's/^data: //p' | grep -v '^\[DONE\]' | jq -s -c '[map(.choices[0].delta.content // "") | add]')
fullmatch chat_stream_choice '(alpha beta|gamma)' '.[]'

# logprobs: one entry per generated token, top lists among what the mask allowed
req POST $U$C '{"prompt":"Once","max_tokens":20,"temperature":0,"logprobs":2,"return_token_ids":true,"structured_outputs":{"choice":["The dog","A cat"]}}'
check logprobs_count '(.choices[0].logprobs.tokens | length) == (.choices[0].token_ids | length) and (.choices[0].token_ids | length) > 1'
fullmatch logprobs_text '(The dog|A cat)' '.choices[0].text'
check logprobs_finite '[.choices[0].logprobs.token_logprobs[] | select(. > -9999)] | length > 1'

# ---- JSON (the schema translator: branch st-schema) ------------------------------
# JSON's flexible whitespace lets this model emit newlines forever (as it would
# under vLLM's xgrammar): these requests bound it with disable_any_whitespace
# or a whitespace_pattern, which the checks below see in the output.
SCHEMA='{"type":"object","properties":{"ok":{"type":"boolean"},"n":{"enum":["a","b","c"]},"tag":{"type":"string","maxLength":4}},"required":["ok","n","tag"],"additionalProperties":false}'
req POST $U$CH '{"messages":[{"role":"user","content":"json"}],"max_tokens":60,"temperature":1,"seed":4,"n":3,"response_format":{"type":"json_schema","json_schema":{"name":"t","schema":'"$SCHEMA"',"strict":true}},"structured_outputs":{"disable_any_whitespace":true}}'
schema_status=$STATUS schema_body=$BODY
JSON_CHECKS="json_schema_200 json_schema_valid json_object_valid guided_json_valid json_disable_ws_valid
  tools_required tools_required_args_valid tools_named tools_named_stream tools_required_stream"
have_js=0; $VPY -c 'import jsonschema' 2>/dev/null && have_js=1
if [ "$schema_status" = 400 ] && printf '%s' "$schema_body" | grep -q 'not built yet'; then
  for n in $JSON_CHECKS; do echo "skip $n: the JSON schema translator is not built yet (branch st-schema)"; done
elif [ $have_js = 0 ]; then
  for n in $JSON_CHECKS; do echo "skip $n: $VPY has no jsonschema (tests/ref/requirements.txt; scripts/setup.sh)"; done
else
  check_status json_schema_200 200
  validate() { # NAME SCHEMA JQ: every string the filter yields is JSON valid against SCHEMA
    local out; out=$(printf '%s' "$BODY" | jq -c "[$3]" | $VPY -c '
import json, sys, jsonschema
schema = json.loads(sys.argv[1]); xs = json.load(sys.stdin); errs = []
for x in xs:
    try: jsonschema.validate(json.loads(x), schema)
    except Exception as e: errs.append("%r: %s" % (x, str(e).splitlines()[0]))
print("ok" if xs and not errs else "; ".join(errs[:3]) or "no outputs")' "$2")
    [ "$out" = ok ] && echo "ok $1" || echo "FAIL $1: $out"
  }
  validate json_schema_valid "$SCHEMA" '.choices[].message.content'
  req POST $U$C '{"prompt":"{","max_tokens":120,"temperature":1,"seed":8,"n":4,"response_format":{"type":"json_object"},"structured_outputs":{"whitespace_pattern":" ?"}}'
  # this model writes whole stories inside the strings: a choice that ran out
  # of tokens must still be an object's beginning; one that stopped, an object
  check json_object_valid '(.choices | length) == 4 and all(.choices[]; (.text | startswith("{")) and
    (.finish_reason == "length" or (.finish_reason == "stop" and (.text | fromjson | type) == "object")))'
  req POST $U$C '{"prompt":"x","max_tokens":60,"temperature":1,"seed":2,"n":2,"guided_json":'"$SCHEMA"',"guided_whitespace_pattern":"[ ]?"}'
  validate guided_json_valid "$SCHEMA" '.choices[].text'
  SCHEMA2='{"type":"object","properties":{"ok":{"type":"boolean"},"n":{"enum":["a","b","c"]}},"required":["ok","n"],"additionalProperties":false}'
  req POST $U$C '{"prompt":"x","max_tokens":60,"temperature":1,"seed":2,"n":2,"structured_outputs":{"json":'"$SCHEMA2"',"disable_any_whitespace":true}}'
  validate json_disable_ws_valid "$SCHEMA2" '.choices[].text | if test("\\s") then "whitespace: " + . else . end'

  # ---- tool calling: required / named (vLLM's schemas over the tools) ----------
  # ids 509 and 96 are "]" (a piece and its byte token): this model would
  # otherwise list calls forever, which vLLM's required schema allows
  PARAMS='{"type":"object","properties":{"city":{"enum":["Paris","Rome"]},"days":{"type":"integer","minimum":1,"maximum":7}},"required":["city","days"],"additionalProperties":false}'
  TOOLS='[{"type":"function","function":{"name":"get_weather","parameters":'"$PARAMS"'}},{"type":"function","function":{"name":"noop"}}]'
  req POST $U$CH '{"messages":[{"role":"user","content":"weather"}],"max_tokens":100,"seed":1,"n":3,"temperature":1,"logit_bias":{"509":30,"96":30},"tools":'"$TOOLS"',"tool_choice":"required","structured_outputs":{"disable_any_whitespace":true}}'
  check tools_required 'all(.choices[]; .finish_reason == "tool_calls" and .message.content == "" and (.message.tool_calls | length) >= 1 and
    all(.message.tool_calls[]; (.id | startswith("chatcmpl-tool-")) and .type == "function" and (.function.name == "get_weather" or .function.name == "noop")))'
  validate tools_required_args_valid "$PARAMS" '.choices[].message.tool_calls[] | select(.function.name == "get_weather") | .function.arguments'
  req POST $U$CH '{"messages":[{"role":"user","content":"weather"}],"max_tokens":60,"seed":2,"n":2,"temperature":1,"tools":'"$TOOLS"',"tool_choice":{"type":"function","function":{"name":"get_weather"}},"structured_outputs":{"disable_any_whitespace":true}}'
  BODY=$(printf '%s' "$BODY" | jq -c 'if all(.choices[]; .finish_reason == "stop" and .message.content == "" and (.message.tool_calls | length) == 1 and .message.tool_calls[0].function.name == "get_weather") then . else {choices: [], bad: .} end')
  validate tools_named "$PARAMS" '.choices[].message.tool_calls[0].function.arguments'
  STREAM=$(curl -s -N --max-time 60 $U$CH -H 'Content-Type: application/json' \
    -d '{"messages":[{"role":"user","content":"weather"}],"max_tokens":60,"seed":3,"stream":true,"tools":'"$TOOLS"',"tool_choice":{"type":"function","function":{"name":"get_weather"}},"structured_outputs":{"disable_any_whitespace":true}}')
  BODY=$(printf '%s' "$STREAM" | sed -n 's/^data: //p' | grep -v '^\[DONE\]' | jq -s -c '[map(.choices[0].delta.tool_calls[0]? // empty)] |
    if (.[0][0].id | startswith("chatcmpl-tool-")) and .[0][0].function.name == "get_weather" and all(.[0][1:][]; has("id") | not)
    then [.[0] | map(.function.arguments) | add] else ["first delta: " + (.[0][0] | tojson)] end')
  validate tools_named_stream "$PARAMS" '.[]'
  STREAM=$(curl -s -N --max-time 60 $U$CH -H 'Content-Type: application/json' \
    -d '{"messages":[{"role":"user","content":"weather"}],"max_tokens":100,"seed":1,"stream":true,"logit_bias":{"509":30,"96":30},"tools":'"$TOOLS"',"tool_choice":"required","structured_outputs":{"disable_any_whitespace":true}}')
  # each call streams as its array item closes: {index, id, type, function.name}, then its arguments
  BODY=$(printf '%s' "$STREAM" | sed -n 's/^data: //p' | grep -v '^\[DONE\]' | jq -s -c '{fr: .[-1].choices[0].finish_reason, tcs: [.[] | .choices[0].delta.tool_calls // empty | .[]]}')
  check tools_required_stream '.fr == "tool_calls" and (.tcs | length) >= 2 and .tcs[0].index == 0 and (.tcs[0].id | startswith("chatcmpl-tool-")) and ([.tcs[] | select(.index == 0) | .function.arguments // ""] | add | fromjson | type) == "object"'
fi

# ---- bad input: 400 naming the problem --------------------------------------------
req POST $U$C '{"prompt":"x","structured_outputs":{"regex":"a","choice":["b"]}}'
check two_kinds_so_400 '.error.code == 400 and (.error.message | contains("You can only use one kind of constraints for structured outputs ('"'"'json'"'"', '"'"'regex'"'"' or '"'"'choice'"'"')."))'
req POST $U$C '{"prompt":"x","guided_regex":"a","guided_grammar":"root ::= \"b\""}'
check two_kinds_guided_400 '.error.code == 400 and (.error.message | contains("You can only use one kind of structured outputs constraint but multiple are specified"))'
req POST $U$CH '{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object"},"structured_outputs":{"grammar":"root ::= \"b\""}}'
check two_kinds_response_format_400 '.error.code == 400 and (.error.message | contains("multiple are specified"))'
req POST $U$C '{"prompt":"x","structured_outputs":{"grammar":"root ::= \"(\" [a-c+ \")\""}}'
check bad_grammar_400 '.error.code == 400 and .error.param == "structured_outputs.grammar" and (.error.message | test("line 1 column [0-9]+"))'
req POST $U$C '{"prompt":"x","guided_regex":"a(?=b)"}'
check bad_regex_lookaround_400 '.error.code == 400 and .error.param == "guided_regex" and (.error.message | test("look"; "i"))'
req POST $U$C '{"prompt":"x","guided_json":"{not json"}'
check bad_schema_not_json_400 '.error.code == 400 and .error.param == "guided_json"'
# an unsupported keyword: the 400 names the keyword and where it is (the issue's example)
req POST $U$CH '{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"t","schema":{"type":"object","properties":{"tags":{"type":"array","uniqueItems":true}}}}}}'
check bad_schema_keyword_400 '.error.code == 400 and (.error.message | contains("properties.tags") and contains("uniqueItems is not supported"))'
# a 10 MB schema (a valid one: 200,000 properties), under the 32 MiB body limit: refused by its size
big=$(mktemp)
$PY -c 'import json, sys
props = {"p%06d" % i: {"type": "string", "description": "x" * 20} for i in range(200000)}
json.dump({"prompt": "x", "max_tokens": 3, "guided_json": {"type": "object", "properties": props}}, sys.stdout)' > "$big"
req POST $U$C "@$big"
rm -f "$big"
check bad_schema_10mb_400 '.error.code == 400 and .error.param == "guided_json" and (.error.message | test("bytes is more than"))'
# refused by its size before the compiler reads the schema: the compile
# thread's own time for it, from its log line (a size comparison: 0.000 s).
# Compiling it would take far longer: 14,900 such properties, just under the
# 1 MiB limit, took 36 s (vllmc structured check, llama3 tokenizer, release
# build). The HTTP side's parse of the 10 MB body is not in this figure.
dt=$(grep -o 'compile failed after [0-9.]* s: schema: [0-9]* bytes is more than' "$S_LOG" | tail -1 | awk '{print $4}')
awk -v d="$dt" 'BEGIN { exit !(d != "" && d + 0 < 1) }' && echo "ok bad_schema_10mb_prompt" ||
  echo "FAIL bad_schema_10mb_prompt: the compile thread took '${dt:-no log line}' s (limit 1 s) to refuse the 10 MB schema"
req POST $U$CH '{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema"}}'
check json_schema_missing_400 '.error.code == 400 and (.error.message | contains("When response_format type is '"'"'json_schema'"'"', the '"'"'json_schema'"'"' field must be provided."))'
req POST $U$CH '{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"xml"}}'
check response_format_type_400 '.error.code == 400 and (.error.message | contains("'"'"'xml'"'"'"))'
req POST $U$CH '{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"required","structured_outputs":{"regex":"a"}}'
check tools_and_constraint_400 '.error.code == 400 and (.error.message | contains("You can only either use constraints for structured outputs or tools, not both."))'
req POST $U$C '{"prompt":"x","structured_outputs":{"choice":"yes"}}'
check choice_not_list_400 '.error.code == 400 and (.error.message | contains("structured_outputs.choice"))'
req POST $U$C '{"prompt":"x","structured_outputs":{"regex":""}}'
check empty_regex_400 '.error.code == 400 and (.error.message | contains("empty"))'
req POST $U$C '{"prompt":"x","response_format":{"type":"text"},"max_tokens":3}'
check response_format_text_ok '.choices[0].finish_reason == "length"'
req POST $U$C '{"prompt":"x","max_tokens":3,"guided_decoding_backend":"xgrammar","guided_choice":["ok"]}'
check backend_accepted '.choices[0].text == "ok"'
req GET $U/health; check_status healthy_after_errors 200
req POST $U$C '{"prompt":[1],"max_tokens":5,"temperature":0}'
check serves_after_errors '.choices[0].finish_reason == "length" and (.usage.completion_tokens == 5)'
# the same bad grammar again: its cached failure, same answer
req POST $U$C '{"prompt":"x","structured_outputs":{"grammar":"root ::= \"(\" [a-c+ \")\""}}'
check bad_grammar_cached_400 '.error.code == 400 and (.error.message | test("line 1 column"))'

# ---- compile timeout ----------------------------------------------------------
VLLMC_DEBUG_COMPILE_DELAY_MS=3000 server_start T --structured-outputs-compile-timeout 0.3 || exit 1
t0=$(date +%s.%N)
req POST $T_URL$C '{"prompt":"x","max_tokens":5,"guided_choice":["slow"]}'
t1=$(date +%s.%N)
check compile_timeout_400 '.error.code == 400 and (.error.message | contains("did not compile within 0.3 s"))'
awk -v a="$t0" -v b="$t1" 'BEGIN { exit !(b - a < 2.5) }' && echo "ok compile_timeout_prompt" ||
  echo "FAIL compile_timeout_prompt: the 400 took $(awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}') s"
req POST $T_URL$C '{"prompt":[1],"max_tokens":5,"temperature":0}'
check timeout_server_serves '.choices[0].finish_reason == "length"'
# once the compile is done (cached), the same constraint works
sleep 3
req POST $T_URL$C '{"prompt":"x","max_tokens":5,"guided_choice":["slow"]}'
check compile_cached_after_timeout '.choices[0].text == "slow"'

# ---- the official openai client --------------------------------------------------
if [ ! -d tests/ref/node_modules/openai ]; then
  for n in $(seq 1 14); do echo "skip openai_client_$n: tests/ref/node_modules/openai missing (scripts/setup.sh)"; done
else
  timeout 300 node tests/test_structured_server.mjs "$U"
fi
