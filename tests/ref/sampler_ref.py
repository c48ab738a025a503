#!/usr/bin/python3
"""Reference for tests/test_sampler.c: vLLM V1 sampling semantics in numpy.

Written from vLLM 0.11's SamplingParams and V1 Sampler (sampler.py,
ops/penalties.py, ops/topk_topp_sampler.py, logits_processor/builtin.py), in
float64 and with whole-array operations, sorting where vLLM sorts; it shares
no code with src/sample/sampler.c, which uses selection instead of sorting.

For each case it prints random logits and parameters and what vLLM would make
of them: the final probability vector the draw uses, the raw log-probabilities
(logprobs_mode raw_logprobs) and the top-N token ids. Chi-square cases also
carry an alternative distribution (a different temperature) the test must
tell apart from the right one.

    /usr/bin/python3 tests/ref/sampler_ref.py [SEED] > cases.txt

Output, one case per block (floats as Python reprs; float32 inputs print
their exact value):
    case NAME V
    p TEMPERATURE TOP_K TOP_P MIN_P PRESENCE FREQUENCY REPETITION MIN_TOKENS LOGPROBS
    eos N ids... / stop N ids... / bias N (id value)... / prompt N ids... / output N ids...
    logits V floats / probs V floats / rawlp V floats / top N ids [/ alt V floats]
    end
"""
import sys

import numpy as np

SAMPLING_EPS = 1e-5   # vLLM _SAMPLING_EPS: temperature below it is greedy
MAX_TEMP = 1e-2       # vLLM _MAX_TEMP: 0 < temperature < it is raised to it


def log_softmax(x):
    x = np.asarray(x, np.float64)
    finite = x > -np.inf
    m = x[finite].max()
    return x - m - np.log(np.exp(x[finite] - m).sum())


def softmax(x):
    x = np.asarray(x, np.float64)
    out = np.zeros_like(x)
    finite = x > -np.inf
    e = np.exp(x[finite] - x[finite].max())
    out[finite] = e / e.sum()
    return out


def vllm_logits(logits, prm, eos, stop, bias, prompt, output):
    """The logits after vLLM's non-argmax-invariant processors and penalties,
    before temperature: greedy sampling takes their argmax."""
    V = len(logits)
    x = np.asarray(logits, np.float64).copy()
    # non-argmax-invariant logits processors: min_tokens masks all stop ids, logit_bias adds
    if prm["min_tokens"] > len(output):
        for t in list(eos) + list(stop):
            if 0 <= t < V:
                x[t] = -np.inf
    for t, b in bias:
        x[t] += b
    # penalties: repetition over prompt+output (divide positive, multiply others),
    # then frequency (x count in output), then presence (x seen in output)
    rep, freq, pres = prm["repetition"], prm["frequency"], prm["presence"]
    if rep != 1.0 or freq != 0.0 or pres != 0.0:
        prompt_mask = np.zeros(V, bool)
        prompt_mask[[t for t in prompt if 0 <= t < V]] = True
        counts = np.bincount([t for t in output if 0 <= t < V], minlength=V).astype(np.float64)
        out_mask = counts > 0
        pen = np.where(prompt_mask | out_mask, rep, 1.0)
        with np.errstate(invalid="ignore"):
            x = np.where(x > 0, x / pen, x * pen)
        x = x - freq * counts - pres * out_mask
    return x


