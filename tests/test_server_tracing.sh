#!/usr/bin/env bash
# test_server_tracing.sh - `vllmc serve --otlp-traces-endpoint` against a real
# OTLP/HTTP receiver: tests/ref/otlp_receiver.py decodes every export with the
# opentelemetry-proto package's generated classes (PyPI, in .venv; without it
# every check reports itself skipped). Checks, on models/stories260K:
#   - the encoder's sample message (test_tracing --encode-sample) decodes to
#     exactly the values it was given;
#   - spans arrive at /v1/traces as application/x-protobuf, with the extra
#     headers of OTEL_EXPORTER_OTLP_TRACES_HEADERS;
#   - one llm_request (SERVER) span per sequence, with queue, prefill and
#     decode (INTERNAL) children under it, in its trace;
#   - a sampled traceparent's trace id and parent span id, and its
#     tracestate, are taken; an unsampled one makes no span; an invalid one
#     starts a new trace;
#   - token counts equal the response's usage (old and current attribute
#     names), the model name, the request id and parameters are vLLM's;
#   - the children lie within the parent and tile it (queue end = prefill
#     start, prefill end = decode start), their durations are the latency
#     attributes, e2e is within what the client measured, and the sums over
#     all spans equal /metrics' histogram sums (the same records);
#   - the official openai npm client's requests are traced under its traceparent;
#   - a collector that refuses connections leaves the server serving, with
#     one rate-limited warning; tracing off warns once about trace headers;
#     an unsupported OTEL_EXPORTER_OTLP_TRACES_PROTOCOL is refused at start.
# checks: 17
# tags: tsan
cd "$(dirname "$0")/.." || exit 1
. tests/server_helpers.sh
PY=.venv/bin/python
NAMES=(encoder_sample spans_received span_tree traceparent_taken new_traces usage_matches
       request_params child_timing e2e_vs_client metrics_agree unsampled_no_span streamed_traced
       openai_client_traced unreachable_serves unreachable_warns_once tracing_off_warns grpc_refused)
skip_all() { for n in "${NAMES[@]}"; do echo "skip $n: $1"; done; exit 0; }
[ -x "$PY" ] || skip_all "no .venv (scripts/setup.sh installs opentelemetry-proto from PyPI)"
"$PY" -c 'import opentelemetry.proto.collector.trace.v1.trace_service_pb2' 2>/dev/null ||
  skip_all ".venv lacks opentelemetry-proto (scripts/setup.sh installs it from PyPI)"

tmp=$(mktemp -d)
RPID=
trap 'server_stop_all; [ -n "$RPID" ] && kill "$RPID" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT

# ---- the encoder alone ------------------------------------------------------------
"${BUILD_DIR:-build}/tests/test_tracing" --encode-sample "$tmp/sample.pb"
"$PY" - "$tmp/sample.pb" <<'EOF'
import sys
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as ts
req = ts.ExportTraceServiceRequest()
try:
    req.ParseFromString(open(sys.argv[1], "rb").read())
    rs = req.resource_spans
    assert len(rs) == 1 and len(rs[0].scope_spans) == 1
    assert {kv.key: kv.value.string_value for kv in rs[0].resource.attributes} == {"service.name": "svc"}
    ss = rs[0].scope_spans[0]
    assert (ss.scope.name, ss.scope.version) == ("scope", "1.0")
    p, c = ss.spans
    assert p.name == "parent" and p.kind == 2 and p.flags == 0x301 and p.trace_state == "a=1,b=2"
    assert p.trace_id == bytes(range(1, 17)) and p.span_id == bytes(range(0xa0, 0xa8))
    assert p.parent_span_id == bytes(range(0xb0, 0xb8))
    assert (p.start_time_unix_nano, p.end_time_unix_nano) == (1700000000123456789, 1700000001000000000)
    a = {kv.key: kv.value for kv in p.attributes}
    assert a["s"].string_value == "h\u00e9llo" and a["long"].string_value == "x" * 299
    assert a["i"].int_value == -42 and a["big"].int_value == 1234567890123
    assert a["d"].double_value == 0.125 and a["b"].bool_value is True
    assert [v.string_value for v in a["arr"].array_value.values] == ["stop", "length"]
    assert [kv.key for kv in p.attributes] == ["s", "long", "i", "big", "d", "b", "arr"]
    assert c.name == "child" and c.kind == 1 and c.parent_span_id == b"" and c.span_id == b"\xcc" * 8
    assert (c.start_time_unix_nano, c.end_time_unix_nano, c.flags) == (5, 6, 1)
    print("ok encoder_sample")
