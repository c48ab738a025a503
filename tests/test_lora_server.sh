#!/usr/bin/env bash
# test_lora_server.sh - LoRA through `vllmc serve` on stories260K, with
# random adapters written by tools/make_lora_adapter.py (Debian's numpy;
# the numbers themselves are checked against PEFT in test_lora_ref.sh):
#   - /v1/models lists the adapters after the base model (vLLM's ModelCard:
#     id, object, owned_by, root = the adapter's path, parent = the base
#     model, also for --lora-modules' JSON form with base_model_name);
#   - a request's model selects an adapter; greedy text through the server
#     equals `vllmc generate --lora` / per-line "lora" offline, for two
#     adapters and the base model; an adapter changes the text;
#   - an unknown model is vLLM's 404 body;
#   - prefix caching per adapter (vllm:prefix_cache_hits): a repeated prompt
#     hits under its own adapter, never under another one;
#   - runtime load/unload (VLLM_ALLOW_RUNTIME_LORA_UPDATING=1): vLLM's
#     success strings, its 400/404 errors for a duplicate name, a path with
#     no adapter, a missing field, an unknown adapter; a rank above
#     --max-lora-rank is refused and the server keeps serving;
#   - 8 streams of several adapters keep running while adapters are loaded
#     and unloaded; all finish, and vllm:kv_cache_usage_perc returns to 0;
#   - vllm:lora_requests_info as vLLM (labels max_lora, waiting_lora_adapters,
#     running_lora_adapters; value = unix time);
#   - without the variable the routes are 404 Not Found; without
#     --enable-lora an adapter's name is an unknown model.
# checks: 26
cd "$(dirname "$0")/.." || exit 1
. tests/server_helpers.sh
MODEL=models/stories260K
C=/v1/completions
PY=/usr/bin/python3
T=$(mktemp -d /tmp/vllmc-lora-XXXXXX)
trap 'server_stop_all; rm -rf "$T"' EXIT

names="lora_models_list lora_models_json_parent lora_greedy_a_offline lora_greedy_b_offline lora_greedy_base_offline
lora_adapter_changes_text lora_unknown_model_404 lora_prefix_hit_own lora_prefix_no_hit_other lora_load_ok
lora_load_duplicate_400 lora_load_missing_404 lora_load_missing_field_400 lora_load_rank_400 lora_serving_after_bad_load
lora_unload_ok lora_unload_unknown_404 lora_models_after_unload lora_streams_under_reload lora_kv_usage_back_to_0
lora_requests_info_metric lora_requests_info_labels lora_routes_off_404 lora_off_model_404 lora_cli_bad_module
lora_cli_rank_error"
if ! $PY -c "import numpy" 2>/dev/null; then
  for n in $names; do echo "skip $n: Debian's python3-numpy is missing (tools/make_lora_adapter.py)"; done; exit 0
fi
for a in a:8:1 b:4:2 c:8:3 big:32:4; do
  IFS=: read -r n r s <<<"$a"
  $PY tools/make_lora_adapter.py $MODEL "$T/$n" --rank "$r" --seed "$s" || { echo "FAIL lora_setup: adapter $n"; exit 0; }
done

export VLLM_ALLOW_RUNTIME_LORA_UPDATING=1
VLLMC_DEBUG_STEP_DELAY_US=2000 server_start S --model $MODEL --served-model-name stories --enable-lora --max-loras 2 \
  --lora-modules a="$T/a" "{\"name\":\"b\",\"path\":\"$T/b\",\"base_model_name\":\"stories\"}" || exit 0
U=$S_URL

req GET $U/v1/models
check lora_models_list "[.data[].id] == [\"stories\",\"a\",\"b\"] and .data[1].parent == \"stories\" and .data[1].root == \"$T/a\" and .data[1].object == \"model\" and .data[1].owned_by == \"vllm\" and .data[0].parent == null"
check lora_models_json_parent ".data[2].parent == \"stories\" and .data[2].root == \"$T/b\""

# greedy through the server = offline
P="Once upon a time, there was a little"
comp() { req POST $U$C "{\"model\":\"$1\",\"prompt\":\"$P\",\"max_tokens\":24,\"temperature\":0}"; printf '%s' "$BODY" | jq -r '.choices[0].text'; }
ta=$(comp a); tb=$(comp b); tbase=$(comp stories)
printf '%s\n' "{\"prompt\":\"$P\",\"max_tokens\":24,\"temperature\":0}" \
  "{\"prompt\":\"$P\",\"max_tokens\":24,\"temperature\":0,\"lora\":\"b\"}" \
  "{\"prompt\":\"$P\",\"max_tokens\":24,\"temperature\":0,\"lora\":null}" > "$T/prompts.jsonl"
