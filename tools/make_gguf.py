#!/usr/bin/python3
"""make_gguf.py - convert a Hugging Face Llama model directory into a GGUF v3 file.

    /usr/bin/python3 tools/make_gguf.py MODEL_DIR OUT.gguf --type q8_0
    /usr/bin/python3 tools/make_random_model.py /tmp/tl --preset tinyllama-1.1b
    /usr/bin/python3 tools/make_gguf.py /tmp/tl /tmp/tl-q4_0.gguf --type q4_0

Written from the GGUF specification (ggml docs/gguf.md) and ggml's block
layouts, with numpy only, so that it is an implementation independent of our
C reader (src/model/gguf.c) and quantizers (src/kernels/quant.c); the tests
compare the two, and llama.cpp loading the same file (bench/llamacpp) checks
this writer.

What it writes, as llama.cpp's convert_hf_to_gguf.py does for llama:
  - metadata: general.architecture = llama, llama.* hyperparameters,
    general.alignment = 32, and a tokenizer (tokenizer.ggml.model = llama):
    the model dir's tokenizer.json vocabulary (SentencePiece-style BPE, with
    scores = -rank) when there is one, else a synthetic SentencePiece vocabulary
    (<unk>, <s>, </s>, the 256 <0xXX> byte tokens, then "▁tN"), so llama.cpp
    can load the file;
  - tensors: token_embd, blk.N.{attn_norm, attn_q, attn_k, attn_v,
    attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down}, output_norm, output
    (absent when tied); attn_q/attn_k rows permuted within each head from HF's
    rotate-half order to llama.cpp's interleaved order (GGUF row 2i = HF row i,
    2i+1 = HF row i + head_dim/2);
  - types: 1-D tensors F32; 2-D tensors in --type (f32, f16, bf16, q8_0, q4_0,
    q4_k, q6_k), Q8_0/Q4_0 quantized with ggml's reference rounding, Q4_K/Q6_K
    with a plain min/max quantizer (quantize_q4_k / quantize_q6_k) into ggml's
    block layouts; K types fall back for rows not a multiple of 256 (FALLBACK:
    llama.cpp's choices, but q8_0 for q4_k, which keeps these files free of
    the gguf package).
--dump-ref DIR also writes, for every tensor in file order, the F32 values
before quantization (src.bin) and the numpy dequantization of what was
written (deq.bin), plus names.txt ("name type n_elements" per line).
--k-samples adds two tensors of random Q4_K and Q6_K blocks (test.q4_k,
test.q6_k; not model weights) so the K-quant dequantizers can be checked.

--writer gguf-py (run with a Python that has ggml's gguf package, .venv/)
writes the same tensors and metadata through gguf.GGUFWriter instead, every
type gguf.quants can quantize (q8_0, q4_0, q4_1, q5_0, q5_1, bf16) quantized
by it, the others (iq4_nl, q2_k, q3_k, q5_k, q4_k, q6_k) by the numpy
quantizers here; --dump-ref's deq.bin is then gguf.quants.dequantize of the
bytes written (ggml's own Python definitions, independent of this file and
of our C). Types q4_1, q5_0, q5_1, iq4_nl, q2_k, q3_k, q5_k need it.
--snap TYPE rounds every 2-D weight through TYPE's quantizer and back to
F32 before writing it as --type: a model (e.g. F16) whose own TYPE file
holds exactly its weights, so the two compute nearly the same function (a
self-speculation pair with high acceptance even for random weights; see
bench/spec_decode.sh).
--raw-tensor NAME=TYPE (gguf-py writer) writes tensor NAME as random bytes
of ggml type TYPE (e.g. IQ4_XS): a file with a type the reader rejects.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

GGML = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "q2_k": 10, "q3_k": 11,
        "q4_k": 12, "q5_k": 13, "q6_k": 14, "iq4_nl": 20, "bf16": 30}
BLOCK = {"q8_0": (32, 34), "q4_0": (32, 18), "q4_1": (32, 20), "q5_0": (32, 22), "q5_1": (32, 24),
         "iq4_nl": (32, 18), "q2_k": (256, 84), "q3_k": (256, 110), "q4_k": (256, 144), "q5_k": (256, 176),
         "q6_k": (256, 210)}
TYPES = ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl", "q2_k", "q3_k", "q4_k", "q5_k",
         "q6_k"]
GGUF_PY_ONLY = {"q4_1", "q5_0", "q5_1", "iq4_nl", "q2_k", "q3_k", "q5_k"}  # need --writer gguf-py
GGUF_PY_QUANTIZES = {"q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "bf16"}
# K types on rows that are not a multiple of 256 (llama.cpp: q2_k/q3_k -> iq4_nl,
# q4_k -> q5_0, q5_k -> q5_1, q6_k -> q8_0; q4_k keeps q8_0 here, see the top)
FALLBACK = {"q2_k": "iq4_nl", "q3_k": "iq4_nl", "q4_k": "q8_0", "q5_k": "q5_1", "q6_k": "q8_0"}
FTYPE = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q8_0": 7, "q5_0": 8, "q5_1": 9, "q2_k": 10, "q3_k": 11,
         "q4_k": 14, "q5_k": 16, "q6_k": 18, "iq4_nl": 25, "bf16": 32}  # llama_ftype (the _S variants)
IQ4NL_VALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.float32)
T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR, T_U64 = 4, 5, 6, 7, 8, 9, 10
ALIGN = 32


# ---- numpy from ggml's definitions ------------------------------------------

def round_away(v):
    """roundf: half away from zero (np.round rounds half to even)."""
    a = np.abs(v)
    b = np.floor(a)
    return np.sign(v) * (b + (a - b >= 0.5))


def quantize_q8_0(x):
    b = x.reshape(-1, 32).astype(np.float32)
    d = (np.abs(b).max(axis=1) / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore"):
        idv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    q = round_away(b * idv[:, None]).astype(np.int8)
    out = np.empty((b.shape[0], 34), np.uint8)
    out[:, :2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return out.reshape(-1)


def quantize_q4_0(x):
    b = x.reshape(-1, 32).astype(np.float32)
    mx = b[np.arange(b.shape[0]), np.abs(b).argmax(axis=1)]  # signed, first of the largest magnitude
    d = (mx / np.float32(-8)).astype(np.float32)
    with np.errstate(divide="ignore"):
        idv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    q = np.minimum(np.trunc(b * idv[:, None] + np.float32(8.5)), 15).astype(np.uint8)
    out = np.empty((b.shape[0], 18), np.uint8)
    out[:, :2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q[:, :16] | (q[:, 16:] << 4)
    return out.reshape(-1)


def f16_round(v):
    """(f16 bytes (n, 2), the f32 value the reader will see) of v."""
    h = v.astype(np.float16)
    return h.view(np.uint8).reshape(-1, 2), h.astype(np.float32)


def safe_div(a, b):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(b != 0, a / np.where(b != 0, b, 1), 0).astype(np.float32)


def quantize_q4_k(x):
    """Per sub-block of 32: scale = (max - min)/15 and min = -min(x, 0), as
    6-bit multiples of the super-block's d = max scale/63 and dmin = max min/63
    (a straightforward quantizer, not ggml's iterative search); the layout is
    ggml's block_q4_K."""
    b = x.reshape(-1, 8, 32).astype(np.float32)
    lo = np.minimum(b.min(axis=2), 0)
    scale, mins = (b.max(axis=2) - lo) / np.float32(15), -lo
    dbytes, d = f16_round(scale.max(axis=1) / np.float32(63))
    mbytes, dmin = f16_round(mins.max(axis=1) / np.float32(63))
    sc = np.clip(round_away(safe_div(scale, d[:, None])), 0, 63).astype(np.int32)
    m = np.clip(round_away(safe_div(mins, dmin[:, None])), 0, 63).astype(np.int32)
    eff_d = (d[:, None] * sc.astype(np.float32))[:, :, None]
    eff_m = (dmin[:, None] * m.astype(np.float32))[:, :, None]
    q = np.clip(round_away(safe_div(b + eff_m, eff_d)), 0, 15).astype(np.uint8)  # (nb, 8, 32)
    out = np.zeros((b.shape[0], 144), np.uint8)
    out[:, 0:2], out[:, 2:4] = dbytes, mbytes
    out[:, 4:8] = (sc[:, :4] | ((sc[:, 4:] >> 4) << 6)).astype(np.uint8)
    out[:, 8:12] = (m[:, :4] | ((m[:, 4:] >> 4) << 6)).astype(np.uint8)
    out[:, 12:16] = ((sc[:, 4:] & 15) | ((m[:, 4:] & 15) << 4)).astype(np.uint8)
    out[:, 16:] = (q[:, 0::2, :] | (q[:, 1::2, :] << 4)).reshape(-1, 128)  # sub-block 2p low, 2p+1 high
    return out.reshape(-1)


def quantize_q6_k(x):
    """Per sub-block of 16: scale = amax/31 as a multiple (0..127) of the
    super-block's d = max scale/127; values q in -32..31 stored as q + 32 in
    ggml's block_q6_K layout (ql low nibbles, qh 2-bit pairs, int8 scales, d)."""
    b = x.reshape(-1, 16, 16).astype(np.float32)
    scale = np.abs(b).max(axis=2) / np.float32(31)
    dbytes, d = f16_round(scale.max(axis=1) / np.float32(127))
    sc = np.clip(round_away(safe_div(scale, d[:, None])), 0, 127).astype(np.int32)
    eff = (d[:, None] * sc.astype(np.float32))[:, :, None]
    u = (np.clip(round_away(safe_div(b, eff)), -32, 31) + 32).astype(np.uint8).reshape(-1, 2, 4, 32)  # h, r, l
    out = np.zeros((b.shape[0], 210), np.uint8)
    for h in range(2):
        ql = out[:, 64 * h:64 * h + 64]
        ql[:, :32] = (u[:, h, 0] & 15) | ((u[:, h, 2] & 15) << 4)
        ql[:, 32:] = (u[:, h, 1] & 15) | ((u[:, h, 3] & 15) << 4)
        out[:, 128 + 32 * h:160 + 32 * h] = ((u[:, h, 0] >> 4) | ((u[:, h, 1] >> 4) << 2) |
                                             ((u[:, h, 2] >> 4) << 4) | ((u[:, h, 3] >> 4) << 6))
    out[:, 192:208] = sc.astype(np.int8).view(np.uint8)
    out[:, 208:210] = dbytes
    return out.reshape(-1)


def quantize_q5_k(x):
    """quantize_q4_k with 5-bit values (0..31) in ggml's block_q5_K layout:
    Q4_K's d, dmin, scales and nibbles (qs), the fifth bit of sub-block j's
    element l in bit j of qh[l]."""
    b = x.reshape(-1, 8, 32).astype(np.float32)
    lo = np.minimum(b.min(axis=2), 0)
    scale, mins = (b.max(axis=2) - lo) / np.float32(31), -lo
    dbytes, d = f16_round(scale.max(axis=1) / np.float32(63))
    mbytes, dmin = f16_round(mins.max(axis=1) / np.float32(63))
    sc = np.clip(round_away(safe_div(scale, d[:, None])), 0, 63).astype(np.int32)
    m = np.clip(round_away(safe_div(mins, dmin[:, None])), 0, 63).astype(np.int32)
    eff_d = (d[:, None] * sc.astype(np.float32))[:, :, None]
    eff_m = (dmin[:, None] * m.astype(np.float32))[:, :, None]
    q = np.clip(round_away(safe_div(b + eff_m, eff_d)), 0, 31).astype(np.uint8)  # (nb, 8, 32)
    out = np.zeros((b.shape[0], 176), np.uint8)
    out[:, 0:2], out[:, 2:4] = dbytes, mbytes
    out[:, 4:8] = (sc[:, :4] | ((sc[:, 4:] >> 4) << 6)).astype(np.uint8)
    out[:, 8:12] = (m[:, :4] | ((m[:, 4:] >> 4) << 6)).astype(np.uint8)
    out[:, 12:16] = ((sc[:, 4:] & 15) | ((m[:, 4:] & 15) << 4)).astype(np.uint8)
    out[:, 16:48] = sum(((q[:, j, :] >> 4) << j) for j in range(8)).astype(np.uint8)
    lo4 = q & 15
    out[:, 48:] = (lo4[:, 0::2, :] | (lo4[:, 1::2, :] << 4)).reshape(-1, 128)
    return out.reshape(-1)


def k_elements(b):
    """(nb, 256) -> (nb, 2, 4, 32): element 128h + 32r + l at [h, r, l], the
    order Q2_K / Q3_K pack their 2-bit values in (qs[32h + l] >> 2r)."""
    return b.reshape(-1, 2, 4, 32)


def quantize_q2_k(x):
    """Per sub-block of 16: min = -min(x, 0), scale = (max - min)/3, as 4-bit
    multiples of d = max scale/15 and dmin = max min/15; q in 0..3 in ggml's
    block_q2_K layout (scales | mins << 4, qs, d, dmin)."""
    b = x.reshape(-1, 16, 16).astype(np.float32)
    lo = np.minimum(b.min(axis=2), 0)
    scale, mins = (b.max(axis=2) - lo) / np.float32(3), -lo
    dbytes, d = f16_round(scale.max(axis=1) / np.float32(15))
    mbytes, dmin = f16_round(mins.max(axis=1) / np.float32(15))
    sc = np.clip(round_away(safe_div(scale, d[:, None])), 0, 15).astype(np.int32)
    m = np.clip(round_away(safe_div(mins, dmin[:, None])), 0, 15).astype(np.int32)
    eff_d = (d[:, None] * sc.astype(np.float32))[:, :, None]
    eff_m = (dmin[:, None] * m.astype(np.float32))[:, :, None]
    q = k_elements(np.clip(round_away(safe_div(b + eff_m, eff_d)), 0, 3).astype(np.uint8))
    out = np.zeros((b.shape[0], 84), np.uint8)
    out[:, 0:16] = (sc | (m << 4)).astype(np.uint8)  # sub-block j = 8h + 2r + l/16: element order
    for h in range(2):
        out[:, 16 + 32 * h:48 + 32 * h] = sum(q[:, h, r] << (2 * r) for r in range(4)).astype(np.uint8)
    out[:, 80:82], out[:, 82:84] = dbytes, mbytes
    return out.reshape(-1)


def quantize_q3_k(x):
    """Per sub-block of 16: scale = amax/4 as a 6-bit multiple (stored + 32)
    of d = max scale/31; q in -4..3 stored as q + 4, its two low bits in qs
    (as Q2_K's) and the third in bit 4h + r of hmask[l]; ggml's block_q3_K."""
    b = x.reshape(-1, 16, 16).astype(np.float32)
    scale = np.abs(b).max(axis=2) / np.float32(4)
    dbytes, d = f16_round(scale.max(axis=1) / np.float32(31))
    sc = np.clip(round_away(safe_div(scale, d[:, None])), -32, 31).astype(np.int32)
    eff = (d[:, None] * sc.astype(np.float32))[:, :, None]
    u = k_elements((np.clip(round_away(safe_div(b, eff)), -4, 3) + 4).astype(np.uint8))
    out = np.zeros((b.shape[0], 110), np.uint8)
    out[:, 0:32] = sum(((u[:, h, r] >> 2) << (4 * h + r)) for h in range(2) for r in range(4)).astype(np.uint8)
    for h in range(2):
        out[:, 32 + 32 * h:64 + 32 * h] = sum((u[:, h, r] & 3) << (2 * r) for r in range(4)).astype(np.uint8)
    s6 = (sc + 32).astype(np.uint8)  # (nb, 16)
    out[:, 96:104] = (s6[:, 0:8] & 15) | ((s6[:, 8:16] & 15) << 4)
    out[:, 104:108] = sum(((s6[:, 4 * g:4 * g + 4] >> 4) & 3) << (2 * g) for g in range(4)).astype(np.uint8)
    out[:, 108:110] = dbytes
    return out.reshape(-1)


def quantize_iq4_nl(x):
    """d = the block's largest-magnitude value / -127 (ggml's choice of
    sign), each value the nearest of the 16 table entries times d."""
    b = x.reshape(-1, 32).astype(np.float32)
    mx = b[np.arange(b.shape[0]), np.abs(b).argmax(axis=1)]
    dbytes, d = f16_round(mx / np.float32(-127))
    t = safe_div(b, d[:, None])
    mid = (IQ4NL_VALUES[1:] + IQ4NL_VALUES[:-1]) / 2  # nearest entry; a tie goes to the lower one
    q = np.searchsorted(mid, t, side="left").astype(np.uint8)
    out = np.zeros((b.shape[0], 18), np.uint8)
    out[:, 0:2] = dbytes
    out[:, 2:] = q[:, :16] | (q[:, 16:] << 4)
    return out.reshape(-1)


NUMPY_QUANTIZERS = {"q8_0": "quantize_q8_0", "q4_0": "quantize_q4_0", "q4_k": "quantize_q4_k",
                    "q6_k": "quantize_q6_k", "q5_k": "quantize_q5_k", "q2_k": "quantize_q2_k",
                    "q3_k": "quantize_q3_k", "iq4_nl": "quantize_iq4_nl"}


def f16_at(blocks, off):
    return blocks[:, off:off + 2].copy().view(np.float16).astype(np.float32)  # (nb, 1)


def dequantize(raw, kind):
    if kind == "f32":
        return raw.view(np.float32)
    if kind == "f16":
        return raw.view(np.float16).astype(np.float32)
    if kind == "bf16":
        return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    bs, bb = BLOCK[kind]
    blk = raw.reshape(-1, bb)
    if kind == "q8_0":
        return (blk[:, 2:].view(np.int8).astype(np.float32) * f16_at(blk, 0)).reshape(-1)
    if kind == "q4_0":
        qs = blk[:, 2:]
        q = np.concatenate([qs & 15, qs >> 4], axis=1).astype(np.float32) - 8
        return (q * f16_at(blk, 0)).reshape(-1)
    if kind == "q4_k":
        d, dmin, s, qs = f16_at(blk, 0), f16_at(blk, 2), blk[:, 4:16].astype(np.int32), blk[:, 16:]
        sc = np.empty((blk.shape[0], 8), np.int32)
        mn = np.empty((blk.shape[0], 8), np.int32)
        sc[:, :4], mn[:, :4] = s[:, 0:4] & 63, s[:, 4:8] & 63
        sc[:, 4:] = (s[:, 8:12] & 15) | ((s[:, 0:4] >> 6) << 4)
        mn[:, 4:] = (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)
        q = qs.reshape(-1, 4, 32)
        nib = np.stack([q & 15, q >> 4], axis=2).reshape(-1, 8, 32).astype(np.float32)  # sub-block 2p, 2p+1
        dl = (d * sc.astype(np.float32))[:, :, None]
        ml = (dmin * mn.astype(np.float32))[:, :, None]
        return (dl * nib - ml).astype(np.float32).reshape(-1)
    if kind == "q6_k":
        ql, qh, sc, d = blk[:, :128], blk[:, 128:192], blk[:, 192:208].view(np.int8), f16_at(blk, 208)
        out = np.empty((blk.shape[0], 256), np.float32)
        for h in range(2):
            l = ql[:, 64 * h:64 * h + 64].astype(np.int32)
            hb = qh[:, 32 * h:32 * h + 32].astype(np.int32)
            s = sc[:, 8 * h:8 * h + 8].astype(np.float32)
            for r in range(4):
                low = (l[:, 32 * (r & 1):32 * (r & 1) + 32] >> (4 * (r >> 1))) & 15
                q6 = (low | (((hb >> (2 * r)) & 3) << 4)) - 32
                scale = np.repeat(s[:, 2 * r:2 * r + 2], 16, axis=1)  # elements l < 16 use sc[2r], else sc[2r+1]
                out[:, 128 * h + 32 * r:128 * h + 32 * r + 32] = (d * scale) * q6.astype(np.float32)
        return out.reshape(-1)
    raise ValueError(kind)


def random_k_blocks(kind, nblocks, rng):
    bb = BLOCK[kind][1]
    raw = rng.integers(0, 256, size=(nblocks, bb), dtype=np.uint8)
    d = (0.001 + 0.02 * rng.random(nblocks)).astype(np.float16).view(np.uint8).reshape(-1, 2)
    if kind == "q4_k":
        raw[:, 0:2] = d
        raw[:, 2:4] = (0.003 + 0.01 * rng.random(nblocks)).astype(np.float16).view(np.uint8).reshape(-1, 2)
    else:
        raw[:, 208:210] = d
    return raw.reshape(-1)


# ---- reading the HF directory -------------------------------------------------

def read_safetensors(model_dir):
    """{name: (dtype, shape, memmap of bytes)} over model.safetensors or its shards."""
    idx = os.path.join(model_dir, "model.safetensors.index.json")
    files = sorted(set(json.load(open(idx))["weight_map"].values())) if os.path.exists(idx) else ["model.safetensors"]
    out = {}
    for fn in files:
        path = os.path.join(model_dir, fn)
        with open(path, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
        mm = np.memmap(path, dtype=np.uint8, mode="r")
        for name, e in header.items():
            if name == "__metadata__":
                continue
            b, en = e["data_offsets"]
            out[name] = (e["dtype"], e["shape"], mm[8 + n + b:8 + n + en])
    return out


def to_f32(entry):
    dt, shape, raw = entry
    if dt == "F32":
        a = raw.view(np.float32)
    elif dt == "F16":
        a = raw.view(np.float16).astype(np.float32)
    elif dt == "BF16":
        a = (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    else:
        raise SystemExit(f"make_gguf: dtype {dt} not supported")
    return a.reshape(shape)


def to_bf16(x):
    """f32 -> bf16 bytes, round to nearest even (exact for values that came from bf16)."""
    u = x.view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16).view(np.uint8)


def permute_rope(w, n_head):
    """HF rotate-half rows -> llama.cpp interleaved rows, per head."""
    rows, cols = w.shape
    hd = rows // n_head
    return w.reshape(n_head, 2, hd // 2, cols).swapaxes(1, 2).reshape(rows, cols)


def vocabulary(model_dir, vocab_size, bos, eos):
    """(tokens, scores, token_types) for tokenizer.ggml.model = llama."""
    tj = os.path.join(model_dir, "tokenizer.json")
    toks = None
    if os.path.exists(tj):
        t = json.load(open(tj, encoding="utf-8"))
        vocab = t.get("model", {}).get("vocab")
        if isinstance(vocab, dict):
            toks = [None] * vocab_size
            for s, i in vocab.items():
                if i < vocab_size:
                    toks[i] = s
            for a in t.get("added_tokens", []):
                if a["id"] < vocab_size:
                    toks[a["id"]] = a["content"]
            toks = [s if s is not None else f"<pad{i}>" for i, s in enumerate(toks)]
    if toks is None:
        toks = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
        toks = (toks + [f"\u2581t{i}" for i in range(len(toks), vocab_size)])[:vocab_size]
    types = []
    for i, s in enumerate(toks):
        if s == "<unk>":
            types.append(2)
        elif i in (bos, eos) or s in ("<s>", "</s>"):
            types.append(3)
        elif len(s) == 6 and s.startswith("<0x") and s.endswith(">"):
            types.append(6)
        else:
            types.append(1)
    scores = [-float(i) for i in range(len(toks))]
    return toks, scores, types


# ---- writing GGUF ---------------------------------------------------------------

def gstr(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def kv(key, t, value):
    out = gstr(key) + struct.pack("<I", t)
    if t == T_STR:
        return out + gstr(value)
    if t == T_ARR:
        et, items = value
        out += struct.pack("<IQ", et, len(items))
        if et == T_STR:
            return out + b"".join(gstr(s) for s in items)
        fmt = {T_F32: "f", T_I32: "i", T_U32: "I"}[et]
        return out + struct.pack(f"<{len(items)}{fmt}", *items)
    fmt = {T_U32: "<I", T_I32: "<i", T_F32: "<f", T_BOOL: "<?", T_U64: "<Q"}[t]
    return out + struct.pack(fmt, value)


def quantize(kind, x, gguf_py):
    """The bytes of F32 values x (1-D, whole rows) as kind: gguf.quants'
    quantizer when gguf_py (the module) is given and can, else ours."""
    if kind == "f32":
        return x.view(np.uint8)
    if kind == "f16":
        return x.astype(np.float16).view(np.uint8)
    if gguf_py and kind in GGUF_PY_QUANTIZES:
        qt = gguf_py.GGMLQuantizationType[kind.upper()]
        return gguf_py.quants.quantize(x.reshape(1, -1), qt).reshape(-1)
    if kind == "bf16":
        return to_bf16(x)
    if kind not in NUMPY_QUANTIZERS:
        raise SystemExit(f"make_gguf: {kind} needs --writer gguf-py (ggml's gguf package)")
    return globals()[NUMPY_QUANTIZERS[kind]](x)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model_dir")
    p.add_argument("out")
    p.add_argument("--type", default="f16", choices=TYPES)
    p.add_argument("--dump-ref", help="directory for src.bin / deq.bin / names.txt")
    p.add_argument("--k-samples", action="store_true", help="add test.q4_k / test.q6_k random-block tensors")
    p.add_argument("--writer", default="numpy", choices=["numpy", "gguf-py"])
    p.add_argument("--snap", choices=sorted(NUMPY_QUANTIZERS), help="round 2-D weights through this type first")
    p.add_argument("--raw-tensor", action="append", default=[], metavar="NAME=TYPE",
                   help="(gguf-py writer) tensor NAME as random bytes of ggml type TYPE")
    a = p.parse_args(argv)
    gguf_py = None
    if a.writer == "gguf-py":
        try:
            import gguf as gguf_py
        except ImportError:
            raise SystemExit("make_gguf: --writer gguf-py needs the gguf package (.venv/bin/python)")
    elif a.type in GGUF_PY_ONLY:
        raise SystemExit(f"make_gguf: --type {a.type} needs --writer gguf-py")
    raw_types = dict(r.split("=", 1) for r in a.raw_tensor)
    if raw_types and not gguf_py:
        raise SystemExit("make_gguf: --raw-tensor needs --writer gguf-py")

    cfg = json.load(open(os.path.join(a.model_dir, "config.json")))
    if cfg.get("architectures", [""])[0] not in ("LlamaForCausalLM", "MistralForCausalLM"):
        raise SystemExit("make_gguf: only Llama-architecture models are supported")
    st = read_safetensors(a.model_dir)
    d, L, H = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"]
    KV = cfg.get("num_key_value_heads", H)
    V = cfg["vocab_size"]
    tied = cfg.get("tie_word_embeddings", False) or "lm_head.weight" not in st

    plan = [("token_embd.weight", "model.embed_tokens.weight", None)]
    for i in range(L):
        hf = f"model.layers.{i}."
        plan += [(f"blk.{i}.attn_norm.weight", hf + "input_layernorm.weight", None),
                 (f"blk.{i}.attn_q.weight", hf + "self_attn.q_proj.weight", H),
                 (f"blk.{i}.attn_k.weight", hf + "self_attn.k_proj.weight", KV),
                 (f"blk.{i}.attn_v.weight", hf + "self_attn.v_proj.weight", None),
                 (f"blk.{i}.attn_output.weight", hf + "self_attn.o_proj.weight", None),
                 (f"blk.{i}.ffn_norm.weight", hf + "post_attention_layernorm.weight", None),
                 (f"blk.{i}.ffn_gate.weight", hf + "mlp.gate_proj.weight", None),
                 (f"blk.{i}.ffn_up.weight", hf + "mlp.up_proj.weight", None),
                 (f"blk.{i}.ffn_down.weight", hf + "mlp.down_proj.weight", None)]
    plan.append(("output_norm.weight", "model.norm.weight", None))
    if not tied:
        plan.append(("output.weight", "lm_head.weight", None))

    # tensor infos: shapes and types are known without reading the data
    infos, offset = [], 0
    for name, hfname, _ in plan:
        shape = st[hfname][1]
        kind = a.type if len(shape) == 2 else "f32"
        if kind in FALLBACK and shape[-1] % 256:
            kind = FALLBACK[kind]  # rows not a multiple of the super-block, as llama.cpp falls back
        n = int(np.prod(shape))
        size = n * 4 if kind == "f32" else n * 2 if kind in ("f16", "bf16") else n // BLOCK[kind][0] * BLOCK[kind][1]
        infos.append((name, list(reversed(shape)), kind, offset, size))
        offset += (size + ALIGN - 1) // ALIGN * ALIGN
    rng = np.random.default_rng(1234)
    ksamples = {}
    if a.k_samples:
        for kind in ("q4_k", "q6_k"):
            raw = random_k_blocks(kind, 6, rng)  # 2 rows of 768
            ksamples[f"test.{kind}"] = raw
            infos.append((f"test.{kind}", [768, 2], kind, offset, raw.size))
            offset += (raw.size + ALIGN - 1) // ALIGN * ALIGN

    bos, eos = cfg.get("bos_token_id", 1), cfg.get("eos_token_id", 2)
    eos = eos[0] if isinstance(eos, list) else eos
    bos = 1 if bos is None else bos
    eos = 2 if eos is None else eos
    toks, scores, types = vocabulary(a.model_dir, V, bos, eos)
    meta = [("general.architecture", T_STR, "llama"),
            ("general.name", T_STR, os.path.basename(os.path.normpath(a.model_dir))),
            ("general.alignment", T_U32, ALIGN),
            ("general.file_type", T_U32, FTYPE[a.type]),
            ("llama.context_length", T_U32, cfg.get("max_position_embeddings", 2048)),
            ("llama.embedding_length", T_U32, d),
            ("llama.block_count", T_U32, L),
            ("llama.feed_forward_length", T_U32, cfg["intermediate_size"]),
            ("llama.attention.head_count", T_U32, H),
            ("llama.attention.head_count_kv", T_U32, KV),
            ("llama.rope.freq_base", T_F32, cfg.get("rope_theta", 10000.0)),
            ("llama.attention.layer_norm_rms_epsilon", T_F32, cfg.get("rms_norm_eps", 1e-6)),
            ("llama.rope.dimension_count", T_U32, cfg.get("head_dim") or d // H),
            ("llama.vocab_size", T_U32, V),
            ("tokenizer.ggml.model", T_STR, "llama"),
            ("tokenizer.ggml.tokens", T_ARR, (T_STR, toks)),
            ("tokenizer.ggml.scores", T_ARR, (T_F32, scores)),
            ("tokenizer.ggml.token_type", T_ARR, (T_I32, types)),
            ("tokenizer.ggml.bos_token_id", T_U32, bos),
            ("tokenizer.ggml.eos_token_id", T_U32, eos),
            ("tokenizer.ggml.add_bos_token", T_BOOL, True)]

    def tensors():
        """(name, kind, F32 source or None, bytes) in file order."""
        for (name, hfname, nhead), (_, ne, kind, off, size) in zip(plan + [(k, None, None) for k in ksamples], infos):
            if hfname is None:
                yield name, kind, None, ksamples[name]
                continue
            x = to_f32(st[hfname])
            if nhead:
                x = permute_rope(x, nhead)
            x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
            if a.snap and len(ne) == 2:
                x = np.ascontiguousarray(dequantize(quantize(a.snap, x, None), a.snap), dtype=np.float32)
            raw = quantize(kind, x, gguf_py)
            assert raw.size == size, (name, raw.size, size)
            yield name, kind, x, raw

    ref = None
    if a.dump_ref:
        os.makedirs(a.dump_ref, exist_ok=True)
        ref = (open(os.path.join(a.dump_ref, "src.bin"), "wb"), open(os.path.join(a.dump_ref, "deq.bin"), "wb"),
               open(os.path.join(a.dump_ref, "names.txt"), "w"))

    def dump(name, kind, x, raw, ne):
        if not ref:
            return
        if gguf_py:  # ggml's own definitions of the formats
            qt = gguf_py.GGMLQuantizationType[kind.upper()]
            deq = gguf_py.quants.dequantize(raw.reshape(ne[1] if len(ne) > 1 else 1, -1), qt).reshape(-1)
        else:
            deq = dequantize(raw, kind)
        ref[0].write((x if x is not None else np.zeros(deq.size, np.float32)).tobytes())
        ref[1].write(deq.astype(np.float32).tobytes())
        ref[2].write(f"{name} {kind} {deq.size}\n")

    if gguf_py:
        w = gguf_py.GGUFWriter(a.out, "llama")
        add = {T_STR: w.add_string, T_U32: w.add_uint32, T_F32: w.add_float32, T_BOOL: w.add_bool}
        for key, t, value in meta:
            if key in ("general.architecture", "general.alignment"):
                continue  # the writer's own; alignment: GGUF's default (32)
            if t == T_ARR:
                w.add_array(key, value[1])
            else:
                add[t](key, value)
        for name, ne, kind, _, size in infos:
            rt = raw_types.get(name)
            qt = gguf_py.GGMLQuantizationType[(rt or kind).upper()]
            if rt:
                bs, ts = gguf_py.GGML_QUANT_SIZES[qt]
                size = ne[0] // bs * ts * (ne[1] if len(ne) > 1 else 1)
            byte_shape = list(reversed(ne))[:-1] + [size // (ne[1] if len(ne) > 1 else 1)]
            w.add_tensor_info(name, byte_shape, np.dtype(np.uint8), size, raw_dtype=qt)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        for (name, kind, x, raw), (_, ne, _, _, _) in zip(tensors(), infos):
            if name in raw_types:
                qt = gguf_py.GGMLQuantizationType[raw_types[name].upper()]
                bs, ts = gguf_py.GGML_QUANT_SIZES[qt]
                raw = rng.integers(0, 256, size=ne[0] // bs * ts * (ne[1] if len(ne) > 1 else 1), dtype=np.uint8)
                w.write_tensor_data(raw)
                continue
            w.write_tensor_data(raw)
            dump(name, kind, x, raw, ne)
        w.close()
    else:
        kvs = [kv(key, t, value) for key, t, value in meta]
        head = b"GGUF" + struct.pack("<IQQ", 3, len(infos), len(kvs)) + b"".join(kvs)
        for name, ne, kind, off, _ in infos:
            head += gstr(name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne)
            head += struct.pack("<IQ", GGML[kind], off)
        head += b"\0" * (-len(head) % ALIGN)
        with open(a.out, "wb") as f:
            f.write(head)
            for (name, kind, x, raw), (_, ne, _, _, size) in zip(tensors(), infos):
                f.write(raw.tobytes())
                f.write(b"\0" * (-size % ALIGN))
                dump(name, kind, x, raw, ne)
    if ref:
        for r in ref:
            r.close()


if __name__ == "__main__":
    main(sys.argv[1:])
