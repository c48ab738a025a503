#!/usr/bin/env bash
# test_metrics_server.sh - /metrics of a live `vllmc serve` (stories260K on a
# KV pool small enough to preempt) under a mixed load, against what the
# clients saw (tests/ref/metrics_load.py, plain HTTP clients):
#   - a live scrape passes `promtool check metrics` (only vLLM's own names
#     draw lint findings);
#   - phase 1 (streaming and not, n = 1 and 3, stop strings, max_tokens):
#     request_success_total by reason = the finish_reasons the clients got;
#     generation_tokens_total = the sum of usage.completion_tokens; every
#     request histogram counts every choice; request_params_n counts the
#     requests and sums their n; sum TTFT <= sum e2e, sum queue + inference
#     <= sum e2e; num_preemptions_total > 0;
#   - phase 2: streams the clients drop mid-way count as finished_reason
#     "abort";
#   - afterwards 0 running, 0 waiting, KV usage 0;
#   - http_requests_total counts the completions calls (and not /metrics);
#   - the stats log line (VLLM_LOG_STATS_INTERVAL=1) shows up with vLLM's format;
#   - a real Prometheus scrapes the server: rate() of the generation counter
#     is positive, histogram_quantile over TTFT answers, the prefix-cache hit
#     ratio equals the ratio of the two counters.
#   - a second server with --disable-log-stats --show-hidden-metrics-for-version
#     0.10 --kv-cache-dtype fp8: no stats log line, the hidden names appear (and
#     not on the first); cache_config_info's cache_dtype is "fp8" there, "auto"
#     on the first (vLLM prints the flag's value);
#     a stop string that completes on the max_tokens-th token counts as the
#     "stop" the client saw, not "length"; a malformed version is refused.
# Needs the server (src/server); without it there is nothing to test and the
# script says so on stderr.
# checks: 26
# tags: tsan
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-$PWD/build}
export VLLMC=${VLLMC:-$BUILD_DIR/vllmc}
py=/usr/bin/python3
if [ ! -f tests/server_helpers.sh ] || ! "$VLLMC" serve --help >/dev/null 2>&1; then
  echo "test_metrics_server.sh: no vllmc serve in this build; nothing to test" >&2
  exit 0
fi
if ! command -v promtool >/dev/null || ! command -v prometheus >/dev/null; then
  echo "FAIL metrics_server_deps: needs Debian's prometheus (scripts/setup.sh)"; exit 0
fi
source tests/server_helpers.sh
tmp=$(mktemp -d)
prom_pid=
cleanup_all() {
  [ -n "$prom_pid" ] && kill "$prom_pid" 2>/dev/null && wait "$prom_pid" 2>/dev/null
  server_stop_all
  rm -rf "$tmp"
}
trap cleanup_all EXIT

export VLLM_LOG_STATS_INTERVAL=1
export VLLMC_DEBUG_STEP_DELAY_US=${VLLMC_DEBUG_STEP_DELAY_US:-2000} # streams outlive a client that leaves
server_start S models/stories260K --served-model-name stories --max-model-len 256 \
  --num-gpu-blocks-override 24 --max-num-seqs 16 || exit 0
metrics() { curl -s --max-time 10 "$S_URL/metrics"; }
val() { # the value of sample $2 (name, or name{...substring}) in file $1
  $py - "$1" "$2" <<'EOF'
import sys
path, want = sys.argv[1], sys.argv[2]
name, _, sub = want.partition("{")
total, found = 0.0, False
for line in open(path):
    if line.startswith("#") or not (line.startswith(name + "{") or line.startswith(name + " ")):
        continue
    if sub and sub.rstrip("}") not in line:
        continue
    total += float(line.split()[-1]); found = True
print(total if found else "nan")
EOF
}
cmp_eq() { # NAME GOT WANT
  if $py -c "import sys; sys.exit(0 if abs(float('$2') - float('$3')) < 1e-9 else 1)" 2>/dev/null; then echo "ok $1"
  else echo "FAIL $1: got $2, want $3"; fi
}

metrics > "$tmp/m0"
name=metrics_server_promtool
promtool check metrics < "$tmp/m0" > "$tmp/lint" 2>&1; rc=$?
other=$(grep -v -e "metric names should not contain ':'" \
                -e '^vllm:iteration_tokens_total non-counter metrics should not have "_total" suffix$' "$tmp/lint")
