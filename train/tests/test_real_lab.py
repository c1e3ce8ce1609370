"""The real-model lab's GPU job on the CPU (train/scripts/gpu/real_lab.sh with REAL_LAB_CPU=1, its dry run): staged
by real_lab_stage.sh from the real SmolLM2 GGUF cut to its first 4 of 30 layers (bench/models/truncate_gguf.py: the
real file's tokenizer, template and tensors, a fraction of its compute; tests/test_real_target.py converts the whole
model), run in calls as on the GPU machine — call 1 with only call 1's files (it unpacks the prose and asks for call
2), a call cut by its limit inside `run`, a call that finishes — every step stamped and skipped once done, the lab
made by `run` and `ablate` (the script only stages and calls them), the results within the device tool's limits, and
the report assembled from them: on the GPU side from the lab's folder, then with the CPU's measurements added."""

from __future__ import annotations

import hashlib
import io
import json
import lzma
import os
import re
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, run_main, smollm2_gguf

from specdraft_train.formats.artifacts import read_manifest
from specdraft_train.formats.gguf_reader import GgufReader

SCRIPTS = REPO / "train" / "scripts" / "gpu"
STAGES = (
    "unpack",
    "gguf",
    "prepare",
    "limits",
    "run",
    "layers",
    "links",
    "evaluate",
    "evaluate_other",
    "export",
    "report",
)
# MiB a call carries here, the checkout included: the checkout (~20 MB) and ~28 MB of the cut GGUF as xz (38 MB at
# xz -0), so that the GGUF is split over two calls as the whole one is under the device tool's 64 MiB.
CALL_MIB = 48
TARGET_LAYERS = 4  # of SmolLM2's 30
# SmolLM2-135M-Instruct's parameters: the 49,152 × 576 embedding (tied) and final norm, 3,540,096 a layer
TARGET_PARAMETERS = 49_152 * 576 + 576 + TARGET_LAYERS * 3_540_096
RESULT_LIMIT = 16 * 1048576  # bytes of one file that comes back


def run(script: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPTS / script), *args],
        cwd=REPO,
        env={**os.environ, "PYTHON": str(REPO / "train/.venv/bin/python"), "REAL_LAB_THREADS": "1", **env},
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("real-lab")
    whl = root / "whl"
    whl.mkdir()
    (whl / "gguf-0.19.0-py3-none-any.whl").write_bytes(b"")  # present: the stage script downloads none
    cut = root / "models" / smollm2_gguf().name
    subprocess.run(
        [
            str(REPO / "train/.venv/bin/python"),
            str(REPO / "bench/models/truncate_gguf.py"),
            "--model",
            str(smollm2_gguf()),
            "--layers",
            str(TARGET_LAYERS),
            "--out",
            str(cut),
        ],
        check=True,
        capture_output=True,
    )
    env = {
        "REAL_LAB_GGUF": str(cut),
        "REAL_LAB_STAGED": str(root / "staged"),
        "REAL_LAB_WHL": str(whl),
        "REAL_LAB_XZ_LEVEL": "0",
        "REAL_LAB_CALL_MIB": str(CALL_MIB),
    }
    staging = run("real_lab_stage.sh", {**env, "REAL_LAB_PROSE": "git-doc"})
    assert staging.returncode == 0, staging.stderr
    only_call1 = root / "only-call1"
    only_call1.mkdir()
    (only_call1 / "call1").symlink_to(root / "staged" / "call1")
    # the limits study from call 2 on (call 1 has no reference data for it)
    lab_env = {"REAL_LAB_CPU": "1", "REAL_LAB_DIR": str(root / "work"), "REAL_LAB_LIMITS": "1"}
    calls = [
        run("real_lab.sh", {**lab_env, "REAL_LAB_STAGED": str(only_call1)}, str(root / "results1")),
        run("real_lab.sh", {**lab_env, "REAL_LAB_STAGED": str(root / "staged")}, str(root / "results2"), "30"),
    ]
    stamped_after = [sorted(p.name for p in (root / "work" / "stamps").iterdir())]
    calls.append(run("real_lab.sh", {**lab_env, "REAL_LAB_STAGED": str(root / "staged")}, str(root / "results3")))
    calls.append(run("real_lab.sh", {**lab_env, "REAL_LAB_STAGED": str(root / "staged")}, str(root / "results4")))
    return {
        "root": root,
        "staging": staging.stdout,
        "calls": calls,
        "stamped_after_call2": stamped_after[0],
        "target_sha256": hashlib.sha256(cut.read_bytes()).hexdigest(),
    }


