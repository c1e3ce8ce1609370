#!/usr/bin/env bash
# Builds llama.cpp's own llama-server for the CPU from the llama.cpp source node-llama-cpp bundles (the same release
# `specdraft serve` runs), for bench/llamaServerSpec.sh. Portable flags, not -DGGML_NATIVE: the native build crashed
# (SIGILL / SIGSEGV) on quantized GGUFs on an AMX + AVX-512 machine; AVX2 + FMA runs on every x86-64 CPU we use.
# Idempotent (prints the binary's path and exits when it is there); ~5 minutes on 2 cores. Run after `npm ci`:
#   bash bench/peers/build_llama_server.sh [BUILD_DIR]      (default: build/llama-server; prints BUILD_DIR/bin/llama-server)
set -euo pipefail
build=${1:-build/llama-server}
bin="$build/bin/llama-server"
if [ -x "$bin" ]; then echo "$bin"; exit 0; fi
bundle=node_modules/node-llama-cpp/llama/gitRelease.bundle
[ -f "$bundle" ] || { echo "build_llama_server: $bundle not found (run npm ci first)" >&2; exit 2; }
src="$build-src"  # beside the build folder: inside it, the build's own src/ would collide
[ -d "$src/.git" ] || { rm -rf "$src"; mkdir -p "$build"; git -c advice.detachedHead=false clone -q "$bundle" "$src"; }
cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_UI=OFF -DLLAMA_CURL=OFF \
  -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DGGML_NATIVE=OFF -DGGML_AVX=ON \
  -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON > "$build/cmake.log" 2>&1 \
  || { tail -20 "$build/cmake.log" >&2; exit 1; }
nice cmake --build "$build" --target llama-server -j "$(nproc)" > "$build/build.log" 2>&1 \
  || { tail -20 "$build/build.log" >&2; exit 1; }
echo "$bin"
