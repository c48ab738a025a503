#!/usr/bin/env bash
# test_server_dp_lora.sh - LoRA with data-parallel engines (issue 23): every
# engine loads --lora-modules, a request's adapter name travels in its ADD
# (dist/dp_wire.h), runtime load/unload go to every engine (dist/dp_lora.h).
# Random adapters from tools/make_lora_adapter.py (Debian's numpy; their
# numbers are checked against PEFT in test_lora_ref.sh).
#   - 10 concurrent greedy requests (adapters a and b from --lora-modules,
#     the base model) on -dp 2 equal -dp 1, and an adapter changes the text;
#     both engines ran some; /v1/models lists a and b;
#   - /v1/load_lora_adapter c at runtime: 200, then 8 concurrent requests
#     for c (spread over both engines) equal -dp 1's with c loaded the same
#     way; unloading it: 200, then c is an unknown model (404); a path with
#     no adapter: 404 (the engines' refusal), the server serving after.
# checks: 8
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-$PWD/build}
export VLLMC=${VLLMC:-$BUILD_DIR/vllmc}
. tests/server_helpers.sh
MODEL=models/stories260K
PY=/usr/bin/python3
T=$(mktemp -d /tmp/vllmc-dplora-XXXXXX)
trap 'server_stop_all; rm -rf "$T"' EXIT

names="dp2_lora_equals_dp1 dp2_lora_changes_text dp2_lora_both_engines dp2_lora_models_list dp2_lora_runtime_load_ok
dp2_lora_runtime_equals_dp1 dp2_lora_unload_then_404 dp2_lora_bad_path_404"
if ! $PY -c "import numpy" 2>/dev/null; then
  for n in $names; do echo "skip $n: Debian's python3-numpy is missing (tools/make_lora_adapter.py)"; done; exit 0
fi
for a in a:8:1 b:4:2 c:8:3; do
  IFS=: read -r n r s <<<"$a"
  $PY tools/make_lora_adapter.py $MODEL "$T/$n" --rank "$r" --seed "$s" || { echo "FAIL lora_setup: adapter $n"; exit 0; }
done
export VLLM_ALLOW_RUNTIME_LORA_UPDATING=1

