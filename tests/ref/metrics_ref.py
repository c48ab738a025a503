#!/usr/bin/python3
"""Reference /metrics for a scripted engine timeline, for tests/test_metrics.sh.

Written from vLLM's metrics design (docs/design/metrics.md, the seeds), not
from our C code, and exported with Python's prometheus_client - the library
vLLM itself uses - so both the numbers and the exposition bytes have an
independent source.

    metrics_ref.py --generate SEED > timeline.json   a random engine trace
    metrics_ref.py timeline.json                       its expected /metrics

Timeline format (JSON):
  {"config": {"model_name", "max_model_len", "block_size", "num_gpu_blocks",
              "show_hidden_metrics_for_version"},
   "render_now": front-end time of the scrape,
   "timeline": [
     {"arrive": id, "t": front-end time, "prompt": n, "n": n, "max_tokens": n},
     {"release": id},
     {"http": {"handler", "method", "status", "duration", "request_bytes", "response_bytes"}},
     {"step": {"ts": engine time, "now": front-end time,
               "stats": {"running", "waiting", "kv_cache_usage", "prefix_cache_queries",
                         "prefix_cache_hits", "preemptions", "scheduled_tokens",
                         "blocks_total", "blocks_free"},
               "outputs": [{"id", "index", "tokens", "finish": stop|length|abort,
                            "events": [["QUEUED"|"SCHEDULED"|"PREEMPTED", engine time]]}]}}]}

The reference keeps each sequence's whole history and computes intervals from
it when the sequence finishes (vLLM's definitions):
  queue = first SCHEDULED - QUEUED; prefill = first token step - first
  SCHEDULED; decode = last token step - first token step; inference = last
  token step - first SCHEDULED; inter-token = gaps between a sequence's token
  steps; TTFT / e2e = front-end time of the first token / finish - arrival;
  per-request TPOT = decode / (tokens - 1), 0 for <= 1 token.
Sequences k > 0 of an n > 1 request fork from sequence 0 after its prefill,
so their QUEUED and first SCHEDULED are sequence 0's. A phase a finished
(aborted) sequence never left ends at the finishing step. Each sequence is a
request for request-level metrics (vLLM's child requests); n and the longest
generation are observed once per request, when its last sequence finishes.
"""
import json
import random
import struct
import sys

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Summary, generate_latest

TTFT = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
        10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
ITL = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
       20.0, 40.0, 80.0]
LATENCY = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
           120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]
ITERATION = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]


def buckets_1_2_5(max_value):
    out, e = [], 0
    while True:
        for m in (1, 2, 5):
            if m * 10 ** e > max_value:
                return out
            out.append(m * 10 ** e)
        e += 1


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


class Seq:
    def __init__(self):
        self.events = []          # (type, engine ts) in order
        self.token_steps = []     # (engine ts, front-end now, count)
        self.finish = None        # (reason, engine ts, front-end now)


