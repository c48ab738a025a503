"""outputs.py - vLLM 0.11's RequestOutput and CompletionOutput
(vllm/outputs.py), and the per-request stats vLLM V1 attaches as
RequestOutput.metrics (RequestStateStats, vllm/v1/metrics/stats.py)."""
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Union

from .logprobs import Logprob
from .lora.request import LoRARequest

SampleLogprobs = List[Dict[int, Logprob]]
PromptLogprobs = List[Optional[Dict[int, Logprob]]]


@dataclass
class CompletionOutput:
    """The output of one completion of a request."""
    index: int
    text: str
    token_ids: List[int]
    cumulative_logprob: Optional[float]
    logprobs: Optional[SampleLogprobs]
    finish_reason: Optional[str] = None
    stop_reason: Union[int, str, None] = None
    lora_request: Optional[LoRARequest] = None

    def finished(self) -> bool:
        return self.finish_reason is not None

    def __repr__(self) -> str:
        return (f"CompletionOutput(index={self.index}, text={self.text!r}, token_ids={self.token_ids}, "
                f"cumulative_logprob={self.cumulative_logprob}, logprobs={self.logprobs}, "
                f"finish_reason={self.finish_reason}, stop_reason={self.stop_reason})")


@dataclass
class RequestStateStats:
    """Per-request timings (monotonic seconds, the engine's clock) and counts."""
    num_generation_tokens: int = 0
    arrival_time: float = 0.0
    queued_ts: float = 0.0
    scheduled_ts: float = 0.0
    first_token_ts: float = 0.0
    last_token_ts: float = 0.0
    first_token_latency: float = 0.0
    is_corrupted: bool = False


class RequestOutput:
    """The output of one request: its prompt and its completions."""

    def __init__(self, request_id: str, prompt: Optional[str], prompt_token_ids: Optional[List[int]],
                 prompt_logprobs: Optional[PromptLogprobs], outputs: List[CompletionOutput], finished: bool,
                 metrics: Optional[RequestStateStats] = None, lora_request: Optional[LoRARequest] = None,
                 encoder_prompt: Optional[str] = None, encoder_prompt_token_ids: Optional[List[int]] = None,
                 num_cached_tokens: Optional[int] = None, *,
                 multi_modal_placeholders: Optional[Dict[str, Any]] = None,
                 kv_transfer_params: Optional[Dict[str, Any]] = None, **kwargs: Any) -> None:
        self.request_id = request_id
        self.prompt = prompt
        self.prompt_token_ids = prompt_token_ids
        self.multi_modal_placeholders = multi_modal_placeholders or {}
        self.prompt_logprobs = prompt_logprobs
        self.outputs = outputs
        self.finished = finished
        self.metrics = metrics
        self.lora_request = lora_request
        self.encoder_prompt = encoder_prompt
        self.encoder_prompt_token_ids = encoder_prompt_token_ids
        self.num_cached_tokens = num_cached_tokens
        self.kv_transfer_params = kv_transfer_params

    def __repr__(self) -> str:
        return (f"RequestOutput(request_id={self.request_id}, prompt={self.prompt!r}, "
                f"prompt_token_ids={self.prompt_token_ids}, encoder_prompt={self.encoder_prompt!r}, "
                f"encoder_prompt_token_ids={self.encoder_prompt_token_ids}, "
                f"prompt_logprobs={self.prompt_logprobs}, outputs={self.outputs}, finished={self.finished}, "
                f"metrics={self.metrics}, lora_request={self.lora_request}, "
                f"num_cached_tokens={self.num_cached_tokens}, "
                f"multi_modal_placeholders={self.multi_modal_placeholders})")
