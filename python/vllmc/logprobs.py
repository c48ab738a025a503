"""logprobs.py - vLLM's Logprob (vllm/logprobs.py)."""
from dataclasses import dataclass
from typing import Optional


@dataclass
class Logprob:
    """A token's logprob, its rank in the vocabulary, and its text."""
    logprob: float
    rank: Optional[int] = None
    decoded_token: Optional[str] = None
