# call 4 (chain 2): the CUDA addon; speedup with and without --data, generate at k = 2, 4, 8, the verify probe; then
# the 2-layer epoch study in the background (run --until reference, ablate e7/e14), waiting at most $1 s
set -uo pipefail
cp .gd4/l4.xz.part-a[bc] /tmp/sd/ && cat /tmp/sd/l4.xz.part-a[abc] | xz -dc > /tmp/sd/l4.gguf
echo "$(cat /tmp/sd/l4.sha256)  /tmp/sd/l4.gguf" | sha256sum -c
cp .gd4/nlc-cuda.tar.xz /tmp/sd/stage/ && source /tmp/sd/stage/unpack.sh
node scripts/build-native.mjs --gpu cuda 2>&1 | tail -1
xz -dc .gd5/heldout.jsonl.xz > /tmp/sd/heldout.jsonl
T=/tmp/sd/smol.gguf D=/tmp/sd/l4.gguf P=/tmp/sd/prompts.jsonl H=/tmp/sd/heldout.jsonl S="node dist/cli/main.js"
echo '{"tau": 3.842, "k": 16}' > /tmp/sd/tau.json
d=/tmp/sd/diag2 && mkdir -p $d
sp() { $S speedup --target $T --draft-model $D --tau /tmp/sd/tau.json --no-progress "$@"; }
sp --data $H --json $d/speedup-data1.json > $d/speedup-data1.txt 2>&1
sp --json $d/speedup-syn.json > $d/speedup-syn.txt 2>&1
for k in 2 4 8; do
  $S generate --target $T --draft-model $D --data $P --max-tokens 256 --draft-len $k --no-progress --out $d/gen-k$k.json > $d/gen-k$k.txt 2>&1
  grep -E "^speed-up" $d/gen-k$k.txt
done
node .gd5/probe.mjs $T $D > $d/probe.json 2> $d/probe.err
sp --data $H --json $d/speedup-data2.json > $d/speedup-data2.txt 2>&1
cat $d/speedup-data1.txt | sed -n 1,14p
(cd /tmp/sd && tar cJf "$OUT"/diag2.tar.xz diag2)
# the epoch study
if [ ! -f /tmp/sd/job.pid ]; then
  rm -rf /tmp/sd/repo && mkdir -p /tmp/sd/repo && cp -r data train bench /tmp/sd/repo/ && rm -rf /tmp/sd/repo/train/.cache
  date +%s > /tmp/sd/start
  cat > /tmp/sd/job.sh <<'JOB'
cd /tmp/sd/repo
export PYTHONPATH=/tmp/site:/tmp/sd/repo/train PYTHONUNBUFFERED=1
python3 -m specdraft_train run --target /tmp/sd/smol.gguf --out /tmp/sd/run --init layers:2 --device cuda \
  --eval-prompts data/chat-prompts-target.jsonl.xz --until reference
echo "run exit $?"; date +%s > /tmp/sd/run.end
python3 -m specdraft_train ablate --lab /tmp/sd/run --out /tmp/sd/study --jobs 2 --device cuda --time-budget 0 \
  --variant 'e7:variant.init=layers:2,distill.epochs=7' \
  --variant 'e14:variant.init=layers:2,distill.epochs=14'
echo "study exit $?"; date +%s > /tmp/sd/study.end
JOB
  setsid nohup bash /tmp/sd/job.sh > /tmp/sd/job.log 2>&1 < /dev/null &
  echo $! > /tmp/sd/job.pid
fi
bash .gd5/wait.sh "${1:-300}"
