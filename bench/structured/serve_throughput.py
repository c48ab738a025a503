#!/usr/bin/env python3
"""serve_throughput.py - served throughput with structured outputs.

Starts `vllmc serve MODEL`, sends CONCURRENCY chat requests at once, each
constrained by a different JSON schema (response_format json_schema), then
the same requests unconstrained, and prints generation throughput (completion
tokens / wall time) of both and their ratio; every constrained output is
validated with jsonschema (the project's .venv).

    .venv/bin/python bench/structured/serve_throughput.py --model ~/.cache/vllmc/models/SmolLM2-135M-Instruct.Q4_1.gguf

The grammars are compiled (and cached) by a first pass of one-token
requests, timed apart. The unconstrained requests are the same requests
without the constraint, with ignore_eos and each one's max_tokens = the
number of tokens its constrained twin produced: the same tokens per request,
so both runs have the same steps and the same batch at every step, and the
ratio is the cost of the constraint alone. (`ratio_mean_len` is the earlier
measure: every unconstrained request as long as the constrained ones' mean.
A constrained request ends where its JSON does, 14 to 93 tokens here, so
the constrained run takes as many steps as its longest request while the
mean-length one takes the mean: that ratio mostly measures the spread of
the lengths, not the masks.)

--runs N repeats the whole measurement N times, each on a fresh server (so
every run starts with empty mask caches), and prints each run's line, then
the medians.
"""
import argparse
import concurrent.futures
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

try:
    import jsonschema
except ImportError:  # pragma: no cover
    jsonschema = None

TYPES = [("name", {"type": "string", "maxLength": 24}), ("age", {"type": "integer", "minimum": 0, "maximum": 120}),
         ("city", {"type": "string", "maxLength": 20}), ("active", {"type": "boolean"}),
         ("score", {"type": "number", "minimum": 0, "maximum": 10}), ("kind", {"enum": ["a", "b", "c"]}),
         ("tags", {"type": "array", "items": {"type": "string", "maxLength": 10}, "maxItems": 3}),
         ("year", {"type": "integer", "minimum": 1900, "maximum": 2100})]


def schemas(n):
    """n different object schemas: each a different subset of TYPES' properties."""
    out = []
    for i in range(n):
        props = {k: v for j, (k, v) in enumerate(TYPES) if (i + 1) >> (j % 4) & 1 or j == i % len(TYPES)}
        out.append({"type": "object", "properties": props, "required": sorted(props), "additionalProperties": False})
    return out


def post(url, body):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)


def run(url, bodies):
    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(len(bodies)) as ex:
        res = list(ex.map(lambda b: post(url, b), bodies))
    return res, time.monotonic() - t0