except Exception as e:
    print(f"FAIL encoder_sample: {type(e).__name__}: {e}: {req}"[:800])
EOF

# ---- the receiver and the traced server ----------------------------------------------
"$PY" tests/ref/otlp_receiver.py "$tmp/spans" "$tmp/port" & RPID=$!
for _ in $(seq 1200); do [ -s "$tmp/port" ] && break; sleep 0.05; done
RPORT=$(cat "$tmp/port" 2>/dev/null)
[ -n "$RPORT" ] || { for n in "${NAMES[@]:1}"; do echo "FAIL $n: the receiver did not start"; done; exit 0; }
OTEL_BSP_SCHEDULE_DELAY=100 OTEL_EXPORTER_OTLP_TRACES_HEADERS='X-Test=a%20b' \
  server_start S models/stories260K --served-model-name stories --max-model-len 256 \
  --otlp-traces-endpoint "http://127.0.0.1:$RPORT" || exit 0

"$PY" - "$S_URL" "$tmp" <<'EOF'
import json, re, sys, time, urllib.request
url, tmp = sys.argv[1], sys.argv[2]
TP_TRACE, TP_SPAN = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"

def post(path, body, headers=None):
    h = {"Content-Type": "application/json", **(headers or {})}
    t0_wall, t0 = time.time(), time.monotonic()
    with urllib.request.urlopen(urllib.request.Request(url + path, json.dumps(body).encode(), h), timeout=60) as r:
        raw = r.read().decode()
    return raw, time.monotonic() - t0, t0_wall, time.time()

import atexit
EXPECTED = ["spans_received", "span_tree", "traceparent_taken", "new_traces", "usage_matches", "request_params",
            "child_timing", "e2e_vs_client", "metrics_agree", "unsampled_no_span", "streamed_traced"]
printed = set()

def check(name, ok, detail=""):
    printed.add(name)
    print(f"ok {name}" if ok else f"FAIL {name}: {detail}"[:1500], flush=True)

def report_missing():  # a request that failed stops the script: its checks fail, none go missing
    why = f"{sys.last_type.__name__}: {sys.last_value}" if hasattr(sys, "last_type") else "the script stopped early"
    for n in EXPECTED:
        if n not in printed:
            print(f"FAIL {n}: {why}"[:600])
atexit.register(report_missing)
def hook(t, v, tb):
    sys.last_type, sys.last_value = t, v
    sys.__excepthook__(t, v, tb)
sys.excepthook = hook

# A: a completion under a sampled traceparent, with a tracestate
raw, a_client, a_t0, a_t1 = post("/v1/completions",
    {"model": "stories", "prompt": "Once upon a time", "max_tokens": 12, "temperature": 0.7, "top_p": 0.9, "seed": 1},
    {"traceparent": f"00-{TP_TRACE}-{TP_SPAN}-01", "tracestate": "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"})
A = json.loads(raw)
# B: chat, n = 2, no trace context
raw, _, _, _ = post("/v1/chat/completions",
    {"model": "stories", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 7, "n": 2,
     "temperature": 0.8, "seed": 3})
B = json.loads(raw)
# D: an invalid traceparent (uppercase hex): a new trace; greedy
raw, _, _, _ = post("/v1/completions", {"model": "stories", "prompt": "The cat", "max_tokens": 5, "temperature": 0},
                    {"traceparent": "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01"})
D = json.loads(raw)

def load_spans():
    try:
        return [json.loads(l) for l in open(f"{tmp}/spans")]
    except FileNotFoundError:
        return []

def requests_of(spans):
    return [s for s in spans if s["name"] == "llm_request"]

deadline = time.time() + 60
while time.time() < deadline and len(requests_of(load_spans())) < 4:
    time.sleep(0.05)
spans = load_spans()
reqs = requests_of(spans)
by_id = {}
for s in reqs:
    by_id.setdefault(s["attributes"].get("gen_ai.request.id"), []).append(s)
a_id, b_id, d_id = A["id"] + "-0", B["id"], D["id"] + "-0"
posts = [json.loads(l) for l in open(f"{tmp}/spans.requests")] if reqs else []
check("spans_received", len(reqs) == 4 and len(by_id.get(a_id, [])) == 1 and len(by_id.get(b_id, [])) == 2
      and len(by_id.get(d_id, [])) == 1 and all(p["path"] == "/v1/traces" for p in posts)
      and all(p["content_type"] == "application/x-protobuf" and p["x_test"] == "a b" for p in posts)
      and all(s["scope"] == "vllm.llm_engine" and s["resource"].get("service.name") == "vllm" for s in spans),
      f"{len(reqs)} llm_request spans, ids {sorted(by_id)}; want {a_id}, {b_id} x2, {d_id}; posts {posts[:3]}")

