#!/usr/bin/env bash
# test_moe_ref.sh - mixture-of-experts models (model/moe.h) against Hugging
# Face transformers: Qwen3MoeForCausalLM and MixtralForCausalLM written by
# transformers itself with random weights, our logits within 2e-5 of its
# float64 forward at every position, and every prompt alone bit for bit equal
# to the batch; GGUF forms of them written by llama.cpp's converter (F32, F16,
# Q8_0; Q4_0 requantized by gguf-py) against llama.cpp's own logits
# (tests/ref/llamacpp_logits.c on the prebuilt libllama). tests/ref/moe_ref.py
# has the matrix and the tolerances.
#
# Skipped, never passed, without .venv/ (scripts/setup.sh installs torch and
# transformers from PyPI there); the GGUF rows alone are skipped without the
# converter (scripts/fetch_models.sh convert) or the prebuilt llama.cpp
# (bench/llamacpp/build.sh --fetch).
# checks: 21
set -uo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
py=.venv/bin/python

if [ ! -x "$build/tools/dump_logits" ]; then
  echo "FAIL moe_ref: $build/tools/dump_logits not built"; exit 0
fi
if ! [ -x $py ] || ! $py -c "import torch, transformers" 2>/dev/null; then
  for n in $(/usr/bin/python3 tests/ref/moe_ref.py --list); do
    echo "skip $n: .venv lacks torch/transformers (scripts/setup.sh installs them from PyPI)"
  done
  exit 0
fi
conv=()
if dir=$(scripts/fetch_models.sh convert 2>/dev/null); then
  conv=(--converter "$dir")
fi
$py tests/ref/moe_ref.py "$build" "${conv[@]}"
exit 0
