"""request_fields_check.py - allowed_token_ids and bad_words on a running
`vllmc serve` (stories260K, KV cache in float32), against Hugging Face
transformers, for tests/test_server_request_fields.sh.

    .venv/bin/python tests/ref/request_fields_check.py URL MODEL_DIR

The reference decodes greedily itself: transformers' forward over the whole
sequence at every step, vLLM's rules applied to the float64 logits:
  - allowed_token_ids: argmax over the allowed ids only; the logprobs
    reported stay the raw ones (vLLM takes them before the mask);
  - bad_words: the word ids made as vLLM's SamplingParams.update_from_tokenizer
    makes them (with transformers' tokenizer: each word left-stripped, alone,
    and after a space when that gives another first token and as many
    tokens); at each step the last id of each sequence whose other ids end
    the output so far is excluded.
Ties within TIE of the winner are accepted either way. Prints "ok NAME" /
"FAIL NAME: why".
"""
import json
import sys
import urllib.request

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

TIE, TOL = 1e-4, 2e-4
URL, MODEL = sys.argv[1:3]
torch.set_num_threads(1)
model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32).eval()
tok = AutoTokenizer.from_pretrained(MODEL)


def post(path, body):
    req = urllib.request.Request(URL + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def logits(ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0, -1].double().numpy()


def bad_word_ids(words):
    out = []
    for w in words:
        for prefix in ("", " "):
            ids = tok.encode(prefix + w.lstrip(), add_special_tokens=False)
            if not prefix or (ids[0] != out[-1][0] and len(ids) == len(out[-1])):
                out.append(ids)
    return out


def replay(prompt_ids, out_ids, allowed=None, bad=None):
    """Checks each greedy step of out_ids -> error text or None."""
    seq = list(prompt_ids)
    for i, t in enumerate(out_ids):
        x = logits(seq)
        mask = np.zeros_like(x, dtype=bool)
        if allowed is not None:
            mask[:] = True
            mask[allowed] = False
        for b in bad or []:
            if len(b) - 1 <= i and (len(b) == 1 or out_ids[i - len(b) + 1:i] == b[:-1]):
                mask[b[-1]] = True
        y = np.where(mask, -np.inf, x)
        if mask[t] or y[t] < y.max() - TIE:
            return f"step {i}: token {t} ({y[t]}), reference argmax {int(y.argmax())} ({y.max()})" + (
                " (a masked token)" if mask[t] else "")
        seq.append(t)
    return None


def result(name, why):
    print(f"FAIL {name}: {why}" if why else f"ok {name}", flush=True)


def guard(name, fn):
    try:
        result(name, fn())
    except Exception as e:
        result(name, f"{type(e).__name__}: {e}")


STORY = "Once upon a time, there was a little girl named"


def t_allowed():
    allowed = [tok.convert_tokens_to_ids(t) for t in ["▁the", "▁a", "▁dog", "▁cat", "▁ran", "▁big", "."]]
    s, r = post("/v1/completions", {"prompt": STORY, "max_tokens": 12, "temperature": 0, "allowed_token_ids": allowed,
                                    "logprobs": 1, "return_token_ids": True})
    if s != 200:
        return f"status {s}: {r}"
    c = r["choices"][0]
    why = replay(c["prompt_token_ids"], c["token_ids"], allowed=allowed)
    if why:
        return why
    seq = list(c["prompt_token_ids"])
    for i, t in enumerate(c["token_ids"]):  # raw logprobs: before the mask
        x = logits(seq)
        lp = x - x.max() - np.log(np.exp(x - x.max()).sum())
        if abs(c["logprobs"]["token_logprobs"][i] - lp[t]) > TOL:
            return f"step {i}: logprob {c['logprobs']['token_logprobs'][i]}, raw reference {lp[t]}"
        seq.append(t)
guard("allowed_token_ids_reference", t_allowed)


def t_allowed_chat():
    allowed = [tok.convert_tokens_to_ids(t) for t in ["▁Lily", "▁Tom", "▁and", "."]]
    s, r = post("/v1/chat/completions", {"messages": [{"role": "user", "content": STORY}], "max_tokens": 8,
                                         "temperature": 0, "allowed_token_ids": allowed, "return_token_ids": True})
    if s != 200:
        return f"status {s}: {r}"
    return replay(r["prompt_token_ids"], r["choices"][0]["token_ids"], allowed=allowed)
guard("allowed_token_ids_chat_reference", t_allowed_chat)


def t_bad_words():
    for words in (["Lily"], ["there", " little"], ["named Lily", "was a"], ["girl named"]):
        s, r = post("/v1/completions", {"prompt": STORY, "max_tokens": 24, "temperature": 0, "bad_words": words,
                                        "return_token_ids": True})
        if s != 200:
            return f"{words}: status {s}: {r}"
        c = r["choices"][0]
        why = replay(c["prompt_token_ids"], c["token_ids"], bad=bad_word_ids(words))
        if why:
            return f"bad_words {words}: {why}"
    s, plain = post("/v1/completions", {"prompt": STORY, "max_tokens": 24, "temperature": 0})
    s, r = post("/v1/completions", {"prompt": STORY, "max_tokens": 24, "temperature": 0, "bad_words": ["Lily"]})
    if "Lily" not in plain["choices"][0]["text"] or "Lily" in r["choices"][0]["text"]:
        return f"'Lily' not removed: {plain['choices'][0]['text']!r} -> {r['choices'][0]['text']!r}"
guard("bad_words_reference", t_bad_words)


def t_bad_words_chat_stream():
    body = {"messages": [{"role": "user", "content": STORY}], "max_tokens": 16, "temperature": 0,
            "bad_words": ["Lily", "the"], "return_token_ids": True}
    s, r = post("/v1/chat/completions", body)
    if s != 200:
        return f"status {s}: {r}"
    return replay(r["prompt_token_ids"], r["choices"][0]["token_ids"], bad=bad_word_ids(["Lily", "the"]))
guard("bad_words_chat_reference", t_bad_words_chat_stream)


def t_errors():
    cases = [({"allowed_token_ids": []}, "allowed_token_ids is not None and empty!", "allowed_token_ids"),
             ({"allowed_token_ids": [5, 100000]}, "allowed_token_ids contains out-of-vocab token id!", "allowed_token_ids"),
             ({"allowed_token_ids": "5"}, None, "allowed_token_ids"),
             ({"bad_words": [5]}, None, "bad_words"),
             ({"bad_words": [""]}, None, "bad_words")]
    for extra, msg, param in cases:
        s, r = post("/v1/completions", dict(prompt="a", max_tokens=2, **extra))
        e = r.get("error", {})
        if s != 400 or (msg and e.get("message") != msg) or (e.get("param") or param) != param:
            return f"{extra}: {s} {r}"
guard("request_fields_errors", t_errors)