if [ $rc -ne 0 ] && [ $rc -ne 3 ]; then echo "FAIL $name: exit $rc: $(head -3 "$tmp/lint")"
elif [ -n "$other" ]; then echo "FAIL $name: $(echo "$other" | head -3 | tr '\n' ' ')"
elif ! grep -q '^vllm:cache_config_info{.*num_gpu_blocks="24"' "$tmp/m0"; then echo "FAIL $name: no cache_config_info"
elif ! grep -q '^vllm:cache_config_info{block_size="16",cache_dtype="auto",' "$tmp/m0"; then
  echo "FAIL $name: cache_dtype is not \"auto\": $(grep '^vllm:cache_config_info' "$tmp/m0")"
else echo "ok $name"; fi

# ---- phase 1: a mixed load, everything completes ------------------------------------
if ! $py tests/ref/metrics_load.py "$S_URL" stories complete > "$tmp/seen1" 2> "$tmp/load.err"; then
  echo "FAIL metrics_server_load: $(tail -3 "$tmp/load.err")"; exit 0
fi
metrics > "$tmp/m1"
seen() { $py -c "import json,sys; print(json.load(open('$1'))['$2'])"; }
for r in stop length abort; do
  cmp_eq "metrics_server_success_$r" "$(val "$tmp/m1" "vllm:request_success_total{finished_reason=\"$r\"")" \
    "$($py -c "import json; print(json.load(open('$tmp/seen1'))['reasons'].get('$r', 0))")"
done
cmp_eq metrics_server_generation_tokens_equal_usage "$(val "$tmp/m1" vllm:generation_tokens_total)" "$(seen "$tmp/seen1" completion_tokens)"
choices=$(seen "$tmp/seen1" choices)
bad=""
for h in e2e_request_latency_seconds request_queue_time_seconds request_inference_time_seconds \
         request_prefill_time_seconds request_decode_time_seconds request_time_per_output_token_seconds \
         time_to_first_token_seconds request_prompt_tokens request_generation_tokens request_params_max_tokens; do
  c=$(val "$tmp/m1" "vllm:${h}_count")
  $py -c "import sys; sys.exit(0 if float('$c') == float('$choices') else 1)" || bad="$bad $h=$c"
done
if [ -z "$bad" ]; then echo "ok metrics_server_histograms_count_every_choice"
else echo "FAIL metrics_server_histograms_count_every_choice: want $choices:$bad"; fi
cmp_eq metrics_server_params_n_count "$(val "$tmp/m1" vllm:request_params_n_count)" "$(seen "$tmp/seen1" requests)"
cmp_eq metrics_server_params_n_sum "$(val "$tmp/m1" vllm:request_params_n_sum)" "$(seen "$tmp/seen1" sum_n)"
if $py - "$tmp/m1" <<'EOF'
import sys
v = {}
for line in open(sys.argv[1]):
    if not line.startswith("#"):
        k = line.split("{")[0].split()[0]
        v[k] = v.get(k, 0) + float(line.split()[-1])
ok = v["vllm:time_to_first_token_seconds_sum"] <= v["vllm:e2e_request_latency_seconds_sum"] and \
     v["vllm:request_queue_time_seconds_sum"] + v["vllm:request_inference_time_seconds_sum"] <= v["vllm:e2e_request_latency_seconds_sum"]
sys.exit(0 if ok else 1)
EOF
then echo "ok metrics_server_intervals_within_e2e"; else echo "FAIL metrics_server_intervals_within_e2e"; fi
p=$(val "$tmp/m1" vllm:num_preemptions_total)
if $py -c "import sys; sys.exit(0 if float('$p') > 0 else 1)"; then echo "ok metrics_server_preemptions"
else echo "FAIL metrics_server_preemptions: $p (the 24-block pool is meant to force some)"; fi
calls=$(seen "$tmp/seen1" calls)
cmp_eq metrics_server_http_requests "$(val "$tmp/m1" 'http_requests_total{handler="/v1/completions"')" "$calls"
if grep -q 'handler="/metrics"' "$tmp/m1"; then echo "FAIL metrics_server_http_excludes_metrics"
else echo "ok metrics_server_http_excludes_metrics"; fi

