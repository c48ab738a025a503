#!/usr/bin/env python3
"""ref_bench.py - MaskBench (JSONSchemaBench) with llguidance and XGrammar,
the same methodology and files as `vllmc bench structured`, one thread.

  ref_bench.py --engine llguidance|xgrammar --tokenizer DIR --data DIR
               [--limit N] [--every K] [--cpu-time] [--compile-budget S]
               [--file-budget S] [--json]

For each file (sorted by name, every K-th, at most N): compile the schema
(timed); for each test, text = json.dumps(data, ensure_ascii=False),
tokenized without special tokens; per token fill the mask (timed), check the
token's bit, consume it; after the last token fill the mask once more
(timed) and require EOS in it. Valid instances must be accepted, invalid ones
rejected. Prints the same summary as ours (--json: one JSON line), overall
and per category (the file name's prefix: Glaiveai2K, Github_easy, BFCL...).

Clocks: --cpu-time times with the calling thread's CPU clock
(time.thread_time_ns; both engines compile and fill masks on the calling
thread: XGrammar's compiler is made with max_threads=1), so that other
processes on a loaded machine do not count; otherwise the wall clock
(time.perf_counter_ns).

Budgets: the engine runs in a worker process that is sent one file at a time.
--compile-budget S gives each compile S seconds of CPU (RLIMIT_CPU, raised
again once the compile returns): a compile that exceeds it kills the worker
(SIGXCPU), the file counts as "timeout" (not compiled), and a new worker
takes the next file. --file-budget S (default 900, MaskBench's own
per-schema limit) is a wall-clock backstop for the whole file. JSONSchemaBench's
MaskBench harness does the same with a SIGALRM of 15 minutes per schema and a
40 GiB RSS limit, counting what was killed as "timeout".

Engine settings, chosen to mean what the JSON Schema says (as ours does):
llguidance with flexible whitespace (its default) and lenient off; XGrammar
with any_whitespace=True and strict_mode=False (additionalProperties
defaults to true, as in the spec; MaskBench's "XGrammar (compliant)").
"""
import argparse
import json
import multiprocessing as mp
import os
import resource
import sys
import time
from importlib.metadata import version as pkg_version


def category(name):
    """MaskBench's split of a file: "Github_easy---o1.json" -> Github_easy, "BFCL_java_0.json" -> BFCL."""
    return name.split("---")[0] if "---" in name else name.split("_")[0].removesuffix(".json")


def pct(xs, p):
    """xs sorted; numpy's default (linear) percentile, as vllmc's bench_stats_percentile."""
    if not xs:
        return 0.0
    idx = p / 100.0 * (len(xs) - 1)
    lo = int(idx)
    if lo + 1 >= len(xs):
        return float(xs[-1])
    t = idx - lo
    a, b = xs[lo], xs[lo + 1]
    return b - (b - a) * (1.0 - t) if t >= 0.5 else a + (b - a) * t


def summary(xs, scale):
    xs = sorted(xs)
    d = {"avg": (sum(xs) / len(xs) if xs else 0) * scale}
    for p in (50, 75, 90, 95, 99, 99.9):
        d["p%g" % p] = pct(xs, p) * scale
    d["max"] = (xs[-1] if xs else 0) * scale
    d["n"] = len(xs)
    return d


class LLG:
    def __init__(self, tok_dir):
        import llguidance
        import llguidance.hf
        import llguidance.numpy
        from transformers import AutoTokenizer
        self.version = "llguidance " + pkg_version("llguidance")
        self.hf = AutoTokenizer.from_pretrained(tok_dir)
        self.llg = llguidance
        self.lt = llguidance.hf.from_tokenizer(self.hf)
        self.mask = llguidance.numpy.allocate_token_bitmask(1, self.lt.vocab_size)
        self.fill = llguidance.numpy.fill_next_token_bitmask
        self.eos = self.lt.eos_token

    def compile(self, schema):
        g = self.llg.LLMatcher.grammar_from_json_schema(json.dumps(schema))
        # validate_grammar builds the parser: the compile proper, timed with it
        err = self.llg.LLMatcher.validate_grammar(g, self.lt)
        if err:
            raise ValueError(err)
        return g

    def matcher(self, g):
        return self.llg.LLMatcher(self.lt, g)

    def fill_mask(self, m):
        self.fill(m, self.mask, 0)
        return self.mask[0]

    def accept(self, m, t):
        return m.consume_token(t) and not m.is_error()


