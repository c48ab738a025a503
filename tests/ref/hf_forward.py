"""hf_forward.py - our logits against Hugging Face transformers' on models
transformers itself wrote, and on GGUF files llama.cpp's converter wrote.

    .venv/bin/python tests/ref/hf_forward.py BUILD_DIR [--converter DIR] [--only SUBSTRING] [--keep DIR]

Needs the PyPI references of tests/ref/requirements.txt (.venv/: torch,
transformers, gguf); tests/test_hf_forward.sh runs it and reports it skipped
without them. Prints "ok NAME" / "FAIL NAME: why" / "skip NAME: why".

Models. For each row of MODELS: AutoConfig.for_model(model_type, ...) with
small shapes, AutoModelForCausalLM.from_config, every parameter redrawn from
a seeded generator (transformers' own init leaves biases at 0 and norm
weights at 1, which would hide a missing bias or norm), the model cast to
the row's dtype and written by save_pretrained (config.json, safetensors),
with stories260K's SentencePiece tokenizer files beside it (vocab 512) so
that the converter can write a vocabulary. Linear weights ~ N(0, 1/fan_in),
so activations are O(1) and attention is far from uniform: a wrong RoPE
angle or a missing bias moves the logits by O(1), not by 1e-4.
Gemma 3 rows (gemma3_text, Gemma3ForCausalLM) keep Gemma3TextConfig's layer
kinds (every sixth layer global: six layers, one global) and local RoPE base
10000, and set query_pre_attn_scalar to head_dim: what llama.cpp's gemma3
loader assumes, since its converter writes none of the three, so the same
directory makes a GGUF that means the same model. Their (1 + w) norms draw
w = 1 + 0.2 N(0, 1) like every norm here; hidden 64 makes the embedding
scale sqrt(64) = 8 exact in every dtype. Sliding windows of 8 and 5 tokens
(the prompts run past them, decoding too) are computed, and compared at
every position.

GGUF. For each row of GGUFS, llama.cpp's convert_hf_to_gguf.py (shipped in
the node-llama-cpp npm package's llama.cpp source; scripts/fetch_models.sh
convert unpacks it, passed here as --converter) turns a transformers-written directory into
a GGUF of the given outtype (f32/f16/bf16/q8_0) with its own Q/K
permutation, tensor names, metadata and gguf-py's quantizer, run in this
process. Rows our loader does not read yet (Qwen2/Qwen3 GGUFs, Llama 3.1's
rope_freqs) must be refused with a clear message ("ok NAME  # refused by our
loader: ..."); the day the loader reads them, the same row is compared like
the others.

What is compared. build/tools/dump_logits runs several prompts the way the
engine does (sequences joining at different steps, prefill in chunks mixed
with decode steps in one batch, greedy decoding through the paged KV, KV
blocks in scrambled order) and writes the logits of every position. The
reference is transformers' own forward pass over each whole sequence
(eager attention) in float64, from the same files: from_pretrained(dir) for
a safetensors directory, from_pretrained(dir, gguf_file=...) for a GGUF,
which reads and dequantizes it with transformers' and gguf-py's code, not
ours. (transformers' GGUF reader drops Llama attention biases, the
converter stores them as F32: for such a file the reference is the source
directory's architecture with every tensor transformers did read from the
GGUF, and the biases from the source; the ok line says so. It also reads a
gemma3 file's attention scale and final logit softcapping otherwise than
llama.cpp, whose format it is: the reference takes llama.cpp's, and says so.)
Error at a position = max |ours - ref| / max |ref| over its sequence.
Mistral's sliding window (not Gemma 3's): positions at or past it are not compared; the
engine caps max_model_len at the window (engine.c), so never runs them.

Tolerances (TOL below; the ok line prints the measured error):
  - safetensors F32, BF16, F16 and GGUF F32/F16/BF16: 2e-5 at every
    position. Our kernels turn BF16/F16 weights into F32 exactly and keep
    activations and accumulation in F32 on every path (kernels.h; the AMX
    kernel splits each F32 activation into three exact BF16 parts,
    matmul_amx.c), so the only error is F32 rounding, whatever the weight
    dtype: a dot of length k carries at most ~k*2^-24 relative error
    (k <= 192 here: ~1e-5) and typically sqrt(k)*2^-24 (~1e-6); measured
    worst ~4e-7. transformers itself in float32 on the same weights is off
    by as much ("hf f32 itself" in the ok line); in the weights' own BF16 or
    F16 it is off by ~1e-2 / ~1e-3 ("hf bf16 itself"), what we would need
    if we rounded activations to the weight dtype, as we do not.
  - GGUF Q8_0: our Q8_0 dot quantizes its input to 8 bits per 32-element
    block, as ggml does; transformers' dequantized matmuls do not. The
    reference models it: the input of every linear layer whose GGUF weight
    is Q8_0 is replaced by q * d, q from gguf-py's Q8_0 quantizer (ggml's
    quantize_row_q8_0 in numpy) and d = amax / 127 kept in F32 as our runner
    keeps it (ggml rounds d to F16: a 2^-11 difference per block). That
    leaves one effect no reference can remove: an activation that lands
    within F32 rounding of a q rounding boundary (x * 127 / amax = n + 1/2
    +- ~1e-5) may round the other way in our F32 than in float64, moving
    that element by a whole step d and the logits by up to ~1e-2 at that
    position (measured 6.4e-3: layer 1's MLP input 1.8e-5 from a tie). So a
    Q8_0 row passes when at least 95% of positions are within the F32
    tolerance and every position within FLIP_TOL = 2e-2. Without the
    modelled activation quantization every position is off by ~1e-2
    ("no act quant" in the ok line), which fails the 95% rule.
"""
import argparse
import contextlib
import io
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOKENIZER_DIR = os.path.join(ROOT, "models", "stories260K")  # SentencePiece, 512 ids

