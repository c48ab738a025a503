#!/usr/bin/env bash
# test_kv_proxy.sh - `vllmc proxy --prefill URL --decode URL` (docs/disagg.md)
# in front of a SharedStorageConnector producer and consumer, on a random
# TinyLlama-shaped model (4 layers, 4096 positions), against a single
# instance's greedy output:
#   - completions through the proxy, whole and streamed, equal the single
#     instance's; the decode instance loaded the prompt's blocks (its
#     cached_tokens, relayed by the proxy, is floor((L - 1) / 16) * 16);
#   - other routes go to the decode instance;
#   - the prefill instance killed: the proxy falls back to local prefill;
#   - a client gone mid-stream: the decode instance's KV usage returns to 0;
#   - SIGTERM while a stream is relayed: the proxy aborts the transfer, joins
#     its threads and exits 0 within 3 s (the stream alone lasts > 4 s) (no leak or race report under
#     build-san / build-tsan), and the decode instance frees the request's KV;
#   - no instances given: usage error.
# checks: 10
# tags: tsan
cd "$(dirname "$0")/.." || exit 1
. tests/server_helpers.sh
PY=/usr/bin/python3
names="proxy_completions_equal_single proxy_decode_loaded_kv proxy_stream_equal_single proxy_forwards_models
proxy_prefill_down_fallback proxy_client_disconnect_kv_freed proxy_kv_usage_zero_prefill proxy_kv_usage_zero_decode proxy_usage_error
proxy_shutdown_joins"
if ! $PY -c 'import numpy' 2>/dev/null; then
  for n in $names; do echo "skip $n: /usr/bin/python3 without numpy (tools/make_random_model.py)"; done
  exit 0
fi
tmp=$(mktemp -d)
PROXY_PID=
proxy_exit() { # stop the proxy; a sanitizer report in its log fails the test, as server_stop_all does
  [ -n "$PROXY_PID" ] && kill $PROXY_PID 2>/dev/null && wait $PROXY_PID 2>/dev/null
  grep -m1 -E '^==[0-9]+==ERROR|^WARNING: ThreadSanitizer|runtime error:' "$tmp/proxy.log" 2>/dev/null |
    sed 's/^/FAIL proxy_sanitizer_report: /'
  server_stop_all; rm -rf "$tmp"
}
trap proxy_exit EXIT
M=$tmp/model
$PY tools/make_random_model.py "$M" --arch llama --dtype f32 --hidden-size 64 --intermediate-size 128 \
  --layers 4 --heads 4 --kv-heads 2 --max-pos 4096 --tokenizer stories260K >"$tmp/gen.log" 2>&1 ||
  { echo "FAIL make_model: $(tail -3 "$tmp/gen.log")"; exit 1; }
cfg() { echo "{\"kv_connector\":\"SharedStorageConnector\",\"kv_role\":\"$1\",\"kv_connector_extra_config\":{\"shared_storage_path\":\"$tmp/store\"}}"; }
server_start P --model "$M" --threads 1 --kv-transfer-config "$(cfg kv_producer)" || exit 1
# a 2 ms step: a 2000-token stream outlives the client that leaves after 2 s
VLLMC_DEBUG_STEP_DELAY_US=2000 server_start C --model "$M" --threads 1 --enable-prompt-tokens-details \
  --kv-transfer-config "$(cfg kv_consumer)" || exit 1
server_start S --model "$M" --threads 1 || exit 1
"$VLLMC" proxy --port 0 --prefill "$P_URL" --decode "$C_URL" >"$tmp/proxy.log" 2>&1 &
PROXY_PID=$!
for _ in $(seq 1200); do grep -q "Starting vllmc proxy on" "$tmp/proxy.log" && break; sleep 0.05; done
X=$(grep -o 'Starting vllmc proxy on [^ ]*' "$tmp/proxy.log" | sed 's/.* on //')
[ -n "$X" ] || { echo "FAIL proxy_start: $(tail -3 "$tmp/proxy.log")"; exit 1; }

prompt() { $PY -c "import random; r=random.Random($1); print([r.randrange(3, 512) for _ in range(r.randrange(1000, 2001))])"; }
body() { echo "{\"model\":\"$M\",\"prompt\":$1,\"max_tokens\":$2,\"temperature\":0,\"ignore_eos\":true,\"return_token_ids\":true${3:-}}"; }
ids() { jq -c '.choices[0].token_ids' <<<"$BODY"; }
equal=1; loaded=1
for k in 1 2 3 4; do
  p=$(prompt $k); L=$($PY -c "print(len($p))")
  req POST "$S_URL/v1/completions" "$(body "$p" 8)"; single=$(ids)
  req POST "$X/v1/completions" "$(body "$p" 8)"
  [ "$(ids)" = "$single" ] && [ "$single" != null ] || { equal=0; echo "prompt $k: proxy $(head -c 300 <<<"$BODY") single $single" >&2; }
  [ "$(jq '.usage.prompt_tokens_details.cached_tokens' <<<"$BODY")" = $(( (L - 1) / 16 * 16 )) ] || loaded=0
