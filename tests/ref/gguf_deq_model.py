#!/usr/bin/python3
"""gguf_deq_model.py - a Hugging Face model directory holding the weights a GGUF file really has.

    /usr/bin/python3 tests/ref/gguf_deq_model.py HF_DIR DUMP_REF_DIR OUT_DIR

DUMP_REF_DIR is what tools/make_gguf.py --dump-ref wrote beside the GGUF file
converted from HF_DIR: names.txt ("gguf_name type n") and deq.bin (numpy's
dequantization of every tensor written, from ggml's block definitions, in file
order). OUT_DIR gets HF_DIR's config.json and a model.safetensors (F32) with
those values under the HF names, attn_q/attn_k rows put back from llama.cpp's
interleaved order into HF's rotate-half order (the inverse of make_gguf's
permute_rope), so tests/ref/torch_forward.py on OUT_DIR is the exact float64
reference for our forward pass on the quantized file. OUT_DIR/act_quant.json
lists the HF names of the block-quantized weights (every type but F32/F16/BF16):
our runner quantizes the inputs of those matmuls to 8 bits (torch_forward.py
--act-quant models that).
"""
import json
import os
import shutil
import struct
import sys

import numpy as np


def main(hf_dir, ref_dir, out_dir):
    cfg = json.load(open(os.path.join(hf_dir, "config.json")))
    H = cfg["num_attention_heads"]
    KV = cfg.get("num_key_value_heads", H)
    with open(os.path.join(hf_dir, "model.safetensors"), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        shapes = {k: v["shape"] for k, v in json.loads(f.read(n)).items() if k != "__metadata__"}
    names = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
    per_layer = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
                 "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
                 "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
                 "ffn_down": "mlp.down_proj"}
    deq = np.fromfile(os.path.join(ref_dir, "deq.bin"), dtype=np.float32)
    off, tensors, act_quant = 0, {}, []
    for line in open(os.path.join(ref_dir, "names.txt")):
        gname, kind, count = line.split()
        count = int(count)
        x = deq[off:off + count]
        off += count
        base = gname[:-len(".weight")]
        parts = base.split(".")
        if parts[0] == "blk":
            hf = f"model.layers.{parts[1]}.{per_layer[parts[2]]}.weight"
            nhead = {"attn_q": H, "attn_k": KV}.get(parts[2])
        elif base in names:
            hf, nhead = names[base] + ".weight", None
        else:
            continue
        if kind not in ("f32", "f16", "bf16"):
            act_quant.append(hf)
        x = x.reshape(shapes[hf])
        if nhead:
            rows, cols = x.shape
            x = x.reshape(nhead, rows // nhead // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)
        tensors[hf] = np.ascontiguousarray(x, dtype=np.float32)
    os.makedirs(out_dir, exist_ok=True)
    header, blobs, pos = {}, [], 0
    for k in sorted(tensors):
        b = tensors[k].tobytes()
        header[k] = {"dtype": "F32", "shape": list(tensors[k].shape), "data_offsets": [pos, pos + len(b)]}
        blobs.append(b)
        pos += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(os.path.join(out_dir, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    c = dict(cfg, torch_dtype="float32")
    json.dump(c, open(os.path.join(out_dir, "config.json"), "w"))
    json.dump(sorted(act_quant), open(os.path.join(out_dir, "act_quant.json"), "w"))


if __name__ == "__main__":
    main(*sys.argv[1:4])
