"""real_model_schemas.py - response_format json_schema with a real trained
chat model (SmolLM2-135M-Instruct behind `vllmc serve`, served as
"smollm2"): every schema of tests/ref/real_model_schemas.json (written by
hand: objects, arrays, enums, nesting, $defs and recursion, number ranges,
string formats and patterns, optional and nullable fields) is asked for at
once, greedy, and each output must parse (json) and validate (jsonschema,
with format checks, plus date-time and uri read by Python's own parsers)
and end by itself ("stop", not "length").
tests/test_structured_real_py.sh.

    .venv/bin/python tests/ref/real_model_schemas.py BASE_URL [LIMIT]
Prints one "ok NAME" / "FAIL NAME: why" line per schema; with LIMIT, asks
for the first LIMIT schemas and prints "skip NAME: why" for the others
(sanitizer builds, where the model runs several times slower).
"""
import concurrent.futures
import datetime
import json
import os
import sys
import urllib.parse

import jsonschema
import openai

client = openai.OpenAI(base_url=sys.argv[1] + "/v1", api_key="unused", max_retries=0, timeout=240)
cases = json.load(open(os.path.join(os.path.dirname(__file__), "real_model_schemas.json")))
limit = int(sys.argv[2]) if len(sys.argv) > 2 else len(cases)
for c in cases[limit:]:
    print(f"skip real_schema_{c['name']}: a sanitizer build asks for the first {limit} schemas only (all on build/)")
cases = cases[:limit]


def formats_ok(schema, value):
    """date-time and uri, which jsonschema checks only with extra packages."""
    if isinstance(schema, dict):
        if schema.get("format") == "date-time" and isinstance(value, str):
            datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
        if schema.get("format") == "uri" and isinstance(value, str):
            u = urllib.parse.urlparse(value)
            if not u.scheme:
                raise ValueError(f"uri without a scheme: {value!r}")
        for k, sub in schema.get("properties", {}).items():
            if isinstance(value, dict) and k in value:
                formats_ok(sub, value[k])


def run(case):
    r = client.chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": case["prompt"]}], temperature=0, max_tokens=200,
        response_format={"type": "json_schema", "json_schema": {"name": case["name"], "schema": case["schema"]}})
    c = r.choices[0]
    text = c.message.content
    try:
        value = json.loads(text)
        jsonschema.validate(value, case["schema"], format_checker=jsonschema.FormatChecker())
        formats_ok(case["schema"], value)
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {str(e)[:200]}; finish {c.finish_reason}; text {text[:300]!r}"
    if c.finish_reason != "stop":
        return f"finish_reason {c.finish_reason}: {text[:200]!r}"
    return None


with concurrent.futures.ThreadPoolExecutor(len(cases)) as pool:
    def guarded(case):
        try:
            return case["name"], run(case)
        except Exception as e:  # noqa: BLE001 - a 400 or a timeout is the schema's failure
            return case["name"], f"{type(e).__name__}: {str(e)[:300]}"
    results = list(pool.map(guarded, cases))
for name, why in results:
    print(f"ok real_schema_{name}" if not why else f"FAIL real_schema_{name}: {why}")
