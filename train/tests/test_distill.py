"""distill: the losses, example selection, resume after a mid-epoch kill (with mid-epoch evaluations and replay),
DDP over 2 gloo processes, plateau stopping, TensorBoard logs, QAT outputs, refused inputs."""

from __future__ import annotations

import math
import shutil
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import assert_same_weights_up_to_summation_order, run_cli, torchrun
from safetensors.torch import load_file

from specdraft_train import distill
from specdraft_train.artifacts import verify_stage_dir
from specdraft_train.config import MICRO, DistillConfig
from specdraft_train.distill import QAT_STATE_FILE, REVERSE_KL_TAIL_FLOOR, collate, loss_sums, prefix_weights
from specdraft_train.evaluate import drafter_tau
from specdraft_train.reference import TrainExample, read_train_examples
from specdraft_train.tau import read_conversations

# Evaluations every 3 steps (6 steps an epoch: mid-epoch) and replay of the tokenizer's train split: what the
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
    MICRO.distill, batch_size=8, ckpt_every=2, eval_every=3, replay_weight=0.5, replay_seq_len=32, replay_batch_size=4
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
    return distill.run(
        drafter or tiny["base"],
        tiny["reference"],
        out,
        config,
        qat=qat,
        device_name="cpu",
        epochs=2 if not qat else None,
        replay_tokens=tiny["tokenizer"],
        **kwargs,
    )


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


