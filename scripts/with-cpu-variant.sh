#!/usr/bin/env bash
# Runs a command as if on a CPU of another kind: llama.cpp's CPU backend pinned to one of node-llama-cpp's prebuilt
# x86-64 variants (scripts/ggml_cpu_variant.c, preloaded into every process the command starts) and PyTorch held to
# the same instruction-set level (its ATen kernels, MKL and oneDNN dispatch), e.g. an AVX2-only CI machine:
#
#   scripts/with-cpu-variant.sh haswell bash .ci/run
#   scripts/with-cpu-variant.sh x64 npm test          # no AVX at all
#
# Variants: x64 sse42 sandybridge ivybridge piledriver (no AVX2) · haswell alderlake (AVX2) · skylakex cannonlake
# cascadelake icelake cooperlake zen4 sapphirerapids (AVX-512). A variant the CPU cannot run makes llama.cpp exit 3.
set -euo pipefail
variant=${1:?usage: with-cpu-variant.sh VARIANT COMMAND [ARGS...]}
shift
[ $# -gt 0 ] || { echo "with-cpu-variant.sh: no command given" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/build/cpu-variant"
mkdir -p "$out"
if [ ! -f "$out/ggml_cpu_variant.so" ] || [ "$root/scripts/ggml_cpu_variant.c" -nt "$out/ggml_cpu_variant.so" ]; then
  "${CC:-cc}" -shared -fPIC -O2 -o "$out/ggml_cpu_variant.so" "$root/scripts/ggml_cpu_variant.c" -ldl
fi
case "$variant" in
  x64|sse42|sandybridge|ivybridge|piledriver) aten=default; mkl=SSE4_2; onednn=SSE41 ;;
  haswell|alderlake) aten=avx2; mkl=AVX2; onednn=AVX2 ;;
  skylakex|cannonlake|cascadelake|icelake|cooperlake|zen4|sapphirerapids) aten=avx512; mkl=AVX512; onednn=AVX512_CORE ;;
  *) echo "with-cpu-variant.sh: unknown variant '$variant'" >&2; exit 2 ;;
esac
export SPECDRAFT_GGML_CPU_VARIANT=$variant
export LD_PRELOAD="$out/ggml_cpu_variant.so${LD_PRELOAD:+:$LD_PRELOAD}"
export ATEN_CPU_CAPABILITY=$aten MKL_ENABLE_INSTRUCTIONS=$mkl ONEDNN_MAX_CPU_ISA=$onednn
echo "with-cpu-variant: llama.cpp CPU backend $variant, PyTorch $aten / MKL $mkl / oneDNN $onednn" >&2
exec "$@"
