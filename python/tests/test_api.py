"""vLLM's offline API surface: the output objects' documented attributes and
their types, SamplingParams' defaults and validation messages (copied from
vLLM 0.11's vllm/sampling_params.py, by hand), prompt forms, errors from C
as Python exceptions, NotImplementedError for what vllm.c lacks, the GIL
released while the engine steps, Ctrl-C, the tqdm bar, prefix caching and
metrics."""
import os
import subprocess
import sys
import threading
import time

import pytest

from conftest import REPO, STORIES


def test_output_attributes_and_types(llm):
    from vllmc import CompletionOutput, Logprob, RequestOutput, SamplingParams
    out = llm.generate(["Once upon a time", "The cat"], SamplingParams(temperature=0.8, seed=1, max_tokens=12,
                                                                      logprobs=2), use_tqdm=False)
    assert isinstance(out, list) and len(out) == 2
    ro = out[0]
    assert isinstance(ro, RequestOutput)
    expected = {"request_id": str, "prompt": str, "prompt_token_ids": list, "prompt_logprobs": type(None),
                "outputs": list, "finished": bool, "lora_request": type(None), "encoder_prompt": type(None),
                "encoder_prompt_token_ids": type(None), "num_cached_tokens": int, "multi_modal_placeholders": dict,
                "kv_transfer_params": type(None)}
    for name, t in expected.items():
        assert isinstance(getattr(ro, name), t), name
    assert ro.metrics is not None and ro.metrics.first_token_ts >= ro.metrics.arrival_time > 0
    assert ro.finished is True and ro.prompt == "Once upon a time"
    assert all(isinstance(t, int) for t in ro.prompt_token_ids)
    assert int(out[1].request_id) == int(ro.request_id) + 1
    co = ro.outputs[0]
    assert isinstance(co, CompletionOutput)
    expected = {"index": int, "text": str, "token_ids": list, "cumulative_logprob": float, "logprobs": list,
                "finish_reason": str, "stop_reason": type(None), "lora_request": type(None)}
    for name, t in expected.items():
        assert isinstance(getattr(co, name), t), name
    assert co.finished() and co.finish_reason == "length" and len(co.token_ids) == 12
    assert all(isinstance(t, int) for t in co.token_ids)
    assert len(co.logprobs) == 12
    for pos, d in zip(co.token_ids, co.logprobs):
        assert isinstance(d, dict) and list(d)[0] == pos and 2 <= len(d) <= 3
        for tid, lp in d.items():
            assert isinstance(tid, int) and isinstance(lp, Logprob)
            assert isinstance(lp.logprob, float) and lp.logprob <= 0
            assert isinstance(lp.rank, int) and lp.rank >= 1 and isinstance(lp.decoded_token, str)
    assert abs(co.cumulative_logprob - sum(d[t].logprob for t, d in zip(co.token_ids, co.logprobs))) < 1e-6
    # stop reasons: a stop string, a stop token id
    o = llm.generate("Once upon a time", SamplingParams(temperature=0, max_tokens=30, stop=["girl"]),
                     use_tqdm=False)[0].outputs[0]
    assert (o.finish_reason, o.stop_reason) == ("stop", "girl") and "girl" not in o.text
    ids = llm.generate("Once upon a time", SamplingParams(temperature=0, max_tokens=30),
                       use_tqdm=False)[0].outputs[0].token_ids
    o = llm.generate("Once upon a time", SamplingParams(temperature=0, max_tokens=30, stop_token_ids=[ids[3]]),
                     use_tqdm=False)[0].outputs[0]
    assert (o.finish_reason, o.stop_reason, o.token_ids) == ("stop", ids[3], ids[:4])