done
[ $equal = 1 ] && echo "ok proxy_completions_equal_single" || echo "FAIL proxy_completions_equal_single: see stderr"
[ $loaded = 1 ] && echo "ok proxy_decode_loaded_kv" || echo "FAIL proxy_decode_loaded_kv: cached_tokens not the prompt's whole blocks"

p=$(prompt 5)
req POST "$S_URL/v1/completions" "$(body "$p" 12)"; want=$(jq -r '.choices[0].text' <<<"$BODY")
req POST "$X/v1/completions" "$(body "$p" 12 ',"stream":true')"
got=$(grep '^data: {' <<<"$BODY" | cut -c7- | jq -j '.choices[0].text // ""')
[ "$got" = "$want" ] && grep -q '^data: \[DONE\]' <<<"$BODY" && grep -qi 'content-type: text/event-stream' <<<"$HEADERS" &&
  echo "ok proxy_stream_equal_single" || echo "FAIL proxy_stream_equal_single: '$got' vs '$want'"

req GET "$X/v1/models"
check proxy_forwards_models '.data[0].id != null'

# a client gone mid-stream through the proxy
curl -s -N --max-time 2 -H 'Content-Type: application/json' -d "$(body "$(prompt 6)" 2000 ',"stream":true')" \
  "$X/v1/completions" >/dev/null 2>&1
usage0() { curl -s "$1/metrics" | grep -Eq '^vllm:kv_cache_usage_perc\{[^}]*\} 0(\.0)?$'; }
aborted() { usage0 "$C_URL" && grep -q "client disconnected; aborting the request" "$C_LOG"; }
wait_for proxy_client_disconnect_kv_freed 45 aborted
wait_for proxy_kv_usage_zero_prefill 45 usage0 "$P_URL"

# the prefill instance gone: the decode instance computes the prompt
kill -TERM "$P_PID"; wait "$P_PID" 2>/dev/null
p=$(prompt 7)
req POST "$S_URL/v1/completions" "$(body "$p" 8)"; single=$(ids)
req POST "$X/v1/completions" "$(body "$p" 8)"
[ "$STATUS" = 200 ] && [ "$(ids)" = "$single" ] && [ "$(jq '.usage.prompt_tokens_details.cached_tokens // 0' <<<"$BODY")" = 0 ] &&
  echo "ok proxy_prefill_down_fallback" || echo "FAIL proxy_prefill_down_fallback: $STATUS $(head -c 300 <<<"$BODY")"
usage0 "$C_URL" && echo "ok proxy_kv_usage_zero_decode" || echo "FAIL proxy_kv_usage_zero_decode"

# SIGTERM with a stream in flight (2000 tokens at >= 2 ms a step): the relay thread is joined
curl -s -N --max-time 60 -H 'Content-Type: application/json' -d "$(body "$(prompt 8)" 2000 ',"stream":true')" \
  "$X/v1/completions" >"$tmp/stream.out" 2>&1 &
cpid=$!
for _ in $(seq 1200); do grep -q '^data: {' "$tmp/stream.out" 2>/dev/null && break; sleep 0.05; done
t0=$(date +%s.%N)
kill -TERM $PROXY_PID; wait $PROXY_PID; prc=$?
dt=$($PY -c "print(round($(date +%s.%N) - $t0, 2))")
PROXY_PID=
wait $cpid 2>/dev/null
freed() { usage0 "$C_URL"; }
for _ in $(seq 300); do freed && break; sleep 0.1; done
[ $prc = 0 ] && $PY -c "import sys; sys.exit(0 if $dt < 3 else 1)" && grep -q '^data: {' "$tmp/stream.out" && freed &&
  ! grep -qE '^==[0-9]+==ERROR|^WARNING: ThreadSanitizer|runtime error:' "$tmp/proxy.log" &&
  echo "ok proxy_shutdown_joins" || echo "FAIL proxy_shutdown_joins: exit $prc after $dt s; $(tail -3 "$tmp/proxy.log")"

"$VLLMC" proxy --prefill "$S_URL" >"$tmp/u.log" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "needs --prefill URL... and --decode URL" "$tmp/u.log" && echo "ok proxy_usage_error" ||
  echo "FAIL proxy_usage_error: rc $rc $(cat "$tmp/u.log")"
