"""`run` end to end on the CPU: a GGUF target to a packed folder that `selfcheck` passes, a speed-up projection with
`generate` checking it losslessly, and a report; killed mid-stage and run again to the same drafter; a changed input
runs again what depends on it; and the refusals (an architecture it cannot take, a drafter of another vocabulary,
malformed prompts, too little disk), each one line and exit 2, with nothing half-made left as if done.

The Llama target is the real SmolLM2-135M-Instruct GGUF cut to its first layer (bench/models/truncate_gguf.py), with
its real tokenizer and chat template; the Qwen2 and Qwen3 targets are tiny random GGUFs with Qwen3's real tokenizer and
chat template (tiny_targets.py); the prompts are one to three of each kind from the built-in chat prompt set.
Budgets are a handful of steps (--set), so the figures are no measurement: the tests check the pipeline, not τ."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import gguf
import pytest
from conftest import REPO, run_main, smollm2_gguf
from generate_verdict import near_tie_problems
from run_helpers import TINY, run_command, run_env, small_prompts

from specdraft_train.commands.drafter import default_depth
from specdraft_train.formats.artifacts import verify_stage_dir
from specdraft_train.modeling.tau import read_conversations
from specdraft_train.pipeline.run import STAGES
from specdraft_train.presets import PRESETS
from specdraft_train.training.gguf_export import q4_0_bytes_at_least


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A whole run on the cut SmolLM2, as a user runs it (a process of its own)."""
    root = tmp_path_factory.mktemp("run")
    target = root / "smollm2-1-layer.gguf"
    cut = [sys.executable, str(REPO / "bench/models/truncate_gguf.py"), "--model", str(smollm2_gguf())]
    subprocess.run([*cut, "--layers", "1", "--out", str(target)], check=True, capture_output=True)
    prompts = small_prompts(root / "prompts.jsonl", {"train": 3, "dev": 1, "heldout": 1})
    # a second set, as prompts the target wrote: evaluated on, never trained on
    second = small_prompts(root / "second.jsonl", {"train": 1, "heldout": 1}, "chat-prompts-target.jsonl.xz")
    out = root / "out"
    args = ["--target", str(target), "--out", str(out), "--prompts", str(prompts), "--eval-prompts", str(second)]
    args += TINY
    result = subprocess.run(run_command(*args), env=run_env(), cwd=root, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-4000:]
    return {"root": root, "target": target, "prompts": prompts, "out": out, "args": args, "result": result}


def test_the_default_depth_is_the_presets_and_never_the_whole_target():
    # 2 layers for both chat presets, SmolLM2's 30 and Qwen3-8B's 36; a 2-layer target keeps 1, a 1-layer one its 1
    assert [default_depth(PRESETS[p], n) for p, n in (("smollm2-chat", 30), ("qwen3-chat", 36))] == [2, 2]
    assert [default_depth(PRESETS["smollm2-chat"], n) for n in (3, 2, 1)] == [2, 1, 1]


