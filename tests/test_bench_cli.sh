#!/usr/bin/env bash
# test_bench_cli.sh - `vllmc bench latency` and `vllmc bench throughput` end to
# end on the bundled stories260K: vLLM's printed labels, figures that parse and
# are positive, token totals equal to what was asked (input_len x num_prompts,
# output_len x num_prompts x n), printed percentiles equal to numpy's over the
# latencies written by --output-json, and printed floats as Python's repr;
# build/bench/bench_forward --context's KV cache dtype table on a toy run;
# bench_forward's chunked prefill: the logits do not depend on --chunk.
# checks: 12
set -uo pipefail
cd "$(dirname "$0")/.."
VLLMC=${VLLMC:-build/vllmc}
PY=/usr/bin/python3
export VLLM_LOGGING_LEVEL=WARNING
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok() { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; }

# 1. latency: labels, numpy percentiles of the JSON latencies, Python float repr
if "$VLLMC" bench latency --input-len 8 --output-len 8 --batch-size 2 --num-iters-warmup 1 --num-iters 4 \
     --output-json "$tmp/lat.json" >"$tmp/lat.out" 2>"$tmp/err" &&
   $PY - "$tmp/lat.out" "$tmp/lat.json" <<'EOF'
import json, re, sys
import numpy as np
out = open(sys.argv[1]).read().splitlines()
j = json.load(open(sys.argv[2]))
lat = np.array(j["latencies"])
assert len(lat) == 4 and (lat > 0).all(), lat
avg = [l for l in out if l.startswith("Avg latency: ")]
assert avg == [f"Avg latency: {np.mean(lat)} seconds"], (avg, np.mean(lat))
for p in (10, 25, 50, 75, 90, 99):
    want = f"{p}% percentile latency: {np.percentile(lat, p)} seconds"
    assert want in out, (want, out)
    assert abs(j["percentiles"][str(p)] - np.percentile(lat, p)) < 1e-12
assert abs(j["avg_latency"] - np.mean(lat)) < 1e-12
EOF
then ok bench_latency_labels_and_numpy_percentiles; else fail bench_latency_labels_and_numpy_percentiles "$(tail -3 "$tmp/err")"; fi

# 2. throughput: token totals, n > 1, rates consistent with the JSON's elapsed time
check_tp() { # NAME PROMPT_TOKENS OUTPUT_TOKENS NUM_PROMPTS args...
  local name=$1 pt=$2 ot=$3 np=$4; shift 4
  if "$VLLMC" bench throughput --output-json "$tmp/tp.json" --num-prompts "$np" "$@" >"$tmp/tp.out" 2>"$tmp/err" &&
     $PY - "$tmp/tp.out" "$tmp/tp.json" "$pt" "$ot" "$np" <<'EOF'
import json, re, sys
out = open(sys.argv[1]).read()
j = json.load(open(sys.argv[2]))
pt, ot, n = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
m = re.search(r"^Throughput: ([0-9.]+) requests/s, ([0-9.]+) total tokens/s, ([0-9.]+) output tokens/s$", out, re.M)
assert m, out
rps, tps, ops = map(float, m.groups())
assert re.search(rf"^Total num prompt tokens:  {pt}$", out, re.M), out
assert re.search(rf"^Total num output tokens:  {ot}$", out, re.M), out
t = j["elapsed_time"]
assert t > 0 and j["num_requests"] == n and j["total_num_tokens"] == pt + ot, j
for got, want in ((rps, n / t), (tps, (pt + ot) / t), (ops, ot / t)):
    assert got > 0 and abs(got - want) <= 0.006 + 1e-9 * want, (got, want)
EOF
  then ok "$name"; else fail "$name" "$(tail -3 "$tmp/err")"; fi
}
check_tp bench_throughput_token_totals 80 40 5 --input-len 16 --output-len 8
check_tp bench_throughput_n2_prefix 100 80 5 --input-len 16 --output-len 8 --n 2 --prefix-len 4
# vLLM's --disable-detokenize: the same totals without text
check_tp bench_throughput_disable_detokenize 80 40 5 --input-len 16 --output-len 8 --disable-detokenize
if "$VLLMC" bench latency --input-len 8 --output-len 8 --batch-size 2 --num-iters-warmup 0 --num-iters 2 \
     --disable-detokenize >"$tmp/lat.out" 2>"$tmp/err" && grep -q '^Avg latency: ' "$tmp/lat.out"
then ok bench_latency_disable_detokenize; else fail bench_latency_disable_detokenize "$(tail -3 "$tmp/err")"; fi

# 3. range ratio: totals within the drawn bounds, and not all equal to the mean
if "$VLLMC" bench throughput --num-prompts 20 --input-len 20 --output-len 10 --random-range-ratio 0.5 \
     --seed 3 >"$tmp/rr.out" 2>"$tmp/err" &&
   $PY - "$tmp/rr.out" <<'EOF'
import re, sys
out = open(sys.argv[1]).read()
pt = int(re.search(r"Total num prompt tokens:  (\d+)", out).group(1))
ot = int(re.search(r"Total num output tokens:  (\d+)", out).group(1))
assert 20 * 10 <= pt <= 20 * 30 and 20 * 5 <= ot <= 20 * 15, (pt, ot)
assert (pt, ot) != (400, 200), "range ratio had no effect"
EOF
then ok bench_throughput_range_ratio; else fail bench_throughput_range_ratio "$(tail -3 "$tmp/err")"; fi

