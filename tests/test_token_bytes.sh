#!/usr/bin/env bash
# test_token_bytes.sh - tokenizer_token_bytes (a token's bytes in the middle of
# a text: what logprobs' `bytes` report and grammars match) for every id of
# five vocabularies, against independent references (build/tools/token_bytes
# dumps ours):
#   spm_stories260K   SentencePiece's own model file (tests/ref/token_bytes_ref.py spm)
#   bytelevel_llama3, bytelevel_qwen3   transformers' convert_ids_to_tokens
#                     through GPT-2's bytes_to_unicode inverse, added tokens
#                     verbatim (../shared/tokenizers; skipped without it)
#   gguf_smollm2, gguf_gemma3   llama.cpp's llama_token_to_piece(special) on the
#                     GGUF files (tests/ref/llamacpp_pieces.c against the
#                     prebuilt libllama; skipped when scripts/fetch_models.sh or
#                     llama.cpp's npm package is unavailable)
# checks: 5
set -uo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
py=.venv/bin/python
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

tool=$build/tools/token_bytes
[ -x "$tool" ] || { for n in spm_stories260K bytelevel_llama3 bytelevel_qwen3 gguf_smollm2 gguf_gemma3; do
  echo "FAIL $n: $tool not built"; done; exit 0; }

# compare NAME MODEL REF_FILE: ours for every id against the reference's lines
compare() {
  local name=$1 model=$2 ref=$3
  if ! "$tool" "$model" > "$tmp/ours" 2> "$tmp/err"; then
    echo "FAIL $name: token_bytes failed: $(head -1 "$tmp/err")"; return
  fi
  local nref nours bad
  nref=$(wc -l < "$ref") nours=$(wc -l < "$tmp/ours")
  if [ "$nref" -lt 100 ] || [ "$nref" != "$nours" ]; then
    echo "FAIL $name: $nours ids, the reference has $nref"; return
  fi
  bad=$(diff "$ref" "$tmp/ours" | grep -c '^<')
  if [ "$bad" != 0 ]; then
    echo "FAIL $name: $bad of $nref ids differ, first (reference < > ours): $(diff "$ref" "$tmp/ours" | grep -m2 '^[<>]' | tr '\n' ' ')"
  else
    echo "ok $name  # $nref ids"
  fi
}

if ! $py -c "import sentencepiece, transformers" 2>/dev/null; then
  for n in spm_stories260K bytelevel_llama3 bytelevel_qwen3; do echo "skip $n: no .venv with transformers and sentencepiece (scripts/setup.sh)"; done
else
  if $py tests/ref/token_bytes_ref.py spm models/stories260K/tokenizer.model > "$tmp/ref" 2> "$tmp/err"; then
    compare spm_stories260K models/stories260K "$tmp/ref"
  else
    echo "FAIL spm_stories260K: reference failed: $(tail -1 "$tmp/err")"
  fi
  for m in llama3 qwen3; do
    dir=../shared/tokenizers/$m
    if [ ! -f "$dir/tokenizer.json" ]; then echo "skip bytelevel_$m: $dir missing"; continue; fi
    if $py tests/ref/token_bytes_ref.py bytelevel "$dir" > "$tmp/ref" 2> "$tmp/err"; then
      compare bytelevel_$m "$dir" "$tmp/ref"
    else
      echo "FAIL bytelevel_$m: reference failed: $(tail -1 "$tmp/err")"
    fi
  done
fi

llama_why=""
lc=$PWD/bench/llamacpp/.cache
if ! bench/llamacpp/build.sh --fetch > "$tmp/npm.log" 2>&1; then
  llama_why="llama.cpp's npm package cannot be fetched ($(tail -1 "$tmp/npm.log"))"
elif ! cc -O2 -std=c11 -D_GNU_SOURCE -I"$lc/src/include" -I"$lc/src/ggml/include" tests/ref/llamacpp_pieces.c \
       -o "$tmp/llamacpp_pieces" "$lc/bins/libllama.v0.5.0.so" "$lc/bins/libggml.v0.5.0.so" "$lc/bins/libggml-base.so" \
       -Wl,-rpath,"$lc/bins" -lm 2> "$tmp/cc.log"; then
  llama_why="FAIL: tests/ref/llamacpp_pieces.c does not build against the prebuilt libllama: $(head -1 "$tmp/cc.log")"
fi
for m in smollm2 gemma3; do
  if [ -n "$llama_why" ]; then
    case $llama_why in FAIL:*) echo "FAIL gguf_$m: ${llama_why#FAIL: }" ;; *) echo "skip gguf_$m: $llama_why" ;; esac
    continue
  fi
  path=$(scripts/fetch_models.sh $m 2> "$tmp/fetch.err"); rc=$?
  if [ $rc = 3 ]; then echo "skip gguf_$m: the package registry is unreachable"; continue; fi
  if [ $rc != 0 ]; then echo "FAIL gguf_$m: scripts/fetch_models.sh $m: $(tail -1 "$tmp/fetch.err")"; continue; fi
  if "$tmp/llamacpp_pieces" "$lc/bins" "$path" > "$tmp/ref" 2> "$tmp/err"; then
    compare gguf_$m "$path" "$tmp/ref"
  else
    echo "FAIL gguf_$m: llama.cpp failed: $(tail -1 "$tmp/err")"
  fi
done
