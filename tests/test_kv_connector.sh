#!/usr/bin/env bash
# test_kv_connector.sh - disaggregated prefill/decode through the
# SharedStorageConnector (docs/disagg.md), on `vllmc serve` with a random
# TinyLlama-shaped model small enough to run 1-2k-token prompts fast
# (tools/make_random_model.py: llama, 4 layers, 4096 positions; stories260K
# stops at 512):
#   - 16 prompts of 1000-2000 random token ids: a producer instance prefills
#     each (max_tokens 1, kv_transfer_params {do_remote_decode: true}), a
#     consumer instance decodes it; greedy ids equal a single instance's;
#   - the consumer computed at most one block of each prompt: its
#     usage.prompt_tokens_details.cached_tokens, and its
#     vllm:external_prefix_cache_hits equal the hand-derived count of whole
#     blocks before the last prompt token (floor((L - 1) / 16) * 16), the
#     producer wrote floor(L / 16) block files;
#   - a block file with a flipped payload byte, and one cut short, are
#     rejected (logged) and recomputed: same output, the match ends there;
#   - the producer killed: the consumer computes the prompt itself;
#   - a client gone mid-stream, bad configs and bad kv_transfer_params;
#   - KV usage back to 0 on both instances.
# checks: 18
cd "$(dirname "$0")/.." || exit 1
. tests/server_helpers.sh
PY=/usr/bin/python3
names="prefill_kv_transfer_params pd_outputs_equal_single decode_computed_at_most_one_block producer_block_files
consumer_external_prefix_cache_metrics consumer_log_external_hit_rate corrupt_block_same_output corrupt_block_match_ends
corrupt_block_logged truncated_block_same_output truncated_block_match_ends prefill_killed_local_recompute
client_disconnect_kv_freed kv_usage_zero_consumer kv_usage_zero_producer unsupported_connector_error bad_role_error
kv_transfer_params_not_object"
if ! $PY -c 'import numpy' 2>/dev/null; then
  for n in $names; do echo "skip $n: /usr/bin/python3 without numpy (tools/make_random_model.py)"; done
  exit 0
fi
tmp=$(mktemp -d)
trap 'server_stop_all; rm -rf "$tmp"' EXIT
M=$tmp/model
$PY tools/make_random_model.py "$M" --arch llama --dtype f32 --hidden-size 64 --intermediate-size 128 \
  --layers 4 --heads 4 --kv-heads 2 --max-pos 4096 --tokenizer stories260K >"$tmp/gen.log" 2>&1 ||
  { echo "FAIL make_model: $(tail -3 "$tmp/gen.log")"; exit 1; }
store=$tmp/store
cfg() { echo "{\"kv_connector\":\"SharedStorageConnector\",\"kv_role\":\"$1\",\"kv_connector_extra_config\":{\"shared_storage_path\":\"$store\"}}"; }
export VLLM_LOG_STATS_INTERVAL=0.5
server_start P --model "$M" --threads 1 --kv-transfer-config "$(cfg kv_producer)" || exit 1
# a 2 ms step: a 2000-token stream outlives the client that leaves after 2 s
VLLMC_DEBUG_STEP_DELAY_US=2000 server_start C --model "$M" --threads 1 --enable-prompt-tokens-details \
  --kv-transfer-config "$(cfg kv_consumer)" || exit 1
server_start S --model "$M" --threads 1 || exit 1

# prompt K: random ids 3..511 (no BOS/EOS), length 1000..2000, seeded by K
prompt() { $PY -c "import random; r=random.Random($1); print([r.randrange(3, 512) for _ in range(r.randrange(1000, 2001))])"; }
body() { # prompt max_tokens [extra fields]
  echo "{\"model\":\"$M\",\"prompt\":$1,\"max_tokens\":$2,\"temperature\":0,\"ignore_eos\":true,\"return_token_ids\":true${3:-}}"
}
ids() { jq -c '.choices[0].token_ids' <<<"$BODY"; }
bs=16; want_files=0; want_hits=0; want_queries=0; equal=1; atmost=1; params_ok=1
for k in $(seq 1 16); do
  p=$(prompt $k); L=$($PY -c "print(len($p))")
  req POST "$S_URL/v1/completions" "$(body "$p" 8)"; single=$(ids)
  req POST "$P_URL/v1/completions" "$(body "$p" 1 ',"kv_transfer_params":{"do_remote_decode":true}')"
  [ $k = 1 ] && first_prefill=$BODY
  params=$(jq -c '.kv_transfer_params' <<<"$BODY")
  req POST "$C_URL/v1/completions" "$(body "$p" 8 ",\"kv_transfer_params\":$params")"
  [ "$(ids)" = "$single" ] && [ "$single" != null ] || { equal=0; echo "prompt $k: decode $(ids) single $single" >&2; }
  cached=$(jq '.usage.prompt_tokens_details.cached_tokens' <<<"$BODY")
  [ "$cached" = $(( (L - 1) / bs * bs )) ] || { atmost=0; echo "prompt $k (L=$L): cached_tokens $cached" >&2; }
  want_files=$((want_files + L / bs)); want_hits=$((want_hits + (L - 1) / bs * bs)); want_queries=$((want_queries + L))
done
check prefill_kv_transfer_params '.kv_transfer_params.do_remote_prefill == true and .kv_transfer_params.remote_engine_id == "vllmc"
  and (.choices[0].token_ids | length) == 1' "$first_prefill"
