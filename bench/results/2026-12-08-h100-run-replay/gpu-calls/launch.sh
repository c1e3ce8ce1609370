# call 4: node + node-llama-cpp's CUDA build + specdraft's CUDA engine, the GGUF reassembled and checked, gguf
# installed, the preset's prose unpacked where `corpus` looks for it; then in its own session two `run`s of SmolLM2
# sharing one target and reference, now with replay of general text (the `replay` stage): 2 of the target's layers
# for 28 epochs, and with $2 = l8 8 layers for 14, QAT in the preset's 40 s as the runs before (distilled side by side, bound by epochs), then each one's
# evaluate, export, pack, selfcheck, validate and speedup alone on the GPU; wait at most $1 s
set -uo pipefail
root=$PWD with_l8=${2:-}
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
  mkdir -p "$root/train/.cache/prose" && tar -C "$root/train/.cache/prose" -xJf /tmp/sd/inbox/prose.tar.xz || exit 1
  cd "$root"
  export PYTHONPATH=/tmp/site:$root/train PYTHONUNBUFFERED=1
  export SPECDRAFT="/tmp/gpu-node/bin/node $root/dist/cli/main.js"
  date +%s > /tmp/sd/start
  cat > /tmp/sd/job.sh <<JOB
cd $root
export PATH=$PATH
t=/tmp/sd/inbox/SmolLM2-135M-Instruct.Q4_1.gguf e=data/chat-prompts-target.jsonl.xz
whole="--set distill.time_budget_s=0"
l2="--init layers:2 --set distill.epochs=28 \$whole"
l8="--init layers:8 --set distill.epochs=14 \$whole"
python3 -m specdraft_train run --target \$t --out /tmp/sd/run-l2 \$l2 --device cuda --eval-prompts \$e --until reference-eval
echo "reference exit \$?"
if [ "$with_l8" = l8 ]; then
  cp -a /tmp/sd/run-l2 /tmp/sd/run-l8
  python3 -m specdraft_train run --target \$t --out /tmp/sd/run-l8 \$l8 --device cuda --eval-prompts \$e --until qat > /tmp/sd/l8.log 2>&1 &
fi
python3 -m specdraft_train run --target \$t --out /tmp/sd/run-l2 \$l2 --device cuda --eval-prompts \$e --until qat > /tmp/sd/l2.log 2>&1
wait; tail -3 /tmp/sd/l2.log /tmp/sd/l8.log; date +%s > /tmp/sd/qat.end
python3 -m specdraft_train run --target \$t --out /tmp/sd/run-l2 \$l2 --device cuda --eval-prompts \$e
echo "run-l2 exit \$?"; date +%s > /tmp/sd/run-l2.end
if [ "$with_l8" = l8 ]; then
  python3 -m specdraft_train run --target \$t --out /tmp/sd/run-l8 \$l8 --device cuda --eval-prompts \$e
  echo "run-l8 exit \$?"; date +%s > /tmp/sd/run-l8.end
fi
JOB
  setsid nohup bash /tmp/sd/job.sh > /tmp/sd/job.log 2>&1 < /dev/null &
  echo $! > /tmp/sd/job.pid
fi
bash .gd6/wait.sh "${1:-30}"
