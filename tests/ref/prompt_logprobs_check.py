"""prompt_logprobs_check.py - vLLM's prompt_logprobs and echo + logprobs on
running `vllmc serve` instances (stories260K), against log-softmax over
Hugging Face transformers' logits of the prompt (float32 forward, compared
in float64), for tests/test_server_prompt_logprobs.sh.

    .venv/bin/python tests/ref/prompt_logprobs_check.py URL_CHUNKED URL_WHOLE MODEL_DIR

URL_CHUNKED serves with small steps (prefill in chunks of at most 64 tokens,
at most 7 prompt-logprob rows a step: chunks cut at odd places);
URL_WHOLE with the defaults. Prints "ok NAME" / "FAIL NAME: why".

Per position i >= 1 of a prompt, vLLM's dict {id: {logprob, rank,
decoded_token}} holds the prompt token first, then the top N without it:
its logprob within TOL of log_softmax(HF logits[i - 1])[token], its rank
between the reference's bounds (ties within TOL), the others a top N of the
reference (entries certainly in it present, none certainly out of it),
decoded_token transformers' decode([id]) (vLLM's). Position 0 is null.
"""
import json
import sys
import threading
import urllib.request

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

TOL = 2e-4
URL_A, URL_B, MODEL = sys.argv[1:4]
torch.set_num_threads(1)
model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32).eval()
tok = AutoTokenizer.from_pretrained(MODEL)

STORY = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the sun. "
         "One day, she saw a big red ball in the park. She ran to get it, but a dog took it first. "
         "Lily was sad, so her mom gave her a hug and they went home to eat cake together. ")
PROMPTS = ["Once upon a time", STORY, STORY * 2, "The cat sat on the mat. The cat sat on the mat. The cat"]


