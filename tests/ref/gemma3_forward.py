#!/usr/bin/env python3
"""gemma3_forward.py - our Gemma 3 logits against transformers' Gemma3ForCausalLM.

    .venv/bin/python tests/ref/gemma3_forward.py MODEL DUMP [--tol 1e-4] [--name NAME] [--gguf FILE]
        [--greedy N] [--top1 FRACTION] [--also NAME2=DUMP2 ...]

MODEL is a Hugging Face directory (config.json + safetensors), or with --gguf
the directory and file name of a GGUF that transformers loads itself
(dequantizing every tensor). DUMP is what build/tools/dump_logits wrote: the
ids fed for several sequences and our logits at every position (prompts run
in chunks mixed with other sequences' decode steps, then greedy decoding).
--also checks more dumps of the same model (other kernels) the same way, each
under its name, with one load of the model (a sequence's reference is
computed once for all the dumps that feed the same ids).

transformers runs each sequence's ids in one forward with eager attention
(its sliding-window and causal masks, its RoPE per layer kind) in float64
(Gemma3RMSNorm still normalizes in float32 inside, as it always does), so
the comparison measures our F32 error; --f32 runs it in float32 (for the
real 270M model, where float64 costs minutes). The one constant HF computes in the
weights' dtype, the embedding scale sqrt(hidden) (Gemma3TextScaledWordEmbedding),
is set to its value in the checkpoint's declared dtype, as HF (and vLLM)
multiply by it when running the model in that dtype.

Checks, printing "ok NAME" or "FAIL NAME: ..." for tests/run.sh:
  - max |ours - ref| <= tol * max |ref| per sequence over every position;
  - with --top1 F: the argmax of ours equals transformers' at >= F of the
    positions (for quantized real weights, where near-ties may flip);
  - with --greedy N: each sequence's generated tokens (the ids after the
    prompt, which dump_logits chose by our own argmax) equal what greedy
    decoding with transformers gives from the same prompt, for the first N
    tokens (checked teacher-forced: see the code); with --near-tie D, a
    first divergence at a position where transformers' logit for our token
    is within D * max |ref| (the scale --tol uses) of its best passes and is
    reported (quantized real weights: 8-bit activations, ours and
    llama.cpp's, move logits by more than that, so such near-ties flip).
"""
import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_forward import read_dump  # noqa: E402


def load(model, gguf, dtype):
    from transformers import Gemma3ForCausalLM

    kw = {"attn_implementation": "eager"}
    if gguf:
        m = Gemma3ForCausalLM.from_pretrained(model, gguf_file=gguf, dtype=torch.float32, **kw)
        declared = torch.float32  # llama.cpp scales by sqrtf(n_embd) in F32
    else:
        from transformers import Gemma3TextConfig
        declared = getattr(Gemma3TextConfig.from_pretrained(model), "dtype", None) or torch.float32
        if isinstance(declared, str):
            declared = getattr(torch, declared)
        m = Gemma3ForCausalLM.from_pretrained(model, dtype=torch.float32, **kw)
    m = m.to(dtype).eval()
    emb = m.model.embed_tokens
    scale = torch.tensor(m.config.hidden_size ** 0.5, dtype=torch.float32).to(declared).to(dtype)
    emb.embed_scale = scale
    return m


def check(m, a, name, dump, refs):
    """Prints one result line for dump against model m; 0 if ok."""
    vocab = m.config.vocab_size
    seqs = read_dump(dump, vocab)
    plens = [int(x) for x in a.prompt_lens.split(",")] if a.prompt_lens else None
    worst, where, agree, total, notes, ties = 0.0, "", 0, 0, [], []
    with torch.no_grad():
        for s, (ids, ours) in enumerate(seqs):
            if not np.isfinite(ours).all():
                print(f"FAIL {name}: non-finite logits in sequence {s}")
                return 1
            if tuple(ids) not in refs:
                refs[tuple(ids)] = m(torch.tensor([ids])).logits[0].numpy()
            ref = refs[tuple(ids)]
            scale = float(np.abs(ref).max())
            err = np.abs(ours.astype(np.float64) - ref) / scale
            if err.max() > worst:
                worst, where = float(err.max()), f"sequence {s} position {int(err.max(axis=1).argmax())} of {len(ids)}"
            agree += int((ours.argmax(axis=1) == ref.argmax(axis=1)).sum())
            total += len(ids)
            if a.greedy:
                # greedy decoding from the prompt gives our continuation iff transformers'
                # argmax at each position from the prompt's last on is our next id (by
                # induction on the shared prefix), so one teacher-forced forward decides it
                n = plens[s]
                mine, theirs = ids[n:] + [int(ours[-1].argmax())], ref[n - 1:].argmax(axis=1).tolist()
                same = 0
                while same < len(mine) and mine[same] == theirs[same]:
                    same += 1
                if same < min(a.greedy, len(mine)):
                    row = ref[n - 1 + same]
                    gap = float(row.max() - row[mine[same]])
                    if gap >= a.near_tie * scale:
                        print(f"FAIL {name}: sequence {s}: greedy continuations differ at token {same} "
                              f"(ours {mine[same:same + 5]}, transformers {theirs[same:same + 5]}; transformers "
                              f"ranks ours {gap:.3g} below its best, {gap / scale:.2g} of max |logit| {scale:.3g})")
                        return 1
                    ties.append(f"sequence {s} at token {same}: transformers ranks ours {gap:.3g} below its best "
                                f"({gap / scale:.2g} of max |logit|)")
                notes.append(str(same))
    if worst > a.tol:
        print(f"FAIL {name}: max relative logit error {worst:.3g} > {a.tol:g} at {where}")
        return 1
    if agree < a.top1 * total:
        print(f"FAIL {name}: top-1 agrees at {agree} of {total} positions (< {a.top1:.0%})")
        return 1
    extra = f", top-1 {agree}/{total}" + (f", greedy continuations equal for {'/'.join(notes)} tokens" if notes else "")
    extra += "".join(f"; near tie in {t}" for t in ties)
    print(f"ok {name}  # {len(seqs)} sequences, {total} positions, max rel error {worst:.2g}{extra}")
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("dump")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--name")
    ap.add_argument("--gguf")
    ap.add_argument("--greedy", type=int, default=0)
    ap.add_argument("--top1", type=float, default=0.0)
    ap.add_argument("--prompt-lens", help="comma-separated prompt length of each sequence (for --greedy)")
    ap.add_argument("--f32", action="store_true", help="run transformers in float32 (real models: faster)")
    ap.add_argument("--near-tie", type=float, default=0.0,
                    help="--greedy: a divergence where transformers' logits of the two tokens differ by less "
                         "(relative to the sequence's max |logit|) passes")
    ap.add_argument("--also", action="append", default=[], metavar="NAME=DUMP",
                    help="another dump of the same model, checked the same way under its own name")
    a = ap.parse_args()
    name = a.name or os.path.basename(os.path.normpath(a.model))
    torch.set_num_threads(2)
    m = load(a.model, a.gguf, torch.float32 if a.f32 else torch.float64)
    refs = {}
    rc = check(m, a, name, a.dump, refs)
    for extra in a.also:
        n, _, dump = extra.partition("=")
        rc = max(rc, check(m, a, n, dump, refs))
    return rc


if __name__ == "__main__":
    sys.exit(main())
