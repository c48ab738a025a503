"""Shared fixtures of the vllmc tests (run by tests/test_python.sh in a venv
with the package installed by `pip install ./python`).

References are independent of vllmc: the C CLI (`vllmc generate --json`, the
command the package installs) for outputs, transformers (the repository's
.venv, tests/ref/requirements.txt) for chat templates and the greedy
continuation. A test whose reference is missing here skips itself.
"""
import json
import os
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STORIES = os.path.join(REPO, "models", "stories260K")
MODEL_CACHE = os.environ.get("VLLMC_MODEL_CACHE") or os.path.expanduser("~/.cache/vllmc/models")
SMOLLM2 = os.path.join(MODEL_CACHE, "SmolLM2-135M-Instruct.Q4_1.gguf")
REF_PY = os.path.join(REPO, ".venv", "bin", "python")
# the engine's own log lines stay out of the test output
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")


def vllmc_command():
    """The `vllmc` console script the package installed (beside this Python)."""
    exe = os.path.join(os.path.dirname(sys.executable), "vllmc")
    return exe if os.path.exists(exe) else shutil.which("vllmc")


def cli_generate(model, lines, *args, timeout=300):
    """`vllmc generate --json` over a prompts file: one dict per request."""
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"vllmc_test_prompts_{os.getpid()}.jsonl")
    with open(path, "w") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")
    try:
        out = subprocess.run([vllmc_command(), "generate", "--model", model, "--prompts-file", path, "--json", *args],
                             capture_output=True, text=True, timeout=timeout, cwd=REPO)
    finally:
        os.unlink(path)
    assert out.returncode == 0, out.stderr[-2000:]
    return [json.loads(x) for x in out.stdout.splitlines() if x.strip()]


def ref_python(code, *args, timeout=600):
    """Runs code in the repository's reference venv (transformers); its stdout as JSON."""
    if not os.path.exists(REF_PY):
        pytest.skip(f"{REF_PY}: no reference venv (scripts/setup.sh makes it)")
    out = subprocess.run([REF_PY, "-c", code, *args], capture_output=True, text=True, timeout=timeout, cwd=REPO,
                         env={**os.environ, "OMP_NUM_THREADS": "1", "TRANSFORMERS_VERBOSITY": "error"})
    if out.returncode != 0 and "No module named" in out.stderr:
        pytest.skip(f"reference venv lacks a package: {out.stderr.strip().splitlines()[-1]}")
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def llm():
    from vllmc import LLM
    return LLM(STORIES)


@pytest.fixture(scope="session")
def smollm2():
    if not os.path.exists(SMOLLM2):
        pytest.skip(f"{SMOLLM2}: not fetched (scripts/fetch_models.sh smollm2)")
    return SMOLLM2
