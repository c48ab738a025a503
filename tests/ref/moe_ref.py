"""moe_ref.py - our mixture-of-experts forward pass (model/moe.h) against
Hugging Face transformers' Qwen3MoeForCausalLM and MixtralForCausalLM.

    .venv/bin/python tests/ref/moe_ref.py BUILD_DIR [--converter DIR] [--only SUBSTRING] [--keep DIR]
    .venv/bin/python tests/ref/moe_ref.py --list

tests/test_moe_ref.sh runs it (skipped without .venv). Prints "ok NAME" /
"FAIL NAME: why" / "skip NAME: why".

Models: transformers' own classes, instantiated from a small config
(AutoConfig.for_model), every parameter redrawn from a seeded generator
(norm weights 1 + 0.2 N(0, 1), embeddings N(0, 1), every other matrix
N(0, 1/fan_in) with fan_in its last dimension, so the router's logits are
O(1) and the top-k is far from ties), cast to the row's dtype and written by
save_pretrained with stories260K's tokenizer beside it (the machinery of
hf_forward.py, whose docstring explains the tolerances). The rows cover
Qwen3-MoE with and without norm_topk_prob, mlp_only_layers (a dense layer
among sparse ones), decoder_sparse_step 2, 8 and 16 experts with top 2 and
top 4, and Mixtral (top-k always renormalised) in F32, BF16 and F16.

Checks per row:
  hf_NAME      build/tools/dump_logits (prompts joining at different steps,
               chunked prefill mixed with decode, paged KV) against
               transformers' float64 eager forward over each whole sequence,
               max |ours - ref| / max |ref| <= 2e-5 at every position.
  batch_NAME   each prompt run alone gives the same logits bit for bit as
               in the batch (a token's experts' groups change with the batch;
               its result must not).
The first row also runs dump_logits' second schedule (chunks of 3, block
size 4) and the avx2 / portable kernel paths against the same reference.

GGUF rows (with --converter: llama.cpp's convert_hf_to_gguf.py, which
writes the experts as blk.N.ffn_{gate,up,down}_exps and the router as
blk.N.ffn_gate_inp): the same comparison against transformers' float64
model of the source directory (transformers' GGUF reader does not read
these architectures' expert tensors; F16 holds the F32 source's weights
rounded, so the reference loads the GGUF's own dequantized tensors through
gguf-py instead; see gguf_state_dict).
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_forward as hf  # noqa: E402

MODELS = [
    ("qwen3moe_f32_mlp_only", "qwen3_moe", "float32",
     dict(num_hidden_layers=3, num_key_value_heads=2, head_dim=16, num_experts=8, num_experts_per_tok=2,
          moe_intermediate_size=32, mlp_only_layers=[1])),
    ("qwen3moe_bf16_norm_step2", "qwen3_moe", "bfloat16",
     dict(num_hidden_layers=4, num_key_value_heads=2, head_dim=16, num_experts=16, num_experts_per_tok=4,
          moe_intermediate_size=64, norm_topk_prob=True, decoder_sparse_step=2)),
    ("qwen3moe_f32_norm_all_sparse", "qwen3_moe", "float32",
     dict(num_key_value_heads=2, head_dim=16, num_experts=8, num_experts_per_tok=3, moe_intermediate_size=64,
          norm_topk_prob=True)),
    ("mixtral_f32", "mixtral", "float32",
     dict(num_key_value_heads=2, num_local_experts=8, num_experts_per_tok=2, intermediate_size=96)),
    ("mixtral_f16_top3", "mixtral", "float16",
     dict(num_key_value_heads=1, num_local_experts=4, num_experts_per_tok=3, intermediate_size=64)),
]
# GGUF name, source model, type: the converter's outtype, or q4_0 (its f32
# file requantized by gguf-py, see requantize)
GGUFS = [
    ("gguf_qwen3moe_f32", "qwen3moe_f32_norm_all_sparse", "f32"),
    ("gguf_qwen3moe_q8_0", "qwen3moe_f32_norm_all_sparse", "q8_0"),
    ("gguf_qwen3moe_q4_0", "qwen3moe_f32_norm_all_sparse", "q4_0"),
    ("gguf_mixtral_f16", "mixtral_f32", "f16"),
    ("gguf_mixtral_q4_0", "mixtral_f32", "q4_0"),
]
TOL = 2e-5
GGUF_TOL = {"f32": 1e-4, "f16": 5e-3, "q8_0": 3e-2, "q4_0": 3e-2}
BATCH_GGUFS = ("q8_0", "q4_0")  # also checked alone = batched (batch_NAME)
QUANT_SHARE, QUANT_MAX = 0.10, 0.5  # quantized files: share of positions allowed past the tolerance, bound at all


def make_model(torch, transformers, out, model_type, dtype, overrides, seed):
    kw = dict(vocab_size=512, hidden_size=64, intermediate_size=192, num_hidden_layers=2, num_attention_heads=4,
              max_position_embeddings=512, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2)
    kw.update(overrides)
    cfg = transformers.AutoConfig.for_model(model_type, **kw)
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    g = torch.Generator().manual_seed(1000 + seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.2 * r)
            elif "embed_tokens" in name:
                p.copy_(r)
            else:
                p.copy_(r / p.shape[-1] ** 0.5)
    model.to(getattr(torch, dtype)).save_pretrained(out)
    for f in ("tokenizer.model", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copyfile(os.path.join(hf.TOKENIZER_DIR, f), os.path.join(out, f))


def bits_equal_alone(a, path, flags, batched):
    """None if every prompt run alone gives batched's logits bit for bit, else why."""
    for s, prompt in enumerate(hf.PROMPTS.split(",")):
        out = os.path.join(os.path.dirname(batched), f"alone{s}.bin")
        cmd = [os.path.join(a.build, "tools", "dump_logits"), "--model", path, "--prompts", prompt, "--out", out]
        p = subprocess.run(cmd + flags, capture_output=True, text=True)
        if p.returncode:
            return f"prompt {s} alone: dump_logits failed: {p.stderr.strip().splitlines()[-1:]}"
        (ids, alone), = hf.read_dump(out, 512)
        ids_b, ours = hf.read_dump(batched, 512)[s]
        if ids != ids_b:
            return f"prompt {s}: alone decodes {ids[-6:]}, batched {ids_b[-6:]}"
        if alone.tobytes() != ours.tobytes():
            bad = np.argwhere(alone != ours)
            return f"prompt {s}: logits differ at {len(bad)} places, first position {bad[0][0]}"
    return None


