#!/usr/bin/env bash
# test_cli_server_parity.sh - `vllmc generate --json` and the server's
# /v1/completions run the same output processor: the same requests through
# both must give the same text, token ids, finish_reason and stop_reason (and
# logprobs), on the bundled stories260K. Cases: stop strings (with and
# without include_stop_str_in_output, with min_tokens, with logprobs),
# stop_token_ids (".", which the greedy story really produces), the
# tokenizer's EOS (forced by logit_bias after min_tokens) and the model's own
# end of story (<s>, generation_config.json's second eos_token_id), n > 1
# with a seed, prompt_logprobs (each choice's equal to the CLI's request-level
# list), logprobs (the same ids and values; the server's token strings
# are the tokens' own bytes, checked against SentencePiece's pieces, where
# the CLI reports vLLM's decode([id])).
#
# Both paths could be wrong the same way, so the rules are also checked
# against vLLM's spec directly, from the plain greedy run: a stop string cuts
# the text where Python's str.find puts it; a stop token id or EOS stays in
# token_ids but its text is not in the output (it is with
# include_stop_str_in_output); stop_reason is the string, the stop token id,
# or null for the tokenizer's EOS.
# Both run with --kv-cache-dtype float32: the cases were picked from the F32
# model's greedy text (the story that ends with <s>, the "." it produces);
# the parity itself holds for every type.
# Prints "ok NAME" / "FAIL NAME: why".
# checks: 30
# tags: tsan
cd "$(dirname "$0")/.." || exit 1
. tests/server_helpers.sh
PY=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; server_stop_all' EXIT