# name, model_type, dtype, config overrides. Shapes default to hidden 64,
# 4 heads (head_dim 16), 2 layers, intermediate 192, vocab 512.
LLAMA3_ROPE = dict(rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0,
                   high_freq_factor=4.0, original_max_position_embeddings=400)  # all 3 llama3 bands at head_dim 16
MODELS = [
    ("llama_f32_gqa", "llama", "float32", dict(num_key_value_heads=2)),
    ("llama_bf16_tied_llama3", "llama", "bfloat16",
     dict(num_key_value_heads=2, tie_word_embeddings=True, rope_parameters=LLAMA3_ROPE)),
    ("llama_f16_linear_bias_mqa", "llama", "float16",
     dict(num_key_value_heads=1, attention_bias=True,
          rope_parameters=dict(rope_type="linear", rope_theta=10000.0, factor=2.0))),
    ("llama_f32_odd_dims", "llama", "float32",
     dict(hidden_size=60, num_attention_heads=6, num_key_value_heads=2, intermediate_size=100, num_hidden_layers=3)),
    ("mistral_bf16", "mistral", "bfloat16", dict(num_key_value_heads=2, sliding_window=None)),
    ("mistral_f16_window", "mistral", "float16", dict(num_key_value_heads=2, sliding_window=32)),
    ("qwen2_bf16", "qwen2", "bfloat16",
     dict(num_key_value_heads=2, rope_parameters=dict(rope_type="default", rope_theta=1000000.0))),
    ("qwen2_f32_tied", "qwen2", "float32", dict(num_key_value_heads=4, tie_word_embeddings=True)),
    ("qwen3_f32", "qwen3", "float32", dict(num_key_value_heads=2, head_dim=16)),
    ("qwen3_bf16_head_dim_tied", "qwen3", "bfloat16",
     dict(num_key_value_heads=2, head_dim=32, tie_word_embeddings=True)),
    ("qwen3_f16", "qwen3", "float16", dict(num_key_value_heads=1, head_dim=16)),
    ("gemma3_f32_window8", "gemma3_text", "float32",
     dict(num_hidden_layers=6, num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=16, sliding_window=8)),
    ("gemma3_bf16_window5_softcap_untied", "gemma3_text", "bfloat16",
     dict(num_hidden_layers=6, num_key_value_heads=1, head_dim=32, query_pre_attn_scalar=32, sliding_window=5,
          final_logit_softcapping=1.5, tie_word_embeddings=False)),
]
# GGUF name, source model, converter outtype.
GGUFS = [
    ("gguf_llama_f32", "llama_f32_gqa", "f32"),
    ("gguf_llama_f16", "llama_f32_gqa", "f16"),
    ("gguf_llama_bf16", "llama_f32_gqa", "bf16"),
    ("gguf_llama_q8_0", "llama_f32_gqa", "q8_0"),
    ("gguf_llama_linear_bias_q8_0", "llama_f16_linear_bias_mqa", "q8_0"),
    ("gguf_llama_odd_dims_f16", "llama_f32_odd_dims", "f16"),
    ("gguf_mistral_bf16", "mistral_bf16", "bf16"),
    ("gguf_llama3_rope_bf16", "llama_bf16_tied_llama3", "bf16"),
    ("gguf_qwen2_q8_0", "qwen2_bf16", "q8_0"),
    ("gguf_qwen3_f16", "qwen3_f32", "f16"),
    ("gguf_gemma3_f32", "gemma3_f32_window8", "f32"),
    ("gguf_gemma3_q8_0", "gemma3_f32_window8", "q8_0"),
    ("gguf_gemma3_softcap_untied_bf16", "gemma3_bf16_window5_softcap_untied", "bf16"),
]
# What our loader says about a GGUF it does not read yet (the _refused checks).
REFUSALS = ("is not supported",)
TOL = {"float32": 2e-5, "bfloat16": 2e-5, "float16": 2e-5, "f32": 2e-5, "f16": 2e-5, "bf16": 2e-5, "q8_0": 2e-5}
FLIP_TOL = 2e-2   # Q8_0: bound at every position (one activation rounding flip)
FLIP_SHARE = 0.05  # Q8_0: share of positions allowed past TOL

