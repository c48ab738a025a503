#!/usr/bin/env python3
"""Seeds for fuzz_openai_request and fuzz_chat_template (see docs/fuzzing.md).

openai_request/<name>: byte 0 = (prompt_len << 1) | chat, then the body.
chat_template/<name>: template source [ "\n--- context\n" JSON ]; "#llama3" /
"#qwen3" as the source stands for that model's real template.
Run from the repository root: /usr/bin/python3 fuzz/corpus/make_server_seeds.py
"""
import json, os

root = os.path.join(os.path.dirname(os.path.abspath(__file__)))

def write(target, name, data):
    d = os.path.join(root, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())

def req(name, body, chat, prompt_len=5):
    b = body if isinstance(body, bytes) else json.dumps(body).encode()
    write("openai_request", name, bytes([(prompt_len << 1) | int(chat)]) + b)

msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
req("cmpl_min", {"prompt": "Once upon a time"}, False)
req("cmpl_full", {"model": "m", "prompt": ["a", "b"], "max_tokens": 8, "n": 2, "temperature": 0.7,
                  "top_p": 0.9, "top_k": 5, "min_p": 0.1, "seed": 3, "stop": ["\n", "."], "logprobs": 3,
                  "echo": True, "stream": True, "stream_options": {"include_usage": True},
                  "logit_bias": {"5": -100}, "stop_token_ids": [2], "min_tokens": 1,
                  "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1,
                  "ignore_eos": True, "skip_special_tokens": False, "priority": 1}, False)
req("cmpl_ids", {"prompt": [1, 2, 3], "max_tokens": 2}, False)
req("cmpl_ids_batch", {"prompt": [[1, 2], [3]], "max_tokens": 2}, False)
req("cmpl_bad_types", {"prompt": 5, "max_tokens": "x", "n": -1, "temperature": "hot"}, False)
req("cmpl_huge", {"prompt": "x", "max_tokens": 10**12, "n": 10**6, "logprobs": 10**6}, False)
req("cmpl_neg", {"prompt": "x", "max_tokens": -1, "top_p": 0, "stop": [""]}, False)
req("cmpl_stop_list", {"prompt": "x", "stop": ["s%d" % i for i in range(40)]}, False)
req("cmpl_too_long", {"prompt": "x", "max_tokens": 127}, False, 100)
req("chat_min", {"messages": msgs}, True)
req("chat_full", {"model": "m", "messages": msgs + [{"role": "assistant", "content": None,
                  "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}}]},
                  {"role": "tool", "tool_call_id": "c1", "content": "42"}],
                  "max_completion_tokens": 4, "logprobs": True, "top_logprobs": 2, "stream": True,
                  "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
                  "tool_choice": "auto", "chat_template_kwargs": {"enable_thinking": False},
                  "add_generation_prompt": True, "continue_final_message": False, "request_id": "r1"}, True)
req("chat_parts", {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                   {"type": "text", "text": "b"}]}]}, True)
req("chat_bad", {"messages": "hi", "top_logprobs": 30}, True)
req("chat_bad_msg", {"messages": [{"content": 5}, 7, None]}, True)
req("not_json", b"{\"prompt\": \"x\", ", False)
req("not_object", b"[1,2,3]", True)
req("nul_utf8", b"{\"prompt\": \"a\\u0000b\xff\xfe\", \"max_tokens\": 1}", False)
req("deep", b"[" * 300 + b"]" * 300, True)

write("chat_template", "llama3", "#llama3")
write("chat_template", "qwen3", "#qwen3")
write("chat_template", "llama3_tools", "#llama3\n--- context\n" + json.dumps(
    [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]},
     {"role": "tool", "content": "1"}]))
write("chat_template", "qwen3_think", "#qwen3\n--- context\n" + json.dumps({"enable_thinking": False}))
write("chat_template", "qwen3_weird", "#qwen3\n--- context\n" + json.dumps(
    [{"role": "assistant", "content": "<think>a</think>b"}, {"role": 5}, {"content": [1, {"type": "text"}]}]))
