#!/usr/bin/env bash
# bench/spec_serve.sh - speculative decoding under load: `vllmc bench serve`
# (16 concurrent streamed requests, vLLM's random dataset) against a server
# without speculation and the same server with each method, one server at a
# time; prints output-token throughput and the ratio to the plain server.
# With the adaptive k (spec/spec_policy.h, the default) the cost model drafts
# nothing for 16 decoding sequences without a record (and for the draft
# model, whose caches are a prompt behind): speculation turns itself off
# (bench serve's initial single test prompt, alone, does draft), so the
# ratio should be 1.0 within noise (vLLM's blog reports slowdowns here for a
# fixed k); "adaptive": false shows what a fixed k costs.
#
#   bench/spec_serve.sh [--num-prompts 32] [--concurrency 16] [--input-len 128] [--output-len 64] [--only ngram,draft] [--rounds 1]
# --rounds N: every server of a group runs N times, alternating (plain, spec,
# fixed, plain, ...), so all see the same spells of machine load; each row is
# the median. Each row also gives the output tokens per CPU-second of the
# server (user + system, all threads): the load of other processes moves it
# much less than wall time.
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
cpu_s() { # pid: its user + system CPU seconds so far (all threads)
  awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat" 2>/dev/null || echo 0
}
tput() { # label model [serve args...]: prints the output throughput and the
  # output tokens per CPU-second of the server (bench serve's test prompt
  # included), which a loaded machine moves much less than wall time
  local label=$1 model=$2; shift 2
  if ! server_start S "$model" --served-model-name m --max-num-seqs "$conc" "$@" >/dev/null; then echo "? ?"; echo "$label | server failed" >&2; return; fi
  local out c0 c1
  c0=$(cpu_s "$S_PID")
  out=$("$VLLMC" bench serve --base-url "$S_URL" --model m --dataset-name random --num-prompts "$np" \
        --random-input-len "$ilen" --random-output-len "$olen" --max-concurrency "$conc" --ignore-eos \
        --tokenizer "$model" 2>&1)
  c1=$(cpu_s "$S_PID")
  local t; t=$(grep -m1 '^Output token throughput' <<<"$out" | awk '{print $NF}')
  local c; c=$(awk -v n="$((np * olen))" -v a="$c0" -v b="$c1" 'BEGIN { if (b > a) printf "%.1f", n / (b - a); else print "?" }')
  [ -z "$t" ] && echo "  ($label: bench serve: $(tail -1 <<<"$out"))" >&2
  local acc; acc=$(grep -o 'Mean acceptance length: [0-9.]*' "$S_LOG" | tail -1)
  server_stop_all
  echo "${t:-?} $c"
  [ -n "$acc" ] && echo "  ($label: $acc)" >&2
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else print "?" }'; }
NG='{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_min":1,"prompt_lookup_max":3}'
NGF='{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_min":1,"prompt_lookup_max":3,"adaptive":false}'
median() { tr ' ' '\n' <<<"$*" | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { if (NR == 0 || v[1] == "?") print "?"; else print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
run() { # list label model [serve args...]: appends the throughput to $list, the tokens per CPU-second to ${list}C
  local -n tl=$1 cl=${1}C
  shift
  local t c; read -r t c <<<"$(tput "$@")"
  tl+=" $t" cl+=" $c"
}
row() { # label list [plain list]: median throughput and tokens per CPU-second, with their ratios to the plain list's
  local label=$1; local -n tl=$2 cl=${2}C
  if [ -z "${3:-}" ]; then echo "$label | $(median $tl) tok/s, $(median $cl) tok/CPU-s  (runs:$tl; per CPU-s:$cl)"; return; fi
  local -n pl=$3 pcl=${3}C
  echo "$label | $(median $tl) tok/s | ratio $(ratio "$(median $tl)" "$(median $pl)") | $(median $cl) tok/CPU-s, ratio $(ratio "$(median $cl)" "$(median $pcl)")  (runs:$tl; per CPU-s:$cl)"
}
if [[ $only == *ngram* ]]; then
  P= PC= N= NC= NF= NFC=
  for ((r = 0; r < rounds; r++)); do
    run P plain "$smol"
    run N ngram "$smol" --speculative-config "$NG"
    run NF ngram_fixed "$smol" --speculative-config "$NGF"
  done
  row "SmolLM2 Q4_1 plain           " P
  row "SmolLM2 Q4_1 ngram k=4       " N P
  row "SmolLM2 Q4_1 ngram k=4 fixed " NF P
fi
if [[ $only != *draft* ]]; then :
elif [ -s "$f32" ]; then
  DM="{\"method\":\"draft_model\",\"model\":\"$smol\",\"num_speculative_tokens\":3}"
  DMF="{\"method\":\"draft_model\",\"model\":\"$smol\",\"num_speculative_tokens\":3,\"adaptive\":false}"
  PF= PFC= D= DC= DF= DFC=
  for ((r = 0; r < rounds; r++)); do
    run PF plain_f32 "$f32"
    run D draft "$f32" --speculative-config "$DM"
    run DF draft_fixed "$f32" --speculative-config "$DMF"
  done
  row "SmolLM2 F32 plain            " PF
  row "SmolLM2 F32 <- Q4_1 k=3      " D PF
  row "SmolLM2 F32 <- Q4_1 k=3 fixed" DF PF
else
  echo "draft_model rows: skipped ($f32 missing: bench/spec_decode.sh --only pair makes it)"
fi