def test_sampling_params_defaults():
    from vllmc import SamplingParams
    from vllmc.sampling_params import RequestOutputKind
    sp = SamplingParams()
    expected = dict(n=1, best_of=None, presence_penalty=0.0, frequency_penalty=0.0, repetition_penalty=1.0,
                    temperature=1.0, top_p=1.0, top_k=0, min_p=0.0, seed=None, stop=[], stop_token_ids=[],
                    ignore_eos=False, max_tokens=16, min_tokens=0, logprobs=None, prompt_logprobs=None,
                    detokenize=True, skip_special_tokens=True, spaces_between_special_tokens=True,
                    logits_processors=None, include_stop_str_in_output=False, truncate_prompt_tokens=None,
                    output_kind=RequestOutputKind.CUMULATIVE, structured_outputs=None, guided_decoding=None,
                    logit_bias=None, allowed_token_ids=None, extra_args=None, bad_words=[])
    for k, v in expected.items():
        assert getattr(sp, k) == v, k
    # greedy forces top_p/top_k/min_p; a string stop becomes a list; seed -1 means none
    g = SamplingParams(temperature=0, top_p=0.5, top_k=3, min_p=0.2, stop="x", seed=-1)
    assert (g.top_p, g.top_k, g.min_p, g.stop, g.seed) == (1.0, 0, 0.0, ["x"], None)
    assert SamplingParams(temperature=0.001).temperature == 0.01


VALIDATION = [  # vLLM 0.11's messages, from vllm/sampling_params.py
    (dict(n=0), "n must be at least 1, got 0."),
    (dict(presence_penalty=2.5), "presence_penalty must be in [-2, 2], got 2.5."),
    (dict(frequency_penalty=-3.0), "frequency_penalty must be in [-2, 2], got -3.0."),
    (dict(repetition_penalty=0.0), "repetition_penalty must be greater than zero, got 0.0."),
    (dict(temperature=-1.0), "temperature must be non-negative, got -1.0."),
    (dict(top_p=0.0), "top_p must be in (0, 1], got 0.0."),
    (dict(top_k=-2), "top_k must be 0 (disable), or at least 1, got -2."),
    (dict(min_p=1.5), "min_p must be in [0, 1], got 1.5."),
    (dict(max_tokens=0), "max_tokens must be at least 1, got 0."),
    (dict(min_tokens=-1), "min_tokens must be greater than or equal to 0, got -1."),
    (dict(max_tokens=4, min_tokens=5), "min_tokens must be less than or equal to max_tokens=4, got 5."),
    (dict(logprobs=-2), "logprobs must be non-negative or -1, got -2."),
    (dict(prompt_logprobs=-5), "prompt_logprobs must be non-negative or -1, got -5."),
    (dict(truncate_prompt_tokens=0), "truncate_prompt_tokens must be an integer >= 1 or -1, got 0"),
    (dict(stop=["a", ""]), "stop cannot contain an empty string."),
    (dict(stop=["a"], detokenize=False),
     "stop strings are only supported when detokenize is True. Set detokenize=True to use stop."),
    (dict(temperature=0, n=2), "n must be 1 when using greedy sampling, got 2."),
    (dict(n=3, best_of=2), "best_of must be greater than or equal to n, got n=3 and best_of=2."),
]


def test_sampling_params_validation_messages():
    from vllmc import SamplingParams
    for kwargs, message in VALIDATION:
        with pytest.raises(ValueError) as e:
            SamplingParams(**kwargs)
        assert str(e.value) == message, kwargs


def test_engine_checks_as_vllm(llm):
    """What vLLM checks when a request is added (its processor), from C."""
    from vllmc import SamplingParams
    with pytest.raises(ValueError, match=r"^Requested sample logprobs of 21, which is greater than max allowed: 20$"):
        llm.generate("x", SamplingParams(logprobs=21), use_tqdm=False)
    with pytest.raises(ValueError, match="vLLM V1 does not yet support best_of."):
        llm.generate("x", SamplingParams(n=1, best_of=2), use_tqdm=False)
    with pytest.raises(ValueError, match="The lengths of prompts and sampling_params must be the same."):
        llm.generate(["a", "b"], [SamplingParams()], use_tqdm=False)
    with pytest.raises(ValueError, match="Got priority 1 but Priority scheduling is not enabled."):
        llm.generate(["a"], SamplingParams(), use_tqdm=False, priority=[1])
    # errors from C carry the C message: a prompt past max_model_len, a token outside the vocabulary
    with pytest.raises(ValueError, match="512"):
        llm.generate({"prompt_token_ids": [1] * 600}, SamplingParams(), use_tqdm=False)
    with pytest.raises(ValueError, match="9999"):
        llm.generate({"prompt_token_ids": [1, 9999]}, SamplingParams(), use_tqdm=False)
    with pytest.raises(OSError, match="no-such-model"):
        from vllmc import LLM
        LLM("models/no-such-model")
    # and the engine is still usable
    assert llm.generate("Once", SamplingParams(max_tokens=3), use_tqdm=False)[0].outputs[0].token_ids


