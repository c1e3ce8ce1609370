"""distill: example selection, resume after a mid-epoch kill (with mid-epoch evaluations and replay),
DDP over 2 gloo processes, plateau stopping, TensorBoard logs, QAT outputs, refused inputs."""

from __future__ import annotations

import shutil
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import assert_same_weights_up_to_summation_order, run_cli, torchrun
from safetensors.torch import load_file

from specdraft_train.commands import distill
from specdraft_train.commands.evaluate import drafter_tau
from specdraft_train.config import DistillConfig
from specdraft_train.formats.artifacts import verify_stage_dir
from specdraft_train.modeling.models import QAT_STATE_FILE
from specdraft_train.modeling.tau import read_conversations
from specdraft_train.presets import MICRO
from specdraft_train.training.distillation import DistillJob
from specdraft_train.training.examples import (
    TrainExample,
    epoch_order,
    padding_factor,
    read_train_examples,
    select_examples,
)

# Evaluations every 3 steps (6 steps an epoch: mid-epoch), replay of the tokenizer's train split, packed rows: what the
# resume and DDP tests must reproduce.
FLAGS = (
    "--preset",
    "micro",
    "--device",
    "cpu",
    "--epochs",
    "2",
    "--batch-size",
    "8",
    "--ckpt-every",
    "2",
    "--eval-every",
    "3",
    "--replay-weight",
    "0.5",
    "--set",
    "replay_seq_len=32",
    "--set",
    "replay_batch_size=4",
)
CONFIG = replace(
    MICRO.distill,
    epochs=2,
    batch_size=8,
    ckpt_every=2,
    eval_every=3,
    replay_weight=0.5,
    replay_seq_len=32,
    replay_batch_size=4,
)  # what FLAGS says


def _distill_here(
    tiny: dict[str, Path],
    out: Path,
    drafter: Path | None = None,
    qat: bool = False,
    config: DistillConfig = CONFIG,
    **kwargs,
):
    """The same run in this process (CLI start-up costs seconds; one torch thread either way, so results agree)."""
    job = DistillJob(drafter or tiny["base"], tiny["reference"], out, config, qat=qat, replay_tokens=tiny["tokenizer"])
    return distill.run(replace(job, device="cpu", **kwargs))


def _distill(
    tiny: dict[str, Path],
    out: Path,
    *extra: str,
    drafter: Path | None = None,
    check: bool = True,
    runner=None,
    timeout: float | None = None,
):
    return run_cli(
        "distill",
        "--drafter",
        str(drafter or tiny["base"]),
        "--reference",
        str(tiny["reference"]),
        "--out",
        str(out),
        "--replay-tokens",
        str(tiny["tokenizer"]),
        *FLAGS,
        *extra,
        check=check,
        runner=runner,
        timeout=timeout,
    )


def _weights(directory: Path) -> dict[str, torch.Tensor]:
    return load_file(str(directory / "model.safetensors"))


def test_padding_factor_is_padded_over_real_tokens():
    widths = [1, 3, 2, 2, 5]
    steps = [np.array([0, 1]), np.array([2, 3]), np.array([4])]
    assert padding_factor(widths, steps) == pytest.approx((3 * 2 + 2 * 2 + 5) / 13)
    assert padding_factor(widths, [np.array([0, 2]), np.array([1, 3])]) == pytest.approx((2 * 2 + 3 * 2) / 8)
    assert padding_factor(widths, [np.array([4])]) == 1.0


