#!/usr/bin/env bash
# test_server_prompt_logprobs.sh - vLLM's prompt_logprobs (completions and
# chat) and echo + logprobs in completions, on stories260K, against
# log-softmax over transformers' logits (tests/ref/prompt_logprobs_check.py
# says what each check asserts). Two servers: A prefills in chunks of 64
# tokens with at most 7 prompt-logprob rows a step (VLLMC_DEBUG_PROMPT_ROWS),
# B with the defaults; their numbers must be equal bit for bit, alone or
# batched. KV cache in float32, as test_sampling_replay.sh, so what is
# compared is the logprobs. Needs .venv (scripts/setup.sh), else skipped.
# checks: 8
# tags: tsan
cd "$(dirname "$0")/.." || exit 1
. tests/server_helpers.sh
py=.venv/bin/python
names="prompt_logprobs_reference chat_prompt_logprobs_reference prompt_logprobs_batch_invariant prompt_logprobs_prefix_cache echo_logprobs echo_logprobs_max_tokens_0 echo_logprobs_stream prompt_logprobs_errors"
if ! [ -x "$py" ] || ! "$py" -c 'import torch, transformers, numpy' 2>/dev/null; then
  for n in $names; do echo "skip $n: .venv with torch and transformers missing (scripts/setup.sh)"; done
  exit 0
fi
VLLMC_DEBUG_PROMPT_ROWS=7 server_start A --kv-cache-dtype float32 --max-num-batched-tokens 64 --max-num-seqs 8 || exit 1
server_start B --kv-cache-dtype float32 --enable-prompt-tokens-details || exit 1
timeout 600 "$py" tests/ref/prompt_logprobs_check.py "$A_URL" "$B_URL" models/stories260K
