"""async_llm.py - an AsyncLLM for Python servers, after vLLM 0.11's
(vllm/v1/engine/async_llm.py): `async for out in engine.generate(prompt,
sampling_params, request_id)` streams RequestOutputs as the engine makes
tokens (cumulative by default; SamplingParams(output_kind=DELTA) for only
the new text and ids; FINAL_ONLY for the last one only); abort(request_id),
or leaving the loop early, aborts the request.

One engine, one stepping thread: the engine loop (an asyncio task started
by the first generate) runs each step in a single worker thread
(run_in_executor; the step releases the GIL, so the event loop keeps
serving), and requests added or aborted meanwhile wait in a pending list
that the worker applies before its next step, so the engine is only ever
touched by one thread at a time. The loop sleeps when nothing is running.
Texts, stop strings, logprobs and seeds are the engine's and its output
processor's, as in LLM.generate.
"""
import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, AsyncGenerator, Dict, List, Optional, Union

from .llm import LLM
from .logprobs import Logprob
from .outputs import CompletionOutput, RequestOutput, RequestStateStats
from .sampling_params import RequestOutputKind, SamplingParams


@dataclass
class AsyncEngineArgs:
    """The engine arguments (vLLM's AsyncEngineArgs): model plus LLM's keyword arguments."""
    model: str
    kwargs: Dict[str, Any] = field(default_factory=dict)

    def __init__(self, model: str, **kwargs: Any):
        self.model = model
        self.kwargs = kwargs


class _Request:
    def __init__(self, request_id, prompt, prompt_ids, sp, queue, arrival):
        self.request_id, self.prompt, self.prompt_ids, self.sp, self.queue = request_id, prompt, prompt_ids, sp, queue
        self.texts: Dict[int, str] = {}
        self.ids: Dict[int, List[int]] = {}
        self.lps: Dict[int, list] = {}
        self.cum: Dict[int, float] = {}
        self.finish: Dict[int, Any] = {}
        self.cached = 0
        self.stats = RequestStateStats(arrival_time=arrival, queued_ts=arrival)
        self.sent: Dict[int, tuple] = {}  # DELTA: how much of each sequence went out


