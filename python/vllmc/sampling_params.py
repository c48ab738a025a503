"""sampling_params.py - vLLM 0.11's SamplingParams, BeamSearchParams,
StructuredOutputsParams (and the deprecated GuidedDecodingParams) and
RequestOutputKind, with vLLM's fields, defaults and validation messages
(vllm/sampling_params.py: __post_init__, _verify_args,
_verify_greedy_sampling). The ranges our engine checks again when a
request is added (src/sample/sampling_params.c) carry the same messages.

Every field exists; what the package does not pass to the engine yet
(prompt_logprobs, allowed_token_ids, bad_words,
logits_processors, spaces_between_special_tokens=False) is accepted here
and refused by LLM.generate with NotImplementedError naming the field,
never dropped silently.
"""
import copy
import warnings
from dataclasses import dataclass, field, fields
from enum import IntEnum
from typing import Any, Callable, Dict, List, Optional, Union

_SAMPLING_EPS = 1e-5
_MAX_TEMP = 1e-2


class RequestOutputKind(IntEnum):
    # Return entire output so far in every RequestOutput
    CUMULATIVE = 0
    # Return only deltas in each RequestOutput
    DELTA = 1
    # Do not return intermediate RequestOutput
    FINAL_ONLY = 2


@dataclass
class StructuredOutputsParams:
    # One of these fields will be used to build a logit processor.
    json: Optional[Union[str, Dict]] = None
    regex: Optional[str] = None
    choice: Optional[List[str]] = None
    grammar: Optional[str] = None
    json_object: Optional[bool] = None
    # These are other options that can be set.
    disable_fallback: bool = False
    disable_any_whitespace: bool = False
    disable_additional_properties: bool = False
    whitespace_pattern: Optional[str] = None
    structural_tag: Optional[str] = None
    _backend: Optional[str] = field(default=None, init=False)
    _backend_was_auto: bool = field(default=False, init=False)

    def __post_init__(self):
        """Validate that some fields are mutually exclusive."""
        count = sum([self.json is not None, self.regex is not None, self.choice is not None,
                     self.grammar is not None, self.json_object is not None, self.structural_tag is not None])
        if count > 1:
            raise ValueError("You can only use one kind of structured outputs constraint "
                             f"but multiple are specified: {self.__dict__}")


class GuidedDecodingParams(StructuredOutputsParams):
    """Deprecated alias of StructuredOutputsParams (vLLM 0.11 keeps it for
    SamplingParams(guided_decoding=...))."""