# 4. bad input is a clear error with exit status 2, not a crash
bad=
for args in "latency --input-len 0" "throughput --dataset-name sharegpt" "throughput --random-range-ratio x" \
            "latency --bogus" "serve --request-rate 0" "serve --goodput ttft" "serve --backend hf" \
            "serve --backend openai-chat" "serve --metric-percentiles 100" "throughput --num-prompts 0" \
            "throughput --disable-detokenize=1" \
            "throughput --n=x" "latency --num-iters" "serve --max-concurrency 0" "serve --top-k -2"; do
  # shellcheck disable=SC2086
  "$VLLMC" bench $args >"$tmp/o" 2>"$tmp/e"; rc=$?
  if [ $rc -ne 2 ] || [ ! -s "$tmp/e" ]; then fail bench_bad_args "'$args' gave status $rc: $(cat "$tmp/e")"; bad=1; fi
done
[ -z "$bad" ] && ok bench_bad_args
# too long for the model is the engine's error, status 1
if "$VLLMC" bench latency --input-len 500 --output-len 100 --num-iters-warmup 0 --num-iters 1 >"$tmp/o" 2>"$tmp/e"; then
  fail bench_latency_too_long "accepted 600 tokens on a 512-token model"
elif grep -q . "$tmp/e"; then ok bench_latency_too_long; else fail bench_latency_too_long "no message"; fi

# 5. the KV cache line (ours, after vLLM's), computed by hand: one 16-token
# prompt, 3 outputs, a pool of 100 blocks of 16. End of step 1: 1 block, 16
# computed (0 empty); step 2: 17 computed in 2 blocks (15 empty); step 3: the
# third token finishes it, blocks freed (0, 0). Peak 2 blocks = 2.0%; wasted
# 15 of 16 + 32 = 48 allocated slot-steps = 31.25%; at the peak 15 of 1600
# pool slots = 0.94%. --ignore-eos is accepted (always on).
if "$VLLMC" bench throughput --num-prompts 1 --input-len 16 --output-len 3 --num-gpu-blocks-override 100 \
     --ignore-eos >"$tmp/kv.out" 2>"$tmp/err" &&
   grep -qx "KV cache: peak usage 2.0% of 100 blocks, wasted slots 31.25% of allocated (0.94% of the pool at peak)" "$tmp/kv.out"
then ok bench_throughput_kv_line; else fail bench_throughput_kv_line "$(cat "$tmp/kv.out") $(tail -3 "$tmp/err")"; fi
# a shared prompt with no per-request part (vLLM's --prefix-len P --input-len 0)
check_tp bench_throughput_prefix_only 256 32 8 --input-len 0 --prefix-len 32 --output-len 4 --ignore-eos

# 6. bench_forward --context (the KV cache dtype benchmark, docs/bench.md) on a toy run:
# one row per type with the bytes per token of stories260K (5 layers x 4 KV heads x 8 x
# K and V x the type's size), a positive rate at each context, ratios against the first
bf=${BUILD_DIR:-build}/bench/bench_forward
if "$bf" --model models/stories260K --context 32,64 --kv-cache-dtype float32,bfloat16,fp8 --decode 4 --repeat 1 \
     >"$tmp/bf.out" 2>"$tmp/err" &&
   $PY - "$tmp/bf.out" <<'EOF'
import sys
rows = [l.split() for l in open(sys.argv[1]) if l.split()[:1] in (["float32"], ["bfloat16"], ["fp8_e4m3"])]
assert [(r[0], r[1]) for r in rows] == [("float32", "1280"), ("bfloat16", "640"), ("fp8_e4m3", "320")], rows
for r in rows:
    cells = " ".join(r[2:]).split("|")[1:]
    assert len(cells) == 2, r
    for c in cells:
        f = c.split()  # KV/step MB tok/s ratio CPU-ms ratio
        assert float(f[2]) > 0 and f[3].endswith("x") and f[5].endswith("x"), r
assert rows[0][2:].count("1.00x") == 4, rows[0]
EOF
then ok bench_forward_kv_cache_dtypes; else fail bench_forward_kv_cache_dtypes "$(tail -4 "$tmp/bf.out") $(tail -3 "$tmp/err")"; fi

# 7. bench_forward's chunked prefill (--chunk: forwards of at most that many tokens, walking
# the sequences in order): 3 x 40 prompt tokens in 1 forward (chunk 1000), ceil(120 / 16) = 8,
# ceil(120 / 7) = 18 (chunks spanning two prompts); each prompt's last logits the same bits
if for c in 1000 16 7; do "$bf" --model models/stories260K --batch 3 --prefill 40 --decode 2 --chunk $c --threads 2 \
       2>>"$tmp/err" || exit 1; done >"$tmp/chunk.out" &&
   [ "$(sed -n 's/^run 1: prefill 3 x 40 tokens (\([0-9]*\) forwards of <= \([0-9]*\)).*/\1:\2/p' "$tmp/chunk.out" | tr '\n' ' ')" \
     = "1:1000 8:16 18:7 " ] &&
   [ "$(grep -c '^prefill logits hash ' "$tmp/chunk.out")" = 3 ] &&
   [ "$(grep '^prefill logits hash ' "$tmp/chunk.out" | sort -u | wc -l)" = 1 ]
then ok bench_forward_chunked_prefill; else fail bench_forward_chunked_prefill "$(cat "$tmp/chunk.out") $(tail -3 "$tmp/err")"; fi
