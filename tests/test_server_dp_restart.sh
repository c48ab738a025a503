#!/usr/bin/env bash
# test_server_dp_restart.sh - --data-parallel-restart-engines (issue 23,
# beyond vLLM): a data-parallel engine that dies is started again by
# whoever started it, and takes its place again when its HELLO comes.
#   - -dp 2: engine 1 killed (kill -9) while 8 requests run (engines slowed
#     by VLLMC_DEBUG_STEP_DELAY_US): every client gets an answer (no hang),
#     the front end logs the restart with the new pid and the engine ready
#     again; then 16 concurrent greedy requests equal the same requests made
#     before the kill, and engine 1 finished some of them;
#   - --api-server-count 2 -dp 2: the supervisor restarts the killed engine,
#     both API servers take it back, and it serves again.
# checks: 8
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-$PWD/build}
export VLLMC=${VLLMC:-$BUILD_DIR/vllmc}
. tests/server_helpers.sh
MODEL=models/stories260K
tmp=$(mktemp -d)
trap 'server_stop_all; rm -rf "$tmp"' EXIT

run16() {
  local url=$1 dir=$2 i pids=()
  mkdir -p "$dir"
  for i in $(seq 0 15); do
    curl -s --max-time 60 -o "$dir/$i.json" -H 'Content-Type: application/json' \
      --data-binary '{"model":"'$MODEL'","prompt":"Once upon a time '$i'","max_tokens":16,"temperature":0,"return_token_ids":true}' \
      "$url/v1/completions" &
    pids+=($!)
  done
  wait "${pids[@]}"
  for i in $(seq 0 15); do jq -c '.choices[0].token_ids' "$dir/$i.json" > "$dir/$i.out" 2>/dev/null || echo bad > "$dir/$i.out"; done
}
engine1_done() { curl -s --max-time 20 "$1/metrics" | awk '/^vllm:request_success_total\{/ && /engine="1"/ { s += $NF } END { print s + 0 }'; }
kill_during_8() { # URL PID DIR: 8 long requests, engine PID killed after a second; prints the statuses
  local url=$1 pid=$2 dir=$3 i pids=()
  mkdir -p "$dir"
  for i in $(seq 0 7); do
    curl -s --max-time 40 -o "$dir/$i.json" -w '%{http_code}\n' -H 'Content-Type: application/json' \
      --data-binary '{"model":"'$MODEL'","prompt":"Long '$i'","max_tokens":150,"ignore_eos":true}' \
      "$url/v1/completions" > "$dir/$i.code" 2>/dev/null &
    pids+=($!)
  done
  sleep 1
  kill -9 "$pid"
  wait "${pids[@]}"
  cat "$dir"/*.code | tr '\n' ' '
}

VLLMC_DEBUG_STEP_DELAY_US=10000 server_start R --model $MODEL --threads 1 -dp 2 --data-parallel-restart-engines || exit 0
run16 "$R_URL" "$tmp/before"
pid1=$(grep -o 'data parallel engine 1 is ready (pid [0-9]*' "$R_LOG" | grep -o '[0-9]*$')
codes=$(kill_during_8 "$R_URL" "$pid1" "$tmp/k")
if ! grep -q '000' <<< "$codes"; then echo "ok dp2_restart_no_hang ($codes)"
else echo "FAIL dp2_restart_no_hang: some clients got no answer within 40 s: $codes"; fi
restarted() { grep -q "WARNING.*data parallel engine 1: restarting it (pid [0-9]*)" "$R_LOG"; }
wait_for dp2_restart_logged 30 restarted
ready() { grep -q "data parallel engine 1 is ready again (pid [0-9]*" "$R_LOG"; }
wait_for dp2_restart_ready_again 90 ready
n1=$(engine1_done "$R_URL")
run16 "$R_URL" "$tmp/after"
bad=0
for i in $(seq 0 15); do cmp -s "$tmp/before/$i.out" "$tmp/after/$i.out" || bad=$((bad + 1)); done
if [ $bad -eq 0 ] && grep -q '^\[[0-9]' "$tmp/after/0.out"; then echo "ok dp2_restart_serves_same_outputs"
else echo "FAIL dp2_restart_serves_same_outputs: $bad of 16 differ: $(head -c 200 "$tmp/after/0.json")"; fi
n2=$(engine1_done "$R_URL")
if [ "$n2" -gt "$n1" ]; then echo "ok dp2_restarted_engine_takes_load ($n1 -> $n2)"
else echo "FAIL dp2_restarted_engine_takes_load: engine 1 finished $n1 before, $n2 after"; fi
server_stop_all

VLLMC_DEBUG_STEP_DELAY_US=10000 server_start A --model $MODEL --threads 1 -dp 2 --api-server-count 2 \
  --data-parallel-restart-engines || exit 0
for i in $(seq 1200); do [ "$(grep -c 'Application startup complete.' "$A_LOG")" -ge 2 ] && break; sleep 0.05; done
pid1=$(grep -o 'EngineCore_DP1 pid=[0-9]*' "$A_LOG" | head -1 | cut -d= -f2)
codes=$(kill_during_8 "$A_URL" "$pid1" "$tmp/ka")
asc_ready() { [ "$(grep -c "data parallel engine 1 is ready again" "$A_LOG")" -ge 2 ]; }
if grep -q "WARNING.*data parallel engine 1: restarting it" "$A_LOG" || { sleep 3; grep -q "restarting it" "$A_LOG"; }; then
  echo "ok asc2_dp2_supervisor_restarts_engine ($codes)"
else echo "FAIL asc2_dp2_supervisor_restarts_engine: no restart line; statuses $codes"; fi
wait_for asc2_dp2_both_api_servers_take_it_back 90 asc_ready
n1=$(engine1_done "$A_URL")
run16 "$A_URL" "$tmp/after_a"
n2=$(engine1_done "$A_URL")
bad=0
for i in $(seq 0 15); do cmp -s "$tmp/before/$i.out" "$tmp/after_a/$i.out" || bad=$((bad + 1)); done
if [ $bad -eq 0 ] && [ "$n2" -gt "$n1" ]; then echo "ok asc2_dp2_restarted_engine_serves ($n1 -> $n2)"
else echo "FAIL asc2_dp2_restarted_engine_serves: $bad of 16 differ; engine 1 finished $n1 before, $n2 after"; fi
