"""The micro lab end to end on CPU (CI's check that distillation + QAT beat the base drafter at Q4_0, on a held-out
set of every category), then a rerun that skips every finished stage."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import run_cli, run_main

from specdraft_train.formats.artifacts import verify_stage_dir
from specdraft_train.formats.prompts import corpus_categories
from specdraft_train.modeling.tau import gap_closed, read_conversations
from specdraft_train.pipeline.lab import run_lab
from specdraft_train.presets import MICRO

STAGES = (
    "corpus",
    "tokenizer",
    "pretrain target",
    "pretrain base",
    "reference",
    "distill",
    "distill --qat",
    "evaluate",
)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The documented command, `lab --preset micro`, run in this process (the two-rank lab below starts its own)."""
    out = tmp_path_factory.mktemp("lab") / "micro"
    code, stdout, err = run_main("lab", "--preset", "micro", "--out", str(out), "--device", "cpu")
    assert code == 0 and f"report: {out / 'lab_report.md'}" in stdout, err[-3000:]
    return out


def test_micro_lab_distilled_qat_beats_base_ptq(lab: Path):
    report = json.loads((lab / "lab_report.json").read_text())
    tau = report["evaluation"]["tau"]
    assert tau["distilled_q4_0_qat"]["tau"] > tau["base_q4_0_ptq"]["tau"]
    assert tau["distilled_q4_0_qat"]["weights"] == "q4_0-qat" and tau["base_q4_0_ptq"]["weights"] == "q4_0-ptq"
    # Sanity: the target drafting for itself accepts (nearly) everything: τ ≈ k + 1 (48-token continuations: ≤ 16).
    assert tau["target_as_drafter"]["tau"] > 15
    assert report["goals"]["qat_beats_base_ptq"] is True
    for entry in tau.values():
        assert (
            sum(c["conversations"] for c in entry["by_category"].values())
            == report["evaluation"]["heldout"]["conversations"]
        )
    assert 0 < report["evaluation"]["repeated_4gram_share"] < 1
    assert set(report["stage_seconds"]) >= set(STAGES)
    markdown = (lab / "lab_report.md").read_text()
    assert "τ Q4_0 QAT" in markdown and "repeated-4-gram share" in markdown


def test_micro_lab_heldout_has_every_category_with_its_count(lab: Path):
    names = [c.name for c in corpus_categories(("code", "prose"), MICRO.reference.prompt_lengths)]
    conversations = read_conversations(lab / "reference" / "heldout.jsonl")
    assert Counter(c.category for c in conversations) == {name: MICRO.reference.heldout_per_category for name in names}
    assert min(len(c.continuation_tokens) for c in conversations) >= MICRO.reference.min_continuation_tokens
    report = json.loads((lab / "lab_report.json").read_text())
    assert report["prompts"]["train"] == verify_stage_dir(lab / "reference")["categories"]["train"]
    assert set(report["prompts"]["train"]) == set(names) and sum(report["prompts"]["train"].values()) == 384


def test_micro_lab_report_has_macro_tau_gap_closed_and_repetition_by_category(lab: Path):
    report = json.loads((lab / "lab_report.json").read_text())
    evaluation, comparison = report["evaluation"], report["comparison"]
    tau = evaluation["tau"]
    base, target, qat = tau["base_q4_0_ptq"], tau["target_as_drafter"], tau["distilled_q4_0_qat"]
    names = list(base["by_category"])
    assert len(names) == 12 and set(evaluation["repeated_4gram_share_by_category"]) == set(names)
    assert qat["macro_tau"] == pytest.approx(sum(qat["by_category"][n]["tau"] for n in names) / 12)
    assert (
        comparison["distilled_q4_0_qat"]["overall"]["gap_closed"]
        == report["goals"]["qat_gap_closed"]
        == (gap_closed(qat["tau"], base["tau"], target["tau"]))
    )
    assert comparison["base_q4_0_ptq"]["overall"] == {"over_base_q4_0_ptq": 1.0, "gap_closed": 0.0}
    for name in names:
        cell = comparison["distilled_q4_0_qat"]["by_category"][name]
        assert cell["over_base_q4_0_ptq"] == qat["by_category"][name]["tau"] / base["by_category"][name]["tau"]
        assert cell["gap_closed"] == gap_closed(
            qat["by_category"][name]["tau"], base["by_category"][name]["tau"], target["by_category"][name]["tau"]
        )
    assert comparison["distilled_q4_0_qat"]["macro"]["gap_closed"] == gap_closed(
        qat["macro_tau"], base["macro_tau"], target["macro_tau"]
    )
    markdown = (lab / "lab_report.md").read_text()
    assert "gap closed" in markdown and "| macro |" in markdown and "## Where walks stop" in markdown
    for name in names:  # a row in the per-category τ, ratio · gap-closed and where-walks-stop tables
        assert markdown.count(f"| {name} |") == 3, name
    assert sum(base["accepted_lengths"]["all"]) == base["steps"]  # every step of the base's walks, by where it stopped


