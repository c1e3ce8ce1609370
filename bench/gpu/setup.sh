# The GPU machine's set-up, in one place for every GPU job (sourced from the repository root; bench/gpu/jobLib.sh,
# serving.sh, replicas.sh, prepare.sh). On a machine set up as the README says (npm ci, Python with the gguf package)
# gpu_tools only sets PYTHONPATH; on one staged by bench/gpu/stage.sh (no node, no network: .gpu and .whl brought
# along) it unpacks node and node_modules first and installs the gguf wheel.
gpu_tools() {
  if [ -f .gpu/unpack.sh ]; then source .gpu/unpack.sh; fi
  if compgen -G ".whl/*.whl" > /dev/null; then
    [ -d /tmp/site/gguf ] || python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site:$PWD/train
  else
    export PYTHONPATH=$PWD/train
  fi
}

# gpu_engine [FILE]: the CUDA build of the native engine (its last line), then the GPU's name, memory and clock, also
# written to FILE when given
gpu_engine() {
  node scripts/build-native.mjs --gpu cuda 2>&1 | tail -1
  nvidia-smi --query-gpu=name,memory.used,memory.total,clocks.max.sm --format=csv,noheader | tee ${1:+"$1"}
}