def test_staging_fills_call_1_and_every_call_fits(lab: dict[str, Any]):
    staged = lab["root"] / "staged"
    assert sorted(p.name for p in (staged / "call1").iterdir()) == [
        "prose.tar.xz",
        "smol.gguf.sha256",
        "smol.gguf.xz.part-aa",
    ]
    assert [p.name for p in (staged / "call2").iterdir()] == ["smol.gguf.xz.part-ab"]
    sums = (staged / "call1" / "smol.gguf.sha256").read_text().split("\n")
    assert sums[0].endswith("  SmolLM2-135M-Instruct.Q4_1.gguf") and "part-aa" in sums[1] and "part-ab" in sums[2]
    for line in (line for line in lab["staging"].splitlines() if line.startswith("call ")):
        mib = float(line.split(": ")[-1].split(" MiB")[0])
        assert mib <= CALL_MIB, line


def test_call_1_unpacks_the_prose_and_asks_for_call_2(lab: dict[str, Any]):
    first = lab["calls"][0]
    assert first.returncode == 0, first.stderr
    assert "NEXT CALL: carry" in first.stderr and "call2 (call 2)" in first.stderr
    results = lab["root"] / "results1"
    assert sorted(p.name for p in results.iterdir()) == ["progress.log", "real-lab-results.tar.xz"]
    finished = re.findall(r"\] (\w+): \d+ s$", (results / "progress.log").read_text(), re.MULTILINE)
    assert finished == ["unpack"]


def test_a_call_cut_short_says_so_and_the_next_one_finishes_the_lab(lab: dict[str, Any]):
    cut, finished, again = lab["calls"][1:]
    assert cut.returncode == 0 and "NOT FINISHED" in cut.stderr, cut.stderr
    assert "report" not in lab["stamped_after_call2"] and "gguf" in lab["stamped_after_call2"]
    assert "prepare ran into this call's limit (it resumes)" in cut.stderr  # cut inside `run`, which goes on
    assert finished.returncode == 0 and "DONE: the whole lab" in finished.stderr, finished.stderr
    assert sorted(p.name for p in (lab["root"] / "work" / "stamps").iterdir()) == sorted(STAGES)
    # a rerun of a finished lab runs no stage again
    assert again.returncode == 0 and "DONE" in again.stderr
    assert not any(f"] {stage}\n" in again.stderr for stage in STAGES)


def test_the_results_come_back_within_the_limits_and_hold_the_three_drafters(lab: dict[str, Any]):
    results = lab["root"] / "results3"
    files = sorted(results.iterdir())
    assert len(files) <= 8 and all(f.stat().st_size <= RESULT_LIMIT for f in files)
    parts = [f for f in files if f.name.startswith("real-lab-ggufs.tar.xz.part-")]
    with tarfile.open(fileobj=io.BytesIO(lzma.decompress(b"".join(p.read_bytes() for p in parts)))) as tar:
        tar.extractall(lab["root"] / "ggufs", filter="data")
    for name in ("base-q4_0.gguf", "drafter-q4_0.gguf", "layers-q4_0.gguf"):
        reader = GgufReader(lab["root"] / "ggufs" / name)
        types = {t.name: t.tensor_type.name for t in reader.tensors}
        assert types["token_embd.weight"] == "Q4_0", name  # all-Q4_0, the preset's layout
        assert reader.fields["tokenizer.ggml.pre"].contents() == "smollm"
    with tarfile.open(results / "real-lab-results.tar.xz") as tar:
        names = set(tar.getnames())
    assert {"lab_report.json", "reference/heldout.jsonl", "reference/manifest.json"} <= names
    assert "reference-other/heldout.jsonl" in names and "logs/progress.log" in names