def test_micro_lab_writes_data_manifest_architecture_and_gguf(lab: Path):
    data = json.loads((lab / "data_manifest.json").read_text())
    sources = json.loads((lab / "corpus" / "sources.json").read_text())
    assert len(data["files"]) == len(sources["files"]) > 1000  # every file seen, with its kind, hash and split
    splits = {f["split"] for f in data["files"]}
    assert {"train", "dev", "heldout"} <= splits and all(len(f["sha256"]) == 64 for f in data["files"])
    for kind in ("code", "prose"):
        assert {f["split"] for f in data["files"] if f["kind"] == kind} >= {"train", "dev", "heldout"}, kind
    assert [r["source"] for r in data["roots"] if r["kind"] == "prose"] == ["prose:git-doc"]
    assert data["prose_repeats"] == MICRO.tokenizer.prose_repeats == 2
    assert (
        data["artifacts"]["reference"]["heldout.jsonl"]
        == verify_stage_dir(lab / "reference")["outputs"]["heldout.jsonl"]["sha256"]
    )
    architecture = json.loads((lab / "architecture.json").read_text())
    assert architecture["model_type"] == "qwen3" and architecture["parameters"] > 0
    report = json.loads((lab / "lab_report.json").read_text())
    gguf_path = lab / "export" / "drafter-q4_0.gguf"
    assert gguf_path.is_file() and report["export"]["bytes"] == gguf_path.stat().st_size
    assert architecture["q4_0_gguf_tensor_types"]["model.layers.0.mlp.down_proj.weight"] == "Q4_0"


def test_micro_lab_rerun_skips_finished_stages(lab: Path, capsys: pytest.CaptureFixture[str]):
    before = json.loads((lab / "lab_report.json").read_text())
    run_lab(lab, "micro", [], "cpu")  # what rerunning the CLI command does, in this process
    stderr = capsys.readouterr().err
    for stage in STAGES:
        assert f"lab: {stage}: complete" in stderr, stage
    after = json.loads((lab / "lab_report.json").read_text())
    assert after["evaluation"] == before["evaluation"] and after["stage_seconds"] == before["stage_seconds"]
    with pytest.raises(ValueError, match="preset 'micro'"):
        run_lab(lab, "lab", [], "cpu")


def test_interrupted_stage_time_is_added_to_the_resumed_run(tmp_path: Path):
    from specdraft_train.pipeline.lab import LabState, run_stage
    from specdraft_train.presets import MICRO

    state = LabState(tmp_path, MICRO, [], [])

    def interrupted() -> None:
        time.sleep(0.05)  # the seconds spent before the interrupt must be kept
        raise KeyboardInterrupt  # what `timeout --signal=INT` delivers

    with pytest.raises(KeyboardInterrupt):
        run_stage(state, "distill", tmp_path, interrupted, lambda: False)
    assert 0.05 <= state.data["interrupted_seconds"]["distill"] < 1.0 and "distill" not in state.data["stage_seconds"]
    assert (
        json.loads((tmp_path / "lab_state.json").read_text())["interrupted_seconds"]
        == state.data["interrupted_seconds"]
    )
    state.data["interrupted_seconds"]["distill"] = 5.0
    run_stage(state, "distill", tmp_path, lambda: None, lambda: False)
    assert 5.0 <= state.data["stage_seconds"]["distill"] < 6.0
    assert "distill" not in state.data["interrupted_seconds"]
    assert json.loads((tmp_path / "lab_state.json").read_text())["stage_seconds"]["distill"] >= 5.0


# The micro lab at the conftest fixture's sizes (seconds per stage): what the two-rank lab below runs.
TINY_LAB = (
    "corpus.max_file_bytes=24000",
    "corpus.heldout_per_mille=200",
    "corpus.dev_per_mille=150",
    "corpus.max_code_bytes=200000",
    "corpus.max_prose_bytes=200000",
    "tokenizer.vocab_size=512",
    "pretrain_target.max_steps=20",
    "pretrain_target.batch_size=8",
    "pretrain_drafter.max_steps=8",
    "pretrain_drafter.batch_size=8",
    "reference.max_new_tokens=16",
    "reference.min_continuation_tokens=8",
    "reference.train_prompts=48",
    "reference.dev_per_category=1",
    "reference.heldout_per_category=2",
    "reference.batch_size=16",
    "reference.shard_prompts=16",
    "distill.epochs=1",
)


def test_lab_on_two_ranks_runs_every_stage_and_resumes_in_one_process(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    """``lab --nproc-per-node 2`` starts itself again through torch.distributed.run (2 gloo ranks): the training and
    reference stages run on both ranks, the rest on rank 0, and the finished directory is a lab like any other."""
    out = tmp_path / "lab"
    settings = [arg for setting in TINY_LAB for arg in ("--set", setting)]
    run_cli(
        "lab",
        "--nproc-per-node",
        "2",
        "--preset",
        "micro",
        "--out",
        str(out),
        "--device",
        "cpu",
        *settings,
        timeout=600,
    )
    for stage_dir in ("target", "base", "reference", "distilled", "distilled-qat"):
        assert verify_stage_dir(out / stage_dir)["params"]["world_size"] == 2, stage_dir
    report = json.loads((out / "lab_report.json").read_text())
    assert set(STAGES) <= set(report["stage_seconds"])
    run_lab(out, "micro", [], "cpu", settings=list(TINY_LAB))  # a rerun, here one process: everything is done
    stderr = capsys.readouterr().err
    for stage in STAGES:
        assert f"lab: {stage}: complete" in stderr, stage


def test_missing_prose_names_the_folder_and_the_fetch_command():
    from dataclasses import replace

    from specdraft_train.commands.corpus import FETCH_PROSE, PROSE_CACHE, preset_prose

    assert preset_prose(MICRO) == [PROSE_CACHE / "git-doc"]
    with pytest.raises(FileNotFoundError) as error:
        preset_prose(replace(MICRO, prose_packages=("git-doc", "no-such-doc")))
    assert str(PROSE_CACHE / "no-such-doc") in str(error.value)
    assert f"bash {FETCH_PROSE} {PROSE_CACHE} no-such-doc" in str(error.value)
