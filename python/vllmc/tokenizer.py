"""tokenizer.py - what LLM.get_tokenizer() returns: the model's tokenizer
(libvllm.a's, the one the engine's prompts go through) with the parts of a
transformers tokenizer that offline scripts use: encode, decode, __call__,
convert_ids_to_tokens / convert_tokens_to_ids, the special token ids, and
apply_chat_template (the model's template rendered by vllm.c's Jinja, with
vLLM's message normalization; continue_final_message cut as transformers
cuts it)."""
import json
from typing import Any, Dict, List, Optional, Union

from . import _C


class Tokenizer:
    def __init__(self, model: str, tokenizer: Optional[str] = None, chat_template: Optional[str] = None):
        self.name_or_path = tokenizer or model
        self._tok = _C.Tokenizer(self.name_or_path)
        self._chat_template_override = chat_template
        self._templates: Dict[Optional[str], Any] = {}

    # ---- transformers-like surface ----
    @property
    def vocab_size(self) -> int:
        return self._tok.vocab_size

    def __len__(self) -> int:
        return self._tok.vocab_size

    @property
    def bos_token_id(self) -> Optional[int]:
        return self._tok.bos_token_id

    @property
    def eos_token_id(self) -> Optional[int]:
        return self._tok.eos_token_id

    @property
    def bos_token(self) -> Optional[str]:
        i = self._tok.bos_token_id
        return None if i is None else self._tok.id_to_token(i)

    @property
    def eos_token(self) -> Optional[str]:
        i = self._tok.eos_token_id
        return None if i is None else self._tok.id_to_token(i)

    def encode(self, text: str, add_special_tokens: bool = True, **kwargs) -> List[int]:
        return self._tok.encode(text, add_special_tokens)

    def decode(self, token_ids: Union[int, List[int]], skip_special_tokens: bool = False, **kwargs) -> str:
        if isinstance(token_ids, int):
            token_ids = [token_ids]
        return self._tok.decode(list(token_ids), skip_special_tokens)

    def __call__(self, text: Union[str, List[str]], add_special_tokens: bool = True, **kwargs) -> Dict[str, Any]:
        if isinstance(text, str):
            return {"input_ids": self.encode(text, add_special_tokens)}
        return {"input_ids": [self.encode(t, add_special_tokens) for t in text]}

    def convert_ids_to_tokens(self, ids: Union[int, List[int]]):
        if isinstance(ids, int):
            return self._tok.id_to_token(ids)
        return [self._tok.id_to_token(i) for i in ids]

    def convert_tokens_to_ids(self, tokens: Union[str, List[str]]):
        if isinstance(tokens, str):
            return self._tok.token_to_id(tokens)
        return [self._tok.token_to_id(t) for t in tokens]

    # ---- chat templates ----
    def _template(self, chat_template: Optional[str]):
        source = chat_template if chat_template is not None else self._chat_template_override
        if source not in self._templates:
            try:
                self._templates[source] = _C.ChatTemplate(self.name_or_path, source)
            except OSError as e:
                if source is None and "template" in str(e):  # vLLM's words when the model has none
                    raise ValueError("As of transformers v4.44, default chat template is no longer allowed, so "
                                     "you must provide a chat template if the tokenizer does not define one.") from e
                raise
        return self._templates[source]

    def apply_chat_template(self, conversation: List[Dict[str, Any]], tools: Optional[List[Dict[str, Any]]] = None,
                            documents: Optional[List[Dict[str, str]]] = None, chat_template: Optional[str] = None,
                            add_generation_prompt: bool = False, continue_final_message: bool = False,
                            tokenize: bool = True, **kwargs) -> Union[str, List[int]]:
        """transformers' apply_chat_template (tokenize=True gives ids, without
        adding special tokens again, as vLLM's LLM.chat encodes the prompt)."""
        if documents is not None:
            raise NotImplementedError("apply_chat_template(documents=...) is not implemented in vllmc")
        if continue_final_message and add_generation_prompt:
            raise ValueError("continue_final_message and add_generation_prompt are not compatible. Use "
                             "continue_final_message when you want the model to continue the final message, "
                             "and add_generation_prompt when you want to add a header that will prompt it to "
                             "start a new assistant message instead.")
        for k in ("return_dict", "return_tensors", "padding", "truncation", "max_length", "return_assistant_tokens_mask"):
            if kwargs.get(k):
                raise NotImplementedError(f"apply_chat_template({k}=...) is not implemented in vllmc")
            kwargs.pop(k, None)
        rendered = self._template(chat_template).render(
            json.dumps(conversation), None if tools is None else json.dumps(tools),
            json.dumps(kwargs) if kwargs else None, add_generation_prompt)
        if continue_final_message:
            rendered = _cut_after_final_message(conversation, rendered)
        if tokenize:
            return self.encode(rendered, add_special_tokens=False)
        return rendered


def _cut_after_final_message(conversation: List[Dict[str, Any]], rendered: str) -> str:
    """transformers' continue_final_message: end the prompt right after the final message."""
    final_message = conversation[-1]["content"]
    if isinstance(final_message, (list, tuple)):
        for block in reversed(final_message):
            if "text" in block:
                final_message = block["text"]
                break
        else:
            raise ValueError("continue_final_message is set but we could not find any text to continue"
                             "in the final message!")
    if final_message.strip() not in rendered:
        raise ValueError("continue_final_message is set but the final message does not appear in the chat "
                         "after applying the chat template! This can happen if the chat template deletes "
                         "portions of the final message. Please verify the chat template and final message "
                         "in your chat to ensure the final message is not modified.")
    loc = rendered.rindex(final_message.strip())
    if rendered[loc:loc + len(final_message.lstrip())] == final_message:
        return rendered[:loc + len(final_message.lstrip())]
    return rendered[:loc + len(final_message.strip())]
