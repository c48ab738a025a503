#!/usr/bin/python3
"""bench_stats_ref.py - numpy's answers for tests/test_bench_stats.c.

Prints one JSON object: fixed samples (numpy RandomState(1234), several sizes
including 1 and 2, ties, and a heavy tail) and, for each, np.mean, np.std,
np.median and np.percentile at the percentiles vLLM's benchmarks print.
"""
import json

import numpy as np

rs = np.random.RandomState(1234)
samples = [
    [0.25],
    [3.0, 1.0],
    [5.0, 1.0, 1.0, 2.0, 9.0, 2.0, 7.0],
    rs.exponential(0.05, size=100).tolist(),
    rs.gamma(0.5, 2.0, size=1001).tolist(),
]
pcts = [0.5, 10, 25, 50, 75, 90, 99, 99.9]
cases = []
for s in samples:
    a = np.array(s)
    cases.append({
        "x": s,
        "mean": float(np.mean(a)),
        "std": float(np.std(a)),
        "median": float(np.median(a)),
        "percentiles": [float(np.percentile(a, p)) for p in pcts],
    })
print(json.dumps({"pcts": pcts, "cases": cases}))
