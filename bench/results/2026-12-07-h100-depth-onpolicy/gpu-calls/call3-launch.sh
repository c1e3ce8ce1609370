# call 3: reassemble the GGUF, install gguf; copy the checkout to /tmp/sd/repo (later calls' syncs cannot touch the
# running job); start, in its own session, `run --init layers:4 --until evaluate` with the target-written prompts as
# its second set, then the depth x on-policy study on it; wait at most $1 s
set -uo pipefail
root=$PWD
if [ ! -f /tmp/sd/job.pid ]; then
  mkdir -p /tmp/sd
  cp .g3/smol.gguf.part-ac .g3/smol.sha256 .g3/*.whl .g3/wait.sh /tmp/sd/
  cat /tmp/sd/smol.gguf.part-aa /tmp/sd/smol.gguf.part-ab /tmp/sd/smol.gguf.part-ac > /tmp/sd/smol.gguf
  echo "$(cat /tmp/sd/smol.sha256)  /tmp/sd/smol.gguf" | sha256sum -c || exit 1
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site /tmp/sd/gguf-*.whl
  rm -rf /tmp/sd/repo && mkdir -p /tmp/sd/repo && cp -r data train bench /tmp/sd/repo/ && rm -rf /tmp/sd/repo/train/.cache
  echo "root $root; $(nvidia-smi --query-gpu=name --format=csv,noheader)"
  date +%s > /tmp/sd/start
  cat > /tmp/sd/job.sh <<'JOB'
cd /tmp/sd/repo
export PYTHONPATH=/tmp/site:/tmp/sd/repo/train PYTHONUNBUFFERED=1
python3 -m specdraft_train run --target /tmp/sd/smol.gguf --out /tmp/sd/run --init layers:4 --device cuda \
  --eval-prompts data/chat-prompts-target.jsonl.xz --until evaluate
echo "run exit $?"; date +%s > /tmp/sd/run.end
python3 -m specdraft_train ablate --lab /tmp/sd/run --out /tmp/sd/study --jobs 6 --device cuda --time-budget 0 \
  --variant 'l2:variant.init=layers:2,distill.epochs=3' \
  --variant 'l2-op:variant.init=layers:2,distill.epochs=3,onpolicy.rounds=1' \
  --variant 'l4:variant.init=layers:4,distill.epochs=3' \
  --variant 'l4-op:variant.init=layers:4,distill.epochs=3,onpolicy.rounds=1' \
  --variant 'l8:variant.init=layers:8,distill.epochs=3' \
  --variant 'l8-op:variant.init=layers:8,distill.epochs=3,onpolicy.rounds=1'
echo "study exit $?"; date +%s > /tmp/sd/study.end
JOB
  setsid nohup bash /tmp/sd/job.sh > /tmp/sd/job.log 2>&1 < /dev/null &
  echo $! > /tmp/sd/job.pid
fi
bash /tmp/sd/wait.sh "${1:-30}"
