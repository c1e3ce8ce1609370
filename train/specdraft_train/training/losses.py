"""The distillation losses `distill` trains with, per continuation position, and the output head that computes them.

On every continuation position j of a training example (prompt P, the target's continuation C), with q the drafter's
distribution, C[j] the target's greedy token (what τ scores) and p̃ the target's stored top-k renormalized over its k
tokens (zero outside them), the per-position loss ℓ_j is, by `DistillConfig.loss` (w_div = divergence_weight,
w_ce = ce_weight):

    kl          w_div · KL(p̃ ‖ q) + w_ce · CE_j                     CE_j = −log q(C[j])
    ce          CE_j                                                the target's greedy token only
    tvd         w_div · TVD(p̃, q) + w_ce · CE_j                     TVD = ½ Σ_v |p̃(v) − q(v)|, whole vocabulary
    reverse_kl  w_div · KL(q ‖ p̂) + w_ce · CE_j                     p̂: see below
    prefix      a_j · (w_div · KL(p̃ ‖ q) + w_ce · CE_j)             a_j: see below

- TVD: 1 − TVD(p, q) is the chance that speculative *sampling* accepts a drafted token, and its gradient does not
  vanish on tokens p puts no mass on; here p̃'s mass outside the top-k is zero, so TVD = ½ (Σ_{v∈topk} |p̃ − q| +
  (1 − Σ_{v∈topk} q)).
- reverse KL (mode-seeking: q is pushed off tokens the target finds unlikely) needs p everywhere. p̂ keeps the stored
  top-k probabilities as they are (not renormalized) and spreads the rest of the target's mass, r = 1 − Σ_topk p,
  evenly over the V − k other tokens; r is floored at REVERSE_KL_TAIL_FLOOR (the stored fp16 log-probs make 1 − Σ p
  noise of about that size when the top-k holds nearly everything) and p̂ is renormalized over (top-k, tail).
- prefix, an expected-accepted-prefix surrogate: a draft window starting at s proposes s, s+1, …; position j is worth
  scoring only if every earlier position of its window was accepted. With q_i = q(C[i]) (detached: the weights are
  constants, so CE's non-vanishing gradient is kept rather than the product's, which vanishes while q_i is small),

      a_j = mean over window starts s ∈ {max(0, j − k + 1), …, j} of Π_{i=s}^{j−1} q_i        (k = eval_k)

  i.e. the chance that a k-token window starting at a uniformly chosen admissible start reaches j with everything
  before j accepted. The walk's windows start anywhere (wherever the last one stopped), hence the mean over starts
  rather than one fixed alignment; a_0 = 1 (every walk starts a window at 0), and a drafter that already agrees
  everywhere (q_i = 1) gets a_j = 1, i.e. the kl loss.

Token selection (``select_tokens`` < 1, AdaSPEC's rule): each step keeps the share of its positions whose ℓ_j exceeds a
reference drafter's ℓ_j (:func:`position_losses`, a drafter already distilled from the same start) the most — what the
drafter can learn and has not — and scales their sum by 1 / share.

Losses are summed over positions (:class:`LossSums`); `distill` divides them by the global batch's continuation
tokens, so DDP ranks with unequal shares still average to the one-process gradient.

The head's logits are computed only at the positions a loss is taken, a chunk of positions at a time
(:func:`head_terms`), so a step never holds (positions × vocabulary) logits of a whole batch.

    sums = loss_sums(model, collate(examples, pad_id, device), config)   # LossSums: distill, replay, parts

A batch's rows may be packed into one sequence or right-padded (examples.collate, packing.py): the losses read the
positions they score through flat indices (``index``, ``replay_index``) into the batch's hidden states, so they are the
same sums either way (tested, for every loss, with replay rows and under QAT).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from ..config import DistillConfig
from ..modeling.models import final_hidden_states, output_weight
from ..modeling.packing import model_inputs

LOSSES = ("kl", "ce", "tvd", "reverse_kl", "prefix")


DIVERGENCE_OF = {"kl": "kl", "tvd": "tvd", "reverse_kl": "reverse_kl", "prefix": "kl"}  # the loss part each logs


REVERSE_KL_TAIL_FLOOR = 1e-4  # ≈ the noise of 1 − Σ top-20 p from fp16 log-probs; keeps log p̂ of the tail finite


# Logits (positions × vocabulary) the head computes at once: 128M, 512 MiB in fp32, ~880 positions of Qwen3's
# 151,936-token vocabulary; with log_softmax and its gradient a chunk holds a few GB, where a 16 × 1,024-token batch's
# full logits held ~10 GB in bf16 and as much again in fp32 for the positions scored.
HEAD_CHUNK_LOGITS = 1 << 27


def forward_kl(log_q_topk: torch.Tensor, log_p: torch.Tensor) -> torch.Tensor:
    """KL(p̃ ‖ q) per position; p̃ lives on the top-k only, so only q's top-k log-probs enter. (N, K) → (N,)."""
    return (log_p.exp() * (log_p - log_q_topk)).sum(dim=-1)


