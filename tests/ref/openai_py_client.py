"""openai_py_client.py - drives a running `vllmc serve` (stories260K served as
"tiny") with the official openai Python client (PyPI), a client nobody here
wrote: tests/test_server_openai_py.sh.

    .venv/bin/python tests/ref/openai_py_client.py BASE_URL REFERENCE_JSON BEAMS_JSON

REFERENCE_JSON: models/stories260K/reference_bos_greedy200.json (llama2.c's
greedy run). BEAMS_JSON: `vllmc generate --beam-width 3 --json` for [1, 403]
(whose own reference is transformers: tests/test_beam_search_ref.sh).
Prints one "ok NAME" / "FAIL NAME: why" line per check.
"""
import json
import sys

import jsonschema
import openai

base, ref, beams = sys.argv[1], json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=60)
greedy = ref["greedy_ids"]


def check(name, fn):
    try:
        why = fn()
    except Exception as e:  # noqa: BLE001 - any failure is the check's
        why = f"{type(e).__name__}: {e}"
    print(f"ok {name}" if not why else f"FAIL {name}: {why}")


def greedy_ids():
    r = client.completions.create(model="tiny", prompt=[1], max_tokens=24, temperature=0,
                                  extra_body={"return_token_ids": True})
    ids = r.model_dump()["choices"][0]["token_ids"]
    return None if ids == greedy[:24] else f"{ids} != llama2.c's {greedy[:24]}"


def logprob_tokens():
    r = client.completions.create(model="tiny", prompt="Once upon a time", max_tokens=16, temperature=0, logprobs=2)
    c = r.choices[0]
    toks, offs = c.logprobs.tokens, c.logprobs.text_offset
    if "".join(toks) != c.text:
        return f"tokens {toks} do not concatenate to {c.text!r}"
    if any(c.text[o:o + len(t)] != t for t, o in zip(toks, offs)):
        return f"text_offset {offs} does not index the tokens"
    return None if all(len(t) <= 2 for t in c.logprobs.top_logprobs) else "more than 2 top logprobs"


def chat_stream():
    msgs = [{"role": "user", "content": "Once upon a time"}]
    whole = client.chat.completions.create(model="tiny", messages=msgs, max_tokens=20, temperature=0)
    text, finish = "", None
    for ch in client.chat.completions.create(model="tiny", messages=msgs, max_tokens=20, temperature=0, stream=True,
                                             stream_options={"include_usage": True}):
        if ch.choices:
            text += ch.choices[0].delta.content or ""
            finish = ch.choices[0].finish_reason or finish
    want = whole.choices[0].message.content
    return None if text == want and finish == whole.choices[0].finish_reason else f"{text!r} != {want!r}"


def echo_logprobs():
    r = client.completions.create(model="tiny", prompt=[1, 403, 407], max_tokens=3, temperature=0, echo=True,
                                  logprobs=1)
    lp = r.choices[0].logprobs
    if lp.token_logprobs[0] is not None or len(lp.tokens) != 6:
        return f"token_logprobs {lp.token_logprobs}, {len(lp.tokens)} tokens (want the first None, 3 + 3)"
    return None


def prompt_logprobs():
    r = client.completions.create(model="tiny", prompt=[1, 403, 407, 261], max_tokens=1, temperature=0,
                                  extra_body={"prompt_logprobs": 1})
    pl = r.model_dump()["choices"][0]["prompt_logprobs"]
    if pl[0] is not None or len(pl) != 4:
        return f"prompt_logprobs {pl}"
    # each later position holds its own prompt token
    return None if all(str(t) in pl[i] for i, t in enumerate([1, 403, 407, 261]) if i) else f"{pl}"


def beam_search():
    r = client.completions.create(model="tiny", prompt=[1, 403], max_tokens=10, n=3, temperature=0,
                                  extra_body={"use_beam_search": True, "ignore_eos": True, "return_token_ids": True})
    got = [c["token_ids"] for c in r.model_dump()["choices"]]
    want = [o["token_ids"] for o in beams["outputs"]]
    return None if got == want else f"{got} != {want}"


def responses():
    r = client.responses.create(model="tiny", input="Once upon a time", max_output_tokens=20, temperature=0)
    chat = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Once upon a time"}],
                                          max_tokens=20, temperature=0)
    if r.output_text != chat.choices[0].message.content:
        return f"{r.output_text!r} != chat's {chat.choices[0].message.content!r}"
    events = [e.type for e in client.responses.create(model="tiny", input="Once upon a time", max_output_tokens=8,
                                                      temperature=0, stream=True)]
    return None if events[0] == "response.created" and events[-1] == "response.completed" else f"{events}"


def json_schema():
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                               "age": {"type": "integer", "minimum": 0, "maximum": 120}},
              "required": ["name", "age"], "additionalProperties": False}
    r = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Who?"}], max_tokens=400,
                                       temperature=0.8, seed=4,
                                       response_format={"type": "json_schema",
                                                        "json_schema": {"name": "person", "schema": schema}})
    if r.choices[0].finish_reason != "stop":
        return f"finish_reason {r.choices[0].finish_reason}: {r.choices[0].message.content!r}"
    obj = json.loads(r.choices[0].message.content)
    jsonschema.validate(obj, schema)
    return None


def bad_request():
    try:
        client.completions.create(model="tiny", prompt="x", max_tokens=2, extra_body={"logits_processors": ["x"]})
    except openai.BadRequestError as e:
        return None if "logits_processors" in str(e) else f"the error does not name the field: {e}"
    return "no BadRequestError"


for name, fn in [("py_greedy_is_llama2c", greedy_ids), ("py_logprob_tokens_and_offsets", logprob_tokens),
                 ("py_chat_stream", chat_stream), ("py_echo_logprobs", echo_logprobs),
                 ("py_prompt_logprobs", prompt_logprobs), ("py_beam_search", beam_search),
                 ("py_responses", responses), ("py_json_schema", json_schema), ("py_bad_request", bad_request)]:
    check(name, fn)