# Prompts (ids < 512): one longer than two KV blocks, a short one, a repetitive one, one of a single token.
PROMPTS = ",".join([
    "1 " + " ".join(str(i) for i in range(3, 121, 3)) + " 7 9",
    "1 7",
    "5 " * 20 + "200 201 202",
    "300",
])
DUMP_RUNS = [  # flags; every model runs the first, the first model all of them
    ["--decode", "6", "--chunk", "7", "--budget", "24", "--threads", "2"],
    ["--decode", "4", "--chunk", "3", "--budget", "5", "--threads", "1", "--block-size", "4"],
]
SHORT = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}
# The other kernel paths this CPU can run (kernels.h, quant.h), on the same
# references: (check suffix, environment); the default path runs everything.
KERNEL_PATHS = [("avx2", {"VLLM_KERNELS": "avx2"}), ("portable", {"VLLM_KERNELS": "portable"})]
PATH_MODELS = {"llama_f32_gqa", "mistral_f16_window", "qwen2_bf16", "qwen3_bf16_head_dim_tied", "gemma3_f32_window8"}
QUANT_PATHS = KERNEL_PATHS + [("wide", {"VLLM_QUANT_ORDER": "wide"})]
PATH_GGUFS = {"gguf_llama_q8_0", "gguf_llama_f16"}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def make_model(torch, transformers, out, model_type, dtype, overrides, seed):
    """A transformers model with random weights, written by save_pretrained."""
    kw = dict(vocab_size=512, hidden_size=64, intermediate_size=192, num_hidden_layers=2, num_attention_heads=4,
              max_position_embeddings=512, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2)
    kw.update(overrides)
    cfg = transformers.AutoConfig.for_model(model_type, **kw)
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.2 * r)
            elif name.endswith(".bias"):
                p.copy_(0.5 * r)
            elif "embed_tokens" in name:
                p.copy_(r)
            else:
                p.copy_(r / p.shape[1] ** 0.5)
    with contextlib.redirect_stderr(io.StringIO()):  # its progress bar
        model.to(getattr(torch, dtype)).save_pretrained(out)
    for f in ("tokenizer.model", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copyfile(os.path.join(TOKENIZER_DIR, f), os.path.join(out, f))


def read_dump(path, vocab):
    """dump_logits' file: int32 num_seqs; per sequence int32 len, int32 ids[len], float32 logits[len][vocab]."""
    data = open(path, "rb").read()
    n, off, seqs = int(np.frombuffer(data, np.int32, 1, 0)[0]), 4, []
    for _ in range(n):
        length = int(np.frombuffer(data, np.int32, 1, off)[0])
        ids = np.frombuffer(data, np.int32, length, off + 4).tolist()
        off += 4 + 4 * length
        seqs.append((ids, np.frombuffer(data, np.float32, length * vocab, off).reshape(length, vocab)))
        off += 4 * length * vocab
    if off != len(data):
        raise ValueError(f"{path}: {len(data) - off} trailing bytes")
    return seqs


def dump_logits(build, model, out, flags, env=None):
    """Runs build/tools/dump_logits (env: variables to add); returns None or the error's last line."""
    cmd = [os.path.join(build, "tools", "dump_logits"), "--model", model, "--prompts", PROMPTS, "--out", out] + flags
    p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, **(env or {})))
    if p.returncode:
        lines = [l for l in p.stderr.splitlines() if "INFO" not in l] or [f"exit status {p.returncode}"]
        return lines[-1]
    return None


