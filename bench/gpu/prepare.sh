#!/usr/bin/env bash
# CPU-side preparation for bench/gpu/serving.sh on the GPU machine, safe to run in the background while the GPU does
# other work: builds llama-server (CUDA) from the llama.cpp source node-llama-cpp bundles, and makes the random
# Qwen3-1.7B-shaped Q4_0 drafter. Idempotent.   bash bench/gpu/prepare.sh [LOG_DIR]
set -uo pipefail
logs=${1:-/tmp}
mkdir -p "$logs"
exec 9>/tmp/specdraft-prepare.lock && flock 9  # a second run waits for the first, then finds everything made
source bench/gpu/setup.sh
gpu_tools
model=/tmp/qwen3-1.7b-random-q4_0.gguf
if [ ! -f "$model" ]; then
  xz -dc .gpu-extra/qwen3-tokenizer.json.xz > /tmp/qwen3-tokenizer.json
  python3 bench/models/make_random_drafter.py --tokenizer /tmp/qwen3-tokenizer.json --out "$model" 2>&1 | tail -1
fi
if [ ! -x /tmp/llama-build/bin/llama-server ]; then
  mkdir -p /tmp/llama-src && tar xJf .gpu-llama/llama-src.tar.xz -C /tmp/llama-src &&
  cmake -S /tmp/llama-src -B /tmp/llama-build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_UI=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90-real > "$logs/llama-server-build.log" 2>&1 &&
  nice cmake --build /tmp/llama-build --target llama-server -j "$(nproc)" >> "$logs/llama-server-build.log" 2>&1
  echo "prepare: llama-server build exit $? ($(ls /tmp/llama-build/bin/llama-server 2>/dev/null || echo missing))"
fi
