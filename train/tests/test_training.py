"""training.py: the resumable state loads into a model on another device than the one it was saved from (the H200
rerun's `RNG state must be a torch.ByteTensor`), and TensorBoard logging never stops training."""

from __future__ import annotations

import builtins
import importlib.util
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch import nn

from specdraft_train.training.loop import (
    DistributedContext,
    NullSummaryWriter,
    ResumeState,
    finish_distributed,
    open_summary_writer,
)

MAIN = DistributedContext(rank=0, world_size=1, device=torch.device("cpu"))


def _trained_linear() -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Linear(4, 4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(torch.ones(2, 4)).sum().backward()
    optimizer.step()
    return model, optimizer


@pytest.mark.filterwarnings("ignore:for .*copying from a non-meta parameter")  # meta weights hold no values
def test_resume_state_loads_into_a_model_on_another_device(tmp_path: Path):
    """A state saved on the CPU, loaded into a model on the `meta` device: the stand-in, on a machine without a GPU,
    for a model on CUDA. Reading the file onto the model's device put the RNG state there too, and
    ``torch.set_rng_state`` takes only a CPU ByteTensor (the H200 rerun's TypeError, which the old code gives here)."""
    model, optimizer = _trained_linear()
    state = ResumeState(tmp_path / "resume")
    torch.manual_seed(123)
    state.save(model, optimizer, 7, {"history": [1, 2]})
    saved_rng = torch.get_rng_state()
    torch.manual_seed(999)  # the resumed process starts with another RNG state
    elsewhere = nn.Linear(4, 4, device="meta")
    step, extra = state.load(elsewhere, torch.optim.AdamW(elsewhere.parameters(), lr=1e-2))
    assert step == 7 and extra == {"history": [1, 2]}
    assert torch.equal(torch.get_rng_state(), saved_rng)
    assert elsewhere.weight.device.type == "meta"  # load_state_dict copied into the model where it lives


def test_resume_state_round_trip_restores_weights_optimizer_and_rng(tmp_path: Path):
    model, optimizer = _trained_linear()
    state = ResumeState(tmp_path / "resume")
    state.save(model, optimizer, 3, {})
    expected_next = torch.rand(3)  # what the RNG gives right after the save
    fresh = nn.Linear(4, 4)
    fresh_optimizer = torch.optim.AdamW(fresh.parameters(), lr=1e-2)
    state.load(fresh, fresh_optimizer)
    assert torch.equal(torch.rand(3), expected_next)
    for a, b in zip(model.parameters(), fresh.parameters()):
        assert torch.equal(a, b)
    moments = [s["exp_avg"] for s in fresh_optimizer.state.values()]
    assert len(moments) == 2 and all(m.abs().sum() > 0 for m in moments)


def test_summary_writer_writes_events_on_rank_0_only(tmp_path: Path):
    writer = open_summary_writer(MAIN, tmp_path, 0)
    writer.add_scalar("train/loss", 1.5, 1)
    writer.close()
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))
    rank_1 = DistributedContext(rank=1, world_size=2, device=torch.device("cpu"))
    other = open_summary_writer(rank_1, tmp_path / "r1", 0)
    assert isinstance(other, NullSummaryWriter) and not (tmp_path / "r1").exists()


def test_a_tensorboard_that_fails_to_import_does_not_stop_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    real_import = builtins.__import__

    def broken(name, *args, **kwargs):
        if name.startswith("torch.utils.tensorboard"):
            raise AttributeError("module 'tensorboard' has no attribute '__version__'")  # a version mismatch
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", broken)
    writer = open_summary_writer(MAIN, tmp_path, 0)
    assert isinstance(writer, NullSummaryWriter)
    writer.add_scalar("train/loss", 1.0, 1)
    writer.close()
    assert "no TensorBoard logs (AttributeError" in capsys.readouterr().err


def test_gpu_resume_check_script_runs_and_passes_on_the_cpu(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    # The GPU machine runs this script once per session: it must not rot between sessions (a config rename broke it
    # once), so CI runs it on the CPU, where it exercises the same kill-and-resume paths. Its main() runs in this
    # process (a Python start-up less); the runs it kills are its own subprocesses, one thread each like this one's.
    script = Path(__file__).resolve().parents[1] / "scripts" / "gpu" / "resume_check.py"
    spec = importlib.util.spec_from_file_location("resume_check", script)
    assert spec is not None and spec.loader is not None
    resume_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(resume_check)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setattr(sys, "argv", [str(script), "--device", "cpu"])
    code = resume_check.main()
    out = capsys.readouterr()
    assert code == 0, out.err[-3000:] + out.out[-2000:]
    assert "gpu_resume_check: PASS" in out.out


def test_finish_distributed_refuses_while_a_ddp_model_lives_and_destroys_its_group_after():
    """A DDP model that outlives its gloo group frees the group with the GIL held and can deadlock at exit (CI saw
    it): finish_distributed must refuse while one is referenced, and destroy the group once it is dropped. One gloo
    rank in this process; the context claims two so that the distributed path runs."""
    store = dist.HashStore()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        ctx = DistributedContext(rank=0, world_size=2, device=torch.device("cpu"), owns_group=True)
        model = nn.parallel.DistributedDataParallel(nn.Linear(4, 4))
        model(torch.ones(2, 4)).sum().backward()
        with pytest.raises(RuntimeError, match="DDP model is still referenced"):
            finish_distributed(ctx)
        assert dist.is_initialized()
        del model
        finish_distributed(ctx)
        assert not dist.is_initialized()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
