#!/usr/bin/env bash
# pp_overlap.sh - pipeline parallelism with one batch in flight against
# two (docs/deploy.md): `vllmc serve -pp 2 --threads 1` (two ranks, one
# compute thread each) on a random Llama big enough that the forward
# dominates (hidden 1024, intermediate 2816, 8 layers, F32, ~370 MB; no
# prefix caching: every prompt is computed), N
# concurrent greedy requests of M tokens, each prompt its text R times
# (default 32, 32, 1). Two servers run side by side, one with
# VLLMC_PP_BATCHES_IN_FLIGHT=1 (the stages take turns), one with 2 (while
# stage 1 runs batch A, stage 0 runs batch B); the runs alternate ROUNDS
# times (default 3) so both see the same load. Prints each run's wall
# time, the best and median of each setting and their ratio, rank 0's
# count of batches submitted while another was in flight, and whether
# the two settings' tokens are equal (they must be).
# Usage: bench/pp_overlap.sh [BUILD_DIR] [N] [M] [R] [ROUNDS]
set -uo pipefail
cd "$(dirname "$0")/.."
B=${1:-build} N=${2:-32} M=${3:-32} R=${4:-1} ROUNDS=${5:-3}
BIN=$PWD/$B/vllmc
PY=/usr/bin/python3
export OMPI_MCA_btl_vader_single_copy_mechanism=none VLLM_LOGGING_LEVEL=INFO
command -v mpirun >/dev/null || { echo "mpirun is missing (openmpi-bin)"; exit 1; }
echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) (other jobs share it)"
tmp=$(mktemp -d /tmp/vllmc-ppbench-XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null && wait "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
$PY tools/make_random_model.py "$tmp/m" --arch llama --dtype f32 --hidden-size 1024 --intermediate-size 2816 \
  --layers 8 --heads 16 --kv-heads 8 --tokenizer stories260K --max-pos 1024 >/dev/null || { echo "make_random_model failed"; exit 1; }
for k in 1 2; do
  VLLMC_PP_BATCHES_IN_FLIGHT=$k "$BIN" serve "$tmp/m" -pp 2 --threads 1 --port $((18560 + k)) \
    --kv-cache-memory-bytes 256M --max-model-len 1024 --no-enable-prefix-caching > "$tmp/serve.$k.log" 2>&1 &
  pids+=($!)
done
for k in 1 2; do
  url=http://127.0.0.1:$((18560 + k))
  for _ in $(seq 900); do curl -sf "$url/health" >/dev/null && break; sleep 0.1; done
  $PY tests/tp_client.py "$url" "$tmp/m" "$tmp/warm.json" --prompts 2 --max-tokens 4 ||
    { echo "warm-up of $k failed"; tail "$tmp/serve.$k.log"; exit 1; }
done
for r in $(seq "$ROUNDS"); do
  for k in 1 2; do
    t0=$(date +%s.%N)
    $PY tests/tp_client.py "http://127.0.0.1:$((18560 + k))" "$tmp/m" "$tmp/out.$k.json" --prompts "$N" \
      --max-tokens "$M" --repeat "$R" || { echo "run failed"; tail "$tmp/serve.$k.log"; exit 1; }
    t1=$(date +%s.%N)
    s=$(echo "$t1 - $t0" | bc -l)
    echo "$s" >> "$tmp/times.$k"
    printf 'round %d, %d in flight: %.2f s\n' "$r" "$k" "$s"
  done
done
for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
pids=()
for k in 1 2; do
  best=$(sort -g "$tmp/times.$k" | head -1); med=$(sort -g "$tmp/times.$k" | sed -n "$(( (ROUNDS + 1) / 2 ))p")
  eval "best$k=$best med$k=$med"
  printf '%d batch(es) in flight: %d requests x %d tokens: best %.2f s (%.1f tokens/s), median %.2f s; %s\n' \
    "$k" "$N" "$M" "$best" "$(echo "$N * $M / $best" | bc -l)" "$med" \
    "$(grep -o 'pipeline parallel: [0-9]* batches.*' "$tmp/serve.$k.log" | tail -1)"
done
printf 'speed-up of 2 in flight over 1: best %.2fx, median %.2fx; tokens: %s\n' "$(echo "$best1 / $best2" | bc -l)" \
  "$(echo "$med1 / $med2" | bc -l)" "$($PY tests/tp_client.py compare "$tmp/out.1.json" "$tmp/out.2.json" | tr '\n' ' ')"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
