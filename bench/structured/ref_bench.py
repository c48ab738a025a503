#!/usr/bin/env python3
"""ref_bench.py - MaskBench (JSONSchemaBench) with llguidance and XGrammar,
the same methodology and files as `vllmc bench structured`, one thread.

  ref_bench.py --engine llguidance|xgrammar --tokenizer DIR --data DIR
               [--limit N] [--every K] [--json]

For each file (sorted by name, every K-th, at most N): compile the schema
(timed); for each test, text = json.dumps(data, ensure_ascii=False),
tokenized without special tokens; per token fill the mask (timed), check the
token's bit, consume it; after the last token fill the mask once more
(timed) and require EOS in it. Valid instances must be accepted, invalid ones
rejected. Prints the same summary as ours (--json: one JSON line).

Engine settings, chosen to mean what the JSON Schema says (as ours does):
llguidance with flexible whitespace (its default) and lenient off; XGrammar
with any_whitespace=True and strict_mode=False (additionalProperties
defaults to true, as in the spec).
"""
import argparse, json, os, sys, time

def pct(xs, p):
    if not xs:
        return 0.0
    k = (len(xs) - 1) * p / 100.0
    f = int(k)
    c = min(f + 1, len(xs) - 1)
    return xs[f] + (xs[c] - xs[f]) * (k - f)

def summary(name, xs, scale):
    xs = sorted(xs)
    d = {"avg": (sum(xs) / len(xs) if xs else 0) * scale}
    for p in (50, 75, 90, 95, 99, 99.9):
        d["p%g" % p] = pct(xs, p) * scale
    d["max"] = (xs[-1] if xs else 0) * scale
    d["n"] = len(xs)
    return d

class LLG:
    def __init__(self, tok_dir):
        import llguidance, llguidance.hf, llguidance.numpy
        from transformers import AutoTokenizer
        self.hf = AutoTokenizer.from_pretrained(tok_dir)
        self.llg = llguidance
        self.lt = llguidance.hf.from_tokenizer(self.hf)
        self.mask = llguidance.numpy.allocate_token_bitmask(1, self.lt.vocab_size)
        self.fill = llguidance.numpy.fill_next_token_bitmask
        self.eos = self.lt.eos_token
    def compile(self, schema):
        g = self.llg.LLMatcher.grammar_from_json_schema(json.dumps(schema))
        err = self.llg.LLMatcher.validate_grammar(g, self.lt)
        if err:
            raise ValueError(err)
        self.g = g
        return g
    def matcher(self, g):
        return self.llg.LLMatcher(self.lt, g)
    def fill_mask(self, m):
        self.fill(m, self.mask, 0)
        return self.mask[0]
    def allowed(self, mask, t):
        return (int(mask[t >> 5]) >> (t & 31)) & 1
    def accept(self, m, t):
        return m.consume_token(t) and not m.is_error()
    def encode(self, text):
        return self.hf.encode(text, add_special_tokens=False)

class XGR:
    def __init__(self, tok_dir):
        import xgrammar as xgr
        from transformers import AutoTokenizer
        self.xgr = xgr
        self.hf = AutoTokenizer.from_pretrained(tok_dir)
        self.info = xgr.TokenizerInfo.from_huggingface(self.hf)
        self.compiler = xgr.GrammarCompiler(self.info, max_threads=1, cache_enabled=False)
        self.mask = xgr.allocate_token_bitmask(1, self.info.vocab_size)
        self.eos = self.info.stop_token_ids[0]
    def compile(self, schema):
        return self.compiler.compile_json_schema(json.dumps(schema), any_whitespace=True, strict_mode=False)
    def matcher(self, g):
        return self.xgr.GrammarMatcher(g)
    def fill_mask(self, m):
        m.fill_next_token_bitmask(self.mask)
        return self.mask[0]
    def allowed(self, mask, t):
        return (int(mask[t >> 5]) >> (t & 31)) & 1
    def accept(self, m, t):
        return m.accept_token(t)
    def encode(self, text):
        return self.hf.encode(text, add_special_tokens=False)

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", required=True, choices=["llguidance", "xgrammar"])
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--every", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        import torch
        torch.set_num_threads(1)
    except Exception:
        pass
    eng = LLG(a.tokenizer) if a.engine == "llguidance" else XGR(a.tokenizer)
    files = sorted(f for f in os.listdir(a.data) if f.endswith(".json"))[:: a.every]
    if a.limit:
        files = files[: a.limit]
    ct, mt = [], []
    compiled = refused = passing = va = vn = ia = inn = 0
    t_start = time.perf_counter()
    for f in files:
        doc = json.load(open(os.path.join(a.data, f)))
        t0 = time.perf_counter()
        try:
            g = eng.compile(doc["schema"])
        except Exception:
            refused += 1
            continue
        ct.append(time.perf_counter() - t0)
        compiled += 1
        ok_all = True
        for t in doc["tests"]:
            ids = eng.encode(json.dumps(t["data"], ensure_ascii=False))
            m = eng.matcher(g)
            ok = True
            for k in range(len(ids) + 1):
                t0 = time.perf_counter()
                mask = eng.fill_mask(m)
                mt.append(time.perf_counter() - t0)
                if k == len(ids):
                    ok = bool(eng.allowed(mask, eng.eos))
                    break
                if not eng.allowed(mask, ids[k]) or not eng.accept(m, ids[k]):
                    ok = False
                    break
            if t["valid"]:
                vn += 1; va += ok; ok_all &= ok
            else:
                inn += 1; ia += ok; ok_all &= not ok
        passing += ok_all
    res = {"engine": a.engine, "files": len(files), "seconds": time.perf_counter() - t_start,
           "compile_ms": summary("compile", ct, 1e3), "mask_us": summary("mask", mt, 1e6),
           "compiled": compiled, "refused": refused, "passing": passing,
           "valid_accepted": va, "valid": vn, "invalid_accepted": ia, "invalid": inn}
    if a.json:
        print(json.dumps(res))
    else:
        print(json.dumps(res, indent=1))

main()
