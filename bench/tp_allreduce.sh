#!/usr/bin/env bash
# tp_allreduce.sh - tensor parallelism's communication, measured (docs/deploy.md):
#  1. build/bench/tp_allreduce on 2 ranks over shared memory (Open MPI's vader);
#  2. the same across two network namespaces joined by a veth link (TCP, as
#     between two hosts; root only): mpirun runs in namespace A, and reaches
#     "host" B through a plm_rsh_agent that is `ip netns exec B`;
#  3. `vllmc serve -tp 2` across the two namespaces on a random model of
#     TinyLlama-1.1B's width (hidden 2048, 32 / 4 heads, intermediate 5632;
#     4 layers to keep it short): one request of 64 greedy tokens, then rank
#     0's log line with its all-reduce count, bytes and time, against tp=1.
# Usage: bench/tp_allreduce.sh [BUILD_DIR]   (default build). The namespaces
# (vtpA, vtpB), the veth pair and 10.231.0.0/24 are created and removed here.
set -uo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
BIN=$PWD/$B
export OMPI_MCA_btl_vader_single_copy_mechanism=none VLLM_LOGGING_LEVEL=INFO
root=(); [ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
command -v mpirun >/dev/null || { echo "mpirun is missing (openmpi-bin)"; exit 1; }
[ -x "$BIN/bench/tp_allreduce" ] || { echo "$BIN/bench/tp_allreduce: build it (make)"; exit 1; }
echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) (other jobs share it)"

echo "== 1. all-reduce over shared memory (one host)"
mpirun "${root[@]}" --oversubscribe --bind-to none -np 2 "$BIN/bench/tp_allreduce" --iters 100

if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null || ! ip netns add vtpA 2>/dev/null; then
  echo "== 2, 3 skipped: network namespaces need root and iproute2"; exit 0
fi
tmp=$(mktemp -d /tmp/vllmc-tpbench-XXXXXX)
cleanup() {
  [ -n "${srv:-}" ] && kill -TERM "$srv" 2>/dev/null && wait "$srv" 2>/dev/null
  ip netns del vtpA 2>/dev/null; ip netns del vtpB 2>/dev/null; rm -rf "$tmp"
}
trap cleanup EXIT
ip netns add vtpB
ip link add vtpa type veth peer name vtpb
ip link set vtpa netns vtpA; ip link set vtpb netns vtpB
ip -n vtpA addr add 10.231.0.1/24 dev vtpa; ip -n vtpB addr add 10.231.0.2/24 dev vtpb
for ns in vtpA vtpB; do ip -n $ns link set lo up; done
ip -n vtpA link set vtpa up; ip -n vtpB link set vtpb up
cat > "$tmp/agent" <<'EOF'
#!/bin/sh
host=$1; shift
case $host in 10.231.0.1) ns=vtpA ;; 10.231.0.2) ns=vtpB ;; *) echo "agent: unknown host $host" >&2; exit 1 ;; esac
exec ip netns exec "$ns" sh -c "$*"
EOF
chmod +x "$tmp/agent"
netmpi=(ip netns exec vtpA mpirun "${root[@]}" --oversubscribe --bind-to none --mca plm_rsh_agent "$tmp/agent"
        --mca btl tcp,self --mca btl_tcp_if_include 10.231.0.0/24 --mca oob_tcp_if_include 10.231.0.0/24
        --host 10.231.0.1:1,10.231.0.2:1 -np 2)

echo "== 2. all-reduce across two namespaces (TCP over veth)"
"${netmpi[@]}" "$BIN/bench/tp_allreduce" --iters 100

echo "== 3. vllmc serve, TinyLlama-width random model (4 layers, bf16)"
/usr/bin/python3 tools/make_random_model.py "$tmp/m" --preset tinyllama-1.1b --layers 4 --tokenizer stories260K \
  --vocab-size 512 --max-pos 512 >/dev/null || { echo "make_random_model failed"; exit 1; }
serve() { # LOG LAUNCH...: start, one request of 64 tokens, stop
  local log=$1; shift
  "$@" "$BIN/vllmc" serve "$tmp/m" --port 18555 --threads 1 --kv-cache-memory-bytes 64M --max-model-len 512 \
    "${extra[@]}" > "$log" 2>&1 &
  srv=$!
  for _ in $(seq 600); do grep -q "startup complete" "$log" && break; sleep 0.1; done
  local t0 t1
  t0=$(date +%s.%N)
  ip netns exec vtpA curl -s http://127.0.0.1:18555/v1/completions -H 'Content-Type: application/json' \
    -d '{"model":"'"$tmp/m"'","prompt":"Once upon a time","max_tokens":64,"temperature":0,"ignore_eos":true}' >/dev/null
  t1=$(date +%s.%N)
  kill -TERM "$srv"; wait "$srv" 2>/dev/null; srv=
  echo "  request of 64 tokens: $(echo "$t1 - $t0" | bc) s"
}
extra=()
echo "tp=1 (namespace A):"
serve "$tmp/tp1.log" ip netns exec vtpA
echo "tp=2 (ranks in namespaces A and B):"
extra=(-tp 2)
serve "$tmp/tp2.log" "${netmpi[@]}"
grep -h "all-reduces" "$tmp/tp2.log" | sed 's/^/  /'
echo "  per token: 2 all-reduces x 4 layers x 2048 floats = 64 KiB at decode"
