#!/usr/bin/env bash
# test_bench_serve.sh - `vllmc bench serve` against a fake OpenAI SSE server
# (tests/ref/fake_openai_server.mjs, a fixture that streams max_tokens chunks,
# the first after TTFT_MS and the rest ITL_MS apart). Checks vLLM's report
# labels, the counted tokens, that measured TTFT/ITL/TPOT/E2EL agree with the
# delays (generous bounds: this is not a timing test), that --max-concurrency
# holds at the server, the request bodies, goodput against SLOs on either
# side of the TTFT, the chat backend with output counted by re-tokenizing the
# streamed text, and a clear failure when the endpoint is wrong. If
# `vllmc serve` exists in this build, one short run against it too.
# checks: 8
# tags: tsan
set -uo pipefail
cd "$(dirname "$0")/.."
VLLMC=${VLLMC:-build/vllmc}
PY=/usr/bin/python3
export VLLM_LOGGING_LEVEL=WARNING
tmp=$(mktemp -d)
pids=()
cleanup() {
  exec 3>&- 2>/dev/null
  for p in "${pids[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
ok() { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; }

# the fixture: 100 ms to the first chunk, then 20 ms apart; exits when fd 3 closes
mkfifo "$tmp/in"
node tests/ref/fake_openai_server.mjs 100 20 <"$tmp/in" >"$tmp/port" 2>"$tmp/fake.err" &
pids+=($!)
exec 3>"$tmp/in"
for _ in $(seq 600); do grep -q '^port ' "$tmp/port" 2>/dev/null && break; sleep 0.05; done
port=$(awk '/^port /{print $2}' "$tmp/port")
[ -n "$port" ] || { fail bench_serve_fixture "the fake server did not start: $(cat "$tmp/fake.err")"; exit 0; }
base="http://127.0.0.1:$port"

# 1. completions, 8 prompts x (16 in, 10 out), at most 4 in flight
if "$VLLMC" bench serve --port "$port" --num-prompts 8 --random-input-len 16 --random-output-len 10 \
     --max-concurrency 4 --ignore-eos --ready-check-timeout-sec 5 --percentile-metrics ttft,tpot,itl,e2el \
     --metric-percentiles 50,99 --save-result --result-filename "$tmp/res.json" >"$tmp/out" 2>"$tmp/err" &&
   curl -s --noproxy '*' "$base/stats" >"$tmp/stats.json" &&
   $PY - "$tmp/out" "$tmp/res.json" "$tmp/stats.json" <<'EOF'
import json, re, sys
out = open(sys.argv[1]).read()
res = json.load(open(sys.argv[2]))
st = json.load(open(sys.argv[3]))
lines = out.splitlines()
lines = lines[lines.index("============ Serving Benchmark Result ============"):]
def row(label):
    m = [l for l in lines if l.startswith(label)]
    assert len(m) == 1, (label, out)
    assert len(m[0]) >= 41 and m[0][:40] == label.ljust(40) and m[0][40] == " ", repr(m[0])  # {:<40} {:<10}
    return float(m[0][41:])
assert "============ Serving Benchmark Result ============" in lines
assert "---------------Time to First Token----------------" in lines
assert "-----Time per Output Token (excl. 1st token)------" in lines
assert "---------------Inter-token Latency----------------" in lines
assert "----------------End-to-end Latency----------------" in lines
assert lines[-1] == "=" * 50
assert row("Successful requests:") == 8
assert row("Maximum request concurrency:") == 4
assert row("Total input tokens:") == 8 * 16
assert row("Total generated tokens:") == 8 * 10
assert not any(l.startswith("Request rate configured") for l in lines)   # inf
assert not any(l.startswith("Request goodput") for l in lines)           # no --goodput
dur = row("Benchmark duration (s):")
# two waves of 4, each >= 100 + 9 * 20 ms
assert 0.5 <= dur < 10, dur
assert abs(row("Request throughput (req/s):") - 8 / dur) < 0.05 * 8 / dur + 0.01
assert abs(row("Output token throughput (tok/s):") - 80 / dur) < 0.05 * 80 / dur + 0.01
assert abs(row("Total Token throughput (tok/s):") - 208 / dur) < 0.05 * 208 / dur + 0.01
assert 1 <= row("Peak concurrent requests:") <= 8
assert 0 < row("Peak output token throughput (tok/s):") <= 80
ttft, tpot, itl, e2el = (row(f"Mean {m} (ms):") for m in ("TTFT", "TPOT", "ITL", "E2EL"))
assert 95 <= ttft < 1000, ttft
assert 18 <= tpot < 200 and 18 <= itl < 200, (tpot, itl)
assert 95 + 9 * 18 <= e2el < 3000, e2el
for m in ("TTFT", "TPOT", "ITL", "E2EL"):
    row(f"Median {m} (ms):"); row(f"P50 {m} (ms):"); row(f"P99 {m} (ms):")
# the saved result: per-request figures consistent with the report
assert res["completed"] == 8 and res["total_output_tokens"] == 80 and res["output_lens"] == [10] * 8
assert all(len(x) == 9 for x in res["itls"]), [len(x) for x in res["itls"]]
assert res["errors"] == [""] * 8
import numpy as np
assert abs(np.mean(res["ttfts"]) * 1000 - res["mean_ttft_ms"]) < 1e-6
assert abs(np.percentile(sum(res["itls"], []), 99) * 1000 - res["p99_itl_ms"]) < 1e-6
# the server saw 1 test + 8 requests, never more than 4 at once, ids of length 16, max_tokens 10
assert st["requests"] == 9 and st["max_in_flight"] <= 4, st["max_in_flight"]
assert st["prompt_lens"] == [16] * 9 and st["max_tokens"] == [10] * 9
b = st["bodies"][1]
assert b["model"] == "fake-model" and b["stream"] is True and b["ignore_eos"] is True
assert b["temperature"] == 0 and b["stream_options"] == {"include_usage": True}
assert all(isinstance(t, int) and 0 <= t < 512 and t not in (0, 1, 2) for t in b["prompt"]), b["prompt"]
EOF
then ok bench_serve_counts_and_timings; else fail bench_serve_counts_and_timings "$(tail -5 "$tmp/err")"; fi

# 2. request rate + goodput: ttft SLO above the 100 ms delay -> every request good; below -> none
run_gp() {
  "$VLLMC" bench serve --base-url "$base" --model fake-model --num-prompts 6 --random-input-len 8 \
    --random-output-len 3 --request-rate 50 --burstiness 0.5 --ready-check-timeout-sec 5 --goodput "$@" 2>"$tmp/err"
}
if run_gp ttft:5000 e2el:60000 >"$tmp/g1" && run_gp ttft:20 >"$tmp/g2" && $PY - "$tmp/g1" "$tmp/g2" <<'EOF'
import re, sys
def rows(p):
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^(.{40}) (\S+)", open(p).read(), re.M)}
g1, g2 = rows(sys.argv[1]), rows(sys.argv[2])
k = "Request goodput (req/s):".ljust(40)
assert g1["Request rate configured (RPS):".ljust(40)] == 50.0
assert g1[k] == g1["Request throughput (req/s):".ljust(40)] and g1[k] > 0, g1
assert g2[k] == 0.0, g2
EOF
then ok bench_serve_rate_and_goodput; else fail bench_serve_rate_and_goodput "$(tail -3 "$tmp/err")"; fi

# 3. chat backend, server without usage: output counted by re-tokenizing "the the ..." (1 token each)
if "$VLLMC" bench serve --backend openai-chat --endpoint /v1/chat/completions --base-url "$base" \
     --model fake-no-usage --num-prompts 3 --random-input-len 8 --random-output-len 5 \
     --ready-check-timeout-sec 5 >"$tmp/chat" 2>"$tmp/err" &&
   grep -Eq '^Total generated tokens: +15 *$' "$tmp/chat" && grep -Eq '^Successful requests: +3 *$' "$tmp/chat"
then ok bench_serve_chat_retokenized_output; else fail bench_serve_chat_retokenized_output "$(cat "$tmp/chat" "$tmp/err" | tail -5)"; fi

# 3b. usage beside the last choice (llama-server's framing) is the count, not the re-tokenized text
if "$VLLMC" bench serve --base-url "$base" --model fake-llama-server --num-prompts 3 --random-input-len 8 \
     --random-output-len 5 --ready-check-timeout-sec 5 >"$tmp/ls" 2>"$tmp/err" &&
   grep -Eq '^Total generated tokens: +15 *$' "$tmp/ls"
then ok bench_serve_usage_beside_choice; else fail bench_serve_usage_beside_choice "$(cat "$tmp/ls" "$tmp/err" | tail -5)"; fi

# 3c. a request that fails is left out of the counts and named on stderr (the readiness run is the
# model's first request, so the first benchmark request is the one refused)
if "$VLLMC" bench serve --base-url "$base" --model fake-fail-second --num-prompts 3 --random-input-len 8 \
     --random-output-len 5 --ready-check-timeout-sec 5 >"$tmp/ff" 2>"$tmp/err" &&
   grep -Eq '^Successful requests: +2 *$' "$tmp/ff" && grep -Eq '^Total generated tokens: +10 *$' "$tmp/ff" &&
   grep -q '1 of 3 requests failed (first: request 0: HTTP 503: .*second request refused' "$tmp/err"
then ok bench_serve_failed_request_reported; else fail bench_serve_failed_request_reported "$(cat "$tmp/ff" "$tmp/err" | tail -5)"; fi

# 3d. a NUL in a streamed text ("\u0000", valid JSON) is a token, not a malformed chunk
if "$VLLMC" bench serve --base-url "$base" --model fake-nul --num-prompts 3 --random-input-len 8 \
     --random-output-len 5 --ready-check-timeout-sec 5 >"$tmp/nul" 2>"$tmp/err" &&
   grep -Eq '^Successful requests: +3 *$' "$tmp/nul" && grep -Eq '^Total generated tokens: +15 *$' "$tmp/nul" &&
   ! grep -q 'failed' "$tmp/err"
then ok bench_serve_nul_in_text; else fail bench_serve_nul_in_text "$(cat "$tmp/nul" "$tmp/err" | tail -5)"; fi

# 4. a wrong endpoint fails the readiness run with the server's error, status 1
"$VLLMC" bench serve --base-url "$base" --endpoint /v1/nope --num-prompts 2 --ready-check-timeout-sec 0 \
  >"$tmp/o" 2>"$tmp/err"; rc=$?
if [ $rc -eq 1 ] && grep -q 'initial test run failed: HTTP 404' "$tmp/err"; then ok bench_serve_bad_endpoint
else fail bench_serve_bad_endpoint "status $rc: $(cat "$tmp/err")"; fi
exec 3>&-

# 5. our own server, when this build has it
if "$VLLMC" serve --help >/dev/null 2>&1; then
  VLLM_LOGGING_LEVEL=INFO "$VLLMC" serve --host 127.0.0.1 --port 0 >"$tmp/serve.log" 2>&1 &
  spid=$!; pids+=($spid)
  for _ in $(seq 1200); do grep -q "Application startup complete." "$tmp/serve.log" && break; sleep 0.05; done
  url=$(grep -o 'http://127.0.0.1:[0-9]*' "$tmp/serve.log" | head -1)
  if [ -n "$url" ] && "$VLLMC" bench serve --base-url "$url" --num-prompts 4 --random-input-len 16 \
       --random-output-len 8 --ignore-eos --ready-check-timeout-sec 10 >"$tmp/real" 2>"$tmp/err" &&
     grep -Eq '^Successful requests: +4 *$' "$tmp/real" && grep -Eq '^Total generated tokens: +32 *$' "$tmp/real" &&
     grep -Eq '^Total input tokens: +64 *$' "$tmp/real"
  then ok bench_serve_against_vllmc_serve; else fail bench_serve_against_vllmc_serve "$(cat "$tmp/real" "$tmp/err" | tail -5)"; fi
  kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null
fi
