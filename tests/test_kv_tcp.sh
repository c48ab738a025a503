#!/usr/bin/env bash
# test_kv_tcp.sh - the TcpConnector (instance to instance, NixlConnector's
# handshake; docs/disagg.md) behind `vllmc proxy`, on a random
# TinyLlama-shaped model (4 layers, 4096 positions):
#   - 16 prompts of 1000-2000 random ids through the proxy give a single
#     instance's greedy ids; the prefill response names remote_host and
#     remote_port; the consumer fetched every whole block before the last
#     prompt token (cached_tokens and vllm:external_prefix_cache_hits equal
#     the hand-derived sums);
#   - faults end in correct outputs, with the fetch's failure logged: the
#     producer killed after its prefill (connection refused), a peer that
#     closes in the middle of a block, a peer that never answers (timeout);
#   - KV usage back to 0 on both; a bad kv_port is a start-up error.
# checks: 10
# tags: tsan
cd "$(dirname "$0")/.." || exit 1
. tests/server_helpers.sh
PY=/usr/bin/python3
names="tcp_prefill_response_params tcp_pd_outputs_equal_single tcp_decode_computed_at_most_one_block
tcp_external_hits_metric tcp_kv_usage_zero_producer tcp_prefill_killed_local_recompute tcp_disconnect_mid_transfer
tcp_peer_timeout tcp_kv_usage_zero_consumer tcp_bad_kv_port_error"
if ! $PY -c 'import numpy' 2>/dev/null; then
  for n in $names; do echo "skip $n: /usr/bin/python3 without numpy (tools/make_random_model.py)"; done
  exit 0
fi
tmp=$(mktemp -d)
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill $p 2>/dev/null; done; server_stop_all; rm -rf "$tmp"' EXIT
M=$tmp/model
$PY tools/make_random_model.py "$M" --arch llama --dtype f32 --hidden-size 64 --intermediate-size 128 \
  --layers 4 --heads 4 --kv-heads 2 --max-pos 4096 --tokenizer stories260K >"$tmp/gen.log" 2>&1 ||
  { echo "FAIL make_model: $(tail -3 "$tmp/gen.log")"; exit 1; }
server_start P --model "$M" --threads 1 --kv-transfer-config '{"kv_connector":"TcpConnector","kv_role":"kv_producer","kv_port":0}' || exit 1
server_start C --model "$M" --threads 1 --enable-prompt-tokens-details --kv-transfer-config \
  '{"kv_connector":"TcpConnector","kv_role":"kv_consumer","kv_connector_extra_config":{"timeout_s":1}}' || exit 1
server_start S --model "$M" --threads 1 || exit 1
"$VLLMC" proxy --port 0 --prefill "$P_URL" --decode "$C_URL" >"$tmp/proxy.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1200); do grep -q "Starting vllmc proxy on" "$tmp/proxy.log" && break; sleep 0.05; done
X=$(grep -o 'Starting vllmc proxy on [^ ]*' "$tmp/proxy.log" | sed 's/.* on //')
[ -n "$X" ] || { echo "FAIL proxy_start: $(tail -3 "$tmp/proxy.log")"; exit 1; }

prompt() { $PY -c "import random; r=random.Random($1); print([r.randrange(3, 512) for _ in range(r.randrange(1000, 2001))])"; }
body() { echo "{\"model\":\"$M\",\"prompt\":$1,\"max_tokens\":$2,\"temperature\":0,\"ignore_eos\":true,\"return_token_ids\":true${3:-}}"; }
ids() { jq -c '.choices[0].token_ids' <<<"$BODY"; }
req POST "$P_URL/v1/completions" "$(body '[5,6,7]' 1 ',"kv_transfer_params":{"do_remote_decode":true}')"
check tcp_prefill_response_params '.kv_transfer_params.do_remote_prefill == true and .kv_transfer_params.remote_host == "127.0.0.1"
  and .kv_transfer_params.remote_port > 0'
equal=1; exact=1; want_hits=0
for k in $(seq 1 16); do
  p=$(prompt $k); L=$($PY -c "print(len($p))")
  req POST "$S_URL/v1/completions" "$(body "$p" 8)"; single=$(ids)
  req POST "$X/v1/completions" "$(body "$p" 8)"
  [ "$(ids)" = "$single" ] && [ "$single" != null ] || { equal=0; echo "prompt $k: $(head -c 300 <<<"$BODY") vs $single" >&2; }
  [ "$(jq '.usage.prompt_tokens_details.cached_tokens' <<<"$BODY")" = $(( (L - 1) / 16 * 16 )) ] || exact=0
  want_hits=$((want_hits + (L - 1) / 16 * 16))
