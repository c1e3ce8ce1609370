# call 3: reassemble the GGUF, install gguf and the prose, put node on PATH; start, in its own session, `run` (every
# stage) and then the on-policy / token-selection study on the finished run; wait at most $1 s
set -uo pipefail
root=$PWD
if [ ! -f /tmp/sd/job.pid ]; then
  mkdir -p /tmp/sd
  cp .g3/smol.gguf.part-ac .g3/smol.sha256 .g3/prose.tar.xz .g3/*.whl /tmp/sd/
  cat /tmp/sd/smol.gguf.part-aa /tmp/sd/smol.gguf.part-ab /tmp/sd/smol.gguf.part-ac > /tmp/sd/smol.gguf
  echo "$(cat /tmp/sd/smol.sha256)  /tmp/sd/smol.gguf" | sha256sum -c || exit 1
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site /tmp/sd/gguf-*.whl
  mkdir -p train/.cache/prose && tar -C train/.cache/prose -xJf /tmp/sd/prose.tar.xz
  source .gpu3/unpack.sh
  export PYTHONPATH=/tmp/site:$root/train PYTHONUNBUFFERED=1
  export SPECDRAFT="/tmp/gpu-node/bin/node $root/dist/cli/main.js"
  purelib=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  echo "root $root; $(nvidia-smi --query-gpu=name --format=csv,noheader)"
  date +%s > /tmp/sd/start
  cat > /tmp/sd/job.sh <<JOB
cd $root
python3 -m specdraft_train run --target /tmp/sd/smol.gguf --out /tmp/sd/run --init scratch --extra "$purelib" --device cuda
echo "run exit \$?"; date +%s > /tmp/sd/run.end
python3 -m specdraft_train ablate --lab /tmp/sd/run --out /tmp/sd/study --jobs 3 --device cuda \
  --variant 'more:variant.init=distilled,distill.epochs=2,distill.lr=0.00025' \
  --variant 'onpolicy:variant.init=distilled,variant.onpolicy=true,distill.epochs=2,distill.lr=0.00025' \
  --variant 'select:variant.select_reference=distilled,distill.select_tokens=0.5'
echo "study exit \$?"; date +%s > /tmp/sd/study.end
JOB
  setsid nohup bash /tmp/sd/job.sh > /tmp/sd/job.log 2>&1 < /dev/null &
  echo $! > /tmp/sd/job.pid
fi
until=$(( $(date +%s) + ${1:-30} ))
while kill -0 "$(cat /tmp/sd/job.pid)" 2>/dev/null && [ "$(date +%s)" -lt "$until" ]; do sleep 5; done
echo "elapsed $(( $(date +%s) - $(cat /tmp/sd/start) )) s"; grep -E "^run: |done in|exit" /tmp/sd/job.log | tail -20; tail -3 /tmp/sd/job.log
