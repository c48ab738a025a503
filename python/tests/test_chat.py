"""LLM.chat and get_tokenizer().apply_chat_template render as transformers'
apply_chat_template (the reference venv), on SmolLM2-135M-Instruct's GGUF
file (its ChatML template) and on stories260K with a template given as the
chat_template argument; the chat prompt's ids are transformers' encoding of
that text without special tokens added (as vLLM's LLM.chat encodes it), and
what llm.chat generates equals `vllmc generate` on those ids."""
import json

from conftest import STORIES, cli_generate, ref_python

CONVERSATIONS = [
    ([{"role": "user", "content": "Hello! Who are you?"}], {"add_generation_prompt": True}),
    ([{"role": "system", "content": "You are a pirate."}, {"role": "user", "content": "Where is the gold?"},
      {"role": "assistant", "content": "Arr, buried deep."}, {"role": "user", "content": "How deep?"}],
     {"add_generation_prompt": True}),
    ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a color."}],
     {"add_generation_prompt": False}),
    ([{"role": "user", "content": "Finish this: the quick brown fox"},
      {"role": "assistant", "content": "The quick brown fox jumps"}],
     {"add_generation_prompt": False, "continue_final_message": True}),
    ([{"role": "user", "content": "Ünïcödé ✓ and \"quotes\"\nnew line"}], {"add_generation_prompt": True}),
]

REF_RENDER = r'''
import json, os, sys
from transformers import AutoTokenizer
model, template, cases = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
if model.endswith(".gguf"):
    tok = AutoTokenizer.from_pretrained(os.path.dirname(model), gguf_file=os.path.basename(model))
else:
    tok = AutoTokenizer.from_pretrained(model)
out = []
for messages, kw in cases:
    text = tok.apply_chat_template(messages, chat_template=template, tokenize=False, **kw)
    out.append({"text": text, "ids": tok(text, add_special_tokens=False).input_ids})
print(json.dumps(out))
'''


def reference(model, template=None, cases=CONVERSATIONS):
    return ref_python(REF_RENDER, model, json.dumps(template), json.dumps(cases))


def test_apply_chat_template_equals_transformers(smollm2):
    from vllmc.tokenizer import Tokenizer
    tok = Tokenizer(smollm2)
    ref = reference(smollm2)
    for (messages, kw), r in zip(CONVERSATIONS, ref):
        assert tok.apply_chat_template(messages, tokenize=False, **kw) == r["text"]
        assert tok.apply_chat_template(messages, tokenize=True, **kw) == r["ids"]


def test_llm_chat_prompt_and_output(smollm2):
    from vllmc import LLM, SamplingParams
    llm = LLM(smollm2)
    convs = [c for c, kw in CONVERSATIONS if kw == {"add_generation_prompt": True}]
    ref = reference(smollm2, cases=[(c, {"add_generation_prompt": True}) for c in convs])
    outs = llm.chat(convs, SamplingParams(temperature=0, max_tokens=20), use_tqdm=False)
    assert [o.prompt for o in outs] == [r["text"] for r in ref]
    assert [o.prompt_token_ids for o in outs] == [r["ids"] for r in ref]
    cli = cli_generate(smollm2, [{"prompt_token_ids": r["ids"], "temperature": 0, "max_tokens": 20} for r in ref],
                       "--generation-config", "vllm")
    assert [o.outputs[0].text for o in outs] == [c["outputs"][0]["text"] for c in cli]
    assert all(o.outputs[0].text for o in outs)
    # continue_final_message: the prompt ends with the final message's text
    last = llm.chat(CONVERSATIONS[3][0], SamplingParams(temperature=0, max_tokens=4), use_tqdm=False,
                    add_generation_prompt=False, continue_final_message=True)[0]
    assert last.prompt.endswith("The quick brown fox jumps")


def test_chat_template_argument_equals_transformers():
    from vllmc import LLM, SamplingParams
    template = ("{{ bos_token }}{% for m in messages %}[{{ m['role'] | upper }}] {{ m['content'] | trim }}\n"
                "{% endfor %}{% if add_generation_prompt %}[ASSISTANT]{% endif %}")
    ref = reference(STORIES, template)
    llm = LLM(STORIES)
    tok = llm.get_tokenizer()
    for (messages, kw), r in zip(CONVERSATIONS, ref):
        assert tok.apply_chat_template(messages, chat_template=template, tokenize=False, **kw) == r["text"]
    out = llm.chat(CONVERSATIONS[1][0], SamplingParams(temperature=0, max_tokens=8), use_tqdm=False,
                   chat_template=template)[0]
    assert out.prompt == ref[1]["text"] and out.prompt_token_ids == ref[1]["ids"]
    assert out.prompt.startswith("<s>[SYSTEM] You are a pirate.")
