"""llm.py - vLLM 0.11's offline entry point, LLM (vllm/entrypoints/llm.py),
over vllm.c's engine (vllmc._C.Engine: libvllm.a's vllm_engine and output
processor, the same code `vllmc generate` runs).

LLM(model, ...) loads the model in this process (no subprocess, no second
engine). generate() hands every prompt to the engine at once and returns
one RequestOutput per prompt in input order; chat() renders each
conversation with the model's chat template and generates from it. What
vllm.c does not implement yet in the package raises NotImplementedError
naming it: tensor/pipeline parallelism, LoRA in beam_search, prompt
logprobs, pooling (encode/embed/classify/score/reward), sleep mode,
profiling. LoRA (enable_lora=True, then lora_request=LoRARequest(...) in
generate/chat, one per prompt or one for all) loads each adapter in the
engine the first time a request names it, as vLLM does. Arguments vLLM takes that mean nothing on this CPU engine
(gpu_memory_utilization, swap_space, enforce_eager, cpu_offload_gb,
trust_remote_code, ...) are accepted and unused.
"""
import itertools
import json
import os
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

from . import _C
from .logprobs import Logprob
from .outputs import CompletionOutput, RequestOutput, RequestStateStats
from .sampling_params import BeamSearchOutput, BeamSearchParams, BeamSearchSequence, SamplingParams
from .lora.request import LoRARequest
from .tokenizer import Tokenizer

# The real chat models scripts/fetch_models.sh puts in the model cache (src/cli/model_alias.c)
_ALIASES = {"smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf", "gemma3": "gemma-3-270m-q4_k_m.gguf"}

# EngineArgs fields that reach vllm_engine_args (name -> the C side's key)
_ENGINE_ARGS = {
    "max_model_len": "max_model_len", "block_size": "block_size",
    "enable_prefix_caching": "enable_prefix_caching", "max_num_seqs": "max_num_seqs",
    "max_num_batched_tokens": "max_num_batched_tokens",
    "long_prefill_token_threshold": "long_prefill_token_threshold",
    "num_gpu_blocks_override": "num_gpu_blocks_override", "scheduling_policy": "scheduling_policy",
    "generation_config": "generation_config", "kv_cache_dtype": "kv_cache_dtype",
    "num_threads": "num_threads",  # vllm.c's own (vllmc --threads); default: online CPUs
    "enable_lora": "enable_lora", "max_lora_rank": "max_lora_rank", "max_cpu_loras": "max_cpu_loras",
}
# accepted, unused: they have no effect on a CPU engine in one process
_ACCEPTED_UNUSED = {
    "swap_space", "gpu_memory_utilization", "cpu_offload_gb", "enforce_eager", "trust_remote_code",
    "disable_custom_all_reduce", "hf_token", "revision", "tokenizer_revision", "tokenizer_mode",
    "disable_log_stats", "max_seq_len_to_capture", "compilation_config", "allowed_local_media_path",
    "allowed_media_domains", "hf_overrides", "mm_processor_kwargs", "enable_chunked_prefill",
    "disable_async_output_proc", "max_logprobs", "load_format", "download_dir", "distributed_executor_backend",
    "runner", "convert", "skip_tokenizer_init", "structured_outputs_config", "override_pooler_config",
    "pooler_config", "served_model_name",
}
_UNSUPPORTED = {
    "pipeline_parallel_size": ("pipeline parallelism (pipeline_parallel_size > 1)", 1),
    "data_parallel_size": ("data parallelism (data_parallel_size > 1)", 1),
    "quantization": ("quantization other than the checkpoint's own (quantization=...)", None),
    "kv_transfer_config": ("KV transfer / disaggregated prefill (kv_transfer_config)", None),
    "enable_expert_parallel": ("expert parallelism (enable_expert_parallel)", False),
    "logits_processors": ("custom logits processors (logits_processors)", None),
}


def _resolve_model(model: str) -> str:
    if model in _ALIASES and not os.path.exists(model):
        cache = os.environ.get("VLLMC_MODEL_CACHE") or os.path.expanduser("~/.cache/vllmc/models")
        path = os.path.join(cache, _ALIASES[model])
        if not os.path.exists(path):
            raise OSError(f"{model}: {path} is not there; scripts/fetch_models.sh {model} fetches it")
        return path
    return model


