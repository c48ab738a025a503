#!/usr/bin/python3
"""make_lora_adapter.py - write a random LoRA adapter in PEFT's layout for a
Hugging Face model directory (numpy only; no torch, no peft).

    /usr/bin/python3 tools/make_lora_adapter.py MODEL_DIR OUT_DIR [--rank 16] [--alpha 32]
        [--targets q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj] [--seed 1] [--dtype f32|f16]

Writes OUT_DIR/adapter_config.json (r, lora_alpha, target_modules,
peft_type LORA, base_model_name_or_path) and OUT_DIR/adapter_model.safetensors
with base_model.model.model.layers.N.{self_attn,mlp}.P.lora_{A,B}.weight,
A (r, in) and B (out, r) drawn N(0, 1/fan_in) from a seeded generator
(B nonzero, unlike PEFT's init, so the adapter changes the output). The
shapes come from the model's config.json. For tests that need adapters
without .venv (tests/test_lora_server.sh) and for bench/lora/; the numbers
themselves are checked against PEFT in tests/test_lora_ref.sh.
"""
import argparse
import json
import os
import struct

import numpy as np

MODS = {"q_proj": "self_attn", "k_proj": "self_attn", "v_proj": "self_attn", "o_proj": "self_attn",
        "gate_proj": "mlp", "up_proj": "mlp", "down_proj": "mlp"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--alpha", type=float, default=32)
    ap.add_argument("--targets", default=",".join(MODS))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dtype", default="f32", choices=["f32", "f16"])
    a = ap.parse_args()
    cfg = json.load(open(os.path.join(a.model, "config.json")))
    d, f, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    hd = cfg.get("head_dim") or d // cfg["num_attention_heads"]
    q, kv = cfg["num_attention_heads"] * hd, cfg.get("num_key_value_heads", cfg["num_attention_heads"]) * hd
    shape = {"q_proj": (q, d), "k_proj": (kv, d), "v_proj": (kv, d), "o_proj": (d, q),
             "gate_proj": (f, d), "up_proj": (f, d), "down_proj": (d, f)}
    targets = [t for t in a.targets.split(",") if t]
    for t in targets:
        if t not in MODS:
            raise SystemExit(f"unknown target module {t}")
    rng = np.random.default_rng(a.seed)
    dt, name = (np.float32, "F32") if a.dtype == "f32" else (np.float16, "F16")
    tensors = []
    for layer in range(L):
        for t in targets:
            out, inp = shape[t]
            base = f"base_model.model.model.layers.{layer}.{MODS[t]}.{t}"
            tensors.append((base + ".lora_A.weight", (rng.standard_normal((a.rank, inp)) / inp ** 0.5).astype(dt)))
            tensors.append((base + ".lora_B.weight", (rng.standard_normal((out, a.rank)) / a.rank ** 0.5 * 0.5).astype(dt)))
    tensors.sort(key=lambda x: x[0])
    header, off = {}, 0
    for n, arr in tensors:
        header[n] = {"dtype": name, "shape": list(arr.shape), "data_offsets": [off, off + arr.nbytes]}
        off += arr.nbytes
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "adapter_model.safetensors"), "wb") as fo:
        fo.write(struct.pack("<Q", len(h)))
        fo.write(h)
        for _, arr in tensors:
            fo.write(np.ascontiguousarray(arr).tobytes())
    json.dump({"peft_type": "LORA", "r": a.rank, "lora_alpha": a.alpha, "target_modules": targets,
               "lora_dropout": 0.0, "bias": "none", "base_model_name_or_path": a.model,
               "task_type": "CAUSAL_LM"}, open(os.path.join(a.out, "adapter_config.json"), "w"), indent=2)


if __name__ == "__main__":
    main()
