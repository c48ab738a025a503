"""LLM.generate's outputs equal the C CLI's (`vllmc generate --json`, the
command the package installs) for the same prompts and parameters, field by
field; and the issue's one-liner prints transformers' greedy continuation."""
import json
import math
import subprocess
import sys

from conftest import REPO, STORIES, cli_generate, ref_python

# per-line fields of a prompts file; the same as SamplingParams keyword arguments
CASES = [
    {"prompt": "Once upon a time", "temperature": 0, "max_tokens": 40},
    {"prompt": "The cat", "temperature": 0.8, "top_p": 0.9, "seed": 7, "max_tokens": 30, "logprobs": 3},
    {"prompt": "Lily went", "temperature": 1.0, "top_k": 20, "seed": 11, "max_tokens": 50, "stop": [" the", "."]},
    {"prompt": "Tom and", "temperature": 0.7, "seed": 3, "n": 3, "max_tokens": 20, "logprobs": 0},
    {"prompt_token_ids": [1, 400, 300, 200], "temperature": 0.9, "min_p": 0.05, "max_tokens": 25,
     "presence_penalty": 0.5, "frequency_penalty": 0.3, "repetition_penalty": 1.2, "seed": 99},
    {"prompt": "One day", "temperature": 0, "max_tokens": 30, "stop": ["."], "include_stop_str_in_output": True,
     "min_tokens": 5},
    {"prompt": "Once", "temperature": 0.5, "seed": 1, "max_tokens": 30, "stop_token_ids": [13],
     "logit_bias": {"29": 2.5}},
    {"prompt": "The dog", "temperature": 0.8, "max_tokens": 20},  # unseeded: seeded by its request id
    {"prompt_token_ids": [1], "temperature": 0, "ignore_eos": True, "max_tokens": 100},
    {"prompt": "Sue had a", "temperature": 0.6, "seed": 5, "max_tokens": 12, "skip_special_tokens": False},
]


def python_outputs(model, cases):
    from vllmc import LLM, SamplingParams
    llm = LLM(model)
    prompts, sps = [], []
    for c in cases:
        c = dict(c)
        prompts.append({"prompt_token_ids": c.pop("prompt_token_ids")} if "prompt_token_ids" in c
                       else c.pop("prompt"))
        if "logit_bias" in c:
            c["logit_bias"] = {int(k): v for k, v in c["logit_bias"].items()}
        sps.append(SamplingParams(**c))
    return llm.generate(prompts, sps, use_tqdm=False)


def compare(py, cli):
    assert len(py) == len(cli)
    for i, (p, c) in enumerate(zip(py, cli)):
        assert p.prompt_token_ids == c["prompt_token_ids"], i
        assert len(p.outputs) == len(c["outputs"]), i
        for po, co in zip(p.outputs, c["outputs"]):
            where = f"request {i} output {po.index}"
            assert po.index == co["index"], where
            assert po.text == co["text"], where
            assert po.token_ids == co["token_ids"], where
            assert po.finish_reason == co["finish_reason"], where
            assert po.stop_reason == co["stop_reason"], where
            if co["logprobs"] is None:
                assert po.logprobs is None and po.cumulative_logprob is None, where
                continue
            assert len(po.logprobs) == len(co["logprobs"]), where
            total = 0.0
            for pd, cd in zip(po.logprobs, co["logprobs"]):
                assert list(pd) == [int(k) for k in cd], where  # vLLM's order: sampled token first
                for k, v in cd.items():
                    lp = pd[int(k)]
                    assert (lp.logprob, lp.rank, lp.decoded_token) == (v["logprob"], v["rank"], v["decoded_token"])
                total += next(iter(pd.values())).logprob
            assert math.isclose(po.cumulative_logprob, total, rel_tol=1e-9, abs_tol=1e-9), where


def test_generate_equals_cli_mixed_requests():
    py = python_outputs(STORIES, CASES)
    compare(py, cli_generate(STORIES, CASES, "--generation-config", "vllm"))
    # the cases reach what they mean to: stop strings, stop ids, n, logprobs, lengths
    reasons = {(o.finish_reason, type(o.stop_reason).__name__) for r in py for o in r.outputs}
    assert ("stop", "str") in reasons and ("length", "NoneType") in reasons
    assert len(py[3].outputs) == 3 and len({tuple(o.token_ids) for o in py[3].outputs}) == 3
    assert len(py[8].outputs[0].token_ids) == 100


