#!/usr/bin/env python3
"""gguf_py_ref.py - references from ggml's own Python package (gguf-py: its
GGUFReader, GGUFWriter and gguf.quants), for tests/test_gguf_types.sh. Run
with .venv/bin/python (tests/ref/requirements.txt pins gguf).

    gguf_py_ref.py random OUT.gguf REFDIR
        OUT.gguf, written by gguf.GGUFWriter: for every tensor type we compute
        in, "rand.TYPE" (3 rows of 768: random bytes, the f16 scales random
        finite values, subnormals and negatives included) and, for the types
        gguf.quants can quantize, "quant.TYPE" (random floats quantized by it).
    gguf_py_ref.py tensors FILE.gguf REFDIR [--rows N]
        every tensor of FILE (its first N rows, default all).
    gguf_py_ref.py hf FILE.gguf OUTDIR
        a Llama-architecture GGUF as a Hugging Face directory for
        tests/ref/torch_forward.py: config.json from the metadata, every
        tensor dequantized by gguf.quants into an F32 model.safetensors under
        its HF name (attn_q / attn_k rows put back into HF's rotate-half
        order), and act_quant.json naming the quantized weights (our runner
        quantizes their matmul inputs to 8 bits; torch_forward.py --act-quant).

REFDIR gets names.txt ("name kind n" per tensor, n the elements compared)
and deq.bin (gguf.quants.dequantize of those elements, float32, in order),
what build/tests/test_gguf --dequant FILE REFDIR compares ours with.
"""
import json
import os
import struct
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q

