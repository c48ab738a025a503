#!/usr/bin/env python3
"""maskbench_xgrammar.py - our matcher on MaskBench schemas, through xgrammar's
JSON-schema-to-EBNF converter (until st_schema_to_gbnf lands), against
xgrammar's own matcher on the same grammar text.

  .venv/bin/python bench/structured/maskbench_xgrammar.py [N] [VLLMC] [TOKENIZER_DIR]

Takes N MaskBench files (../shared/data/maskbench, a seeded shuffle; default
60), converts each schema with xgrammar.Grammar.from_json_schema, runs
`vllmc structured check --grammar` on its test instances (json.dumps,
ensure_ascii=False), and prints: files compiled / refused by our GBNF parser,
compile time percentiles, per-token mask average and per-candidate maximum
mask percentiles, valid / invalid instances accepted (a property of the
converted grammar, not only of the matcher), and how many verdicts
(accepted and complete) equal xgrammar's GrammarMatcher on the same
grammar and tokens. Single process, one thread.
"""
import glob
import json
import random
import subprocess
import sys
import tempfile

import xgrammar as xgr
from transformers import AutoTokenizer

n = int(sys.argv[1]) if len(sys.argv) > 1 else 60
vllmc = sys.argv[2] if len(sys.argv) > 2 else "build/vllmc"
tokdir = sys.argv[3] if len(sys.argv) > 3 else "../shared/tokenizers/llama3"
files = sorted(glob.glob("../shared/data/maskbench/*.json"))
random.Random(5).shuffle(files)
tok = AutoTokenizer.from_pretrained(tokdir)
info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=len(tok))
compiler = xgr.GrammarCompiler(info, max_threads=1)
compile_us, maxes = [], []
mask_total = ntok = 0
valid_ok = valid_n = invalid_ok = invalid_n = refused = agree = disagree = 0
for path in files[:n]:
    d = json.load(open(path))
    try:
        gbnf = str(xgr.Grammar.from_json_schema(json.dumps(d["schema"]), any_whitespace=True))
    except Exception:  # noqa: BLE001
        continue
    tests = [(t["valid"], json.dumps(t["data"], ensure_ascii=False)) for t in d["tests"]]
    with tempfile.NamedTemporaryFile("w", suffix=".gbnf", delete=False) as f:
        f.write(gbnf)
    p = subprocess.run([vllmc, "structured", "check", "--tokenizer", tokdir, "--grammar", f.name],
                       input="".join(json.dumps(t) + "\n" for _, t in tests), capture_output=True, text=True)
    if p.returncode:
        refused += 1
        print("refused", path.split("/")[-1], p.stderr.strip()[:200])
        continue
    out = [json.loads(x) for x in p.stdout.splitlines()]
    compile_us.append(out[0]["compile_us"])
    g = compiler.compile_grammar(gbnf)
    for (valid, text), r in zip(tests, out[1:]):
        ours = r["accepted"] and r["complete"]
        mask_total += r["mask_us_total"]
        ntok += r["tokens"] + 1
        maxes.append(r["mask_us_max"])
        if valid:
            valid_n += 1
            valid_ok += ours
        else:
            invalid_n += 1
            invalid_ok += ours
        m = xgr.GrammarMatcher(g)
        theirs = all(m.accept_token(i) for i in tok.encode(text, add_special_tokens=False))
        theirs = theirs and m.accept_token(info.stop_token_ids[0])
        if ours == theirs:
            agree += 1
        else:
            disagree += 1
            print("verdict differs", path.split("/")[-1], "ours", ours, "xgrammar", theirs, text[:100])


def pct(a, q):
    a = sorted(a)
    return a[min(len(a) - 1, int(len(a) * q))] if a else float("nan")


print(f"files compiled {len(compile_us)}, refused by our GBNF parser {refused}")
print(f"compile us: p50 {pct(compile_us, .5):.0f} p99 {pct(compile_us, .99):.0f} max {max(compile_us):.0f}")
print(f"masks {ntok}: avg {mask_total / ntok:.1f} us; per-candidate max mask: p50 {pct(maxes, .5):.0f} "
      f"p90 {pct(maxes, .9):.0f} max {max(maxes):.0f} us")
print(f"valid accepted {valid_ok}/{valid_n}, invalid accepted {invalid_ok}/{invalid_n} (the converted grammar's)")
print(f"verdicts equal to xgrammar's matcher: {agree}/{agree + disagree}")
