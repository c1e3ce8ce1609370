"""Stage `distill`: teach the drafter the target's continuations (knowledge distillation), optionally with Q4_0 QAT.

Starts from a drafter checkpoint (`--drafter`: the lab's base drafter, or any HF id/path such as Qwen/Qwen3-1.7B) and
the `reference` stage's training shards. On every continuation position j of P + C, with q the drafter's distribution,
C[j] the target's greedy token (what τ scores) and p̃ the target's stored top-k renormalized over its k tokens (zero
outside them), the per-position loss ℓ_j is, by `DistillConfig.loss` (w_div = divergence_weight, w_ce = ce_weight):

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

Losses are summed over positions and divided by the global batch's continuation tokens, so DDP ranks with unequal
shares still average to the one-process gradient. Optional replay (`replay_weight` > 0 and `--replay-tokens`): each
step also takes `replay_batch_size` chunks of `replay_seq_len` tokens of the base's pretraining text (the lab
tokenizer stage's ``train.tokens.npy``, a ``.npy`` token array, or a directory of them) and adds
replay_weight · (mean next-token CE over those tokens), so the drafter keeps what it knew about text the reference
data does not cover. (An LM loss rather than a KL to a frozen copy of the base: no second model in memory or forward
per step, which for a 1.7B drafter is 3.4 GB and a third more compute.)

Training examples can be restricted to categories (`categories`: prefixes such as ``code/inner``) and to a share of
them (`data_fraction`, chosen by a hash of each example's id so that smaller fractions are subsets of larger ones).
The dev split's τ is measured every `eval_every` steps (0: every epoch end) by the validator's walk (fast exact
method, tau.py); the checkpoint with the best **macro τ** (mean of per-category τ) is kept, the starting drafter
(step 0) included, and `patience` evaluations without a new best stop the run early (a plateau). Progress: a tqdm
bar (loss, top-1 agreement, dev τ); TensorBoard events in ``OUT/tb/`` (loss and its parts, top-1 agreement, dev τ
by category and macro). Under `--qat` the drafter's forward uses weights fake-quantized exactly as a GGUF Q4_0 file
stores them (specdraft_train.quant), the token embedding as `--embedding-type` says (the preset's
`export.embedding_type`: Q8_0, or Q4_0 for an all-Q4_0 file); the output then also holds ``qat_state.safetensors``
for `export --qat-state`.
Resumable (``OUT/resume/``). Under torchrun: DDP like pretrain (NCCL between GPUs, gloo on the CPU; the global batch
is split over the ranks, so N ranks train what one process would), or FSDP with ``--fsdp`` (the drafter's weights,
gradients and AdamW moments sharded over the ranks, for a drafter whose training state does not fit one GPU; not
with --qat). The teacher is the stored top-k of the reference data either way (no target in memory):

    python -m specdraft_train distill --drafter runs/lab/base --reference runs/lab/reference --out runs/lab/distilled \\
        --replay-tokens runs/lab/tokenizer --set replay_weight=0.2 --set loss=prefix
    python -m specdraft_train distill --drafter runs/lab/distilled --reference runs/lab/reference \\
        --out runs/lab/distilled-qat --qat [--embedding-type Q4_0]
    torchrun --nproc-per-node 8 -m specdraft_train distill ...
    torchrun --nproc-per-node 8 -m specdraft_train distill --fsdp --drafter Qwen/Qwen3-8B ...
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from .artifacts import input_record, read_manifest, sha256_file, verify_stage_dir, write_manifest
from .config import (
    DistillConfig,
    ExportConfig,
    add_embedding_type_argument,
    add_preset_argument,
    announce,
    apply_settings,
    get_preset,
    override,
    serving_context_note,
)
from .models import (
    QAT_STATE_FILE,
    architecture_summary,
    autocast_context,
    checkpoint_info,
    final_hidden_states,
    load_causal_lm,
    output_weight,
    save_checkpoint,
    verify_checkpoint,
)
from .pretrain import ChunkSampler
from .provenance import merge_sources, model_pin, model_source, reference_sources
from .reference import TrainExample, read_train_examples
from .tau import TauResult, model_tau, read_conversations
from .tokenizer import load_token_stream, token_file
from .training import (
    DistributedContext,
    ResumeState,
    finish_distributed,
    halt_for_test,
    init_distributed,
    lr_at,
    make_optimizer,
    open_summary_writer,
    progress_bar,
    rank_slice,
    set_lr,
    stop_by_budget,
    unwrap,
    wrap_model,
)

LOG_EVERY_STEPS = 25  # also every evaluation and checkpoint step, so logged windows are the same after a resume
UNTIMED_STEPS = 5  # the manifest's tokens_per_s starts after these: the first steps pay cuBLAS set-up, allocator growth
LOSSES = ("kl", "ce", "tvd", "reverse_kl", "prefix")
DIVERGENCE_OF = {"kl": "kl", "tvd": "tvd", "reverse_kl": "reverse_kl", "prefix": "kl"}  # the loss part each logs
REVERSE_KL_TAIL_FLOOR = 1e-4  # ≈ the noise of 1 − Σ top-20 p from fp16 log-probs; keeps log p̂ of the tail finite
# Logits (positions × vocabulary) the head computes at once: 128M, 512 MiB in fp32, ~880 positions of Qwen3's
# 151,936-token vocabulary; with log_softmax and its gradient a chunk holds a few GB, where a 16 × 1,024-token batch's
# full logits held ~10 GB in bf16 and as much again in fp32 for the positions scored.
HEAD_CHUNK_LOGITS = 1 << 27


# ---------------------------------------------------------------------------------------------------------------------
# Data: which examples, how they are batched, and the replay text


def _id_fraction(example_id: str) -> float:
    """A stable number in [0, 1) per example id; a data fraction f keeps the ids below f."""
    return int(hashlib.sha256(example_id.encode("utf-8")).hexdigest()[:8], 16) / 16**8


def select_examples(examples: Sequence[TrainExample], config: DistillConfig) -> list[TrainExample]:
    """The examples training uses: those of the configured category prefixes, then the configured share of them."""
    if not 0 < config.data_fraction <= 1:
        raise ValueError(f"data_fraction {config.data_fraction}: expected 0 < fraction ≤ 1")
    kept = [e for e in examples if not config.categories or e.category.startswith(tuple(config.categories))]
    if config.data_fraction < 1:
        if any(not e.id for e in kept):
            raise ValueError("data_fraction < 1 needs example ids, and these reference shards carry none")
        kept = [e for e in kept if _id_fraction(e.id) < config.data_fraction]
    return kept


def collate(
    examples: Sequence[TrainExample], pad_id: int, device: torch.device, replay_chunks: np.ndarray | None = None
) -> dict[str, torch.Tensor]:
    """Right-padded inputs P + C[:-1] and, for every continuation token, where its prediction sits.

    ``replay_chunks`` (R, S + 1) of pretraining text become R more rows of the same forward (one forward per step,
    which DDP needs), predicting tokens 1…S of each chunk.
    """
    sequences = [e.prompt_tokens + e.continuation_tokens[:-1] for e in examples]
    replay_width = 0 if replay_chunks is None else replay_chunks.shape[1] - 1
    width = max(max(len(s) for s in sequences), replay_width)
    n_replay = 0 if replay_chunks is None else len(replay_chunks)
    input_ids = torch.full((len(examples) + n_replay, width), pad_id, dtype=torch.long)  # (B + R, T)
    attention_mask = torch.zeros((len(examples) + n_replay, width), dtype=torch.long)
    rows, cols, positions = [], [], []
    for b, (example, seq) in enumerate(zip(examples, sequences)):
        input_ids[b, : len(seq)] = torch.tensor(seq)
        attention_mask[b, : len(seq)] = 1
        p, length = len(example.prompt_tokens), len(example.continuation_tokens)
        rows += [b] * length
        cols += range(p - 1, p - 1 + length)
        positions += range(length)
    batch = {
        "rows": torch.tensor(rows, device=device),  # (N,) N = continuation tokens in the batch
        "cols": torch.tensor(cols, device=device),  # (N,)
        "positions": torch.tensor(positions, device=device),  # (N,) j: the position inside its continuation
        "labels": torch.from_numpy(np.concatenate([np.asarray(e.continuation_tokens) for e in examples]))
        .long()
        .to(device),
        "topk_ids": torch.from_numpy(np.concatenate([e.topk_ids for e in examples])).long().to(device),  # (N, K)
        "topk_logprobs": torch.from_numpy(np.concatenate([e.topk_logprobs for e in examples])).to(device),  # (N, K)
    }
    if replay_chunks is not None:
        chunks = torch.from_numpy(replay_chunks.astype(np.int64))  # (R, S + 1)
        input_ids[len(examples) :, :replay_width] = chunks[:, :-1]
        attention_mask[len(examples) :, :replay_width] = 1
        replay_rows = torch.arange(len(examples), len(examples) + n_replay)  # (R,)
        batch["replay_rows"] = replay_rows.repeat_interleave(replay_width).to(device)  # (M,) M = R · S
        batch["replay_cols"] = torch.arange(replay_width).repeat(n_replay).to(device)  # (M,)
        batch["replay_labels"] = chunks[:, 1:].reshape(-1).to(device)  # (M,)
    batch["input_ids"] = input_ids.to(device)
    batch["attention_mask"] = attention_mask.to(device)
    return batch


def load_replay_tokens(source: Path) -> tuple[np.ndarray, dict[str, Any]]:
    """Token ids of replay text and how to record them: a lab tokenizer stage directory (its train split), a ``.npy``
    token array, or a directory of ``.npy`` arrays (concatenated in name order)."""
    if source.is_dir() and (source / token_file("train")).is_file() and read_manifest(source) is not None:
        manifest = verify_stage_dir(source, "tokenizer")
        return load_token_stream(source, "train"), {"kind": "tokenizer stage", **input_record(source, manifest)}
    files = sorted(source.glob("*.npy")) if source.is_dir() else [source]
    if not files or not all(f.is_file() and f.suffix == ".npy" for f in files):
        raise ValueError(
            f"--replay-tokens {source}: expected a tokenizer stage directory, a .npy token array, or a "
            "directory of .npy token arrays"
        )
    arrays = [np.load(f).astype(np.int32).reshape(-1) for f in files]
    return np.concatenate(arrays), {"kind": "token arrays", "files": {str(f): sha256_file(f) for f in files}}


class ReplayText:
    """The replay text cut into ``replay_seq_len + 1``-token chunks; step → this rank's chunks, fixed in advance
    (pretrain's sampler: the same for any world size and any restart)."""

    def __init__(self, source: Path, config: DistillConfig, vocab_size: int, ctx: DistributedContext):
        self.tokens, self.record = load_replay_tokens(source)
        top = int(self.tokens.max(initial=0))
        if top >= vocab_size:
            raise ValueError(f"replay text {source} uses token id {top}; the drafter's vocabulary has {vocab_size}")
        self.seq_len = config.replay_seq_len
        self.sampler = ChunkSampler(len(self.tokens), config.replay_seq_len, config.replay_batch_size, config.seed)
        self.my_rows = rank_slice(config.replay_batch_size, ctx)
        self.tokens_per_step = config.replay_batch_size * config.replay_seq_len  # global

    def chunks(self, step: int) -> np.ndarray:
        starts = self.sampler.batch_indices(step)[self.my_rows] * self.seq_len
        return np.stack([self.tokens[s : s + self.seq_len + 1] for s in starts])  # (R, S + 1)


# ---------------------------------------------------------------------------------------------------------------------
# Losses


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


def loss_sums(
    model: nn.Module, batch: dict[str, torch.Tensor], config: DistillConfig, chunk_logits: int = HEAD_CHUNK_LOGITS
) -> LossSums:
    """The batch's loss sums. Logits are computed only at the positions a loss is taken (continuation positions and
    replay targets), through :func:`head_terms`' chunks; prompt positions only run the decoder."""
    check_loss(config)
    hidden = final_hidden_states(model, batch["input_ids"], batch["attention_mask"])  # (B + R, T, H)
    weight = output_weight(model)  # (V, H)
    with_topk = config.loss != "ce"
    log_q_label, divergence, top1 = head_terms(
        hidden[batch["rows"], batch["cols"]],  # (N, H)
        weight,
        batch["labels"],
        batch["topk_ids"] if with_topk else None,
        batch["topk_logprobs"] if with_topk else None,
        config.loss,
        chunk_logits,
    )
    ce = -log_q_label  # (N,)
    parts = {"ce": ce.detach().sum(), "top1": top1.sum().float()}
    per_position = ce  # the "ce" loss
    if with_topk:
        parts[DIVERGENCE_OF[config.loss]] = divergence.detach().sum()
        per_position = config.divergence_weight * divergence + config.ce_weight * ce
        if config.loss == "prefix":
            weights = prefix_weights(log_q_label, batch["positions"], config.eval_k)
            parts["prefix_weight"] = weights.sum()
            per_position = weights * per_position
    replay = None
    if "replay_rows" in batch:
        replay_log_q, _, _ = head_terms(
            hidden[batch["replay_rows"], batch["replay_cols"]],
            weight,
            batch["replay_labels"],
            chunk_logits=chunk_logits,
        )  # (M,)
        replay = -replay_log_q.sum()
        parts["lm"] = replay.detach()
    return LossSums(per_position.sum(), replay, parts)


class TrainWindow:
    """Loss parts summed on the device since the last log point; read (one sync, one all-reduce) only when logged.

    Log points are fixed by the step (every LOG_EVERY_STEPS, evaluation and checkpoint), so a resumed run logs the
    same windows as an uninterrupted one and the history agrees.
    """

    def __init__(self) -> None:
        self.sums: dict[str, torch.Tensor] = {}
        self.counts = {"steps": 0.0, "tokens": 0.0, "replay_tokens": 0.0}

    def add(self, loss: torch.Tensor, parts: dict[str, torch.Tensor], tokens: int, replay_tokens: int) -> None:
        for name, value in {"loss": loss.detach(), **parts}.items():
            self.sums[name] = self.sums[name] + value if name in self.sums else value
        self.counts["steps"] += 1
        self.counts["tokens"] += tokens
        self.counts["replay_tokens"] += replay_tokens

    def read(self, ctx: DistributedContext) -> dict[str, float]:
        """Means over the window and all ranks: loss per step, lm per replay token, the rest per continuation token."""
        if not self.sums:
            return {}
        names = sorted(self.sums)
        device = self.sums[names[0]].device
        values = torch.stack(
            [self.sums[n].float() for n in names]
            + [torch.tensor(self.counts[c], device=device) for c in ("tokens", "replay_tokens")]
        )
        values = ctx.all_reduce_sum(values).tolist()
        tokens, replay_tokens = values[-2], values[-1]
        steps = self.counts["steps"]  # each rank adds its share of the global mean loss: the sum is the mean
        means = {}
        for name, value in zip(names, values):
            means[name] = value / max({"loss": steps, "lm": replay_tokens}.get(name, tokens), 1)
        self.sums, self.counts = {}, {"steps": 0.0, "tokens": 0.0, "replay_tokens": 0.0}
        return means


# ---------------------------------------------------------------------------------------------------------------------
# Dev evaluation, input checks


def dev_entry(result: TauResult) -> dict[str, Any]:
    """A dev evaluation as the history records it."""
    by_category = {name: {"tau": c["tau"], "top1": c.get("top1")} for name, c in result.by_category.items()}
    return {
        "dev_tau": result.tau,
        "dev_macro_tau": result.macro_tau,
        "dev_top1": result.top1,
        "dev_by_category": by_category,
    }


def log_dev(tb: Any, entry: dict[str, Any], step: int) -> None:
    tb.add_scalar("dev/tau", entry["dev_tau"], step)
    tb.add_scalar("dev/macro_tau", entry["dev_macro_tau"], step)
    tb.add_scalar("dev/top1", entry["dev_top1"], step)
    for name, category in entry["dev_by_category"].items():
        tb.add_scalar(f"dev/tau/{name}", category["tau"], step)
        tb.add_scalar(f"dev/top1/{name}", category["top1"], step)
    tb.flush()


def check_vocabularies(
    drafter: str | Path, reference_manifest: dict[str, Any], vocab_size: int, examples: Sequence[TrainExample]
) -> None:
    """Refuse a drafter whose token ids cannot be the target's: different lab tokenizer, or ids out of range."""
    drafter_info = checkpoint_info(drafter)
    target_info = reference_manifest["inputs"].get("target", {})
    ours = drafter_info.get("outputs", {}).get("tokenizer.json")
    theirs = target_info.get("outputs", {}).get("tokenizer.json")
    if ours and theirs and ours != theirs:
        raise ValueError(
            f"drafter {drafter} has another tokenizer.json than the target of the reference data "
            f"(sha256 {ours[:12]}… vs {theirs[:12]}…)"
        )
    top = max((max(e.continuation_tokens + e.prompt_tokens) for e in examples), default=0)
    if top >= vocab_size:
        raise ValueError(f"reference data uses token id {top}; the drafter's vocabulary has {vocab_size}")


def check_replay_tokenizer(drafter: str | Path, replay: ReplayText) -> None:
    """Replay text from a lab tokenizer stage must be in the drafter's own tokenizer."""
    ours = checkpoint_info(drafter).get("outputs", {}).get("tokenizer.json")
    theirs = replay.record.get("outputs", {}).get("tokenizer.json")
    if ours and theirs and ours != theirs:
        raise ValueError(
            f"replay text {replay.record.get('path')} was tokenized with another tokenizer.json than "
            f"drafter {drafter}'s (sha256 {theirs[:12]}… vs {ours[:12]}…)"
        )


def load_qat_state_into(qat: Any, path: Path) -> None:
    """Put a saved QAT state's per-block clip factors into a freshly prepared model, then check its fingerprints."""
    from .quant import load_qat_state

    saved = load_qat_state(path)
    with torch.no_grad():
        for name, clip in saved.clips.items():
            qat.targets[name].parametrization.clip.copy_(clip)
    if qat.fingerprints() != saved.fingerprints:
        raise ValueError(f"{path}: the model's quantized weights do not match the QAT state's fingerprints")


def chain_provenance(
    drafter: str | Path,
    drafter_manifest: dict[str, Any] | None,
    inputs: dict[str, Any],
    reference_manifest: dict[str, Any],
) -> dict[str, Any]:
    """The manifest's ``sources`` and ``base_model`` (provenance.py): a distilled drafter's inherited, with this run's
    reference data (and replay text) added; otherwise the drafter, pinned, is the base model."""
    if drafter_manifest is not None and "base_model" in drafter_manifest:
        inherited, base = drafter_manifest.get("sources", []), drafter_manifest["base_model"]
    else:
        pin = model_pin(drafter, drafter_manifest)
        inputs["drafter"]["pin"] = pin
        inherited = [model_source(inputs["drafter"], "base model")]
        base = {"name": str(drafter), "revision": pin.get("revision") or pin.get("sha256", "")[:16] or None}
    replay = inputs.get("replay")
    replay_sources = [
        {"name": Path(path).name, "split": "distill (replay)", "uri": path, "sha256": digest}
        for path, digest in (replay or {}).get("files", {}).items()
    ] + [
        {"name": f"replay/{rel}", "split": "distill (replay)", "uri": replay["path"], "sha256": digest}
        for rel, digest in (replay or {}).get("outputs", {}).items()
    ]
    sources = merge_sources(inherited, reference_sources(inputs["reference"], reference_manifest), replay_sources)
    return {"sources": sources, "base_model": base}


def synced_clock(device: torch.device) -> float:
    """Wall time once the device has finished what was queued (steps are asynchronous on CUDA)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.time()


def warm_throughput(timed_from: list[float] | None, loop_end: list[float]) -> float | None:
    """Continuation tokens per second between step UNTIMED_STEPS and the last step ([seconds, tokens] at each): what
    a longer run sustains. None for a run of fewer steps."""
    if timed_from is None or loop_end[0] <= timed_from[0]:
        return None
    return (loop_end[1] - timed_from[1]) / (loop_end[0] - timed_from[0])


def finish_line(
    best: dict[str, Any], steps: int, max_steps: int, tokens: int, seconds: float, plateau: bool, budget: bool
) -> str:
    """The stage's last line: the kept checkpoint (step 0 is the starting drafter), the steps run of those planned,
    and why it stopped short of them."""
    why = " (plateau)" if plateau else " (time budget)" if budget else ""
    start = " (the starting drafter: no evaluation beat it)" if best["step"] == 0 and steps > 0 else ""
    return (
        f"distill: best dev macro τ {best['dev_macro_tau']:.3f} (τ {best['dev_tau']:.3f}, top-1 "
        f"{best['dev_top1']:.3f}) at step {best['step']}{start} after {steps:,} of {max_steps:,} steps{why}; "
        f"{tokens:,} continuation tokens in {seconds:.1f} s"
    )


# ---------------------------------------------------------------------------------------------------------------------
# The stage


def enable_activation_checkpointing(model: nn.Module) -> None:
    """Each decoder layer's activations recomputed in the backward pass (DistillConfig.activation_checkpointing);
    non-reentrant, which DDP, FSDP and QAT's parametrized weights all take."""
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def run(
    drafter: str | Path,
    reference_dir: Path,
    out_dir: Path,
    config: DistillConfig,
    qat: bool = False,
    clip_search: bool = False,
    device_name: str = "auto",
    halt_after_steps: int | None = None,
    epochs: int | None = None,
    lr: float | None = None,
    replay_tokens: Path | None = None,
    embedding_type: str | None = None,
) -> dict[str, Any] | None:
    """Distill into ``drafter`` and write the best dev checkpoint to ``out_dir``; returns the manifest (rank 0).

    ``replay_tokens`` is the replay text (see the module docstring); replay runs only when it is given and
    ``config.replay_weight`` > 0. ``embedding_type`` (with ``qat``): the token embedding's type in the Q4_0 file
    QAT trains for (config.EMBEDDING_TYPES). Defaults to ``ExportConfig().resolved_embedding_type()``, Q8_0.
    """
    ctx = init_distributed(device_name)
    start_time = time.time()
    check_loss(config)  # before any model is loaded
    epochs = epochs if epochs is not None else (config.qat_epochs if qat else config.epochs)
    peak_lr = lr if lr is not None else (config.qat_lr if qat else config.lr)
    reference_manifest = verify_stage_dir(reference_dir, "reference")
    drafter_manifest = verify_checkpoint(drafter)
    available = read_train_examples(reference_dir)
    examples = select_examples(available, config)
    dev = read_conversations(reference_dir / "dev.jsonl")
    if not examples:
        raise ValueError(
            f"{reference_dir}: no training examples"
            + (
                f" of categories {list(config.categories)} (it has {sorted({e.category for e in available})})"
                if available
                else ""
            )
        )
    if ctx.is_main:
        items = [(e.id or "?", len(e.prompt_tokens), len(e.continuation_tokens)) for e in examples]
        serving_context_note("distill", "training examples", items, config.eval_k)
    sharded = config.fsdp and ctx.distributed
    if config.fsdp and qat:
        raise ValueError("distill --fsdp with --qat: QAT's parametrized weights are not wired for FSDP; run QAT on DDP")
    # Under FSDP the full drafter is read into CPU memory and each rank moves only its shards to its GPU.
    model = load_causal_lm(drafter, torch.device("cpu") if sharded else ctx.device)
    if config.activation_checkpointing:
        enable_activation_checkpointing(model)
    vocab_size = model.get_input_embeddings().weight.shape[0]
    check_vocabularies(drafter, reference_manifest, vocab_size, examples)
    replay: ReplayText | None = None
    if replay_tokens is not None and config.replay_weight > 0:
        replay = ReplayText(Path(replay_tokens), config, vocab_size, ctx)
        check_replay_tokenizer(drafter, replay)
    elif config.replay_weight > 0 and ctx.is_main:
        print(f"distill: replay_weight {config.replay_weight} but no --replay-tokens: replay is off", file=sys.stderr)
    pad_id = model.config.pad_token_id if model.config.pad_token_id is not None else 0
    qat_state = None
    if qat:
        from .quant import prepare_qat  # the GGUF-exact fake quantization (needs the `gguf` package)

        embedding_type = embedding_type or ExportConfig().resolved_embedding_type()
        qat_state = prepare_qat(model, clip_search=clip_search, embedding_type=embedding_type)
    model.train()
    ddp_model = wrap_model(model, ctx, fsdp=config.fsdp)  # before the optimizer: FSDP replaces the parameters
    optimizer = make_optimizer(model, peak_lr, config.weight_decay, ctx.device)
    global_batch = min(config.batch_size, len(examples) - len(examples) % ctx.world_size)
    steps_per_epoch = max(1, len(examples) // global_batch)
    max_steps = epochs * steps_per_epoch
    eval_every = config.eval_every or steps_per_epoch
    resume = ResumeState(out_dir / "resume", ctx)
    step = 0
    extra: dict[str, Any] = {
        "train_seconds": 0.0,
        "history": [],
        "best": None,
        "evals_since_best": 0,
        "last_eval_step": None,
        "train_tokens": 0,
        "replay_tokens": 0,
        "last": {},
    }
    if resume.exists():
        step, extra = resume.load(model, optimizer)
        if ctx.is_main:
            print(f"distill: resuming at step {step}", file=sys.stderr)
    my_rows = rank_slice(global_batch, ctx)
    bar = progress_bar(ctx, total=max_steps, initial=step, desc="distill --qat" if qat else "distill")
    tb = open_summary_writer(ctx, out_dir, step)
    window = TrainWindow()
    postfix = {"epoch": "", "loss": "", "top1": "", "dev_tau": "", "best": ""}  # the bar's; parts go to TensorBoard

    def evaluate_dev() -> bool:
        """Rank 0 measures dev τ, keeps the best checkpoint by macro τ; every rank learns whether it plateaued.

        Under FSDP every rank runs the same dev forwards (each layer's weights are gathered from all ranks) and
        gives its shards to rank 0 for a new best; rank 0's numbers decide.
        """
        extra["last_eval_step"] = step
        tau = model_tau(unwrap(ddp_model), dev, config.eval_k, ctx.device) if ctx.is_main or sharded else None
        new_best = False
        if ctx.is_main:
            entry = {"step": step, "epoch": step / steps_per_epoch, **dev_entry(tau), **extra["last"]}
            extra["history"].append(entry)
            best = extra["best"]
            new_best = best is None or entry["dev_macro_tau"] > best["dev_macro_tau"]
            if new_best:
                extra["best"] = {k: entry[k] for k in ("step", "epoch", "dev_macro_tau", "dev_tau", "dev_top1")}
                extra["evals_since_best"] = 0
            else:
                extra["evals_since_best"] += 1
        if ctx.broadcast_object(new_best) if sharded else new_best:
            resume.save_best(ddp_model)
        if ctx.is_main:
            log_dev(tb, entry, step)
            best = extra["best"]
            postfix.update(dev_tau=f"{entry['dev_macro_tau']:.3f}", best=f"{best['dev_macro_tau']:.3f}@{best['step']}")
            bar.set_postfix(postfix, refresh=False)  # a refresh now would bypass the bar's rate limit in log files
            bar.write(
                f"distill: step {step} (epoch {entry['epoch']:.2f}) dev macro τ {entry['dev_macro_tau']:.3f}, "
                f"τ {entry['dev_tau']:.3f}, top-1 {entry['dev_top1']:.3f} (best macro τ "
                f"{best['dev_macro_tau']:.3f} at step {best['step']})",
                file=sys.stderr,
            )
        if config.patience <= 0:
            return False
        plateau = ctx.is_main and extra["evals_since_best"] >= config.patience
        return bool(ctx.all_reduce_sum(torch.tensor([float(plateau)], device=ctx.device)).item() > 0)

    def log_window() -> None:
        means = window.read(ctx)  # every rank: it all-reduces
        if not means or not ctx.is_main:
            return
        extra["last"] = means
        for name, value in means.items():
            tb.add_scalar(f"train/{name}", value, step)
        tb.add_scalar("train/lr", optimizer.param_groups[0]["lr"], step)
        postfix.update(epoch=f"{step / steps_per_epoch:.2f}", loss=f"{means['loss']:.4f}", top1=f"{means['top1']:.3f}")
        bar.set_postfix(postfix, refresh=False)

    if step == 0 and extra["last_eval_step"] is None:
        evaluate_dev()  # the starting drafter competes too
    stopped_by_budget = stopped_by_plateau = False
    segment_start = time.time()
    while step < max_steps:
        elapsed = extra["train_seconds"] + time.time() - segment_start
        if stop_by_budget(ctx, elapsed, config.time_budget_s):
            stopped_by_budget = True
            break
        epoch, within = divmod(step, steps_per_epoch)
        if within == 0 and qat_state is not None and clip_search:
            qat_state.refresh_clip()
        order = np.random.default_rng([config.seed, epoch]).permutation(len(examples))
        global_indices = order[within * global_batch : (within + 1) * global_batch]
        # Every rank knows the whole global batch, so its token count needs no collective (nor a GPU sync).
        n_global = sum(len(examples[i].continuation_tokens) for i in global_indices)
        batch = collate(
            [examples[i] for i in global_indices[my_rows]],
            pad_id,
            ctx.device,
            replay.chunks(step) if replay is not None else None,
        )
        set_lr(optimizer, lr_at(step, max_steps, config.warmup_steps, peak_lr, config.min_lr_ratio))
        with autocast_context(ctx.device):
            sums = loss_sums(ddp_model, batch, config)
        loss = sums.distill / n_global
        if replay is not None and sums.replay is not None:
            loss = loss + config.replay_weight * sums.replay / replay.tokens_per_step
        # DDP averages gradients over ranks; scaling by world size makes that the mean over all ranks' tokens.
        loss = loss * ctx.world_size
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(ddp_model.parameters(), config.grad_clip)
        optimizer.step()
        step += 1
        extra["train_tokens"] += n_global
        extra["replay_tokens"] += replay.tokens_per_step if replay is not None else 0
        if step == UNTIMED_STEPS:  # throughput is read from here on (tokens_per_s)
            extra["timed_from"] = [
                extra["train_seconds"] + synced_clock(ctx.device) - segment_start,
                extra["train_tokens"],
            ]
        window.add(
            loss / ctx.world_size,
            sums.parts,
            len(batch["labels"]),
            len(batch["replay_labels"]) if "replay_labels" in batch else 0,
        )
        bar.update(1)
        evaluating = step % eval_every == 0
        saving = (step % config.ckpt_every == 0 or evaluating) and step < max_steps
        if step % LOG_EVERY_STEPS == 0 or evaluating or saving or step == max_steps:
            log_window()
        if evaluating:
            stopped_by_plateau = evaluate_dev()
        # Also at every evaluation, so the saved state always agrees with best.pt and the history.
        if saving:
            extra["train_seconds"] += time.time() - segment_start
            segment_start = time.time()
            if ctx.is_main:
                tb.flush()  # events so far on disk before the state a rerun resumes from
            resume.save(model, optimizer, step, extra)  # every rank: under FSDP each gives rank 0 its shards
            ctx.barrier()
            halt_for_test(step, halt_after_steps)
        if stopped_by_plateau:
            break
    loop_end = [extra["train_seconds"] + synced_clock(ctx.device) - segment_start, extra["train_tokens"]]
    if extra["last_eval_step"] != step:  # stopped between evaluations: the last weights compete too
        log_window()
        evaluate_dev()
    bar.close()
    tb.close()
    train_seconds = extra["train_seconds"] + time.time() - segment_start
    manifest = None
    if ctx.is_main:
        if sharded:  # the FSDP model holds only this rank's shards: the best weights go into a plain CPU copy
            model = load_causal_lm(drafter, torch.device("cpu"))
        resume.load_best(model)
        outputs: list[str]
        if qat_state is not None:
            with qat_state.unwrapped():  # latent fp32 weights under their HF names; export quantizes them exactly
                outputs = save_checkpoint(model, out_dir, drafter)
            qat_state.save(out_dir / QAT_STATE_FILE)
            outputs.append(QAT_STATE_FILE)
        else:
            outputs = save_checkpoint(model, out_dir, drafter)
        best = extra["best"]
        inputs = {"drafter": checkpoint_info(drafter), "reference": input_record(reference_dir, reference_manifest)}
        if replay is not None:
            inputs["replay"] = replay.record
        provenance = chain_provenance(drafter, drafter_manifest, inputs, reference_manifest)
        manifest = write_manifest(
            out_dir,
            "distill",
            outputs=outputs,
            params={
                "config": config.__dict__,
                "qat": qat,
                "embedding_type": qat_state.embedding_type if qat_state is not None else None,
                "clip_search": clip_search,
                "epochs": epochs,
                "lr": peak_lr,
                "global_batch": global_batch,
                "world_size": ctx.world_size,
                "fsdp": sharded,
                "replay": replay is not None,
            },
            inputs=inputs,
            extra={
                **provenance,
                "architecture": architecture_summary(model),
                "metrics": {
                    "steps": step,
                    "steps_per_epoch": steps_per_epoch,
                    "examples": len(examples),
                    "examples_available": len(available),
                    "train_tokens": extra["train_tokens"],
                    "replay_tokens": extra["replay_tokens"],
                    "best_dev_macro_tau": best["dev_macro_tau"],
                    "best_dev_tau": best["dev_tau"],
                    "best_dev_top1": best["dev_top1"],
                    "best_step": best["step"],
                    "best_epoch": best["epoch"],
                    "history": extra["history"],
                    "stopped_by_time_budget": stopped_by_budget,
                    "stopped_by_plateau": stopped_by_plateau,
                    "train_seconds": train_seconds,
                    "tokens_per_s": warm_throughput(extra.get("timed_from"), loop_end),
                    "peak_gpu_bytes": torch.cuda.max_memory_allocated(ctx.device)
                    if ctx.device.type == "cuda"
                    else None,
                    "seconds": time.time() - start_time,
                    "drafter_verified": drafter_manifest is not None,
                },
            },
        )
        print(finish_line(best, step, max_steps, extra["train_tokens"], train_seconds, stopped_by_plateau,
                          stopped_by_budget), file=sys.stderr)  # fmt: skip
        shutil.rmtree(out_dir / "resume", ignore_errors=True)
    finish_distributed(ctx)
    return manifest


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "distill",
        help="distill the target's continuations into the drafter (+ --qat)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--drafter", required=True, help="starting drafter: lab checkpoint, local HF model, or HF id")
    p.add_argument("--reference", required=True, type=Path, help="output directory of the reference stage")
    p.add_argument("--out", required=True, type=Path, help="checkpoint directory to write")
    p.add_argument("--qat", action="store_true", help="train through GGUF Q4_0 fake quantization (quant.py)")
    p.add_argument("--clip-search", action="store_true", help="with --qat: per-block clip search, refreshed each epoch")
    p.add_argument(
        "--fsdp",
        action="store_true",
        help="under torchrun: shard weights, gradients and optimizer over the ranks (FSDP) instead of DDP "
        "(default: the preset's distill.fsdp, false)",
    )
    add_embedding_type_argument(
        p,
        "with --qat: the token embedding's type in the Q4_0 file (default: the preset's export.embedding_type)",
    )
    add_preset_argument(p)
    p.add_argument("--device", default="auto", help="auto | cpu | cuda (default: auto)")
    p.add_argument("--epochs", type=int, default=None, help="epochs (default: preset's; qat_epochs with --qat)")
    p.add_argument("--lr", type=float, default=None, help="peak learning rate (default: preset's; qat_lr with --qat)")
    p.add_argument("--batch-size", type=int, default=None, help="global batch in continuations (default: preset's)")
    p.add_argument(
        "--time-budget", type=float, default=None, help="stop after this many training seconds (default: preset's)"
    )
    p.add_argument(
        "--ckpt-every", type=int, default=None, help="steps between resumable checkpoints (default: preset's)"
    )
    p.add_argument("--loss", choices=LOSSES, default=None, help="per-position loss (default: preset's)")
    p.add_argument(
        "--eval-every", type=int, default=None, help="steps between dev evaluations, 0 = epoch ends (default: preset's)"
    )
    p.add_argument(
        "--patience",
        type=int,
        default=None,
        help="evaluations without a new best before stopping, 0 = never (default: preset's)",
    )
    p.add_argument(
        "--replay-tokens",
        type=Path,
        default=None,
        help="replay text: a lab tokenizer directory, a .npy "
        "token array or a directory of them (used when replay_weight > 0)",
    )
    p.add_argument("--replay-weight", type=float, default=None, help="weight of the replay LM loss (default: preset's)")
    p.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="any DistillConfig field, e.g. --set ce_weight=1 --set 'categories=[\"code/inner\"]' "
        "(repeatable; JSON values)",
    )
    p.add_argument("--halt-after-steps", type=int, default=None, help=argparse.SUPPRESS)
    p.set_defaults(func=main)


