"""The stage runner's folder rules: a changed stamp clears the stage's own folder and nothing beside it, and a stamped
stage is refused a folder that holds the run's state (clearing it would take every other stage's outputs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from specdraft_train.pipeline.runner import STATE_FILE, Runner


def write_stage(directory: Path, text: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "out.txt").write_text(text)


def test_a_changed_stamp_clears_only_that_stages_folder(tmp_path: Path):
    runner = Runner(tmp_path, "test", log=lambda line: None)
    first, second = tmp_path / "first", tmp_path / "second"
    runner.stage("first", first, lambda: write_stage(first, "a"), (first / "out.txt").is_file, {"setting": 1})
    runner.stage("second", second, lambda: write_stage(second, "b"), (second / "out.txt").is_file, {"from": 1})
    (first / "left-over.txt").write_text("a file the rerun must not keep")

    again = Runner(tmp_path, "test", log=lambda line: None)
    again.stage("first", first, lambda: write_stage(first, "c"), (first / "out.txt").is_file, {"setting": 2})

    assert (first / "out.txt").read_text() == "c" and not (first / "left-over.txt").exists()
    assert (second / "out.txt").read_text() == "b" and (tmp_path / STATE_FILE).is_file()


@pytest.mark.parametrize("where", ["the run's folder", "a folder above it"])
def test_a_stamped_stage_may_not_take_the_folder_holding_the_state(tmp_path: Path, where: str):
    out = tmp_path / "run"
    runner = Runner(out, "test", log=lambda line: None)
    kept = out / "reference"
    runner.stage("reference", kept, lambda: write_stage(kept, "r"), (kept / "out.txt").is_file, {"prompts": 1})
    directory = out if where == "the run's folder" else tmp_path

    with pytest.raises(ValueError, match=f"holds {STATE_FILE}"):
        runner.stage("verdict", directory, lambda: None, lambda: True, {"pack": 1})
    assert (kept / "out.txt").read_text() == "r"