class _FixedLogits(torch.nn.Module):
    """A drafter whose last hidden states are the given logits and whose head is the identity: the logits it puts on
    every position are exactly those (loss_sums takes hidden states and applies the head itself)."""

    def __init__(self, logits: torch.Tensor):
        super().__init__()
        self.logits = logits
        self.head = torch.nn.Linear(logits.shape[-1], logits.shape[-1], bias=False)
        with torch.no_grad():
            self.head.weight.copy_(torch.eye(logits.shape[-1]))

    def get_output_embeddings(self) -> torch.nn.Module:
        return self.head

    def hidden(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.logits

    def forward(self, input_ids, attention_mask, output_hidden_states=False, logits_to_keep=0, use_cache=True):
        return SimpleNamespace(hidden_states=(self.hidden(input_ids),))


def _one_position_batch(topk_probs: list[float], topk_ids: list[int], label: int) -> dict[str, torch.Tensor]:
    return {
        "input_ids": torch.zeros(1, 2, dtype=torch.long),
        "attention_mask": torch.ones(1, 2, dtype=torch.long),
        "rows": torch.tensor([0]),
        "cols": torch.tensor([1]),
        "positions": torch.tensor([0]),
        "labels": torch.tensor([label]),
        "topk_ids": torch.tensor([topk_ids]),
        "topk_logprobs": torch.log(torch.tensor([topk_probs])),
    }


def test_kl_loss_is_kl_to_renormalized_topk_plus_ce_on_the_greedy_token():
    vocab = 6
    batch = _one_position_batch([0.5, 0.2, 0.1], [4, 1, 2], 4)  # top-3 of a distribution with mass left over
    config = DistillConfig(loss="kl", divergence_weight=1.0, ce_weight=0.5)
    p = torch.tensor([0.5, 0.2, 0.1]) / 0.8
    # A drafter that puts exactly the renormalized top-3 on those ids: KL 0, CE = -log p(greedy token).
    logits = torch.full((1, 2, vocab), -1e9)
    logits[0, 1, [4, 1, 2]] = torch.log(p)
    sums = loss_sums(_FixedLogits(logits), batch, config)
    assert sums.parts["kl"].item() == pytest.approx(0.0, abs=1e-6)
    assert sums.distill.item() == pytest.approx(0.5 * -torch.log(p[0]).item(), rel=1e-5)
    assert sums.parts["top1"].item() == 1 and sums.replay is None
    # A uniform drafter: KL = Σ p (log p − log 1/6).
    sums = loss_sums(_FixedLogits(torch.zeros(1, 2, vocab)), batch, config)
    expected_kl = (p * (p.log() - torch.log(torch.tensor(1 / vocab)))).sum().item()
    assert sums.parts["kl"].item() == pytest.approx(expected_kl, rel=1e-5)
    assert sums.distill.item() == pytest.approx(expected_kl + 0.5 * math.log(6.0), rel=1e-5)


def test_ce_tvd_and_reverse_kl_losses_against_hand_computed_values():
    vocab = 5
    batch = _one_position_batch([0.6, 0.2], [3, 0], 3)
    q = torch.tensor([0.1, 0.2, 0.3, 0.25, 0.15])  # the drafter's argmax (2) is not the target's token (3)
    logits = torch.zeros(1, 2, vocab)
    logits[0, 1] = q.log()
    model = _FixedLogits(logits)

    ce = loss_sums(model, batch, DistillConfig(loss="ce"))
    assert ce.distill.item() == pytest.approx(-math.log(0.25), rel=1e-5) and ce.parts["top1"].item() == 0

    # p̃ = (0.75 on token 3, 0.25 on token 0), zero elsewhere: ½(|0.75−0.25| + |0.25−0.1| + 0.2 + 0.3 + 0.15) = 0.65.
    tvd = loss_sums(model, batch, DistillConfig(loss="tvd", divergence_weight=2.0, ce_weight=0.0))
    assert tvd.parts["tvd"].item() == pytest.approx(0.65, rel=1e-5)
    assert tvd.distill.item() == pytest.approx(1.3, rel=1e-5)

    # p̂: 0.6 and 0.2 as stored, the tail 0.2 spread over the 3 other tokens; KL(q ‖ p̂) = Σ q log(q / p̂).
    p_hat = torch.tensor([0.2, 0.2 / 3, 0.2 / 3, 0.6, 0.2 / 3])
    expected = (q * (q / p_hat).log()).sum().item()
    rkl = loss_sums(model, batch, DistillConfig(loss="reverse_kl", divergence_weight=1.0, ce_weight=0.5))
    assert rkl.parts["reverse_kl"].item() == pytest.approx(expected, rel=1e-5)
    assert rkl.distill.item() == pytest.approx(expected - 0.5 * math.log(0.25), rel=1e-5)

    # A top-k that holds all the mass: the tail is floored, and p̂ renormalized over (top-k, tail).
    full = _one_position_batch([0.75, 0.25], [3, 0], 3)
    z = 1 + REVERSE_KL_TAIL_FLOOR
    p_hat = torch.tensor(
        [
            0.25 / z,
            REVERSE_KL_TAIL_FLOOR / 3 / z,
            REVERSE_KL_TAIL_FLOOR / 3 / z,
            0.75 / z,
            REVERSE_KL_TAIL_FLOOR / 3 / z,
        ]
    )
    rkl = loss_sums(model, full, DistillConfig(loss="reverse_kl"))
    assert rkl.parts["reverse_kl"].item() == pytest.approx((q * (q / p_hat).log()).sum().item(), rel=1e-5)


def test_prefix_weights_average_the_accepted_prefix_over_window_starts():
    # Two continuations laid end to end: q(C_i) = a, b, c, d for the first, e, f for the second.
    a, b, c, d, e, f = 0.9, 0.5, 0.8, 0.3, 0.6, 0.7
    log_q = torch.log(torch.tensor([a, b, c, d, e, f]))
    positions = torch.tensor([0, 1, 2, 3, 0, 1])
    # k = 3: position j averages over the starts j−2 … j (not before 0) the product of q from the start to j − 1.
    expected = [1, (1 + a) / 2, (1 + b + a * b) / 3, (1 + c + b * c) / 3, 1, (1 + e) / 2]
    assert prefix_weights(log_q, positions, 3).tolist() == pytest.approx(expected, rel=1e-6)
    assert prefix_weights(log_q, positions, 1).tolist() == pytest.approx([1.0] * 6)  # one-token windows: no prefix
    assert prefix_weights(torch.zeros(6), positions, 16).tolist() == pytest.approx([1.0] * 6)  # q = 1: all count


def test_prefix_loss_weights_each_position_and_keeps_the_weights_constant():
    vocab = 4
    labels = torch.tensor([1, 2, 3])
    topk_ids = torch.tensor([[1, 0], [2, 0], [3, 0]])
    batch = {
        "input_ids": torch.zeros(1, 3, dtype=torch.long),
        "attention_mask": torch.ones(1, 3, dtype=torch.long),
        "rows": torch.tensor([0, 0, 0]),
        "cols": torch.tensor([0, 1, 2]),
        "positions": torch.tensor([0, 1, 2]),
        "labels": labels,
        "topk_ids": topk_ids,
        "topk_logprobs": torch.log(torch.tensor([[0.7, 0.3]] * 3)),
    }
    logits = torch.randn(1, 3, vocab, generator=torch.Generator().manual_seed(0)).requires_grad_()
    prefix = DistillConfig(loss="prefix", eval_k=16, divergence_weight=1.0, ce_weight=0.5)
    sums = loss_sums(_FixedLogits(logits), batch, prefix)
    per_position = []  # the kl loss (KL + 0.5 CE) of each position alone
    for j in range(3):
        one = {
            **batch,
            "rows": batch["rows"][j : j + 1],
            "cols": batch["cols"][j : j + 1],
            "positions": batch["positions"][j : j + 1],
            "labels": labels[j : j + 1],
            "topk_ids": topk_ids[j : j + 1],
            "topk_logprobs": batch["topk_logprobs"][j : j + 1],
        }
        per_position.append(loss_sums(_FixedLogits(logits), one, replace(prefix, loss="kl")).distill)
    q = F.softmax(logits[0].detach(), dim=-1)[torch.arange(3), labels]
    weights = [1.0, (1 + q[0]) / 2, (1 + q[1] + q[0] * q[1]) / 3]
    expected = sum(w * loss for w, loss in zip(weights, per_position))
    assert sums.distill.detach().item() == pytest.approx(expected.detach().item(), rel=1e-5)
    assert sums.parts["prefix_weight"].item() == pytest.approx(float(sum(weights)), rel=1e-5)
    # The weights are constants: the gradient is Σ a_j ∇ℓ_j, not the product's.
    sums.distill.backward()
    got = logits.grad.clone()
    logits.grad = None
    expected.backward()
    torch.testing.assert_close(got, logits.grad)


def test_replay_rows_share_the_forward_and_score_next_token_ce():
    vocab = 7
    model_logits = torch.randn(3, 5, vocab, generator=torch.Generator().manual_seed(1))

    class _ByInput(_FixedLogits):  # logits depend on the row, so a wrong row would show
        def hidden(self, input_ids: torch.Tensor) -> torch.Tensor:
            return model_logits[:, : input_ids.shape[1]]

    example = TrainExample(
        [1, 2],
        [3, 4, 5],
        np.array([[3, 0], [4, 0], [5, 0]], dtype=np.int32),
        np.log(np.full((3, 2), 0.5, dtype=np.float32)),
    )
    chunks = np.array([[6, 5, 4, 3, 2, 1], [1, 1, 2, 2, 3, 3]])  # (R = 2, S + 1 = 6)
    batch = collate([example], 0, torch.device("cpu"), chunks)
    assert batch["input_ids"].shape == (3, 5)  # width: max(2 + 3 − 1, 5)
    assert batch["input_ids"][1].tolist() == [6, 5, 4, 3, 2] and batch["attention_mask"][0].tolist() == [1, 1, 1, 1, 0]
    sums = loss_sums(_ByInput(model_logits), batch, DistillConfig(loss="ce"))
    expected = F.cross_entropy(
        model_logits[1:].reshape(-1, vocab), torch.from_numpy(chunks[:, 1:]).reshape(-1), reduction="sum"
    )
    assert sums.replay.item() == pytest.approx(expected.item(), rel=1e-6)
    ce = F.cross_entropy(model_logits[0, 1:4], torch.tensor([3, 4, 5]), reduction="sum")  # predictions at p − 1 + j
    assert sums.distill.item() == pytest.approx(ce.item(), rel=1e-6)


def _full_logits_loss_sums(model, batch: dict[str, torch.Tensor], config: DistillConfig) -> distill.LossSums:
    """loss_sums as it was before the head moved into chunks: logits of every position of every row, (B, T, V)."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    selected = logits[batch["rows"], batch["cols"]].float()
    log_q = F.log_softmax(selected, dim=-1)
    log_q_label = log_q.gather(1, batch["labels"][:, None]).squeeze(1)
    ce = -log_q_label
    parts = {"ce": ce.detach().sum(), "top1": (selected.argmax(dim=-1) == batch["labels"]).sum().float()}
    per_position = ce
    if config.loss != "ce":
        log_q_topk = log_q.gather(1, batch["topk_ids"])
        log_p = F.log_softmax(batch["topk_logprobs"], dim=-1)
        if config.loss == "tvd":
            divergence = distill.total_variation(log_q_topk, log_p)
        elif config.loss == "reverse_kl":
            divergence = distill.reverse_kl(log_q, log_q_topk, batch["topk_logprobs"])
        else:
            divergence = distill.forward_kl(log_q_topk, log_p)
        parts[distill.DIVERGENCE_OF[config.loss]] = divergence.detach().sum()
        per_position = config.divergence_weight * divergence + config.ce_weight * ce
        if config.loss == "prefix":
            weights = prefix_weights(log_q_label, batch["positions"], config.eval_k)
            parts["prefix_weight"] = weights.sum()
            per_position = weights * per_position
    replay_logits = logits[batch["replay_rows"], batch["replay_cols"]].float()
    replay = F.cross_entropy(replay_logits, batch["replay_labels"], reduction="sum")
    parts["lm"] = replay.detach()
    return distill.LossSums(per_position.sum(), replay, parts)


@pytest.mark.parametrize("loss", distill.LOSSES)
def test_the_head_in_chunks_gives_the_full_logits_losses_and_gradients(tiny: dict[str, Path], loss: str):
    """Logits only where a loss is taken, a few hundred positions at a time (recomputed in the backward pass): the
    same sums and gradients as the (B, T, V) logits of every position, on every loss, with replay rows."""
    from specdraft_train.models import load_causal_lm

    model = load_causal_lm(tiny["base"], torch.device("cpu"))
    examples = read_train_examples(tiny["reference"])[:5]
    replay_chunks = np.arange(2 * 9).reshape(2, 9) % model.config.vocab_size
    batch = collate(examples, 0, torch.device("cpu"), replay_chunks)
    config = DistillConfig(loss=loss, eval_k=4)
    results = []
    for compute in (
        lambda: _full_logits_loss_sums(model, batch, config),
        lambda: loss_sums(model, batch, config, chunk_logits=7 * model.config.vocab_size),  # chunks of 7 positions
    ):
        model.zero_grad(set_to_none=True)
        sums = compute()
        (sums.distill + 0.5 * sums.replay).backward()
        results.append((sums, {n: p.grad.clone() for n, p in model.named_parameters()}))
    (expected, expected_grads), (got, got_grads) = results
    assert len(batch["labels"]) > 7 and len(batch["replay_labels"]) > 7  # so both are cut into several chunks
    torch.testing.assert_close(got.distill, expected.distill, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got.replay, expected.replay, rtol=1e-5, atol=1e-5)
    assert got.parts.keys() == expected.parts.keys()
    for name in expected.parts:
        torch.testing.assert_close(got.parts[name], expected.parts[name], rtol=1e-5, atol=1e-5, msg=name)
    for name, grad in expected_grads.items():
        torch.testing.assert_close(got_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_activation_checkpointing_gives_the_same_losses_and_gradients(tiny: dict[str, Path]):
    """The real preset recomputes each decoder layer in the backward pass (DistillConfig.activation_checkpointing): the
    same loss and gradients as keeping the activations, and it is on in training mode only where it was asked for."""
    from specdraft_train.config import get_preset
    from specdraft_train.models import load_causal_lm

    assert get_preset("qwen3-chat").distill.activation_checkpointing
    examples = read_train_examples(tiny["reference"])[:5]
    config = DistillConfig(eval_k=4)
    results = []
    for checkpointing in (False, True):
        model = load_causal_lm(tiny["base"], torch.device("cpu"))
        if checkpointing:
            distill.enable_activation_checkpointing(model)
        model.train()
        assert model.is_gradient_checkpointing == checkpointing
        batch = collate(examples, 0, torch.device("cpu"))
        sums = loss_sums(model, batch, config)
        sums.distill.backward()
        results.append((sums.distill.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    (expected, expected_grads), (got, got_grads) = results
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)
    for name, grad in expected_grads.items():
        torch.testing.assert_close(got_grads[name], grad, rtol=1e-5, atol=1e-7, msg=name)


def test_select_examples_by_category_prefix_and_nested_fractions():
    def example(i: int, category: str) -> TrainExample:
        return TrainExample(
            [1], [2], np.zeros((1, 1), dtype=np.int32), np.zeros((1, 1), dtype=np.float32), f"train/{i}", category
        )

    examples = [example(i, c) for i in range(400) for c in ("code/inner/512",) if i % 2] + [
        example(i, "prose/open/128") for i in range(400) if not i % 2
    ]
    code = distill.select_examples(examples, DistillConfig(categories=("code/",)))
    assert {e.category for e in code} == {"code/inner/512"} and len(code) == 200
    both = distill.select_examples(examples, DistillConfig(categories=("code/inner", "prose")))
    assert len(both) == 400
    quarter = distill.select_examples(examples, DistillConfig(data_fraction=0.25))
    half = distill.select_examples(examples, DistillConfig(data_fraction=0.5))
    assert {e.id for e in quarter} < {e.id for e in half}  # smaller fractions are subsets of larger ones
    assert 60 < len(quarter) < 140 and 160 < len(half) < 240
    with pytest.raises(ValueError, match="data_fraction"):
        distill.select_examples(examples, DistillConfig(data_fraction=0.0))


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
    config = replace(CONFIG, eval_every=1, patience=2, replay_weight=0.0)
    manifest = _distill_here(tiny, tmp_path / "flat", config=config, lr=0.0)
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
    from specdraft_train.artifacts import write_manifest
    from specdraft_train.config import TokenizerConfig
    from specdraft_train.tokenizer import save_tokenizer_files, train_tokenizer

    save_tokenizer_files(train_tokenizer(["a b c " * 50, "x = y + z\n" * 40], TokenizerConfig(vocab_size=300)), other)
    manifest = verify_stage_dir(tiny["base"])
    write_manifest(other, "pretrain", outputs=list(manifest["outputs"]))
    with pytest.raises(ValueError, match="another tokenizer.json"):
        _distill_here(tiny, tmp_path / "out", drafter=other)