off=$("$VLLMC" generate --model $MODEL --lora a="$T/a" --lora-modules b="$T/b" --prompts-file "$T/prompts.jsonl" --json 2>"$T/gen.err")
oa=$(jq -rs '.[0].outputs[0].text' <<<"$off" 2>/dev/null); ob=$(jq -rs '.[1].outputs[0].text' <<<"$off" 2>/dev/null)
obase=$(jq -rs '.[2].outputs[0].text' <<<"$off" 2>/dev/null)
[ -n "$ta" ] && [ "$ta" = "$oa" ] && echo "ok lora_greedy_a_offline" || echo "FAIL lora_greedy_a_offline: server '$ta' offline '$oa' $(head -c 300 "$T/gen.err")"
[ -n "$tb" ] && [ "$tb" = "$ob" ] && echo "ok lora_greedy_b_offline" || echo "FAIL lora_greedy_b_offline: server '$tb' offline '$ob'"
[ -n "$tbase" ] && [ "$tbase" = "$obase" ] && echo "ok lora_greedy_base_offline" || echo "FAIL lora_greedy_base_offline: server '$tbase' offline '$obase'"
[ "$ta" != "$tbase" ] && [ "$tb" != "$tbase" ] && [ "$ta" != "$tb" ] && echo "ok lora_adapter_changes_text" ||
  echo "FAIL lora_adapter_changes_text: a '$ta' b '$tb' base '$tbase'"

req POST $U$C '{"model":"zz","prompt":"x","max_tokens":2}'
check lora_unknown_model_404 '.error == {"message":"The model `zz` does not exist.","type":"NotFoundError","param":"model","code":404}'

# prefix cache per adapter: 3 full blocks of a long prompt
LONG=$(printf 'word%d ' $(seq 1 40))
hits() { curl -s $U/metrics | awk '/^vllm:prefix_cache_hits_total/ {print $2}'; }
req POST $U$C "{\"model\":\"a\",\"prompt\":\"$LONG\",\"max_tokens\":2}"
h0=$(hits)
req POST $U$C "{\"model\":\"a\",\"prompt\":\"$LONG\",\"max_tokens\":2}"
h1=$(hits)
req POST $U$C "{\"model\":\"b\",\"prompt\":\"$LONG\",\"max_tokens\":2}"
h2=$(hits)
awk -v a="$h0" -v b="$h1" 'BEGIN { exit !(b - a >= 32) }' && echo "ok lora_prefix_hit_own" || echo "FAIL lora_prefix_hit_own: hits $h0 -> $h1"
awk -v a="$h1" -v b="$h2" 'BEGIN { exit !(b == a) }' && echo "ok lora_prefix_no_hit_other" || echo "FAIL lora_prefix_no_hit_other: hits $h1 -> $h2"

# runtime load / unload
L=$U/v1/load_lora_adapter UL=$U/v1/unload_lora_adapter
req POST $L "{\"lora_name\":\"c\",\"lora_path\":\"$T/c\"}"
[ "$STATUS" = 200 ] && [ "$BODY" = "Success: LoRA adapter 'c' added successfully." ] && echo "ok lora_load_ok" || echo "FAIL lora_load_ok: $STATUS $BODY"
req POST $L "{\"lora_name\":\"c\",\"lora_path\":\"$T/c\"}"
check lora_load_duplicate_400 '.error == {"message":"The lora adapter '"'c'"' has already been loaded.","type":"InvalidUserInput","param":null,"code":400}'
req POST $L "{\"lora_name\":\"d\",\"lora_path\":\"$T/nope\"}"
check lora_load_missing_404 ".error.code == 404 and .error.type == \"NotFoundError\" and (.error.message | contains(\"No adapter found for $T/nope\"))"
req POST $L '{"lora_name":"d"}'
check lora_load_missing_field_400 '.error == {"message":"Both '"'lora_name'"' and '"'lora_path'"' must be provided.","type":"InvalidUserInput","param":null,"code":400}'
req POST $L "{\"lora_name\":\"big\",\"lora_path\":\"$T/big\"}"
check lora_load_rank_400 '.error.code == 400 and (.error.message | contains("rank 32 is greater than max_lora_rank 16"))'
[ "$(comp a)" = "$ta" ] && echo "ok lora_serving_after_bad_load" || echo "FAIL lora_serving_after_bad_load"
req POST $UL '{"lora_name":"c"}'
[ "$STATUS" = 200 ] && [ "$BODY" = "Success: LoRA adapter 'c' removed successfully." ] && echo "ok lora_unload_ok" || echo "FAIL lora_unload_ok: $STATUS $BODY"
req POST $UL '{"lora_name":"c"}'
check lora_unload_unknown_404 '.error == {"message":"The lora adapter '"'c'"' cannot be found.","type":"NotFoundError","param":null,"code":404}'
req GET $U/v1/models
check lora_models_after_unload '[.data[].id] == ["stories","a","b"]'

