#!/usr/bin/python3
"""disagg_bench.py - disaggregated prefill/decode and the offloading tier, measured.

    /usr/bin/python3 bench/disagg_bench.py [--vllmc build/vllmc] [--model DIR] [--seconds 30] [--ttft-only]

Part 1, p99 inter-token latency (ITL) of short chat-like requests under a
long-prompt load (docs/disagg.md):
  single:  one `vllmc serve --threads 2` takes everything;
  disagg:  a producer (--threads 1) and a consumer (--threads 1) with the
           SharedStorageConnector on /dev/shm, behind `vllmc proxy`.
Both runs see the same load for --seconds: LONG_CLIENTS clients sending
prompts of LONG_TOKENS random ids (max_tokens 4) and SHORT_CLIENTS clients
streaming prompts of SHORT_TOKENS ids with SHORT_OUT output tokens; ITL is
the gap between two streamed tokens of a short request.

Part 2, TTFT of a TTFT_TOKENS-token prompt whose prefix sits in the RAM tier,
in the disk tier (tiny RAM budget, VLLM_KV_OFFLOADING_DISK_PATH), or nowhere
(recompute): one instance with a pool just big enough, the prompt run once,
evicted by another prompt of the same length, then timed. And the TTFT of a
consumer (SharedStorageConnector, --threads 2) given TTFT_TOKENS-token
prompts a producer wrote to a directory on /dev/shm and on the working
disk: the median of TTFT_RUNS prompts, each new to the consumer (its
loads are read layer by layer while the forward runs). --ttft-only skips
part 1.

The default model is a random TinyLlama-like one (tools/make_random_model.py:
hidden 512, 8 layers, 4096 positions, stories260K's vocabulary) so a long
prefill costs seconds, not minutes, on a laptop-class CPU. Stdlib only.
"""
import argparse
import http.client
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LONG_TOKENS, LONG_CLIENTS = 3000, 1
SHORT_TOKENS, SHORT_OUT, SHORT_CLIENTS = 64, 48, 2
TTFT_TOKENS = 4000
TTFT_RUNS = 3


