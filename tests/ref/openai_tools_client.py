"""openai_tools_client.py - tool calling, reasoning and structural_tag through
`vllmc serve` (stories260K served as "tiny"), driven by the official openai
Python client: tests/test_server_tools_py.sh.

    .venv/bin/python tests/ref/openai_tools_client.py TOOLS_URL REASONING_URL LLAMA_URL

TOOLS_URL: a server with --enable-auto-tool-choice --tool-call-parser
hermes; REASONING_URL: one with --reasoning-parser deepseek_r1 (and no tool
parser); LLAMA_URL: one with --tool-call-parser llama3_json. stories260K never writes a tool call by itself, so the auto checks
force the model's text with a regex (structured outputs apply with
tool_choice auto, as in vLLM) and then check what the hermes parser made of
it against this file's own reading of vLLM's rules (its regex, json.loads,
json.dumps). Streams are accumulated the way client libraries do (tool-call
deltas merged by index) and compared with the non-streamed message.
Prints one "ok NAME" / "FAIL NAME: why" line per check.
"""
import json
import re
import sys

import jsonschema
import openai

tools_url, reasoning_url, llama_url = sys.argv[1], sys.argv[2], sys.argv[3]
L = openai.OpenAI(base_url=llama_url + "/v1", api_key="unused", max_retries=0, timeout=120)
T = openai.OpenAI(base_url=tools_url + "/v1", api_key="unused", max_retries=0, timeout=120)
R = openai.OpenAI(base_url=reasoning_url + "/v1", api_key="unused", max_retries=0, timeout=120)

WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"],
           "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "weather in a city",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "get_time", "description": "time in a city",
                                           "parameters": WEATHER}}]
MSGS = [{"role": "user", "content": "What is the weather in Paris and the time in Rome?"}]
# the text the model is made to write: content, then two hermes calls
FORCE = (r'Sure\.( <tool_call>\{"name": "(get_weather|get_time)", "arguments": '
         r'\{"city": "[A-Z][a-z]{2,8}"\}\}</tool_call>){2}')


def check(name, fn):
    try:
        why = fn()
    except Exception as e:  # noqa: BLE001 - any failure is the check's
        why = f"{type(e).__name__}: {e}"
    print(f"ok {name}" if not why else f"FAIL {name}: {why}")


def hermes_expected(text):
    """vLLM 0.11's Hermes2ProToolParser.extract_tool_calls, read from its source."""
    if "<tool_call>" not in text:
        return [], text
    calls = []
    for m in re.findall(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)", text, re.DOTALL):
        obj = json.loads(m[0] if m[0] else m[1])
        calls.append((obj["name"], json.dumps(obj["arguments"], ensure_ascii=False)))
    content = text[:text.find("<tool_call>")]
    return calls, content or None


def llama3_expected(text):
    """vLLM 0.11's Llama3JsonToolParser.extract_tool_calls, read from its source."""
    if not ("<|python_tag|>" in text or "{" in text):
        return [], text
    m = re.search(r'{[^{}]*(?:{[^{}]*}[^{}]*)*}(?:\s*;\s*{[^{}]*(?:{[^{}]*}[^{}]*)*})*', text, re.DOTALL)
    if not m:
        return [], text
    calls = []
    for part in (p.strip() for p in m.group(0).split(";")):
        if part:
            obj = json.loads(part)
            calls.append((obj["name"], json.dumps(obj["arguments"] if "arguments" in obj else obj["parameters"])))
    return calls, None


def accumulate(stream):
    """Content, reasoning and tool calls from a chat stream, merged as clients do."""
    content, reasoning, calls, finish, first_shapes = "", "", {}, None, []
    for ch in stream:
        if not ch.choices:
            continue
        c = ch.choices[0]
        d = c.delta
        content += d.content or ""
        reasoning += getattr(d, "reasoning_content", None) or ""
        for tc in d.tool_calls or []:
            if tc.index not in calls:
                calls[tc.index] = {"id": tc.id, "type": tc.type, "name": "", "arguments": ""}
                first_shapes.append(bool(tc.id and tc.type == "function" and tc.function and tc.function.name))
            if tc.function and tc.function.name:
                calls[tc.index]["name"] += tc.function.name
            if tc.function and tc.function.arguments:
                calls[tc.index]["arguments"] += tc.function.arguments
        finish = c.finish_reason or finish
    return content, reasoning, [calls[k] for k in sorted(calls)], finish, first_shapes


def msg_calls(m):
    return [(t.function.name, t.function.arguments) for t in (m.tool_calls or [])]


