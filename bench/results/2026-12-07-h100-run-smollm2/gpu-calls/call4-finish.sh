# call 4: node-llama-cpp's CUDA build, specdraft's CUDA engine; then wait for the job (at most $1 s) and show where it is
set -uo pipefail
cp .gpu4/nlc-cuda.tar.xz .gpu3/ 2>/dev/null; source .gpu3/unpack.sh
node scripts/build-native.mjs --gpu cuda 2>&1 | tail -2
bash .gpu4/wait.sh "${1:-400}"
