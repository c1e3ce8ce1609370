"""The H200 dress rehearsal (train/scripts/gpu/real_rehearsal.sh), cheaply: it runs the commands docs/real-model.md
gives for the real path, with their flags, and its report projects the whole job from the stages' measured rates — the
full rehearsal's stage outputs, or the rates mode's bench and training-probe JSON (whose CPU dry run runs here end to
end, ~30 s; the full one, ~10 minutes on the CPU, is too long for CI)."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

sys.path.insert(0, str(REPO / "train" / "scripts" / "gpu"))
import real_rehearsal_report as report  # noqa: E402

from specdraft_train.presets import get_preset  # noqa: E402

SCRIPT = REPO / "train" / "scripts" / "gpu" / "real_rehearsal.sh"


def _commands(text: str, pattern: str) -> list[str]:
    """Shell lines (continuations joined) that match ``pattern``."""
    joined = re.sub(r"\\\n\s*", " ", text)
    return [line.strip() for line in joined.splitlines() if re.search(pattern, line)]


def test_the_rehearsal_runs_every_documented_real_path_command_with_its_flags():
    doc = (REPO / "docs" / "real-model.md").read_text()
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
    assert goals["reference ≥ 9,000 continuation tokens/s at the 8B shape"].startswith("met")
    assert projected["one_h200"]["gpu_hours"] < report.GPU_HOURS_GOAL
    assert goals["whole job ≤ 5 H200-hours"].startswith("met")
    assert goals["packed folder ≤ 10^9 bytes"] == "not measured"
    for name in ("reference", "distill", "qat"):  # a tenth of the rates: over the goals
        rows[name]["tokens_per_s"] /= 10
    slow = report.projection(rows, lengths, cap=16)
    assert slow["one_h200"]["gpu_hours"] > report.GPU_HOURS_GOAL
    goals = report.goals(rows, slow)
    assert goals["whole job ≤ 5 H200-hours"].startswith("NOT met")
    assert goals["reference ≥ 9,000 continuation tokens/s at the 8B shape"] == "NOT met (2,000 tok/s)"
    assert goals["distill and QAT ≥ 40% MFU"] == "not measured"  # the full rehearsal's manifests have no MFU


def test_the_reference_rate_is_its_training_shards_where_the_manifest_has_them(rehearsed: Path):
    """The job is 98 % training prompts; the rehearsal's eval sets are generated in small rounds."""
    manifest = json.loads((rehearsed / "reference" / "manifest.json").read_text())
    manifest["generation"]["per_rank"][0].update(train_tokens=10**6, train_seconds=40.0)
    (rehearsed / "reference" / "manifest.json").write_text(json.dumps(manifest))
    row = report.stage_rows(rehearsed)["reference"]
    assert row["tokens_per_s"] == 25_000 and row["generation_tokens_per_s"] == 20_000


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


def _rates_work(work: Path, probe: dict | None) -> Path:
    """A rates-mode work folder: bench_reference.py's report (2 prompts of 400 and 600 tokens, 256 new each, 40 s,
    an 8.19B model) and the training probe's, as the script's two stages leave them."""
    run = {
        "prompts": 2,
        "tokens": 512,
        "seconds": 40.0,
        "tokens_per_s": 12.8,
        "prompt_tokens": 1000,
        "prompt_tokens_per_s": 100.0,
        "peak_gib": 100.0,
        "prefill": "packed",
        "decode_attention": "flash",
        "max_rows": 1024,
        "kv_cache_fraction": 0.7,
        "prefill_seconds": 10.0,
        "decode_seconds": 30.0,
        "graph_captures": 1,
        "batches": [],
    }
    bench = {
        "model": {"parameters": 8_190_735_360},
        "engines": {"auto": run},
        "workload": {"prompt_tokens_mean": 500.0, "prompt_tokens_max": 600},
    }
    (work / "stamps").mkdir(parents=True)
    (work / "reference-rate.json").write_text(json.dumps(bench))
    _stage(work, "reference-rate", 55.0, nvidia_smi_max_mib=120_000)
    if probe is not None:
        (work / "train-rate.json").write_text(json.dumps(probe))
        _stage(work, "train-rate", 200.0, nvidia_smi_max_mib=80_000)
    return work


PROBE = {
    "distill": {"tokens_per_s": 40_000.0, "continuation_tokens_per_s": 12_000.0, "mfu": 0.46, "peak_gib": 70.0},
    "qat": {"tokens_per_s": 32_000.0, "continuation_tokens_per_s": 9_600.0, "mfu": 0.37, "peak_gib": 72.0},
    "evaluate": {"conversations_per_s": 40.0, "peak_gib": 20.0},
}


