# wait for the job (at most $1 s), show where it is; with "collect", bring back what it wrote
set -uo pipefail
until=$(( $(date +%s) + ${1:-400} ))
while kill -0 "$(cat /tmp/sd/job.pid)" 2>/dev/null && [ "$(date +%s)" -lt "$until" ]; do sleep 5; done
echo "elapsed $(( $(date +%s) - $(cat /tmp/sd/start) )) s"
grep -E "^run: |done in|exit|^ablate: .*(τ|started|finished)|Error|error" /tmp/sd/job.log | tail -12; tail -3 /tmp/sd/job.log; [ -f /tmp/sd/run2.log ] && { grep -E "^run: |✗|✓|exit" /tmp/sd/run2.log | tail -20; tail -3 /tmp/sd/run2.log; }
if [ "${2:-}" = collect ]; then
  r=/tmp/sd/run s=/tmp/sd/study
  (cd /tmp/sd && find run study -maxdepth 4 \( -name '*.json' -o -name '*.md' -o -name '*.txt' -o -name '*.log' \) \
     -size -4M -not -path '*/resume/*' -not -name 'tokenizer*' -not -name 'vocab.json' > files.txt; echo job.log >> files.txt; [ -f run2.log ] && echo run2.log >> files.txt; [ -f study2.log ] && echo study2.log >> files.txt
   tar cJf "$OUT"/results.tar.xz -T files.txt)
  ls -la "$OUT"
fi