def test_generate_equals_cli_real_model(smollm2):
    cases = [{"prompt": "The capital of France is", "temperature": 0, "max_tokens": 24},
             {"prompt": "Write a haiku about the sea.", "temperature": 0.7, "seed": 1, "max_tokens": 24,
              "logprobs": 2},
             {"prompt": "Hello", "temperature": 1.0, "top_p": 0.9, "max_tokens": 16, "stop": ["\n"]}]
    compare(python_outputs(smollm2, cases), cli_generate(smollm2, cases, "--generation-config", "vllm"))


REF_GREEDY = r'''
import json, sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
torch.set_num_threads(1)
tok = AutoTokenizer.from_pretrained(sys.argv[1])
m = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32).eval()
ids = tok(sys.argv[2], return_tensors="pt").input_ids
out = m.generate(ids, max_new_tokens=int(sys.argv[3]), do_sample=False)[0].tolist()
full = tok.decode(out, skip_special_tokens=True)
pre = tok.decode(ids[0].tolist(), skip_special_tokens=True)
assert full.startswith(pre)
print(json.dumps({"ids": out[ids.shape[1]:], "text": full[len(pre):]}))
'''


def test_issue_one_liner_prints_reference():
    cmd = ("from vllmc import LLM, SamplingParams; print(LLM('models/stories260K').generate('Once upon a time', "
           "SamplingParams(max_tokens=20, temperature=0))[0].outputs[0].text)")
    out = subprocess.run([sys.executable, "-c", cmd], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    ref = ref_python(REF_GREEDY, STORIES, "Once upon a time", "20")
    assert len(ref["ids"]) == 20
    assert out.stdout == ref["text"] + "\n"


def test_beam_search_equals_cli():
    """LLM.beam_search gives `vllmc generate --beam-width`'s beams (whose own
    reference is transformers' generate(num_beams): tests/test_beam_search_ref.sh)."""
    from vllmc import LLM, BeamSearchParams
    ids = [1, 403, 407]
    cli = cli_generate(STORIES, [{"prompt_token_ids": ids}], "--beam-width", "3", "--max-tokens", "10",
                       "--length-penalty", "0.5")
    out = LLM(STORIES).beam_search([{"prompt_token_ids": ids}],
                                   BeamSearchParams(beam_width=3, max_tokens=10, length_penalty=0.5))
    seqs = out[0].sequences
    assert [s.tokens[len(ids):] for s in seqs] == [o["token_ids"] for o in cli[0]["outputs"]]
    for s, o in zip(seqs, cli[0]["outputs"]):
        assert math.isclose(s.cum_logprob, o["cumulative_logprob"], rel_tol=0, abs_tol=1e-9)
        assert s.tokens[:len(ids)] == ids and isinstance(s.text, str) and s.finish_reason in ("stop", "length")


def test_structured_outputs_equal_cli():
    """SamplingParams.structured_outputs (choice, regex, JSON schema) gives `vllmc generate`'s
    tokens for the same per-line structured_outputs; the texts obey their constraints."""
    import json as _json
    import re
    from vllmc import LLM, SamplingParams, StructuredOutputsParams
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    cons = [{"choice": ["Positive", "Negative"]}, {"regex": "[a-z]{3,8} [0-9]{2}"},
            {"json": schema, "disable_any_whitespace": True}]
    lines = [{"prompt": "Once upon a time", "temperature": 0.7, "seed": 3 + i, "max_tokens": 40,
              "structured_outputs": c} for i, c in enumerate(cons)]
    cli = cli_generate(STORIES, lines)
    llm = LLM(STORIES)
    outs = llm.generate([l["prompt"] for l in lines],
                        [SamplingParams(temperature=0.7, seed=3 + i, max_tokens=40,
                                        structured_outputs=StructuredOutputsParams(**c))
                         for i, c in enumerate(cons)], use_tqdm=False)
    assert [list(o.outputs[0].token_ids) for o in outs] == [c["outputs"][0]["token_ids"] for c in cli]
    texts = [o.outputs[0].text for o in outs]
    assert texts[0] in ("Positive", "Negative")
    assert re.fullmatch(r"[a-z]{3,8} [0-9]{2}", texts[1]), texts[1]
    assert isinstance(_json.loads(texts[2])["ok"], bool), texts[2]

