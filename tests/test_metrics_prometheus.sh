#!/usr/bin/env bash
# test_metrics_prometheus.sh - a real Prometheus (Debian's package) scrapes
# our exposition and answers PromQL over it:
#   - a random engine trace (tests/ref/metrics_ref.py --generate) is rendered
#     half-way (snapshot A) and at the end (B) by our code; a loopback HTTP
#     server serves A, then B, to a Prometheus scraping every second;
#   - instant queries return B's counters; the prefix-cache hit ratio of the
#     two counters; histogram_quantile(0.99, ...) equals Prometheus' documented
#     bucket interpolation computed here in Python from B's buckets;
#     increase() over the run covers B - A; rate() is positive;
#   - every query of examples/grafana-dashboard.json is accepted by
#     Prometheus and returns data.
# Everything listens on 127.0.0.1 and is stopped (by the PIDs started here)
# when the script ends. Prints "ok NAME" / "FAIL NAME: reason".
# checks: 9
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-$PWD/build}
drv="$BUILD_DIR/tests/test_metrics"
py=/usr/bin/python3
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT

if ! command -v prometheus >/dev/null || [ ! -x "$drv" ] || ! $py -c 'import prometheus_client' 2>/dev/null; then
  echo "FAIL metrics_prometheus_deps: needs prometheus, python3-prometheus-client (scripts/setup.sh) and $drv"
  exit 0
fi