class XGR:
    def __init__(self, tok_dir):
        import xgrammar as xgr
        from transformers import AutoTokenizer
        self.version = "xgrammar " + pkg_version("xgrammar")
        self.xgr = xgr
        self.hf = AutoTokenizer.from_pretrained(tok_dir)
        self.info = xgr.TokenizerInfo.from_huggingface(self.hf)
        self.compiler = xgr.GrammarCompiler(self.info, max_threads=1, cache_enabled=False)
        self.mask = xgr.allocate_token_bitmask(1, self.info.vocab_size)
        self.eos = self.info.stop_token_ids[0]

    def compile(self, schema):
        return self.compiler.compile_json_schema(json.dumps(schema), any_whitespace=True, strict_mode=False)

    def matcher(self, g):
        return self.xgr.GrammarMatcher(g)

    def fill_mask(self, m):
        m.fill_next_token_bitmask(self.mask)
        return self.mask[0]

    def accept(self, m, t):
        return m.accept_token(t)


def allowed(mask, t):
    return (int(mask[t >> 5]) >> (t & 31)) & 1


def run_file(eng, path, now, budget):
    """One MaskBench file: its result record (times in ns of the chosen clock)."""
    name = os.path.basename(path)
    r = {"file": name, "category": category(name), "compiled": False, "error": None, "compile_ns": 0,
         "mask_ns": [], "valid": 0, "valid_accepted": 0, "invalid": 0, "invalid_accepted": 0, "passing": False}
    try:
        doc = json.load(open(path, encoding="utf-8"))
        schema, tests = doc["schema"], doc["tests"]
    except Exception as e:  # noqa: BLE001
        r["error"] = "unreadable: %s" % e
        return r
    if budget:
        used = resource.getrusage(resource.RUSAGE_SELF)
        cpu = used.ru_utime + used.ru_stime
        limit0 = resource.getrlimit(resource.RLIMIT_CPU)
        soft = int(cpu + budget) + 1
        if limit0[1] != resource.RLIM_INFINITY:
            soft = min(soft, limit0[1])
        resource.setrlimit(resource.RLIMIT_CPU, (soft, limit0[1]))
    t0 = now()
    try:
        g = eng.compile(schema)
    except Exception as e:  # noqa: BLE001
        r["error"] = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
        return r
    finally:
        if budget:
            resource.setrlimit(resource.RLIMIT_CPU, limit0)
    r["compile_ns"] = now() - t0
    r["compiled"] = True
    ok_all = True
    mt = r["mask_ns"]
    for t in tests:
        ids = eng.hf.encode(json.dumps(t["data"], ensure_ascii=False), add_special_tokens=False)
        m = eng.matcher(g)
        ok = True
        for k in range(len(ids) + 1):
            t0 = now()
            mask = eng.fill_mask(m)
            mt.append(now() - t0)
            if k == len(ids):
                ok = bool(allowed(mask, eng.eos))
                break
            if not allowed(mask, ids[k]) or not eng.accept(m, ids[k]):
                ok = False
                break
        if t["valid"]:
            r["valid"] += 1
            r["valid_accepted"] += ok
            ok_all &= ok
        else:
            r["invalid"] += 1
            r["invalid_accepted"] += ok
            ok_all &= not ok
    r["passing"] = bool(ok_all)
    return r


def worker(conn, engine, tok_dir, cpu_time, budget):
    os.environ["OMP_NUM_THREADS"] = "1"
    try:
        import torch
        torch.set_num_threads(1)
    except Exception:  # noqa: BLE001
        pass
    eng = LLG(tok_dir) if engine == "llguidance" else XGR(tok_dir)
    conn.send({"version": eng.version})
    now = time.thread_time_ns if cpu_time else time.perf_counter_ns
    while True:
        path = conn.recv()
        if path is None:
            return
        conn.send(run_file(eng, path, now, budget))


