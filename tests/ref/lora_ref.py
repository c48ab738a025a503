"""lora_ref.py - our LoRA logits against PEFT/PyTorch's, per adapter, in one
batch that mixes four adapters and the base model.

    .venv/bin/python tests/ref/lora_ref.py BUILD_DIR [--keep DIR]
    .venv/bin/python tests/ref/lora_ref.py --make-adapter BASE_DIR OUT_DIR --rank R [--targets all|attn|mlp]
                                           [--dtype f32|bf16|f16] [--seed S] [--rslora]

Needs .venv (torch, transformers, peft; tests/ref/requirements.txt).
Prints "ok NAME" / "FAIL NAME: why" lines for tests/run.sh.

Adapters: written by PEFT itself (LoraConfig + get_peft_model on the
transformers model of the base directory, then save_pretrained), after every
lora_A / lora_B parameter is redrawn from a seeded generator (PEFT
initializes B to zero, which would make every adapter the base model) with
std 1/sqrt(fan_in) scaled so that the deltas move the logits by O(1). The
four adapters differ in rank (2, 4, 8, 16), alpha, targets (all seven
projections, attention only, MLP only), rsLoRA, and the dtype of the file
(F32, BF16, F16).

Bases: models/stories260K (tied embeddings, GQA) and a random Llama written
by transformers (hidden 64, 4 heads, 2 KV heads, untied, 3 layers).

What is compared: build/tools/dump_logits --lora ... --seq-lora 0,1,2,3,4
runs five prompts (the base model and each adapter) through the runner in
shared steps (prefill in chunks of 5, decode with greedy tokens, sequences
joining at different steps), writing every position's logits. The
reference is PEFT's forward (PeftModel.from_pretrained on the base, in
float64, eval mode) of each sequence alone, with its adapter, which
computes W x + scale B(A x) with scale = alpha/r (alpha/sqrt(r) with
use_rslora); for the base sequence, the base model. Error = max |ours -
ref| / max |ref| over a sequence; tolerance 2e-5 (F32 accumulation, as
tests/ref/hf_forward.py). Each sequence is also run alone with its adapter,
and its logits must equal the mixed batch's bit for bit (batch invariance).
Then the adapters are swapped between sequences (seq-lora 3,4,0,1,2), and
the base model's error must exceed 1e-3 against its adapter's reference:
a check that a LoRA that does nothing would fail.

Bad adapters: dump_logits must refuse, with a message naming the problem,
a rank above --max-lora-rank, a target module the model does not have, a
lora_B of the wrong shape and a missing adapter_model.safetensors.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STORIES = os.path.join(ROOT, "models", "stories260K")
TOL = 2e-5
PROMPTS = ["1 5 9 13 17 21 25", "1 7 3", "1 30 31 32 33 34 35 36 37 38 39", "1 100 200", "1 9 8 7 6 5"]
ADAPTERS = [  # (rank, alpha, targets, dtype, rslora)
    (2, 16, "all", "f32", False),
    (4, 8, "attn", "bf16", False),
    (8, 32, "mlp", "f16", True),
    (16, 16, "all", "f32", False),
]
TARGETS = {
    "all": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    "attn": ["q_proj", "k_proj", "v_proj", "o_proj"],
    "mlp": ["gate_proj", "up_proj", "down_proj"],
}
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def make_adapter(base, out, rank, alpha, targets, dtype, rslora, seed):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    cfg = LoraConfig(r=rank, lora_alpha=alpha, target_modules=TARGETS[targets], lora_dropout=0.0,
                     use_rslora=rslora, bias="none", task_type="CAUSAL_LM")
    pm = get_peft_model(model, cfg)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in pm.named_parameters():
            if "lora_A" in name or "lora_B" in name:
                fan_in = p.shape[1]
                p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64).float() / fan_in ** 0.5)
                if "lora_B" in name:
                    p.mul_(0.5)
        if dtype != "f32":
            for name, p in pm.named_parameters():
                if "lora_" in name:
                    p.data = p.data.to(DTYPES[dtype])
    pm.save_pretrained(out)


def make_random_base(out):
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=512, max_position_embeddings=256, rms_norm_eps=1e-5,
                      tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(1234)
    m = LlamaForCausalLM(cfg)
    g = torch.Generator().manual_seed(99)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if p.ndim == 2:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)
            else:
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=g))
    m.save_pretrained(out)


def read_dump(path):
    with open(path, "rb") as f:
        n = np.frombuffer(f.read(4), np.int32)[0]
        seqs = []
        for _ in range(n):
            ln = np.frombuffer(f.read(4), np.int32)[0]
            ids = np.frombuffer(f.read(4 * ln), np.int32).copy()
            seqs.append((ids, f.read(4 * ln * 512)))
    return [(ids, np.frombuffer(b, np.float32).reshape(len(ids), -1)) for ids, b in seqs]


def dump(build, base, adapters, seq_lora, prompts, out, extra=()):
    cmd = [os.path.join(build, "tools", "dump_logits"), "--model", base, "--prompts", ",".join(prompts),
           "--out", out, "--decode", "6", "--chunk", "5", "--budget", "24", "--threads", "2"]
    for a in adapters:
        cmd += ["--lora", a]
    cmd += ["--seq-lora", ",".join(str(x) for x in seq_lora)] + list(extra)
    return subprocess.run(cmd, capture_output=True, text=True)


def reference(base, adapter, ids):
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float64, attn_implementation="eager")
    if adapter:
        from peft import PeftModel
        model = PeftModel.from_pretrained(model, adapter)
        model = model.to(torch.float64)
    model.eval()
    with torch.no_grad():
        return model(torch.tensor([ids], dtype=torch.long)).logits[0].numpy()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?")
    ap.add_argument("--keep")
    ap.add_argument("--make-adapter", nargs=2, metavar=("BASE", "OUT"))
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--alpha", type=float, default=16)
    ap.add_argument("--targets", default="all")
    ap.add_argument("--dtype", default="f32")
    ap.add_argument("--rslora", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if a.make_adapter:
        make_adapter(a.make_adapter[0], a.make_adapter[1], a.rank, a.alpha, a.targets, a.dtype, a.rslora, a.seed)
        return
    tmp = a.keep or tempfile.mkdtemp(prefix="lora_ref.")
    os.makedirs(tmp, exist_ok=True)
    try:
        rand_base = os.path.join(tmp, "random_base")
        make_random_base(rand_base)
        for bname, base in (("stories260K", STORIES), ("random_llama", rand_base)):
            dirs = []
            for i, (r, alpha, tg, dt, rs) in enumerate(ADAPTERS):
                d = os.path.join(tmp, f"{bname}_a{i + 1}")
                make_adapter(base, d, r, alpha, tg, dt, rs, seed=100 + i)
                dirs.append(d)
            out = os.path.join(tmp, f"{bname}.bin")
            res = dump(a.build, base, dirs, [0, 1, 2, 3, 4], PROMPTS, out)
            if res.returncode != 0:
                print(f"FAIL lora_{bname}_mixed_batch: dump_logits: {res.stderr.strip()}")
                continue
            ours = read_dump(out)
            refs = []
            for s, (ids, lg) in enumerate(ours):
                adapter = dirs[s - 1] if s > 0 else None
                ref = reference(base, adapter, ids.tolist())
                refs.append(ref)
                err = np.abs(lg - ref).max() / np.abs(ref).max()
                r, alpha, tg, dt, rs = ADAPTERS[s - 1] if s else (0, 0, "-", "-", False)
                name = f"lora_{bname}_seq{s}_" + ("base" if s == 0 else f"r{r}_{tg}_{dt}{'_rslora' if rs else ''}")
                print(f"{'ok' if err <= TOL else 'FAIL'} {name}" + ("" if err <= TOL else ":") +
                      f" # max rel error {err:.2e} over {len(ids)} positions (tol {TOL:g})")
            # alone: bit for bit the mixed batch's logits
            same = True
            for s in range(5):
                o1 = os.path.join(tmp, f"{bname}_alone{s}.bin")
                res = dump(a.build, base, dirs, [s], [PROMPTS[s]], o1)
                if res.returncode != 0 or not np.array_equal(read_dump(o1)[0][1], ours[s][1]):
                    same = False
            print(f"{'ok' if same else 'FAIL'} lora_{bname}_batch_invariant" +
                  ("" if same else ": a sequence alone differs from the mixed batch"))
            # swapped adapters must not match: the check can fail
            o2 = os.path.join(tmp, f"{bname}_swapped.bin")
            res = dump(a.build, base, dirs, [3, 4, 0, 1, 2], PROMPTS, o2)
            sw = read_dump(o2) if res.returncode == 0 else None
            errs = [np.abs(sw[s][1] - refs[s][:len(sw[s][1])]).max() / np.abs(refs[s]).max()
                    for s in range(5)] if sw else []
            bad = sw is not None and min(errs) > 1e-3
            print(f"{'ok' if bad else 'FAIL'} lora_{bname}_swapped_adapters_differ" +
                  (f" # min rel error {min(errs):.2e}" if bad else f": {errs}"))
        check_bad(a.build, tmp)
    finally:
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)


def check_bad(build, tmp):
    good = os.path.join(tmp, "stories260K_a4")  # rank 16, all targets
    cases = []
    # rank above the limit
    cases.append(("lora_bad_rank", good, ["--max-lora-rank", "8"], "greater than max_lora_rank"))
    # a target module the model does not have
    d = os.path.join(tmp, "bad_target")
    shutil.copytree(good, d)
    cfg = json.load(open(os.path.join(d, "adapter_config.json")))
    cfg["target_modules"] = ["q_proj", "w_pack"]
    json.dump(cfg, open(os.path.join(d, "adapter_config.json"), "w"))
    cases.append(("lora_bad_target_module", d, [], "target module 'w_pack'"))
    # a lora_B of the wrong shape
    from safetensors.torch import load_file, save_file
    d = os.path.join(tmp, "bad_shape")
    shutil.copytree(good, d)
    t = load_file(os.path.join(d, "adapter_model.safetensors"))
    k = next(n for n in sorted(t) if "layers.1.mlp.down_proj.lora_B" in n)
    t[k] = torch.zeros(t[k].shape[0] + 1, t[k].shape[1])
    save_file(t, os.path.join(d, "adapter_model.safetensors"))
    cases.append(("lora_bad_shape", d, [], "layers.1.mlp.down_proj.lora_B.weight has shape [65, 16]"))
    # a missing file
    d = os.path.join(tmp, "bad_missing")
    shutil.copytree(good, d)
    os.remove(os.path.join(d, "adapter_model.safetensors"))
    cases.append(("lora_bad_missing_file", d, [], "adapter_model.safetensors"))
    for name, d, extra, want in cases:
        res = dump(build, STORIES, [d], [1], [PROMPTS[0]], os.path.join(tmp, "bad.bin"), extra)
        ok = res.returncode != 0 and want in res.stderr
        print(f"{'ok' if ok else 'FAIL'} {name}" + (f" # {res.stderr.strip().splitlines()[-1]}" if ok else f": rc {res.returncode}, "
                                                     f"stderr {res.stderr.strip()!r}, wanted {want!r}"))


if __name__ == "__main__":
    main()
