#!/usr/bin/env python3
"""make_gemma3_gguf.py - a Gemma 3 Hugging Face directory as a gemma3 GGUF, and GGUF retyping.

    .venv/bin/python tools/make_gemma3_gguf.py HF_DIR OUT.gguf [--type f32|f16|q8_0] [--drop TENSOR]
        [--pattern-key array|N]
    .venv/bin/python tools/make_gemma3_gguf.py --retype IN.gguf OUT.gguf --from Q5_0|ALL --to Q8_0|F32|...

The first form writes what llama.cpp's convert_hf_to_gguf.py writes for
Gemma3ForCausalLM, with gguf-py (the `gguf` package): general.architecture
gemma3, gemma3.{context_length, embedding_length, block_count,
feed_forward_length, attention.head_count, attention.head_count_kv,
attention.key_length, attention.value_length, attention.layer_norm_rms_epsilon,
rope.freq_base, attention.sliding_window} (and rope.scaling.* when the global
layers scale), tensors renamed to llama.cpp's (token_embd, blk.N.attn_q, ...,
post_attention_norm, ffn_norm = the pre-MLP norm, post_ffw_norm, output_norm)
with every *norm.weight stored as w + 1 (Gemma3RMSNorm's 1 folded in, as the
converter does), and a placeholder vocabulary of the model's size. Only
configs llama.cpp can express are accepted: by default what its gemma3
loader assumes when the file says nothing (every sixth layer global, local
RoPE base 10000); --pattern-key writes the keys it reads when present,
gemma3.attention.sliding_window_pattern (array: one bool per layer, true =
sliding, as newer converters write a config's layer_types; N: a period,
layer l global iff l % N == N - 1) and gemma3.rope.freq_base_swa (the local
base), so any layer kinds and local base fit; query_pre_attn_scalar must be
head_dim either way (llama.cpp's scale, no key).
--type q8_0 quantizes the matrices (token_embd included) with gguf-py's
Q8_0; norms stay F32. --drop leaves one tensor out (a bad file for tests).

The second form rewrites a GGUF with every tensor of one type (or of every
type but the target, ALL) dequantized and requantized to another by gguf-py,
all else copied: tests/test_gemma3_ref.sh makes an F32 copy of the real
Gemma 3 270M file this way, which measures our forward pass apart from the
8-bit activations of the quantized matmuls.
"""
import argparse
import json
import os
import sys

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFReader, GGUFValueType, GGUFWriter, quants


def load_safetensors(d):
    from safetensors.numpy import load_file
    import torch
    from safetensors.torch import load_file as load_torch
    out = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            for k, v in load_torch(os.path.join(d, f)).items():
                out[k] = v.to(torch.float32).numpy()
    return out


