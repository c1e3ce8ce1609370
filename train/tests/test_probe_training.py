"""scripts/gpu/probe_training.py, the GPU job that times distill's and QAT's steps and evaluate's one-pass τ, as its
CPU dry run: it drives the stages' own code (so it cannot rot), measures every configuration but the compiled ones,
and a rerun keeps what an earlier run measured."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import TRAIN_ROOT

SCRIPT = TRAIN_ROOT / "scripts" / "gpu" / "probe_training.py"


def _probe(work: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(TRAIN_ROOT), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, str(SCRIPT), "--cpu", "--work", str(work), "--out", str(out), *extra]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    return result


def test_training_probe_measures_each_form_through_the_stages_and_resumes(tmp_path: Path):
    work, out = tmp_path / "work", tmp_path / "out"
    _probe(work, out, "--only", "distill packed")
    first = json.loads((out / "probe_training.json").read_text())
    assert list(first["configs"]) == ["distill packed"] and "evaluate" not in first
    _probe(work, out)
    report = json.loads((out / "probe_training.json").read_text())
    configs = report["configs"]
    assert configs["distill packed"] == first["configs"]["distill packed"]  # kept from the first run, not re-measured
    assert configs["distill packed+compile"] == configs["qat packed+compile"] == {"skipped": "CPU dry run"}
    measured = {name: entry for name, entry in configs.items() if "skipped" not in entry}
    assert set(measured) == {
        "distill padded+recompute",
        "distill packed",
        "distill packed+recompute",
        "qat padded+recompute",
        "qat packed",
    }
    for name, entry in measured.items():
        assert entry["tokens_per_s"] > entry["continuation_tokens_per_s"] > 0 and entry["mfu"] > 0, name
        assert entry["steps"] == 2 and entry["qat"] == name.startswith("qat"), name
        assert entry["activation_checkpointing"] == ("on (set)" if "recompute" in name else "off (set)"), name
    for name in ("distill packed", "qat packed"):  # the same rows' loss, packed and right-padded
        assert measured[name]["packed_vs_padded_loss"] < 1e-5, name
    evaluation = report["evaluate"]
    assert evaluation["conversations"] == 6 and evaluation["heldout_5000_minutes"] > 0
    assert evaluation["as_trained"]["conversations_per_s"] > 0 and evaluation["q4_0"]["conversations_per_s"] > 0
    # the rehearsal's train-rate.json: distill's default forms (packed, no recompute on a CPU), evaluate's one-mode rate
    rates = json.loads((out / "train-rate.json").read_text())
    assert rates["distill"]["configuration"] == "distill packed" and rates["qat"]["configuration"] == "qat packed"
    assert rates["distill"]["tokens_per_s"] == measured["distill packed"]["tokens_per_s"]
    one_mode = [evaluation[mode]["conversations_per_s"] for mode in ("as_trained", "q4_0")]
    assert min(one_mode) < rates["evaluate"]["conversations_per_s"] < max(one_mode)
    table = (out / "probe_training.md").read_text()
    assert all(f"| {name} |" in table for name in configs) and "5,000 conversations" in table
