"""The H200 dress rehearsal (train/scripts/gpu/real_rehearsal.sh), cheaply: it runs the commands docs/training.md gives
for the real path, with their flags, and its report projects the whole job from the stages' measured rates. (The
script itself runs end to end on the CPU with REHEARSAL_CPU=1, ~10 minutes: too long for CI.)"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

sys.path.insert(0, str(REPO / "train" / "scripts" / "gpu"))
import real_rehearsal_report as report  # noqa: E402

from specdraft_train.config import get_preset  # noqa: E402

SCRIPT = REPO / "train" / "scripts" / "gpu" / "real_rehearsal.sh"


def _commands(text: str, pattern: str) -> list[str]:
    """Shell lines (continuations joined) that match ``pattern``."""
    joined = re.sub(r"\\\n\s*", " ", text)
    return [line.strip() for line in joined.splitlines() if re.search(pattern, line)]


def test_the_rehearsal_runs_every_documented_real_path_command_with_its_flags():
    doc = (REPO / "docs" / "training.md").read_text()
    section = doc[doc.index("## The real-model path") : doc.index("Replay for a real drafter")]
    documented = _commands(section, r"(python -m specdraft_train|npx specdraft) \w+")
    script = SCRIPT.read_text()
    # reference, distill, distill --qat, evaluate, export, pack, selfcheck, serve, validate
    assert len(documented) == 9, documented
    for command in documented:
        tool, sub = re.search(r"(specdraft_train|specdraft) (\w+)", command).groups()
        flags = set(re.findall(r"(--[\w-]+)", command))
        runner = r'"\$\{py\[@\]\}"' if tool == "specdraft_train" else r"dist/cli/main\.js"
        ours = [line for line in _commands(script, rf"{runner} {sub}\b") if ("--qat" in line) == ("--qat" in flags)]
        assert ours, f"the rehearsal never runs: {command}"
        assert any(flags <= set(re.findall(r"(--[\w-]+)", line)) for line in ours), (command, ours)
        if "--preset" in flags:
            assert all("--preset qwen3-chat" in line for line in ours), ours


def test_the_rehearsal_script_parses():
    assert subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True).returncode == 0


def _stage(work: Path, name: str, seconds: float, **extra) -> None:
    (work / "stamps").mkdir(parents=True, exist_ok=True)
    (work / "stamps" / f"{name}.json").write_text(json.dumps({"stage": name, "seconds": seconds, "rc": 0, **extra}))


@pytest.fixture()
def rehearsed(tiny: dict[str, Path], tmp_path: Path) -> Path:
    """A work folder as the script leaves it, with the rates set: reference 20,000 tok/s, KD 15,000, QAT 12,000."""
    work = tmp_path / "work"
    shutil.copytree(tiny["reference"], work / "reference")
    manifest = json.loads((work / "reference" / "manifest.json").read_text())
    manifest["generation"] = {"tokens_per_s": 20_000.0, "tokens": 10**6, "seconds": 50.0,
                              "per_rank": [{"peak_gpu_bytes": 60 * 2**30, "engine": None}]}  # fmt: skip
    (work / "reference" / "manifest.json").write_text(json.dumps(manifest))
    for folder, rate in (("distilled", 15_000.0), ("distilled-qat", 12_000.0)):
        (work / folder).mkdir()
        metrics = {"tokens_per_s": rate, "steps": 90, "train_tokens": 10**5, "train_seconds": 30.0, "peak_gpu_bytes": 1}
        (work / folder / "manifest.json").write_text(json.dumps({"metrics": metrics, "params": {"global_batch": 16}}))
    for name, seconds in (("reference", 80), ("distill", 60), ("qat", 70), ("export", 90), ("pack", 100)):
        _stage(work, name, seconds)
    return work


def test_the_report_projects_the_job_from_the_measured_rates(rehearsed: Path):
    rows = report.stage_rows(rehearsed)
    lengths = report.token_lengths(rehearsed)
    projected = report.projection(rows, lengths, cap=16)  # the tiny reference's continuations: ≤ 16 tokens
    hours = projected["hours_one_h200"]
    tokens = report.JOB_PROMPTS * report.JOB_CONTINUATION
    # reference: the rows decode to the cap, of which JOB_CONTINUATION tokens are the answer
    assert hours["reference"] == pytest.approx(tokens / (20_000 * report.JOB_CONTINUATION / 16) / 3600)
    scale = projected["assumptions"]["train_cost_scale"]
    p, c = lengths["prompt_tokens_mean"], lengths["continuation_tokens_mean"]
    assert scale == pytest.approx(((p + 200) / 200) / ((p + c) / c)) and scale < 1  # longer answers: cheaper a token
    assert hours["distill"] == pytest.approx(tokens * scale / 15_000 / 3600)
    assert hours["qat"] == pytest.approx(tokens * scale / 12_000 / 3600)
    assert hours["export"] == pytest.approx(90 / 3600) and "evaluate" not in hours  # not run: not projected
    assert projected["one_h200"]["gpu_hours"] == pytest.approx(sum(hours.values()))
    parallel = hours["reference"] + hours["distill"] + hours["qat"]
    assert projected["eight_h200"]["wall_hours"] == pytest.approx(parallel / 8 + hours["export"] + hours["pack"])
    goals = report.goals(rows, projected)
    assert goals["reference ≥ 10,000 continuation tokens/s at the 8B shape"].startswith("met")
    assert projected["one_h200"]["gpu_hours"] < report.GPU_HOURS_GOAL
    assert goals["whole job ≤ 6 H200-hours"].startswith("met")
    assert goals["packed folder ≤ 10^9 bytes"] == "not measured"
    for name in ("reference", "distill", "qat"):  # a tenth of the rates: over the goals
        rows[name]["tokens_per_s"] /= 10
    slow = report.projection(rows, lengths, cap=16)
    assert slow["one_h200"]["gpu_hours"] > report.GPU_HOURS_GOAL
    goals = report.goals(rows, slow)
    assert goals["whole job ≤ 6 H200-hours"].startswith("NOT met")
    assert goals["reference ≥ 10,000 continuation tokens/s at the 8B shape"] == "NOT met (2,000 tok/s)"


def test_a_failed_stage_fails_the_goals(rehearsed: Path):
    _stage(rehearsed, "probe", 30, rc=1)
    rows = report.stage_rows(rehearsed)
    assert report.goals(rows, None)["no stage out of memory or failed"] == "NOT met: probe"


def test_the_projection_counts_the_held_out_walks_and_distills_dev_evaluations(rehearsed: Path, tmp_path: Path):
    rows = report.stage_rows(rehearsed)
    lengths = report.token_lengths(rehearsed)
    drafters = [{"seconds": 10.0, "q4_mode": "q4_0-ptq"}, {"seconds": 38.0, "q4_mode": "q4_0-qat"}]
    rows["evaluate"] = {"seconds": 65.0, "conversations": 49, "drafters": drafters}
    hours = report.projection(rows, lengths, cap=16)["hours_one_h200"]
    split = report.job_split()
    preset = get_preset("qwen3-chat")
    assert split["heldout"] == report.JOB_PROMPTS * preset.corpus.heldout_per_mille // 1000
    steps = (report.JOB_PROMPTS - split["heldout"] - split["dev"]) // preset.distill.batch_size
    assert split["dev_evaluations"] == steps // preset.distill.eval_every + 2
    # loading once (65 − 48 s), the drafters' 48 s for 49 conversations grown to the held-out set
    assert hours["evaluate"] == pytest.approx((17.0 + 48.0 / 49 * split["heldout"]) / 3600)
    # KD and QAT each evaluate dev at the base drafter's rate in one mode (its 10 s held bf16 and Q4_0)
    assert hours["dev evaluations"] == pytest.approx(2 * split["dev_evaluations"] * split["dev"] * 10.0 / 49 / 2 / 3600)
    # the same measurements, projected again from the report a run wrote
    first = tmp_path / "first"
    subprocess.run([sys.executable, str(SCRIPT.with_name("real_rehearsal_report.py")), "--work", str(rehearsed),
                    "--out", str(first)], check=True, capture_output=True)  # fmt: skip
    again = tmp_path / "again"
    subprocess.run([sys.executable, str(SCRIPT.with_name("real_rehearsal_report.py")), "--from-report",
                    str(first / "rehearsal.json"), "--out", str(again)], check=True, capture_output=True)  # fmt: skip
    a, b = (json.loads((d / "rehearsal.json").read_text()) for d in (first, again))
    assert b["stages"] == a["stages"] and b["projection"] == a["projection"] and "projected again" in b["created"]
