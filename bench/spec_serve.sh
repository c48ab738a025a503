#!/usr/bin/env bash
# bench/spec_serve.sh - speculative decoding under load: `vllmc bench serve`
# (16 concurrent streamed requests, vLLM's random dataset) against a server
# without speculation and the same server with each method, one server at a
# time; prints output-token throughput and the ratio to the plain server.
# With the adaptive k (spec/spec_policy.h, the default) a batch of 16 decoding
# sequences caps k at 24 / 16 - 1 = 0: speculation turns itself off, so the
# ratio should be 1.0 within noise (vLLM's blog reports slowdowns here for a
# fixed k); "adaptive": false shows what a fixed k costs.
#
#   bench/spec_serve.sh [--num-prompts 32] [--concurrency 16] [--input-len 128] [--output-len 64] [--only ngram,draft] [--rounds 1]
# --rounds N: every server of a group runs N times, alternating (plain, spec,
# fixed, plain, ...), so all see the same spells of machine load; each row is
# the median.
# Needs scripts/fetch_models.sh smollm2 (target: SmolLM2-135M-Instruct Q4_1;
# draft-model rows: the F32 copy bench/spec_decode.sh makes, drafted by Q4_1).
set -uo pipefail
cd "$(dirname "$0")/.."
np=32 conc=16 ilen=128 olen=64 only=ngram,draft rounds=1
while [ $# -gt 0 ]; do
  case $1 in
    --num-prompts) np=$2; shift 2 ;;
    --concurrency) conc=$2; shift 2 ;;
    --input-len) ilen=$2; shift 2 ;;
    --output-len) olen=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    *) echo "usage: bench/spec_serve.sh [--num-prompts N] [--concurrency N] [--input-len N] [--output-len N] [--only ngram,draft] [--rounds N]" >&2; exit 2 ;;
  esac
done
source tests/server_helpers.sh
models=${VLLMC_MODELS:-$HOME/.cache/vllmc/models}
smol=$models/SmolLM2-135M-Instruct.Q4_1.gguf
f32=$models/derived/$(basename "$smol" .gguf)-f32-$(sha256sum "$smol" 2>/dev/null | cut -c1-16).gguf
[ -s "$smol" ] || { echo "bench/spec_serve.sh: $smol missing (scripts/fetch_models.sh smollm2)" >&2; exit 1; }
echo "# $(date -u +%FT%TZ), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); $np prompts, concurrency $conc, input $ilen, output $olen, rounds $rounds"
tput() { # label model [serve args...]: prints the output throughput
  local label=$1 model=$2; shift 2
  if ! server_start S "$model" --served-model-name m --max-num-seqs "$conc" "$@" >/dev/null; then echo "$label | server failed"; return; fi
  local out
  out=$("$VLLMC" bench serve --base-url "$S_URL" --model m --dataset-name random --num-prompts "$np" \
        --random-input-len "$ilen" --random-output-len "$olen" --max-concurrency "$conc" --ignore-eos \
        --tokenizer "$model" 2>&1)
  local t; t=$(grep -m1 '^Output token throughput' <<<"$out" | awk '{print $NF}')
  [ -z "$t" ] && echo "  ($label: bench serve: $(tail -1 <<<"$out"))" >&2
  local acc; acc=$(grep -o 'Mean acceptance length: [0-9.]*' "$S_LOG" | tail -1)
  server_stop_all
  echo "${t:-?}"
  [ -n "$acc" ] && echo "  ($label: $acc)" >&2
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else print "?" }'; }
NG='{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_min":1,"prompt_lookup_max":3}'
NGF='{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_min":1,"prompt_lookup_max":3,"adaptive":false}'
median() { tr ' ' '\n' <<<"$*" | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { if (NR == 0 || v[1] == "?") print "?"; else print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
if [[ $only == *ngram* ]]; then
  P= N= NF=
  for ((r = 0; r < rounds; r++)); do
    P+=" $(tput plain "$smol")"
    N+=" $(tput ngram "$smol" --speculative-config "$NG")"
    NF+=" $(tput ngram_fixed "$smol" --speculative-config "$NGF")"
  done
  p=$(median $P) n=$(median $N) nf=$(median $NF)
  echo "SmolLM2 Q4_1 plain            | $p tok/s  (runs:$P)"
  echo "SmolLM2 Q4_1 ngram k=4        | $n tok/s | ratio $(ratio "$n" "$p")  (runs:$N)"
  echo "SmolLM2 Q4_1 ngram k=4 fixed  | $nf tok/s | ratio $(ratio "$nf" "$p")  (runs:$NF)"
fi
if [[ $only != *draft* ]]; then :
elif [ -s "$f32" ]; then
  DM="{\"method\":\"draft_model\",\"model\":\"$smol\",\"num_speculative_tokens\":3}"
  DMF="{\"method\":\"draft_model\",\"model\":\"$smol\",\"num_speculative_tokens\":3,\"adaptive\":false}"
  PF= D= DF=
  for ((r = 0; r < rounds; r++)); do
    PF+=" $(tput plain_f32 "$f32")"
    D+=" $(tput draft "$f32" --speculative-config "$DM")"
    DF+=" $(tput draft_fixed "$f32" --speculative-config "$DMF")"
  done
  pf=$(median $PF) d=$(median $D) df=$(median $DF)
  echo "SmolLM2 F32 plain             | $pf tok/s  (runs:$PF)"
  echo "SmolLM2 F32 <- Q4_1 k=3       | $d tok/s | ratio $(ratio "$d" "$pf")  (runs:$D)"
  echo "SmolLM2 F32 <- Q4_1 k=3 fixed | $df tok/s | ratio $(ratio "$df" "$pf")  (runs:$DF)"
else
  echo "draft_model rows: skipped ($f32 missing: bench/spec_decode.sh --only pair makes it)"
fi