OURS = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "IQ4_NL", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]
QUANTIZABLE = ["BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"]  # gguf.quants.quantize
# byte offsets of each block's f16 fields (d, and dmin / m where there is one)
F16_AT = {"Q8_0": [0], "Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "IQ4_NL": [0],
          "Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208]}


def write_ref(refdir, items):
    """items: (name, kind, float32 values) in file order."""
    os.makedirs(refdir, exist_ok=True)
    with open(os.path.join(refdir, "names.txt"), "w") as names, open(os.path.join(refdir, "deq.bin"), "wb") as deq:
        for name, kind, values in items:
            names.write(f"{name} {kind.lower()} {values.size}\n")
            deq.write(np.ascontiguousarray(values, dtype=np.float32).tobytes())


def random_file(out, refdir):
    rng = np.random.default_rng(20261126)
    w = gguf.GGUFWriter(out, "none")
    items = []
    rows, cols = 3, 768
    for kind in OURS:
        qt = Q[kind]
        bs, ts = gguf.GGML_QUANT_SIZES[qt]
        if kind in ("F32", "F16", "BF16"):
            x = (rng.standard_normal((rows, cols)) * 3).astype(np.float32)
            raw = gguf.quants.quantize(x, qt).view(np.uint8).reshape(rows, -1)
        else:
            raw = rng.integers(0, 256, size=(rows, cols // bs * ts), dtype=np.uint8)
            blocks = raw.reshape(-1, ts)
            for off in F16_AT[kind]:  # finite f16 (exponent < 31): subnormals, negatives, up to 65504
                h = rng.integers(0, 0x7C00, size=blocks.shape[0], dtype=np.uint16)
                h |= (rng.integers(0, 2, size=blocks.shape[0]) << 15).astype(np.uint16)
                blocks[:, off:off + 2] = h.view(np.uint8).reshape(-1, 2)
        w.add_tensor(f"rand.{kind.lower()}", raw, raw_dtype=qt)
        items.append((f"rand.{kind.lower()}", kind, gguf.quants.dequantize(raw, qt)))
    for kind in QUANTIZABLE:
        qt = Q[kind]
        x = (rng.standard_normal((rows, cols)) * np.linspace(0.01, 10, cols)).astype(np.float32)
        raw = gguf.quants.quantize(x, qt)
        w.add_tensor(f"quant.{kind.lower()}", raw, raw_dtype=qt)
        items.append((f"quant.{kind.lower()}", kind, gguf.quants.dequantize(raw, qt)))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    write_ref(refdir, items)


def tensor_rows(t, rows=None):
    """(kind, dequantized first `rows` rows as (rows, ne0)) of a GGUFReader tensor."""
    data = t.data  # (rows, bytes) for quantized types, (rows, ne0) for F32/F16
    data = data.reshape(-1, data.shape[-1])
    if rows is not None:
        data = data[:rows]
    return t.tensor_type.name, gguf.quants.dequantize(data, t.tensor_type)


def tensors(path, refdir, rows=None):
    r = gguf.GGUFReader(path)
    items = []
    for t in r.tensors:
        kind, values = tensor_rows(t, rows)
        items.append((t.name, kind, values))
    write_ref(refdir, items)
    print(f"{len(items)} tensors, types {sorted({k for _, k, _ in items})}")


def field(r, key, default=None):
    f = r.fields.get(key)
    if f is None:
        return default
    v = f.parts[f.data[0]]
    return bytes(v).decode() if f.types[0] == gguf.GGUFValueType.STRING else v.tolist()[0]


def hf_dir(path, out):
    r = gguf.GGUFReader(path)
    arch = field(r, "general.architecture")
    if arch != "llama":
        raise SystemExit(f"gguf_py_ref.py hf: architecture {arch} (llama only)")
    H, KV = field(r, "llama.attention.head_count"), field(r, "llama.attention.head_count_kv")
    tok = r.fields["tokenizer.ggml.tokens"]
    names = {t.name for t in r.tensors}
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
           "hidden_size": field(r, "llama.embedding_length"),
           "intermediate_size": field(r, "llama.feed_forward_length"),
           "num_hidden_layers": field(r, "llama.block_count"),
           "num_attention_heads": H, "num_key_value_heads": KV,
           "rms_norm_eps": field(r, "llama.attention.layer_norm_rms_epsilon"),
           "rope_theta": field(r, "llama.rope.freq_base", 10000.0),
           "max_position_embeddings": field(r, "llama.context_length"),
           "vocab_size": len(tok.data), "tie_word_embeddings": "output.weight" not in names,
           "torch_dtype": "float32"}
    per_layer = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
                 "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
                 "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
                 "ffn_down": "mlp.down_proj"}
    top = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
    os.makedirs(out, exist_ok=True)
    header, blobs, pos, act_quant = {}, [], 0, []
    for t in r.tensors:
        base, parts = t.name[:-len(".weight")], t.name.split(".")
        if parts[0] == "blk":
            hf, nhead = f"model.layers.{parts[1]}.{per_layer[parts[2]]}.weight", {"attn_q": H, "attn_k": KV}.get(parts[2])
        else:
            hf, nhead = top[base] + ".weight", None
        kind, x = tensor_rows(t)
        x = x.reshape([int(d) for d in reversed(t.shape)]) if len(t.shape) > 1 else x.reshape(-1)
        if nhead:  # llama.cpp's interleaved rows -> HF's rotate-half order
            rows, cols = x.shape
            x = x.reshape(nhead, rows // nhead // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)
        if kind not in ("F32", "F16", "BF16"):
            act_quant.append(hf)
        b = np.ascontiguousarray(x, dtype=np.float32).tobytes()
        header[hf] = {"dtype": "F32", "shape": list(x.shape), "data_offsets": [pos, pos + len(b)]}
        blobs.append(b)
        pos += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)
    json.dump(cfg, open(os.path.join(out, "config.json"), "w"))
    json.dump(sorted(act_quant), open(os.path.join(out, "act_quant.json"), "w"))


def main(argv):
    if len(argv) == 3 and argv[0] == "random":
        return random_file(argv[1], argv[2])
    if len(argv) in (3, 5) and argv[0] == "tensors":
        return tensors(argv[1], argv[2], int(argv[4]) if len(argv) == 5 and argv[3] == "--rows" else None)
    if len(argv) == 3 and argv[0] == "hf":
        return hf_dir(argv[1], argv[2])
    raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