# name <TAB> request (one JSON object: vLLM completion fields; both paths take them)
cat >"$tmp/cases.tsv" <<'EOF'
plain	{"prompt": "Once upon a time", "max_tokens": 80, "temperature": 0}
stop_strings	{"prompt": "Once upon a time", "max_tokens": 80, "temperature": 0, "stop": ["zzz", "Lily"]}
stop_string_included	{"prompt": "Once upon a time", "max_tokens": 80, "temperature": 0, "stop": " park", "include_stop_str_in_output": true}
stop_string_min_tokens	{"prompt": "Once upon a time", "max_tokens": 80, "temperature": 0, "stop": ["Lily"], "min_tokens": 12}
stop_string_logprobs	{"prompt": "Once upon a time", "max_tokens": 80, "temperature": 0, "stop": ["Lily"], "logprobs": 2}
stop_token_id	{"prompt": "Once upon a time", "max_tokens": 80, "temperature": 0, "stop_token_ids": [426]}
stop_token_id_included	{"prompt": "Once upon a time", "max_tokens": 80, "temperature": 0, "stop_token_ids": [426], "include_stop_str_in_output": true}
stop_token_id_special_kept	{"prompt": "Once upon a time", "max_tokens": 80, "temperature": 0, "stop_token_ids": [426], "skip_special_tokens": false}
eos	{"prompt": "Once upon a time", "max_tokens": 50, "temperature": 0, "min_tokens": 4, "logit_bias": {"2": 100}, "skip_special_tokens": false}
eos_included	{"prompt": "Once upon a time", "max_tokens": 50, "temperature": 0, "min_tokens": 4, "logit_bias": {"2": 100}, "skip_special_tokens": false, "include_stop_str_in_output": true}
end_of_story	{"prompt": "Lily and Tom", "max_tokens": 300, "temperature": 0, "skip_special_tokens": false}
end_of_story_plain	{"prompt": "Lily and Tom", "max_tokens": 300, "temperature": 0}
n3_seeded	{"prompt": "Once upon a time", "max_tokens": 30, "temperature": 0.8, "n": 3, "seed": 7, "stop": ["."]}
logprobs	{"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0, "logprobs": 3}
logprobs_sampled	{"prompt": "The dog", "max_tokens": 12, "temperature": 1.0, "seed": 3, "logprobs": 1}
prompt_logprobs	{"prompt": "Once upon a time there was a little dog", "max_tokens": 4, "prompt_logprobs": 3, "n": 2, "seed": 1, "temperature": 0.7}
EOF
cut -f2 "$tmp/cases.tsv" >"$tmp/cases.jsonl"

# the CLI: every case in one prompts file, outputs in input order
if VLLM_LOGGING_LEVEL=WARNING "$VLLMC" generate --kv-cache-dtype float32 --prompts-file "$tmp/cases.jsonl" --json \
     >"$tmp/cli.jsonl" 2>"$tmp/cli.err"; then
  echo "ok parity_cli_runs"
else
  echo "FAIL parity_cli_runs: $(tail -3 "$tmp/cli.err")"
fi

# the server: each case as a POST /v1/completions with return_token_ids
: >"$tmp/server.jsonl"
if server_start S --kv-cache-dtype float32; then
  while IFS=$'\t' read -r name body; do
    req POST "$S_URL/v1/completions" "$(jq -c '. + {return_token_ids: true}' <<<"$body")"
    if [ "$STATUS" = 200 ]; then printf '%s\n' "$BODY" | jq -c . >>"$tmp/server.jsonl"
    else echo "{\"error\": $(jq -Rn --arg s "$STATUS $BODY" '$s')}" >>"$tmp/server.jsonl"; fi
  done <"$tmp/cases.tsv"
  echo "ok parity_server_runs"
fi

$PY - "$tmp/cases.tsv" "$tmp/cli.jsonl" "$tmp/server.jsonl" <<'EOF'
import json, sys

cases = [l.rstrip("\n").split("\t", 1) for l in open(sys.argv[1]) if l.strip()]
def load(path):
    try:
        return [json.loads(l) for l in open(path) if l.strip()]
    except Exception as e:
        return []
cli, srv = load(sys.argv[2]), load(sys.argv[3])
ok = lambda n: print("ok " + n)
fail = lambda n, why: print("FAIL %s: %s" % (n, str(why)[:400]))

def cli_outs(i):
    return cli[i]["outputs"] if i < len(cli) else None
def srv_outs(i):
    if i >= len(srv) or "choices" not in srv[i]:
        return None
    return srv[i]["choices"]

import sentencepiece
sp = sentencepiece.SentencePieceProcessor(model_file="models/stories260K/tokenizer.model")
def piece(i):
    """A token's text in the middle of a text (the server's logprob token,
    not vLLM's decode([id]) the CLI reports): SentencePiece's piece, U+2581
    as a space, a byte piece as its byte, control pieces verbatim."""
    p = sp.id_to_piece(i)
    if sp.is_byte(i):
        return bytes([int(p[3:5], 16)]).decode("utf-8", "replace")
    return p if sp.is_control(i) or sp.is_unknown(i) else p.replace("\u2581", " ")

def same_logprobs(c, s):
    """CLI: [{id: {logprob, rank, decoded_token}}] (sampled first); server:
    {tokens, token_logprobs, top_logprobs: [{text: logprob}]}."""
    if c is None or s is None:
        return c is None and s is None
    if len(c) != len(s["tokens"]):
        return False
    for pos, d in enumerate(c):
        entries = list(d.values())
        ids = [int(k) for k in d]
        if s["tokens"][pos] != piece(ids[0]):
            return False
        if abs(max(entries[0]["logprob"], -9999.0) - s["token_logprobs"][pos]) > 1e-6:
            return False
        want = {}
        for i, e in zip(ids, entries):
            want[piece(i)] = max(e["logprob"], -9999.0)
        top = s["top_logprobs"][pos]
        if list(top.keys()) != list(want.keys()) or any(abs(top[k] - want[k]) > 1e-6 for k in want):
            return False
    return True

plain = {}
for i, (name, body) in enumerate(cases):
    q = json.loads(body)
    c, s = cli_outs(i), srv_outs(i)
    if c is None or s is None:
        fail("parity_" + name, "no output (cli %s, server %s)" % (c is not None, srv[i] if i < len(srv) else None))
        continue
    why = None
    if len(c) != q.get("n", 1) or len(s) != len(c):
        why = "%d CLI outputs, %d server choices" % (len(c), len(s))
    for k in range(len(c) if why is None else 0):
        a, b = c[k], s[k]
        for field, x, y in (("text", a["text"], b["text"]), ("token_ids", a["token_ids"], b["token_ids"]),
                            ("finish_reason", a["finish_reason"], b["finish_reason"]),
                            ("stop_reason", a["stop_reason"], b["stop_reason"])):
            if x != y:
                why = "output %d: %s: CLI %r, server %r" % (k, field, x, y)
                break
        if why is None and "logprobs" in q and not same_logprobs(a["logprobs"], b["logprobs"]):
            why = "output %d: logprobs differ: CLI %r, server %r" % (k, a["logprobs"], b["logprobs"])
        if why is None and "prompt_logprobs" in q and (cli[i]["prompt_logprobs"] != b["prompt_logprobs"] or
                                                      len(b["prompt_logprobs"]) != len(cli[i]["prompt_token_ids"])):
            why = "output %d: prompt_logprobs differ: CLI %r, server %r" % (k, cli[i]["prompt_logprobs"], b["prompt_logprobs"])
        if why:
            break
    if why:
        fail("parity_" + name, why)
    else:
        ok("parity_" + name)
    plain[name] = c

# ---- the rules themselves, from the plain greedy run (CLI == server by now) ----
def spec(name, cond, why):
    ok(name) if cond else fail(name, why)

full = plain.get("plain", [None])[0]
if full is None:
    fail("spec_reference", "no plain greedy output")
else:
    T, ids = full["text"], full["token_ids"]
    o = plain.get("stop_strings", [None])[0]
    cut = T.find("Lily")
    spec("spec_stop_string", o is not None and cut > 0 and o["text"] == T[:cut] and o["finish_reason"] == "stop"
         and o["stop_reason"] == "Lily" and o["token_ids"] == ids[:len(o["token_ids"])], (o, T[:cut]))
    # min_tokens 12: the first "Lily" ends within the first 12 tokens, so only the second may stop
    o = plain.get("stop_string_min_tokens", [None])[0]
    first = T.find("Lily")
    spec("spec_stop_string_min_tokens", o is not None and first > 0 and T.find("Lily", first + 1) > first
         and o["text"] == T[:T.find("Lily", first + 1)] and o["stop_reason"] == "Lily", o)
    o = plain.get("stop_string_included", [None])[0]
    cut = T.find(" park")
    spec("spec_stop_string_included", o is not None and cut > 0 and o["text"] == T[:cut + 5]
         and o["stop_reason"] == " park", o)
    o = plain.get("stop_string_logprobs", [None])[0]
    spec("spec_stop_string_logprobs_per_token", o is not None and o["logprobs"] is not None
         and len(o["logprobs"]) == len(o["token_ids"]), o)
    # stop_token_ids [426] ("."): the output ends at the first "." of the story,
    # the id is the last token id, its text is not in the output
    k = ids.index(426) if 426 in ids else -1
    dot = T.find(".")
    o = plain.get("stop_token_id", [None])[0]
    spec("spec_stop_token_id_text_dropped", o is not None and k >= 0 and o["token_ids"] == ids[:k + 1]
         and o["text"] == T[:dot] and not o["text"].endswith(".") and o["finish_reason"] == "stop"
         and o["stop_reason"] == 426, (o, T[:dot]))
    o = plain.get("stop_token_id_special_kept", [None])[0]
    spec("spec_stop_token_id_text_dropped_special_kept", o is not None and o["text"] == T[:dot], o)
    o = plain.get("stop_token_id_included", [None])[0]
    spec("spec_stop_token_id_included", o is not None and o["token_ids"] == ids[:k + 1]
         and o["text"] == T[:dot + 1] and o["stop_reason"] == 426, o)
    # the tokenizer's EOS (</s>, 2) after min_tokens 4: the 5th token; its text
    # is not in the output even with special tokens kept; stop_reason null
    o = plain.get("eos", [None])[0]
    spec("spec_eos", o is not None and len(o["token_ids"]) == 5 and o["token_ids"][:4] == ids[:4]
         and o["token_ids"][4] == 2 and "</s>" not in o["text"] and o["finish_reason"] == "stop"
         and o["stop_reason"] is None, o)
    e = plain.get("eos_included", [None])[0]
    spec("spec_eos_included", o is not None and e is not None and e["text"] == o["text"] + "</s>"
         and e["stop_reason"] is None, e)
end, endp = plain.get("end_of_story", [None])[0], plain.get("end_of_story_plain", [None])[0]
# the story ends with <s> (1), a stop id for vLLM (generation_config.json's eos_token_id [2, 1]
# minus the tokenizer's EOS): in token_ids, not in the text, stop_reason 1
spec("spec_end_of_story", end is not None and endp is not None and end["token_ids"][-1:] == [1]
     and end["finish_reason"] == "stop" and end["stop_reason"] == 1 and not end["text"].endswith("<s>")
     and end["text"] == endp["text"] and end["token_ids"] == endp["token_ids"], end)
o = plain.get("n3_seeded")
spec("spec_n3_seeded", o is not None and len(o) == 3 and len({tuple(x["token_ids"]) for x in o}) > 1
     and all(x["finish_reason"] == "length" or (x["stop_reason"] == "." and not x["text"].endswith("."))
             for x in o), o)
o = plain.get("logprobs", [None])[0]
spec("spec_logprobs_sampled_first", o is not None and full is not None and o["token_ids"] == full["token_ids"][:12]
     and all(list(d.keys())[0] == str(t) and len(d) in (3, 4) for d, t in zip(o["logprobs"], o["token_ids"])), o)
EOF
