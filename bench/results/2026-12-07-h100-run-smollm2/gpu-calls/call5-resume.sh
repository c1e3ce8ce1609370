# call 5: node-llama-cpp's CUDA build and specdraft's CUDA engine; wait for the study (at most $1 s); then `run` again
# (it goes on at selfcheck) in its own session, waiting at most $2 s
set -uo pipefail
root=$PWD
source .gpu4/unpack.sh
node scripts/build-native.mjs --gpu cuda 2>&1 | tail -2
until=$(( $(date +%s) + ${1:-300} ))
while kill -0 "$(cat /tmp/sd/job.pid)" 2>/dev/null && [ "$(date +%s)" -lt "$until" ]; do sleep 5; done
grep -E "^ablate: .*τ|exit" /tmp/sd/job.log | tail -8
if ! kill -0 "$(cat /tmp/sd/job.pid)" 2>/dev/null && [ ! -f /tmp/sd/resumed ]; then
  touch /tmp/sd/resumed
  export PYTHONPATH=/tmp/site:$root/train PYTHONUNBUFFERED=1 SPECDRAFT="/tmp/gpu-node/bin/node $root/dist/cli/main.js"
  purelib=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  setsid nohup python3 -m specdraft_train run --target /tmp/sd/smol.gguf --out /tmp/sd/run --init scratch \
    --extra "$purelib" --device cuda > /tmp/sd/run2.log 2>&1 < /dev/null &
  echo $! > /tmp/sd/job.pid
  date +%s > /tmp/sd/run2.start
fi
until=$(( $(date +%s) + ${2:-200} ))
while kill -0 "$(cat /tmp/sd/job.pid)" 2>/dev/null && [ "$(date +%s)" -lt "$until" ]; do sleep 5; done
grep -E "^run: |exit|Error|✗|✓" /tmp/sd/run2.log | tail -25; tail -3 /tmp/sd/run2.log
