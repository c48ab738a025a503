# server_helpers.sh - sourced by tests/test_server_*.sh: start `vllmc serve`
# on a free loopback port (port 0; the port is read from the startup log),
# make requests with curl, check JSON with jq, and always stop every server
# started (trap on exit; SIGTERM, then SIGKILL after 10 s).
#
#   server_start S [serve args...]   -> $S_URL, $S_PID, $S_LOG
#   req METHOD URL [BODY] [curl args] -> $STATUS, $BODY (and $HEADERS)
#   check NAME JQ_FILTER              -> "ok NAME" if $BODY satisfies the filter
set -u
VLLMC=${VLLMC:-$PWD/build/vllmc}
_SERVER_PIDS=()
_SERVER_LOGS=()

server_stop_all() {
  local p
  for p in "${_SERVER_PIDS[@]:-}"; do [ -n "$p" ] && kill -TERM "$p" 2>/dev/null; done
  for p in "${_SERVER_PIDS[@]:-}"; do
    [ -z "$p" ] && continue
    for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null
    wait "$p" 2>/dev/null
  done
  _SERVER_PIDS=()
  # a sanitizer build's report (ASan, LSan at exit, UBSan, TSan) in a server's
  # log fails the test that started it, as run.sh fails a crashing binary
  local l
  for l in "${_SERVER_LOGS[@]:-}"; do
    [ -n "$l" ] && [ -f "$l" ] || continue
    if grep -qE '^==[0-9]+==ERROR|^WARNING: ThreadSanitizer|runtime error:' "$l"; then
      echo "FAIL server_sanitizer_report: $(grep -m1 -E '^==[0-9]+==ERROR|^WARNING: ThreadSanitizer|runtime error:' "$l")"
      grep -m1 -A12 -E '^==[0-9]+==ERROR|^WARNING: ThreadSanitizer|runtime error:' "$l" >&2
    fi
  done
  if [ -z "${KEEP_LOGS:-}" ]; then rm -f "${_SERVER_LOGS[@]:-}"; fi
  _SERVER_LOGS=()
}
trap server_stop_all EXIT

server_start() {
  local name=$1; shift
  local log; log=$(mktemp /tmp/vllmc-serve-XXXXXX.log)
  _SERVER_LOGS+=("$log")
  "$VLLMC" serve --host 127.0.0.1 --port 0 "$@" >"$log" 2>&1 &
  local pid=$!
  _SERVER_PIDS+=("$pid")
  local i
  for i in $(seq 2400); do # >= 120 s: a sanitizer build beside other passes on 2 cores
    # (with --api-server-count, server 0 is not necessarily the first one up)
    grep -q "Application startup complete." "$log" && grep -q 'Starting vLLM API server 0 on' "$log" && break
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "FAIL ${name}_start: the server exited during start-up"; tail -20 "$log" >&2; return 1
    fi
    sleep 0.05
  done
  # http://HOST:PORT, https://HOST:PORT, or http+unix:PATH (--uds)
  local url; url=$(grep -o 'Starting vLLM API server 0 on [a-z+]*:[^ ]*' "$log" | sed 's/.* on //')
  if [ -z "$url" ]; then echo "FAIL ${name}_start: no start-up line"; tail -20 "$log" >&2; return 1; fi
  printf -v "${name}_URL" '%s' "$url"
  printf -v "${name}_PID" '%s' "$pid"
  printf -v "${name}_LOG" '%s' "$log"
}

# req METHOD URL [BODY] [extra curl args...]; JSON content type unless overridden.
req() {
  local method=$1 url=$2 body=${3:-}; shift 3 2>/dev/null || shift $#
  local out hdr; out=$(mktemp); hdr=$(mktemp)
  if [ -n "$body" ]; then
    STATUS=$(curl -s --max-time 60 -X "$method" -o "$out" -D "$hdr" -w '%{http_code}' \
      -H 'Content-Type: application/json' --data-binary "$body" "$@" "$url")
  else
    STATUS=$(curl -s --max-time 60 -X "$method" -o "$out" -D "$hdr" -w '%{http_code}' "$@" "$url")
  fi
  BODY=$(cat "$out"); HEADERS=$(cat "$hdr"); rm -f "$out" "$hdr"
}

# check NAME JQ_FILTER [JSON] : the filter must yield true on JSON (default $BODY)
check() {
  local name=$1 filter=$2 json=${3-$BODY}
  if printf '%s' "$json" | jq -e "$filter" >/dev/null 2>&1; then
    echo "ok $name"
  else
    echo "FAIL $name: $filter does not hold for: $(printf '%s' "$json" | head -c 600)"
  fi
}

check_status() {
  local name=$1 want=$2
  if [ "$STATUS" = "$want" ]; then echo "ok $name"; else echo "FAIL $name: status $STATUS, want $want: $(printf '%s' "$BODY" | head -c 400)"; fi
}

# wait_for NAME SECONDS COMMAND... : retries COMMAND until it succeeds
wait_for() {
  local name=$1 secs=$2; shift 2
  local i
  for i in $(seq $((secs * 20))); do "$@" && { echo "ok $name"; return 0; }; sleep 0.05; done
  echo "FAIL $name: '$*' still false after ${secs}s"; return 1
}