class LLM:
    """An LLM for offline generation: the model, its tokenizer and a KV cache."""

    def __init__(self, model: str, *, tokenizer: Optional[str] = None, dtype: str = "auto",
                 seed: Optional[int] = 0, tensor_parallel_size: int = 1, kv_cache_memory_bytes: Optional[int] = None,
                 speculative_config: Optional[Dict[str, Any]] = None, max_loras: int = 1,
                 chat_template: Optional[str] = None, **kwargs: Any) -> None:
        if tensor_parallel_size != 1:
            raise NotImplementedError(f"tensor parallelism (tensor_parallel_size={tensor_parallel_size}) "
                                      "is not implemented in vllm.c")
        if dtype not in ("auto", None):
            raise NotImplementedError(f"dtype={dtype!r}: vllm.c runs the checkpoint's own dtype (dtype='auto')")
        args: Dict[str, Any] = {}
        for k, v in kwargs.items():
            if k in _ENGINE_ARGS:
                args[_ENGINE_ARGS[k]] = v
            elif k in _UNSUPPORTED:
                what, default = _UNSUPPORTED[k]
                if v is not None and v != default and not (k == "quantization" and v == "gguf"):
                    raise NotImplementedError(f"{what} is not implemented in vllm.c")
            elif k in _ACCEPTED_UNUSED:
                pass
            else:
                raise TypeError(f"EngineArgs.__init__() got an unexpected keyword argument '{k}'")
        model = _resolve_model(str(model))
        args["model"] = model
        if tokenizer is not None:
            tokenizer = _resolve_model(str(tokenizer))
            args["tokenizer"] = tokenizer
        if seed is not None:
            args["seed"] = seed
        args["max_loras"] = max_loras
        if kv_cache_memory_bytes is not None:
            args["kv_cache_memory_bytes"] = kv_cache_memory_bytes
        if speculative_config:
            spec = dict(speculative_config)
            method = spec.pop("method", None)
            draft = spec.pop("model", None)
            if method is None and draft is not None:  # vLLM: a model without a method is a draft model
                method = "ngram" if draft in ("ngram", "[ngram]") else "draft_model"
            if method not in ("ngram", "draft_model"):
                raise NotImplementedError(f"speculative decoding with method {method!r} is not implemented "
                                          "in vllm.c (only 'ngram' and 'draft_model')")
            args["spec_method"] = method
            if method == "draft_model":
                if not draft:
                    raise ValueError("speculative_config: method 'draft_model' needs a 'model' (the draft's "
                                     "directory or GGUF file)")
                args["spec_model"] = _resolve_model(str(draft))
            if spec.get("num_speculative_tokens") is None:
                raise ValueError(f"num_speculative_tokens is required for method {method!r}")
            for k in ("num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max", "disable_by_batch_size",
                      "draft_token_acceptance_method"):
                if spec.get(k) is not None:
                    args[k] = spec.pop(k)
                else:
                    spec.pop(k, None)
            if spec.get("adaptive") is not None:  # vllm.c's (spec/spec_policy.h), default true
                args["spec_adaptive"] = bool(spec.pop("adaptive"))
            spec.pop("adaptive", None)
            if spec:
                raise NotImplementedError(f"speculative_config keys {sorted(spec)} are not implemented in vllm.c")
        self.model = model
        self._scheduling_policy = kwargs.get("scheduling_policy") or "fcfs"
        self._tokenizer = Tokenizer(model, tokenizer, chat_template)
        self._engine = _C.Engine(self._tokenizer._tok, args)
        self._info = self._engine.info()
        self.request_counter = itertools.count()
        self._lora_enabled = bool(args.get("enable_lora"))
        self._loras: Dict[str, Any] = {}  # adapter name -> the LoRARequest it was loaded from
        self.default_sampling_params: Optional[Dict[str, Any]] = None

    # ---- tokenizer and defaults ----
    def get_tokenizer(self) -> Tokenizer:
        return self._tokenizer

    def set_tokenizer(self, tokenizer: Any) -> None:
        raise NotImplementedError("LLM.set_tokenizer is not implemented in vllmc")

    def get_default_sampling_params(self) -> SamplingParams:
        """vLLM's defaults with the model's generation_config.json over them."""
        d = self._engine.default_sampling_params()
        base = SamplingParams()
        diff = {k: v for k, v in d.items() if k != "n" and getattr(base, k) != v
                and not (isinstance(v, float) and abs(getattr(base, k) - v) < 1e-7)}
        return SamplingParams(**diff) if diff else base

    # ---- generation ----
    def generate(self, prompts: Any, sampling_params: Optional[Union[SamplingParams, Sequence[SamplingParams]]] = None,
                 *, use_tqdm: Union[bool, Callable[..., Any]] = True, lora_request: Any = None,
                 priority: Optional[List[int]] = None) -> List[RequestOutput]:
        """Generates the completions of prompts (a string, a list of strings,
        {"prompt": ...} / {"prompt_token_ids": [...]} dicts or lists of
        them), all in one batch; one RequestOutput per prompt, in order."""
        items = self._parse_prompts(prompts)
        return self._run(items, sampling_params, use_tqdm, priority, lora_request)

    def _parse_prompts(self, prompts: Any) -> List[Dict[str, Any]]:
        if isinstance(prompts, (str, dict)):
            prompts = [prompts]
        items = []
        for p in prompts:
            if isinstance(p, str):
                items.append({"prompt": p, "prompt_token_ids": self._tokenizer.encode(p)})
            elif isinstance(p, dict):
                if "prompt_embeds" in p:
                    raise NotImplementedError("prompt embeddings (prompt_embeds) are not implemented in vllm.c")
                if "multi_modal_data" in p and p["multi_modal_data"]:
                    raise NotImplementedError("multi-modal inputs (multi_modal_data) are not implemented in vllm.c")
                if "prompt_token_ids" in p:
                    items.append({"prompt": p.get("prompt"), "prompt_token_ids": list(p["prompt_token_ids"]),
                                  "cache_salt": p.get("cache_salt")})
                elif "prompt" in p:
                    items.append({"prompt": p["prompt"], "prompt_token_ids": self._tokenizer.encode(p["prompt"]),
                                  "cache_salt": p.get("cache_salt")})
                else:
                    raise ValueError(f"a prompt dict needs 'prompt' or 'prompt_token_ids', got keys {sorted(p)}")
            elif isinstance(p, (list, tuple)) and all(isinstance(t, int) for t in p):
                items.append({"prompt": None, "prompt_token_ids": list(p)})
            else:
                raise TypeError(f"prompt of type {type(p).__name__}: expected str, dict or list of token ids")
        return items

    def _run(self, items: List[Dict[str, Any]], sampling_params: Any, use_tqdm: Any,
             priority: Optional[List[int]], lora_request: Any = None) -> List[RequestOutput]:
        n = len(items)
        if sampling_params is None:
            sampling_params = self.get_default_sampling_params()
        if isinstance(sampling_params, (list, tuple)):
            if len(sampling_params) != n:
                raise ValueError("The lengths of prompts and sampling_params must be the same.")
            sps = list(sampling_params)
        else:
            sps = [sampling_params] * n
        if priority is not None:
            if len(priority) != n:
                raise ValueError("The lengths of prompts and priority must be the same.")
        if isinstance(lora_request, (list, tuple)):
            if len(lora_request) != n:
                raise ValueError("The lengths of prompts and lora_request must be the same.")
            loras = list(lora_request)
        else:
            loras = [lora_request] * n
        requests = [self._request_tuple(str(next(self.request_counter)), item, sp, priority[i] if priority else 0,
                                        loras[i])
                    for i, (item, sp) in enumerate(zip(items, sps))]
        progress = None
        bar = None
        if use_tqdm and n:
            bar = self._progress_bar(use_tqdm, n)
            if bar is not None:
                progress = bar.update
        try:
            results = self._engine.generate(requests, progress, Logprob)
        finally:
            if bar is not None:
                bar.close()
        outputs = []
        for req, item, lora, (cached, seqs, (arrival, first, last)) in zip(requests, items, loras, results):
            completions = [CompletionOutput(index=k, text=text, token_ids=ids, cumulative_logprob=cum,
                                            logprobs=lps, finish_reason=fr, stop_reason=stop)
                           for k, (text, ids, cum, lps, fr, stop) in enumerate(seqs)]
            metrics = RequestStateStats(num_generation_tokens=sum(len(c.token_ids) for c in completions),
                                        arrival_time=arrival, queued_ts=arrival, first_token_ts=first,
                                        last_token_ts=last, first_token_latency=max(first - arrival, 0.0))
            outputs.append(RequestOutput(request_id=req[0], prompt=item["prompt"],
                                         prompt_token_ids=item["prompt_token_ids"], prompt_logprobs=None,
                                         outputs=completions, finished=True, metrics=metrics,
                                         lora_request=lora, num_cached_tokens=cached))
        return outputs

    def _lora_name(self, lora_request: Any) -> Optional[str]:
        """The engine's name for a LoRARequest's adapter, loading it the first time it is named
        (vLLM loads an adapter when a request first names it). An adapter is known by its
        lora_name; the same name with another id or path replaces the loaded one."""
        if lora_request is None:
            return None
        if not isinstance(lora_request, LoRARequest):
            raise TypeError(f"lora_request must be a LoRARequest, got {type(lora_request).__name__}")
        if not self._lora_enabled:
            raise ValueError(f"Got lora_request {lora_request} but LoRA is not enabled!")
        name = lora_request.lora_name
        have = self._loras.get(name)
        path = lora_request.lora_local_path or lora_request.lora_path
        if have is not None and (have.lora_int_id != lora_request.lora_int_id or
                                 (have.lora_local_path or have.lora_path) != path):
            self._engine.unload_lora(name)
            del self._loras[name]
            have = None
        if have is None:
            self._engine.load_lora(name, path)
            self._loras[name] = lora_request
        return name

    def _request_tuple(self, request_id: str, item: Dict[str, Any], sp: Any, priority: int,
                       lora_request: Any = None) -> tuple:
        """What vllmc._C.Engine takes for one request (refusing what it does not implement)."""
        if not isinstance(sp, SamplingParams):
            raise TypeError(f"sampling_params must be SamplingParams, got {type(sp).__name__}")
        if sp.best_of is not None and sp.best_of != (sp._real_n or sp.n):
            raise ValueError("vLLM V1 does not yet support best_of.")
        what = sp._unsupported()
        if what:
            raise NotImplementedError(f"{what} is not implemented in vllm.c")
        if priority != 0 and self._scheduling_policy != "priority":
            raise ValueError(f"Got priority {priority} but Priority scheduling is not enabled.")
        ids = item["prompt_token_ids"]
        if sp.truncate_prompt_tokens is not None:  # the last k tokens; -1: the model's context length
            k = self._info["max_model_len"] if sp.truncate_prompt_tokens == -1 else sp.truncate_prompt_tokens
            ids = ids[-k:]
            item["prompt_token_ids"] = ids
        d = sp._engine_dict(self._info["vocab_size"])
        lora = self._lora_name(lora_request)
        if lora is not None:
            d["lora_name"] = lora
        return (request_id, ids, d, sp.stop, sp.include_stop_str_in_output,
                sp.skip_special_tokens, sp.detokenize, priority, item.get("cache_salt"))

    def _progress_bar(self, use_tqdm: Any, n: int):
        """vLLM's "Processed prompts" bar with its speed postfix, when tqdm is installed."""
        if callable(use_tqdm):
            tqdm_func = use_tqdm
        else:
            try:
                from tqdm.auto import tqdm as tqdm_func
            except ImportError:
                return None
        bar = tqdm_func(total=n, desc="Processed prompts", dynamic_ncols=True,
                        postfix=f"est. speed input: {0:.2f} toks/s, output: {0:.2f} toks/s")
        start = self._engine.stats()
        t0 = time.perf_counter()
        update = bar.update

        def progress(k: int) -> None:
            update(k)
            s = self._engine.stats()
            dt = max(time.perf_counter() - t0, 1e-9)
            bar.postfix = (f"est. speed input: {(s['prompt_tokens'] - start['prompt_tokens']) / dt:.2f} toks/s, "
                           f"output: {(s['generation_tokens'] - start['generation_tokens']) / dt:.2f} toks/s")

        bar.update = progress
        return bar

    def chat(self, messages: Any, sampling_params: Optional[Union[SamplingParams, List[SamplingParams]]] = None,
             use_tqdm: Union[bool, Callable[..., Any]] = True, lora_request: Any = None,
             chat_template: Optional[str] = None, chat_template_content_format: str = "auto",
             add_generation_prompt: bool = True, continue_final_message: bool = False,
             tools: Optional[List[Dict[str, Any]]] = None, chat_template_kwargs: Optional[Dict[str, Any]] = None,
             mm_processor_kwargs: Optional[Dict[str, Any]] = None) -> List[RequestOutput]:
        """Generates replies to a conversation (a list of messages) or to a
        list of conversations, each rendered with the model's chat template
        (or chat_template) and encoded without adding special tokens again."""
        if chat_template_content_format != "auto":
            raise NotImplementedError(f"chat_template_content_format={chat_template_content_format!r} is not "
                                      "implemented in vllm.c (it detects the format, as 'auto')")
        if mm_processor_kwargs:
            raise NotImplementedError("multi-modal inputs (mm_processor_kwargs) are not implemented in vllm.c")
        conversations = messages if messages and isinstance(messages[0], (list, tuple)) else [messages]
        items = []
        for conv in conversations:
            text = self._tokenizer.apply_chat_template(
                list(conv), tools=tools, chat_template=chat_template, add_generation_prompt=add_generation_prompt,
                continue_final_message=continue_final_message, tokenize=False, **(chat_template_kwargs or {}))
            items.append({"prompt": text, "prompt_token_ids": self._tokenizer.encode(text, add_special_tokens=False)})
        return self._run(items, sampling_params, use_tqdm, None, lora_request)

    def beam_search(self, prompts: Any, params: BeamSearchParams, lora_request: Any = None,
                    use_tqdm: bool = False, concurrency_limit: Optional[int] = None) -> List["BeamSearchOutput"]:
        """vLLM's LLM.beam_search: per prompt, the beam_width best sequences
        (best first), each with its tokens (prompt included), text (their
        decode), cumulative logprob, finish reason. One prompt at a time over
        the engine's one-token requests (engine/beam_search.h)."""
        if lora_request is not None:
            raise NotImplementedError("LoRA (lora_request) is not implemented in vllm.c")
        if params.include_stop_str_in_output:
            raise NotImplementedError("include_stop_str_in_output in beam search is not implemented in vllm.c")
        out = []
        for item in self._parse_prompts(prompts):
            ids = item["prompt_token_ids"]
            beams = self._engine.beam_search(ids, params.beam_width, params.max_tokens, bool(params.ignore_eos),
                                             float(params.temperature), float(params.length_penalty))
            seqs = []
            for toks, cum, _score, finish, stop in beams:
                full = list(ids) + list(toks)
                seqs.append(BeamSearchSequence(tokens=full, logprobs=[], cum_logprob=cum,
                                               text=self._tokenizer.decode(full), finish_reason=finish,
                                               stop_reason=stop))
            out.append(BeamSearchOutput(sequences=seqs))
        return out

    def encode(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("pooling models (LLM.encode) are not implemented in vllm.c")

    embed = classify = score = reward = encode

    def sleep(self, level: int = 1) -> None:
        raise NotImplementedError("sleep mode (LLM.sleep) is not implemented in vllm.c")

    def wake_up(self, tags: Optional[List[str]] = None) -> None:
        raise NotImplementedError("sleep mode (LLM.wake_up) is not implemented in vllm.c")

    def start_profile(self) -> None:
        raise NotImplementedError("profiling (LLM.start_profile) is not implemented in vllm.c")

    stop_profile = start_profile

    def reset_prefix_cache(self, device: Any = None) -> bool:
        return self._engine.reset_prefix_cache()

    def get_metrics(self) -> List[Any]:
        """vLLM's metrics snapshot (vllm.v1.metrics.reader): Counter and Gauge objects."""
        from .metrics import Counter, Gauge
        s = self._engine.stats()
        return [
            Gauge(name="vllm:num_requests_running", labels={}, value=s["num_running"]),
            Gauge(name="vllm:num_requests_waiting", labels={}, value=s["num_waiting"]),
            Gauge(name="vllm:kv_cache_usage_perc", labels={}, value=s["kv_cache_usage"]),
            Counter(name="vllm:prefix_cache_queries", labels={}, value=s["prefix_cache_queries"]),
            Counter(name="vllm:prefix_cache_hits", labels={}, value=s["prefix_cache_hits"]),
            Counter(name="vllm:num_preemptions", labels={}, value=s["num_preemptions"]),
            Counter(name="vllm:prompt_tokens", labels={}, value=s["prompt_tokens"]),
            Counter(name="vllm:generation_tokens", labels={}, value=s["generation_tokens"]),
            Counter(name="vllm:request_success", labels={}, value=s["num_requests_finished"]),
            Counter(name="vllm:spec_decode_num_drafts", labels={}, value=s["spec_decode_num_drafts"]),
            Counter(name="vllm:spec_decode_num_draft_tokens", labels={}, value=s["spec_decode_num_draft_tokens"]),
            Counter(name="vllm:spec_decode_num_accepted_tokens", labels={}, value=s["spec_decode_num_accepted_tokens"]),
        ]
