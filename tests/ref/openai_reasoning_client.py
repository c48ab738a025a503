"""openai_reasoning_client.py - reasoning_content from a real trained model
that writes "<think>...</think>" itself: tests/test_reasoning_real_py.sh.

    .venv/bin/python tests/ref/openai_reasoning_client.py PLAIN_URL R1_URL QWEN3_URL

Three `vllmc serve` instances of SmolLM2-135M-Instruct ("smollm2"): PLAIN
without a reasoning parser, R1 with --reasoning-parser deepseek_r1, QWEN3
with --reasoning-parser qwen3. A few-shot conversation whose earlier
assistant turns answer "<think>...</think>N" makes the model write a think
block of its own (greedy). The plain server's text is the model's; what the
parsers make of it is computed here from vLLM 0.11's rules, read from its
DeepSeekR1ReasoningParser / Qwen3ReasoningParser.extract_reasoning_content
(partition on the start tag, then on the end tag; content null when empty),
and compared with the parsed message and with the stream accumulated as
clients do. Then a JSON-schema constraint: with a reasoning parser vLLM
applies it only after the reasoning ends. With the prompt ending in an open
"<think>" (R1's template does that; here the assistant turn is continued),
the reasoning must be the unconstrained one and the content valid JSON
under the schema; with the few-shot prompt alone (its last tag an earlier
turn's "</think>") the reasoning has ended and the schema applies at once.
Prints one "ok NAME" / "FAIL NAME: why" line per check.
"""
import json
import sys

import jsonschema
import openai

plain_url, r1_url, qwen3_url = sys.argv[1:4]
P, D, Q = (openai.OpenAI(base_url=u + "/v1", api_key="unused", max_retries=0, timeout=300)
           for u in (plain_url, r1_url, qwen3_url))
SHOTS = [{"role": "user", "content": "What is 1+1?"}, {"role": "assistant", "content": "<think>one and one</think>2"},
         {"role": "user", "content": "What is 2+1?"}, {"role": "assistant", "content": "<think>two and one</think>3"},
         {"role": "user", "content": "What is 3+1?"}, {"role": "assistant", "content": "<think>three and one</think>4"},
         {"role": "user", "content": "What is 4+1?"}]
KW = dict(model="smollm2", messages=SHOTS, temperature=0, max_tokens=40)
SCHEMA = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"],
          "additionalProperties": False}


def check(name, fn):
    try:
        why = fn()
    except Exception as e:  # noqa: BLE001 - any failure is the check's
        why = f"{type(e).__name__}: {e}"
    print(f"ok {name}" if not why else f"FAIL {name}: {why}")


def r1_expected(text):
    """vLLM's DeepSeekR1ReasoningParser.extract_reasoning_content."""
    before, tag, after = text.partition("<think>")
    text = after if tag else before
    if "</think>" not in text:
        return text, None
    reasoning, _, content = text.partition("</think>")
    return reasoning, content or None


def qwen3_expected(text):
    """vLLM's Qwen3ReasoningParser.extract_reasoning_content."""
    if "<think>" not in text or "</think>" not in text:
        return None, text
    before, tag, after = text.partition("<think>")
    text = after if tag else before
    reasoning, _, content = text.partition("</think>")
    return reasoning, content or None


def stream(client, **kw):
    reasoning, content = "", ""
    for ch in client.chat.completions.create(stream=True, **kw):
        if ch.choices:
            d = ch.choices[0].delta
            reasoning += getattr(d, "reasoning_content", None) or ""
            content += d.content or ""
    return reasoning or None, content or None


TEXT = P.chat.completions.create(**KW).choices[0].message.content


def model_writes_think():
    # the premise of every check below: one think block, then an answer
    ok = TEXT.startswith("<think>") and TEXT.count("</think>") == 1 and not TEXT.endswith("</think>")
    return None if ok else f"the model's greedy text {TEXT!r} has no single think block to parse"


def message(client, expected):
    def run():
        m = client.chat.completions.create(**KW).choices[0].message
        got = (getattr(m, "reasoning_content", None), m.content)
        return None if got == expected(TEXT) else f"{got!r} != {expected(TEXT)!r} (text {TEXT!r})"
    return run


def streamed(client, expected):
    def run():
        got = stream(client, **KW)
        return None if got == expected(TEXT) else f"{got!r} != {expected(TEXT)!r} (text {TEXT!r})"
    return run


# DeepSeek R1's template ends the prompt with "<think>": here the assistant turn is continued from it
OPEN = dict(KW, messages=SHOTS + [{"role": "assistant", "content": "<think>"}],
            extra_body={"continue_final_message": True, "add_generation_prompt": False})
RF = {"type": "json_schema", "json_schema": {"name": "answer", "schema": SCHEMA}}


def few_shot_constrained_at_once():
    """The few-shot prompt's last think tag is an earlier turn's "</think>": the reasoning has
    ended there, so the schema applies from the first token. Asked of the qwen3 parser, which
    reads text without think tags as content (deepseek_r1 would call it all reasoning)."""
    m = Q.chat.completions.create(response_format=RF, **KW).choices[0].message
    jsonschema.validate(json.loads(m.content), SCHEMA)
    return None if getattr(m, "reasoning_content", None) is None else f"reasoning {m.reasoning_content!r}"


def constraint_after_open_think():
    """The prompt ends inside "<think>": the constraint waits for the model's "</think>", so the
    reasoning is the unconstrained one and the content valid under the schema."""
    free = P.chat.completions.create(**OPEN).choices[0].message.content
    if free.count("</think>") != 1:
        return f"the model's continuation {free!r} does not close its think block"
    m = D.chat.completions.create(response_format=RF, **OPEN).choices[0].message
    reasoning = getattr(m, "reasoning_content", None)
    if reasoning != r1_expected(free)[0]:
        return f"reasoning {reasoning!r} != the unconstrained {r1_expected(free)[0]!r}"
    jsonschema.validate(json.loads(m.content), SCHEMA)
    plain = P.chat.completions.create(response_format=RF, **OPEN).choices[0].message.content
    return None if plain.lstrip().startswith("{") else f"without a parser the schema applies at once: {plain!r}"


check("real_reasoning_model_writes_think", model_writes_think)
check("real_reasoning_deepseek_r1", message(D, r1_expected))
check("real_reasoning_deepseek_r1_stream", streamed(D, r1_expected))
check("real_reasoning_qwen3", message(Q, qwen3_expected))
check("real_reasoning_qwen3_stream", streamed(Q, qwen3_expected))
check("real_reasoning_json_after_open_think", constraint_after_open_think)
check("real_reasoning_json_after_ended_prompt", few_shot_constrained_at_once)
