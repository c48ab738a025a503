#!/usr/bin/env bash
# test_sampling_replay.sh - every sampling field, sent through /v1/completions
# and /v1/chat/completions (plain and streamed) and `vllmc generate` (prompts
# file and flags) on stories260K, replayed token by token against Hugging
# Face transformers' logits for the same prefix and tests/ref/sampler_ref.py's
# processing (tests/ref/sampling_replay.py says what each case asserts, with
# which tolerance, and how it shows that it could fail). Needs .venv
# (scripts/setup.sh); without it every check is skipped.
# checks: 106
cd "$(dirname "$0")/.." || exit 1
. tests/server_helpers.sh
py=.venv/bin/python
names=$(/usr/bin/python3 tests/ref/sampling_replay.py --list) || { echo "FAIL replay_list: the case list did not load"; exit 1; }
if ! [ -x "$py" ] || ! "$py" -c 'import torch, transformers, numpy' 2>/dev/null; then
  for n in $names; do echo "skip $n: .venv with torch and transformers missing (scripts/setup.sh)"; done
  exit 0
fi
# The references compute in float64 and keep every key and value exact: the
# KV cache in float32 (auto would store stories260K's in bfloat16, as vLLM
# runs a float32 checkpoint on a CPU), so what is replayed is the sampling.
server_start S --max-model-len 512 --kv-cache-dtype float32 || exit 1
timeout 900 "$py" tests/ref/sampling_replay.py --url "$S_URL" --vllmc "$VLLMC" --model models/stories260K
