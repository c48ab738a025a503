#!/usr/bin/python3
"""torch_forward.py - a second reference forward pass for the Llama family,
written here from the Hugging Face modeling equations.

The reference that proves the forward pass is Hugging Face transformers
itself (tests/test_hf_forward.sh, tests/ref/hf_forward.py: its models, its
forward, GGUFs written by llama.cpp's converter), which needs PyPI. This one
stays for what that cannot cover: it runs on Debian's python3-torch, so a
machine without PyPI still checks every architecture; it models the 8-bit
activations of Q4_0/Q4_K/Q6_K dots on the GGUFs tools/make_gguf.py writes
(test_gguf_forward.sh), types llama.cpp's converter does not produce. It was
written from the same reading of the equations as the engine, so a shared
misreading passes here; it did agree with transformers on every model of
test_hf_forward.sh.

    /usr/bin/python3 tests/ref/torch_forward.py MODEL_DIR DUMP [--tol 1e-4]

Reads a Hugging Face model directory (config.json + safetensors, parsed here
by hand: 8-byte header length, JSON header, raw tensors) and DUMP, written by
build/tools/dump_logits: the token ids of several sequences and the logits
our runner produced at every position. Recomputes each sequence's logits with
one full causal forward pass written straight from the Hugging Face modeling
equations (modeling_llama / modeling_qwen2 / modeling_qwen3):

    LlamaRMSNorm      w * x * rsqrt(mean(x^2) + eps)
    RoPE              x * cos + rotate_half(x) * sin, rotate_half(x1, x2) = (-x2, x1),
                      inv_freq = 1 / theta^(2i/d) with rope_scaling linear / llama3
                      (_compute_llama3_parameters); cos/sin in float32 as HF does
    attention         softmax(q k^T / sqrt(head_dim) + causal mask) v, repeat_kv for GQA,
                      Qwen2 q/k/v biases, attention_bias (q/k/v/o), Qwen3 q_norm/k_norm
                      on each head before RoPE
    MLP               down(silu(gate(x)) * up(x))
    lm_head           tied to embed_tokens when tie_word_embeddings

With --act-quant FILE (a JSON list of weight names, written by
gguf_deq_model.py), the input of each matmul with one of those weights is first
quantized the way ggml quantizes activations for its Q8_0/Q4_0 dot products
(block_q8_0, quantize_row_q8_0): per 32-element block of the float32 row,
amax = max |x|, d = amax / 127, q = round-half-to-even(x * (127 / amax))
(0 when amax = 0), computed in float32, and the matmul sees d * q. Our runner
keeps d in float32 (ggml stores it as f16).

Weights are upcast to float64 and everything but the RoPE tables runs in
float64, so the comparison measures our F32 error. Prints "ok NAME" or
"FAIL NAME: ..." for tests/run.sh; NAME is the model directory's basename.
Pass: max |ours - ref| <= tol * max |ref| (per sequence) over every position.
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch

DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        lo, hi = info["data_offsets"]
        arr = np.frombuffer(data, dtype=DTYPES[info["dtype"]], count=(hi - lo) // np.dtype(DTYPES[info["dtype"]]).itemsize,
                            offset=8 + n + lo)
        if info["dtype"] == "BF16":
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        out[name] = torch.from_numpy(arr.astype(np.float64).reshape(info["shape"]))
    return out


def load_weights(model_dir):
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        files = sorted(set(json.load(open(index))["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    w = {}
    for f in files:
        w.update(read_safetensors(os.path.join(model_dir, f)))
    return w


def inv_freq_hf(cfg, head_dim):
    """HF _compute_default_rope_parameters (+ linear / llama3), in float32."""
    base = cfg.get("rope_theta", 10000.0)
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    rs = cfg.get("rope_scaling") or {}
    kind = rs.get("rope_type", rs.get("type", "default"))
    if kind == "linear":
        inv_freq = inv_freq / rs["factor"]
    elif kind == "llama3":
        factor, low, high = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        old_len = rs["original_max_position_embeddings"]
        low_wavelen, high_wavelen = old_len / low, old_len / high
        wavelen = 2 * math.pi / inv_freq
        inv_llama = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
        smooth = (old_len / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * inv_llama / factor + smooth * inv_llama
        is_medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
        inv_freq = torch.where(is_medium, smoothed, inv_llama)
    elif kind != "default":
        raise SystemExit(f"unsupported rope_scaling {rs}")
    return inv_freq


def rms_norm(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def quantize_act(x):
    """float64 (T, k) -> the float64 values d * q of its 8-bit block quantization (see above)."""
    xf = x.to(torch.float32).reshape(x.shape[0], -1, 32)
    amax = xf.abs().amax(dim=-1, keepdim=True)
    d = amax / torch.tensor(127, dtype=torch.float32)
    scale = torch.where(amax > 0, torch.tensor(127, dtype=torch.float32) / amax, torch.zeros_like(amax))
    q = torch.round(xf * scale)  # torch.round rounds half to even
    return (q.double() * d.double()).reshape(x.shape)


def round_bf16(x):
    """float64 -> the float64 value of its float32 rounded to bfloat16 (torch: nearest even)."""
    return x.to(torch.float32).to(torch.bfloat16).double()


def forward(cfg, w, ids, act_quant=(), act_bf16=False, weights_bf16=False):
    arch = cfg["architectures"][0]
    dim, n_heads = cfg["hidden_size"], cfg["num_attention_heads"]
    n_kv = cfg.get("num_key_value_heads") or n_heads
    head_dim = cfg.get("head_dim") or dim // n_heads
    eps = cfg["rms_norm_eps"]
    qwen2, qwen3 = arch == "Qwen2ForCausalLM", arch == "Qwen3ForCausalLM"
    qkv_bias = qwen2 or cfg.get("attention_bias", False)
    o_bias = (not qwen2) and cfg.get("attention_bias", False)
    T = len(ids)

    # RoPE tables exactly as LlamaRotaryEmbedding: float32 product and cos/sin.
    pos = torch.arange(T, dtype=torch.float32)
    freqs = pos[:, None] * inv_freq_hf(cfg, head_dim)[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().double(), emb.sin().double()

    def linear(x, name, bias):
        if name + ".weight" in act_quant:
            x = quantize_act(x)
        if act_bf16:
            x = round_bf16(x)
        y = x @ (round_bf16(w[name + ".weight"]) if weights_bf16 else w[name + ".weight"]).T
        return y + w[name + ".bias"] if bias else y

    mask = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
    x = w["model.embed_tokens.weight"][torch.tensor(ids)]
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = linear(h, p + "self_attn.q_proj", qkv_bias).view(T, n_heads, head_dim)
        k = linear(h, p + "self_attn.k_proj", qkv_bias).view(T, n_kv, head_dim)
        v = linear(h, p + "self_attn.v_proj", qkv_bias).view(T, n_kv, head_dim)
        if qwen3:
            q = rms_norm(q, w[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, w[p + "self_attn.k_norm.weight"], eps)
        q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)  # (heads, T, head_dim)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = n_heads // n_kv  # repeat_kv: query head i reads KV head i // rep
        k = k[:, None].expand(n_kv, rep, T, head_dim).reshape(n_heads, T, head_dim)
        v = v[:, None].expand(n_kv, rep, T, head_dim).reshape(n_heads, T, head_dim)
        att = torch.softmax(q @ k.transpose(1, 2) * head_dim ** -0.5 + mask, dim=-1) @ v
        att = att.transpose(0, 1).reshape(T, n_heads * head_dim)
        x = x + linear(att, p + "self_attn.o_proj", o_bias)
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        gate = linear(h, p + "mlp.gate_proj", False)
        x = x + linear(torch.nn.functional.silu(gate) * linear(h, p + "mlp.up_proj", False), p + "mlp.down_proj", False)
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w.get("lm_head.weight")
    if head is None or cfg.get("tie_word_embeddings", False):
        head, head_name = w["model.embed_tokens.weight"], "model.embed_tokens.weight"
    else:
        head_name = "lm_head.weight"
    if head_name in act_quant:
        x = quantize_act(x)
    if act_bf16:
        x = round_bf16(x)
    if weights_bf16:
        head = round_bf16(head)
    return x @ head.T


def read_dump(path, vocab):
    """int32 num_seqs; per sequence: int32 len, int32 ids[len], float32 logits[len][vocab]."""
    data = open(path, "rb").read()
    (n,) = struct.unpack_from("<i", data, 0)
    off, seqs = 4, []
    for _ in range(n):
        (length,) = struct.unpack_from("<i", data, off)
        off += 4
        ids = list(struct.unpack_from(f"<{length}i", data, off))
        off += 4 * length
        logits = np.frombuffer(data, dtype=np.float32, count=length * vocab, offset=off).reshape(length, vocab)
        off += 4 * length * vocab
        seqs.append((ids, logits))
    if off != len(data):
        raise SystemExit(f"{path}: {len(data) - off} trailing bytes")
    return seqs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("dump")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--name")
    ap.add_argument("--act-quant", help="JSON list of weights whose matmul inputs are 8-bit quantized")
    ap.add_argument("--act-bf16", action="store_true", help="every matmul input rounded to bfloat16 (--dtype bfloat16)")
    ap.add_argument("--weights-bf16", action="store_true",
                    help="every matmul weight (projections, lm_head; not the embedding rows) rounded to bfloat16: "
                         "--dtype bfloat16 on F16 / F32 weights")
    a = ap.parse_args()
    name = a.name or os.path.basename(os.path.normpath(a.model))
    torch.set_num_threads(1)
    cfg = json.load(open(os.path.join(a.model, "config.json")))
    w = load_weights(a.model)
    act_quant = set(json.load(open(a.act_quant))) if a.act_quant else set()
    worst, where = 0.0, ""
    seqs = read_dump(a.dump, cfg["vocab_size"])
    for s, (ids, ours) in enumerate(seqs):
        ref = forward(cfg, w, ids, act_quant, a.act_bf16, a.weights_bf16).numpy()
        scale = float(np.abs(ref).max())
        err = np.abs(ours.astype(np.float64) - ref) / scale
        pos = int(err.max(axis=1).argmax())
        if err.max() > worst:
            worst, where = float(err.max()), f"sequence {s} position {pos} of {len(ids)}"
        if not np.isfinite(ours).all():
            print(f"FAIL {name}: non-finite logits in sequence {s}")
            return 1
    if worst > a.tol:
        print(f"FAIL {name}: max relative logit error {worst:.3g} > {a.tol:g} at {where}")
        return 1
    print(f"ok {name}  # {len(seqs)} sequences, {sum(len(i) for i, _ in seqs)} positions, max rel error {worst:.2g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
