#!/usr/bin/env python3
"""structured_ref.py - independent references for the structured-outputs matcher.

  structured_ref.py xgrammar VLLMC TOKENIZER_DIR
      For each grammar and text below: `vllmc structured check --print-masks`
      walks the text's tokens and prints every step's mask; xgrammar (its own
      GBNF parser, pushdown automaton and token cache) walks the same ids and
      fills its bitmask. The whole masks must be equal over the ids our
      vocabulary allows (xgrammar keeps the special tokens' text as ordinary
      tokens; we never allow them, structured.h), and the EOS bit must be
      equal too. Prints "ok xgrammar_NAME" or "FAIL xgrammar_NAME: why".
      Needs transformers and xgrammar (tests/ref/requirements.txt).

  structured_ref.py regex VLLMC TOKENIZER_DIR TAG
      Regexes against Python's re.fullmatch on hand-picked and random strings:
      a text the regex matches must be accepted and complete, any other must
      not be (rejected at some token, or incomplete). Patterns avoid what
      differs between ECMA-262 and Python (\\s, \\w on non-ASCII, `.` and \\r).
      TAG "spm" for a SentencePiece tokenizer (see cmd_regex), "bpe" else.
      Prints "ok regex_TAG_N" or "FAIL regex_TAG_N: why".
"""
import json
import random
import re
import subprocess
import sys
import tempfile

JSON_GBNF = r'''root ::= value
value ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws ( member ( "," ws member )* )? "}" ws
member ::= string ":" ws value
array ::= "[" ws ( value ( "," ws value )* )? "]" ws
string ::= "\"" ( [^"\\\x00-\x1f] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\"" ws
number ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )? ws
ws ::= [ \t\n]{0,3}
'''

GRAMMARS = {
    "json": (JSON_GBNF, ['{"name": "Ünïcode ✓", "n": [1, -2.5e3, true, null], "o": {"k": "v\\n"}}',
                         '[{"a":1},{"b":[2,3]}, "x y z", false]']),
    "arith_left_recursive": ('root ::= expr\nexpr ::= expr ("+" | "-") term | term\n'
                             'term ::= term ("*" | "/") factor | factor\n'
                             'factor ::= [0-9]+ | "(" expr ")"\n',
                             ["12+(34*5-6)/78", "((1))*2"]),
    "utf8_classes": ('root ::= ([α-ω] | [一-龥] | [ -~])+ "." [^\\x00-\\x7F]{1,3}\n',
                     ["hello αβγ 中文 test.ü✓", "ab.中文字"]),
    "repetition": ('root ::= "id-" [0-9]{3} "-" [a-z]{2,4} ("," [A-Z]{1,})* "!"?\n',
                   ["id-123-abcd,XYZ,Q!", "id-007-zz"]),
    "nullable": ('root ::= a b "=" a c\na ::= "" | "x" a\nb ::= a a\nc ::= "" | "yes" | "no"\n',
                 ["xxx=xyes", "=no"]),
    "right_recursive": ('root ::= "[" items "]"\nitems ::= item "," items | item\n'
                        'item ::= "\\"" chars\nchars ::= [^"\\\\] chars | "\\\\" [nt"] chars | "\\""\n',
                        ['["ab\\n","c\\"d","é✓"]', '["x"]']),
    "dates_regexlike": ('root ::= [0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" [0-3] [0-9] ( "T" [0-2] [0-9] ":" '
                        '[0-5] [0-9] ":" [0-5] [0-9] "Z" )?\n', ["2024-11-26T10:15:00Z", "1999-01-31"]),
}


