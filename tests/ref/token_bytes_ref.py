"""token_bytes_ref.py - each token's bytes in the middle of a text, from
transformers / SentencePiece, for tests/test_token_bytes.sh.

    .venv/bin/python tests/ref/token_bytes_ref.py bytelevel TOKENIZER_DIR
    .venv/bin/python tests/ref/token_bytes_ref.py spm TOKENIZER_MODEL

Prints "<id> <hex>" per id, as build/tools/token_bytes does ("<id> -" for
an id that is no token).
  bytelevel: transformers' convert_ids_to_tokens (the vocabulary's own
    string), mapped back through the inverse of GPT-2's bytes_to_unicode
    (written out here from the GPT-2 paper's code, not imported); added
    tokens (tokenizer.added_tokens_decoder) are their content, verbatim.
  spm: SentencePiece's own model file: id_to_piece, with is_byte pieces
    (<0xNN>) the one byte, control and unknown pieces verbatim, and every
    U+2581 a space.
"""
import sys


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def bytelevel(path):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(path)
    inv = {c: b for b, c in bytes_to_unicode().items()}
    added = {i: t.content for i, t in tok.added_tokens_decoder.items()}
    n = max(len(tok), max(added) + 1 if added else 0)
    for i in range(n):
        if i in added:
            print(i, added[i].encode("utf-8").hex())
            continue
        s = tok.convert_ids_to_tokens(i)
        if s is None:
            print(i, "-")
            continue
        print(i, bytes(inv[c] for c in s).hex())


def spm(path):
    import sentencepiece
    sp = sentencepiece.SentencePieceProcessor(model_file=path)
    for i in range(sp.get_piece_size()):
        p = sp.id_to_piece(i)
        if sp.is_byte(i):
            b = bytes([int(p[3:5], 16)])
        elif sp.is_control(i) or sp.is_unknown(i):
            b = p.encode("utf-8")
        else:
            b = p.replace("\u2581", " ").encode("utf-8")
        print(i, b.hex())


{"bytelevel": bytelevel, "spm": spm}[sys.argv[1]](sys.argv[2])
