#!/usr/bin/env python3
"""schema_ref.py - checks st_schema_to_gbnf's grammars with independent tools.

Our GBNF (build/tools/schema_gbnf --batch) is compiled by XGrammar
(xgrammar.Grammar.from_ebnf) and each instance text is matched with its
GrammarMatcher.accept_string; the expected answer is the instance's validity,
from jsonschema (Python) for the hand-written cases and from the files' own
labels for MaskBench (which were made with jsonschema).

  schema_ref.py cases FILE [--tool PATH]
      FILE: JSON list of {"name", "schema", "valid": [TEXT...], "invalid":
      [TEXT...], "opts"?: {"disable_any_whitespace": bool}}; prints one
      "ok NAME" / "FAIL NAME: why" line per case (tests/run.sh's format):
      FAIL when jsonschema disagrees with the case's own label (a wrong case)
      or when XGrammar's acceptance of our grammar differs from validity.
  schema_ref.py maskbench DIR [--limit N] [--every K] [--tool PATH] [-v]
      MaskBench's instances (json.dumps(data, ensure_ascii=False)) at string
      level; prints compiled / refused / valid accepted / invalid accepted and
      the refusal reasons; exit 1 if any invalid instance is accepted.
"""
import argparse, collections, json, os, re, subprocess, sys

def load_tools():
    import xgrammar as xgr
    from xgrammar.testing import _get_matcher_from_grammar
    return xgr, _get_matcher_from_grammar

def gbnf_batch(tool, schemas, opts=None):
    args = [tool, "--batch"]
    if opts and opts.get("disable_any_whitespace"):
        args.append("--disable-any-whitespace")
    inp = "".join(json.dumps(s, ensure_ascii=False) + "\n" for s in schemas)
    r = subprocess.run(args, input=inp, capture_output=True, text=True, check=True)
    return [json.loads(l) for l in r.stdout.splitlines()]

def for_xgrammar(g):
    """Our dialect's \\xHH has exactly two digits; XGrammar reads \\x greedily."""
    return re.sub(r'((?:^|[^\\])(?:\\\\)*)\\x([0-9A-Fa-f]{2})', r'\1\\u00\2', g)

def accepts(xgr, mk, grammar, text):
    m = mk(grammar)
    return m.accept_string(text) and m.is_terminated()

def cmd_cases(a):
    import jsonschema
    xgr, mk = load_tools()
    cases = json.load(open(a.file))
    bad = 0
    for c in cases:
        res = gbnf_batch(a.tool, [c["schema"]], c.get("opts"))[0]
        why = None
        if "error" in res:
            want = c.get("error")
            if want is None:
                why = "refused: " + res["error"]
            elif want not in res["error"]:
                why = "error %r does not contain %r" % (res["error"], want)
        elif c.get("error") is not None:
            why = "compiled, expected an error containing %r" % c["error"]
        else:
            try:
                g = xgr.Grammar.from_ebnf(for_xgrammar(res["gbnf"]))
            except Exception as e:
                why = "XGrammar rejects our GBNF: %s" % e
            cls = jsonschema.validators.validator_for(c["schema"], default=jsonschema.Draft202012Validator)
            v = cls(c["schema"], format_checker=cls.FORMAT_CHECKER)
            fmt = c["schema"].get("format") if isinstance(c["schema"], dict) else None
            if fmt in ("date-time", "time", "uri", "hostname") and fmt not in cls.FORMAT_CHECKER.checkers:
                why = "jsonschema cannot check format %s here (pip install rfc3339-validator rfc3987 fqdn)" % fmt
            for want, texts in ((True, c.get("valid", [])), (False, c.get("invalid", []))):
                for t in texts:
                    if why: break
                    try:
                        inst = json.loads(t)
                        ok = v.is_valid(inst)
                    except json.JSONDecodeError:
                        ok = False
                    if ok != want:
                        why = "jsonschema says %s for %s (the case is wrong)" % (ok, t)
                    elif accepts(xgr, mk, g, t) != want:
                        why = "our grammar %s %s" % ("rejects" if want else "accepts", t)
        if why:
            bad += 1
            print("FAIL %s: %s" % (c["name"], why))
        else:
            print("ok %s" % c["name"])
    return 1 if bad else 0

def cmd_maskbench(a):
    xgr, mk = load_tools()
    files = sorted(f for f in os.listdir(a.dir) if f.endswith(".json"))
    files = files[:: a.every]
    if a.limit:
        files = files[: a.limit]
    docs = [json.load(open(os.path.join(a.dir, f))) for f in files]
    res = gbnf_batch(a.tool, [d["schema"] for d in docs])
    n_ok = n_ref = va = vt = ia = it = 0
    reasons = collections.Counter()
    for f, d, r in zip(files, docs, res):
        if "error" in r:
            n_ref += 1
            msg = r["error"]
            reasons[msg.split(": ", 1)[-1][:70]] += 1
            continue
        try:
            g = xgr.Grammar.from_ebnf(for_xgrammar(r["gbnf"]))
        except Exception as e:
            print("XGRAMMAR-REJECTS %s: %s" % (f, str(e)[:200]))
            n_ref += 1
            continue
        n_ok += 1
        for t in d["tests"]:
            text = json.dumps(t["data"], ensure_ascii=False)
            acc = accepts(xgr, mk, g, text)
            if t["valid"]:
                vt += 1
                va += acc
                if not acc and a.verbose:
                    print("valid-rejected %s: %s" % (f, text[:200]))
            else:
                it += 1
                ia += acc
                if acc:
                    print("INVALID-ACCEPTED %s: %s" % (f, text[:300]))
    print("files %d, compiled %d, refused %d" % (len(files), n_ok, n_ref))
    print("valid accepted %d / %d, invalid accepted %d / %d" % (va, vt, ia, it))
    for m, k in reasons.most_common(a.reasons):
        print("  %4d %s" % (k, m))
    return 1 if ia else 0

def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("cases"); c.add_argument("file")
    m = sub.add_parser("maskbench"); m.add_argument("dir")
    m.add_argument("--limit", type=int, default=0); m.add_argument("--every", type=int, default=1)
    m.add_argument("-v", "--verbose", action="store_true"); m.add_argument("--reasons", type=int, default=25)
    for p in (c, m):
        p.add_argument("--tool", default="build/tools/schema_gbnf")
    a = ap.parse_args()
    sys.exit(cmd_cases(a) if a.cmd == "cases" else cmd_maskbench(a))

main()
