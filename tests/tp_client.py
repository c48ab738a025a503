#!/usr/bin/python3
"""tp_client.py - greedy completions from a running `vllmc serve`, for
tests/test_tp.sh and bench/tp_allreduce.sh (standard library only).

    tp_client.py URL MODEL OUT.json [--prompts N] [--max-tokens N] [--repeat R]
        N prompts (default 8) sent at once (one batch on the server), each
        greedy with ignore_eos and logprobs 5; OUT.json gets, per prompt,
        the token ids and each position's top-5 {token id: logprob}.
        --repeat R: each prompt is its text R times (longer prefills).
    tp_client.py compare A.json B.json
        prints "same N M" (prompts, tokens each) when every token id agrees,
        else "differ PROMPT POSITION"; then "maxdiff X": the largest
        |logprob A - logprob B| over the top-5 ids both sides list (the
        logits themselves are not served; a logprob is the logit minus the
        row's logsumexp, so this bounds the logit change up to that shift).
"""
import json
import sys
import threading
import urllib.request

PROMPTS = [
    "Once upon a time", "The little dog", "Lily and Tom went to the park", "One day, a big bird",
    "The sun was hot and", "She wanted to play with", "In the garden there was", "Mom said",
    "A cat sat on", "They found a box",
]


def complete(url, model, prompt, max_tokens, out, i):
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                       "ignore_eos": True, "logprobs": 5, "return_tokens_as_token_ids": True}).encode()
    rq = urllib.request.Request(url + "/v1/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(rq, timeout=120) as r:
        lp = json.load(r)["choices"][0]["logprobs"]
    ids = [int(t.split(":")[1]) for t in lp["tokens"]]
    tops = [{k.split(":")[1]: v for k, v in top.items()} for top in lp["top_logprobs"]]
    out[i] = {"prompt": prompt, "ids": ids, "top": tops}


def run(url, model, path, n, max_tokens, repeat=1):
    out = [None] * n
    ts = [threading.Thread(target=complete, args=(url, model, " ".join([PROMPTS[i % len(PROMPTS)]] * repeat),
                                                  max_tokens, out, i))
          for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if any(o is None for o in out):
        sys.exit("tp_client: a request failed")
    with open(path, "w") as f:
        json.dump(out, f)


def compare(a_path, b_path):
    a, b = json.load(open(a_path)), json.load(open(b_path))
    maxdiff = 0.0
    verdict = "same %d %d" % (len(a), min(len(x["ids"]) for x in a))
    if len(a) != len(b):
        verdict = "differ count"
    for p, (x, y) in enumerate(zip(a, b)):
        for j, (u, v) in enumerate(zip(x["ids"], y["ids"])):
            if u != v and verdict.startswith("same"):
                verdict = "differ %d %d" % (p, j)
        if len(x["ids"]) != len(y["ids"]) and verdict.startswith("same"):
            verdict = "differ %d length" % p
        for s, t in zip(x["top"], y["top"]):
            for k in s.keys() & t.keys():
                maxdiff = max(maxdiff, abs(s[k] - t[k]))
    print(verdict)
    print("maxdiff %.3g" % maxdiff)


if __name__ == "__main__":
    if sys.argv[1] == "compare":
        compare(sys.argv[2], sys.argv[3])
    else:
        args = sys.argv[1:]
        n, mt = 8, 32
        if "--prompts" in args:
            n = int(args[args.index("--prompts") + 1])
        if "--max-tokens" in args:
            mt = int(args[args.index("--max-tokens") + 1])
        rep = int(args[args.index("--repeat") + 1]) if "--repeat" in args else 1
        run(args[0], args[1], args[2], n, mt, rep)