def start(vllmc, args, env=None, log=None):
    f = open(log, "w")
    p = subprocess.Popen([vllmc] + args, stdout=f, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
    pat = re.compile(r"Starting (?:vLLM API server 0|vllmc proxy) on (http://[^ \s]+)")
    for _ in range(1200):
        m = pat.search(open(log).read())
        if m:
            return p, m.group(1)
        if p.poll() is not None:
            sys.exit(f"{args[0]} exited: {open(log).read()[-2000:]}")
        time.sleep(0.05)
    sys.exit(f"{args[0]} did not start")


def stream(url, prompt, max_tokens, stamps=None):
    """POSTs a streamed completion; the monotonic time of each token chunk appended to stamps."""
    host = url.split("//")[1]
    c = http.client.HTTPConnection(host, timeout=600)
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
                       "stream": True})
    t0 = time.monotonic()
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    first = None
    for line in r:
        if line.startswith(b"data: {"):
            now = time.monotonic()
            if first is None:
                first = now - t0
            if stamps is not None:
                stamps.append(now)
    c.close()
    return first


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def load_run(url, seconds):
    stop = time.monotonic() + seconds
    itls, lock = [], threading.Lock()

    def long_client(k):
        r = random.Random(100 + k)
        while time.monotonic() < stop:
            stream(url, [r.randrange(3, 512) for _ in range(LONG_TOKENS)], 4)

    def short_client(k):
        r = random.Random(200 + k)
        while time.monotonic() < stop:
            st = []
            stream(url, [r.randrange(3, 512) for _ in range(SHORT_TOKENS)], SHORT_OUT, st)
            with lock:
                itls.extend(b - a for a, b in zip(st, st[1:]))

    ts = [threading.Thread(target=long_client, args=(k,)) for k in range(LONG_CLIENTS)]
    ts += [threading.Thread(target=short_client, args=(k,)) for k in range(SHORT_CLIENTS)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return itls


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vllmc", default=os.path.join(ROOT, "build", "vllmc"))
    ap.add_argument("--model")
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--ttft-only", action="store_true", help="only part 2 (TTFT)")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="disagg-bench-")
    procs = []
    try:
        model = a.model
        if not model:
            model = os.path.join(tmp, "model")
            subprocess.run([sys.executable, os.path.join(ROOT, "tools", "make_random_model.py"), model, "--arch", "llama",
                            "--dtype", "f32", "--hidden-size", "512", "--intermediate-size", "1408", "--layers", "8",
                            "--heads", "8", "--kv-heads", "4", "--max-pos", "4096", "--tokenizer", "stories260K"],
                           check=True, stdout=subprocess.DEVNULL)
        common = ["serve", "--model", model, "--host", "127.0.0.1", "--port", "0"]
        shm = tempfile.mkdtemp(prefix="disagg-kv-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)

        def cfg(role):
            return json.dumps({"kv_connector": "SharedStorageConnector", "kv_role": role,
                               "kv_connector_extra_config": {"shared_storage_path": shm}})

        if not a.ttft_only:
            # part 1: single instance, 2 threads
            p, url = start(a.vllmc, common + ["--threads", "2"], log=os.path.join(tmp, "single.log"))
            procs.append(p)
            single = load_run(url, a.seconds)
            p.terminate(); p.wait(); procs.remove(p)
            # part 1: producer + consumer, 1 thread each, behind the proxy
            pp, purl = start(a.vllmc, common + ["--threads", "1", "--kv-transfer-config", cfg("kv_producer")],
                             log=os.path.join(tmp, "prefill.log"))
            dp, durl = start(a.vllmc, common + ["--threads", "1", "--kv-transfer-config", cfg("kv_consumer")],
                             log=os.path.join(tmp, "decode.log"))
            xp, xurl = start(a.vllmc, ["proxy", "--port", "0", "--prefill", purl, "--decode", durl],
                             log=os.path.join(tmp, "proxy.log"))
            procs += [pp, dp, xp]
            disagg = load_run(xurl, a.seconds)
            for q in (xp, dp, pp):
                q.terminate(); q.wait(); procs.remove(q)
            shutil.rmtree(shm, ignore_errors=True)
            print(f"# load: {LONG_CLIENTS} client(s) of {LONG_TOKENS}-token prompts, {SHORT_CLIENTS} of "
                  f"{SHORT_TOKENS}-token prompts x {SHORT_OUT} tokens, {a.seconds:g} s each")
            print("| setup | short-request ITLs | p50 ITL ms | p99 ITL ms | max ITL ms |")
            print("|---|---|---|---|---|")
            for name, x in (("one instance, --threads 2", single), ("P/D: prefill 1 thread + decode 1 thread", disagg)):
                print(f"| {name} | {len(x)} | {pct(x, .5) * 1e3:.1f} | {pct(x, .99) * 1e3:.1f} | {max(x) * 1e3 if x else 0:.1f} |")

        # part 2: TTFT from RAM, from disk, recomputed
        r = random.Random(7)
        A = [r.randrange(3, 512) for _ in range(TTFT_TOKENS)]
        B = [r.randrange(3, 512) for _ in range(TTFT_TOKENS)]
        blocks = str(TTFT_TOKENS // 16 + 16)
        disk = os.path.join(tmp, "disk")
        setups = [("recompute (no offloading)", [], {}),
                  ("RAM tier (--kv-offloading-size 1)", ["--kv-offloading-size", "1"], {}),
                  ("disk tier (RAM 0.0001 GiB, disk 2 GiB)", ["--kv-offloading-size", "0.0001"],
                   {"VLLM_KV_OFFLOADING_DISK_PATH": disk, "VLLM_KV_OFFLOADING_DISK_SIZE": "2"})]
        print(f"\n# TTFT of a {TTFT_TOKENS}-token prompt after another prompt evicted it from a {blocks}-block pool "
              "(--threads 2)")
        print("| where its KV was | cold TTFT s | TTFT again s |")
        print("|---|---|---|")
        for name, extra, env in setups:
            p, url = start(a.vllmc, common + ["--threads", "2", "--num-gpu-blocks-override", blocks] + extra, env=env,
                           log=os.path.join(tmp, "ttft.log"))
            procs.append(p)
            cold = stream(url, A, 1)
            stream(url, B, 1)
            again = stream(url, A, 1)
            p.terminate(); p.wait(); procs.remove(p)
            print(f"| {name} | {cold:.2f} | {again:.3f} |")

        # part 2: TTFT of a consumer loading from shared storage
        print(f"\n# TTFT of a {TTFT_TOKENS}-token prompt on a SharedStorageConnector consumer (--threads 2), "
              f"median of {TTFT_RUNS} prompts a producer wrote")
        print("| where the block files were | consumer TTFT s (each run) | median s |")
        print("|---|---|---|")
        prompts = [[r.randrange(3, 512) for _ in range(TTFT_TOKENS)] for _ in range(TTFT_RUNS)]
        for name, where in (("/dev/shm", "/dev/shm" if os.path.isdir("/dev/shm") else None), ("working disk", tmp)):
            store = tempfile.mkdtemp(prefix="disagg-ttft-", dir=where)

            def scfg(role):
                return json.dumps({"kv_connector": "SharedStorageConnector", "kv_role": role,
                                   "kv_connector_extra_config": {"shared_storage_path": store}})
            p, url = start(a.vllmc, common + ["--threads", "2", "--kv-transfer-config", scfg("kv_producer")],
                           log=os.path.join(tmp, "ttft-p.log"))
            procs.append(p)
            for x in prompts:
                stream(url, x, 1)
            p.terminate(); p.wait(); procs.remove(p)
            p, url = start(a.vllmc, common + ["--threads", "2", "--kv-transfer-config", scfg("kv_consumer")],
                           log=os.path.join(tmp, "ttft-c.log"))
            procs.append(p)
            ts = [stream(url, x, 1) for x in prompts]
            p.terminate(); p.wait(); procs.remove(p)
            shutil.rmtree(store, ignore_errors=True)
            print(f"| {name} | {' '.join(f'{t:.3f}' for t in ts)} | {sorted(ts)[len(ts) // 2]:.3f} |")
    finally:
        for p in procs:
            p.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
