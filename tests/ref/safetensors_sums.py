#!/usr/bin/python3
"""safetensors_sums.py - an independent reader for the loader tests.

    /usr/bin/python3 tests/ref/safetensors_sums.py DIR [DIR ...]

Reads every tensor of each Hugging Face model directory (model.safetensors, or
the shards listed by model.safetensors.index.json) with numpy, following the
format as published (8-byte little-endian header length, JSON header, data
section; offsets relative to the data section), and prints one line per tensor:

    DIR<TAB>NAME<TAB>DTYPE<TAB>SHAPE<TAB>SUM<TAB>SUM_OF_SQUARES<TAB>FIRST<TAB>LAST

with SHAPE as comma-separated dims and the numbers as float64 (repr) of the
decoded values. The C test recomputes the same statistics from model_load's
views and compares them.
"""
import json
import os
import sys

import numpy as np


def decode(raw, dtype):
    if dtype == "F32":
        return np.frombuffer(raw, dtype="<f4").astype(np.float64)
    if dtype == "F16":
        return np.frombuffer(raw, dtype="<f2").astype(np.float64)
    if dtype == "BF16":
        return (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    raise ValueError(dtype)


def files_of(d):
    index = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(index):
        return sorted(set(json.load(open(index))["weight_map"].values()))
    return ["model.safetensors"]


def main(dirs):
    for d in dirs:
        for name in files_of(d):
            blob = open(os.path.join(d, name), "rb").read()
            n = int.from_bytes(blob[:8], "little")
            header = json.loads(blob[8:8 + n])
            data = blob[8 + n:]
            for tname, e in header.items():
                if tname == "__metadata__":
                    continue
                b, end = e["data_offsets"]
                x = decode(data[b:end], e["dtype"])
                shape = ",".join(str(s) for s in e["shape"])
                print("\t".join([d, tname, e["dtype"], shape, repr(float(x.sum())), repr(float((x * x).sum())),
                                 repr(float(x[0])), repr(float(x[-1]))]))


if __name__ == "__main__":
    main(sys.argv[1:])
