#!/usr/bin/env bash
# test_beam_search_ref.sh - beam search on stories260K against Hugging Face
# transformers' generate(num_beams=N, length_penalty=L) (tests/ref/beam_ref.py,
# float32, EOS off on both sides: there the two algorithms are the same, see
# beam_ref.py), through `vllmc generate --beam-width` and through the server's
# `use_beam_search`; our KV cache holds F32 (--kv-cache-dtype float32) as
# transformers does. Per config M:
#   cli_tokens_M    every beam's tokens, in order, are transformers'
#   cli_logprob_M   every beam's cumulative logprob within 1e-3 of transformers'
#   server_tokens_M the server's beams (return_token_ids) are the same tokens
# and:
#   greedy_is_llama2c    width 1 from BOS is llama2.c's greedy run
#                        (models/stories260K/reference_bos_greedy200.json)
#   server_score_order   choices come best first by vLLM's score (the CLI's)
#   server_prefix_cache  a beam search hits the prefix cache (its steps share blocks)
#   server_refuses_*     stream, a beam width past max_logprobs / 2, chat: 400s naming the field
#   server_disconnect    a client leaving mid-search: the server answers the next request
# Skipped, never passed, without .venv (transformers: scripts/setup.sh).
#
# checks: 19
# tags: tsan
cd "$(dirname "$0")/.." || exit 1
. tests/server_helpers.sh
MODEL=models/stories260K
REF=$MODEL/reference_bos_greedy200.json
py=.venv/bin/python
tmp=$(mktemp -d)
trap 'server_stop_all; rm -rf "$tmp"' EXIT
names=(a b c d)

prompt_c=$(jq -c '[1] + .greedy_ids[0:10]' $REF)
configs=$(jq -c -n --argjson pc "$prompt_c" '[
  {"prompt":[1,403],"beams":3,"max_new":12,"length_penalty":1.0},
  {"prompt":[1],"beams":4,"max_new":16,"length_penalty":0.5},
  {"prompt":$pc,"beams":5,"max_new":10,"length_penalty":2.0},
  {"prompt":[1],"beams":1,"max_new":20,"length_penalty":1.0}]')

if ! "$py" -c 'import torch, transformers' 2>/dev/null; then
  for m in "${names[@]}"; do for r in cli_tokens cli_logprob server_tokens; do echo "skip ${r}_$m: $py lacks torch/transformers (scripts/setup.sh)"; done; done
  have_ref=0
else
  "$py" tests/ref/beam_ref.py $MODEL "$configs" > "$tmp/ref.json" 2> "$tmp/ref.err"
  have_ref=1
  if ! jq -e 'length == 4' "$tmp/ref.json" > /dev/null 2>&1; then
    for m in "${names[@]}"; do for r in cli_tokens cli_logprob server_tokens; do echo "FAIL ${r}_$m: beam_ref.py: $(tail -1 "$tmp/ref.err")"; done; done
    have_ref=0
  fi
fi