def post(url, path, body):
    req = urllib.request.Request(url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def ref_logprobs(ids):
    with torch.no_grad():
        L = model(torch.tensor([ids])).logits[0].double().numpy()
    m = L.max(axis=1, keepdims=True)
    return L - m - np.log(np.exp(L - m).sum(axis=1, keepdims=True))


def check_prompt_logprobs(pl, ids, N):
    """vLLM's prompt_logprobs list against the reference -> error text or None."""
    if pl is None or len(pl) != len(ids):
        return f"{None if pl is None else len(pl)} entries for {len(ids)} prompt tokens"
    if pl[0] is not None:
        return f"position 0 is {pl[0]}, want null"
    R = ref_logprobs(ids)
    for i in range(1, len(ids)):
        d, t, x = pl[i], ids[i], R[i - 1]
        keys = [int(k) for k in d]
        if keys[0] != t:
            return f"position {i}: first key {keys[0]}, want the prompt token {t}"
        order = np.lexsort((np.arange(len(x)), -x))
        for k, v in d.items():
            k = int(k)
            if abs(v["logprob"] - x[k]) > TOL:
                return f"position {i}: token {k} logprob {v['logprob']}, reference {x[k]}"
            if v["decoded_token"] != tok.decode([k]):
                return f"position {i}: decoded_token {v['decoded_token']!r}, transformers says {tok.decode([k])!r}"
        lo = int((x > x[t] + TOL).sum()) + 1
        hi = int((x >= x[t] - TOL).sum())
        if not lo <= d[str(t)]["rank"] <= hi:
            return f"position {i}: rank {d[str(t)]['rank']}, reference {lo}..{hi}"
        rest = set(keys[1:])
        if N > 0:
            nth = x[order[N - 1]]
            must = {int(j) for j in order[:N] if x[j] > nth + TOL} - {t}
            may = {int(j) for j in range(len(x)) if x[j] >= nth - TOL}
            if not must <= rest or not rest <= may:
                return f"position {i}: top {sorted(rest)}, reference top {N}: {[int(j) for j in order[:N]]}"
        if len(d) not in (N, N + 1):
            return f"position {i}: {len(d)} entries for prompt_logprobs={N}"
        for k, v in d.items():
            if int(k) != t and v["rank"] != [int(j) for j in order[:N]].index(int(k)) + 1 and abs(x[int(k)] - x[order[v["rank"] - 1]]) > TOL:
                return f"position {i}: token {k} rank {v['rank']}"
    return None


def result(name, why):
    print(f"FAIL {name}: {why}" if why else f"ok {name}", flush=True)


def completion(url, prompt, **kw):
    s, b = post(url, "/v1/completions", dict(prompt=prompt, max_tokens=kw.pop("max_tokens", 4), temperature=0,
                                              return_token_ids=True, **kw))
    if s != 200:
        raise RuntimeError(f"status {s}: {b[:300]}")
    return json.loads(b)


def guard(name, fn):
    try:
        result(name, fn())
    except Exception as e:  # a failed request is a failed check
        result(name, f"{type(e).__name__}: {e}")


# 1. completions, every prompt, on both servers, N = 0 and 5
def t_values():
    for url in (URL_A, URL_B):
        for p in PROMPTS:
            for N in (0, 5):
                c = completion(url, p, prompt_logprobs=N)["choices"][0]
                why = check_prompt_logprobs(c["prompt_logprobs"], c["prompt_token_ids"], N)
                if why:
                    return f"{'chunked' if url == URL_A else 'whole'} server, {len(c['prompt_token_ids'])}-token prompt, N={N}: {why}"
guard("prompt_logprobs_reference", t_values)


# 2. chat: the top-level prompt_logprobs of the rendered prompt
def t_chat():
    s, b = post(URL_A, "/v1/chat/completions", {"messages": [{"role": "user", "content": STORY}], "max_tokens": 3,
                                                  "temperature": 0, "prompt_logprobs": 2, "return_token_ids": True})
    if s != 200:
        return f"status {s}: {b[:300]}"
    r = json.loads(b)
    return check_prompt_logprobs(r["prompt_logprobs"], r["prompt_token_ids"], 2)
guard("chat_prompt_logprobs_reference", t_chat)


# 3. chunked prefill with odd row caps, one step's worth, concurrency: the same numbers bit for bit
def t_invariance():
    want = {p: completion(URL_B, p, prompt_logprobs=3)["choices"][0]["prompt_logprobs"] for p in PROMPTS}
    got, errs = {}, []

    def one(i, p):
        try:
            got[(i, p)] = completion(URL_A, p, prompt_logprobs=3, max_tokens=8)["choices"][0]["prompt_logprobs"]
        except Exception as e:
            errs.append(str(e))
    ts = [threading.Thread(target=one, args=(i, p)) for i in range(3) for p in PROMPTS]
    for t in ts: t.start()
    for t in ts: t.join()
    if errs:
        return errs[0]
    for (i, p), v in got.items():
        if v != want[p]:
            return f"{len(v)}-position prompt: chunked + batched prompt_logprobs differ from the whole prefill alone"
guard("prompt_logprobs_batch_invariant", t_invariance)


# 4. prefix cache: a prompt_logprobs request skips hits (vLLM), other requests still hit what it cached
def t_prefix():
    p = "Lily and Tom " + STORY
    a = completion(URL_B, p, prompt_logprobs=1)["choices"][0]["prompt_logprobs"]
    plain = completion(URL_B, p)
    again = completion(URL_B, p, prompt_logprobs=1)
    cached = lambda r: (r["usage"].get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    if cached(plain) == 0:
        return f"a plain request after it had no prefix-cache hit: {plain['usage']}"
    if cached(again) != 0:
        return f"a prompt_logprobs request read the prefix cache: {again['usage']}"
    if again["choices"][0]["prompt_logprobs"] != a:
        return "prompt_logprobs differ after the prompt was cached"
guard("prompt_logprobs_prefix_cache", t_prefix)


# 5. echo + logprobs: the prompt's tokens first (the first with null), then the output
def t_echo():
    for url in (URL_A, URL_B):
        c = completion(url, STORY, echo=True, logprobs=2, max_tokens=6)["choices"][0]
        ids, lp, pl = c["prompt_token_ids"], c["logprobs"], c["prompt_logprobs"]
        P = len(ids)
        why = check_prompt_logprobs(pl, ids, 2)
        if why:
            return f"prompt_logprobs: {why}"
        if len(lp["tokens"]) != P + 6 or lp["token_logprobs"][0] is not None or lp["top_logprobs"][0] is not None:
            return f"{len(lp['tokens'])} tokens for {P} + 6, first {lp['token_logprobs'][0]} {lp['top_logprobs'][0]}"
        for i in range(1, P):
            if lp["token_logprobs"][i] != max(pl[i][str(ids[i])]["logprob"], -9999.0):
                return f"position {i}: token_logprobs {lp['token_logprobs'][i]}, prompt_logprobs {pl[i][str(ids[i])]}"
            if len(lp["top_logprobs"][i]) not in (2, 3):
                return f"position {i}: top_logprobs {lp['top_logprobs'][i]}"
        if not c["text"].startswith(STORY) or lp["text_offset"][0] != 0 or sorted(lp["text_offset"]) != lp["text_offset"]:
            return f"text {c['text'][:80]!r}, offsets {lp['text_offset'][:8]}"
        out = completion(url, STORY, logprobs=2, max_tokens=6)["choices"][0]["logprobs"]["token_logprobs"]
        if lp["token_logprobs"][P:] != out:
            return f"the output's logprobs {lp['token_logprobs'][P:]} differ from the same request's without echo {out}"
guard("echo_logprobs", t_echo)


def t_echo_only():
    c = completion(URL_A, STORY, echo=True, logprobs=1, max_tokens=0)["choices"][0]
    P = len(c["prompt_token_ids"])
    if c["text"] != STORY or len(c["logprobs"]["tokens"]) != P or c["logprobs"]["token_logprobs"][0] is not None:
        return f"text {c['text'][:60]!r}, {len(c['logprobs']['tokens'])} tokens for {P}"
guard("echo_logprobs_max_tokens_0", t_echo_only)


def t_echo_stream():
    body = dict(prompt=STORY, max_tokens=6, temperature=0, echo=True, logprobs=2, stream=True)
    s, b = post(URL_A, "/v1/completions", body)
    if s != 200:
        return f"status {s}"
    chunks = [json.loads(l[6:]) for l in b.split("\n") if l.startswith("data: {")]
    lps = [c["choices"][0]["logprobs"] for c in chunks if c["choices"] and c["choices"][0]["logprobs"]]
    whole = completion(URL_A, STORY, echo=True, logprobs=2, max_tokens=6)["choices"][0]
    got = [v for l in lps for v in l["token_logprobs"]]
    toks = [v for l in lps for v in l["tokens"]]
    if got != whole["logprobs"]["token_logprobs"] or toks != whole["logprobs"]["tokens"]:
        return f"streamed {len(got)} logprobs, {got[:3]}..., not the non-streamed {whole['logprobs']['token_logprobs'][:3]}..."
    if "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) != whole["text"]:
        return "streamed text differs"
guard("echo_logprobs_stream", t_echo_stream)


def t_errors():
    s, b = post(URL_A, "/v1/completions", {"prompt": "a", "prompt_logprobs": 21})
    e = json.loads(b).get("error", {})
    if s != 400 or e.get("message") != "Requested prompt logprobs of 21, which is greater than max allowed: 20" or e.get("param") != "prompt_logprobs":
        return f"prompt_logprobs 21: {s} {b[:200]}"
    s, b = post(URL_A, "/v1/completions", {"prompt": "a", "prompt_logprobs": 1, "stream": True})
    if s != 400 or "`prompt_logprobs` are not available when `stream=True`." not in b:
        return f"prompt_logprobs with stream: {s} {b[:200]}"
    s, b = post(URL_A, "/v1/completions", {"prompt": "a", "prompt_logprobs": -1})
    if s != 400 or "`prompt_logprobs` must be a positive value." not in b:
        return f"prompt_logprobs -1: {s} {b[:200]}"
guard("prompt_logprobs_errors", t_errors)
