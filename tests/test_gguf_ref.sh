#!/usr/bin/env bash
# GGUF files written by tools/make_gguf.py (numpy, from the GGUF spec and
# ggml's block layouts) read back by our C reader: dequantized values equal
# numpy's bit for bit, our Q8_0/Q4_0 quantizers reproduce numpy's bytes, the
# random Q4_K/Q6_K blocks dequantize identically, and the mapped model config
# and tokenizer match config.json and the writer's vocabulary.
# checks: 8
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${BUILD_DIR:-build}/tests/test_gguf
py=/usr/bin/python3
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
$py tools/make_random_model.py "$tmp/m" --arch llama --hidden-size 64 --intermediate-size 96 --layers 2 \
    --heads 4 --kv-heads 2 --vocab-size 320 --dtype bf16 --rope-theta 500000 >/dev/null ||
  { echo "FAIL gguf_ref_setup: make_random_model.py failed"; exit 0; }
for type in f32 f16 q8_0 q4_0; do
  if ! $py tools/make_gguf.py "$tmp/m" "$tmp/m-$type.gguf" --type "$type" --dump-ref "$tmp/ref-$type" --k-samples 2>"$tmp/err"; then
    echo "FAIL gguf_ref_$type: make_gguf.py failed: $(tail -1 "$tmp/err")"; continue
  fi
  out=$("$bin" --compare "$tmp/m-$type.gguf" "$tmp/ref-$type")
  rc=$?
  echo "$out" | grep -q '^FAIL' && { echo "$out" | grep '^FAIL' | sed "s/^FAIL /FAIL ${type}_/"; continue; }
  [ $rc -ne 0 ] && { echo "FAIL gguf_ref_$type: test_gguf --compare exited $rc"; continue; }
  # expectations from config.json and the writer's conventions, not from our output
  want=$($py - "$tmp/m/config.json" "$type" <<'PY'
import json, sys
import numpy as np
c = json.load(open(sys.argv[1]))
t = {"f32": "F32", "f16": "F16", "q8_0": "Q8_0", "q4_0": "Q4_0"}[sys.argv[2]]
for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
          "vocab_size", "max_position_embeddings"):
    print(f"cfg {k} {c[k]}")
print(f"cfg rms_norm_eps {float(np.float32(c['rms_norm_eps'])):.9g}")
print(f"cfg rope_theta {float(np.float32(c['rope_theta'])):.9g}")
print(f"cfg tie_word_embeddings {int(bool(c.get('tie_word_embeddings')))}")
print(f"cfg bos_token_id {c['bos_token_id']}")
print(f"cfg head_dim {c['hidden_size'] // c['num_attention_heads']}")
print("cfg rope_interleaved 1")
print(f"tok model llama\ntok num_tokens {c['vocab_size']}\ntok bos {c['bos_token_id']}\ntok eos {c['eos_token_id']}\ntok add_bos 1")
print("tok token_5 <0x02>\ntok score_5 -5\ntok type_5 6")  # <unk> <s> </s> then the byte tokens
print(f"w q_proj {t} {c['hidden_size']} {c['hidden_size']}")
PY
)
  got=$(echo "$out" | grep -E '^(cfg|tok|w) ')
  if [ "$got" != "$want" ]; then
    echo "FAIL gguf_ref_${type}_config: $(diff <(echo "$want") <(echo "$got") | grep '^[<>]' | tr '\n' ' ')"
  else
    echo "$out" | grep '^ok ' | sed "s/^ok /ok ${type}_/"
    echo "ok gguf_ref_${type}_config"
  fi
done