[ $equal = 1 ] && echo "ok pd_outputs_equal_single" || echo "FAIL pd_outputs_equal_single: see stderr"
[ $atmost = 1 ] && echo "ok decode_computed_at_most_one_block" || echo "FAIL decode_computed_at_most_one_block: see stderr"
nfiles=$(ls "$store" | grep -c '\.kv$')
[ "$nfiles" = $want_files ] && echo "ok producer_block_files" || echo "FAIL producer_block_files: $nfiles files, want $want_files"
val() { curl -s "$1/metrics" | awk -v n="$2" '$1 ~ "^"n"\\{" {print $2+0}'; }
got="$(val $C_URL vllm:external_prefix_cache_hits_total) $(val $C_URL vllm:external_prefix_cache_queries_total) $(val $C_URL vllm:prefix_cache_hits_total)"
[ "$got" = "$want_hits $want_queries 0" ] && echo "ok consumer_external_prefix_cache_metrics" ||
  echo "FAIL consumer_external_prefix_cache_metrics: hits queries local-hits = $got, want $want_hits $want_queries 0"
wait_for consumer_log_external_hit_rate 15 grep -q "External prefix cache hit rate: [1-9]" "$C_LOG"

# a prompt prefilled, then its block 5 damaged: the consumer loads blocks 0..4 and computes the rest
corrupt_run() { # seed mode name
  local p single before f
  p=$(prompt $1)
  req POST "$S_URL/v1/completions" "$(body "$p" 8)"; single=$(ids)
  # block 5's file is the one a 96-token prefix adds to an 80-token one
  req POST "$P_URL/v1/completions" "$(body "$($PY -c "print($p[:80])")" 1)"
  before=$(ls "$store" | sort)
  req POST "$P_URL/v1/completions" "$(body "$($PY -c "print($p[:96])")" 1)"
  f=$(comm -13 <(echo "$before") <(ls "$store" | sort))
  req POST "$P_URL/v1/completions" "$(body "$p" 1)"
  if [ "$2" = flip ]; then
    printf '\xff' | dd of="$store/$f" bs=1 seek=100 conv=notrunc 2>/dev/null
  else
    truncate -s -7 "$store/$f"
  fi
  req POST "$C_URL/v1/completions" "$(body "$p" 8)"
  [ "$(ids)" = "$single" ] && echo "ok $3_same_output" || echo "FAIL $3_same_output: $(ids) vs $single"
  check $3_match_ends '.usage.prompt_tokens_details.cached_tokens == 80'
}
corrupt_run 101 flip corrupt_block
grep -q "rejected (checksum mismatch)" "$C_LOG" && echo "ok corrupt_block_logged" ||
  echo "FAIL corrupt_block_logged: no 'rejected (checksum mismatch)' in the consumer's log"
corrupt_run 102 cut truncated_block

usage0() { curl -s "$1/metrics" | grep -Eq '^vllm:kv_cache_usage_perc\{[^}]*\} 0(\.0)?$'; }
usage0 "$P_URL" && echo "ok kv_usage_zero_producer" || echo "FAIL kv_usage_zero_producer"

# the producer gone: the consumer computes a prompt nobody prefilled
kill -TERM "$P_PID"; wait "$P_PID" 2>/dev/null
p=$(prompt 103)
req POST "$S_URL/v1/completions" "$(body "$p" 8)"; single=$(ids)
req POST "$C_URL/v1/completions" "$(body "$p" 8 ',"kv_transfer_params":{"do_remote_prefill":true}')"
[ "$(ids)" = "$single" ] && [ "$(jq '.usage.prompt_tokens_details.cached_tokens // 0' <<<"$BODY")" = 0 ] &&
  echo "ok prefill_killed_local_recompute" || echo "FAIL prefill_killed_local_recompute: $(ids) vs $single, $(jq -c .usage <<<"$BODY")"

# a client that goes away while its long prompt is loaded and decoded
p=$(prompt 1)
curl -s -N --max-time 2 -H 'Content-Type: application/json' \
  -d "$(body "$p" 2000 ',"stream":true')" "$C_URL/v1/completions" >/dev/null 2>&1
aborted() { usage0 "$C_URL" && grep -q "client disconnected; aborting the request" "$C_LOG"; }
wait_for client_disconnect_kv_freed 30 aborted
usage0 "$C_URL" && echo "ok kv_usage_zero_consumer" || echo "FAIL kv_usage_zero_consumer"
req POST "$C_URL/v1/completions" "$(body '[5,6,7]' 1 ',"kv_transfer_params":[1]')"
check kv_transfer_params_not_object '.error.message | test("kv_transfer_params")'

bad_start() { # name expected-message config
  timeout 120 "$VLLMC" serve --model "$M" --port 0 --kv-transfer-config "$3" >"$tmp/bad.log" 2>&1
  local rc=$?
  [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "$2" "$tmp/bad.log" && echo "ok $1" || echo "FAIL $1: rc $rc: $(tail -2 "$tmp/bad.log")"
}
bad_start unsupported_connector_error "kv_connector 'NixlConnector' is not supported" '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'
bad_start bad_role_error "kv_role 'kv_sender' must be one of" '{"kv_connector":"SharedStorageConnector","kv_role":"kv_sender"}'
