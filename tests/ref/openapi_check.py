"""openapi_check.py - validates JSON documents against a component of OpenAI's
published OpenAPI spec (../shared/data/openai-openapi/openapi.yaml), with the
`jsonschema` package (an implementation nobody here wrote).

    .venv/bin/python tests/ref/openapi_check.py SPEC NAME COMPONENT < docs.jsonl

One JSON document a line on stdin; prints one result line for all of them:
"ok NAME" when every document validates, else "FAIL NAME: <where>: <why>" for
the first that does not. COMPONENT "ResponseStreamEvent" validates each event
against the component its `type` names (the spec's discriminator over the
anyOf: ResponseTextDeltaEvent for response.output_text.delta, ...), so a
failure names the event and field instead of 60 anyOf branches.

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


def main():
    spec_path, name, component = sys.argv[1], sys.argv[2], sys.argv[3]
    try:
        with open(spec_path) as f:
            spec = yaml.safe_load(f)
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
