# wait for the job (at most $1 s), show where it is; with "collect", bring back what it wrote
set -uo pipefail
until=$(( $(date +%s) + ${1:-400} ))
while kill -0 "$(cat /tmp/sd/job.pid)" 2>/dev/null && [ "$(date +%s)" -lt "$until" ]; do sleep 5; done
echo "elapsed $(( $(date +%s) - $(cat /tmp/sd/start) )) s"
grep -E "^run: |done in|exit|^ablate: |Error|error|✗|✓" /tmp/sd/job.log | grep -v '%' | tail -25; tail -3 /tmp/sd/job.log
if [ "${2:-}" = collect ]; then
  (cd /tmp/sd && find run study -maxdepth 4 \( -name '*.json' -o -name '*.md' -o -name '*.txt' -o -name '*.log' -o -name '*.html' \) \
     -size -4M -not -path '*/resume/*' -not -name 'tokenizer*' -not -name 'vocab.json' > files.txt 2>/dev/null; echo job.log >> files.txt
   tar cJf "$OUT"/results.tar.xz -T files.txt 2>&1 | tail -2)
  ls -la "$OUT"
fi
