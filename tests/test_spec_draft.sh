#!/usr/bin/env bash
# test_spec_draft.sh - speculative decoding with a draft model
# (--speculative-config '{"method":"draft_model","model":...}') on the bundled
# stories260K. Expected values: the same requests without speculation (exact
# verification, draft_token_acceptance_method "exact", must not change a
# token, whatever the drafts), and two drafts whose acceptance follows from
# what they are:
#   - stories260K as its own draft: its greedy drafts are the target's own
#     greedy tokens (the same weights, and logits that do not depend on the
#     batch), so on greedy requests every draft is accepted; a draft cache
#     that fed a wrong token or position would show as a rejection;
#   - a random-weight model with the same vocabulary
#     (tools/make_random_model.py --tokenizer stories260K): its drafts are
#     mostly wrong, and the output must still be the target's.
# Checks:
#   self_greedy_same     greedy and seeded requests, 8 at once: the outputs without speculation
#   self_all_accepted    greedy, self-drafted: accepted == drafted, and fewer steps
#   random_same          the random draft: the outputs without speculation
#   random_rejects       ... with drafts rejected (accepted < drafted), and every KV block
#                        back in the pool at the end
#   vocab_mismatch       a draft with another vocabulary: a start-up error naming both sizes
#   serve_draft          vllmc serve with the self draft: the completion is generate's, every
#                        draft accepted in /metrics
#   self_adaptive_off    the self draft with the adaptive k (the default): its forwards cost
#                        what the target's do, so the cost model drafts nothing, and the
#                        outputs are the ones without speculation
# and with vLLM's rejection sampler (the default: sampled requests' drafts drawn
# from the draft's q under the request's temperature, accepted with
# probability min(1, p/q)):
#   self_rejection_all   self-drafted, greedy and seeded requests: q = p, so every draft is
#                        accepted (p/q = 1 >= u); the greedy outputs are the ones without speculation
#                        (the 8 sequences share each draft forward: a row given to the wrong
#                        sequence, or a wrong position, would show as a rejection)
#   random_repeats       the random draft: the same outputs twice (seeded requests repeat), the
#                        greedy ones without speculation, every KV block back in the pool
#
# checks: 9
set -uo pipefail
cd "$(dirname "$0")/.."
VLLMC=${VLLMC:-build/vllmc}
PY=/usr/bin/python3
export VLLM_LOGGING_LEVEL=WARNING
tmp=$(mktemp -d)
source tests/server_helpers.sh
trap 'server_stop_all; rm -rf "$tmp"' EXIT
M=models/stories260K

$PY - "$tmp/prompts.jsonl" <<'EOF'
import json, sys
with open(sys.argv[1], "w") as f:
    for i, p in enumerate(["Once upon a time", "Lily and Tom went to the park.", "The dog", "One day, a little"] * 2):
        line = {"prompt": p, "max_tokens": 30 + 5 * i, "ignore_eos": True}
        if i >= 4: line.update(temperature=0.8, seed=7 + i)
        else: line.update(temperature=0)
        f.write(json.dumps(line) + "\n")
    f.close()
with open(sys.argv[1] + ".greedy", "w") as f:
    for i, p in enumerate(["Once upon a time", "Lily and Tom went to the park.", "The dog", "One day, a little"]):
        f.write(json.dumps({"prompt": p, "max_tokens": 40, "temperature": 0, "ignore_eos": True}) + "\n")
EOF
stats() { grep '^{' "$1" | tail -1; }
run() { # out err [spec]
  if [ -n "${3:-}" ]; then "$VLLMC" generate --model $M --prompts-file "$PF" --json --stats --speculative-config "$3" >"$1" 2>"$2"
  else "$VLLMC" generate --model $M --prompts-file "$PF" --json --stats >"$1" 2>"$2"; fi
}
# "adaptive": false: a draft as costly as its target never pays, so the
# adaptive k (spec/spec_policy.h) would draft nothing (self_adaptive_off)
SELF="{\"method\":\"draft_model\",\"model\":\"$M\",\"num_speculative_tokens\":4,\"draft_token_acceptance_method\":\"exact\",\"adaptive\":false}"
SELFR="{\"method\":\"draft_model\",\"model\":\"$M\",\"num_speculative_tokens\":4,\"adaptive\":false}"
SELFA="{\"method\":\"draft_model\",\"model\":\"$M\",\"num_speculative_tokens\":4}"