def run_ours(vllmc, tok_dir, gbnf, text):
    with tempfile.NamedTemporaryFile("w", suffix=".gbnf", delete=False) as f:
        f.write(gbnf)
        path = f.name
    p = subprocess.run([vllmc, "structured", "check", "--tokenizer", tok_dir, "--grammar", path, "--print-masks"],
                       input=json.dumps(text) + "\n", capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError("vllmc failed: " + p.stderr.strip())
    lines = [json.loads(x) for x in p.stdout.splitlines()[1:]]
    steps = [x for x in lines if "mask" in x]
    return steps, lines[-1]


def words(hexstr):
    return [int(hexstr[i:i + 8], 16) for i in range(0, len(hexstr), 8)]


def cmd_xgrammar(vllmc, tok_dir):
    try:
        import numpy as np
        import xgrammar as xgr
        from transformers import AutoTokenizer
    except Exception as e:  # noqa: BLE001
        for name in GRAMMARS:
            print(f"skip xgrammar_{name}: xgrammar or transformers not installed ({e.__class__.__name__})")
        return
    tok = AutoTokenizer.from_pretrained(tok_dir)
    n = len(tok)
    info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=n)
    compiler = xgr.GrammarCompiler(info, max_threads=1)
    special = set(getattr(tok, "all_special_ids", [])) | {i for i, t in tok.added_tokens_decoder.items() if t.special}
    eos = info.stop_token_ids
    for name, (gbnf, texts) in GRAMMARS.items():
        why = None
        try:
            cg = compiler.compile_grammar(gbnf)
            for text in texts:
                steps, result = run_ours(vllmc, tok_dir, gbnf, text)
                if not result["accepted"] or not result["complete"]:
                    why = f"ours rejected {text!r}: {result}"
                    break
                m = xgr.GrammarMatcher(cg)
                bm = xgr.allocate_token_bitmask(1, n)
                for k, st in enumerate(steps):
                    m.fill_next_token_bitmask(bm)
                    theirs = bm.numpy().view(np.uint32)[0]
                    ours = words(st["mask"])
                    diff = []
                    for w in range(len(ours)):
                        x = ours[w] ^ int(theirs[w])
                        while x:
                            b = (x & -x).bit_length() - 1
                            tid = w * 32 + b
                            if tid < n and tid not in special:
                                diff.append((tid, (ours[w] >> b) & 1))
                            x &= x - 1
                    e_ours = [(ours[e // 32] >> (e % 32)) & 1 for e in eos]
                    e_theirs = [(int(theirs[e // 32]) >> (e % 32)) & 1 for e in eos]
                    if diff or e_ours != e_theirs:
                        show = ", ".join(f"{tid} {tok.convert_ids_to_tokens(tid)!r} ours={o}" for tid, o in diff[:6])
                        why = (f"text {text!r} step {k}: {len(diff)} tokens differ ({show}); "
                               f"EOS ours {e_ours} xgrammar {e_theirs}")
                        break
                    if st["id"] >= 0 and not m.accept_token(st["id"]):
                        why = f"text {text!r} step {k}: xgrammar rejects token {st['id']}"
                        break
                if why:
                    break
        except Exception as e:  # noqa: BLE001
            why = f"{e.__class__.__name__}: {e}"
        print(f"ok xgrammar_{name}" if not why else f"FAIL xgrammar_{name}: {why}")
        sys.stdout.flush()


REGEXES = [  # pattern, alphabet of the random candidates, texts it matches
    (r"\d{3}-\d{4}", "0123456789-", ["555-0199", "000-0000"]),
    (r"[a-c]+(x|yz)?", "abcxyz", ["a", "cbayz", "abx"]),
    (r"(ab|a)(bc|c)*", "abc", ["a", "abcbc", "acc"]),
    (r"(?:[A-Z][a-z]{1,3} ?){1,3}", "Aab ", ["Aa", "Abab Aa ", "Ab Ab Ab"]),
    (r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?", "0123.eE+-", ["-1", "0.5e+3", "120E7"]),
    (r"[^aeiou]{2,}[aeiou]", "abeiouxyz", ["xyo", "zzzza"]),
    (r"\[\w+\]\.\*", "[]ab_.*", ["[a_b].*", "[_].*"]),
    (r"(a|b|)+c?", "abc", ["", "abbac", "c"]),
    (r"é+[ü-ÿ]?", "éüÿa", ["é", "ééÿ"]),
    (r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}", "0aF-g", ["0123abCD-ffff", "aaaaaaaa-0000"]),
    (r"(\d+,)*\d+", "12,", ["1", "12,3,45"]),
    (r"x{2}y{0,2}z{1,}", "xyz", ["xxz", "xxyyzzz"]),
]


def cmd_regex(vllmc, tok_dir, tag):
    """tag "spm": a SentencePiece tokenizer (Metaspace prepends a space: the
    matcher sees " " + text), so the pattern is checked as " (?:P)"."""
    rng = random.Random(18)
    for k, (pat, alphabet, positives) in enumerate(REGEXES):
        cands = set(positives)
        for _ in range(200):
            cands.add("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 10))))
        cands = sorted(cands)
        ours_pat = " (?:" + pat + ")" if tag == "spm" else pat
        p = subprocess.run([vllmc, "structured", "check", "--tokenizer", tok_dir, "--regex", ours_pat],
                           input="".join(json.dumps(c) + "\n" for c in cands), capture_output=True, text=True)
        why = None
        if p.returncode != 0:
            why = "vllmc failed: " + p.stderr.strip()
        else:
            out = [json.loads(x) for x in p.stdout.splitlines()[1:]]
            if len(out) != len(cands):
                why = f"{len(out)} results for {len(cands)} candidates"
            for pos in positives:
                if not why and not re.fullmatch(pat, pos):
                    why = f"the example {pos!r} does not match /{pat}/ in Python"
            for c, r in zip(cands, out):
                if why:
                    break
                # an empty text is no tokens: Metaspace prepends nothing to it
                seen = (" " + c if c else "") if tag == "spm" else c
                want = re.fullmatch(ours_pat, seen) is not None
                got = r["accepted"] and r["complete"]
                if want != got:
                    why = f"/{ours_pat}/ on {c!r}: re says {want}, ours {r}"
        print(f"ok regex_{tag}_{k}" if not why else f"FAIL regex_{tag}_{k}: {why}")
        sys.stdout.flush()


if __name__ == "__main__":
    what, vllmc, tok_dir = sys.argv[1:4]
    if what == "xgrammar":
        cmd_xgrammar(vllmc, tok_dir)
    else:
        cmd_regex(vllmc, tok_dir, sys.argv[4])