def auto_hermes():
    raw = T.chat.completions.create(model="tiny", messages=MSGS, tools=TOOLS, tool_choice="none", temperature=0,
                                    max_tokens=200, extra_body={"structured_outputs": {"regex": FORCE}})
    text = raw.choices[0].message.content
    want_calls, want_content = hermes_expected(text)
    r = T.chat.completions.create(model="tiny", messages=MSGS, tools=TOOLS, tool_choice="auto", temperature=0,
                                  max_tokens=200, extra_body={"structured_outputs": {"regex": FORCE}})
    c = r.choices[0]
    if msg_calls(c.message) != want_calls or len(want_calls) != 2:
        return f"calls {msg_calls(c.message)} != {want_calls} (text {text!r})"
    if c.message.content != want_content:
        return f"content {c.message.content!r} != {want_content!r}"
    if any(not t.id.startswith("chatcmpl-tool-") or t.type != "function" for t in c.message.tool_calls):
        return f"ids/types {[(t.id, t.type) for t in c.message.tool_calls]}"
    return None if c.finish_reason == "tool_calls" else f"finish_reason {c.finish_reason}"


def auto_hermes_stream():
    kw = dict(model="tiny", messages=MSGS, tools=TOOLS, tool_choice="auto", temperature=0, max_tokens=200,
              extra_body={"structured_outputs": {"regex": FORCE}})
    whole = T.chat.completions.create(**kw).choices[0]
    content, reasoning, calls, finish, shapes = accumulate(T.chat.completions.create(stream=True, **kw))
    got = [(x["name"], x["arguments"]) for x in calls]
    if got != msg_calls(whole.message) or not got:
        return f"streamed calls {got} != {msg_calls(whole.message)}"
    if content != (whole.message.content or ""):
        return f"streamed content {content!r} != {whole.message.content!r}"
    if not all(shapes) or any(not x["id"].startswith("chatcmpl-tool-") for x in calls):
        return "a call's first delta lacks its id, type or name"
    return None if finish == "tool_calls" else f"finish_reason {finish}"


def auto_llama3_json():
    force = (r'\{"name": "get_weather", "parameters": \{"city": "Z\u00fcrich", "days": [1-7]\}\}; '
             r'\{"name": "get_time", "arguments": \{\}\}')
    kw = dict(model="tiny", messages=MSGS, tools=TOOLS, temperature=0, max_tokens=200,
              extra_body={"structured_outputs": {"regex": force}})
    text = L.chat.completions.create(tool_choice="none", **kw).choices[0].message.content
    want_calls, want_content = llama3_expected(text)
    c = L.chat.completions.create(tool_choice="auto", **kw).choices[0]
    if msg_calls(c.message) != want_calls or len(want_calls) != 2 or c.message.content != want_content:
        return f"{msg_calls(c.message)} / {c.message.content!r} != {want_calls} / {want_content!r} (text {text!r})"
    content, _, calls, finish, shapes = accumulate(L.chat.completions.create(tool_choice="auto", stream=True, **kw))
    got = [(x["name"], x["arguments"]) for x in calls]
    if got != want_calls or content or not all(shapes):
        return f"streamed {got} / {content!r}"
    return None if finish == c.finish_reason == "tool_calls" else f"finish {finish} / {c.finish_reason}"


def auto_no_call():
    kw = dict(model="tiny", messages=MSGS, tools=TOOLS, tool_choice="auto", temperature=0, max_tokens=60,
              extra_body={"structured_outputs": {"regex": r"It is sunny in <Paris> today\."}})
    c = T.chat.completions.create(**kw).choices[0]
    if c.message.tool_calls or c.message.content != "It is sunny in <Paris> today." or c.finish_reason != "stop":
        return f"{c.message.content!r} {c.message.tool_calls} {c.finish_reason}"
    content, _, calls, finish, _ = accumulate(T.chat.completions.create(stream=True, **kw))
    return None if content == c.message.content and not calls and finish == "stop" else f"stream {content!r} {calls}"


def required_stream():
    # compact JSON, and "]" (ids 509, 96) favoured: stories260K would spend its
    # tokens on whitespace and list calls forever, which the schema allows
    kw = dict(model="tiny", messages=MSGS, tools=TOOLS, tool_choice="required", temperature=0, max_tokens=400,
              logit_bias={"509": 30, "96": 30}, extra_body={"structured_outputs": {"disable_any_whitespace": True}})
    whole = T.chat.completions.create(**kw).choices[0]
    want = msg_calls(whole.message)
    content, _, calls, finish, shapes = accumulate(T.chat.completions.create(stream=True, **kw))
    got = [(x["name"], x["arguments"]) for x in calls]
    if got != want or not want or not all(shapes):
        return f"streamed {got} != {want}"
    for name, args in want:
        jsonschema.validate(json.loads(args), WEATHER)
        if name not in ("get_weather", "get_time"):
            return f"unknown tool {name}"
    return None if finish == whole.finish_reason == "tool_calls" else f"finish {finish} / {whole.finish_reason}"


