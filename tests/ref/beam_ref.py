"""beam_ref.py - Hugging Face transformers' beam search (generate with
num_beams), the reference for vllmc's beam search (tests/test_beam_search_ref.sh).

    .venv/bin/python tests/ref/beam_ref.py MODEL_DIR CONFIGS_JSON

CONFIGS_JSON: a list of {"prompt": [ids], "beams": N, "max_new": T, "length_penalty": L}.
Prints one JSON list, per config {"beams": [{"token_ids": [...], "cumulative_logprob": x}, ...]},
best first, the generated tokens only. The model runs in float32 on one thread;
EOS is switched off (generation_config.eos_token_id = None), as vllmc's side runs
with ignore_eos: with no hypothesis finishing early, transformers' and vLLM's beam
searches are the same algorithm (the top 2 x num_beams continuations of all beams,
the best num_beams go on) and only their length normalisation differs
(transformers divides by the generated length, vLLM by prompt + generated), so
the comparison is on cumulative logprobs: sequences_scores x (generated
length) ** length_penalty.
"""
import json
import sys

import torch
from transformers import AutoModelForCausalLM


def main():
    model_dir, configs = sys.argv[1], json.loads(sys.argv[2])
    torch.set_num_threads(1)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.eval()
    model.generation_config.eos_token_id = None
    results = []
    for cfg in configs:
        ids, beams, max_new, lp = cfg["prompt"], cfg["beams"], cfg["max_new"], float(cfg["length_penalty"])
        inp = torch.tensor([ids])
        with torch.no_grad():
            out = model.generate(inp, attention_mask=torch.ones_like(inp), do_sample=False, num_beams=beams,
                                 num_return_sequences=beams, max_new_tokens=max_new, min_new_tokens=max_new,
                                 max_length=None, length_penalty=lp, early_stopping=False, output_scores=True,
                                 return_dict_in_generate=True, pad_token_id=0)
        res = []
        scores = out.sequences_scores if beams > 1 else [None]
        for seq, score in zip(out.sequences, scores):
            gen = seq[len(ids):].tolist()
            if score is None:  # num_beams 1 is greedy search: sum the chosen tokens' logprobs
                logits = model(seq[None, :]).logits[0].double().log_softmax(-1)
                cum = sum(float(logits[len(ids) - 1 + i, t]) for i, t in enumerate(gen))
            else:
                cum = float(score) * (len(gen) ** lp)
            res.append({"token_ids": gen, "cumulative_logprob": cum})
        results.append({"beams": res})
    print(json.dumps(results))


main()
