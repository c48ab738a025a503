"""vllmc - vLLM's offline Python API over vllm.c, a C17 engine for CPU.

    from vllmc import LLM, SamplingParams
    llm = LLM("models/stories260K")
    outputs = llm.generate(["Once upon a time"], SamplingParams(temperature=0.8, top_p=0.95))

Scripts written for vLLM run with the import line changed (vllm -> vllmc);
see llm.py for what is implemented and what raises NotImplementedError, and
async_llm.py for AsyncLLM (streaming, for Python servers).
"""
from .async_llm import AsyncEngineArgs, AsyncLLM
from .inputs import TextPrompt, TokensPrompt
from .llm import LLM
from .logprobs import Logprob
from .lora.request import LoRARequest
from .outputs import CompletionOutput, RequestOutput
from .sampling_params import (BeamSearchParams, GuidedDecodingParams, RequestOutputKind, SamplingParams,
                              StructuredOutputsParams)

__version__ = "0.1.0"
__all__ = ["LLM", "AsyncLLM", "AsyncEngineArgs", "SamplingParams", "BeamSearchParams", "StructuredOutputsParams", "GuidedDecodingParams",
           "RequestOutputKind", "RequestOutput", "CompletionOutput", "Logprob", "LoRARequest", "TextPrompt",
           "TokensPrompt"]
