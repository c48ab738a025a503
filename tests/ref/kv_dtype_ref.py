"""Reference for tests/test_kv_dtype.c --torch-ref: the KV cache element types
as torch defines them, and attention over K/V rounded through torch's casts.

    .venv/bin/python tests/ref/kv_dtype_ref.py OUT_DIR [SEED]

Nothing here shares code with src/kernels/kv_dtype.h: every conversion is a
torch cast (torch.bfloat16, torch.float16, torch.float8_e4m3fn,
torch.float8_e5m2), every attention output a float64 softmax over those
rounded values. Files (little-endian):

  decode_<type>.bin   float32 bits of every code of the type, in code order
                      (65536 for bfloat16/float16, 256 for the FP8 types):
                      torch's view of the code as the type, .float()
  encode_in.bin       float32 test values: random normals at scales across
                      every type's range, each type's exact midpoints between
                      neighbours (ties), values just beside them, the largest
                      finite values and beyond, F32 subnormals, +-0, +-inf, NaN
  encode_<type>.bin   the code torch stores for each: x.to(type) viewed as an
                      integer; for float8_e5m2 of x clamped to +-57344 first
                      (vllm.c saturates both FP8 types, as vLLM's CUDA cache
                      writes do; torch's e4m3fn cast saturates by itself, its
                      e5m2 cast would give infinity)
  attention.bin       int32 count, then per case: int32 type (0 float32,
                      1 bfloat16, 2 float16, 3 fp8_e4m3, 4 fp8_e5m2),
                      head_dim, group, n_ctx, window; float32 scale, k_scale,
                      v_scale; float32 q[group][head_dim], k[n_ctx][head_dim],
                      v[n_ctx][head_dim] (as the model computed them),
                      k_stored[n_ctx][head_dim], v_stored (torch's
                      (x / scale).to(type).float(): what the cache must hold);
                      float64 out[group][head_dim] = softmax(q . k_r * scale) v_r
                      over the window, k_r = k_stored * k_scale (likewise v)
"""
import os
import struct
import sys

import numpy as np
import torch

TYPES = [("float32", torch.float32), ("bfloat16", torch.bfloat16), ("float16", torch.float16),
         ("fp8_e4m3", torch.float8_e4m3fn), ("fp8_e5m2", torch.float8_e5m2)]
INT_VIEW = {1: torch.uint8, 2: torch.int16}


def bits(t):
    return t.contiguous().view(INT_VIEW[t.element_size()]).numpy().astype(np.uint16 if t.element_size() == 2 else np.uint8)


def to_type(x, dt):
    if dt == torch.float8_e5m2:
        x = x.clamp(-57344.0, 57344.0)
    return x.to(dt)


def decode_table(dt):
    n = 1 << torch.finfo(dt).bits
    codes = np.arange(n, dtype=np.uint8 if n == 256 else np.uint16)
    raw = torch.from_numpy(codes if n == 256 else codes.view(np.int16))
    return raw.view(dt).float()


def encode_inputs(rng):
    xs = [rng.standard_normal(20000) * s for s in (1e-6, 1e-3, 0.05, 1.0, 30.0, 300.0, 3e4, 1e6)]
    xs.append(rng.uniform(-600, 600, 20000))
    for name, dt in TYPES[1:]:
        vals = decode_table(dt).double().numpy()
        vals = np.unique(vals[np.isfinite(vals)])
        mids = (vals[:-1] + vals[1:]) / 2
        mids = mids[mids.astype(np.float32) == mids]  # exact ties only
        xs += [mids, np.nextafter(mids.astype(np.float32), np.float32(np.inf)),
               np.nextafter(mids.astype(np.float32), np.float32(-np.inf)), vals]
        m = float(torch.finfo(dt).max)
        xs.append(np.array([m, -m, m * 1.01, -m * 1.01, m * 1.2, m * 4, -m * 4, m * 1000]))
    tiny = np.array([1e-45, -1e-45, 1e-40, 1.1754942e-38, -3e-39], dtype=np.float32)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 3.4028235e38, -3.4028235e38], dtype=np.float32)
    with np.errstate(over="ignore"):  # beyond the F32 range: infinities, wanted
        x = np.concatenate([np.asarray(a, dtype=np.float64).astype(np.float32) for a in xs] + [tiny, special])
    return x.astype(np.float32)


def attention_cases(rng):
    cases = []
    shapes = [(64, 3, 100, 0), (80, 4, 37, 0), (8, 1, 1, 0), (24, 2, 70, 20), (128, 8, 50, 0), (12, 5, 33, 9)]
    for ti, (name, dt) in enumerate(TYPES):
        scales = [(1.0, 1.0)]
        if name.startswith("fp8"):
            scales += [(0.05, 0.02), (2.5, 0.5)]
        for ks, vs in scales:
            for hd, group, n_ctx, window in shapes:
                q = rng.standard_normal((group, hd)).astype(np.float32)
                k = (rng.standard_normal((n_ctx, hd)) * 1.5).astype(np.float32)
                v = rng.standard_normal((n_ctx, hd)).astype(np.float32)
                scale = np.float32(1.0 / np.sqrt(hd))
                if dt == torch.float32:
                    ks_t, vs_t = 1.0, 1.0
                    k_st, v_st = k.copy(), v.copy()
                else:
                    ks_t, vs_t = ks, vs
                    k_st = to_type(torch.from_numpy(k) / torch.tensor(ks, dtype=torch.float32), dt).float().numpy()
                    v_st = to_type(torch.from_numpy(v) / torch.tensor(vs, dtype=torch.float32), dt).float().numpy()
                start = n_ctx - window if window and n_ctx > window else 0
                kr = k_st.astype(np.float64)[start:] * np.float64(np.float32(ks_t))
                vr = v_st.astype(np.float64)[start:] * np.float64(np.float32(vs_t))
                s = (q.astype(np.float64) @ kr.T) * np.float64(scale)
                p = np.exp(s - s.max(axis=1, keepdims=True))
                out = (p @ vr) / p.sum(axis=1, keepdims=True)
                cases.append((ti, hd, group, n_ctx, window, scale, ks_t, vs_t, q, k, v, k_st, v_st, out))
    return cases


def main(out_dir, seed=1234):
    os.makedirs(out_dir, exist_ok=True)
    rng = np.random.default_rng(seed)
    for name, dt in TYPES[1:]:
        decode_table(dt).numpy().astype(np.float32).tofile(os.path.join(out_dir, f"decode_{name}.bin"))
    x = encode_inputs(rng)
    x.tofile(os.path.join(out_dir, "encode_in.bin"))
    xt = torch.from_numpy(x)
    for name, dt in TYPES[1:]:
        bits(to_type(xt, dt)).tofile(os.path.join(out_dir, f"encode_{name}.bin"))
    cases = attention_cases(rng)
    with open(os.path.join(out_dir, "attention.bin"), "wb") as f:
        f.write(struct.pack("<i", len(cases)))
        for ti, hd, group, n_ctx, window, scale, ks, vs, q, k, v, k_st, v_st, out in cases:
            f.write(struct.pack("<5i3f", ti, hd, group, n_ctx, window, float(scale), ks, vs))
            for a in (q, k, v, k_st, v_st):
                f.write(np.ascontiguousarray(a, dtype=np.float32).tobytes())
            f.write(np.ascontiguousarray(out, dtype=np.float64).tobytes())
    print(f"{out_dir}: {len(x)} encode values, {len(cases)} attention cases")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1234)
