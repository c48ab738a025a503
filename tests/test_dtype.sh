#!/usr/bin/env bash
# test_dtype.sh - --dtype (vLLM's): a BF16 model on the BF16 compute path
# (kernels/matmul_bf16.c, activations rounded to BF16) by default, FP32 with
# --dtype float32. A random BF16 llama (tools/make_random_model.py) through
# build/tools/dump_logits, checked against tests/ref/torch_forward.py in
# float64 (an implementation of the forward pass nobody here wrote in C):
#   dtype_bf16_vs_torch       --dtype bfloat16: within 2e-3 x max |logit| of torch
#                             with every matmul input rounded to bfloat16
#                             (--act-bf16; the slack is for activations near a
#                             rounding boundary, which FP32 error may flip)
#   dtype_float32_vs_torch    --dtype float32 on the same BF16 model: within 1e-4 of
#                             torch without rounding (FP32 activations, as before)
#   dtype_auto_is_bf16        the engine's default (dump_logits --engine, no
#                             --dtype given to the engine... auto) gives the
#                             runner's --dtype bfloat16 bits, not float32's
#   dtype_batch_invariance    --dtype bfloat16: chunks of 7 mixed with decodes,
#                             whole prompts and one token per step: same bits
#   dtype_bad_value           vllmc --dtype fp16: exit 2, vLLM's argparse message
# --dtype bfloat16 on F16 and F32 weights (model_convert_bf16: BF16 copies at load):
#   dtype_f16_f32_as_bf16_bits  random F16 and F32 llamas under --dtype bfloat16 give
#                             the logits, bit for bit, of their copies whose matmul
#                             weights torch rounded to bfloat16 (tests/ref/bf16_weights.py)
#                             run as BF16 models: our rounding is torch's
#   dtype_f16_bf16_vs_torch   the F16 one within 2e-3 x max |logit| of torch in float64
#                             with matmul weights and inputs rounded to bfloat16, and
#                             not within 1e-4 of FP32 (the BF16 path ran)
#   dtype_f16_auto_is_fp32    the engine's auto keeps an F16 model on FP32 activations
#                             (vLLM keeps float16; no BF16 copies): float32's greedy tokens
# checks: 8
set -uo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
py=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
names="dtype_bf16_vs_torch dtype_float32_vs_torch dtype_auto_is_bf16 dtype_batch_invariance"
names16="dtype_f16_f32_as_bf16_bits dtype_f16_bf16_vs_torch dtype_f16_auto_is_fp32"

if ! $py -c "import torch, numpy" 2>/dev/null; then
  for n in $names; do echo "skip $n: /usr/bin/python3 lacks torch/numpy (scripts/setup.sh installs python3-torch)"; done
elif [ ! -x "$build/tools/dump_logits" ]; then
  for n in $names; do echo "FAIL $n: $build/tools/dump_logits not built"; done
elif ! $py tools/make_random_model.py "$tmp/m" --arch llama --dtype bf16 --kv-heads 2 > "$tmp/gen.log" 2>&1; then
  for n in $names; do echo "FAIL $n: make_random_model.py: $(tail -1 "$tmp/gen.log")"; done
else
  long=$(seq 3 3 120 | tr '\n' ' ')
  prompts="1 ${long}7 9,1 7,5 5 5 5 5 5 5 5 5 5 5 5 5 5 5 5 5 5 5 200 201 202"
  dump() { # out, dump_logits flags...
    local out=$1; shift
    "$build/tools/dump_logits" --model "$tmp/m" --prompts "$prompts" --decode 6 --threads 2 --out "$out" "$@" \
      2> "$tmp/dump.log" || { echo "dump_logits $*: $(grep -v INFO "$tmp/dump.log" | tail -1)"; return 1; }
  }
  if ! err=$(dump "$tmp/bf16.bin" --chunk 7 --budget 24 --dtype bfloat16); then
    echo "FAIL dtype_bf16_vs_torch: $err"
  elif $py tests/ref/torch_forward.py "$tmp/m" "$tmp/bf16.bin" --name unrounded > "$tmp/unrounded.txt"; then
    echo "FAIL dtype_bf16_vs_torch: within 1e-4 of FP32 activations: the BF16 path did not run ($(cat "$tmp/unrounded.txt"))"
  else
    $py tests/ref/torch_forward.py "$tmp/m" "$tmp/bf16.bin" --act-bf16 --tol 2e-3 --name dtype_bf16_vs_torch
  fi
  if err=$(dump "$tmp/f32.bin" --chunk 7 --budget 24 --dtype float32); then
    $py tests/ref/torch_forward.py "$tmp/m" "$tmp/f32.bin" --name dtype_float32_vs_torch
  else echo "FAIL dtype_float32_vs_torch: $err"; fi
  # --engine prints the greedy continuations (no logits): they must be the
  # runner's under bfloat16, and the engine must say it took the BF16 path
  if ! err=$(dump "$tmp/unused.bin" --chunk 7 --budget 24 --dtype bfloat16 --print-greedy > "$tmp/runner.txt") ||
     ! err2=$(dump "$tmp/unused.bin" --engine --chunk 7 --budget 24 --dtype auto > "$tmp/engine.txt"); then
    echo "FAIL dtype_auto_is_bf16: $err ${err2:-}"
  elif ! grep -q "dtype auto: BF16 weights compute with BF16 activations" "$tmp/dump.log"; then
    echo "FAIL dtype_auto_is_bf16: the engine did not log the BF16 path: $(grep dtype "$tmp/dump.log" | tail -1)"
  elif [ -s "$tmp/engine.txt" ] && cmp -s "$tmp/engine.txt" "$tmp/runner.txt"; then
    echo "ok dtype_auto_is_bf16  # the engine's auto: BF16 path, the runner's bfloat16 greedy tokens"
  else
    echo "FAIL dtype_auto_is_bf16: the engine's greedy tokens differ from the runner's under bfloat16"
  fi
  if ! err=$(dump "$tmp/whole.bin" --chunk 400 --budget 400 --dtype bfloat16) ||
     ! err2=$(dump "$tmp/single.bin" --chunk 1 --budget 1 --dtype bfloat16); then
    echo "FAIL dtype_batch_invariance: $err ${err2:-}"
  elif cmp -s "$tmp/bf16.bin" "$tmp/whole.bin" && cmp -s "$tmp/bf16.bin" "$tmp/single.bin"; then
    echo "ok dtype_batch_invariance  # chunks of 7 mixed with decodes, whole prompts, 1 token per step: same bits"
  else
    echo "FAIL dtype_batch_invariance: the BF16 path's logits differ between chunkings"
  fi