class Worker:
    def __init__(self, a):
        self.a = a
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.p = ctx.Process(target=worker, args=(child, a.engine, a.tokenizer, a.cpu_time, a.compile_budget),
                             daemon=True)
        self.p.start()
        child.close()
        if not self.conn.poll(600):
            raise RuntimeError("%s worker did not start in 600 s" % a.engine)
        self.version = self.conn.recv()["version"]

    def run(self, path):
        """The file's record, or None if the worker died or overran --file-budget (then it is gone)."""
        self.conn.send(path)
        try:
            if self.conn.poll(self.a.file_budget):
                return self.conn.recv()
        except (EOFError, OSError):
            pass
        self.kill()
        return None

    def kill(self):
        if self.p.is_alive():
            self.p.kill()
        self.p.join()

    def close(self):
        try:
            self.conn.send(None)
            self.p.join(10)
        except (BrokenPipeError, OSError):
            pass
        self.kill()


def block(recs):
    """The summary of some file records: counts and the percentiles."""
    ct = [r["compile_ns"] for r in recs if r["compiled"]]
    mt = [x for r in recs for x in r["mask_ns"]]
    b = {"files": len(recs), "compiled": len(ct),
         "refused": sum(1 for r in recs if not r["compiled"] and not r.get("timeout") and
                        not (r["error"] or "").startswith("unreadable")),
         "timeout": sum(1 for r in recs if r.get("timeout")),
         "unreadable": sum(1 for r in recs if (r["error"] or "").startswith("unreadable")),
         "passing": sum(1 for r in recs if r["passing"])}
    for k in ("valid_accepted", "valid", "invalid_accepted", "invalid"):
        b[k] = sum(r[k] for r in recs)
    b["tokens"] = len(mt)
    b["compile_ms"] = summary(ct, 1e-6)
    b["mask_us"] = summary(mt, 1e-3)
    return b


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engine", required=True, choices=["llguidance", "xgrammar"])
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--every", type=int, default=1)
    ap.add_argument("--cpu-time", action="store_true", help="time with the thread's CPU clock")
    ap.add_argument("--compile-budget", type=float, default=0, help="CPU seconds per compile (0: none)")
    ap.add_argument("--file-budget", type=float, default=900, help="wall seconds per file (backstop)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--progress", action="store_true", help="one line per file on stderr")
    a = ap.parse_args()
    files = sorted(f for f in os.listdir(a.data) if f.endswith(".json"))[:: a.every]
    if a.limit:
        files = files[: a.limit]
    t_start = time.perf_counter()
    w = Worker(a)
    version = w.version
    recs = []
    for i, f in enumerate(files):
        r = w.run(os.path.join(a.data, f))
        if r is None:
            r = {"file": f, "category": category(f), "compiled": False, "timeout": True,
                 "error": "timeout (compile over %g CPU s, or the file over %g s)" % (a.compile_budget, a.file_budget),
                 "compile_ns": 0, "mask_ns": [], "valid": 0, "valid_accepted": 0, "invalid": 0,
                 "invalid_accepted": 0, "passing": False}
            w = Worker(a)
        recs.append(r)
        if a.progress:
            print("%s %d/%d %s %s" % (a.engine, i + 1, len(files), f,
                                      "ok" if r["passing"] else (r["error"] or "verdicts differ")[:100]),
                  file=sys.stderr, flush=True)
        if r["invalid_accepted"]:
            print("%s: INVALID ACCEPTED %s" % (a.engine, f), file=sys.stderr)
    w.close()
    res = {"engine": a.engine, "version": version,
           "clock": "thread CPU (time.thread_time_ns)" if a.cpu_time else "wall (time.perf_counter_ns)",
           "compile_budget_s": a.compile_budget, "seconds": time.perf_counter() - t_start}
    res.update(block(recs))
    cats = {}
    for r in recs:
        cats.setdefault(r["category"], []).append(r)
    res["categories"] = {c: block(rs) for c, rs in sorted(cats.items())}
    res["timeouts"] = [r["file"] for r in recs if r.get("timeout")]
    print(json.dumps(res) if a.json else json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
