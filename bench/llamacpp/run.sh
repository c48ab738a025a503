#!/usr/bin/env bash
# Side-by-side peer: llama.cpp from the node-llama-cpp npm package, on
# TinyLlama-1.1B-shaped random-weight GGUF files written by tools/make_gguf.py.
#
#   bench/llamacpp/run.sh [TYPES] [THREADS] [REPEATS]     e.g. bench/llamacpp/run.sh "f16 q8_0 q4_0" 2 5
#
# Uses the prebuilt libllama / libggml shared libraries of the node-llama-cpp
# npm package (CPU variants chosen at run time; fetched by build.sh --fetch
# into bench/llamacpp/.cache), with the headers of its source bundle compiling
# driver.c. bench/side_by_side.sh is the full comparison (llama-bench,
# llama-batched-bench, llama-server built from that source against vllm.c);
# this is the quick look at the prebuilt peer. Prints prefill and decode tok/s
# per type (driver.c).
# Model files go to ${VLLMC_BENCH_DIR:-/tmp/vllmc-bench} (about 6 GB for all types).
set -euo pipefail
cd "$(dirname "$0")/../.."
types=${1:-"f16 q8_0 q4_0"} threads=${2:-2} reps=${3:-5}
ver=3.22.1
cache=bench/llamacpp/.cache
out=${VLLMC_BENCH_DIR:-/tmp/vllmc-bench}
py=/usr/bin/python3
mkdir -p "$cache" "$out"
bench/llamacpp/build.sh --fetch
bins=$PWD/$cache/bins
if [ ! -x "$cache/driver" ] || [ bench/llamacpp/driver.c -nt "$cache/driver" ]; then
  cc -O2 -std=c11 -D_GNU_SOURCE -I"$cache/src/include" -I"$cache/src/ggml/include" bench/llamacpp/driver.c \
     -o "$cache/driver" "$bins/libllama.v0.5.0.so" "$bins/libggml.v0.5.0.so" "$bins/libggml-base.so" -Wl,-rpath,"$bins"
fi
if [ ! -f "$out/tinyllama/config.json" ]; then
  echo "writing the TinyLlama-1.1B-shaped model (bf16) to $out/tinyllama"
  $py tools/make_random_model.py "$out/tinyllama" --preset tinyllama-1.1b >/dev/null
fi
for t in $types; do
  f="$out/tinyllama-$t.gguf"
  [ -f "$f" ] || { echo "converting to $t"; $py tools/make_gguf.py "$out/tinyllama" "$f" --type "$t"; }
  echo "== llama.cpp (node-llama-cpp $ver prebuilt), $t, $threads threads"
  "$cache/driver" "$bins" "$f" "$threads" 512 64 "$reps"
done
