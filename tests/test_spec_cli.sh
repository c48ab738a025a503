#!/usr/bin/env bash
# test_spec_cli.sh - --speculative-config through `vllmc generate` and
# `vllmc serve` on the bundled stories260K. Expected values: the same
# requests without the flag (speculation must not change a token, greedy or
# seeded), and the key each bad configuration names. Prints "ok NAME" /
# "FAIL NAME: why".
# checks: 6
set -uo pipefail
cd "$(dirname "$0")/.."
VLLMC=${VLLMC:-build/vllmc}
PY=/usr/bin/python3
export VLLM_LOGGING_LEVEL=WARNING
tmp=$(mktemp -d)
source tests/server_helpers.sh
trap 'server_stop_all; rm -rf "$tmp"' EXIT

ok() { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; }

# 1. bad configurations: a start-up error naming the key and the accepted values
bad_ok=1 why=
check_bad() { # JSON, then a string the message must contain
  if "$VLLMC" generate --max-tokens 2 --speculative-config "$1" >/dev/null 2>"$tmp/err"; then
    bad_ok=0 why="accepted $1"; return
  fi
  grep -qF -- "$2" "$tmp/err" || { bad_ok=0 why="$1: '$(head -1 "$tmp/err")' lacks '$2'"; }
}
check_bad '{"method":"eagle","num_speculative_tokens":2}' "method 'eagle' is not supported by vllm.c yet (accepted: 'ngram', 'draft_model')"
check_bad '{"method":"draft_model","model":"m","num_speculative_tokens":2}' "speculative_config.model: m/config.json: cannot open"
check_bad '{"method":"draft_model","num_speculative_tokens":2}' "method 'draft_model' needs \"model\""
check_bad '{"method":"magic","num_speculative_tokens":2}' "method 'magic' is unknown (accepted: 'ngram', 'draft_model')"
check_bad '{"method":"ngram"}' "num_speculative_tokens is required"
check_bad '{"method":"ngram","num_speculative_tokens":0}' "num_speculative_tokens=0: expected an integer in 1..128"
check_bad '{"method":"ngram","num_speculative_tokens":2,"prompt_lookup_min":4,"prompt_lookup_max":3}' "prompt_lookup_min=4 must be <= prompt_lookup_max=3"
check_bad '{"method":"ngram","num_speculative_tokens":2,"disable_by_batch_size":1}' "disable_by_batch_size=1"
check_bad '{"method":"ngram","num_speculative_tokens":2,"foo":1}' "unknown key 'foo'"
check_bad 'ngram' "expected a JSON object"
check_bad '{"method":"ngram","num_speculative_tokens":2,"adaptive":1}' "adaptive must be true or false"
check_bad '{"method":"draft_model","model":"m","num_speculative_tokens":2,"draft_token_acceptance_method":"typical_acceptance_sampler"}' \
  "draft_token_acceptance_method must be 'rejection_sampler' (vLLM's) or 'exact'"
if [ $bad_ok = 1 ]; then ok spec_config_errors; else fail spec_config_errors "$why"; fi

# 2. serve refuses a bad configuration before it listens
if timeout 20 "$VLLMC" serve --port 0 --speculative-config '{"method":"eagle3","num_speculative_tokens":2}' \
     >/dev/null 2>"$tmp/err"; then
  fail serve_spec_config_error "serve started"
elif grep -qF "method 'eagle3'" "$tmp/err"; then ok serve_spec_config_error
else fail serve_spec_config_error "$(head -2 "$tmp/err")"; fi

# 3. the same ids and text with and without speculation: greedy and seeded,
#    several prompts at once, a passage to repeat
$PY - "$tmp/prompts.jsonl" <<'EOF'
import json, sys
passage = "Lily and Tom went to the park. They saw a big dog. The dog was happy. "
with open(sys.argv[1], "w") as f:
    for i in range(8):
        line = {"prompt": passage * (1 + i % 3) + "Lily and Tom", "max_tokens": 40 + 4 * i, "ignore_eos": True}
        if i % 2: line.update(temperature=0.8, seed=100 + i)
        else: line.update(temperature=0, logprobs=2)
        f.write(json.dumps(line) + "\n")
EOF
SPEC='{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_min":1,"prompt_lookup_max":3}'
"$VLLMC" generate --prompts-file "$tmp/prompts.jsonl" --json --stats >"$tmp/ref.json" 2>"$tmp/ref.err"
if "$VLLMC" generate --prompts-file "$tmp/prompts.jsonl" --json --stats --speculative-config "$SPEC" \
     >"$tmp/spec.json" 2>"$tmp/spec.err" &&
   $PY - "$tmp/ref.json" "$tmp/spec.json" "$tmp/ref.err" "$tmp/spec.err" <<'EOF'
import json, sys
ref = [json.loads(l) for l in open(sys.argv[1])]
spec = [json.loads(l) for l in open(sys.argv[2])]
assert len(ref) == len(spec) == 8
for i, (a, b) in enumerate(zip(ref, spec)):
    assert a["outputs"] == b["outputs"], f"request {i} differs with speculation"
last = lambda p: json.loads([l for l in open(p) if l.startswith("{")][-1])
r, s = last(sys.argv[3]), last(sys.argv[4])
assert "spec_decode_num_drafts" not in r, r
d, t, acc = s["spec_decode_num_drafts"], s["spec_decode_num_draft_tokens"], s["spec_decode_num_accepted_tokens"]
assert 0 < acc <= t and d <= t <= 4 * d, s
assert abs(s["mean_acceptance_length"] - (1 + acc / d)) < 1e-3, s
assert s["num_steps"] < r["num_steps"], (s["num_steps"], r["num_steps"])
EOF
then ok generate_spec_same_outputs; else fail generate_spec_same_outputs "$(tail -3 "$tmp/spec.err")"; fi