server_start S --served-model-name tiny --kv-cache-dtype float32 || exit 0
U=$S_URL
for i in 0 1 2 3; do
  m=${names[$i]}
  cfg=$(jq -c ".[$i]" <<<"$configs")
  jq -c '{prompt_token_ids: .prompt}' <<<"$cfg" > "$tmp/p.jsonl"
  build/vllmc generate --model $MODEL --prompts-file "$tmp/p.jsonl" --json --ignore-eos --kv-cache-dtype float32 \
    --beam-width "$(jq .beams <<<"$cfg")" --max-tokens "$(jq .max_new <<<"$cfg")" \
    --length-penalty "$(jq .length_penalty <<<"$cfg")" > "$tmp/cli_$m.json" 2> "$tmp/cli.err" ||
    echo "cli failed: $(tail -1 "$tmp/cli.err")" >&2
  [ "$m" = c ] && cp "$tmp/cli_$m.json" "$tmp/cli_c_kept.json"
  curl -s --max-time 120 "$U/v1/completions" -H 'Content-Type: application/json' -d "$(jq -c '{model: "tiny", prompt: .prompt,
    n: .beams, max_tokens: .max_new, length_penalty: .length_penalty, use_beam_search: true, ignore_eos: true,
    return_token_ids: true}' <<<"$cfg")" > "$tmp/srv_$m.json"
  ours=$(jq -c '[.outputs[].token_ids]' "$tmp/cli_$m.json" 2>/dev/null)
  srv=$(jq -c '[.choices[].token_ids]' "$tmp/srv_$m.json" 2>/dev/null)
  if [ $have_ref -eq 1 ]; then
    theirs=$(jq -c ".[$i].beams | map(.token_ids)" "$tmp/ref.json")
    [ -n "$ours" ] && [ "$ours" = "$theirs" ] && echo "ok cli_tokens_$m" || echo "FAIL cli_tokens_$m: ours $ours, transformers $theirs"
    d=$(jq -n --slurpfile a "$tmp/cli_$m.json" --slurpfile b "$tmp/ref.json" \
      "[\$a[0].outputs, \$b[0][$i].beams] | transpose | map((.[0].cumulative_logprob - .[1].cumulative_logprob) | fabs) | max" 2>/dev/null)
    awk -v d="${d:-9}" 'BEGIN { exit !(d < 1e-3) }' && echo "ok cli_logprob_$m  # largest difference $d" ||
      echo "FAIL cli_logprob_$m: cumulative logprobs differ by $d (tolerance 1e-3)"
    [ -n "$srv" ] && [ "$srv" = "$theirs" ] && echo "ok server_tokens_$m" || echo "FAIL server_tokens_$m: server $srv, transformers $theirs ($(head -c 200 "$tmp/srv_$m.json"))"
  fi
done

ref20=$(jq -c '[.greedy_ids[0:20]]' $REF)
[ "$(jq -c '[.outputs[].token_ids]' "$tmp/cli_d.json")" = "$ref20" ] && echo "ok greedy_is_llama2c" ||
  echo "FAIL greedy_is_llama2c: $(jq -c '[.outputs[].token_ids]' "$tmp/cli_d.json") vs $ref20"
# best first: the CLI's scores are sorted, and the server's beams come in that order
sorted=$(jq -c '[.outputs[].score] | . == (sort | reverse)' "$tmp/cli_c_kept.json")
[ "$sorted" = true ] && [ "$(jq -c '[.choices[].token_ids]' "$tmp/srv_c.json")" = "$(jq -c '[.outputs[].token_ids]' "$tmp/cli_c_kept.json")" ] &&
  echo "ok server_score_order" || echo "FAIL server_score_order: CLI scores sorted: $sorted"
hits=$(curl -s "$U/metrics" | awk '/^vllm:prefix_cache_hits_total/ {s += $2} END {print s + 0}')
awk -v h="$hits" 'BEGIN { exit !(h > 0) }' && echo "ok server_prefix_cache  # $hits tokens" ||
  echo "FAIL server_prefix_cache: no prefix cache hits after four beam searches"

req POST "$U/v1/completions" '{"model":"tiny","prompt":"Once","n":2,"use_beam_search":true,"stream":true}'
check server_refuses_stream '.error.code == 400 and .error.param == "stream"'
req POST "$U/v1/completions" '{"model":"tiny","prompt":"Once","n":11,"use_beam_search":true}'
check server_refuses_width '.error.code == 400 and .error.param == "n"'
req POST "$U/v1/chat/completions" '{"model":"tiny","messages":[{"role":"user","content":"x"}],"use_beam_search":true}'
check server_refuses_chat '.error.code == 400 and .error.param == "use_beam_search"'
curl -s --max-time 0.3 "$U/v1/completions" -H 'Content-Type: application/json' \
  -d '{"model":"tiny","prompt":"Once","n":8,"max_tokens":400,"use_beam_search":true,"ignore_eos":true}' > /dev/null
req POST "$U/v1/completions" '{"model":"tiny","prompt":[1,403],"max_tokens":12,"temperature":0,"return_token_ids":true}'
check server_disconnect "(.choices[0].token_ids | tojson) == \"$(jq -c '.greedy_ids[1:13]' $REF)\""
exit 0
