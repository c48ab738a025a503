#!/usr/bin/env bash
# test_kv_offload.sh - the offloading tier (--kv-offloading-size, docs/disagg.md)
# on `vllmc serve` with a random TinyLlama-shaped model (4 layers, 2048
# positions) and a pool of 200 blocks (3200 tokens): prompt A (1-2k random
# ids), then B and C, which evict A's blocks from the pool, then A again.
#   - without offloading (R) A's second run finds little in the prefix cache
#     (the eviction happened: the test could fail);
#   - with a RAM tier (O) it is served from there (vllm:external_prefix_cache_hits
#     > 0, cached_tokens >= L - 16) with the greedy ids of R's cold run;
#   - with a tiny RAM tier and a disk tier (VLLM_KV_OFFLOADING_DISK_PATH /
#     _SIZE) the same from block files, which are deleted when the server stops;
#     with a RAM budget below one block, blocks go straight to disk;
#   - KV usage back to 0.
# checks: 12
cd "$(dirname "$0")/.." || exit 1
. tests/server_helpers.sh
PY=/usr/bin/python3
names="evicted_without_offloading offload_cold_equal offload_hit_same_output offload_external_hits offload_cached_tokens
offload_log_hit_rate disk_tier_same_output disk_tier_external_hits disk_tier_files disk_tier_cleanup kv_usage_zero_offload disk_only_tier"
if ! $PY -c 'import numpy' 2>/dev/null; then
  for n in $names; do echo "skip $n: /usr/bin/python3 without numpy (tools/make_random_model.py)"; done
  exit 0
fi
tmp=$(mktemp -d)
trap 'server_stop_all; rm -rf "$tmp"' EXIT
M=$tmp/model
$PY tools/make_random_model.py "$M" --arch llama --dtype f32 --hidden-size 64 --intermediate-size 128 \
  --layers 4 --heads 4 --kv-heads 2 --max-pos 2048 --tokenizer stories260K >"$tmp/gen.log" 2>&1 ||
  { echo "FAIL make_model: $(tail -3 "$tmp/gen.log")"; exit 1; }
export VLLM_LOG_STATS_INTERVAL=0.5
common=(--model "$M" --threads 1 --num-gpu-blocks-override 200 --enable-prompt-tokens-details)
server_start R "${common[@]}" || exit 1
server_start O "${common[@]}" --kv-offloading-size 0.01 || exit 1
VLLM_KV_OFFLOADING_DISK_PATH=$tmp/disk VLLM_KV_OFFLOADING_DISK_SIZE=0.01 \
  server_start D "${common[@]}" --kv-offloading-size 0.0001 || exit 1

prompt() { $PY -c "import random; r=random.Random($1); print([r.randrange(3, 512) for _ in range(r.randrange(1000, 2001))])"; }
body() { echo "{\"model\":\"$M\",\"prompt\":$1,\"max_tokens\":8,\"temperature\":0,\"ignore_eos\":true,\"return_token_ids\":true}"; }
ids() { jq -c '.choices[0].token_ids' <<<"$BODY"; }
cached() { jq '.usage.prompt_tokens_details.cached_tokens // 0' <<<"$BODY"; }
A=$(prompt 1); B=$(prompt 2); C=$(prompt 3); L=$($PY -c "print(len($A))")
run() { # URL: A, B, C, A again; sets first, again, again_cached
  req POST "$1/v1/completions" "$(body "$A")"; first=$(ids)
  req POST "$1/v1/completions" "$(body "$B")"
  req POST "$1/v1/completions" "$(body "$C")"
  req POST "$1/v1/completions" "$(body "$A")"; again=$(ids); again_cached=$(cached)
}
val() { curl -s "$1/metrics" | awk -v n="$2" '$1 ~ "^"n"\\{" {print $2+0}'; }

run "$R_URL"; cold=$first
[ "$again_cached" -lt $((L - 16)) ] && [ "$again" = "$cold" ] && echo "ok evicted_without_offloading" ||
  echo "FAIL evicted_without_offloading: A's second run had $again_cached of $L tokens cached without offloading"

run "$O_URL"
[ "$first" = "$cold" ] && echo "ok offload_cold_equal" || echo "FAIL offload_cold_equal: $first vs $cold"
[ "$again" = "$cold" ] && echo "ok offload_hit_same_output" || echo "FAIL offload_hit_same_output: $again vs $cold"
h=$(val "$O_URL" vllm:external_prefix_cache_hits_total)
[ "${h:-0}" -gt 0 ] && echo "ok offload_external_hits" || echo "FAIL offload_external_hits: $h"
[ "$again_cached" -ge $((L - 16)) ] && echo "ok offload_cached_tokens" || echo "FAIL offload_cached_tokens: $again_cached of $L"
wait_for offload_log_hit_rate 15 grep -q "External prefix cache hit rate: [1-9]" "$O_LOG"

run "$D_URL"
[ "$again" = "$cold" ] && [ "$first" = "$cold" ] && echo "ok disk_tier_same_output" || echo "FAIL disk_tier_same_output: $first / $again vs $cold"
h=$(val "$D_URL" vllm:external_prefix_cache_hits_total)
[ "${h:-0}" -gt 0 ] && [ "$again_cached" -ge $((L - 16)) ] && echo "ok disk_tier_external_hits" ||
  echo "FAIL disk_tier_external_hits: $h hits, $again_cached of $L cached"
n=$(ls "$tmp/disk" | grep -c '\.kv$')
[ "$n" -gt 0 ] && echo "ok disk_tier_files" || echo "FAIL disk_tier_files: no block files in $tmp/disk"

usage0() { curl -s "$1/metrics" | grep -Eq '^vllm:kv_cache_usage_perc\{[^}]*\} 0(\.0)?$'; }
usage0 "$O_URL" && usage0 "$D_URL" && echo "ok kv_usage_zero_offload" || echo "FAIL kv_usage_zero_offload"
kill -TERM "$D_PID"; for _ in $(seq 100); do kill -0 "$D_PID" 2>/dev/null || break; sleep 0.1; done
n=$(ls "$tmp/disk" | wc -l)
[ "$n" = 0 ] && echo "ok disk_tier_cleanup" || echo "FAIL disk_tier_cleanup: $n files left"

# a RAM budget below one block (8 KiB here): straight to disk
VLLM_KV_OFFLOADING_DISK_PATH=$tmp/disk2 VLLM_KV_OFFLOADING_DISK_SIZE=0.01 \
  server_start E "${common[@]}" --kv-offloading-size 0.000001 || exit 1
run "$E_URL"
h=$(val "$E_URL" vllm:external_prefix_cache_hits_total)
[ "$again" = "$cold" ] && [ "$first" = "$cold" ] && [ "${h:-0}" -gt 0 ] && [ "$again_cached" -ge $((L - 16)) ] &&
  echo "ok disk_only_tier" || echo "FAIL disk_only_tier: $h hits, $again_cached of $L cached, $again vs $cold"