def vllm_probs(logits, prm, eos, stop, bias, prompt, output, margins=None):
    """The distribution vLLM samples from. margins (a list) collects how far
    each threshold decision was from flipping, so callers can avoid cases a
    float32 implementation could legitimately decide the other way."""
    V = len(logits)
    x = vllm_logits(logits, prm, eos, stop, bias, prompt, output)
    if not (x > -np.inf).any():
        return None   # everything masked: vLLM would sample garbage, the C sampler reports an error
    temp = prm["temperature"]
    if 0 < temp < MAX_TEMP:
        temp = MAX_TEMP
    if temp < SAMPLING_EPS:
        out = np.zeros(V)
        out[int(np.argmax(x))] = 1.0   # argmax: first maximum = lowest id
        return out
    x = x / temp
    # argmax-invariant processors: min_p on the tempered distribution
    if prm["min_p"] > 0:
        probs = softmax(x)
        thr = probs.max() * prm["min_p"]
        if margins is not None:
            live = probs[probs > 0]
            margins.append(np.min(np.abs(live - thr)) / thr)
        x[probs < thr] = -np.inf
    # top-k: keep values >= the k-th largest (ties kept); k <= 0 or >= V is off
    k = prm["top_k"]
    if 0 < k < V:
        kth = np.sort(x)[V - k]
        x[x < kth] = -np.inf
    # top-p: ascending sort, cumulative probability <= 1 - p is cut, the largest always kept
    p = prm["top_p"]
    if p < 1.0:
        order = np.argsort(x, kind="stable")
        cum = np.cumsum(softmax(x[order]))
        if margins is not None:
            margins.append(np.min(np.abs(cum - (1 - p))))
            live = x[x > -np.inf]
            margins.append(0.0 if len(np.unique(live)) != len(live) else 1.0)  # ties: order-dependent
        cut = cum <= 1 - p
        cut[-1] = False
        x[order[cut]] = -np.inf
    return softmax(x)


def top_ids(logits, n):
    x = np.asarray(logits, np.float64)
    order = np.lexsort((np.arange(len(x)), -x))   # descending value, then lower id
    return [int(i) for i in order[:n]]


def f32(v):
    return float(np.float32(v))


def fmt(vals):
    return " ".join(repr(float(v)) for v in vals)


def emit(out, name, logits, prm, eos, stop, bias, prompt, output, probs, alt=None):
    V = len(logits)
    n_top = min(prm["logprobs"], V) if prm["logprobs"] > 0 else 0
    w = out.write
    w(f"case {name} {V}\n")
    w("p " + " ".join(repr(prm[k]) for k in ("temperature", "top_k", "top_p", "min_p", "presence",
                                              "frequency", "repetition", "min_tokens", "logprobs")) + "\n")
    w(f"eos {len(eos)} {' '.join(map(str, eos))}\n")
    w(f"stop {len(stop)} {' '.join(map(str, stop))}\n")
    w(f"bias {len(bias)} {' '.join(f'{t} {b!r}' for t, b in bias)}\n")
    w(f"prompt {len(prompt)} {' '.join(map(str, prompt))}\n")
    w(f"output {len(output)} {' '.join(map(str, output))}\n")
    w("logits " + fmt(logits) + "\n")
    w("probs " + fmt(probs) + "\n")
    w("rawlp " + fmt(log_softmax(logits)) + "\n")
    w(f"top {n_top} {' '.join(map(str, top_ids(logits, n_top)))}\n")
    if alt is not None:
        w("alt " + fmt(alt) + "\n")
    w("end\n")


def random_case(rng, ties=False):
    V = int(rng.choice([1, 2, 7, 64, 257, 1000]))
    if ties:   # few distinct values: exercises argmax and top-k ties
        logits = rng.integers(-4, 5, V).astype(np.float32) / np.float32(2)
    else:
        logits = (rng.standard_normal(V) * rng.choice([0.01, 0.5, 2.0, 5.0])).astype(np.float32)
    pick = lambda opts: opts[int(rng.integers(len(opts)))]
    prm = {
        "temperature": f32(pick([0.0, 0.0, 0.005, 0.3, 0.7, 1.0, 1.0, 1.6])),
        "top_k": int(pick([0, 0, -1, 1, 2, 5, 40, V, V + 7])),
        "top_p": f32(pick([1.0, 1.0, 0.95, 0.8, 0.5, 0.1])),
        "min_p": f32(pick([0.0, 0.0, 0.0, 0.02, 0.1, 0.5])),
        "presence": f32(pick([0.0, 0.0, 0.5, -0.7, 2.0])),
        "frequency": f32(pick([0.0, 0.0, 0.3, -0.4, 1.5])),
        "repetition": f32(pick([1.0, 1.0, 1.3, 0.7, 2.0])),
        "min_tokens": int(pick([0, 0, 3, 10])),
        "logprobs": int(pick([-1, 0, 1, 5, 20])),
    }
    if ties:
        prm["top_p"] = 1.0   # vLLM's top-p cut between equal values depends on sort order
    hot = rng.integers(0, V, max(1, min(V, 6)))   # a few ids repeat across prompt and output
    prompt = [int(t) for t in rng.choice(hot, int(rng.integers(0, 12)))]
    output = [int(t) for t in rng.choice(hot, int(rng.integers(0, 12)))]
    eos = [int(rng.integers(V))]
    stop = sorted({int(t) for t in rng.integers(0, V, int(rng.integers(0, 3)))})
    nb = min(int(rng.integers(0, 4)), V)
    bias = [(int(t), f32(rng.uniform(-5, 5))) for t in rng.choice(V, nb, replace=False)]
    return logits, prm, eos, stop, bias, prompt, output


