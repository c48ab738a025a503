#!/usr/bin/env bash
# test_gguf_forward.sh - GGUF models (tools/make_gguf.py) through our loader,
# runner and tokenizer, against independent references.
#
#   gguf_f32_*      F32 GGUF logits == the same model's safetensors logits (ours,
#                   tol 1e-5 relative: only the RoPE pair order and so the
#                   attention dot's summation order differ) and == the float64
#                   PyTorch reference on the HF directory (tol 1e-4).
#   gguf_q8_0/q4_0  logits vs tests/ref/torch_forward.py on a HF directory
#                   holding numpy's dequantization of what make_gguf wrote
#                   (tests/ref/gguf_deq_model.py) with the 8-bit activation
#                   quantization modelled (--act-quant), tol 1e-4 as for F32
#                   models; and, loosely (tol 5e-2), vs the same reference
#                   with F32 activations (what the integer dots cost).
#   gguf_q4_k/q6_k  the same two checks on a hidden-256 model (K-quant rows
#                   are multiples of 256), make_gguf's Q4_K/Q6_K quantizer;
#                   the act-quant one at tol 2e-2: at hidden 256 a few
#                   activations sit on a rounding tie that our F32 and the
#                   float64 reference resolve differently (Q8_0 files show the
#                   same ~1e-2 there); test_quant_k checks the dots to 2e-6.
#   gguf_*_avx2     the quantized act-quant checks again with VLLM_KERNELS=avx2
#                   (skipped where the machine has no AVX2).
#   gguf_stories260K_greedy  the F32 GGUF of stories260K, tokenizer embedded,
#                   reproduces models/stories260K/reference_bos_greedy200.json.
#   gguf_tokenizer_*  the GGUF-embedded tokenizer gives the HF tokenizer.json's
#                   ids for every text of tests/ref/tokenizer_cases.json (and
#                   decodes them back the same), and SentencePiece's ids
#                   (tests/ref/spm_ref.py) where the two are meant to agree.
# checks: 20
set -uo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
py=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if ! $py -c "import torch, numpy, sentencepiece" 2>/dev/null; then
  echo "FAIL gguf_forward: /usr/bin/python3 lacks torch/numpy/sentencepiece (run scripts/setup.sh)"; exit 0
fi

long=$(seq 3 3 120 | tr '\n' ' ')
prompts="1 ${long}7 9,1 7,5 5 5 5 5 5 5 5 5 5 5 5 5 5 5 5 5 5 5 200 201 202"
dump() { # model, out
  "$build/tools/dump_logits" --model "$1" --prompts "$prompts" --decode 6 --chunk 7 --budget 24 \
    --threads 2 --out "$2" 2> "$tmp/dump.log" || { grep -v INFO "$tmp/dump.log" | tail -1; return 1; }
}

hf="$tmp/hf"
if ! $py tools/make_random_model.py "$hf" --arch llama --dtype f32 --hidden-size 64 --heads 4 --kv-heads 2 \
     --intermediate-size 96 --layers 2 > "$tmp/gen.log" 2>&1; then
  echo "FAIL gguf_forward: make_random_model.py: $(tail -1 "$tmp/gen.log")"; exit 0
fi
vocab=$($py -c "import json;print(json.load(open('$hf/config.json'))['vocab_size'])")

# K-quants need rows that are multiples of 256
hfk="$tmp/hfk"
if ! $py tools/make_random_model.py "$hfk" --arch llama --dtype f32 --hidden-size 256 --heads 4 --kv-heads 2 \
     --intermediate-size 512 --layers 2 > "$tmp/gen.log" 2>&1; then
  echo "FAIL gguf_forward: make_random_model.py (K): $(tail -1 "$tmp/gen.log")"; exit 0
fi

for type in f32 bf16 q8_0 q4_0 q4_k q6_k; do
  name=gguf_${type}
  hf="$tmp/hf"; case $type in q4_k|q6_k) hf="$hfk";; esac
  if ! $py tools/make_gguf.py "$hf" "$tmp/$type.gguf" --type $type --dump-ref "$tmp/ref_$type" > "$tmp/gen.log" 2>&1; then
    echo "FAIL $name: make_gguf.py: $(tail -1 "$tmp/gen.log")"; continue
  fi
  if ! err=$(dump "$tmp/$type.gguf" "$tmp/$type.bin"); then echo "FAIL $name: dump_logits: $err"; continue; fi
  if [ $type = f32 ]; then
    if ! err=$(dump "$hf" "$tmp/hf.bin"); then echo "FAIL $name: dump_logits (safetensors): $err"; continue; fi
    $py - "$tmp/f32.bin" "$tmp/hf.bin" "$vocab" <<'PY'
import sys, numpy as np
sys.path.insert(0, "tests/ref")
from torch_forward import read_dump
a, b, v = read_dump(sys.argv[1], int(sys.argv[3])), read_dump(sys.argv[2], int(sys.argv[3])), int(sys.argv[3])
ok = len(a) == len(b) and all(x[0] == y[0] for x, y in zip(a, b))
err = max(float(np.abs(x[1] - y[1]).max() / np.abs(y[1]).max()) for x, y in zip(a, b)) if ok else 1.0
print(f"ok gguf_f32_vs_safetensors  # max rel error {err:.1e}" if ok and err <= 1e-5 else
      f"FAIL gguf_f32_vs_safetensors: ids equal {ok}, max rel error {err:.1e} > 1e-5")
