#!/usr/bin/python3
"""A mixed client load on a vllmc server, reporting what the clients saw
(for tests/test_metrics_server.sh). Plain HTTP, standard library only.

    metrics_load.py URL MODEL complete   concurrent completions: streaming and
        not, n = 1 and 3, stop strings, shared prompt prefixes; prints JSON
        {"calls", "requests", "choices", "sum_n", "completion_tokens",
         "reasons": {finish_reason: count}}
    metrics_load.py URL MODEL abandon    streams dropped after their first
        chunk; prints {"abandoned": count}
"""
import http.client
import json
import random
import sys
import threading
import urllib.parse

PREFIX = ("Once upon a time, there was a little girl named Lily. She loved to play outside "
          "in the park with her friends. One day, ")
TAILS = ["she saw a big red ball.", "her mom gave her a cake.", "it started to rain.",
         "a small dog ran to her.", "they went to the beach.", "Tom found a shiny stone."]


def connect(url):
    u = urllib.parse.urlparse(url)
    return http.client.HTTPConnection(u.hostname, u.port, timeout=120)


def post(url, body):
    c = connect(url)
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    return c, c.getresponse()


def run_one(url, body, out, lock):
    c, r = post(url, body)
    if r.status != 200:
        raise RuntimeError("HTTP %d: %s" % (r.status, r.read()[:300]))
    reasons, usage = {}, None
    if body.get("stream"):
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            for ch in chunk.get("choices", []):
                if ch.get("finish_reason"):
                    reasons[ch["index"]] = ch["finish_reason"]
            if chunk.get("usage"):
                usage = chunk["usage"]
    else:
        d = json.loads(r.read())
        reasons = {ch["index"]: ch["finish_reason"] for ch in d["choices"]}
        usage = d["usage"]
    c.close()
    if usage is None or len(reasons) != body.get("n", 1):
        raise RuntimeError("incomplete answer to %s: %s %s" % (body, reasons, usage))
    with lock:
        out["calls"] += 1
        out["requests"] += 1
        out["choices"] += len(reasons)
        out["sum_n"] += body.get("n", 1)
        out["completion_tokens"] += usage["completion_tokens"]
        for why in reasons.values():
            out["reasons"][why] = out["reasons"].get(why, 0) + 1


def complete(url, model):
    rnd = random.Random(5)
    bodies = []
    for i in range(16):
        b = {"model": model, "prompt": (PREFIX if i % 2 == 0 else "") + TAILS[i % len(TAILS)],
             "max_tokens": rnd.choice([4, 16, 32, 48]), "temperature": 0.0}
        if i % 4 == 1:
            b["ignore_eos"] = True
        if i % 5 == 2:  # long enough to reach a sentence end
            b.update(stop=[" the", "."], max_tokens=48)
        if i % 3 == 0:
            b["stream"] = True
            b["stream_options"] = {"include_usage": True}
        if i % 6 == 5:
            b.update(n=3, temperature=0.8, seed=i)
        bodies.append(b)
    out = {"calls": 0, "requests": 0, "choices": 0, "sum_n": 0, "completion_tokens": 0, "reasons": {}}
    lock, errors = threading.Lock(), []

    def worker(b):
        try:
            run_one(url, b, out, lock)
        except Exception as e:  # reported below
            errors.append(repr(e))
    threads = [threading.Thread(target=worker, args=(b,)) for b in bodies]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        sys.exit("errors: " + "; ".join(errors[:3]))
    return out


def abandon(url, model):
    count = 0
    for i in range(4):
        body = {"model": model, "prompt": TAILS[i], "max_tokens": 200, "ignore_eos": True,
                "temperature": 0.0, "stream": True}
        c, r = post(url, body)
        if r.status != 200:
            sys.exit("HTTP %d" % r.status)
        r.readline()  # the first chunk has started: the request is running
        c.sock.close()
        c.close()
        count += 1
    return {"abandoned": count}


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[3] not in ("complete", "abandon"):
        sys.exit(__doc__)
    url, model, mode = sys.argv[1:]
    print(json.dumps(complete(url, model) if mode == "complete" else abandon(url, model)))
