#!/usr/bin/env bash
# bench/lora/run.sh - multi-LoRA throughput on a TinyLlama-shaped random
# model: 16 concurrent requests on the base model, then spread over 1, 4 and
# 16 rank-16 adapters on all seven projections (build/bench/bench_lora).
#
#   bench/lora/run.sh [--dir DIR] [--threads N] [--decode N] [--rounds N]
#
# The model is /tmp/vllmc-bench/tinyllama (tools/make_random_model.py
# --preset tinyllama-1.1b, as bench/side_by_side.sh makes it), written if
# missing; the adapters (tools/make_lora_adapter.py, ~47 MB each in F32) go
# to DIR/lora-r16-N. Target (issue 22): >= 0.8x the base model at 4 adapters.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=${VLLMC_BENCH_DIR:-/tmp/vllmc-bench} threads=0 decode=16 rounds=1
while [ $# -gt 0 ]; do
  case $1 in
    --dir) dir=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --decode) decode=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    *) echo "usage: $0 [--dir DIR] [--threads N] [--decode N] [--rounds N]" >&2; exit 2 ;;
  esac
done
model=$dir/tinyllama
[ -f "$model/model.safetensors" ] || /usr/bin/python3 "$root/tools/make_random_model.py" "$model" --preset tinyllama-1.1b
list=""
for i in $(seq 0 15); do
  a=$dir/lora-r16-$i
  [ -f "$a/adapter_model.safetensors" ] ||
    /usr/bin/python3 "$root/tools/make_lora_adapter.py" "$model" "$a" --rank 16 --alpha 32 --seed $((i + 1))
  list=$list${list:+,}$a
done
[ -x "$root/build/bench/bench_lora" ] || make -C "$root" -j2 build/bench/bench_lora
"$root/build/bench/bench_lora" --model "$model" --adapters "$list" --requests 16 --prompt-len 16 \
  --decode "$decode" --threads "$threads" --rounds "$rounds"
