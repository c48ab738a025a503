#!/usr/bin/env bash
# test_metrics_latency.sh - live latency values against a known step time.
# VLLMC_DEBUG_STEP_DELAY_US (src/server/frontend.h) makes the engine thread
# sleep D after every step, before the front end sees the step's output; with
# --max-num-seqs 1 a second request waits for the first, and with
# --max-num-batched-tokens 16 a 40-token prompt is prefilled in 3 steps. The values in
# /metrics (histogram sums and counts) and in `vllmc bench serve`'s report must
# then lie within bounds derived from D and the number of steps, by the
# definitions in docs/metrics.md:
#   queue = QUEUED -> first SCHEDULED, prefill = first SCHEDULED -> first token
#   (engine timestamps: 3 chunk steps, 2 sleeps between), decode = first
#   -> last token ((m - 1) steps), inter-token = one step, TTFT = arrival -> the
#   front end handling the first token (after the first step's sleep), e2e =
#   arrival -> the front end handling the finish.
# Lower bounds are exact in D (nanosleep never sleeps less); upper bounds allow
# SLACK per step for the step's own compute and scheduling noise (stories260K
# computes a step in well under a millisecond). Uses only /usr/bin/python3.
# checks: 19
cd "$(dirname "$0")/.." || exit 1
. tests/server_helpers.sh
D_US=60000
VLLMC_DEBUG_STEP_DELAY_US=$D_US server_start S --max-num-seqs 1 --max-model-len 256 \
  --max-num-batched-tokens 16 --disable-log-stats || exit 1
tmp=$(mktemp -d)
trap 'server_stop_all; rm -rf "$tmp"' EXIT

# the bench run goes first and after it the metrics phase reads differences, so
# neither depends on the other's requests
curl -s "$S_URL/metrics" > "$tmp/m0"
"$VLLMC" bench serve --base-url "$S_URL" --num-prompts 3 --random-input-len 8 --random-output-len 6 \
  --max-concurrency 1 --ignore-eos --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50 \
  --ready-check-timeout-sec 0 > "$tmp/bench" 2> "$tmp/bench.err"
echo "bench_rc $?" >> "$tmp/bench"
curl -s "$S_URL/metrics" > "$tmp/m1"

/usr/bin/python3 - "$S_URL" "$D_US" "$tmp" <<'EOF'
import json, re, sys, threading, urllib.request
url, D, tmp = sys.argv[1], int(sys.argv[2]) / 1e6, sys.argv[3]
SLACK = 0.030   # per step: the step's compute, thread wake-ups, a loaded machine
EPS = 0.020     # once per request: HTTP parsing, tokenizing, the output thread
M = 6           # tokens per request (ignore_eos, max_tokens)
P = 40          # prompt tokens of the metrics phase: 3 prefill steps of <= 16 tokens
C = 3           # prefill chunks

def metrics(text):
    out = {}
    for line in text.splitlines():
        m = re.match(r'^(vllm:[a-z0-9_]+)(\{[^}]*\})? ([0-9.e+-]+)$', line)
        if m:
            labels = m.group(2) or ""
            le = re.search(r'le="([^"]+)"', labels)
            key = m.group(1) + (f"@{le.group(1)}" if le else "")
            out[key] = out.get(key, 0.0) + float(m.group(3))
    return out

def diff(a, b):
    return {k: b.get(k, 0.0) - a.get(k, 0.0) for k in b}

def check(name, ok, detail):
    print(f"ok {name}" if ok else f"FAIL {name}: {detail}")

def within(name, value, lo, hi, what):
    if lo <= value <= hi:
        print(f"ok {name} ({value:.4f} s in [{lo:.4f}, {hi:.4f}])")
    else:
        print(f"FAIL {name}: {what} = {value:.4f} s, want [{lo:.4f}, {hi:.4f}] (D = {D} s)")

# ---- 1. bench serve: 3 requests one at a time, 6 tokens each, no queueing -----------------
bench = open(f"{tmp}/bench").read()
ms = {}
for label in ("Mean TTFT (ms):", "Mean TPOT (ms):", "Mean ITL (ms):", "Mean E2EL (ms):",
              "Successful requests:", "Total generated tokens:"):
    m = [l for l in bench.splitlines() if l.startswith(label)]
    ms[label] = float(m[0][len(label):]) if m else None
