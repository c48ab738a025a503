#!/usr/bin/env bash
# test_engine_cli.sh - `vllmc generate` end to end on the bundled stories260K.
# Expected values: llama2.c's greedy ids (reference_bos_greedy200.json), text
# cut at stop strings by Python's str.find, and the same requests run one at a
# time (batch invariance through the CLI). Prints "ok NAME" / "FAIL NAME: why".
# checks: 7
# tags: tsan
set -uo pipefail
cd "$(dirname "$0")/.."
VLLMC=${VLLMC:-build/vllmc}
PY=/usr/bin/python3
export VLLM_LOGGING_LEVEL=WARNING
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

ok() { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; }

# 1. greedy from BOS = llama2.c's run.c -t 0
if "$VLLMC" generate --max-tokens 200 --temperature 0 --json >"$tmp/bos.json" 2>"$tmp/err" &&
   $PY - "$tmp/bos.json" <<'EOF'
import json, sys
out = json.loads(open(sys.argv[1]).read())
ref = json.load(open("models/stories260K/reference_bos_greedy200.json"))
assert out["prompt_token_ids"] == [1], out["prompt_token_ids"]
o = out["outputs"][0]
assert o["token_ids"] == ref["greedy_ids"], "token ids differ from llama2.c"
assert o["finish_reason"] == "length"
assert ref["runc_stdout"].startswith(o["text"][:100]), o["text"][:100]
EOF
then ok generate_bos_greedy_matches_llama2c; else fail generate_bos_greedy_matches_llama2c "$(tail -3 "$tmp/err")"; fi

# 2. stop strings: the text ends right before the first "Lily", finish_reason stop
"$VLLMC" generate --prompt "Once upon a time" --max-tokens 60 --temperature 0 --json >"$tmp/full.json" 2>"$tmp/err"
"$VLLMC" generate --prompt "Once upon a time" --max-tokens 60 --temperature 0 --json --stop Lily --stop "zzz" >"$tmp/stop.json" 2>>"$tmp/err"
if $PY - "$tmp/full.json" "$tmp/stop.json" <<'EOF'
import json, sys
full = json.loads(open(sys.argv[1]).read())["outputs"][0]
stop = json.loads(open(sys.argv[2]).read())["outputs"][0]
cut = full["text"].find("Lily")
assert cut > 0, "the greedy story should name Lily"
assert stop["text"] == full["text"][:cut], (stop["text"], full["text"][:cut])
assert stop["finish_reason"] == "stop" and stop["stop_reason"] == "Lily", stop
n = len(stop["token_ids"])
assert stop["token_ids"] == full["token_ids"][:n] and n < len(full["token_ids"])
EOF
then ok generate_stop_string; else fail generate_stop_string "$(tail -3 "$tmp/err")"; fi

# 3. a prompts file: all requests at once, outputs in input order, each equal to
#    the same request run alone; priorities, n and salts accepted per line
$PY - "$tmp/prompts.jsonl" <<'EOF'
import json, random, sys
random.seed(7)
common = [random.randrange(3, 512) for _ in range(100)]
with open(sys.argv[1], "w") as f:
    for i in range(24):
        if i % 3 == 0:
            line = {"prompt": ["Once upon a time", "The cat", "Lily and Tom went", "One day"][i % 4] * (1 + i % 3)}
        else:
            ids = (common[: random.randrange(0, 100)] if i % 2 else []) + [random.randrange(3, 512) for _ in range(random.randrange(1, 40))]
            line = {"prompt_token_ids": [1] + ids}
        line["max_tokens"] = 5 + (i * 7) % 30
        line["temperature"] = 0
        line["ignore_eos"] = True
        line["priority"] = i % 3
        if i % 5 == 0:
            line.update(temperature=0.8, seed=100 + i, n=2)
        if i % 7 == 0:
            line["cache_salt"] = "s%d" % (i % 2)
        f.write(json.dumps(line) + "\n")
EOF
engine_flags="--max-model-len 256 --num-gpu-blocks-override 24 --max-num-seqs 16 --max-num-batched-tokens 64 --long-prefill-token-threshold 7 --scheduling-policy priority"
"$VLLMC" generate --prompts-file "$tmp/prompts.jsonl" --json --stats $engine_flags >"$tmp/batch.json" 2>"$tmp/stats.txt"
rc=$?
: >"$tmp/alone.json"
i=0
while IFS= read -r line; do
  echo "$line" >"$tmp/one.jsonl"
  "$VLLMC" generate --prompts-file "$tmp/one.jsonl" --json --max-model-len 256 >>"$tmp/alone.json" 2>>"$tmp/err" || echo "run $i failed" >>"$tmp/err"
  i=$((i + 1))