def budget(config: DistillConfig, args: argparse.Namespace, embedding_type: str) -> dict[str, Any]:
    """What bounds a distill run, for the line it prints before it starts."""
    replay = "off"
    if config.replay_weight > 0:
        replay = f"{config.replay_weight} on {args.replay_tokens}" if args.replay_tokens else "off (no --replay-tokens)"
    settings: dict[str, Any] = {
        "epochs": args.epochs if args.epochs is not None else config.qat_epochs if args.qat else config.epochs,
        "batch": config.batch_size,
        "lr": args.lr if args.lr is not None else config.qat_lr if args.qat else config.lr,
        "warmup_steps": config.warmup_steps,
        "loss": config.loss,
        "eval_every": config.eval_every or "epoch end",
        "patience": config.patience or "none",
        "time budget": f"{config.time_budget_s:g} s" if config.time_budget_s > 0 else "none",
        "replay": replay,
    }
    if args.qat:
        settings["embedding"] = embedding_type
    return settings


def main(args: argparse.Namespace) -> int:
    preset = apply_settings(get_preset(args.preset), [f"distill.{s}" for s in args.settings])
    config = override(
        preset.distill,
        batch_size=args.batch_size,
        time_budget_s=args.time_budget,
        ckpt_every=args.ckpt_every,
        loss=args.loss,
        eval_every=args.eval_every,
        patience=args.patience,
        replay_weight=args.replay_weight,
        fsdp=True if args.fsdp else None,
    )
    embedding_type = args.embedding_type or preset.export.resolved_embedding_type()
    if int(os.environ.get("RANK", "0")) == 0:
        announce("distill --qat" if args.qat else "distill", args.preset, budget(config, args, embedding_type))
    manifest = run(
        args.drafter,
        args.reference,
        args.out,
        config,
        args.qat,
        args.clip_search,
        args.device,
        args.halt_after_steps,
        args.epochs,
        args.lr,
        args.replay_tokens,
        embedding_type,
    )
    if manifest is not None:
        metrics = manifest["metrics"]
        print(
            json.dumps(
                {
                    k: metrics[k]
                    for k in (
                        "best_dev_macro_tau",
                        "best_dev_tau",
                        "best_dev_top1",
                        "best_step",
                        "steps",
                        "train_tokens",
                        "train_seconds",
                    )
                }
            )
        )
    return 0