class AsyncLLM:
    def __init__(self, model: str, **kwargs: Any) -> None:
        self._llm = LLM(model, **kwargs)
        self._engine = self._llm._engine
        self._requests: Dict[str, _Request] = {}
        self._pending: List[tuple] = []
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vllmc-engine")
        self._task: Optional[asyncio.Task] = None
        self._wake: Optional[asyncio.Event] = None
        self._dead: Optional[BaseException] = None

    @classmethod
    def from_engine_args(cls, engine_args: AsyncEngineArgs, **_: Any) -> "AsyncLLM":
        return cls(engine_args.model, **engine_args.kwargs)

    async def get_tokenizer(self, lora_request: Any = None):
        return self._llm.get_tokenizer()

    def get_default_sampling_params(self) -> SamplingParams:
        return self._llm.get_default_sampling_params()

    @property
    def is_running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def generate(self, prompt: Any, sampling_params: SamplingParams, request_id: str, *,
                       lora_request: Any = None, priority: int = 0, **_: Any) -> AsyncGenerator[RequestOutput, None]:
        if self._dead is not None:
            raise RuntimeError(f"the engine loop died: {self._dead!r}")
        if request_id in self._requests:
            raise ValueError(f"Request id {request_id} already running.")
        item = self._llm._parse_prompts(prompt)[0]
        req_tuple = self._llm._request_tuple(request_id, item, sampling_params, priority, lora_request)
        loop = asyncio.get_running_loop()
        self._start(loop)
        queue: asyncio.Queue = asyncio.Queue()
        req = _Request(request_id, item["prompt"], item["prompt_token_ids"], sampling_params, queue, loop.time())
        self._requests[request_id] = req
        with self._lock:
            self._pending.append(("add", req_tuple))
        self._wake.set()
        finished = False
        try:
            while True:
                out = await queue.get()
                if isinstance(out, BaseException):
                    finished = True
                    raise out
                finished = out.finished
                yield out
                if finished:
                    break
        finally:
            if not finished:  # the caller left early, or was cancelled
                self._abort(request_id)
            self._requests.pop(request_id, None)

    async def abort(self, request_id: Union[str, List[str]]) -> None:
        for rid in [request_id] if isinstance(request_id, str) else request_id:
            self._abort(rid)

    def _abort(self, request_id: str) -> None:
        with self._lock:
            self._pending.append(("abort", request_id))
        if self._wake is not None:
            self._wake.set()

    def shutdown(self) -> None:
        if self._task is not None:
            self._task.cancel()
        self._executor.shutdown(wait=True)

    # ---- the engine loop ----
    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._task is None or self._task.done():
            self._wake = asyncio.Event()
            self._task = loop.create_task(self._run())

    def _step(self):
        """In the worker thread: the pending adds and aborts, then one step."""
        with self._lock:
            pending, self._pending = self._pending, []
        errors = []
        for kind, x in pending:
            if kind == "add":
                try:
                    self._engine.add(x)
                except Exception as e:  # the request's own error, for its caller
                    errors.append((x[0], e))
            else:
                self._engine.abort(x)
        deltas = self._engine.step(Logprob) if self._engine.has_unfinished() else []
        return errors, deltas

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                with self._lock:
                    idle = not self._pending
                if idle and not self._engine.has_unfinished():
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                errors, deltas = await loop.run_in_executor(self._executor, self._step)
                for rid, e in errors:
                    req = self._requests.get(rid)
                    if req is not None:
                        req.queue.put_nowait(e)
                self._dispatch(deltas)
        except asyncio.CancelledError:
            raise
        except BaseException as e:  # a failed step: every caller hears it
            self._dead = e
            for req in self._requests.values():
                req.queue.put_nowait(e)

    def _dispatch(self, deltas) -> None:
        touched: Dict[str, _Request] = {}
        for rid, index, text, ids, lps, finish, stop, cached, ts in deltas:
            req = self._requests.get(rid)
            if req is None:
                continue
            req.texts[index] = req.texts.get(index, "") + text
            req.ids.setdefault(index, []).extend(ids)
            if lps is not None:
                req.lps.setdefault(index, []).extend(lps)
                req.cum[index] = req.cum.get(index, 0.0) + sum(next(iter(d.values())).logprob for d in lps)
            if finish is not None:
                req.finish[index] = (finish, stop)
            req.cached = max(req.cached, cached)
            if ids:
                if not req.stats.first_token_ts:
                    req.stats.first_token_ts = ts
                    req.stats.first_token_latency = max(ts - req.stats.arrival_time, 0.0)
                req.stats.last_token_ts = ts
                req.stats.num_generation_tokens += len(ids)
            touched[rid] = req
        for req in touched.values():
            finished = len(req.finish) == req.sp.n
            kind = req.sp.output_kind
            if kind == RequestOutputKind.FINAL_ONLY and not finished:
                continue
            outs = []
            for k in sorted(req.ids):
                text, ids = req.texts[k], req.ids[k]
                lps = req.lps.get(k) if req.sp.logprobs is not None else None
                if kind == RequestOutputKind.DELTA:
                    t0, i0 = req.sent.get(k, (0, 0))
                    req.sent[k] = (len(text), len(ids))
                    text, ids, lps = text[t0:], ids[i0:], (lps[i0:] if lps is not None else None)
                else:
                    ids = list(ids)
                    lps = list(lps) if lps is not None else None
                fr, stop = req.finish.get(k, (None, None))
                outs.append(CompletionOutput(index=k, text=text, token_ids=ids,
                                             cumulative_logprob=req.cum.get(k) if req.sp.logprobs is not None
                                             else None, logprobs=lps, finish_reason=fr, stop_reason=stop))
            req.queue.put_nowait(RequestOutput(request_id=req.request_id, prompt=req.prompt,
                                               prompt_token_ids=req.prompt_ids, prompt_logprobs=None, outputs=outs,
                                               finished=finished, metrics=req.stats,
                                               num_cached_tokens=req.cached))
