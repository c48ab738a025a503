#!/usr/bin/env python3
"""make_gemma3_model.py - a random-weight Gemma 3 text model, saved by transformers itself.

    .venv/bin/python tools/make_gemma3_model.py OUT [--dtype f32|bf16] [--layers N] [--hidden-size H]
        [--intermediate-size I] [--heads N] [--kv-heads N] [--head-dim D] [--vocab-size V]
        [--sliding-window W] [--pattern P | --layer-types s,f,...] [--rope-theta T] [--rope-local-theta T]
        [--rope-scaling linear:F] [--query-pre-attn-scalar S] [--final-logit-softcapping C]
        [--no-tie] [--old-config] [--seed S]

Builds a Gemma3TextConfig and a Gemma3ForCausalLM with transformers' own
random initialization (normal(0, initializer_range) weights), then gives the
RMSNorm weights (zeros after HF's init, which would hide whether a reader adds
Gemma's 1) random values too, and saves it with save_pretrained (safetensors +
config.json + generation_config.json) in F32 or BF16.

--old-config rewrites config.json the way older transformers wrote Gemma 3
configs (sliding_window_pattern, rope_theta, rope_local_base_freq and
rope_scaling instead of layer_types and rope_parameters), checked to load back
in transformers to the same layer kinds and RoPE bases.
"""
import argparse
import json
import os
import sys

import torch
from transformers import Gemma3ForCausalLM, Gemma3TextConfig


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out")
    p.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--hidden-size", type=int, default=64)
    p.add_argument("--intermediate-size", type=int, default=96)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--head-dim", type=int, default=32)
    p.add_argument("--vocab-size", type=int, default=320)
    p.add_argument("--max-pos", type=int, default=8192)
    p.add_argument("--sliding-window", type=int, default=24)
    p.add_argument("--pattern", type=int, default=3, help="every P-th layer is global (HF sliding_window_pattern)")
    p.add_argument("--layer-types", help="comma-separated s/f per layer (overrides --pattern)")
    p.add_argument("--rope-theta", type=float, default=1e6)
    p.add_argument("--rope-local-theta", type=float, default=10000.0)
    p.add_argument("--rope-scaling", default="none", help="none | linear:F (global layers)")
    p.add_argument("--query-pre-attn-scalar", type=int, default=None, help="default head_dim")
    p.add_argument("--final-logit-softcapping", type=float, default=None)
    p.add_argument("--no-tie", action="store_true")
    p.add_argument("--old-config", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def main(argv):
    a = parse_args(argv)
    torch.manual_seed(a.seed)
    if a.layer_types:
        kinds = a.layer_types.split(",")
        if len(kinds) != a.layers or any(k not in "sf" for k in kinds):
            raise SystemExit("--layer-types: one of s/f per layer")
        layer_types = ["sliding_attention" if k == "s" else "full_attention" for k in kinds]
    else:
        layer_types = ["sliding_attention" if (i + 1) % a.pattern else "full_attention" for i in range(a.layers)]
    full = {"rope_type": "default", "rope_theta": a.rope_theta}
    if a.rope_scaling != "none":
        kind, factor = a.rope_scaling.split(":")
        if kind != "linear":
            raise SystemExit("--rope-scaling: linear:F only")
        full = {"rope_type": "linear", "factor": float(factor), "rope_theta": a.rope_theta}
    cfg = Gemma3TextConfig(
        vocab_size=a.vocab_size, hidden_size=a.hidden_size, intermediate_size=a.intermediate_size,
        num_hidden_layers=a.layers, num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
        head_dim=a.head_dim, max_position_embeddings=a.max_pos, sliding_window=a.sliding_window,
        layer_types=layer_types,
        rope_parameters={"full_attention": full,
                         "sliding_attention": {"rope_type": "default", "rope_theta": a.rope_local_theta}},
        query_pre_attn_scalar=a.query_pre_attn_scalar or a.head_dim,
        final_logit_softcapping=a.final_logit_softcapping, tie_word_embeddings=not a.no_tie,
        bos_token_id=2, eos_token_id=1, pad_token_id=0)
    model = Gemma3ForCausalLM(cfg).eval()
    with torch.no_grad():
        for name, prm in model.named_parameters():
            if "norm" in name:
                prm.normal_(0.0, 0.5)
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    model = model.to(dtype)
    model.config.dtype = dtype
    model.save_pretrained(a.out)
    path = os.path.join(a.out, "config.json")
    c = json.load(open(path))
    if a.old_config:
        # older transformers: one pattern, flat RoPE keys (the scaling applies to the global layers)
        pattern = a.pattern
        if a.layer_types or any(t != ("sliding_attention" if (i + 1) % pattern else "full_attention")
                                for i, t in enumerate(layer_types)):
            raise SystemExit("--old-config needs a --pattern layout")
        c.pop("layer_types", None)
        c.pop("rope_parameters", None)
        c["sliding_window_pattern"] = pattern
        c["rope_theta"] = a.rope_theta
        c["rope_local_base_freq"] = a.rope_local_theta
        c["rope_scaling"] = None if a.rope_scaling == "none" else {"rope_type": "linear", "factor": full["factor"]}
        json.dump(c, open(path, "w"), indent=2)
        back = Gemma3TextConfig.from_pretrained(a.out)
        if (back.layer_types != layer_types or back.rope_parameters["full_attention"]["rope_theta"] != a.rope_theta
                or back.rope_parameters["sliding_attention"]["rope_theta"] != a.rope_local_theta):
            raise SystemExit("--old-config: transformers reads the old config differently")
    print(f"{a.out}: Gemma3ForCausalLM, {a.layers} layers ({''.join(t[0] for t in layer_types)}), "
          f"window {a.sliding_window}, {a.dtype}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
