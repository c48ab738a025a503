#!/usr/bin/env bash
# test_kv_overlap.sh - the SharedStorageConnector's layer-wise loads overlap
# the forward (docs/disagg.md "Layer by layer"), on `vllmc serve` with a
# random 8-layer TinyLlama-shaped model (tools/make_random_model.py):
#   - a consumer whose worker thread sleeps 100 ms after reading each layer
#     (VLLMC_DEBUG_KV_LOAD_DELAY_US, a test hook) decodes prompts of
#     1000-2000 tokens a producer prefilled: greedy ids equal the producer's
#     own (it computed the whole prompt), cached_tokens is the hand-derived
#     floor((L - 1) / 16) * 16, and the forward reached layer 0's attention
#     at least half of the 7 later layers' delays (350 ms) before the last
#     layer was read: it did not wait for the whole load first (the old
#     synchronous path, or a bug that waits for every layer, gives a
#     negative lead);
#   - a block file whose last byte (the last layer's V) is flipped passes
#     the header check, fails its checksum once the last layer is read, and
#     voids the step: the request is computed again from the blocks before
#     it, with the producer's ids and cached_tokens 80; logged;
#   - KV usage back to 0.
# checks: 8
# tags: tsan
cd "$(dirname "$0")/.." || exit 1
. tests/server_helpers.sh
PY=/usr/bin/python3
names="overlap_outputs_equal overlap_cached_tokens overlap_forward_started_first overlap_lead_logged
bad_last_layer_same_output bad_last_layer_match_ends bad_last_layer_step_recomputed kv_usage_zero"
if ! $PY -c 'import numpy' 2>/dev/null; then
  for n in $names; do echo "skip $n: /usr/bin/python3 without numpy (tools/make_random_model.py)"; done
  exit 0
fi
tmp=$(mktemp -d)
trap 'server_stop_all; rm -rf "$tmp"' EXIT
M=$tmp/model
$PY tools/make_random_model.py "$M" --arch llama --dtype f32 --hidden-size 64 --intermediate-size 128 \
  --layers 8 --heads 4 --kv-heads 2 --max-pos 4096 --tokenizer stories260K >"$tmp/gen.log" 2>&1 ||
  { echo "FAIL make_model: $(tail -3 "$tmp/gen.log")"; exit 1; }
store=$tmp/store
cfg() { echo "{\"kv_connector\":\"SharedStorageConnector\",\"kv_role\":\"$1\",\"kv_connector_extra_config\":{\"shared_storage_path\":\"$store\"}}"; }
server_start P --model "$M" --threads 1 --kv-transfer-config "$(cfg kv_producer)" || exit 1
VLLMC_DEBUG_KV_LOAD_DELAY_US=100000 server_start C --model "$M" --threads 1 --enable-prompt-tokens-details \
  --kv-transfer-config "$(cfg kv_consumer)" || exit 1

prompt() { $PY -c "import random; r=random.Random($1); print([r.randrange(3, 512) for _ in range(r.randrange(1000, 2001))])"; }
body() { echo "{\"model\":\"$M\",\"prompt\":$1,\"max_tokens\":$2,\"temperature\":0,\"ignore_eos\":true,\"return_token_ids\":true}"; }
ids() { jq -c '.choices[0].token_ids' <<<"$BODY"; }
equal=1; cached_ok=1
for k in 1 2 3; do
  p=$(prompt $((200 + k))); L=$($PY -c "print(len($p))")
  req POST "$P_URL/v1/completions" "$(body "$p" 8)"; want=$(ids)
  req POST "$C_URL/v1/completions" "$(body "$p" 8)"
  [ "$(ids)" = "$want" ] && [ "$want" != null ] || { equal=0; echo "prompt $k: consumer $(ids) producer $want" >&2; }
  cached=$(jq '.usage.prompt_tokens_details.cached_tokens' <<<"$BODY")
  [ "$cached" = $(( (L - 1) / 16 * 16 )) ] || { cached_ok=0; echo "prompt $k (L=$L): cached_tokens $cached" >&2; }
done
[ $equal = 1 ] && echo "ok overlap_outputs_equal" || echo "FAIL overlap_outputs_equal: see stderr"
[ $cached_ok = 1 ] && echo "ok overlap_cached_tokens" || echo "FAIL overlap_cached_tokens: see stderr"
leads=$(grep -o "reached layer 0's attention -\?[0-9.]* ms before" "$C_LOG" | grep -o -- '-\?[0-9.]* ms' | cut -d' ' -f1)
n=$(echo "$leads" | grep -c .)
[ "$n" -ge 3 ] && echo "ok overlap_lead_logged" || echo "FAIL overlap_lead_logged: $n lines in $C_LOG"
min=$(echo "$leads" | sort -g | head -1)
$PY -c "import sys; sys.exit(0 if $n >= 3 and float('${min:-0}') >= 350 else 1)" &&
  echo "ok overlap_forward_started_first" || echo "FAIL overlap_forward_started_first: leads (ms) $(echo $leads)"

# block 5's file (what a 96-token prefix adds to an 80-token one), its last byte flipped
p=$(prompt 210)
req POST "$P_URL/v1/completions" "$(body "$($PY -c "print($p[:80])")" 1)"
before=$(ls "$store" | sort)
req POST "$P_URL/v1/completions" "$(body "$($PY -c "print($p[:96])")" 1)"
f=$(comm -13 <(echo "$before") <(ls "$store" | sort))
req POST "$P_URL/v1/completions" "$(body "$p" 8)"; want=$(ids)
size=$(stat -c %s "$store/$f")
last=$(od -An -tu1 -j $((size - 1)) -N1 "$store/$f" | tr -d ' ')
printf "\\$(printf '%03o' $((last ^ 255)))" | dd of="$store/$f" bs=1 seek=$((size - 1)) conv=notrunc 2>/dev/null
req POST "$C_URL/v1/completions" "$(body "$p" 8)"
[ "$(ids)" = "$want" ] && echo "ok bad_last_layer_same_output" || echo "FAIL bad_last_layer_same_output: $(ids) vs $want"
check bad_last_layer_match_ends '.usage.prompt_tokens_details.cached_tokens == 80'
grep -q "rejected (checksum mismatch)" "$C_LOG" && grep -q "failed its check; the step is recomputed" "$C_LOG" &&
  echo "ok bad_last_layer_step_recomputed" ||
  echo "FAIL bad_last_layer_step_recomputed: no rejection and recompute lines in $C_LOG"
usage0() { curl -s "$1/metrics" | grep -Eq '^vllm:kv_cache_usage_perc\{[^}]*\} 0(\.0)?$'; }
usage0 "$C_URL" && usage0 "$P_URL" && echo "ok kv_usage_zero" || echo "FAIL kv_usage_zero"
