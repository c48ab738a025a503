#!/usr/bin/env bash
# test_server_dp_headless.sh - multi-node data parallelism (issue 23) on one
# machine: two "hosts" as Linux network namespaces joined by a veth pair
# (10.231.N.1 and 10.231.N.2, created and removed here; root only).
#   host A: `vllmc serve -dp 2 -dpl 1 -dpa 10.231.N.1 -dpp PORT`: the front
#           end and engine 0
#   host B: `vllmc serve --headless -dp 2 -dpl 1 -dpr 1 -dpa 10.231.N.1 -dpp PORT`:
#           engine 1, which connects to A over the veth link
# Checks: engine 1 joins as a remote engine; 64 concurrent requests give the
# single-engine server's outputs exactly, both engines taking load
# (per-engine metrics); killing the headless engine mid-run logs an ERROR
# naming it, every client is answered (curl --max-time), and engine 0 keeps
# serving. SKIPPED (never passed) without root or `ip netns`.
# checks: 6
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-$PWD/build}
REAL_VLLMC=${VLLMC:-$BUILD_DIR/vllmc}
export VLLMC=$REAL_VLLMC
. tests/server_helpers.sh
MODEL=models/stories260K
skip() { for n in dpn_headless_joined dpn_equals_single_engine_64 dpn_both_engines_took_load \
                  dpn_killed_headless_logged dpn_killed_headless_no_hang dpn_survivor_serves; do
           echo "skip $n: $1"; done; exit 0; }
[ "$(id -u)" = 0 ] || skip "needs root for ip netns"
command -v ip >/dev/null || skip "no ip command (iproute2)"
N=$(( $$ % 200 + 20 ))
NSA=vdpa$$ NSB=vdpb$$ PORT=$(( 30000 + $$ % 20000 ))
ADDR_A=10.231.$N.1 ADDR_B=10.231.$N.2
tmp=$(mktemp -d)
HL_PID=
cleanup() {
  [ -n "$HL_PID" ] && kill -9 "$HL_PID" 2>/dev/null
  server_stop_all
  ip netns del "$NSA" 2>/dev/null; ip netns del "$NSB" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
ip netns add "$NSA" 2>/dev/null && ip netns add "$NSB" 2>/dev/null || skip "ip netns add failed (no namespaces here)"
ip link add "va$$" netns "$NSA" type veth peer name "vb$$" netns "$NSB" 2>/dev/null || skip "no veth pairs"
ip -n "$NSA" addr add "$ADDR_A/24" dev "va$$"; ip -n "$NSB" addr add "$ADDR_B/24" dev "vb$$"
for ns in "$NSA" "$NSB"; do ip -n "$ns" link set lo up; done
ip -n "$NSA" link set "va$$" up; ip -n "$NSB" link set "vb$$" up
for _ in $(seq 40); do [[ $(ip -n "$NSB" link show "vb$$") == *"state UP"* ]] && break; sleep 0.05; done
[[ $(ip -n "$NSB" link show "vb$$") == *"state UP"* ]] || skip "the veth link does not come up"

. tests/dp_helpers.sh

# the reference: one engine, in the root namespace
server_start ONE --model $MODEL --threads 1 || exit 0
run64 "$ONE_URL" "$tmp/one"
server_stop_all

# host B's headless engine first (it waits for the front end), then host A
ip netns exec "$NSB" "$REAL_VLLMC" serve --model $MODEL --threads 1 --headless -dp 2 -dpl 1 -dpr 1 \
  -dpa "$ADDR_A" -dpp "$PORT" > "$tmp/headless.log" 2>&1 &
HL_PID=$!
printf '#!/bin/sh\nexec ip netns exec %s %s "$@"\n' "$NSA" "$REAL_VLLMC" > "$tmp/vllmc-in-a"
chmod +x "$tmp/vllmc-in-a"
VLLMC=$tmp/vllmc-in-a VLLMC_DEBUG_STEP_DELAY_US=2000 server_start A --model $MODEL --threads 1 -dp 2 -dpl 1 \
  -dpa "$ADDR_A" -dpp "$PORT" || exit 0
CURL="ip netns exec $NSA"
if grep -q 'data parallel engine 1 is ready (pid [0-9]*, remote' "$A_LOG"; then echo "ok dpn_headless_joined"
else echo "FAIL dpn_headless_joined: $(grep 'data parallel' "$A_LOG" | tail -3)"; fi

run64 "$A_URL" "$tmp/dp"
bad=0
for i in $(seq 0 63); do cmp -s "$tmp/one/$i.out" "$tmp/dp/$i.out" || bad=$((bad + 1)); done
if [ $bad -eq 0 ]; then echo "ok dpn_equals_single_engine_64"
else echo "FAIL dpn_equals_single_engine_64: $bad of 64 differ"; fi
m=$($CURL curl -s --max-time 10 "$A_URL/metrics")
e0=$(success_total "$m" 0) e1=$(success_total "$m" 1)
if [ "$e0" -gt 0 ] && [ "$e1" -gt 0 ]; then echo "ok dpn_both_engines_took_load ($e0 + $e1)"
else echo "FAIL dpn_both_engines_took_load: engine 0 finished $e0, engine 1 $e1"; fi

# kill the headless engine (host B) mid-run: engines are slowed to 2 ms a step
pids=()
mkdir -p "$tmp/k"
for i in $(seq 0 7); do
  $CURL curl -s --max-time 40 -o "$tmp/k/$i.json" -w '%{http_code}\n' -H 'Content-Type: application/json' \
    --data-binary '{"model":"'$MODEL'","prompt":"Far away '$i'","max_tokens":400,"ignore_eos":true}' \
    "$A_URL/v1/completions" > "$tmp/k/$i.code" 2>/dev/null &
  pids+=($!)
done
sleep 0.5
kill -9 "$HL_PID"
wait "${pids[@]}"
HL_PID=
if grep -q 'ERROR.*data parallel engine 1 lost its connection' "$A_LOG"; then echo "ok dpn_killed_headless_logged"
else echo "FAIL dpn_killed_headless_logged: $(grep 'data parallel' "$A_LOG" | tail -3)"; fi
if [ "$(grep -cv '^000$' "$tmp"/k/*.code | awk -F: '{s += $2} END {print s}')" -eq 8 ]; then
  echo "ok dpn_killed_headless_no_hang"
else echo "FAIL dpn_killed_headless_no_hang: $(cat "$tmp"/k/*.code | tr '\n' ' ')"; fi
out=$($CURL curl -s --max-time 20 -H 'Content-Type: application/json' \
  --data-binary '{"model":"'$MODEL'","prompt":"Still here","max_tokens":8}' "$A_URL/v1/completions")
check dpn_survivor_serves '(.choices[0].text | length) > 0' "$out"