def children(parent):
    return {s["name"]: s for s in spans if s["parent_span_id"] == parent["span_id"]}

ok, why = len(reqs) == 4, "not all spans"
for r in reqs:
    kids = children(r)
    if r["kind"] != 2 or sorted(kids) != ["decode", "prefill", "queue"]:
        ok, why = False, f"{r['attributes'].get('gen_ai.request.id')}: kind {r['kind']}, children {sorted(kids)}"
    elif any(k["kind"] != 1 or k["trace_id"] != r["trace_id"] for k in kids.values()):
        ok, why = False, "a child is not INTERNAL or not in its parent's trace"
check("span_tree", ok and len(spans) == 16, f"{why}; {len(spans)} spans in all")

a = by_id.get(a_id, [None])[0]
check("traceparent_taken", a is not None and a["trace_id"] == TP_TRACE and a["parent_span_id"] == TP_SPAN
      and a["trace_state"] == "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7" and a["flags"] == 0x301
      and all(k["trace_state"] == a["trace_state"] for k in children(a).values()), a and {k: a[k] for k in
      ("trace_id", "parent_span_id", "trace_state", "flags")})

roots = by_id.get(b_id, []) + by_id.get(d_id, [])
tids = [s["trace_id"] for s in roots]
check("new_traces", len(roots) == 3 and all(s["parent_span_id"] == "" and len(s["trace_id"]) == 32
      and s["trace_id"] != "0" * 32 and s["flags"] == 0x101 for s in roots) and len(set(tids)) == 3
      and TP_TRACE not in tids, [(s["trace_id"], s["parent_span_id"], s["flags"]) for s in roots])

def usage_ok(resp, group):
    u = resp["usage"]
    return (all(s["attributes"]["gen_ai.usage.prompt_tokens"] == u["prompt_tokens"] ==
                s["attributes"]["gen_ai.usage.input_tokens"] for s in group)
            and sum(s["attributes"]["gen_ai.usage.completion_tokens"] for s in group) == u["completion_tokens"]
            and all(s["attributes"]["gen_ai.usage.completion_tokens"] == s["attributes"]["gen_ai.usage.output_tokens"]
                    for s in group))
try:
    check("usage_matches", usage_ok(A, [a]) and usage_ok(B, by_id[b_id]) and usage_ok(D, by_id[d_id]),
          f"A {A['usage']} vs {a['attributes']}")
except (KeyError, TypeError) as e:
    check("usage_matches", False, f"missing {e}")

try:
    aa = a["attributes"]
    b0 = by_id[b_id][0]["attributes"]
    want_a = {"gen_ai.response.model": "stories", "gen_ai.request.model": "stories", "gen_ai.request.id": a_id,
              "gen_ai.response.id": A["id"], "gen_ai.operation.name": "text_completion",
              "gen_ai.request.temperature": 0.7, "gen_ai.request.top_p": 0.9, "gen_ai.request.max_tokens": 12,
              "gen_ai.request.n": 1, "gen_ai.response.finish_reasons": [A["choices"][0]["finish_reason"]]}
    bad = {k: (aa.get(k), v) for k, v in want_a.items() if aa.get(k) != v}
    reasons = sorted(c["finish_reason"] for c in B["choices"])
    b_reasons = sorted(s["attributes"]["gen_ai.response.finish_reasons"][0] for s in by_id[b_id])
    d0 = by_id[d_id][0]["attributes"]
    # vLLM sets temperature only when non-zero (`if req_state.temperature:`)
    if "gen_ai.request.temperature" in d0 or d0.get("gen_ai.request.max_tokens") != 5:
        bad["D"] = d0
    if b0.get("gen_ai.request.n") != 2 or b0.get("gen_ai.request.temperature") != 0.8 or \
       b0.get("gen_ai.operation.name") != "chat" or b0.get("gen_ai.response.id") != B["id"] or reasons != b_reasons:
        bad["B"] = (b0, reasons)
    lat = ("time_in_queue", "time_to_first_token", "e2e", "time_in_model_prefill", "time_in_model_decode",
           "time_in_model_inference")
    if not all(isinstance(aa.get("gen_ai.latency." + k), float) for k in lat):
        bad["latency"] = [aa.get("gen_ai.latency." + k) for k in lat]
    check("request_params", not bad, bad)
except (KeyError, TypeError, IndexError) as e:
    check("request_params", False, f"missing {e}")

