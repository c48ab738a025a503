#!/usr/bin/env bash
# test_pp_overlap.sh - pipeline parallelism with batches in flight
# (dist/tp_executor.c, engine.c step_pipelined; docs/deploy.md):
#  - `-pp 2` with disjoint batches in flight (vLLM's max_concurrent_batches
#    = pp; here VLLMC_PP_BATCHES_IN_FLIGHT=3, so that two stay in flight
#    between steps): 10 prompts sent at once, 32 greedy tokens
#    each, equal to one rank's tokens and logprobs (pp adds in one rank's
#    order) and identical from run to run; rank 0's log counts batches
#    submitted while another was in flight (> 0); KV cache usage is back
#    to 0 after;
#  - the same with VLLMC_PP_BATCHES_IN_FLIGHT=1 (the stages take turns: none
#    overlapped) gives the same tokens; a bad value is a start-up error;
#  - requests aborted while their batch is in flight (clients that hang up
#    on a stream): the server goes on serving, equal tokens, KV usage 0;
#  - rank 1 killed while batches are in flight: rank 0 logs which rank is
#    gone and the server exits within 20 s;
#  - structured outputs with -tp 2 and -pp 2 (the grammar masks are applied
#    on rank 0, where sampling is): 4 greedy response_format json_schema
#    completions sent at once (with -pp 2 alongside the other requests, so
#    masked sequences ride in overlapped batches) give tp=1's texts, and
#    each validates against the schema (jsonschema, .venv; skipped
#    without it).
# tp=1 is the reference (checked against transformers in
# test_forward_ref.sh). Needs mpirun (openmpi-bin) and /usr/bin/python3
# with numpy; SKIPPED otherwise.
# checks: 14
set -u
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
VLLMC_BIN=$(cd "$BUILD_DIR" && pwd)/vllmc
names="pp2_overlap_equals_tp1 pp2_overlap_run_to_run pp2_overlap_happened pp2_overlap_kv_freed
       pp2_one_in_flight_equals_tp1 pp2_one_in_flight_not_overlapped pp_bad_batches_env
       pp2_abort_in_flight_served pp2_kill_logged pp2_kill_clean_exit
       structured_tp1_valid structured_tp2_equals_tp1 structured_pp2_equals_tp1 structured_pp2_valid"
skip_all() { for n in $names; do echo "skip $n: $1"; done; exit 0; }
command -v mpirun >/dev/null || skip_all "mpirun is missing (openmpi-bin, scripts/setup.sh)"
/usr/bin/python3 -c 'import numpy' 2>/dev/null || skip_all "/usr/bin/python3 lacks numpy"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}:fast_unwind_on_malloc=0"
export LSAN_OPTIONS="suppressions=$PWD/tests/lsan_mpi.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export VLLM_LOGGING_LEVEL=INFO
source tests/server_helpers.sh
VLLMC=$VLLMC_BIN
PY=/usr/bin/python3
tmp=$(mktemp -d /tmp/vllmc-ppo-XXXXXX)
trap 'server_stop_all; rm -rf "$tmp"' EXIT

m=$tmp/rand
$PY tools/make_random_model.py "$m" --arch llama --dtype f32 --hidden-size 256 --intermediate-size 768 \
  --layers 4 --heads 8 --kv-heads 4 --tokenizer stories260K --max-pos 512 >/dev/null ||
  { for n in $names; do echo "FAIL $n: cannot write the random model"; done; exit 0; }