def chisq_case(rng, idx):
    """Small vocabularies with every processing step active, for draw statistics."""
    V = [12, 24, 40, 200][idx % 4]
    logits = (rng.standard_normal(V) * 1.5).astype(np.float32)
    prm = {"temperature": f32([0.8, 1.0, 1.3, 0.6][idx % 4]), "top_k": [0, 15, 30, 50][idx % 4],
           "top_p": f32([1.0, 0.97, 0.9, 0.95][idx % 4]), "min_p": f32([0.0, 0.01, 0.0, 0.005][idx % 4]),
           "presence": f32(0.3), "frequency": f32(0.2), "repetition": f32(1.2), "min_tokens": 2,
           "logprobs": -1}
    prompt = [int(t) for t in rng.integers(0, V, 5)]
    output = [int(rng.integers(V))]
    eos = [V - 1]
    bias = [(int(rng.integers(V)), f32(1.5))]
    return logits, prm, eos, [], bias, prompt, output


def large_case(rng, idx):
    """A vocabulary big enough for the selection code to recurse."""
    V = [20000, 4099, 20000, 20000][idx]   # an odd one too: scratch alignment
    logits = (rng.standard_normal(V) * 2.5).astype(np.float32)
    prm = {"temperature": f32(0.9), "top_k": [1000, 0, 0, 7000][idx], "top_p": f32([0.9, 0.5, 0.95, 1.0][idx]),
           "min_p": f32([0.0, 0.0, 1e-4, 0.0][idx]), "presence": 0.0, "frequency": 0.0, "repetition": 1.0,
           "min_tokens": 0, "logprobs": 20}
    return logits, prm, [0], [], [], [], []


def main():
    seed = int(sys.argv[1]) if len(sys.argv) > 1 else 20251001
    rng = np.random.default_rng(seed)
    out = sys.stdout
    n = 0
    while n < 240:
        case = random_case(rng, ties=(n % 8 == 7))
        margins = []
        probs = vllm_probs(*case, margins=margins)
        if probs is None or (margins and min(margins) < 1e-4):   # too close to a threshold to be a fair test
            continue
        emit(out, f"random{n}", case[0], *case[1:], probs)
        n += 1
    for i, temp in enumerate([0.005, 0.0001, 0.02]):   # tiny temperatures on logits that differ little
        logits = (rng.standard_normal(50) * 0.01).astype(np.float32)
        prm = {"temperature": f32(temp), "top_k": 0, "top_p": 1.0, "min_p": 0.0, "presence": 0.0,
               "frequency": 0.0, "repetition": 1.0, "min_tokens": 0, "logprobs": 1}
        emit(out, f"cold{i}", logits, prm, [0], [], [], [], [], vllm_probs(logits, prm, [0], [], [], [], []))
    for i in range(4):
        while True:
            case = large_case(rng, i)
            margins = []
            probs = vllm_probs(*case, margins=margins)
            if not margins or min(margins) >= 1e-4:
                break
        emit(out, f"large{i}", case[0], *case[1:], probs)
    for i in range(4):
        while True:
            case = chisq_case(rng, i)
            margins = []
            probs = vllm_probs(*case, margins=margins)
            if not margins or min(margins) >= 1e-4:
                break
        hot = dict(case[1], temperature=case[1]["temperature"] * 1.25)
        alt = vllm_probs(case[0], hot, *case[2:])
        emit(out, f"chisq{i}", case[0], *case[1:], probs, alt)


if __name__ == "__main__":
    main()