def test_a_gguf_target_becomes_a_packed_checked_drafter_with_a_report(llama: dict[str, Any]):
    out, result = llama["out"], llama["result"]
    summary = json.loads(result.stdout.splitlines()[0])
    assert set(summary) == {"tau", "best_k", "projected_speed_up", "measured_speed_up"}
    report = json.loads((out / "report.json").read_text())
    assert report["drafter"] == "1 of the target's 1 layers, distilled"
    tau = report["evaluation"]["tau"]
    assert set(tau) == {"base_q4_0_ptq", "drafter_q4_0_qat", "ngram", "target_as_drafter"}
    heldout = read_conversations(out / "reference" / "heldout.jsonl")
    categories = {c.category for c in heldout}
    assert all(set(entry["by_category"]) == categories for entry in tau.values())
    assert set(tau["drafter_q4_0_qat"]["tau_by_k"]) == {"1", "2", "4", "16"}
    # the bound a capped run refuses by, before training: the matrices at Q4_0 are most of the file, never more
    at_least, written = q4_0_bytes_at_least(out / "drafter"), report["gguf"]["bytes"]
    assert 0.75 * written < at_least <= written
    # the second set: its held-out lines only (its train line never trained on), every peer by category
    second = report["evaluation"]["second"]
    second_heldout = read_conversations(out / "reference-eval" / "heldout.jsonl")
    assert second["conversations"] == len(second_heldout) > 0 and set(second["tau"]) == set(tau)
    second_categories = {c.category for c in second_heldout}
    assert all(set(entry["by_category"]) == second_categories for entry in second["tau"].values())
    assert verify_stage_dir(out / "reference-eval", "reference")["prompts"]["train"] == 0
    # the folder: packed from the exported GGUF, every gate of selfcheck passed
    assert (out / "drafter-folder" / "architecture.json").is_file()
    assert "all 7 gates passed" in report["selfcheck"]
    # a drafter of the target's layers has no pretraining text: distillation and QAT replayed the corpus in its
    # tokenizer, as the preset says
    replay = verify_stage_dir(out / "replay", "replay")
    assert replay["outputs"]["tokenizer.json"] == verify_stage_dir(out / "drafter")["outputs"]["tokenizer.json"]
    for stage in ("distilled", "qat"):
        manifest = verify_stage_dir(out / stage)
        assert manifest["inputs"]["replay"]["path"] == str(out / "replay") and manifest["metrics"]["replay_tokens"] > 0
    # the drafter as served and walked: validate's summary and HTML page; PyTorch's τ is the walk's up to near ties
    served = report["validate"]["summary"]
    assert served["failures"]["total"] == 0 and served["samples"] == len(heldout)
    assert abs(served["tau"] - tau["drafter_q4_0_qat"]["tau"]) <= 0.25 * tau["drafter_q4_0_qat"]["tau"]
    assert Path(report["validate"]["html"]).is_file()
    # what to expect: a projection at every k with its best k, checked by generate at that k, losslessly
    projection = report["speedup"]["projection"]
    assert [row["k"] for row in projection["rows"]] == [1, 2, 4, 16]
    assert projection["bestK"] == summary["best_k"]
    generated = report["speedup"]["generate"]
    assert generated["settings"]["draftLength"] == summary["best_k"]
    # drafts timed with the CPU's prompt-lookup candidates and without; the folder serves with the faster
    lookahead = projection["lookahead"]
    assert "0" in lookahead["compared"] and len(lookahead["compared"]) == 2  # serve's default here, and none
    folder_setting = json.loads((out / "drafter-folder" / "architecture.json").read_text())["lookahead"]
    assert folder_setting == (None if lookahead["isDefault"] else 0)
    assert ("--lookahead 0" in projection["commands"]["serve"]) == (not lookahead["isDefault"])
    assert near_tie_problems(generated, 3) == []
    markdown = (out / "report.md").read_text()
    needed_lines = ("n-gram prompt lookup", "Best k:", "prompt-lookup candidates", "specdraft serve --model")
    needed_lines += ("llama-server -m", "## selfcheck")
    for needed in (*needed_lines, "conversations of the second set"):
        assert needed in markdown, needed
    # the served walk is over the first set's conversations: said beneath that set's table, before the second's
    first, served = markdown.index("held-out conversations (k ="), markdown.index("walked by `specdraft validate`")
    assert first < served < markdown.index("conversations of the second set")
    # the settings that bound each stage were said before it ran, and progress came as lines, not redraws
    for stage in ("reference: preset", "distill: preset", "qat: preset"):
        assert stage in result.stderr, stage
    assert "reference: held-out and dev sets, round 1:" in result.stderr  # the eval sets' generation says it runs
    assert "\r" not in result.stderr


