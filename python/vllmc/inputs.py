"""inputs.py - vLLM's prompt dicts (vllm/inputs/data.py)."""
from typing import List, TypedDict


class TextPrompt(TypedDict, total=False):
    prompt: str
    cache_salt: str


class TokensPrompt(TypedDict, total=False):
    prompt_token_ids: List[int]
    prompt: str
    cache_salt: str