# run URL DIR MODEL... : one greedy request per model, concurrently; texts in DIR/i.out
run() {
  local url=$1 dir=$2 i=0 m pids=(); shift 2
  mkdir -p "$dir"
  for m in "$@"; do
    curl -s --max-time 60 -o "$dir/$i.json" -H 'Content-Type: application/json' \
      --data-binary '{"model":"'"$m"'","prompt":"Once upon a time '$i'","max_tokens":24,"temperature":0,"return_token_ids":true}' \
      "$url/v1/completions" &
    pids+=($!); i=$((i + 1))
  done
  wait "${pids[@]}"
  for i in $(seq 0 $(($# - 1))); do
    jq -c '[.choices[] | {text, token_ids, finish_reason}]' "$dir/$i.json" > "$dir/$i.out" 2>/dev/null ||
      echo "bad: $(head -c 200 "$dir/$i.json")" > "$dir/$i.out"
  done
}
same() { # DIR1 DIR2 N: how many of the N outputs differ
  local bad=0 i
  for i in $(seq 0 $(($3 - 1))); do cmp -s "$1/$i.out" "$2/$i.out" || bad=$((bad + 1)); done
  echo $bad
}
STATIC=(a b stories a b stories a b a b)
C8=(c c c c c c c c)
LOAD_C='{"lora_name":"c","lora_path":"'$T/c'"}'

server_start ONE --model $MODEL --served-model-name stories --threads 1 --enable-lora --max-loras 2 \
  --lora-modules a="$T/a" b="$T/b" || exit 0
run "$ONE_URL" "$T/one" "${STATIC[@]}"
req POST "$ONE_URL/v1/load_lora_adapter" "$LOAD_C"
run "$ONE_URL" "$T/one_c" "${C8[@]}"
server_stop_all

# engines slowed a little: concurrent adds then spread over both (least loaded counts unacknowledged adds)
VLLMC_DEBUG_STEP_DELAY_US=3000 server_start DP --model $MODEL --served-model-name stories --threads 1 -dp 2 \
  --enable-lora --max-loras 2 \
  --lora-modules a="$T/a" b="$T/b" || exit 0
run "$DP_URL" "$T/dp" "${STATIC[@]}"
bad=$(same "$T/one" "$T/dp" 10)
if [ "$bad" -eq 0 ] && grep -q '"token_ids":\[[0-9]' "$T/dp/0.out"; then echo "ok dp2_lora_equals_dp1"
else echo "FAIL dp2_lora_equals_dp1: $bad of 10 differ: $(head -c 200 "$T/dp/0.out")"; fi
# request 0 (adapter a) and 2 (the base model) differ only in the adapter and the prompt's number: compare a vs base on one prompt
curl -s --max-time 60 -H 'Content-Type: application/json' -o "$T/base0.json" \
  --data-binary '{"model":"stories","prompt":"Once upon a time 0","max_tokens":24,"temperature":0}' "$DP_URL/v1/completions"
if [ "$(jq -r '.choices[0].text' "$T/base0.json")" != "$(jq -r '.[0].text' "$T/dp/0.out")" ]; then echo "ok dp2_lora_changes_text"
else echo "FAIL dp2_lora_changes_text: adapter a's text equals the base model's"; fi
m=$(curl -s --max-time 20 "$DP_URL/metrics")
e0=$(awk '/^vllm:request_success_total\{/ && /engine="0"/ { s += $NF } END { print s + 0 }' <<< "$m")
e1=$(awk '/^vllm:request_success_total\{/ && /engine="1"/ { s += $NF } END { print s + 0 }' <<< "$m")
if [ "$e0" -gt 0 ] && [ "$e1" -gt 0 ]; then echo "ok dp2_lora_both_engines ($e0 + $e1)"
else echo "FAIL dp2_lora_both_engines: engine 0 finished $e0, engine 1 $e1"; fi
req GET "$DP_URL/v1/models"
check dp2_lora_models_list '[.data[].id] == ["stories","a","b"] and .data[1].root == "'$T/a'" and .data[2].parent == "stories"'

req POST "$DP_URL/v1/load_lora_adapter" "$LOAD_C"
if [ "$STATUS" = 200 ] && [ "$BODY" = "Success: LoRA adapter 'c' added successfully." ]; then echo "ok dp2_lora_runtime_load_ok"
else echo "FAIL dp2_lora_runtime_load_ok: $STATUS $BODY"; fi
run "$DP_URL" "$T/dp_c" "${C8[@]}"
bad=$(same "$T/one_c" "$T/dp_c" 8)
if [ "$bad" -eq 0 ] && grep -q '"token_ids":\[[0-9]' "$T/dp_c/7.out"; then echo "ok dp2_lora_runtime_equals_dp1"
else echo "FAIL dp2_lora_runtime_equals_dp1: $bad of 8 differ: $(head -c 300 "$T/dp_c/7.out")"; fi
req POST "$DP_URL/v1/unload_lora_adapter" '{"lora_name":"c"}'
s1=$STATUS b1=$BODY
req POST "$DP_URL/v1/completions" '{"model":"c","prompt":"x","max_tokens":4}'
if [ "$s1" = 200 ] && [ "$b1" = "Success: LoRA adapter 'c' removed successfully." ] && [ "$STATUS" = 404 ]; then
  echo "ok dp2_lora_unload_then_404"
else echo "FAIL dp2_lora_unload_then_404: unload $s1 $b1; then a request for c: $STATUS"; fi
req POST "$DP_URL/v1/load_lora_adapter" '{"lora_name":"d","lora_path":"'$T'/nothing-here"}'
s1=$STATUS b1=$BODY
req POST "$DP_URL/v1/completions" '{"model":"a","prompt":"x","max_tokens":4}'
if [ "$s1" = 404 ] && [ "$STATUS" = 200 ]; then echo "ok dp2_lora_bad_path_404"
else echo "FAIL dp2_lora_bad_path_404: load $s1 $(printf '%s' "$b1" | head -c 200); then a request: $STATUS"; fi