def hf_logits(torch, model, ids):
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0].double().numpy()


def position_errors(seqs, ref_fn, limit=None):
    """[(sequence, position, error)] for positions < limit, and a message if ours has non-finite logits."""
    out = []
    for s, (ids, ours) in enumerate(seqs):
        if not np.isfinite(ours).all():
            return out, f"non-finite logits in sequence {s}"
        n = len(ids) if limit is None else min(len(ids), limit)
        ref = ref_fn(ids)
        err = np.abs(ours[:n].astype(np.float64) - ref[:n]).max(axis=1) / np.abs(ref[:n]).max()
        out += [(s, p, float(e)) for p, e in enumerate(err)]
    return out, None


def load_hf(transformers, torch, path, dtype, gguf_file=None):
    kw = dict(dtype=dtype, attn_implementation="eager")
    if gguf_file:
        kw["gguf_file"] = gguf_file
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        return transformers.AutoModelForCausalLM.from_pretrained(path, **kw).eval()


def gemma3_as_llamacpp_reads(g, path):
    """What transformers' GGUF reader leaves out of a gemma3 file, set on g as
    llama.cpp's loader reads it (models/gemma3.cpp); returns a note. The
    attention scale: the file has no query_pre_attn_scalar, llama.cpp scales
    by 1/sqrt(head_dim) (but for the 62-layer 27B), transformers assumes 256.
    final_logit_softcapping: llama.cpp reads gemma3.final_logit_softcapping
    (gguf-py reads it here), transformers does not."""
    import gguf

    cfg, notes = g.config, []
    if cfg.query_pre_attn_scalar != cfg.head_dim:
        notes.append(f"query_pre_attn_scalar {cfg.head_dim} (transformers' GGUF reader: {cfg.query_pre_attn_scalar})")
        cfg.query_pre_attn_scalar = cfg.head_dim
        for layer in g.model.layers:
            layer.self_attn.scaling = cfg.head_dim ** -0.5
    field = gguf.GGUFReader(path).fields.get("gemma3.final_logit_softcapping")
    if field is not None and cfg.final_logit_softcapping != float(field.contents()):
        notes.append(f"final_logit_softcapping {float(field.contents()):g} (transformers' GGUF reader: "
                     f"{cfg.final_logit_softcapping})")
        cfg.final_logit_softcapping = float(field.contents())
    return f"; as llama.cpp reads the file: {', '.join(notes)}" if notes else ""