def hf_to_gguf(a):
    cfg = json.load(open(os.path.join(a.hf, "config.json")))
    n = cfg["num_hidden_layers"]
    types = cfg.get("layer_types") or ["sliding_attention" if (i + 1) % cfg.get("sliding_window_pattern", 6)
                                       else "full_attention" for i in range(n)]
    period = 6 if a.pattern_key in (None, "array") else int(a.pattern_key)
    want = ["sliding_attention" if period == 0 or i % period < period - 1 else "full_attention" for i in range(n)]
    rp = cfg.get("rope_parameters") or {}
    local = (rp.get("sliding_attention") or {}).get("rope_theta", cfg.get("rope_local_base_freq", 10000.0))
    full = rp.get("full_attention") or {"rope_theta": cfg.get("rope_theta", 1e6), **(cfg.get("rope_scaling") or {})}
    if cfg.get("query_pre_attn_scalar", 256) != cfg["head_dim"]:
        raise SystemExit("make_gemma3_gguf: llama.cpp's gemma3 GGUF fixes query_pre_attn_scalar = head_dim")
    if a.pattern_key is None and (types != want or local != 10000.0):
        raise SystemExit("make_gemma3_gguf: without --pattern-key, llama.cpp's gemma3 GGUF means pattern 6 "
                         "and local base 10000")
    if a.pattern_key not in (None, "array") and types != want:
        raise SystemExit(f"make_gemma3_gguf: the layer kinds are not period {period}")
    w = load_safetensors(a.hf)
    g = GGUFWriter(a.out, "gemma3")
    g.add_name("random Gemma 3")
    g.add_context_length(cfg["max_position_embeddings"])
    g.add_embedding_length(cfg["hidden_size"])
    g.add_block_count(n)
    g.add_feed_forward_length(cfg["intermediate_size"])
    g.add_head_count(cfg["num_attention_heads"])
    g.add_head_count_kv(cfg["num_key_value_heads"])
    g.add_key_length(cfg["head_dim"])
    g.add_value_length(cfg["head_dim"])
    g.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    g.add_rope_freq_base(full["rope_theta"])
    g.add_sliding_window(cfg["sliding_window"])
    if a.pattern_key == "array":
        g.add_sliding_window_pattern([t == "sliding_attention" for t in types])
    elif a.pattern_key is not None:
        g.add_sliding_window_pattern(period)
    if a.pattern_key is not None:
        g.add_rope_freq_base_swa(local)
    if full.get("rope_type", "default") == "linear":
        g.add_rope_scaling_type(__import__("gguf").RopeScalingType.LINEAR)
        g.add_rope_scaling_factor(full["factor"])
    vocab = cfg["vocab_size"]
    g.add_tokenizer_model("llama")
    g.add_token_list([f"<t{i}>".encode() for i in range(vocab)])
    g.add_token_scores([0.0] * vocab)
    g.add_token_types([1] * vocab)
    g.add_bos_token_id(cfg.get("bos_token_id", 2))
    g.add_eos_token_id(cfg.get("eos_token_id", 1) if isinstance(cfg.get("eos_token_id", 1), int) else 1)
    names = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
             "self_attn.k_norm": "attn_k_norm", "post_attention_layernorm": "post_attention_norm",
             "pre_feedforward_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down", "post_feedforward_layernorm": "post_ffw_norm"}
    out = {"token_embd.weight": w["model.embed_tokens.weight"], "output_norm.weight": w["model.norm.weight"]}
    if "lm_head.weight" in w and not cfg.get("tie_word_embeddings", True):
        out["output.weight"] = w["lm_head.weight"]
    for i in range(n):
        for hf, gg in names.items():
            out[f"blk.{i}.{gg}.weight"] = w[f"model.layers.{i}.{hf}.weight"]
    for name, t in out.items():
        if name == a.drop:
            continue
        t = np.ascontiguousarray(t, dtype=np.float32)
        if name.endswith("norm.weight"):
            g.add_tensor(name, t + np.float32(1))
        elif a.type == "f16":
            g.add_tensor(name, t.astype(np.float16))
        elif a.type == "q8_0":
            q = quants.quantize(t, Q.Q8_0)
            g.add_tensor(name, q, raw_shape=q.shape, raw_dtype=Q.Q8_0)
        else:
            g.add_tensor(name, t)
    g.write_header_to_file()
    g.write_kv_data_to_file()
    g.write_tensors_to_file()
    g.close()


def retype(a):
    src = None if a.from_type == "ALL" else Q[a.from_type]
    dst = Q[a.to_type]
    r = GGUFReader(a.retype)
    arch = r.fields["general.architecture"].contents()
    g = GGUFWriter(a.out, arch)
    for key, f in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        vt = f.types[0]
        if vt == GGUFValueType.ARRAY:
            sub = f.types[-1]
            g.add_key_value(key, f.contents(), vt, sub_type=sub)
        else:
            g.add_key_value(key, f.contents(), vt)
    changed = 0
    for t in r.tensors:
        shape = [int(x) for x in reversed(t.shape.tolist())]  # numpy order (rows, cols)
        if t.tensor_type == src or (src is None and t.tensor_type != dst):
            x = quants.dequantize(t.data, t.tensor_type).reshape(shape).astype(np.float32)
            q = quants.quantize(x, dst) if dst not in (Q.F32, Q.F16) else x.astype(np.float16 if dst == Q.F16 else np.float32)
            if dst in (Q.F32, Q.F16):
                g.add_tensor(t.name, q)
            else:
                g.add_tensor(t.name, q, raw_shape=q.shape, raw_dtype=dst)
            changed += 1
        else:
            g.add_tensor(t.name, np.asarray(t.data), raw_shape=t.data.shape, raw_dtype=t.tensor_type)
    g.write_header_to_file()
    g.write_kv_data_to_file()
    g.write_tensors_to_file()
    g.close()
    print(f"{a.out}: {changed} {a.from_type} tensors as {a.to_type}")


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("hf", nargs="?")
    p.add_argument("out")
    p.add_argument("--type", choices=["f32", "f16", "q8_0"], default="f32")
    p.add_argument("--drop")
    p.add_argument("--pattern-key", help="write sliding_window_pattern: 'array' (bools) or a period N")
    p.add_argument("--retype", metavar="IN_GGUF")
    p.add_argument("--from", dest="from_type")
    p.add_argument("--to", dest="to_type")
    a = p.parse_args(argv)
    if a.retype:
        retype(a)
    else:
        hf_to_gguf(a)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
