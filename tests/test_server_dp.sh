#!/usr/bin/env bash
# test_server_dp.sh - data parallelism (issue 23): `vllmc serve -dp 2` runs
# two engine processes behind one front end over ZeroMQ (src/dist/dp_*).
#   - 64 concurrent completions (greedy and seeded, n=1 and n=2, stop
#     strings) on dp=2 give exactly the token ids, text and finish reasons
#     of the single-engine server (batch invariance makes this exact);
#   - the expected values are independent too: BOS-prompted greedy ids on
#     dp=2 equal llama2.c's (models/stories260K/reference_bos_greedy200.json);
#   - both engines took load, seen in the per-engine metrics
#     (vllm:request_success_total{engine="0"|"1"}), whose sum is what the
#     clients saw; the prefix_cache routing serves too;
#   - killing an engine process mid-run (kill -9, engines slowed by
#     VLLMC_DEBUG_STEP_DELAY_US) logs an ERROR line naming it, every client
#     gets an answer (no hang: curl --max-time), later requests are served by
#     the survivor (/health 200); killing the last one makes requests fail
#     fast and /health 503;
#   - clients that disconnect mid-stream: their aborts reach the engines
#     running them (two aborted finishes in /metrics, nothing left running).
# checks: 14
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-$PWD/build}
export VLLMC=${VLLMC:-$BUILD_DIR/vllmc}
. tests/server_helpers.sh
MODEL=models/stories260K
REF=$MODEL/reference_bos_greedy200.json
tmp=$(mktemp -d)
trap 'server_stop_all; rm -rf "$tmp"' EXIT

. tests/dp_helpers.sh

server_start ONE --model $MODEL --threads 1 || exit 0
run64 "$ONE_URL" "$tmp/one"
server_stop_all