def total_variation(log_q_topk: torch.Tensor, log_p: torch.Tensor) -> torch.Tensor:
    """½ Σ_v |p̃(v) − q(v)| over the vocabulary, p̃ zero outside its top-k. (N, K) → (N,)."""
    q_topk = log_q_topk.exp()
    return 0.5 * ((log_p.exp() - q_topk).abs().sum(dim=-1) + (1 - q_topk.sum(dim=-1)).clamp_min(0))


def reverse_kl(log_q: torch.Tensor, log_q_topk: torch.Tensor, topk_logprobs: torch.Tensor) -> torch.Tensor:
    """KL(q ‖ p̂) per position, p̂ = the stored top-k probabilities plus their tail spread evenly (module docstring).
    log_q (N, V), log_q_topk and topk_logprobs (N, K) → (N,)."""
    vocab, k = log_q.shape[-1], topk_logprobs.shape[-1]
    p_topk = topk_logprobs.exp()  # (N, K)
    tail = (1 - p_topk.sum(dim=-1)).clamp_min(REVERSE_KL_TAIL_FLOOR)  # (N,)
    log_z = torch.log(p_topk.sum(dim=-1) + tail)  # (N,)
    log_p_topk = topk_logprobs - log_z[:, None]  # (N, K)
    log_p_other = torch.log(tail) - log_z - np.log(max(vocab - k, 1))  # (N,): each token outside the top-k
    q_topk = log_q_topk.exp()
    neg_entropy = (log_q.exp() * log_q).sum(dim=-1)  # Σ_v q log q, (N,)
    return neg_entropy - (q_topk * log_p_topk).sum(dim=-1) - (1 - q_topk.sum(dim=-1)).clamp_min(0) * log_p_other


def prefix_weights(log_q_label: torch.Tensor, positions: torch.Tensor, k: int) -> torch.Tensor:
    """a_j = mean over window starts s ∈ {max(0, j − k + 1), …, j} of Π_{i=s}^{j−1} q_i (module docstring).

    ``log_q_label`` (N,) is log q(C[i]) of the batch's continuation positions laid end to end, one continuation after
    another; ``positions`` (N,) is each one's index j inside its continuation, so i = j − d belongs to the same
    continuation exactly when d ≤ j. Detached: the weights are constants of the loss.
    """
    log_q_label = log_q_label.detach()
    log_product = torch.zeros_like(log_q_label)  # Σ_{i=j−d}^{j−1} log q_i for the current d
    total = torch.ones_like(log_q_label)  # d = 0: the window starting at j itself, empty product 1
    count = torch.ones_like(log_q_label)
    for d in range(1, k):
        valid = positions >= d  # (N,): start j − d is inside the continuation
        if not bool(valid.any()):
            break
        shifted = F.pad(log_q_label, (d, 0))[: len(log_q_label)]  # (N,): log q at flat index − d
        log_product = log_product + shifted
        total = total + torch.where(valid, log_product.exp(), torch.zeros_like(total))
        count = count + valid.to(count.dtype)
    return total / count


