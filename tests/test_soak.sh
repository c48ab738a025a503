#!/usr/bin/env bash
# test_soak.sh - a bounded soak of `vllmc serve` on loopback (tools/soak.c):
# SOAK_REQUESTS requests (500) from SOAK_CLIENTS concurrent clients (16), a
# third hanging up mid-stream, one in six malformed, within SOAK_SECONDS (60).
# Before: a warm-up of the same mix (N requests, at most 5,000: glibc malloc
# keeps its high-water mark, about 60 MB RSS at 64 clients, which is not a leak). After: /health 200, a normal request
# succeeds, every completed response was well-formed (soak exits 1
# otherwise), no call in flight and the KV cache empty, resident memory
# within max(16 MiB, 10 %) of its post-warm-up value, the same number of
# open file descriptors. Full size: make soak (10,000 requests, 64 clients).
# checks: 7
# tags: tsan
cd "$(dirname "$0")/.."
. tests/server_helpers.sh
N=${SOAK_REQUESTS:-500} CL=${SOAK_CLIENTS:-16} SECS=${SOAK_SECONDS:-60}
SOAK=${BUILD_DIR:-$PWD/build}/tools/soak
[ -x "$SOAK" ] || { echo "FAIL soak_client: $SOAK not built"; exit 0; }
server_start S --max-model-len 256 --disable-uvicorn-access-log || exit 0
U=$S_URL
rss() { awk '/^VmRSS/ {print $2}' /proc/$S_PID/status; }   # KiB
fds() { ls /proc/$S_PID/fd | wc -l; }
idle() {
  local m; m=$(curl -s --max-time 5 "$U/metrics")
  [ "$(curl -s --max-time 5 "$U/load" | jq .server_load)" = 0 ] &&
    printf '%s\n' "$m" | grep -q '^vllm:num_requests_running{[^}]*} 0' &&
    printf '%s\n' "$m" | grep -q '^vllm:num_requests_waiting{[^}]*} 0' &&
    printf '%s\n' "$m" | grep -qE '^vllm:kv_cache_usage_perc\{[^}]*\} 0(\.0)?$'
}
warm=$(( N < 5000 ? N : 5000 ))   # the allocator reaches its high-water mark at this concurrency
"$SOAK" "$U" "$warm" "$CL" "$SECS" > /dev/null 2>&1
wait_for soak_warmup_idle 60 idle >/dev/null
rss0=$(rss) fd0=$(fds)
out=$("$SOAK" "$U" "$N" "$CL" "$SECS" 2>&1); rc=$?
printf '%s\n' "$out" | grep '^soak:' | sed 's/^/   /'
[ $rc = 0 ] && echo "ok soak_responses_well_formed" || { echo "FAIL soak_responses_well_formed: soak exited $rc"; printf '%s\n' "$out" | grep -v '^soak: ' | head -5; }
req GET "$U/health"; check_status soak_health 200
req POST "$U/v1/completions" '{"prompt": "Once upon a time", "max_tokens": 8}'
check soak_normal_request '.usage.completion_tokens==8'
wait_for soak_idle_kv_free 60 idle
sleep 0.5
rss1=$(rss) fd1=$(fds)
margin=$(( rss0 / 10 > 16384 ? rss0 / 10 : 16384 ))
echo "   rss ${rss0} KiB -> ${rss1} KiB (margin ${margin} KiB); fds ${fd0} -> ${fd1}"
if [[ "$VLLMC" == *build-san/* || "$VLLMC" == *build-tsan/* ]]; then
  echo "skip soak_rss_back: not measured under sanitizers (their quarantine holds freed memory)"
elif [ $(( rss1 - rss0 )) -le $margin ]; then echo "ok soak_rss_back"; else echo "FAIL soak_rss_back: ${rss0} KiB -> ${rss1} KiB"; fi
[ "$fd1" -le "$fd0" ] && echo "ok soak_no_fd_leak" || echo "FAIL soak_no_fd_leak: $fd0 -> $fd1 fds: $(ls -l /proc/$S_PID/fd | tail -5)"
kill -TERM "$S_PID"
for _ in $(seq 100); do kill -0 "$S_PID" 2>/dev/null || break; sleep 0.1; done
wait "$S_PID"; rc=$?
[ $rc = 0 ] && echo "ok soak_sigterm_exit_0" || echo "FAIL soak_sigterm_exit_0: exit $rc"
