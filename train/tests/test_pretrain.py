"""pretrain: a killed run resumes to the same weights; DDP over 2 gloo processes trains exactly like one process."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from conftest import assert_same_weights_up_to_summation_order, run_cli, torchrun
from safetensors.torch import load_file

from specdraft_train.commands import pretrain
from specdraft_train.formats.artifacts import ArtifactError, verify_stage_dir
from specdraft_train.presets import MICRO

STEPS = ["--max-steps", "6", "--batch-size", "4", "--ckpt-every", "3"]
CONFIG = replace(MICRO.pretrain_drafter, max_steps=6, batch_size=4, ckpt_every=3)  # what STEPS says


def _pretrain_here(tiny: dict[str, Path], out: Path, tokenizer_dir: Path | None = None):
    """The same run in this process (CLI start-up costs seconds; one torch thread either way, so results agree)."""
    tokenizer = tokenizer_dir or tiny["tokenizer"]
    return pretrain.run(tiny["corpus"], tokenizer, out, "drafter", "micro", CONFIG, MICRO.drafter, "cpu")


def _pretrain(tiny: dict[str, Path], out: Path, *extra: str, check: bool = True, runner=None):
    return run_cli(
        "pretrain",
        "--corpus",
        str(tiny["corpus"]),
        "--tokenizer",
        str(tiny["tokenizer"]),
        "--out",
        str(out),
        "--role",
        "drafter",
        "--preset",
        "micro",
        "--device",
        "cpu",
        *STEPS,
        *extra,
        check=check,
        runner=runner,
    )


def _weights(directory: Path) -> dict[str, torch.Tensor]:
    verify_stage_dir(directory, "pretrain")
    return load_file(str(directory / "model.safetensors"))


@pytest.fixture(scope="module")
def straight(tiny: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("straight") / "base"
    _pretrain_here(tiny, out)
    return out


def test_killed_pretrain_resumes_to_identical_weights(tiny: dict[str, Path], straight: Path, tmp_path: Path):
    out = tmp_path / "base"
    killed = _pretrain(tiny, out, "--halt-after-steps", "3", check=False)
    assert killed.returncode == -9  # SIGKILL right after the step-3 checkpoint, mid-epoch
    assert (out / "resume" / "state.pt").is_file() and not (out / "manifest.json").exists()
    resumed = _pretrain_here(tiny, out)
    assert resumed["metrics"]["steps"] == 6
    a, b = _weights(straight), _weights(out)
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    assert not (out / "resume").exists()


def test_ddp_two_gloo_processes_match_one_process(tiny: dict[str, Path], straight: Path, tmp_path: Path):
    out = tmp_path / "ddp"
    _pretrain(
        tiny,
        out,
        runner=torchrun(2),
    )
    assert verify_stage_dir(out, "pretrain")["params"]["world_size"] == 2
    # Each rank takes half of the same global batch and DDP averages gradients: equal up to float summation order.
    assert_same_weights_up_to_summation_order(straight, out)


def test_pretrain_refuses_a_tokenizer_that_does_not_match_its_manifest(tiny: dict[str, Path], tmp_path: Path):
    shutil.copytree(tiny["tokenizer"], tmp_path / "tok")
    (tmp_path / "tok" / "tokenizer_config.json").write_text("{}")
    with pytest.raises(ArtifactError, match="tokenizer_config.json: sha256"):
        _pretrain_here(tiny, tmp_path / "out", tokenizer_dir=tmp_path / "tok")
    assert not (tmp_path / "out" / "manifest.json").exists()
