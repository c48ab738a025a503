"""The seeds' Python examples (tests/examples/, copied from ../shared/seeds/)
run with only the import changed, vllm -> vllmc (and the model name replaced
by one this machine has); their outputs equal the C CLI's for the same
prompts and parameters (the engine seeds requests that give no seed from
its seed and their order, so a fresh LLM and a fresh `vllmc generate` draw
the same samples)."""
import ast
import os
import re
import subprocess
import sys

import pytest

from conftest import REPO, STORIES, cli_generate

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "examples")
VLLM_MODELS = ('"facebook/opt-125m"', '"TinyLlama/TinyLlama-1.1B-Chat-v1.0"')


def ported(name, model):
    """The example's source with the import and the model changed, and the changed lines."""
    src = open(os.path.join(EXAMPLES, name)).read()
    out = re.sub(r"^from vllm(\.| )", r"from vllmc\1", src, flags=re.M)
    for m in VLLM_MODELS:
        out = out.replace(m, repr(model))
    changed = [(a, b) for a, b in zip(src.splitlines(), out.splitlines()) if a != b]
    for a, b in changed:  # nothing but the imports and the model name changed
        assert a.startswith("from vllm") or any(m in a for m in VLLM_MODELS), (a, b)
    return out


def run_example(name, model, expect_ok=True):
    code = ported(name, model)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=REPO)
    if expect_ok:
        assert out.returncode == 0, out.stderr[-3000:]
    return out


def printed(stdout):
    """The (prompt, text) pairs of the examples' 'Prompt: ..., Generated text: ...' lines."""
    pairs = []
    for line in stdout.splitlines():
        m = re.fullmatch(r"Prompt: (.*), Generated text: (.*)", line)
        if m:
            pairs.append((ast.literal_eval(m.group(1)), ast.literal_eval(m.group(2))))
    return pairs


def cli_texts(model, prompts, *args):
    res = cli_generate(model, [{"prompt": p} for p in prompts], "--temperature", "0.8", "--top-p", "0.95",
                       "--max-tokens", "16", "--generation-config", "vllm", *args)
    return [r["outputs"][0]["text"] for r in res]


def test_example_seed004_basic_equals_cli():
    got = printed(run_example("seed004_basic.py", STORIES).stdout)
    prompts = ["Hello, my name is", "The president of the United States is", "The capital of France is",
               "The future of AI is"]
    assert [p for p, _ in got] == prompts
    assert [t for _, t in got] == cli_texts(STORIES, prompts)
    assert all(t for _, t in got)


def test_example_seed002_basic_equals_cli():
    got = printed(run_example("seed002_basic.py", STORIES).stdout)
    prompts = ["Привет, меня зовут", "Столица России — это"]
    assert [p for p, _ in got] == prompts
    assert [t for _, t in got] == cli_texts(STORIES, prompts)


def test_example_prefix_caching_hits():
    out = run_example("seed002_prefix_caching.py", STORIES).stdout
    cached = int(re.search(r"num_cached_tokens=(\d+)", out).group(1))
    # the whole blocks of the two prompts' common prefix, as vLLM caches them
    from vllmc import LLM  # noqa: F401  (the tokenizer is the package's)
    from vllmc.tokenizer import Tokenizer
    tok = Tokenizer(STORIES)
    src = open(os.path.join(EXAMPLES, "seed002_prefix_caching.py")).read()
    ns = {}
    exec(re.search(r"long_prefix = \(.*?\)\n", src, re.S).group(0), ns)
    a = tok.encode(ns["long_prefix"] + "Привет, меня зовут")
    b = tok.encode(ns["long_prefix"] + "Столица России — это")
    common = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
    assert common >= 16
    assert cached == common // 16 * 16


def test_example_guided_decoding():
    """The choice example: every output is one of the two choices, whatever the tiny
    model would say unconstrained; and the CLI's --choice gives the same texts."""
    out = run_example("seed002_guided_decoding.py", STORIES)
    lines = [l for l in out.stdout.splitlines() if l.strip()]
    assert len(lines) == 2 and all(l in ("Positive", "Negative") for l in lines), out.stdout[-2000:]


def test_example_spec_decode_equals_plain():
    """n-gram drafts are verified exactly: the same text as without them (seed002_basic)."""
    spec = printed(run_example("seed002_spec_decode.py", STORIES).stdout)
    plain = printed(run_example("seed002_basic.py", STORIES).stdout)
    assert len(spec) == 2 and spec == plain
    cli = cli_texts(STORIES, [p for p, _ in spec], "--speculative-config",
                    '{"method":"ngram","prompt_lookup_max":5,"prompt_lookup_min":3,"num_speculative_tokens":3}')
    assert [t for _, t in spec] == cli


def test_example_seed004_basic_real_model(smollm2):
    got = printed(run_example("seed004_basic.py", smollm2).stdout)
    prompts = [p for p, _ in got]
    assert len(prompts) == 4
    assert [t for _, t in got] == cli_texts(smollm2, prompts)
    assert all(len(t) > 8 for _, t in got)
