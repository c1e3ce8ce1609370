"""distill: the loss, resume after a mid-epoch kill, DDP over 2 gloo processes, QAT outputs, refused inputs."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file

from specdraft_train import distill
from specdraft_train.artifacts import verify_stage_dir
from specdraft_train.config import MICRO, DistillConfig
from specdraft_train.distill import QAT_STATE_FILE, distill_loss_sum
from specdraft_train.evaluate import drafter_tau
from specdraft_train.tau import read_conversations

from conftest import run_cli

FLAGS = ("--preset", "micro", "--device", "cpu", "--epochs", "2", "--batch-size", "8", "--ckpt-every", "2")
CONFIG = DistillConfig(**{**MICRO.distill.__dict__, "batch_size": 8, "ckpt_every": 2})  # what FLAGS says


def _distill_here(tiny: dict[str, Path], out: Path, drafter: Path | None = None, qat: bool = False):
    """The same run in this process (CLI start-up costs seconds; one torch thread either way, so results agree)."""
    return distill.run(drafter or tiny["base"], tiny["reference"], out, CONFIG, qat=qat, device_name="cpu",
                       epochs=2 if not qat else None)


def _distill(tiny: dict[str, Path], out: Path, *extra: str, drafter: Path | None = None, check: bool = True,
             runner=None):
    return run_cli("distill", "--drafter", str(drafter or tiny["base"]), "--reference", str(tiny["reference"]),
                   "--out", str(out), *FLAGS, *extra, check=check, runner=runner)


def _weights(directory: Path) -> dict[str, torch.Tensor]:
    return load_file(str(directory / "model.safetensors"))


class _FixedLogits(torch.nn.Module):
    def __init__(self, logits: torch.Tensor):
        super().__init__()
        self.logits = logits

    def forward(self, input_ids, attention_mask):
        return SimpleNamespace(logits=self.logits)


def test_loss_is_kl_to_renormalized_topk_plus_ce_on_the_greedy_token():
    vocab = 6
    target_logprobs = torch.log(torch.tensor([[0.5, 0.2, 0.1]]))  # top-3 of a distribution with mass left over
    batch = {"input_ids": torch.zeros(1, 2, dtype=torch.long), "attention_mask": torch.ones(1, 2, dtype=torch.long),
             "rows": torch.tensor([0]), "cols": torch.tensor([1]), "labels": torch.tensor([4]),
             "topk_ids": torch.tensor([[4, 1, 2]]), "topk_logprobs": target_logprobs}
    config = DistillConfig(kl_weight=1.0, ce_weight=0.5)
    p = torch.tensor([0.5, 0.2, 0.1]) / 0.8
    # A drafter that puts exactly the renormalized top-3 on those ids: KL 0, CE = -log p(greedy token).
    logits = torch.full((1, 2, vocab), -1e9)
    logits[0, 1, [4, 1, 2]] = torch.log(p)
    loss, parts = distill_loss_sum(_FixedLogits(logits), batch, config)
    assert parts["kl"] == pytest.approx(0.0, abs=1e-6)
    assert loss.item() == pytest.approx(0.5 * -torch.log(p[0]).item(), rel=1e-5)
    # A uniform drafter: KL = Σ p (log p − log 1/6).
    loss, parts = distill_loss_sum(_FixedLogits(torch.zeros(1, 2, vocab)), batch, config)
    expected_kl = (p * (p.log() - torch.log(torch.tensor(1 / vocab)))).sum().item()
    assert parts["kl"] == pytest.approx(expected_kl, rel=1e-5)
    assert loss.item() == pytest.approx(expected_kl + 0.5 * torch.log(torch.tensor(6.0)).item(), rel=1e-5)


@pytest.fixture(scope="module")
def straight(tiny: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("distill") / "distilled"
    _distill_here(tiny, out)
    return out


def test_killed_distill_resumes_to_identical_weights_and_history(tiny: dict[str, Path], straight: Path, tmp_path: Path):
    out = tmp_path / "distilled"
    steps_per_epoch = verify_stage_dir(straight, "distill")["metrics"]["steps_per_epoch"]
    assert steps_per_epoch > 3  # so step 2 or 4 is mid-epoch
    halt = 2 if steps_per_epoch % 2 else 4
    killed = _distill(tiny, out, "--halt-after-steps", str(halt), check=False)
    assert killed.returncode == -9
    assert (out / "resume" / "state.pt").is_file()
    _distill_here(tiny, out)
    a, b = _weights(straight), _weights(out)
    for name in a:
        assert torch.equal(a[name], b[name]), name
    history = [verify_stage_dir(d, "distill")["metrics"]["history"] for d in (straight, out)]
    assert history[0] == history[1] and len(history[0]) == 3  # epoch 0 (start), 1, 2


def test_distill_keeps_the_best_dev_epoch_and_improves_on_base(tiny: dict[str, Path], straight: Path):
    metrics = verify_stage_dir(straight, "distill")["metrics"]
    best = max(h["dev_tau"] for h in metrics["history"])
    assert metrics["best_dev_tau"] == best
    dev = read_conversations(tiny["reference"] / "dev.jsonl")
    tau, _ = drafter_tau(straight, dev, 16, torch.device("cpu"))
    assert tau.tau == pytest.approx(best)
    assert best > metrics["history"][0]["dev_tau"]  # distillation helped on dev


def test_ddp_distill_two_gloo_processes_match_one_process(tiny: dict[str, Path], straight: Path, tmp_path: Path):
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
    out = tmp_path / "ddp"
    _distill(tiny, out, runner=(torchrun, "--nproc_per_node", "2", "--master_port", "29518", "-m",
                                "specdraft_train", "--threads", "1"))
    assert verify_stage_dir(out, "distill")["params"]["world_size"] == 2
    a, b = _weights(straight), _weights(out)
    for name in a:
        # The loss is normalized by the tokens of the whole global batch, so ranks with unequal shares still agree.
        torch.testing.assert_close(a[name], b[name], rtol=1e-4, atol=1e-5, msg=name)


def test_qat_distill_writes_a_qat_state_that_evaluation_uses(tiny: dict[str, Path], straight: Path, tmp_path: Path):
    out = tmp_path / "qat"
    _distill_here(tiny, out, drafter=straight, qat=True)
    manifest = verify_stage_dir(out, "distill")
    assert QAT_STATE_FILE in manifest["outputs"] and manifest["params"]["qat"] is True
    weights = _weights(out)
    assert not any("parametrizations" in name for name in weights)  # plain HF names: export reads them as-is
    dev = read_conversations(tiny["reference"] / "dev.jsonl")
    tau, mode = drafter_tau(out, dev, 16, torch.device("cpu"), q4=True)
    assert mode == "q4_0-qat"
    assert tau.tau == pytest.approx(manifest["metrics"]["best_dev_tau"])  # the model QAT selected, bit for bit
    _, ptq_mode = drafter_tau(straight, dev, 16, torch.device("cpu"), q4=True)
    assert ptq_mode == "q4_0-ptq"


def test_distill_refuses_a_drafter_with_another_tokenizer(tiny: dict[str, Path], tmp_path: Path):
    other = tmp_path / "other"
    shutil.copytree(tiny["base"], other)
    from specdraft_train.artifacts import write_manifest
    from specdraft_train.tokenizer import save_tokenizer_files, train_tokenizer
    from specdraft_train.config import TokenizerConfig

    save_tokenizer_files(train_tokenizer(["a b c " * 50, "x = y + z\n" * 40], TokenizerConfig(vocab_size=300)), other)
    manifest = verify_stage_dir(tiny["base"])
    write_manifest(other, "pretrain", outputs=list(manifest["outputs"]))
    with pytest.raises(ValueError, match="another tokenizer.json"):
        _distill_here(tiny, tmp_path / "out", drafter=other)