# 8 streams of a, b, c and the base model while c is loaded and unloaded
req POST $L "{\"lora_name\":\"c\",\"lora_path\":\"$T/c\"}"
pids=()
for i in 0 1 2 3 4 5 6 7; do
  m=$(echo "a b c stories a b stories c" | cut -d' ' -f$((i + 1)))
  curl -s -N --max-time 120 $U$C -H 'Content-Type: application/json' \
    -d "{\"model\":\"$m\",\"prompt\":\"Once\",\"max_tokens\":120,\"ignore_eos\":true,\"stream\":true}" > "$T/s$i" &
  pids+=($!)
done
sleep 0.3
for k in 1 2 3; do
  curl -s -o /dev/null $UL -H 'Content-Type: application/json' -d '{"lora_name":"c"}'
  curl -s -o /dev/null $L -H 'Content-Type: application/json' -d "{\"lora_name\":\"c\",\"lora_path\":\"$T/c\"}"
  curl -s -o /dev/null $L -H 'Content-Type: application/json' -d "{\"lora_name\":\"e$k\",\"lora_path\":\"$T/a\"}"
  curl -s -o /dev/null $UL -H 'Content-Type: application/json' -d "{\"lora_name\":\"e$k\"}"
done
info=$(curl -s $U/metrics | grep '^vllm:lora_requests_info')
for p in "${pids[@]}"; do wait "$p"; done
okn=0
for i in 0 1 2 3 4 5 6 7; do
  [ "$(grep -c '"finish_reason":"length"' "$T/s$i")" = 1 ] && grep -q '^data: \[DONE\]' "$T/s$i" && okn=$((okn + 1))
done
[ $okn = 8 ] && echo "ok lora_streams_under_reload" || echo "FAIL lora_streams_under_reload: $okn of 8 streams finished"
usage() { curl -s $U/metrics | awk '/^vllm:kv_cache_usage_perc/ {print $2}'; }
wait_for lora_kv_usage_back_to_0 30 bash -c "[ \"\$(curl -s $U/metrics | awk '/^vllm:kv_cache_usage_perc/ {print \$2}')\" = 0.0 ]"
grep -q '^# TYPE vllm:lora_requests_info gauge' <(curl -s $U/metrics) && [ -n "$info" ] && echo "ok lora_requests_info_metric" ||
  echo "FAIL lora_requests_info_metric: '$info'"
# a series with adapters running, value a unix time (within a day of now)
line=$(grep 'running_lora_adapters="[^"]*a' <<<"$info" | head -1)
now=$(date +%s)
# (labels sorted by name on output, as prometheus_client writes them)
if [[ $line =~ ^vllm:lora_requests_info\{max_lora=\"2\",running_lora_adapters=\"[^\"]+\",waiting_lora_adapters=\"[^\"]*\"\}\ ([0-9.e+]+)$ ]] &&
   awk -v v="${BASH_REMATCH[1]}" -v n="$now" 'BEGIN { exit !(v > n - 86400 && v < n + 86400) }'; then
  echo "ok lora_requests_info_labels"
else
  echo "FAIL lora_requests_info_labels: '$line'"
fi
server_stop_all

# without VLLM_ALLOW_RUNTIME_LORA_UPDATING: no routes; without --enable-lora: no adapters
unset VLLM_ALLOW_RUNTIME_LORA_UPDATING
server_start S2 --model $MODEL || exit 0
req POST $S2_URL/v1/load_lora_adapter "{\"lora_name\":\"c\",\"lora_path\":\"$T/c\"}"
check lora_routes_off_404 '. == {"detail":"Not Found"}'
req POST $S2_URL$C '{"model":"a","prompt":"x","max_tokens":2}'
check lora_off_model_404 '.error.code == 404 and .error.message == "The model `a` does not exist."'
server_stop_all

# start-up: a bad --lora-modules value and a bad adapter are errors naming them
out=$("$VLLMC" serve --model $MODEL --port 0 --enable-lora --lora-modules nopath 2>&1)
[[ $out == *"--lora-modules"*"expected name=path or JSON"* ]] && echo "ok lora_cli_bad_module" || echo "FAIL lora_cli_bad_module: $out"
out=$("$VLLMC" serve --model $MODEL --port 0 --enable-lora --lora-modules big="$T/big" 2>&1)
[[ $out == *"LoRA adapter 'big': rank 32 is greater than max_lora_rank 16"* ]] && echo "ok lora_cli_rank_error" || echo "FAIL lora_cli_rank_error: $(tail -2 <<<"$out")"
exit 0
