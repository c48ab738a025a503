#!/usr/bin/env python3
"""End-to-end sampling replay for tests/test_sampling_replay.sh.

Sends seeded requests with every sampling field the server accepts through
`/v1/completions` and `/v1/chat/completions` (some also with "stream": true)
and through `vllmc generate` (--prompts-file lines; and its command-line flags
for the cases they can express), then replays each returned token against
references nobody here wrote the model of: the logits come from Hugging Face transformers' LlamaForCausalLM on the same
model directory and the same prefix (prompt + the tokens before the step),
the processing from tests/ref/sampler_ref.py (vLLM's V1 sampler semantics in
numpy; vLLM itself does not import here: its sampler pulls in zmq, msgspec
and the rest of its server stack, and its full install brings a CUDA torch).

What each kind of case asserts (one ok/FAIL line per case and front end):
  greedy   every token is the argmax of the reference's processed logits
           (logit_bias, min_tokens' mask, repetition/frequency/presence
           penalties over the request's own prompt and output so far);
           a step whose top two are within ARGMAX_TIE of each other accepts
           either (float32 sums in another order; counted in the ok line).
  random   every token has reference probability > 0 after temperature,
           min_p, top_k and top_p (thresholds loosened by THRESH_TOL, counted).
  chisq    many seeded single-token draws at one prefix: the counts match the
           reference distribution by Pearson's chi-square (p >= CHISQ_ALPHA,
           bins with expected count >= 5, the rest pooled).
  every case: the finish (length / EOS / stop_token_ids / stop strings,
           min_tokens, ignore_eos; vLLM's check_stop order), the text (the
           HF tokenizer's decode of prompt + output, minus the prompt's), and
           any logprobs (values = log_softmax of the HF logits within LOGPROB_TOL,
           the ids = the reference top-N, vLLM's order and ranks).

Power: a check that cannot fail is a defect, so every case names the field it
is about and the replay also asks the reference what an engine ignoring that
field would have done (the field set to its neutral value). A greedy case
must contain a step whose argmax changes by more than ARGMAX_TIE; a stop case
must end where the neutral request would not; a chisq case's neutral
distribution must differ enough that N draws reject it (noncentrality); a
seed case's output must be unlikely to repeat by chance. A case without
power FAILs.

    sampling_replay.py --list
    sampling_replay.py --url URL --vllmc BIN --model DIR
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import urllib.request

ARGMAX_TIE = 1e-3     # processed-logit gap under which either of the top two is accepted
THRESH_TOL = 1e-3     # top_p/min_p loosened by this (relative for min_p), top_k by ties within it
LOGPROB_TOL = 2e-4    # |returned logprob - log_softmax(HF logits)|
CHISQ_ALPHA = 1e-4    # fail when the chi-square p-value is below it
CHISQ_POWER = 1e-6    # a chisq case must reject its neutral distribution with at most this miss rate

ALL = ("cmpl", "chat", "cli")
STREAM = ALL + ("cmpl_stream", "chat_stream")   # also with "stream": true (SSE chunks joined)

STORY = "Once upon a time"
SAD = "Lily was sad. She"
PARK = "Tom and Sam went to the park. They"
END_IDS = [291, 344, 264, 426]   # "The end." without BOS: the model's next token is BOS (id 1)


def case(name, field, kind, body, apis=("cmpl", "chat", "cli"), neutral=None, draws=0, chat_prompt=None):
    """chat_prompt: the user message when body["prompt"] is token ids (the chat template of
    stories260K is the bare content, without BOS)."""
    return {"name": name, "field": field, "kind": kind, "body": body, "apis": apis,
            "neutral": neutral or {}, "draws": draws, "chat_prompt": chat_prompt}


# field: what the case is about; neutral: the request fields an engine ignoring it would see
CASES = [
    case("greedy_logprobs", "logprobs", "greedy",
         {"prompt": SAD, "temperature": 0, "max_tokens": 20, "logprobs": 5}, apis=STREAM),
    case("repetition_penalty", "repetition_penalty", "greedy",
         {"prompt": PARK, "temperature": 0, "max_tokens": 40, "repetition_penalty": 1.3},
         neutral={"repetition_penalty": 1.0}),
    case("frequency_penalty", "frequency_penalty", "greedy",
         {"prompt": PARK, "temperature": 0, "max_tokens": 40, "frequency_penalty": 0.6},
         neutral={"frequency_penalty": 0.0}),
    case("presence_penalty", "presence_penalty", "greedy",
         {"prompt": PARK, "temperature": 0, "max_tokens": 40, "presence_penalty": 0.8},
         neutral={"presence_penalty": 0.0}),
    case("penalties_all", "presence_penalty", "greedy",
         {"prompt": STORY, "temperature": 0, "max_tokens": 48, "presence_penalty": -0.4,
          "frequency_penalty": 0.3, "repetition_penalty": 0.9, "logprobs": 2},
         neutral={"presence_penalty": 0.0, "frequency_penalty": 0.0, "repetition_penalty": 1.0}, apis=STREAM),
    case("logit_bias", "logit_bias", "greedy",
         {"prompt": SAD, "temperature": 0, "max_tokens": 12, "logit_bias": {"381": 2.0, "286": -100}},
         neutral={"logit_bias": {}}, apis=STREAM),
    case("min_tokens", "min_tokens", "greedy",
         {"prompt": STORY, "temperature": 0, "max_tokens": 12, "min_tokens": 4, "logit_bias": {"2": 40}},
         neutral={"min_tokens": 0}),
    case("ignore_eos", "ignore_eos", "greedy",
         {"prompt": STORY, "temperature": 0, "max_tokens": 5, "ignore_eos": True,
          "logit_bias": {"2": 40}, "skip_special_tokens": False},
         neutral={"ignore_eos": False}, apis=STREAM),
    case("skip_special_tokens", "skip_special_tokens", "greedy",
         {"prompt": STORY, "temperature": 0, "max_tokens": 3, "ignore_eos": True,
          "logit_bias": {"2": 40}},
         neutral={"skip_special_tokens": False}),
    case("stop_token_ids", "stop_token_ids", "greedy",
         {"prompt": STORY, "temperature": 0, "max_tokens": 30, "stop_token_ids": [298]},
         neutral={"stop_token_ids": []}, apis=STREAM),
    case("stop_token_ids_min_tokens", "min_tokens", "greedy",
         {"prompt": STORY, "temperature": 0, "max_tokens": 30, "stop_token_ids": [432, 298],
          "min_tokens": 2},
         neutral={"min_tokens": 0}),
    case("stop", "stop", "greedy",
         {"prompt": STORY, "temperature": 0, "max_tokens": 30, "stop": ["named"]},
         neutral={"stop": []}, apis=STREAM),
    case("stop_include", "include_stop_str_in_output", "greedy",
         {"prompt": STORY, "temperature": 0, "max_tokens": 30, "stop": ["park", "toys"],
          "include_stop_str_in_output": True},
         neutral={"include_stop_str_in_output": False}, apis=STREAM),
    case("eos_generation_config", "eos_token_id", "greedy",
         {"prompt": END_IDS, "temperature": 0, "max_tokens": 10}, chat_prompt="The end."),
    case("ignore_eos_generation_config", "ignore_eos", "greedy",
         {"prompt": END_IDS, "temperature": 0, "max_tokens": 10, "ignore_eos": True},
         neutral={"ignore_eos": False}, chat_prompt="The end."),
    case("max_tokens", "max_tokens", "greedy",
         {"prompt": STORY, "temperature": 0, "max_tokens": 7}, neutral={"max_tokens": None}),
    case("truncate_prompt_tokens", "truncate_prompt_tokens", "greedy",
         {"prompt": PARK, "temperature": 0, "max_tokens": 6, "truncate_prompt_tokens": 4},
         apis=("cmpl", "chat"), neutral={"truncate_prompt_tokens": None}),
    case("sampled_all", "all", "random",
         {"prompt": SAD, "temperature": 0.8, "top_k": 8, "top_p": 0.9, "min_p": 0.05,
          "presence_penalty": 0.5, "frequency_penalty": 0.3, "repetition_penalty": 1.2,
          "n": 3, "seed": 11, "max_tokens": 30, "logprobs": 3}, apis=STREAM),
    case("sampled_n", "n", "random",
         {"prompt": SAD, "temperature": 1.0, "n": 4, "seed": 5, "max_tokens": 12}),
    case("seed", "seed", "random",
         {"prompt": SAD, "temperature": 1.0, "seed": 1234, "max_tokens": 16}),
    case("chisq_temperature", "temperature", "chisq",
         {"prompt": SAD, "temperature": 0.6}, neutral={"temperature": 1.0}, draws=2000),
    case("chisq_top_k", "top_k", "chisq",
         {"prompt": SAD, "temperature": 1.0, "top_k": 3}, neutral={"top_k": 0}, draws=2000),
    case("chisq_top_p", "top_p", "chisq",
         {"prompt": SAD, "temperature": 1.0, "top_p": 0.6}, neutral={"top_p": 1.0}, draws=2000),
    case("chisq_min_p", "min_p", "chisq",
         {"prompt": SAD, "temperature": 1.0, "min_p": 0.25}, neutral={"min_p": 0.0}, draws=2000),
    case("chisq_combined", "temperature", "chisq",
         {"prompt": "He saw a", "temperature": 1.4, "top_k": 12, "top_p": 0.95, "min_p": 0.02},
         neutral={"temperature": 1.0}, draws=3000),
]


def check_names():
    return [f"replay_{api}_{c['name']}" for c in CASES for api in c["apis"]]


# ---- talking to the server and the CLI --------------------------------------------------

SERVER_GONE = []   # after one request that got no answer, the rest are not sent (bounded time)


def post(url, body):
    if SERVER_GONE:
        return {"error": f"not sent: an earlier request got no answer ({SERVER_GONE[0]})"}
    rq = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(rq, timeout=30) as r:
            if not body.get("stream"):
                return json.load(r)
            chunks = []
            for line in r.read().decode().split("\n"):
                if line.startswith("data: ") and line != "data: [DONE]":
                    chunks.append(json.loads(line[len("data: "):]))
            return {"chunks": chunks}
    except urllib.error.HTTPError as e:
        return {"http_error": e.code, "body": e.read().decode(errors="replace")[:300]}
    except Exception as e:   # timeout, connection refused, a malformed body
        SERVER_GONE.append(f"{type(e).__name__}: {e}")
        return {"error": SERVER_GONE[0]}


def tid(s):
    """'token_id:N' (return_tokens_as_token_ids) -> N"""
    assert s.startswith("token_id:"), s
    return int(s[len("token_id:"):])


def server_body(c, api, extra):
    b = dict(c["body"], **extra)
    if api.endswith("_stream"):
        b["stream"] = True
        api = api[:-len("_stream")]
    if api == "chat":
        prompt = b.pop("prompt")
        b["messages"] = [{"role": "user", "content": c["chat_prompt"] or prompt}]
        if "logprobs" in b:
            b["top_logprobs"] = b["logprobs"]
            b["logprobs"] = True
        if "max_tokens" in b:
            b["max_completion_tokens"] = b.pop("max_tokens")
    b["return_token_ids"] = True
    b["return_tokens_as_token_ids"] = True
    return b


def join_stream(chunks, api):
    """SSE chunks -> the non-streaming response's shape (per index: text, token ids and
    logprobs concatenated in order, the finish from the chunk that has one)."""
    chat = api == "chat"
    choices, prompt = {}, None
    for ch in chunks:
        prompt = prompt if prompt is not None else ch.get("prompt_token_ids")
        for c in ch.get("choices", []):
            o = choices.setdefault(c["index"], {"index": c["index"], "token_ids": [], "text": "",
                                                "finish_reason": None, "stop_reason": None, "lp": None})
            if not chat and o.get("prompt_token_ids") is None:
                o["prompt_token_ids"] = c.get("prompt_token_ids")
            o["text"] += (c.get("delta", {}).get("content") or "") if chat else c.get("text", "")
            o["token_ids"] += c.get("token_ids") or []
            if c.get("finish_reason") is not None:
                o["finish_reason"], o["stop_reason"] = c["finish_reason"], c.get("stop_reason")
            lp = c.get("logprobs")
            if lp:
                if o["lp"] is None:
                    o["lp"] = {"content": []} if chat else {"tokens": [], "token_logprobs": [], "top_logprobs": []}
                for k in o["lp"]:
                    o["lp"][k] += lp[k]
    out = []
    for i in sorted(choices):
        o = choices[i]
        c = {"index": i, "token_ids": o["token_ids"], "finish_reason": o["finish_reason"],
             "stop_reason": o["stop_reason"], "logprobs": o["lp"]}
        if chat:
            c["message"] = {"content": o["text"]}
        else:
            c["text"], c["prompt_token_ids"] = o["text"], o["prompt_token_ids"]
        out.append(c)
    return {"choices": out, "prompt_token_ids": prompt}


def parse_server(resp, api):
    """-> list of choices {prompt, ids, text, finish, stop_reason, lps}; lps: per step
    (sampled id, logprob, None, [(id, logprob)...] in the response's order)."""
    if api.endswith("_stream"):
        api = api[:-len("_stream")]
        if "chunks" in resp:
            resp = join_stream(resp["chunks"], api)
    if "choices" not in resp:
        raise ValueError(f"no choices: {json.dumps(resp)[:300]}")
    out = []
    for ch in sorted(resp["choices"], key=lambda c: c["index"]):
        lps = None
        if api == "cmpl":
            prompt = ch["prompt_token_ids"]
            text = ch["text"]
            lp = ch.get("logprobs")
            if lp:
                lps = [(tid(t), v, None, [(tid(k), x) for k, x in top.items()])
                       for t, v, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"])]
        else:
            prompt = resp["prompt_token_ids"]
            text = ch["message"]["content"]
            lp = ch.get("logprobs")
            if lp:
                lps = [(tid(e["token"]), e["logprob"], None,
                        [(tid(t["token"]), t["logprob"]) for t in e["top_logprobs"]])
                       for e in lp["content"]]
        out.append({"index": ch["index"], "prompt": prompt, "ids": ch["token_ids"], "text": text,
                    "finish": ch["finish_reason"], "stop_reason": ch["stop_reason"], "lps": lps})
    return out


def parse_cli(obj):
    out = []
    for ch in obj["outputs"]:
        lps = None
        if ch.get("logprobs") is not None:
            lps = []
            for t, step in zip(ch["token_ids"], ch["logprobs"]):
                top = [(int(k), v["logprob"]) for k, v in step.items()]
                lps.append((t, step[str(t)]["logprob"], step[str(t)]["rank"], top))
        out.append({"index": ch["index"], "prompt": obj["prompt_token_ids"], "ids": ch["token_ids"],
                    "text": ch["text"], "finish": ch["finish_reason"], "stop_reason": ch["stop_reason"],
                    "lps": lps})
    return out


def chisq_requests(c, per=100):
    """Seeded requests of n <= per draws each: seeds s, s + 1, ... (vLLM gives child i seed + i);
    each case its own seeds, so the cases' statistics are independent."""
    base = int(os.environ.get("SR_SEED_BASE", 1000))
    reqs, seed, left = [], base + 100000 * CASES.index(c), c["draws"]
    while left > 0:
        n = min(per, left)
        reqs.append({"n": n, "seed": seed, "max_tokens": 1})
        seed += n
        left -= n
    return reqs


# vllmc generate's command-line flags (a parser of their own): body field -> flag
FLAGS = {"max_tokens": "--max-tokens", "temperature": "--temperature", "top_p": "--top-p",
         "top_k": "--top-k", "min_p": "--min-p", "seed": "--seed", "n": "--n",
         "min_tokens": "--min-tokens", "presence_penalty": "--presence-penalty",
         "frequency_penalty": "--frequency-penalty", "repetition_penalty": "--repetition-penalty",
         "logprobs": "--logprobs", "ignore_eos": "--ignore-eos",
         "include_stop_str_in_output": "--include-stop-str-in-output"}


def flags_argv(args, body):
    argv = [args.vllmc, "generate", "--model", args.model, "--json", "--max-num-seqs", "1000",
            "--kv-cache-dtype", "float32", "--prompt", body["prompt"]]
    for k, v in body.items():
        if k == "prompt":
            continue
        if k == "stop":
            for x in v:
                argv += ["--stop", x]
        elif v is True:
            argv.append(FLAGS[k])
        else:
            argv += [FLAGS[k], str(v)]
    return argv


def run_flags(args, body):
    try:
        p = subprocess.run(flags_argv(args, body), capture_output=True, text=True, timeout=120)
        objs = [json.loads(x) for x in p.stdout.splitlines() if x.strip()]
        if p.returncode != 0 or len(objs) != 1:
            return f"vllmc generate exited {p.returncode} with {len(objs)} results: {p.stderr[-300:]}"
        return parse_cli(objs[0])
    except (subprocess.TimeoutExpired, ValueError, KeyError) as e:
        return f"vllmc generate: {type(e).__name__}: {e}"


def flags_ok(c):
    """Cases whose every field has a flag (prompt text, no logit_bias or stop_token_ids)."""
    b = c["body"]
    return isinstance(b["prompt"], str) and all(k in FLAGS or k in ("prompt", "stop") for k in b)


for c in CASES:   # every case that the command line can express runs through its flags too
    if "cli" in c["apis"] and flags_ok(c):
        c["apis"] = c["apis"] + ("flags",)


def collect(args):
    """Runs every case through every front end it names: {(case, api): [choices]}."""
    got = {}
    cli_lines, cli_keys = [], []
    for c in CASES:
        extras = chisq_requests(c) if c["kind"] == "chisq" else [{}]
        if c["name"] == "seed":
            extras = [{}, {}]   # the same seeded request twice
        for api in c["apis"]:
            if api == "flags":
                for e in (chisq_requests(c, 1000) if c["kind"] == "chisq" else extras):
                    got.setdefault((c["name"], api), []).append(run_flags(args, dict(c["body"], **e)))
                continue
            if api == "cli":
                for e in extras:
                    line = dict(c["body"], **e)
                    if isinstance(line["prompt"], list):
                        line["prompt_token_ids"] = line.pop("prompt")
                    cli_lines.append(line)
                    cli_keys.append((c["name"], api))
                continue
            path = "/v1/completions" if api.startswith("cmpl") else "/v1/chat/completions"
            for e in extras:
                r = post(args.url + path, server_body(c, api, e))
                try:
                    got.setdefault((c["name"], api), []).append(parse_server(r, api))
                except (ValueError, KeyError, TypeError, AttributeError) as err:
                    got.setdefault((c["name"], api), []).append(f"bad response: {err}")
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for line in cli_lines:
            f.write(json.dumps(line) + "\n")
        path = f.name
    try:
        p = subprocess.run([args.vllmc, "generate", "--model", args.model, "--prompts-file", path, "--json",
                            "--kv-cache-dtype", "float32"],
                           capture_output=True, text=True, timeout=300)
        objs, rc, err = [json.loads(x) for x in p.stdout.splitlines() if x.strip()], p.returncode, p.stderr
    except (subprocess.TimeoutExpired, ValueError) as e:
        objs, rc, err = [], -1, str(e)
    finally:
        os.unlink(path)
    if rc != 0 or len(objs) != len(cli_lines):
        msg = f"vllmc generate exited {rc} with {len(objs)} of {len(cli_lines)} results: {err[-300:]}"
        for k in set(cli_keys):
            got[k] = [msg]
    else:
        for k, o in zip(cli_keys, objs):
            got.setdefault(k, []).append(parse_cli(o))
    return got


# ---- the reference ------------------------------------------------------------------------

class Reference:
    def __init__(self, model_dir):
        import numpy as np
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
        self.np, self.torch = np, torch
        torch.set_num_threads(1)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        self.tok = AutoTokenizer.from_pretrained(model_dir)
        cfg = json.load(open(os.path.join(model_dir, "config.json")))
        gen_path = os.path.join(model_dir, "generation_config.json")
        gen = json.load(open(gen_path)) if os.path.exists(gen_path) else {}
        self.max_model_len = cfg["max_position_embeddings"]
        self.vocab = cfg["vocab_size"]
        # vLLM: the tokenizer's EOS ends a sequence unless ignore_eos; generation_config's
        # other eos ids join stop_token_ids unless ignore_eos; min_tokens masks all of them
        self.eos = self.tok.eos_token_id
        ge = gen.get("eos_token_id", [])
        self.gen_eos = sorted(set(ge if isinstance(ge, list) else [ge]) - {self.eos})
        self.gen_defaults = {k: gen[k] for k in ("temperature", "top_p", "top_k", "min_p",
                                                 "repetition_penalty") if k in gen}
        self.cache = {}

    def logits(self, ids):
        """(len(ids), vocab) float32 logits of HF's forward over ids (row i: after ids[:i+1])."""
        key = tuple(ids)
        if key not in self.cache:
            with self.torch.no_grad():
                out = self.model(self.torch.tensor([list(ids)])).logits[0]
            self.cache[key] = out.float().numpy()
        return self.cache[key]

    def decode(self, ids, skip_special=True):
        return self.tok.decode(ids, skip_special_tokens=skip_special)

    def params(self, body, api, prompt_len):
        """The request as vLLM's OpenAI server reads it (protocol.py defaults)."""
        g = lambda k, d: body[k] if body.get(k) is not None else self.gen_defaults.get(k, d)
        mt = body.get("max_tokens")
        room = self.max_model_len - prompt_len
        # unset: completions and LLM.generate's SamplingParams say 16, chat what fits
        max_tokens = min(mt, room) if mt is not None else (room if api == "chat" else 16)
        return {
            "temperature": float(g("temperature", 1.0)), "top_k": int(g("top_k", 0) or 0),
            "top_p": float(g("top_p", 1.0)), "min_p": float(g("min_p", 0.0)),
            "presence": float(body.get("presence_penalty") or 0.0),
            "frequency": float(body.get("frequency_penalty") or 0.0),
            "repetition": float(g("repetition_penalty", 1.0)),
            "min_tokens": int(body.get("min_tokens") or 0), "logprobs": body.get("logprobs"),
            "max_tokens": max_tokens, "ignore_eos": bool(body.get("ignore_eos")),
            "stop_token_ids": list(body.get("stop_token_ids") or []), "stop": list(body.get("stop") or []),
            "include_stop": bool(body.get("include_stop_str_in_output")),
            "skip_special": body.get("skip_special_tokens", True) is not False,
            "bias": [(int(k), float(self.np.float32(v))) for k, v in (body.get("logit_bias") or {}).items()],
        }

    def stop_ids(self, prm):
        """(eos list, stop list) for min_tokens' mask: vLLM's all_stop_token_ids."""
        return [self.eos] + self.gen_eos, prm["stop_token_ids"]

    def processed(self, row, prm, prompt, output):
        import sampler_ref
        eos, stop = self.stop_ids(prm)
        return sampler_ref.vllm_logits(row, prm, eos, stop, prm["bias"], prompt, output)

    def probs(self, row, prm, prompt, output):
        import sampler_ref
        eos, stop = self.stop_ids(prm)
        return sampler_ref.vllm_probs(row, prm, eos, stop, prm["bias"], prompt, output)

    def loose_probs(self, row, prm, prompt, output):
        """The kept set with thresholds loosened by THRESH_TOL (float32 vs float64 sums)."""
        np = self.np
        lp = dict(prm, top_p=min(1.0, prm["top_p"] + THRESH_TOL), min_p=prm["min_p"] * (1 - THRESH_TOL))
        k = prm["top_k"]
        if 0 < k < len(row):
            t = max(prm["temperature"], 1e-2)
            x = np.sort(self.processed(row, prm, prompt, output) / t)[::-1]
            while k < len(x) and x[k] >= x[prm["top_k"] - 1] - THRESH_TOL:
                k += 1
            lp["top_k"] = k
        return self.probs(row, lp, prompt, output)

    def end(self, ids, prm, prompt):
        """vLLM's finish for this output: (length, finish_reason, stop_reason) of the first
        stop, checking after each token: max_tokens / max_model_len (length), then, from
        min_tokens on, EOS (unless ignore_eos), stop_token_ids (+ generation_config's eos ids
        unless ignore_eos), then stop strings in the detokenized text (output processor)."""
        stop_ids = list(prm["stop_token_ids"]) + ([] if prm["ignore_eos"] else self.gen_eos)
        for i, t in enumerate(ids):
            n = i + 1
            reason = None
            if n >= prm["max_tokens"] or len(prompt) + n >= self.max_model_len:
                reason = ("length", None)
            elif n >= prm["min_tokens"]:
                if not prm["ignore_eos"] and t == self.eos:
                    reason = ("stop", None)
                elif t in stop_ids:
                    reason = ("stop", t)
            if prm["stop"] and n > prm["min_tokens"]:
                text = self.out_text(prompt, ids[:n], prm["skip_special"])
                hits = [(text.find(s), s) for s in prm["stop"] if s in text]
                if hits:
                    return n, "stop", min(hits)[1]
            if reason:
                return (n,) + reason
        return None

    def out_text(self, prompt, ids, skip_special=True):
        """The output's text as an incremental detokenizer primed with the prompt gives it."""
        head = self.decode(prompt, skip_special)
        full = self.decode(list(prompt) + list(ids), skip_special)
        return full[len(head):] if full.startswith(head) else self.decode(ids, skip_special)


# ---- the checks ---------------------------------------------------------------------------

def neutral_params(ref, c, api, prompt_len):
    b = dict(c["body"])
    for k, v in c["neutral"].items():
        if v is None:
            b.pop(k, None)
        else:
            b[k] = v
    return ref.params(b, api, prompt_len)


def check_logprobs(ref, ch, prm, api, stats):
    """Returned logprobs against log_softmax of the HF logits; -> error text or None."""
    np = ref.np
    N = prm["logprobs"]
    if N is None:
        return None if ch["lps"] is None else "logprobs returned though none were asked for"
    if ch["lps"] is None or len(ch["lps"]) != len(ch["ids"]):
        return f"logprobs missing ({ch['lps'] is not None and len(ch['lps'])} for {len(ch['ids'])} tokens)"
    L = ref.logits(list(ch["prompt"]) + list(ch["ids"]))
    P = len(ch["prompt"])
    for i, (t, lp, rank, top) in enumerate(ch["lps"]):
        if t != ch["ids"][i]:
            return f"step {i}: logprobs for token {t}, the output has {ch['ids'][i]}"
        x = L[P - 1 + i].astype(np.float64)
        ref_lp = x - x.max() - np.log(np.exp(x - x.max()).sum())
        err = abs(lp - ref_lp[t])
        stats["lp_max_err"] = max(stats.get("lp_max_err", 0.0), err)
        if err > LOGPROB_TOL:
            return f"step {i}: token {t} logprob {lp!r}, reference {float(ref_lp[t])!r}"
        for j, v in top:
            err = abs(v - ref_lp[j])
            stats["lp_max_err"] = max(stats.get("lp_max_err", 0.0), err)
            if err > LOGPROB_TOL:
                return f"step {i}: top token {j} logprob {v!r}, reference {float(ref_lp[j])!r}"
        order = np.lexsort((np.arange(len(x)), -ref_lp))
        nth = ref_lp[order[N - 1]] if N > 0 else np.inf
        must = {int(j) for j in order[:N] if ref_lp[j] > nth + LOGPROB_TOL}   # certainly in the top N
        may = {int(j) for j in range(len(x)) if ref_lp[j] >= nth - LOGPROB_TOL} if N > 0 else set()
        ids = [j for j, _ in top]
        if len(set(ids)) != len(ids):
            return f"step {i}: duplicate ids in top logprobs {ids}"
        if api == "chat":
            # vLLM: the first N entries of {sampled, top 1..N} (a dict: a repeat keeps its place)
            if len(ids) != min(N, len(x)):
                return f"step {i}: {len(ids)} top_logprobs, want {min(N, len(x))}"
            if N > 0:
                if ids[0] != t:
                    return f"step {i}: top_logprobs[0] is {ids[0]}, vLLM puts the sampled {t} first"
                others = [int(j) for j in order if j != t]
                if N > 1:
                    last = ref_lp[others[N - 2]]
                    must_o = {j for j in others[:N - 1] if ref_lp[j] > last + LOGPROB_TOL}
                    may_o = {j for j in others if ref_lp[j] >= last - LOGPROB_TOL}
                    if not must_o <= set(ids[1:]) or not set(ids[1:]) <= may_o:
                        return (f"step {i}: top_logprobs {ids}, want {t} then the reference's "
                                f"{others[:N - 1]}")
        else:
            # completions and LLM.generate: the sampled token plus the top N
            rest = set(ids) - {t}
            if not must <= set(ids) or not rest <= may | {t}:
                return f"step {i}: top logprobs {ids}, reference top {N}: {[int(j) for j in order[:N]]}"
            if len(ids) not in (N, N + 1) and N < len(x):
                return f"step {i}: {len(ids)} top logprobs for logprobs={N}"
        if rank is not None:   # vLLM's rank: tokens whose logprob >= the sampled one's
            lo = int((ref_lp > ref_lp[t] + LOGPROB_TOL).sum()) + 1
            hi = int((ref_lp >= ref_lp[t] - LOGPROB_TOL).sum())
            if not lo <= rank <= hi:
                return f"step {i}: rank {rank}, reference {lo}..{hi}"
    return None


def replay_choice(ref, c, api, ch, prm, nprm, stats):
    """Replays one returned sequence; -> error text or None. Updates stats (power, ties)."""
    np = ref.np
    prompt, ids = list(ch["prompt"]), list(ch["ids"])
    if not ids:
        return "no tokens"
    L = ref.logits(prompt + ids)
    P = len(prompt)
    path_logp = 0.0
    for i, t in enumerate(ids):
        row, out = L[P - 1 + i], ids[:i]
        if c["kind"] == "greedy":
            x = ref.processed(row, prm, prompt, out)
            best = int(np.argmax(x))
            if t != best:
                if x[t] < x[best] - ARGMAX_TIE:
                    return (f"step {i}: token {t}, reference argmax {best} "
                            f"(processed logits {x[t]:.6g} vs {x[best]:.6g}; output so far {out})")
                stats["ties"] = stats.get("ties", 0) + 1
            xn = ref.processed(row, nprm, prompt, out)
            bn = int(np.argmax(xn))
            if bn != best and x[best] - x[bn] > ARGMAX_TIE and "power_step" not in stats:
                stats["power_step"] = i   # an engine ignoring the field picks bn here
        else:
            p = ref.probs(row, prm, prompt, out)
            if p is None or p[t] <= 0:
                q = ref.loose_probs(row, prm, prompt, out)
                if q is None or q[t] <= 0:
                    kept = [int(j) for j in np.nonzero(p)[0]] if p is not None else []
                    return f"step {i}: token {t} outside the reference's kept set {kept[:20]}"
                stats["borderline"] = stats.get("borderline", 0) + 1
                path_logp += math.log(q[t])
            else:
                path_logp += math.log(p[t])
    stats["path_logp"] = stats.get("path_logp", []) + [path_logp]
    # the finish
    e = ref.end(ids, prm, prompt)
    if e is None:
        return f"{len(ids)} tokens {ids} and no stop condition holds (max_tokens {prm['max_tokens']})"
    n, finish, reason = e
    if n != len(ids) or finish != ch["finish"] or reason != ch["stop_reason"]:
        return (f"ends after {len(ids)} tokens with {ch['finish']}/{ch['stop_reason']!r}; the reference "
                f"stops after {n} with {finish}/{reason!r} (tokens {ids})")
    ne = ref.end(ids, nprm, prompt)
    if c["neutral"] and (ne is None or ne != e):
        stats["power_end"] = True   # an engine ignoring the field would not end like this
    # the text
    # vLLM's detokenizer leaves out the token that ended the sequence by EOS or
    # stop_token_ids unless include_stop_str_in_output
    stop_token_end = finish == "stop" and not isinstance(reason, str)
    text_ids = ids[:-1] if stop_token_end and not prm["include_stop"] else ids
    text = ref.out_text(prompt, text_ids, prm["skip_special"])
    if isinstance(reason, str):
        cut = text.find(reason)
        text = text[:cut + len(reason)] if prm["include_stop"] else text[:cut]
    if ch["text"] != text:
        return f"text {ch['text']!r}, the reference decodes {text!r}"
    return check_logprobs(ref, ch, prm, api, stats)


def chi2_sf(x, df, torch):
    return float(torch.special.gammaincc(torch.tensor(df / 2.0, dtype=torch.float64),
                                         torch.tensor(x / 2.0, dtype=torch.float64)))


def chi2_crit(df, alpha, torch):
    lo, hi = 0.0, 10.0 * df + 200.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if chi2_sf(mid, df, torch) > alpha else (lo, mid)
    return hi


def check_chisq(ref, c, api, runs, stats):
    np, torch = ref.np, ref.torch
    prompts = {tuple(ch["prompt"]) for r in runs for ch in r}
    if len(prompts) != 1:
        return f"draws from {len(prompts)} different prompts"
    prompt = list(prompts.pop())
    draws = [ch["ids"][0] for r in runs for ch in r]
    if len(draws) != c["draws"]:
        return f"{len(draws)} draws returned, {c['draws']} asked for"
    prm = ref.params(c["body"], api, len(prompt))
    nprm = neutral_params(ref, c, api, len(prompt))
    row = ref.logits(prompt)[-1]
    p = ref.probs(row, prm, prompt, [])
    q = ref.loose_probs(row, prm, prompt, [])
    pn = ref.probs(row, nprm, prompt, [])
    counts = np.bincount(draws, minlength=len(row))
    outside = [int(t) for t in np.nonzero(counts)[0] if q[t] <= 0]
    if outside:
        return f"drew tokens {outside} the reference never keeps (kept: {[int(j) for j in np.nonzero(p)[0]]})"
    N = len(draws)
    big = [int(t) for t in np.argsort(-p) if N * p[t] >= 5]
    bins = [[t] for t in big]
    rest = [t for t in range(len(p)) if t not in set(big)]
    if N * p[rest].sum() > 1e-9 or counts[rest].sum():
        if N * p[rest].sum() >= 5:
            bins.append(rest)
        else:
            bins[-1] = bins[-1] + rest
    E = np.array([N * p[b].sum() for b in bins])
    O = np.array([counts[b].sum() for b in bins], np.float64)
    En = np.array([N * pn[b].sum() for b in bins])
    df = len(bins) - 1
    if df < 1:
        return "one bin only: nothing to test"
    stat = float(((O - E) ** 2 / E).sum())
    pval = chi2_sf(stat, df, torch)
    crit = chi2_crit(df, CHISQ_ALPHA, torch)
    # power: the neutral distribution's noncentrality; the statistic under it is about
    # df + lam with variance 2 (df + 2 lam): ask for crit 5 standard deviations below the mean
    lam = float(((En - E) ** 2 / E).sum())
    # or: the neutral distribution's mass outside the kept set, where one draw fails
    m_out = float(pn[q <= 0].sum())
    miss = (1 - m_out) ** N
    power_ok = df + lam - 5 * math.sqrt(2 * (df + 2 * lam)) > crit or miss < CHISQ_POWER
    stats.update(chisq=stat, df=df, pval=pval, crit=crit, lam=lam, m_out=m_out)
    if pval < CHISQ_ALPHA:
        return (f"chi-square {stat:.2f} with {df} df (p {pval:.2e} < {CHISQ_ALPHA}); observed "
                f"{O.astype(int).tolist()}, expected {np.round(E, 1).tolist()}")
    if not power_ok:
        return (f"no power: the neutral distribution gives noncentrality {lam:.1f} against critical "
                f"{crit:.1f} and puts {m_out:.2g} outside the kept set")
    return None


def run_case(ref, c, api, runs):
    api = api.replace("_stream", "").replace("flags", "cli")   # the same assertions
    if any(isinstance(r, str) for r in runs):
        return next(r for r in runs if isinstance(r, str)), {}
    stats = {}
    if c["kind"] == "chisq":
        return check_chisq(ref, c, api, runs, stats), stats
    body = c["body"]
    for r in runs:
        want_n = body.get("n", 1)
        if len(r) != want_n or [ch["index"] for ch in r] != list(range(want_n)):
            return f"{len(r)} choices (indices {[ch['index'] for ch in r]}), n = {want_n}", stats
        for ch in r:
            prompt = list(ch["prompt"])
            want_prompt = None
            if api != "chat":
                want_prompt = body["prompt"] if isinstance(body["prompt"], list) \
                    else ref.tok(body["prompt"])["input_ids"]
            elif c["chat_prompt"]:   # the template is the bare message: no BOS
                want_prompt = ref.tok(c["chat_prompt"], add_special_tokens=False)["input_ids"]
            if want_prompt is not None:
                k = body.get("truncate_prompt_tokens")
                if k:
                    want_prompt = want_prompt[-k:]
                if prompt != want_prompt:
                    return f"prompt ids {prompt}, the HF tokenizer gives {want_prompt}", stats
            elif body.get("truncate_prompt_tokens") and len(prompt) != body["truncate_prompt_tokens"]:
                return f"{len(prompt)} prompt ids, truncate_prompt_tokens {body['truncate_prompt_tokens']}", stats
            prm = ref.params(body, api, len(prompt))
            nprm = neutral_params(ref, c, api, len(prompt))
            err = replay_choice(ref, c, api, ch, prm, nprm, stats)
            if err:
                return (f"choice {ch['index']}: {err}" if want_n > 1 else err), stats
    # power, per field
    f = c["field"]
    if c["name"] == "truncate_prompt_tokens":
        full = len(ref.tok(body["prompt"])["input_ids"]) if api != "chat" else None
        if full is not None and full <= body["truncate_prompt_tokens"]:
            return "no power: the prompt is not longer than truncate_prompt_tokens", stats
    elif f == "skip_special_tokens":
        # the EOS tokens are in the output; their text must be absent, and present without the flag
        ch = runs[0][0]
        with_special = ref.out_text(ch["prompt"], ch["ids"], False)
        if with_special == ch["text"]:
            return "no power: the output's text is the same with special tokens", stats
    elif f == "include_stop_str_in_output":
        if not isinstance(runs[0][0]["stop_reason"], str):
            return "no power: no stop string ended the output", stats
    elif f == "seed":
        # the repeat must be identical, and an unseeded engine could not repeat it by luck
        a, b = runs
        if [ch["ids"] for ch in a] != [ch["ids"] for ch in b]:
            return f"the same seed gave {a[0]['ids']} then {b[0]['ids']}", stats
        if stats["path_logp"][0] > math.log(1e-3):
            return f"no power: the output has probability {math.exp(stats['path_logp'][0]):.2g}", stats
    elif f == "n":
        outs = [tuple(ch["ids"]) for ch in runs[0]]
        if len(set(outs)) < 2:
            return f"all {len(outs)} choices are the same {outs[0]} (children must have seeds seed + index)", stats
    elif f == "all":
        pass   # sampled_all: every field at once, each kept set at every step; the chisq
        #        and greedy cases give each field its power
    elif f == "eos_token_id":
        ch = runs[0][0]
        if not (ch["ids"][-1] in ref.gen_eos + [ref.eos] and ch["finish"] == "stop"):
            return "no power: the output does not end with an EOS id", stats
    elif f == "logprobs":
        pass   # missing logprobs fail check_logprobs
    elif f in ("stop_token_ids", "stop", "max_tokens", "ignore_eos") or \
            (f == "min_tokens" and "stop_token_ids" in body):
        if not stats.get("power_end") and "power_step" not in stats:
            return f"no power: an engine ignoring {f} would end the same way", stats
    elif c["neutral"] and "power_step" not in stats:
        return f"no power: ignoring {f} changes no step's argmax by more than {ARGMAX_TIE}", stats
    return None, stats


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--url")
    ap.add_argument("--vllmc")
    ap.add_argument("--model")
    ap.add_argument("--only", help="comma-separated case names (debugging)")
    args = ap.parse_args()
    if args.list:
        print("\n".join(check_names()))
        return 0
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    if args.only:
        keep = set(args.only.split(","))
        CASES[:] = [c for c in CASES if c["name"] in keep]
    got = collect(args)
    ref = Reference(args.model)
    worst_lp = 0.0
    for c in CASES:
        for api in c["apis"]:
            name = f"replay_{api}_{c['name']}"
            try:
                err, st = run_case(ref, c, api, got.get((c["name"], api), ["no response"]))
            except Exception as ex:   # a malformed response is a failure, not a crash
                err, st = f"{type(ex).__name__}: {ex}", {}
            worst_lp = max(worst_lp, st.get("lp_max_err", 0.0))
            if err:
                print(f"FAIL {name}: {err}")
                continue
            notes = []
            if "power_step" in st:
                notes.append(f"ignoring {c['field']} changes step {st['power_step']}")
            if st.get("ties"):
                notes.append(f"{st['ties']} near-tie steps")
            if st.get("borderline"):
                notes.append(f"{st['borderline']} borderline draws")
            if "chisq" in st:
                notes.append(f"chi2 {st['chisq']:.1f}/{st['df']} df p={st['pval']:.3f}; neutral: "
                             f"noncentrality {st['lam']:.0f}, {st['m_out']:.2f} outside")
            if "lp_max_err" in st:
                notes.append(f"max logprob error {st['lp_max_err']:.1e}")
            print(f"ok {name}" + (f" ({'; '.join(notes)})" if notes else ""))
    print(f"# largest logprob difference from log_softmax(HF logits): {worst_lp:.2e}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