def test_the_rates_mode_projects_the_job_from_the_bench_and_the_training_probe(tmp_path: Path):
    work = _rates_work(tmp_path / "work", PROBE)
    rows, lengths = report.rate_rows(work)
    assert lengths == {"prompt_tokens_mean": 500.0, "prompt_tokens_max": 600, "continuation_tokens_mean": 256.0}
    reference = rows["reference"]
    assert reference["tokens_per_s"] == 12.8 and reference["all_tokens_per_s"] == pytest.approx(1512 / 40)
    assert reference["mfu"] == pytest.approx(2 * 8_190_735_360 * 1512 / 40 / (report.PEAK_TFLOPS * 1e12))
    assert reference["peak_gpu_bytes"] == 100 * 2**30 and reference["nvidia_smi_max_mib"] == 120_000
    assert rows["distill"]["all_tokens_per_s"] == 40_000 and rows["qat"]["mfu"] == 0.37
    projected = report.projection(rows, lengths, cap=256)
    hours, split = projected["hours_one_h200"], report.job_split()
    tokens = report.JOB_PROMPTS * report.JOB_CONTINUATION
    assert hours["reference"] == pytest.approx(tokens / (12.8 * report.JOB_CONTINUATION / 256) / 3600)
    # training: the job's prompt and continuation tokens, each epoch, at the all-token rate
    job_tokens = report.JOB_PROMPTS * (500 + report.JOB_CONTINUATION)
    assert hours["distill"] == pytest.approx(split["kd_epochs"] * job_tokens / 40_000 / 3600)
    assert hours["qat"] == pytest.approx(split["qat_epochs"] * job_tokens / 32_000 / 3600)
    # evaluation: four walks of each held-out conversation; dev: one walk at each of KD's and QAT's evaluations
    assert hours["evaluate"] == pytest.approx(report.JOB_EVAL_WALKS * split["heldout"] / 40 / 3600)
    assert hours["dev evaluations"] == pytest.approx(2 * split["dev_evaluations"] * split["dev"] / 40 / 3600)
    three = projected["three_hours"]
    assert three["speedup_needed"] == pytest.approx(sum(hours.values()) / 3)
    assert three["continuation_tokens_per_s_needed"]["distill"] == pytest.approx(12_000 * three["speedup_needed"])
    serial = hours["evaluate"] + hours["dev evaluations"]
    parallel = hours["reference"] + hours["distill"] + hours["qat"]
    assert three["h200s"] == math.ceil(parallel / (3 - serial)) and parallel / three["h200s"] + serial <= 3
    goals = report.goals(rows, projected)
    assert goals["distill and QAT ≥ 40% MFU"] == "NOT met (46% / 37%)"
    assert goals["evaluate 5,000 held-out conversations in ≤ 10 minutes"] == "met (8 min)"  # 4 × 5,000 ÷ 40 a second


def test_a_rates_run_takes_the_stages_it_did_not_measure_from_a_baseline(rehearsed: Path, tmp_path: Path):
    """Without the training probe, distill, QAT, evaluate, export and pack come from an earlier full rehearsal: its
    continuation rates turned into all-token rates at its own lengths, each row marked."""
    full = tmp_path / "full"
    script = str(SCRIPT.with_name("real_rehearsal_report.py"))
    subprocess.run([sys.executable, script, "--work", str(rehearsed), "--out", str(full)], check=True)
    work = _rates_work(tmp_path / "rates-work", None)
    out = tmp_path / "rates"
    subprocess.run(
        [sys.executable, script, "--work", str(work), "--out", str(out), "--baseline", str(full / "rehearsal.json")],
        check=True,
        capture_output=True,
    )
    rates, before = (json.loads((d / "rehearsal.json").read_text()) for d in (out, full))
    stages = rates["stages"]
    assert stages["reference"]["source"].startswith("bench_reference.py")
    assert {name for name, row in stages.items() if row["source"] == "baseline: full"} == {
        "distill",
        "qat",
        "export",
        "pack",
    }
    p, c = before["lengths"]["prompt_tokens_mean"], before["lengths"]["continuation_tokens_mean"]
    assert stages["distill"]["all_tokens_per_s"] == pytest.approx(15_000 * (p + c) / c)
    assert rates["lengths"]["prompt_tokens_mean"] == 500.0  # this run's prompts size the job
    assert rates["projection"]["hours_one_h200"]["export"] == pytest.approx(90 / 3600)
    assert "A 3-hour job on one H200 needs every stage" in (out / "tables.md").read_text()
    # and --from-report projects the stored rows again, the same way
    again = tmp_path / "again"
    subprocess.run(
        [sys.executable, script, "--from-report", str(out / "rehearsal.json"), "--out", str(again)],
        check=True,
        capture_output=True,
    )
    assert json.loads((again / "rehearsal.json").read_text())["projection"] == rates["projection"]


def test_the_rates_mode_runs_on_the_cpu_with_a_training_probe_at_its_hook(tmp_path: Path):
    """The script's rates mode end to end at tiny shapes: the reference bench, the probe the TRAIN_PROBE hook names
    (here a stand-in that writes the interface's train-rate.json into the --out folder it is given), and the report."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import json, sys\n"
        "import pathlib\n"
        f"folder = pathlib.Path(sys.argv[sys.argv.index('--out') + 1])\nfolder.mkdir(parents=True)\n"
        f"(folder / 'train-rate.json').write_text(json.dumps({PROBE!r}))\n"
    )
    settings = {"MODE": "rates", "CPU": "1", "DIR": str(tmp_path / "work"), "REFERENCE_PROMPTS": "6"}
    env = {**os.environ, **{f"REHEARSAL_{k}": v for k, v in settings.items()}, "PYTHON": sys.executable}
    env["TRAIN_PROBE"] = f"{sys.executable} {probe}"
    out = tmp_path / "out"
    subprocess.run(["bash", str(SCRIPT), str(out)], check=True, capture_output=True, cwd=REPO, env=env)
    result = json.loads((out / "rehearsal.json").read_text())
    stages = result["stages"]
    assert stages["reference"]["prompts"] == {"train": 6} and stages["reference"]["tokens_per_s"] > 0
    assert {stages[name]["source"] for name in ("distill", "qat", "evaluate")} == {"training probe"}
    assert stages["export"]["source"].startswith("baseline: ") and result["projection"]["hours_one_h200"]["qat"] > 0
    assert result["goals"]["distill and QAT ≥ 40% MFU"] == "NOT met (46% / 37%)"
    assert (out / "reference-rate.json").is_file() and (out / "train-rate.json").is_file()
