"""spec_chisq.py - do speculative decoding's sampled outputs follow the model's
distribution? Pearson's chi-square of the first two sampled positions of many
seeded requests against transformers' softmax(logits / TEMPERATURE) (the
requests' temperature, no other sampling parameter),
the test's p-value from torch.special.gammaincc (the chi-square survival
function); tests/test_spec_chisq.sh.

    .venv/bin/python tests/ref/spec_chisq.py MODEL_DIR PROMPT_IDS_JSON TEMPERATURE NAME=OUT.jsonl ...

OUT.jsonl: `vllmc generate --json` lines, one request each (max_tokens >= 2).
Per NAME, two result lines:
  ok|FAIL NAME_pos1: the first tokens against p(. | prompt)
  ok|FAIL NAME_pos2: the second tokens of the samples whose first token is the
                     most frequent one, against p(. | prompt, that token)
Categories with fewer than 5 expected samples are pooled into one (the usual
rule for the chi-square approximation). Threshold: p-value >= 1e-3, so a
correct sampler fails one run in a thousand per check; the seeds are fixed,
so a run that passes passes every time.
"""
import json
import sys

import torch
from transformers import AutoModelForCausalLM

ALPHA = 1e-3


def chisq(counts, probs):
    n = sum(counts.values())
    exp = {t: float(p) * n for t, p in enumerate(probs.tolist())}
    obs_small = sum(c for t, c in counts.items() if exp.get(t, 0) < 5)
    exp_small = sum(e for e in exp.values() if e < 5)
    stat, cats = 0.0, 0
    for t, e in exp.items():
        if e >= 5:
            stat += (counts.get(t, 0) - e) ** 2 / e
            cats += 1
    if exp_small > 0:
        stat += (obs_small - exp_small) ** 2 / exp_small
        cats += 1
    df = cats - 1
    p = float(torch.special.gammaincc(torch.tensor(df / 2.0, dtype=torch.float64),
                                      torch.tensor(stat / 2.0, dtype=torch.float64)))
    return stat, df, p, n


def main():
    model_dir, prompt, temp = sys.argv[1], json.loads(sys.argv[2]), float(sys.argv[3])
    torch.set_num_threads(1)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()

    def dist(ids):
        with torch.no_grad():
            return (model(torch.tensor([ids])).logits[0, -1].double() / temp).softmax(-1)

    p1 = dist(prompt)
    for arg in sys.argv[4:]:
        name, path = arg.split("=", 1)
        outs = [json.loads(l)["outputs"][0]["token_ids"] for l in open(path)]
        c1 = {}
        for o in outs:
            c1[o[0]] = c1.get(o[0], 0) + 1
        stat, df, p, n = chisq(c1, p1)
        v = "ok" if p >= ALPHA else "FAIL"
        print(f"{v} {name}_pos1{'  #' if v == 'ok' else ':'} chi2 {stat:.1f}, df {df}, p-value {p:.3g} over {n} samples (threshold {ALPHA})")
        top = max(c1, key=c1.get)
        c2 = {}
        for o in outs:
            if o[0] == top and len(o) > 1:
                c2[o[1]] = c2.get(o[1], 0) + 1
        stat, df, p, n = chisq(c2, dist(prompt + [top]))
        v = "ok" if p >= ALPHA else "FAIL"
        print(f"{v} {name}_pos2{'  #' if v == 'ok' else ':'} chi2 {stat:.1f}, df {df}, p-value {p:.3g} over {n} samples after token {top} (threshold {ALPHA})")


main()