fi

# ---- F16 / F32 weights under --dtype bfloat16 ----
if ! $py -c "import torch, numpy" 2>/dev/null; then
  for n in $names16; do echo "skip $n: /usr/bin/python3 lacks torch/numpy (scripts/setup.sh installs python3-torch)"; done
elif [ ! -x "$build/tools/dump_logits" ]; then
  for n in $names16; do echo "FAIL $n: $build/tools/dump_logits not built"; done
elif ! { $py tools/make_random_model.py "$tmp/m16" --arch llama --dtype f16 --kv-heads 2 &&
         $py tools/make_random_model.py "$tmp/m32" --arch llama --dtype f32 --kv-heads 2 --seed 7 &&
         $py tests/ref/bf16_weights.py "$tmp/m16" "$tmp/m16b" && $py tests/ref/bf16_weights.py "$tmp/m32" "$tmp/m32b"; } \
       > "$tmp/gen16.log" 2>&1; then
  for n in $names16; do echo "FAIL $n: making the models: $(tail -1 "$tmp/gen16.log")"; done
else
  prompts="1 3 6 9 12 15 18 21 24 27 30 33 7 9,1 7,5 5 5 5 5 5 5 5 200 201 202"
  d16() { # model, out, dump_logits flags...
    local m=$1 out=$2; shift 2
    "$build/tools/dump_logits" --model "$m" --prompts "$prompts" --decode 6 --threads 2 --out "$out" \
      --chunk 7 --budget 24 "$@" 2> "$tmp/d16.log" || { echo "dump_logits $m $*: $(grep -v INFO "$tmp/d16.log" | tail -1)"; return 1; }
  }
  bits=""
  for m in m16 m32; do
    if ! err=$(d16 "$tmp/$m" "$tmp/$m.bin" --dtype bfloat16) || ! err2=$(d16 "$tmp/${m}b" "$tmp/${m}b.bin" --dtype bfloat16); then
      bits+="$m: $err ${err2:-}; "
    elif ! cmp -s "$tmp/$m.bin" "$tmp/${m}b.bin"; then
      bits+="$m: the logits differ from those of torch's BF16 rounding of its weights; "
    fi
  done
  if [ -z "$bits" ]; then echo "ok dtype_f16_f32_as_bf16_bits  # F16 and F32 weights rounded at load = torch's .to(bfloat16), bit for bit"
  else echo "FAIL dtype_f16_f32_as_bf16_bits: $bits"; fi
  if [ ! -s "$tmp/m16.bin" ]; then
    echo "FAIL dtype_f16_bf16_vs_torch: no logits from the F16 model"
  elif $py tests/ref/torch_forward.py "$tmp/m16" "$tmp/m16.bin" --name unrounded > "$tmp/unrounded16.txt"; then
    echo "FAIL dtype_f16_bf16_vs_torch: within 1e-4 of FP32: the BF16 path did not run ($(cat "$tmp/unrounded16.txt"))"
  else
    $py tests/ref/torch_forward.py "$tmp/m16" "$tmp/m16.bin" --act-bf16 --weights-bf16 --tol 2e-3 --name dtype_f16_bf16_vs_torch
  fi
  if ! err=$(d16 "$tmp/m16" "$tmp/unused.bin" --dtype float32 --print-greedy > "$tmp/f32-16.txt") ||
     ! err2=$(d16 "$tmp/m16" "$tmp/unused.bin" --engine --dtype auto > "$tmp/auto-16.txt"); then
    echo "FAIL dtype_f16_auto_is_fp32: $err ${err2:-}"
  elif ! grep -q "dtype auto: FP32 activations" "$tmp/d16.log" || grep -q "rounded to BF16" "$tmp/d16.log"; then
    echo "FAIL dtype_f16_auto_is_fp32: the engine did not keep FP32: $(grep -i "dtype\|bf16" "$tmp/d16.log" | tail -2)"
  elif [ -s "$tmp/auto-16.txt" ] && cmp -s "$tmp/auto-16.txt" "$tmp/f32-16.txt"; then
    echo "ok dtype_f16_auto_is_fp32  # auto on an F16 model: FP32 activations, float32's greedy tokens"
  else
    echo "FAIL dtype_f16_auto_is_fp32: the engine's greedy tokens differ from the runner's under float32"
  fi
fi

"$build/vllmc" generate --model models/stories260K --dtype fp16 --prompt hi > /dev/null 2> "$tmp/bad.err"
r=$?
want="argument --dtype: invalid value 'fp16': choose from 'auto', 'half', 'float16', 'bfloat16', 'float', 'float32'"
if [ $r -eq 2 ] && grep -qF "$want" "$tmp/bad.err"; then echo "ok dtype_bad_value"
else echo "FAIL dtype_bad_value: exit $r, $(head -1 "$tmp/bad.err")"; fi
