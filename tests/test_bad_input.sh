#!/usr/bin/env bash
# test_bad_input.sh - hostile and malformed requests against a real `vllmc
# serve` on a loopback port (bounded: curl --max-time, the server always
# killed on exit). Each must get a clear error with the right status and
# vLLM's error JSON; afterwards the server must still be healthy: /health 200,
# a normal request succeeds, no request left running and the KV cache empty
# (/metrics), no calls in flight (/load). Then: admission control
# (--max-num-queued-reqs: 503 + Retry-After), the slowloris timeout
# (VLLM_HTTP_TIMEOUT_KEEP_ALIVE), and SIGTERM with streams in flight (exit 0
# within the deadline).
# checks: 53
# tags: tsan
cd "$(dirname "$0")/.."
. tests/server_helpers.sh
PY=/usr/bin/python3
tmp=$(mktemp -d /tmp/vllmc-bad-XXXXXX)
trap 'server_stop_all; rm -rf "$tmp"' EXIT

export VLLM_HTTP_TIMEOUT_KEEP_ALIVE=3
server_start S --max-model-len 256 --api-key sekret || exit 0
U=$S_URL
HOSTPORT=${U#http://}
AUTH=(-H 'Authorization: Bearer sekret')

# err NAME STATUS  : $STATUS is STATUS and $BODY is vLLM's error JSON with code STATUS
err() {
  local name=$1 want=$2
  if [ "$STATUS" != "$want" ]; then
    echo "FAIL $name: status $STATUS, want $want: $(printf '%s' "$BODY" | head -c 300)"; return
  fi
  check "$name" "(.error.message|type==\"string\" and length>0) and (.error.type|type==\"string\") and .error.code==$want"
}
C=$U/v1/completions CH=$U/v1/chat/completions

req POST "$C" '{"prompt": "x", ' "${AUTH[@]}"; err invalid_json 400
req POST "$C" '[1, 2, 3]' "${AUTH[@]}"; err json_not_object 400
req POST "$C" '' "${AUTH[@]}" -H 'Content-Type: application/json' -d ''; err empty_body 400
req POST "$C" '{"prompt": 5}' "${AUTH[@]}"; err wrong_type_prompt 400
req POST "$C" '{"prompt": "x", "max_tokens": "ten"}' "${AUTH[@]}"; err wrong_type_max_tokens 400
req POST "$C" '{"prompt": "x", "temperature": [1]}' "${AUTH[@]}"; err wrong_type_temperature 400
req POST "$C" '{"prompt": "x", "max_tokens": -5}' "${AUTH[@]}"; err negative_max_tokens 400
req POST "$C" '{"prompt": "x", "max_tokens": -1}' "${AUTH[@]}"; err max_tokens_minus_one 400
req POST "$C" '{"prompt": "x", "max_tokens": 100000000000000000000}' "${AUTH[@]}"; err huge_max_tokens 400
req POST "$C" '{"prompt": "x", "max_tokens": 1000000}' "${AUTH[@]}"; err max_tokens_beyond_context 400
req POST "$C" '{"prompt": "x", "n": 1000000, "temperature": 1}' "${AUTH[@]}"; err n_million 400
req POST "$C" '{"prompt": "x", "n": -1}' "${AUTH[@]}"; err n_negative 400
req POST "$C" "{\"prompt\": \"$(printf 'word %.0s' $(seq 400))\"}" "${AUTH[@]}"; err prompt_beyond_max_model_len 400
check prompt_beyond_message '.error.message|test("maximum context length")'
req POST "$C" '{"prompt": [1, 2, 99999999]}' "${AUTH[@]}"; err token_id_out_of_vocab 400
req POST "$C" '{"prompt": "x", "logprobs": 1000000}' "${AUTH[@]}"; err huge_logprobs 400
check huge_logprobs_param '.error.param=="logprobs"'
req POST "$CH" '{"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 1000000}' "${AUTH[@]}"
err huge_top_logprobs 400
# bodies too large for a command line go through files
reqf() { req POST "$1" "" "${AUTH[@]}" -H 'Content-Type: application/json' --data-binary @"$2"; }
$PY -c 'import json; print(json.dumps({"prompt": "x", "stop": ["s%d" % i for i in range(100000)]}))' > "$tmp/stops"
reqf "$C" "$tmp/stops"; err absurd_stop_list 400
$PY -c 'import json; print(json.dumps({"prompt": "x", "stop": "a" * 300000, "max_tokens": 2}))' > "$tmp/stop1"
reqf "$C" "$tmp/stop1"
{ [ "$STATUS" = 200 ] && check huge_stop_string '.choices[0].text|type=="string"'; } || err huge_stop_string 400
req POST "$C" '{"prompt": "x", "stop": [""]}' "${AUTH[@]}"; err empty_stop_string 400
req POST "$C" '{"prompt": "x", "model": "gpt-17"}' "${AUTH[@]}"; err unknown_model 404
req POST "$C" '{"prompt": "x"}' -H 'Authorization: Bearer wrong'
[ "$STATUS" = 401 ] && check bad_api_key '.error=="Unauthorized"' || echo "FAIL bad_api_key: status $STATUS"
req POST "$C" '{"prompt": "x"}'
[ "$STATUS" = 401 ] && echo "ok missing_api_key" || echo "FAIL missing_api_key: status $STATUS"
STATUS=$(curl -s --max-time 10 -o "$tmp/out" -w '%{http_code}' "${AUTH[@]}" -H 'Content-Type: text/plain' \
  --data-binary '{"prompt": "x"}' "$C"); BODY=$(cat "$tmp/out"); err wrong_content_type 400
req POST "$CH" '{"messages": "hello"}' "${AUTH[@]}"; err chat_messages_not_list 400
req POST "$CH" '{"messages": [{"role": "user", "content": 5}]}' "${AUTH[@]}"; err chat_content_wrong_type 400
req POST "$CH" '{"messages": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}' "${AUTH[@]}"
err chat_nested_garbage 400
$PY -c 'print("[" * 100000 + "]" * 100000)' > "$tmp/deep"
reqf "$C" "$tmp/deep"; err deeply_nested_json 400

# invalid UTF-8 and embedded NULs: either a clean 400 or a completion (vLLM
# decodes bytes with errors="replace"), never a crash
printf '{"prompt": "a\xff\xfeb\xc3", "max_tokens": 2}' > "$tmp/utf8"
reqf "$C" "$tmp/utf8"
[ "$STATUS" = 400 ] && err invalid_utf8 400 || { [ "$STATUS" = 200 ] && check invalid_utf8 '.choices[0].text|type=="string"'; }
printf '{"prompt": "a\\u0000b", "max_tokens": 2}' > "$tmp/nul"
reqf "$C" "$tmp/nul"
[ "$STATUS" = 200 ] && check embedded_nul_escaped '.choices[0].text|type=="string"' || err embedded_nul_escaped 400
printf '{"prompt": "a\0b", "max_tokens": 2}' > "$tmp/rawnul"
reqf "$C" "$tmp/rawnul"; err embedded_raw_nul 400

# 100 MB body: 413 once the 32 MiB limit is passed, the rest not buffered
head -c $((100 << 20)) /dev/zero | tr '\0' ' ' > "$tmp/big"
reqf "$C" "$tmp/big"
err body_100mb 413
rm -f "$tmp/big"

# raw-socket abuse: pipelined garbage, a truncated request line, binary noise
raw() { # raw NAME PAYLOAD_PY : prints the first response line the server sends (or "closed")
  $PY - "$HOSTPORT" "$2" <<'EOF'
import socket, sys
host, port = sys.argv[1].rsplit(":", 1)
s = socket.create_connection((host, int(port)), timeout=10)
try:
    s.sendall(eval(sys.argv[2]))
    s.shutdown(socket.SHUT_WR)
    data = b""
    while True:
        b = s.recv(65536)
        if not b: break
        data += b
    print(data.split(b"\r\n", 1)[0].decode("latin1") if data else "closed")
except Exception as e:
    print("closed")
EOF
}
line=$(raw pipelined 'b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n" + b"\x00\xff GARBAGE \r\n\r\n" * 50 + b"POST /v1/completions HTTP/1.1\r\nContent-Length: -7\r\n\r\n"')
[[ "$line" == "HTTP/1.1 200"* ]] && echo "ok pipelined_garbage" || echo "FAIL pipelined_garbage: $line"
line=$(raw garbage 'bytes(range(256)) * 64')
[[ "$line" == "HTTP/1.1 4"* || "$line" == closed ]] && echo "ok binary_noise" || echo "FAIL binary_noise: $line"
line=$(raw huge_header 'b"GET /health HTTP/1.1\r\nX-A: " + b"a" * 200000 + b"\r\n\r\n"')
[[ "$line" == "HTTP/1.1 4"* || "$line" == closed ]] && echo "ok huge_header" || echo "FAIL huge_header: $line"
line=$(raw bad_chunked 'b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nZZZ\r\nabc\r\n0\r\n\r\n"')
[[ "$line" == "HTTP/1.1 4"* || "$line" == closed ]] && echo "ok bad_chunked" || echo "FAIL bad_chunked: $line"

# slowloris: headers one byte at a time, slower than the idle timeout (3 s
# here): the server must close the connection, not wait forever
sl=$($PY - "$HOSTPORT" <<'EOF'
import socket, sys, time
host, port = sys.argv[1].rsplit(":", 1)
s = socket.create_connection((host, int(port)), timeout=20)
s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ")
t0 = time.time()
try:
    while time.time() - t0 < 15:
        time.sleep(4)
        s.sendall(b"a")
    print("still-open")
except OSError:
    print("closed %.0f" % (time.time() - t0))
EOF
)
[[ "$sl" == closed* ]] && echo "ok slowloris_closed ($sl s)" || echo "FAIL slowloris_closed: $sl"

# still healthy?
healthy() { # healthy NAME URL
  local name=$1 url=$2
  req GET "$url/health"; check_status "${name}_health" 200
  req POST "$url/v1/completions" '{"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0}' "${AUTH[@]}"
  [ "$STATUS" = 200 ] && check "${name}_normal_request" '.choices[0].finish_reason=="length" and .usage.completion_tokens==8' \
    || echo "FAIL ${name}_normal_request: status $STATUS"
  wait_for "${name}_idle" 30 idle "$url"
}
idle() { # no call in flight, no sequence scheduled, KV cache empty
  local m l
  l=$(curl -s --max-time 5 "$1/load") m=$(curl -s --max-time 5 "$1/metrics")
  [ "$(printf '%s' "$l" | jq .server_load)" = 0 ] &&
    printf '%s\n' "$m" | grep -q '^vllm:num_requests_running{[^}]*} 0' &&
    printf '%s\n' "$m" | grep -q '^vllm:num_requests_waiting{[^}]*} 0' &&
    printf '%s\n' "$m" | grep -qE '^vllm:kv_cache_usage_perc\{[^}]*\} 0(\.0)?$'
}
healthy after_bad_input "$U"

# admission control: 2 sequences at most; two slow streams hold them
server_stop_all
VLLMC_DEBUG_STEP_DELAY_US=50000 server_start A --max-model-len 256 --max-num-queued-reqs 2 || exit 0
cpids=()
for i in 1 2; do
  curl -s -N --max-time 30 -H 'Content-Type: application/json' \
    -d '{"prompt": "Once", "max_tokens": 60, "stream": true, "ignore_eos": true}' "$A_URL/v1/completions" > "$tmp/s$i" &
  cpids+=($!)
done
wait_for admission_streams_running 30 bash -c "[ \$(curl -s $A_URL/load | jq .server_load) = 2 ]"
req POST "$A_URL/v1/completions" '{"prompt": "x", "max_tokens": 2}'
err admission_503 503
printf '%s' "$HEADERS" | grep -qi '^Retry-After: 1' && echo "ok admission_retry_after" || echo "FAIL admission_retry_after: $HEADERS"
req POST "$A_URL/v1/completions" '{"prompt": "x", "max_tokens": 2, "n": 3, "temperature": 1}'
err admission_never_fits_400 400
wait "${cpids[@]}"
grep -q 'data: \[DONE\]' "$tmp/s1" && grep -q 'data: \[DONE\]' "$tmp/s2" && echo "ok admission_admitted_streams_complete" \
  || echo "FAIL admission_admitted_streams_complete"
AUTH=()
healthy after_admission "$A_URL"

# SIGTERM with streams in flight: exit 0 within the deadline, clients see an end
cpids=()
for i in 1 2; do
  curl -s -N --max-time 30 -H 'Content-Type: application/json' \
    -d '{"prompt": "Once", "max_tokens": 200, "stream": true, "ignore_eos": true}' "$A_URL/v1/completions" > "$tmp/t$i" &
  cpids+=($!)
done
wait_for sigterm_streams_running 30 grep -q '"text"' "$tmp/t1"
t0=$(date +%s.%N)
kill -TERM "$A_PID"
for _ in $(seq 150); do kill -0 "$A_PID" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$A_PID" 2>/dev/null; then
  echo "FAIL sigterm_exit: still running 15 s after SIGTERM"
else
  wait "$A_PID"; rc=$?
  secs=$(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $t0}")
  [ $rc = 0 ] && echo "ok sigterm_exit_0 (${secs} s)" || echo "FAIL sigterm_exit_0: exit $rc"
fi
wait "${cpids[@]}"
grep -q '"finish_reason":"abort"' "$tmp/t1" && echo "ok sigterm_streams_aborted" || echo "FAIL sigterm_streams_aborted: $(tail -c 300 "$tmp/t1")"
grep -q 'Application shutdown complete' "$A_LOG" && echo "ok sigterm_log" || echo "FAIL sigterm_log"