def gguf_reference(transformers, torch, gdir, src):
    """transformers' float64 model of gdir/model.gguf, and a note. Tensors its
    GGUF reader leaves out (Llama attention biases) come from the source
    directory, in the source's architecture, with everything else from the GGUF;
    a gemma3 file's settings are llama.cpp's (gemma3_as_llamacpp_reads)."""
    g = load_hf(transformers, torch, gdir, torch.float64, gguf_file="model.gguf")
    ref = load_hf(transformers, torch, src, torch.float64)
    note = gemma3_as_llamacpp_reads(g, os.path.join(gdir, "model.gguf")) if g.config.model_type == "gemma3_text" else ""
    gsd, missing = g.state_dict(), [k for k in ref.state_dict() if k not in g.state_dict()]
    if not missing:
        return g, note
    unexpected = [k for k in gsd if k not in ref.state_dict()]
    if unexpected:
        raise ValueError(f"transformers' GGUF model has tensors the source lacks: {unexpected[:3]}")
    ref.load_state_dict(gsd, strict=False)
    kinds = sorted({k.rsplit(".", 2)[-2] + "." + k.rsplit(".", 1)[-1] for k in missing})
    return ref, f"; {len(missing)} tensors transformers' GGUF reader drops ({', '.join(kinds)}) from the source"


GGUF_TO_HF = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
              "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
              "ffn_down": "mlp.down_proj"}


def q8_0_linears(gguf, path, tied):
    """HF module names of the linear layers whose GGUF weight is Q8_0."""
    names = set()
    for t in gguf.GGUFReader(path).tensors:
        if t.tensor_type != gguf.GGMLQuantizationType.Q8_0:
            continue
        parts = t.name.split(".")
        if parts[0] == "blk" and parts[-1] == "weight":
            names.add(f"model.layers.{parts[1]}.{GGUF_TO_HF[parts[2]]}")
        elif t.name == "output.weight" or (t.name == "token_embd.weight" and tied):
            names.add("lm_head")
    return names


def add_act_quant_hooks(torch, gguf, model, names):
    """Each named linear's input replaced by q * d (see Tolerances)."""
    def hook(_mod, args):
        x = args[0]
        a = x.detach().to(torch.float32).numpy().reshape(-1, 32)
        q = gguf.quants.quantize(a, gguf.GGMLQuantizationType.Q8_0)[:, 2:].view(np.int8)
        d = np.abs(a).max(axis=1, keepdims=True) / np.float32(127)
        deq = q.astype(np.float64) * d.astype(np.float64)
        return (torch.from_numpy(deq).reshape(x.shape).to(x.dtype),) + tuple(args[1:])
    handles = [m.register_forward_pre_hook(hook) for n, m in model.named_modules() if n in names]
    if len(handles) != len(names):
        raise ValueError(f"act quant: found {len(handles)} of {len(names)} linears")
    return handles


def convert_gguf(src, out, outtype):
    """llama.cpp's convert_hf_to_gguf.main() in this process; None or the error."""
    import convert_hf_to_gguf  # on sys.path from --converter
    argv, sys.argv = sys.argv, ["convert_hf_to_gguf.py", src, "--outfile", out, "--outtype", outtype]
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(err):
            convert_hf_to_gguf.main()
    except SystemExit as e:
        if e.code:
            return f"converter exited {e.code}: {err.getvalue().strip().splitlines()[-1:]}"
    except Exception as e:  # the converter's own failure, reported as this check's
        return f"converter: {type(e).__name__}: {e}"
    finally:
        sys.argv = argv
        logging.getLogger().handlers.clear()
    return None if os.path.exists(out) else "converter wrote nothing"


