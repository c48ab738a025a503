#!/usr/bin/env bash
# test_server_apiserver.sh - `vllmc serve --api-server-count 2` (issue 23,
# src/dist/api_servers.c): two API server processes accepting on one port
# (SO_REUSEPORT), each reaching every engine over ZeroMQ, one metrics
# registry owned by the supervisor (src/dist/metrics_link.c).
#   - 64 concurrent completions (greedy and seeded, n=1 and n=2, stop
#     strings) give exactly the single-server outputs (batch invariance),
#     and BOS-prompted greedy ids equal llama2.c's (an independent value);
#   - both processes accepted connections: the access log lines carry
#     vLLM's "(APIServer pid=N)" prefix, and both pids appear;
#   - /metrics, scraped until both processes have answered (and at least 6
#     times), gives every time exactly what the clients saw:
#     vllm:request_success_total = finished choices, prompt_tokens_total =
#     sum of usage.prompt_tokens x choices, generation_tokens_total = sum of
#     usage.completion_tokens, e2e_request_latency_seconds_count = choices;
#     each family is written once; vllm:prefix_cache_queries_total (an
#     engine-side counter) equals the single server's;
#   - killing one API server (kill -9) is logged by the supervisor, the other
#     keeps serving, and /metrics still holds the killed one's counts;
#   - -dp 2 with --api-server-count 2: the same 64 outputs, both engines
#     took load, and the counts are exact.
# checks: 13
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

