"""Acceptance length τ by the validator's walk, computed exactly and fast in PyTorch; the n-gram peer; repetition.

The validator walks each held-out conversation (prompt P, the target's continuation C of length L): at position pos
it asks the drafter for k tokens after P + C[:pos], accepts the longest prefix that matches C[pos:], and moves
pos += accepted + 1 (capped at L). τ = Σ L / Σ steps over all conversations.

For a greedy drafter one teacher-forced forward over P + C gives every step at once: while the draft agrees with C,
the drafter's context is P + C[:j], so ``matches[j] = argmax(drafter(P + C)[len(P) + j - 1]) == C[j]`` and the
accepted count at pos is the run of consecutive matches from pos, capped at min(k, L - pos). (Exact up to numerical
ties between full-sequence and incremental decoding; tests/test_tau.py checks it against token-by-token drafting.)

Beside τ, a model's result carries its top-1 agreement: the share of continuation positions j where
``argmax(drafter(P + C)[len(P) + j - 1]) == C[j]`` — what greedy acceptance decides on, without the walk's
all-or-nothing windows, so it moves smoothly while a drafter trains. ``macro_tau`` is the mean of per-category τ
(each category counts once, however many tokens it has): what distillation selects its checkpoint by.

    from specdraft_train.modeling.tau import read_conversations, model_tau
    result = model_tau(model, read_conversations("runs/lab/reference/heldout.jsonl"), k=16, device=device)
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..config import EvalConfig
from .models import autocast_context, final_hidden_states, output_weight
from .packing import layout, packed_attention_within, to_device

HEAD_CHUNK_ROWS = 1024  # positions through the head at once: (1,024, 151,936) bf16 logits are 311 MB


@dataclass(frozen=True)
class Conversation:
    """One line of the validator's held-out JSONL."""

    id: str
    category: str
    prompt_tokens: list[int]
    continuation_tokens: list[int]


def read_conversations(path: str | Path) -> list[Conversation]:
    conversations = []
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            try:
                conversations.append(
                    Conversation(
                        str(row["id"]),
                        str(row.get("category", "all")),
                        [int(t) for t in row["prompt_tokens"]],
                        [int(t) for t in row["continuation_tokens"]],
                    )
                )
            except KeyError as missing:
                raise ValueError(f"{path}:{line_no}: missing field {missing}") from None
    return conversations


def conversation_json(c: Conversation) -> str:
    return json.dumps(
        {
            "id": c.id,
            "category": c.category,
            "prompt_tokens": c.prompt_tokens,
            "continuation_tokens": c.continuation_tokens,
        }
    )


def walk_accepted(matches: Sequence[bool], k: int) -> list[int]:
    """The accepted-prefix length of each step of the validator's walk over one continuation, given the drafter's
    per-position matches (a step at the continuation's end is capped there)."""
    length = len(matches)
    pos, accepted_by_step = 0, []
    while pos < length:
        cap = min(k, length - pos)
        accepted = 0
        while accepted < cap and matches[pos + accepted]:
            accepted += 1
        accepted_by_step.append(accepted)
        pos = min(pos + accepted + 1, length)
    return accepted_by_step


def walk_steps(matches: Sequence[bool], k: int) -> int:
    """Target steps the validator's walk takes over one continuation, given the drafter's per-position matches."""
    return len(walk_accepted(matches, k))


def accepted_length_histogram(
    conversations: Sequence[Conversation], matches: Sequence[Sequence[bool]], k: int
) -> dict[str, list[int]]:
    """Where walks stop: the number of walk steps whose accepted prefix had length 0, 1, …, k, over all conversations
    (``"all"``) and per category — the ``accepted_lengths`` field of a τ entry that the lab report renders."""
    histograms: dict[str, list[int]] = {"all": [0] * (k + 1)}
    for conversation, conversation_matches in zip(conversations, matches):
        by_category = histograms.setdefault(conversation.category, [0] * (k + 1))
        for accepted in walk_accepted(conversation_matches, k):
            histograms["all"][accepted] += 1
            by_category[accepted] += 1
    return histograms


