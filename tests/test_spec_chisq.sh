#!/usr/bin/env bash
# test_spec_chisq.sh - sampled requests under speculative decoding follow the
# model's distribution: 4,000 seeded requests (temperature 1.5, 3 tokens, on
# stories260K after "Once upon a time, there was a") without speculation,
# with n-gram drafts, and with a deliberately bad draft model (random weights,
# the same vocabulary) both ways: sampling its drafts from its own q under
# the request's temperature, verified by vLLM's rejection sampler (the
# default, "draft"), and greedy drafts verified exactly ("draftx",
# draft_token_acceptance_method "exact"); each checked by Pearson's chi-square against
# transformers' softmax at the first position and at the second after the
# most frequent first token (tests/ref/spec_chisq.py: p-value >= 1e-3, cells
# under 5 expected pooled; the seeds are fixed, so the verdict is the same
# every run). "adaptive": false: 4,000 requests at once would turn the
# adaptive k off (spec/spec_policy.h). The test has power: sampling at temperature 1.3 instead fails
# both positions with p-values of 1e-5 and 1e-29.
#   plain_pos1/2, ngram_pos1/2, draft_pos1/2, draftx_pos1/2   the chi-square checks
#   ngram_drafted, draft_drafted, draftx_drafted  drafts were scored (else the checks say nothing)
# The first sampled token comes from the prefill step (no drafts); the second
# is the verifier's first row.
# Skipped, never passed, without .venv (torch, transformers: scripts/setup.sh).
#
# checks: 11
set -uo pipefail
cd "$(dirname "$0")/.."
VLLMC=${VLLMC:-build/vllmc}
export VLLM_LOGGING_LEVEL=WARNING
py=.venv/bin/python
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
M=models/stories260K
names=(plain_pos1 plain_pos2 ngram_pos1 ngram_pos2 draft_pos1 draft_pos2 draftx_pos1 draftx_pos2 ngram_drafted
       draft_drafted draftx_drafted)
if ! "$py" -c 'import torch, transformers' 2>/dev/null; then
  for n in "${names[@]}"; do echo "skip $n: $py lacks torch/transformers (scripts/setup.sh)"; done
  exit 0
fi
P=$(jq -c '[1] + .greedy_ids[0:7]' $M/reference_bos_greedy200.json)
/usr/bin/python3 - "$P" > "$tmp/req.jsonl" <<'EOF'
import json, sys
ids = json.loads(sys.argv[1])
for i in range(4000):
    print(json.dumps({"prompt_token_ids": ids, "max_tokens": 3, "temperature": 1.5, "seed": 1000 + i,
                      "ignore_eos": True}))
EOF
/usr/bin/python3 tools/make_random_model.py --arch llama --dtype f32 --hidden-size 32 --intermediate-size 64 \
  --layers 2 --heads 4 --kv-heads 2 --vocab-size 512 --max-pos 512 --tokenizer stories260K --seed 5 \
  "$tmp/bad" > /dev/null 2> "$tmp/mk.err" || echo "make_random_model.py: $(tail -1 "$tmp/mk.err")" >&2
gen() { # out err [spec]
  "$VLLMC" generate --model $M --prompts-file "$tmp/req.jsonl" --json --stats ${3:+--speculative-config "$3"} > "$1" 2> "$2"
}
gen "$tmp/plain.json" "$tmp/plain.err"
gen "$tmp/ngram.json" "$tmp/ngram.err" '{"method":"ngram","num_speculative_tokens":2,"prompt_lookup_min":1,"prompt_lookup_max":2,"adaptive":false}'
gen "$tmp/draft.json" "$tmp/draft.err" "{\"method\":\"draft_model\",\"model\":\"$tmp/bad\",\"num_speculative_tokens\":2,\"adaptive\":false}"
gen "$tmp/draftx.json" "$tmp/draftx.err" \
  "{\"method\":\"draft_model\",\"model\":\"$tmp/bad\",\"num_speculative_tokens\":2,\"draft_token_acceptance_method\":\"exact\",\"adaptive\":false}"
"$py" tests/ref/spec_chisq.py $M "$P" 1.5 plain="$tmp/plain.json" ngram="$tmp/ngram.json" draft="$tmp/draft.json" draftx="$tmp/draftx.json" \
  2> "$tmp/chi.err" || echo "spec_chisq.py: $(tail -1 "$tmp/chi.err")" >&2
for m in ngram draft draftx; do
  s=$(grep '^{' "$tmp/$m.err" | tail -1)
  if [ -n "$s" ] && jq -e '.spec_decode_num_draft_tokens > 0' <<<"$s" > /dev/null; then
    echo "ok ${m}_drafted  # $(jq -r '"\(.spec_decode_num_accepted_tokens) of \(.spec_decode_num_draft_tokens) drafts accepted"' <<<"$s")"
  else
    echo "FAIL ${m}_drafted: no drafts were scored ($(tail -1 "$tmp/$m.err"))"
  fi
done
exit 0