def names(i, name):
    out = [f"hf_{name}"]
    if i == 0:
        out += [f"hf_{name}_chunk3_block4"] + [f"hf_{name}_{s}" for s, _ in hf.KERNEL_PATHS]
    return out + [f"batch_{name}"]


def all_names():
    return [n for i, m in enumerate(MODELS) for n in names(i, m[0])] + \
        [n for g in GGUFS for n in ([f"batch_{g[0]}"] if g[2] in BATCH_GGUFS else []) + [g[0]]]


def load_ref(transformers, torch, path):
    """transformers' float64 model of path: eager attention, and its eager
    experts (the per-expert loop of modeling_*.py; the default grouped_mm
    takes no float64)."""
    import contextlib
    import io
    kw = dict(dtype=torch.float64, attn_implementation="eager", experts_implementation="eager")
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        return transformers.AutoModelForCausalLM.from_pretrained(path, **kw).eval()


def check_model(c, torch, transformers, a, tmp, i, name, dtype):
    d = os.path.join(tmp, name)
    ref64 = load_ref(transformers, torch, d)
    refs = {}

    def ref_fn(ids):
        if tuple(ids) not in refs:
            refs[tuple(ids)] = hf.hf_logits(torch, ref64, ids)
        return refs[tuple(ids)]
    runs = [("", hf.DUMP_RUNS[0], None)]
    if i == 0:
        runs.append(("_chunk3_block4", hf.DUMP_RUNS[1], None))
        runs += [(f"_{s}", hf.DUMP_RUNS[0], env) for s, env in hf.KERNEL_PATHS]
    first = None
    for j, (suffix, flags, env) in enumerate(runs):
        check = f"hf_{name}{suffix}"
        out = os.path.join(tmp, f"{name}.{j}.bin")
        err = hf.dump_logits(a.build, d, out, flags, env)
        if err:
            c.fail(check, f"dump_logits: {err}")
            continue
        first = first or out
        errs, bad = hf.position_errors(hf.read_dump(out, 512), ref_fn)
        if bad:
            c.fail(check, bad)
            continue
        c.judge(check, errs, TOL)
    if not first:
        c.fail(f"batch_{name}", "no batched run")
        return
    why = bits_equal_alone(a, d, hf.DUMP_RUNS[0], first)
    if why:
        c.fail(f"batch_{name}", why)
    else:
        print(f"ok batch_{name}  # {len(hf.PROMPTS.split(','))} prompts alone = batched, bit for bit", flush=True)


