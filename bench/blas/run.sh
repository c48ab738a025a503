#!/usr/bin/env bash
# Our matmul kernels beside OpenBLAS and oneDNN on one TinyLlama-1.1B layer's
# shapes (bench_blas.c says what each line measures).
#
#   bench/blas/run.sh [THREADS] [TOKENS] [REPEATS]     e.g. bench/blas/run.sh 2 1,16,128,512 5
#
# Installs Debian's libopenblas-dev and libdnnl-dev where missing (the rest of
# vllm.c does not link them), builds build/bench-blas/bench_blas against
# build/libvllm_internal.a (it calls our kernels directly) and runs every
# library on F32, BF16 and F16 weights, each in a process of its own.
set -euo pipefail
cd "$(dirname "$0")/../.."
threads=${1:-2} tokens=${2:-1,16,128,512} reps=${3:-5}
missing=()
for p in libopenblas-dev libdnnl-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=$([ "$(id -u)" -eq 0 ] || echo sudo)
  echo "installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
make -s -j2 build/libvllm_internal.a
out=build/bench-blas
mkdir -p "$out"
if [ ! -x "$out/bench_blas" ] || [ bench/blas/bench_blas.c -nt "$out/bench_blas" ] || [ build/libvllm_internal.a -nt "$out/bench_blas" ]; then
  cc -std=c17 -D_GNU_SOURCE -O2 -march=native -Wall -Wextra -Werror -Isrc -Iinclude bench/blas/bench_blas.c \
     -o "$out/bench_blas" build/libvllm_internal.a -lopenblas -ldnnl -lm -pthread
fi
grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'
for wt in f32 bf16 f16; do
  for lib in ours openblas onednn; do
    OMP_NUM_THREADS=$threads "$out/bench_blas" --lib "$lib" --wtype "$wt" --threads "$threads" \
      --tokens "$tokens" --repeat "$reps" || echo "($lib $wt: exit status $?)"
  done
done