def test_the_report_names_the_target_and_compares_every_drafter(lab: dict[str, Any]):
    work = lab["root"] / "work"
    report = json.loads((work / "lab_report.json").read_text())
    assert report["preset"] == "smollm2-chat" and report["settings"]["mode"] == "cpu-dry-run"
    assert report["target"]["gguf"] == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert report["target"]["parameters"] == TARGET_PARAMETERS
    tau = report["evaluation"]["tau"]
    assert set(tau) == {
        "base",
        "base_q4_0_ptq",
        "distilled",
        "distilled_q4_0_ptq",
        "distilled_qat_latent",
        "distilled_q4_0_qat",
        "ngram",
        "target_as_drafter",
    }
    assert tau["base_q4_0_ptq"]["weights"] == "q4_0-ptq-q4_0-embedding"
    assert tau["distilled_q4_0_qat"]["weights"] == "q4_0-qat-q4_0-embedding"
    assert tau["target_as_drafter"]["tau"] > 10  # the target drafts its own greedy continuations
    assert report["evaluation"]["heldout"]["conversations"] == 6  # 3 categories × 2 held-out lines
    assert report["other_prompts"]["evaluation"]["heldout"]["conversations"] == 3
    origins = report["drafter_origins"]
    assert origins["layers"]["label"] == f"from the target's own layers (0, {TARGET_LAYERS - 1})"
    assert origins["layers"]["parameters"] == 35_392_320
    assert set(report["chat_goals"]) == {"heldout", "other_prompts"}
    assert list(report["stage_seconds"]) == list(STAGES[:-1])  # the report stage stamps after writing it
    markdown = (work / "lab_report.md").read_text()
    sha = lab["target_sha256"][:16]
    assert f"Target: SmolLM2-135M-Instruct.Q4_1.gguf (sha256 {sha}…) dequantized to fp32" in markdown
    for title in ("## Where walks stop", "## Drafters made another way", "## Prompts made by another method"):
        assert title in markdown


def test_the_lab_is_a_run_and_an_ablation_of_it(lab: dict[str, Any]):
    """The script stages and calls: the lab's drafters are `run`'s and `ablate`'s, which scored the layers drafter on
    both held-out sets; `evaluate` over the lab's folder names gives the run's own figures for its drafter."""
    work = lab["root"] / "work"
    assert (work / "distilled-qat").resolve() == (work / "run" / "qat").resolve()
    assert (work / "distilled-layers-qat").resolve() == (work / "layers" / "layers" / "distilled-qat").resolve()
    state = json.loads((work / "run" / "run_state.json").read_text())
    assert {"target", "pretrain", "reference", "reference-eval", "distill", "qat", "evaluate", "export"} <= set(
        state["stamps"]
    )
    assert "pack" not in state["stamps"]  # the node stages run on the CPU afterwards
    layers = json.loads((work / "layers" / "ablation.json").read_text())["variants"][0]
    assert layers["name"] == "layers" and layers["second"]["tau"] > 0
    run_tau = json.loads((work / "run" / "eval" / "results.json").read_text())
    report = json.loads((work / "lab_report.json").read_text())
    assert run_tau["tau"]["drafter_q4_0_qat"]["tau"] == report["evaluation"]["tau"]["distilled_q4_0_qat"]["tau"]
    other = report["other_prompts"]["evaluation"]["tau"]["distilled_q4_0_qat"]["tau"]
    assert run_tau["second"]["tau"]["drafter_q4_0_qat"]["tau"] == other


def test_the_limits_study_distills_on_less_data_before_the_lab(lab: dict[str, Any]):
    """REAL_LAB_LIMITS=1: `ablate` on the lab's base and reference before the lab's own distillation. It evaluated the
    base and the target itself (the lab had not yet), and got the lab's own figures for them; the variant trained on
    what it names; the study comes back in the results."""
    work = lab["root"] / "work"
    summary = json.loads((work / "limits" / "ablation.json").read_text())
    (data50,) = summary["variants"]  # the dry run's one variant (the GPU's are in real_lab.sh)
    assert data50["name"] == "data-50"
    assert data50["config"]["data_fraction"] == 0.5 and data50["config"]["time_budget_s"] == 0
    assert data50["weights"].startswith("q4_0-ptq")  # no QAT: the study scores what distillation learns
    lab_examples = read_manifest(work / "distilled")["metrics"]["examples"]
    assert 0 < data50["examples"] < lab_examples
    evaluated = json.loads((work / "limits" / "reference.json").read_text())["tau"]
    lab_tau = json.loads((work / "lab_report.json").read_text())["evaluation"]["tau"]
    for key in ("base_q4_0_ptq", "target_as_drafter"):
        assert evaluated[key]["tau"] == lab_tau[key]["tau"]
        assert summary["lab_reference"][key]["tau"] == lab_tau[key]["tau"]
    log = (work / "logs" / "progress.log").read_text()
    assert log.index("] limits: ") < log.index("] run: ")
    assert "| data-50 |" in (lab["root"] / "results3" / "limits.md").read_text()
    with tarfile.open(lab["root"] / "results3" / "real-lab-results.tar.xz") as tar:
        assert {"limits/ablation.json", "limits/data-50/result.json"} <= set(tar.getnames())