if "bench_rc 0" not in bench or None in ms.values():
    for n in ("bench_ttft", "bench_tpot", "bench_itl", "bench_e2el", "bench_vs_metrics_ttft"):
        print(f"FAIL {n}: bench serve failed: {bench[-400:]} {open(f'{tmp}/bench.err').read()[-400:]}")
else:
    ok_counts = ms["Successful requests:"] == 3 and ms["Total generated tokens:"] == 3 * M
    s = lambda k: ms[k] / 1000
    # client side: the first token leaves the server after one step and one sleep
    within("bench_ttft", s("Mean TTFT (ms):"), D, D + SLACK + EPS, "mean TTFT")
    within("bench_tpot", s("Mean TPOT (ms):"), D, D + SLACK, "mean TPOT")
    within("bench_itl", s("Mean ITL (ms):"), D, D + SLACK, "mean ITL")
    within("bench_e2el", s("Mean E2EL (ms):"), M * D, M * (D + SLACK) + EPS, "mean E2EL")
    # the server's TTFT of the same requests: each inside the client's (arrival after the
    # send, the first token handled before the client reads it) by at most EPS; the server
    # also saw bench's ready-check request (vLLM's initial test prompt), one more TTFT in
    # [D, D + SLACK + EPS]
    d = diff(metrics(open(f"{tmp}/m0").read()), metrics(open(f"{tmp}/m1").read()))
    srv = d.get("vllm:time_to_first_token_seconds_sum", 0)
    cli = 3 * s("Mean TTFT (ms):")
    check("bench_vs_metrics_ttft",
          ok_counts and d.get("vllm:time_to_first_token_seconds_count") == 4 and
          D - 3 * EPS <= srv - cli <= D + SLACK + EPS,
          f"server TTFT sum {srv:.4f} s over {d.get('vllm:time_to_first_token_seconds_count')} requests, "
          f"client sum {cli:.4f} s ({ms['Successful requests:']} requests, "
          f"{ms['Total generated tokens:']} tokens): the difference must be the ready check's TTFT")

# ---- 2. /metrics: two requests at once, the second waits for the first ----------------
# X takes steps 1 .. C + M - 1 (C prefill chunks, the first token at the end of chunk C);
# Y is QUEUED in the same engine iteration as X or the next, SCHEDULED in step C + M
before = metrics(urllib.request.urlopen(url + "/metrics").read().decode())
go = threading.Barrier(2)
res = []
def send(k):   # different prompts: no prefix-cache hit shortens Y's prefill
    body = json.dumps({"prompt": [1] + [300 + 100 * k + i for i in range(P - 1)], "max_tokens": M,
                       "ignore_eos": True, "temperature": 0}).encode()
    go.wait()
    rq = urllib.request.Request(url + "/v1/completions", body, {"Content-Type": "application/json"})
    res.append(json.load(urllib.request.urlopen(rq, timeout=60)))
ts = [threading.Thread(target=send, args=(k,)) for k in range(2)]
for t in ts: t.start()
for t in ts: t.join()
d = diff(before, metrics(urllib.request.urlopen(url + "/metrics").read().decode()))
got = lambda n: d.get(f"vllm:{n}_sum", 0.0)
cnt = lambda n: d.get(f"vllm:{n}_count", 0.0)
check("latency_requests", len(res) == 2 and all(r["usage"]["completion_tokens"] == M for r in res),
      f"responses {res}")
hist = ["time_to_first_token_seconds", "e2e_request_latency_seconds", "request_queue_time_seconds",
        "request_prefill_time_seconds", "request_decode_time_seconds", "request_inference_time_seconds",
        "request_time_per_output_token_seconds"]
check("latency_counts", all(cnt(h) == 2 for h in hist) and cnt("inter_token_latency_seconds") == 2 * (M - 1),
      {h: cnt(h) for h in hist + ["inter_token_latency_seconds"]})