done
[ $equal = 1 ] && echo "ok tcp_pd_outputs_equal_single" || echo "FAIL tcp_pd_outputs_equal_single: see stderr"
[ $exact = 1 ] && echo "ok tcp_decode_computed_at_most_one_block" || echo "FAIL tcp_decode_computed_at_most_one_block"
val() { curl -s "$1/metrics" | awk -v n="$2" '$1 ~ "^"n"\\{" {print $2+0}'; }
h=$(val "$C_URL" vllm:external_prefix_cache_hits_total)
[ "$h" = "$want_hits" ] && echo "ok tcp_external_hits_metric" || echo "FAIL tcp_external_hits_metric: $h, want $want_hits"
usage0() { curl -s "$1/metrics" | grep -Eq '^vllm:kv_cache_usage_perc\{[^}]*\} 0(\.0)?$'; }
usage0 "$P_URL" && echo "ok tcp_kv_usage_zero_producer" || echo "FAIL tcp_kv_usage_zero_producer"

# the producer dies between its prefill and the decode's fetch
p=$(prompt 101)
req POST "$S_URL/v1/completions" "$(body "$p" 8)"; single=$(ids)
req POST "$P_URL/v1/completions" "$(body "$p" 1 ',"kv_transfer_params":{"do_remote_decode":true}')"
params=$(jq -c .kv_transfer_params <<<"$BODY")
kill -TERM "$P_PID"; wait "$P_PID" 2>/dev/null
req POST "$C_URL/v1/completions" "$(body "$p" 8 ",\"kv_transfer_params\":$params")"
[ "$(ids)" = "$single" ] && grep -q "TcpConnector: fetch from 127.0.0.1:[0-9]*: cannot connect" "$C_LOG" &&
  echo "ok tcp_prefill_killed_local_recompute" || echo "FAIL tcp_prefill_killed_local_recompute: $(ids) vs $single"

# fake producers: one sends a block's first bytes and hangs up, one never answers
fake() { # mode -> prints its port
  $PY -u - "$1" <<'PYEOF' &
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(4)
print(s.getsockname()[1], flush=True)
while True:
    c, _ = s.accept()
    c.recv(65536)
    if sys.argv[1] == "cut":
        c.sendall(b"\x01" + b"\x00" * 1000)
        c.close()
    else:
        time.sleep(30)
PYEOF
  PIDS+=($!)
}
fake cut > "$tmp/cut.port"; fake mute > "$tmp/mute.port"
for _ in $(seq 600); do [ -s "$tmp/cut.port" ] && [ -s "$tmp/mute.port" ] && break; sleep 0.05; done
p=$(prompt 102)
req POST "$S_URL/v1/completions" "$(body "$p" 8)"; single=$(ids)
req POST "$C_URL/v1/completions" "$(body "$p" 8 ",\"kv_transfer_params\":{\"do_remote_prefill\":true,\"remote_host\":\"127.0.0.1\",\"remote_port\":$(cat "$tmp/cut.port")}")"
[ "$(ids)" = "$single" ] && grep -q "connection lost after 0 of" "$C_LOG" &&
  echo "ok tcp_disconnect_mid_transfer" || echo "FAIL tcp_disconnect_mid_transfer: $(ids) vs $single"
p=$(prompt 103)
req POST "$S_URL/v1/completions" "$(body "$p" 8)"; single=$(ids)
t0=$(date +%s.%N)
req POST "$C_URL/v1/completions" "$(body "$p" 8 ",\"kv_transfer_params\":{\"do_remote_prefill\":true,\"remote_host\":\"127.0.0.1\",\"remote_port\":$(cat "$tmp/mute.port")}")"
dt=$($PY -c "print($(date +%s.%N) - $t0)")
[ "$(ids)" = "$single" ] && $PY -c "import sys; sys.exit(0 if $dt < 20 else 1)" && [ "$(grep -c 'connection lost after 0 of' "$C_LOG")" = 2 ] &&
  echo "ok tcp_peer_timeout" || echo "FAIL tcp_peer_timeout: $(ids) vs $single after ${dt}s"
usage0 "$C_URL" && echo "ok tcp_kv_usage_zero_consumer" || echo "FAIL tcp_kv_usage_zero_consumer"

timeout 120 "$VLLMC" serve --model "$M" --port 0 --kv-transfer-config '{"kv_connector":"TcpConnector","kv_role":"kv_producer","kv_port":70000}' >"$tmp/bad.log" 2>&1
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "kv_port must be an integer in 0..65535" "$tmp/bad.log" && echo "ok tcp_bad_kv_port_error" ||
  echo "FAIL tcp_bad_kv_port_error: rc $rc $(tail -2 "$tmp/bad.log")"