class Checker:
    def __init__(self):
        self.failed = 0

    def fail(self, name, why):
        self.failed += 1
        print(f"FAIL {name}: {why}", flush=True)

    def judge(self, name, errs, tol, flips=False, extra=""):
        """ok/FAIL from per-position errors: all <= tol, or (flips) FLIP_SHARE past tol and all <= FLIP_TOL."""
        worst = max(errs, key=lambda e: e[2])
        past = [e for e in errs if e[2] > tol]
        where = f"sequence {worst[0]} position {worst[1]}"
        desc = f"max rel error {worst[2]:.2g}"
        if flips:
            desc += f", {len(past)} of {len(errs)} positions past {tol:g}"
            good = len(past) <= FLIP_SHARE * len(errs) and worst[2] <= FLIP_TOL
            bound = f"tol {tol:g} at {1 - FLIP_SHARE:.0%} of positions, {FLIP_TOL:g} at all"
        else:
            good, bound = not past, f"tol {tol:g}"
        if good:
            print(f"ok {name}  # {desc} ({bound}); {len(errs)} positions{extra}", flush=True)
        else:
            self.fail(name, f"{desc} ({bound}), worst at {where}{extra}")


def check_safetensors(c, torch, transformers, a, tmp, i, name, dtype, window):
    d = os.path.join(tmp, name)
    ref64 = load_hf(transformers, torch, d, torch.float64)
    native = load_hf(transformers, torch, d, getattr(torch, dtype))
    refs = {}

    def ref_fn(ids):
        if tuple(ids) not in refs:
            refs[tuple(ids)] = hf_logits(torch, ref64, ids)
        return refs[tuple(ids)]
    runs = [("", DUMP_RUNS[0], None)]
    if i == 0:
        runs.append(("_chunk3_block4", DUMP_RUNS[1], None))
    if name in PATH_MODELS:
        runs += [(f"_{suffix}", DUMP_RUNS[0], env) for suffix, env in KERNEL_PATHS]
    for j, (suffix, flags, env) in enumerate(runs):
        check = f"hf_{name}{suffix}"
        out = os.path.join(tmp, f"{name}.{j}.bin")
        err = dump_logits(a.build, d, out, flags, env)
        if err:
            c.fail(check, f"dump_logits: {err}")
            continue
        seqs = read_dump(out, ref64.config.vocab_size)
        errs, bad = position_errors(seqs, ref_fn, window)
        if bad:
            c.fail(check, bad)
            continue
        extra = ""
        if not env:
            hf, _ = position_errors([(ids, hf_logits(torch, native, ids)) for ids, _ in seqs], ref_fn, window)
            extra = f"; hf {SHORT[dtype]} itself {max(e[2] for e in hf):.1g}"
        if window:
            extra += f"; positions >= sliding_window {window} not compared"
        c.judge(check, errs, TOL[dtype], extra=extra)


def check_gguf(c, torch, transformers, gguf, a, tmp, name, src, outtype):
    gdir = os.path.join(tmp, name)
    os.makedirs(gdir, exist_ok=True)
    path = os.path.join(gdir, "model.gguf")
    err = convert_gguf(os.path.join(tmp, src), path, outtype)
    if err:
        c.fail(name, err)
        return
    out = os.path.join(tmp, f"{name}.bin")
    err = dump_logits(a.build, path, out, DUMP_RUNS[0])
    if err and any(r in err for r in REFUSALS):
        print(f"ok {name}  # refused by our loader: {err.split('model.gguf: ', 1)[-1]}", flush=True)
        return
    if err:
        c.fail(name, f"dump_logits: {err}")
        return
    ref, note = gguf_reference(transformers, torch, gdir, os.path.join(tmp, src))
    hooks = []
    if outtype == "q8_0":
        hooks = add_act_quant_hooks(torch, gguf, ref, q8_0_linears(gguf, path, ref.config.tie_word_embeddings))
    refs = {}

    def ref_fn(ids):
        if tuple(ids) not in refs:
            refs[tuple(ids)] = hf_logits(torch, ref, ids)
        return refs[tuple(ids)]
    runs = [("", out)]
    for suffix, env in (QUANT_PATHS if outtype == "q8_0" else KERNEL_PATHS) if name in PATH_GGUFS else []:
        runs.append((f"_{suffix}", os.path.join(tmp, f"{name}_{suffix}.bin")))
        err = dump_logits(a.build, path, runs[-1][1], DUMP_RUNS[0], env)
        if err:
            c.fail(name + runs[-1][0], f"dump_logits: {err}")
            runs.pop()
    for suffix, dump in runs:
        seqs = read_dump(dump, ref.config.vocab_size)
        errs, bad = position_errors(seqs, ref_fn)
        if bad:
            c.fail(name + suffix, bad)
            continue
        extra = note
        if hooks and not suffix:
            for h in hooks:
                h.remove()
            plain, _ = position_errors(seqs, lambda ids: hf_logits(torch, ref, ids))
            hooks = add_act_quant_hooks(torch, gguf, ref, q8_0_linears(gguf, path, ref.config.tie_word_embeddings))
            extra += f"; no act quant {max(e[2] for e in plain):.1g}"
        c.judge(name + suffix, errs, TOL[outtype], flips=outtype == "q8_0", extra=extra)


