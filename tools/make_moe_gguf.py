#!/usr/bin/python3
"""make_moe_gguf.py - write a Qwen3-MoE-shaped GGUF (general.architecture
qwen3moe) with random weights, for the mixture-of-experts bench rows.

    /usr/bin/python3 tools/make_moe_gguf.py OUT.gguf [--type q8_0|q4_0|f16]
        [--hidden 1024] [--layers 24] [--heads 16] [--kv-heads 4] [--head-dim 64]
        [--experts 64] [--top-k 8] [--expert-ff 512] [--vocab 32000]

The defaults are Qwen3-30B-A3B scaled down (hidden 2048 -> 1024, 48 -> 24
layers, 32/4 -> 16/4 heads of 128 -> 64, 128 -> 64 experts of 768 -> 512,
top 8, vocab 151936 -> 32000): 2.5 B parameters, 0.4 B active per token
(attention, 8 experts, lm_head), 2.6 GB in Q8_0.

Numpy only, streamed one tensor at a time (the file is never held in
memory). Quantized tensors are random blocks written directly: uniform
int8 q in [-127, 127] (Q8_0) or nibbles (Q4_0) with one F16 scale chosen so
the weights have standard deviation 0.02; the router (ffn_gate_inp), norms
and q/k norms are F32 (norms 1 + uniform(std 0.1)), so activations stay
O(1) and the router spreads tokens over the experts. The tokenizer is
make_gguf.py's synthetic SentencePiece vocabulary (llama.cpp can load it).
"""
import argparse
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_gguf as mg  # noqa: E402


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--type", default="q8_0", choices=["q8_0", "q4_0", "f16"])
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--experts", type=int, default=64)
    ap.add_argument("--top-k", type=int, default=8)
    ap.add_argument("--expert-ff", type=int, default=512)
    ap.add_argument("--vocab", type=int, default=32000)
    a = ap.parse_args(argv)
    d, L, H, KV, hd, E, ff, V = (a.hidden, a.layers, a.heads, a.kv_heads, a.head_dim, a.experts, a.expert_ff,
                                 a.vocab)
    A = "qwen3moe"
    # (name, ne innermost first, kind)
    plan = [("token_embd.weight", [d, V], a.type)]
    for i in range(L):
        b = f"blk.{i}."
        plan += [(b + "attn_norm.weight", [d], "f32"), (b + "attn_q.weight", [d, H * hd], a.type),
                 (b + "attn_k.weight", [d, KV * hd], a.type), (b + "attn_v.weight", [d, KV * hd], a.type),
                 (b + "attn_output.weight", [H * hd, d], a.type), (b + "attn_q_norm.weight", [hd], "f32"),
                 (b + "attn_k_norm.weight", [hd], "f32"), (b + "ffn_norm.weight", [d], "f32"),
                 (b + "ffn_gate_inp.weight", [d, E], "f32"), (b + "ffn_gate_exps.weight", [d, ff, E], a.type),
                 (b + "ffn_up_exps.weight", [d, ff, E], a.type), (b + "ffn_down_exps.weight", [ff, d, E], a.type)]
    plan += [("output_norm.weight", [d], "f32"), ("output.weight", [d, V], a.type)]

    def nbytes(ne, kind):
        n = int(np.prod(ne))
        return n * 4 if kind == "f32" else n * 2 if kind == "f16" else n // mg.BLOCK[kind][0] * mg.BLOCK[kind][1]

    toks, scores, types = mg.vocabulary("/nonexistent", V, 1, 2)
    meta = [("general.architecture", mg.T_STR, A), ("general.name", mg.T_STR, "qwen3moe-random"),
            ("general.alignment", mg.T_U32, mg.ALIGN), ("general.file_type", mg.T_U32, mg.FTYPE[a.type]),
            (f"{A}.context_length", mg.T_U32, 4096), (f"{A}.embedding_length", mg.T_U32, d),
            (f"{A}.block_count", mg.T_U32, L), (f"{A}.feed_forward_length", mg.T_U32, ff),
            (f"{A}.attention.head_count", mg.T_U32, H), (f"{A}.attention.head_count_kv", mg.T_U32, KV),
            (f"{A}.attention.key_length", mg.T_U32, hd), (f"{A}.attention.value_length", mg.T_U32, hd),
            (f"{A}.rope.freq_base", mg.T_F32, 1e6), (f"{A}.attention.layer_norm_rms_epsilon", mg.T_F32, 1e-6),
            (f"{A}.expert_count", mg.T_U32, E), (f"{A}.expert_used_count", mg.T_U32, a.top_k),
            (f"{A}.expert_feed_forward_length", mg.T_U32, ff),
            ("tokenizer.ggml.model", mg.T_STR, "llama"), ("tokenizer.ggml.tokens", mg.T_ARR, (mg.T_STR, toks)),
            ("tokenizer.ggml.scores", mg.T_ARR, (mg.T_F32, scores)),
            ("tokenizer.ggml.token_type", mg.T_ARR, (mg.T_I32, types)),
            ("tokenizer.ggml.bos_token_id", mg.T_U32, 1), ("tokenizer.ggml.eos_token_id", mg.T_U32, 2),
            ("tokenizer.ggml.add_bos_token", mg.T_BOOL, True)]
    kvs = [mg.kv(k, t, v) for k, t, v in meta]
    head = b"GGUF" + struct.pack("<IQQ", 3, len(plan), len(kvs)) + b"".join(kvs)
    off = 0
    for name, ne, kind in plan:
        head += mg.gstr(name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne)
        head += struct.pack("<IQ", mg.GGML[kind], off)
        off += (nbytes(ne, kind) + mg.ALIGN - 1) // mg.ALIGN * mg.ALIGN
    head += b"\0" * (-len(head) % mg.ALIGN)
    rng = np.random.default_rng(2026)
    std = 0.02
    with open(a.out, "wb") as f:
        f.write(head)
        for name, ne, kind in plan:
            n = int(np.prod(ne))
            if kind == "f32":
                if "norm" in name:
                    x = 1 + rng.uniform(-0.1 * 3 ** 0.5, 0.1 * 3 ** 0.5, n)
                else:  # the router: logits O(1)
                    x = rng.standard_normal(n) / d ** 0.5
                raw = x.astype(np.float32).tobytes()
            elif kind == "f16":
                raw = (rng.standard_normal(n) * std).astype(np.float16).tobytes()
            else:
                nb = n // 32
                q = rng.integers(-127, 128, (nb, 32), dtype=np.int8) if kind == "q8_0" else \
                    rng.integers(0, 256, (nb, 16), dtype=np.uint8)
                qstd = 73.3 if kind == "q8_0" else 4.6  # std of uniform q (q4: nibble - 8)
                dd = np.full((nb, 1), std / qstd, np.float16).view(np.uint8).reshape(nb, 2)
                raw = np.concatenate([dd, q.view(np.uint8)], axis=1).tobytes()
            f.write(raw)
            f.write(b"\0" * (-len(raw) % mg.ALIGN))
    total = sum(int(np.prod(ne)) for _, ne, _ in plan)
    active = total - L * 3 * E * d * ff * (1 - a.top_k / E) - V * d
    print(f"{a.out}: {total / 1e9:.2f} B parameters, {active / 1e9:.2f} B active per token "
          f"(embedding row excluded), {os.path.getsize(a.out) / 1e9:.2f} GB")


if __name__ == "__main__":
    main(sys.argv[1:])