write("chat_template", "chatml",
      "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
write("chat_template", "parts",
      "{{ bos_token }}{% for m in messages %}{% for p in m['content'] %}{{ p['text'] | trim }}{% endfor %}{% endfor %}")
write("chat_template", "macro_loop",
      "{% macro f(x, d=1) %}{% if d < 5 %}{{ f(x ~ x, d + 1) }}{% else %}{{ x | length }}{% endif %}{% endmacro %}"
      "{% set ns = namespace(n=0) %}{% for i in range(10) if i is odd %}{% set ns.n = ns.n + i %}"
      "{{ loop.index }}/{{ loop.length }}{% endfor %}{{ f('ab') }}{{ ns.n }}")
write("chat_template", "filters",
      "{{ messages | tojson }}{{ 'a,b' .split(',') | join('-') | upper }}{{ [3,1,2] | sort | first }}"
      "{{ {'a':1}.items() | list }}{{ 'x' * 3 }}{{ messages[-1].content | replace('i','I') }}"
      "{% if 'Hi' in messages | map(attribute='content') | list %}yes{% endif %}{{ strftime_now('%Y') }}")
write("chat_template", "raise", "{% if messages[0].role != 'user' %}{{ raise_exception('first must be user') }}{% endif %}")
write("chat_template", "doubling", "{% set s = namespace(v='ab') %}{% for i in range(64) %}{% set s.v = s.v ~ s.v %}{% endfor %}{{ s.v | length }}")
write("chat_template", "recursion", "{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}{{ r(0) }}")
write("chat_template", "huge_range", "{% for i in range(1000000000) %}{{ i }}{% endfor %}")
write("chat_template", "syntax_error", "{% for m in messages %}{{ m.content }")
write("chat_template", "include", "{% include 'x.j2' %}")
write("chat_template", "whitespace", "  {%- for m in messages -%}\n  {{- m.content -}}  \n{%+ endfor %}{# c #}")

# tool_parser/<name>: byte 0 = tool parser (0 none, 1 hermes, 2 llama3_json, 3 required)
# | reasoning parser << 2 (0 none, 1 qwen3, 2 deepseek_r1); byte 1 = chunk-size seed; then the text
def tool(name, tool_kind, reasoning, text, seed=7):
    write("tool_parser", name, bytes([tool_kind | (reasoning << 2), seed]) + text.encode())

tool("hermes_one", 1, 0, 'Sure.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "n": [1, 2.5]}}\n</tool_call>')
tool("hermes_two", 1, 1, '<think>pick tools</think><tool_call>{"name": "a", "arguments": {}}</tool_call>'
     '<tool_call>{"name": "b", "arguments": {"s": "x\\"y\\u00e9"}}</tool_call>', 3)
tool("hermes_cut", 1, 0, '<tool_call>{"name": "a", "argum')
tool("hermes_bad_json", 1, 0, '<tool_call>{"name": "a", arguments: nope}</tool_call> trailing')
tool("llama3_tag", 2, 0, '<|python_tag|>{"name": "f", "parameters": {"x": 1}}; {"name": "g", "arguments": {"y": "z"}}')
tool("llama3_plain", 2, 2, 'thinking...</think>{"name": "f", "parameters": {"q": "a b"}}', 11)
tool("llama3_text", 2, 0, 'no call here, just { braces')
tool("required_two", 3, 0, '[{"name": "f", "parameters": {"a": [1, {"b": null}]}}, {"name": "g", "parameters": {}}]')
tool("required_cut", 3, 0, '[{"name": "f", "parameters": {"a": "\\')
tool("qwen3_open", 0, 1, '<think>unfinished thought')
tool("r1_end", 0, 2, 'reason</think>\n\nanswer <think> again')
tool("utf8_split", 1, 1, '<think>\xe4\xbd\xa0</think><tool_call>{"name": "\xe5\xa5\xbd", "arguments": {"k": "\xf0\x9f\x98\x80"}}</tool_call>', 1)
