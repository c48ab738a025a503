"""test_lora.py - LoRA in the Python package: LLM(enable_lora=True) and
generate(..., lora_request=LoRARequest(...)) as vLLM's.

The adapters are written by PEFT itself (tests/ref/lora_ref.py
--make-adapter, in the repository's .venv) on the bundled stories260K. A
batch that mixes the base model and two adapters must give, per prompt:
  - PEFT's own greedy continuation (transformers + PeftModel.generate in
    float64, an implementation nobody here wrote), token for token up to a
    step where PEFT's top two logits lie within 1e-3 (a float32 forward may
    order those either way; at least half the tokens must match), and
  - `vllmc generate --lora ...`'s tokens (the CLI path, checked against
    PEFT's logits by tests/test_lora_ref.sh).
The two adapters' outputs must differ from the base model's, so a LoRA that
does nothing fails. Skipped without the reference venv.
"""
import os
import subprocess

import pytest

from conftest import REF_PY, REPO, STORIES, cli_generate, ref_python

PROMPTS = ["Once upon a time", "Lily and Tom went to", "The dog saw a big"]
MAX_TOKENS = 16
MARGIN = 1e-3  # a top-2 logit gap PEFT's float64 and our float32 forward may order differently

PEFT_GREEDY = r"""
import json, sys, torch
from transformers import AutoModelForCausalLM
from peft import PeftModel
base, prompts, adapters, n = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4])
outs = []
for ids, ad in zip(prompts, adapters):
    m = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float64)
    if ad:
        m = PeftModel.from_pretrained(m, ad, torch_dtype=torch.float64)
        m = m.to(torch.float64)
    m.eval()
    with torch.no_grad():
        g = m.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False, eos_token_id=None,
                       pad_token_id=0, min_new_tokens=n, output_logits=True, return_dict_in_generate=True)
    margins = []
    for lg in g.logits:  # each step's top-2 gap: where a float32 engine may pick the other token
        top = torch.topk(lg[0], 2).values
        margins.append(float(top[0] - top[1]))
    outs.append([g.sequences[0, len(ids):].tolist(), margins])
print(json.dumps(outs))
"""


@pytest.fixture(scope="module")
def adapters(tmp_path_factory):
    if not os.path.exists(REF_PY):
        pytest.skip(f"{REF_PY}: no reference venv (scripts/setup.sh makes it)")
    d = tmp_path_factory.mktemp("lora")
    paths = []
    for i, (rank, targets) in enumerate([(8, "all"), (4, "attn")]):
        out = str(d / f"a{i}")
        r = subprocess.run([REF_PY, "tests/ref/lora_ref.py", "--make-adapter", STORIES, out, "--rank", str(rank),
                            "--targets", targets, "--seed", str(11 + i)], cwd=REPO, capture_output=True, text=True,
                           timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
        if r.returncode != 0 and "No module named" in r.stderr:
            pytest.skip(f"reference venv lacks a package: {r.stderr.strip().splitlines()[-1]}")
        assert r.returncode == 0, r.stderr[-2000:]
        paths.append(out)
    return paths


def test_lora_requests_match_peft_and_cli(adapters):
    import json
    from vllmc import LLM, LoRARequest, SamplingParams
    # float32 KV (vllm.c's exact choice; auto stores bfloat16) so that only float32 rounding separates us
    llm = LLM(STORIES, enable_lora=True, max_loras=2, max_lora_rank=16, kv_cache_dtype="float32")
    loras = [None, LoRARequest("a0", 1, adapters[0]), LoRARequest("a1", 2, adapters[1])]
    sp = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True)
    outs = llm.generate(PROMPTS, sp, lora_request=loras, use_tqdm=False)
    got = [list(o.outputs[0].token_ids) for o in outs]
    assert [o.lora_request for o in outs] == loras
    # the same prompt alone under each adapter: the adapters change the output
    alone = [list(o.outputs[0].token_ids) for o in
             llm.generate([PROMPTS[0]] * 3, sp, lora_request=loras, use_tqdm=False)]
    assert alone[1] != alone[0] and alone[2] != alone[0], alone
    # PEFT's greedy continuation of each prompt with its adapter
    ids = [o.prompt_token_ids for o in outs]
    ref = ref_python(PEFT_GREEDY, STORIES, json.dumps(ids), json.dumps([None, adapters[0], adapters[1]]),
                     str(MAX_TOKENS))
    for k, (toks, margins) in enumerate(ref):
        j = next((i for i, (a, b) in enumerate(zip(got[k], toks)) if a != b), len(toks))
        # equal up to the end, or up to a step where PEFT's own top two are within float32's reach
        assert j == len(toks) or margins[j] < MARGIN, (k, j, got[k], toks, margins[j])
        assert j >= MAX_TOKENS // 2, (k, j, got[k], toks)
    # the CLI, one line per prompt naming its adapter
    cli = cli_generate(STORIES, [{"prompt": p, "lora": (lr.lora_name if lr else None), "max_tokens": MAX_TOKENS,
                                  "temperature": 0, "ignore_eos": True} for p, lr in zip(PROMPTS, loras)],
                       "--lora", f"a0={adapters[0]}", "--lora", f"a1={adapters[1]}", "--max-lora-rank", "16",
                       "--max-loras", "2", "--kv-cache-dtype", "float32")
    assert [c["outputs"][0]["token_ids"] for c in cli] == got


def test_lora_errors(adapters, tmp_path):
    from vllmc import LLM, LoRARequest, SamplingParams
    sp = SamplingParams(max_tokens=2)
    plain = LLM(STORIES)
    with pytest.raises(ValueError, match="but LoRA is not enabled!"):
        plain.generate("x", sp, lora_request=LoRARequest("a0", 1, adapters[0]), use_tqdm=False)
    llm = LLM(STORIES, enable_lora=True, max_lora_rank=4)
    with pytest.raises(Exception, match="rank"):  # the rank-8 adapter is above max_lora_rank
        llm.generate("x", sp, lora_request=LoRARequest("a0", 1, adapters[0]), use_tqdm=False)
    with pytest.raises(OSError, match="nowhere"):
        llm.generate("x", sp, lora_request=LoRARequest("b", 3, str(tmp_path / "nowhere")), use_tqdm=False)
    with pytest.raises(ValueError, match="lengths of prompts and lora_request"):
        llm.generate(["x", "y"], sp, lora_request=[None], use_tqdm=False)
    # the engine still serves after the refusals
    assert len(llm.generate("x", sp, lora_request=LoRARequest("a1", 2, adapters[1]), use_tqdm=False)) == 1
