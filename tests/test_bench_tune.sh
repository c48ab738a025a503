#!/usr/bin/env bash
# test_bench_tune.sh - `vllmc bench tune` (vLLM's auto_tune) on
# models/stories260K with a tiny search space: 2 x 2 candidates (max-num-seqs
# 2,4 x max-num-batched-tokens 512,1024, 1 thread), 4 prompts each. Checks the
# table (one row per candidate with its flags in the order of the search,
# numbers in every measurement column, "yes" for each under a loose SLO), that
# the best flags printed are those of the row with the highest req/s, that an
# SLO no server can meet reports "no configuration met the SLO" with exit
# status 1, and that malformed --slo strings are clear errors (status 2)
# before any server starts.
# checks: 3
set -uo pipefail
cd "$(dirname "$0")/.."
VLLMC=${VLLMC:-build/vllmc}
PY=/usr/bin/python3
export VLLM_LOGGING_LEVEL=WARNING
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok() { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; }
model=models/stories260K
common=(--model "$model" --threads 1 --num-prompts 4 --input-len 8 --output-len 4)

# 1. the table and the best flags
if "$VLLMC" bench tune "${common[@]}" --slo "e2el_p99_ms=120000, ttft_p99_ms=120000" --max-num-seqs 2,4 \
     --max-num-batched-tokens 512,1024 --result-dir "$tmp/r1" >"$tmp/out1" 2>"$tmp/err1" &&
   $PY - "$tmp/out1" <<'EOF'
import re, sys
out = open(sys.argv[1]).read().splitlines()
head = [i for i, l in enumerate(out) if l.split()[:4] == ["candidate", "threads", "max_num_seqs", "max_num_batched_tokens"]]
assert len(head) == 1, out
rows = [l.split() for l in out[head[0] + 1:head[0] + 5]]
want = [("1", "2", "512"), ("1", "2", "1024"), ("1", "4", "512"), ("1", "4", "1024")]
for i, (r, w) in enumerate(zip(rows, want)):
    assert r[0] == str(i + 1) and tuple(r[1:4]) == w, (r, w)
    vals = [float(x) for x in r[4:10]]          # req/s, tok/s, 4 p99s
    assert vals[0] > 0 and vals[1] > 0 and all(v >= 0 for v in vals), r
    assert r[10] == "yes", r
best = max(range(4), key=lambda i: float(rows[i][4]))
assert rows[best][11:] == ["(best)"], rows
line = [l for l in out if l.startswith("best: ")]
assert len(line) == 1, out
m = re.match(r"best: --max-num-seqs (\d+) --max-num-batched-tokens (\d+) --threads 1  \(([0-9.]+) req/s", line[0])
assert m and (m.group(1), m.group(2)) == want[best][1:], (line, want[best])
assert abs(float(m.group(3)) - float(rows[best][4])) < 1e-3, line
EOF
then ok bench_tune_table
else fail bench_tune_table "$(cat "$tmp/out1" "$tmp/err1" | tail -20)"
fi

# 2. an SLO no configuration meets
"$VLLMC" bench tune "${common[@]}" --slo "e2el_p99_ms=0.000001" --max-num-seqs 2 --max-num-batched-tokens 512 \
  --result-dir "$tmp/r2" >"$tmp/out2" 2>"$tmp/err2"
rc=$?
if [ $rc -eq 1 ] && grep -q "^no configuration met the SLO (e2el_p99_ms=0.000001)$" "$tmp/out2" &&
   grep -Eq '^ +1 +1 +2 +512 +[0-9.]+ .* no$' "$tmp/out2"; then
  ok bench_tune_impossible_slo
else
  fail bench_tune_impossible_slo "status $rc: $(cat "$tmp/out2" "$tmp/err2" | tail -10)"
fi

# 3. malformed --slo strings: status 2, the bad item named, nothing started
bad_ok=1
for slo in "e2el_p99=500" "e2el_p99_ms=" "e2el_p99_ms=-3" "latency=5" "e2el_p99_ms=abc" ", ,"; do
  "$VLLMC" bench tune "${common[@]}" --slo "$slo" --result-dir "$tmp/r3" >"$tmp/out3" 2>"$tmp/err3"
  rc=$?
  item=${slo%%,*}
  if [ $rc -ne 2 ] || ! grep -q "argument --slo: '" "$tmp/err3" || [ -e "$tmp/r3" ] ||
     { [ -n "${item// /}" ] && ! grep -qF "'$item'" "$tmp/err3"; }; then
    bad_ok=0
    fail bench_tune_bad_slo "--slo '$slo': status $rc: $(cat "$tmp/err3")"
    break
  fi
done
[ $bad_ok -eq 1 ] && ok bench_tune_bad_slo