PF=$tmp/prompts.jsonl
run "$tmp/ref.json" "$tmp/ref.err"
if run "$tmp/self.json" "$tmp/self.err" "$SELF" && cmp -s "$tmp/ref.json" "$tmp/self.json"; then ok=1; else ok=0; fi
[ $ok = 1 ] && echo "ok self_greedy_same" || echo "FAIL self_greedy_same: $(tail -2 "$tmp/self.err")"

PF=$tmp/prompts.jsonl.greedy
run "$tmp/gref.json" "$tmp/gref.err"
run "$tmp/gself.json" "$tmp/gself.err" "$SELF"
if cmp -s "$tmp/gref.json" "$tmp/gself.json" && $PY - "$(stats "$tmp/gref.err")" "$(stats "$tmp/gself.err")" <<'EOF'
import json, sys
r, s = json.loads(sys.argv[1]), json.loads(sys.argv[2])
assert s["spec_decode_num_draft_tokens"] > 0 and s["spec_decode_num_accepted_tokens"] == s["spec_decode_num_draft_tokens"], s
assert s["num_steps"] * 3 < r["num_steps"], (s["num_steps"], r["num_steps"])
EOF
then echo "ok self_all_accepted  # $(stats "$tmp/gself.err" | $PY -c 'import json,sys; s=json.load(sys.stdin); print(s["spec_decode_num_accepted_tokens"], "of", s["spec_decode_num_draft_tokens"], "drafts,", s["num_steps"], "steps")')"
else echo "FAIL self_all_accepted: $(stats "$tmp/gself.err")"; fi

# a random draft with the same vocabulary (512 tokens), and one with another (600)
$PY tools/make_random_model.py --arch llama --dtype f32 --hidden-size 32 --intermediate-size 64 --layers 2 \
  --heads 4 --kv-heads 2 --vocab-size 512 --max-pos 512 --tokenizer stories260K --seed 3 "$tmp/rand" >/dev/null 2>"$tmp/mk.err" &&
$PY tools/make_random_model.py --arch llama --dtype f32 --hidden-size 32 --intermediate-size 64 --layers 2 \
  --heads 4 --kv-heads 2 --vocab-size 600 --max-pos 512 --seed 4 "$tmp/rand600" >/dev/null 2>>"$tmp/mk.err" ||
  echo "make_random_model.py: $(tail -2 "$tmp/mk.err")" >&2
PF=$tmp/prompts.jsonl
RAND="{\"method\":\"draft_model\",\"model\":\"$tmp/rand\",\"num_speculative_tokens\":3,\"draft_token_acceptance_method\":\"exact\",\"adaptive\":false}"
RANDR="{\"method\":\"draft_model\",\"model\":\"$tmp/rand\",\"num_speculative_tokens\":3,\"adaptive\":false}"
if run "$tmp/rnd.json" "$tmp/rnd.err" "$RAND" && cmp -s "$tmp/ref.json" "$tmp/rnd.json"; then echo "ok random_same"
else echo "FAIL random_same: $(tail -2 "$tmp/rnd.err")"; fi
if $PY -c 'import json,sys; s=json.loads(sys.argv[1]); assert 0 < s["spec_decode_num_draft_tokens"] and s["spec_decode_num_accepted_tokens"] < s["spec_decode_num_draft_tokens"] and s["num_blocks_free_at_end"] == s["num_blocks_total"], s' "$(stats "$tmp/rnd.err")" 2>/dev/null
then echo "ok random_rejects  # $(stats "$tmp/rnd.err" | $PY -c 'import json,sys; s=json.load(sys.stdin); print(s["spec_decode_num_accepted_tokens"], "of", s["spec_decode_num_draft_tokens"])')"
else echo "FAIL random_rejects: $(stats "$tmp/rnd.err")"; fi

run "$tmp/selfa.json" "$tmp/selfa.err" "$SELFA"
if cmp -s "$tmp/ref.json" "$tmp/selfa.json" &&
   $PY -c 'import json,sys; s=json.loads(sys.argv[1]); assert s["spec_decode_num_drafts"] == 0, s' "$(stats "$tmp/selfa.err")" 2>/dev/null
