"""AsyncLLM: streamed outputs grow to what LLM.generate gives for the same
requests (greedy and seeded, so independent of request ids and batching);
DELTA outputs concatenate to the same; leaving the stream early aborts the
request and the engine goes on serving."""
import asyncio

from conftest import STORIES


def test_async_generate_streams_and_aborts():
    from vllmc import LLM, AsyncLLM, SamplingParams
    from vllmc.sampling_params import RequestOutputKind
    prompts = ["Once upon a time", "The cat", "Lily went"]
    sps = [SamplingParams(temperature=0, max_tokens=30),
           SamplingParams(temperature=0.8, seed=3, max_tokens=40, logprobs=2),
           SamplingParams(temperature=0.7, seed=9, n=2, max_tokens=25, stop=["."])]
    ref = LLM(STORIES).generate(prompts, sps, use_tqdm=False)
    engine = AsyncLLM(STORIES)

    async def collect(i, kind=RequestOutputKind.CUMULATIVE):
        sp = sps[i].clone()
        sp.output_kind = kind
        outs = []
        async for out in engine.generate(prompts[i], sp, request_id=f"r{i}-{int(kind)}"):
            outs.append(out)
        return outs

    async def early_exit():
        n = 0
        async for _ in engine.generate("Once", SamplingParams(max_tokens=400, ignore_eos=True), request_id="long"):
            n += 1
            if n == 3:
                break
        for _ in range(500):  # the abort reaches the engine at its next step
            if not engine._engine.has_unfinished():
                return n
            await asyncio.sleep(0.01)
        return -1

    async def main():
        streams = await asyncio.gather(collect(0), collect(1), collect(2), collect(1, RequestOutputKind.DELTA),
                                       early_exit())
        after = await collect(0)
        return streams, after

    (c0, c1, c2, d1, aborted), after = asyncio.run(main())
    # the tokens the engine made for "long": all of them but the other requests' (400 had it run on)
    total = engine._engine.stats()["generation_tokens"]
    long_tokens = total - sum(len(o.token_ids) for r in (ref[0], ref[1], ref[2], ref[1], ref[0]) for o in r.outputs)
    engine.shutdown()
    assert 3 <= long_tokens < 200, long_tokens
    for outs, r in ((c0, ref[0]), (c1, ref[1]), (c2, ref[2]), (after, ref[0])):
        assert len(outs) > 1 and outs[-1].finished and not any(o.finished for o in outs[:-1])
        last = outs[-1]
        assert [o.text for o in last.outputs] == [o.text for o in r.outputs]
        assert [o.token_ids for o in last.outputs] == [o.token_ids for o in r.outputs]
        assert [o.finish_reason for o in last.outputs] == [o.finish_reason for o in r.outputs]
        assert [o.stop_reason for o in last.outputs] == [o.stop_reason for o in r.outputs]
        assert last.prompt_token_ids == r.prompt_token_ids
        for a, b in zip(outs, outs[1:]):  # cumulative: each output extends the one before
            for oa in a.outputs:
                ob = b.outputs[oa.index] if oa.index < len(b.outputs) else None
                assert ob is not None and ob.text.startswith(oa.text) and ob.token_ids[:len(oa.token_ids)] == oa.token_ids
    lp_stream = c1[-1].outputs[0].logprobs
    lp_ref = ref[1].outputs[0].logprobs
    assert [{k: (v.logprob, v.rank) for k, v in d.items()} for d in lp_stream] == \
        [{k: (v.logprob, v.rank) for k, v in d.items()} for d in lp_ref]
    assert abs(c1[-1].outputs[0].cumulative_logprob - ref[1].outputs[0].cumulative_logprob) < 1e-6
    assert "".join(o.outputs[0].text for o in d1) == ref[1].outputs[0].text
    assert sum((o.outputs[0].token_ids for o in d1), []) == ref[1].outputs[0].token_ids
    assert aborted == 3