server_start DP --model $MODEL --threads 1 -dp 2 || exit 0
run64 "$DP_URL" "$tmp/dp"
bad=0
for i in $(seq 0 63); do cmp -s "$tmp/one/$i.out" "$tmp/dp/$i.out" || { bad=$((bad + 1)); [ $bad -eq 1 ] && diff "$tmp/one/$i.out" "$tmp/dp/$i.out" | head -4 >&2; }; done
nonempty=$(cat "$tmp"/one/*.out | grep -c '"token_ids":\[[0-9]')
if [ $bad -eq 0 ] && [ "$nonempty" -eq 64 ]; then echo "ok dp2_equals_single_engine_64"
else echo "FAIL dp2_equals_single_engine_64: $bad of 64 differ, $nonempty single-engine outputs have tokens"; fi

req POST "$DP_URL/v1/completions" '{"model":"'$MODEL'","prompt":[1],"max_tokens":64,"temperature":0,"ignore_eos":true,"return_token_ids":true}'
want=$(jq -c '.greedy_ids[:64]' "$REF")
check dp2_bos_greedy_equals_llama2c "(.choices[0].token_ids == $want)"

req GET "$DP_URL/metrics"
m=$BODY
e0=$(success_total "$m" 0) e1=$(success_total "$m" 1) all=$(success_total "$m" "")
if [ "$e0" -gt 0 ] && [ "$e1" -gt 0 ]; then echo "ok dp2_both_engines_took_load ($e0 + $e1)"
else echo "FAIL dp2_both_engines_took_load: engine 0 finished $e0 requests, engine 1 $e1"; fi
# 64 requests (n=2 counts once per sequence, as vLLM counts finished sequences) + the BOS one
seqs=$(( $(cat "$tmp"/dp/*.out | jq 'length' | paste -sd+ | bc) + 1 ))
if [ "$all" -eq "$seqs" ]; then echo "ok dp2_metrics_count_what_clients_saw"
else echo "FAIL dp2_metrics_count_what_clients_saw: /metrics counts $all finished, the clients saw $seqs"; fi
# (here-strings, not pipes: grep -q closing early would fail the pipe under pipefail)
if grep -q '^vllm:num_requests_waiting{engine="1",' <<< "$m" &&
   [ "$(grep -c '^# TYPE vllm:num_requests_running ' <<< "$m")" -eq 1 ]; then echo "ok dp2_one_family_per_metric"
else echo "FAIL dp2_one_family_per_metric: no engine=\"1\" series, or a family written twice"; fi
server_stop_all

# prefix-cache-aware routing: the same outputs
server_start PFX --model $MODEL --threads 1 -dp 2 --data-parallel-routing prefix_cache || exit 0
run64 "$PFX_URL" "$tmp/pfx"
bad=0
for i in $(seq 0 63); do cmp -s "$tmp/one/$i.out" "$tmp/pfx/$i.out" || bad=$((bad + 1)); done
if [ $bad -eq 0 ]; then echo "ok dp2_prefix_routing_equals_single_engine"
else echo "FAIL dp2_prefix_routing_equals_single_engine: $bad of 64 differ"; fi
server_stop_all

# an engine killed mid-run
VLLMC_DEBUG_STEP_DELAY_US=20000 server_start K --model $MODEL --threads 1 -dp 2 || exit 0
pid1=$(grep -o 'data parallel engine 1 is ready (pid [0-9]*' "$K_LOG" | grep -o '[0-9]*$')
# a client that disconnects: its abort reaches the engine running it (which reports finished_reason abort)
for i in 0 1; do
  curl -s -N --max-time 2 -H 'Content-Type: application/json' \
    --data-binary '{"model":"'$MODEL'","prompt":"Gone '$i'","max_tokens":400,"ignore_eos":true,"stream":true}' \
    "$K_URL/v1/completions" > /dev/null 2>&1
done
aborted() {
  local m; m=$(curl -s --max-time 10 "$K_URL/metrics")
  [ "$(awk '/^vllm:request_success_total\{/ && /finished_reason="abort"/ { s += $NF } END { print s + 0 }' <<< "$m")" = 2 ] &&
  [ "$(awk '/^vllm:num_requests_running\{/ { s += $NF } END { print s + 0 }' <<< "$m")" = 0 ]
}
wait_for dp2_disconnect_aborts_on_its_engine 45 aborted
mkdir -p "$tmp/k"
pids=()
for i in $(seq 0 7); do
  curl -s --max-time 40 -o "$tmp/k/$i.json" -w '%{http_code}\n' -H 'Content-Type: application/json' \
    --data-binary '{"model":"'$MODEL'","prompt":"Once upon a time '$i'","max_tokens":200,"ignore_eos":true}' \
    "$K_URL/v1/completions" > "$tmp/k/$i.code" 2>/dev/null &
  pids+=($!)
done
sleep 1
kill -9 "$pid1"
wait "${pids[@]}"
codes=$(cat "$tmp"/k/*.code | sort | uniq -c | tr -s ' \n' ' ')
if [ "$(cat "$tmp"/k/*.code | grep -cv '^000$')" -eq 8 ]; then echo "ok dp2_killed_engine_no_hang ($codes)"
else echo "FAIL dp2_killed_engine_no_hang: some clients got no answer within 40 s: $codes"; fi
if grep -q "ERROR.*data parallel engine 1 (pid $pid1) was killed by signal 9" "$K_LOG"; then echo "ok dp2_killed_engine_logged"
else echo "FAIL dp2_killed_engine_logged: no ERROR line naming engine 1 in the log"; tail -5 "$K_LOG" >&2; fi
if grep -q '"finish_reason":"error"\|Data parallel engine 1' "$tmp"/k/*.json && grep -q '"finish_reason":"length"' "$tmp"/k/*.json
then echo "ok dp2_killed_engine_requests_fail_others_finish"
else echo "FAIL dp2_killed_engine_requests_fail_others_finish: $(cat "$tmp"/k/*.json | head -c 600)"; fi
req POST "$K_URL/v1/completions" '{"model":"'$MODEL'","prompt":"After the kill","max_tokens":8}'
check dp2_survivor_serves '(.choices[0].text | length) > 0'
req GET "$K_URL/health"
check_status dp2_health_degraded_ok 200
pid0=$(grep -o 'data parallel engine 0 is ready (pid [0-9]*' "$K_LOG" | grep -o '[0-9]*$')
kill -9 "$pid0"
sleep 1
req POST "$K_URL/v1/completions" '{"model":"'$MODEL'","prompt":"Nobody left","max_tokens":8}'
if [ "$STATUS" != 200 ] && [ "$STATUS" != 000 ]; then echo "ok dp2_no_engine_fails_fast ($STATUS)"
else echo "FAIL dp2_no_engine_fails_fast: status $STATUS: $(printf '%s' "$BODY" | head -c 300)"; fi
req GET "$K_URL/health"
check_status dp2_health_dead_503 503
