"""onpolicy: the drafter's own continuations scored by the target (labels and top-k as a direct forward gives them),
resumable a shard at a time; distill over them beside the reference's rows; token selection; `run`'s rounds."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import run_cli

from specdraft_train.commands import distill, onpolicy
from specdraft_train.config import OnPolicyConfig
from specdraft_train.engine.generation import generate_continuations
from specdraft_train.engine.scoring import score_continuations
from specdraft_train.formats.artifacts import verify_stage_dir
from specdraft_train.formats.prompts import Prompt
from specdraft_train.modeling.models import load_causal_lm, load_tokenizer
from specdraft_train.presets import MICRO
from specdraft_train.training.distillation import DistillJob
from specdraft_train.training.examples import TrainExample, collate, read_train_examples
from specdraft_train.training.losses import loss_sums, position_losses, selected_positions

CPU = torch.device("cpu")
CONFIG = OnPolicyConfig(max_new_tokens=12, batch_size=16)
DISTILL = replace(MICRO.distill, epochs=1, batch_size=8, ckpt_every=100, eval_every=0)


def _job(tiny: dict[str, Path], out: Path, reference: Path) -> onpolicy.OnPolicyJob:
    return onpolicy.OnPolicyJob(tiny["base"], tiny["target"], reference, out, CONFIG, "cpu")


@pytest.fixture(scope="module")
def data(tiny: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("onpolicy") / "onpolicy"
    onpolicy.run(_job(tiny, out, tiny["reference"]))
    return out


def test_scoring_is_the_targets_own_forward_on_each_sequence(tiny: dict[str, Path]):
    target = load_causal_lm(tiny["target"], CPU)
    prompts, continuations = [[5, 9, 13, 2], [7, 3]], [[40, 41, 42], [8, 8, 8, 8, 8]]
    scored = score_continuations(target, prompts, continuations, CPU, top_k=4)
    for p, c, s in zip(prompts, continuations, scored):
        with torch.no_grad():
            logits = target(torch.tensor([p + c[:-1]])).logits[0, len(p) - 1 :].float()  # (L, V): alone, unpacked
        logprobs = torch.log_softmax(logits, dim=-1)
        assert s.labels.tolist() == logits.argmax(dim=-1).tolist()
        assert s.topk_ids.tolist() == logprobs.topk(4).indices.tolist()
        np.testing.assert_allclose(s.topk_logprobs.astype(np.float32), logprobs.topk(4).values.numpy(), atol=2e-3)


def test_onpolicy_rows_are_the_drafters_text_with_the_targets_labels(tiny: dict[str, Path], data: Path):
    manifest = verify_stage_dir(data, "onpolicy")
    reference = read_train_examples(tiny["reference"])
    rows = read_train_examples(data)
    assert [r.id for r in rows] == [e.id for e in reference]  # every training prompt, in the reference's order
    assert manifest["vocab_fingerprint"] == verify_stage_dir(tiny["reference"], "reference")["vocab_fingerprint"]
    drafter, target = load_causal_lm(tiny["base"], CPU), load_causal_lm(tiny["target"], CPU)
    tokenizer = load_tokenizer(tiny["target"])
    for row in rows[:3]:
        [drafted] = generate_continuations(
            drafter, tokenizer, [Prompt(row.id, row.category, row.prompt_tokens)], 12, 1, CPU, None
        )
        assert row.continuation_tokens == drafted.tokens  # the drafter's own greedy text
        with torch.no_grad():
            logits = target(torch.tensor([row.prompt_tokens + row.continuation_tokens[:-1]])).logits[0]
        assert row.labels == logits[len(row.prompt_tokens) - 1 :].argmax(dim=-1).tolist()  # the target's tokens
        assert row.topk_ids.shape == (len(row.continuation_tokens), MICRO.reference.top_k)  # the reference's k
    agreement = manifest["agreement"]
    same = sum(int(np.sum(np.asarray(r.continuation_tokens) == np.asarray(r.labels))) for r in rows)
    assert agreement["tokens"] == sum(len(r.continuation_tokens) for r in rows)
    assert agreement["drafter_top1"] == pytest.approx(same / agreement["tokens"])


def test_a_cut_onpolicy_run_goes_on_at_the_next_shard(tiny: dict[str, Path], data: Path, tmp_path: Path):
    out = tmp_path / "onpolicy"
    args = ["onpolicy", "--drafter", str(tiny["base"]), "--target", str(tiny["target"])]
    args += ["--reference", str(tiny["reference"]), "--out", str(out), "--preset", "micro", "--device", "cpu"]
    args += ["--set", "onpolicy.max_new_tokens=12", "--set", "onpolicy.batch_size=16"]
    cut = run_cli(*args, "--halt-after-shards", "1", check=False)
    assert cut.returncode == -9, cut.stderr
    assert sorted(p.name for p in out.glob("train-*")) == ["train-00000.safetensors"]  # one shard, no manifest
    assert not (out / "manifest.json").exists()
    done = run_cli(*args)
    assert "shard 1 of 3" not in done.stderr and "shard 2 of 3" in done.stderr  # the written shard is not redone
    for shard in sorted(data.glob("train-*.safetensors")):
        assert (out / shard.name).read_bytes() == shard.read_bytes()


def test_distill_trains_on_onpolicy_rows_beside_the_reference(tiny: dict[str, Path], data: Path, tmp_path: Path):
    manifest = distill.run(
        DistillJob(tiny["base"], tiny["reference"], tmp_path / "d", DISTILL, device="cpu", onpolicy=(data,))
    )
    assert manifest is not None
    reference, rows = read_train_examples(tiny["reference"]), read_train_examples(data)
    metrics = manifest["metrics"]
    assert metrics["examples"] == len(reference) + len(rows)
    assert metrics["train_tokens"] == sum(len(e.continuation_tokens) for e in reference + rows)
    assert manifest["inputs"]["onpolicy"][0]["stage"] == "onpolicy"


def test_distill_refuses_onpolicy_data_of_another_vocabulary(tiny: dict[str, Path], data: Path, tmp_path: Path):
    other = tmp_path / "other"
    shutil.copytree(data, other)
    manifest = json.loads((other / "manifest.json").read_text())
    (other / "manifest.json").write_text(json.dumps({**manifest, "vocab_fingerprint": "another"}))
    with pytest.raises(ValueError, match="another target's vocabulary"):
        distill.run(
            DistillJob(tiny["base"], tiny["reference"], tmp_path / "d", DISTILL, device="cpu", onpolicy=(other,))
        )
    assert not (tmp_path / "d" / "manifest.json").exists()


def test_collate_trains_onpolicy_rows_on_the_targets_labels():
    ids, logprobs = np.zeros((3, 2), dtype=np.int32), np.zeros((3, 2), dtype=np.float32)
    row = TrainExample([1, 2], [10, 11, 12], ids, logprobs, "x", "c", labels=[20, 21, 22])
    batch = collate([row], 0, CPU)
    assert batch["input_ids"][0].tolist() == [1, 2, 10, 11]  # the drafter's text is the input
    assert batch["labels"].tolist() == [20, 21, 22]  # the target's tokens are what it learns


def test_token_selection_trains_only_the_positions_the_drafter_lags_the_reference_most(tiny: dict[str, Path]):
    assert selected_positions(torch.tensor([0.1, 3.0, -1.0, 2.0]), 0.5).tolist() == [0.0, 1.0, 0.0, 1.0]
    assert selected_positions(torch.tensor([0.1, 3.0]), 0.01).tolist() == [0.0, 1.0]  # at least one
    drafter, reference = load_causal_lm(tiny["base"], CPU), load_causal_lm(tiny["target"], CPU)
    examples = read_train_examples(tiny["reference"])[:4]
    batch = collate(examples, 0, CPU, packed=False)
    config = replace(DISTILL, select_tokens=0.25)
    reference_losses = position_losses(reference, batch, config)
    own = position_losses(drafter, batch, config)
    chosen = selected_positions(own - reference_losses, 0.25).bool()
    sums = loss_sums(drafter, batch, config, reference_losses=reference_losses)
    assert sums.parts["selected"].item() == chosen.sum().item() == round(0.25 * len(own))
    torch.testing.assert_close(sums.distill, own[chosen].sum() / 0.25, rtol=1e-5, atol=1e-5)
    everything = loss_sums(drafter, batch, replace(config, select_tokens=1.0), reference_losses=reference_losses)
    torch.testing.assert_close(everything.distill, own.sum(), rtol=1e-5, atol=1e-5)  # 1: every position


def test_distill_with_token_selection_needs_a_reference_and_records_it(tiny: dict[str, Path], tmp_path: Path):
    config = replace(DISTILL, select_tokens=0.5)
    with pytest.raises(ValueError, match="selects by a reference drafter"):
        distill.run(DistillJob(tiny["base"], tiny["reference"], tmp_path / "a", config, device="cpu"))
    manifest = distill.run(
        DistillJob(
            tiny["base"], tiny["reference"], tmp_path / "b", config, device="cpu", select_reference=tiny["target"]
        )
    )
    assert manifest is not None and manifest["inputs"]["select_reference"]["path"] == str(tiny["target"])
    [entry] = manifest["metrics"]["history"][1:]  # one evaluation, at the epoch's end
    assert entry["selected"] == pytest.approx(0.5, abs=0.02)  # half of each step's positions trained on


def test_distill_command_takes_onpolicy_folders(tiny: dict[str, Path], data: Path, tmp_path: Path):
    result = run_cli(
        "distill", "--drafter", str(tiny["base"]), "--reference", str(tiny["reference"]), "--out", str(tmp_path / "d"),
        "--preset", "micro", "--device", "cpu", "--epochs", "1", "--batch-size", "8", "--onpolicy", str(data),
    )  # fmt: skip
    assert "on-policy folders 1" in result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1])["steps"] == (48 + 48) // 8
