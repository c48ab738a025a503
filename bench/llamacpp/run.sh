#!/usr/bin/env bash
# Side-by-side peer: llama.cpp from the node-llama-cpp npm package, on
# TinyLlama-1.1B-shaped random-weight GGUF files written by tools/make_gguf.py.
#
#   bench/llamacpp/run.sh [TYPES] [THREADS] [REPEATS]     e.g. bench/llamacpp/run.sh "f16 q8_0 q4_0" 2 5
#
# Fetches (npm pack, once, into bench/llamacpp/.cache) node-llama-cpp and
# @node-llama-cpp/linux-x64: the prebuilt libllama / libggml shared libraries
# (CPU variants chosen at run time) and the llama.cpp source bundle, from which
# only the headers are used to compile driver.c against the prebuilt library.
# The package ships no llama-bench binary; building it from the bundle is the
# follow-up for llama-batched-bench / llama-server. Nothing else is
# downloaded. Prints prefill-512 and decode tok/s per type (driver.c).
# Model files go to ${VLLMC_BENCH_DIR:-/tmp/vllmc-bench} (about 6 GB for all types).
set -euo pipefail
cd "$(dirname "$0")/../.."
types=${1:-"f16 q8_0 q4_0"} threads=${2:-2} reps=${3:-5}
ver=3.22.1
cache=bench/llamacpp/.cache
out=${VLLMC_BENCH_DIR:-/tmp/vllmc-bench}
py=/usr/bin/python3
mkdir -p "$cache" "$out"
if [ ! -d "$cache/bins" ]; then
  (cd "$cache" && npm pack --loglevel=error "node-llama-cpp@$ver" "@node-llama-cpp/linux-x64@$ver" >/dev/null)
  tar xzf "$cache/node-llama-cpp-linux-x64-$ver.tgz" -C "$cache" package/bins
  mv "$cache/package/bins/linux-x64" "$cache/bins"
  tar xzf "$cache/node-llama-cpp-$ver.tgz" -C "$cache" package/llama/gitRelease.bundle
  git clone -q --depth 1 "$cache/package/llama/gitRelease.bundle" "$cache/src" 2>/dev/null
  rm -rf "$cache/package" "$cache"/*.tgz
fi
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