def test_structural_tag(llm):
    """structured_outputs.structural_tag (vLLM's JSON string): free text until a
    trigger, then the structure's begin, JSON per its schema and its end; a
    structure whose begin starts with no trigger does not compile: a ValueError
    naming the problem when the engine knows it at add_request, else the
    request finishes with finish_reason "error" (the message is logged), as
    every constraint that fails to compile in the engine."""
    import json as _json
    import re
    from vllmc import SamplingParams, StructuredOutputsParams
    tag = {"structures": [{"begin": "<f>", "schema": {"enum": [1, 2]}, "end": "</f>"}], "triggers": ["<f"]}
    for seed in range(3):
        sp = SamplingParams(max_tokens=40, temperature=1, seed=seed,
                            structured_outputs=StructuredOutputsParams(structural_tag=_json.dumps(tag)))
        text = llm.generate("Once upon a time", sp, use_tqdm=False)[0].outputs[0].text
        rest = re.sub(r"<f>[12]</f>", "", text)
        cut = rest[rest.find("<f"):] if "<f" in rest else ""  # a structure cut short by max_tokens
        assert not cut or "<f>1</f>".startswith(cut) or "<f>2</f>".startswith(cut), text
    bad = dict(tag, triggers=["<g"])
    sp = SamplingParams(max_tokens=5, structured_outputs=StructuredOutputsParams(structural_tag=_json.dumps(bad)))
    try:
        out = llm.generate("x", sp, use_tqdm=False)[0].outputs[0]
        assert out.finish_reason == "error" and out.text == "", (out.finish_reason, out.text)
    except ValueError as e:
        assert "does not start with any of the triggers" in str(e), e


def test_not_implemented_features(llm):
    from vllmc import LLM, BeamSearchParams, LoRARequest, SamplingParams, StructuredOutputsParams
    cases = [
        (lambda: llm.beam_search(["x"], BeamSearchParams(beam_width=2, max_tokens=4, include_stop_str_in_output=True)),
         "include_stop_str_in_output"),
        (lambda: llm.beam_search(["x"], BeamSearchParams(beam_width=2, max_tokens=4),
                                 lora_request=LoRARequest("a", 1, "/tmp")), "LoRA"),
        (lambda: LLM(STORIES, tensor_parallel_size=2), "tensor parallelism"),
        (lambda: llm.generate("x", SamplingParams(prompt_logprobs=1), use_tqdm=False), "prompt logprobs"),
        (lambda: LLM(STORIES, speculative_config={"method": "eagle", "num_speculative_tokens": 2}), "eagle"),
        (lambda: llm.embed("x"), "pooling"),
    ]
    for fn, word in cases:
        with pytest.raises(NotImplementedError, match=word):
            fn()
    with pytest.raises(TypeError, match="unexpected keyword argument 'no_such_arg'"):
        LLM(STORIES, no_such_arg=1)
    LLM(STORIES, swap_space=4, gpu_memory_utilization=0.5, enforce_eager=True)  # accepted, unused


def test_speculative_draft_model(llm):
    """A draft model (vLLM's speculative_config "model"): stories260K drafting
    for itself with exact verification; its greedy drafts are the target's own
    argmaxes, so every draft is accepted, and the tokens are the ones without
    speculation, bit for bit."""
    from vllmc import LLM, SamplingParams
    prompts = ["Once upon a time", "Lily and Tom went to the park.", "The dog"]
    sp = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    ref = [o.outputs[0].token_ids for o in llm.generate(prompts, sp, use_tqdm=False)]
    spec = LLM(STORIES, speculative_config={"model": STORIES, "num_speculative_tokens": 3, "adaptive": False,
                                            "draft_token_acceptance_method": "exact"})
    out = [o.outputs[0].token_ids for o in spec.generate(prompts, sp, use_tqdm=False)]
    assert out == ref
    m = {x.name: x.value for x in spec.get_metrics()}
    assert 0 < m["vllm:spec_decode_num_drafts"] <= m["vllm:spec_decode_num_draft_tokens"]
    assert m["vllm:spec_decode_num_accepted_tokens"] == m["vllm:spec_decode_num_draft_tokens"], m
    m0 = {x.name: x.value for x in llm.get_metrics()}
    assert m0["vllm:spec_decode_num_draft_tokens"] == 0
    with pytest.raises(ValueError, match="needs a 'model'"):
        LLM(STORIES, speculative_config={"method": "draft_model", "num_speculative_tokens": 2})
    with pytest.raises(ValueError, match="draft_token_acceptance_method"):
        LLM(STORIES, speculative_config={"model": STORIES, "num_speculative_tokens": 2,
                                         "draft_token_acceptance_method": "typical"})


