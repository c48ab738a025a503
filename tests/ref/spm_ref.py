"""spm_ref.py - SentencePiece itself as a reference for stories260K.

    /usr/bin/python3 tests/ref/spm_ref.py TOKENIZER_MODEL CASES_JSON

Prints a JSON list of {text, ids} for the texts of CASES_JSON on which the HF
tokenizer.json conversion and SentencePiece are meant to agree (see
models/stories260K/README.md, "Tokenizer caveats"): non-empty, no leading,
trailing or repeated spaces (SentencePiece's remove_extra_whitespaces), no
special-token text (<s>, </s>, <unk>: HF splits them out) and no U+2581.
ids are SentencePiece's encode without BOS/EOS.
"""
import json
import sys

import sentencepiece as spm

sp = spm.SentencePieceProcessor(model_file=sys.argv[1])
texts = json.load(open(sys.argv[2], encoding="utf-8"))["texts"]
out = []
for t in texts:
    if (not t or t != t.strip(" ") or "  " in t or "\u2581" in t
            or any(s in t for s in ("<s>", "</s>", "<unk>"))):
        continue
    out.append({"text": t, "ids": sp.encode(t)})
json.dump(out, sys.stdout)