def safetensors_names(i, name):
    """The results check_safetensors prints for MODELS[i], in order."""
    suffixes = [""] + (["_chunk3_block4"] if i == 0 else [])
    suffixes += [f"_{suffix}" for suffix, _ in KERNEL_PATHS] if name in PATH_MODELS else []
    return [f"hf_{name}{s}" for s in suffixes]


def gguf_names(name, outtype):
    """The results check_gguf prints for one GGUF row (a refused file: only the first)."""
    paths = (QUANT_PATHS if outtype == "q8_0" else KERNEL_PATHS) if name in PATH_GGUFS else []
    return [name] + [f"{name}_{suffix}" for suffix, _ in paths]


def all_names():
    """Every result this script prints on a machine that runs it all (the
    test's declared count; tests/test_hf_forward.sh skips these by name)."""
    names = [n for i, m in enumerate(MODELS) for n in safetensors_names(i, m[0])]
    return names + [n for g in GGUFS for n in gguf_names(g[0], g[2])]


def main():
    if sys.argv[1:] == ["--list"]:  # no torch needed
        print("\n".join(all_names()))
        return 0
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--converter", help="directory with llama.cpp's convert_hf_to_gguf.py, conversion/, gguf-py/")
    ap.add_argument("--only", default="", help="run the checks whose names contain this")
    ap.add_argument("--keep", help="write the models here and keep them")
    a = ap.parse_args()
    if a.converter:  # its gguf-py first, so the converter and transformers' GGUF reader share it
        sys.path.insert(0, a.converter)
        sys.path.insert(1, os.path.join(a.converter, "gguf-py"))
    t0 = time.time()
    import torch
    import transformers
    import gguf
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(1)
    tmp = a.keep or tempfile.mkdtemp(prefix="hf_forward.")
    os.makedirs(tmp, exist_ok=True)
    c = Checker()
    try:
        wanted = {m[0] for m in MODELS if a.only in f"hf_{m[0]}"} | {g[1] for g in GGUFS if a.only in g[0]}
        for i, (name, model_type, dtype, over) in enumerate(MODELS):
            if name in wanted:
                make_model(torch, transformers, os.path.join(tmp, name), model_type, dtype, over, seed=i)
        log(f"hf_forward: models written ({time.time() - t0:.1f}s)")
        for i, (name, model_type, dtype, over) in enumerate(MODELS):
            if a.only in f"hf_{name}":
                window = over.get("sliding_window") if model_type == "mistral" else None  # capped (see the top)
                check_safetensors(c, torch, transformers, a, tmp, i, name, dtype, window)
        log(f"hf_forward: safetensors checks done ({time.time() - t0:.1f}s)")
        for name, src, outtype in GGUFS:
            if a.only not in name:
                continue
            if not a.converter:
                for n in gguf_names(name, outtype):
                    print(f"skip {n}: no llama.cpp converter (scripts/fetch_models.sh convert could not fetch it)")
                continue
            check_gguf(c, torch, transformers, gguf, a, tmp, name, src, outtype)
        log(f"hf_forward: done ({time.time() - t0:.1f}s)")
    finally:
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return 1 if c.failed else 0


if __name__ == "__main__":
    sys.exit(main())