X_STEPS = C + M - 1
within("latency_queue", got("request_queue_time_seconds"), (X_STEPS - 1) * D, X_STEPS * (D + SLACK) + EPS,
       "queue sum (X ~ 0, Y waits for X's steps)")
within("latency_prefill", got("request_prefill_time_seconds"), 2 * (C - 1) * D, 2 * C * (D + SLACK),
       "prefill sum (C chunk steps with C - 1 sleeps between, each request)")
within("latency_decode", got("request_decode_time_seconds"), 2 * (M - 1) * D, 2 * (M - 1) * (D + SLACK),
       "decode sum (M - 1 steps each)")
within("latency_inference", got("request_inference_time_seconds"), 2 * (M - 1 + C - 1) * D,
       2 * (M - 1) * (D + SLACK) + 2 * C * (D + SLACK), "inference sum (prefill + decode)")
within("latency_inter_token", got("inter_token_latency_seconds"), 2 * (M - 1) * D,
       2 * (M - 1) * (D + SLACK), "inter-token sum over 2 (M - 1) gaps")
within("latency_tpot", got("request_time_per_output_token_seconds"), 2 * D, 2 * (D + SLACK),
       "per-request time per output token sum")
# every gap is at least D: no inter-token sample in a bucket below D
below = max([float(k.split("@")[1]) for k in d if k.startswith("vllm:inter_token_latency_seconds_bucket@")
             and k.split("@")[1] != "+Inf" and float(k.split("@")[1]) < D] or [0])
check("latency_inter_token_each", below == 0 or d[f"vllm:inter_token_latency_seconds_bucket@{below}"] == 0,
      f"{d.get(f'vllm:inter_token_latency_seconds_bucket@{below}')} inter-token samples <= {below} s")
# TTFT counts from arrival: X's first token after C steps and their sleeps, Y's after its
# queue too; a TTFT measured from scheduling would miss Y's queue
within("latency_ttft", got("time_to_first_token_seconds"), (C + X_STEPS - 1 + C) * D,
       (C + X_STEPS + C) * (D + SLACK) + 2 * EPS, "TTFT sum (X: C steps; Y: its queue + C steps)")
check("latency_ttft_covers_queue",
      got("time_to_first_token_seconds") >= got("request_queue_time_seconds") +
      got("request_prefill_time_seconds") + 2 * D,
      f"TTFT sum {got('time_to_first_token_seconds'):.4f} < queue sum "
      f"{got('request_queue_time_seconds'):.4f} + prefill sum {got('request_prefill_time_seconds'):.4f} + 2 D")
# e2e: X ~ X_STEPS steps, Y ~ 2 X_STEPS from (about) the same arrival
within("latency_e2e", got("e2e_request_latency_seconds"), (3 * X_STEPS - 1) * D,
       3 * X_STEPS * (D + SLACK) + 2 * EPS, "e2e sum (X: X_STEPS steps, Y: 2 X_STEPS)")
# identities of the definitions (engine timestamps on both sides): inference = prefill +
# decode; the inter-token gaps add up to the decode time; per-request TPOT = decode / (M - 1)
pre, inf, itl, tpot = (got(n) for n in ("request_prefill_time_seconds", "request_inference_time_seconds",
                                        "inter_token_latency_seconds", "request_time_per_output_token_seconds"))
dec = got("request_decode_time_seconds")
check("latency_identities", abs(inf - (pre + dec)) < 1e-5 and abs(itl - dec) < 1e-5 and
      abs(tpot - dec / (M - 1)) < 1e-5,
      f"inference {inf:.6f} vs prefill + decode {pre + dec:.6f}; inter-token {itl:.6f} vs decode {dec:.6f}; "
      f"TPOT {tpot:.6f} vs decode / (M - 1) {dec / (M - 1):.6f}")
e2e, ttft, dec = got("e2e_request_latency_seconds"), got("time_to_first_token_seconds"), \
    got("request_decode_time_seconds")
check("latency_e2e_is_ttft_plus_decode", abs(e2e - (ttft + dec)) <= 2 * EPS,
      f"e2e sum {e2e:.4f} vs TTFT + decode {ttft + dec:.4f}")
EOF
