#!/usr/bin/env bash
# test_metrics.sh - /metrics against independent references:
#   - number formatting against Python prometheus_client's floatToGoString;
#   - random engine traces (tests/ref/metrics_ref.py --generate SEED: chunked
#     prefill, preemptions, n > 1 forks, aborts, releases, HTTP exchanges,
#     hidden metrics on odd seeds, an escaped model name every third) rendered
#     by our code and by the reference (vLLM's interval definitions, exported
#     by prometheus_client, the library vLLM uses): the same families, samples
#     and bytes, _created times and process_* values aside;
#   - `promtool check metrics` (Debian's prometheus) on our output: it must
#     parse, and the only lint findings allowed are vLLM's own naming (colons
#     in names, a histogram called iteration_tokens_total).
# Prints "ok NAME" / "FAIL NAME: reason" lines for tests/run.sh.
# checks: 14
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-$PWD/build}
drv="$BUILD_DIR/tests/test_metrics"
py=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [ ! -x "$drv" ]; then echo "FAIL metrics_deps: $drv not built"; exit 0; fi
if ! $py -c 'import prometheus_client' 2>/dev/null; then
  echo "FAIL metrics_deps: python3-prometheus-client missing (scripts/setup.sh installs it)"; exit 0
fi
if ! command -v promtool >/dev/null; then
  echo "FAIL metrics_deps: promtool missing (Debian package prometheus; scripts/setup.sh)"; exit 0
fi

# ---- numbers ---------------------------------------------------------------
$py - > "$tmp/nums" <<'EOF'
import random
r = random.Random(7)
xs = [0.0, 1.0, 0.1, 1e-05, 1e16, 1e22, 999999.0, 1000000.0, 1234567.5, 12345678901.0, 5e-324,
      1.7976931348623157e308, 2560.0, 0.30000000000000004, -3.5, -1234567.0]
xs += [r.uniform(0, 1) for _ in range(300)] + [r.uniform(0, 1e7) for _ in range(300)]
xs += [float(r.randint(0, 10**12)) for _ in range(300)] + [10 ** r.uniform(-12, 20) for _ in range(300)]
xs += [r.randint(0, 5000) / 64 for _ in range(300)]
for x in xs:
    print(repr(x))
EOF
$py -c '
import sys
from prometheus_client.utils import floatToGoString
for line in open(sys.argv[1]): print(floatToGoString(float(line)))' "$tmp/nums" > "$tmp/nums.want"
"$drv" --format-doubles < "$tmp/nums" > "$tmp/nums.got"
if cmp -s "$tmp/nums.want" "$tmp/nums.got"; then echo "ok metrics_format_doubles_like_prometheus_client"
else echo "FAIL metrics_format_doubles_like_prometheus_client: $(diff "$tmp/nums.want" "$tmp/nums.got" | head -4 | tr '\n' ' ')"; fi

# ---- traces ------------------------------------------------------------------
# Families as blocks sorted by name; _created values blanked; process_* dropped.
normalize() {
  $py -c '
import re, sys
blocks, cur = [], None
for line in open(sys.argv[1]):
    if line.startswith("# HELP "):
        cur = [line]; blocks.append(cur)
    elif cur is not None:
        cur.append(line)
out = []
for b in blocks:
    name = b[0].split()[2]
    if name.startswith("process_"): continue
    if name.endswith("_created"):
        b = [re.sub(r" [^ ]+\n$", " X\n", l) if not l.startswith("#") else l for l in b]
    out.append((name, "".join(b)))
sys.stdout.write("".join(t for _, t in sorted(out)))' "$1"
}

for seed in 1 2 3 4 5 6; do
  name="metrics_trace_matches_reference_seed$seed"
  tl="$tmp/trace$seed.json"
  if ! $py tests/ref/metrics_ref.py --generate "$seed" > "$tl"; then echo "FAIL $name: generator"; continue; fi
  if ! "$drv" --timeline "$tl" > "$tmp/ours$seed" 2> "$tmp/err"; then
    echo "FAIL $name: driver: $(head -3 "$tmp/err")"; continue
  fi
  if ! $py tests/ref/metrics_ref.py "$tl" > "$tmp/ref$seed" 2> "$tmp/err"; then
    echo "FAIL $name: reference: $(tail -3 "$tmp/err")"; continue
  fi
  normalize "$tmp/ours$seed" > "$tmp/ours$seed.n"
  normalize "$tmp/ref$seed" > "$tmp/ref$seed.n"
  # the trace must exercise what it is meant to
  req=$(grep -c '^vllm:request_success_total' "$tmp/ours$seed")
  if [ "$(wc -l < "$tmp/ours$seed.n")" -lt 300 ] || [ "$req" -ne 3 ]; then
    echo "FAIL $name: implausible output ($(wc -l < "$tmp/ours$seed.n") lines)"; continue
  fi
  if cmp -s "$tmp/ref$seed.n" "$tmp/ours$seed.n"; then echo "ok $name"
  else echo "FAIL $name: $(diff "$tmp/ref$seed.n" "$tmp/ours$seed.n" | head -6 | tr '\n' ' ')"; fi

  # promtool: parses; only vLLM's own names draw lint findings
  name="metrics_promtool_check_seed$seed"
  promtool check metrics < "$tmp/ours$seed" > "$tmp/lint" 2>&1
  rc=$?
  other=$(grep -v -e "metric names should not contain ':'" \
                  -e '^vllm:iteration_tokens_total non-counter metrics should not have "_total" suffix$' "$tmp/lint")
  if [ $rc -ne 0 ] && [ $rc -ne 3 ]; then echo "FAIL $name: promtool exit $rc: $(head -3 "$tmp/lint")"
  elif [ -n "$other" ]; then echo "FAIL $name: $(echo "$other" | head -3 | tr '\n' ' ')"
  else echo "ok $name"; fi
done

# The traces cover what they should, taken together.
all="$tmp/ours*[0-9]"
cover=ok
grep -hq 'vllm:num_preemptions_total{[^}]*} [1-9]' $all || cover="no preemption"
grep -hq 'finished_reason="abort",[^}]*} [1-9]' $all || cover="no abort"
grep -hq 'vllm:request_params_n_bucket{engine="0",le="2.0",[^}]*} [1-9]' $all || cover="no n > 1"
grep -hq '^# HELP vllm:gpu_cache_usage_perc' $all || cover="no hidden metrics"
grep -hq 'model_name="tiny \\"stories\\"\\\\260K"' $all || cover="no escaped label"
if [ "$cover" = ok ]; then echo "ok metrics_traces_cover_preemption_abort_n_hidden_escaping"
else echo "FAIL metrics_traces_cover_preemption_abort_n_hidden_escaping: $cover"; fi
