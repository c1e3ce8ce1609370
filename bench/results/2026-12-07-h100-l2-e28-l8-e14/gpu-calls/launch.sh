# call 4: node + node-llama-cpp's CUDA build + specdraft's CUDA engine, the GGUF reassembled and checked, gguf and the
# prose installed; then, in its own session, the documented SmolLM2 `run` (with the target-written prompts as its
# second held-out set) and `ablate` on it (2 layers 28 epochs, 8 layers 14 epochs); wait at most $1 s
set -uo pipefail
root=$PWD
if [ ! -f /tmp/sd/job.pid ]; then
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
  cp .gd6/nlc-cuda.tar.xz /tmp/sd/gpu3/ || exit 1
  source /tmp/sd/gpu3/unpack.sh || exit 1
  node scripts/build-native.mjs --gpu cuda 2>&1 | tail -2
  cd /tmp/sd/inbox || exit 1
  grep part- smol.gguf.sha256 | sha256sum -c --quiet || { echo "parts missing or bad"; ls -la; exit 1; }
  cat $(cut -c67- smol.gguf.sha256 | grep part- | sort) | xz -dc > SmolLM2-135M-Instruct.Q4_1.gguf
  grep -v part- smol.gguf.sha256 | sha256sum -c || exit 1
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site /tmp/sd/inbox/gguf-*.whl || exit 1
  cd "$root" && mkdir -p train/.cache/prose && tar -C train/.cache/prose -xJf /tmp/sd/inbox/prose.tar.xz || exit 1
  export PYTHONPATH=/tmp/site:$root/train PYTHONUNBUFFERED=1
  export SPECDRAFT="/tmp/gpu-node/bin/node $root/dist/cli/main.js"
  purelib=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  date +%s > /tmp/sd/start
  cat > /tmp/sd/job.sh <<JOB
cd $root
export PATH=$PATH
python3 -m specdraft_train run --target /tmp/sd/inbox/SmolLM2-135M-Instruct.Q4_1.gguf --out /tmp/sd/run --init scratch \
  --extra "$purelib" --device cuda --eval-prompts data/chat-prompts-target.jsonl.xz
echo "run exit \$?"; date +%s > /tmp/sd/run.end
python3 -m specdraft_train ablate --lab /tmp/sd/run --out /tmp/sd/study --jobs 2 --device cuda --time-budget 0 \
  --variant 'l2-e28:variant.init=layers:2,distill.epochs=28' \
  --variant 'l8-e14:variant.init=layers:8,distill.epochs=14'
echo "study exit \$?"; date +%s > /tmp/sd/study.end
JOB
  setsid nohup bash /tmp/sd/job.sh > /tmp/sd/job.log 2>&1 < /dev/null &
  echo $! > /tmp/sd/job.pid
fi
bash .gd6/wait.sh "${1:-30}"