def test_epoch_order_groups_rows_of_like_width_in_random_batch_order():
    widths = np.random.default_rng(3).integers(20, 3000, size=1000).tolist()
    plain = epoch_order(widths, 0, 1, 16, 0)
    # Without grouping: the seeded permutation distill has always used (the lab's runs depend on it).
    assert plain.tolist() == np.random.default_rng([0, 1]).permutation(1000).tolist()
    grouped = epoch_order(widths, 0, 1, 16, 8)
    whole = 1000 // 16 * 16
    assert sorted(grouped.tolist()) == list(range(1000)) and grouped[whole:].tolist() == plain[whole:].tolist()
    run_of = {int(row): i // (8 * 16) for i, row in enumerate(plain)}  # each row's run of 8 batches
    batches = grouped[:whole].reshape(-1, 16)
    assert all(len({run_of[int(r)] for r in batch}) == 1 for batch in batches)  # a batch is cut from one run

    def padded(order: np.ndarray) -> float:
        return padding_factor(widths, [order[i : i + 16] for i in range(0, whole, 16)])

    assert padded(grouped) < 1.15 < 1.5 < padded(plain)
    longest = [max(widths[r] for r in batch) for batch in batches]
    assert longest != sorted(longest, reverse=True) and longest != sorted(longest)  # batches come shuffled
    assert epoch_order(widths, 0, 1, 16, 8).tolist() == grouped.tolist()  # resumable: the same order again
    assert epoch_order(widths, 0, 2, 16, 8).tolist() != grouped.tolist()


def test_select_examples_by_category_prefix_and_nested_fractions():
    def example(i: int, category: str) -> TrainExample:
        return TrainExample(
            [1], [2], np.zeros((1, 1), dtype=np.int32), np.zeros((1, 1), dtype=np.float32), f"train/{i}", category
        )

    examples = [example(i, c) for i in range(400) for c in ("code/inner/512",) if i % 2] + [
        example(i, "prose/open/128") for i in range(400) if not i % 2
    ]
    code = select_examples(examples, DistillConfig(categories=("code/",)))
    assert {e.category for e in code} == {"code/inner/512"} and len(code) == 200
    both = select_examples(examples, DistillConfig(categories=("code/inner", "prose")))
    assert len(both) == 400
    quarter = select_examples(examples, DistillConfig(data_fraction=0.25))
    half = select_examples(examples, DistillConfig(data_fraction=0.5))
    assert {e.id for e in quarter} < {e.id for e in half}  # smaller fractions are subsets of larger ones
    assert 60 < len(quarter) < 140 and 160 < len(half) < 240
    with pytest.raises(ValueError, match="data_fraction"):
        select_examples(examples, DistillConfig(data_fraction=0.0))


@pytest.fixture(scope="module")
def straight(tiny: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("distill") / "distilled"
    _distill_here(tiny, out)
    return out


def test_killed_distill_resumes_to_identical_weights_and_history(tiny: dict[str, Path], straight: Path, tmp_path: Path):
    out = tmp_path / "distilled"
    metrics = verify_stage_dir(straight, "distill")["metrics"]
    assert metrics["steps_per_epoch"] == 6 and metrics["steps"] == 12
    killed = _distill(tiny, out, "--halt-after-steps", "4", check=False)  # mid-epoch, after the step-3 evaluation
    assert killed.returncode == -9, killed.stderr
    assert (out / "resume" / "state.pt").is_file()
    time.sleep(1.0)  # TensorBoard reads event files in name order, which starts with the second each was created in
    _distill_here(tiny, out)
    a, b = _weights(straight), _weights(out)
    for name in a:
        assert torch.equal(a[name], b[name]), name
    history = [verify_stage_dir(d, "distill")["metrics"]["history"] for d in (straight, out)]
    assert history[0] == history[1]
    assert [h["step"] for h in history[0]] == [0, 3, 6, 9, 12]  # the start, then every eval_every steps
    # TensorBoard: the killed run's events after step 4 are purged, the resumed run's replace them; each step once.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(out / "tb"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("dev/macro_tau")] == [
        (h["step"], pytest.approx(h["dev_macro_tau"])) for h in history[0]
    ]
    assert [e.step for e in events.Scalars("train/loss")] == [2, 3, 4, 6, 8, 9, 10, 12]  # and every save


def test_distill_keeps_the_best_dev_macro_tau_and_improves_on_base(tiny: dict[str, Path], straight: Path):
    metrics = verify_stage_dir(straight, "distill")["metrics"]
    history = metrics["history"]
    best = max(history, key=lambda h: h["dev_macro_tau"])
    assert metrics["best_dev_macro_tau"] == best["dev_macro_tau"] and metrics["best_step"] == best["step"]
    dev = read_conversations(tiny["reference"] / "dev.jsonl")
    tau, _ = drafter_tau(straight, dev, 16, torch.device("cpu"))
    assert tau.macro_tau == pytest.approx(best["dev_macro_tau"]) and tau.tau == pytest.approx(metrics["best_dev_tau"])
    assert tau.top1 == pytest.approx(metrics["best_dev_top1"])
    assert best["dev_macro_tau"] > history[0]["dev_macro_tau"]  # distillation helped on dev
    for entry in history[1:]:  # every evaluation records the train window before it: loss parts and agreement
        assert {"loss", "ce", "kl", "top1", "lm"} <= set(entry) and 0 <= entry["top1"] <= 1
        assert set(entry["dev_by_category"]) == {c.category for c in dev}
    examples = read_train_examples(tiny["reference"])
    # 48 examples in batches of 8: every example once an epoch, 2 epochs; replay 4 × 32 text tokens a step.
    assert metrics["train_tokens"] == 2 * sum(len(e.continuation_tokens) for e in examples)
    assert metrics["replay_tokens"] == 12 * 4 * 32
    assert verify_stage_dir(straight, "distill")["inputs"]["replay"]["stage"] == "tokenizer"


def test_distill_writes_tensorboard_events(straight: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(straight / "tb"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {
        "train/loss",
        "train/kl",
        "train/ce",
        "train/lm",
        "train/top1",
        "train/lr",
        "dev/tau",
        "dev/macro_tau",
        "dev/top1",
    } <= tags
    assert any(tag.startswith("dev/tau/code/") for tag in tags)
    assert [e.step for e in events.Scalars("dev/macro_tau")] == [0, 3, 6, 9, 12]


def test_distill_stops_at_a_plateau(tiny: dict[str, Path], tmp_path: Path):
    # lr 0: the weights never move, so dev τ never beats the start and the 2nd evaluation without a new best stops it.
    config = replace(CONFIG, eval_every=1, patience=2, replay_weight=0.0, lr=0.0)
    manifest = _distill_here(tiny, tmp_path / "flat", config=config)
    metrics = manifest["metrics"]
    assert metrics["stopped_by_plateau"] is True and metrics["steps"] == 2
    assert [h["step"] for h in metrics["history"]] == [0, 1, 2] and metrics["best_step"] == 0
    assert "replay" not in manifest["inputs"] and metrics["replay_tokens"] == 0


def test_ddp_distill_two_gloo_processes_match_one_process(tiny: dict[str, Path], straight: Path, tmp_path: Path):
    out = tmp_path / "ddp"
    _distill(tiny, out, runner=torchrun(2), timeout=300)
    manifest = verify_stage_dir(out, "distill")
    assert manifest["params"]["world_size"] == 2
    # The loss is normalized by the tokens of the whole global batch, so ranks with unequal shares still agree.
    assert_same_weights_up_to_summation_order(straight, out)
    one = verify_stage_dir(straight, "distill")["metrics"]["history"]
    two = manifest["metrics"]["history"]
    # Logged train means are over both ranks' tokens: the same as one process's, up to float summation order.
    assert [h["step"] for h in two] == [h["step"] for h in one]
    assert two[-1]["loss"] == pytest.approx(one[-1]["loss"], rel=1e-3)


def test_ddp_ranks_stop_together_at_a_plateau(tiny: dict[str, Path], tmp_path: Path):
    # Only rank 0 evaluates; every rank must learn of the plateau and stop at the same step (else DDP hangs).
    out = tmp_path / "ddp-flat"
    _distill(
        tiny,
        out,
        "--lr",
        "0",
        "--eval-every",
        "1",
        "--patience",
        "2",
        timeout=120,
        runner=torchrun(2),
    )
    metrics = verify_stage_dir(out, "distill")["metrics"]
    assert metrics["stopped_by_plateau"] is True and metrics["steps"] == 2


def test_fsdp_distill_matches_one_process_and_a_killed_run_resumes_bit_for_bit(
    tiny: dict[str, Path], straight: Path, tmp_path: Path
):
    """FSDP over 2 gloo ranks: parameters, gradients and AdamW moments sharded, gradients reduce-scattered.

    Against one process the weights and the train-loss trajectory agree to float summation order only (each rank's
    half-batch gradient is summed by the collective, one process sums the whole batch inside its matmuls), so they
    are compared within a tight tolerance. A killed FSDP run resumed under FSDP repeats the same collectives in the
    same order on the same data, so that comparison is exact.
    """
    out = tmp_path / "fsdp"
    _distill(tiny, out, "--fsdp", runner=torchrun(2), timeout=300)
    manifest = verify_stage_dir(out, "distill")
    assert manifest["params"]["world_size"] == 2 and manifest["params"]["fsdp"] is True
    one, fsdp = _weights(straight), _weights(out)
    assert one.keys() == fsdp.keys()  # the saved checkpoint has plain HF names, as one process writes
    for name in one:
        torch.testing.assert_close(one[name], fsdp[name], rtol=1e-4, atol=1e-5, msg=name)
    histories = [verify_stage_dir(d, "distill")["metrics"]["history"] for d in (straight, out)]
    assert [h["step"] for h in histories[1]] == [h["step"] for h in histories[0]]
    for a, b in zip(histories[0][1:], histories[1][1:]):  # every logged window's mean loss, the whole run long
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-5) and b["dev_macro_tau"] == a["dev_macro_tau"]

    killed_dir = tmp_path / "fsdp-killed"
    killed = _distill(tiny, killed_dir, "--fsdp", "--halt-after-steps", "4", check=False, runner=torchrun(2))
    assert killed.returncode != 0 and (killed_dir / "resume" / "state.pt").is_file()
    with pytest.raises(ValueError, match="saved by a run with FSDP: resume it the same way"):
        _distill_here(tiny, killed_dir)  # the moments are keyed by name: a DDP/one-process run cannot take them
    _distill(tiny, killed_dir, "--fsdp", runner=torchrun(2), timeout=300)
    resumed = _weights(killed_dir)
    for name in fsdp:
        assert torch.equal(fsdp[name], resumed[name]), name
    assert verify_stage_dir(killed_dir, "distill")["metrics"]["history"] == histories[1]


def test_distill_refuses_settings_it_cannot_run(tiny: dict[str, Path], tmp_path: Path):
    """Refused before any model is loaded: grouping by length packs nothing, recomputation has three settings."""
    with pytest.raises(ValueError, match="group_by_length groups right-padded rows"):
        _distill_here(tiny, tmp_path / "grouped", config=replace(CONFIG, group_by_length=2))
    with pytest.raises(ValueError, match="activation_checkpointing 'yes': expected one of auto, on, off"):
        _distill_here(tiny, tmp_path / "yes", config=replace(CONFIG, activation_checkpointing="yes"))
    assert not (tmp_path / "grouped").exists() and not (tmp_path / "yes").exists()


def test_fsdp_refuses_qat(tiny: dict[str, Path], tmp_path: Path):
    with pytest.raises(ValueError, match="--fsdp with --qat"):
        _distill_here(tiny, tmp_path / "out", qat=True, config=replace(CONFIG, fsdp=True))


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
    from specdraft_train.commands.tokenizer import save_tokenizer_files, train_tokenizer
    from specdraft_train.config import TokenizerConfig
    from specdraft_train.formats.artifacts import write_manifest

    save_tokenizer_files(train_tokenizer(["a b c " * 50, "x = y + z\n" * 40], TokenizerConfig(vocab_size=300)), other)
    manifest = verify_stage_dir(tiny["base"])
    write_manifest(other, "pretrain", outputs=list(manifest["outputs"]))
    with pytest.raises(ValueError, match="another tokenizer.json"):
        _distill_here(tiny, tmp_path / "out", drafter=other)


def test_batch_probe_times_distills_order_after_a_step_on_the_widest_rows(tiny: dict[str, Path]):
    """The GPU probe (train/scripts/gpu/probe_distill_batch.py) on the CPU: per size, its timed batches are the first
    of the order distill takes, grouped by length or not, with that order's padding factor."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts" / "gpu"))
    from probe_distill_batch import probe

    from specdraft_train.modeling.models import load_causal_lm
    from specdraft_train.training.examples import row_width

    examples = read_train_examples(tiny["reference"])
    widths = [row_width(e) for e in examples]
    model = load_causal_lm(tiny["base"], torch.device("cpu"))
    model.train()
    for group in (0, 2):
        config = replace(CONFIG, group_by_length=group)
        entries = probe(model, examples, [4, 8], 2, torch.device("cpu"), config)
        assert [e["batch"] for e in entries] == [4, 8] and all(e["ok"] for e in entries)
        for entry in entries:
            size = entry["batch"]
            order = epoch_order(widths, config.seed, 0, size, group)
            batches = [order[i : i + size] for i in range(0, len(order) // size * size, size)]
            assert entry["padding_factor"] == pytest.approx(padding_factor(widths, batches))
            timed = order[: 2 * size]
            assert entry["continuation_tokens"] == sum(len(examples[i].continuation_tokens) for i in timed)
            assert entry["tokens_per_s"] > 0