def test_prompt_forms(llm):
    from vllmc import SamplingParams, TokensPrompt
    sp = SamplingParams(temperature=0, max_tokens=8)
    tok = llm.get_tokenizer()
    ids = tok.encode("Once upon a time")
    assert tok.decode(ids, skip_special_tokens=True) == "Once upon a time"
    a = llm.generate("Once upon a time", sp, use_tqdm=False)
    b = llm.generate(["Once upon a time"], sp, use_tqdm=False)
    c = llm.generate([TokensPrompt(prompt_token_ids=ids)], sp, use_tqdm=False)
    d = llm.generate({"prompt": "Once upon a time"}, sp, use_tqdm=False)
    texts = {x[0].outputs[0].text for x in (a, b, c, d)}
    assert len(texts) == 1 and a[0].prompt_token_ids == ids == c[0].prompt_token_ids
    assert c[0].prompt is None
    # per-prompt sampling params, in input order
    many = llm.generate(["Once", "Once"], [SamplingParams(max_tokens=3), SamplingParams(max_tokens=5)],
                        use_tqdm=False)
    assert [len(r.outputs[0].token_ids) for r in many] == [3, 5]
    # truncate_prompt_tokens keeps the last k prompt tokens
    t = llm.generate("Once upon a time", SamplingParams(temperature=0, max_tokens=3, truncate_prompt_tokens=2),
                     use_tqdm=False)[0]
    assert t.prompt_token_ids == ids[-2:]
    # the defaults of generation_config.json when no params are given (stories260K's has none to give)
    assert llm.get_default_sampling_params() == SamplingParams()


def test_gil_released_while_stepping(llm):
    from vllmc import SamplingParams
    counter = [0]
    stop = threading.Event()

    def count():
        while not stop.is_set():
            counter[0] += 1

    t = threading.Thread(target=count)
    t.start()
    try:
        before = counter[0]
        t0 = time.perf_counter()
        llm.generate(["Once upon a time"] * 32, SamplingParams(temperature=0.8, max_tokens=300, ignore_eos=True),
                     use_tqdm=False)
        elapsed = time.perf_counter() - t0
        during = counter[0] - before
    finally:
        stop.set()
        t.join()
    # the other thread ran while generate did; held GIL would leave it only the 5 ms switch interval slices
    rate = during / elapsed
    assert elapsed > 0.2 and during > 1000, (elapsed, during)
    t0 = time.perf_counter()
    base = 0
    while time.perf_counter() - t0 < 0.2:
        base += 1
    assert rate > 0.2 * base / 0.2, (rate, base / 0.2)


CTRL_C = r'''
import os, signal, sys, threading, time
from vllmc import LLM, SamplingParams
llm = LLM(sys.argv[1])
sp = SamplingParams(temperature=0.8, max_tokens=500, ignore_eos=True)
threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
t0 = time.perf_counter()
try:
    llm.generate(["Once upon a time"] * 256, sp, use_tqdm=False)
    print("not interrupted")
except KeyboardInterrupt:
    print(f"interrupted after {time.perf_counter() - t0:.2f} s")
# the engine is empty and works again: the same greedy text as a fresh engine's
g = SamplingParams(temperature=0, max_tokens=10)
print(repr(llm.generate("Once upon a time", g, use_tqdm=False)[0].outputs[0].text))
print(repr(LLM(sys.argv[1]).generate("Once upon a time", g, use_tqdm=False)[0].outputs[0].text))
'''