# ---- phase 2: clients that leave mid-stream ---------------------------------------------
a0=$(val "$tmp/m1" 'vllm:request_success_total{finished_reason="abort"')
$py tests/ref/metrics_load.py "$S_URL" stories abandon > "$tmp/seen2" 2> "$tmp/load.err" ||
  { echo "FAIL metrics_server_aborts: $(tail -3 "$tmp/load.err")"; exit 0; }
want=$($py -c "print($a0 + json.load(open('$tmp/seen2'))['abandoned'])" 2>/dev/null ||
       $py -c "import json; print($a0 + json.load(open('$tmp/seen2'))['abandoned'])")
ok=
for _ in $(seq 100); do # the aborts land when the server notices the closed sockets
  metrics > "$tmp/m2"
  got=$(val "$tmp/m2" 'vllm:request_success_total{finished_reason="abort"')
  if [ "$(val "$tmp/m2" vllm:num_requests_running)" = 0.0 ] && [ "$(val "$tmp/m2" vllm:num_requests_waiting)" = 0.0 ] &&
     $py -c "import sys; sys.exit(0 if float('$got') == float('$want') else 1)"; then ok=1; break; fi
  sleep 0.1
done
if [ -n "$ok" ]; then echo "ok metrics_server_aborts_counted"
else echo "FAIL metrics_server_aborts_counted: abort $got, want $want"; fi
cmp_eq metrics_server_idle_running "$(val "$tmp/m2" vllm:num_requests_running)" 0
cmp_eq metrics_server_idle_waiting "$(val "$tmp/m2" vllm:num_requests_waiting)" 0
cmp_eq metrics_server_idle_kv_usage "$(val "$tmp/m2" vllm:kv_cache_usage_perc)" 0

# ---- the log line -------------------------------------------------------------------------
# the logger ticks every second (VLLM_LOG_STATS_INTERVAL=1): the interval that saw the
# load's tokens may close up to a second after the load ends, so wait for it
log_line_seen() {
  grep -Eq 'INFO [0-9-]+ [0-9:]+ \[[a-z_]+\.c:[0-9]+\] Engine 000: Avg prompt throughput: [0-9]+\.[0-9] tokens/s, Avg generation throughput: [0-9]+\.[0-9] tokens/s, Running: [0-9]+ reqs, Waiting: [0-9]+ reqs, GPU KV cache usage: [0-9]+\.[0-9]%, Prefix cache hit rate: [0-9]+\.[0-9]%$' "$S_LOG"
}
for _ in $(seq 100); do log_line_seen && break; sleep 0.1; done
if log_line_seen; then
  echo "ok metrics_server_log_line"
else echo "FAIL metrics_server_log_line: $(grep 'Engine 000' "$S_LOG" | head -2)"; fi