PY
    $py tests/ref/torch_forward.py "$hf" "$tmp/f32.bin" --name gguf_f32_vs_torch
  else
    $py tests/ref/gguf_deq_model.py "$hf" "$tmp/ref_$type" "$tmp/deq_$type"
    tol=1e-4; case $type in q4_k|q6_k) tol=2e-2;; esac
    $py tests/ref/torch_forward.py "$tmp/deq_$type" "$tmp/$type.bin" --act-quant "$tmp/deq_$type/act_quant.json" \
      --tol $tol --name "${name}_vs_torch_dequantized"
    [ $type = bf16 ] || $py tests/ref/torch_forward.py "$tmp/deq_$type" "$tmp/$type.bin" --tol 5e-2 --name "${name}_vs_torch_f32_activations"
  fi
done

# the AVX2 kernels on the same references (the default path is AVX-512 where
# the CPU has it): Q8_0/Q4_0 in the AVX2 block order through the model's x16
# copies, the K-quants' AVX2 kernel
for type in q8_0 q4_0 q4_k q6_k; do
  name=gguf_${type}_avx2
  "$build/tests/kernels_probe" avx2 2>/dev/null ||
    { echo "skip ${name}_vs_torch_dequantized: no avx2 on this machine (tests/kernels_probe)"; continue; }
  [ -f "$tmp/$type.gguf" ] && [ -d "$tmp/deq_$type" ] || { echo "FAIL $name: no $type model from the loop above"; continue; }
  if ! err=$(VLLM_KERNELS=avx2 dump "$tmp/$type.gguf" "$tmp/${type}_avx2.bin"); then echo "FAIL $name: dump_logits: $err"; continue; fi
  tol=1e-4; case $type in q4_k|q6_k) tol=2e-2;; esac
  $py tests/ref/torch_forward.py "$tmp/deq_$type" "$tmp/${type}_avx2.bin" --act-quant "$tmp/deq_$type/act_quant.json" \
    --tol $tol --name "${name}_vs_torch_dequantized"
done

# stories260K with its tokenizer embedded
s260="$tmp/stories260K.gguf"
if ! $py tools/make_gguf.py models/stories260K "$s260" --type f32 > "$tmp/gen.log" 2>&1; then
  echo "FAIL gguf_stories260K: make_gguf.py: $(tail -1 "$tmp/gen.log")"; exit 0
fi
if "$build/vllmc" generate --model "$s260" --max-tokens 200 --temperature 0 --ignore-eos --json \
     > "$tmp/gen.json" 2> "$tmp/gen.err"; then
  $py - "$tmp/gen.json" <<'PY'
import json, sys
ref = json.load(open("models/stories260K/reference_bos_greedy200.json"))["greedy_ids"]
got = json.loads(open(sys.argv[1]).readline())["outputs"][0]["token_ids"]
n = next((i for i, (x, y) in enumerate(zip(got, ref)) if x != y), min(len(got), len(ref)))
print("ok gguf_stories260K_greedy  # 200 tokens" if got == ref else
      f"FAIL gguf_stories260K_greedy: {len(got)} tokens, first difference at {n}")
PY
else
  echo "FAIL gguf_stories260K_greedy: vllmc generate: $(grep -v INFO "$tmp/gen.err" | tail -1)"
fi

$py -c "
import json
for t in json.load(open('tests/ref/tokenizer_cases.json'))['texts']: print(json.dumps(t))" > "$tmp/texts.jsonl"
for flags in "" "--no-special-tokens"; do
  "$build/vllmc" tokenize --model models/stories260K $flags < "$tmp/texts.jsonl" > "$tmp/hf_ids.jsonl" 2>/dev/null
  "$build/vllmc" tokenize --model "$s260" $flags < "$tmp/texts.jsonl" > "$tmp/gguf_ids.jsonl" 2> "$tmp/tok.err"
  n=$(wc -l < "$tmp/texts.jsonl")
  if [ "$(wc -l < "$tmp/gguf_ids.jsonl")" = "$n" ] && cmp -s "$tmp/hf_ids.jsonl" "$tmp/gguf_ids.jsonl"; then
    echo "ok gguf_tokenizer_encode${flags:+_no_special}  # $n texts"
  else
    echo "FAIL gguf_tokenizer_encode${flags:+_no_special}: ids differ from tokenizer.json's ($(diff "$tmp/hf_ids.jsonl" "$tmp/gguf_ids.jsonl" | head -2 | tr '\n' ' ') $(grep -v INFO "$tmp/tok.err" | tail -1))"
  fi
done
"$build/vllmc" detokenize --model models/stories260K < "$tmp/hf_ids.jsonl" > "$tmp/hf_text.jsonl" 2>/dev/null
"$build/vllmc" detokenize --model "$s260" < "$tmp/hf_ids.jsonl" > "$tmp/gguf_text.jsonl" 2>/dev/null
if [ -s "$tmp/gguf_text.jsonl" ] && cmp -s "$tmp/hf_text.jsonl" "$tmp/gguf_text.jsonl"; then
  echo "ok gguf_tokenizer_decode"
else
  echo "FAIL gguf_tokenizer_decode: text differs from tokenizer.json's"
fi
$py tests/ref/spm_ref.py models/stories260K/tokenizer.model tests/ref/tokenizer_cases.json > "$tmp/spm.json"
$py - "$tmp/spm.json" "$tmp/texts.jsonl" "$tmp/gguf_ids.jsonl" <<'PY'
import json, sys
spm = {c["text"]: c["ids"] for c in json.load(open(sys.argv[1]))}
texts = [json.loads(l) for l in open(sys.argv[2])]
ids = [json.loads(l) for l in open(sys.argv[3])]
bad = [t for t, i in zip(texts, ids) if t in spm and spm[t] != i]
print(f"ok gguf_tokenizer_vs_sentencepiece  # {len(spm)} texts" if spm and not bad else
      f"FAIL gguf_tokenizer_vs_sentencepiece: {len(bad)} of {len(spm)} differ, e.g. {bad[:1]!r}")
PY
