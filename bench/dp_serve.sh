#!/usr/bin/env bash
# dp_serve.sh - data parallel against one engine at the same core count
# (issue 23): `vllmc serve -dp 2 --threads 1` (two engine processes, one
# compute thread each) against `vllmc serve --threads 2` (one engine, two
# threads), the aggregate throughput of `vllmc bench serve` at 32 concurrent
# requests, per model. Prints one markdown row per (model, setup).
#
#   bench/dp_serve.sh [MODEL ...]     (default: the bundled stories260K and smollm2)
#   NUM_PROMPTS=96 IN=128 OUT=64 bench/dp_serve.sh smollm2
#
# smollm2 must have been fetched (scripts/fetch_models.sh smollm2).
set -uo pipefail
cd "$(dirname "$0")/.."
VLLMC=${VLLMC:-$PWD/build/vllmc}
NUM_PROMPTS=${NUM_PROMPTS:-96} IN=${IN:-128} OUT=${OUT:-64} CONC=${CONC:-32}
models=("$@")
[ ${#models[@]} -eq 0 ] && models=(models/stories260K smollm2)
tmp=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
echo "| model | setup | req/s | output tok/s | total tok/s | median TTFT ms | median TPOT ms |"
echo "|---|---|---|---|---|---|---|"
for model in "${models[@]}"; do
  for setup in "dp=1, 2 threads:--threads 2" "dp=2, 1 thread each:-dp 2 --threads 1"; do
    name=${setup%%:*} args=${setup#*:}
    # shellcheck disable=SC2086
    "$VLLMC" serve "$model" --host 127.0.0.1 --port 0 --disable-log-stats --disable-uvicorn-access-log \
      --max-num-seqs 64 $args > "$tmp/serve.log" 2>&1 &
    pid=$!
    for _ in $(seq 1200); do grep -q 'Application startup complete' "$tmp/serve.log" && break; sleep 0.1; done
    url=$(grep -o 'Starting vLLM API server 0 on [a-z]*://[^ ]*' "$tmp/serve.log" | sed 's/.* on //')
    if [ -z "$url" ]; then echo "| $model | $name | server did not start: $(tail -1 "$tmp/serve.log") |"; kill "$pid"; pid=; continue; fi
    "$VLLMC" bench serve --base-url "$url" --num-prompts "$NUM_PROMPTS" --max-concurrency "$CONC" \
      --random-input-len "$IN" --random-output-len "$OUT" --ignore-eos --seed 1 > "$tmp/bench.txt" 2>&1
    val() { grep -m1 "$1" "$tmp/bench.txt" | awk '{print $NF}'; }
    echo "| $model | $name | $(val 'Request throughput') | $(val 'Output token throughput') | $(val 'Total Token throughput') | $(val 'Median TTFT') | $(val 'Median TPOT') |"
    kill "$pid"; wait "$pid" 2>/dev/null; pid=
  done
done