common=(--threads 1 --kv-cache-memory-bytes 16M --max-model-len 512)
client() { $PY tests/tp_client.py "$1" "$m" "$2" --prompts 10 --max-tokens 32; }
same() { [ "$($PY tests/tp_client.py compare "$1" "$2" | tr '\n' ' ')" = "same 10 32 maxdiff 0 " ]; }
# kv_usage URL: vllm:kv_cache_usage_perc as 0 when it is zero, else its value
kv_usage() { curl -s --max-time 10 "$1/metrics" | awk '/^vllm:kv_cache_usage_perc/ { print ($2 == 0 ? 0 : $2) }'; }
# stop NAME: SIGTERM, wait, and keep its log (the batch counts are logged at shutdown)
stop() {
  local pid log; pid=$(eval echo "\$${1}_PID"); log=$(eval echo "\$${1}_LOG")
  kill -TERM "$pid"; for _ in $(seq 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  cp "$log" "$tmp/$1.log"
}
overlapped() { sed -n 's/.*pipeline parallel: [0-9]* batches, \([0-9]*\) of them submitted while another.*/\1/p' "$1" | tail -1; }

# structured outputs: the masks are rank 0's (it samples); tp/pp only move the forward
st_names="structured_tp1_valid structured_tp2_equals_tp1 structured_pp2_equals_tp1 structured_pp2_valid"
VPY=.venv/bin/python
SCHEMA='{"type":"object","properties":{"ok":{"type":"boolean"},"n":{"enum":["a","b","c"]},"tag":{"type":"string","maxLength":4}},"required":["ok","n","tag"],"additionalProperties":false}'
# st_run URL OUT: 4 json_schema completions at once, their texts (one JSON string a line) into OUT
st_run() {
  local i pids=()
  for i in 0 1 2 3; do
    local p; p=$(sed -n "$((i + 1))p" <<< $'Once upon a time\nThe little dog\nLily and Tom went\nOne day, a big bird')
    curl -s --max-time 120 "$1/v1/completions" -H 'Content-Type: application/json' -d '{"model":"'"$m"'","prompt":"'"$p"'",
      "max_tokens":48,"temperature":0,"response_format":{"type":"json_schema","json_schema":{"name":"t","schema":'"$SCHEMA"'}},
      "structured_outputs":{"disable_any_whitespace":true}}' > "$2.$i" &
    pids+=($!)
  done
  wait "${pids[@]}"
  for i in 0 1 2 3; do jq -c '.choices[0].text' "$2.$i" || echo null; done > "$2"
}
# st_valid OUT: every text parses and validates against SCHEMA (jsonschema)
st_valid() { $VPY -c '
import json, sys, jsonschema
schema = json.loads(sys.argv[1])
for line in open(sys.argv[2]):
    jsonschema.validate(json.loads(json.loads(line)), schema)
' "$SCHEMA" "$1" 2>&1 | tail -1; }
st=true; $VPY -c 'import jsonschema' 2>/dev/null || st=false

if server_start R "$m" "${common[@]}" && client "$R_URL" "$tmp/tp1.json"; then
  $st && st_run "$R_URL" "$tmp/st.tp1"
else
  for n in $names; do echo "FAIL $n: the tp=1 server or its requests failed"; done; exit 0
fi
server_stop_all

# three batches in flight over the two stages (the default, 2, is test_tp.sh's pp2 rows and the
# kill below): between steps two are in flight, so a request aborted in one of them is reported
# before its batch is back and must outlive it (engine.c's deferred list)
if VLLMC_PP_BATCHES_IN_FLIGHT=3 server_start P "$m" "${common[@]}" -pp 2 && client "$P_URL" "$tmp/pp.json" && client "$P_URL" "$tmp/pp.2.json"; then
  if same "$tmp/tp1.json" "$tmp/pp.json"; then echo "ok pp2_overlap_equals_tp1"
  else echo "FAIL pp2_overlap_equals_tp1: $($PY tests/tp_client.py compare "$tmp/tp1.json" "$tmp/pp.json" | tr '\n' ' ')"; fi
  if same "$tmp/pp.json" "$tmp/pp.2.json"; then echo "ok pp2_overlap_run_to_run"
  else echo "FAIL pp2_overlap_run_to_run: $($PY tests/tp_client.py compare "$tmp/pp.json" "$tmp/pp.2.json" | tr '\n' ' ')"; fi
  u=$(kv_usage "$P_URL")
  if [ "$u" = 0 ]; then echo "ok pp2_overlap_kv_freed"; else echo "FAIL pp2_overlap_kv_freed: vllm:kv_cache_usage_perc ${u:-missing}"; fi

  # clients that hang up while their batch is in flight: each stream is cut
  # once it has tokens (it is decoding, in one of the two batches), one
  # after another, while the other requests run
  cpids=()
  for i in 1 2 3 4 5 6 7 8; do
    curl -s -N --max-time 60 "$P_URL/v1/completions" -H 'Content-Type: application/json' \
      -d '{"model":"'$m'","prompt":"Once upon a time","max_tokens":300,"temperature":0,"ignore_eos":true,"stream":true}' \
      > "$tmp/stream.$i" 2>&1 &
    cpids+=($!)
  done
  ( for i in 1 2 3 4 5 6 7 8; do
      for _ in $(seq 600); do [ "$(grep -c '^data:' "$tmp/stream.$i" 2>/dev/null)" -ge $((2 + i)) ] && break; sleep 0.05; done
      kill "${cpids[$((i - 1))]}" 2>/dev/null
    done ) &
  cutter=$!
  stpid=
  if $st; then st_run "$P_URL" "$tmp/st.pp2" & stpid=$!; fi
  client "$P_URL" "$tmp/pp.3.json" # runs alongside the streams and the structured requests
  [ -n "$stpid" ] && wait "$stpid"
  wait "$cutter" "${cpids[@]}" 2>/dev/null
  sleep 0.5
  u=$(kv_usage "$P_URL")
  if same "$tmp/tp1.json" "$tmp/pp.3.json" && [ "$u" = 0 ]; then echo "ok pp2_abort_in_flight_served"
  else echo "FAIL pp2_abort_in_flight_served: KV usage ${u:-missing} after the aborts, or tokens differ"; fi
  stop P
  n=$(overlapped "$tmp/P.log")
  if [ "${n:-0}" -gt 0 ]; then echo "ok pp2_overlap_happened ($(grep -o 'pipeline parallel: [0-9]* batches.*' "$tmp/P.log" | tail -1))"
  else echo "FAIL pp2_overlap_happened: no batch was submitted while another was in flight"; fi
else
  for n in pp2_overlap_equals_tp1 pp2_overlap_run_to_run pp2_overlap_kv_freed pp2_abort_in_flight_served pp2_overlap_happened; do
    echo "FAIL $n: the pp=2 server or its requests failed"
  done
fi
server_stop_all

# one batch in flight
if VLLMC_PP_BATCHES_IN_FLIGHT=1 server_start O "$m" "${common[@]}" -pp 2 && client "$O_URL" "$tmp/one.json"; then
  if same "$tmp/tp1.json" "$tmp/one.json"; then echo "ok pp2_one_in_flight_equals_tp1"
  else echo "FAIL pp2_one_in_flight_equals_tp1: $($PY tests/tp_client.py compare "$tmp/tp1.json" "$tmp/one.json" | tr '\n' ' ')"; fi
  stop O
  n=$(overlapped "$tmp/O.log")
  if [ "$n" = 0 ]; then echo "ok pp2_one_in_flight_not_overlapped"
  else echo "FAIL pp2_one_in_flight_not_overlapped: ${n:-no count} overlapped"; fi
else
  echo "FAIL pp2_one_in_flight_equals_tp1: the server or its requests failed"
  echo "FAIL pp2_one_in_flight_not_overlapped: the server or its requests failed"
fi
server_stop_all

log=$tmp/bad.log
VLLMC_PP_BATCHES_IN_FLIGHT=zero timeout 120 "$VLLMC_BIN" serve "$m" --port 0 "${common[@]}" -pp 2 > "$log" 2>&1
rc=$?
if [ $rc != 0 ] && [ $rc != 124 ] && grep -qF "VLLMC_PP_BATCHES_IN_FLIGHT 'zero' must be an integer in 1..16" "$log"; then
  echo "ok pp_bad_batches_env"
else echo "FAIL pp_bad_batches_env: exit $rc: $(grep -v '^INFO' "$log" | head -3)"; fi

# rank 1 killed while batches are in flight
rank_pids() {
  local p r
  for p in $(pgrep -P "$1"); do
    r=$(tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
    if [ -n "$r" ]; then echo "$r $p"; else rank_pids "$p"; fi
  done
}
if server_start K "$m" "${common[@]}" -pp 2; then
  cpids=()
  for i in 1 2 3 4; do
    curl -s --max-time 60 "$K_URL/v1/completions" -H 'Content-Type: application/json' \
      -d '{"model":"'$m'","prompt":"Once upon a time","max_tokens":400,"temperature":0,"ignore_eos":true}' \
      > /dev/null 2>&1 &
    cpids+=($!)
  done
  sleep 1
  w=$(rank_pids "$K_PID" | awk '$1 == 1 { print $2 }')
  [ -n "$w" ] && kill -KILL "$w"
  for _ in $(seq 200); do kill -0 "$K_PID" 2>/dev/null || break; sleep 0.1; done
  wait "${cpids[@]}"
  if grep -q "rank 1 (pid $w) of the tensor/pipeline-parallel group is gone" "$K_LOG"; then echo "ok pp2_kill_logged"
  else echo "FAIL pp2_kill_logged: no line naming rank 1 (pid ${w:-none}) in the log"; tail -5 "$K_LOG" >&2; fi
  if ! kill -0 "$K_PID" 2>/dev/null && grep -q "Application shutdown complete" "$K_LOG"; then echo "ok pp2_kill_clean_exit"
  else echo "FAIL pp2_kill_clean_exit: the server still runs 20 s after, or did not shut down cleanly"; fi
else
  echo "FAIL pp2_kill_logged: no pp=2 server"; echo "FAIL pp2_kill_clean_exit: no pp=2 server"
fi
server_stop_all

if ! $st; then
  for n in $st_names; do echo "skip $n: .venv lacks jsonschema (tests/ref/requirements.txt)"; done
else
  if server_start S "$m" "${common[@]}" -tp 2; then st_run "$S_URL" "$tmp/st.tp2"; else : > "$tmp/st.tp2"; fi
  server_stop_all
  for conf in tp1 pp2; do
    v=$(st_valid "$tmp/st.$conf")
    if [ "$(wc -l < "$tmp/st.$conf")" = 4 ] && [ -z "$v" ]; then echo "ok structured_${conf}_valid"
    else echo "FAIL structured_${conf}_valid: ${v:-no output} ($(head -c 300 "$tmp/st.$conf"))"; fi
  done
  for conf in tp2 pp2; do
    if [ -s "$tmp/st.tp1" ] && cmp -s "$tmp/st.tp1" "$tmp/st.$conf"; then echo "ok structured_${conf}_equals_tp1 ($(head -1 "$tmp/st.tp1"))"
    else echo "FAIL structured_${conf}_equals_tp1: $(head -c 200 "$tmp/st.$conf") vs $(head -c 200 "$tmp/st.tp1")"; fi
  done
fi