def test_killed_mid_distillation_the_run_resumes_to_the_same_drafter(llama: dict[str, Any], tmp_path: Path):
    out = tmp_path / "out"  # the run's stages before distillation as they are, copied (a rerun skips them)
    for stage in ("target", "drafter", "reference", "corpus", "replay"):
        shutil.copytree(llama["out"] / stage, out / stage)
    shutil.copy(llama["out"] / "run_state.json", out / "run_state.json")
    args = [*llama["args"][:2], "--out", str(out), *llama["args"][4:], "--until", "distill"]
    process = subprocess.Popen(run_command(*args), env=run_env(), stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    for line in process.stderr:  # SIGKILL once distillation has saved its first step to resume from (it saves before
        if line.startswith("distill: ") and "(2/3 step)" in line:  # the second step starts)
            break
    process.kill()
    process.wait()
    assert not (out / "distilled" / "manifest.json").exists()
    resumed = subprocess.run(run_command(*args), env=run_env(), capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "run: reference: complete" in resumed.stderr and "run: distill: complete" not in resumed.stderr
    ours = (out / "distilled" / "model.safetensors").read_bytes()
    assert ours == (llama["out"] / "distilled" / "model.safetensors").read_bytes()


def test_a_second_run_skips_every_stage_and_a_changed_input_runs_what_depends_on_it(
    llama: dict[str, Any], tmp_path: Path
):
    again = subprocess.run(run_command(*llama["args"]), env=run_env(), capture_output=True, text=True)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stderr.count("complete in") == len(STAGES) - 1  # every stage but pretrain (layers drafter)
    changed = tmp_path / "prompts-changed.jsonl"
    changed.write_text(llama["prompts"].read_text().replace("?", "??", 1))
    out = tmp_path / "out"  # a copy: the other tests read the finished run as it is
    shutil.copytree(llama["out"], out)
    args = [*llama["args"][:2], "--out", str(out), *llama["args"][4:], "--prompts", str(changed), "--until", "distill"]
    rerun = subprocess.run(run_command(*args), env=run_env(), capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "run: target: complete" in rerun.stderr and "run: drafter: complete" in rerun.stderr
    assert "run: reference: prompts changed since it ran; running it again" in rerun.stderr
    assert "run: distill: reference changed since it ran; running it again" in rerun.stderr
    assert "stopped after distill (--until)" in rerun.stderr


def test_an_onpolicy_round_added_to_a_finished_run_reruns_only_what_it_changes(llama: dict[str, Any], tmp_path: Path):
    out = tmp_path / "out"  # the finished run's folders up to distillation, copied
    for stage in ("target", "drafter", "reference", "corpus", "replay", "distilled"):
        shutil.copytree(llama["out"] / stage, out / stage)
    shutil.copy(llama["out"] / "run_state.json", out / "run_state.json")
    rounds = ["--set", "onpolicy.rounds=1", "--set", "onpolicy.max_new_tokens=8", "--set", "onpolicy.epochs=1"]
    rounds += ["--until", "qat"]
    args = [*llama["args"][:2], "--out", str(out), *llama["args"][4:], *rounds]
    result = subprocess.run(run_command(*args), env=run_env(), capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    for stage in ("target", "drafter", "reference", "replay", "distill"):  # settings of other sections leave them be
        assert f"run: {stage}: complete" in result.stderr, stage
    data = verify_stage_dir(out / "onpolicy-1", "onpolicy")
    assert data["inputs"]["drafter"]["path"] == str(out / "distilled") and data["params"]["max_new_tokens"] == 8
    again = verify_stage_dir(out / "distilled-1", "distill")
    assert again["inputs"]["drafter"]["path"] == str(out / "distilled")
    assert again["inputs"]["onpolicy"][0]["path"] == str(out / "onpolicy-1")
    assert again["metrics"]["examples"] == 2 * verify_stage_dir(out / "distilled", "distill")["metrics"]["examples"]
    assert verify_stage_dir(out / "qat", "distill")["inputs"]["drafter"]["path"] == str(out / "distilled-1")


def write_header_only_gguf(path: Path, arch: str) -> Path:
    writer = gguf.GGUFWriter(path, arch)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def assert_refused(code: int, err: str, says: str, out: Path) -> None:
    assert code == 2 and says in err and len(err.strip().splitlines()[-1:]) == 1, err
    assert "Traceback" not in err
    state = out / "run_state.json"
    assert not state.exists() or not json.loads(state.read_text())["stamps"], "a refused run recorded a stage"


def test_refusals_are_one_line_and_leave_nothing_done(llama: dict[str, Any], tmp_path: Path, monkeypatch):
    prompts = ["--prompts", str(llama["prompts"]), "--device", "cpu"]
    gemma = write_header_only_gguf(tmp_path / "gemma.gguf", "gemma2")
    code, _, err = run_main("run", "--target", str(gemma), "--out", str(tmp_path / "a"), *prompts)
    assert_refused(code, err, "architecture 'gemma2'", tmp_path / "a")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"messages": "not a list"}\n')
    code, _, err = run_main(
        "run", "--target", str(llama["target"]), "--out", str(tmp_path / "b"), "--prompts", str(bad)
    )
    assert_refused(code, err, "bad.jsonl", tmp_path / "b")
    # a drafter whose Q4_0 file cannot fit the export cap: refused once made, before the target answers anything
    capped = [*prompts, "--set", "export.max_bytes=1000000"]
    code, _, err = run_main("run", "--target", str(llama["target"]), "--out", str(tmp_path / "cap"), *capped)
    assert code == 2 and "over the export cap of 1,000,000" in err and "--init layers:N" in err, err
    assert (tmp_path / "cap" / "drafter").is_dir() and not (tmp_path / "cap" / "reference").exists()
    monkeypatch.setattr(shutil, "disk_usage", lambda _: shutil._ntuple_diskusage(10**9, 10**9 - 1000, 1000))
    code, _, err = run_main("run", "--target", str(llama["target"]), "--out", str(tmp_path / "c"), *prompts)
    assert_refused(code, err, "GB free", tmp_path / "c")
    assert not (tmp_path / "c" / "target").exists()
