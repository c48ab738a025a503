#!/usr/bin/env bash
# test_hf_forward.sh - our logits against Hugging Face transformers', the
# reference that proves the forward pass when PyPI is reachable.
#
# tests/ref/hf_forward.py (its docstring has the matrix and how each
# tolerance is derived): random-weight Llama (GQA, MQA, llama3 and linear
# RoPE scaling, attention biases, tied embeddings, odd shapes), Mistral (with
# and without sliding_window), Qwen2 (biases, tied), Qwen3 (q/k norms,
# head_dim != hidden/heads) and Gemma 3 (sliding windows of 8 and 5 tokens
# computed, final logit softcapping, untied) models written by transformers'
# save_pretrained in F32, BF16 and F16, and GGUF files of them written by
# llama.cpp's convert_hf_to_gguf.py (F32, F16, BF16, Q8_0), run through
# build/tools/dump_logits (chunked prefill mixed with decode, paged KV) and
# compared position by position with transformers' float64 forward.
#
# Skipped, never passed, without .venv/ (scripts/setup.sh installs
# tests/ref/requirements.txt there); the GGUF rows alone are skipped when
# scripts/fetch_models.sh convert cannot fetch the converter. Without PyPI,
# tests/test_forward_ref.sh (tests/ref/torch_forward.py on Debian's torch)
# still checks the same equations on every architecture, written here.
# The results are named by tests/ref/hf_forward.py --list.
# checks: 42
set -uo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
py=.venv/bin/python

if [ ! -x "$build/tools/dump_logits" ]; then
  echo "FAIL hf_forward: $build/tools/dump_logits not built"; exit 0
fi
if ! [ -x $py ] || ! $py -c "import torch, transformers, gguf" 2>/dev/null; then
  for n in $(/usr/bin/python3 tests/ref/hf_forward.py --list); do
    echo "skip $n: .venv lacks torch/transformers/gguf (scripts/setup.sh installs them from PyPI)"
  done
  exit 0
fi
conv=()
if dir=$(scripts/fetch_models.sh convert 2>/dev/null); then
  conv=(--converter "$dir")
fi
$py tests/ref/hf_forward.py "$build" "${conv[@]}" ${HF_FORWARD_ONLY:+--only "$HF_FORWARD_ONLY"}
exit 0