def named_stream():
    kw = dict(model="tiny", messages=MSGS, tools=TOOLS, temperature=0, max_tokens=200,
              tool_choice={"type": "function", "function": {"name": "get_time"}})
    whole = T.chat.completions.create(**kw).choices[0]
    want = msg_calls(whole.message)
    content, _, calls, finish, shapes = accumulate(T.chat.completions.create(stream=True, **kw))
    got = [(x["name"], x["arguments"]) for x in calls]
    if got != want or len(want) != 1 or want[0][0] != "get_time" or not all(shapes):
        return f"streamed {got} != {want}"
    jsonschema.validate(json.loads(want[0][1]), WEATHER)
    return None


def auto_needs_flags():
    try:
        R.chat.completions.create(model="tiny", messages=MSGS, tools=TOOLS, tool_choice="auto", max_tokens=5)
    except openai.BadRequestError as e:
        want = '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
        return None if want in str(e) else f"message {e}"
    return "no 400"


def reasoning():
    kw = dict(model="tiny", messages=MSGS, temperature=0, max_tokens=30)
    text = T.chat.completions.create(**kw).choices[0].message.content  # the same greedy text, unparsed
    m = R.chat.completions.create(**kw).choices[0].message
    # deepseek_r1 without "</think>": everything is reasoning, content null
    if getattr(m, "reasoning_content", None) != text or m.content is not None:
        return f"reasoning {getattr(m, 'reasoning_content', None)!r} content {m.content!r}, text {text!r}"
    content, reasoning_text, _, _, _ = accumulate(R.chat.completions.create(stream=True, **kw))
    return None if reasoning_text == text and not content else f"stream {reasoning_text!r} / {content!r}"


def constraint_after_reasoning():
    """The constraint waits for "</think>": the reasoning is the model's free text."""
    kw = dict(model="tiny", messages=MSGS, temperature=0, max_tokens=25)
    free = T.chat.completions.create(**kw).choices[0].message.content
    constrained = T.chat.completions.create(response_format={"type": "json_object"}, **kw).choices[0].message.content
    m = R.chat.completions.create(response_format={"type": "json_object"}, **kw).choices[0].message
    if not constrained.lstrip().startswith("{") or free.lstrip().startswith("{"):
        return f"the JSON constraint did not show: {constrained!r} vs {free!r}"
    return None if getattr(m, "reasoning_content", None) == free else f"{getattr(m, 'reasoning_content', None)!r}"


STAG = {"type": "structural_tag",
        "structures": [{"begin": "<function=get_weather>", "schema": WEATHER, "end": "</function>"}],
        "triggers": ["<function="]}


def structural_tag_text_ok(text):
    """Free text; each "<function=" must open <function=get_weather>{json}</function>."""
    at = 0
    while True:
        i = text.find("<function=", at)
        if i < 0:
            return True
        rest = text[i:]
        if not rest.startswith("<function=get_weather>"):
            return rest.startswith("<function=get_weather>"[:len(rest)])
        body = rest[len("<function=get_weather>"):]
        j = body.find("</function>")
        if j < 0:
            return False
        jsonschema.validate(json.loads(body[:j]), WEATHER)
        at = i + len("<function=get_weather>") + j + len("</function>")


def structural_tag():
    outs = []
    for seed in range(3):
        r = T.chat.completions.create(model="tiny", messages=MSGS, max_tokens=60, temperature=1, seed=seed,
                                      response_format=STAG)
        outs.append(r.choices[0].message.content)
    bad = [o for o in outs if not structural_tag_text_ok(o)]
    return None if not bad else f"{bad}"


def structural_tag_bad():
    bad = dict(STAG, structures=[{"begin": "<tool>", "schema": WEATHER, "end": "</tool>"}])
    try:
        T.chat.completions.create(model="tiny", messages=MSGS, max_tokens=5, response_format=bad)
    except openai.BadRequestError as e:
        return None if "does not start with any of the triggers" in str(e) else f"message {e}"
    return "no 400"


check("py_tools_auto_hermes", auto_hermes)
check("py_tools_auto_hermes_stream", auto_hermes_stream)
check("py_tools_auto_llama3_json", auto_llama3_json)
check("py_tools_auto_no_call", auto_no_call)
check("py_tools_required_stream", required_stream)
check("py_tools_named_stream", named_stream)
check("py_tools_auto_needs_flags", auto_needs_flags)
check("py_reasoning_deepseek_r1", reasoning)
check("py_reasoning_constraint_after", constraint_after_reasoning)
check("py_structural_tag", structural_tag)
check("py_structural_tag_bad", structural_tag_bad)