US = 1000  # ns of slack for float -> ns rounding
ok, why = len(reqs) == 4, "not all spans"
for r in reqs:
    k, at = children(r), r["attributes"]
    if sorted(k) != ["decode", "prefill", "queue"]:
        ok, why = False, "children missing"
        break
    q, p, d = k["queue"], k["prefill"], k["decode"]
    dur = lambda s: (s["end"] - s["start"]) / 1e9
    inside = all(r["start"] - US <= s["start"] <= s["end"] <= r["end"] + US for s in (q, p, d))
    tiled = abs(q["end"] - p["start"]) <= US and abs(p["end"] - d["start"]) <= US
    attrs = (abs(dur(q) - at["gen_ai.latency.time_in_queue"]) < 2e-6
             and abs(dur(p) - at["gen_ai.latency.time_in_model_prefill"]) < 2e-6
             and abs(dur(d) - at["gen_ai.latency.time_in_model_decode"]) < 2e-6
             and abs(dur(p) + dur(d) - at["gen_ai.latency.time_in_model_inference"]) < 4e-6
             and dur(q) + dur(p) + dur(d) <= dur(r) + 3e-6
             and abs(dur(r) - at["gen_ai.latency.e2e"]) < 2e-6
             and at["gen_ai.latency.time_to_first_token"] <= at["gen_ai.latency.e2e"])
    if not (inside and tiled and attrs):
        ok, why = False, f"inside {inside} tiled {tiled} attrs {attrs}: {[(s['name'], s['start'], s['end']) for s in (r, q, p, d)]} {at}"
        break
check("child_timing", ok, why)

if a:
    e2e = a["attributes"]["gen_ai.latency.e2e"]
    # within the client's own measurement, and the wall-clock span within the client's send/receive
    check("e2e_vs_client", 0 < e2e <= a_client and a_client - e2e < 0.25
          and a["start"] >= a_t0 * 1e9 - 5e6 and a["end"] <= a_t1 * 1e9 + 5e6,
          f"e2e {e2e}, client {a_client}, span [{a['start']}, {a['end']}], client [{a_t0 * 1e9:.0f}, {a_t1 * 1e9:.0f}]")
else:
    check("e2e_vs_client", False, "no span for A")

text = urllib.request.urlopen(url + "/metrics", timeout=30).read().decode()
def msum(name):
    m = re.search(r"^vllm:" + name + r"_sum\{[^}]*\} (\S+)$", text, re.M)
    return float(m.group(1)) if m else None
pairs = {"e2e_request_latency_seconds": "e2e", "request_queue_time_seconds": "time_in_queue",
         "request_prefill_time_seconds": "time_in_model_prefill", "request_decode_time_seconds": "time_in_model_decode",
         "request_inference_time_seconds": "time_in_model_inference", "time_to_first_token_seconds": "time_to_first_token"}
diffs = {m: (msum(m), sum(r["attributes"]["gen_ai.latency." + k] for r in reqs)) for m, k in pairs.items()}
check("metrics_agree", len(reqs) == 4 and all(v[0] is not None and abs(v[0] - v[1]) <= 1e-9 + 1e-9 * abs(v[1])
      for v in diffs.values()), diffs)

# C: an unsampled traceparent makes no span; E (streamed, sampled) comes after it, as a marker
C_TRACE = "11111111111111111111111111111111"
raw, _, _, _ = post("/v1/completions", {"model": "stories", "prompt": "A dog", "max_tokens": 4},
                    {"traceparent": f"00-{C_TRACE}-2222222222222222-00"})
E_TRACE = "33333333333333333333333333333333"
raw, _, _, _ = post("/v1/chat/completions", {"model": "stories", "messages": [{"role": "user", "content": "Go"}],
                    "max_tokens": 6, "stream": True, "stream_options": {"include_usage": True}},
                    {"traceparent": f"00-{E_TRACE}-4444444444444444-01"})
chunks = [json.loads(l[6:]) for l in raw.splitlines() if l.startswith("data: {")]
e_usage = chunks[-1].get("usage") or {}
deadline = time.time() + 60
while time.time() < deadline and not any(s["trace_id"] == E_TRACE for s in requests_of(load_spans())):
    time.sleep(0.05)
late = requests_of(load_spans())
e = [s for s in late if s["trace_id"] == E_TRACE]
check("unsampled_no_span", e and not any(s["trace_id"] == C_TRACE for s in load_spans()) and len(late) == 5,
      f"{len(late)} llm_request spans; C's trace: {[s for s in late if s['trace_id'] == C_TRACE][:1]}")