@dataclass
class TauResult:
    tau: float
    tokens: int
    steps: int
    conversations: int
    by_category: dict[str, dict[str, float]]
    top1: float | None = None  # share of positions whose argmax is the target's token; None for the n-gram peer
    # where walks stop: steps by accepted-prefix length 0..k, "all" and per category (accepted_length_histogram)
    accepted_lengths: dict[str, list[int]] | None = None
    # τ of the same greedy matches walked at other draft lengths (model_tau's ``ks``): what a speed-up projection needs
    tau_by_k: dict[int, float] | None = None

    @property
    def macro_tau(self) -> float:
        """Mean over categories of the per-category τ: every category weighs the same, however many tokens it has.
        (Not the validator's τ-macro, which averages L ÷ steps over conversations.)"""
        return float(np.mean([c["tau"] for c in self.by_category.values()])) if self.by_category else self.tau

    def to_dict(self) -> dict[str, object]:
        return {
            "tau": self.tau,
            "macro_tau": self.macro_tau,
            "top1": self.top1,
            "tokens": self.tokens,
            "steps": self.steps,
            "conversations": self.conversations,
            "by_category": self.by_category,
            **({"accepted_lengths": self.accepted_lengths} if self.accepted_lengths is not None else {}),
            **({"tau_by_k": {str(k): t for k, t in self.tau_by_k.items()}} if self.tau_by_k is not None else {}),
        }

    def dev_entry(self) -> dict[str, Any]:
        """A dev evaluation as distill's history records it."""
        by_category = {name: {"tau": c["tau"], "top1": c.get("top1")} for name, c in self.by_category.items()}
        return {
            "dev_tau": self.tau,
            "dev_macro_tau": self.macro_tau,
            "dev_top1": self.top1,
            "dev_by_category": by_category,
        }


def gap_closed(tau: float, tau_base: float, tau_target: float) -> float | None:
    """(τ − τ_base) / (τ_target − τ_base): the share of the way from a base drafter to the target drafting for itself
    (0 = no better than the base, 1 = as good as the target); None when base and target do not differ."""
    return (tau - tau_base) / (tau_target - tau_base) if tau_target != tau_base else None