done <"$tmp/prompts.jsonl"
if [ $rc -eq 0 ] && $PY - "$tmp/prompts.jsonl" "$tmp/batch.json" "$tmp/alone.json" "$tmp/stats.txt" <<'EOF'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
batch = [json.loads(l) for l in open(sys.argv[2])]
alone = [json.loads(l) for l in open(sys.argv[3])]
stats = json.loads([l for l in open(sys.argv[4]) if l.startswith("{")][-1])
assert len(batch) == len(lines) == len(alone), (len(batch), len(lines), len(alone))
for i, (l, b, a) in enumerate(zip(lines, batch, alone)):
    if "prompt_token_ids" in l:
        assert b["prompt_token_ids"] == l["prompt_token_ids"], "request %d out of order" % i
    assert len(b["outputs"]) == l.get("n", 1)
    for x, y in zip(b["outputs"], a["outputs"]):
        assert x["token_ids"] == y["token_ids"], "request %d output %d differs batched vs alone" % (i, x["index"])
        assert x["text"] == y["text"]
        assert len(x["token_ids"]) == l["max_tokens"]
for k in ["num_steps", "num_preemptions", "prefix_cache_queries", "prefix_cache_hits",
          "max_tokens_in_step", "max_seqs_in_step", "num_blocks_total", "num_blocks_free_at_end"]:
    assert k in stats, k
assert stats["num_blocks_total"] == 24 and stats["num_blocks_free_at_end"] == 24, stats
assert stats["num_preemptions"] > 0, "a 24-block pool should preempt: %s" % stats
assert stats["max_tokens_in_step"] <= 64 and stats["max_seqs_in_step"] > 1, stats
EOF
then ok generate_prompts_file_batched_equals_alone; else fail generate_prompts_file_batched_equals_alone "exit $rc; $(tail -3 "$tmp/err")"; fi

# 4. prefix caching through the CLI: the second request reuses a 10-block prefix
$PY - "$tmp/prefix.jsonl" <<'EOF'
import json, sys
pre = [3 + (i * 53) % 500 for i in range(160)]
with open(sys.argv[1], "w") as f:
    for tail in ([7, 8, 9], [10, 11, 12, 13]):
        f.write(json.dumps({"prompt_token_ids": pre + tail, "max_tokens": 4, "temperature": 0}) + "\n")
EOF
"$VLLMC" generate --prompts-file "$tmp/prefix.jsonl" --json --stats --max-num-seqs 1 --max-num-batched-tokens 256 >"$tmp/p.json" 2>"$tmp/ps.txt"
"$VLLMC" generate --prompts-file "$tmp/prefix.jsonl" --json --stats --max-num-seqs 1 --max-num-batched-tokens 256 --no-enable-prefix-caching >"$tmp/pn.json" 2>"$tmp/pns.txt"
if $PY - "$tmp/ps.txt" "$tmp/pns.txt" "$tmp/p.json" "$tmp/pn.json" <<'EOF'
import json, sys
s = json.loads([l for l in open(sys.argv[1]) if l.startswith("{")][-1])
n = json.loads([l for l in open(sys.argv[2]) if l.startswith("{")][-1])
assert s["prefix_cache_hits"] == 160 and s["prefix_cache_queries"] == 163 + 164, s
assert n["prefix_cache_hits"] == 0 and n["prefix_cache_queries"] == 0, n
assert open(sys.argv[3]).read() == open(sys.argv[4]).read(), "outputs differ with the cache on"
EOF
then ok generate_prefix_cache_stats; else fail generate_prefix_cache_stats "$(cat "$tmp/ps.txt" | tail -2)"; fi