def reference(tl):
    cfg = tl["config"]
    model, engine = cfg.get("model_name", "model"), "0"
    show_hidden = cfg.get("show_hidden_metrics_for_version") == "0.10"
    tok = buckets_1_2_5(cfg.get("max_model_len", 2048))
    block_size = cfg.get("block_size", 16)
    reg = CollectorRegistry()
    L = ["model_name", "engine"]

    def g(name, doc):
        return Gauge(name, doc, L, registry=reg).labels(model, engine)

    def c(name, doc):
        return Counter(name, doc, L, registry=reg).labels(model, engine)

    def h(name, doc, b):
        return Histogram(name, doc, L, buckets=b, registry=reg).labels(model, engine)

    running = g("vllm:num_requests_running", "Number of requests in model execution batches.")
    waiting = g("vllm:num_requests_waiting", "Number of requests waiting to be processed.")
    if show_hidden:
        gpu_usage = g("vllm:gpu_cache_usage_perc",
                      "GPU KV-cache usage. 1 means 100 percent usage.DEPRECATED: Use vllm:kv_cache_usage_perc instead.")
        gpu_q = c("vllm:gpu_prefix_cache_queries",
                  "GPU prefix cache queries, in terms of number of queriedtokens. DEPRECATED: Use vllm:prefix_cache_queries instead.")
        gpu_h = c("vllm:gpu_prefix_cache_hits",
                  "GPU prefix cache hits, in terms of number of cached tokens. DEPRECATED: Use vllm:prefix_cache_hits instead.")
    kv = g("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
    pq = c("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.")
    ph = c("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.")
    preempt = c("vllm:num_preemptions", "Cumulative number of preemption from the engine.")
    prompt_c = c("vllm:prompt_tokens", "Number of prefill tokens processed.")
    gen_c = c("vllm:generation_tokens", "Number of generation tokens processed.")
    succ = Counter("vllm:request_success", "Count of successfully processed requests.",
                   L + ["finished_reason"], registry=reg)
    success = {r: succ.labels(model, engine, r) for r in ("stop", "length", "abort")}
    h_prompt = h("vllm:request_prompt_tokens", "Number of prefill tokens processed.", tok)
    h_gen = h("vllm:request_generation_tokens", "Number of generation tokens processed.", tok)
    h_iter = h("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", ITERATION)
    h_maxgen = h("vllm:request_max_num_generation_tokens",
                 "Histogram of maximum number of requested generation tokens.", tok)
    h_n = h("vllm:request_params_n", "Histogram of the n request parameter.", [1, 2, 5, 10, 20])
    h_maxtok = h("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", tok)
    h_ttft = h("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", TTFT)
    h_tpot = h("vllm:time_per_output_token_seconds",
               "Histogram of time per output token in seconds.DEPRECATED: Use vllm:inter_token_latency_seconds instead.", ITL)
    h_itl = h("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", ITL)
    h_rtpot = h("vllm:request_time_per_output_token_seconds",
                "Histogram of time_per_output_token_seconds per request.", ITL)
    h_e2e = h("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", LATENCY)
    h_queue = h("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", LATENCY)
    h_inf = h("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.", LATENCY)
    h_pre = h("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", LATENCY)
    h_dec = h("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", LATENCY)
    if show_hidden:
        g("vllm:num_requests_swapped",
          "Number of requests swapped to CPU. DEPRECATED: V1 preempts by recompute and never swaps; always 0. Use vllm:num_preemptions instead.")
        g("vllm:cpu_cache_usage_perc",
          "CPU KV-cache usage. 1 means 100 percent usage. DEPRECATED: V1 has no CPU swap space; always 0. Use vllm:kv_cache_usage_perc instead.")
        hit_rate_g = g("vllm:gpu_prefix_cache_hit_rate",
                       "GPU prefix cache block hit rate. DEPRECATED: Use vllm:prefix_cache_hits and vllm:prefix_cache_queries instead.")
        h_tiq = h("vllm:time_in_queue_requests",
                  "Histogram of time the request spent in the queue in seconds. DEPRECATED: Use vllm:request_queue_time_seconds instead.", LATENCY)
    kv_cap = g("vllm:kv_cache_capacity_tokens", "KV cache capacity in tokens (blocks x block size). vllm.c extension.")
    kv_free = g("vllm:kv_cache_headroom_tokens",
                "KV cache tokens that can still be allocated (free blocks, prefix-cache blocks nobody uses included, x block size). vllm.c extension.")
    qdelay = g("vllm:queue_delay_estimate_seconds",
               "Estimated wait before a request arriving now is scheduled: waiting requests / requests finished per second over the last 60 s. vllm.c extension.")

    http_total = Counter("http_requests_total", "Total number of requests by method, status and handler.",
                         ["method", "status", "handler"], registry=reg)
    http_in = Summary("http_request_size_bytes",
                      "Content length of incoming requests by handler. Only value of header is respected. Otherwise ignored. No percentile calculated. ",
                      ["handler"], registry=reg)
    http_out = Summary("http_response_size_bytes",
                       "Content length of outgoing responses by handler. Only value of header is respected. Otherwise ignored. No percentile calculated. ",
                       ["handler"], registry=reg)
    http_highr = Histogram("http_request_duration_highr_seconds",
                           "Latency with many buckets but no API specific labels. Made for more accurate percentile calculations. ",
                           buckets=[0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 2.5, 3, 3.5, 4,
                                    4.5, 5, 7.5, 10, 30, 60], registry=reg)
    http_lowr = Histogram("http_request_duration_seconds",
                          "Latency with only few buckets by handler. Made to be only used if aggregation by handler is important. ",
                          ["method", "handler"], buckets=[0.1, 0.5, 1], registry=reg)

    requests = {}      # id -> dict(arrival, prompt, n, max_tokens, seqs, done)
    window = []        # PrefixCachingMetrics: (lookups, queries, hits) per step
    finishes = []      # front-end times of finished sequences
    last_waiting, start = 0, None

    def first(seq, kind):
        return next((t for k, t in seq.events if k == kind), None)

    for ev in tl["timeline"]:
        if "arrive" in ev:
            requests[ev["arrive"]] = dict(arrival=ev["t"], prompt=ev["prompt"], n=ev.get("n", 1),
                                          max_tokens=ev.get("max_tokens", 0),
                                          seqs=[Seq() for _ in range(ev.get("n", 1))])
        elif "release" in ev:
            requests.pop(ev["release"], None)
        elif "http" in ev:
            x = ev["http"]
            handler = x.get("handler") or "none"
            if any(p in handler for p in ("/metrics", "/health", "/load", "/ping", "/version", "/server_info")):
                continue
            status = "%dxx" % (x["status"] // 100)
            http_total.labels(x["method"], status, handler).inc()
            http_in.labels(handler).observe(x.get("request_bytes", 0))
            http_out.labels(handler).observe(x.get("response_bytes", 0))
            http_highr.observe(x["duration"])
            http_lowr.labels(x["method"], handler).observe(x["duration"])
        elif "step" in ev:
            st = ev["step"]
            ts, now, ss = st["ts"], st["now"], st.get("stats", {})
            if start is None:
                start = now
            prompt_toks = gen_toks = lookups = 0
            ttfts, itls, done = [], [], []
            for o in st.get("outputs", []):
                r = requests.get(o["id"])
                if r is None or not 0 <= o.get("index", 0) < r["n"]:
                    continue
                k = o.get("index", 0)
                seq = r["seqs"][k]
                if seq.finish:
                    continue
                for kind, t in o.get("events", []):
                    seq.events.append((kind, t))
                    if kind == "SCHEDULED":
                        lookups += 1
                ntok = o.get("tokens", 0)
                if ntok > 0:
                    gen_toks += ntok
                    if not seq.token_steps:
                        prompt_toks += r["prompt"]
                        ttfts.append(max(0.0, now - r["arrival"]))
                    else:
                        itls.append(max(0.0, ts - seq.token_steps[-1][0]))
                    seq.token_steps.append((ts, now, ntok))
                if o.get("finish"):
                    seq.finish = (o["finish"], ts, now)
                    done.append((o["id"], k))
            # scheduler stats
            running.set(ss.get("running", 0))
            waiting.set(ss.get("waiting", 0))
            kv.set(f32(ss.get("kv_cache_usage", 0.0)))
            pq.inc(ss.get("prefix_cache_queries", 0))
            ph.inc(ss.get("prefix_cache_hits", 0))
            if show_hidden:
                gpu_usage.set(f32(ss.get("kv_cache_usage", 0.0)))
                gpu_q.inc(ss.get("prefix_cache_queries", 0))
                gpu_h.inc(ss.get("prefix_cache_hits", 0))
            kv_cap.set(ss.get("blocks_total", 0) * block_size)
            kv_free.set(ss.get("blocks_free", 0) * block_size)
            preempt.inc(ss.get("preemptions", 0))
            prompt_c.inc(prompt_toks)
            gen_c.inc(gen_toks)
            if st.get("outputs") or ss.get("scheduled_tokens", 0) > 0:
                h_iter.observe(prompt_toks + gen_toks)
            # finished sequences, then finished requests
            groups = []
            for rid, k in done:
                r = requests[rid]
                seq = r["seqs"][k]
                reason, fts, fnow = seq.finish
                src = r["seqs"][0] if k > 0 else seq   # siblings fork off sequence 0
                queued, sched = first(src, "QUEUED"), first(src, "SCHEDULED")
                toks = sum(c for _, _, c in seq.token_steps)
                first_tok = seq.token_steps[0][0] if seq.token_steps else None
                last_tok = seq.token_steps[-1][0] if seq.token_steps else None
                queue = (sched if sched is not None else fts) - queued if queued is not None else 0.0
                prefill = ((first_tok if first_tok is not None else fts) - sched) if sched is not None else 0.0
                inference = ((last_tok if last_tok is not None else fts) - sched) if sched is not None else 0.0
                decode = last_tok - first_tok if first_tok is not None else 0.0
                tpot = decode / (toks - 1) if toks > 1 else 0.0
                success[reason].inc()
                h_e2e.observe(max(0.0, fnow - r["arrival"]))
                h_queue.observe(max(0.0, queue))
                h_pre.observe(max(0.0, prefill))
                h_inf.observe(max(0.0, inference))
                h_dec.observe(max(0.0, decode))
                h_rtpot.observe(tpot)
                h_prompt.observe(r["prompt"])
                h_gen.observe(toks)
                if r["max_tokens"] > 0:
                    h_maxtok.observe(r["max_tokens"])
                if show_hidden:
                    h_tiq.observe(max(0.0, queue))
                finishes.append(now)
                if all(s.finish for s in r["seqs"]) and rid not in groups:
                    groups.append(rid)
            for rid in groups:
                r = requests.pop(rid)
                h_maxgen.observe(max(sum(c for _, _, c in s.token_steps) for s in r["seqs"]))
                h_n.observe(r["n"])
            # the order vLLM records a step in: n-groups, TTFT, ITL, finished
            for x in ttfts:
                h_ttft.observe(x)
            for x in itls:
                h_itl.observe(x)
                h_tpot.observe(x)
            last_waiting = ss.get("waiting", 0)
            if lookups:
                window.append((lookups, ss.get("prefix_cache_queries", 0), ss.get("prefix_cache_hits", 0)))
                while len(window) > 1 and sum(w[0] for w in window) > 1000:
                    window.pop(0)
    now = tl.get("render_now", 0.0)
    if start is None:
        start = now
    if last_waiting <= 0:
        delay = 0.0
    else:
        recent = [t for t in finishes if int(t // 1) > int(now // 1) - 60 and int(t // 1) <= int(now // 1)]
        span = min(60.0, now - start)
        delay = last_waiting / (len(recent) / span) if recent and span > 0 else \
            max(0.0, now - (finishes[-1] if finishes else start))
    qdelay.set(delay)
    if show_hidden:
        q = sum(w[1] for w in window)
        hit_rate_g.set(sum(w[2] for w in window) / q if q else 0.0)
    labels = dict(block_size=str(block_size), gpu_memory_utilization="0.9", swap_space="4", cache_dtype="auto",
                  is_attention_free="False", num_gpu_blocks_override="None", sliding_window="None",
                  enable_prefix_caching="True", prefix_caching_hash_algo="sha256", cpu_offload_gb="0",
                  calculate_kv_scales="False", kv_sharing_fast_prefill="False", mamba_cache_dtype="auto",
                  mamba_ssm_cache_dtype="auto", kv_cache_memory_bytes="None", swap_space_bytes=str(4 * 2 ** 30),
                  num_gpu_blocks=str(cfg["num_gpu_blocks"]) if cfg.get("num_gpu_blocks") else "None",
                  num_cpu_blocks="None", engine=engine)
    Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", list(labels),
          registry=reg).labels(**labels).set(1)
    return generate_latest(reg).decode()


def generate(seed):
    """A plausible engine trace: Poisson-ish arrivals, chunked prefill,
    a few running seats, preemption by recompute, n > 1 forks, aborts."""
    rnd = random.Random(seed)
    dts = [0.015625, 0.03125, 0.0625, 0.125, 0.25]
    chunk, seats, blocks_total = 32, 6, 256
    tl = []
    ts, offset = 1000.0, -990.0           # front-end clock = engine clock - 990 (+ handling delay)
    pending = []                           # (front-end arrival, id, prompt, n, max_tokens, targets, abort_at)
    for i in range(rnd.randint(25, 40)):
        n = rnd.choice([1, 1, 1, 2, 3])
        max_tokens = rnd.choice([1, 4, 8, 16, 32])
        targets = [rnd.randint(1, max_tokens) for _ in range(n)]
        abort_at = rnd.randint(1, 30) if rnd.random() < 0.15 else None
        pending.append([10.0 + i * rnd.choice([0.0625, 0.125, 0.25]), "req-%d" % i,
                        rnd.randint(1, 100), n, max_tokens, targets, abort_at])
    waiting, running, live = [], [], {}
    step_no = 0
    while pending or waiting or running:
        ts += rnd.choice(dts)
        now = ts + offset + rnd.choice([0.0, 0.001953125])
        step_no += 1
        outs = {}

        def out(rid, k):
            return outs.setdefault((rid, k), {"id": rid, "index": k, "tokens": 0, "events": []})

        # arrivals: the front end first, then the engine's QUEUED
        while pending and pending[0][0] <= now:
            t, rid, prompt, n, max_tokens, targets, abort_at = pending.pop(0)
            tl.append({"arrive": rid, "t": t, "prompt": prompt, "n": n, "max_tokens": max_tokens})
            if rnd.random() < 0.05:
                tl.append({"release": rid})   # refused before it reached the engine
                continue
            r = dict(prompt=prompt, n=n, max_tokens=max_tokens, targets=targets, gen=[0] * n,
                     abort_at=step_no + abort_at if abort_at else None, forked=n == 1, done=[False] * n)
            live[rid] = r
            seq = dict(rid=rid, k=0, computed=0)
            waiting.append(seq)
            out(rid, 0)["events"].append(["QUEUED", ts - rnd.choice([0.0, 0.0078125])])
        preemptions = queries = hits = sched_tokens = 0
        # preempt the last running sequence now and then
        if running and rnd.random() < 0.08:
            q = running.pop()
            q["computed"] = 0
            waiting.insert(0, q)
            preemptions += 1
            out(q["rid"], q["k"])["events"].append(["PREEMPTED", ts])
        # admit waiting sequences into free seats
        while waiting and len(running) < seats and not preemptions:
            q = waiting.pop(0)
            running.append(q)
            r = live[q["rid"]]
            length = r["prompt"] + r["gen"][q["k"]]
            queries += length
            hits += min(length - 1, rnd.choice([0, 0, 16, 32])) // 16 * 16 if length > 1 else 0
            out(q["rid"], q["k"])["events"].append(["SCHEDULED", ts])
        # run: prefill chunks, then one token per step
        for q in list(running):
            r = live[q["rid"]]
            length = r["prompt"] + r["gen"][q["k"]]
            if q["computed"] < length:
                take = min(chunk, length - q["computed"])
                q["computed"] += take
                sched_tokens += take
                if q["computed"] < length:
                    continue
            else:
                sched_tokens += 1
            ks = [q["k"]]
            if not r["forked"]:            # the first token of seq 0 forks its siblings
                r["forked"] = True
                for k in range(1, r["n"]):
                    sib = dict(rid=q["rid"], k=k, computed=length)
                    running.append(sib)
                    ks.append(k)
            for k in ks:
                r["gen"][k] += 1
                o = out(q["rid"], k)
                o["tokens"] += 1
                if r["gen"][k] >= r["targets"][k]:
                    o["finish"] = "length" if r["targets"][k] == r["max_tokens"] else "stop"
                    r["done"][k] = True
            q["computed"] = r["prompt"] + r["gen"][q["k"]] - 1
        running = [q for q in running if not live[q["rid"]]["done"][q["k"]]]
        # aborts: every unfinished sequence of the request ends with ABORT
        for rid, r in live.items():
            if r["abort_at"] == step_no and not all(r["done"]):
                ks = range(r["n"]) if r["forked"] else [0]
                for k in ks:
                    if not r["done"][k]:
                        out(rid, k)["finish"] = "abort"
                        r["done"][k] = True
                if not r["forked"]:        # unforked siblings end with seq 0
                    for k in range(1, r["n"]):
                        out(rid, k)["finish"] = "abort"
                        r["done"][k] = True
                running = [q for q in running if q["rid"] != rid]
                waiting = [q for q in waiting if q["rid"] != rid]
        for rid in [rid for rid, r in live.items() if all(r["done"])]:
            del live[rid]
        used = sum((live[q["rid"]]["prompt"] + live[q["rid"]]["gen"][q["k"]] + 15) // 16 for q in running)
        used = min(used, blocks_total)
        stats = {"running": len(running), "waiting": len(waiting), "kv_cache_usage": used / blocks_total,
                 "prefix_cache_queries": queries, "prefix_cache_hits": hits, "preemptions": preemptions,
                 "scheduled_tokens": sched_tokens, "blocks_total": blocks_total,
                 "blocks_free": blocks_total - used}
        for o in outs.values():
            if not o["events"]:
                del o["events"]
        tl.append({"step": {"ts": ts, "now": now, "stats": stats, "outputs": list(outs.values())}})
        if rnd.random() < 0.3:
            tl.append({"http": {"handler": rnd.choice(["/v1/completions", "/v1/chat/completions", "/metrics",
                                                       "/health", None]),
                                "method": rnd.choice(["POST", "GET"]), "status": rnd.choice([200, 200, 400, 404, 500]),
                                "duration": rnd.choice([0.0078125, 0.125, 0.375, 0.75, 2.0]),
                                "request_bytes": rnd.randint(0, 4000), "response_bytes": rnd.randint(0, 20000)}})
    hidden = "0.10" if seed % 2 else None
    cfg = {"model_name": 'tiny "stories"\\260K' if seed % 3 == 0 else "stories260K", "max_model_len": 512,
           "block_size": 16, "num_gpu_blocks": blocks_total}
    if hidden:
        cfg["show_hidden_metrics_for_version"] = hidden
    return {"config": cfg, "render_now": ts + offset + 1.0, "timeline": tl}


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--generate":
        json.dump(generate(int(sys.argv[2])), sys.stdout, indent=1)
        print()
    elif len(sys.argv) == 2:
        with open(sys.argv[1]) as f:
            sys.stdout.write(reference(json.load(f)))
    else:
        sys.exit(__doc__)
