"""scripts/gpu/scaling.py, the multi-GPU throughput job, at tiny sizes on the CPU (2 gloo ranks against 1), so that
the script the GPU machine runs cannot rot: the stages it drives, their flags and the manifest fields it reads.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import TRAIN_ROOT

SCRIPT = TRAIN_ROOT / "scripts" / "gpu" / "scaling.py"
TINY = (
    "--device",
    "cpu",
    "--threads",
    "1",
    "--shape",
    "tiny",
    "--vocab",
    "512",
    "--corpus-bytes",
    "400000",
    "--max-file-bytes",
    "24000",
    "--eval-per-category",
    "1",
    "--prompts",
    "48",
    "--new-tokens",
    "8",
    "--batch-size",
    "16",
    "--shard-prompts",
    "8",
    "--batch-per-rank",
    "4",
    "--fsdp",
)


def test_gpu_scaling_measures_one_and_two_ranks(tmp_path: Path):
    out = tmp_path / "results" / "gpu_scaling.json"
    env = {**os.environ, "PYTHONPATH": str(TRAIN_ROOT), "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, str(SCRIPT), *TINY, "--work", str(tmp_path / "work"), "--out", str(out)],
        capture_output=True,
        text=True,
        env=env,
        cwd=TRAIN_ROOT,
        timeout=600,
    )
    logs = "".join(f"\n--- {log.name}\n{log.read_text()[-2000:]}" for log in out.parent.glob("*.log"))
    assert result.returncode == 0, result.stdout + result.stderr[-3000:] + logs
    report = json.loads(out.read_text())
    assert report["errors"] == [] and report["ranks_measured"] == [1, 2]
    for stage in ("reference", "distill", "distill_fsdp"):
        runs = report[stage]["runs"]
        assert set(runs) == {"1", "2"} and all(r["tokens_per_s"] > 0 for r in runs.values())
        assert runs["1"]["tokens"] == runs["2"]["tokens"]  # the same work on either rank count
        assert set(report[stage]["speedup"]) == {"2"} and isinstance(report[stage]["meets_goal"], bool)
    assert report["reference"]["outputs_identical_to_one_rank"] == {"2": True}
    assert [r["rank"] for r in report["reference"]["runs"]["2"]["per_rank"]] == [0, 1]
    distill = report["distill"]["runs"]
    assert distill["2"]["global_batch"] == 2 * distill["1"]["global_batch"]  # weak scaling: a batch per rank
    assert distill["2"]["steps"] * 2 == distill["1"]["steps"]
    assert report["workload"]["models"]["target"]["parameters"] > 0
    assert {"reference-1.log", "reference-2.log", "distill-1.log", "distill-2.log", "distill_fsdp-2.log"} <= {
        p.name for p in out.parent.iterdir()
    }