def requantize(src, dst, qname):
    """src (an F32 GGUF) with every matrix but token_embd and the routers
    quantized to qname by gguf-py (ggml's quantizer in numpy)."""
    import gguf
    qt = gguf.GGMLQuantizationType[qname.upper()]
    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(dst, r.fields["general.architecture"].contents())
    for field in r.fields.values():
        if field.name == "general.architecture" or field.name.startswith("GGUF."):
            continue
        vt = field.types[0]
        sub = field.types[-1] if vt == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(field.name, field.contents(), vt, sub_type=sub)
    for t in r.tensors:
        data = np.array(t.data)
        if data.ndim >= 2 and t.name != "token_embd.weight" and "ffn_gate_inp" not in t.name:
            w.add_tensor(t.name, gguf.quants.quantize(data.astype(np.float32), qt), raw_dtype=qt)
        else:
            w.add_tensor(t.name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def llamacpp_tool(tmp):
    """tests/ref/llamacpp_logits.c built against the prebuilt libllama, or (None, why)."""
    lc = os.path.join(hf.ROOT, "bench", "llamacpp", ".cache")
    libs = [os.path.join(lc, "bins", n) for n in ("libllama.v0.5.0.so", "libggml.v0.5.0.so", "libggml-base.so")]
    if not all(os.path.exists(x) for x in libs):
        return None, "no prebuilt llama.cpp (bench/llamacpp/build.sh --fetch)"
    exe = os.path.join(tmp, "llamacpp_logits")
    cmd = ["cc", "-O2", "-std=c11", "-D_GNU_SOURCE", f"-I{lc}/src/include", f"-I{lc}/src/ggml/include",
           os.path.join(hf.ROOT, "tests", "ref", "llamacpp_logits.c"), "-o", exe] + libs + \
          [f"-Wl,-rpath,{os.path.realpath(os.path.join(lc, 'bins'))}"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        return None, f"FAIL llamacpp_logits.c does not build: {p.stderr.strip().splitlines()[:1]}"
    return exe, None


def converter_reads_sentencepiece():
    """Our random models carry stories260K's SentencePiece tokenizer; the
    converter's Qwen3-MoE class only reads BPE ones (real Qwen3-MoE
    checkpoints), so it gets its Qwen2 sibling's vocabulary reader, which
    tries SentencePiece first. Nothing else of the conversion changes."""
    from conversion.qwen import Qwen2Model, Qwen3MoeModel
    Qwen3MoeModel.set_vocab = Qwen2Model.set_vocab


def check_gguf(c, a, tmp, tool, name, src, qtype):
    gdir = os.path.join(tmp, name)
    os.makedirs(gdir, exist_ok=True)
    path = os.path.join(gdir, "model.gguf")
    if qtype == "q4_0":
        f32 = os.path.join(tmp, f"{src}.f32.gguf")
        err = None if os.path.exists(f32) else hf.convert_gguf(os.path.join(tmp, src), f32, "f32")
        if not err:
            requantize(f32, path, qtype)
    else:
        err = hf.convert_gguf(os.path.join(tmp, src), path, qtype)
        if not err and qtype == "f32":
            shutil.copyfile(path, os.path.join(tmp, f"{src}.f32.gguf"))
    if err:
        c.fail(name, err)
        return
    out = os.path.join(tmp, f"{name}.bin")
    err = hf.dump_logits(a.build, path, out, hf.DUMP_RUNS[0])
    if err:
        c.fail(name, f"dump_logits: {err}")
        return
    ours = hf.read_dump(out, 512)
    ids_file = os.path.join(tmp, f"{name}.ids")
    with open(ids_file, "w") as f:
        for ids, _ in ours:
            f.write(" ".join(map(str, ids)) + "\n")
    ref_out = os.path.join(tmp, f"{name}.llamacpp.bin")
    p = subprocess.run([tool, os.path.join(hf.ROOT, "bench", "llamacpp", ".cache", "bins"), path, ids_file, ref_out,
                        "1"], capture_output=True, text=True)
    if p.returncode:
        c.fail(name, f"llamacpp_logits: {p.stderr.strip().splitlines()[-1:]}")
        return
    ref = {tuple(ids): lg.astype(np.float64) for ids, lg in hf.read_dump(ref_out, 512)}
    errs, bad = hf.position_errors(ours, lambda ids: ref[tuple(ids)])
    if bad:
        c.fail(name, bad)
        return
    agree = sum(int(np.argmax(lg[i]) == np.argmax(ref[tuple(ids)][i])) for ids, lg in ours for i in range(len(ids)))
    extra = f"; argmax equal to llama.cpp's at {agree} of {len(errs)}"
    tol = GGUF_TOL[qtype]
    if qtype in BATCH_GGUFS:  # quantized experts (8-bit activations, x16 copies): alone = batched too
        why = bits_equal_alone(a, path, hf.DUMP_RUNS[0], out)
        if why:
            c.fail(f"batch_{name}", why)
        else:
            print(f"ok batch_{name}  # {len(hf.PROMPTS.split(','))} prompts alone = batched, bit for bit", flush=True)
    if qtype in ("f32", "f16"):
        c.judge(name, errs, tol, extra=extra)
        return
    # quantized: llama.cpp rounds each 8-bit activation block's scale to F16,
    # we keep it in F32 (hf_forward.py, Tolerances), ~1e-2 at every position;
    # now and then that turns a router near-tie the other way at one token
    # (a different expert: ~0.1-0.3 there, and a little after it through its K/V)
    worst = max(e[2] for e in errs)
    past = sum(e[2] > tol for e in errs)
    desc = f"max rel error {worst:.2g}, {past} of {len(errs)} positions past {tol:g}{extra}"
    if past <= QUANT_SHARE * len(errs) and worst <= QUANT_MAX:
        print(f"ok {name}  # {desc} (tol {tol:g} at {1 - QUANT_SHARE:.0%} of positions, {QUANT_MAX:g} at all)", flush=True)
    else:
        c.fail(name, desc)


def main():
    if sys.argv[1:] == ["--list"]:
        print("\n".join(all_names()))
        return 0
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--converter")
    ap.add_argument("--only", default="")
    ap.add_argument("--keep")
    a = ap.parse_args()
    if a.converter:
        sys.path.insert(0, a.converter)
        sys.path.insert(1, os.path.join(a.converter, "gguf-py"))
    t0 = time.time()
    import torch
    import transformers
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(1)
    tmp = a.keep or tempfile.mkdtemp(prefix="moe_ref.")
    os.makedirs(tmp, exist_ok=True)
    c = hf.Checker()
    try:
        import contextlib
        import io
        for i, (name, model_type, dtype, over) in enumerate(MODELS):
            if a.only in name or any(a.only in g[0] and g[1] == name for g in GGUFS):
                with contextlib.redirect_stderr(io.StringIO()):
                    make_model(torch, transformers, os.path.join(tmp, name), model_type, dtype, over, i)
        for i, (name, model_type, dtype, over) in enumerate(MODELS):
            if a.only in name:
                check_model(c, torch, transformers, a, tmp, i, name, dtype)
        tool, why = llamacpp_tool(tmp) if a.converter else (None, "no llama.cpp converter")
        if tool:
            converter_reads_sentencepiece()
        for name, src, qtype in GGUFS:
            if a.only not in name:
                continue
            if not tool:
                for n in ([f"batch_{name}"] if qtype in BATCH_GGUFS else []) + [name]:
                    (c.fail if why.startswith("FAIL") else lambda n, w: print(f"skip {n}: {w}"))(n, why)
                continue
            check_gguf(c, a, tmp, tool, name, src, qtype)
        hf.log(f"moe_ref: done ({time.time() - t0:.1f}s)")
    finally:
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return 1 if c.failed else 0


if __name__ == "__main__":
    sys.exit(main())
