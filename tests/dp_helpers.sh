# dp_helpers.sh - sourced by tests/test_server_dp*.sh: one workload of 64
# concurrent completions and a /metrics sum, for comparing data-parallel
# servers with the single-engine one. Needs $MODEL; CURL may prefix curl
# (e.g. "ip netns exec NS").
CURL=${CURL:-}

# request i's body: greedy or seeded, n 1 or 2, some with a stop string
body() {
  local i=$1 words=("Once upon a time" "The cat" "Lily and Ben went to the park" "One day, a little bird"
                     "Tom had a big red ball" "The sun was" "A dog named Max" "She saw a")
  local p=${words[$((i % 8))]} temp=0 n=1 stop='[]'
  [ $((i % 3)) -eq 1 ] && temp=0.8
  [ $((i % 5)) -eq 2 ] && n=2 && temp=0.9
  [ $((i % 7)) -eq 3 ] && stop='["the"]'
  printf '{"model":"%s","prompt":"%s %d","max_tokens":32,"temperature":%s,"seed":%d,"n":%d,"stop":%s,"return_token_ids":true}' \
    "$MODEL" "$p" "$i" "$temp" "$((1000 + i))" "$n" "$stop"
}
# run64 URL DIR: 64 concurrent requests, one file each (choices sorted by index, ids stripped)
run64() {
  local url=$1 dir=$2 i pids=()
  mkdir -p "$dir"
  for i in $(seq 0 63); do
    $CURL curl -s --max-time 60 -H 'Content-Type: application/json' --data-binary "$(body "$i")" \
      "$url/v1/completions" -o "$dir/$i.json" &
    pids+=($!)
  done
  wait "${pids[@]}" # not the servers
  for i in $(seq 0 63); do
    jq -c '[.choices | sort_by(.index)[] | {index, text, finish_reason, stop_reason, token_ids}]' "$dir/$i.json" \
      > "$dir/$i.out" 2>/dev/null || echo "bad response: $(head -c 200 "$dir/$i.json")" > "$dir/$i.out"
  done
}
success_total() { # sum of vllm:request_success_total for engine $2 ("" = all) in /metrics text $1
  printf '%s\n' "$1" | awk -v e="$2" '/^vllm:request_success_total\{/ && (e == "" || index($0, "engine=\"" e "\"")) { s += $NF } END { print s + 0 }'
}

