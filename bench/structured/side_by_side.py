#!/usr/bin/env python3
"""side_by_side.py - MaskBench (JSONSchemaBench) with our engine, llguidance
and XGrammar on the same files and the same tokenizer, in one run; prints a
markdown report (run it through bench/structured/side_by_side.sh, which
picks or makes the Python environment and builds vllmc).

  side_by_side.py [--engines ours,llguidance,xgrammar] [--every K] [--limit N]
                  [--xgr-budget S] [--wall] [--data DIR] [--tokenizer DIR]
                  [--vllmc PATH] [--json-out FILE] [--progress] [--report-from FILE]

The files: those of DIR ending in .json, sorted by name, every K-th, at most
N; they are linked into a temporary directory so that every engine reads
exactly that list. Ours is `vllmc bench structured --json` over it (and once
more over each category's subset, for the per-category table: vllmc prints
only totals); the others are bench/structured/ref_bench.py (one worker
process per engine, per-file records, the same methodology). The engines run
one after another, one thread each.

Clock: each engine's calling thread's CPU time (ours --cpu-time, i.e.
CLOCK_THREAD_CPUTIME_ID; the others time.thread_time_ns), so that other
processes on a loaded machine do not count; --wall uses the wall clocks.
Mask times are per token, the mask after the last token (the EOS step)
included; compile times per schema. Percentiles: numpy's linear
interpolation in all three (vllmc's bench_stats_percentile and
ref_bench.pct are the same formula).

XGrammar's compile gets --xgr-budget CPU seconds per schema (default 10; 0:
none): a compile over it kills its worker and the file counts as "timed
out", as JSONSchemaBench's MaskBench harness counts files over its 15-minute
limit. "passing": compiled, every valid instance accepted, every invalid one
rejected.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from ref_bench import category  # noqa: E402

PCTS = ("avg", "p50", "p75", "p90", "p95", "p99", "p99.9", "max")
TARGETS = [  # issue 18's, for ours: (label, key, percentile, limit)
    ("mask p50 ≤ 20 µs", "mask_us", "p50", 20.0),
    ("mask p99 ≤ 250 µs", "mask_us", "p99", 250.0),
    ("mask max ≤ 5 ms", "mask_us", "max", 5000.0),
    ("compile p50 ≤ 1 ms", "compile_ms", "p50", 1.0),
    ("compile p99 ≤ 50 ms", "compile_ms", "p99", 50.0),
]


def log(*a):
    print("side_by_side:", *a, file=sys.stderr, flush=True)


def run_ours(a, data):
    cmd = [a.vllmc, "bench", "structured", "--tokenizer", a.tokenizer, "--data", data, "--json"]
    if not a.wall:
        cmd.append("--cpu-time")
    p = subprocess.run(cmd, capture_output=True, text=True)
    # exit 1 means an invalid instance was accepted: still a result to report
    lines = [x for x in p.stdout.splitlines() if x.startswith("{")]
    if not lines:
        raise RuntimeError("%s: exit %d: %s" % (" ".join(cmd), p.returncode, p.stderr.strip()[-300:]))
    r = json.loads(lines[-1])
    r.setdefault("timeout", 0)
    r.setdefault("unreadable", 0)
    return r


def run_ref(a, engine, data):
    cmd = [sys.executable, os.path.join(HERE, "ref_bench.py"), "--engine", engine, "--tokenizer", a.tokenizer,
           "--data", data, "--json"]
    if not a.wall:
        cmd.append("--cpu-time")
    if engine == "xgrammar" and a.xgr_budget > 0:
        cmd += ["--compile-budget", str(a.xgr_budget)]
    if a.progress:
        cmd.append("--progress")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=None if a.progress else subprocess.PIPE, text=True,
                       env=env)
    if p.returncode or not p.stdout.strip():
        raise RuntimeError("%s failed (exit %d): %s" % (engine, p.returncode, (p.stderr or "").strip()[-500:]))
    return json.loads(p.stdout.strip().splitlines()[-1])


def fmt(v, unit):
    if v is None:
        return "-"
    if unit == "ms":
        return "%.2f" % v if v < 10 else "{:,.1f}".format(v) if v < 1000 else "{:,.0f}".format(v)
    return "%.1f" % v if v < 100 else "{:,.0f}".format(v)


def git_rev(root):
    try:
        rev = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return rev + ("+dirty" if dirty else "") if rev else "?"
    except OSError:
        return "?"


def loadavg():
    try:
        return open("/proc/loadavg").read().split()[0]
    except OSError:
        return "?"


def report(a, res, names, sel, load0, load1, when):
    engines = [e for e in a.engines if e in res]
    head = {"ours": "ours (vllmc %s)" % (getattr(a, "rev", None) or git_rev(os.path.join(HERE, "..", "..")))}
    for e in engines:
        if e != "ours":
            head[e] = res[e].get("version", e) + (
                " (compile budget %g CPU s)" % a.xgr_budget if e == "xgrammar" and a.xgr_budget > 0 else "")
    out = []
    clock = "wall clock" if a.wall else "each engine's thread CPU clock"
    out.append("MaskBench side by side, %s: %d files of %s (%s), tokenizer %s, one thread each, %s; "
               "load average %s at the start, %s at the end." % (
                   when, len(names), a.data, sel, os.path.basename(os.path.normpath(a.tokenizer)), clock, load0, load1))
    out.append("")
    out.append("| | " + " | ".join(head[e] for e in engines) + " |")
    out.append("|---|" + "---|" * len(engines))

    def row(label, f):
        out.append("| %s | %s |" % (label, " | ".join(f(res[e]) for e in engines)))

    row("files", lambda r: "%d" % r["files"])
    row("compiled", lambda r: "%d" % r["compiled"])
    row("refused (compile error)", lambda r: "%d" % r["refused"])
    row("timed out", lambda r: "%d" % r.get("timeout", 0))
    row("unreadable", lambda r: "%d" % r.get("unreadable", 0))
    row("**passing**", lambda r: "**%d**" % r["passing"])
    row("valid accepted / valid", lambda r: "%d / %d" % (r["valid_accepted"], r["valid"]))
    row("**invalid accepted** / invalid", lambda r: "**%d** / %d" % (r["invalid_accepted"], r["invalid"]))
    row("masks timed", lambda r: "{:,}".format(r["mask_us"]["n"]))
    for p in PCTS:
        row("compile %s ms" % p, lambda r, p=p: fmt(r["compile_ms"].get(p), "ms"))
    for p in PCTS:
        row("mask %s µs" % p, lambda r, p=p: fmt(r["mask_us"].get(p), "us"))
    row("run seconds (wall, whole run)", lambda r: "%.1f" % r["seconds"] if r["seconds"] < 10 else "%.0f" % r["seconds"])
    out.append("")
    if "ours" in res:
        o = res["ours"]
        t = []
        for label, k, p, lim in TARGETS:
            v = o[k][p]
            t.append("%s: %s (%s)" % (label, "met" if v <= lim else "**not met**", fmt(v, "ms" if k == "compile_ms" else "us")))
        if "llguidance" in res:
            lp = res["llguidance"]["passing"]
            t.append("passing > llguidance's: %s (%d vs %d)" % ("met" if o["passing"] > lp else "**not met**",
                                                                o["passing"], lp))
        t.append("invalid accepted 0: %s (%d)" % ("met" if o["invalid_accepted"] == 0 else "**not met**",
                                                  o["invalid_accepted"]))
        out.append("Targets (issue 18) for ours: " + "; ".join(t) + ".")
        out.append("")
    cats = sorted({category(n) for n in names})
    if len(engines) > 0 and all("categories" in res[e] for e in engines):
        short = {"ours": "ours", "llguidance": "llg", "xgrammar": "xgr"}
        order = " / ".join(short.get(e, e) for e in engines)
        out.append("Per category (each cell: %s):" % order)
        out.append("")
        out.append("| category | files | passing | invalid accepted | refused + timed out | compile p50 ms "
                   "| compile p99 ms | mask p50 µs | mask p99 µs | mask max µs |")
        out.append("|---|---|---|---|---|---|---|---|---|---|")
        for c in cats:
            cs = [res[e]["categories"].get(c) for e in engines]

            def cell(f, what=None, cs=cs):
                # "-": the engine has no file of this category, or compiled none (no times)
                return " / ".join("-" if x is None or (what and not x[what]["n"]) else f(x) for x in cs)
            out.append("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                c, sum(1 for n in names if category(n) == c),
                cell(lambda x: "%d" % x["passing"]), cell(lambda x: "%d" % x["invalid_accepted"]),
                cell(lambda x: "%d" % (x["refused"] + x.get("timeout", 0))),
                cell(lambda x: fmt(x["compile_ms"]["p50"], "ms"), "compile_ms"),
                cell(lambda x: fmt(x["compile_ms"]["p99"], "ms"), "compile_ms"),
                cell(lambda x: fmt(x["mask_us"]["p50"], "us"), "mask_us"),
                cell(lambda x: fmt(x["mask_us"]["p99"], "us"), "mask_us"),
                cell(lambda x: fmt(x["mask_us"]["max"], "us"), "mask_us")))
        out.append("")
    if res.get("xgrammar", {}).get("timeouts"):
        out.append("XGrammar timed out on: " + ", ".join(res["xgrammar"]["timeouts"][:20]) +
                   (" ..." if len(res["xgrammar"]["timeouts"]) > 20 else "") + ".")
        out.append("")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engines", default="ours,llguidance,xgrammar")
    ap.add_argument("--every", type=int, default=1)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--xgr-budget", type=float, default=10.0, help="XGrammar compile budget, CPU s (0: none)")
    ap.add_argument("--wall", action="store_true", help="wall clocks instead of thread CPU clocks")
    ap.add_argument("--data", default="../shared/data/maskbench")
    ap.add_argument("--tokenizer", default="../shared/tokenizers/llama3")
    ap.add_argument("--vllmc", default=os.environ.get("VLLMC", "build/vllmc"))
    ap.add_argument("--json-out", help="write every engine's raw results (JSON) here")
    ap.add_argument("--progress", action="store_true")
    ap.add_argument("--report-from", help="print the report of a saved --json-out FILE again (runs nothing)")
    a = ap.parse_args()
    a.engines = [e.strip() for e in a.engines.split(",") if e.strip()]
    bad = [e for e in a.engines if e not in ("ours", "llguidance", "xgrammar")]
    if bad or not a.engines or a.every < 1 or a.limit < 0:
        ap.error("--engines takes ours,llguidance,xgrammar; --every >= 1; --limit >= 0")
    if a.report_from:
        d = json.load(open(a.report_from))
        a.engines = [e for e in ("ours", "llguidance", "xgrammar") if e in d["engines"]]
        for k, v in d.get("args", {}).items():
            setattr(a, k, v)
        print(report(a, d["engines"], d["files"], d.get("sel", "?"), d["load"][0], d["load"][1], d["when"]))
        return
    a.data = os.path.abspath(a.data)
    a.tokenizer = os.path.abspath(a.tokenizer)
    if not os.path.isdir(a.data):
        ap.error("no data directory %s" % a.data)
    names = sorted(f for f in os.listdir(a.data) if f.endswith(".json"))[:: a.every]
    if a.limit:
        names = names[: a.limit]
    sel = "every file" if a.every == 1 else "every %dth file" % a.every
    if a.limit:
        sel += ", the first %d" % a.limit
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    a.rev = git_rev(os.path.join(HERE, "..", ".."))
    load0 = loadavg()
    res = {}
    with tempfile.TemporaryDirectory(prefix="side_by_side.") as tmp:
        alld = os.path.join(tmp, "all")
        os.mkdir(alld)
        for n in names:
            os.symlink(os.path.join(a.data, n), os.path.join(alld, n))
        cats = sorted({category(n) for n in names})
        for e in a.engines:
            log("%s on %d files (%s)" % (e, len(names), sel))
            t0 = time.perf_counter()
            if e == "ours":
                r = run_ours(a, alld)
                r_seconds = time.perf_counter() - t0
                r["categories"] = {}
                for c in cats:
                    if len(cats) == 1:
                        r["categories"][c] = {k: v for k, v in r.items() if k != "categories"}
                        continue
                    cd = os.path.join(tmp, "cat", c)
                    os.makedirs(cd)
                    for n in names:
                        if category(n) == c:
                            os.symlink(os.path.join(a.data, n), os.path.join(cd, n))
                    r["categories"][c] = run_ours(a, cd)
                    r["categories"][c].setdefault("timeout", 0)
            else:
                r = run_ref(a, e, alld)
            # the whole run's wall clock as the driver saw it (start-up, tokenizer load and category reruns aside)
            if e == "ours":
                r["seconds"] = r_seconds
            else:
                r["seconds"] = time.perf_counter() - t0
            res[e] = r
            log("%s done in %.0f s" % (e, time.perf_counter() - t0))
    load1 = loadavg()
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump({"files": names, "engines": res, "load": [load0, load1], "when": when, "sel": sel,
                       "args": {k: getattr(a, k) for k in ("data", "tokenizer", "xgr_budget", "wall", "rev")}}, f)
    print(report(a, res, names, sel, load0, load1, when))


if __name__ == "__main__":
    main()
