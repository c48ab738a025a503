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
  generate LLM.generate(prompts, params, use_tqdm=False) in this process on a
           fresh LLM, timed with and without building the LLM (also with
           use_tqdm=True when tqdm is installed). Fresh because the CLI starts
           fresh: a reused LLM was measured 10-30% slower on the same
           requests (the engine's, not Python's: the same with prefix caching
           off; where its KV blocks lie after earlier runs, probably)
Prints the medians, and the ratios to cli: median wall times, best wall
times, and median CPU time (user + sys of every thread: the process's for
cli, this process's during the call for generate), the least disturbed by
other load on a shared machine. The outputs of both are checked equal
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
    sps = [SamplingParams(seed=i, **fields) for i in range(a.prompts)]
    cpu_cli, cpu_py = [], []

    def run_cli():
        t, r = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
        out = subprocess.run(cmd, capture_output=True, text=True, check=True)
        r2 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu_cli.append(r2.ru_utime - r.ru_utime + r2.ru_stime - r.ru_stime)
        return time.perf_counter() - t, out.stdout

    def run_py(tqdm):
        """(LLM() + generate, generate alone) on a fresh LLM, as the CLI starts fresh."""
        t0 = time.perf_counter()
        llm = LLM(a.model, num_threads=a.threads)
        t, c0 = time.perf_counter(), time.process_time()
        res = llm.generate(prompts, sps, use_tqdm=tqdm)
        t1 = time.perf_counter()
        if not tqdm:
            cpu_py.append(time.process_time() - c0)
        del llm
        return t1 - t0, t1 - t, res

    _, out = run_cli()
    _, _, res = run_py(False)
    cpu_cli.clear()
    cpu_py.clear()
    cli_ids = [json.loads(x)["outputs"][0]["token_ids"] for x in out.splitlines()]
    assert cli_ids == [r.outputs[0].token_ids for r in res], "LLM.generate and vllmc generate differ"
    try:
        import tqdm  # noqa: F401
        have_tqdm = True
    except ImportError:
        have_tqdm = False
    cli_t, py_t, gen_t, tq_t = [], [], [], []
    for rep in range(a.reps):  # alternate the order: neither always runs first
        order = ["cli", "py", "tqdm"] if rep % 2 == 0 else ["tqdm", "py", "cli"]
        for what in order:
            if what == "cli":
                cli_t.append(run_cli()[0])
            elif what == "py":
                whole, gen, _ = run_py(False)
                py_t.append(whole)
                gen_t.append(gen)
            elif have_tqdm:
                tq_t.append(run_py(True)[1])
    os.unlink(path)
    med = statistics.median
    c = med(cli_t)
    ntok = a.prompts * a.max_tokens
    fmt = lambda xs: " ".join(f"{x:.3f}" for x in xs)  # noqa: E731
    print(f"{a.prompts} prompts x {a.max_tokens} tokens ({ntok} tokens), {a.reps} reps, "
          f"threads {a.threads or 'all'}; wall seconds, median (all):")
    print(f"  vllmc generate, the process       {c:.3f}  ({fmt(cli_t)})")
    print(f"  LLM() + LLM.generate               {med(py_t):.3f}  ({fmt(py_t)})")
    print(f"  LLM.generate alone                 {med(gen_t):.3f}  ({fmt(gen_t)})")
    if tq_t:
        print(f"  LLM.generate alone, tqdm bar       {med(tq_t):.3f}  ({fmt(tq_t)})")
    print(f"  CPU time (user + sys, all threads): vllmc generate {med(cpu_cli):.3f}, "
          f"LLM.generate {med(cpu_py):.3f}")
    print(f"ratio to vllmc generate: LLM()+generate {med(py_t) / c:.3f}, generate {med(gen_t) / c:.3f}, "
          f"best {min(gen_t) / min(cli_t):.3f}, CPU time {med(cpu_py) / med(cpu_cli):.3f}")


if __name__ == "__main__":
    main()
