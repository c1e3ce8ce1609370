"""scripts/gpu/scaling.py, the multi-GPU throughput job, at tiny sizes on the CPU (2 gloo ranks against 1), so that
the script the GPU machine runs cannot rot: the stages it drives, their flags and the manifest fields it reads. Its
reference runs on 1 and 2 ranks are also where the sharded reference stage is checked against one process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import TRAIN_ROOT

from specdraft_train.commands.reference import CLAIMS_DIR
from specdraft_train.formats.artifacts import verify_stage_dir

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


@pytest.fixture(scope="module")
def scaling(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path, Path]:
    """The script's report, its results folder (the logs) and its work folder (each stage's output per rank count)."""
    root = tmp_path_factory.mktemp("scaling")
    out, work = root / "results" / "gpu_scaling.json", root / "work"
    env = {**os.environ, "PYTHONPATH": str(TRAIN_ROOT), "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, str(SCRIPT), *TINY, "--work", str(work), "--out", str(out)],
        capture_output=True,
        text=True,
        env=env,
        cwd=TRAIN_ROOT,
        timeout=600,
    )
    logs = "".join(f"\n--- {log.name}\n{log.read_text()[-2000:]}" for log in out.parent.glob("*.log"))
    assert result.returncode == 0, result.stdout + result.stderr[-3000:] + logs
    return json.loads(out.read_text()), out.parent, work


def test_gpu_scaling_measures_one_and_two_ranks(scaling: tuple[dict[str, Any], Path, Path]):
    report, results, _ = scaling
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
        p.name for p in results.iterdir()
    }


def test_sharded_reference_on_two_ranks_writes_the_files_of_one_process(scaling: tuple[dict[str, Any], Path, Path]):
    """The scaling job's reference runs are the reference stage under torchrun on 1 and 2 gloo ranks: every shard is
    the same generate call over the same prompts wherever it ran, so the two write the same files, byte for byte;
    rank 0 alone generates the held-out and dev sets, and the ranks' claims are cleared at the end."""
    one, two = (scaling[2] / f"reference-{n}" for n in (1, 2))
    ours, theirs = verify_stage_dir(one, "reference")["outputs"], verify_stage_dir(two, "reference")["outputs"]
    shards = [name for name in ours if name.startswith("train-")]
    assert sorted(ours) == sorted(theirs) and len(shards) == 6  # 48 prompts in shards of 8
    for name in ours:
        assert (one / name).read_bytes() == (two / name).read_bytes(), name
    manifest = verify_stage_dir(two, "reference")
    generation = manifest["generation"]
    assert manifest["params"]["world_size"] == generation["world_size"] == 2
    assert [r["rank"] for r in generation["per_rank"]] == [0, 1] and generation["train_shards"] == len(shards)
    assert generation["per_rank"][0]["eval_tokens"] > 0 and generation["per_rank"][1]["eval_tokens"] == 0
    assert generation["tokens"] == verify_stage_dir(one, "reference")["generation"]["tokens"]
    assert generation["tokens_per_s"] > 0 and not (two / CLAIMS_DIR).exists()