def cpu_seconds(pid):
    """The server's user + system CPU time so far (/proc; 0 elsewhere)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0


def one_run(url, con, msgs, ss, t_compile, pid):
    """One constrained run, then the same requests unconstrained (length
    matched per request), then the earlier mean-length run. Also the
    server's CPU seconds per run: on a machine shared with other work the
    wall clock moves 2x between identical runs, CPU time much less (but it
    cannot show work moved off the critical path)."""
    c0 = cpu_seconds(pid)
    res_c, t_c = run(url, con)
    c1 = cpu_seconds(pid)
    for r in res_c:
        if "error" in r:
            sys.exit("constrained request failed: " + r["error"]["message"])
    lens = [r["usage"]["completion_tokens"] for r in res_c]
    toks_c = sum(lens)
    valid = stopped = 0
    for r, s in zip(res_c, ss):
        c = r["choices"][0]
        stopped += c["finish_reason"] == "stop"
        try:
            if jsonschema:
                jsonschema.validate(json.loads(c["message"]["content"]), s)
            else:
                json.loads(c["message"]["content"])
            valid += 1
        except Exception:
            pass
    plain = [{"messages": m, "max_tokens": n, "temperature": 0.7, "seed": i, "ignore_eos": True}
             for i, (m, n) in enumerate(zip(msgs, lens))]
    c2 = cpu_seconds(pid)
    res_p, t_p = run(url, plain)
    c3 = cpu_seconds(pid)
    toks_p = sum(r["usage"]["completion_tokens"] for r in res_p)
    mean = max(1, round(toks_c / len(res_c)))
    res_m, t_m = run(url, [dict(b, max_tokens=mean) for b in plain])
    toks_m = sum(r["usage"]["completion_tokens"] for r in res_m)
    tc, tp, tm = toks_c / t_c, toks_p / t_p, toks_m / t_m
    return {"concurrency": len(con), "compile_and_first_token_s": round(t_compile, 3),
            "constrained_tokens": toks_c, "constrained_s": round(t_c, 3), "constrained_tok_s": round(tc, 1),
            "lengths": sorted(lens), "unconstrained_tokens": toks_p, "unconstrained_s": round(t_p, 3),
            "unconstrained_tok_s": round(tp, 1), "ratio": round(tc / tp, 3),
            "mean_len_tok_s": round(tm, 1), "ratio_mean_len": round(tc / tm, 3),
            "constrained_cpu_s": round(c1 - c0, 3), "unconstrained_cpu_s": round(c3 - c2, 3),
            "ratio_cpu": round((c3 - c2) / (c1 - c0) * toks_c / toks_p, 3) if c1 > c0 and c3 > c2 else None,
            "outputs_stopped": stopped, "outputs_valid": valid,
            "validator": "jsonschema" if jsonschema else "json"}


def serve_once(a):
    """Starts a server, measures one run (one_run), stops it: every run
    starts with empty mask caches, as the first run does."""
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    cmd = [a.vllmc, "serve", a.model, "--host", "127.0.0.1", "--port", "0"]
    if a.threads:
        cmd += ["--threads", str(a.threads)]
    srv = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        base = None
        for _ in range(1200):
            text = open(log.name).read()
            m = re.search(r"Starting vLLM API server 0 on (http://[0-9.]+:[0-9]+)", text)
            if m and "Application startup complete." in text:
                base = m.group(1)
                break
            if srv.poll() is not None:
                sys.exit("vllmc serve exited:\n" + text[-2000:])
            time.sleep(0.05)
        if not base:
            sys.exit("vllmc serve did not start")
        url = base + "/v1/chat/completions"
        ss = schemas(a.concurrency)
        msgs = [[{"role": "user", "content": "Describe item %d as JSON." % i}] for i in range(a.concurrency)]
        con = [{"messages": m, "max_tokens": a.max_tokens, "temperature": 0.7, "seed": i,
                "response_format": {"type": "json_schema", "json_schema": {"name": "item%d" % i, "schema": s}}}
               for i, (m, s) in enumerate(zip(msgs, ss))]
        if a.disable_any_whitespace:
            for b in con:
                b["structured_outputs"] = {"disable_any_whitespace": True}
        post(url, {"messages": msgs[0], "max_tokens": 4})  # warm-up (and the prompt path)
        # compiles first (one token each): the timed run below finds every grammar cached
        _, t_compile = run(url, [dict(b, max_tokens=1) for b in con])
        return one_run(url, con, msgs, ss, t_compile, srv.pid)
    finally:
        srv.terminate()
        try:
            srv.wait(10)
        except subprocess.TimeoutExpired:
            srv.kill()
        os.unlink(log.name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--vllmc", default="build/vllmc")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--disable-any-whitespace", action="store_true")
    ap.add_argument("--runs", type=int, default=1)
    a = ap.parse_args()
    lines = []
    for _ in range(max(1, a.runs)):
        lines.append(serve_once(a))
        print(json.dumps(lines[-1]), flush=True)
    if len(lines) > 1:
        med = {k: statistics.median(x[k] for x in lines)
               for k in ("constrained_tok_s", "unconstrained_tok_s", "ratio", "mean_len_tok_s", "ratio_mean_len",
                         "constrained_cpu_s", "unconstrained_cpu_s", "ratio_cpu")}
        print(json.dumps({"runs": len(lines), "median": med,
                          "outputs_valid_min": min(x["outputs_valid"] for x in lines)}))


if __name__ == "__main__":
    main()
