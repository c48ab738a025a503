"""python_overhead.py - the Python package's overhead: LLM.generate over 64
prompts against `vllmc generate` on the same prompts file (issue 21: within 5%).

    build/pyvenv/bin/python bench/python_overhead.py [--model DIR] [--prompts 64]
        [--max-tokens 256] [--reps 5] [--threads N]

Both run the same engine and output processor on the same 64 requests
(seeded sampling, temperature 0.8, top_p 0.95, ignore_eos so every request
makes max_tokens tokens). Timed, alternately, reps times each:
  cli      wall time of the whole `vllmc generate --prompts-file F --json`
           process (start, model load, generation, JSON out; the command
           the package installs)
  generate LLM.generate(prompts, params, use_tqdm=False) in this process (the
           LLM built once beforehand; also with use_tqdm=True when tqdm is
           installed)
Prints the medians, and generate / cli three ways: median wall times, best
wall times, and median CPU time (user + sys of every thread: the process's
for cli, this process's during the call for generate), the least disturbed
by other load on a shared machine. The outputs of both are checked equal
first (token ids), so the two do the same work. Needs the package installed
(tests/test_python.sh makes build/pyvenv).
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STARTS = ["Once upon a time", "The little dog", "Lily and Tom", "One day, a bird", "The sun was",
          "In the garden", "A big red ball", "The cat wanted"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(REPO, "models", "stories260K"))
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args()
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    from vllmc import LLM, SamplingParams

    prompts = [f"{STARTS[i % len(STARTS)]} {i}" for i in range(a.prompts)]
    fields = dict(temperature=0.8, top_p=0.95, max_tokens=a.max_tokens, ignore_eos=True)
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for i, p in enumerate(prompts):
            f.write(json.dumps({"prompt": p, "seed": i, **fields}) + "\n")
        path = f.name
    exe = os.path.join(os.path.dirname(sys.executable), "vllmc")
    cmd = [exe, "generate", "--model", a.model, "--prompts-file", path, "--json", "--threads", str(a.threads)]
    llm = LLM(a.model, num_threads=a.threads)
    sps = [SamplingParams(seed=i, **fields) for i in range(a.prompts)]

    def run_cli():
        t, r = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
        out = subprocess.run(cmd, capture_output=True, text=True, check=True)
        r2 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu_t.append(r2.ru_utime - r.ru_utime + r2.ru_stime - r.ru_stime)
        return time.perf_counter() - t, out.stdout

    def run_py(tqdm):
        t, c0 = time.perf_counter(), time.process_time()
        res = llm.generate(prompts, sps, use_tqdm=tqdm)
        if not tqdm:
            cpu_p.append(time.process_time() - c0)
        return time.perf_counter() - t, res

    cpu_t, cpu_p = [], []
    _, out = run_cli()
    _, res = run_py(False)
    cpu_t.clear()
    cpu_p.clear()
    cli_ids = [json.loads(x)["outputs"][0]["token_ids"] for x in out.splitlines()]
    assert cli_ids == [r.outputs[0].token_ids for r in res], "LLM.generate and vllmc generate differ"
    try:
        import tqdm  # noqa: F401
        have_tqdm = True
    except ImportError:
        have_tqdm = False
    cli_t, py_t, tq_t = [], [], []
    for _ in range(a.reps):
        cli_t.append(run_cli()[0])
        py_t.append(run_py(False)[0])
        if have_tqdm:
            tq_t.append(run_py(True)[0])
    os.unlink(path)
    c, p = statistics.median(cli_t), statistics.median(py_t)
    ntok = a.prompts * a.max_tokens
    print(f"{a.prompts} prompts x {a.max_tokens} tokens ({ntok} tokens), {a.reps} reps, medians:")
    print(f"  vllmc generate (process)      {c:.3f} s  ({ntok / c:.0f} tok/s)  all: {' '.join(f'{x:.3f}' for x in cli_t)}")
    print(f"  LLM.generate (use_tqdm=False) {p:.3f} s  ({ntok / p:.0f} tok/s)  all: {' '.join(f'{x:.3f}' for x in py_t)}")
    if tq_t:
        q = statistics.median(tq_t)
        print(f"  LLM.generate (use_tqdm=True)  {q:.3f} s  ratio to cli {q / c:.3f}")
    cc, cp = statistics.median(cpu_t), statistics.median(cpu_p)
    print(f"  CPU time (user + sys, all threads), medians: vllmc generate {cc:.3f} s, LLM.generate {cp:.3f} s")
    print(f"ratio LLM.generate / vllmc generate: wall median {p / c:.3f}, wall best {min(py_t) / min(cli_t):.3f}, "
          f"CPU time {cp / cc:.3f}")


if __name__ == "__main__":
    main()