# 4. disable_by_batch_size 2 with 8 requests running: no drafts at first
if "$VLLMC" generate --prompts-file "$tmp/prompts.jsonl" --json --stats \
     --speculative-config '{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_min":1,"disable_by_batch_size":9}' \
     >"$tmp/d9.json" 2>"$tmp/d9.err" &&
   "$VLLMC" generate --prompts-file "$tmp/prompts.jsonl" --json --stats \
     --speculative-config '{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_min":1,"disable_by_batch_size":2}' \
     >"$tmp/d2.json" 2>"$tmp/d2.err" &&
   cmp -s "$tmp/ref.json" "$tmp/d2.json" && cmp -s "$tmp/ref.json" "$tmp/d9.json" &&
   $PY - "$tmp/d9.err" "$tmp/d2.err" <<'EOF'
import json, sys
last = lambda p: json.loads([l for l in open(p) if l.startswith("{")][-1])
d9, d2 = last(sys.argv[1]), last(sys.argv[2])
# 8 requests of 40..68 tokens: with a threshold of 2, only the last one left
# running drafts; with 9, every one does
assert d9["spec_decode_num_drafts"] > d2["spec_decode_num_drafts"], (d9, d2)
EOF
then ok generate_disable_by_batch_size; else fail generate_disable_by_batch_size "$(tail -3 "$tmp/d2.err")"; fi

# 5. the adaptive k (spec/spec_policy.h, the default): one greedy request whose
#    n-gram drafts mostly miss drafts fewer tokens than with "adaptive": false
#    (k every step), and the output is the same
P1='{"prompt":"Once upon a time","max_tokens":96,"temperature":0,"ignore_eos":true}'
echo "$P1" > "$tmp/one.jsonl"
if "$VLLMC" generate --prompts-file "$tmp/one.jsonl" --json --stats \
     --speculative-config '{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_min":1}' >"$tmp/ad.json" 2>"$tmp/ad.err" &&
   "$VLLMC" generate --prompts-file "$tmp/one.jsonl" --json --stats \
     --speculative-config '{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_min":1,"adaptive":false}' \
     >"$tmp/fx.json" 2>"$tmp/fx.err" && cmp -s "$tmp/ad.json" "$tmp/fx.json" &&
   $PY - "$tmp/ad.err" "$tmp/fx.err" <<'EOF2'
import json, sys
last = lambda p: json.loads([l for l in open(p) if l.startswith("{")][-1])
a, f = last(sys.argv[1]), last(sys.argv[2])
assert f["spec_decode_num_accepted_tokens"] * 3 < f["spec_decode_num_draft_tokens"], f   # mostly misses
assert 0 < a["spec_decode_num_draft_tokens"] * 2 < f["spec_decode_num_draft_tokens"], (a, f)
EOF2
then ok generate_adaptive_k; else fail generate_adaptive_k "$(grep '^{' "$tmp/ad.err" | tail -1) vs $(grep '^{' "$tmp/fx.err" | tail -1)"; fi

# 6. serve: the completion equals generate's without speculation; /metrics has
#    vLLM's counters (accepted = the per-position sum, <= drafted); the log
#    has the SpecDecoding line
P="Lily and Tom went to the park. Lily and Tom went to the park. Lily and Tom"
"$VLLMC" generate --prompt "$P" --max-tokens 60 --temperature 0 --json >"$tmp/gen.json" 2>"$tmp/err"
if VLLM_LOGGING_LEVEL=INFO VLLM_LOG_STATS_INTERVAL=0.3 server_start S models/stories260K \
     --served-model-name m --speculative-config "$SPEC"; then
  req POST "$S_URL/v1/completions" "{\"model\":\"m\",\"prompt\":\"$P\",\"max_tokens\":60,\"temperature\":0}"
  echo "$BODY" >"$tmp/serve.json"
  sleep 0.8
  req GET "$S_URL/metrics"
  echo "$BODY" >"$tmp/metrics.txt"
  if $PY - "$tmp/gen.json" "$tmp/serve.json" "$tmp/metrics.txt" "$S_LOG" <<'EOF'
import json, re, sys
gen = json.loads(open(sys.argv[1]).read())["outputs"][0]["text"]
srv = json.loads(open(sys.argv[2]).read())["choices"][0]["text"]
assert gen == srv, (gen, srv)
m = {}
for line in open(sys.argv[3]):
    g = re.match(r'(vllm:spec_decode_\w+_total)\{([^}]*)\} (\S+)', line)
    if g: m[(g[1], g[2])] = float(g[3])
lab = 'engine="0",model_name="m"'
d = m[("vllm:spec_decode_num_drafts_total", lab)]
t = m[("vllm:spec_decode_num_draft_tokens_total", lab)]
a = m[("vllm:spec_decode_num_accepted_tokens_total", lab)]
pos = [m[("vllm:spec_decode_num_accepted_tokens_per_pos_total", lab + f',position="{j}"')] for j in range(4)]
assert 0 < d <= t <= 4 * d and 0 < a <= t and sum(pos) == a, (d, t, a, pos)
assert any("SpecDecoding metrics: Mean acceptance length: " in l for l in open(sys.argv[4])), "no log line"
EOF
  then ok serve_spec_metrics; else fail serve_spec_metrics "see above"; fi
else
  fail serve_spec_metrics "the server did not start"
fi
