# Sourced on the GPU machine from the repository root, from the folder bench/gpu/stage-node.sh made:
#   source .gpu/unpack.sh
# Puts node on PATH, restores node_modules, and installs the staged CUDA build of node-llama-cpp (if one came) as its
# last build, so that getLlama("lastBuild") (or getLlama({gpu: "cuda", build: "never"}) with the same cmake option)
# loads it; `llama.gpu === "cuda"` checks it.
_stage=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p /tmp/gpu-node/bin
[ -x /tmp/gpu-node/bin/node ] || { xz -dc "$_stage/node.xz" > /tmp/gpu-node/bin/node && chmod +x /tmp/gpu-node/bin/node; }
export PATH=/tmp/gpu-node/bin:$PATH
[ -d node_modules/node-llama-cpp ] || tar xJf "$_stage/node_modules.tar.xz"
# node-llama-cpp names a local build's folder by a hash of its options: this is the folder of
# `source build --gpu cuda` with CMAKE_CUDA_ARCHITECTURES=90-real (node-llama-cpp 3.21.1); another build sets NLC_CUDA_FOLDER
_folder=${NLC_CUDA_FOLDER:-linux-x64-cuda-2t2l5r2d4j6brs486ni6t2l2w6o3v91i21b}
_build=node_modules/node-llama-cpp/llama/localBuilds/$_folder
if [ ! -f "$_stage/nlc-cuda.tar.xz" ]; then
  echo "unpack.sh: no CUDA build of node-llama-cpp was staged (bench/gpu/stage-node.sh's NLC_CUDA_BUILD)" >&2
elif [ ! -f "$_build/buildDone.status" ]; then
  mkdir -p "$_build" && tar xJf "$_stage/nlc-cuda.tar.xz" -C "$_build" && touch "$_build/buildDone.status"
  printf '{"folderName":"%s"}\n' "$_folder" > node_modules/node-llama-cpp/llama/lastBuild.json
fi
export NODE_LLAMA_CPP_CMAKE_OPTION_CMAKE_CUDA_ARCHITECTURES=90-real
node --version > /dev/null && echo "gpu-node: $(node --version), node-llama-cpp CUDA build at $_build"
unset _stage _folder _build
