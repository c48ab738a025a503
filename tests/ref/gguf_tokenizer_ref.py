"""gguf_tokenizer_ref.py - the reference for tokenizers embedded in GGUF files:
transformers (AutoTokenizer.from_pretrained(dir, gguf_file=name), which builds
a `tokenizers` tokenizer from the file's metadata) encodes and decodes the
cases in CASES_JSON; the output has the shape tokenize_ref.mjs prints
(encode / bytes / random / info), so test_tokenizer.c checks both alike.

    .venv/bin/python tests/ref/gguf_tokenizer_ref.py MODEL.gguf CASES_JSON
    .venv/bin/python tests/ref/gguf_tokenizer_ref.py MODEL.gguf CASES_JSON --pre NAME[,NAME...] --out DIR

The first prints the reference for MODEL.gguf. The second writes, for each
NAME, DIR/NAME/model.gguf (a GGUF holding only MODEL.gguf's tokenizer
metadata, with tokenizer.ggml.pre set to NAME) and DIR/NAME.json (its
reference): the
pre-tokenizer names our table maps, checked on a real byte-level vocabulary.

Where transformers' GGUF loader does not build the tokenizer the model was
trained with, the reference is patched to the model's own tokenizer.json
form, and the patch is printed on stderr with how many encodings it changes:
  - smollm, starcoder, refact, command-r, codeshell, exaone, minerva-7b:
    transformers does not know these names and keeps GPT-2's split; their
    tokenizer.json (and llama.cpp) split digits one by one first:
    Sequence[Digits(individual_digits), ByteLevel].
  - llama3 / llama-bpe / ... and tekken: ignore_merges, as Llama 3's and
    Tekken's tokenizer.json (and llama.cpp) have.
  - qwen2: the NFC normalizer of Qwen2's tokenizer.json.
"""
import json
import os
import random
import sys

DIGITS_FIRST = {"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"}
IGNORE_MERGES = {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "tekken"}
NFC = {"qwen2"}


def write_variant(src, dst, pre):
    """dst: src's tokenizer metadata (and architecture) with tokenizer.ggml.pre = pre."""
    import gguf
    r = gguf.GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(dst, arch)
    for name, field in r.fields.items():
        if not name.startswith("tokenizer.") or name == "tokenizer.ggml.pre":
            continue
        vtype = field.types[0]
        value = field.contents()
        if vtype == gguf.GGUFValueType.ARRAY:
            w.add_array(name, value)
        else:
            w.add_key_value(name, value, vtype)
    w.add_tokenizer_pre(pre)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def patched(tok, pre):
    """The backend tokenizer with the patches above applied (or None if none apply)."""
    from tokenizers import Tokenizer, normalizers, pre_tokenizers
    if pre not in DIGITS_FIRST | IGNORE_MERGES | NFC:
        return None
    backend = Tokenizer.from_str(tok.backend_tokenizer.to_str())
    if pre in DIGITS_FIRST:
        backend.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True),
             pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    if pre in IGNORE_MERGES:
        j = json.loads(backend.to_str())
        j["model"]["ignore_merges"] = True
        backend = Tokenizer.from_str(json.dumps(j))
    if pre in NFC:
        backend.normalizer = normalizers.NFC()
    return backend


def main():
    args = sys.argv[1:]
    model, cases_path = args[0], args[1]
    if "--pre" in args:
        out_dir = args[args.index("--out") + 1]
        for pre in args[args.index("--pre") + 1].split(","):
            os.makedirs(os.path.join(out_dir, pre), exist_ok=True)
            path = os.path.join(out_dir, pre, "model.gguf")  # alone: transformers looks at its neighbours
            write_variant(model, path, pre)
            with open(os.path.join(out_dir, pre + ".json"), "w") as f:
                json.dump(reference(path, cases_path, pre), f, ensure_ascii=False)
    else:
        json.dump(reference(model, cases_path, None), sys.stdout, ensure_ascii=False)
        sys.stdout.write("\n")


def reference(model, cases_path, pre):
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()
    tok = AutoTokenizer.from_pretrained(os.path.dirname(os.path.abspath(model)), gguf_file=os.path.basename(model))
    if pre is None:
        import gguf
        field = gguf.GGUFReader(model).fields.get("tokenizer.ggml.pre")
        pre = field.contents() if field else None
    stock = tok.backend_tokenizer
    fixed = patched(tok, pre)
    cases = json.load(open(cases_path))

    def encode(text, special, backend=None):
        if backend is None:
            return tok.encode(text, add_special_tokens=special)
        return backend.encode(text, add_special_tokens=special).ids

    def decode(ids, skip):
        return tok.decode(ids, skip_special_tokens=skip) if ids else ""

    out = {"encode": [], "bytes": [], "random": [], "info": {}}
    changed = 0
    texts = list(cases["texts"])
    for text in texts:
        special = encode(text, True, fixed)
        plain = encode(text, False, fixed)
        if fixed is not None and (special != encode(text, True, stock) or plain != encode(text, False, stock)):
            changed += 1
        out["encode"].append({"text": text, "special": special, "plain": plain, "dec": decode(special, False),
                              "dec_skip": decode(special, True), "dec_plain": decode(plain, False)})
    for hx in cases.get("bytes_hex", []):
        # each maximal invalid subpart -> U+FFFD, as TextDecoder and our encode do; a BOM is text
        text = bytes.fromhex(hx).decode("utf-8", errors="replace")
        out["bytes"].append({"hex": hx, "plain": encode(text, False, fixed), "special": encode(text, True, fixed)})
    if fixed is not None:
        print(f"gguf_tokenizer_ref: pre-tokenizer '{pre}': reference patched to its tokenizer.json form; "
              f"stock transformers encodes {changed} of {len(texts)} texts differently", file=sys.stderr)

    rng = random.Random(12345)
    vocab_size = len(tok)
    special_ids = sorted(set(tok.all_special_ids))
    for _ in range(60):
        ids = []
        for _ in range(1 + rng.randrange(12)):
            r = rng.random()
            if r < 0.1 and special_ids:
                ids.append(rng.choice(special_ids))
            elif r < 0.5:
                ids.append(rng.randrange(min(vocab_size, 600)))
            else:
                ids.append(rng.randrange(vocab_size))
        out["random"].append({"ids": ids, "dec": decode(ids, False), "dec_skip": decode(ids, True)})
    for e in out["encode"]:
        n = len(e["special"])
        if n < 2:
            continue
        for _ in range(3):
            a = rng.randrange(n)
            b = a + 1 + rng.randrange(n - a)
            ids = e["special"][a:b]
            out["random"].append({"ids": ids, "dec": decode(ids, False), "dec_skip": decode(ids, True)})
    out["info"] = {"bos_id": tok.bos_token_id if tok.bos_token_id is not None else -1,
                   "eos_id": tok.eos_token_id if tok.eos_token_id is not None else -1,
                   "special_ids": special_ids}
    return out


if __name__ == "__main__":
    main()