# ---- the two snapshots ------------------------------------------------------
$py tests/ref/metrics_ref.py --generate 4 > "$tmp/full.json"
$py - "$tmp/full.json" "$tmp/half.json" <<'EOF'
import json, sys
tl = json.load(open(sys.argv[1]))
tl["timeline"] = tl["timeline"][: len(tl["timeline"]) // 2]
json.dump(tl, open(sys.argv[2], "w"))
EOF
"$drv" --timeline "$tmp/half.json" > "$tmp/A" && "$drv" --timeline "$tmp/full.json" > "$tmp/B" ||
  { echo "FAIL metrics_prometheus_snapshots: driver failed"; exit 0; }
cp "$tmp/A" "$tmp/served"

ports=$($py -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(" ".join(str(x.getsockname()[1]) for x in s))')
read -r exporter_port prom_port <<< "$ports"

# ---- a loopback exporter serving whatever "served" holds ----------------------
$py - "$tmp/served" "$exporter_port" > "$tmp/exporter.log" 2>&1 <<'EOF' &
import http.server, sys
path, port = sys.argv[1], int(sys.argv[2])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = open(path, "rb").read()
        self.send_response(200 if self.path == "/metrics" else 404)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
EOF
pids+=($!)

cat > "$tmp/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: vllmc
    static_configs:
      - targets: ["127.0.0.1:$exporter_port"]
EOF
prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/tsdb" \
  --web.listen-address="127.0.0.1:$prom_port" --log.level=warn > "$tmp/prom.log" 2>&1 &
pids+=($!)

query() { # PromQL -> the JSON answer ({} while Prometheus starts)
  curl -s --max-time 5 "http://127.0.0.1:$prom_port/api/v1/query" --data-urlencode "query=$1" || echo "{}"
}
scalar() { # PromQL -> the value of its only sample (or "none")
  query "$1" | $py -c '
import json, sys
d = json.load(sys.stdin)
r = d.get("data", {}).get("result", [])
print(r[0]["value"][1] if d.get("status") == "success" and len(r) == 1 else "none")'
}
value_in() { # the first sample named $2 in exposition file $1
  $py -c '
import sys
for line in open(sys.argv[1]):
    if line.startswith(sys.argv[2] + "{") or line.startswith(sys.argv[2] + " "):
        print(line.split()[-1]); break' "$1" "$2"
}
genA=$(value_in "$tmp/A" vllm:generation_tokens_total)
genB=$(value_in "$tmp/B" vllm:generation_tokens_total)

wait_for() { # PromQL returning a number >= $2, within $3 seconds
  local deadline=$((SECONDS + $3)) v
  while [ $SECONDS -lt $deadline ]; do
    v=$(scalar "$1")
    if [ "$v" != none ] && $py -c "import sys; sys.exit(0 if float('$v') >= $2 else 1)"; then return 0; fi
    sleep 0.5
  done
  return 1
}
if ! wait_for "count_over_time(vllm:generation_tokens_total[5m])" 2 60; then
  echo "FAIL metrics_prometheus_scrapes: no scrape of A within 60 s: $(tail -3 "$tmp/prom.log")"; exit 0
fi
cp "$tmp/B" "$tmp/served.new" && mv "$tmp/served.new" "$tmp/served"
if ! wait_for "count_over_time((vllm:generation_tokens_total == $genB)[5m:500ms])" 1 40 ||
   ! wait_for "count_over_time(vllm:generation_tokens_total[5m])" 4 40; then
  echo "FAIL metrics_prometheus_scrapes: B was not scraped"; exit 0
fi
sleep 1.5
echo "ok metrics_prometheus_scrapes"

# ---- instant values ---------------------------------------------------------------
v=$(scalar 'vllm:generation_tokens_total')
if $py -c "import sys; sys.exit(0 if float('$v') == float('$genB') else 1)" 2>/dev/null; then
  echo "ok metrics_prometheus_counter_value"
else echo "FAIL metrics_prometheus_counter_value: $v, want $genB"; fi

want=$($py -c "print(float('$(value_in "$tmp/B" vllm:prefix_cache_hits_total)') / float('$(value_in "$tmp/B" vllm:prefix_cache_queries_total)'))")
v=$(scalar 'vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total')
if $py -c "import sys; sys.exit(0 if abs(float('$v') - $want) < 1e-12 else 1)" 2>/dev/null; then
  echo "ok metrics_prometheus_prefix_hit_ratio"
else echo "FAIL metrics_prometheus_prefix_hit_ratio: $v, want $want"; fi

# histogram_quantile as Prometheus documents it: the bucket holding rank
# q * count, linear interpolation inside it (from 0 for the first bucket).
for metric in vllm:time_to_first_token_seconds vllm:e2e_request_latency_seconds vllm:inter_token_latency_seconds; do
  want=$($py - "$tmp/B" "$metric" <<'EOF'
import math, re, sys
path, name = sys.argv[1], sys.argv[2]
b = []
for line in open(path):
    m = re.match(re.escape(name) + r'_bucket\{.*le="([^"]+)".*\} (\S+)$', line)
    if m:
        b.append((float(m.group(1)), float(m.group(2))))
b.sort()
total = b[-1][1]
rank = 0.99 * total
prev_le, prev_c = 0.0, 0.0
for le, c in b:
    if c >= rank:
        if math.isinf(le):
            print(repr(prev_le)); break
        print(repr(prev_le + (le - prev_le) * (rank - prev_c) / (c - prev_c))); break
    prev_le, prev_c = le, c
EOF
)
  v=$(scalar "histogram_quantile(0.99, sum by (le) ($metric""_bucket))")
  if $py -c "import sys; sys.exit(0 if abs(float('$v') - float('$want')) <= 1e-9 * max(1, abs(float('$want'))) else 1)" 2>/dev/null; then
    echo "ok metrics_prometheus_p99_${metric#vllm:}"
  else echo "FAIL metrics_prometheus_p99_${metric#vllm:}: $v, want $want"; fi
done

# ---- rates over the run -----------------------------------------------------------
v=$(scalar 'increase(vllm:generation_tokens_total[2m])')
if $py -c "
import sys
d, inc = float('$genB') - float('$genA'), float('$v')
sys.exit(0 if d > 0 and d * 0.999 <= inc <= d * 3 else 1)" 2>/dev/null; then
  echo "ok metrics_prometheus_increase"
else echo "FAIL metrics_prometheus_increase: increase $v for a delta of $genB - $genA"; fi
v=$(scalar 'rate(vllm:generation_tokens_total[2m])')
if $py -c "import sys; sys.exit(0 if float('$v') > 0 else 1)" 2>/dev/null; then echo "ok metrics_prometheus_rate"
else echo "FAIL metrics_prometheus_rate: $v"; fi

# ---- the dashboard's queries ----------------------------------------------------------
model=$($py -c "import json; print(json.load(open('$tmp/full.json'))['config']['model_name'])")
bad=$($py - examples/grafana-dashboard.json "$model" "$prom_port" <<'EOF'
import json, sys, urllib.parse, urllib.request
dash, model, port = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
esc = model.replace("\\", "\\\\").replace('"', '\\"')
bad, n = [], 0
for p in dash["panels"]:
    for t in p.get("targets", []):
        q = t["expr"].replace('"$model_name"', '"' + esc + '"').replace("$__rate_interval", "2m")
        url = "http://127.0.0.1:%s/api/v1/query?%s" % (port, urllib.parse.urlencode({"query": q}))
        try:
            d = json.load(urllib.request.urlopen(url, timeout=5))
        except Exception as e:
            bad.append("%s: %s" % (q, e)); continue
        n += 1
        if d.get("status") != "success":
            bad.append("%s: %s" % (q, d.get("error")))
        elif not d["data"]["result"]:
            bad.append("%s: no data" % q)
print("; ".join(bad[:3]) if bad else "")
EOF
)
if [ -z "$bad" ]; then echo "ok metrics_prometheus_dashboard_queries"
else echo "FAIL metrics_prometheus_dashboard_queries: $bad"; fi