def category_order(name: str) -> list[tuple[int, int, str]]:
    """Sort key for category names: "/"-separated parts, numbers by value (code/open/64 before code/open/192)."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in name.split("/")]


def summarize(per_conversation: Iterable[tuple[Conversation, int, int | None]]) -> TauResult:
    """τ = Σ L / Σ steps and top-1 agreement = Σ agreed / Σ L, overall and per category.

    Each item is (conversation, walk steps, positions whose top-1 prediction was the target's token, or None where
    the drafter has no per-position prediction).
    """
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    tokens = steps = count = agreed_total = 0
    has_top1 = True
    for conversation, conversation_steps, agreed in per_conversation:
        length = len(conversation.continuation_tokens)
        tokens += length
        steps += conversation_steps
        count += 1
        has_top1 = has_top1 and agreed is not None
        agreed_total += agreed or 0
        bucket = totals[conversation.category]
        bucket[0] += length
        bucket[1] += conversation_steps
        bucket[2] += 1
        bucket[3] += agreed or 0
    by_category: dict[str, dict[str, float]] = {}
    for name, (t, s, n, a) in sorted(totals.items(), key=lambda item: category_order(item[0])):
        by_category[name] = {"tau": t / max(s, 1), "tokens": t, "steps": s, "conversations": n}
        if has_top1:
            by_category[name]["top1"] = a / max(t, 1)
    top1 = agreed_total / max(tokens, 1) if has_top1 else None
    return TauResult(tokens / max(steps, 1), tokens, steps, count, by_category, top1)


def token_batches(widths: Sequence[int], batch_tokens: int) -> list[list[int]]:
    """Indices of ``widths`` in batches of at most ``batch_tokens`` tokens (a wider one alone), the widest first: the
    first batch is the one that needs the most memory, so a budget too large fails at once, not at the end."""
    order = sorted(range(len(widths)), key=lambda i: -widths[i])
    batches: list[list[int]] = []
    tokens = 0
    for i in order:
        if not batches or tokens + widths[i] > batch_tokens:
            batches.append([])
            tokens = 0
        batches[-1].append(i)
        tokens += widths[i]
    return batches


@torch.no_grad()
def greedy_matches(
    model: nn.Module,
    conversations: Sequence[Conversation],
    device: torch.device,
    batch_tokens: int = EvalConfig.batch_tokens,
) -> list[np.ndarray]:
    """For each conversation, ``matches[j] = argmax(model(P + C)[len(P) + j - 1]) == C[j]`` as a bool array (L,).

    One teacher-forced forward per conversation, conversations packed into sequences of at most ``batch_tokens``
    tokens (packing.py: restarting positions, attention inside each conversation): no padding, whatever the lengths.
    """
    was_training = model.training
    model.eval()
    results: list[np.ndarray | None] = [None] * len(conversations)
    # The last continuation token is never an input (nothing after it is scored).
    sequences = [c.prompt_tokens + c.continuation_tokens[:-1] for c in conversations]
    with packed_attention_within(model), autocast_context(device):
        for batch in token_batches([len(s) for s in sequences], batch_tokens):
            inputs, starts = layout([sequences[i] for i in batch], packed=True)
            # The prediction for C[j] sits at p − 1 + j: only those positions go through the head (a long chat
            # prompt's positions would otherwise cost (T, V) logits for nothing), HEAD_CHUNK_ROWS at a time.
            index = np.concatenate(
                [
                    start
                    + len(conversations[i].prompt_tokens)
                    - 1
                    + np.arange(len(conversations[i].continuation_tokens))
                    for start, i in zip(starts, batch)
                ]
            )  # (N,)
            hidden = final_hidden_states(model, to_device(inputs, device)).flatten(0, 1)  # (T, H)
            weight = output_weight(model)  # (V, H)
            scored = hidden[torch.from_numpy(index).to(device)]  # (N, H)
            predicted = torch.cat(
                [
                    F.linear(scored[i : i + HEAD_CHUNK_ROWS], weight).argmax(dim=-1)
                    for i in range(0, len(scored), HEAD_CHUNK_ROWS)
                ]
            ).cpu()  # (N,)
            lengths = [len(conversations[i].continuation_tokens) for i in batch]
            for i, piece in zip(batch, predicted.split(lengths)):
                results[i] = piece.numpy() == np.asarray(conversations[i].continuation_tokens)
    model.train(was_training)
    return results  # type: ignore[return-value]


def model_tau(
    model: nn.Module,
    conversations: Sequence[Conversation],
    k: int,
    device: torch.device,
    batch_tokens: int = EvalConfig.batch_tokens,
    ks: Sequence[int] = (),
) -> TauResult:
    """τ at draft length ``k`` from one teacher-forced pass (exact for greedy drafting: NOTES), and at each of ``ks``
    from the same matches."""
    matches = greedy_matches(model, conversations, device, batch_tokens)
    result = summarize((c, walk_steps(m, k), int(m.sum())) for c, m in zip(conversations, matches))
    result.accepted_lengths = accepted_length_histogram(conversations, matches, k)
    if ks:
        tokens = sum(len(c.continuation_tokens) for c in conversations)
        result.tau_by_k = {n: tokens / max(sum(walk_steps(m, n) for m in matches), 1) for n in ks}
    return result


def ngram_walk_steps(prompt: Sequence[int], continuation: Sequence[int], k: int, n_max: int = 3) -> int:
    """Steps of the validator's walk with a prompt-lookup drafter.

    At each step the drafter takes the longest suffix n-gram (n = n_max … 1) of P + C[:pos] that occurred earlier in
    that context, and proposes the (up to k) tokens that followed its most recent earlier occurrence.
    """
    context = list(prompt)
    length = len(continuation)
    # last_start[n][ngram] = start of the most recent occurrence registered so far. An n-gram is registered once
    # a token follows it, so the suffix itself is never its own match.
    last_start: list[dict[tuple[int, ...], int]] = [dict() for _ in range(n_max + 1)]
    registered_end = 0  # n-grams ending before this index (exclusive) are registered

    def register_upto(end: int) -> None:
        nonlocal registered_end
        for stop in range(registered_end + 1, end + 1):  # n-grams ending at index stop - 1
            for n in range(1, n_max + 1):
                if stop - n >= 0:
                    last_start[n][tuple(context[stop - n : stop])] = stop - n
        registered_end = max(registered_end, end)

    pos, steps = 0, 0
    while pos < length:
        register_upto(len(context) - 1)
        draft: list[int] = []
        for n in range(min(n_max, len(context)), 0, -1):
            start = last_start[n].get(tuple(context[len(context) - n :]))
            if start is not None:
                draft = context[start + n : start + n + k]
                break
        cap = min(k, length - pos)
        accepted = 0
        while accepted < cap and accepted < len(draft) and draft[accepted] == continuation[pos + accepted]:
            accepted += 1
        new_pos = min(pos + accepted + 1, length)
        context.extend(continuation[pos:new_pos])
        pos = new_pos
        steps += 1
    return steps


def ngram_tau(conversations: Sequence[Conversation], k: int, n_max: int = 3) -> TauResult:
    return summarize(
        (c, ngram_walk_steps(c.prompt_tokens, c.continuation_tokens, k, n_max), None) for c in conversations
    )


def _repeated_ngrams(c: Conversation, n: int) -> tuple[int, int]:
    """(repeated, total) continuation n-grams (those ending inside C) of one conversation."""
    repeated = total = 0
    text = c.prompt_tokens + c.continuation_tokens
    seen: set[tuple[int, ...]] = set()
    for end in range(n, len(text) + 1):
        gram = tuple(text[end - n : end])
        if end - 1 >= len(c.prompt_tokens):
            total += 1
            repeated += gram in seen
        seen.add(gram)
    return repeated, total


def repeated_ngram_share(conversations: Sequence[Conversation], n: int = 4) -> float:
    """Share of continuation n-grams (those ending inside C) that already occurred earlier in P + C."""
    counts = [_repeated_ngrams(c, n) for c in conversations]
    return sum(r for r, _ in counts) / max(sum(t for _, t in counts), 1)


def repeated_ngram_share_by_category(conversations: Sequence[Conversation], n: int = 4) -> dict[str, float]:
    """:func:`repeated_ngram_share` of each category's conversations."""
    names = sorted({c.category for c in conversations}, key=category_order)
    return {name: repeated_ngram_share([c for c in conversations if c.category == name], n) for name in names}
