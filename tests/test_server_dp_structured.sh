#!/usr/bin/env bash
# test_server_dp_structured.sh - structured outputs with data-parallel engines
# (issue 23): the request's spec travels in the ADD (dist/dp_wire.h) and each
# engine compiles it in its own grammar cache; the front end compiles it too,
# to answer a bad spec with 400 at admission as a single server does.
#   - 12 concurrent constrained completions (json_schema greedy on 6 prompts,
#     json seeded with n=2, regex, choice, grammar) on -dp 2 give exactly the
#     -dp 1 outputs, both engines running some;
#   - the JSON outputs that stopped validate against their schema with
#     Python's jsonschema (.venv; skipped, not passed, without it);
#   - a schema that is not one is a 400 naming the field.
# checks: 5
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-$PWD/build}
export VLLMC=${VLLMC:-$BUILD_DIR/vllmc}
. tests/server_helpers.sh
MODEL=models/stories260K
VPY=.venv/bin/python
tmp=$(mktemp -d)
trap 'server_stop_all; rm -rf "$tmp"' EXIT

SCHEMA='{"type":"object","properties":{"name":{"type":"string","maxLength":10},"age":{"type":"integer","minimum":0,"maximum":99},"pet":{"enum":["cat","dog"]}},"required":["name","age","pet"],"additionalProperties":false}'
GBNF='root ::= \"(\" item (\",\" item){0,3} \")\"\nitem ::= [a-c]{1,3}\n'
body() {
  local i=$1 words=("Once upon a time" "The cat" "Lily and Ben" "One day" "Tom had a ball" "The sun was")
  case $i in
    [0-5]) printf '{"model":"%s","prompt":"%s","max_tokens":60,"temperature":0,"response_format":{"type":"json_schema","json_schema":{"name":"p","schema":%s}},"structured_outputs":{"disable_any_whitespace":true}}' "$MODEL" "${words[$i]}" "$SCHEMA" ;;
    6|7) printf '{"model":"%s","prompt":"x %d","max_tokens":60,"temperature":1,"seed":%d,"n":2,"structured_outputs":{"json":%s,"disable_any_whitespace":true}}' "$MODEL" "$i" "$i" "$SCHEMA" ;;
    8|9) printf '{"model":"%s","prompt":"Lily %d","max_tokens":30,"temperature":0.9,"seed":%d,"structured_outputs":{"regex":"[0-9]{3}-[a-z]{2,5}( ok)?"}}' "$MODEL" "$i" "$i" ;;
    10) printf '{"model":"%s","prompt":"Once","max_tokens":20,"temperature":0,"structured_outputs":{"choice":["The dog","A cat","maybe later"]}}' "$MODEL" ;;
    11) printf '{"model":"%s","prompt":"list","max_tokens":40,"temperature":1,"seed":9,"structured_outputs":{"grammar":"%s"}}' "$MODEL" "$GBNF" ;;
  esac
}
run12() {
  local url=$1 dir=$2 i pids=()
  mkdir -p "$dir"
  for i in $(seq 0 11); do
    curl -s --max-time 60 -o "$dir/$i.json" -w '%{http_code}' -H 'Content-Type: application/json' \
      --data-binary "$(body "$i")" "$url/v1/completions" > "$dir/$i.code" &
    pids+=($!)
  done
  wait "${pids[@]}"
  for i in $(seq 0 11); do
    jq -c '[.choices | sort_by(.index)[] | {index, text, finish_reason}]' "$dir/$i.json" > "$dir/$i.out" 2>/dev/null ||
      echo "bad: $(head -c 200 "$dir/$i.json")" > "$dir/$i.out"
  done
}

server_start ONE --model $MODEL --threads 1 -dp 1 || exit 0
run12 "$ONE_URL" "$tmp/one"
server_stop_all

server_start DP --model $MODEL --threads 1 -dp 2 || exit 0
run12 "$DP_URL" "$tmp/dp"
codes=$(cat "$tmp"/dp/*.code | tr -d '\n')
if [ "$codes" = "$(printf '200%.0s' $(seq 12))" ]; then echo "ok dp2_structured_all_200"
else echo "FAIL dp2_structured_all_200: statuses $codes; $(grep -h error "$tmp"/dp/*.json | head -c 300)"; fi
bad=0
for i in $(seq 0 11); do cmp -s "$tmp/one/$i.out" "$tmp/dp/$i.out" || { bad=$((bad + 1)); [ $bad -eq 1 ] && diff "$tmp/one/$i.out" "$tmp/dp/$i.out" | head -4 >&2; }; done
stopped=$(cat "$tmp"/one/*.out | grep -o '"finish_reason":"stop"' | wc -l)
if [ $bad -eq 0 ] && [ "$stopped" -ge 8 ]; then echo "ok dp2_structured_equals_dp1 ($stopped choices stopped)"
else echo "FAIL dp2_structured_equals_dp1: $bad of 12 differ ($stopped choices stopped on -dp 1)"; fi

m=$(curl -s --max-time 20 "$DP_URL/metrics")
e0=$(awk '/^vllm:request_success_total\{/ && /engine="0"/ { s += $NF } END { print s + 0 }' <<< "$m")
e1=$(awk '/^vllm:request_success_total\{/ && /engine="1"/ { s += $NF } END { print s + 0 }' <<< "$m")
if [ "$e0" -gt 0 ] && [ "$e1" -gt 0 ]; then echo "ok dp2_structured_both_engines ($e0 + $e1)"
else echo "FAIL dp2_structured_both_engines: engine 0 finished $e0, engine 1 $e1"; fi

if ! $VPY -c 'import jsonschema' 2>/dev/null; then
  echo "skip dp2_json_schema_valid: $VPY has no jsonschema (tests/ref/requirements.txt)"
else
  out=$(cat "$tmp"/dp/{0,1,2,3,4,5,6,7}.json | jq -c '.choices[] | select(.finish_reason == "stop") | .text' | jq -s -c . |
    $VPY -c '
import json, sys, jsonschema
schema = json.loads(sys.argv[1]); xs = json.load(sys.stdin); errs = []
for x in xs:
    try: jsonschema.validate(json.loads(x), schema)
    except Exception as e: errs.append("%r: %s" % (x, str(e).splitlines()[0]))
print("ok %d" % len(xs) if len(xs) >= 4 and not errs else "; ".join(errs[:3]) or "only %d stopped" % len(xs))' "$SCHEMA")
  case $out in ok*) echo "ok dp2_json_schema_valid (${out#ok } outputs)" ;; *) echo "FAIL dp2_json_schema_valid: $out" ;; esac
fi

req POST "$DP_URL/v1/completions" '{"model":"'$MODEL'","prompt":"x","max_tokens":8,"response_format":{"type":"json_schema","json_schema":{"name":"b","schema":{"type":"bogus"}}}}'
check dp2_bad_schema_400 '.error.code == 400 and (.error.param | test("json_schema"))'