def test_ctrl_c_aborts_cleanly():
    out = subprocess.run([sys.executable, "-c", CTRL_C, STORIES], capture_output=True, text=True, timeout=120,
                         cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines[0].startswith("interrupted after "), lines
    assert float(lines[0].split()[2]) < 1.5, lines  # signalled at 0.5 s; a full run takes several
    assert lines[1] == lines[2] and len(lines[1]) > 5, lines


TQDM = r'''
import sys
from vllmc import LLM, SamplingParams
llm = LLM(sys.argv[1])
llm.generate(["Once upon a time"] * 5, SamplingParams(max_tokens=8), use_tqdm=sys.argv[2] == "1")
'''


def test_tqdm_progress_bar():
    pytest.importorskip("tqdm")
    on = subprocess.run([sys.executable, "-c", TQDM, STORIES, "1"], capture_output=True, text=True, timeout=60,
                        cwd=REPO)
    off = subprocess.run([sys.executable, "-c", TQDM, STORIES, "0"], capture_output=True, text=True, timeout=60,
                         cwd=REPO)
    assert on.returncode == 0 and off.returncode == 0, on.stderr + off.stderr
    assert "Processed prompts: 100%" in on.stderr and "5/5" in on.stderr and "est. speed input:" in on.stderr
    assert "Processed prompts" not in off.stderr


def test_prefix_cache_reset_and_metrics():
    from vllmc import LLM, SamplingParams
    llm = LLM(STORIES)
    prompt = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park."
    sp = SamplingParams(temperature=0, max_tokens=4)
    n = len(llm.get_tokenizer().encode(prompt))
    first = llm.generate(prompt, sp, use_tqdm=False)[0]
    second = llm.generate(prompt, sp, use_tqdm=False)[0]
    # whole blocks of the prompt at least; the last prompt token is always computed
    assert first.num_cached_tokens == 0 and (n - 1) // 16 * 16 <= second.num_cached_tokens <= n - 1
    assert n > 16
    assert llm.reset_prefix_cache() is True
    third = llm.generate(prompt, sp, use_tqdm=False)[0]
    assert third.num_cached_tokens == 0
    assert first.outputs[0].text == second.outputs[0].text == third.outputs[0].text
    m = {x.name: x.value for x in llm.get_metrics()}
    assert m["vllm:prompt_tokens"] == 3 * n and m["vllm:generation_tokens"] == 12
    assert m["vllm:request_success"] == 3 and m["vllm:prefix_cache_hits"] == second.num_cached_tokens
    assert m["vllm:num_requests_running"] == 0


def test_vllmc_command_installed():
    from conftest import vllmc_command
    exe = vllmc_command()
    assert exe and os.path.exists(exe)
    out = subprocess.run([exe, "generate", "--model", STORIES, "--prompt", "Once upon a time", "--max-tokens", "20",
                          "--temperature", "0"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    from vllmc import LLM, SamplingParams
    ours = LLM(STORIES).generate("Once upon a time", SamplingParams(max_tokens=20, temperature=0),
                                 use_tqdm=False)[0].outputs[0].text
    assert out.stdout == ours + "\n"


def test_engine_args_reach_engine():
    from vllmc import LLM, SamplingParams
    llm = LLM(STORIES, max_model_len=128, block_size=32, max_num_seqs=4, max_num_batched_tokens=256,
              enable_prefix_caching=False, kv_cache_memory_bytes=8 << 20, seed=5, kv_cache_dtype="float32",
              scheduling_policy="priority", swap_space=4)
    info = llm._engine.info()
    assert (info["max_model_len"], info["block_size"], info["max_num_seqs"], info["max_num_batched_tokens"]) == \
        (128, 32, 4, 256)
    assert info["enable_prefix_caching"] is False and info["kv_cache_storage_dtype"] == "float32"
    assert info["kv_cache_memory_bytes"] <= 8 << 20
    with pytest.raises(ValueError, match="128"):
        llm.generate({"prompt_token_ids": [1] * 130}, SamplingParams(), use_tqdm=False)
    # priority scheduling is on: priorities are accepted
    out = llm.generate(["Once", "Once"], SamplingParams(max_tokens=2), use_tqdm=False, priority=[1, 0])
    assert len(out) == 2
    # the engine seed seeds requests that give none: another seed, other samples
    sp = SamplingParams(temperature=1.0, max_tokens=24)
    a = LLM(STORIES, seed=5).generate("Once", sp, use_tqdm=False)[0].outputs[0].token_ids
    b = LLM(STORIES, seed=5).generate("Once", sp, use_tqdm=False)[0].outputs[0].token_ids
    c = LLM(STORIES, seed=6).generate("Once", sp, use_tqdm=False)[0].outputs[0].token_ids
    assert a == b != c
    with pytest.raises(NotImplementedError, match="dtype"):
        LLM(STORIES, dtype="float16")
