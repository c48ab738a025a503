"""gguf_chat_ref.py - the reference for chat templates of GGUF files:
transformers' apply_chat_template, with the tokenizer (and so the special
tokens, and the chat template unless TEMPLATE_FILE is given) that
AutoTokenizer.from_pretrained(dir, gguf_file=name) loads from the file.

    .venv/bin/python tests/ref/gguf_chat_ref.py MODEL.gguf CONVERSATIONS_JSON [TEMPLATE_FILE]

Renders the model-independent conversations of CONVERSATIONS_JSON (those
listed for every template, stories260K included) and prints
[{name, ok, output | error, ids}]: ids are the rendering tokenized as vLLM
tokenizes a chat prompt (add_special_tokens=False: the template writes the
BOS). Messages go in as written (their contents are strings, which vLLM's
normalization leaves alone).

    .venv/bin/python tests/ref/gguf_chat_ref.py --generate N MODEL.gguf MESSAGES_JSON [TEMPLATE_FILE]

renders MESSAGES_JSON (a list of messages) with the generation prompt, and
greedily generates N tokens with the model transformers loads from the same
file (dequantized, float32); prints {ids, completion_ids, text}, text
decoded without special tokens (vLLM's default skip_special_tokens).
"""
import json
import os
import sys


def generate(n, model, messages, template):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()
    torch.set_num_threads(2)
    d, f = os.path.dirname(os.path.abspath(model)), os.path.basename(model)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    text = tok.apply_chat_template(json.loads(messages), chat_template=template, tokenize=False,
                                   add_generation_prompt=True)
    ids = tok.encode(text, add_special_tokens=False)
    m = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32).eval()
    with torch.no_grad():
        out = m.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False)[0, len(ids):].tolist()
    json.dump({"ids": ids, "completion_ids": out, "text": tok.decode(out, skip_special_tokens=True)}, sys.stdout,
              ensure_ascii=False)
    sys.stdout.write("\n")


def main():
    if sys.argv[1] == "--generate":
        template = open(sys.argv[5]).read() if len(sys.argv) > 5 else None
        return generate(int(sys.argv[2]), sys.argv[3], sys.argv[4], template)
    model, conversations = sys.argv[1], sys.argv[2]
    template = open(sys.argv[3]).read() if len(sys.argv) > 3 else None
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()
    tok = AutoTokenizer.from_pretrained(os.path.dirname(os.path.abspath(model)), gguf_file=os.path.basename(model))
    spec = json.load(open(conversations))
    out = []
    for case in spec["cases"]:
        if "stories260K" not in case.get("templates", []):
            continue
        try:
            text = tok.apply_chat_template(case["messages"], chat_template=template, tokenize=False,
                                           add_generation_prompt=bool(case.get("add_generation_prompt")),
                                           tools=case.get("tools"), documents=case.get("documents"),
                                           **(case.get("kwargs") or {}))
            out.append({"name": case["name"], "ok": True, "output": text,
                        "ids": tok.encode(text, add_special_tokens=False)})
        except Exception as e:  # the template's raise_exception, or a value it cannot handle
            out.append({"name": case["name"], "ok": False, "error": str(e)})
    json.dump(out, sys.stdout, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
