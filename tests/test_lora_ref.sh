#!/usr/bin/env bash
# test_lora_ref.sh - LoRA adapters against PEFT/PyTorch (tests/ref/lora_ref.py
# says what is compared and how): stories260K and a random Llama, four
# adapters written by PEFT (ranks 2-16, all / attention / MLP targets,
# rsLoRA, F32/BF16/F16 files) and the base model mixed in one batch through
# build/tools/dump_logits, per-sequence logits within 2e-5 of PEFT's float64
# forward, each sequence alone equal bit for bit to the mixed batch, swapped
# adapters caught, and four bad adapters refused with a message naming the
# problem.
# Skipped, never passed, without .venv/ (torch, transformers, peft).
# checks: 18
set -uo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
py=.venv/bin/python
names="stories260K_seq0_base stories260K_seq1 stories260K_seq2 stories260K_seq3 stories260K_seq4
stories260K_batch_invariant stories260K_swapped_adapters_differ random_llama_seq0_base random_llama_seq1
random_llama_seq2 random_llama_seq3 random_llama_seq4 random_llama_batch_invariant
random_llama_swapped_adapters_differ bad_rank bad_target_module bad_shape bad_missing_file"
if [ ! -x "$build/tools/dump_logits" ]; then
  for n in $names; do echo "FAIL lora_$n: $build/tools/dump_logits not built"; done; exit 0
fi
if ! [ -x $py ] || ! $py -c "import torch, transformers, peft, safetensors" 2>/dev/null; then
  for n in $names; do echo "skip lora_$n: .venv lacks torch/transformers/peft (tests/ref/requirements.txt)"; done
  exit 0
fi
$py tests/ref/lora_ref.py "$build" 2>/dev/null
exit 0