# ---- a real Prometheus on the live server --------------------------------------------------
port=$($py -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
target=${S_URL#http://}
cat > "$tmp/prometheus.yml" <<EOF
global: {scrape_interval: 1s, scrape_timeout: 1s}
scrape_configs: [{job_name: vllmc, static_configs: [{targets: ["$target"]}]}]
EOF
prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/tsdb" \
  --web.listen-address="127.0.0.1:$port" --log.level=warn > "$tmp/prom.log" 2>&1 &
prom_pid=$!
q() {
  curl -s --max-time 5 "http://127.0.0.1:$port/api/v1/query" --data-urlencode "query=$1" | $py -c '
import json, sys
try:
    d = json.load(sys.stdin); r = d["data"]["result"]
    print(r[0]["value"][1] if d["status"] == "success" and len(r) == 1 else "none")
except Exception:
    print("none")'
}
for _ in $(seq 240); do [ "$(q 'count_over_time(vllm:generation_tokens_total[5m])')" != none ] && break; sleep 0.5; done
$py tests/ref/metrics_load.py "$S_URL" stories complete > /dev/null 2>&1 & load=$!
for _ in $(seq 60); do
  v=$(q 'rate(vllm:generation_tokens_total[10s])')
  [ "$v" != none ] && $py -c "import sys; sys.exit(0 if float('$v') > 0 else 1)" && break
  sleep 0.5
done
wait $load
if [ "$v" != none ] && $py -c "import sys; sys.exit(0 if float('$v') > 0 else 1)"; then echo "ok metrics_server_prometheus_rate"
else echo "FAIL metrics_server_prometheus_rate: $v"; fi
sleep 2
v=$(q 'histogram_quantile(0.99, sum by (le) (vllm:time_to_first_token_seconds_bucket))')
if [ "$v" != none ] && $py -c "import sys; x=float('$v'); sys.exit(0 if 0 < x <= 2560 else 1)"; then
  echo "ok metrics_server_prometheus_ttft_p99"
else echo "FAIL metrics_server_prometheus_ttft_p99: $v"; fi
metrics > "$tmp/m3"
h=$(q 'vllm:prefix_cache_hits_total'); qq=$(q 'vllm:prefix_cache_queries_total'); r=$(q 'vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total')
if [ "$r" != none ] && $py -c "import sys; sys.exit(0 if abs(float('$r') - float('$h') / float('$qq')) < 1e-12 and float('$h') > 0 else 1)"; then
  echo "ok metrics_server_prometheus_hit_ratio"
else echo "FAIL metrics_server_prometheus_hit_ratio: $r ($h / $qq)"; fi

# ---- the flags, and a stop string on the last allowed token -------------------------------
if grep -q '^vllm:gpu_cache_usage_perc' "$tmp/m0"; then echo "FAIL metrics_server_hidden_off: shown without the flag"
else echo "ok metrics_server_hidden_off"; fi
server_start H models/stories260K --max-model-len 256 --disable-log-stats --show-hidden-metrics-for-version 0.10 \
  --kv-cache-dtype fp8 || exit 0
body='{"prompt":"Once upon a time","max_tokens":8,"temperature":0}'
text=$(curl -s --max-time 30 -H 'Content-Type: application/json' -d "$body" "$H_URL/v1/completions" | jq -r '.choices[0].text')
stop=${text: -4} # ends on the 8th token; must not occur before it
if [ "${#text}" -lt 8 ] || [ "${text%"$stop"}" != "${text%%"$stop"*}" ]; then
  echo "FAIL metrics_server_stop_on_last_token: cannot pick a stop string from '$text'"
else
  got=$(curl -s --max-time 30 -H 'Content-Type: application/json' \
        -d "{\"prompt\":\"Once upon a time\",\"max_tokens\":8,\"temperature\":0,\"stop\":[$(jq -Rn --arg s "$stop" '$s')]}" \
        "$H_URL/v1/completions" | jq -r '.choices[0].finish_reason')
  metrics_h() { curl -s --max-time 10 "$H_URL/metrics"; }
  metrics_h > "$tmp/h1"
  st=$(val "$tmp/h1" 'vllm:request_success_total{finished_reason="stop"')
  ln=$(val "$tmp/h1" 'vllm:request_success_total{finished_reason="length"')
  if [ "$got" = stop ] && [ "$st" = 1.0 ] && [ "$ln" = 1.0 ]; then echo "ok metrics_server_stop_on_last_token"
  else echo "FAIL metrics_server_stop_on_last_token: client saw $got; stop $st (want 1), length $ln (want 1: the first call)"; fi
  if grep -q '^vllm:gpu_cache_usage_perc{' "$tmp/h1" && grep -q '^vllm:gpu_prefix_cache_queries_total{' "$tmp/h1"; then
    echo "ok metrics_server_hidden_on"
  else echo "FAIL metrics_server_hidden_on: no vllm:gpu_* with --show-hidden-metrics-for-version 0.10"; fi
  if grep -q '^vllm:cache_config_info{block_size="16",cache_dtype="fp8",' "$tmp/h1"; then echo "ok metrics_server_cache_dtype"
  else echo "FAIL metrics_server_cache_dtype: $(grep '^vllm:cache_config_info' "$tmp/h1")"; fi
fi
sleep 2.5 # VLLM_LOG_STATS_INTERVAL=1: two intervals, one with tokens
if grep -q 'Engine 000: Avg prompt throughput' "$H_LOG"; then echo "FAIL metrics_server_disable_log_stats: $(grep -m1 'Engine 000: Avg' "$H_LOG")"
else echo "ok metrics_server_disable_log_stats"; fi
if "$VLLMC" serve models/stories260K --show-hidden-metrics-for-version 0.x > "$tmp/bad.log" 2>&1; then
  echo "FAIL metrics_server_hidden_malformed: accepted 0.x"
elif grep -q 'show-hidden-metrics-for-version' "$tmp/bad.log"; then echo "ok metrics_server_hidden_malformed"
else echo "FAIL metrics_server_hidden_malformed: $(head -2 "$tmp/bad.log")"; fi
