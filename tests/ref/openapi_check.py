"""openapi_check.py - validates JSON documents against a component of OpenAI's
published OpenAPI spec (../shared/data/openai-openapi/openapi.yaml), with the
`jsonschema` package (an implementation nobody here wrote).

    .venv/bin/python tests/ref/openapi_check.py [--vllm-differences] SPEC NAME COMPONENT < docs.jsonl

One JSON document a line on stdin; prints one result line for all of them:
"ok NAME" when every document validates, else "FAIL NAME: <where>: <why>" for
the first that does not. COMPONENT "ResponseStreamEvent" validates each event
against the component its `type` names (the spec's discriminator over the
anyOf: ResponseTextDeltaEvent for response.output_text.delta, ...), so a
failure names the event and field instead of 60 anyOf branches.

With --vllm-differences, the places where vLLM 0.11 deliberately differs from
OpenAI (and vllm.c keeps vLLM's behaviour; docs/openai_compat.md) are taken
out of each document before it is validated, and only those:
  - `system_fingerprint: null` (vLLM never sets one; OpenAI's is a string);
  - `usage: null` in streamed completion chunks (vLLM serialises completions
    chunks with exclude_unset=False);
  - `logprobs: null` in streamed chat choices (vLLM sets it explicitly);
  - an error's integer `code` (vLLM's ErrorResponse: the HTTP status; OpenAI's
    is a string or null);
  - `usage.prompt_tokens_details: null` (vLLM fills it only with
    --enable-prompt-tokens-details);
  - `finish_reason: null` in streamed choices before the last (OpenAI's own
    streams send null there too; the published schema has no null for it);
  - chat `logprobs` without `refusal` (vLLM's ChatCompletionLogProbs has only
    `content`);
  - null optional fields of a chat message or delta (`function_call`, `audio`,
    `annotations`: vLLM's ChatMessage serialises its unset Optionals as null).
Anything else that does not validate still fails.

Exit 3 (nothing printed) when the spec or jsonschema/yaml is missing: the
caller reports its checks skipped.
"""
import json
import sys

try:
    import jsonschema
    import yaml
except ImportError:
    sys.exit(3)


def vllm_differences(doc):
    if isinstance(doc, dict):
        if doc.get("system_fingerprint", 0) is None:
            del doc["system_fingerprint"]
        if doc.get("object") == "text_completion" and doc.get("usage", 0) is None:
            del doc["usage"]
        usage = doc.get("usage")
        if isinstance(usage, dict) and usage.get("prompt_tokens_details", 0) is None:
            del usage["prompt_tokens_details"]
        for ch in doc.get("choices", []):
            lp = ch.get("logprobs") if isinstance(ch, dict) else None
            if isinstance(lp, dict) and "content" in lp and "refusal" not in lp:
                lp["refusal"] = []
        for ch in doc.get("choices", []):
            for key in ("message", "delta"):
                m = ch.get(key) if isinstance(ch, dict) else None
                for k in ("function_call", "audio", "annotations"):
                    if isinstance(m, dict) and k in m and m[k] is None:
                        del m[k]
        for ch in doc.get("choices", []):  # a final response never has a null finish_reason
            if isinstance(ch, dict):
                if doc.get("object") == "chat.completion.chunk" and ch.get("logprobs", 0) is None:
                    del ch["logprobs"]
                if ch.get("finish_reason", 0) is None:
                    ch["finish_reason"] = "stop"  # stands for the null the schema lacks
        err = doc.get("error")
        if isinstance(err, dict) and isinstance(err.get("code"), int):
            err["code"] = str(err["code"])
    return doc


def main():
    args = sys.argv[1:]
    differences = "--vllm-differences" in args
    args = [a for a in args if a != "--vllm-differences"]
    spec_path, name, component = args[0], args[1], args[2]
    try:
        with open(spec_path) as f:
            spec = yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # libyaml: 10x faster
    except OSError:
        sys.exit(3)
    schemas = spec["components"]["schemas"]

    def validator(comp):
        root = dict(spec)  # the whole document is the root: "#/components/schemas/X" resolves
        root["$ref"] = "#/components/schemas/" + comp
        return jsonschema.Draft202012Validator(root)

    by_type = {}
    if component == "ResponseStreamEvent":
        for ref in schemas[component]["anyOf"]:
            comp = ref["$ref"].rsplit("/", 1)[1]
            t = schemas[comp].get("properties", {}).get("type", {}).get("enum", [None])[0]
            if t:
                by_type[t] = comp
    cache = {}
    n = 0
    for i, line in enumerate(sys.stdin):
        if not line.strip():
            continue
        doc = json.loads(line)
        if differences:
            doc = vllm_differences(doc)
        comp = component
        if by_type:
            comp = by_type.get(doc.get("type"))
            if comp is None:
                print(f"FAIL {name}: document {i}: event type {doc.get('type')!r} is not in the spec")
                return
        v = cache.get(comp) or cache.setdefault(comp, validator(comp))
        err = jsonschema.exceptions.best_match(v.iter_errors(doc))
        if err is not None:
            where = "/".join(str(p) for p in err.absolute_path) or "(root)"
            print(f"FAIL {name}: document {i} ({comp}) at {where}: {err.message[:300]}")
            return
        n += 1
    if n == 0:
        print(f"FAIL {name}: no documents to validate")
        return
    print(f"ok {name}  # {n} documents valid against {component}")


main()
