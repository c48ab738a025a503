#!/usr/bin/env bash
# tracing_overhead.sh - what OpenTelemetry tracing costs `vllmc serve`: the same
# `vllmc bench serve` load (16 concurrent streaming clients by default) against
# two servers on one model, one with --otlp-traces-endpoint (spans to a local
# OTLP/HTTP sink that reads and discards them, as a collector would) and one
# without, alternated for ROUNDS rounds so drift on a shared machine hits both.
# Prints each round's request throughput and the median ratio traced/plain.
#
#   bench/tracing_overhead.sh [MODEL]       (default: models/stories260K, where
#                                           per-request costs weigh the most)
#   ROUNDS=3 PROMPTS=400 CONCURRENCY=16 IN=32 OUT=32 BUILD=build
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-models/stories260K}
ROUNDS=${ROUNDS:-3} PROMPTS=${PROMPTS:-400} CONCURRENCY=${CONCURRENCY:-16}
IN=${IN:-32} OUT=${OUT:-32} BUILD=${BUILD:-build}
VLLMC=$BUILD/vllmc
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT

# the sink: answers every POST 200 after reading it; counts bytes and posts
python3 - "$tmp/sink_port" "$tmp/sink_stats" <<'EOF' &
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
posts = nbytes = 0
class H(BaseHTTPRequestHandler):
    def do_POST(self):
        global posts, nbytes
        nbytes += len(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        posts += 1
        open(sys.argv[2], "w").write(f"{posts} {nbytes}\n")
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *a): pass
s = ThreadingHTTPServer(("127.0.0.1", 0), H)
open(sys.argv[1], "w").write(str(s.server_address[1]))
s.serve_forever()
EOF
pids+=($!)
for _ in $(seq 100); do [ -s "$tmp/sink_port" ] && break; sleep 0.05; done
sink=http://127.0.0.1:$(cat "$tmp/sink_port")

start() { # start NAME ARGS... -> URL in $tmp/NAME.url
  local name=$1; shift
  "$VLLMC" serve "$MODEL" --host 127.0.0.1 --port 0 --disable-log-stats --disable-uvicorn-access-log "$@" \
    > "$tmp/$name.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 600); do grep -q "Application startup complete." "$tmp/$name.log" && break; sleep 0.05; done
  grep -o 'Starting vLLM API server 0 on http://[^ ]*' "$tmp/$name.log" | sed 's/.* on //' > "$tmp/$name.url"
}
start plain
start traced --otlp-traces-endpoint "$sink"

bench() { # bench URL -> request throughput
  "$VLLMC" bench serve --base-url "$1" --num-prompts "$PROMPTS" --random-input-len "$IN" \
    --random-output-len "$OUT" --max-concurrency "$CONCURRENCY" --ignore-eos --seed 0 \
    --ready-check-timeout-sec 30 2>/dev/null | sed -n 's/^Request throughput (req\/s): *//p'
}
bench "$(cat "$tmp/plain.url")" > /dev/null # warm-up (page cache, first-touch)
bench "$(cat "$tmp/traced.url")" > /dev/null
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; } # the server's user + system time, clock ticks
plain_pid=${pids[1]} traced_pid=${pids[2]}
plain_cpu0=$(cpu "$plain_pid") traced_cpu0=$(cpu "$traced_pid")
ratios=()
for r in $(seq "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then p=$(bench "$(cat "$tmp/plain.url")"); t=$(bench "$(cat "$tmp/traced.url")")
  else t=$(bench "$(cat "$tmp/traced.url")"); p=$(bench "$(cat "$tmp/plain.url")"); fi
  ratio=$(python3 -c "print(f'{$t / $p:.4f}')")
  ratios+=("$ratio")
  printf 'round %d: plain %s req/s, traced %s req/s, traced/plain %s\n' "$r" "$p" "$t" "$ratio"
done
# CPU time per request: what a shared, noisy machine blurs least (throughput swings with the neighbours)
hz=$(getconf CLK_TCK)
plain_cpu=$(( $(cpu "$plain_pid") - plain_cpu0 )) traced_cpu=$(( $(cpu "$traced_pid") - traced_cpu0 ))
n=$(( PROMPTS * ROUNDS ))
python3 -c "p, t = $plain_cpu / $hz / $n * 1e6, $traced_cpu / $hz / $n * 1e6; print(f'server CPU per request: plain {p:.1f} us, traced {t:.1f} us ({(t / p - 1) * 100:+.2f}%)')"
kill -TERM "${pids[2]}" 2>/dev/null || true # the traced server flushes its queue on the way out
sleep 1
read -r posts nbytes < "$tmp/sink_stats" || true
median=$(printf '%s\n' "${ratios[@]}" | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}')
echo "median traced/plain request throughput: $median (cost $(python3 -c "print(f'{(1 - $median) * 100:.2f}')")%);" \
  "sink got ${posts:-0} exports, ${nbytes:-0} bytes; model $MODEL, $CONCURRENCY clients, $PROMPTS prompts x $ROUNDS rounds"