then echo "ok self_adaptive_off"; else echo "FAIL self_adaptive_off: $(stats "$tmp/selfa.err")"; fi

# the rejection sampler: greedy lines (the first 4) as without speculation
greedy4() { head -4 "$1"; }
run "$tmp/selfr.json" "$tmp/selfr.err" "$SELFR"
if [ "$(greedy4 "$tmp/selfr.json")" = "$(greedy4 "$tmp/ref.json")" ] && ! cmp -s "$tmp/selfr.json" "$tmp/ref.json" &&
   $PY -c 'import json,sys; s=json.loads(sys.argv[1]); assert 0 < s["spec_decode_num_draft_tokens"] == s["spec_decode_num_accepted_tokens"], s' "$(stats "$tmp/selfr.err")" 2>/dev/null
then echo "ok self_rejection_all  # $(stats "$tmp/selfr.err" | $PY -c 'import json,sys; s=json.load(sys.stdin); print(s["spec_decode_num_accepted_tokens"], "of", s["spec_decode_num_draft_tokens"])')"
else echo "FAIL self_rejection_all: $(stats "$tmp/selfr.err")"; fi
run "$tmp/rr1.json" "$tmp/rr1.err" "$RANDR"
run "$tmp/rr2.json" "$tmp/rr2.err" "$RANDR"
if cmp -s "$tmp/rr1.json" "$tmp/rr2.json" && [ "$(greedy4 "$tmp/rr1.json")" = "$(greedy4 "$tmp/ref.json")" ] &&
   $PY -c 'import json,sys; s=json.loads(sys.argv[1]); assert 0 < s["spec_decode_num_draft_tokens"] and s["num_blocks_free_at_end"] == s["num_blocks_total"], s' "$(stats "$tmp/rr1.err")" 2>/dev/null
then echo "ok random_repeats  # $(stats "$tmp/rr1.err" | $PY -c 'import json,sys; s=json.load(sys.stdin); print(s["spec_decode_num_accepted_tokens"], "of", s["spec_decode_num_draft_tokens"])')"
else echo "FAIL random_repeats: $(stats "$tmp/rr1.err")"; fi

if "$VLLMC" generate --model $M --max-tokens 4 --speculative-config \
     "{\"method\":\"draft_model\",\"model\":\"$tmp/rand600\",\"num_speculative_tokens\":2}" >/dev/null 2>"$tmp/vm.err"; then
  echo "FAIL vocab_mismatch: accepted a draft with 600 tokens against 512"
elif grep -q "its vocabulary has 600 tokens, the target's 512" "$tmp/vm.err"; then echo "ok vocab_mismatch"
else echo "FAIL vocab_mismatch: $(tail -1 "$tmp/vm.err")"; fi

P="Once upon a time"
"$VLLMC" generate --model $M --prompt "$P" --max-tokens 48 --temperature 0 --ignore-eos --json >"$tmp/g.json" 2>/dev/null
if VLLM_LOGGING_LEVEL=INFO server_start S $M --served-model-name m --speculative-config "$SELF"; then
  req POST "$S_URL/v1/completions" "{\"model\":\"m\",\"prompt\":\"$P\",\"max_tokens\":48,\"temperature\":0,\"ignore_eos\":true}"
  srv=$(jq -r '.choices[0].text' <<<"$BODY")
  req GET "$S_URL/metrics"
  drafts=$(awk '/^vllm:spec_decode_num_draft_tokens_total/ {print $2}' <<<"$BODY")
  acc=$(awk '/^vllm:spec_decode_num_accepted_tokens_total/ {print $2}' <<<"$BODY")
  if [ "$srv" = "$(jq -r '.outputs[0].text' "$tmp/g.json")" ] && [ -n "$drafts" ] && [ "$drafts" = "$acc" ] &&
     awk -v d="$drafts" 'BEGIN { exit !(d > 0) }'; then echo "ok serve_draft  # $acc of $drafts drafts accepted"
  else echo "FAIL serve_draft: text '$srv', drafts $drafts accepted $acc"; fi
else
  echo "FAIL serve_draft: the server did not start"
fi
exit 0