# 5. seeds: same seed, same sample; n = 2 gives two different samples
a=$("$VLLMC" generate --prompt "The dog" --max-tokens 20 --seed 42 --json 2>/dev/null)
b=$("$VLLMC" generate --prompt "The dog" --max-tokens 20 --seed 42 --json 2>/dev/null)
c=$("$VLLMC" generate --prompt "The dog" --max-tokens 20 --seed 42 --n 2 --json 2>/dev/null)
if [ -n "$a" ] && [ "$a" = "$b" ] && $PY -c '
import json, sys
a = json.loads(sys.argv[1]); c = json.loads(sys.argv[2])
assert c["outputs"][0]["token_ids"] == a["outputs"][0]["token_ids"]
assert c["outputs"][1]["token_ids"] != a["outputs"][0]["token_ids"]' "$a" "$c"
then ok generate_seeded; else fail generate_seeded "seeded runs differ"; fi

# 6. bad input: a clear message and a non-zero exit
"$VLLMC" generate --max-tokens abc >/dev/null 2>"$tmp/e1"; r1=$?
printf '{"prompt": "x"}\n{"prompt": 5}\n' >"$tmp/bad.jsonl"
"$VLLMC" generate --prompts-file "$tmp/bad.jsonl" >/dev/null 2>"$tmp/e2"; r2=$?
"$VLLMC" generate --model /nonexistent >/dev/null 2>"$tmp/e3"; r3=$?
"$VLLMC" generate --num-gpu-blocks-override 2 >/dev/null 2>"$tmp/e4"; r4=$?
"$VLLMC" generate --bogus >/dev/null 2>"$tmp/e5"; r5=$?
if [ $r1 -eq 2 ] && grep -q "max-tokens" "$tmp/e1" && [ $r2 -eq 1 ] && grep -q "bad.jsonl:2" "$tmp/e2" &&
   [ $r3 -ne 0 ] && grep -q nonexistent "$tmp/e3" && [ $r4 -eq 1 ] && grep -q "max seq len" "$tmp/e4" &&
   [ $r5 -eq 2 ]; then
  ok generate_bad_input
else
  fail generate_bad_input "exits $r1 $r2 $r3 $r4 $r5: $(cat "$tmp/e1" "$tmp/e2" "$tmp/e3" "$tmp/e4" | tr '\n' ' ')"
fi

# 7. --kv-cache-dtype: each value runs (the 16-bit types and float32 still give llama2.c's
# 200 greedy ids on this model; FP8 is only required to run to the end), the log line names
# what the pool stores and its bytes per token (5 layers x 4 KV heads x 8 x 2 (K, V) elements);
# an unknown value is refused naming the accepted ones (also with --flag=value)
bad=""
for spec in float32:float32:1280:same bfloat16:bfloat16:640:same auto:bfloat16:640:same float16:float16:640:same \
            fp8:fp8_e4m3:320:runs fp8_e4m3:fp8_e4m3:320:runs fp8_e5m2:fp8_e5m2:320:runs; do
  IFS=: read -r value storage bytes want <<< "$spec"
  if ! VLLM_LOGGING_LEVEL=INFO "$VLLMC" generate --max-tokens 200 --temperature 0 --json --kv-cache-dtype "$value" \
       >"$tmp/kv.json" 2>"$tmp/kv.err"; then bad="$bad $value: exit $?;"; continue; fi
  grep -q "$storage: $bytes bytes per token; --kv-cache-dtype $value)" "$tmp/kv.err" ||
    bad="$bad $value: no '$storage: $bytes bytes per token' in the log;"
  $PY - "$tmp/kv.json" "$want" <<'PY' || bad="$bad $value: output;"
import json, sys
o = json.loads(open(sys.argv[1]).read())["outputs"][0]
ref = json.load(open("models/stories260K/reference_bos_greedy200.json"))["greedy_ids"]
assert len(o["token_ids"]) == 200 and o["finish_reason"] == "length"
assert sys.argv[2] != "same" or o["token_ids"] == ref
PY
done
"$VLLMC" generate --kv-cache-dtype=fp16 >/dev/null 2>"$tmp/kv.err"; r=$?
if [ $r -ne 2 ] || ! grep -q "argument --kv-cache-dtype: invalid value 'fp16': choose from 'auto', 'bfloat16', 'float16', 'float32', 'fp8', 'fp8_e4m3', 'fp8_e5m2'" "$tmp/kv.err"; then
  bad="$bad fp16: exit $r, $(head -1 "$tmp/kv.err");"
fi
if [ -z "$bad" ]; then ok generate_kv_cache_dtype; else fail generate_kv_cache_dtype "$bad"; fi