@dataclass
class LossSums:
    """One forward's losses, summed (not averaged) so that the caller can divide by global token counts."""

    distill: torch.Tensor  # Σ_j ℓ_j over the batch's continuation positions
    replay: torch.Tensor | None  # Σ of next-token CE over the replay tokens, None without replay
    parts: dict[str, torch.Tensor] = field(default_factory=dict)  # detached sums for logs: ce, kl|tvd|…, top1, …


def check_loss(config: DistillConfig) -> None:
    if config.loss not in LOSSES:
        raise ValueError(f"distill loss {config.loss!r}: expected one of {', '.join(LOSSES)}")


def _position_terms(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    topk_ids: torch.Tensor | None,
    topk_logprobs: torch.Tensor | None,
    loss: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One chunk of positions through the output head: (log q(label), divergence, argmax == label), each (n,).
    hidden (n, H), weight (V, H); topk_* (n, K), None for the ce loss (its divergence is then zeros)."""
    logits = F.linear(hidden, weight).float()  # (n, V); under autocast the matmul runs in bf16, as the model's head
    log_q = F.log_softmax(logits, dim=-1)  # (n, V)
    log_q_label = log_q.gather(1, labels[:, None]).squeeze(1)  # (n,)
    top1 = logits.argmax(dim=-1) == labels  # (n,)
    if topk_ids is None or topk_logprobs is None:
        return log_q_label, torch.zeros_like(log_q_label), top1
    log_q_topk = log_q.gather(1, topk_ids)  # (n, K)
    log_p = F.log_softmax(topk_logprobs, dim=-1)  # (n, K): the target's top-k, renormalized
    if loss == "tvd":
        divergence = total_variation(log_q_topk, log_p)
    elif loss == "reverse_kl":
        divergence = reverse_kl(log_q, log_q_topk, topk_logprobs)
    else:  # kl, prefix
        divergence = forward_kl(log_q_topk, log_p)
    return log_q_label, divergence, top1


def head_terms(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    topk_ids: torch.Tensor | None = None,
    topk_logprobs: torch.Tensor | None = None,
    loss: str = "ce",
    chunk_logits: int = HEAD_CHUNK_LOGITS,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`_position_terms` over all N positions, at most ``chunk_logits`` logits (positions × vocabulary) at a
    time. Each chunk runs under activation checkpointing: only its inputs are kept, and its logits are computed again
    in the backward pass, so a step holds one chunk's logits, not (N, V) of them. Returns (N,) tensors.

    Chunks over positions, as liger-kernel's fused linear + cross-entropy does, but leaves the backward to autograd
    (each chunk recomputed) instead of computing gradients in the forward, and does not cut the vocabulary: the five
    losses stay plain PyTorch on a chunk's full rows, equal to the unchunked ones to float summation order (tested),
    with no backward of our own to write per loss and no package to pin. What it costs: the head's matmul once more in
    the backward (~15 % of a Qwen3-1.7B forward, ~5 % of a step).
    """
    rows = max(1, chunk_logits // weight.shape[0])
    parts: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
    for start in range(0, hidden.shape[0], rows):
        chunk = slice(start, start + rows)
        args = (
            hidden[chunk],
            weight,
            labels[chunk],
            None if topk_ids is None else topk_ids[chunk],
            None if topk_logprobs is None else topk_logprobs[chunk],
            loss,
        )
        if torch.is_grad_enabled() and hidden.requires_grad:
            parts.append(checkpoint(_position_terms, *args, use_reentrant=False))
        else:
            parts.append(_position_terms(*args))
    return tuple(torch.cat(column) for column in zip(*parts))  # type: ignore[return-value]


def _weighted(config: DistillConfig, divergence: torch.Tensor, ce: torch.Tensor) -> torch.Tensor:
    """ℓ_j before any prefix weighting: CE alone for the ce loss, else w_div · divergence + w_ce · CE."""
    if config.loss == "ce":
        return ce
    return config.divergence_weight * divergence + config.ce_weight * ce


def _head(
    model: nn.Module, batch: dict[str, torch.Tensor], config: DistillConfig, chunk_logits: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The batch's final hidden states (B · T, H) and, at its continuation positions, log q(label), the divergence and
    top-1 agreement (head_terms)."""
    hidden = final_hidden_states(model, model_inputs(batch)).flatten(0, 1)  # (B · T, H): packed, B = 1
    with_topk = config.loss != "ce"
    terms = head_terms(
        hidden[batch["index"]],  # (N, H)
        output_weight(model),
        batch["labels"],
        batch["topk_ids"] if with_topk else None,
        batch["topk_logprobs"] if with_topk else None,
        config.loss,
        chunk_logits,
    )
    return (hidden, *terms)


def position_losses(
    model: nn.Module, batch: dict[str, torch.Tensor], config: DistillConfig, chunk_logits: int = HEAD_CHUNK_LOGITS
) -> torch.Tensor:
    """ℓ_j at every continuation position of the batch (no prefix weights), without gradients: what token selection
    reads from its reference drafter. (N,)"""
    with torch.no_grad():
        _, log_q_label, divergence, _ = _head(model, batch, config, chunk_logits)
    return _weighted(config, divergence, -log_q_label)


def selected_positions(excess: torch.Tensor, share: float) -> torch.Tensor:
    """The ``share`` of positions with the largest ``excess`` loss over the reference (at least one), as a 0/1 float
    mask. (N,) → (N,)"""
    keep = max(1, round(share * excess.numel()))
    mask = torch.zeros_like(excess)
    mask[excess.topk(keep).indices] = 1.0
    return mask


def loss_sums(
    model: nn.Module,
    batch: dict[str, torch.Tensor],
    config: DistillConfig,
    chunk_logits: int = HEAD_CHUNK_LOGITS,
    reference_losses: torch.Tensor | None = None,
) -> LossSums:
    """The batch's loss sums. Logits are computed only at the positions a loss is taken (continuation positions and
    replay targets), through :func:`head_terms`' chunks; prompt positions only run the decoder.

    Token selection (``config.select_tokens`` < 1, with ``reference_losses``: :func:`position_losses` of a reference
    drafter on the same batch): only the share of positions whose loss exceeds the reference's the most is trained
    on — those the drafter has most left to learn and can learn, as AdaSPEC selects them — and the sum is divided by
    the share, so a step's loss keeps its scale."""
    check_loss(config)
    hidden, log_q_label, divergence, top1 = _head(model, batch, config, chunk_logits)
    with_topk = config.loss != "ce"
    ce = -log_q_label  # (N,)
    parts = {"ce": ce.detach().sum(), "top1": top1.sum().float()}
    per_position = _weighted(config, divergence, ce)
    unweighted = per_position
    if with_topk:
        parts[DIVERGENCE_OF[config.loss]] = divergence.detach().sum()
        if config.loss == "prefix":
            weights = prefix_weights(log_q_label, batch["positions"], config.eval_k)
            parts["prefix_weight"] = weights.sum()
            per_position = weights * per_position
    if reference_losses is not None and config.select_tokens < 1:
        mask = selected_positions(unweighted.detach() - reference_losses, config.select_tokens)
        parts["selected"] = mask.sum()
        per_position = per_position * mask / config.select_tokens
    replay = None
    if "replay_index" in batch:
        replay_log_q, _, _ = head_terms(
            hidden[batch["replay_index"]], output_weight(model), batch["replay_labels"], chunk_logits=chunk_logits
        )  # (M,)
        replay = -replay_log_q.sum()
        parts["lm"] = replay.detach()
    return LossSums(per_position.sum(), replay, parts)
