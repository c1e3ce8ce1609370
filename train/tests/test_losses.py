"""The distillation losses (losses.py): kl, ce, tvd, reverse KL and the prefix weighting against hand-computed values,
replay rows in the same forward, and the head in chunks against the full logits (sums and gradients)."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from specdraft_train.config import DistillConfig
from specdraft_train.modeling.packing import model_inputs
from specdraft_train.training.examples import TrainExample, collate, read_train_examples
from specdraft_train.training.losses import (
    DIVERGENCE_OF,
    LOSSES,
    REVERSE_KL_TAIL_FLOOR,
    LossSums,
    forward_kl,
    loss_sums,
    prefix_weights,
    reverse_kl,
    total_variation,
)


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
        "index": torch.tensor([1]),  # row 0, column 1 of (1, 2)
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
        "index": torch.tensor([0, 1, 2]),
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
            "index": batch["index"][j : j + 1],
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
    batch = collate([example], 0, torch.device("cpu"), chunks, packed=False)
    assert batch["input_ids"].shape == (3, 5)  # width: max(2 + 3 − 1, 5)
    assert batch["input_ids"][1].tolist() == [6, 5, 4, 3, 2] and batch["attention_mask"][0].tolist() == [1, 1, 1, 1, 0]
    sums = loss_sums(_ByInput(model_logits), batch, DistillConfig(loss="ce"))
    expected = F.cross_entropy(
        model_logits[1:].reshape(-1, vocab), torch.from_numpy(chunks[:, 1:]).reshape(-1), reduction="sum"
    )
    assert sums.replay.item() == pytest.approx(expected.item(), rel=1e-6)
    ce = F.cross_entropy(model_logits[0, 1:4], torch.tensor([3, 4, 5]), reduction="sum")  # predictions at p − 1 + j
    assert sums.distill.item() == pytest.approx(ce.item(), rel=1e-6)


def _full_logits_loss_sums(model, batch: dict[str, torch.Tensor], config: DistillConfig) -> LossSums:
    """loss_sums as it was before the head moved into chunks: logits of every position of every row, (B, T, V)."""
    logits = model(**model_inputs(batch)).logits.flatten(0, 1)  # (B · T, V)
    selected = logits[batch["index"]].float()
    log_q = F.log_softmax(selected, dim=-1)
    log_q_label = log_q.gather(1, batch["labels"][:, None]).squeeze(1)
    ce = -log_q_label
    parts = {"ce": ce.detach().sum(), "top1": (selected.argmax(dim=-1) == batch["labels"]).sum().float()}
    per_position = ce
    if config.loss != "ce":
        log_q_topk = log_q.gather(1, batch["topk_ids"])
        log_p = F.log_softmax(batch["topk_logprobs"], dim=-1)
        if config.loss == "tvd":
            divergence = total_variation(log_q_topk, log_p)
        elif config.loss == "reverse_kl":
            divergence = reverse_kl(log_q, log_q_topk, batch["topk_logprobs"])
        else:
            divergence = forward_kl(log_q_topk, log_p)
        parts[DIVERGENCE_OF[config.loss]] = divergence.detach().sum()
        per_position = config.divergence_weight * divergence + config.ce_weight * ce
        if config.loss == "prefix":
            weights = prefix_weights(log_q_label, batch["positions"], config.eval_k)
            parts["prefix_weight"] = weights.sum()
            per_position = weights * per_position
    replay_logits = logits[batch["replay_index"]].float()
    replay = F.cross_entropy(replay_logits, batch["replay_labels"], reduction="sum")
    parts["lm"] = replay.detach()
    return LossSums(per_position.sum(), replay, parts)


@pytest.mark.parametrize("loss", LOSSES)
def test_the_head_in_chunks_gives_the_full_logits_losses_and_gradients(tiny: dict[str, Path], loss: str):
    """Logits only where a loss is taken, a few hundred positions at a time (recomputed in the backward pass): the
    same sums and gradients as the (B, T, V) logits of every position, on every loss, with replay rows."""
    from specdraft_train.modeling.models import load_causal_lm

    model = load_causal_lm(tiny["base"], torch.device("cpu"))
    examples = read_train_examples(tiny["reference"])[:5]
    replay_chunks = np.arange(2 * 9).reshape(2, 9) % model.config.vocab_size
    batch = collate(examples, 0, torch.device("cpu"), replay_chunks, packed=False)
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
    """Each decoder layer recomputed in the backward pass (DistillConfig.activation_checkpointing, where a step would
    not fit otherwise), on packed rows as distill runs them: the same loss and gradients as keeping the activations,
    and it is on in training mode only where it was asked for."""
    from specdraft_train.modeling.models import enable_activation_checkpointing, load_causal_lm
    from specdraft_train.modeling.packing import use_packed_attention

    examples = read_train_examples(tiny["reference"])[:5]
    config = DistillConfig(eval_k=4)
    results = []
    for checkpointing in (False, True):
        model = use_packed_attention(load_causal_lm(tiny["base"], torch.device("cpu")))
        if checkpointing:
            enable_activation_checkpointing(model)
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