# both API servers up (each prints its own "Application startup complete.")
wait_both() {
  local log=$1 i
  for i in $(seq 600); do
    [ "$(grep -c 'Application startup complete.' "$log")" -ge 2 ] && return 0
    sleep 0.05
  done
  echo "FAIL asc_start: the second API server did not start"; tail -20 "$log" >&2; return 1
}
# what the clients of DIR saw: choices, prompt tokens (once per choice: an n=2
# request is two sequences, each prefilled, as vLLM V1 fans n out), completion tokens
client_totals() {
  cat "$1"/*.json | jq -s '[([.[].choices | length] | add), ([.[] | .usage.prompt_tokens * (.choices | length)] | add),
                            ([.[].usage.completion_tokens] | add)] | map(tostring) | join(" ")' -r
}
# the same from /metrics text (summed over engines): success prompt generation e2e_count
metric_totals() {
  awk '/^vllm:request_success_total\{/ { s += $NF } /^vllm:prompt_tokens_total\{/ { p += $NF }
       /^vllm:generation_tokens_total\{/ { g += $NF } /^vllm:e2e_request_latency_seconds_count\{/ { e += $NF }
       END { printf "%d %d %d %d\n", s, p, g, e }' <<< "$1"
}
# scrapes /metrics until both pids of LOG answered one (6 at least, 40 at most);
# prints the distinct totals seen, one a line; $tmp/scrapers: how many pids answered
scrape_all() {
  local url=$1 log=$2 i m out=()
  for i in $(seq 40); do
    m=$(curl -s --max-time 20 "$url/metrics")
    out+=("$(metric_totals "$m")")
    grep '"GET /metrics' "$log" | grep -o '^(APIServer pid=[0-9]*)' | sort -u | wc -l > "$tmp/scrapers"
    [ "$i" -ge 6 ] && [ "$(cat "$tmp/scrapers")" -ge 2 ] && break
  done
  printf '%s\n' "${out[@]}" | sort -u
}

prefix_queries() { awk '/^vllm:prefix_cache_queries_total\{/ { s += $NF } END { printf "%d\n", s }' <<< "$1"; }

server_start ONE --model $MODEL --threads 1 || exit 0
run64 "$ONE_URL" "$tmp/one"
one_queries=$(prefix_queries "$(curl -s --max-time 20 "$ONE_URL/metrics")")
server_stop_all

server_start A --model $MODEL --threads 1 --api-server-count 2 || exit 0
wait_both "$A_LOG" || exit 0
run64 "$A_URL" "$tmp/a"
bad=0
for i in $(seq 0 63); do cmp -s "$tmp/one/$i.out" "$tmp/a/$i.out" || { bad=$((bad + 1)); [ $bad -eq 1 ] && diff "$tmp/one/$i.out" "$tmp/a/$i.out" | head -4 >&2; }; done
nonempty=$(cat "$tmp"/one/*.out | grep -c '"token_ids":\[[0-9]')
if [ $bad -eq 0 ] && [ "$nonempty" -eq 64 ]; then echo "ok asc2_equals_single_server_64"
else echo "FAIL asc2_equals_single_server_64: $bad of 64 differ, $nonempty single-server outputs have tokens"; fi

req POST "$A_URL/v1/completions" '{"model":"'$MODEL'","prompt":[1],"max_tokens":64,"temperature":0,"ignore_eos":true,"return_token_ids":true}'
want=$(jq -c '.greedy_ids[:64]' "$REF")
check asc2_bos_greedy_equals_llama2c "(.choices[0].token_ids == $want)"
printf '%s' "$BODY" > "$tmp/a/bos.json"

per_pid=$(grep '"POST /v1/completions' "$A_LOG" | grep -o '^(APIServer pid=[0-9]*)' | sort | uniq -c | awk '{ print $1 }' | tr '\n' ' ')
set -- $per_pid
if [ $# -eq 2 ] && [ "$1" -gt 0 ] && [ "$2" -gt 0 ] && [ $(($1 + $2)) -eq 65 ]; then echo "ok asc2_both_processes_accepted ($1 + $2)"
else echo "FAIL asc2_both_processes_accepted: completions per API server process: ${per_pid:-none}"; fi

read -r choices prompt gen <<< "$(client_totals "$tmp/a")"
want="$choices $prompt $gen $choices"
seen=$(scrape_all "$A_URL" "$A_LOG")
if [ "$seen" = "$want" ]; then echo "ok asc2_metrics_exact_every_scrape ($want)"
else echo "FAIL asc2_metrics_exact_every_scrape: the clients saw '$want' (success prompt generation e2e_count), /metrics said: $(echo $seen)"; fi
# an engine-side counter: the engine sends each step's counters to one API server only
q=$(prefix_queries "$(curl -s --max-time 20 "$A_URL/metrics")")
one_queries=$((one_queries + 1)) # and the BOS request's one prompt token
if [ "$q" -eq "$one_queries" ] && [ "$q" -gt 1 ]; then echo "ok asc2_engine_counters_counted_once ($q)"
else echo "FAIL asc2_engine_counters_counted_once: vllm:prefix_cache_queries_total $q, the single server's $one_queries"; fi
if [ "$(cat "$tmp/scrapers")" -ge 2 ]; then echo "ok asc2_metrics_answered_by_both_processes"
else echo "FAIL asc2_metrics_answered_by_both_processes: only $(cat "$tmp/scrapers") process answered /metrics in 40 scrapes"; fi
m=$(curl -s --max-time 20 "$A_URL/metrics")
if [ "$(grep -c '^# TYPE vllm:request_success_total ' <<< "$m")" -eq 1 ] &&
   [ "$(grep -c '^vllm:request_success_total{.*finished_reason="length"' <<< "$m")" -eq 1 ]; then echo "ok asc2_one_family_one_series"
else echo "FAIL asc2_one_family_one_series: $(grep 'request_success_total' <<< "$m" | head -5)"; fi

# one API server killed: logged, the other serves, the counts stay
victim=$(grep -o '^(APIServer pid=[0-9]*) .*Starting vLLM API server 1 ' "$A_LOG" | grep -o 'pid=[0-9]*' | cut -d= -f2)
kill -9 "$victim"
logged() { grep -q "ERROR.*API server 1 (pid $victim) was killed by signal 9; 1 of 2 API servers left" "$A_LOG"; }
wait_for asc2_killed_api_server_logged 30 logged
mkdir -p "$tmp/k"
codes=""
for i in $(seq 0 7); do
  codes+=$(curl -s --max-time 30 -o "$tmp/k/k$i.json" -w '%{http_code} ' -H 'Content-Type: application/json' \
    --data-binary '{"model":"'$MODEL'","prompt":"After the kill '$i'","max_tokens":8,"temperature":0}' "$A_URL/v1/completions")
done
if [ "$codes" = "200 200 200 200 200 200 200 200 " ]; then echo "ok asc2_survivor_serves"
else echo "FAIL asc2_survivor_serves: statuses $codes"; fi
cp "$tmp"/k/*.json "$tmp/a/"
read -r choices prompt gen <<< "$(client_totals "$tmp/a")"
got=$(metric_totals "$(curl -s --max-time 20 "$A_URL/metrics")")
if [ "$got" = "$choices $prompt $gen $choices" ]; then echo "ok asc2_metrics_keep_killed_servers_counts ($got)"
else echo "FAIL asc2_metrics_keep_killed_servers_counts: the clients saw '$choices $prompt $gen $choices', /metrics '$got'"; fi
server_stop_all

# -dp 2 behind two API servers
server_start D --model $MODEL --threads 1 -dp 2 --api-server-count 2 || exit 0
wait_both "$D_LOG" || exit 0
run64 "$D_URL" "$tmp/d"
bad=0
for i in $(seq 0 63); do cmp -s "$tmp/one/$i.out" "$tmp/d/$i.out" || bad=$((bad + 1)); done
if [ $bad -eq 0 ]; then echo "ok dp2_asc2_equals_single_server_64"
else echo "FAIL dp2_asc2_equals_single_server_64: $bad of 64 differ"; fi
m=$(curl -s --max-time 20 "$D_URL/metrics")
e0=$(success_total "$m" 0) e1=$(success_total "$m" 1)
if [ "$e0" -gt 0 ] && [ "$e1" -gt 0 ]; then echo "ok dp2_asc2_both_engines_took_load ($e0 + $e1)"
else echo "FAIL dp2_asc2_both_engines_took_load: engine 0 finished $e0 requests, engine 1 $e1"; fi
read -r choices prompt gen <<< "$(client_totals "$tmp/d")"
want="$choices $prompt $gen $choices"
seen=$(scrape_all "$D_URL" "$D_LOG")
if [ "$seen" = "$want" ]; then echo "ok dp2_asc2_metrics_exact_every_scrape ($want)"
else echo "FAIL dp2_asc2_metrics_exact_every_scrape: the clients saw '$want', /metrics said: $(echo $seen)"; fi
