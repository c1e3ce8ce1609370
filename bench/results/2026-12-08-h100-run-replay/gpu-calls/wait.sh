# wait for the job (at most $1 s), show where it is; with "collect", bring back what it wrote, and the drafter GGUFs of
# the runs named after it (e.g. run-l2), xz in 15 MiB parts
set -uo pipefail
until=$(( $(date +%s) + ${1:-400} ))
while kill -0 "$(cat /tmp/sd/job.pid)" 2>/dev/null && [ "$(date +%s)" -lt "$until" ]; do sleep 5; done
echo "elapsed $(( $(date +%s) - $(cat /tmp/sd/start) )) s"
grep -E "^run: |done in|exit|Error|error|✗|✓" /tmp/sd/job.log | grep -v '%' | tail -25; tail -3 /tmp/sd/job.log
if [ "${2:-}" = collect ]; then
  (cd /tmp/sd && find run run-l2 run-l8 -maxdepth 4 \( -name '*.json' -o -name '*.md' -o -name '*.txt' -o -name '*.log' -o -name '*.html' \) \
     -size -4M -not -path '*/resume/*' -not -name 'tokenizer*' -not -name 'vocab.json' > files.txt 2>/dev/null
   ls run-l2/reference*/heldout.jsonl l2.log l8.log >> files.txt 2>/dev/null; echo job.log >> files.txt
   tar cJf "$OUT"/results.tar.xz -T files.txt 2>&1 | tail -2)
  for r in "${@:3}"; do
    xz -T0 -c /tmp/sd/$r/export/drafter-q4_0.gguf | split -b 15M - "$OUT"/$r-drafter.gguf.xz.part-
  done
  ls -la "$OUT"
fi