check("streamed_traced", len(e) == 1 and e[0]["parent_span_id"] == "4444444444444444"
      and e[0]["attributes"]["gen_ai.usage.completion_tokens"] == e_usage.get("completion_tokens")
      and e[0]["attributes"]["gen_ai.usage.prompt_tokens"] == e_usage.get("prompt_tokens")
      and e[0]["attributes"]["gen_ai.operation.name"] == "chat", (e, e_usage))
EOF

# ---- the official openai client (npm) sending a traceparent --------------------------------
O_TRACE=55555555555555555555555555555555
if [ -d tests/ref/node_modules/openai ]; then
  out=$(cd tests/ref && timeout 120 node --input-type=module -e '
    import { createRequire } from "node:module";
    import { pathToFileURL } from "node:url";
    const require = createRequire(process.cwd() + "/package.json");
    const { default: OpenAI } = await import(pathToFileURL(require.resolve("openai")).href);
    const client = new OpenAI({ baseURL: process.argv[1] + "/v1", apiKey: "none",
      defaultHeaders: { traceparent: "00-" + process.argv[2] + "-6666666666666666-01" } });
    const r = await client.chat.completions.create({ model: "stories", max_tokens: 5,
      messages: [{ role: "user", content: "Hello" }] });
    console.log(JSON.stringify(r));' "$S_URL" "$O_TRACE" 2>&1)
  "$PY" - "$tmp" "$O_TRACE" "$out" <<'EOF2'
import json, sys, time
tmp, trace, out = sys.argv[1], sys.argv[2], sys.argv[3]
try:
    resp = json.loads(out.splitlines()[-1])
except Exception:
    print(f"FAIL openai_client_traced: the client failed: {out[-400:]}")
    sys.exit(0)
spans = []
deadline = time.time() + 60
while time.time() < deadline and not spans:
    spans = [s for s in map(json.loads, open(f"{tmp}/spans")) if s["trace_id"] == trace and s["name"] == "llm_request"]
    time.sleep(0.05)
ok = len(spans) == 1 and spans[0]["parent_span_id"] == "6666666666666666" and \
     spans[0]["attributes"]["gen_ai.response.id"] == resp["id"] and \
     spans[0]["attributes"]["gen_ai.usage.completion_tokens"] == resp["usage"]["completion_tokens"]
print("ok openai_client_traced" if ok else f"FAIL openai_client_traced: {spans} vs {resp}"[:800])
EOF2
else
  echo "FAIL openai_client_traced: tests/ref/node_modules/openai missing (run scripts/setup.sh)"
fi

# ---- a collector that is not there ---------------------------------------------------
OTEL_BSP_SCHEDULE_DELAY=20 server_start U models/stories260K --max-model-len 256 \
  --otlp-traces-endpoint http://127.0.0.1:1/v1/traces || exit 0
good=0
for i in 1 2 3 4 5 6; do
  req POST "$U_URL/v1/completions" '{"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0}' \
    -H 'traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'
  [ "$STATUS" = 200 ] && [ "$(jq -r '.usage.completion_tokens' <<< "$BODY")" = 8 ] && good=$((good + 1))
  sleep 0.1 # each request's span is its own failed export
done
req GET "$U_URL/health"
if [ $good = 6 ] && [ "$STATUS" = 200 ]; then echo "ok unreachable_serves"
else echo "FAIL unreachable_serves: $good of 6 requests answered, /health $STATUS"; fi
warns=$(grep -c "OTLP trace export to http://127.0.0.1:1/v1/traces failed" "$U_LOG")
if [ "$warns" = 1 ]; then echo "ok unreachable_warns_once"
else echo "FAIL unreachable_warns_once: $warns warnings: $(grep -i otlp "$U_LOG" | head -3)"; fi

# ---- tracing off, and an unsupported protocol --------------------------------------------
server_start N models/stories260K --max-model-len 256 || exit 0
for i in 1 2; do
  req POST "$N_URL/v1/completions" '{"prompt": "Hi", "max_tokens": 2}' \
    -H 'traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'
done
n=$(grep -c "Received a request with trace context but tracing is disabled" "$N_LOG")
if [ "$STATUS" = 200 ] && [ "$n" = 1 ]; then echo "ok tracing_off_warns"
else echo "FAIL tracing_off_warns: status $STATUS, $n warnings"; fi

out=$(OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=grpc timeout 60 "$VLLMC" serve models/stories260K --host 127.0.0.1 --port 0 \
  --otlp-traces-endpoint http://127.0.0.1:4317 2>&1)
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=grpc" <<< "$out"; then
  echo "ok grpc_refused"
else
  echo "FAIL grpc_refused: exit $rc: $(tail -3 <<< "$out")"
fi