@dataclass
class SamplingParams:
    """Sampling parameters for text generation (vLLM's field order and defaults)."""
    n: int = 1
    best_of: Optional[int] = None
    _real_n: Optional[int] = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: Optional[int] = None
    stop: Optional[Union[str, List[str]]] = None
    stop_token_ids: Optional[List[int]] = None
    ignore_eos: bool = False
    max_tokens: Optional[int] = 16
    min_tokens: int = 0
    logprobs: Optional[int] = None
    prompt_logprobs: Optional[int] = None
    detokenize: bool = True
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    logits_processors: Optional[Any] = None
    include_stop_str_in_output: bool = False
    truncate_prompt_tokens: Optional[int] = None
    output_kind: RequestOutputKind = RequestOutputKind.CUMULATIVE
    output_text_buffer_length: int = 0
    _all_stop_token_ids: set = field(default_factory=set)
    structured_outputs: Optional[StructuredOutputsParams] = None
    guided_decoding: Optional[GuidedDecodingParams] = None
    logit_bias: Optional[Dict[int, float]] = None
    allowed_token_ids: Optional[List[int]] = None
    extra_args: Optional[Dict[str, Any]] = None
    bad_words: Optional[List[str]] = None
    _bad_words_token_ids: Optional[List[List[int]]] = None

    @staticmethod
    def from_optional(**kwargs) -> "SamplingParams":
        """vLLM's from_optional: None means the default."""
        return SamplingParams(**{k: v for k, v in kwargs.items() if v is not None})

    def __post_init__(self) -> None:
        if self.best_of:
            if self.best_of < self.n:
                raise ValueError(f"best_of must be greater than or equal to n, "
                                 f"got n={self.n} and best_of={self.best_of}.")
            if not self._real_n:
                self._real_n = self.n
                self.n = self.best_of
        if 0 < self.temperature < _MAX_TEMP:
            warnings.warn(f"temperature {self.temperature} is less than {_MAX_TEMP}, which may cause "
                          f"numerical errors nan or inf in tensors. We have maxed it out to {_MAX_TEMP}.")
            self.temperature = max(self.temperature, _MAX_TEMP)
        if self.seed == -1:
            self.seed = None
        if self.stop is None:
            self.stop = []
        elif isinstance(self.stop, str):
            self.stop = [self.stop]
        else:
            self.stop = list(self.stop)
        if self.stop_token_ids is None:
            self.stop_token_ids = []
        else:
            self.stop_token_ids = list(self.stop_token_ids)
        if self.bad_words is None:
            self.bad_words = []
        if self.logprobs is True:
            self.logprobs = 1
        if self.prompt_logprobs is True:
            self.prompt_logprobs = 1
        if self.stop and not self.include_stop_str_in_output:
            self.output_text_buffer_length = max(len(s) for s in self.stop) - 1
        self._verify_args()
        if self.temperature < _SAMPLING_EPS:
            # Zero temperature means greedy sampling.
            self.top_p = 1.0
            self.top_k = 0
            self.min_p = 0.0
            self._verify_greedy_sampling()
        self._all_stop_token_ids.update(self.stop_token_ids)
        if self.guided_decoding is not None:
            warnings.warn("guided_decoding is deprecated. This will be removed in v0.12.0 or v1.0.0, "
                          "which ever is soonest. Please use structured_outputs instead.",
                          DeprecationWarning, stacklevel=2)
            self.structured_outputs = self.guided_decoding
            self.guided_decoding = None

    def _verify_args(self) -> None:
        if not isinstance(self.n, int):
            raise ValueError(f"n must be an int, but is of type {type(self.n)}")
        if self.n < 1:
            raise ValueError(f"n must be at least 1, got {self.n}.")
        if not -2.0 <= self.presence_penalty <= 2.0:
            raise ValueError(f"presence_penalty must be in [-2, 2], got {self.presence_penalty}.")
        if not -2.0 <= self.frequency_penalty <= 2.0:
            raise ValueError(f"frequency_penalty must be in [-2, 2], got {self.frequency_penalty}.")
        if self.repetition_penalty <= 0.0:
            raise ValueError(f"repetition_penalty must be greater than zero, got {self.repetition_penalty}.")
        if self.temperature < 0.0:
            raise ValueError(f"temperature must be non-negative, got {self.temperature}.")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}.")
        # quietly accept -1 as disabled, but prefer 0
        if self.top_k < -1:
            raise ValueError(f"top_k must be 0 (disable), or at least 1, got {self.top_k}.")
        if not isinstance(self.top_k, int):
            raise TypeError(f"top_k must be an integer, got {type(self.top_k).__name__}")
        if not 0.0 <= self.min_p <= 1.0:
            raise ValueError(f"min_p must be in [0, 1], got {self.min_p}.")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {self.max_tokens}.")
        if self.min_tokens < 0:
            raise ValueError(f"min_tokens must be greater than or equal to 0, got {self.min_tokens}.")
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            raise ValueError(f"min_tokens must be less than or equal to "
                             f"max_tokens={self.max_tokens}, got {self.min_tokens}.")
        if self.logprobs is not None and self.logprobs != -1 and self.logprobs < 0:
            raise ValueError(f"logprobs must be non-negative or -1, got {self.logprobs}.")
        if self.prompt_logprobs is not None and self.prompt_logprobs != -1 and self.prompt_logprobs < 0:
            raise ValueError(f"prompt_logprobs must be non-negative or -1, got {self.prompt_logprobs}.")
        if self.truncate_prompt_tokens is not None and (self.truncate_prompt_tokens == 0
                                                        or self.truncate_prompt_tokens < -1):
            raise ValueError(f"truncate_prompt_tokens must be an integer >= 1 or -1, "
                             f"got {self.truncate_prompt_tokens}")
        assert isinstance(self.stop_token_ids, list)
        if not all(isinstance(st_id, int) for st_id in self.stop_token_ids):
            raise ValueError(f"stop_token_ids must contain only integers, got {self.stop_token_ids}.")
        assert isinstance(self.stop, list)
        if any(not stop_str for stop_str in self.stop):
            raise ValueError("stop cannot contain an empty string.")
        if self.stop and not self.detokenize:
            raise ValueError("stop strings are only supported when detokenize is True. "
                             "Set detokenize=True to use stop.")
        if self.best_of != self._real_n and self.output_kind == RequestOutputKind.DELTA:
            raise ValueError("best_of must equal n to use output_kind=DELTA")

    def _verify_greedy_sampling(self) -> None:
        if self.n > 1:
            raise ValueError(f"n must be 1 when using greedy sampling, got {self.n}.")

    @property
    def sampling_type(self):
        if self.temperature < _SAMPLING_EPS:
            return "GREEDY"
        return "RANDOM_SEED" if self.seed is not None else "RANDOM"

    @property
    def all_stop_token_ids(self) -> set:
        return self._all_stop_token_ids

    @property
    def bad_words_token_ids(self):
        return self._bad_words_token_ids

    def clone(self) -> "SamplingParams":
        return copy.deepcopy(self)

    def __repr__(self) -> str:
        return (f"SamplingParams(n={self.n}, presence_penalty={self.presence_penalty}, "
                f"frequency_penalty={self.frequency_penalty}, repetition_penalty={self.repetition_penalty}, "
                f"temperature={self.temperature}, top_p={self.top_p}, top_k={self.top_k}, min_p={self.min_p}, "
                f"seed={self.seed}, stop={self.stop}, stop_token_ids={self.stop_token_ids}, "
                f"bad_words={self.bad_words}, include_stop_str_in_output={self.include_stop_str_in_output}, "
                f"ignore_eos={self.ignore_eos}, max_tokens={self.max_tokens}, min_tokens={self.min_tokens}, "
                f"logprobs={self.logprobs}, prompt_logprobs={self.prompt_logprobs}, "
                f"skip_special_tokens={self.skip_special_tokens}, "
                f"spaces_between_special_tokens={self.spaces_between_special_tokens}, "
                f"truncate_prompt_tokens={self.truncate_prompt_tokens}, "
                f"structured_outputs={self.structured_outputs}, extra_args={self.extra_args})")

    # ---- what the engine is given (vllmc._C.Engine.generate) ----

    def _unsupported(self) -> Optional[str]:
        """The first field set to something the engine does not implement, as a message."""
        if self.best_of is not None and self.best_of != (self._real_n or self.n):
            return None  # vLLM's own ValueError, raised by LLM
        if self.prompt_logprobs is not None:
            return "prompt logprobs (SamplingParams.prompt_logprobs)"
        if self.allowed_token_ids is not None:
            return "SamplingParams.allowed_token_ids"
        if self.bad_words:
            return "SamplingParams.bad_words"
        if self.logits_processors:
            return "SamplingParams.logits_processors"
        if not self.spaces_between_special_tokens:
            return "SamplingParams.spaces_between_special_tokens=False"
        return None

    def _engine_dict(self, vocab_size: int) -> dict:
        logprobs = self.logprobs
        if logprobs == -1:
            logprobs = vocab_size  # vLLM: the whole vocabulary (then capped by max_logprobs)
        return {
            "n": self.n, "temperature": self.temperature, "top_p": self.top_p, "top_k": self.top_k,
            "min_p": self.min_p, "presence_penalty": self.presence_penalty,
            "frequency_penalty": self.frequency_penalty, "repetition_penalty": self.repetition_penalty,
            "seed": self.seed, "max_tokens": self.max_tokens, "min_tokens": self.min_tokens,
            "ignore_eos": self.ignore_eos, "logprobs": -1 if logprobs is None else logprobs,
            "stop_token_ids": self.stop_token_ids,
            "logit_bias": {int(k): float(v) for k, v in self.logit_bias.items()} if self.logit_bias else None,
            "structured": self._structured_tuple(),
        }

    def _structured_tuple(self) -> Optional[tuple]:
        """(kind, text, disable_any_whitespace, whitespace_pattern) for the
        engine's vllm_structured_outputs (include/vllm/vllm.h), or None."""
        so = self.structured_outputs
        if so is None:
            return None
        import json as _json
        if so.json is not None:
            kind, text = 1, so.json if isinstance(so.json, str) else _json.dumps(so.json)
        elif so.json_object:
            kind, text = 2, ""
        elif so.regex is not None:
            kind, text = 3, so.regex
        elif so.choice is not None:
            kind, text = 4, _json.dumps(list(so.choice))
        elif so.grammar is not None:
            kind, text = 5, so.grammar
        elif so.structural_tag is not None:  # vLLM's JSON string {structures: [{begin, schema, end}], triggers}
            kind, text = 6, so.structural_tag
        else:
            raise ValueError("StructuredOutputsParams: no constraint is set (json, regex, choice, grammar, "
                             "json_object or structural_tag)")
        return (kind, text, bool(so.disable_any_whitespace), so.whitespace_pattern)


@dataclass
class BeamSearchParams:
    """Beam search parameters (vLLM's defaults), for LLM.beam_search."""
    beam_width: int
    max_tokens: int
    ignore_eos: bool = False
    temperature: float = 0.0
    length_penalty: float = 1.0
    include_stop_str_in_output: bool = False


@dataclass
class BeamSearchSequence:
    """One beam (vLLM's vllm.beam_search.BeamSearchSequence): tokens include the prompt."""
    tokens: List[int]
    logprobs: List[Any]
    lora_request: Any = None
    cum_logprob: float = 0.0
    text: Optional[str] = None
    finish_reason: Optional[str] = None
    stop_reason: Optional[Union[int, str]] = None


@dataclass
class BeamSearchOutput:
    """The best beam_width sequences of one prompt, best first."""
    sequences: List[BeamSearchSequence]
