"""Writes a copy of a safetensors model directory whose matmul weights are
rounded to bfloat16 by torch (.to(torch.float32).to(torch.bfloat16): nearest
even), the rest unchanged: what vllm.c's --dtype bfloat16 does to F16 / F32
weights at load (model_convert_bf16), done by an implementation nobody here
wrote. The matmul weights: every *_proj.weight and lm_head.weight; not the
embedding rows, norms or biases.

    /usr/bin/python3 tests/ref/bf16_weights.py SRC_DIR OUT_DIR
"""
import json
import os
import shutil
import struct
import sys

import numpy as np
import torch

NP = {"F16": np.float16, "F32": np.float32, "BF16": np.uint16}


def main():
    src, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    for name in os.listdir(src):
        if name != "model.safetensors":
            shutil.copy(os.path.join(src, name), out)
    data = open(os.path.join(src, "model.safetensors"), "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    new_header, blobs, off, converted = {}, [], 0, 0
    for name, info in header.items():
        if name == "__metadata__":
            new_header[name] = info
            continue
        lo, hi = info["data_offsets"]
        raw = data[8 + n + lo:8 + n + hi]
        dtype = info["dtype"]
        if (name.endswith("_proj.weight") or name == "lm_head.weight") and dtype in ("F16", "F32"):
            t = torch.from_numpy(np.frombuffer(raw, dtype=NP[dtype]).astype(np.float32))
            raw = t.to(torch.bfloat16).view(torch.int16).numpy().tobytes()
            dtype = "BF16"
            converted += 1
        new_header[name] = {"dtype": dtype, "shape": info["shape"], "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(new_header).encode()
    h += b" " * (-len(h) % 8)
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    print(f"{converted} weights rounded to bfloat16")


if __name__ == "__main__":
    main()
