"""inputs.py - vLLM's prompt dicts (vllm/inputs/data.py)."""
from typing import List, TypedDict

try:
    from typing import NotRequired
except ImportError:  # Python < 3.11
    NotRequired = None


class TextPrompt(TypedDict, total=False):
    prompt: str
    cache_salt: str


class TokensPrompt(TypedDict, total=False):
    prompt_token_ids: List[int]
    prompt: str
    cache_salt: str
