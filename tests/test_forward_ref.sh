#!/usr/bin/env bash
# test_forward_ref.sh - our forward pass against a PyTorch one written here
# (tests/ref/torch_forward.py, on Debian's torch: runs without PyPI). The
# independent reference is Hugging Face transformers, tests/test_hf_forward.sh;
# this one is the fallback and covers what that does not (stories260K, the
# AMX/AVX2/portable batch-invariance runs of test_forward below).
#
# For random-weight models of every supported architecture variant (written by
# tools/make_random_model.py) and for the real stories260K, build/tools/dump_logits
# runs several prompts the way the engine does (sequences joining at different
# steps, prefill in chunks of 7 mixed with decode steps in one batch, greedy
# decoding through the paged KV) and dumps the logits of every position;
# tests/ref/torch_forward.py recomputes them from the HF modeling equations in
# float64 and compares (max error <= 1e-4 of the largest logit; the weights are
# the same numbers in both, so BF16/F16 models get the same bound).
# checks: 18
set -uo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
py=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if ! $py -c "import torch, numpy" 2>/dev/null; then
  echo "FAIL forward_ref: /usr/bin/python3 lacks torch/numpy (run scripts/setup.sh)"; exit 0
fi
if [ ! -x "$build/tools/dump_logits" ]; then
  echo "FAIL forward_ref: $build/tools/dump_logits not built"; exit 0
fi

# Prompts (ids < 256): one longer than two KV blocks, a short one, a repetitive one.
long=$(seq 3 3 120 | tr '\n' ' ')
prompts="1 ${long}7 9,1 7,5 5 5 5 5 5 5 5 5 5 5 5 5 5 5 5 5 5 5 200 201 202"

# run_on FEATURE name dir: run where the machine has FEATURE, else a skip line
run_on() {
  local feature=$1; shift
  if "$build/tests/kernels_probe" "$feature" 2>/dev/null; then run "$@"
  else echo "skip forward_ref_$1: no $feature on this machine (tests/kernels_probe)"; fi
}

check() { # name, make_random_model flags...
  local name=$1; shift
  local dir="$tmp/$name"
  if ! $py tools/make_random_model.py "$dir" "$@" > "$tmp/gen.log" 2>&1; then
    echo "FAIL $name: make_random_model.py $*: $(tail -1 "$tmp/gen.log")"; return
  fi
  run "$name" "$dir"
}

run() { # name, model dir
  local name=$1 dir=$2
  if ! "$build/tools/dump_logits" --model "$dir" --prompts "$prompts" --decode 6 --chunk 7 --budget 24 \
       --threads 2 --out "$tmp/$name.bin" 2> "$tmp/dump.log"; then
    echo "FAIL $name: dump_logits: $(grep -v INFO "$tmp/dump.log" | tail -1)"; return
  fi
  $py tests/ref/torch_forward.py "$dir" "$tmp/$name.bin" --name "forward_ref_$name"
}

check llama_f32_gqa        --arch llama --dtype f32 --kv-heads 2
check llama_f32_tied_llama3 --arch llama --dtype f32 --tie --heads 4 --kv-heads 2 --rope-scaling llama3:8,1,4,400 --rope-theta 500000
check llama_bf16_linear_bias --arch llama --dtype bf16 --kv-heads 1 --rope-scaling linear:2 --attention-bias
check llama_f32_odd_dims   --arch llama --dtype f32 --hidden-size 60 --heads 6 --kv-heads 2 --intermediate-size 100 --layers 3
check mistral_f16          --arch mistral --dtype f16 --kv-heads 2
check qwen2_bf16           --arch qwen2 --dtype bf16 --kv-heads 2
check qwen2_f32_tied       --arch qwen2 --dtype f32 --kv-heads 4 --tie
check qwen3_f32            --arch qwen3 --dtype f32 --kv-heads 2
check qwen3_bf16_head_dim  --arch qwen3 --dtype bf16 --kv-heads 2 --head-dim 16 --tie --shards 2
run stories260K models/stories260K
# The other kernel paths on the same references, each where the machine has
# it (tests/kernels_probe) and reported skipped where it does not. test_forward
# (batch invariance, golden tokens) runs on these paths as its variants.
# the AVX2 kernels when the CPU has AVX-512 (the default path there)
VLLM_KERNELS=avx2 run_on avx2 stories260K_avx2 models/stories260K
VLLM_KERNELS=avx2 run_on avx2 mistral_f16_avx2 "$tmp/mistral_f16"
VLLM_KERNELS=avx2 run_on avx2 qwen3_bf16_head_dim_avx2 "$tmp/qwen3_bf16_head_dim"
# AMX-BF16 (kernels.h: BF16 weights by default where the CPU has it, F16 with
# VLLM_AMX=f16) and the AVX-512 FMA kernels with every AMX path off
VLLM_AMX=f16 run_on amx-bf16 mistral_f16_amx "$tmp/mistral_f16"
VLLM_AMX=0 run_on amx-bf16 llama_bf16_linear_bias_noamx "$tmp/llama_bf16_linear_bias"
VLLM_AMX=0 run_on amx-bf16 qwen3_bf16_head_dim_noamx "$tmp/qwen3_bf16_head_dim"
# the portable (non-AVX2) kernels
VLLM_KERNELS=portable run stories260K_portable models/stories260K
VLLM_KERNELS=portable run qwen3_bf16_head_dim_portable "$tmp/qwen3_bf16_head_dim"
