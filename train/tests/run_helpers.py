"""What the `run` tests share: the CLI its steps call, tiny budgets, a few chat prompts of each kind, and how to start
a run as a user does (a process of its own)."""

from __future__ import annotations

import json
import lzma
import os
import sys
from collections import Counter
from pathlib import Path

from conftest import REPO, TRAIN_ROOT

# The CLI the run's pack, selfcheck, speedup and generate steps call: this checkout's sources through tsx (a CI clone
# has a built dist/ too, but a developer's may be stale).
SPECDRAFT = f"node --import {(REPO / 'node_modules/tsx/dist/loader.mjs').as_uri()} {REPO / 'src/cli/main.ts'}"
TINY = [
    "--device", "cpu",
    "--set", "reference.train_prompts=15",
    "--set", "reference.max_new_tokens=16",
    "--set", "reference.batch_size=8",
    "--set", "reference.shard_prompts=8",
    "--set", "distill.epochs=1",
    "--set", "distill.batch_size=5",
    "--set", "distill.eval_every=0",
    "--set", "distill.ckpt_every=1",
    "--set", "distill.time_budget_s=0",
    "--set", "distill.replay_batch_size=2",
    "--set", "distill.replay_seq_len=32",
    "--set", "corpus.max_code_bytes=200000",
    "--set", "corpus.max_prose_bytes=200000",
    "--k", "1,2,4",
    "--repeats", "2",
    "--check-prompts", "3",
    "--check-tokens", "32",
]  # fmt: skip


def small_prompts(path: Path, per_split: dict[str, int], source: str = "chat-prompts-templates.jsonl.xz") -> Path:
    """A few chat prompts of each kind from a built-in set (data/``source``), keeping their splits."""
    seen: Counter[tuple[str, str]] = Counter()
    lines = []
    with lzma.open(REPO / "data" / source, "rt", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            key = (row["split"], row["category"].split("/")[0])
            if seen[key] < per_split.get(row["split"], 0):
                seen[key] += 1
                lines.append(line)
    path.write_text("".join(lines))
    return path


def run_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "specdraft_train", "--threads", "1", "run", *args]


def run_env() -> dict[str, str]:
    return {**os.environ, "SPECDRAFT": SPECDRAFT, "PYTHONPATH": str(TRAIN_ROOT)}