def generate_summary(k: int, near_tie: bool) -> dict[str, Any]:
    """A `specdraft generate --out` summary of two prompts (the fields real_lab.py reads)."""
    second: dict[str, Any] = {"id": "b", "identical": not near_tie}
    if near_tie:
        second["firstDifference"] = {"position": 7, "nearTie": True}
    return {
        "settings": {"draftLength": k, "maxTokens": 64, "threads": 1},
        "prompts": [{"id": "a", "identical": True}, second],
        "alone": {"tokens": 128, "seconds": 4.0},
        "speculative": {"tokens": 128, "seconds": 2.0, "targetSteps": 40, "draftSeconds": 0.5},
        "speedUp": 2.0 if k == 4 else 1.5,
        "tau": 3.2,
        "nearTies": int(near_tie),
    }


def test_the_cpu_measurements_are_added_to_the_report(lab: dict[str, Any], tmp_path: Path):
    report_file = lab["root"] / "work" / "lab_report.json"
    pytorch = json.loads(report_file.read_text())["evaluation"]["tau"]["distilled_q4_0_qat"]
    categories = list(pytorch["by_category"])
    validate = {
        "tau": pytorch["tau"] * 1.01,
        "tau_macro_over_categories": pytorch["macro_tau"],
        "per_category": {c: {"tau": 2.0} for c in categories},
        "samples": 6,
        "failures": {"total": 0},
    }
    files = {}
    for name, content in (
        ("validate", validate),
        ("k4", generate_summary(4, False)),
        ("k8", generate_summary(8, True)),
    ):
        files[name] = tmp_path / f"{name}.json"
        files[name].write_text(json.dumps(content))
    code, out, err = run_main(
        "real-lab-report",
        "--report",
        str(report_file),
        "--out",
        str(tmp_path / "cpu"),
        "--validate",
        f"templates:distilled_q4_0_qat={files['validate']}",
        "--generate",
        f"distilled_q4_0_qat={files['k4']}",
        "--generate",
        f"distilled_q4_0_qat={files['k8']}",
    )
    assert code == 0, err
    report = json.loads((tmp_path / "cpu" / "lab_report.json").read_text())
    served = report["served"]["held-out, templates"]["distilled_q4_0_qat"]
    assert served["pytorch_tau"] == pytorch["tau"] and served["by_category"] == dict.fromkeys(categories, 2.0)
    runs = report["generate"]["runs"]
    assert [(r["k"], r["ms_per_step"], r["draft_ms_per_step"], r["alone_ms_per_token"]) for r in runs] == [
        (4, 50.0, 12.5, 31.25),
        (8, 50.0, 12.5, 31.25),
    ]
    assert report["chat_goals"]["generate_lossless"] == {"prompts": 4, "near_ties": 1, "differing": [], "met": True}
    markdown = (tmp_path / "cpu" / "lab_report.md").read_text()
    assert "| held-out, templates | distilled, Q4_0 QAT |" in markdown and "| +1.00% |" in markdown
    assert "| distilled, Q4_0 QAT | 4 | 2 × 64 | 3.20 | **2.00×** |" in markdown
    assert "| distilled, Q4_0 QAT | 8 | 2 × 64 | 3.20 | 1.50× |" in markdown
    assert "`generate` lossless on every prompt: 4 generations, 1 parted at a named near tie (met)" in markdown
    assert "llama.cpp on cpu, threads 1" in report["generate"]["machine"]  # the summaries' own settings
    code, _, err = run_main(
        *("real-lab-report", "--report", str(report_file), "--out", str(tmp_path / "gpu")),
        *("--generate", f"distilled_q4_0_qat={files['k4']}", "--generate-machine", "one NVIDIA H200"),
    )
    assert code == 0, err
    machine = json.loads((tmp_path / "gpu" / "lab_report.json").read_text())["generate"]["machine"]
    assert machine.endswith("on one NVIDIA H200; llama.cpp on cpu, threads 1")
    code, _, err = run_main("real-lab-report", "--report", str(report_file), "--validate", f"elsewhere:x={files['k4']}")
    assert code == 2 and "expected SET:DRAFTER" in err
